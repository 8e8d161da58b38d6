/*
 * backend.c - the NCCL backend behind the core's seam (core/backend.h):
 * FTCOMM_BACKEND=nccl, or auto on a host where NCCL loads and sees a GPU.
 *
 * One NCCL communicator wrapper per ftcomm communicator lives across its
 * epochs (shrink and grow need the previous one); each epoch gets a small
 * handle pointing at it. connect() moves the wrapper to the new view in
 * place (revoking a failed epoch first) and returns the new handle, so the
 * old handle's close() only lets go of it; the current handle's close()
 * frees the wrapper (finalize and destroy when healthy, abort otherwise).
 * Unique ids travel through the communicator's membership session. A wait
 * returns early when comm->interrupt is set, so interrupt() has nothing to
 * wake. Buffers are device pointers; collectives run on the stream given
 * with ftc_comm_set_stream (default: the wrapper's own).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/backend.h"
#include "core/comm.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_time.h"
#include "nccl/nccl_backend.h"
#include "nccl/nccl_core.h"
#include "nccl/nccl_member.h"

/* The library, opened once per process on first use. */
static pthread_mutex_t lib_mu = PTHREAD_MUTEX_INITIALIZER;
static ftc__nccl_lib_t *g_lib;
static ftc_status_t g_lib_st = FTC_OK;
static char g_lib_err[512];
static int g_lib_tried;

static ftc_status_t lib_get(ftc__nccl_lib_t **out) {
  pthread_mutex_lock(&lib_mu);
  if (!g_lib_tried) {
    g_lib_tried = 1;
    g_lib_st = ftc__nccl_lib_open(NULL, NULL, &g_lib);
    if (g_lib_st != FTC_OK) snprintf(g_lib_err, sizeof g_lib_err, "%s", ftc_last_error());
  }
  ftc_status_t st = g_lib_st;
  *out = g_lib;
  pthread_mutex_unlock(&lib_mu);
  return st == FTC_OK ? FTC_OK : ftc__error(st, "%s", g_lib_err);
}

ftc_status_t ftc__nccl_backend_probe(int need_device) {
  ftc__nccl_lib_t *lib;
  ftc_status_t st = lib_get(&lib);
  if (st != FTC_OK) return st;
  if (need_device && ftc__nccl_lib_info(lib)->devices < 1)
    return ftc__error(FTC_ERR_NOT_SUPPORTED, "NCCL loaded, but the %s runtime (%s) sees no GPU",
                      ftc__nccl_lib_info(lib)->rccl ? "HIP" : "CUDA",
                      ftc__nccl_lib_info(lib)->runtime);
  return FTC_OK;
}

void ftc__nccl_backend_describe(char *buf, size_t len) {
  ftc__nccl_lib_t *lib;
  if (lib_get(&lib) == FTC_OK)
    ftc__nccl_describe(lib, buf, len);
  else
    snprintf(buf, len, "nccl (not loaded)");
}

/* Shared by the handles of one communicator's epochs. */
typedef struct nstate {
  ftc__nccl_comm_t *c;   /* NULL until the first connect succeeds */
  struct nbh *current;   /* the handle of the wrapper's epoch */
  void *stream;          /* from ftc_comm_set_stream; NULL: the wrapper's own */
  int refs;              /* handles alive */
} nstate_t;

typedef struct nbh {
  nstate_t *s;
  ftc_comm_t *comm;
  uint64_t epoch;
} nbh_t;

static void state_put(nstate_t *s) {
  if (--s->refs > 0) return;
  ftc__nccl_comm_free(s->c);
  ftc__free(s);
}

/* The exchange through the membership session; without one (a communicator
 * built from a view by a test) only a one-rank epoch can be made. */
