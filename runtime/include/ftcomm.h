/*
 * ftcomm.h - the public API of libftcomm, a fault-tolerant collective
 * communication library.
 *
 * A communicator (ftc_comm_t) is a group of ranks that run collectives
 * together. Ranks find each other through a coordinator (hosted by the
 * Kubernetes controller or by ftcomm-run); the data plane is direct between
 * ranks. When a rank dies or hangs, collectives fail with a clear status
 * instead of hanging, and the survivors recover at a step boundary.
 *
 * Conventions
 *   - Every call that can fail returns ftc_status_t; outputs go through
 *     pointers. FTC_OK is 0. Codes are only ever appended.
 *   - ftc_last_error() returns a thread-local, human-readable detail for the
 *     last failure on the calling thread (what went wrong and what to fix).
 *   - destroy(NULL) is a no-op.
 *   - Thread safety: a communicator may be used from one application thread at
 *     a time (like an MPI communicator without MPI_THREAD_MULTIPLE), except
 *     ftc_comm_abort() and the query calls, which are safe from any thread.
 *     Requests may be tested or waited on from any thread, one thread per
 *     request.
 *   - Timeouts are in milliseconds; FTC_TIMEOUT_DEFAULT selects the
 *     communicator's configured timeout, FTC_TIMEOUT_INFINITE waits forever.
 *     0 is FTC_ERR_INVALID_ARGUMENT where a timeout fails an operation other
 *     ranks take part in (collectives, point-to-point, ftc_wait,
 *     ftc_comm_step, the splits); ftc_comm_recover takes 0 as a poll.
 */
#ifndef FTCOMM_H
#define FTCOMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FTC_API __attribute__((visibility("default")))
#else
#define FTC_API
#endif

#define FTC_VERSION_MAJOR 0
#define FTC_VERSION_MINOR 1
#define FTC_VERSION_PATCH 0
#define FTC_VERSION_CODE (FTC_VERSION_MAJOR * 10000 + FTC_VERSION_MINOR * 100 + FTC_VERSION_PATCH)

/* Status codes. Never renumbered; new codes are appended before FTC_STATUS_COUNT. */
typedef enum ftc_status {
  FTC_OK = 0,
  FTC_ERR_INVALID_ARGUMENT = 1, /* a NULL buffer, unknown dtype/op, rank out of range, ... */
  FTC_ERR_NO_MEMORY = 2,
  FTC_ERR_SYSTEM = 3,           /* a system call failed; ftc_last_error() has errno's text */
  FTC_ERR_TIMEOUT = 4,          /* an operation did not finish within its timeout */
  FTC_ERR_PEER_LOST = 5,        /* a peer rank died or its connection broke */
  FTC_ERR_REVOKED = 6,          /* the communicator's epoch was revoked; call ftc_comm_recover */
  FTC_ERR_AUTH = 7,             /* the job token was refused */
  FTC_ERR_PROTOCOL = 8,         /* a malformed or unexpected message from a peer or coordinator */
  FTC_ERR_BELOW_MIN_SIZE = 9,   /* fewer ranks than the job's minimum, and no joiner came in time */
  FTC_ERR_NOT_SUPPORTED = 10,   /* the backend or library version cannot do this */
  FTC_ERR_BACKEND = 11,         /* the backend library (NCCL/RCCL) reported an error */
  FTC_ERR_LIBRARY_NOT_FOUND = 12, /* a backend library could not be loaded */
  FTC_ERR_IN_PROGRESS = 13,     /* a request has not completed yet (ftc_test) */
  FTC_ERR_ABORTED = 14,         /* the communicator was aborted locally */
  FTC_ERR_CONFIG = 15,          /* bad configuration or FTCOMM_* environment variable */
  FTC_ERR_COORDINATOR = 16,     /* the coordinator could not be reached or closed the session */
  FTC_ERR_INTERNAL = 17,        /* a bug in ftcomm; please report it */
  FTC_ERR_MISMATCH = 18,        /* ranks called one collective (or a send and its receive) with
                                 * different arguments; ftc_last_error() names both; the epoch
                                 * is failed: recover before the next collective */
  FTC_STATUS_COUNT
} ftc_status_t;

/* A static, English description of a status code. Never NULL. */
FTC_API const char *ftc_strerror(ftc_status_t status);

/* Detail of the last failure on the calling thread (thread-local storage,
 * valid until the next ftcomm call on this thread). Never NULL; "" if none. */
FTC_API const char *ftc_last_error(void);

/* Library version, as FTC_VERSION_CODE, for a runtime check against the header. */
FTC_API int ftc_version(void);

typedef enum ftc_dtype {
  FTC_F32 = 0,
  FTC_F64 = 1,
  FTC_F16 = 2,  /* IEEE 754 binary16 */
  FTC_BF16 = 3, /* bfloat16; reductions round to nearest even */
  FTC_I32 = 4,
  FTC_I64 = 5,
  FTC_U8 = 6,
  FTC_DTYPE_COUNT
} ftc_dtype_t;

