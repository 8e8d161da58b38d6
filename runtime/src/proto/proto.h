/*
 * proto.h - the membership protocol's messages, shared by the rank's client
 * (runtime/src/membership/) and the coordinator (runtime/src/coordinator/).
 *
 * Every message is one WebSocket text message holding one JSON object
 * {"v":1,"type":"...",...}; docs/protocol.md describes each one. This module
 * owns the wire names, the bounds, building messages (ftc__proto_*() return
 * a new JSON object) and decoding a received text into ftc__msg_t with every
 * field checked, so neither side ever reads an unchecked field.
 */
#ifndef FTC_PROTO_H
#define FTC_PROTO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ftc_proto_wire.h"
#include "ftcomm.h"

#define FTC__PROTO_VERSION 1
/* Largest message the coordinator accepts from a rank; dumps are sent in
 * fragments of at most FTC__PROTO_DUMP_CHUNK bytes of data, which stay below
 * it even when JSON escaping makes every byte six. */
#define FTC__PROTO_MAX_RANK_MSG (256 * 1024)
/* Largest message a rank accepts from the coordinator (a view of a big job). */
#define FTC__PROTO_MAX_COORD_MSG (64 * 1024 * 1024)
#define FTC__PROTO_DUMP_CHUNK (32 * 1024)
/* Bounds on strings inside messages. */
#define FTC__PROTO_MAX_ADDR 127
#define FTC__PROTO_MAX_NAME 253
#define FTC__PROTO_MAX_TOKEN 1024
#define FTC__PROTO_MAX_BLOB (1024 * 1024)
#define FTC__PROTO_MAX_FAILED 65536
#define FTC__PROTO_DEFAULT_HEARTBEAT_MS 1000
/* The data-plane protocol ("dataplane" in a hello) from which a rank takes
 * "prospect" messages (FTC__TCP_PROTO 6); older ranks are sent none. */
#define FTC__PROTO_DATAPLANE_PROSPECT 6

typedef enum ftc__msg_type {
  FTC__MSG_NONE = 0,
  FTC__MSG_HELLO,        /* rank -> coordinator: authenticate and register */
  FTC__MSG_WELCOME,      /* coordinator -> rank: accepted, member id */
  FTC__MSG_VIEW,         /* coordinator -> rank: a membership epoch */
  FTC__MSG_HEARTBEAT,    /* both ways: liveness, and the sender's current epoch */
  FTC__MSG_FAILURE,      /* rank -> coordinator: ranks of an epoch failed */
  FTC__MSG_LEAVE,        /* rank -> coordinator: leaving cleanly */
  FTC__MSG_DUMP_REQUEST, /* coordinator -> rank: write and upload a dump */
  FTC__MSG_DUMP,         /* rank -> coordinator: one fragment of a dump */
  FTC__MSG_ERROR,        /* either way: refusal with a code; the sender closes */
  FTC__MSG_BACKEND,      /* both ways: an epoch's backend blob (e.g. an NCCL unique id) */
  FTC__MSG_JOIN,         /* rank -> coordinator: a standby member is ready to be admitted */
  FTC__MSG_PROSPECT,     /* coordinator -> rank: the epoch its standby members' joins would
                          * form, if nothing changes first (not an epoch) */
  FTC__MSG_VIEW_DELTA,   /* coordinator -> rank (hello "delta"): an epoch as the change
                          * from the one before it */
  FTC__MSG_VIEW_REQUEST, /* rank -> coordinator: send the current epoch whole (a delta
                          * did not apply) */
  FTC__MSG_PROBE,        /* coordinator -> rank: try to reach the epoch's other members */
  FTC__MSG_REACH,        /* rank -> coordinator: the members of an epoch it cannot reach */
  FTC__MSG_TYPE_COUNT
} ftc__msg_type_t;

/* Error codes carried by an "error" message. */
typedef enum ftc__perr {
  FTC__PERR_NONE = 0,
  FTC__PERR_BAD_JSON,          /* "bad_json": not a JSON object */
  FTC__PERR_BAD_VERSION,       /* "bad_version": v missing or not supported */
  FTC__PERR_TOO_LARGE,         /* "too_large": message over the bound */
  FTC__PERR_BAD_MESSAGE,       /* "bad_message": unknown type, missing or invalid field */
  FTC__PERR_NOT_AUTHENTICATED, /* "not_authenticated": a message before hello */
  FTC__PERR_AUTH,              /* "auth_failed": wrong token */
  FTC__PERR_WRONG_JOB,         /* "wrong_job": hello for another job */
  FTC__PERR_BAD_SLOT,          /* "bad_slot": slot outside the job */
  FTC__PERR_DUPLICATE_SLOT,    /* "duplicate_slot": the slot has a live member */
  FTC__PERR_UNEXPECTED,        /* "unexpected": a valid message in the wrong state */
  FTC__PERR_EXCLUDED,          /* "excluded": the member was dropped from the job */
  FTC__PERR_SHUTTING_DOWN,     /* "shutting_down": the coordinator is stopping */
  FTC__PERR_INTERNAL,          /* "internal": the peer failed (out of memory, ...) */
  FTC__PERR_DATAPLANE_MISMATCH, /* "dataplane_mismatch": the hello's data-plane protocol
                                 * differs from the job's running ranks' */
  FTC__PERR_COUNT
} ftc__perr_t;

