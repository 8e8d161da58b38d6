/*
 * comm.h - the communicator's internal state, shared by its lifecycle
 * (comm.c), the progress engine and requests (engine.c) and the collective
 * entry points (coll.c).
 *
 * Lock order: comm->wd.cap_mu -> comm->lock -> req->mu; the process's split
 * lock (split.c) -> comm->lock; wd.cap_mu is also held while calling the
 * membership client and the recorder (their locks are leaves); comm->wd.mu
 * is a leaf. Neither comm->lock nor req->mu is held while a collective
 * runs. comm->eng.busy says one thread (the progress thread, or the
 * application thread on the direct path) owns the data plane; only that
 * thread runs operations on comm->bh, the backend's handle for the epoch
 * (comm->be, core/backend.h). Abort and failure only interrupt it
 * (be->interrupt, under comm->lock); the watchdog reads
 * be->failed_peer/peer_left under it.
 *
 * struct ftc_comm is grouped by what guards each part: the configuration
 * (fixed once created), the epoch and its data plane (atomics for the query
 * calls; comm->lock; the data plane's owner), the request queue and the
 * progress thread (eng: comm->lock), the watchdog and recovery (wd: wd.mu,
 * wd.cap_mu or the watchdog thread, as each field says) and the
 * sub-communicator links (tree: the split lock).
 */
#ifndef FTC_CORE_COMM_H
#define FTC_CORE_COMM_H

#include <pthread.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/op.h"
#include "ftc_recorder.h"
#include "ftcomm.h"
#include "membership/member.h"

struct ftc_request {
  ftc_comm_t *comm;
  ftc__op_t op;
  int64_t deadline;   /* absolute, set at submission for blocking calls, 0: from start */
  uint64_t seq;
  uint64_t rec_id;
  int state;          /* atomic: REQ_QUEUED, REQ_RUNNING, REQ_DONE */
  ftc_status_t status;
  char err[256];      /* ftc_last_error() of the completing thread */
  int refs;           /* atomic: the caller's and the queue's */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  const ftc__view_t *rebuild_view; /* internal rebuild request: the new view */
  ftc_request_callback_t cb; /* under mu: ftc_request_on_complete's, until it runs */
  void *cb_arg;
  int cb_set;                /* under mu: a callback was registered (one per request) */
  struct ftc_request *next;
};

enum { REQ_QUEUED = 0, REQ_RUNNING = 1, REQ_DONE = 2 };

struct ftc_comm {
  /* The configuration: set at creation, read by any thread after. */
  ftc_config_t cfg;       /* resolved; strings point at the copies below */
  char *strs[8];          /* owned copies of cfg's strings */
  int spin_us;
  int allreduce_algo;     /* atomic ftc_algo_t: FTCOMM_ALLREDUCE_ALGO, then ftc_comm_set_allreduce_algo */
  int listen_fd;
  char data_addr[160];
  int spares;             /* FTCOMM_SPARE_CONNECTIONS: make spare connections for the next epoch */
  int report_defer_ms;    /* FTCOMM_REPORT_DEFER_MS */
  ftc__member_t *member;  /* NULL when built from a view by a test */
  ftc_rec_t *rec;
  const ftc__backend_ops_t *be; /* the data-plane backend (core/backend.h) */
  void *bs;                /* its state for this communicator (be->open), or NULL */
  ftc__backend_host_t host; /* what the backend sees of this communicator */

  /* The epoch and its data plane. The view and the failure state are under
   * lock; the status words are atomics; bh and the sequence numbers belong
   * to the data plane's owner (eng.busy). */
  pthread_mutex_t lock;
  ftc__view_t *view;      /* our deep copy of the current view */
  uint64_t epoch;         /* atomics, for the query calls */
  int rank, size;
  void *bh;                /* the backend's handle for the current epoch, NULL before the first */
  int connect_timeout_ms;  /* for be->connect: the configured one, less during a recovery */
  int interrupt;          /* atomic status; nonzero stops a running collective */
  int intr_fd;            /* eventfd a run also polls: a quiet failure's wake-up (be->quiet_stop) */
  int quiet;              /* under lock: the epoch failed quietly (its sockets are not shut;
                           * comm.c, comm_stop_locked): its peers see quiet_member's end for
                           * themselves, or the coordinator's view drops it; 1 until a view
                           * did (2: they stay open until closed) or the watchdog shut them (0) */
  uint64_t quiet_member;  /* under lock: ... the member of the failed epoch it blames */
  int64_t quiet_until_ns; /* under lock: the watchdog shuts them then if no view dropped it */
  int settled;            /* atomic: the epoch is in use (engine.c, SETTLE_COLLECTIVES) */
  int settling;           /* collectives completed in the epoch before that (data-plane owner) */
  uint64_t prospect_seq;  /* progress thread: the coordinator's prospect it last took */
  uint64_t early_epoch;   /* progress thread: the announced epoch whose new members it
                           * connects early (be->early_start), 0 none */
  int error;              /* atomic: the error that broke the epoch (async error) */
  int aborted;            /* atomic */
  uint64_t seq;           /* collective sequence in the epoch, from 1 */
  uint64_t *p2p_seq;      /* [2 * size]: sends to, receives from each peer */

