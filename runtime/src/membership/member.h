/*
 * member.h - the rank's side of the membership protocol: one WebSocket
 * session to the job's coordinator (runtime/src/coordinator/).
 *
 * The session authenticates with the job token, announces this process
 * (slot, data-plane address, joiner or not), receives numbered membership
 * epochs ("views"), and later carries heartbeats, failure reports, dump
 * requests and dump uploads. It runs its own service thread; the calls below
 * are safe from any thread. Messages are versioned JSON (docs/protocol.md).
 *
 * When the connection drops without a refusal (the coordinator restarted or
 * the network blinked), the client reconnects for up to connect_timeout_ms,
 * bringing its member id and current view; views already received stay,
 * messages queued meanwhile are sent after the new welcome, and
 * ftc__member_error() stays FTC_OK. Only a refusal (an "error" message, e.g.
 * when the coordinator excluded this member) or the end of that time closes
 * the session with an error.
 *
 * Contract with the communicator (runtime/src/core/):
 *   open -> wait_view(0) gives epoch 1 (or the epoch a joiner is admitted
 *   to) -> the communicator connects its data plane to view->members[*].addr
 *   -> later epochs are awaited with wait_view(current_epoch).
 */
#ifndef FTC_MEMBER_H
#define FTC_MEMBER_H

#include <stddef.h>
#include <stdint.h>

#include "ftcomm.h"

typedef struct ftc__member ftc__member_t;

typedef struct ftc__member_cfg {
  const char *coordinator; /* host:port */
  const char *job;
  const char *token;
  int slot;
  int world_size;         /* expected size of the first epoch */
  int min_size;
  int joiner;             /* 1: a replacement asking to be admitted */
  const char *data_addr;  /* host:port where this rank's data plane listens */
  int dataplane;          /* its data-plane protocol, said in the hello (FTC__TCP_PROTO);
                           * 0: none (FTCOMM_BACKEND=nccl: no TCP data plane) */
  const char *pod, *node, *host; /* identity for logs and dumps; may be NULL */
  int connect_timeout_ms; /* for open() */
  int heartbeat_ms;       /* 0: protocol default */
  int first_view;         /* 1: ftc__member_finish also reads the first view in the caller's
                           * thread (ftc_comm_create, which waits for it next anyway) */
  int standby;            /* 1: the hello says "standby" (ftc_comm_create_begin): the
                           * coordinator registers this process but admits it only after
                           * ftc__member_join; start hands the session to the membership
                           * thread at once (it heartbeats meanwhile) */
} ftc__member_cfg_t;

/* Whether a member holds the application's state, as the coordinator says
 * in the view ("fresh"). Zero: not said (an older coordinator, or a view made
 * without one): the ranks then fall back to joined_epoch. */
typedef enum ftc__state {
  FTC__STATE_UNKNOWN = 0,
  FTC__STATE_FRESH = 1, /* never completed a step boundary: needs the state */
  FTC__STATE_HELD = 2,  /* completed a step boundary: holds the state */
} ftc__state_t;

typedef struct ftc__view_member {
  int rank;               /* index in members[] */
  int slot;
  uint64_t member_id;     /* unique per process incarnation, never reused in a job */
  uint64_t joined_epoch;  /* epoch at which this member was admitted */
  char addr[128];         /* data-plane host:port */
  int state;              /* ftc__state_t: whether it holds the application's state */
} ftc__view_member_t;

typedef struct ftc__view {
  uint64_t epoch;         /* numbered by the coordinator, never reused */
  int size;
  int my_rank;            /* this process's rank in the epoch, -1 if excluded */
  uint64_t my_member_id;
  ftc__view_member_t *members; /* size entries, ordered by rank */
  char *backend_blob;     /* opaque backend data (e.g. an NCCL unique id, base64), may be NULL */
} ftc__view_t;

/* Connect, authenticate and register. Blocks up to cfg->connect_timeout_ms
 * (retrying while the coordinator is not up yet). FTC_ERR_AUTH on a wrong
 * token, FTC_ERR_CONFIG for a wrong job, a slot outside the job or a slot
 * that already has a live process, FTC_ERR_COORDINATOR if unreachable,
 * FTC_ERR_PROTOCOL on a malformed answer; ftc_last_error() says which. */
