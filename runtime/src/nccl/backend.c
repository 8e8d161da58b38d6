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
 * returns early when *host->interrupt is set, so interrupt() has nothing to
 * wake. Buffers are device pointers; collectives run on the stream given
 * with ftc_comm_set_stream (default: the wrapper's own).
 *
 * NCCL does not say which peer failed (ncclRemoteError, or a hang); the
 * coordinator does: a member of the epoch that a newer epoch leaves out has
 * departed (its session closed, or its heartbeats stopped, or the ranks'
 * reports convicted it). A failed collective names it in its status
 * (waiting up to FTCOMM_NCCL_BLAME_MS for that announcement after a lost
 * peer or a timeout), and
 * failed_peer() answers it, as the TCP backend answers the peer whose
 * connection broke.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/backend.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_param.h"
#include "ftc_time.h"
#include "nccl/nccl_backend.h"
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

/* FTC_OK when NCCL (or RCCL) and its runtime load (once per process) and,
 * with need_device, the runtime sees a GPU; else the status and
 * ftc_last_error() of what is missing (FTC_ERR_LIBRARY_NOT_FOUND names the
 * files looked for). */
static ftc_status_t lib_probe(int need_device) {
  ftc__nccl_lib_t *lib;
  ftc_status_t st = lib_get(&lib);
  if (st != FTC_OK) return st;
  if (need_device && ftc__nccl_lib_info(lib)->devices < 1)
    return ftc__error(FTC_ERR_NOT_SUPPORTED, "NCCL loaded, but the %s runtime (%s) sees no GPU",
                      ftc__nccl_lib_info(lib)->rccl ? "HIP" : "CUDA",
                      ftc__nccl_lib_info(lib)->runtime);
  return FTC_OK;
}

static void nccl_describe(char *buf, size_t len) {
  ftc__nccl_lib_t *lib;
  if (lib_get(&lib) == FTC_OK)
    ftc__nccl_describe(lib, buf, len);
  else
    snprintf(buf, len, "nccl (not loaded)");
}

/* Whether this host may have a GPU: NVIDIA's control device (a container
 * gets it with the GPUs) or its loaded driver (/proc/driver/nvidia: on a
 * host where no process has used the GPU yet the device nodes may not
 * exist, libcuda makes them through nvidia-modprobe), WSL's GPU
 * paravirtualisation device, or ROCm's kernel fusion driver. */
static const char *const gpu_nodes[] = {"/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg",
                                        "/dev/kfd"};

static int gpu_device_node(void) {
  for (size_t i = 0; i < sizeof(gpu_nodes) / sizeof(gpu_nodes[0]); i++)
    if (access(gpu_nodes[i], F_OK) == 0) return 1;
  return 0;
}

/* The seam's probe. FTCOMM_BACKEND=auto: NCCL if it loads and its runtime
 * sees a GPU. The core runs it while the coordinator answers its hello (a
 * joiner's path); once per process, the library's answer is kept. Without
 * a GPU device node no runtime sees a GPU, so auto passes NCCL by without
 * loading it: four failing dlopen calls less (each a walk over the library
 * path) in every ftc_comm_create, a joiner's included. A library named in
 * FTCOMM_NCCL_LIBRARY or FTCOMM_CUDA_RUNTIME_LIBRARY is always tried (it
 * may be a stand-in). */
static ftc_status_t nccl_probe(int auto_pick) {
  if (!auto_pick) return lib_probe(0);
  const char *nl = ftc__param_str(FTC_P_NCCL_LIBRARY);
  const char *rl = ftc__param_str(FTC_P_CUDA_RUNTIME_LIBRARY);
  if (!(nl && *nl) && !(rl && *rl) && !gpu_device_node())
    return ftc__error(FTC_ERR_NOT_SUPPORTED,
                      "none of %s, %s, %s, %s here (FTCOMM_BACKEND=nccl or FTCOMM_NCCL_LIBRARY "
                      "loads NCCL anyway)",
                      gpu_nodes[0], gpu_nodes[1], gpu_nodes[2], gpu_nodes[3]);
  return lib_probe(1);
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
  const ftc__backend_host_t *host;
  uint64_t epoch;
  int size;
  uint64_t *ids;   /* [size]: the epoch's member ids, by rank */
  int *slots;      /* [size] */
  int culprit;     /* atomic: rank named by the coordinator after a failure, -1 none */
  uint64_t culprit_epoch; /* the epoch that left it out (written before culprit) */
} nbh_t;

static void nbh_free(nbh_t *h) {
  if (!h) return;
  ftc__free(h->ids);
  ftc__free(h->slots);
  ftc__free(h);
}

static int64_t blame_ms(void) {
  static int64_t ms = -1;
  int64_t v = __atomic_load_n(&ms, __ATOMIC_ACQUIRE);
  if (v < 0) {
    if (ftc__param_int(FTC_P_NCCL_BLAME_MS, &v) != FTC_OK) v = 1000;
    __atomic_store_n(&ms, v, __ATOMIC_RELEASE);
  }
  return v;
}

/* The lowest rank of h's epoch that view v leaves out, -1 when none. */
static int left_out(const nbh_t *h, const ftc__view_t *v) {
  for (int r = 0; r < h->size; r++) {
    int found = 0;
    for (int i = 0; i < v->size && !found; i++) found = v->members[i].member_id == h->ids[r];
    if (!found) return r;
  }
  return -1;
}

/* The rank of h's epoch the coordinator has dropped, waiting up to wait_ms
 * for an epoch that drops one; -1 when none did (*in_epoch: that epoch). */
static int departed(nbh_t *h, int64_t wait_ms, uint64_t *in_epoch) {
  ftc__member_t *m = h->host->member;
  if (!m) return -1;
  int64_t deadline = ftc__deadline_ns(wait_ms);
  uint64_t after = h->epoch;
  for (;;) {
    int64_t left_ms = (deadline - ftc__now_ns()) / 1000000;
    ftc__view_t *v = NULL;
    if (ftc__member_latest_epoch(m) <= after && left_ms <= 0) return -1;
    if (ftc__member_wait_view(m, after, left_ms > 0 ? (int)left_ms : 0, &v) != FTC_OK || !v)
      return -1;
    int r = left_out(h, v);
    int same = r < 0 && v->size == h->size; /* the next epoch keeps everyone */
    after = v->epoch;
    ftc__view_free(v);
    if (r >= 0) {
      *in_epoch = after;
      return r;
    }
    if (same) return -1; /* nobody was dropped: no need to wait on */
  }
}

static void note_culprit(nbh_t *h, int r, uint64_t epoch) {
  uint64_t none = 0;
  if (__atomic_compare_exchange_n(&h->culprit_epoch, &none, epoch, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE))
    __atomic_store_n(&h->culprit, r, __ATOMIC_RELEASE);
}

/* A failed collective: name the member the coordinator dropped in its
 * status. The epoch is failed first, so that the watchdog reports it (the
 * coordinator may need that report to convict a hung rank). */
static ftc_status_t blame(nbh_t *h, ftc_status_t st) {
  if (!h->host->member || (st != FTC_ERR_PEER_LOST && st != FTC_ERR_TIMEOUT &&
                           st != FTC_ERR_REVOKED && st != FTC_ERR_BACKEND))
    return st;
  char msg[512];
  snprintf(msg, sizeof(msg), "%s", ftc_last_error());
  h->host->fail(h->host->ctx, st, msg);
  uint64_t epoch = 0;
  int r = __atomic_load_n(&h->culprit, __ATOMIC_ACQUIRE);
  /* A lost peer's session closes with it: its announcement is near. After a
   * timeout, a hung (silent) member is convicted as soon as the reports of
   * the epoch's failure (ours went with host->fail) reach the
   * coordinator: wait for that too. A revoke or a backend error only looks. */
  int64_t wait_ms = st == FTC_ERR_PEER_LOST || st == FTC_ERR_TIMEOUT ? blame_ms() : 0;
  if (r < 0 && (r = departed(h, wait_ms, &epoch)) >= 0)
    note_culprit(h, r, epoch);
  if (r < 0)
    return ftc__error(st, "%s (the coordinator has dropped no member of epoch %llu yet)", msg,
                      (unsigned long long)h->epoch);
  return ftc__error(st, "%s; rank %d (slot %d) is gone: the coordinator's epoch %llu leaves it out",
                    msg, r, h->slots[r],
                    (unsigned long long)__atomic_load_n(&h->culprit_epoch, __ATOMIC_ACQUIRE));
}

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

static ftc_status_t nccl_connect(void *state, const ftc__backend_host_t *host,
                                 const ftc__view_t *view, int listen_fd, void *prev,
                                 ftc_status_t prev_error, void **out) {
  ftc__nccl_lib_t *lib;
  (void)state, (void)listen_fd;
  ftc_status_t st = lib_get(&lib);
  *out = NULL;
  if (st != FTC_OK) return st;
  nbh_t *old = prev;
  nstate_t *s = old ? old->s : ftc__calloc(1, sizeof *s);
  nbh_t *h = ftc__calloc(1, sizeof *h);
  if (h) {
    h->ids = ftc__calloc((size_t)view->size, sizeof *h->ids);
    h->slots = ftc__calloc((size_t)view->size, sizeof *h->slots);
  }
  if (!s || !h || !h->ids || !h->slots) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "allocating the NCCL backend's state");
    goto out_free;
  }
  ftc__nccl_xchg_t x = host->member ? ftc__nccl_xchg_member(host->member)
                                    : (ftc__nccl_xchg_t){lone_publish, lone_fetch, (void *)view};
  ftc__nccl_opts_t o = {FTC__NCCL_DEVICE_CURRENT, host->connect_timeout_ms, s->stream,
                        host->interrupt};
  /* A failed epoch is stopped before it is shrunk (revoke where there is one). */
  if (s->c && ftc__nccl_comm_error(s->c) != FTC_OK)
    ftc__nccl_comm_revoke(s->c, ftc__nccl_comm_error(s->c));
  else if (s->c && prev_error != FTC_OK)
    ftc__nccl_comm_revoke(s->c, prev_error);
  FTC_CHECK_GOTO(ftc__nccl_enter_epoch(lib, &s->c, view, &x, &o), st, out_free);
  h->s = s, h->host = host, h->epoch = view->epoch;
  h->size = view->size, h->culprit = -1;
  for (int r = 0; r < view->size; r++)
    h->ids[r] = view->members[r].member_id, h->slots[r] = view->members[r].slot;
  s->current = h;
  s->refs++;
  *out = h;
  return FTC_OK;