static ftc_status_t lone_publish(void *arg, uint64_t epoch, const char *blob) {
  (void)blob;
  const ftc__view_t *v = arg;
  if (v->size == 1) return FTC_OK;
  return ftc__error(FTC_ERR_NOT_SUPPORTED, "epoch %llu: NCCL unique ids need a coordinator",
                    (unsigned long long)epoch);
}
static ftc_status_t lone_fetch(void *arg, uint64_t epoch, char *blob, size_t len, int64_t dl) {
  (void)arg, (void)blob, (void)len, (void)dl;
  return ftc__error(FTC_ERR_NOT_SUPPORTED, "epoch %llu: NCCL unique ids need a coordinator",
                    (unsigned long long)epoch);
}

static ftc_status_t nccl_connect(ftc_comm_t *comm, const ftc__view_t *view, void **out) {
  ftc__nccl_lib_t *lib;
  ftc_status_t st = lib_get(&lib);
  *out = NULL;
  if (st != FTC_OK) return st;
  nbh_t *old = comm->bh;
  nstate_t *s = old ? old->s : ftc__calloc(1, sizeof *s);
  nbh_t *h = ftc__calloc(1, sizeof *h);
  if (!s || !h) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "allocating the NCCL backend's state");
    goto out_free;
  }
  ftc__nccl_xchg_t x = comm->member ? ftc__nccl_xchg_member(comm->member)
                                    : (ftc__nccl_xchg_t){lone_publish, lone_fetch, (void *)view};
  ftc__nccl_opts_t o = {FTC__NCCL_DEVICE_CURRENT, comm->connect_timeout_ms, s->stream,
                        &comm->interrupt};
  /* A failed epoch is stopped before it is shrunk (revoke where there is one). */
  if (s->c && ftc__nccl_comm_error(s->c) != FTC_OK)
    ftc__nccl_comm_revoke(s->c, ftc__nccl_comm_error(s->c));
  else if (s->c && __atomic_load_n(&comm->error, __ATOMIC_ACQUIRE))
    ftc__nccl_comm_revoke(s->c, (ftc_status_t)__atomic_load_n(&comm->error, __ATOMIC_ACQUIRE));
  FTC_CHECK_GOTO(ftc__nccl_enter_epoch(lib, &s->c, view, &x, &o), st, out_free);
  h->s = s, h->comm = comm, h->epoch = view->epoch;
  s->current = h;
  s->refs++;
  *out = h;
  return FTC_OK;
out_free:
  ftc__free(h);
  if (s && !old) {
    ftc__nccl_comm_free(s->c);
    ftc__free(s);
  }
  return st;
}

static ftc_status_t nccl_run(void *hv, const ftc__op_t *op, int64_t deadline_ns) {
  nbh_t *h = hv;
  ftc__nccl_work_t w;
  ftc_status_t st = ftc__nccl_comm_launch(h->s->c, op, h->s->stream, &w);
  if (st != FTC_OK) return st;
  st = ftc__nccl_comm_wait(h->s->c, &w, deadline_ns);
  if (st == FTC_OK) ftc__nccl_work_release(h->s->c, &w);
  return st;
}

/* Asynchronous requests: launched back to back on the stream, completions
 * discovered later by the core's progress thread (backend.h). */
static ftc_status_t nccl_launch(void *hv, const ftc__op_t *op, uint64_t rec_id, void **work) {
  nbh_t *h = hv;
  ftc__nccl_work_t *w = ftc__malloc(sizeof *w);
  *work = NULL;
  if (!w) return ftc__error(FTC_ERR_NO_MEMORY, "allocating an NCCL work");
  ftc_status_t st = ftc__nccl_comm_launch_rec(h->s->c, op, h->s->stream, h->comm->rec, rec_id, w);
  if (st != FTC_OK) {
    ftc__free(w);
    return st;
  }
  *work = w;
  return FTC_OK;
}

static ftc_status_t nccl_poll(void *hv, void *work, int64_t deadline_ns, int *done) {
  nbh_t *h = hv;
  return ftc__nccl_work_check(h->s->c, work, deadline_ns, done);
}