ftc_status_t ftc__member_open(const ftc__member_cfg_t *cfg, ftc__member_t **out);

/* ftc__member_open in two halves, so the caller can do other work (the
 * NCCL probe under FTCOMM_BACKEND=auto) while the coordinator answers:
 * ftc__member_start checks the configuration, starts the first connection
 * attempt (up to its hello) and the membership thread, and returns at once;
 * ftc__member_finish reads the coordinator's answer in the caller's thread
 * until the welcome (with cfg->first_view, until the first view too), up to
 * cfg->connect_timeout_ms from the start, then hands the session to the
 * membership thread and returns what ftc__member_open would have. On
 * failure, finish frees the session and sets *m to NULL. */
ftc_status_t ftc__member_start(const ftc__member_cfg_t *cfg, ftc__member_t **out);
ftc_status_t ftc__member_finish(ftc__member_t **m);

/* A standby session (cfg->standby) asks to be admitted: a "join" once the
 * coordinator's welcome said it holds this member as standby (an older
 * coordinator admitted it at once: nothing to send), and later hellos
 * (reconnects) no longer say standby. ftc__member_finish then waits up to
 * connect_timeout_ms from this call. */
void ftc__member_join(ftc__member_t *m);

/* Wait up to timeout_ms for an epoch newer than `after`. On success *view is
 * owned by the caller (ftc__view_free). */
ftc_status_t ftc__member_wait_view(ftc__member_t *m, uint64_t after, int timeout_ms,
                                   ftc__view_t **view);
void ftc__view_free(ftc__view_t *v);
/* Whether v admits a member (one joined at its epoch: a joiner). */
int ftc__view_admits(const ftc__view_t *v);

/* Tell the coordinator that, in `epoch`, the given ranks failed (`why`).
 * Queued (also while reconnecting); FTC_ERR_COORDINATOR (or the session's
 * error) once the session is closed. Like every failing call it sets
 * ftc_last_error(). */
/* Record that this process completed its first step boundary in `epoch`
 * (it holds the application's state from now on) and tell the coordinator
 * at once; heartbeats repeat it. Only the first call counts. */
void ftc__member_set_ready(ftc__member_t *m, uint64_t epoch);

ftc_status_t ftc__member_report_failure(ftc__member_t *m, uint64_t epoch, const int *ranks,
                                        int n, ftc_status_t why);

/* A dump request from the coordinator (e.g. because some rank hangs, every
 * rank is asked): 1 when one arrived since the last call, with its incident
 * name copied into incident[len] (a plain name: letters, digits, - _ .);
 * 0 when none. Non-blocking; for the watchdog's periodic check. */
int ftc__member_take_dump_request(ftc__member_t *m, char *incident, size_t len);

/* Upload a dump (UTF-8 JSON text, `len` bytes, copied) under `incident` as
 * `rank`. It is sent in fragments (dump messages) after whatever is queued;
 * returns once queued. The coordinator stores it as
 * <dump dir>/<incident>/rank-<rank>.json. */
ftc_status_t ftc__member_upload_dump(ftc__member_t *m, const char *incident, int rank,
                                     const char *data, size_t len);

/* 1 when a view received said member_id left the job cleanly (a leave;
 * the newest 256 are kept), 0 otherwise. */
/* Whether every frame queued for the coordinator (an uploaded dump's
 * fragments among them) has been handed to the socket, or the session is
 * closed (nothing will go). */
int ftc__member_sent_all(ftc__member_t *m);

int ftc__member_left_cleanly(ftc__member_t *m, uint64_t member_id);

/* Why the coordinator dropped member_id, as a view said ("dropped"): 1 with
 * its reason word ("crashed", "hung", "left", "lost", or a newer
 * coordinator's word) copied into reason[rlen] and its words into
 * detail[dlen] (either may be NULL); 0 when no view said (an older
 * coordinator; the newest 64 are kept). */
