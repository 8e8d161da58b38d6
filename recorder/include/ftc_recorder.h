/*
 * ftc_recorder.h - the flight recorder, internal to libftcomm.
 *
 * Each communicator owns one recorder: a ring of its last N collectives
 * (FTCOMM_RECORDER_ENTRIES, default 2000; 0 disables recording). Recording
 * is a handful of relaxed atomic stores into a preallocated slot guarded by
 * a per-slot generation (a seqlock), so it never locks and never allocates,
 * and a dump taken by another thread reads only consistent entries. Every
 * live recorder is in a process-wide registry, so one dump covers every
 * communicator of the process. A dump is one JSON file per process written
 * atomically and never over an earlier one (format: docs/dump-format.md).
 *
 * Thread safety: ftc_rec_schedule() is called by the thread that issues
 * collectives on the communicator, never by two threads at once for the
 * same recorder (it is single-writer, like the communicator itself);
 * ftc_rec_started/completed/failed() may be called from any thread (e.g. a
 * progress thread); dumps may run from any thread (the watchdog, the signal
 * thread) while collectives are recorded. Every recording call accepts a
 * NULL recorder and does nothing, so callers need no "is it enabled" test.
 *
 * Lock order: dump lock -> registry lock; the process-info lock is taken
 * alone. None of them is taken on the hot path.
 */
#ifndef FTC_RECORDER_H
#define FTC_RECORDER_H

#include <stddef.h>
#include <stdint.h>

#include "ftcomm.h"

/* Version of the dump format written (docs/dump-format.md). A reader refuses
 * a newer major version and accepts any minor version. */
#define FTC_REC_FORMAT_NAME "ftcomm-flight-recorder"
#define FTC_REC_FORMAT_MAJOR 1
#define FTC_REC_FORMAT_MINOR 2

/* The longest headline ftcomm-trace prints (the first line of its text
 * report, with the coordinator's verdict), in bytes with the NUL: a reader
 * of that line (the controller) sizes its buffer by it. */
#define FTC_TRACE_HEADLINE_MAX 1536

/* Returned by ftc_rec_schedule() when nothing was recorded (NULL or
 * disabled recorder); the other calls ignore it. */
#define FTC_REC_NO_ID UINT64_MAX

typedef enum ftc_rec_op {
  FTC_REC_ALLREDUCE = 0,
  FTC_REC_BROADCAST = 1,
  FTC_REC_REDUCE = 2,
  FTC_REC_ALLGATHER = 3,
  FTC_REC_REDUCE_SCATTER = 4,
  FTC_REC_ALLTOALL = 5,
  FTC_REC_BARRIER = 6,
  FTC_REC_SEND = 7, /* p2p: seq is the p2p sequence, not the collective one */
  FTC_REC_RECV = 8,
  FTC_REC_ALLGATHERV = 9, /* count: the elements of every rank together */
  FTC_REC_ALLTOALLV = 10, /* count: the elements this rank sends (they differ by rank) */
  FTC_REC_GATHER = 11,
  FTC_REC_SCATTER = 12,
  FTC_REC_OP_COUNT
} ftc_rec_op_t;

typedef enum ftc_rec_state {
  FTC_REC_SCHEDULED = 0, /* enqueued by the caller, not yet running */
  FTC_REC_STARTED = 1,   /* the backend started it */
  FTC_REC_COMPLETED = 2,
  FTC_REC_FAILED = 3,    /* ended with an error (timeout, peer lost, revoked, abort) */
  FTC_REC_STATE_COUNT
} ftc_rec_state_t;

/* "allreduce", "broadcast", ...; "unknown" outside the enum. Static strings. */
const char *ftc_rec_op_name(ftc_rec_op_t op);
const char *ftc_rec_state_name(ftc_rec_state_t state);
/* Inverse of the above; -1 for an unknown name. */
int ftc_rec_op_from_name(const char *name);
int ftc_rec_state_from_name(const char *name);

typedef struct ftc_rec ftc_rec_t;

/*
 * Create a recorder for one communicator and add it to the process registry.
 *   entries  ring size; negative takes FTCOMM_RECORDER_ENTRIES; 0 gives a
 *            disabled recorder (every recording call is a no-op, the
 *            communicator still appears in dumps with no entries).
 *   comm_id  identifies the communicator across ranks (the same value on
 *            every member, e.g. a hash agreed at creation).
 *   name     short label for people ("world", "tp0"); copied; may be NULL.
 *   epoch, rank, size  the communicator's membership at creation.
 * The first recorder of the process also starts the dump-signal thread
 * (FTCOMM_DUMP_SIGNAL). On success *out owns the recorder; free it with
 * ftc_rec_destroy(). On failure *out is NULL.
 */