typedef enum ftc_op {
  FTC_SUM = 0,
  FTC_PROD = 1,
  FTC_MIN = 2,
  FTC_MAX = 3,
  FTC_AVG = 4, /* sum divided by the communicator size (integer types truncate toward zero) */
  FTC_BAND = 5, /* bitwise and, or, xor: integer dtypes (i32, i64, u8) only; not on NCCL, */
  FTC_BOR = 6,  /* which has no bitwise reductions (FTC_ERR_NOT_SUPPORTED there) */
  FTC_BXOR = 7,
  FTC_OP_COUNT
} ftc_op_t;

/* Size in bytes of one element, or 0 for an unknown dtype. */
FTC_API size_t ftc_dtype_size(ftc_dtype_t dtype);
FTC_API const char *ftc_dtype_name(ftc_dtype_t dtype); /* "f32", ...; "?" if unknown */
FTC_API const char *ftc_op_name(ftc_op_t op);          /* "sum", ...; "?" if unknown */

#define FTC_TIMEOUT_DEFAULT (-1)
#define FTC_TIMEOUT_INFINITE (-2)

/*
 * Configuration. Fill with FTC_CONFIG_INITIALIZER, set what you need, and pass
 * to ftc_comm_create(). Every field left unset is taken from the FTCOMM_*
 * environment (see docs/environment.md), then from the built-in default.
 * Strings are copied by ftc_comm_create(); the caller keeps ownership.
 */
#define FTC_CONFIG_VERSION 1
#define FTC_UNSET_INT (-2147483647 - 1)
typedef struct ftc_config {
  size_t size;              /* sizeof(ftc_config_t), set by the initializer; a smaller one (a
                             * program built against an older header) is read field by field:
                             * those that fit, the rest take their defaults */
  unsigned int version;     /* FTC_CONFIG_VERSION, set by the initializer */
  const char *job;          /* FTCOMM_JOB: job name, in logs and dumps */
  const char *coordinator;  /* FTCOMM_COORDINATOR: host:port of the coordinator */
  const char *token;        /* FTCOMM_TOKEN: per-job secret for the coordinator and peers */
  int slot;                 /* FTCOMM_SLOT: stable slot of this process in the job (0..replicas-1) */
  int world_size;           /* FTCOMM_WORLD_SIZE: ranks expected at the first epoch */
  int min_size;             /* FTCOMM_MIN_SIZE: smallest world that may keep training */
  int joiner;               /* FTCOMM_JOINER: 1 if this process replaces a lost rank */
  int timeout_ms;           /* FTCOMM_TIMEOUT_MS: default collective timeout */
  int connect_timeout_ms;   /* FTCOMM_CONNECT_TIMEOUT_MS: bootstrap and peer connection timeout */
  const char *backend;      /* FTCOMM_BACKEND: "tcp", "nccl" or "auto" */
  const char *bind_host;    /* FTCOMM_BIND_HOST: address the data plane listens on */
  const char *advertise_host; /* FTCOMM_ADVERTISE_HOST: address peers use to reach this rank */
  const char *dump_dir;     /* FTCOMM_DUMP_DIR: where flight-recorder dumps are written */
  int recorder_entries;     /* FTCOMM_RECORDER_ENTRIES: ring size per communicator, 0 disables */
} ftc_config_t;

#define FTC_CONFIG_INITIALIZER                                                  \
  {                                                                             \
    sizeof(ftc_config_t), FTC_CONFIG_VERSION, NULL, NULL, NULL, FTC_UNSET_INT, \
        FTC_UNSET_INT, FTC_UNSET_INT, FTC_UNSET_INT, FTC_UNSET_INT,             \
        FTC_UNSET_INT, NULL, NULL, NULL, NULL, FTC_UNSET_INT                    \
  }

/* Fill every unset field of *cfg from the environment (as it is at the call)
 * and the defaults, and check the ranges. On failure, *cfg may be partly filled and
 * ftc_last_error() names the variable and the allowed range. String fields
 * point into the environment or static storage: valid while the environment
 * is not modified. */
FTC_API ftc_status_t ftc_config_resolve(ftc_config_t *cfg);

typedef struct ftc_comm ftc_comm_t;
typedef struct ftc_request ftc_request_t;

/*
 * Create a communicator: connect to the coordinator, join the job, wait for
 * the first epoch and connect to the peers. Blocks up to connect_timeout_ms.
 * cfg may be NULL (everything from the environment). On success *comm owns
 * the communicator; free it with ftc_comm_destroy(). On failure *comm is NULL.
 */
FTC_API ftc_status_t ftc_comm_create(const ftc_config_t *cfg, ftc_comm_t **comm);

