/*
 * split.c - sub-communicators (ftc_comm_split, ftc_comm_split_ranks) and
 * how they follow their parent.
 *
 * A split is collective over the parent: each rank that joins a child
 * opens a listener of its own, every rank's color, key and address go to
 * every rank in one allgather over the parent, and each child's members
 * connect to each other as a communicator of its own (ftc__comm_create_child:
 * its own connections, progress thread and recorder ring). A child's view
 * numbers its epoch with the parent's epoch it was derived from.
 *
 * Following the parent: a failure of either fails the other's epoch
 * (ftc__split_failed: a child's failure fails the parent's epoch, blaming
 * the same process, so the coordinator hears of it as of any failure; the
 * parent's failure revokes its children, quietly: their sockets stay open,
 * since every child's peers learn the failure through their own parent).
 * A parent that moved to a later epoch revokes its children at their next
 * collective (ftc__split_gate), until ftc_comm_recover re-derives
 * each from the parent's current view (ftc__split_next_view, recover.c).
 *
 * The links between parents and children are under split_lock, which is
 * taken before any comm->lock. A propagation fails its targets with the
 * lock released (a failure reports to the coordinator and logs), holding
 * off their destruction meanwhile (propagations, split_cv).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_time.h"

static pthread_mutex_t split_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t split_cv = PTHREAD_COND_INITIALIZER;
static int propagations;          /* under split_lock: propagations failing targets unlocked */
static __thread int propagating;  /* this thread is in one: failures it causes stop there */

/* One rank's part of a split, exchanged over the parent. */
typedef struct split_rec {
  int32_t color;      /* >= 0, FTC_SPLIT_NONE, or SPLIT_FAILED */
  int32_t key;
  uint64_t member_id;
  uint64_t list_hash; /* ftc_comm_split_ranks: the list's hash (every rank passes the same) */
  char addr[128];     /* the child listener's address */
} split_rec_t;

#define SPLIT_FAILED (-2) /* this rank could not open its listener */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

/* ---- making a child ---- */

