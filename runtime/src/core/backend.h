/*
 * backend.h - the seam between the communicator core and a data-plane
 * backend: the only thing the core knows of one. The core (comm.c,
 * engine.c, recover.c) owns requests, epochs, recovery and the watchdog; a
 * backend owns the connections of one epoch and runs collectives on them.
 * The backends this library has are listed once, in the order
 * FTCOMM_BACKEND=auto tries them (backends/registry.c); the core finds one by name
 * (ftc__backend_find) and never names a backend itself. TCP
 * (runtime/src/tcp/backend.c) and NCCL (runtime/src/nccl/backend.c) are
 * the two; tests/unit/fake_backend.c is a third that compiles against this
 * header alone.
 *
 * A backend sees its communicator only through the host (ftc__backend_host_t
 * below: the membership session, the interrupt, the recorder, timeouts),
 * never the communicator itself. Per communicator it may keep a state
 * (open/destroy: its tunables, its listener's helpers, a retired epoch).
 *
 * One handle per epoch: connect() makes it for a view, close() ends it, and
 * a recovery or a grow makes the next one with connect() before the old one
 * is retired (retire, or close). Threading, as the core calls it: connect,
 * run, run_p2p, close and the state's calls on the thread that owns the
 * data plane (the progress thread, or the application thread on the direct
 * path, never two at once); interrupt from any thread, under the
 * communicator's lock (it must only wake a running operation, which then
 * returns the status in *host->interrupt); the queries from any thread under
 * that lock.
 */
#ifndef FTC_CORE_BACKEND_H
#define FTC_CORE_BACKEND_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"
#include "ftcomm.h"
#include "membership/member.h"

struct ftc_rec; /* the flight recorder (ftc_recorder.h) */

/* What a backend gets of the communicator it serves. The core owns it and
 * keeps it at one address for the communicator's life (open's host stays
 * valid until destroy); the fields are read when the calls below say. */
typedef struct ftc__backend_host {
  ftc__member_t *member;    /* the coordinator session; NULL for a communicator built from a
                             * view by a test. A backend may exchange data through it (NCCL's
                             * unique ids) and learn of later epochs from it */
  const int *interrupt;     /* atomic status; nonzero stops a running operation with it */
  const int *intr_fd;       /* an eventfd written after *interrupt is set by a quiet stop
                             * (quiet_stop below): a run also polls it */
  struct ftc_rec *rec;      /* the communicator's flight recorder (launch's rec_id) */
  const char *token;        /* the job token (NULL: none): authenticates connections */
  int connect_timeout_ms;   /* connect's bound: the configured one, less during a recovery */
  /* Fail the current epoch with why (first failure wins), as a collective's
   * failure does: for a backend that learns of one while it waits. */
  void (*fail)(void *ctx, ftc_status_t why, const char *detail);
  void *ctx;
} ftc__backend_host_t;

/* Called by run_p2p before each round: complete and drop the operations
 * whose done[i] is set (done NULL: all n), append those queued meanwhile up to cap, return the
 * new count (see tcp.h, ftc__tcp_run_p2p). */
typedef int (*ftc__backend_more_fn)(void *ctx, const ftc__op_t **ops, int n, int cap,
                                    const unsigned char *done);
/* What a watched peer socket holds (peer_peek): bytes of a collective the
 * peer is ahead in, only its goodbye (it left the communicator), nothing
 * yet, or its end (end of stream, a reset). */
enum { FTC__PEER_DATA = 0, FTC__PEER_GOODBYE = 1, FTC__PEER_QUIET = 2, FTC__PEER_ENDED = 3 };

/* Send/recv operations in flight at once in an epoch of n ranks. */
#define FTC__P2P_CAP(n) (2 * (n) + 64)