/*
 * ftc_comm_create in two halves, for a process with its own initialization
 * to do first (a replacement that loads its model and data): begin does
 * everything that needs no other rank (the configuration, the data-plane
 * listener, the flight recorder, the connection to the coordinator) and
 * registers this process there as a standby member: it holds its slot and
 * heartbeats, but is neither admitted to an epoch nor counted for the first
 * one. begin returns once the hello is sent, without waiting for the answer.
 * When the application is ready, finish asks to be admitted: a joiner enters
 * at the next epoch (the running ranks take it at their next step boundary,
 * docs/recovery.md), an initial rank counts for the first epoch; finish
 * then returns as ftc_comm_create would, within connect_timeout_ms of the
 * finish call. The work begin did is off the way from "ready" to the
 * first collective (docs/recovery.md, "Joining early").
 *
 *   ftc_comm_pending_t *pending;
 *   ftc_comm_create_begin(NULL, &pending);    // first thing in main()
 *   load_model_and_data();                     // the application's own start
 *   ftc_comm_create_finish(pending, &comm);    // ready: admitted, connected
 *
 * finish consumes the pending handle, on failure too (*comm is then NULL);
 * cancel leaves the job without joining and frees it (NULL is a no-op).
 * A coordinator older than this call admits the process at its hello, and
 * finish then works as before, the early start is lost: the others wait at
 * their step boundary until the application calls finish.
 */
typedef struct ftc_comm_pending ftc_comm_pending_t;
FTC_API ftc_status_t ftc_comm_create_begin(const ftc_config_t *cfg, ftc_comm_pending_t **pending);
FTC_API ftc_status_t ftc_comm_create_finish(ftc_comm_pending_t *pending, ftc_comm_t **comm);
FTC_API void ftc_comm_create_cancel(ftc_comm_pending_t *pending);

/* Leave the job cleanly and free the communicator. Pending requests are
 * failed with FTC_ERR_ABORTED and must still be freed. NULL is a no-op. */
FTC_API ftc_status_t ftc_comm_destroy(ftc_comm_t *comm);

/* Abort: fail every pending and future collective with FTC_ERR_ABORTED and
 * close the peer connections without waiting for anyone. Safe from any
 * thread, including a signal-free watchdog. The handle must still be
 * destroyed. */
FTC_API ftc_status_t ftc_comm_abort(ftc_comm_t *comm);

/* Queries; safe from any thread. Values describe the current epoch. */
FTC_API ftc_status_t ftc_comm_rank(const ftc_comm_t *comm, int *rank);
FTC_API ftc_status_t ftc_comm_size(const ftc_comm_t *comm, int *size);
FTC_API ftc_status_t ftc_comm_epoch(const ftc_comm_t *comm, uint64_t *epoch);

/* The error that broke the communicator, stored by a background thread
 * (FTC_OK while healthy). Like ncclCommGetAsyncError. */
FTC_API ftc_status_t ftc_comm_get_async_error(const ftc_comm_t *comm, ftc_status_t *error);

/*
 * Collectives. Every rank of the epoch calls them in the same order with
 * matching count, dtype, op and root. In-place: pass the same pointer as
 * send and recv (for allgather, sendbuf == recvbuf + rank * count elements;
 * for reduce-scatter, sendbuf == recvbuf is allowed with recvbuf holding
 * size * count elements). count is in elements, per rank where it says so.
 * Buffers stay owned by the caller and must stay valid until the call (or
 * its request) completes.
 *
 * Blocking calls wait up to timeout_ms. A collective that times out or loses
 * a peer fails on every rank that can still be reached, and the communicator
 * must then be recovered before the next collective (FTC_ERR_REVOKED until
 * then).
 */
FTC_API ftc_status_t ftc_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                   ftc_dtype_t dtype, ftc_op_t op, ftc_comm_t *comm,
                                   int timeout_ms);
FTC_API ftc_status_t ftc_broadcast(void *buf, size_t count, ftc_dtype_t dtype, int root,
                                   ftc_comm_t *comm, int timeout_ms);
/* recvbuf is only written on root (and may be NULL elsewhere). */
FTC_API ftc_status_t ftc_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                ftc_dtype_t dtype, ftc_op_t op, int root, ftc_comm_t *comm,
                                int timeout_ms);
/* sendcount elements per rank; recvbuf holds size * sendcount elements. */
FTC_API ftc_status_t ftc_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   ftc_dtype_t dtype, ftc_comm_t *comm, int timeout_ms);
/* sendbuf holds size * recvcount elements; each rank receives its recvcount. */
FTC_API ftc_status_t ftc_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                        ftc_dtype_t dtype, ftc_op_t op, ftc_comm_t *comm,
                                        int timeout_ms);
/* count elements to and from each rank; both buffers hold size * count elements. */
FTC_API ftc_status_t ftc_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                  ftc_dtype_t dtype, ftc_comm_t *comm, int timeout_ms);
/*
 * Uneven counts, gather and scatter. Counts and displacements are in
 * elements, one per rank of the communicator (size entries); a
 * displacement array may be NULL: the blocks are then packed in rank order
 * (rank q's block starts after the blocks of ranks 0 .. q-1). The arrays
 * are read during the call and copied by the asynchronous calls: the caller
 * may free them once the call returns. Every rank passes matching counts
 * (as every rank passes the same count to ftc_allgather); nothing checks it,
 * and ranks that disagree fail that collective, time out or get wrong data.
 */
/* Rank q contributes recvcounts[q] elements, which land at recvbuf +
 * displs[q] on every rank; sendbuf holds recvcounts[rank] elements. Every
 * rank passes the same recvcounts (and displs). In place: sendbuf ==
 * recvbuf + displs[rank]. */
