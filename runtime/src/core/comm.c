/*
 * comm.c - the communicator's lifecycle: configuration, the data-plane
 * listener, joining the job through the membership client, bringing the
 * backend's data plane up for a view, the failed/aborted state machine, the query
 * calls, destroy. The data plane is a backend found by name in the registry
 * (core/backend.h). ftc__comm_create_from_view() is the same bring-up without
 * a coordinator, for tests that exchange addresses themselves.
 *
 * States: healthy (error 0) -> failed (error = the first failure; new
 * collectives get FTC_ERR_REVOKED) -> healthy again when a rebuild for a new
 * epoch succeeds. Aborted is terminal: everything gets FTC_ERR_ABORTED.
 */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/comm.h"
#include "ftc_alloc.h"
#include "ftc_assert.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftc_time.h"

ftc__view_t *ftc__view_copy(const ftc__view_t *v) {
  ftc__view_t *c = ftc__calloc(1, sizeof(*c));
  if (!c) return NULL;
  *c = *v;
  c->backend_blob = NULL;
  c->members = ftc__calloc((size_t)v->size, sizeof(*c->members));
  if (!c->members) {
    ftc__free(c);
    return NULL;
  }
  memcpy(c->members, v->members, (size_t)v->size * sizeof(*c->members));
  if (v->backend_blob && !(c->backend_blob = ftc__strdup(v->backend_blob))) {
    ftc__free(c->members);
    ftc__free(c);
    return NULL;
  }
  return c;
}

static void view_copy_free(ftc__view_t *v) {
  if (!v) return;
  ftc__free(v->members);
  ftc__free(v->backend_blob);
  ftc__free(v);
}

static ftc_status_t copy_str(ftc_comm_t *c, int slot, const char **field) {
  if (!*field) return FTC_OK;
  c->strs[slot] = ftc__strdup(*field);
  if (!c->strs[slot]) return ftc__error(FTC_ERR_NO_MEMORY, "copying the configuration");
  *field = c->strs[slot];
  return FTC_OK;
}

static void comm_free(ftc_comm_t *c) {
  if (!c) return;
  /* A child's watchdog stops while it is still one: it writes no failure
   * dump of its own (recover.c, wd_failure). */
  ftc__watchdog_stop(c);
  ftc__split_unlink(c);
  if (c->member) ftc__member_set_notify(c->member, -1);
  if (c->member) ftc__member_set_view_notify(c->member, -1);
  ftc__engine_stop(c);
  if (c->bh) c->be->close(c->bh, !__atomic_load_n(&c->error, __ATOMIC_ACQUIRE));
  if (c->be && c->be->destroy && c->bs) c->be->destroy(c->bs);
  ftc_rec_destroy(c->rec);
  if (c->member) ftc__member_close(c->member);
  if (c->listen_fd >= 0) close(c->listen_fd);
  if (c->eng.wake_fd >= 0) close(c->eng.wake_fd);
  if (c->wd.fd >= 0) close(c->wd.fd);
  if (c->intr_fd >= 0) close(c->intr_fd);
  view_copy_free(c->view);
  view_copy_free(c->prev_view);
  pthread_mutex_destroy(&c->wd.cap_mu);
  pthread_mutex_destroy(&c->wd.mu);
  ftc__free(c->p2p_seq);
  ftc__free(c->tree.members);
  for (size_t i = 0; i < sizeof(c->strs) / sizeof(c->strs[0]); i++) ftc__free(c->strs[i]);
  pthread_mutex_destroy(&c->lock);
  ftc__free(c);
}

/* The host's fail(): a backend that learns of a failure itself. */
static void host_fail(void *ctx, ftc_status_t why, const char *detail) {
  ftc__comm_fail(ctx, why, detail);
}

/* Under FTCOMM_BACKEND=auto a communicator starts on the registry's last
 * backend, the one that runs everywhere (it has no probe), and takes an
 * earlier one when its probe says so (comm_probe_auto). */
static const ftc__backend_ops_t *auto_start(void) {
  const ftc__backend_ops_t *last = NULL;
  for (int i = 0; ftc__backends[i]; i++) last = ftc__backends[i];
  return last;
}

/* Make be the communicator's backend: its state, and where the allreduce
 * algorithm starts. */
static ftc_status_t comm_use_backend(ftc_comm_t *c, const ftc__backend_ops_t *be) {
  void *bs = NULL;
  ftc_status_t st;
  if (be->open && (st = be->open(&c->host, &bs)) != FTC_OK) return st;
  if (c->be && c->be->destroy && c->bs) c->be->destroy(c->bs);
  c->be = be;
  c->bs = bs;
  c->allreduce_algo = be->allreduce_algo ? be->allreduce_algo(bs) : FTC_ALGO_AUTO;
  return FTC_OK;
}

