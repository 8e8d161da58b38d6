/*
 * comm.h - the communicator's internal state, shared by its lifecycle
 * (comm.c), the progress engine and requests (engine.c) and the collective
 * entry points (coll.c).
 *
 * Lock order: comm->lock -> req->mu. Neither is held while a collective
 * runs. comm->busy says one thread (the progress thread, or the application
 * thread on the direct path) owns the data plane; only that thread touches
 * comm->tp's sockets for I/O. Abort and failure only shut sockets down.
 */
#ifndef FTC_CORE_COMM_H
#define FTC_CORE_COMM_H

#include <pthread.h>
#include <stdint.h>

#include "core/op.h"
#include "ftc_recorder.h"
#include "ftcomm.h"
#include "membership/member.h"
#include "tcp/tcp.h"

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
  struct ftc_request *next;
};

enum { REQ_QUEUED = 0, REQ_RUNNING = 1, REQ_DONE = 2 };

struct ftc_comm {
  ftc_config_t cfg;       /* resolved; strings point at the copies below */
  char *strs[8];          /* owned copies of cfg's strings */
  int spin_us;
  int listen_fd;
  char data_addr[160];
  ftc__member_t *member;  /* NULL when built from a view by a test */
  ftc__view_t *view;      /* our deep copy of the current view */
  uint64_t epoch;         /* atomics, for the query calls */
  int rank, size;
  ftc__tcp_cfg_t tcfg;
  ftc__tcp_t *tp;
  ftc_rec_t *rec;
  int interrupt;          /* atomic status; nonzero stops a running collective */
  int error;              /* atomic: the error that broke the epoch (async error) */
  int aborted;            /* atomic */
  uint64_t seq;           /* collective sequence in the epoch, from 1 */
  uint64_t *p2p_seq;      /* [2 * size]: sends to, receives from each peer */
  pthread_mutex_t lock;
  struct ftc_request *head, *tail;
  int busy;
  int stop;
  int wake_fd;
  pthread_t thread;
  int thread_started;
};

/* Lifecycle (comm.c). */
ftc_status_t ftc__comm_create_from_view(const ftc_config_t *cfg, const ftc__view_t *view,
                                        int listen_fd, ftc_comm_t **out);
/* Mark the epoch failed with `why` (first failure wins), stop the running
 * collective and shut the sockets so reachable peers fail fast too. */
void ftc__comm_fail(ftc_comm_t *comm, ftc_status_t why, const char *detail);
/* The status a new collective gets: FTC_OK, FTC_ERR_REVOKED or FTC_ERR_ABORTED. */
ftc_status_t ftc__comm_gate(ftc_comm_t *comm);
/* Replace the data plane with one for `view` (a later epoch): runs on the
 * progress thread between collectives; the failed state is cleared on
 * success. view stays owned by the caller. */
ftc_status_t ftc__comm_rebuild(ftc_comm_t *comm, const ftc__view_t *view);
/* Connect the transport for view (called on the progress thread or at
 * creation). */
ftc_status_t ftc__comm_connect_view(ftc_comm_t *comm, const ftc__view_t *view);

/* Engine (engine.c). */
ftc_status_t ftc__engine_start(ftc_comm_t *comm);
void ftc__engine_stop(ftc_comm_t *comm);
void ftc__engine_wake(ftc_comm_t *comm);
/* Submit op: run it on this thread when nothing is queued (blocking calls),
 * else queue it and wait. timeout_ms as in the public API. */
ftc_status_t ftc__submit_blocking(ftc_comm_t *comm, const ftc__op_t *op, int timeout_ms);
ftc_status_t ftc__submit_async(ftc_comm_t *comm, const ftc__op_t *op, ftc_request_t **req);
/* Complete every queued request with status (lock held). */
void ftc__engine_drain_locked(ftc_comm_t *comm, ftc_status_t status, const char *why);

/* Flight-recorder seam (record.c): the four points of a collective's life. */
uint64_t ftc__record_schedule(ftc_comm_t *comm, const ftc__op_t *op, uint64_t seq, int64_t timeout_ns);
void ftc__record_start(ftc_comm_t *comm, uint64_t id);
void ftc__record_end(ftc_comm_t *comm, uint64_t id, ftc_status_t st);

#endif