ftc_status_t ftc_rec_create(int64_t entries, uint64_t comm_id, const char *name,
                            uint64_t epoch, int rank, int size, ftc_rec_t **out);

/* Remove from the registry (waits for a dump in progress) and free. The last
 * recorder of the process stops the signal thread. NULL is a no-op. */
void ftc_rec_destroy(ftc_rec_t *rec);

/* New membership after a recovery (shrink or grow). Entries keep the epoch
 * they were recorded in; the last enqueued/started/completed sequence
 * numbers restart for the new epoch. NULL is a no-op. */
void ftc_rec_set_epoch(ftc_rec_t *rec, uint64_t epoch, int rank, int size);

/* Ring capacity (0 when disabled or rec is NULL). */
size_t ftc_rec_capacity(const ftc_rec_t *rec);

/*
 * Record a collective as scheduled, stamping its creation time now.
 *   seq     the communicator's collective sequence number in this epoch
 *           (from 1, the same on every rank for the same collective); for
 *           send/recv, the p2p sequence with that peer.
 *   dtype   an ftc_dtype_t (FTC_DTYPE_COUNT for none, e.g. barrier).
 *   count   elements as passed by the caller; bytes = what this rank sends.
 *   peer    root for broadcast/reduce, peer for send/recv, -1 otherwise.
 *   timeout_ns  the collective's timeout, -1 for none.
 * Returns the record id (per recorder, from 0, increasing), which the
 * caller passes to started/completed/failed; FTC_REC_NO_ID when disabled.
 * Lock-free and allocation-free.
 */
uint64_t ftc_rec_schedule(ftc_rec_t *rec, uint64_t epoch, uint64_t seq, ftc_rec_op_t op,
                          int dtype, uint64_t count, uint64_t bytes, int peer,
                          int64_t timeout_ns);

/* The same, with the creation time given (a monotonic ftc__now_ns() the
 * caller already read, e.g. for the collective's deadline): saves the one
 * clock read of ftc_rec_schedule(), the largest part of a recording's cost
 * (docs/benchmarks.md, "Flight recorder"). */
uint64_t ftc_rec_schedule_at(ftc_rec_t *rec, int64_t t_created_ns, uint64_t epoch, uint64_t seq,
                             ftc_rec_op_t op, int dtype, uint64_t count, uint64_t bytes, int peer,
                             int64_t timeout_ns);

/* State changes of a recorded entry; t_ns is a monotonic time
 * (ftc__now_ns()), 0 means now. A call for an id whose slot has since been
 * reused by a newer entry is ignored, and a state never goes backwards. */
void ftc_rec_started(ftc_rec_t *rec, uint64_t id, int64_t t_ns);
void ftc_rec_completed(ftc_rec_t *rec, uint64_t id, int64_t t_ns);
void ftc_rec_failed(ftc_rec_t *rec, uint64_t id, int64_t t_ns);

/*
 * Names a binding knows its collectives by (PyTorch: the profiling name
 * "nccl:all_reduce", the process group's name and description), written in
 * dumps (docs/dump-format.md). ftc_rec_name_id interns a name for the whole
 * process (append-only, never freed: a binding has a handful) and returns
 * its id: 0 for NULL or "", -1 when it is longer than FTC_REC_NAME_MAX - 1
 * bytes, holds a control character, '"' or '\\', or FTC_REC_NAMES - 1
 * names are taken. Any thread; lock-free once a
 * name is known. ftc_rec_name gives the name of an id ("" for 0 or an
 * unknown id).
 */
#define FTC_REC_NAMES 1024
#define FTC_REC_NAME_MAX 64
int ftc_rec_name_id(const char *name);
const char *ftc_rec_name(int id);
/* The name id (ftc_rec_name_id) the entries scheduled from now on carry;
 * the scheduling thread (as ftc_rec_schedule). NULL is a no-op. */
void ftc_rec_set_coll_name(ftc_rec_t *rec, int id);
/* The communicator's process-group name and description in dumps (copied,
 * cut to FTC_REC_NAME_MAX - 1 bytes, control characters, '"' and '\\' made
 * '?'; NULL leaves one as it was). Any
 * thread. NULL rec is a no-op. */
void ftc_rec_set_group(ftc_rec_t *rec, const char *name, const char *desc);

