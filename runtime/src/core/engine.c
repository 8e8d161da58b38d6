/*
 * engine.c - requests and the per-communicator progress thread
 * ("ftc-progress"). Asynchronous collectives are queued and run in order by
 * the progress thread; a blocking collective finding the queue empty runs on
 * the calling thread (no handoff, which is what the small-message latency
 * needs), else it is queued and waited for. A move to a later epoch
 * (ftc__comm_rebuild) likewise runs on the calling thread while the progress
 * thread waits in its idle poll, on a backend that allows it. Waiters spin FTCOMM_SPIN_US,
 * then sleep on the request's condition variable. While idle, the progress
 * thread sleeps in poll() on its eventfd, the listener (strangers are
 * refused) and its peer sockets (a peer that closes between collectives
 * fails the epoch at once, unless it said goodbye). On a backend that
 * launches without waiting (NCCL: be->launch), queued collectives are
 * enqueued on the device back to back, up to MAX_IN_FLIGHT, and the
 * progress thread discovers their completions by polling (as PyTorch's
 * watchdog does); it owns the data plane (comm->eng.busy) while any is in flight.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/comm.h"
#include "ftc_alloc.h"
#include "ftc_assert.h"
#include "ftc_error.h"
#include "ftc_time.h"

#define WAIT_GRACE_NS (250 * 1000000LL)
#define SETTLE_COLLECTIVES 2 /* completed in an epoch before background work starts */
#define MAX_IN_FLIGHT 64

void ftc__engine_wake(ftc_comm_t *comm) {
  uint64_t one = 1;
  ssize_t n = write(comm->eng.wake_fd, &one, sizeof(one));
  (void)n;
}

/* ---- requests ---- */

/* The request's own copies of op's count and displacement arrays (the
 * caller may free its own once the call returns), in the same block. */
static size_t vec_bytes(const ftc__op_t *op) {
  if (!op || !op->rcounts) return 0;
  int arrays = !!op->scounts + !!op->sdispls + !!op->rcounts + !!op->rdispls;
  return (size_t)arrays * (size_t)op->nranks * sizeof(size_t);
}

static void vec_copy(ftc__op_t *op, size_t *to) {
  const size_t **arr[4] = {&op->scounts, &op->sdispls, &op->rcounts, &op->rdispls};
  for (int i = 0; i < 4; i++) {
    if (!*arr[i]) continue;
    memcpy(to, *arr[i], (size_t)op->nranks * sizeof(size_t));
    *arr[i] = to;
    to += op->nranks;
  }
}

static ftc_request_t *req_new(ftc_comm_t *comm, const ftc__op_t *op) {
  size_t vb = vec_bytes(op);
  ftc_request_t *req = ftc__calloc(1, sizeof(*req) + vb);
  if (!req) return NULL;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&req->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&req->mu, NULL);
  req->comm = comm;
  if (op) req->op = *op;
  if (vb) vec_copy(&req->op, (size_t *)(req + 1));
  req->refs = 2;
  req->rec_id = FTC_REC_NO_ID;
  return req;
}