/* Resolve the configuration and allocate a communicator with no view yet. */
static ftc_status_t comm_new(const ftc_config_t *cfg_in, ftc_comm_t **out) {
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  ftc_status_t st;
  *out = NULL;
  if (cfg_in && (st = ftc__config_import(cfg_in, &cfg)) != FTC_OK) return st;
  if ((st = ftc_config_resolve(&cfg)) != FTC_OK) return st;
  /* The data plane: the backend FTCOMM_BACKEND names (why it cannot run
   * here is the answer), or under auto the first that probes fine
   * (comm_probe_auto, before the first connect). */
  const ftc__backend_ops_t *be = auto_start();
  if (strcasecmp(cfg.backend, "auto") != 0) {
    if (!(be = ftc__backend_find(cfg.backend)))
      return ftc__error(FTC_ERR_CONFIG, "FTCOMM_BACKEND=\"%s\": no such backend", cfg.backend);
    if (be->probe && (st = be->probe(0)) != FTC_OK) return st;
  }
  ftc_comm_t *c = ftc__calloc(1, sizeof(*c));
  if (!c) return ftc__error(FTC_ERR_NO_MEMORY, "allocating a communicator");
  c->listen_fd = -1;
  c->eng.wake_fd = -1;
  c->wd.fd = -1;
  c->intr_fd = -1;
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->wd.mu, NULL);
  pthread_mutex_init(&c->wd.cap_mu, NULL);
  ftc__fault_init();
  c->cfg = cfg;
  const char **fields[] = {&c->cfg.job, &c->cfg.coordinator, &c->cfg.token, &c->cfg.backend,
                           &c->cfg.bind_host, &c->cfg.advertise_host, &c->cfg.dump_dir};
  for (int i = 0; i < 7; i++)
    if ((st = copy_str(c, i, fields[i])) != FTC_OK) goto out_free;
  int64_t spin;
  if ((st = ftc__param_int(FTC_P_SPIN_US, &spin)) != FTC_OK) goto out_free;
  c->spin_us = (int)spin;
  int64_t defer;
  if ((st = ftc__param_int(FTC_P_REPORT_DEFER_MS, &defer)) != FTC_OK) goto out_free;
  c->report_defer_ms = (int)defer;
  int64_t spares;
  if ((st = ftc__param_int(FTC_P_SPARE_CONNECTIONS, &spares)) != FTC_OK) goto out_free;
  c->spares = (int)spares;
  c->host = (ftc__backend_host_t){.interrupt = &c->interrupt,
                                  .intr_fd = &c->intr_fd,
                                  .token = c->cfg.token,
                                  .connect_timeout_ms = c->cfg.connect_timeout_ms,
                                  .fail = host_fail,
                                  .ctx = c};
  if ((st = comm_use_backend(c, be)) != FTC_OK) goto out_free;
  c->connect_timeout_ms = c->cfg.connect_timeout_ms;
  c->joiner_pending = cfg.joiner == 1;
  c->eng.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  c->wd.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  c->intr_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->eng.wake_fd < 0 || c->wd.fd < 0 || c->intr_fd < 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "eventfd: %s", strerror(errno));
    goto out_free;
  }
  *out = c;
  return FTC_OK;

out_free:
  comm_free(c);
  return st;
}

/* FTCOMM_BACKEND=auto: the registry's first backend that probes fine
 * (a device backend where it loads and sees a GPU), else the one it
 * started on. ftc_comm_create runs it while the coordinator answers its
 * hello (a joiner's path: a probe's dlopen calls take a walk over the
 * library path each). A backend without a listener of its own closes the
 * one the hello advertised: a peer that dials it is refused at once. */
static void comm_probe_auto(ftc_comm_t *c) {
  if (strcasecmp(c->cfg.backend, "auto") != 0) return;
  for (int i = 0; ftc__backends[i]; i++) {
    const ftc__backend_ops_t *b = ftc__backends[i];
    if (b == c->be) break;
    if (b->probe && b->probe(1) != FTC_OK) {
      FTC_INFO(FTC_SUB_INIT, "FTCOMM_BACKEND=auto: no %s: %s", b->name, ftc_last_error());
      continue;
    }
    if (comm_use_backend(c, b) != FTC_OK) {
      FTC_INFO(FTC_SUB_INIT, "FTCOMM_BACKEND=auto: no %s: %s", b->name, ftc_last_error());
      continue;
    }
    if (!b->listen && c->listen_fd >= 0) {
      close(c->listen_fd);
      c->listen_fd = -1;
    }
    break;
  }
  ftc__error_clear(); /* a host without the device backends is no error under auto */
}

static uint64_t comm_id_hash(const char *job) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a of the job name: the same on every rank */
  for (const char *p = job ? job : ""; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ULL;
  return h;
}