/* Last sequence numbers seen in the current epoch (0 for none). */
typedef struct ftc_rec_progress {
  uint64_t epoch;
  uint64_t last_enqueued;
  uint64_t last_started;
  uint64_t last_completed;
  uint64_t recorded; /* entries recorded since creation (ids handed out) */
} ftc_rec_progress_t;
void ftc_rec_progress(const ftc_rec_t *rec, ftc_rec_progress_t *out);

/* One entry as read back from the ring. Times are monotonic ns, 0 unset. */
typedef struct ftc_rec_entry {
  uint64_t id;
  uint64_t epoch;
  uint64_t seq;
  ftc_rec_op_t op;
  int dtype;
  uint64_t count;
  uint64_t bytes;
  int peer;
  int rank; /* rank in the communicator at the entry's epoch */
  int size;
  ftc_rec_state_t state;
  int64_t t_created;
  int64_t t_started;
  int64_t t_completed; /* completion or failure time */
  int64_t timeout_ns;
  int name; /* the collective's name id (ftc_rec_set_coll_name), 0 none */
} ftc_rec_entry_t;

/* Copy up to max consistent entries, oldest first, into out; returns how
 * many. Safe while another thread records (an entry being rewritten at that
 * moment is skipped). For tests and the dump writer. */
size_t ftc_rec_snapshot(const ftc_rec_t *rec, ftc_rec_entry_t *out, size_t max);

/*
 * Process identity written at the top of every dump. Set by the runtime
 * once it knows it (and again after a recovery); unset fields fall back to
 * the environment: job FTCOMM_JOB, pod POD_NAME or HOSTNAME, node
 * NODE_NAME, host gethostname(), rank FTCOMM_SLOT, world size
 * FTCOMM_WORLD_SIZE, dump directory FTCOMM_DUMP_DIR. Strings are copied
 * (truncated to FTC_REC_INFO_STR - 1 bytes); NULL leaves a field as it was.
 * Integers below 0 leave a field as it was.
 */
#define FTC_REC_INFO_STR 256
typedef struct ftc_rec_process_info {
  const char *job;
  const char *pod;
  const char *node;
  const char *backend;          /* "tcp", "nccl", ... */
  const char *backend_version;  /* e.g. "2.28.9" */
  const char *dump_dir;
  int rank;                     /* global rank in the current epoch */
  int world_size;
  int64_t epoch;
} ftc_rec_process_info_t;
#define FTC_REC_PROCESS_INFO_INIT {NULL, NULL, NULL, NULL, NULL, NULL, -1, -1, -1}
void ftc_rec_set_process_info(const ftc_rec_process_info_t *info);

/*
 * Write a dump of every live recorder to the dump directory (dir NULL: the
 * process info's, else FTCOMM_DUMP_DIR; created if missing). reason is a
 * short word for the trigger ("api", "signal", "timeout", "error",
 * "revoked", "coordinator", ...). The file is named
 * rank-<rank>-<UTC yyyymmddThhmmss>-<pid>-<n>.json, written to a temporary
 * name, fsynced and linked into place without ever replacing an existing
 * file. Its size is bounded (entries past FTCOMM_DUMP_MAX_BYTES are left out
 * and "truncated" is set). Safe from any thread, concurrently with
 * recording; dumps are serialized. Uses one bounded buffer, no allocation
 * per entry. If path is not NULL, the final path is copied into it (up to
 * path_len bytes). Not async-signal-safe: from a signal handler use
 * ftc_rec_request_dump().
 */
ftc_status_t ftc_rec_dump(const char *dir, const char *reason, char *path, size_t path_len);

/*
 * A capture: a copy, taken now, of everything a dump shows (process info,
 * every live recorder's progress and the entries that fit
 * FTCOMM_DUMP_MAX_BYTES), to be written later with ftc_rec_capture_write()
 * exactly as ftc_rec_dump() would have written it at capture time (its
 * trigger time is the capture's). For a caller that must note the state at
 * an event now but cannot wait for the file (formatting, fsync): the
 * recovery path. ftc_rec_capture() allocates (one block per recorder) and
 * returns NULL when out of memory; the caller frees the capture with
 * ftc_rec_capture_free() (NULL is a no-op). Safe from any thread.
 */
typedef struct ftc_rec_capture ftc_rec_capture_t;
ftc_rec_capture_t *ftc_rec_capture(void);
ftc_status_t ftc_rec_capture_write(const ftc_rec_capture_t *capture, const char *dir,
                                   const char *reason, char *path, size_t path_len);