static void req_unref(ftc_request_t *req) {
  if (__atomic_sub_fetch(&req->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  pthread_cond_destroy(&req->cv);
  pthread_mutex_destroy(&req->mu);
  ftc__free(req);
}

/* A request's life: QUEUED -> RUNNING -> DONE, or QUEUED -> DONE (drained,
 * or refused at the gate); never back. */
static inline void req_set_state(ftc_request_t *req, int to) {
#ifdef FTC_ASSERTS
  int from = __atomic_exchange_n(&req->state, to, __ATOMIC_ACQ_REL);
  FTC_ASSERT(from < to);
#else
  __atomic_store_n(&req->state, to, __ATOMIC_RELEASE);
#endif
}

/* The completion callback, on the thread that completed req (or registers
 * the callback on a completed one), with the request's detail as this
 * thread's ftc_last_error(). */
static void req_callback(ftc_request_t *req, ftc_request_callback_t cb, void *arg) {
  if (req->status != FTC_OK)
    ftc__error(req->status, "%s", req->err);
  else
    ftc__error_clear();
  cb(req, req->status, arg);
}

/* Publish the result, run the completion callback, and drop the engine's
 * reference (after the callback: it may free the caller's). */
static void req_complete(ftc_request_t *req, ftc_status_t st, const char *err) {
  pthread_mutex_lock(&req->mu);
  req->status = st;
  snprintf(req->err, sizeof(req->err), "%s", st == FTC_OK ? "" : err);
  req_set_state(req, REQ_DONE);
  pthread_cond_broadcast(&req->cv);
  ftc_request_callback_t cb = req->cb;
  void *arg = req->cb_arg;
  req->cb = NULL;
  pthread_mutex_unlock(&req->mu);
  if (cb) req_callback(req, cb, arg);
  req_unref(req);
}

void ftc__engine_drain_locked(ftc_comm_t *comm, ftc_status_t status, const char *why) {
  FTC_ASSERT_HELD(&comm->lock);
  ftc_request_t *req;
  while ((req = comm->eng.head) != NULL) {
    comm->eng.head = req->next;
    ftc__record_end(comm, req->rec_id, status);
    req_complete(req, status, why);
  }
  comm->eng.tail = NULL;
}

static void enqueue_locked(ftc_comm_t *comm, ftc_request_t *req) {
  FTC_ASSERT_HELD(&comm->lock);
  req->next = NULL;
  if (comm->eng.tail)
    comm->eng.tail->next = req;
  else
    comm->eng.head = req;
  comm->eng.tail = req;
}

/* ---- running one collective ---- */

static uint64_t next_seq_locked(ftc_comm_t *comm, const ftc__op_t *op) {
  FTC_ASSERT_HELD(&comm->lock);
  if (op->coll == FTC__COLL_SEND) return ++comm->p2p_seq[2 * op->peer];
  if (op->coll == FTC__COLL_RECV) return ++comm->p2p_seq[2 * op->peer + 1];
  return ++comm->seq;
}

/* The rank whose connection ended, if a run's failure st is one that its
 * other peers see for themselves (ftc__comm_fail_quiet), else -1: a peer
 * lost, not one that left (a goodbye: the coordinator revokes nobody for
 * it). On the thread that owns the data plane. */
static int quiet_rank_of(ftc_comm_t *comm, ftc_status_t st) {
  if (st != FTC_ERR_PEER_LOST || !comm->bh) return -1;
  int peer = comm->be->failed_peer(comm->bh);
  if (peer < 0 || (comm->be->peer_left && comm->be->peer_left(comm->bh, peer))) return -1;
  return peer;
}

/* Collective op #seq failed with st: fail the epoch, saying which one. */
static void fail_op(ftc_comm_t *comm, const ftc__op_t *op, uint64_t seq, ftc_status_t st) {
  char detail[384];
  int red = op->coll == FTC__COLL_ALLREDUCE || op->coll == FTC__COLL_REDUCE ||
            op->coll == FTC__COLL_REDUCE_SCATTER;
  snprintf(detail, sizeof(detail), "%s #%llu (%zu x %s%s%s) on rank %d: %s", ftc__coll_name(op->coll),
           (unsigned long long)seq, op->count, ftc_dtype_name(op->dtype), red ? " " : "",
           red ? ftc_op_name(op->op) : "", comm->rank, ftc_last_error());
  ftc__comm_fail_quiet(comm, st, detail, quiet_rank_of(comm, st));
  ftc__error(st, "%s", detail);
}

/* Run op on this thread, which owns the data plane (comm->eng.busy). */
static ftc_status_t execute(ftc_comm_t *comm, const ftc__op_t *op, uint64_t seq, uint64_t rec_id,
                            int64_t deadline, int64_t now) {
  ftc__record_start(comm, rec_id, now);
  if (__builtin_expect(ftc__fault_armed, 0)) ftc__fault_coll(comm, seq);
  ftc_status_t st = comm->be->run(comm->bh, op, deadline);
  if (__builtin_expect(ftc__fault_armed, 0) && st == FTC_OK) st = ftc__fault_coll_done(comm, seq);
  if (st != FTC_OK) fail_op(comm, op, seq, st);
  ftc__record_end(comm, rec_id, st);
  if (__builtin_expect(st == FTC_OK && !__atomic_load_n(&comm->settled, __ATOMIC_RELAXED), 0) &&
      ++comm->settling >= SETTLE_COLLECTIVES) {
    /* The epoch is in use (every rank completed its first collective
     * before this one could): work held back during the move (making spare
     * connections, closing the previous epoch's sockets) may run now
     * without slowing a rank that is still finishing it. */
    __atomic_store_n(&comm->settled, 1, __ATOMIC_RELEASE);
    ftc__watchdog_kick(comm);
    ftc__engine_wake(comm); /* the progress thread makes the spares, closes the old sockets */
  }
  return st;
}

static int is_p2p(const ftc_request_t *r) {
  return !r->rebuild_view && (r->op.coll == FTC__COLL_SEND || r->op.coll == FTC__COLL_RECV);
}

/* The progress thread's state for one batch of send/recv requests. */
typedef struct p2p_batch {
  ftc_comm_t *comm;
  ftc_request_t **reqs; /* reqs[i] runs ops[i] */
  int n;
} p2p_batch_t;

static int p2p_take_more(void *arg, const ftc__op_t **ops, int n, int cap,
                         const unsigned char *done);

/* Run the batch's send/recv requests together (see be->run_p2p), taking
 * in those queued while it runs; each completes as its bytes have moved
 * (p2p_take_more), the ones left in the batch when the run ends with it. */
static ftc_status_t execute_p2p(ftc_comm_t *comm, p2p_batch_t *b, const ftc__op_t **ops, int cap,
                                int64_t deadline) {
  for (int i = 0; i < b->n; i++) {
    ops[i] = &b->reqs[i]->op;
    ftc__record_start(comm, b->reqs[i]->rec_id, 0);
  }
  ftc_status_t st = comm->be->run_p2p(comm->bh, ops, b->n, cap, deadline, p2p_take_more, b,
                                      comm->eng.wake_fd);
  if (st != FTC_OK && b->n > 0) {
    char detail[384];
    const ftc__op_t *o = &b->reqs[0]->op;
    snprintf(detail, sizeof(detail), "%d send/recv operation(s) from %s #%llu (%zu x %s, peer %d) on rank %d: %s",
             b->n, ftc__coll_name(o->coll), (unsigned long long)b->reqs[0]->seq, o->count,
             ftc_dtype_name(o->dtype), o->peer, comm->rank, ftc_last_error());
    ftc__comm_fail_quiet(comm, st, detail, quiet_rank_of(comm, st));
    ftc__error(st, "%s", detail);
  }
  for (int i = 0; i < b->n; i++) ftc__record_end(comm, b->reqs[i]->rec_id, st);
  return st;
}

static int64_t timeout_ns_of(const ftc_comm_t *comm, int timeout_ms) {
  if (timeout_ms == FTC_TIMEOUT_INFINITE) return -1;
  if (timeout_ms == FTC_TIMEOUT_DEFAULT) return (int64_t)comm->cfg.timeout_ms * 1000000LL;
  return (int64_t)timeout_ms * 1000000LL;
}

/* Wait for req until deadline; on expiry the epoch fails with TIMEOUT. */
static ftc_status_t wait_req(ftc_request_t *req, int64_t deadline, int spin_us) {
  int64_t spin_end = ftc__now_ns() + (int64_t)spin_us * 1000;
  while (__atomic_load_n(&req->state, __ATOMIC_ACQUIRE) != REQ_DONE && ftc__now_ns() < spin_end)
    sched_yield(); /* the progress thread may need this core */
  pthread_mutex_lock(&req->mu);
  while (__atomic_load_n(&req->state, __ATOMIC_ACQUIRE) != REQ_DONE) {
    if (deadline == INT64_MAX) {
      pthread_cond_wait(&req->cv, &req->mu);
      continue;
    }
    struct timespec ts = {deadline / 1000000000LL, deadline % 1000000000LL};
    if (pthread_cond_timedwait(&req->cv, &req->mu, &ts) == ETIMEDOUT) break;
  }
  int done = __atomic_load_n(&req->state, __ATOMIC_ACQUIRE) == REQ_DONE;
  ftc_status_t st = req->status;
  char err[sizeof(req->err)];
  memcpy(err, req->err, sizeof(err));
  pthread_mutex_unlock(&req->mu);
  if (done) return st == FTC_OK ? FTC_OK : ftc__error(st, "%s", err);
  char detail[256];
  snprintf(detail, sizeof(detail), "%s #%llu did not complete before the wait's timeout",
           ftc__coll_name(req->op.coll), (unsigned long long)req->seq);
  ftc__comm_fail(req->comm, FTC_ERR_TIMEOUT, detail);
  return ftc__error(FTC_ERR_TIMEOUT, "%s; the epoch is failed, recover before the next collective", detail);
}

ftc_status_t ftc__submit_blocking(ftc_comm_t *comm, const ftc__op_t *op, int timeout_ms) {
  int64_t tns = timeout_ns_of(comm, timeout_ms);
  int64_t now = ftc__now_ns(); /* the deadline, and the record's created/started times */
  int64_t deadline = tns < 0 ? INT64_MAX : now + tns;
  ftc_status_t st;
  pthread_mutex_lock(&comm->lock);
  if ((st = ftc__comm_gate(comm)) != FTC_OK) {
    pthread_mutex_unlock(&comm->lock);
    return st;
  }
  uint64_t seq = next_seq_locked(comm, op);
  uint64_t rec_id = ftc__record_schedule(comm, op, seq, tns, now);
  if (!comm->eng.head && !comm->eng.busy) {
    comm->eng.busy = 1;
    pthread_mutex_unlock(&comm->lock);
    st = execute(comm, op, seq, rec_id, deadline, now);
    pthread_mutex_lock(&comm->lock);
    comm->eng.busy = 0;
    int more = comm->eng.head != NULL;
    pthread_mutex_unlock(&comm->lock);
    if (more) ftc__engine_wake(comm);
    return st;
  }
  ftc_request_t *req = req_new(comm, op);
  if (!req) {
    pthread_mutex_unlock(&comm->lock);
    ftc__record_end(comm, rec_id, FTC_ERR_NO_MEMORY);
    return ftc__error(FTC_ERR_NO_MEMORY, "allocating a request");
  }
  req->deadline = deadline;
  req->seq = seq;
  req->rec_id = rec_id;
  enqueue_locked(comm, req);
  pthread_mutex_unlock(&comm->lock);
  ftc__engine_wake(comm);
  st = wait_req(req, deadline == INT64_MAX ? INT64_MAX : deadline + WAIT_GRACE_NS, comm->spin_us);
  req_unref(req);
  return st;
}

ftc_status_t ftc__submit_async(ftc_comm_t *comm, const ftc__op_t *op, ftc_request_t **out) {
  ftc_status_t st;
  pthread_mutex_lock(&comm->lock);
  if ((st = ftc__comm_gate(comm)) != FTC_OK) {
    pthread_mutex_unlock(&comm->lock);
    return st;
  }
  ftc_request_t *req = req_new(comm, op);
  if (!req) {
    pthread_mutex_unlock(&comm->lock);
    return ftc__error(FTC_ERR_NO_MEMORY, "allocating a request");
  }
  req->seq = next_seq_locked(comm, op);
  req->rec_id = ftc__record_schedule(comm, op, req->seq, timeout_ns_of(comm, FTC_TIMEOUT_DEFAULT), 0);
  enqueue_locked(comm, req);
  pthread_mutex_unlock(&comm->lock);
  ftc__engine_wake(comm);
  *out = req;
  return FTC_OK;
}

static ftc_status_t do_rebuild(ftc_comm_t *comm, const ftc__view_t *view);

ftc_status_t ftc__comm_rebuild(ftc_comm_t *comm, const ftc__view_t *view) {
  pthread_mutex_lock(&comm->lock);
  if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE)) {
    pthread_mutex_unlock(&comm->lock);
    return ftc__error(FTC_ERR_ABORTED, "the communicator was aborted; destroy it");
  }
  if (comm->eng.idle_parked && !comm->eng.head && !comm->eng.busy) {
    /* The progress thread waits in its idle poll (idle_wait, parked): the
     * move is made here, as a blocking collective runs here when the queue
     * is empty, instead of handing it over and waiting for it. */
    comm->eng.busy = 1;
    comm->eng.inline_move = 1;
    pthread_mutex_unlock(&comm->lock);
    FTC_DEBUG(FTC_SUB_RECOVERY, "moving to epoch %llu on this thread (the progress thread is idle)",
              (unsigned long long)view->epoch);
    ftc_status_t st = do_rebuild(comm, view);
    pthread_mutex_lock(&comm->lock);
    comm->eng.busy = 0;
    comm->eng.inline_move = 0;
    comm->eng.rebuilds++;
    pthread_mutex_unlock(&comm->lock);
    ftc__engine_wake(comm); /* the new epoch's idle watch */
    return st;
  }
  pthread_mutex_unlock(&comm->lock);
  ftc_request_t *req = req_new(comm, NULL);
  if (!req) return ftc__error(FTC_ERR_NO_MEMORY, "allocating a rebuild request");
  req->rebuild_view = view;
  pthread_mutex_lock(&comm->lock);
  if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE)) {
    pthread_mutex_unlock(&comm->lock);
    req_unref(req);
    req_unref(req);
    return ftc__error(FTC_ERR_ABORTED, "the communicator was aborted; destroy it");
  }
  enqueue_locked(comm, req);
  pthread_mutex_unlock(&comm->lock);
  ftc__engine_wake(comm);
  ftc_status_t st = wait_req(req, INT64_MAX, comm->spin_us);
  req_unref(req);
  return st;
}