int ftc__comm_peer_fd_cap(int size) { return size > 1 ? 2 * size - 2 : 1; }

/* bh's sockets as be->peer_fds lists them, into small (room for 2 * nsmall
 * ints) when they fit, else into an allocation the caller frees (*fds !=
 * small); out of memory, the first nsmall. The ranks follow at *ranks. */
static int peer_list(const ftc__backend_ops_t *be, const void *bh, int size, int *small,
                     int nsmall, int **fds, int **ranks) {
  int cap = ftc__comm_peer_fd_cap(size);
  *fds = small;
  if (cap > nsmall && !(*fds = ftc__malloc(2 * (size_t)cap * sizeof(**fds)))) {
    *fds = small;
    cap = nsmall;
  }
  *ranks = *fds + cap;
  return be->peer_fds(bh, *fds, *ranks, cap);
}

int ftc__comm_top_peer_fd(const ftc__backend_ops_t *be, const void *bh, int size) {
  if (!be->peer_fds || size <= 0) return -1;
  enum { SMALL = 128 };
  int small[2 * SMALL], *fds, *ranks, top = -1;
  int np = peer_list(be, bh, size, small, SMALL, &fds, &ranks);
  for (int i = 0; i < np; i++) top = fds[i] > top ? fds[i] : top;
  if (fds != small) ftc__free(fds);
  return top;
}

int ftc__comm_peer_closed(const ftc__backend_ops_t *be, const void *bh, int size, int rank) {
  if (!be->peer_fds || size <= 0) return 0;
  enum { SMALL = 64 };
  int small[2 * SMALL], *fds, *ranks, closed = 0;
  int np = peer_list(be, bh, size, small, SMALL, &fds, &ranks);
  for (int i = 0; i < np && !closed; i++) {
    if (ranks[i] != rank) continue;
    struct pollfd p = {fds[i], POLLRDHUP, 0};
    closed = poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
  }
  if (fds != small) ftc__free(fds);
  return closed;
}

ftc_status_t ftc__comm_connect_view(ftc_comm_t *comm, const ftc__view_t *view) {
  ftc_status_t st;
  ftc__view_t *copy = ftc__view_copy(view);
  uint64_t *seqs = ftc__calloc(2 * (size_t)view->size, sizeof(*seqs));
  void *bh = NULL;
  if (!copy || !seqs) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "copying the view of epoch %llu", (unsigned long long)view->epoch);
    goto out_free;
  }
  comm->host.connect_timeout_ms = comm->connect_timeout_ms;
  if ((st = comm->be->connect(comm->bs, &comm->host, view, comm->listen_fd, comm->bh,
                              (ftc_status_t)__atomic_load_n(&comm->error, __ATOMIC_ACQUIRE),
                              &bh)) != FTC_OK)
    goto out_free;
  pthread_mutex_lock(&comm->lock);
  void *old = comm->bh;
  ftc__view_t *old_view = comm->view;
  /* A quiet failure's sockets (comm_stop_locked) are shut now if this view
   * does not drop the member blamed for a failure: some peer may still
   * wait on this rank, which only a FIN from here would release (a
   * connection broken between two live ranks). */
  int shut_old = !comm->quiet || !ftc__comm_quiet_covered_locked(comm, view);
  int planned = old && !__atomic_load_n(&comm->error, __ATOMIC_ACQUIRE);
  comm->quiet = 0;
  comm->bh = bh;
  comm->view = copy; /* swapped under the lock: the watchdog reads it */
  /* The new epoch and the old one's failure cleared in one step under the
   * lock: the watchdog reads both under it (recover.c, wd_failure), and
   * read apart they once named the new epoch as the failed one (a report
   * that formed a needless epoch after it). */
  __atomic_store_n(&comm->rank, view->my_rank, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->size, view->size, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->epoch, view->epoch, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->error, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&comm->lock);
  view_copy_free(old_view);
  /* A planned move (a joiner was admitted): peers still between
   * collectives of the old epoch must not take the close for a crash; a
   * backend that retires the old epoch closes it once the new one settled
   * (engine.c, idle_wait). A quiet failure's sockets are not shut at all
   * when the coordinator's view covers it: the peers left them as this
   * rank does. */
  if (old && comm->be->retire)
    comm->be->retire(comm->bs, old, planned, !planned && shut_old);
  else if (old)
    comm->be->close(old, planned);
  if (comm->member) {
    /* The coordinator session closes first if this process dies
     * (membership/member.c, hold_for_exit). */
    int top = ftc__comm_top_peer_fd(comm->be, bh, view->size);
    if (top >= 0) ftc__member_hold_above(comm->member, top);
  }
  ftc__free(comm->p2p_seq);
  comm->p2p_seq = seqs;
  comm->seq = 0;
  comm->settling = 0;
  __atomic_store_n(&comm->settled, 0, __ATOMIC_RELEASE);
  ftc_rec_set_epoch(comm->rec, view->epoch, view->my_rank, view->size);
  if (comm->tree.parent) return FTC_OK; /* the process's identity in dumps is its parent's */
  ftc_rec_process_info_t info = FTC_REC_PROCESS_INFO_INIT;
  info.rank = view->my_rank;
  info.world_size = view->size;
  info.epoch = (int64_t)view->epoch;
  ftc_rec_set_process_info(&info);
  return FTC_OK;