static ftc_status_t split_common(ftc_comm_t *parent, const char *name, int color, int key,
                                 uint64_t list_hash, int timeout_ms, ftc_comm_t **child) {
  ftc_status_t st;
  int fd = -1;
  split_rec_t mine, *all = NULL;
  ftc__view_t *view = NULL;
  ftc__split_member_t *members = NULL;
  *child = NULL;
  if (!parent->be->listen)
    return ftc__error(FTC_ERR_NOT_SUPPORTED,
                      "%s: sub-communicators run on a backend with connections of its own (tcp); "
                      "this communicator runs on %s",
                      name, parent->be->name);
  const ftc__view_t *pv = parent->view;
  const int n = pv->size, me = pv->my_rank;
  memset(&mine, 0, sizeof(mine));
  mine.color = color;
  mine.key = key;
  mine.member_id = pv->my_member_id;
  mine.list_hash = list_hash;
  char listen_err[256] = "";
  if (color >= 0 &&
      parent->be->listen(parent->bs, parent->cfg.bind_host, parent->cfg.advertise_host, &fd,
                         mine.addr, sizeof(mine.addr)) != FTC_OK) {
    /* The others wait in the exchange: take part, saying so. */
    snprintf(listen_err, sizeof(listen_err), "%s", ftc_last_error());
    mine.color = SPLIT_FAILED;
    fd = -1;
  }
  all = ftc__calloc((size_t)n, sizeof(*all));
  if (!all) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "%s: the exchange of %d ranks", name, n);
    goto out;
  }
  if ((st = ftc_allgather(&mine, all, sizeof(mine), FTC_U8, parent, timeout_ms)) != FTC_OK) goto out;
  uint64_t seq = ++parent->tree.splits;
  for (int q = 0; q < n; q++) {
    if (all[q].list_hash != list_hash) {
      st = ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "%s: rank %d of the parent passed another list of ranks than rank %d; every "
                      "rank passes the same list",
                      name, q, me);
      goto out;
    }
    if (all[q].color == SPLIT_FAILED) {
      st = q == me ? ftc__error(FTC_ERR_SYSTEM, "%s: the child's listener: %s", name, listen_err)
                   : ftc__error(FTC_ERR_SYSTEM,
                                "%s: rank %d of the parent could not open its child's listener",
                                name, q);
      goto out;
    }
  }
  if (color < 0) goto out; /* in no child: FTC_OK, *child NULL */
  /* The child's members: the parent's ranks with this color, by key, then rank. */
  int *order = ftc__calloc((size_t)n, sizeof(*order));
  if (!order) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "%s: ordering the members", name);
    goto out;
  }
  int m = 0;
  for (int q = 0; q < n; q++) {
    if (all[q].color != color) continue;
    int i = m++;
    while (i > 0 && all[order[i - 1]].key > all[q].key) order[i] = order[i - 1], i--;
    order[i] = q;
  }
  view = ftc__calloc(1, sizeof(*view));
  members = ftc__calloc((size_t)m, sizeof(*members));
  if (view) view->members = ftc__calloc((size_t)m, sizeof(*view->members));
  if (!view || !members || !view->members) {
    ftc__free(order);
    st = ftc__error(FTC_ERR_NO_MEMORY, "%s: the child's view", name);
    goto out;
  }
  view->epoch = pv->epoch;
  view->size = m;
  view->my_member_id = pv->my_member_id;
  view->my_rank = -1;
  for (int i = 0; i < m; i++) {
    int q = order[i];
    ftc__view_member_t *vm = &view->members[i];
    vm->rank = i;
    vm->slot = pv->members[q].slot;
    vm->member_id = all[q].member_id;
    vm->joined_epoch = pv->members[q].joined_epoch;
    vm->state = pv->members[q].state;
    snprintf(vm->addr, sizeof(vm->addr), "%.*s", (int)sizeof(all[q].addr) - 1, all[q].addr);
    members[i].member_id = vm->member_id;
    memcpy(members[i].addr, vm->addr, sizeof(members[i].addr));
    if (q == me) view->my_rank = i;
  }
  ftc__free(order);
  /* The same id on every member of this child, another for each split. */
  uint64_t id = fnv(1469598103934665603ULL, parent->cfg.job ? parent->cfg.job : "",
                    parent->cfg.job ? strlen(parent->cfg.job) : 0);
  id = fnv(id, &seq, sizeof(seq));
  id = fnv(id, &color, sizeof(color));
  char label[64];
  snprintf(label, sizeof(label), "split%llu.%d", (unsigned long long)seq, color);
  ftc_comm_t *c = NULL;
  st = ftc__comm_create_child(parent, view, fd, id, label, &c);
  fd = -1; /* the child's, or closed */
  if (st != FTC_OK) goto out;
  c->tree.members = members, c->tree.nmembers = m;
  members = NULL;
  pthread_mutex_lock(&split_lock);
  c->tree.sibling = parent->tree.children;
  __atomic_store_n(&parent->tree.children, c, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&split_lock);
  /* A failure of the parent's epoch while the child was being made did
   * not reach it: revoke it now. */
  int pe = __atomic_load_n(&parent->error, __ATOMIC_ACQUIRE);
  if (pe) ftc__split_failed(parent, (ftc_status_t)pe, "the parent's epoch failed while it was split");
  FTC_INFO(FTC_SUB_COLL, "%s: sub-communicator %s of epoch %llu: rank %d of %d", name, label,
           (unsigned long long)view->epoch, view->my_rank, view->size);
  *child = c;

out:
  if (fd >= 0) close(fd);
  if (view) ftc__free(view->members);
  ftc__free(view);
  ftc__free(members);
  ftc__free(all);
  return st;
}

static ftc_status_t split_args(const char *name, ftc_comm_t *parent, int timeout_ms,
                               ftc_comm_t **child) {
  if (!child) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: child is NULL; pass &child", name);
  *child = NULL;
  if (!parent) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: parent is NULL", name);
  return ftc__check_timeout(name, timeout_ms);
}

ftc_status_t ftc_comm_split(ftc_comm_t *parent, int color, int key, int timeout_ms,
                            ftc_comm_t **child) {
  ftc_status_t st;
  if ((st = split_args("ftc_comm_split", parent, timeout_ms, child)) != FTC_OK) return st;
  if (color < 0 && color != FTC_SPLIT_NONE)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "ftc_comm_split: color %d; use a color >= 0, or FTC_SPLIT_NONE for no child",
                      color);
  return split_common(parent, "ftc_comm_split", color, key, 0, timeout_ms, child);
}