/* On the progress thread, between collectives: new transport, clean state. */
static ftc_status_t do_rebuild(ftc_comm_t *comm, const ftc__view_t *view) {
  uint64_t v; /* a quiet stop's wake-up (comm.c), read before the status is cleared */
  ssize_t r = read(comm->intr_fd, &v, sizeof(v));
  (void)r;
  __atomic_store_n(&comm->interrupt, 0, __ATOMIC_RELEASE);
  ftc_status_t st = ftc__comm_connect_view(comm, view);
  if (st != FTC_OK) {
    __atomic_store_n(&comm->interrupt, (int)st, __ATOMIC_RELEASE);
    return st;
  }
  /* (comm->error was cleared with the swap to the new epoch) */
  /* The watchdog's stop for a newer epoch that came while this one was
   * connecting (recover.c, wd_view), set as it was done: this epoch is
   * connected, and the step boundary takes the newer one. Only that stop
   * sets the status alone; a failure sets comm->error first. */
  int superseded = FTC_ERR_REVOKED;
  __atomic_compare_exchange_n(&comm->interrupt, &superseded, 0, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  FTC_INFO(FTC_SUB_RECOVERY, "data plane rebuilt for epoch %llu: rank %d of %d",
           (unsigned long long)view->epoch, view->my_rank, view->size);
  return FTC_OK;
}

/* ---- the progress thread ---- */

int ftc__peer_watch_init(ftc__peer_watch_t *w, int size) {
  ftc__peer_watch_free(w);
  size_t cap = (size_t)ftc__comm_peer_fd_cap(size);
  w->fds = ftc__calloc(cap, sizeof(*w->fds));
  w->ranks = ftc__calloc(cap, sizeof(*w->ranks));
  if (!w->fds || !w->ranks) {
    ftc__peer_watch_free(w);
    return -1;
  }
  w->cap = (int)cap;
  return 0;
}

void ftc__peer_watch_free(ftc__peer_watch_t *w) {
  ftc__free(w->fds);
  ftc__free(w->ranks);
  memset(w, 0, sizeof(*w));
}

int ftc__peer_watch_fill(ftc__peer_watch_t *w, const ftc__backend_ops_t *be, const void *bh,
                         const unsigned char *ignore, int nignore, struct pollfd *pfd) {
  int n = 0;
  w->n = be->peer_fds && w->cap > 0 ? be->peer_fds(bh, w->fds, w->ranks, w->cap) : 0;
  for (int i = 0; i < w->n; i++)
    if (w->ranks[i] >= nignore || !ignore[w->ranks[i]])
      pfd[n++] = (struct pollfd){w->fds[i], POLLRDHUP, 0};
  return n;
}

/* Room in the idle watch's pollfds for the listener and the handshakes of
 * spare or early connections in a world of `size`: the listener, two per
 * peer, the TCP backend's pending accepts (64). */
#define SPARE_ROOM(size) (1 + 2 * (size) + 64)

/* Per-epoch scratch of the progress thread. */
typedef struct progress_scratch {
  int n;                  /* the epoch's size */
  unsigned char *ignore;  /* peers the idle watch has dealt with */
  ftc_request_t **batch;  /* send/recv requests run together */
  const ftc__op_t **ops;
  ftc__peer_watch_t watch; /* the idle watch's peer sockets */
  struct pollfd *pfd;     /* the wake fd, nspare for the listener, watch.cap */
  int nspare;
} progress_scratch_t;

static void scratch_free(progress_scratch_t *ps) {
  ftc__free(ps->ignore);
  ftc__free(ps->batch);
  ftc__free(ps->ops);
  ftc__free(ps->pfd);
  ftc__peer_watch_free(&ps->watch);
  memset(ps, 0, sizeof(*ps));
}

/* Room for nspare listener entries in ps->pfd (more than before: an early
 * epoch bigger than this one; once per announced epoch). 0 when out of
 * memory: the room stays as it was. */
static int scratch_room(progress_scratch_t *ps, int nspare) {
  if (nspare <= ps->nspare) return 1;
  struct pollfd *p = ftc__calloc(1 + (size_t)nspare + (size_t)ps->watch.cap, sizeof(*p));
  if (!p) return 0;
  ftc__free(ps->pfd);
  ps->pfd = p;
  ps->nspare = nspare;
  return 1;
}

static int scratch_init(progress_scratch_t *ps, int n) {
  scratch_free(ps);
  ps->n = n;
  ps->ignore = ftc__calloc((size_t)n, 1);
  ps->batch = ftc__calloc((size_t)FTC__P2P_CAP(n), sizeof(*ps->batch));
  ps->ops = ftc__calloc((size_t)FTC__P2P_CAP(n), sizeof(*ps->ops));
  return ps->ignore && ps->batch && ps->ops && ftc__peer_watch_init(&ps->watch, n) == 0 &&
         scratch_room(ps, SPARE_ROOM(n));
}

/* Room for nspare listener entries in the idle watch's pollfds being
 * filled (*pfd, its wake fd first): re-pointed when the array grew. */
static int idle_room(progress_scratch_t *ps, int nspare, struct pollfd **pfd, int wake_fd) {
  if (!scratch_room(ps, nspare)) return 0;
  if (*pfd != ps->pfd) *pfd = ps->pfd, (*pfd)[0] = (struct pollfd){wake_fd, POLLIN, 0};
  return 1;
}

/* Sleep until woken; meanwhile refuse strangers and notice peers that go
 * away between collectives. ignore[] marks peers already dealt with. */
static void idle_wait(ftc_comm_t *comm, progress_scratch_t *ps) {
  unsigned char *ignore = ps->ignore;
  int nignore = ps->n;
  struct pollfd *pfd = ps->pfd;
  /* The previous epoch's sockets: every peer has moved once this epoch
   * settled, so the goodbyes after a planned move wake nobody still moving,
   * and the closes after a failure take no CPU from a recovery. */
  if (comm->be->settled && __atomic_load_n(&comm->settled, __ATOMIC_ACQUIRE))
    comm->be->settled(comm->bs);
  int n = 0, base, sp = 0, ep = 0, early = 0,
      spares = comm->spares && comm->be->spare_poll && comm->bh;
  pfd[n++] = (struct pollfd){comm->eng.wake_fd, POLLIN, 0};
  /* While a later epoch is coming (this one failed, or the coordinator
   * announced the next), callers are peers of that epoch: leave them in the
   * backlog for its bootstrap instead of refusing them, unless that epoch
   * adds members (a joiner): then its bootstrap begins here, for the
   * connections with them (be->early_start). Otherwise the listener takes
   * spare connections (the next epoch's, made once this epoch's first
   * collective is done) and refuses anyone else. */
  int next_coming = __atomic_load_n(&comm->error, __ATOMIC_ACQUIRE) ||
                    ftc__member_latest_epoch(comm->member) >
                        __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE);
  if (comm->listen_fd >= 0 && !next_coming) {
    /* Standby members waiting to join (the coordinator's prospect: the
     * epoch their joins would form): connect to them now, beside the
     * spares; their acceptors answer with nonces at once, and the
     * handshakes are done when the join comes (docs/recovery.md). The
     * listener stays the spares'. */
    int prospect = spares && comm->member && comm->be->early_start &&
                   !__atomic_load_n(&comm->error, __ATOMIC_ACQUIRE);
    uint64_t seq = prospect ? ftc__member_prospect_seq(comm->member) : 0;
    if (prospect && seq != comm->prospect_seq) {
      ftc__view_t *v = NULL;
      comm->prospect_seq = seq;
      if (ftc__member_prospect(comm->member, &v)) {
        if (v->epoch > __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE) &&
            idle_room(ps, 2 * SPARE_ROOM(v->size > ps->n ? v->size : ps->n), &pfd, comm->eng.wake_fd))
          comm->be->early_start(comm->bh, v);
        ftc__view_free(v);
      }
    }
    int spare_max = ps->nspare;
    if (prospect && ps->nspare >= 2 * SPARE_ROOM(ps->n)) spare_max = SPARE_ROOM(ps->n);
    if (spares)
      sp = comm->be->spare_poll(comm->bh, comm->listen_fd,
                                __atomic_load_n(&comm->settled, __ATOMIC_ACQUIRE), pfd + n, spare_max);
    else
      pfd[n] = (struct pollfd){comm->listen_fd, POLLIN, 0}, sp = 1;
    /* (-1: its accepts are the spares' listener's, none of its own) */
    if (prospect) ep = comm->be->early_poll(comm->bh, -1, pfd + n + sp, ps->nspare - sp);
  } else if (spares) {
    comm->be->spare_stop(comm->bh);
    /* A later epoch that adds members (a joiner was admitted) is connected
     * to them now; at its step boundary those connections are ready. */
    if (comm->be->early_start && comm->listen_fd >= 0 &&
        !__atomic_load_n(&comm->error, __ATOMIC_ACQUIRE)) {
      uint64_t latest = ftc__member_latest_epoch(comm->member);
      if (latest != comm->early_epoch) {
        ftc__view_t *v = NULL;
        comm->early_epoch = latest;
        if (ftc__member_wait_view(comm->member, __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE),
                                  0, &v) == FTC_OK) {
          (void)idle_room(ps, SPARE_ROOM(v->size), &pfd, comm->eng.wake_fd);
          comm->be->early_start(comm->bh, v);
          ftc__view_free(v);
        }
      }
      early = sp = comm->be->early_poll(comm->bh, comm->listen_fd, pfd + n, ps->nspare);
    }
  }
  n += sp + ep;
  base = n;
  int np = 0, *fds = ps->watch.fds, *ranks = ps->watch.ranks;
  if (!__atomic_load_n(&comm->error, __ATOMIC_ACQUIRE)) {
    n += ftc__peer_watch_fill(&ps->watch, comm->be, comm->bh, ignore, nignore, pfd + n);
    np = ps->watch.n;
  }
  /* While this thread waits in poll() it holds nothing of the backend's:
   * the application thread may move the data plane itself meanwhile
   * (ftc__comm_rebuild), one wake-up of this thread and one of its own less
   * on the way to the next epoch. What the poll saw then is of the old
   * epoch: dropped, and the next pass watches the new one. (A backend
   * that moves on this thread alone: the poll, no lock.) */
  int parks = comm->be->rebuild_inline, moved = 0;
  uint64_t moves = 0;
  if (parks) {
    pthread_mutex_lock(&comm->lock);
    comm->eng.idle_parked = 1;
    moves = comm->eng.rebuilds;
    pthread_mutex_unlock(&comm->lock);
  }
  int rc = poll(pfd, (nfds_t)n, -1);
  if (parks) {
    pthread_mutex_lock(&comm->lock);
    comm->eng.idle_parked = 0;
    moved = comm->eng.inline_move || comm->eng.rebuilds != moves;
    pthread_mutex_unlock(&comm->lock);
  }
  if (rc <= 0 || moved) return;
  if (pfd[0].revents & POLLIN) {
    uint64_t v;
    ssize_t r = read(comm->eng.wake_fd, &v, sizeof(v));
    (void)r;
  }
  if (early) {
    if (!__atomic_load_n(&comm->error, __ATOMIC_ACQUIRE))
      comm->be->early_events(comm->bh, comm->listen_fd, pfd + 1, sp);
  } else if (sp && !__atomic_load_n(&comm->error, __ATOMIC_ACQUIRE) &&
      ftc__member_latest_epoch(comm->member) <= __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE)) {
    if (spares)
      comm->be->spare_events(comm->bh, comm->listen_fd, pfd + 1, sp);
    else if (pfd[1].revents & POLLIN)
      comm->be->refuse(comm->listen_fd);
  }
  if (ep && !__atomic_load_n(&comm->error, __ATOMIC_ACQUIRE))
    comm->be->early_events(comm->bh, -1, pfd + 1 + sp, ep);
  for (int i = base; i < n; i++) {
    if (!pfd[i].revents) continue;
    int rank = -1;
    for (int k = 0; k < np; k++)
      if (fds[k] == pfd[i].fd) rank = ranks[k];
    if (rank < 0 || rank >= nignore || ignore[rank]) continue;
    /* A peer may send on two sockets (fds lists it twice); it says goodbye
     * on each, after its data. It left when every one holds nothing but
     * the goodbye. */
    int goodbyes = 0, data = 0, ended = 0, quiet = 0;
    for (int k = 0; k < np; k++) {
      if (ranks[k] != rank) continue;
      switch (comm->be->peer_peek(fds[k])) {
        case FTC__PEER_GOODBYE: goodbyes++; break;
        case FTC__PEER_DATA: data++; break;
        case FTC__PEER_QUIET: quiet++; break;
        default: ended++; break;
      }
    }
    /* A peer that is ahead may have sent data for collectives this rank
     * has not started, then left: the collective that needs more than
     * what is buffered will see the end of the stream itself. */
    if (data) {
      ignore[rank] = 1;
      continue;
    }
    if (goodbyes && !ended) {
      if (quiet) continue; /* its goodbye on the other socket is on the way */
      ignore[rank] = 1;
      FTC_INFO(FTC_SUB_NET, "rank %d left the communicator", rank);
      comm->be->mark_left(comm->bh, rank);
      continue;
    }
    if (!ended) continue; /* woken with nothing to read */
    ignore[rank] = 1;
    pthread_mutex_lock(&comm->lock);
    int busy = comm->eng.busy;
    /* The running collective sees it itself if it reads from that peer; if
     * it waits on another one (a peer that failed quietly, core/comm.c:
     * with a coordinator session), the backend tells it (be->mark_ended):
     * it fails as having read the end, inside the collective, as the ranks
     * that did read it. Without quiet failures every failing peer shuts
     * its sockets, and a collective that has all it needs from a peer that
     * is ahead (it completed, then failed) completes, as before. */
    if (busy && comm->member && comm->be->mark_ended) comm->be->mark_ended(comm->bh, rank);
    pthread_mutex_unlock(&comm->lock);
    /* The coordinator hears of it from here, now (also while a collective
     * runs, which fails on it when its thread gets a CPU): the first report
     * forms the next epoch. Each peer seen to end is offered, as this rank
     * may be the successor of a later one (docs/recovery.md, "Who decides a
     * failure"). */
    if (comm->member && comm->be->blames_at_once)
      ftc__watchdog_report_ended(comm, __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE), rank);
    if (busy) continue;
    char detail[128];
    snprintf(detail, sizeof(detail), "rank %d closed its connection between collectives", rank);
    pthread_mutex_lock(&comm->lock);
    comm->be->note_failed_peer(comm->bh, rank);
    pthread_mutex_unlock(&comm->lock);
    /* Quiet (comm.c): every peer of a crashed rank sees its end itself. */
    ftc__comm_fail_quiet(comm, FTC_ERR_PEER_LOST, detail, rank);
  }
}