  /* The request queue and the progress thread (engine.c): under lock. */
  struct {
    struct ftc_request *head, *tail;
    int busy;             /* a thread owns the data plane */
    int idle_parked;      /* the idle progress thread is in its poll (engine.c, idle_wait) */
    int inline_move;      /* the application thread is moving the data plane itself */
    uint64_t rebuilds;    /* moves made by the application thread */
    int stop;
    int wake_fd;
    pthread_t thread;
    int thread_started;
  } eng;

  /* Recovery and the watchdog (recover.c). The watchdog thread
   * ("ftc-watchdog") sleeps on wd.fd, which the membership session (a view
   * or dump request arrived), ftc__comm_fail() and ftc__watchdog_capture()
   * write; it reports failures and captures and writes their dumps,
   * answers dump requests and revokes an epoch the coordinator has replaced
   * by one without some member. */
  struct {
    int fd;
    pthread_t thread;
    int started;
    int stop;                 /* under wd.mu */
    pthread_mutex_t mu;
    struct ftc__wd_dump *dumps; /* under wd.mu: captured, not yet written */
    struct ftc__wd_dump *late;  /* watchdog thread only: failure dumps written before the
                                 * coordinator's verdict, which the dump writer keeps */
    int peer;                 /* under wd.mu: the failed peer the backend of epoch
                               * peer_epoch named just before the move (0: none) */
    uint64_t peer_epoch;
    pthread_mutex_t cap_mu;   /* serializes the capture of failures and dump requests */
    uint64_t handled;         /* under wd.cap_mu: the epoch whose failure dump was captured */
    uint64_t reported;        /* under wd.cap_mu: the epoch whose failure was reported */
    uint64_t defer_epoch;     /* under wd.cap_mu: a report of a peer's end (FTC_ERR_PEER_LOST)
                               * held back: the peer's successor reports it first
                               * (recover.c); 0 none */
    int defer_peer;
    int64_t defer_ns;         /* ... and when the watchdog sends it, if still of use */
  } wd;
  /* The application thread's moves to a new epoch (recover.c). */
  int recovering;             /* atomic: the application thread is moving to a new epoch */
  uint64_t target_epoch;      /* atomic: epoch being connected by that move, 0 none */
  ftc__view_t *prev_view;     /* the view before the last change, NULL for the first */
  uint64_t steps;             /* ftc_comm_step calls (application thread) */
  uint64_t moves;             /* moves to a new epoch (application thread) */
  int joiner_pending;         /* started as a joiner and no step finished yet */
  int ready;                  /* a step boundary completed: told the coordinator (ftc__member_set_ready) */

  /* Sub-communicators (split.c): the links between a parent and its
   * children, under the process's split lock (split.c; lock order: split
   * lock -> comm->lock). */
  struct {
    struct ftc_comm *parent;   /* a child's parent, NULL for none (or destroyed) */
    struct ftc_comm *children; /* a parent's children, linked by sibling */
    struct ftc_comm *sibling;
    uint64_t parent_epoch;     /* atomic: the parent's epoch this child's view was derived from */
    struct ftc__split_member *members; /* a child's members at the split, in its rank order */
    int nmembers;
    uint64_t splits;           /* a parent's splits so far (every rank counts the same) */
  } tree;
};

/* Lifecycle (comm.c). */
ftc_status_t ftc__comm_create_from_view(const ftc_config_t *cfg, const ftc__view_t *view,
                                        int listen_fd, ftc_comm_t **out);