out_free:
  view_copy_free(copy);
  ftc__free(seqs);
  return st;
}

/* Connect for the first view, create the recorder and start the engine. */
static ftc_status_t comm_bring_up(ftc_comm_t *c, const ftc__view_t *view) {
  ftc_status_t st;
  if (!view || view->size < 1 || view->my_rank < 0 || view->my_rank >= view->size || !view->members)
    return ftc__error(FTC_ERR_PROTOCOL, "the view does not include this process (rank %d of %d)",
                      view ? view->my_rank : -1, view ? view->size : 0);
  if (!c->rec &&
      (st = ftc_rec_create(c->cfg.recorder_entries, comm_id_hash(c->cfg.job), "world", view->epoch,
                           view->my_rank, view->size, &c->rec)) != FTC_OK)
    return st;
  c->host.rec = c->rec;
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "rank %d", view->my_rank);
  if (!c->tree.parent) ftc__log_set_prefix(prefix);
  if ((st = ftc__comm_connect_view(c, view)) != FTC_OK) return st;
  if (c->tree.parent) goto out_start;
  ftc_rec_process_info_t info = FTC_REC_PROCESS_INFO_INIT;
  info.job = c->cfg.job;
  info.backend = c->be->name;
  char be_version[256] = "";
  if (c->be->version) {
    c->be->version(be_version, sizeof(be_version));
    info.backend_version = be_version;
  }
  info.dump_dir = c->cfg.dump_dir;
  info.rank = view->my_rank;
  info.world_size = view->size;
  info.epoch = (int64_t)view->epoch;
  ftc_rec_set_process_info(&info);
out_start:
  if ((st = ftc__engine_start(c)) != FTC_OK) return st;
  return ftc__watchdog_start(c);
}

ftc_status_t ftc__comm_create_from_view(const ftc_config_t *cfg, const ftc__view_t *view,
                                        int listen_fd, ftc_comm_t **out) {
  ftc_comm_t *c;
  ftc_status_t st;
  if (!out) {
    close(listen_fd);
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "comm output pointer is NULL");
  }
  *out = NULL;
  if ((st = comm_new(cfg, &c)) != FTC_OK) {
    close(listen_fd);
    return st;
  }
  c->listen_fd = listen_fd;
  comm_probe_auto(c);
  if (!c->be->listen && c->listen_fd >= 0) { /* (the test's listener: this backend has none) */
    close(c->listen_fd);
    c->listen_fd = -1;
  }
  if ((st = comm_bring_up(c, view)) != FTC_OK) goto out_free;
  *out = c;
  return FTC_OK;

out_free:
  comm_free(c);
  return st;
}

ftc_status_t ftc__comm_create_child(ftc_comm_t *parent, const ftc__view_t *view, int listen_fd,
                                    uint64_t comm_id, const char *name, ftc_comm_t **out) {
  ftc_comm_t *c;
  ftc_status_t st;
  ftc_config_t cfg = parent->cfg;
  cfg.backend = parent->be->name; /* (split.c: one with listeners of its own) */
  cfg.joiner = 0; /* a child's members all hold the state it was split with */
  *out = NULL;
  if ((st = comm_new(&cfg, &c)) != FTC_OK) {
    close(listen_fd);
    return st;
  }
  c->listen_fd = listen_fd;
  c->tree.parent = parent; /* linked to the parent's children by the caller (split.c) */
  c->tree.parent_epoch = view->epoch;
  if ((st = ftc_rec_create(c->cfg.recorder_entries, comm_id, name, view->epoch, view->my_rank,
                           view->size, &c->rec)) != FTC_OK)
    goto out_free;
  if ((st = comm_bring_up(c, view)) != FTC_OK) goto out_free;
  *out = c;
  return FTC_OK;

out_free:
  c->tree.parent = NULL; /* (not linked yet) */
  comm_free(c);
  return st;
}

/* While the coordinator answers a hello (this thread has nothing else to do
 * until the welcome): the first epoch's work that needs no view, off a
 * joiner's way from its view to its first collective. The flight recorder
 * (its ring, and the process's dump-signal thread: 0.1 ms on a joiner's
 * way), numbered by the view at the bring-up (ftc_rec_set_epoch); a failure
 * here is the bring-up's to report, which tries again. */