/* Take the send/recv requests queued behind the batch, in order, up to
 * cap (lock held): the backend keeps each peer's and direction's in order. */
static void gather_p2p_locked(ftc_comm_t *comm, p2p_batch_t *b, int cap) {
  FTC_ASSERT_HELD(&comm->lock);
  while (b->n < cap && comm->eng.head && is_p2p(comm->eng.head)) {
    ftc_request_t *nx = comm->eng.head;
    comm->eng.head = nx->next;
    if (!comm->eng.head) comm->eng.tail = NULL;
    req_set_state(nx, REQ_RUNNING);
    b->reqs[b->n++] = nx;
  }
}

static int p2p_take_more(void *arg, const ftc__op_t **ops, int n, int cap,
                         const unsigned char *done) {
  p2p_batch_t *b = arg;
  ftc_comm_t *comm = b->comm;
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (!done || done[i]) {
      ftc__record_end(comm, b->reqs[i]->rec_id, FTC_OK);
      req_complete(b->reqs[i], FTC_OK, "");
      continue;
    }
    b->reqs[k] = b->reqs[i];
    ops[k++] = ops[i];
  }
  b->n = k;
  pthread_mutex_lock(&comm->lock);
  gather_p2p_locked(comm, b, cap);
  pthread_mutex_unlock(&comm->lock);
  for (int i = k; i < b->n; i++) {
    ops[i] = &b->reqs[i]->op;
    ftc__record_start(comm, b->reqs[i]->rec_id, 0);
  }
  return b->n;
}