FTC_API ftc_status_t ftc_allgatherv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                    const size_t *displs, ftc_dtype_t dtype, ftc_comm_t *comm,
                                    int timeout_ms);
/* This rank sends sendcounts[q] elements from sendbuf + sdispls[q] to rank
 * q, and receives recvcounts[q] elements from rank q at recvbuf +
 * rdispls[q]; sendcounts[q] on rank r equals recvcounts[r] on rank q. Zero
 * counts are allowed. Not in place: the buffers must not overlap. */
FTC_API ftc_status_t ftc_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                   const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                   const size_t *rdispls, ftc_dtype_t dtype, ftc_comm_t *comm,
                                   int timeout_ms);
/* Every rank sends count elements to root, which receives rank q's at
 * recvbuf + q * count (recvbuf: size * count elements, only on root, may be
 * NULL elsewhere). In place on root: sendbuf == recvbuf + root * count. */
FTC_API ftc_status_t ftc_gather(const void *sendbuf, void *recvbuf, size_t count,
                                ftc_dtype_t dtype, int root, ftc_comm_t *comm, int timeout_ms);
/* Root sends sendbuf + q * count (size * count elements, only on root, may
 * be NULL elsewhere) to rank q, which receives count elements in recvbuf.
 * In place on root: recvbuf == sendbuf + root * count. */
FTC_API ftc_status_t ftc_scatter(const void *sendbuf, void *recvbuf, size_t count,
                                 ftc_dtype_t dtype, int root, ftc_comm_t *comm, int timeout_ms);
FTC_API ftc_status_t ftc_barrier(ftc_comm_t *comm, int timeout_ms);
FTC_API ftc_status_t ftc_send(const void *buf, size_t count, ftc_dtype_t dtype, int peer,
                              ftc_comm_t *comm, int timeout_ms);
FTC_API ftc_status_t ftc_recv(void *buf, size_t count, ftc_dtype_t dtype, int peer,
                              ftc_comm_t *comm, int timeout_ms);

/*
 * Asynchronous collectives: same arguments, no timeout; on success *req owns
 * a request to complete with ftc_wait()/ftc_test() and free with
 * ftc_request_free(). The communicator's timeout still applies: a collective
 * that runs past it fails with FTC_ERR_TIMEOUT. Requests run in the order
 * they were started; consecutive ftc_isend/ftc_irecv run together, each
 * peer's and direction's in posting order (the n-th receive from a peer
 * gets its n-th send to this rank, of the same count and dtype, else
 * FTC_ERR_MISMATCH), and each completes when its own bytes have moved.
 */
FTC_API ftc_status_t ftc_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                    ftc_dtype_t dtype, ftc_op_t op, ftc_comm_t *comm,
                                    ftc_request_t **req);
FTC_API ftc_status_t ftc_ibroadcast(void *buf, size_t count, ftc_dtype_t dtype, int root,
                                    ftc_comm_t *comm, ftc_request_t **req);
FTC_API ftc_status_t ftc_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                                 ftc_dtype_t dtype, ftc_op_t op, int root, ftc_comm_t *comm,
                                 ftc_request_t **req);
FTC_API ftc_status_t ftc_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                    ftc_dtype_t dtype, ftc_comm_t *comm, ftc_request_t **req);
FTC_API ftc_status_t ftc_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                         ftc_dtype_t dtype, ftc_op_t op, ftc_comm_t *comm,
                                         ftc_request_t **req);
FTC_API ftc_status_t ftc_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                                   ftc_dtype_t dtype, ftc_comm_t *comm, ftc_request_t **req);
FTC_API ftc_status_t ftc_iallgatherv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                                     const size_t *displs, ftc_dtype_t dtype, ftc_comm_t *comm,
                                     ftc_request_t **req);
FTC_API ftc_status_t ftc_ialltoallv(const void *sendbuf, const size_t *sendcounts,
                                    const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                    const size_t *rdispls, ftc_dtype_t dtype, ftc_comm_t *comm,
                                    ftc_request_t **req);
FTC_API ftc_status_t ftc_igather(const void *sendbuf, void *recvbuf, size_t count,
                                 ftc_dtype_t dtype, int root, ftc_comm_t *comm, ftc_request_t **req);
FTC_API ftc_status_t ftc_iscatter(const void *sendbuf, void *recvbuf, size_t count,
                                  ftc_dtype_t dtype, int root, ftc_comm_t *comm,
                                  ftc_request_t **req);
FTC_API ftc_status_t ftc_ibarrier(ftc_comm_t *comm, ftc_request_t **req);
FTC_API ftc_status_t ftc_isend(const void *buf, size_t count, ftc_dtype_t dtype, int peer,
                               ftc_comm_t *comm, ftc_request_t **req);
FTC_API ftc_status_t ftc_irecv(void *buf, size_t count, ftc_dtype_t dtype, int peer,
                               ftc_comm_t *comm, ftc_request_t **req);

/* Wait up to timeout_ms for the request. Returns the operation's status, or
 * FTC_ERR_TIMEOUT if it did not complete in time; a timed-out wait fails the
 * operation (and the communicator's epoch) like a blocking call would. */
FTC_API ftc_status_t ftc_wait(ftc_request_t *req, int timeout_ms);

