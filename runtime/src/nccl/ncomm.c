/*
 * ncomm.c - one NCCL communicator per membership epoch: nonblocking init,
 * collectives on a stream timed with CUDA events, bounded polling, and the
 * move to the next epoch by shrink, grow, or abort plus a fresh init, as
 * the loader chose for this library.
 *
 * Nothing here waits inside NCCL or CUDA: every wait is a poll of
 * ncclCommGetAsyncError and cudaEventQuery with a short nap, bounded by a
 * deadline. ncclCommAbort itself runs on a helper thread so that an abort
 * that does not return costs a leaked thread, not the caller.
 *
 * Lock: c->mu guards c->nc against ftc__nccl_comm_abort() from another
 * thread; it is never held across an NCCL call that can block.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_param.h"
#include "ftc_recorder.h"
#include "ftc_time.h"
#include "nccl/nccl_int.h"

struct ftc__nccl_comm {
  ftc__nccl_lib_t *lib;
  pthread_mutex_t mu;
  ncclComm_t nc;          /* NULL once aborted */
  ftc__view_t *view;      /* our copy of the current epoch's view */
  int rank, size;
  uint64_t epoch;
  int device, timeout_ms;
  cudaStream_t stream, own_stream;
  int error;              /* atomic ftc_status_t: what broke the epoch */
  const int *interrupt;   /* the owner's atomic status; nonzero stops waits (may be NULL) */
  const ftc__nccl_xchg_t *entering_x; /* while entering epoch `entering`: whether it was superseded */
  uint64_t entering;
  int revoked;
  int kept;               /* the last move failed before replacing nc: nc is unharmed */
  ncclComm_t tainted;     /* a grow this rank rooted from it was given up: the next move from it inits */
  void *scratch;          /* 16 device bytes for barriers */
  cudaEvent_t *pool;
  int npool, cap;
  ftc__nccl_step_t last_step;
  int64_t last_ns;
  struct stage_blk *stages; /* staging of small collectives on host memory */
  int check_args;           /* FTCOMM_CHECK_ARGS: descriptors compared before each collective */
  uint64_t checked;         /* collectives checked in this epoch (the descriptors' sequence) */
  char *args_host, *args_dev; /* pinned and device: this rank's descriptor, then every rank's */
  int args_cap;             /* ranks the args buffers hold */
};

/* Staging: slots of STAGE_BYTES in blocks of pinned host and device memory.
 * A slot whose work failed may still be written by the stream: it is
 * retired, never reused (freed with the communicator). */
#define STAGE_BYTES 64
#define STAGE_SLOTS 64
typedef struct stage_blk {
  char *host, *dev;
  uint64_t busy; /* bit per slot: in use or retired */
  struct stage_blk *next;
} stage_blk_t;

/* --- small helpers ------------------------------------------------------- */

static void nap(int *us) {
  struct timespec ts = {0, (long)*us * 1000};
  nanosleep(&ts, NULL);
  if (*us < 1000) *us = *us * 2 + 1;
}

static const char *last_error(ftc__nccl_lib_t *lib, ncclComm_t nc) {
  const char *s = lib->n.GetLastError ? lib->n.GetLastError(nc) : NULL;
  return s ? s : "";
}

static void fail(ftc__nccl_comm_t *c, ftc_status_t why) {
  int expect = FTC_OK;
  __atomic_compare_exchange_n(&c->error, &expect, (int)why, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
}

static ncclComm_t get_nc(ftc__nccl_comm_t *c) {
  pthread_mutex_lock(&c->mu);
  ncclComm_t nc = c->nc;
  pthread_mutex_unlock(&c->mu);
  return nc;
}

/* The owner's interrupt, FTC_OK when none. */
static ftc_status_t interrupted(const int *interrupt) {
  return interrupt ? (ftc_status_t)__atomic_load_n(interrupt, __ATOMIC_ACQUIRE) : FTC_OK;
}

/* Poll nc until its async state leaves ncclInProgress, the deadline passes
 * or the owner interrupts. */
static ftc_status_t poll_ready(ftc__nccl_lib_t *lib, ncclComm_t nc, int64_t deadline,
                               const char *what, int timeout_ms, const int *interrupt) {
  int us = 10;
  for (;;) {
    ftc_status_t in = interrupted(interrupt);
    if (in != FTC_OK) return ftc__error(in, "%s interrupted: %s", what, ftc_strerror(in));
    ncclResult_t a = ncclInProgress;
    ncclResult_t r = lib->n.CommGetAsyncError(nc, &a);
    if (r != ncclSuccess) return ftc__nccl_status(r, what, last_error(lib, nc));
    if (a == ncclSuccess) return FTC_OK;
    if (a != ncclInProgress) return ftc__nccl_status(a, what, last_error(lib, nc));
    if (ftc__now_ns() >= deadline)
      return ftc__error(FTC_ERR_TIMEOUT, "%s did not finish within %d ms (NCCL kept "
                        "answering in progress)", what, timeout_ms);
    nap(&us);
  }
}

/* ncclCommAbort on a helper thread, waited for up to timeout_ms. */
typedef struct abort_job {
  ftc__nccl_lib_t *lib;
  ncclComm_t nc;
  int refs, done;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} abort_job_t;

static void abort_job_put(abort_job_t *j) {
  if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) == 0) {
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    ftc__free(j);
  }
}

static void *abort_main(void *arg) {
  abort_job_t *j = arg;
  j->lib->n.CommAbort(j->nc);
  pthread_mutex_lock(&j->mu);
  j->done = 1;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
  abort_job_put(j);
  return NULL;
}

static ftc_status_t abort_nc(ftc__nccl_lib_t *lib, ncclComm_t nc, int timeout_ms) {
  if (!nc) return FTC_OK;
  abort_job_t *j = ftc__calloc(1, sizeof *j);
  if (!j) {
    lib->n.CommAbort(nc); /* no memory for the guard: abort on this thread */
    return FTC_OK;
  }
  j->lib = lib, j->nc = nc, j->refs = 2;
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &at, abort_main, j) != 0) {
    pthread_attr_destroy(&at);
    j->refs = 1;
    abort_job_put(j);
    lib->n.CommAbort(nc);
    return FTC_OK;
  }
  pthread_attr_destroy(&at);
  pthread_setname_np(t, "ftc-nccl-abort");
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t ns = ts.tv_nsec + (int64_t)(timeout_ms % 1000) * 1000000;
  ts.tv_sec += timeout_ms / 1000 + ns / 1000000000;
  ts.tv_nsec = ns % 1000000000;
  pthread_mutex_lock(&j->mu);
  while (!j->done)
    if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) != 0) break;
  int done = j->done;
  pthread_mutex_unlock(&j->mu);
  abort_job_put(j);
  if (!done) {
    FTC_ERROR(FTC_SUB_NCCL, "ncclCommAbort did not return within %d ms; leaving it on a "
              "helper thread", timeout_ms);
    return ftc__error(FTC_ERR_TIMEOUT, "ncclCommAbort did not return within %d ms",
                      timeout_ms);
  }
  return FTC_OK;
}

static ftc__view_t *view_copy(const ftc__view_t *v) {
  ftc__view_t *o = ftc__calloc(1, sizeof *o);
  if (!o) return NULL;
  *o = *v;
  o->members = NULL, o->backend_blob = NULL;
  if (v->size > 0) {
    o->members = ftc__calloc((size_t)v->size, sizeof *o->members);
    if (!o->members) goto out_free;
    memcpy(o->members, v->members, (size_t)v->size * sizeof *o->members);
  }
  if (v->backend_blob && !(o->backend_blob = ftc__strdup(v->backend_blob))) goto out_free;
  return o;
out_free:
  ftc__free(o->members);
  ftc__free(o);
  return NULL;
}

static void view_drop(ftc__view_t *v) {
  if (!v) return;
  ftc__free(v->members);
  ftc__free(v->backend_blob);
  ftc__free(v);
}

/* --- planning ------------------------------------------------------------ */