static int64_t request_deadline(const ftc_comm_t *comm, const ftc_request_t *req) {
  if (req->deadline) return req->deadline;
  int64_t tns = timeout_ns_of(comm, FTC_TIMEOUT_DEFAULT);
  return tns < 0 ? INT64_MAX : ftc__now_ns() + tns;
}

/* ---- collectives in flight (be->launch) ---- */

typedef struct flight {
  ftc_request_t *req;
  void *work;
} flight_t;

static int launchable(const ftc_comm_t *comm, const ftc_request_t *req) {
  return comm->be->launch && !req->rebuild_view && !is_p2p(req);
}

/* Enqueue req on the device (progress thread, unlocked); on failure it is
 * completed here. */
static void launch_req(ftc_comm_t *comm, ftc_request_t *req, flight_t *fly, int *nfly) {
  if (!req->deadline) req->deadline = request_deadline(comm, req);
  if (__builtin_expect(ftc__fault_armed, 0)) ftc__fault_coll(comm, req->seq);
  void *work = NULL;
  ftc_status_t st = comm->be->launch(comm->bh, &req->op, req->rec_id, &work);
  if (st != FTC_OK) {
    fail_op(comm, &req->op, req->seq, st);
    ftc__record_end(comm, req->rec_id, st);
    req_complete(req, st, ftc_last_error());
    return;
  }
  fly[(*nfly)++] = (flight_t){req, work};
}

