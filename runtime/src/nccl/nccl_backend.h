/*
 * nccl_backend.h - the NCCL/RCCL backend: loads the library and the GPU
 * runtime with dlopen (one libftcomm for CPU-only and GPU hosts), chooses the
 * recovery path from the library's version and symbols, and wraps one
 * nonblocking NCCL communicator per membership epoch.
 *
 * Nothing here links against NCCL or CUDA and this header does not include
 * nccl.h: the core can use it without the NCCL include directories. Unique
 * ids travel as text blobs ("nccl-init:<base64>" or "nccl-grow:<base64>")
 * through the coordinator (ftc__view_t.backend_blob), handed in and out by an
 * exchange the caller provides (ftc__nccl_xchg_t).
 *
 * Every wait is bounded by the caller's deadline: the library is polled with
 * ncclCommGetAsyncError and cudaEventQuery, never waited on, so a hang in the
 * library becomes FTC_ERR_TIMEOUT. After a failure the old communicator is
 * revoked or aborted on every survivor, never destroyed (ncclCommDestroy can
 * hang on a communicator whose peer died).
 *
 * Threading: a communicator is driven by one thread at a time;
 * ftc__nccl_comm_abort() may be called from any thread.
 */
#ifndef FTC_NCCL_BACKEND_H
#define FTC_NCCL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/op.h"
#include "ftcomm.h"
#include "membership/member.h"

#define FTC__NCCL_UID_BYTES 128
/* "nccl-grow:" + base64 of 128 bytes + NUL */
#define FTC__NCCL_BLOB_MAX 192

/* Capabilities found at load time (bit set). */
enum {
  FTC__NCCL_CAP_NONBLOCKING = 1u << 0, /* ncclCommInitRankConfig + ncclCommGetAsyncError (>= 2.14) */
  FTC__NCCL_CAP_SPLIT = 1u << 1,       /* ncclCommSplit (>= 2.18), reorders ranks after a grow */
  FTC__NCCL_CAP_SHRINK = 1u << 2,      /* ncclCommShrink with NCCL_SHRINK_ABORT (>= 2.27) */
  FTC__NCCL_CAP_REVOKE = 1u << 3,      /* ncclCommRevoke (>= 2.28.7) */
  FTC__NCCL_CAP_GROW = 1u << 4,        /* ncclCommGetUniqueId + ncclCommGrow (>= 2.29.2) */
};

/* How the survivors of a failure reach the next epoch. */
typedef enum ftc__nccl_path {
  FTC__NCCL_PATH_REINIT = 0,      /* abort, then a full init with a fresh unique id */
  FTC__NCCL_PATH_SHRINK = 1,      /* shrink on loss; a joiner means a full re-init */
  FTC__NCCL_PATH_SHRINK_GROW = 2, /* shrink on loss, grow for joiners */
} ftc__nccl_path_t;

const char *ftc__nccl_path_name(ftc__nccl_path_t p); /* "abort+reinit", "shrink", "shrink+grow" */

typedef struct ftc__nccl_lib ftc__nccl_lib_t;

typedef struct ftc__nccl_info {
  int version;            /* ncclGetVersion's code, e.g. 23203 */
  int major, minor, patch;
  int rccl;               /* 1 for RCCL (HIP runtime) */
  unsigned int caps;      /* FTC__NCCL_CAP_* */
  ftc__nccl_path_t path;  /* chosen from caps and FTCOMM_NCCL_RECOVERY */
  char library[256];      /* the file that was loaded */
  char runtime[256];      /* the CUDA/HIP runtime that was loaded */
  int devices;            /* GPUs the runtime sees (0 on a CPU-only host) */
} ftc__nccl_info_t;

/* Load NCCL (FTCOMM_NCCL_LIBRARY, else libnccl.so.2, libnccl.so, librccl.so.1,
 * librccl.so) and the matching runtime (FTCOMM_CUDA_RUNTIME_LIBRARY, else
 * libcudart.so.13/12/11, or libamdhip64 for RCCL). nccl_path/runtime_path
 * override both when not NULL. FTC_ERR_LIBRARY_NOT_FOUND names every file
 * that was looked for; FTC_ERR_NOT_SUPPORTED for a library older than 2.14
 * (no nonblocking communicators). The chosen path is logged once at info.
 * On success *out is the caller's (ftc__nccl_lib_close). */