const char *ftc__nccl_step_name(ftc__nccl_step_t s) {
  static const char *names[] = {"none", "init", "shrink", "grow", "shrink+grow", "join"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

static int find_member(const ftc__view_t *v, uint64_t id) {
  for (int i = 0; i < v->size; i++)
    if (v->members[i].member_id == id) return i;
  return -1;
}

/* Whether member i of next comes without a communicator: the coordinator's
 * "fresh" bit (it never completed a step boundary, so it never had a working
 * communicator; the same answer on every rank, also for a joiner whose
 * admission epoch was superseded before it connected); without the bits,
 * admitted in next. */
static int is_joiner(const ftc__view_t *next, int i) {
  /* The bits count when all are given and someone holds state (an
   * application that never calls ftc_comm_step leaves everyone fresh). */
  int bits = 1, held = 0;
  for (int r = 0; r < next->size; r++) {
    if (next->members[r].state == FTC__STATE_UNKNOWN) bits = 0;
    held |= next->members[r].state == FTC__STATE_HELD;
  }
  if (bits && held) return next->members[i].state == FTC__STATE_FRESH;
  return next->members[i].joined_epoch >= next->epoch;
}

void ftc__nccl_plan(ftc__nccl_path_t path, const ftc__view_t *old, const ftc__view_t *next,
                    ftc__nccl_plan_t *p) {
  memset(p, 0, sizeof *p);
  p->publisher = -1;
  int first_survivor = -1, joiner_before_survivor = 0, mismatch = 0;
  for (int i = 0; i < next->size; i++) {
    /* Survivors must be exactly the members of the communicator being grown:
     * a member that finished a step boundary right after the coordinator
     * decided next is still fresh in next while holding a communicator. */
    if (old && is_joiner(next, i) == (find_member(old, next->members[i].member_id) >= 0))
      mismatch = 1;
    if (is_joiner(next, i)) {
      p->joiners++;
    } else {
      if (p->joiners) joiner_before_survivor = 1;
      if (first_survivor < 0) first_survivor = i;
      p->survivors++;
    }
  }
  if (old) {
    for (int i = 0; i < old->size; i++)
      if (find_member(next, old->members[i].member_id) < 0) {
        if (p->n_excluded >= 0 && p->n_excluded < 64)
          p->excluded[p->n_excluded++] = i;
        else
          p->n_excluded = -1;
      }
  }
  int init = 0;
  if (!old) {
    if (p->survivors == 0 || path != FTC__NCCL_PATH_SHRINK_GROW)
      init = 1;
    else
      p->step = FTC__NCCL_STEP_JOIN;
  } else if (p->n_excluded < 0 || mismatch) {
    init = 1;
  } else {
    int ex = p->n_excluded > 0, jo = p->joiners > 0;
    if (!ex && !jo) p->step = FTC__NCCL_STEP_NONE;
    else if (path == FTC__NCCL_PATH_REINIT) init = 1;
    else if (path == FTC__NCCL_PATH_SHRINK) init = jo, p->step = FTC__NCCL_STEP_SHRINK;
    else p->step = ex && jo ? FTC__NCCL_STEP_SHRINK_GROW : ex ? FTC__NCCL_STEP_SHRINK : FTC__NCCL_STEP_GROW;
  }
  if (init) {
    p->step = FTC__NCCL_STEP_INIT;
    /* On the grow path the fresh members join from the blob and never
     * publish: the first survivor does, the rank that would root a grow,
     * so that one rank decides the epoch's kind for all (the others follow
     * the blob). Elsewhere every rank inits and view rank 0 publishes. */
    p->publisher = next->size > 0 ? 0 : -1;
    if (old && path == FTC__NCCL_PATH_SHRINK_GROW && first_survivor >= 0)
      p->publisher = first_survivor;
    p->blob_kind = "init";
    p->n_excluded = p->n_excluded < 0 ? 0 : p->n_excluded;
    return;
  }
  if (p->step == FTC__NCCL_STEP_GROW || p->step == FTC__NCCL_STEP_SHRINK_GROW ||
      p->step == FTC__NCCL_STEP_JOIN) {
    p->publisher = first_survivor;
    p->blob_kind = "grow";
    p->reorder = joiner_before_survivor;
  }
}

/* --- communicator --------------------------------------------------------- */

static ncclConfig_t nonblocking_config(void) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  return cfg;
}

static ftc_status_t set_device(ftc__nccl_comm_t *c) {
  if (c->device < 0) return FTC_OK;
  cudaError_t e = c->lib->rt.SetDevice(c->device);
  if (e != cudaSuccess)
    return ftc__error(FTC_ERR_BACKEND, "cudaSetDevice(%d) failed: %s", c->device,
                      c->lib->rt.GetErrorString(e));
  return FTC_OK;
}

/* Wait for a communicator made by a nonblocking call; abort it on failure. */
static ftc_status_t settle(ftc__nccl_comm_t *c, ncclResult_t r, ncclComm_t nc, int64_t deadline,
                           const char *what) {
  ftc_status_t st;
  if (r != ncclSuccess && r != ncclInProgress) {
    st = ftc__nccl_status(r, what, nc ? last_error(c->lib, nc) : "");
    goto out_abort;
  }
  if (!nc) return ftc__error(FTC_ERR_BACKEND, "%s returned no communicator", what);
  const ftc__nccl_xchg_t *x = c->entering_x;
  for (;;) {
    /* Slices of 50 ms: between them, give up an epoch a newer one has
     * superseded (a joiner's first init runs before any watchdog could
     * interrupt it; its peers have moved on and will never join). */
    int64_t slice = x && x->latest ? ftc__now_ns() + 50 * 1000000LL : deadline;
    if (slice > deadline) slice = deadline;
    st = poll_ready(c->lib, nc, slice, what, c->timeout_ms, c->interrupt);
    if (st != FTC_ERR_TIMEOUT || slice >= deadline) break;
    uint64_t latest = x->latest(x->arg);
    if (latest > c->entering) {
      st = ftc__error(FTC_ERR_REVOKED, "%s: epoch %llu was superseded by epoch %llu; moving on to "
                      "the newer epoch", what, (unsigned long long)c->entering,
                      (unsigned long long)latest);
      break;
    }
  }
  if (st == FTC_OK) return FTC_OK;
out_abort:
  if (nc) abort_nc(c->lib, nc, c->timeout_ms);
  return st;
}

static ftc_status_t comm_alloc(ftc__nccl_lib_t *lib, const ftc__nccl_opts_t *o,
                               ftc__nccl_comm_t **out) {
  ftc_status_t st = FTC_OK;
  ftc__nccl_comm_t *c = ftc__calloc(1, sizeof *c);
  if (!c) return ftc__error(FTC_ERR_NO_MEMORY, "out of memory for an NCCL communicator");
  c->lib = lib;
  c->device = o ? o->device : -1;
  if (c->device == FTC__NCCL_DEVICE_CURRENT && lib->rt.GetDevice(&c->device) != cudaSuccess)
    c->device = -1;
  c->timeout_ms = o && o->timeout_ms > 0 ? o->timeout_ms : 60000;
  c->interrupt = o ? o->interrupt : NULL;
  int64_t check = 0;
  if (ftc__param_int(FTC_P_CHECK_ARGS, &check) != FTC_OK) {
    ftc__free(c);
    return ftc__error(FTC_ERR_CONFIG, "%s", ftc_last_error());
  }
  c->check_args = (int)check;
  pthread_mutex_init(&c->mu, NULL);
  FTC_CHECK_GOTO(set_device(c), st, out_free);
  if (o && o->stream) {
    c->stream = o->stream;
  } else {
    cudaError_t e = lib->rt.StreamCreateWithFlags(&c->own_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      st = ftc__error(FTC_ERR_BACKEND, "cudaStreamCreateWithFlags failed: %s",
                      lib->rt.GetErrorString(e));
      goto out_free;
    }
    c->stream = c->own_stream;
  }
  cudaError_t e = lib->rt.Malloc(&c->scratch, 16);
  if (e != cudaSuccess) {
    st = ftc__error(FTC_ERR_BACKEND, "cudaMalloc of 16 bytes failed: %s",
                    lib->rt.GetErrorString(e));
    goto out_stream;
  }
  *out = c;
  return FTC_OK;
out_stream:
  if (c->own_stream) lib->rt.StreamDestroy(c->own_stream);
out_free:
  pthread_mutex_destroy(&c->mu);
  ftc__free(c);
  return st;
}

/* The epoch's unique id. The publisher makes it (kind p->blob_kind, or
 * "init" when *kind says so) and publishes it; the others fetch it. On
 * return *kind is the kind to follow: a survivor that planned a grow
 * follows the publisher's init (its root gave up a grow from this parent:
 * see ftc__nccl_enter_epoch). */
static ftc_status_t get_uid(ftc__nccl_comm_t *c, const ftc__nccl_plan_t *p,
                            const ftc__view_t *next, const ftc__nccl_xchg_t *x,
                            int64_t deadline, ncclUniqueId *uid, const char **kind) {
  ftc_status_t st;
  char blob[FTC__NCCL_BLOB_MAX];
  if (next->my_rank == p->publisher) {
    ncclResult_t r;
    ncclComm_t nc = get_nc(c);
    int grow = !strcmp(*kind, "grow");
    r = grow ? c->lib->n.CommGetUniqueId(nc, uid) : c->lib->n.GetUniqueId(uid);
    if (r != ncclSuccess)
      return ftc__nccl_status(r, grow ? "ncclCommGetUniqueId" : "ncclGetUniqueId", "");
    if (ftc__nccl_blob_encode(*kind, (const uint8_t *)uid->internal, blob, sizeof blob) < 0)
      return ftc__error(FTC_ERR_INTERNAL, "NCCL unique id blob does not fit");
    return x->publish(x->arg, next->epoch, blob);
  }
  /* A survivor that does not publish passes no id to ncclCommGrow (the
   * root's reaches it through the parent, which does not say for which
   * epoch): it waits for this epoch's blob first, so that it never takes
   * the id of a newer epoch the root went on to while it still grows this
   * one (the fetch gives up once this epoch is replaced). */
  st = x->fetch(x->arg, next->epoch, blob, sizeof blob, deadline);
  if (st != FTC_OK) return st;
  if (!strcmp(*kind, "grow") && !strncmp(blob, "nccl-init:", 10)) *kind = "init";
  return ftc__nccl_blob_decode(blob, *kind, (uint8_t *)uid->internal);
}

/* Replace c->nc by nc (the old one is aborted: never destroyed). */
static void swap_nc(ftc__nccl_comm_t *c, ncclComm_t nc) {
  pthread_mutex_lock(&c->mu);
  ncclComm_t old = c->nc;
  c->nc = nc;
  pthread_mutex_unlock(&c->mu);
  if (old) abort_nc(c->lib, old, c->timeout_ms);
}

ftc_status_t ftc__nccl_comm_shrink(ftc__nccl_comm_t *c, const int *excluded, int n,
                                   int64_t deadline_ns) {
  ncclComm_t nc = get_nc(c), out = NULL;
  if (!nc) return ftc__error(FTC_ERR_ABORTED, "the NCCL communicator was aborted");
  if (n < 1 || n > 64)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "shrink: %d ranks to exclude (1 to 64)", n);
  /* ncclCommShrink sorts the list in place: it gets a copy, the caller's
   * list (a plan, a view's order) stays as it was. */
  int excl[64];
  memcpy(excl, excluded, (size_t)n * sizeof excl[0]);
  ncclConfig_t cfg = nonblocking_config();
  int flags = c->revoked ? NCCL_SHRINK_DEFAULT : NCCL_SHRINK_ABORT;
  ncclResult_t r = c->lib->n.CommShrink(nc, excl, n, &out, &cfg, flags);
  ftc_status_t st = settle(c, r, out, deadline_ns, "ncclCommShrink");
  if (st != FTC_OK) return st;
  swap_nc(c, out);
  return FTC_OK;
}