static void land(ftc_comm_t *comm, flight_t *f, ftc_status_t st, const char *err) {
  comm->be->release(comm->bh, f->work, st == FTC_OK);
  ftc__record_end(comm, f->req->rec_id, st); /* the backend recorded the times */
  req_complete(f->req, st, err);
}

/* Complete what has finished, in order (unlocked), so that a completion
 * is never discovered before the one ahead of it on the stream. The first
 * failure fails the epoch
 * and is that request's status; every other request in flight then gets
 * the gate's (FTC_ERR_REVOKED, or ABORTED). Returns how many landed. */
static int reap(ftc_comm_t *comm, flight_t *fly, int *nfly) {
  int landed = 0, failed = -1;
  ftc_status_t st = FTC_OK;
  for (int i = 0; i < *nfly;) {
    int done = 0;
    st = comm->be->poll(comm->bh, fly[i].work, fly[i].req->deadline, &done);
    if (st == FTC_OK && !done) break; /* in stream order: the rest follow it */
    if (st == FTC_OK && __builtin_expect(ftc__fault_armed, 0))
      st = ftc__fault_coll_done(comm, fly[i].req->seq);
    if (st != FTC_OK) {
      failed = i;
      break;
    }
    land(comm, &fly[i], FTC_OK, "");
    landed++;
    memmove(&fly[i], &fly[i + 1], (size_t)(*nfly - i - 1) * sizeof(*fly));
    (*nfly)--;
  }
  if (failed < 0) return landed;
  fail_op(comm, &fly[failed].req->op, fly[failed].req->seq, st);
  land(comm, &fly[failed], st, ftc_last_error());
  for (int i = 0; i < *nfly; i++)
    if (i != failed) {
      ftc_status_t g = ftc__comm_gate(comm);
      land(comm, &fly[i], g, ftc_last_error());
    }
  landed += *nfly;
  *nfly = 0;
  return landed;
}