static void comm_prepare(ftc_comm_t *c) {
  if (c->be->prepare) c->be->prepare(c->bs);
  if (!c->rec)
    (void)ftc_rec_create(c->cfg.recorder_entries, comm_id_hash(c->cfg.job), "world", 0,
                         c->cfg.slot, c->cfg.world_size, &c->rec);
}

/* Everything of a communicator's creation that needs no answer from the
 * coordinator: the configuration, the data-plane listener, the session up
 * to its hello (standby: as a member not to be admitted before its join),
 * the backend probe, the recorder. */
static ftc_status_t comm_begin(const ftc_config_t *cfg, int standby, ftc_comm_t **out) {
  ftc_comm_t *c;
  ftc_status_t st;
  char hostname[256] = "";
  *out = NULL;
  if ((st = comm_new(cfg, &c)) != FTC_OK) return st;
  if (!c->cfg.coordinator || !*c->cfg.coordinator) {
    st = ftc__error(FTC_ERR_CONFIG,
                    "FTCOMM_COORDINATOR is not set; start the ranks with ftcomm-run or under the "
                    "controller, or set cfg.coordinator to host:port");
    goto out_free;
  }
  if (c->be->listen &&
      (st = c->be->listen(c->bs, c->cfg.bind_host, c->cfg.advertise_host, &c->listen_fd,
                          c->data_addr, sizeof(c->data_addr))) != FTC_OK)
    goto out_free;
  gethostname(hostname, sizeof(hostname) - 1);
  ftc__member_cfg_t mcfg = {
      .coordinator = c->cfg.coordinator,
      .job = c->cfg.job,
      .token = c->cfg.token,
      .slot = c->cfg.slot,
      .world_size = c->cfg.world_size,
      .min_size = c->cfg.min_size,
      .joiner = c->cfg.joiner,
      .data_addr = c->data_addr,
      /* The data plane's protocol (TCP: who connects to a joiner), so the
       * coordinator refuses a rank whose rule differs from the running
       * ranks' before any of them waits for the other to connect. Under
       * auto the probe below may still pick another backend; the rank says
       * the one it starts on. */
      .dataplane = c->be->dataplane,
      .pod = getenv("POD_NAME"),
      .node = getenv("NODE_NAME"),
      .host = hostname,
      .connect_timeout_ms = c->cfg.connect_timeout_ms,
      .first_view = !standby, /* waited for in comm_finish */
      .standby = standby,
  };
  /* The session's first connection is under way when start returns (its
   * hello sent); the backend probe runs meanwhile, then comm_finish reads
   * the welcome and the first view. */
  if ((st = ftc__member_start(&mcfg, &c->member)) != FTC_OK) goto out_free;
  c->host.member = c->member;
  comm_probe_auto(c);
  comm_prepare(c);
  /* A standby accepts the running ranks' early connections while it waits
   * (they connect on the coordinator's prospect). */
  if (standby && c->be->standby && c->listen_fd >= 0) c->be->standby(c->bs, c->listen_fd, 1);
  *out = c;
  return FTC_OK;

out_free:
  comm_free(c);
  return st;
}

/* The rest: the welcome, the first view that includes this process, its
 * data plane, the engine and the watchdog; within connect_timeout_ms of t0.
 * Frees c on failure. */
static ftc_status_t comm_finish(ftc_comm_t *c, int64_t t0) {
  ftc__view_t *view = NULL;
  ftc_status_t st;
  if ((st = ftc__member_finish(&c->member)) != FTC_OK) goto out_free;
  int64_t left_ms = c->cfg.connect_timeout_ms - (ftc__now_ns() - t0) / 1000000;
  if (left_ms < 1) left_ms = 1;
  ftc__member_set_notify(c->member, c->wd.fd);
  /* A view that admits a joiner wakes the idle progress thread directly (it
   * connects to the joiner early; engine.c, idle_wait): one thread hop less
   * than through the watchdog, which still checks every view. */
  if (c->spares && c->be->early_start) ftc__member_set_view_notify(c->member, c->eng.wake_fd);
  uint64_t after = 0;
  for (;;) {
    if ((st = ftc__member_wait_view(c->member, after, (int)left_ms, &view)) != FTC_OK) goto out_free;
    if (__builtin_expect(ftc__fault_armed, 0) && c->cfg.joiner == 1) ftc__fault_join();
    st = comm_bring_up(c, view);
    after = view->epoch;
    ftc__view_free(view);
    if (st == FTC_OK) break;
    /* A member of the epoch died or hung while connecting (a joiner meets
     * a failure): the coordinator forms a later epoch; take it. */
    left_ms = c->cfg.connect_timeout_ms - (ftc__now_ns() - t0) / 1000000;
    /* FTC_ERR_CONFIG: a peer's settings differ from this rank's (the
     * handshake said which); a later epoch would not change them. */
    if (c->eng.thread_started || left_ms < 1 || st == FTC_ERR_NO_MEMORY ||
        st == FTC_ERR_INVALID_ARGUMENT || st == FTC_ERR_CONFIG)
      goto out_free;
    FTC_INFO(FTC_SUB_RECOVERY, "connecting epoch %llu failed (%s); waiting for a later epoch",
             (unsigned long long)after, ftc_last_error());
  }
  FTC_INFO(FTC_SUB_INIT, "communicator up: rank %d of %d, epoch %llu, data plane %s", c->rank,
           c->size, (unsigned long long)c->epoch, c->data_addr);
  return FTC_OK;

out_free:
  comm_free(c);
  return st;
}