/* Take grown, the communicator a grow just made: in rank order (split by
 * key) when reorder, else as it is. Only then is the parent replaced: a
 * split that fails aborts grown and keeps the parent, so that every
 * survivor of a failed move (its grow or its split interrupted by a newer
 * epoch) retries from the same parent and plans the same move. */
static ftc_status_t take_grown(ftc__nccl_comm_t *c, ncclComm_t grown, int reorder, int key,
                               int64_t deadline) {
  ncclComm_t out = grown;
  if (reorder) {
    ncclConfig_t cfg = nonblocking_config();
    out = NULL;
    ncclResult_t r = c->lib->n.CommSplit(grown, 0, key, &out, &cfg);
    ftc_status_t st = settle(c, r, out, deadline, "ncclCommSplit (rank order after grow)");
    abort_nc(c->lib, grown, c->timeout_ms);
    if (st != FTC_OK) return st;
  }
  swap_nc(c, out);
  return FTC_OK;
}

ftc_status_t ftc__nccl_enter_epoch(ftc__nccl_lib_t *lib, ftc__nccl_comm_t **cp,
                                   const ftc__view_t *next, const ftc__nccl_xchg_t *x,
                                   const ftc__nccl_opts_t *opts) {
  ftc_status_t st = FTC_OK;
  ftc__nccl_comm_t *c = *cp;
  int created = 0;
  ncclComm_t parent = NULL; /* the communicator this move starts from */
  ncclComm_t rooted = NULL; /* the parent this rank rooted a grow from */
  if (next->my_rank < 0 || next->my_rank >= next->size)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "this process is not in epoch %llu",
                      (unsigned long long)next->epoch);
  if (c && next->epoch <= c->epoch)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "epoch %llu is not after the current %llu",
                      (unsigned long long)next->epoch, (unsigned long long)c->epoch);
  ftc__nccl_plan_t p;
  ftc__nccl_plan(lib->info.path, c ? c->view : NULL, next, &p);
  if (c && ((p.step == FTC__NCCL_STEP_NONE && ftc__nccl_comm_error(c) != FTC_OK) ||
            (p.step != FTC__NCCL_STEP_INIT && !get_nc(c)))) {
    /* Same members but a failed epoch, or nothing left to shrink or grow
     * (an earlier move failed and aborted it; it failed for every rank of
     * that collective move): make the communicator again. */
    p.step = FTC__NCCL_STEP_INIT;
    p.publisher = 0;
    p.blob_kind = "init";
  }
  if (!c && p.step == FTC__NCCL_STEP_JOIN && !is_joiner(next, next->my_rank))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "epoch %llu names this process a survivor "
                      "(joined at epoch %llu) but it has no communicator to grow",
                      (unsigned long long)next->epoch,
                      (unsigned long long)next->members[next->my_rank].joined_epoch);
  if (!c) {
    FTC_CHECK_GOTO(comm_alloc(lib, opts, &c), st, out);
    created = 1;
  } else if (opts) {
    c->interrupt = opts->interrupt;
    if (opts->timeout_ms > 0) c->timeout_ms = opts->timeout_ms;
  }
  ftc__view_t *nv = view_copy(next);
  if (!nv) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "out of memory copying epoch %llu",
                    (unsigned long long)next->epoch);
    goto out_fail;
  }
  int64_t t0 = ftc__now_ns();
  int64_t deadline = ftc__deadline_ns(c->timeout_ms);
  parent = created ? NULL : get_nc(c);
  c->entering_x = x, c->entering = next->epoch;
  FTC_CHECK_GOTO(set_device(c), st, out_view);
  FTC_DEBUG(FTC_SUB_NCCL, "epoch %llu: %s (excluded %d, joiners %d, publisher %d)",
            (unsigned long long)next->epoch, ftc__nccl_step_name(p.step), p.n_excluded,
            p.joiners, p.publisher);
  ncclUniqueId uid;
  memset(&uid, 0, sizeof uid);
  const char *kind = p.blob_kind; /* the blob's kind, which every rank follows */
  int uid_ready = 0;
  ncclConfig_t cfg = nonblocking_config();
  ncclComm_t out = NULL;
  ncclResult_t r;
  switch (p.step) {
  case FTC__NCCL_STEP_NONE:
    break;
  case FTC__NCCL_STEP_INIT:
  do_init:
    if (!created) swap_nc(c, NULL); /* after a failure: abort, never destroy */
    if (!uid_ready) FTC_CHECK_GOTO(get_uid(c, &p, next, x, deadline, &uid, &kind), st, out_view);
    r = lib->n.CommInitRankConfig(&out, next->size, uid, next->my_rank, &cfg);
    FTC_CHECK_GOTO(settle(c, r, out, deadline, "ncclCommInitRankConfig"), st, out_view);
    swap_nc(c, out);
    break;
  case FTC__NCCL_STEP_SHRINK:
  case FTC__NCCL_STEP_SHRINK_GROW:
  case FTC__NCCL_STEP_GROW:
    if (p.step != FTC__NCCL_STEP_GROW) FTC_CHECK_GOTO(ftc__nccl_comm_shrink(c, p.excluded, p.n_excluded, deadline), st,
                                                  out_view);
    if (p.step == FTC__NCCL_STEP_SHRINK) break;
    /* A root that gave up a grow from this parent (its epoch superseded)
     * had already sent that grow's id through the parent: a survivor that
     * never grew that epoch would take it for this one's and never meet
     * the others. Its peers may also have completed that grow (and its
     * reorder split) without it. So it publishes an init instead, and
     * every rank follows the blob's kind. */
    if (next->my_rank == p.publisher && c->tainted && c->tainted == get_nc(c)) {
      FTC_INFO(FTC_SUB_NCCL, "epoch %llu: a full init instead of a grow (this rank gave up a grow "
               "from the same communicator)", (unsigned long long)next->epoch);
      kind = "init";
    }
    FTC_CHECK_GOTO(get_uid(c, &p, next, x, deadline, &uid, &kind), st, out_view);
    if (!strcmp(kind, "init")) {
      p.step = FTC__NCCL_STEP_INIT;
      uid_ready = 1;
      goto do_init;
    }
    if (next->my_rank == p.publisher) rooted = get_nc(c);
    r = lib->n.CommGrow(get_nc(c), next->size, next->my_rank == p.publisher ? &uid : NULL, -1,
                        &out, &cfg);
    FTC_CHECK_GOTO(settle(c, r, out, deadline, "ncclCommGrow"), st, out_view);
    FTC_CHECK_GOTO(take_grown(c, out, p.reorder, next->my_rank, deadline), st, out_view);
    break;
  case FTC__NCCL_STEP_JOIN: {
    /* The blob's kind decides: the survivors re-init when they could not grow. */
    char blob[FTC__NCCL_BLOB_MAX];
    FTC_CHECK_GOTO(x->fetch(x->arg, next->epoch, blob, sizeof blob, deadline), st, out_view);
    if (!strncmp(blob, "nccl-init:", 10)) {
      FTC_CHECK_GOTO(ftc__nccl_blob_decode(blob, "init", (uint8_t *)uid.internal), st, out_view);
      p.step = FTC__NCCL_STEP_INIT;
      r = lib->n.CommInitRankConfig(&out, next->size, uid, next->my_rank, &cfg);
      FTC_CHECK_GOTO(settle(c, r, out, deadline, "ncclCommInitRankConfig"), st, out_view);
      swap_nc(c, out);
      break;
    }
    FTC_CHECK_GOTO(ftc__nccl_blob_decode(blob, "grow", (uint8_t *)uid.internal), st, out_view);
    int nrank = p.survivors;
    for (int i = 0; i < next->my_rank; i++)
      if (is_joiner(next, i)) nrank++;
    r = lib->n.CommGrow(NULL, next->size, &uid, nrank, &out, &cfg);
    FTC_CHECK_GOTO(settle(c, r, out, deadline, "ncclCommGrow (joining)"), st, out_view);
    FTC_CHECK_GOTO(take_grown(c, out, p.reorder, next->my_rank, deadline), st, out_view);
    break;
  }
  }
  c->entering_x = NULL;
  view_drop(c->view);
  c->view = nv;
  c->rank = next->my_rank;
  c->size = next->size;
  __atomic_store_n(&c->epoch, next->epoch, __ATOMIC_RELEASE);
  __atomic_store_n(&c->error, FTC_OK, __ATOMIC_RELEASE);
  c->revoked = 0;
  c->kept = 0;
  c->tainted = NULL;
  c->checked = 0;
  c->last_step = p.step;
  c->last_ns = ftc__now_ns() - t0;
  FTC_INFO(FTC_SUB_NCCL, "epoch %llu: rank %d of %d by %s in %.1f ms",
           (unsigned long long)next->epoch, c->rank, c->size, ftc__nccl_step_name(p.step),
           (double)c->last_ns / 1e6);
  *cp = c;
  return FTC_OK;