/* Mark the epoch failed with `why` (first failure wins), stop the running
 * collective and shut the sockets so reachable peers fail fast too; or,
 * with quiet_rank >= 0 on a communicator with a coordinator session over
 * TCP, a failure that every peer sees for itself (rank quiet_rank's
 * connection ended: a crash closes every one of them; or the coordinator
 * dropped it), stop only this process's runs (comm.c, comm_stop_locked). */
void ftc__comm_fail(ftc_comm_t *comm, ftc_status_t why, const char *detail);
void ftc__comm_fail_quiet(ftc_comm_t *comm, ftc_status_t why, const char *detail, int quiet_rank);
/* The same for a revoke of `epoch` decided earlier (the watchdog's): nothing
 * (0) once that epoch is not the current one or a recovery has started, whose
 * connect cleared comm->interrupt; the test and the interrupt are one step
 * under comm->lock, under which the recovery raises comm->recovering. */
int ftc__comm_fail_epoch(ftc_comm_t *comm, uint64_t epoch, ftc_status_t why, const char *detail,
                         int quiet_rank);
/* Whether a quiet failure of the current epoch is covered by `view`, a
 * later one: it leaves out the member blamed, dropped for a failure, so
 * every peer revokes at that view (recover.c, wd_view) if it has not seen
 * the end itself. Under comm->lock. */
int ftc__comm_quiet_covered_locked(ftc_comm_t *comm, const ftc__view_t *view);
/* The status a new collective gets: FTC_OK, FTC_ERR_REVOKED or FTC_ERR_ABORTED. */
ftc_status_t ftc__comm_gate(ftc_comm_t *comm);
/* Replace the data plane with one for `view` (a later epoch): runs on the
 * progress thread between collectives; the failed state is cleared on
 * success. view stays owned by the caller. */
ftc_status_t ftc__comm_rebuild(ftc_comm_t *comm, const ftc__view_t *view);
/* Connect the transport for view (called on the progress thread or at
 * creation). */
ftc_status_t ftc__comm_connect_view(ftc_comm_t *comm, const ftc__view_t *view);

/* Room for every data-plane socket be->peer_fds lists in a world of `size`
 * ranks: each peer's own socket and the lower ranks' shared ones. */
int ftc__comm_peer_fd_cap(int size);
/* The highest descriptor of the data plane bh of a world of `size` ranks
 * (every peer's socket, as be->peer_fds lists them), -1 for none or a
 * backend without sockets of its own. */
int ftc__comm_top_peer_fd(const ftc__backend_ops_t *be, const void *bh, int size);
/* Whether the peer `rank` closed a connection of the data plane bh of a
 * world of `size` ranks (end of stream or reset seen on any socket to it,
 * as be->peer_fds lists them; unread data may remain), as the idle watch
 * takes one socket's end for the peer's. 0 for a backend without sockets
 * of its own (out of memory, only the first sockets are looked at). bh's
 * sockets must stay open meanwhile (the caller holds comm->lock). */
int ftc__comm_peer_closed(const ftc__backend_ops_t *be, const void *bh, int size, int rank);

/* Sub-communicators (split.c). A child is made by ftc__comm_create_child
 * (comm.c): a communicator of view with its own listener, recorder ring
 * (comm_id, name) and threads, linked to parent before it connects (it
 * leaves the process-wide log prefix and dump identity to the parent). */
typedef struct ftc__split_member {
  uint64_t member_id;  /* the parent's member id of the process */
  char addr[128];      /* its child listener */
} ftc__split_member_t;
ftc_status_t ftc__comm_create_child(ftc_comm_t *parent, const ftc__view_t *view, int listen_fd,
                                    uint64_t comm_id, const char *name, ftc_comm_t **out);
/* A failure of comm's epoch, first seen (comm.c): fail its children with
 * FTC_ERR_REVOKED, and a child's parent with the same status, blaming the
 * same peer. Calls from inside it do nothing (no ping-pong). */
void ftc__split_failed(ftc_comm_t *comm, ftc_status_t why, const char *detail);
/* The gate's test on a child (no lock: it reads atomics): FTC_ERR_REVOKED
 * when its parent moved past the epoch it was derived from. */
