/*
 * ftc_coord.h - the server side of the membership protocol: one per job,
 * embedded in ftcomm-run (locally) and in the controller (on Kubernetes).
 *
 * The coordinator authenticates ranks with the job token, hands each process
 * incarnation a member id that is never reused, forms membership epochs
 * (epoch 1 once world_size slots have joined, ranks in slot order) and
 * announces them; when a member is lost or leaves it announces the next epoch
 * without it while at least min_size remain, and admits joiners at the next
 * epoch. Epoch numbers are never reused. It holds no training data.
 *
 * Threads: a coordinator runs its own service thread ("ftc-coord") that owns
 * all protocol state. The calls below are safe from any thread.
 */
#ifndef FTC_COORDINATOR_H
#define FTC_COORDINATOR_H

#include <stdint.h>

#include "ftcomm.h"

typedef struct ftc__coord ftc__coord_t;

/* What the coordinator decided, for its host (the controller updates the
 * TrainingJob status and records incidents; ftcomm-run tells the user). */
typedef enum ftc__coord_event_kind {
  FTC__COORD_EV_EPOCH = 1,  /* an epoch was formed and announced */
  FTC__COORD_EV_DROPPED,    /* a member left the job (left = 1) or was lost */
  FTC__COORD_EV_BELOW_MIN,  /* fewer than min_size members remain: waiting for joiners */
  FTC__COORD_EV_HANG,       /* a hang (a member silent past the heartbeat timeout, or a
                             * collective timeout report): every rank was asked for a dump */
  FTC__COORD_EV_DUMP,       /* a rank's dump was stored under dump_dir/<incident>/ */
} ftc__coord_event_kind_t;

typedef struct ftc__coord_event {
  ftc__coord_event_kind_t kind;
  uint64_t epoch;     /* EPOCH: the new epoch; others: the current one */
  int size;           /* EPOCH: its members; BELOW_MIN: members remaining */
  int joined;         /* EPOCH: members admitted in it */
  int slot;           /* DROPPED */
  int rank;           /* DROPPED: rank in the current epoch, -1 if it had none */
  uint64_t member_id; /* DROPPED */
  int left;           /* DROPPED: 1 for a clean leave */
  const char *reason; /* DROPPED: e.g. "lost its session"; valid during the call */
  int64_t pid;        /* DROPPED: the process id its hello gave, 0 if none */
  const char *incident; /* HANG, DUMP: the incident's name (a directory under dump_dir);
                         * valid during the call. HANG: slot and rank name the silent
                         * member (-1 for a timeout report: the dumps will tell), reason
                         * says what happened, size is the members asked for a dump.
                         * DUMP: rank is the dump's rank. */
} ftc__coord_event_t;

/* Called on the coordinator's service thread, in order. It must return
 * quickly and must not call the coordinator (hand the event to your own
 * thread, e.g. through a queue or a pipe). */
typedef void (*ftc__coord_event_fn)(void *arg, const ftc__coord_event_t *ev);

typedef struct ftc__coord_cfg {
  const char *bind_host;    /* address to listen on; NULL: "0.0.0.0" */
  int port;                 /* 0: an ephemeral port (see ftc__coord_port) */
  const char *job;          /* job name ranks must present */
  const char *token;        /* job secret ranks must present (required, non-empty) */
  int world_size;           /* ranks of the first epoch: slots 0..world_size-1 */
  int min_size;             /* smallest epoch after failures; 0: world_size */
  int heartbeat_ms;         /* interval told to ranks; 0: FTCOMM_HEARTBEAT_MS */
  int heartbeat_timeout_ms; /* a member silent this long is lost; 0: FTCOMM_HEARTBEAT_TIMEOUT_MS */
  int hello_timeout_ms;     /* a session without hello this long is closed; 0: 10000 */
  uint64_t first_epoch;     /* epochs start after this (e.g. restored state); 0: none */
  uint64_t member_id_base;  /* ids are base + 1, base + 2, ...; 0: from the wall clock */
  const char *dump_dir;     /* uploaded dumps go to DIR/<incident>/rank-<r>.json; NULL: refused */
  ftc__coord_event_fn on_event; /* may be NULL */
  void *event_arg;
  /* May be NULL. Asked on the coordinator's thread when an epoch's or a
   * standby member's session closes without a leave: 1 if the host knows
   * that member's process (its slot, the pid its hello gave) is exiting or
   * gone, 0 if it lives or the host cannot tell. A process's sockets close
   * as the kernel tears it down, well before its parent hears of its exit;
   * ftcomm-run answers for its own children from /proc. The member is then
   * dropped at once, as at ftc__coord_slot_lost; on 0 it keeps its place
   * for the evidence time (a connection that blinks). Must return quickly
   * and must not call the coordinator. */
  int (*process_gone)(void *arg, int slot, int64_t pid);
  void *process_gone_arg;
  int no_hello_in_request;  /* 1: serve as a coordinator from before the hello in the
                             * request (subprotocol ftcomm.membership.v1 only, lws's
                             * default request-header space), for mixed-version tests */
} ftc__coord_cfg_t;