const char *ftc__msg_type_name(ftc__msg_type_t t);
const char *ftc__perr_name(ftc__perr_t e);
/* The status a rank reports for an error code received from the coordinator. */
ftc_status_t ftc__perr_status(ftc__perr_t e);

/* One member of a view, as carried on the wire. */
typedef struct ftc__wire_member {
  int rank;
  int slot;
  uint64_t member_id;
  uint64_t joined_epoch;
  const char *addr;
  /* "fresh": whether the member holds the application's state, as
   * ftc__state_t (membership/member.h): 0 not said (the field is absent),
   * 1 fresh (true: never completed a step boundary), 2 holds it (false). */
  int state;
} ftc__wire_member_t;

/* Fields of a hello (building and decoding). Strings may be NULL when optional. */
typedef struct ftc__hello {
  const char *job, *token, *addr;
  const char *pod, *node, *host; /* optional */
  int slot, world_size, min_size, joiner;
  /* "standby": registered, not to be admitted (nor counted for the first
   * epoch) until a "join" (ftc_comm_create_begin); optional, 0: not said. */
  int standby;
  /* "delta": this rank applies view deltas (view_delta, view_request);
   * optional, 0: not said (an older rank: it is sent whole views). */
  int delta;
  /* "probes": this rank answers a "probe" with a "reach" (optional, 0:
   * not said: an older rank, sent no probe). */
  int probes;
  /* "deflate": this rank takes a whole view deflated (zlib) in a binary
   * message (ftc__proto_deflate); optional, 0: not said (text views). */
  int deflate;
  int64_t pid;                   /* optional, 0 if unknown */
  /* "dataplane": the data-plane protocol this rank speaks (FTC__TCP_PROTO,
   * tcp/tcp.h); optional, 0: not said (an older rank, or FTCOMM_BACKEND=nccl). */
  int dataplane;
  uint64_t known_epoch;          /* last epoch this process knows; 0 if none */
  uint64_t prev_member_id;       /* member id of an earlier session of this process; 0 if none */
  /* A reconnecting rank's current view (epoch known_epoch), so that a
   * restarted coordinator learns the running epoch; view_n 0: none. */
  const ftc__wire_member_t *view;
  int view_n;
} ftc__hello_t;

/* A member of the previous epoch that a view leaves out, and why (the
 * coordinator's verdict): reason "crashed", "hung", "left" or "lost" (a
 * receiver takes an unknown word for "lost"); detail: the coordinator's words. */
typedef struct ftc__wire_dropped {
  uint64_t member_id;
  const char *reason;
  const char *detail; /* may be NULL */
} ftc__wire_dropped_t;
#define FTC__PROTO_MAX_DROP_REASON 16
#define FTC__PROTO_MAX_DROP_DETAIL 240

/*
 * A decoded message. Strings point into `root` (or, for a view read by the
 * fast path, into a copy of the text kept behind `members`, root NULL) and
 * live until ftc__msg_clear(); `members` and `ranks` are allocated and
 * freed there too.
 */