void ftc_rec_capture_free(ftc_rec_capture_t *capture);
/* When the capture was taken: CLOCK_MONOTONIC ns (its trigger_monotonic_ns). */
int64_t ftc_rec_capture_time_ns(const ftc_rec_capture_t *capture);

/*
 * What the dump of a failed epoch adds to a capture when it is written
 * (docs/dump-format.md, "failure" and "verdict"): this rank's own failure,
 * and the coordinator's verdict on the epoch, i.e. which members its next
 * epoch left out and why, or why there is none yet.
 */
typedef struct ftc_rec_dropped {
  int rank;            /* its rank in the epoch the dump describes (>= 0) */
  int slot;            /* its slot in the job, -1 unknown */
  uint64_t member_id;  /* the coordinator's member id, 0 unknown */
  const char *reason;  /* "crashed" (its process or session is gone), "hung" (connected
                        * but silent or convicted), "left" (said goodbye), "lost"
                        * (dropped, cause not said: an older coordinator) */
  const char *detail;  /* the coordinator's words, may be NULL */
} ftc_rec_dropped_t;

typedef struct ftc_rec_outcome {
  int64_t epoch;       /* the epoch the dump describes (>= 0) */
  /* This rank's failure: failed = 1 writes "failure". */
  int failed;
  int status;          /* the ftc_status_t that failed the epoch (not FTC_OK) */
  int peer;            /* the rank the backend saw fail (TCP: the broken connection's
                        * peer; NCCL: the rank the coordinator dropped), -1 none */
  /* The verdict: next_epoch >= 0 (and > epoch) once the coordinator announced
   * a later epoch; dropped[ndropped] are the members it leaves out (none: it
   * kept everyone). next_epoch = -1: no verdict yet, pending says why. */
  int64_t next_epoch;
  const ftc_rec_dropped_t *dropped;
  int ndropped;
  const char *pending;
} ftc_rec_outcome_t;
#define FTC_REC_OUTCOME_INIT {-1, 0, 0, -1, -1, NULL, 0, NULL}

/* "crashed", "hung", "left", "lost": 1 for a reason a dump may carry. */
int ftc_rec_drop_reason_known(const char *reason);

/* A status's name in dumps ("timeout", "peer_lost", ...); "unknown" outside
 * the enum. Static strings. */
const char *ftc_rec_status_name(int status);

/*
 * ftc_rec_capture_write() with the outcome of the epoch (NULL: none, as
 * ftc_rec_capture_write). An outcome that makes no sense is refused with
 * FTC_ERR_INVALID_ARGUMENT and nothing is written: a negative epoch, a next
 * epoch not after it, a failure with status FTC_OK or outside the enum, a
 * peer below -1, dropped members without a next epoch or with a rank below
 * 0, the same rank twice, or an unknown reason; no next epoch and no
 * pending text. Everything is copied into the file; the caller keeps o.
 */
ftc_status_t ftc_rec_capture_write_outcome(const ftc_rec_capture_t *capture, const char *dir,
                                           const char *reason, const ftc_rec_outcome_t *o,
                                           char *path, size_t path_len);

/*
 * Replace the dump at path, written earlier from capture by
 * ftc_rec_capture_write_outcome, with the same dump and outcome o (the
 * coordinator's verdict came after the file was written). The new text is
 * written to a hidden temporary name in the same folder, fsynced and
 * swapped in with one rename (a reader sees the old file or the new one,
 * whole); the folder is fsynced. A dump that is gone from path is not
 * written again, nor is anything but a regular file replaced:
 * FTC_ERR_SYSTEM; a path whose name starts with '.' (not a dump) is
 * FTC_ERR_INVALID_ARGUMENT. o is checked as by
 * ftc_rec_capture_write_outcome; the caller keeps capture and o.
 */
ftc_status_t ftc_rec_capture_rewrite_outcome(const ftc_rec_capture_t *capture, const char *path,
                                             const char *reason, const ftc_rec_outcome_t *o);

/* Ask the recorder's dump thread to write a dump with reason "signal"
 * (when reason_code is 0) or "request". Async-signal-safe; returns at once.
 * FTC_ERR_NOT_SUPPORTED if no dump thread is running. */
ftc_status_t ftc_rec_request_dump(int reason_code);

/* Number of dumps written by this process (for tests and the watchdog). */
uint64_t ftc_rec_dump_count(void);

#endif