ftc_status_t ftc_comm_split_ranks(ftc_comm_t *parent, const int *ranks, int nranks, int timeout_ms,
                                  ftc_comm_t **child) {
  ftc_status_t st;
  const char *name = "ftc_comm_split_ranks";
  if ((st = split_args(name, parent, timeout_ms, child)) != FTC_OK) return st;
  int size = __atomic_load_n(&parent->size, __ATOMIC_ACQUIRE);
  int rank = __atomic_load_n(&parent->rank, __ATOMIC_ACQUIRE);
  if (nranks < 1 || nranks > size || !ranks)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "%s: %d ranks%s; pass 1 .. %d distinct ranks of the parent", name, nranks,
                      !ranks ? " at NULL" : "", size);
  int pos = -1;
  uint64_t h = 1469598103934665603ULL;
  for (int i = 0; i < nranks; i++) {
    if (ranks[i] < 0 || ranks[i] >= size)
      return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                        "%s: ranks[%d] = %d is out of range; the parent has ranks 0 .. %d", name, i,
                        ranks[i], size - 1);
    for (int j = 0; j < i; j++)
      if (ranks[j] == ranks[i])
        return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: rank %d is listed twice (ranks[%d], ranks[%d])",
                          name, ranks[i], j, i);
    if (ranks[i] == rank) pos = i;
    h = fnv(h, &ranks[i], sizeof(ranks[i]));
  }
  h |= 1; /* never 0: ftc_comm_split's */
  return split_common(parent, name, pos >= 0 ? 0 : FTC_SPLIT_NONE, pos, h, timeout_ms, child);
}

ftc_status_t ftc_comm_parent_rank(const ftc_comm_t *child, int rank, int *parent_rank) {
  if (!child || !parent_rank)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_parent_rank: child and parent_rank must not be NULL");
  const ftc_comm_t *p = __atomic_load_n(&child->tree.parent, __ATOMIC_ACQUIRE);
  if (!p)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "ftc_comm_parent_rank: not a sub-communicator (or its parent was destroyed)");
  const ftc__view_t *v = child->view;
  if (rank < 0 || rank >= v->size)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "ftc_comm_parent_rank: rank %d is out of range; the child has ranks 0 .. %d",
                      rank, v->size - 1);
  *parent_rank = -1;
  const ftc__view_t *pv = p->view; /* the application thread's, as the parent's calls */
  for (int q = 0; q < pv->size; q++)
    if (pv->members[q].member_id == v->members[rank].member_id) *parent_rank = q;
  return FTC_OK;
}

/* ---- following the parent ---- */

ftc_status_t ftc__split_gate(ftc_comm_t *comm) {
  ftc_comm_t *p = comm->tree.parent;
  if (!p) return FTC_OK;
  uint64_t pe = __atomic_load_n(&p->epoch, __ATOMIC_ACQUIRE);
  uint64_t mine = __atomic_load_n(&comm->tree.parent_epoch, __ATOMIC_ACQUIRE);
  if (pe == mine) return FTC_OK;
  return ftc__error(FTC_ERR_REVOKED,
                    "the parent communicator moved to epoch %llu; this sub-communicator follows "
                    "epoch %llu: call ftc_comm_recover on it",
                    (unsigned long long)pe, (unsigned long long)mine);
}

/* Stop comm's epoch without shutting its sockets (the first status stays):
 * its runs wake on the interrupt eventfd and see the status. */
static void revoke_quiet(ftc_comm_t *comm, ftc_status_t why, const char *detail) {
  int expected = 0;
  int first = __atomic_compare_exchange_n(&comm->error, &expected, (int)why, 0, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE);
  expected = 0;
  if (__atomic_compare_exchange_n(&comm->interrupt, &expected, (int)why, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    uint64_t one = 1;
    ssize_t w = write(comm->intr_fd, &one, sizeof(one));
    (void)w;
  }
  if (first)
    FTC_INFO(FTC_SUB_COLL, "sub-communicator epoch %llu revoked: %s",
             (unsigned long long)__atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE), detail);
}