static void nccl_release(void *hv, void *work, int reuse) {
  nbh_t *h = hv;
  /* A work that did not complete may still be queued on the stream: its
   * events stay where they are (the failed epoch's), only ours is freed. */
  if (reuse) ftc__nccl_work_release(h->s->c, work);
  ftc__free(work);
}

static ftc_status_t nccl_run_p2p(void *hv, const ftc__op_t **ops, int n, int cap,
                                 int64_t deadline_ns, ftc__backend_more_fn more, void *ctx,
                                 int wake_fd) {
  (void)wake_fd;
  nbh_t *h = hv;
  int done = 0;
  /* One NCCL group for what is queued; then whatever was queued meanwhile. */
  while (done < n) {
    ftc__nccl_work_t w;
    ftc_status_t st = ftc__nccl_comm_launch_p2p(h->s->c, (const ftc__op_t *const *)ops + done,
                                                n - done, h->s->stream, &w);
    if (st != FTC_OK) return st;
    st = ftc__nccl_comm_wait(h->s->c, &w, deadline_ns);
    if (st != FTC_OK) return st;
    ftc__nccl_work_release(h->s->c, &w);
    done = n;
    if (more && n < cap) n = more(ctx, ops, n, cap);
  }
  return FTC_OK;
}

static void nccl_interrupt(void *hv) {
  (void)hv; /* the waits read comm->interrupt themselves, within one poll */
}

static void nccl_close(void *hv, int planned) {
  nbh_t *h = hv;
  nstate_t *s = h->s;
  if (s->current == h) {
    s->current = NULL;
    if (!planned && s->c) ftc__nccl_comm_abort(s->c);
  }
  ftc__free(h);
  state_put(s);
}

static int nccl_failed_peer(const void *hv) {
  (void)hv; /* NCCL does not name the peer; the coordinator's evidence rule does */
  return -1;
}

/* Fault injection (drop:R@SEQ): NCCL has no connection of ours to one peer,
 * so the nearest fault is this rank's communicator failing under its peers:
 * abort it; this rank's next collective fails, its peers see a lost peer. */
static void nccl_drop_peer(void *hv, int rank) {
  nbh_t *h = hv;
  (void)rank;
  if (h->s->current == h && h->s->c) ftc__nccl_comm_abort(h->s->c);
}

const ftc__backend_ops_t ftc__backend_nccl = {
    .name = "nccl",
    .connect = nccl_connect,
    .run = nccl_run,
    .run_p2p = nccl_run_p2p,
    .launch = nccl_launch,
    .poll = nccl_poll,
    .release = nccl_release,
    .interrupt = nccl_interrupt,
    .close = nccl_close,
    .failed_peer = nccl_failed_peer,
    .drop_peer = nccl_drop_peer,
};

FTC_API ftc_status_t ftc_comm_set_stream(ftc_comm_t *comm, void *stream) {
  if (!comm) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_set_stream: NULL communicator");
  if (comm->be != &ftc__backend_nccl)
    return ftc__error(FTC_ERR_NOT_SUPPORTED, "ftc_comm_set_stream: the %s backend has no streams",
                      comm->be ? comm->be->name : "?");
  pthread_mutex_lock(&comm->lock);
  nbh_t *h = comm->bh;
  if (h) h->s->stream = stream;
  pthread_mutex_unlock(&comm->lock);
  if (!h) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_set_stream: no epoch yet");
  return FTC_OK;
}

FTC_API ftc_status_t ftc_comm_backend(const ftc_comm_t *comm, char *buf, size_t len) {
  if (!comm || !buf || !len)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_backend: NULL argument");
  if (comm->be == &ftc__backend_nccl)
    ftc__nccl_backend_describe(buf, len);
  else
    snprintf(buf, len, "%s", comm->be ? comm->be->name : "?");
  return FTC_OK;
}