out_free:
  nbh_free(h);
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
  if (st != FTC_OK) return blame(h, st);
  st = ftc__nccl_comm_wait(h->s->c, &w, deadline_ns);
  if (st == FTC_OK) ftc__nccl_work_release(h->s->c, &w);
  else ftc__nccl_work_discard(h->s->c, &w);
  return blame(h, st);
}

/* Asynchronous requests: launched back to back on the stream, completions
 * discovered later by the core's progress thread (backend.h). */
static ftc_status_t nccl_launch(void *hv, const ftc__op_t *op, uint64_t rec_id, void **work) {
  nbh_t *h = hv;
  ftc__nccl_work_t *w = ftc__malloc(sizeof *w);
  *work = NULL;
  if (!w) return ftc__error(FTC_ERR_NO_MEMORY, "allocating an NCCL work");
  ftc_status_t st = ftc__nccl_comm_launch_rec(h->s->c, op, h->s->stream, h->host->rec, rec_id, w);
  if (st != FTC_OK) {
    ftc__free(w);
    return blame(h, st);
  }
  *work = w;
  return FTC_OK;
}

static ftc_status_t nccl_poll(void *hv, void *work, int64_t deadline_ns, int *done) {
  nbh_t *h = hv;
  return blame(h, ftc__nccl_work_check(h->s->c, work, deadline_ns, done));
}