out_view:
  view_drop(nv);
out_fail:
  if (created) {
    ftc__nccl_comm_free(c);
    goto out;
  }
  c->entering_x = NULL;
  fail(c, st);
  /* A move that failed before replacing the communicator (a shrink or grow
   * interrupted by a newer epoch, a timeout) keeps it: every rank retries
   * from the same parent and the same last view, so all plan alike. One
   * that failed after replacing it leaves nothing consistent: abort, and
   * the next move re-inits. */
  if (!parent || get_nc(c) != parent) {
    swap_nc(c, NULL);
  } else {
    c->kept = 1;
    if (rooted == parent) c->tainted = parent;
  }
out:
  return st;
}

void ftc__nccl_comm_last_step(const ftc__nccl_comm_t *c, ftc__nccl_step_t *step, int64_t *ns) {
  if (step) *step = c->last_step;
  if (ns) *ns = c->last_ns;
}

int ftc__nccl_comm_rank(const ftc__nccl_comm_t *c) { return c->rank; }

ftc_status_t ftc__nccl_comm_nccl_rank(ftc__nccl_comm_t *c, int *rank, int *size) {
  ncclComm_t nc = get_nc(c);
  if (!nc) return ftc__error(FTC_ERR_ABORTED, "the NCCL communicator was aborted");
  ncclResult_t r = c->lib->n.CommUserRank(nc, rank);
  if (r == ncclSuccess) r = c->lib->n.CommCount(nc, size);
  return r == ncclSuccess ? FTC_OK : ftc__nccl_status(r, "ncclCommUserRank/Count", "");
}
int ftc__nccl_comm_size(const ftc__nccl_comm_t *c) { return c->size; }
uint64_t ftc__nccl_comm_epoch(const ftc__nccl_comm_t *c) {
  return __atomic_load_n(&c->epoch, __ATOMIC_ACQUIRE);
}
ftc_status_t ftc__nccl_comm_error(const ftc__nccl_comm_t *c) {
  return (ftc_status_t)__atomic_load_n(&c->error, __ATOMIC_ACQUIRE);
}

/* --- collectives ----------------------------------------------------------- */

static const ncclDataType_t dtypes[FTC_DTYPE_COUNT] = {
    [FTC_F32] = ncclFloat32, [FTC_F64] = ncclFloat64, [FTC_F16] = ncclFloat16,
    [FTC_BF16] = ncclBfloat16, [FTC_I32] = ncclInt32, [FTC_I64] = ncclInt64,
    [FTC_U8] = ncclUint8};
static const ncclRedOp_t redops[FTC_OP_COUNT] = {
    [FTC_SUM] = ncclSum, [FTC_PROD] = ncclProd, [FTC_MIN] = ncclMin, [FTC_MAX] = ncclMax,
    [FTC_AVG] = ncclAvg};

/* Local copies, so that the backend links with common/ alone (tests). */
static const size_t dsize[FTC_DTYPE_COUNT] = {[FTC_F32] = 4, [FTC_F64] = 8, [FTC_F16] = 2,
                                              [FTC_BF16] = 2, [FTC_I32] = 4, [FTC_I64] = 8,
                                              [FTC_U8] = 1};
static const char *coll_name(ftc__coll_t c) {
  static const char *n[FTC__COLL_COUNT] = {"allreduce", "broadcast", "reduce", "allgather",
                                           "reduce_scatter", "alltoall", "barrier", "send",
                                           "recv", "allgatherv", "alltoallv", "gather",
                                           "scatter"};
  return (unsigned)c < FTC__COLL_COUNT ? n[c] : "?";
}

static const char *dtype_name(unsigned t) {
  static const char *n[FTC_DTYPE_COUNT] = {[FTC_F32] = "f32", [FTC_F64] = "f64", [FTC_F16] = "f16",
                                           [FTC_BF16] = "bf16", [FTC_I32] = "i32", [FTC_I64] = "i64",
                                           [FTC_U8] = "u8"};
  return t < FTC_DTYPE_COUNT && n[t] ? n[t] : "?";
}
static const char *op_name(unsigned o) {
  static const char *n[FTC_OP_COUNT] = {[FTC_SUM] = "sum", [FTC_PROD] = "prod", [FTC_MIN] = "min",
                                        [FTC_MAX] = "max", [FTC_AVG] = "avg"};
  return o < FTC_OP_COUNT && n[o] ? n[o] : "?";
}