/* Non-destructive poll: *done = 1 and the operation's status once complete,
 * *done = 0 and FTC_OK while running. */
FTC_API ftc_status_t ftc_test(ftc_request_t *req, int *done);

/*
 * Completion callback: fn(req, status, arg) is called once, when the request
 * completes (successfully or not), so that a program can learn of completions
 * without a thread blocked in ftc_wait() or polling ftc_test(). At most one
 * per request. Threading contract:
 *   - fn runs on the thread that completes the request: the communicator's
 *     progress thread, or the thread that aborts or destroys the
 *     communicator (which fails what is pending), or, for a request that
 *     completed before the call, on the calling thread before
 *     ftc_request_on_complete returns.
 *   - It may run while libftcomm holds the communicator's internal locks and
 *     while the progress thread is between collectives: it must return
 *     quickly (set a flag, signal a condition variable, push onto a queue)
 *     and must not call libftcomm, except ftc_test() and ftc_request_free()
 *     on completed requests (this one included: the library keeps its own
 *     reference until fn returns).
 *   - During fn, ftc_last_error() on that thread is the request's detail.
 *   - Requests complete in the order they were started (send/recv each when
 *     its own bytes have moved), so their callbacks run in that order; an
 *     abort or destroy fails the queued ones at once, maybe before the one
 *     it interrupts.
 *   - Freeing a request does not cancel its callback. Once fn has run,
 *     ftc_wait() and ftc_test() return the status at once.
 */
typedef void (*ftc_request_callback_t)(ftc_request_t *req, ftc_status_t status, void *arg);
FTC_API ftc_status_t ftc_request_on_complete(ftc_request_t *req, ftc_request_callback_t fn,
                                             void *arg);

/* Free a request. Freeing a request that is still running detaches it: the
 * collective goes on in the background and its buffers must stay valid until
 * the communicator is destroyed or a later request completes. NULL is a no-op. */
FTC_API void ftc_request_free(ftc_request_t *req);

/*
 * Recovery (docs/recovery.md).
 *
 * A collective that cannot complete returns FTC_ERR_PEER_LOST, FTC_ERR_TIMEOUT
 * or FTC_ERR_REVOKED on every rank that can still be reached, within its
 * timeout; the communicator is then failed and every later collective
 * returns FTC_ERR_REVOKED until ftc_comm_recover() succeeds. Recovery is
 * called at a step boundary, by every surviving rank:
 *
 *   int recovered = 0;
 *   for (;;) {
 *     int synced = 0;
 *     if (recovered) st = sync_state(&info), synced = 1;     // recovery was the boundary
 *     else if ((st = ftc_comm_step(comm, FTC_TIMEOUT_DEFAULT, &info)) == FTC_OK &&
 *              info.changed)
 *       st = sync_state(&info), synced = 1;                  // grew (joiners too)
 *     recovered = 0;
 *     if (st == FTC_OK && done(step)) {                       // the end: only after a
 *       if (!synced) break;                                   // boundary with no change
 *       continue;                                             // since the last update
 *     }
 *     if (st == FTC_OK) st = train_one_step(comm);            // collectives
 *     if (st == FTC_OK) continue;
 *     st = ftc_comm_recover(comm, FTC_TIMEOUT_DEFAULT, &info); // shrink
 *     if (st != FTC_OK) break;                                 // below minimum, excluded, ...
 *     recovered = 1;                                           // sync, then redo the step
 *   }
 *
 * A successful ftc_comm_recover() is the step boundary of the step that is
 * redone: do not call ftc_comm_step() again before it. A joiner admitted
 * with the recovery sees its first ftc_comm_step() return changed = 1 at
 * that same point, so every rank runs the same collectives in order.
 *
 * FTC_OK from a collective is this rank's outcome, not the job's: a late
 * rank can complete a collective its peers gave up on (from data they sent
 * before failing) and sees the failure at its next collective at the
 * latest. So survivors may come out of ftc_comm_recover() one step apart.
 * What a survivor must do after recover: agree on the newest state among
 * the survivors (e.g. an allreduce MAX of the step, then a broadcast of the
 * state and step from the lowest rank holding it, to every rank, not only
 * to joiners) instead of each redoing its own last step. And a state change
 * is final only once a later collective completes on every rank: end (or
 * checkpoint) after a step boundary that follows the last update with no
 * sync in between, never right after the update's own collective.
 *
 * The coordinator alone decides membership; the survivors agree by taking
 * the epoch it announces. Ranks are renumbered contiguously in slot order
 * (like ncclCommShrink), so survivors keep their relative order.
 */
typedef struct ftc_epoch_info {
  size_t struct_size; /* sizeof(ftc_epoch_info_t), set by FTC_EPOCH_INFO_INIT: the library
                       * writes nothing past it (a program built against an older header
                       * gets the fields it knows); 0 means this header's size */
  uint64_t epoch;     /* the communicator's epoch (after the call) */
  int rank, size;     /* this process in it */
  int prev_rank;      /* this process's rank before the change; -1 for a joiner */
  int prev_size;      /* size before the change; 0 for a joiner's first epoch */
  int changed;        /* 1: the membership changed in this call */
  int lost;           /* members of the previous epoch missing from this one */
  int joined;         /* new members: holding no state (ftc_comm_rank_is_new) */
  int sync_root;      /* lowest rank that holds the application's state (not new);
                       * -1 when none */
  int joiner;         /* 1: this process was started as a joiner (FTCOMM_JOINER=1) and
                       * has not yet finished a step: it needs the application's state */
} ftc_epoch_info_t;

/* ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT; */
#define FTC_EPOCH_INFO_INIT {sizeof(ftc_epoch_info_t)}

/* Recover a failed communicator: block up to timeout_ms (FTC_TIMEOUT_DEFAULT:
 * FTCOMM_RECOVER_TIMEOUT_MS) until the coordinator announces the next epoch
 * of the survivors (and any joiners admitted with it), then connect the data
 * plane for it; *info (may be NULL) describes the new epoch. Retries with a
 * later epoch when another rank fails during the recovery. On a healthy
 * communicator with no newer epoch it returns FTC_OK at once, changed = 0.
 * Returns FTC_ERR_BELOW_MIN_SIZE when fewer than the job's minimum remain and
 * no joiner came in time, FTC_ERR_COORDINATOR when this process was excluded
 * (or the coordinator is gone), FTC_ERR_TIMEOUT otherwise; the communicator
 * stays failed and may be recovered again or destroyed. */
FTC_API ftc_status_t ftc_comm_recover(ftc_comm_t *comm, int timeout_ms, ftc_epoch_info_t *info);

/* The step boundary. Counts the step (fault injection uses the count) and
 * runs one 8-byte allreduce through which every rank learns the same
 * decision: when every rank has been told of a newer epoch (a joiner was
 * admitted), all of them move to it in this call (info->changed = 1) and the
 * application then sends the newcomers its state (e.g. a broadcast from
 * info->sync_root). A joiner's first call returns at once with changed = 1
 * and joiner = 1, no collective: it stands for the step boundary at which
 * the others admitted it, so every rank of the grown epoch sees changed = 1
 * from the same call. Returns the allreduce's error on a failed epoch (call
 * ftc_comm_recover). timeout_ms as for collectives. */
FTC_API ftc_status_t ftc_comm_step(ftc_comm_t *comm, int timeout_ms, ftc_epoch_info_t *info);

/* The step boundary with its agreement carried by a collective of the
 * application's own (e.g. the step's gradient reduction), so that a step in
 * which nobody has heard of a newer epoch runs no collective of its own:
 *
 *   ftc_comm_step_vote(comm, &vote);        // 0, or 1: a newer epoch is known here
 *   grads[n] = vote;                        // one more element, not scaled
 *   ftc_allreduce(grads, grads, n + 1, FTC_F32, FTC_SUM, comm, ...);
 *   ftc_comm_step_voted(comm, grads[n] != 0, FTC_TIMEOUT_DEFAULT, &info);
 *
 * ftc_comm_step_vote() reads this rank's vote (never blocks, moves nothing).
 * Every rank puts it, unscaled, into a SUM reduction over this epoch, and
 * after that reduction completed on this rank passes the reduced vote to
 * ftc_comm_step_voted() (votes != 0: somebody voted 1). A sum of 0s and 1s
 * is 0 exactly when every vote is 0, in any integer or floating type, so
 * every rank passes the same decision. votes == 0: the boundary completes
 * here, with no collective (info->changed = 0); votes != 0: the ranks run
 * ftc_comm_step()'s allreduce, which agrees on the newer epoch, and move to it.
 * The pair counts one step and is, in every other way, one ftc_comm_step()
 * (a joiner's first call too); a failed reduction is a failed step:
 * recover, do not call ftc_comm_step_voted(). On a failed epoch
 * ftc_comm_step_voted() returns FTC_ERR_REVOKED as a collective would. */
FTC_API ftc_status_t ftc_comm_step_vote(ftc_comm_t *comm, int *vote);
FTC_API ftc_status_t ftc_comm_step_voted(ftc_comm_t *comm, int votes, int timeout_ms,
                                         ftc_epoch_info_t *info);

/* The state hand-off after a recovery or a grow, which every loop writes
 * the same way: every rank passes its application state (`bytes` bytes, the
 * same size on every rank) and the step it holds (*step, -1 for none: a
 * joiner); the lowest rank holding the highest step sends its state and
 * step to every rank (one 8-byte allreduce and one broadcast). On FTC_OK,
 * state and *step are that rank's everywhere and *root (may be NULL) names
 * it. FTC_ERR_BELOW_MIN_SIZE when no rank holds a state (every step < 0). A
 * failed collective returns its error (recover, then call it again) and
 * leaves state and *step as they were: a broadcast that fails half way never
 * leaves a mix of two states. *step must be below 2^42. */
FTC_API ftc_status_t ftc_comm_sync_state(ftc_comm_t *comm, void *state, size_t bytes,
                                         int64_t *step, int timeout_ms, int *root);

/* The current epoch, described as ftc_comm_recover() would (changed = 0).
 * From the application thread (the view changes only inside its calls). */