typedef struct ftc__backend_ops {
  const char *name; /* "tcp", "nccl": FTCOMM_BACKEND, logs and dumps */
  const char *no_bitwise; /* non-NULL: its reductions lack FTC_BAND/BOR/BXOR, which the
                           * calls refuse (FTC_ERR_NOT_SUPPORTED) with this as the reason */
  /* Optional (NULL: always usable): FTC_OK when the backend can run here;
   * else the status and ftc_last_error() saying what is missing.
   * FTCOMM_BACKEND=<name> probes with auto 0 and fails with the answer;
   * FTCOMM_BACKEND=auto probes each backend in the registry's order with
   * auto 1 (a GPU backend: only where a GPU is seen) and takes the first
   * that answers FTC_OK. Any thread, no lock; may be slow (dlopen) once. */
  ftc_status_t (*probe)(int auto_pick);
  /* Optional: the backend's version into buf (dumps' backend_version,
   * docs/dump-format.md); NULL: none. Any thread, no lock. */
  void (*version)(char *buf, size_t len);
  /* Optional: what ftc_comm_backend says ("NCCL 2.28.9 (libnccl.so.2) ...");
   * NULL: the name. Any thread, no lock. */
  void (*describe)(char *buf, size_t len);
  /* The data-plane protocol a rank says in its hello, so that the
   * coordinator refuses a rank whose rule differs from the running ranks'
   * (TCP: who connects to a joiner); 0 for a backend without connections of
   * its own. */
  uint32_t dataplane;

  /* Optional (NULL: the state is NULL): the communicator's state, made once
   * before its first view (host stays valid until destroy; its member is
   * set later, before the first connect). destroy ends it after the last
   * handle was closed, with whatever it retired. */
  ftc_status_t (*open)(const ftc__backend_host_t *host, void **state);
  void (*destroy)(void *state);
  /* Optional (NULL: no listener; the rank advertises no data address): a
   * listening socket for the data plane, bound to bind_host (NULL: any)
   * and advertised as addr ("host:port", from advertise_host when set),
   * which the core owns from then on and polls while idle. refuse() then
   * takes what waits on it and closes it (strangers, between collectives
   * and without spare connections). Also used for a sub-communicator's own
   * listener: a backend without one has no sub-communicators. */
  ftc_status_t (*listen)(void *state, const char *bind_host, const char *advertise_host,
                         int *fd, char *addr, size_t addrlen);
  void (*refuse)(int listen_fd);
  /* Optional: work that needs no view (e.g. reading the CPU quota the first
   * connect counts), done while the coordinator answers the hello. */
  void (*prepare)(void *state);
  /* Optional: a standby member's listener while it waits to join
   * (ftc_comm_create_begin): on 1 accept the running ranks' early
   * connections on listen_fd; on 0 stop accepting, keeping what was
   * accepted for the first connect (which takes it, or destroy frees it). */
  void (*standby)(void *state, int listen_fd, int on);
  /* Optional (NULL: the backend chooses its own algorithms, and
   * ftc_comm_set_allreduce_algo says so): where a communicator's allreduce
   * algorithm starts (an ftc_algo_t, FTCOMM_ALLREDUCE_ALGO). */
  int (*allreduce_algo)(const void *state);

  /* Bring the data plane of `view` up (this process is view->my_rank) within
   * host->connect_timeout_ms, returning early with the status in
   * *host->interrupt when it is set. *out: the epoch's handle. prev: the
   * previous epoch's handle during a recovery or a grow (NULL for the first
   * epoch), prev_error the error that failed its epoch (FTC_OK: a planned
   * move), so a backend can shrink or grow from it; it is retired after
   * this returns. listen_fd: the listener (-1: none). */
  ftc_status_t (*connect)(void *state, const ftc__backend_host_t *host, const ftc__view_t *view,
                          int listen_fd, void *prev, ftc_status_t prev_error, void **out);
  /* Optional (NULL: prev is closed at once): prev's epoch was left for a
   * new one (planned: a step boundary's move, its peers move on too; shut:
   * its sockets must be shut now, they were not at the failure). The state
   * keeps it until settled() and closes it then (or at the next retire or
   * destroy): closed at once, each goodbye or close would wake a peer that
   * is still moving. */
  void (*retire)(void *state, void *prev, int planned, int shut);
  /* Optional: the new epoch is in use (every peer has moved): called by
   * the idle progress thread; close what was retired. */
  void (*settled)(void *state);
  /* Optional (NULL: not supported): the stream collectives run on from now
   * (a device backend), set on the epoch's handle under the communicator's
   * lock and kept across its epochs. */
  void (*set_stream)(void *h, void *stream);
  /* 1: a failure every peer sees for itself (a crash) may stop only this
   * process's runs, by a write to host->intr_fd after *host->interrupt is
   * set, instead of interrupt() (which shuts the sockets so that reachable
   * peers fail fast too); 0: always interrupt(). */
  int quiet_stop;

  /* Run one collective to completion; deadline in monotonic ns (INT64_MAX:
   * none). On failure, the status says why (FTC_ERR_PEER_LOST, TIMEOUT, or
   * the interrupt's). */
  ftc_status_t (*run)(void *h, const ftc__op_t *op, int64_t deadline_ns);
  /* Run send/recv operations together (see tcp.h, ftc__tcp_run_p2p). */
  ftc_status_t (*run_p2p)(void *h, const ftc__op_t **ops, int n, int cap, int64_t deadline_ns,
                          ftc__backend_more_fn more, void *ctx, int wake_fd);
  /* Wake a running operation so it sees *host->interrupt (any thread). */
  void (*interrupt)(void *h);
  /* End the epoch's data plane. planned: the epoch is healthy and the peers
   * move on too (tell them, finalize); otherwise abort without waiting. */
  void (*close)(void *h, int planned);
  /* The peer to blame for the last failed run, -1 if unknown. */
  int (*failed_peer)(const void *h);
  /* 1: failed_peer() is known when the run fails (the failing thread reports
   * it to the coordinator at once); 0: it is found later (the watchdog). */
  int blames_at_once;
  /* 1: connect() may run on the application thread while the idle
   * progress thread waits in its poll (engine.c: ftc__comm_rebuild); 0:
   * always on the progress thread (a device backend whose calls are bound
   * to it). */
  int rebuild_inline;

  /* Optional (GPU backends; NULL: run() only): asynchronous requests are
   * enqueued back to back on the device. launch() enqueues op and returns
   * at once with *work (the backend's), recording the start and completion
   * of the recorder entry rec_id (host->rec) when it discovers them;
   * poll() looks once: *done = 1 when complete, or a failure status (the
   * epoch's error, *host->interrupt's status, FTC_ERR_TIMEOUT once
   * deadline_ns has passed); release() frees the work (reuse: it completed,
   * so what it holds on the device can be reused). All three on the thread
   * that owns the data plane, on the epoch's handle they were launched on. */
  ftc_status_t (*launch)(void *h, const ftc__op_t *op, uint64_t rec_id, void **work);
  ftc_status_t (*poll)(void *h, void *work, int64_t deadline_ns, int *done);
  void (*release)(void *h, void *work, int reuse);

  /* Optional (NULL for a backend without connections of its own): the
   * progress thread's idle watch of peer connections between collectives.
   * Lists up to max sockets and their ranks, at most
   * ftc__comm_peer_fd_cap(size) of a world of `size` (2 * size - 2: each
   * peer's own socket, the lower ranks' shared ones). */
  int (*peer_fds)(const void *h, int *fds, int *ranks, int max);
  /* With peer_fds: what one of those sockets that polled readable holds
   * (without taking it): an FTC__PEER_* below. */
  int (*peer_peek)(int fd);
  void (*mark_left)(void *h, int rank);       /* the peer said goodbye */
  int (*peer_left)(const void *h, int rank);
  void (*note_failed_peer)(void *h, int rank); /* the idle watch saw it close */
  void (*mark_ended)(void *h, int rank);       /* ... during a run (optional) */
  void (*drop_peer)(void *h, int rank);        /* fault injection */
  /* Optional: spare connections made between collectives for the next
   * epoch (see ftc__tcp_spare_poll), driven by the idle progress thread:
   * spare_poll fills pfd with the listener and the handshakes to wait for
   * (build: start making this rank's spares), spare_events handles what
   * poll() returned for them, spare_stop abandons handshakes in progress. */
  int (*spare_poll)(void *h, int listen_fd, int build, struct pollfd *pfd, int max);
  void (*spare_events)(void *h, int listen_fd, const struct pollfd *pfd, int n);
  void (*spare_stop)(void *h);
  /* Optional: the next epoch's connections to its new members (joiners)
   * made before the step boundary (see ftc__tcp_early_start), driven by the
   * idle progress thread while that epoch is announced: early_start (1: it
   * runs), then early_poll / early_events as for the spares (0 entries:
   * none running). */
  int (*early_start)(void *h, const ftc__view_t *next);
  int (*early_poll)(void *h, int listen_fd, struct pollfd *pfd, int max);
  void (*early_events)(void *h, int listen_fd, const struct pollfd *pfd, int n);
} ftc__backend_ops_t;

/* The backends of this library, in the order FTCOMM_BACKEND=auto probes
 * them, NULL-terminated (backends/registry.c: the one place that names them). */
extern const ftc__backend_ops_t *const ftc__backends[];
/* The backend called name (case-insensitive): one registered by
 * ftc__backend_register first, then the library's; NULL when none is. */
const ftc__backend_ops_t *ftc__backend_find(const char *name);
/* Add a backend that FTCOMM_BACKEND=<its name> selects (never auto), for
 * tests that bring their own (tests/unit/fake_backend.c); up to 4, before
 * the first communicator is made. FTC_ERR_INVALID_ARGUMENT when the name
 * is taken or the table is full. */
ftc_status_t ftc__backend_register(const ftc__backend_ops_t *ops);
/* "tcp, nccl" (the registry's names) into buf, for errors. */
void ftc__backend_names(char *buf, size_t len);

#endif