/* The parent's rank of the process the child's failed run blames, -1 none. */
static int blame_in_parent(ftc_comm_t *child, ftc_comm_t *p) {
  uint64_t id = 0;
  pthread_mutex_lock(&child->lock);
  int peer = child->bh ? child->be->failed_peer(child->bh) : -1;
  if (peer >= 0 && child->view && peer < child->view->size) id = child->view->members[peer].member_id;
  pthread_mutex_unlock(&child->lock);
  int prank = -1;
  pthread_mutex_lock(&p->lock);
  for (int q = 0; id && p->view && q < p->view->size; q++)
    if (p->view->members[q].member_id == id) prank = q;
  if (prank >= 0 && p->bh && p->be->note_failed_peer && p->be->failed_peer(p->bh) < 0)
    p->be->note_failed_peer(p->bh, prank);
  pthread_mutex_unlock(&p->lock);
  return prank;
}

void ftc__split_failed(ftc_comm_t *comm, ftc_status_t why, const char *detail) {
  if (propagating) return;
  ftc_comm_t *one[16], **targets = one;
  int n = 0, cap = 16;
  ftc_comm_t *p = NULL;
  pthread_mutex_lock(&split_lock);
  /* A child's own failure (not a revoke, nor an abort) of the parent's
   * current epoch fails that epoch; a stale one (the parent has moved on)
   * is the child's alone. */
  if (comm->tree.parent && why != FTC_ERR_REVOKED && why != FTC_ERR_ABORTED &&
      __atomic_load_n(&comm->tree.parent->epoch, __ATOMIC_ACQUIRE) ==
          __atomic_load_n(&comm->tree.parent_epoch, __ATOMIC_ACQUIRE))
    p = comm->tree.parent;
  /* Every child of the failed parent (comm's, or its parent's siblings of comm). */
  for (ftc_comm_t *owner = p ? p : comm, *c = owner->tree.children; c; c = c->tree.sibling) {
    if (c == comm) continue;
    if (n == cap) {
      ftc_comm_t **more = ftc__malloc((size_t)cap * 2 * sizeof(*more));
      if (!more) break; /* out of memory: the rest see it at their next collective's gate */
      memcpy(more, targets, (size_t)n * sizeof(*more));
      if (targets != one) ftc__free(targets);
      targets = more, cap *= 2;
    }
    targets[n++] = c;
  }
  if (p || n) propagations++;
  pthread_mutex_unlock(&split_lock);
  if (!p && !n) return;
  propagating = 1;
  char why_text[320];
  if (p) {
    int prank = blame_in_parent(comm, p);
    snprintf(why_text, sizeof(why_text), "in a sub-communicator (its rank %d of %d%s): %s",
             __atomic_load_n(&comm->rank, __ATOMIC_ACQUIRE),
             __atomic_load_n(&comm->size, __ATOMIC_ACQUIRE),
             prank >= 0 ? ", blaming the same process" : "", detail ? detail : "");
    /* A peer's end (a crash) is seen by every peer for itself, as in the
     * parent's own runs (engine.c, quiet_rank_of): stop quietly. */
    ftc__comm_fail_quiet(p, why, why_text, why == FTC_ERR_PEER_LOST ? prank : -1);
  }
  snprintf(why_text, sizeof(why_text), "the parent's epoch failed (%s): %s", ftc_strerror(why),
           detail ? detail : "");
  for (int i = 0; i < n; i++) revoke_quiet(targets[i], FTC_ERR_REVOKED, why_text);
  propagating = 0;
  if (targets != one) ftc__free(targets);
  pthread_mutex_lock(&split_lock);
  if (--propagations == 0) pthread_cond_broadcast(&split_cv);
  pthread_mutex_unlock(&split_lock);
}