static void nccl_release(void *hv, void *work, int reuse) {
  nbh_t *h = hv;
  if (reuse) ftc__nccl_work_release(h->s->c, work);
  else ftc__nccl_work_discard(h->s->c, work); /* it may still be queued on the stream */
  ftc__free(work);
}

static ftc_status_t nccl_run_p2p(void *hv, const ftc__op_t **ops, int n, int cap,
                                 int64_t deadline_ns, ftc__backend_more_fn more, void *ctx,
                                 int wake_fd) {
  (void)wake_fd;
  nbh_t *h = hv;
  /* One NCCL group for what is queued; then whatever was queued meanwhile. */
  while (n > 0) {
    ftc__nccl_work_t w;
    ftc_status_t st = ftc__nccl_comm_launch_p2p(h->s->c, (const ftc__op_t *const *)ops, n,
                                                h->s->stream, &w);
    if (st != FTC_OK) return blame(h, st);
    st = ftc__nccl_comm_wait(h->s->c, &w, deadline_ns);
    if (st != FTC_OK) {
      ftc__nccl_work_discard(h->s->c, &w);
      return blame(h, st);
    }
    ftc__nccl_work_release(h->s->c, &w);
    if (!more) break;
    n = more(ctx, ops, n, cap, NULL); /* all of them done */
  }
  return FTC_OK;
}

static void nccl_interrupt(void *hv) {
  (void)hv; /* the waits read *host->interrupt themselves, within one poll */
}

static void nccl_close(void *hv, int planned) {
  nbh_t *h = hv;
  nstate_t *s = h->s;
  if (s->current == h) {
    s->current = NULL;
    if (!planned && s->c) ftc__nccl_comm_abort(s->c);
  }
  nbh_free(h);
  state_put(s);
}

/* NCCL does not name the peer: the one the coordinator dropped, if it has
 * (already known, or announced by now; no wait: under the communicator's
 * lock). */
static int nccl_failed_peer(const void *hv) {
  nbh_t *h = (nbh_t *)hv;
  int r = __atomic_load_n(&h->culprit, __ATOMIC_ACQUIRE);
  uint64_t epoch;
  if (r < 0 && (r = departed(h, 0, &epoch)) >= 0) note_culprit(h, r, epoch);
  return r;
}

/* Fault injection (drop:R@SEQ): NCCL has no connection of ours to one peer,
 * so the nearest fault is this rank's communicator failing under its peers:
 * abort it; this rank's next collective fails, its peers see a lost peer. */
static void nccl_drop_peer(void *hv, int rank) {
  nbh_t *h = hv;
  (void)rank;
  if (h->s->current == h && h->s->c) ftc__nccl_comm_abort(h->s->c);
}

/* The stream collectives run on from now (ftc_comm_set_stream), for every
 * epoch of the communicator. */
static void nccl_set_stream(void *hv, void *stream) {
  nbh_t *h = hv;
  h->s->stream = stream;
}

const ftc__backend_ops_t ftc__backend_nccl = {
    .name = "nccl",
    .no_bitwise = "NCCL has no bitwise reductions (its ncclRedOp_t has sum, prod, min, max, avg and "
                  "premultiplied sum)",
    .probe = nccl_probe,
    .version = nccl_describe,
    .describe = nccl_describe,
    .connect = nccl_connect,
    .set_stream = nccl_set_stream,
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