ftc_status_t ftc__nccl_lib_open(const char *nccl_path, const char *runtime_path,
                                ftc__nccl_lib_t **out);
void ftc__nccl_lib_close(ftc__nccl_lib_t *lib);

/* Called by ftc__nccl_lib_open before NCCL is opened: sets NCCL_SOCKET_FAMILY
 * (AF_INET/AF_INET6 from FTCOMM_SOCKET_FAMILY=ipv4/ipv6) and
 * NCCL_SOCKET_IFNAME (from FTCOMM_SOCKET_IFNAME) where the user has not set
 * them; buf gets "NAME=value ..." of what it set ("" for nothing).
 * FTC_ERR_CONFIG for a bad FTCOMM_SOCKET_FAMILY. */
ftc_status_t ftc__nccl_socket_env(char *buf, size_t len);
const ftc__nccl_info_t *ftc__nccl_lib_info(const ftc__nccl_lib_t *lib);

/* Capabilities a library of this version with these symbols has (pure). */
unsigned int ftc__nccl_caps_for(int version, int rccl, int has_split, int has_shrink,
                                int has_revoke, int has_grow);
/* The path for caps, with `want` from FTCOMM_NCCL_RECOVERY ("auto", "reinit",
 * "shrink", "shrink+grow"); a wish the caps cannot meet is lowered. */
ftc__nccl_path_t ftc__nccl_path_for(unsigned int caps, const char *want);

/* One line for logs and dumps: "NCCL 2.32.3 (libnccl.so.2) path shrink+grow
 * caps nonblocking,split,shrink,revoke,grow". */
void ftc__nccl_describe(const ftc__nccl_lib_t *lib, char *buf, size_t len);

/* An NCCL status as an ftcomm status, with ftc_last_error() set to `what`
 * plus NCCL's text: ncclRemoteError -> FTC_ERR_PEER_LOST, ncclTimeout ->
 * FTC_ERR_TIMEOUT, ncclInvalidArgument/ncclInvalidUsage ->
 * FTC_ERR_INVALID_ARGUMENT, ncclInProgress -> FTC_ERR_IN_PROGRESS, other
 * errors -> FTC_ERR_BACKEND. */
ftc_status_t ftc__nccl_status(int nccl_result, const char *what, const char *detail);

/* Unique ids as blobs. kind is "init" or "grow". */
int ftc__nccl_blob_encode(const char *kind, const uint8_t uid[FTC__NCCL_UID_BYTES], char *out,
                          size_t len);
/* FTC_ERR_PROTOCOL for anything but a well-formed blob of `kind`. */
ftc_status_t ftc__nccl_blob_decode(const char *blob, const char *kind,
                                   uint8_t uid[FTC__NCCL_UID_BYTES]);

/* The exchange of an epoch's blob: the rank that makes the unique id
 * publishes it, every other rank fetches it (waiting until deadline_ns,
 * monotonic). Through the coordinator in production; tests use files. */
typedef struct ftc__nccl_xchg {
  ftc_status_t (*publish)(void *arg, uint64_t epoch, const char *blob);
  ftc_status_t (*fetch)(void *arg, uint64_t epoch, char *blob, size_t len, int64_t deadline_ns);
  void *arg;
  /* The newest epoch announced (may be NULL): an init, grow or shrink of an
   * older one gives up at once (FTC_ERR_REVOKED), as the TCP bootstrap does. */
  uint64_t (*latest)(void *arg);
} ftc__nccl_xchg_t;

#define FTC__NCCL_DEVICE_CURRENT (-2)
typedef struct ftc__nccl_opts {
  int device;             /* CUDA device, set before every NCCL or CUDA call (the
                           * core's progress thread is not the application's);
                           * -1: leave it; FTC__NCCL_DEVICE_CURRENT: the one
                           * current on the thread that makes the communicator */
  int timeout_ms;         /* bound on init, shrink, grow, abort of one epoch */
  void *stream;           /* cudaStream_t / hipStream_t for collectives; NULL: the
                           * communicator's own stream */
  const int *interrupt;   /* the owner's atomic ftc_status_t (may be NULL): when another
                           * thread makes it nonzero, a wait (collective, init, shrink,
                           * grow) returns that status within one poll, like the TCP
                           * transport's interrupt; taken again by each enter_epoch */
} ftc__nccl_opts_t;

typedef struct ftc__nccl_comm ftc__nccl_comm_t;