FTC_API ftc_status_t ftc_comm_info(const ftc_comm_t *comm, ftc_epoch_info_t *info);

/*
 * Sub-communicators (docs/api.md, "Sub-communicators"), as MPI_Comm_split
 * and torch.distributed.new_group. A child is a communicator of its own
 * (its own connections, progress thread and flight-recorder ring) over some
 * ranks of its parent, which it follows:
 *   - A failure in the child (a lost, hung or revoked peer) fails the
 *     parent's epoch too, naming the same peer, so the job recovers as for
 *     a failure in the parent; a failure of the parent's epoch fails every
 *     child with FTC_ERR_REVOKED.
 *   - When the parent moves to a new epoch (ftc_comm_recover, or a grow at
 *     ftc_comm_step), every child is revoked: its collectives return
 *     FTC_ERR_REVOKED until ftc_comm_recover(child) re-derives it from the
 *     parent's current epoch. That call is collective over the child's
 *     surviving members only: the members of the child that are still in
 *     the parent, in the same order (ranks renumbered contiguously); info
 *     describes the change as for the parent (prev_rank, lost, ...), and
 *     ftc_comm_lost(child, ...) names who is gone. A child never takes in
 *     the parent's joiners: split again (every rank of the parent, the
 *     joiners too) for a group that includes them. Recover the parent
 *     first: on a child whose parent's epoch is failed it returns
 *     FTC_ERR_REVOKED at once.
 *   - Destroy the children before the parent. A child whose parent was
 *     destroyed keeps working, but can no longer be recovered.
 * Children run on the TCP backend (FTC_ERR_NOT_SUPPORTED on NCCL). The
 * calls below are collective over the parent: every rank of the parent
 * calls them, in the same order; they block up to timeout_ms for the
 * exchange of addresses (an allgather over the parent), then up to the
 * connect timeout (FTCOMM_CONNECT_TIMEOUT_MS) for the child's connections. On
 * success *child owns the new communicator (ftc_comm_destroy), or is NULL
 * on a rank that is in no child.
 */
#define FTC_SPLIT_NONE (-1) /* ftc_comm_split's color for a rank that joins no child */
/* Ranks that pass the same color (>= 0) form one child, ordered by key, then
 * by their rank in the parent. */
FTC_API ftc_status_t ftc_comm_split(ftc_comm_t *parent, int color, int key, int timeout_ms,
                                    ftc_comm_t **child);
/* One child of the parent's ranks ranks[0 .. nranks-1] (distinct, in that
 * order: ranks[i] is the child's rank i), as torch's new_group: every rank
 * of the parent passes the same list (a rank whose list differs from
 * another's gets FTC_ERR_INVALID_ARGUMENT, on every rank). */
FTC_API ftc_status_t ftc_comm_split_ranks(ftc_comm_t *parent, const int *ranks, int nranks,
                                          int timeout_ms, ftc_comm_t **child);
/* The parent's current rank of the child's `rank`, -1 when that member is
 * no longer in the parent's epoch. FTC_ERR_INVALID_ARGUMENT for a rank out
 * of range or a communicator that is not a child (or whose parent was
 * destroyed). From the application thread. */
FTC_API ftc_status_t ftc_comm_parent_rank(const ftc_comm_t *child, int rank, int *parent_rank);

/* Why the coordinator dropped a member (ftc_comm_lost). Only appended. */
typedef enum ftc_drop_reason {
  FTC_DROP_LOST = 0,    /* dropped for another cause, or the coordinator did not say */
  FTC_DROP_CRASHED = 1, /* its coordinator session closed: its process or node is gone */
  FTC_DROP_HUNG = 2,    /* connected but silent past the evidence time: stopped or stuck */
  FTC_DROP_LEFT = 3,    /* it left cleanly (ftc_comm_destroy, the end of its job) */
} ftc_drop_reason_t;

/* "lost", "crashed", "hung", "left"; "?" if unknown. */
FTC_API const char *ftc_drop_reason_name(ftc_drop_reason_t reason);

/* The index-th (0 .. info.lost - 1, in the previous epoch's rank order) member
 * of the previous epoch that the current one left out, i.e. one that
 * ftc_epoch_info_t.lost counts: its rank in the previous epoch, its slot, and
 * the coordinator's reason (FTC_DROP_LOST when the coordinator did not say).
 * Any output pointer may be NULL. FTC_ERR_INVALID_ARGUMENT for an index out
 * of range (the message says how many there are). A query: it adds nothing
 * to ftc_epoch_info_t, whose size is fixed. From the application thread. */
FTC_API ftc_status_t ftc_comm_lost(const ftc_comm_t *comm, int index, int *prev_rank, int *slot,
                                   ftc_drop_reason_t *reason);

/* *is_new = 1 when `rank` of the current epoch holds no application state
 * (it has never completed a step boundary, i.e. an ftc_comm_step whose
 * allreduce succeeded) while another member does, i.e. it needs the state.
 * The coordinator marks this in the view, so every rank of an epoch gets the
 * same answer (docs/recovery.md, "Who is new"). From the application thread. */
FTC_API ftc_status_t ftc_comm_rank_is_new(const ftc_comm_t *comm, int rank, int *is_new);