ftc_status_t ftc__split_gate(ftc_comm_t *comm);
/* Unlink comm from its parent and its children from it (its destroy). */
void ftc__split_unlink(ftc_comm_t *comm);
/* The view a child re-derives from its parent's current epoch (recover.c):
 * FTC_ERR_REVOKED while the parent's epoch is failed, FTC_OK with *view
 * NULL when nothing changed. *view is the caller's (ftc__view_free). */
ftc_status_t ftc__split_next_view(ftc_comm_t *comm, ftc__view_t **view);
/* A child moved to its view of the parent's epoch (recover.c). */
void ftc__split_moved(ftc_comm_t *comm, uint64_t epoch);

/* A deep copy of a view (NULL when out of memory); free with ftc__view_free. */
ftc__view_t *ftc__view_copy(const ftc__view_t *v);

/* Watchdog (recover.c). start/stop around the engine; kick wakes it;
 * capture does, on the calling thread, what the watchdog's next round would
 * do first: report a failure known now and capture its dump, capture a dump
 * the coordinator asked for; the watchdog hands the files to the dump
 * writer later, so a recovery does not wait for them. */
ftc_status_t ftc__watchdog_start(ftc_comm_t *comm);
void ftc__watchdog_stop(ftc_comm_t *comm);
void ftc__watchdog_kick(ftc_comm_t *comm);
void ftc__watchdog_capture(ftc_comm_t *comm);
/* Report the failed epoch's broken peer to the coordinator now, from the
 * calling thread (once per epoch; the watchdog does it otherwise). */
void ftc__watchdog_report(ftc_comm_t *comm);
/* The same for `rank` of `epoch`, whose connection the idle watch saw end
 * while a collective runs (the progress thread: before the collective's
 * own thread fails the epoch on it); once per epoch too. A rank that is
 * not the lost peer's successor holds either back (FTCOMM_REPORT_DEFER_MS). */
void ftc__watchdog_report_ended(ftc_comm_t *comm, uint64_t epoch, int rank);

/* The process's dump writer thread (dumpwriter.c): it writes (and uploads)
 * the dumps the watchdogs captured, so no watchdog waits on the disk. A
 * job: capture (stolen by a job that was made), reason (static), o (copied,
 * NULL none); owner's dump directory and membership session (the upload of
 * a dump with an incident). ftc__dw_submit steals the job. A communicator
 * retains the writer while its watchdog runs; ftc__dw_release waits up to
 * FTCOMM_DUMP_DRAIN_MS for its jobs, drops the rest with a log line, and
 * the last one joins the thread. */
typedef struct ftc__dw_job ftc__dw_job_t;
ftc__dw_job_t *ftc__dw_job_new(ftc_comm_t *owner, ftc_rec_capture_t *capture, const char *reason,
                               const ftc_rec_outcome_t *o, uint64_t epoch, int status,
                               const char *incident, int rank);
void ftc__dw_job_free(ftc__dw_job_t *job);
void ftc__dw_submit(ftc__dw_job_t *job);
void ftc__dw_retain(void);
void ftc__dw_release(ftc_comm_t *owner);
/* Keep job's capture and path after it is written with a pending verdict,
 * for ftc__dw_verdict; its id (before ftc__dw_submit). */
uint64_t ftc__dw_job_keep_for_verdict(ftc__dw_job_t *job);
/* The coordinator's verdict on owner's kept job id came (o copied): the
 * job is written with it if it still waits, else its file is written again
 * with it and swapped in whole. Nothing if the job was let go. */
void ftc__dw_verdict(ftc_comm_t *owner, uint64_t id, const ftc_rec_outcome_t *o);
/* How many jobs wait, and whether one is being written (for tests). */
void ftc__dw_stats(int *queued, int *busy);

/* Fault injection (fault.c), off unless FTCOMM_FAULT is set: parsed once.
 * ftc__fault_armed is read on the hot path (one predictable branch). */
extern int ftc__fault_armed;
void ftc__fault_init(void);
/* What FTCOMM_FAULT arms: -1 (0 for jkill and the delays) when not. */
typedef struct ftc__fault_spec {
  int64_t kill_step, stop_step, slow_ms, drop_seq, delay_seq, delay_ms, rkill, jkill;
  int64_t giveup_seq, blink_step, late_view_ms, dump_write_ms, move_hold;
} ftc__fault_spec_t;
#define FTC__FAULT_SPEC_INIT {-1, -1, 0, -1, -1, 0, -1, 0, -1, -1, 0, 0, -1}
#define FTC__FAULT_MAX 1000000000000LL /* the largest count or milliseconds */
/* Parse an FTCOMM_FAULT value (fault.c's opening comment) into *out: 0; or
 * -1 with [*bad, *bad + *badlen) the first item that is not one (*out
 * untouched). */