/* What moving to an epoch will do on this rank (pure; for tests and logs). */
typedef enum ftc__nccl_step {
  FTC__NCCL_STEP_NONE = 0,   /* same members: keep the communicator */
  FTC__NCCL_STEP_INIT,       /* full init (first epoch, fallback, or re-init) */
  FTC__NCCL_STEP_SHRINK,     /* shrink away the lost ranks */
  FTC__NCCL_STEP_GROW,       /* grow to take the joiners in */
  FTC__NCCL_STEP_SHRINK_GROW,
  FTC__NCCL_STEP_JOIN,       /* this rank is a joiner taken in by a grow */
} ftc__nccl_step_t;
const char *ftc__nccl_step_name(ftc__nccl_step_t s);

typedef struct ftc__nccl_plan {
  ftc__nccl_step_t step;
  int excluded[64];    /* old ranks to shrink away (step SHRINK*), ascending */
  int n_excluded;      /* -1 when more than 64: the plan falls back to INIT */
  int survivors;       /* members of next that were in the old epoch */
  int joiners;         /* members of next admitted at next->epoch */
  int publisher;       /* rank in next that makes and publishes the unique id, -1: none */
  const char *blob_kind; /* "init" or "grow"; NULL when no blob is exchanged */
  int reorder;         /* after a grow, NCCL's rank order differs from the view's */
} ftc__nccl_plan_t;

/* Plan the move from `old` (NULL for a process without a communicator) to
 * `next` under `path`. */
void ftc__nccl_plan(ftc__nccl_path_t path, const ftc__view_t *old, const ftc__view_t *next,
                    ftc__nccl_plan_t *plan);

/* Move to epoch `next` (later than the current one): *cp is NULL on a
 * process that has no communicator yet (first epoch, joiner) and gets the
 * new one; otherwise the communicator is shrunk, grown, or aborted and made
 * again according to the plan, in place. Survivors of a failure must have
 * stopped using the old epoch (ftc__nccl_comm_revoke or a failed wait).
 * On failure the communicator is aborted (its handle remains, in the
 * aborted state, for the caller to free) and the status says why. */
ftc_status_t ftc__nccl_enter_epoch(ftc__nccl_lib_t *lib, ftc__nccl_comm_t **cp,
                                   const ftc__view_t *next, const ftc__nccl_xchg_t *x,
                                   const ftc__nccl_opts_t *opts);

/* The step the last ftc__nccl_enter_epoch took and how long it took. */
void ftc__nccl_comm_last_step(const ftc__nccl_comm_t *c, ftc__nccl_step_t *step, int64_t *ns);

/* Replace the NCCL communicator by one without the old ranks excluded[0..n-1]
 * (any order, 1 to 64; only read: NCCL sorts its argument in place, so it
 * gets a copy). NCCL_SHRINK_ABORT unless the epoch was revoked. The view,
 * rank and epoch are not changed: ftc__nccl_enter_epoch does that (this is
 * its shrink step, and a test's). */
ftc_status_t ftc__nccl_comm_shrink(ftc__nccl_comm_t *c, const int *excluded, int n,
                                   int64_t deadline_ns);
/* NCCL's own rank and size of the communicator (ncclCommUserRank/Count). */
ftc_status_t ftc__nccl_comm_nccl_rank(ftc__nccl_comm_t *c, int *rank, int *size);

int ftc__nccl_comm_rank(const ftc__nccl_comm_t *c);
int ftc__nccl_comm_size(const ftc__nccl_comm_t *c);
uint64_t ftc__nccl_comm_epoch(const ftc__nccl_comm_t *c);
/* FTC_OK, or the error that broke the epoch (timeout, peer lost, revoked, aborted). */
ftc_status_t ftc__nccl_comm_error(const ftc__nccl_comm_t *c);

struct ftc_rec; /* the flight recorder (ftc_recorder.h) */

/* One collective in flight: CUDA events around it on the stream. The times
 * are written atomically by whichever thread polls first (the waiting
 * application thread or the watchdog), as PyTorch's watchdog discovers a
 * collective's start and end from its CUDA events. */