/* Write a flight-recorder dump of this process now (trigger "api", with
 * `reason` in the file, may be NULL) into FTCOMM_DUMP_DIR; the file's path is
 * copied to path[path_len] when path is not NULL. Safe from any thread. */
FTC_API ftc_status_t ftc_comm_dump(ftc_comm_t *comm, const char *reason, char *path,
                                   size_t path_len);

/*
 * Names for the flight recorder, for a binding that knows its collectives
 * by its own names (docs/dump-format.md; PyTorch's profiling name
 * "nccl:all_reduce", its process group's name "0" and description
 * "default_pg"): ftcomm-trace shows them with the entries.
 *
 * ftc_comm_set_coll_name: the name recorded with every collective this
 * communicator starts from now on, until the next call (NULL or "":
 * none). Names are interned for the whole process (a binding has a
 * handful): at most 63 bytes without control characters, '"' or '\', and
 * at most 1023 distinct ones; FTC_ERR_INVALID_ARGUMENT otherwise, saying
 * which. From the thread that issues the collectives; no allocation once a
 * name is known.
 *
 * ftc_comm_set_group_name: the communicator's group name and description
 * in dumps (copied, cut to 63 bytes; NULL leaves one as it was). Safe from
 * any thread.
 */
FTC_API ftc_status_t ftc_comm_set_coll_name(ftc_comm_t *comm, const char *name);
FTC_API ftc_status_t ftc_comm_set_group_name(ftc_comm_t *comm, const char *name,
                                             const char *desc);

/*
 * GPUs (docs/nccl.md). With the NCCL backend (FTCOMM_BACKEND=nccl, or auto
 * on a host where NCCL loads and sees a GPU) collective buffers are device
 * pointers, and collectives run on a CUDA (or HIP) stream: the
 * communicator's own, or the one given here (a cudaStream_t; NULL: back to
 * its own). A collective (or its request) completes once its work is
 * complete on the stream, polled through CUDA events under the timeout. The
 * device is the one current on the thread that calls ftc_comm_create. Call
 * between collectives, from the application thread. FTC_ERR_NOT_SUPPORTED
 * on TCP.
 */
FTC_API ftc_status_t ftc_comm_set_stream(ftc_comm_t *comm, void *stream);

/*
 * Allreduce algorithm of the TCP backend, like NCCL_ALGO for NCCL. AUTO
 * chooses by size (recursive doubling below FTCOMM_RING_THRESHOLD, or FLAT
 * there when every rank is on one host with at least 2 per online CPU;
 * halving and doubling below FTCOMM_HALVING_MAX, the ring above;
 * docs/api.md); the others force one algorithm for every size: RING (ring
 * reduce-scatter + allgather, pipelined), HALVING (recursive halving
 * reduce-scatter + recursive doubling allgather, Rabenseifner), DOUBLING
 * (recursive doubling of the whole vector) and FLAT (every rank sends its
 * vector to rank 0, which reduces them in rank order and sends the result
 * to each). An allreduce of fewer elements than ranks uses what AUTO uses
 * for small ones in place of RING and HALVING. The default comes from
 * FTCOMM_ALLREDUCE_ALGO (auto|ring|halving|doubling|flat), which, like
 * FTCOMM_RING_THRESHOLD and FTCOMM_HALVING_MAX, must be the same on every
 * rank: ftc_comm_create fails with FTC_ERR_CONFIG on every rank when a
 * peer's differs, naming it. Every algorithm gives every rank the same bits.
 */
typedef enum ftc_algo {
  FTC_ALGO_AUTO = 0,
  FTC_ALGO_RING = 1,
  FTC_ALGO_HALVING = 2,
  FTC_ALGO_DOUBLING = 3,
  FTC_ALGO_FLAT = 4,
  FTC_ALGO_COUNT
} ftc_algo_t;

/* "auto", "ring", "halving", "doubling", "flat"; "?" if unknown. */
FTC_API const char *ftc_algo_name(ftc_algo_t algo);

/* Set the algorithm of this communicator's allreduces from the next one
 * started (a request already started keeps its own). Every rank must call
 * it with the same algorithm before the same collective, as every rank
 * passes the same count and op (NCCL asks the same of its collective
 * arguments): nothing checks it, and ranks that disagree get a wrong
 * result, fail that collective or wait until its timeout. Safe from any thread;
 * FTC_ERR_INVALID_ARGUMENT for an unknown algo, FTC_ERR_NOT_SUPPORTED on
 * the NCCL backend (NCCL reads NCCL_ALGO). */
FTC_API ftc_status_t ftc_comm_set_allreduce_algo(ftc_comm_t *comm, ftc_algo_t algo);

/* The backend in one line, e.g. "tcp" or "NCCL 2.32.3 (libnccl.so.2) path
 * shrink+grow caps nonblocking,split,shrink,revoke,grow" (the recovery path
 * chosen from the library's version), copied into buf[len].
 * FTC_ERR_INVALID_ARGUMENT when it does not fit (buf then holds what fits). */
FTC_API ftc_status_t ftc_comm_backend(const ftc_comm_t *comm, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* FTCOMM_H */