/* Between looks at the flights: spin spin_us, then nap up to 1 ms; a new
 * request (the eventfd) ends the nap. */
static void flights_pause(ftc_comm_t *comm, int64_t spin_end, int *nap_us) {
  if (ftc__now_ns() < spin_end) {
    sched_yield();
    return;
  }
  struct pollfd p = {comm->eng.wake_fd, POLLIN, 0};
  struct timespec ts = {0, (long)*nap_us * 1000};
  if (ppoll(&p, 1, &ts, NULL) > 0) {
    uint64_t v;
    ssize_t r = read(comm->eng.wake_fd, &v, sizeof(v));
    (void)r;
  }
  if (*nap_us < 1000) *nap_us = *nap_us * 2 > 1000 ? 1000 : *nap_us * 2;
}

/* Sleep until the wake_fd is written (and take what it holds). */
static void wait_wake(ftc_comm_t *comm) {
  struct pollfd p = {comm->eng.wake_fd, POLLIN, 0};
  if (poll(&p, 1, -1) > 0) {
    uint64_t v;
    ssize_t r = read(comm->eng.wake_fd, &v, sizeof(v));
    (void)r;
  }
}

static void *progress_main(void *arg) {
  ftc_comm_t *comm = arg;
  /* Each thread names itself: glibc names another thread through
   * /proc/self/task/N/comm (an open, a write and a close: about 12 us
   * each, four times on a joiner's way to its first collective). */
  pthread_setname_np(pthread_self(), "ftc-progress");
  progress_scratch_t ps = {0};
  int have_scratch = scratch_init(&ps, comm->size);
  flight_t fly[MAX_IN_FLIGHT];
  int nfly = 0, nap_us = 20;
  int64_t spin_end = 0;
  uint64_t rebuilds = 0;
  pthread_mutex_lock(&comm->lock);
  while (!comm->eng.stop) {
    if (comm->eng.inline_move) {
      /* The application thread moves the data plane: nothing of the
       * backend's is this thread's until it is done (and wakes it). */
      pthread_mutex_unlock(&comm->lock);
      wait_wake(comm);
      pthread_mutex_lock(&comm->lock);
      continue;
    }
    if (comm->eng.rebuilds != rebuilds) { /* ... it did: this epoch's scratch */
      rebuilds = comm->eng.rebuilds;
      pthread_mutex_unlock(&comm->lock);
      have_scratch = scratch_init(&ps, comm->size);
      pthread_mutex_lock(&comm->lock);
      continue;
    }
    ftc_request_t *req = comm->eng.head;
    /* With work in flight, comm->eng.busy is ours: launch more behind it, or
     * look at it; anything else waits until it has landed. */
    if (nfly > 0 && !(req && launchable(comm, req) && nfly < MAX_IN_FLIGHT)) {
      pthread_mutex_unlock(&comm->lock);
      if (reap(comm, fly, &nfly) > 0) spin_end = ftc__now_ns() + (int64_t)comm->spin_us * 1000, nap_us = 20;
      else if (nfly > 0) flights_pause(comm, spin_end, &nap_us);
      pthread_mutex_lock(&comm->lock);
      if (nfly == 0) comm->eng.busy = 0;
      continue;
    }
    if (!req || (comm->eng.busy && nfly == 0)) {
      pthread_mutex_unlock(&comm->lock);
      if (have_scratch)
        idle_wait(comm, &ps);
      else
        wait_wake(comm);
      pthread_mutex_lock(&comm->lock);
      continue;
    }
    comm->eng.head = req->next;
    if (!comm->eng.head) comm->eng.tail = NULL;
    ftc_status_t st = ftc__comm_gate(comm);
    if (req->rebuild_view && !__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE)) st = FTC_OK;
    if (st != FTC_OK) {
      ftc__record_end(comm, req->rec_id, st);
      req_complete(req, st, ftc_last_error());
      continue;
    }
    comm->eng.busy = 1;
    req_set_state(req, REQ_RUNNING);
    if (launchable(comm, req)) {
      pthread_mutex_unlock(&comm->lock);
      launch_req(comm, req, fly, &nfly);
      spin_end = ftc__now_ns() + (int64_t)comm->spin_us * 1000, nap_us = 20;
      pthread_mutex_lock(&comm->lock);
      if (nfly == 0) comm->eng.busy = 0;
      continue;
    }
    p2p_batch_t b = {comm, ps.batch, 0};
    const int p2p = have_scratch && is_p2p(req);
    if (p2p) {
      ps.batch[0] = req;
      b.n = 1;
      gather_p2p_locked(comm, &b, FTC__P2P_CAP(ps.n));
    }
    pthread_mutex_unlock(&comm->lock);
    if (req->rebuild_view) {
      st = do_rebuild(comm, req->rebuild_view);
      have_scratch = scratch_init(&ps, comm->size);
    } else if (p2p) {
      int64_t deadline = INT64_MAX;
      for (int i = 0; i < b.n; i++) {
        int64_t d = request_deadline(comm, ps.batch[i]);
        if (d < deadline) deadline = d;
      }
      st = execute_p2p(comm, &b, ps.ops, FTC__P2P_CAP(ps.n), deadline);
    } else {
      st = execute(comm, &req->op, req->seq, req->rec_id, request_deadline(comm, req), 0);
    }
    pthread_mutex_lock(&comm->lock);
    comm->eng.busy = 0;
    if (!p2p) req_complete(req, st, ftc_last_error());
    for (int i = 0; i < b.n; i++) req_complete(ps.batch[i], st, ftc_last_error());
  }
  pthread_mutex_unlock(&comm->lock);
  /* Destroyed with collectives in flight: they end aborted. */
  for (int i = 0; i < nfly; i++)
    land(comm, &fly[i], FTC_ERR_ABORTED, "the communicator was destroyed");
  scratch_free(&ps);
  return NULL;
}