/* 1 when p is host memory a GPU cannot read (neither device nor pinned). */
static int host_memory(ftc__nccl_comm_t *c, const void *p) {
  if (c->lib->info.rccl) {
    struct ftc__hip_pointer_attr h;
    memset(&h, 0, sizeof h);
    cudaError_t e = c->lib->rt.HipPointerGetAttributes(&h, p);
    if (e != cudaSuccess) {
      c->lib->rt.GetLastError(); /* ROCm 5 answers invalid value for it */
      return e == cudaErrorInvalidValue;
    }
    /* ROCm 5 numbered host memory (pinned, as it answered) 0 */
    return c->lib->rt.hip_version >= FTC__HIP_VERSION_6 && h.type == FTC__HIP_MEMORY_UNREGISTERED;
  }
  struct cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  cudaError_t e = c->lib->rt.PointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    c->lib->rt.GetLastError(); /* CUDA < 11 answers invalid value for it */
    return e == cudaErrorInvalidValue;
  }
  return a.type == cudaMemoryTypeUnregistered;
}

/* Bytes to stage for ops (one small allreduce, broadcast or reduce on host
 * memory), 0 for none. */
static size_t stage_bytes(ftc__nccl_comm_t *c, const ftc__op_t *const *ops, int n) {
  if (n != 1 || !c->lib->rt.can_stage) return 0;
  const ftc__op_t *op = ops[0];
  if (op->coll != FTC__COLL_ALLREDUCE && op->coll != FTC__COLL_BROADCAST && op->coll != FTC__COLL_REDUCE)
    return 0;
  size_t b = op->count * dsize[op->dtype];
  if (b == 0 || b > STAGE_BYTES) return 0;
  if ((op->sendbuf && host_memory(c, op->sendbuf)) || (op->recvbuf && host_memory(c, op->recvbuf)))
    return b;
  return 0;
}

static ftc_status_t stage_get(ftc__nccl_comm_t *c, char **host, char **dev) {
  stage_blk_t *b = c->stages;
  while (b && b->busy == ~0ULL) b = b->next;
  if (!b) {
    b = ftc__calloc(1, sizeof *b);
    if (!b) return ftc__error(FTC_ERR_NO_MEMORY, "out of memory for a staging block");
    cudaError_t e = c->lib->rt.HostAlloc((void **)&b->host, STAGE_SLOTS * STAGE_BYTES, 0);
    if (e == cudaSuccess) e = c->lib->rt.Malloc((void **)&b->dev, STAGE_SLOTS * STAGE_BYTES);
    if (e != cudaSuccess) {
      if (b->host) c->lib->rt.FreeHost(b->host);
      ftc__free(b);
      return ftc__error(FTC_ERR_BACKEND, "staging memory for a collective on host memory: %s",
                        c->lib->rt.GetErrorString(e));
    }
    b->next = c->stages, c->stages = b;
  }
  int i = __builtin_ctzll(~b->busy);
  b->busy |= 1ULL << i;
  *host = b->host + (size_t)i * STAGE_BYTES;
  *dev = b->dev + (size_t)i * STAGE_BYTES;
  return FTC_OK;
}

static void stage_put(ftc__nccl_comm_t *c, void *host, int retire) {
  for (stage_blk_t *b = c->stages; b && host; b = b->next)
    if ((char *)host >= b->host && (char *)host < b->host + STAGE_SLOTS * STAGE_BYTES) {
      if (!retire) b->busy &= ~(1ULL << (((char *)host - b->host) / STAGE_BYTES));
      return;
    }
}

static void stages_free(ftc__nccl_comm_t *c) {
  while (c->stages) {
    stage_blk_t *b = c->stages;
    c->stages = b->next;
    c->lib->rt.FreeHost(b->host);
    c->lib->rt.Free(b->dev);
    ftc__free(b);
  }
}

static ftc_status_t gate(ftc__nccl_comm_t *c) {
  ftc_status_t e = ftc__nccl_comm_error(c);
  if (e == FTC_ERR_ABORTED || !get_nc(c))
    return ftc__error(FTC_ERR_ABORTED, "the NCCL communicator was aborted");
  if (e != FTC_OK)
    return ftc__error(FTC_ERR_REVOKED, "epoch %llu failed (%s); move to the next epoch first",
                      (unsigned long long)ftc__nccl_comm_epoch(c), ftc_strerror(e));
  return FTC_OK;
}

static ftc_status_t event_get(ftc__nccl_comm_t *c, cudaEvent_t *ev) {
  if (c->npool > 0) {
    *ev = c->pool[--c->npool];
    return FTC_OK;
  }
  cudaError_t e = c->lib->rt.EventCreateWithFlags(ev, cudaEventDefault);
  if (e != cudaSuccess)
    return ftc__error(FTC_ERR_BACKEND, "cudaEventCreate failed: %s",
                      c->lib->rt.GetErrorString(e));
  return FTC_OK;
}

static void event_put(ftc__nccl_comm_t *c, cudaEvent_t ev) {
  if (!ev) return;
  if (c->npool == c->cap) {
    int cap = c->cap ? c->cap * 2 : 16;
    cudaEvent_t *np = ftc__realloc(c->pool, (size_t)cap * sizeof *np);
    if (!np) {
      c->lib->rt.EventDestroy(ev);
      return;
    }
    c->pool = np, c->cap = cap;
  }
  c->pool[c->npool++] = ev;
}

void ftc__nccl_work_release(ftc__nccl_comm_t *c, ftc__nccl_work_t *w) {
  event_put(c, (cudaEvent_t)w->ev_start);
  event_put(c, (cudaEvent_t)w->ev_end);
  stage_put(c, w->stage, 0);
  w->ev_start = w->ev_end = NULL;
  w->stage = NULL;
}

void ftc__nccl_work_discard(ftc__nccl_comm_t *c, ftc__nccl_work_t *w) {
  /* cudaEventDestroy of an event the stream has not reached yet is fine:
   * CUDA releases it once reached. */
  if (w->ev_start) c->lib->rt.EventDestroy((cudaEvent_t)w->ev_start);
  if (w->ev_end) c->lib->rt.EventDestroy((cudaEvent_t)w->ev_end);
  stage_put(c, w->stage, 1);
  w->ev_start = w->ev_end = NULL;
  w->stage = NULL;
}

/* allgatherv, alltoallv, gather and scatter as one group of sends and
 * receives (NCCL has no call of its own for them). Blocks of 0 elements
 * are left out; so is the copy of a rank's block to itself when it is
 * already in place. */
static ncclResult_t enqueue_p2p_coll(ftc__nccl_comm_t *c, ncclComm_t nc, const ftc__op_t *op,
                                     cudaStream_t s) {
  const ftc__nccl_fns_t *n = &c->lib->n;
  ncclDataType_t dt = dtypes[op->dtype];
  size_t es = dsize[op->dtype];
  const char *sb = op->sendbuf;
  char *rb = op->recvbuf;
  const int me = c->rank, root = op->peer;
  if ((op->coll == FTC__COLL_ALLGATHERV || op->coll == FTC__COLL_ALLTOALLV) && op->nranks != c->size)
    return ncclInvalidArgument;
  ncclResult_t r = n->GroupStart(), r2;
  if (r != ncclSuccess) return r;
#define OK_(x) ((x) == ncclSuccess || (x) == ncclInProgress)
  for (int j = 0; j < c->size && OK_(r); j++) {
    const char *sp = NULL;
    char *rp = NULL;
    size_t sc = 0, rc = 0;
    switch (op->coll) {
    case FTC__COLL_ALLGATHERV:
      sc = op->rcounts[me], sp = sb;
      rc = op->rcounts[j], rp = rb + ftc__op_displ(op->rcounts, op->rdispls, j) * es;
      break;
    case FTC__COLL_ALLTOALLV:
      sc = op->scounts[j], sp = sb + ftc__op_displ(op->scounts, op->sdispls, j) * es;
      rc = op->rcounts[j], rp = rb + ftc__op_displ(op->rcounts, op->rdispls, j) * es;
      break;
    case FTC__COLL_GATHER:
      if (j == root) sc = op->count, sp = sb;
      if (me == root) rc = op->count, rp = rb + (size_t)j * op->count * es;
      break;
    default: /* scatter */
      if (me == root) sc = op->count, sp = sb + (size_t)j * op->count * es;
      if (j == root) rc = op->count, rp = rb;
      break;
    }
    if (j == me && sc == rc && sp == rp) continue; /* in place */
    if (sc) r = n->Send(sp, sc, dt, j, nc, s);
    if (rc && OK_(r)) r = n->Recv(rp, rc, dt, j, nc, s);
  }
#undef OK_
  r2 = n->GroupEnd();
  return r != ncclSuccess && r != ncclInProgress ? r : r2;
}

