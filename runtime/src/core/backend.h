/*
 * backend.h - the seam between the communicator core and a data-plane
 * backend. The core (comm.c, engine.c, recover.c) owns requests, epochs,
 * recovery and the watchdog; a backend owns the connections of one epoch and
 * runs collectives on them. TCP (runtime/src/tcp/backend.c) is the first
 * implementation; NCCL (runtime/src/nccl/) is meant to be the second.
 *
 * One handle per epoch: connect() makes it for a view, close() ends it, and
 * a recovery or a grow makes the next one with connect() before closing the
 * old one. Threading, as the core calls it: connect, run, run_p2p and close
 * on the thread that owns the data plane (the progress thread, or the
 * application thread on the direct path, never two at once); interrupt from
 * any thread, under comm->lock (it must only wake a running operation, which
 * then returns the status stored in comm->interrupt); the queries from any
 * thread under comm->lock.
 */
#ifndef FTC_CORE_BACKEND_H
#define FTC_CORE_BACKEND_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "core/op.h"
#include "ftcomm.h"
#include "membership/member.h"

typedef struct ftc_comm ftc_comm_t;

/* Called by run_p2p before each round: complete and drop the operations
 * whose done[i] is set (done NULL: all n), append those queued meanwhile up to cap, return the
 * new count (see tcp.h, ftc__tcp_run_p2p). */
typedef int (*ftc__backend_more_fn)(void *ctx, const ftc__op_t **ops, int n, int cap,
                                    const unsigned char *done);
/* Send/recv operations in flight at once in an epoch of n ranks. */
#define FTC__P2P_CAP(n) (2 * (n) + 64)

typedef struct ftc__backend_ops {
  const char *name; /* "tcp", "nccl": logs and dumps */
  /* Optional: the backend's version into buf (dumps' backend_version,
   * docs/dump-format.md); NULL: none. Any thread, no lock. */
  void (*version)(char *buf, size_t len);
  /* Bring the data plane of `view` up (this process is view->my_rank) within
   * comm->connect_timeout_ms, returning early with the status in
   * comm->interrupt when it is set. *out: the epoch's handle. During a
   * recovery or a grow the previous epoch's handle is still comm->bh (and
   * comm->error says whether it failed), so a backend can shrink or grow
   * from it; it is closed after this returns. comm->member gives access to
   * the coordinator session (e.g. to exchange a unique id through it). */
  ftc_status_t (*connect)(ftc_comm_t *comm, const ftc__view_t *view, void **out);
  /* Run one collective to completion; deadline in monotonic ns (INT64_MAX:
   * none). On failure, the status says why (FTC_ERR_PEER_LOST, TIMEOUT, or
   * the interrupt's). */
  ftc_status_t (*run)(void *h, const ftc__op_t *op, int64_t deadline_ns);
  /* Run send/recv operations together (see tcp.h, ftc__tcp_run_p2p). */
  ftc_status_t (*run_p2p)(void *h, const ftc__op_t **ops, int n, int cap, int64_t deadline_ns,
                          ftc__backend_more_fn more, void *ctx, int wake_fd);
  /* Wake a running operation so it sees comm->interrupt (any thread). */
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
   * of the recorder entry rec_id (comm->rec) when it discovers them;
   * poll() looks once: *done = 1 when complete, or a failure status (the
   * epoch's error, comm->interrupt's status, FTC_ERR_TIMEOUT once
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

extern const ftc__backend_ops_t ftc__backend_tcp;

#endif