ftc_status_t ftc__engine_start(ftc_comm_t *comm) {
  int rc = pthread_create(&comm->eng.thread, NULL, progress_main, comm);
  if (rc != 0) return ftc__error(FTC_ERR_SYSTEM, "starting the progress thread: %s", strerror(rc));
  comm->eng.thread_started = 1;
  return FTC_OK;
}

void ftc__engine_stop(ftc_comm_t *comm) {
  if (!comm->eng.thread_started) return;
  pthread_mutex_lock(&comm->lock);
  comm->eng.stop = 1;
  if (comm->eng.busy || comm->eng.head) {
    int expected = 0;
    __atomic_compare_exchange_n(&comm->interrupt, &expected, (int)FTC_ERR_ABORTED, 0,
                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    if (comm->bh) comm->be->interrupt(comm->bh);
  }
  ftc__engine_drain_locked(comm, FTC_ERR_ABORTED, "the communicator was destroyed");
  pthread_mutex_unlock(&comm->lock);
  ftc__engine_wake(comm);
  pthread_join(comm->eng.thread, NULL);
  comm->eng.thread_started = 0;
}

/* ---- public request calls ---- */

ftc_status_t ftc_wait(ftc_request_t *req, int timeout_ms) {
  if (!req) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "req is NULL");
  ftc_status_t ast = ftc__check_timeout("ftc_wait", timeout_ms);
  if (ast != FTC_OK) return ast;
  if (__atomic_load_n(&req->state, __ATOMIC_ACQUIRE) == REQ_DONE) {
    ftc_status_t st = req->status;
    return st == FTC_OK ? FTC_OK : ftc__error(st, "%s", req->err);
  }
  ftc_comm_t *comm = req->comm;
  int64_t deadline;
  if (timeout_ms == FTC_TIMEOUT_INFINITE)
    deadline = INT64_MAX;
  else if (timeout_ms == FTC_TIMEOUT_DEFAULT)
    deadline = ftc__now_ns() + timeout_ns_of(comm, FTC_TIMEOUT_DEFAULT) + WAIT_GRACE_NS;
  else
    deadline = ftc__now_ns() + (int64_t)timeout_ms * 1000000LL;
  return wait_req(req, deadline, comm->spin_us);
}

ftc_status_t ftc_test(ftc_request_t *req, int *done) {
  if (!req || !done) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "req and done must not be NULL");
  if (__atomic_load_n(&req->state, __ATOMIC_ACQUIRE) != REQ_DONE) {
    *done = 0;
    return FTC_OK;
  }
  *done = 1;
  pthread_mutex_lock(&req->mu);
  ftc_status_t st = req->status;
  char err[sizeof(req->err)];
  memcpy(err, req->err, sizeof(err));
  pthread_mutex_unlock(&req->mu);
  return st == FTC_OK ? FTC_OK : ftc__error(st, "%s", err);
}

ftc_status_t ftc_request_on_complete(ftc_request_t *req, ftc_request_callback_t fn, void *arg) {
  if (!req || !fn) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "req and fn must not be NULL");
  pthread_mutex_lock(&req->mu);
  if (req->cb_set) {
    pthread_mutex_unlock(&req->mu);
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "the request has a completion callback already (one per request)");
  }
  req->cb_set = 1;
  if (__atomic_load_n(&req->state, __ATOMIC_ACQUIRE) != REQ_DONE) {
    req->cb = fn;
    req->cb_arg = arg;
    pthread_mutex_unlock(&req->mu);
    return FTC_OK;
  }
  pthread_mutex_unlock(&req->mu);
  req_callback(req, fn, arg); /* done already: here, before returning */
  ftc__error_clear();
  return FTC_OK;
}

void ftc_request_free(ftc_request_t *req) {
  if (req) req_unref(req);
}