/* Start listening and serving. Strings in cfg are copied. On success *out
 * owns the coordinator (ftc__coord_destroy); on failure *out is NULL and
 * ftc_last_error() says why (e.g. the port is taken). */
ftc_status_t ftc__coord_create(const ftc__coord_cfg_t *cfg, ftc__coord_t **out);

/* The TCP port the coordinator listens on (the ephemeral one for port 0). */
int ftc__coord_port(const ftc__coord_t *co);
/* The loop its service thread waits in: "epoll" or "poll" (evloop.h). */
const char *ftc__coord_loop(const ftc__coord_t *co);

typedef struct ftc__coord_stats {
  uint64_t epoch;     /* last announced epoch, 0 before the first */
  int epoch_size;     /* members of that epoch */
  int connected;      /* authenticated sessions now */
  int pending;        /* members waiting for an epoch (first one, or joiners) */
  int standby;        /* members registered before they are ready (hello "standby"),
                       * not admitted until their "join" (ftc_comm_create_begin) */
  int lost;           /* members lost (session closed without leave, timed out, reported) */
  int left;           /* members that left cleanly */
  int refused;        /* sessions refused (auth, malformed, duplicates, ...) */
  int hello_in_request; /* sessions whose hello came in the upgrade request (header) */
  int reports;        /* failure reports received from members */
  int reports_stale;  /* of those, about an epoch already replaced (ignored) */
} ftc__coord_stats_t;

/* A consistent snapshot of the coordinator's counters. */
void ftc__coord_stats(ftc__coord_t *co, ftc__coord_stats_t *out);

/* The current epoch as announced: members in rank order. */
typedef struct ftc__coord_member {
  int rank, slot;
  uint64_t member_id, joined_epoch;
  int connected;       /* its session is open (after a restart: it has come back) */
  char addr[128];      /* data-plane host:port */
  char host[64];       /* pod or host name it gave, may be "" */
} ftc__coord_member_t;

typedef struct ftc__coord_view {
  uint64_t epoch;      /* 0 before the first */
  int size;
  ftc__coord_member_t *members;
} ftc__coord_view_t;

/* A copy of the current epoch; *out is the caller's (ftc__coord_view_free). */
ftc_status_t ftc__coord_get_view(ftc__coord_t *co, ftc__coord_view_t **out);
void ftc__coord_view_free(ftc__coord_view_t *v);

/* Ask every member of the current epoch to write a flight-recorder dump and
 * upload it under `incident` (copied). Returns at once. */
ftc_status_t ftc__coord_request_dumps(ftc__coord_t *co, const char *incident,
                                      const char *reason);

/* Tell the coordinator that the process holding `slot` is gone (e.g. its pod
 * died): its member is dropped at once, as if its session had been lost. */
ftc_status_t ftc__coord_slot_lost(ftc__coord_t *co, int slot, const char *reason);

/* Stop serving (sessions are closed), join the service thread and free.
 * NULL is a no-op. */
void ftc__coord_destroy(ftc__coord_t *co);

/* Offline: the same coordinator in-process, without a network or a thread,
 * for the fuzz target (tests/fuzz/fuzz_coord.c). The caller is the service
 * thread: it opens sessions, hands each one whole messages, reads back what
 * each was sent, closes them, and ticks the clock's checks (heartbeat
 * timeouts, the evidence rule, queued commands). Sessions are freed by
 * offline_close; offline_destroy leaves those still open to the caller,
 * who closes them after it with co NULL (they have no member then). */
typedef struct ftc__coord_session ftc__coord_session_t;
ftc_status_t ftc__coord_offline_create(const ftc__coord_cfg_t *cfg, ftc__coord_t **out);
ftc__coord_session_t *ftc__coord_offline_open(ftc__coord_t *co, const char *peer);
/* -1: the coordinator closes the session (it refused it, or it left). */
int ftc__coord_offline_receive(ftc__coord_t *co, ftc__coord_session_t *s, const char *text,
                               size_t len);
/* A session whose upgrade request selected the hello-in-request subprotocol:
 * `hdr` is its X-Ftcomm-Hello header's value (len bytes; NULL: absent),
 * taken as the session's hello exactly as the coordinator takes it online.
 * -1: the coordinator closes the session. */
int ftc__coord_offline_hello_header(ftc__coord_t *co, ftc__coord_session_t *s, const char *hdr,
                                    size_t len);
/* The oldest message queued for s into buf (cut at len): its length, 0 none. */
size_t ftc__coord_offline_sent(ftc__coord_session_t *s, char *buf, size_t len, int *close_after);
void ftc__coord_offline_tick(ftc__coord_t *co);
void ftc__coord_offline_close(ftc__coord_t *co, ftc__coord_session_t *s);
void ftc__coord_offline_destroy(ftc__coord_t *co);

#endif