ftc_status_t ftc_comm_create(const ftc_config_t *cfg, ftc_comm_t **out) {
  ftc_comm_t *c;
  ftc_status_t st;
  if (!out) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "comm output pointer is NULL; pass &comm");
  *out = NULL;
  int64_t t0 = ftc__now_ns();
  if ((st = comm_begin(cfg, 0, &c)) != FTC_OK) return st;
  if ((st = comm_finish(c, t0)) != FTC_OK) return st;
  *out = c;
  return FTC_OK;
}

struct ftc_comm_pending {
  ftc_comm_t *comm;
};

ftc_status_t ftc_comm_create_begin(const ftc_config_t *cfg, ftc_comm_pending_t **out) {
  ftc_status_t st;
  if (!out)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "pending output pointer is NULL; pass &pending");
  *out = NULL;
  ftc_comm_pending_t *p = ftc__calloc(1, sizeof(*p));
  if (!p) return ftc__error(FTC_ERR_NO_MEMORY, "allocating a pending communicator");
  if ((st = comm_begin(cfg, 1, &p->comm)) != FTC_OK) {
    ftc__free(p);
    return st;
  }
  FTC_DEBUG(FTC_SUB_INIT, "communicator begun: slot %d registers as standby until it is ready",
            p->comm->cfg.slot);
  *out = p;
  return FTC_OK;
}

ftc_status_t ftc_comm_create_finish(ftc_comm_pending_t *pending, ftc_comm_t **out) {
  ftc_status_t st;
  if (out) *out = NULL;
  if (!pending || !out) {
    ftc_comm_create_cancel(pending);
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "ftc_comm_create_finish: pending and comm must not be NULL (pass the "
                      "handle from ftc_comm_create_begin and &comm)");
  }
  ftc_comm_t *c = pending->comm;
  ftc__free(pending);
  int64_t t0 = ftc__now_ns();
  ftc__member_join(c->member);
  /* While the coordinator answers: the standby acceptor stops, and the
   * first connect takes what it accepted and answers the handshakes
   * waiting there. */
  if (c->be->standby && c->listen_fd >= 0) c->be->standby(c->bs, c->listen_fd, 0);
  if ((st = comm_finish(c, t0)) != FTC_OK) return st; /* (c freed, the acceptor with it) */
  *out = c;
  return FTC_OK;
}

void ftc_comm_create_cancel(ftc_comm_pending_t *pending) {
  if (!pending) return;
  comm_free(pending->comm); /* leaves the job: the coordinator frees the slot */
  ftc__free(pending);
}

/* How long a quiet failure's sockets stay open at most when no view drops
 * the member it blames (a broken connection between two live ranks, whose
 * other peers see nothing): then the watchdog shuts them, as a loud
 * failure does at once. */
#define QUIET_SHUT_NS (50 * 1000000LL)

/* Stop this epoch's runs (comm->lock held, comm->interrupt set). A loud
 * stop shuts every socket: the running collective wakes and so does every
 * peer blocked on this rank (2 FINs per peer, each running the peer's
 * loopback receive path here and waking its threads). A quiet one, for a
 * failure its peers see for themselves, wakes only this process's runs
 * (comm->intr_fd): on a crash every survivor has a connection to the
 * victim that the kernel closed, its progress thread watches it (engine.c,
 * idle_wait), and the coordinator's view drops the victim and revokes the
 * epoch of those that did not see it (recover.c, wd_view); shut at every
 * survivor, most of those FINs only wake threads that already know, on
 * CPUs the recovery needs (docs/performance/recovery.md). The sockets of a
 * quiet failure are shut later if the failure turns out not to be seen by
 * all: the watchdog after QUIET_SHUT_NS without a view that drops the
 * member, or the move to a view that keeps it (comm_connect_view). */