typedef struct ftc__msg {
  ftc__msg_type_t type;
  json_t *root;
  ftc__hello_t hello;
  /* welcome */
  uint64_t member_id;
  int heartbeat_ms;
  int max_message;
  /* welcome: the coordinator holds this member as standby until its
   * "join" (optional "standby"; an older coordinator never says it) */
  int standby;
  /* welcome, view, heartbeat, failure, dump_request: epoch */
  uint64_t epoch;
  /* heartbeat (rank -> coordinator): the epoch of the sender's first
   * completed step boundary, 0: none yet (optional "ready") */
  uint64_t ready;
  /* view */
  int nmembers;
  ftc__wire_member_t *members;
  const char *backend; /* view: may be NULL; backend: the blob */
  /* failure; member_ids (optional, nmember_ids == nranks) name the same ranks;
   * reach: member_ids are the unreachable members (nranks 0) */
  int nranks;
  int *ranks;
  int nmember_ids;
  uint64_t *member_ids;
  /* view_delta: the epoch it changes (base), the FNV-1a hash of the whole
   * resulting view (ftc__proto_view_hash) and its size; removed: member ids
   * of the base that it leaves out; ready: member ids of the base that hold
   * state now (fresh false); members: the members it admits, with their
   * ranks in the resulting view (in rank order, not from 0) */
  uint64_t base_epoch, view_hash;
  int view_size;
  int nremoved, nready;
  uint64_t *removed, *ready_ids;
  int ready_all; /* view_delta: every member of the base that it keeps holds state */
  /* view: members of the previous epoch that left cleanly (may be 0) */
  int nleft;
  uint64_t *left;
  /* view: members of the previous epoch it leaves out, and why (may be 0) */
  int ndropped;
  ftc__wire_dropped_t *dropped;
  int status;
  /* leave, dump_request, error: reason; error: code (wire name, and parsed) */
  const char *reason;
  const char *code_name;
  ftc__perr_t code;
  /* dump_request, dump */
  const char *incident;
  /* dump fragment */
  uint64_t offset, total;
  int last;
  int rank;
  const char *data;
  size_t data_len;
} ftc__msg_t;

/*
 * Decode one received text of `len` bytes (need not be NUL-terminated).
 * FTC__PERR_NONE and a filled *msg on success (release with ftc__msg_clear);
 * otherwise the error code to send back and a reason in why[], and *msg is
 * left empty. Messages longer than max_len are refused with TOO_LARGE.
 */
ftc__perr_t ftc__proto_decode(const char *text, size_t len, size_t max_len, ftc__msg_t *msg,
                              char *why, size_t whylen);
/* Views in the coordinator's own form are read without jansson (proto.c,
 * "the view's fast path"); 0 sends every message through the general
 * decoder (tests compare the two). */
extern int ftc__proto_fast_views;
void ftc__msg_clear(ftc__msg_t *msg);

/* Builders: a new JSON object (caller owns; NULL when out of memory). */
json_t *ftc__proto_hello(const ftc__hello_t *h);
json_t *ftc__proto_welcome(uint64_t member_id, uint64_t epoch, int heartbeat_ms, int max_message);
/* Add "standby": true to a welcome (the member waits for its "join").
 * Returns welcome, or NULL (welcome released) when out of memory. */
json_t *ftc__proto_welcome_standby(json_t *welcome);
/* A standby member asks to be admitted: {"v":1,"type":"join"}. */
json_t *ftc__proto_join(void);
/* The epoch the coordinator would form if its standby members joined now
 * (members as in a view; decoded into the same fields). */
json_t *ftc__proto_prospect(uint64_t epoch, const ftc__wire_member_t *members, int n);
json_t *ftc__proto_view(uint64_t epoch, const ftc__wire_member_t *members, int n,
                        const char *backend);
/* Add to a view message the member ids of members of the epoch before it
 * that left cleanly (a leave): "left", optional. Returns view, or NULL
 * (view released) when out of memory. */
json_t *ftc__proto_view_left(json_t *view, const uint64_t *ids, int n);
/* Add to a view message the members of the epoch before it that it leaves
 * out, and why: "dropped", optional. Returns view, or NULL (view released)
 * when out of memory. */
json_t *ftc__proto_view_dropped(json_t *view, const ftc__wire_dropped_t *d, int n);
/* A view delta: epoch `epoch` as a change from `base` (docs/protocol.md,
 * "view_delta"): the ids it removes, the members it admits (with their new
 * ranks), the ids of members that hold state since the base, and the hash
 * and size of the whole result. "left" and "dropped" are added as to a view. */
json_t *ftc__proto_view_delta(uint64_t epoch, uint64_t base, uint64_t hash, int size,
                              const uint64_t *removed, int nremoved,
                              const ftc__wire_member_t *joined, int njoined,
                              const uint64_t *ready, int nready);
/* (nready -1: "ready_all", every member of the base it keeps holds state) */
json_t *ftc__proto_view_request(void);
/* FNV-1a (64 bits) of a whole view: per member in rank order its slot,
 * member id, joined epoch, address and state. */
uint64_t ftc__proto_view_hash(const ftc__wire_member_t *members, int n);
/* Apply a decoded view_delta to `base` (n members in rank order, the
 * epoch delta->base_epoch): *out is a new array of the resulting members
 * (the caller frees it with ftc__free; strings point into base and delta),
 * and the return value its size; -1 when the delta does not give the view
 * it describes (its size or hash differ, a member it admits sits elsewhere,
 * out of memory): the rank then asks for the whole view. */