void ftc__split_unlink(ftc_comm_t *comm) {
  if (!__atomic_load_n(&comm->tree.parent, __ATOMIC_ACQUIRE) &&
      !__atomic_load_n(&comm->tree.children, __ATOMIC_ACQUIRE))
    return;
  pthread_mutex_lock(&split_lock);
  while (propagations) pthread_cond_wait(&split_cv, &split_lock);
  ftc_comm_t *p = comm->tree.parent;
  if (p) {
    ftc_comm_t **at = &p->tree.children;
    while (*at && *at != comm) at = &(*at)->tree.sibling;
    if (*at) __atomic_store_n(at, comm->tree.sibling, __ATOMIC_RELEASE);
    pthread_mutex_lock(&comm->lock);
    __atomic_store_n(&comm->tree.parent, NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&comm->lock);
  }
  for (ftc_comm_t *c = comm->tree.children, *next; c; c = next) {
    next = c->tree.sibling;
    pthread_mutex_lock(&c->lock);
    __atomic_store_n(&c->tree.parent, NULL, __ATOMIC_RELEASE);
    c->tree.sibling = NULL;
    pthread_mutex_unlock(&c->lock);
  }
  __atomic_store_n(&comm->tree.children, NULL, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&split_lock);
}

ftc_status_t ftc__split_next_view(ftc_comm_t *comm, ftc__view_t **out) {
  *out = NULL;
  pthread_mutex_lock(&split_lock);
  ftc_comm_t *p = comm->tree.parent;
  if (!p) {
    pthread_mutex_unlock(&split_lock);
    return ftc__error(FTC_ERR_NOT_SUPPORTED,
                      "ftc_comm_recover: this sub-communicator's parent was destroyed; nothing to "
                      "re-derive it from");
  }
  /* The parent's view is its application thread's, which is this one. */
  const ftc__view_t *pv = p->view;
  int perr = __atomic_load_n(&p->error, __ATOMIC_ACQUIRE);
  uint64_t pe = __atomic_load_n(&p->epoch, __ATOMIC_ACQUIRE);
  uint64_t mine = __atomic_load_n(&comm->tree.parent_epoch, __ATOMIC_ACQUIRE);
  int failed = __atomic_load_n(&comm->error, __ATOMIC_ACQUIRE) != 0;
  ftc_status_t st = FTC_OK;
  if (perr) {
    st = ftc__error(FTC_ERR_REVOKED,
                    "ftc_comm_recover: the parent's epoch %llu failed (%s); recover the parent "
                    "first, then this sub-communicator",
                    (unsigned long long)pe, ftc_strerror((ftc_status_t)perr));
    goto out;
  }
  if (pe == mine) {
    if (failed)
      st = ftc__error(FTC_ERR_REVOKED,
                      "ftc_comm_recover: this sub-communicator failed in the parent's epoch %llu, "
                      "which has not moved yet; recover the parent first",
                      (unsigned long long)pe);
    goto out; /* healthy: nothing to do */
  }
  ftc__view_t *v = ftc__calloc(1, sizeof(*v));
  if (v) v->members = ftc__calloc((size_t)comm->tree.nmembers, sizeof(*v->members));
  if (!v || !v->members) {
    if (v) ftc__free(v);
    st = ftc__error(FTC_ERR_NO_MEMORY, "ftc_comm_recover: the sub-communicator's next view");
    goto out;
  }
  v->epoch = pe;
  v->my_member_id = comm->view->my_member_id;
  v->my_rank = -1;
  for (int i = 0; i < comm->tree.nmembers; i++)
    for (int q = 0; q < pv->size; q++) {
      if (pv->members[q].member_id != comm->tree.members[i].member_id) continue;
      ftc__view_member_t *vm = &v->members[v->size];
      vm->rank = v->size;
      vm->slot = pv->members[q].slot;
      vm->member_id = pv->members[q].member_id;
      vm->joined_epoch = pv->members[q].joined_epoch;
      vm->state = pv->members[q].state;
      memcpy(vm->addr, comm->tree.members[i].addr, sizeof(vm->addr));
      if (vm->member_id == v->my_member_id) v->my_rank = v->size;
      v->size++;
    }
  if (v->my_rank < 0) {
    ftc__view_free(v);
    st = ftc__error(FTC_ERR_COORDINATOR,
                    "ftc_comm_recover: this process is not a member of the parent's epoch %llu",
                    (unsigned long long)pe);
    goto out;
  }
  *out = v;

out:
  pthread_mutex_unlock(&split_lock);
  return st;
}

void ftc__split_moved(ftc_comm_t *comm, uint64_t epoch) {
  __atomic_store_n(&comm->tree.parent_epoch, epoch, __ATOMIC_RELEASE);
}