int ftc__fault_parse(const char *spec, ftc__fault_spec_t *out, const char **bad, int *badlen);
/* At the step boundary, `step` counted from 1: kill, stop, slow, blink. */
void ftc__fault_step(ftc_comm_t *comm, uint64_t step);
/* In the n-th move to a new epoch (from 1), before connecting it. */
void ftc__fault_recover(uint64_t n);
/* In the n-th move, once it connected `epoch` (movehold@N). */
void ftc__fault_moved(ftc_comm_t *comm, uint64_t n, uint64_t epoch);
/* A joiner admitted to an epoch, before connecting it. */
void ftc__fault_join(void);
/* Before collective `seq` of the epoch runs: drop a connection, delay. */
void ftc__fault_coll(ftc_comm_t *comm, uint64_t seq);
/* After collective `seq` completed on this rank: FTC_OK, or the failure to
 * report instead (giveup@SEQ). */
ftc_status_t ftc__fault_coll_done(ftc_comm_t *comm, uint64_t seq);
/* On the dump writer thread, before a dump is written (dumpwrite:MS). */
void ftc__fault_dump_write(void);

/* Engine (engine.c). */
ftc_status_t ftc__engine_start(ftc_comm_t *comm);
void ftc__engine_stop(ftc_comm_t *comm);
void ftc__engine_wake(ftc_comm_t *comm);
/* Submit op: run it on this thread when nothing is queued (blocking calls),
 * else queue it and wait. timeout_ms as in the public API. */
ftc_status_t ftc__submit_blocking(ftc_comm_t *comm, const ftc__op_t *op, int timeout_ms);
/* A timeout argument of a call whose timeout fails an operation others take
 * part in (collectives, point-to-point, ftc_wait, ftc_comm_step, the
 * splits): > 0, FTC_TIMEOUT_DEFAULT or FTC_TIMEOUT_INFINITE; 0 is refused. */
ftc_status_t ftc__check_timeout(const char *fn, int timeout_ms);
ftc_status_t ftc__submit_async(ftc_comm_t *comm, const ftc__op_t *op, ftc_request_t **req);
/* Complete every queued request with status (lock held). */
void ftc__engine_drain_locked(ftc_comm_t *comm, ftc_status_t status, const char *why);
/* The idle watch's list of a data plane's sockets: room for every one
 * be->peer_fds lists in a world of `size` ranks (every peer's, then the
 * lower ranks' shared ones: 2 * size - 2 at most), made once per epoch.
 * init: 0, or -1 when out of memory; free on a zeroed or freed watch is a
 * no-op. */
typedef struct ftc__peer_watch {
  int cap;           /* entries fds and ranks hold */
  int n;             /* as many as the last fill listed */
  int *fds, *ranks;
} ftc__peer_watch_t;
int ftc__peer_watch_init(ftc__peer_watch_t *w, int size);
void ftc__peer_watch_free(ftc__peer_watch_t *w);
/* List bh's sockets into w and a POLLRDHUP watch of each into pfd (room
 * for w->cap), skipping the ranks marked in ignore[0..nignore-1]; returns
 * the number of watches. No allocation. */
int ftc__peer_watch_fill(ftc__peer_watch_t *w, const ftc__backend_ops_t *be, const void *bh,
                         const unsigned char *ignore, int nignore, struct pollfd *pfd);

/* Flight-recorder seam (record.c): the four points of a collective's life. */
/* `now` is a ftc__now_ns() the caller already read (on some VMs the clock read
 * costs more than recording itself: docs/benchmarks.md), or 0 to read it here. */
uint64_t ftc__record_schedule(ftc_comm_t *comm, const ftc__op_t *op, uint64_t seq, int64_t timeout_ns,
                              int64_t now);
void ftc__record_start(ftc_comm_t *comm, uint64_t id, int64_t now);
void ftc__record_end(ftc_comm_t *comm, uint64_t id, ftc_status_t st);

#endif