int ftc__proto_view_apply(const ftc__wire_member_t *base, int n, const ftc__msg_t *delta,
                          ftc__wire_member_t **out);
json_t *ftc__proto_heartbeat(uint64_t epoch);
/* A rank's heartbeat with "ready" (omitted when 0). */
json_t *ftc__proto_heartbeat_ready(uint64_t epoch, uint64_t ready);
/* member_ids may be NULL; else n ids of the failed ranks in that epoch. */
json_t *ftc__proto_failure(uint64_t epoch, const int *ranks, const uint64_t *member_ids, int n,
                           ftc_status_t why);
/* A probe of `epoch`: the rank tries to connect to every other member's
 * data-plane address and answers with a reach. */
json_t *ftc__proto_probe(uint64_t epoch);
/* The members of `epoch` (n ids) this rank could not connect to; n may be 0. */
json_t *ftc__proto_reach(uint64_t epoch, const uint64_t *unreachable, int n);
json_t *ftc__proto_leave(const char *reason);
json_t *ftc__proto_dump_request(const char *incident, const char *reason, uint64_t epoch);
json_t *ftc__proto_dump(const char *incident, int rank, uint64_t offset, uint64_t total,
                        const char *data, size_t len, int last);
json_t *ftc__proto_error(ftc__perr_t code, const char *reason);
/* The backend blob of `epoch` (at most FTC__PROTO_MAX_BACKEND bytes). */
json_t *ftc__proto_backend(uint64_t epoch, const char *blob);
#define FTC__PROTO_MAX_BACKEND 4096

/*
 * An encoded message, ready for lws_write(): `headroom` free bytes, then
 * len bytes of text. Frames form a singly linked FIFO (ftc__frameq_t).
 */
typedef struct ftc__frame {
  struct ftc__frame *next;
  size_t len;
  int close_after; /* close the session once this frame is written */
  int binary;      /* a deflated message (ftc__proto_deflate): sent as binary */
  /* A frame made by ftc__frame_ref sends ref's bytes (buf is empty); refs
   * counts the holders of a frame's bytes: its owner and every such frame. */
  struct ftc__frame *ref;
  int refs;
  unsigned char buf[]; /* headroom + len */
} ftc__frame_t;

/* A frame that sends shared's bytes without copying them (one view for
 * thousands of sessions): shared must stay unmodified while any holder
 * lives, and is freed by the last ftc__frame_release. NULL when out of
 * memory. Single-threaded: the holders live on one thread. */
ftc__frame_t *ftc__frame_ref(ftc__frame_t *shared);
/* Drop a frame: a reference drops its count on the shared one; a frame is
 * freed when its last holder goes. NULL is a no-op. */
void ftc__frame_release(ftc__frame_t *f);

/* Encode `msg` (a reference is stolen, even on failure) into a new frame
 * with `headroom` bytes before the text. NULL when out of memory. */
ftc__frame_t *ftc__proto_encode(json_t *msg, size_t headroom);

/* The text of `text` (a frame encoded with `headroom`, or one that refers
 * to one) deflated (zlib, RFC 1950) into a new binary frame with the same
 * headroom, for
 * ranks that said "deflate": a whole view of a big job is about a ninth of
 * its text. NULL when out of memory. */
ftc__frame_t *ftc__proto_deflate(const ftc__frame_t *text, size_t headroom);
/* Inflate a binary message of `len` bytes into *out (allocated, NUL
 * after its *out_len bytes; freed with ftc__free). 0: done; 1: the text
 * passes `max` bytes (*out holds the first max; with max small, the head
 * of a message whose rest is not read); -1: not a zlib stream, truncated,
 * or out of memory (*out NULL). */
int ftc__proto_inflate(const void *in, size_t len, size_t max, char **out, size_t *out_len);

typedef struct ftc__frameq {
  ftc__frame_t *head, *tail;
  size_t count;
} ftc__frameq_t;

void ftc__frameq_push(ftc__frameq_t *q, ftc__frame_t *f);
void ftc__frameq_push_front(ftc__frameq_t *q, ftc__frame_t *f);
ftc__frame_t *ftc__frameq_pop(ftc__frameq_t *q);
void ftc__frameq_clear(ftc__frameq_t *q);

/* The length of the longest prefix of data[0..len) of at most max bytes
 * that does not split a UTF-8 sequence (for dump fragments). */
size_t ftc__proto_utf8_cut(const char *data, size_t len, size_t max);

/* Route jansson's allocations through ftc__malloc (once per process). */
void ftc__proto_init(void);

/* Constant-time comparison of two NUL-terminated secrets: 1 if equal. */
int ftc__proto_token_equal(const char *a, const char *b);

#endif