static ncclResult_t enqueue(ftc__nccl_comm_t *c, ncclComm_t nc, const ftc__op_t *op,
                            cudaStream_t s) {
  const ftc__nccl_fns_t *n = &c->lib->n;
  ncclDataType_t dt = dtypes[op->dtype];
  ncclRedOp_t ro = redops[op->op];
  size_t es = dsize[op->dtype];
  switch (op->coll) {
  case FTC__COLL_ALLREDUCE: return n->AllReduce(op->sendbuf, op->recvbuf, op->count, dt, ro, nc, s);
  case FTC__COLL_BROADCAST:
    return n->Broadcast(op->sendbuf, op->recvbuf, op->count, dt, op->peer, nc, s);
  case FTC__COLL_REDUCE:
    return n->Reduce(op->sendbuf, op->recvbuf, op->count, dt, ro, op->peer, nc, s);
  case FTC__COLL_ALLGATHER: return n->AllGather(op->sendbuf, op->recvbuf, op->count, dt, nc, s);
  case FTC__COLL_REDUCE_SCATTER:
    return n->ReduceScatter(op->sendbuf, op->recvbuf, op->count, dt, ro, nc, s);
  case FTC__COLL_BARRIER:
    return n->AllReduce(c->scratch, c->scratch, 1, ncclUint8, ncclMax, nc, s);
  case FTC__COLL_SEND: return n->Send(op->sendbuf, op->count, dt, op->peer, nc, s);
  case FTC__COLL_RECV: return n->Recv(op->recvbuf, op->count, dt, op->peer, nc, s);
  case FTC__COLL_ALLTOALL: {
    ncclResult_t r = n->GroupStart(), r2;
    if (r != ncclSuccess) return r;
    for (int j = 0; j < c->size && (r == ncclSuccess || r == ncclInProgress); j++) {
      size_t off = (size_t)j * op->count * es;
      r = n->Send((const char *)op->sendbuf + off, op->count, dt, j, nc, s);
      if (r == ncclSuccess || r == ncclInProgress)
        r = n->Recv((char *)op->recvbuf + off, op->count, dt, j, nc, s);
    }
    r2 = n->GroupEnd();
    return r != ncclSuccess && r != ncclInProgress ? r : r2;
  }
  case FTC__COLL_ALLGATHERV:
  case FTC__COLL_ALLTOALLV:
  case FTC__COLL_GATHER:
  case FTC__COLL_SCATTER: return enqueue_p2p_coll(c, nc, op, s);
  default: return ncclInvalidArgument;
  }
}

/* Record a state change of w once (bit 1 started, 2 ended). */
static void rec_note(ftc__nccl_work_t *w, int bit, ftc_rec_state_t state, int64_t t) {
  if (!w->rec || w->rec_id == FTC_REC_NO_ID) return;
  if (__atomic_fetch_or(&w->recorded, bit, __ATOMIC_ACQ_REL) & bit) return;
  if (state == FTC_REC_STARTED) ftc_rec_started(w->rec, w->rec_id, t);
  else if (state == FTC_REC_COMPLETED) ftc_rec_completed(w->rec, w->rec_id, t);
  else ftc_rec_failed(w->rec, w->rec_id, t);
}

/* ops[0..n-1] as one NCCL group when n > 1 (send/recv only). */
static ncclResult_t enqueue_all(ftc__nccl_comm_t *c, ncclComm_t nc, const ftc__op_t *const *ops,
                                int n, cudaStream_t s) {
  if (n == 1) return enqueue(c, nc, ops[0], s);
  ncclResult_t r = c->lib->n.GroupStart(), r2;
  if (r != ncclSuccess) return r;
  for (int i = 0; i < n && (r == ncclSuccess || r == ncclInProgress); i++)
    r = enqueue(c, nc, ops[i], s);
  r2 = c->lib->n.GroupEnd();
  return r != ncclSuccess && r != ncclInProgress ? r : r2;
}

/* FTCOMM_CHECK_ARGS: a collective's descriptor, 4 little words: kind,
 * dtype, op and root (+1, 0: none) in the first; count; the sequence of
 * checked collectives in this epoch; a tag. */
#define ARGS_DESC 32
#define ARGS_TAG 0x66746361726773ULL /* "ftcargs" */

static void args_desc(const ftc__nccl_comm_t *c, const ftc__op_t *op, uint64_t d[4]) {
  int rooted = op->coll == FTC__COLL_BROADCAST || op->coll == FTC__COLL_REDUCE || op->coll == FTC__COLL_GATHER ||
               op->coll == FTC__COLL_SCATTER;
  int reduces = op->coll == FTC__COLL_ALLREDUCE || op->coll == FTC__COLL_REDUCE ||
                op->coll == FTC__COLL_REDUCE_SCATTER;
  d[0] = (uint64_t)op->coll | (uint64_t)op->dtype << 8 | (uint64_t)(reduces ? op->op : 0) << 16 |
         (uint64_t)(rooted ? op->peer + 1 : 0) << 32;
  /* alltoallv's count is this rank's sum of send counts, which differ by right */
  d[1] = op->coll == FTC__COLL_ALLTOALLV ? 0 : op->count, d[2] = c->checked, d[3] = ARGS_TAG;
}

static void args_text(const uint64_t d[4], char *buf, size_t len) {
  ftc__coll_t coll = (ftc__coll_t)(d[0] & 0xff);
  int root = (int)(d[0] >> 32) - 1, op = (int)((d[0] >> 16) & 0xff);
  char rootb[24] = "", opb[24] = "";
  if (root >= 0) snprintf(rootb, sizeof rootb, " root %d", root);
  if (coll == FTC__COLL_ALLREDUCE || coll == FTC__COLL_REDUCE || coll == FTC__COLL_REDUCE_SCATTER)
    snprintf(opb, sizeof opb, " %s", op_name((unsigned)op));
  snprintf(buf, len, "called %s #%llu%s%s x%llu %s", coll_name(coll), (unsigned long long)d[2] + 1, rootb, opb,
           (unsigned long long)d[1], dtype_name((unsigned)((d[0] >> 8) & 0xff)));
}

/* Compare op's descriptor with every rank's before it is enqueued: one
 * allgather of ARGS_DESC bytes per rank on stream s, copied back and waited
 * for. All ranks see the same descriptors and so reach the same verdict: on
 * a difference each fails the epoch with FTC_ERR_MISMATCH naming the first
 * rank that differs from rank 0, and nobody enqueues the collective that
 * would hang or read the wrong bytes. */