static void comm_stop_locked(ftc_comm_t *comm, int quiet_rank) {
  FTC_ASSERT_HELD(&comm->lock);
  if (!comm->bh) return;
  int can_quiet = quiet_rank >= 0 && comm->member && comm->be->quiet_stop &&
                  comm->view && quiet_rank < comm->view->size;
  if (can_quiet) {
    if (!comm->quiet) {
      comm->quiet = 1;
      comm->quiet_member = comm->view->members[quiet_rank].member_id;
      comm->quiet_until_ns = ftc__now_ns() + QUIET_SHUT_NS;
    }
    uint64_t one = 1;
    ssize_t w = write(comm->intr_fd, &one, sizeof(one));
    (void)w;
    return;
  }
  comm->be->interrupt(comm->bh);
  comm->quiet = 0;
}

void ftc__comm_fail(ftc_comm_t *comm, ftc_status_t why, const char *detail) {
  ftc__comm_fail_quiet(comm, why, detail, -1);
}

void ftc__comm_fail_quiet(ftc_comm_t *comm, ftc_status_t why, const char *detail, int quiet_rank) {
  int expected = 0;
  int first = __atomic_compare_exchange_n(&comm->error, &expected, (int)why, 0, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE);
  /* The peers first: shut this epoch's sockets before anything that wakes
   * another thread (the log line's pipe, the report, the watchdog), which
   * on a crowded host may take this thread's CPU before it gets here. The
   * first stop decides: a run stopped by it returns its status here again,
   * already handled (the watchdog shuts a quiet stop's sockets later if no
   * view covers it). */
  expected = 0;
  int stopper = __atomic_compare_exchange_n(&comm->interrupt, &expected, (int)why, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  pthread_mutex_lock(&comm->lock);
  if (stopper) comm_stop_locked(comm, quiet_rank);
  pthread_mutex_unlock(&comm->lock);
  if (first) {
    /* The coordinator hears it from this thread when the backend knows the
     * peer already (one thread hop less before the next epoch), else from
     * the watchdog, which also captures the dump; before the log line,
     * whose write may wake a reader of the process's stderr. Peers that saw
     * this rank's sockets close may blame it: the coordinator weighs
     * reports against sessions and heartbeats (docs/recovery.md). */
    if (comm->be->blames_at_once) ftc__watchdog_report(comm);
    FTC_WARN(FTC_SUB_COLL, "epoch %llu failed: %s: %s", (unsigned long long)comm->epoch,
             ftc_strerror(why), detail ? detail : "");
    ftc__watchdog_kick(comm);
    if (__builtin_expect(__atomic_load_n(&comm->tree.children, __ATOMIC_RELAXED) ||
                             __atomic_load_n(&comm->tree.parent, __ATOMIC_RELAXED), 0))
      ftc__split_failed(comm, why, detail);
  }
}

int ftc__comm_fail_epoch(ftc_comm_t *comm, uint64_t epoch, ftc_status_t why, const char *detail,
                         int quiet_rank) {
  pthread_mutex_lock(&comm->lock);
  if (__atomic_load_n(&comm->recovering, __ATOMIC_ACQUIRE) ||
      __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE) != epoch) {
    pthread_mutex_unlock(&comm->lock);
    return 0;
  }
  int expected = 0;
  int first = __atomic_compare_exchange_n(&comm->error, &expected, (int)why, 0, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE);
  expected = 0;
  int stopper = __atomic_compare_exchange_n(&comm->interrupt, &expected, (int)why, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  if (stopper) comm_stop_locked(comm, quiet_rank);
  pthread_mutex_unlock(&comm->lock);
  if (first) {
    if (comm->be->blames_at_once) ftc__watchdog_report(comm);
    FTC_WARN(FTC_SUB_COLL, "epoch %llu failed: %s: %s", (unsigned long long)epoch, ftc_strerror(why),
             detail ? detail : "");
    ftc__watchdog_kick(comm);
    if (__builtin_expect(__atomic_load_n(&comm->tree.children, __ATOMIC_RELAXED) ||
                             __atomic_load_n(&comm->tree.parent, __ATOMIC_RELAXED), 0))
      ftc__split_failed(comm, why, detail);
  }
  return 1;
}

ftc_status_t ftc__comm_gate(ftc_comm_t *comm) {
  if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE))
    return ftc__error(FTC_ERR_ABORTED, "the communicator was aborted; destroy it");
  int e = __atomic_load_n(&comm->error, __ATOMIC_ACQUIRE);
  if (__builtin_expect(__atomic_load_n(&comm->tree.parent, __ATOMIC_RELAXED) != NULL, 0) && !e)
    return ftc__split_gate(comm);
  if (e)
    return ftc__error(FTC_ERR_REVOKED,
                      "epoch %llu failed earlier (%s); recover the communicator before the next "
                      "collective",
                      (unsigned long long)__atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE),
                      ftc_strerror((ftc_status_t)e));
  return FTC_OK;
}