int ftc__member_drop_reason(ftc__member_t *m, uint64_t member_id, char *reason, size_t rlen,
                            char *detail, size_t dlen);

/* The epoch of the newest view received (0 before the first). Lock-free:
 * one atomic load, for the step boundary's hot path. */
uint64_t ftc__member_latest_epoch(const ftc__member_t *m);

/* The coordinator's latest "prospect": the epoch its standby members' joins
 * would form if nothing changed first (docs/protocol.md). prospect_seq
 * counts the prospects received (atomic; 0: none); ftc__member_prospect
 * copies the latest into *view (ftc__view_free) and returns 1, or returns 0
 * when there is none (or out of memory). Not an epoch: nothing moves to it;
 * the data plane connects to its new members early (core/engine.c). */
uint64_t ftc__member_prospect_seq(const ftc__member_t *m);
int ftc__member_prospect(ftc__member_t *m, ftc__view_t **view);

/* Have the service thread write 1 to the eventfd `fd` whenever a view or a
 * dump request arrives (-1 stops it). fd stays owned by the caller and must
 * stay open until this is undone or the session is closed. */
void ftc__member_set_notify(ftc__member_t *m, int fd);

/* The same for a second eventfd, written only on a view that admits a member
 * (the communicator's progress thread, which connects to an announced joiner
 * early: woken by the service thread itself rather than through the
 * watchdog). */
void ftc__member_set_view_notify(ftc__member_t *m, int fd);

/* The epoch's backend blob (e.g. the NCCL unique id this rank made for
 * `epoch`), up to 4096 bytes: sent to the coordinator, which keeps the
 * first one published for its current epoch and relays it to every member
 * of that epoch (and to a member that comes back to it). Queued like a
 * failure report. */
ftc_status_t ftc__member_publish_backend(ftc__member_t *m, uint64_t epoch, const char *blob);

/* Wait up to timeout_ms (negative: forever) for the backend blob of `epoch`
 * and copy it into blob[len]. FTC_ERR_REVOKED when a later epoch arrived
 * first, FTC_ERR_TIMEOUT, or the session's error once it is closed. The
 * same blob also appears in ftc__view_t.backend_blob of views of that epoch
 * copied after it arrived. */
ftc_status_t ftc__member_wait_backend(ftc__member_t *m, uint64_t epoch, int timeout_ms,
                                      char *blob, size_t len);

/* Keep the session's socket also at a descriptor above fd, when the
 * descriptor table has a free one up there (it is not grown for it): at the
 * process's death the kernel then closes the session before the sockets up
 * to fd, and the coordinator knows it is gone when the first survivor
 * reports it. For the communicator after it connected a data plane whose
 * highest socket is fd. Only records fd (lock-free); the membership thread
 * moves the duplicate at its next heartbeat, off the recovery's path. */
void ftc__member_hold_above(ftc__member_t *m, int fd);

/* The highest free descriptor above `above` in the descriptor table as it
 * is (FDSize in /proc/self/status; a slot past its end would grow it), -1
 * if every one is taken. For the duplicate of ftc__member_hold_above. */
int ftc__member_exit_slot(int above);

/* A duplicate of fd (close-on-exec) in the highest free slot above
 * `above` (ftc__member_exit_slot), -1 when none is free up there. Every
 * session's service thread places its duplicate through it; two that
 * picked the same slot at once would have the second's go past the
 * table's end, which grows it. */
int ftc__member_dup_high(int fd, int above);

/* The session's stored error (FTC_OK while connected and healthy). */
ftc_status_t ftc__member_error(ftc__member_t *m);

/* Fault injection: drop the connection to the coordinator without a leave,
 * as a network blink would; the session reconnects as described above. */
void ftc__member_fault_drop(ftc__member_t *m);

/* Fault injection: from now on the service thread stalls `ms` milliseconds
 * on every view that admits a member before storing it (this rank hears of
 * a joiner's epoch late, as through a slow or stalled session); 0 stops it. */
void ftc__member_fault_late_views(ftc__member_t *m, int ms);

/* Leave the job cleanly (a "leave" message) and free. NULL is a no-op. */
void ftc__member_close(ftc__member_t *m);

#endif