static ftc_status_t check_args(ftc__nccl_comm_t *c, ncclComm_t nc, const ftc__op_t *op, cudaStream_t s) {
  int n = c->size;
  if (n > c->args_cap) {
    if (c->args_host) c->lib->rt.FreeHost(c->args_host), c->args_host = NULL;
    if (c->args_dev) c->lib->rt.Free(c->args_dev), c->args_dev = NULL;
    c->args_cap = 0;
    size_t bytes = (size_t)(n + 1) * ARGS_DESC;
    cudaError_t e = c->lib->rt.HostAlloc((void **)&c->args_host, bytes, 0);
    if (e == cudaSuccess) e = c->lib->rt.Malloc((void **)&c->args_dev, bytes);
    if (e != cudaSuccess)
      return ftc__error(FTC_ERR_BACKEND, "FTCOMM_CHECK_ARGS: memory for %d descriptors: %s", n,
                        c->lib->rt.GetErrorString(e));
    c->args_cap = n;
  }
  uint64_t mine[4];
  args_desc(c, op, mine);
  memcpy(c->args_host, mine, ARGS_DESC);
  cudaEvent_t done = NULL;
  ftc_status_t st = event_get(c, &done);
  if (st != FTC_OK) return st;
  cudaError_t e = c->lib->rt.MemcpyAsync(c->args_dev, c->args_host, ARGS_DESC, cudaMemcpyHostToDevice, s);
  if (e != cudaSuccess) goto cuda_failed;
  ncclResult_t r = c->lib->n.AllGather(c->args_dev, c->args_dev + ARGS_DESC, ARGS_DESC, ncclUint8, nc, s);
  if (r == ncclInProgress) {
    st = poll_ready(c->lib, nc, ftc__deadline_ns(c->timeout_ms), "FTCOMM_CHECK_ARGS allgather", c->timeout_ms,
                    c->interrupt);
  } else if (r != ncclSuccess) {
    st = ftc__nccl_status(r, "FTCOMM_CHECK_ARGS allgather", last_error(c->lib, nc));
  }
  if (st != FTC_OK) {
    fail(c, st);
    event_put(c, done);
    return st;
  }
  e = c->lib->rt.MemcpyAsync(c->args_host + ARGS_DESC, c->args_dev + ARGS_DESC, (size_t)n * ARGS_DESC,
                             cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = c->lib->rt.EventRecord(done, s);
  if (e != cudaSuccess) goto cuda_failed;
  ftc__nccl_work_t w = {.ev_start = done, .ev_end = done, .rec_id = FTC_REC_NO_ID};
  st = ftc__nccl_comm_wait(c, &w, ftc__deadline_ns(c->timeout_ms));
  event_put(c, done);
  if (st != FTC_OK) return st;
  c->checked++;
  const uint64_t *all = (const uint64_t *)(c->args_host + ARGS_DESC);
  for (int q = 1; q < n; q++) {
    const uint64_t *d = all + 4 * q;
    if (memcmp(d, all, ARGS_DESC) == 0) continue;
    char theirs[128], first[128];
    args_text(d, theirs, sizeof theirs);
    args_text(all, first, sizeof first);
    fail(c, FTC_ERR_MISMATCH);
    return ftc__error(FTC_ERR_MISMATCH, "rank %d %s where rank 0 %s (this rank is %d; FTCOMM_CHECK_ARGS=1)", q,
                      theirs, first, c->rank);
  }
  return FTC_OK;
cuda_failed:
  st = ftc__error(FTC_ERR_BACKEND, "FTCOMM_CHECK_ARGS: cudaMemcpyAsync/cudaEventRecord failed: %s",
                  c->lib->rt.GetErrorString(e));
  fail(c, st);
  event_put(c, done);
  return st;
}

static ftc_status_t launch(ftc__nccl_comm_t *c, const ftc__op_t *const *ops, int n, void *stream,
                           struct ftc_rec *rec, uint64_t rec_id, ftc__nccl_work_t *w) {
  ftc_status_t st;
  memset(w, 0, sizeof *w);
  w->rec = rec, w->rec_id = rec_id;
  const char *what = n == 1 ? coll_name(ops[0]->coll) : "send/recv group";
  for (int i = 0; i < n; i++) {
    const ftc__op_t *op = ops[i];
    if ((unsigned)op->coll >= FTC__COLL_COUNT || (unsigned)op->dtype >= FTC_DTYPE_COUNT ||
        (unsigned)op->op > FTC_AVG || /* (bitwise ops: refused by the calls, no_bitwise) */
        (n > 1 && op->coll != FTC__COLL_SEND && op->coll != FTC__COLL_RECV)) {
      st = ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "unknown collective, dtype or op (a group holds send and recv only)");
      goto out;
    }
  }
  FTC_CHECK_GOTO(gate(c), st, out);
  FTC_CHECK_GOTO(set_device(c), st, out);
  ncclComm_t nc = get_nc(c);
  cudaStream_t s = stream ? (cudaStream_t)stream : c->stream;
  if (c->check_args && n == 1) FTC_CHECK_GOTO(check_args(c, nc, ops[0], s), st, out);
  cudaEvent_t a = NULL, b = NULL;
  /* A small collective on host memory runs on a staging slot: in by a
   * copy to pinned memory and an async copy to the device, out the same
   * way back, the result copied to the caller's buffer at completion. */
  ftc__op_t staged;
  const ftc__op_t *one[1];
  char *sh = NULL, *sd = NULL;
  size_t sb = stage_bytes(c, ops, n);
  if (sb) {
    FTC_CHECK_GOTO(stage_get(c, &sh, &sd), st, out);
    staged = *ops[0];
    if (staged.sendbuf) memcpy(sh, staged.sendbuf, sb);
    else if (staged.recvbuf) memcpy(sh, staged.recvbuf, sb);
    w->stage = sh, w->stage_user = staged.recvbuf, w->stage_bytes = sb;
    staged.sendbuf = staged.recvbuf = sd;
    one[0] = &staged;
    ops = one;
  }
  FTC_CHECK_GOTO(event_get(c, &a), st, out);
  FTC_CHECK_GOTO(event_get(c, &b), st, out_a);
  w->enqueued_ns = ftc__now_ns();
  cudaError_t e = c->lib->rt.EventRecord(a, s);
  if (e == cudaSuccess && sh)
    e = c->lib->rt.MemcpyAsync(sd, sh, sb, cudaMemcpyHostToDevice, s);
  if (e != cudaSuccess) {
    st = ftc__error(FTC_ERR_BACKEND, "cudaEventRecord/cudaMemcpyAsync failed: %s",
                    c->lib->rt.GetErrorString(e));
    goto out_b;
  }
  ncclResult_t r = enqueue_all(c, nc, ops, n, s);
  if (r == ncclInProgress) {
    /* Nonblocking: the enqueue finishes in the background; wait for it. */
    st = poll_ready(c->lib, nc, ftc__deadline_ns(c->timeout_ms), what, c->timeout_ms,
                    c->interrupt);
    if (st != FTC_OK) {
      fail(c, st);
      goto out_b;
    }
  } else if (r != ncclSuccess) {
    st = ftc__nccl_status(r, what, last_error(c->lib, nc));
    if (st != FTC_ERR_INVALID_ARGUMENT) fail(c, st);
    goto out_b;
  }
  if (sh) e = c->lib->rt.MemcpyAsync(sh, sd, sb, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = c->lib->rt.EventRecord(b, s);
  if (e != cudaSuccess) {
    st = ftc__error(FTC_ERR_BACKEND, "cudaEventRecord/cudaMemcpyAsync failed: %s",
                    c->lib->rt.GetErrorString(e));
    fail(c, st);
    goto out_b;
  }
  w->ev_start = a, w->ev_end = b;
  return FTC_OK;
out_b:
  event_put(c, b);
out_a:
  event_put(c, a);
out:
  stage_put(c, w->stage, 1); /* its copies may be queued: never reused */
  w->stage = NULL;
  rec_note(w, 2, FTC_REC_FAILED, 0);
  return st;
}

ftc_status_t ftc__nccl_comm_launch(ftc__nccl_comm_t *c, const ftc__op_t *op, void *stream,
                                   ftc__nccl_work_t *w) {
  return launch(c, &op, 1, stream, NULL, FTC_REC_NO_ID, w);
}

ftc_status_t ftc__nccl_comm_launch_rec(ftc__nccl_comm_t *c, const ftc__op_t *op, void *stream,
                                       struct ftc_rec *rec, uint64_t rec_id,
                                       ftc__nccl_work_t *w) {
  return launch(c, &op, 1, stream, rec, rec_id, w);
}

ftc_status_t ftc__nccl_comm_launch_p2p(ftc__nccl_comm_t *c, const ftc__op_t *const *ops, int n,
                                       void *stream, ftc__nccl_work_t *w) {
  if (n < 1) {
    memset(w, 0, sizeof *w);
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "an empty send/recv group");
  }
  return launch(c, ops, n, stream, NULL, FTC_REC_NO_ID, w);
}