ftc_status_t ftc_comm_abort(ftc_comm_t *comm) {
  if (!comm) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "comm is NULL");
  __atomic_store_n(&comm->aborted, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&comm->interrupt, (int)FTC_ERR_ABORTED, __ATOMIC_RELEASE);
  int expected = 0;
  __atomic_compare_exchange_n(&comm->error, &expected, (int)FTC_ERR_ABORTED, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  pthread_mutex_lock(&comm->lock);
  if (comm->bh) comm->be->interrupt(comm->bh);
  ftc__engine_drain_locked(comm, FTC_ERR_ABORTED, "the communicator was aborted");
  pthread_mutex_unlock(&comm->lock);
  ftc__engine_wake(comm);
  FTC_INFO(FTC_SUB_COLL, "communicator aborted");
  return FTC_OK;
}

ftc_status_t ftc_comm_destroy(ftc_comm_t *comm) {
  if (!comm) return FTC_OK;
  comm_free(comm);
  return FTC_OK;
}

ftc_status_t ftc_comm_rank(const ftc_comm_t *comm, int *rank) {
  if (!comm || !rank) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "comm and rank must not be NULL");
  *rank = __atomic_load_n(&comm->rank, __ATOMIC_ACQUIRE);
  return FTC_OK;
}

ftc_status_t ftc_comm_size(const ftc_comm_t *comm, int *size) {
  if (!comm || !size) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "comm and size must not be NULL");
  *size = __atomic_load_n(&comm->size, __ATOMIC_ACQUIRE);
  return FTC_OK;
}

ftc_status_t ftc_comm_epoch(const ftc_comm_t *comm, uint64_t *epoch) {
  if (!comm || !epoch) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "comm and epoch must not be NULL");
  *epoch = __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE);
  return FTC_OK;
}

ftc_status_t ftc_comm_set_allreduce_algo(ftc_comm_t *comm, ftc_algo_t algo) {
  if (!comm) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_set_allreduce_algo: NULL communicator");
  if ((unsigned)algo >= FTC_ALGO_COUNT) {
    char names[160]; /* "FTC_ALGO_AUTO, ... or FTC_ALGO_FLAT", from ftc_algo_name */
    size_t l = 0;
    for (int a = 0; a < FTC_ALGO_COUNT && l < sizeof(names) - 1; a++) {
      l += (size_t)snprintf(names + l, sizeof(names) - l, "%sFTC_ALGO_",
                            a == 0 ? "" : a == FTC_ALGO_COUNT - 1 ? " or " : ", ");
      for (const char *p = ftc_algo_name((ftc_algo_t)a); *p && l < sizeof(names) - 1; p++)
        names[l++] = (char)toupper((unsigned char)*p);
      names[l] = '\0';
    }
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "ftc_comm_set_allreduce_algo: unknown algorithm %d; use %s", (int)algo, names);
  }
  if (!comm->be->allreduce_algo)
    return ftc__error(FTC_ERR_NOT_SUPPORTED,
                      "ftc_comm_set_allreduce_algo: the %s backend chooses its own algorithms "
                      "(NCCL: NCCL_ALGO)",
                      comm->be ? comm->be->name : "?");
  __atomic_store_n(&comm->allreduce_algo, (int)algo, __ATOMIC_RELAXED);
  return FTC_OK;
}

ftc_status_t ftc_comm_get_async_error(const ftc_comm_t *comm, ftc_status_t *error) {
  if (!comm || !error)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "comm and error must not be NULL");
  *error = (ftc_status_t)__atomic_load_n(&comm->error, __ATOMIC_ACQUIRE);
  return FTC_OK;
}

ftc_status_t ftc_comm_set_stream(ftc_comm_t *comm, void *stream) {
  if (!comm) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_set_stream: NULL communicator");
  if (!comm->be->set_stream)
    return ftc__error(FTC_ERR_NOT_SUPPORTED, "ftc_comm_set_stream: the %s backend has no streams",
                      comm->be->name);
  pthread_mutex_lock(&comm->lock);
  void *h = comm->bh;
  if (h) comm->be->set_stream(h, stream);
  pthread_mutex_unlock(&comm->lock);
  if (!h) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_set_stream: no epoch yet");
  return FTC_OK;
}

ftc_status_t ftc_comm_backend(const ftc_comm_t *comm, char *buf, size_t len) {
  if (!comm || !buf || !len)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_backend: NULL argument");
  char full[1024];
  if (comm->be->describe)
    comm->be->describe(full, sizeof full);
  else
    snprintf(full, sizeof full, "%s", comm->be->name);
  size_t need = strlen(full) + 1;
  if (need > len) {
    memcpy(buf, full, len - 1); /* what fits, terminated */
    buf[len - 1] = '\0';
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_backend: buf of %zu bytes is too short; the description needs %zu",
                      len, need);
  }
  memcpy(buf, full, need);
  return FTC_OK;
}