typedef struct ftc__nccl_work {
  void *ev_start, *ev_end; /* owned by the communicator's event pool */
  int64_t enqueued_ns;
  int64_t started_ns;      /* when a poll first saw ev_start done (0: not yet) */
  int64_t completed_ns;    /* when a poll first saw ev_end done (0: not yet) */
  struct ftc_rec *rec;     /* when set: started/completed/failed are recorded */
  uint64_t rec_id;         /* in rec, from ftc_rec_schedule() */
  int recorded;            /* atomic bits: 1 started, 2 ended, 4 staged result copied */
  void *stage;             /* a staging slot (small collective on host memory), or NULL */
  void *stage_user;        /* where its result goes at completion */
  size_t stage_bytes;
} ftc__nccl_work_t;

/* Enqueue op on stream (NULL: the communicator's), device buffers (a small
 * allreduce, broadcast or reduce, up to 64 bytes, may use host memory: it
 * is staged through pinned and device memory of the communicator, e.g. the
 * core's step-boundary allreduce of a stack variable). Returns
 * at once; complete with ftc__nccl_comm_wait. FTC_ERR_REVOKED/ABORTED once
 * the epoch has failed. Ranks in op->peer are ranks of the view. rec and
 * rec_id (may be NULL) go into the work for the flight recorder. */
ftc_status_t ftc__nccl_comm_launch(ftc__nccl_comm_t *c, const ftc__op_t *op, void *stream,
                                   ftc__nccl_work_t *w);
ftc_status_t ftc__nccl_comm_launch_rec(ftc__nccl_comm_t *c, const ftc__op_t *op, void *stream,
                                       struct ftc_rec *rec, uint64_t rec_id,
                                       ftc__nccl_work_t *w);
/* Several send/recv operations as one NCCL group (ncclGroupStart/End), so
 * that exchanges queued together cannot block each other (the core's
 * batched point-to-point requests); one work covers them all. */
ftc_status_t ftc__nccl_comm_launch_p2p(ftc__nccl_comm_t *c, const ftc__op_t *const *ops, int n,
                                       void *stream, ftc__nccl_work_t *w);
/* Non-blocking, from any thread: *done = 1 when the work completed; fills
 * started_ns and completed_ns as discovered (and records them when the work
 * has a recorder). Returns the communicator's async error if one arrived
 * (and marks the epoch failed; the entry is recorded failed). */
ftc_status_t ftc__nccl_work_poll(ftc__nccl_comm_t *c, ftc__nccl_work_t *w, int *done);
/* One look, from the thread that drives the communicator: as
 * ftc__nccl_work_poll, and also the owner's interrupt (its status) and the
 * deadline (FTC_ERR_TIMEOUT once deadline_ns has passed, monotonic), both of
 * which mark the epoch failed and the work's record failed. The core's
 * progress thread keeps several works in flight with it. */
ftc_status_t ftc__nccl_work_check(ftc__nccl_comm_t *c, ftc__nccl_work_t *w, int64_t deadline_ns,
                                  int *done);
/* Wait until the work completes or deadline_ns (monotonic; INT64_MAX none).
 * FTC_ERR_TIMEOUT marks the epoch failed; the caller then revokes or aborts. */
ftc_status_t ftc__nccl_comm_wait(ftc__nccl_comm_t *c, ftc__nccl_work_t *w, int64_t deadline_ns);
/* GPU time between the work's events, in ms (after completion). */
ftc_status_t ftc__nccl_work_elapsed_ms(ftc__nccl_comm_t *c, const ftc__nccl_work_t *w, float *ms);
/* Give the work's events back to the pool (it completed). */
void ftc__nccl_work_release(ftc__nccl_comm_t *c, ftc__nccl_work_t *w);
/* A work that failed and may still be queued on the stream: its events are
 * destroyed, not reused (CUDA frees them once the stream reaches them). */
void ftc__nccl_work_discard(ftc__nccl_comm_t *c, ftc__nccl_work_t *w);

/* Stop the epoch after a failure, without freeing: ncclCommRevoke where the
 * library has it (the communicator can then be shrunk), else nothing is
 * done until the next epoch aborts it. Marks the epoch failed with why. */
ftc_status_t ftc__nccl_comm_revoke(ftc__nccl_comm_t *c, ftc_status_t why);
/* ncclCommAbort: in-flight work ends, the NCCL communicator is gone. Safe
 * from any thread; idempotent. */
ftc_status_t ftc__nccl_comm_abort(ftc__nccl_comm_t *c);
/* Free the wrapper: a healthy communicator is finalized and destroyed, a
 * failed one is aborted. NULL is a no-op. */
void ftc__nccl_comm_free(ftc__nccl_comm_t *c);

#endif