static void set_once(int64_t *field, int64_t t) {
  int64_t zero = 0;
  __atomic_compare_exchange_n(field, &zero, t, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static ftc_status_t poll_failed(ftc__nccl_work_t *w, ftc_status_t st) {
  rec_note(w, 2, FTC_REC_FAILED, 0);
  return st;
}

/* Whether work on c may still succeed: FTC_OK, or why not: the epoch was
 * failed (by this rank: a revoke, a timeout, a peer reported lost), or
 * NCCL's asynchronous error (which fails the epoch). */
static ftc_status_t comm_failed(ftc__nccl_comm_t *c, ncclComm_t nc) {
  ftc_status_t e = ftc__nccl_comm_error(c);
  if (e != FTC_OK)
    return ftc__error(e, "epoch %llu failed: %s", (unsigned long long)ftc__nccl_comm_epoch(c),
                      ftc_strerror(e));
  ncclResult_t a = ncclSuccess;
  ncclResult_t r = c->lib->n.CommGetAsyncError(nc, &a);
  if (r == ncclSuccess && a != ncclSuccess && a != ncclInProgress) r = a;
  if (r == ncclSuccess) return FTC_OK;
  ftc_status_t st = ftc__nccl_status(r, "collective", last_error(c->lib, nc));
  fail(c, st);
  return st;
}

ftc_status_t ftc__nccl_work_poll(ftc__nccl_comm_t *c, ftc__nccl_work_t *w, int *done) {
  *done = 0;
  if (__atomic_load_n(&w->completed_ns, __ATOMIC_ACQUIRE)) {
    *done = 1;
    return FTC_OK;
  }
  ncclComm_t nc = get_nc(c);
  if (!nc) return poll_failed(w, ftc__error(FTC_ERR_ABORTED, "the NCCL communicator was aborted"));
  ftc_status_t st = comm_failed(c, nc);
  if (st != FTC_OK) return poll_failed(w, st);
  cudaError_t q;
  if (!__atomic_load_n(&w->started_ns, __ATOMIC_ACQUIRE)) {
    q = c->lib->rt.EventQuery((cudaEvent_t)w->ev_start);
    if (q == cudaSuccess) {
      set_once(&w->started_ns, ftc__now_ns());
      rec_note(w, 1, FTC_REC_STARTED, __atomic_load_n(&w->started_ns, __ATOMIC_ACQUIRE));
    }
  }
  q = c->lib->rt.EventQuery((cudaEvent_t)w->ev_end);
  if (q == cudaSuccess) {
    /* Look again: a failure that came after the look above (a peer lost
     * mid-collective, NCCL's error; a revoke from another thread) may have
     * ended the work on the stream without its result. Completed work is a
     * success only with no failure after it. */
    if ((st = comm_failed(c, nc)) != FTC_OK) return poll_failed(w, st);
    if (w->stage && w->stage_user && !(__atomic_fetch_or(&w->recorded, 4, __ATOMIC_ACQ_REL) & 4))
      memcpy(w->stage_user, w->stage, w->stage_bytes);
    int64_t now = ftc__now_ns();
    set_once(&w->started_ns, now);
    rec_note(w, 1, FTC_REC_STARTED, __atomic_load_n(&w->started_ns, __ATOMIC_ACQUIRE));
    set_once(&w->completed_ns, now);
    rec_note(w, 2, FTC_REC_COMPLETED, __atomic_load_n(&w->completed_ns, __ATOMIC_ACQUIRE));
    *done = 1;
    return FTC_OK;
  }
  if (q != cudaErrorNotReady) {
    st = ftc__error(FTC_ERR_BACKEND, "cudaEventQuery failed: %s", c->lib->rt.GetErrorString(q));
    fail(c, st);
    return poll_failed(w, st);
  }
  return FTC_OK;
}

ftc_status_t ftc__nccl_work_check(ftc__nccl_comm_t *c, ftc__nccl_work_t *w, int64_t deadline_ns,
                                  int *done) {
  ftc_status_t st = ftc__nccl_work_poll(c, w, done);
  if (st != FTC_OK || *done) return st;
  ftc_status_t in = interrupted(c->interrupt);
  if (in != FTC_OK) {
    fail(c, in);
    rec_note(w, 2, FTC_REC_FAILED, 0);
    return ftc__error(in, "the NCCL collective was interrupted: %s", ftc_strerror(in));
  }
  if (ftc__now_ns() >= deadline_ns) {
    fail(c, FTC_ERR_TIMEOUT);
    rec_note(w, 2, FTC_REC_FAILED, 0);
    FTC_WARN(FTC_SUB_NCCL, "epoch %llu: a collective did not complete in time (%s)",
             (unsigned long long)ftc__nccl_comm_epoch(c),
             w->started_ns ? "it started on the GPU" : "it never started on the GPU");
    return ftc__error(FTC_ERR_TIMEOUT, "the NCCL collective did not complete in time (%s); "
                      "the epoch is failed", w->started_ns ? "started, not completed"
                                                           : "never started");
  }
  return FTC_OK;
}

ftc_status_t ftc__nccl_comm_wait(ftc__nccl_comm_t *c, ftc__nccl_work_t *w, int64_t deadline_ns) {
  int us = 20, done = 0;
  /* Spin first: a nap costs at least the timer slack (50 us), as long as a
   * 1 MiB allreduce on one GPU. Then nap, so a waiting rank does not burn
   * a core. */
  int64_t spin_until = ftc__now_ns() + c->lib->spin_ns;
  for (;;) {
    ftc_status_t st = ftc__nccl_work_check(c, w, deadline_ns, &done);
    if (st != FTC_OK || done) return st;
    if (ftc__now_ns() < spin_until) {
      sched_yield();
      continue;
    }
    nap(&us);
  }
}

ftc_status_t ftc__nccl_work_elapsed_ms(ftc__nccl_comm_t *c, const ftc__nccl_work_t *w,
                                       float *ms) {
  cudaError_t e = c->lib->rt.EventElapsedTime(ms, (cudaEvent_t)w->ev_start,
                                              (cudaEvent_t)w->ev_end);
  if (e != cudaSuccess)
    return ftc__error(FTC_ERR_BACKEND, "cudaEventElapsedTime failed: %s",
                      c->lib->rt.GetErrorString(e));
  return FTC_OK;
}

/* --- failure ---------------------------------------------------------------- */

ftc_status_t ftc__nccl_comm_revoke(ftc__nccl_comm_t *c, ftc_status_t why) {
  fail(c, why != FTC_OK ? why : FTC_ERR_REVOKED);
  ncclComm_t nc = get_nc(c);
  if (!nc) return FTC_OK;
  /* A communicator kept after a failed move (a grow or shrink interrupted by
   * a newer epoch) ran nothing since its last step boundary and is the
   * parent of the retry: revoking it would break that retry (a grow's
   * survivors reach each other through their parent; after a revoke their
   * every ncclCommGrow of the newer epoch failed until the recovery timeout). */
  if (!(c->lib->info.caps & FTC__NCCL_CAP_REVOKE) || c->revoked || c->kept) return FTC_OK;
  ncclResult_t r = c->lib->n.CommRevoke(nc, NCCL_REVOKE_DEFAULT);
  if (r != ncclSuccess && r != ncclInProgress)
    return ftc__nccl_status(r, "ncclCommRevoke", last_error(c->lib, nc));
  /* Done once the state leaves ncclInProgress: success, or the sticky error
   * that broke the epoch in the first place. */
  int64_t deadline = ftc__deadline_ns(c->timeout_ms);
  int us = 10;
  for (;;) {
    ncclResult_t a = ncclInProgress;
    r = c->lib->n.CommGetAsyncError(nc, &a);
    if (r != ncclSuccess) return ftc__nccl_status(r, "ncclCommRevoke", last_error(c->lib, nc));
    if (a != ncclInProgress) break;
    if (ftc__now_ns() >= deadline)
      return ftc__error(FTC_ERR_TIMEOUT, "ncclCommRevoke did not finish within %d ms",
                        c->timeout_ms);
    nap(&us);
  }
  c->revoked = 1;
  return FTC_OK;
}

ftc_status_t ftc__nccl_comm_abort(ftc__nccl_comm_t *c) {
  fail(c, FTC_ERR_ABORTED);
  pthread_mutex_lock(&c->mu);
  ncclComm_t nc = c->nc;
  c->nc = NULL;
  pthread_mutex_unlock(&c->mu);
  return abort_nc(c->lib, nc, c->timeout_ms);
}

void ftc__nccl_comm_free(ftc__nccl_comm_t *c) {
  if (!c) return;
  set_device(c); /* best effort: the events and the stream are that device's */
  ncclComm_t nc = get_nc(c);
  if (nc && ftc__nccl_comm_error(c) == FTC_OK) {
    /* Healthy: finalize (bounded), then destroy. */
    ncclResult_t r = c->lib->n.CommFinalize(nc);
    ftc_status_t st = (r == ncclSuccess || r == ncclInProgress)
                          ? poll_ready(c->lib, nc, ftc__deadline_ns(c->timeout_ms),
                                       "ncclCommFinalize", c->timeout_ms, NULL)
                          : ftc__nccl_status(r, "ncclCommFinalize", "");
    if (st == FTC_OK) {
      c->nc = NULL;
      c->lib->n.CommDestroy(nc);
    }
  }
  ftc__nccl_comm_abort(c);
  for (int i = 0; i < c->npool; i++) c->lib->rt.EventDestroy(c->pool[i]);
  ftc__free(c->pool);
  if (c->scratch) c->lib->rt.Free(c->scratch);
  if (c->own_stream) c->lib->rt.StreamDestroy(c->own_stream);
  stages_free(c);
  if (c->args_host) c->lib->rt.FreeHost(c->args_host);
  if (c->args_dev) c->lib->rt.Free(c->args_dev);
  view_drop(c->view);
  pthread_mutex_destroy(&c->mu);
  ftc__free(c);
}
