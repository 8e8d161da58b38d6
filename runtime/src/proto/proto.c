/*
 * proto.c - building, encoding and checked decoding of the membership
 * protocol's JSON messages (docs/protocol.md). Owns the wire names of
 * message types and error codes; holds no state besides the one-time
 * jansson allocator setup.
 */
#include "proto/proto.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ftc_alloc.h"
#include "ftc_log.h"

static const char *const type_names[FTC__MSG_TYPE_COUNT] = {
    [FTC__MSG_NONE] = "none",
    [FTC__MSG_HELLO] = "hello",
    [FTC__MSG_WELCOME] = "welcome",
    [FTC__MSG_VIEW] = "view",
    [FTC__MSG_HEARTBEAT] = "heartbeat",
    [FTC__MSG_FAILURE] = "failure",
    [FTC__MSG_LEAVE] = "leave",
    [FTC__MSG_DUMP_REQUEST] = "dump_request",
    [FTC__MSG_DUMP] = "dump",
    [FTC__MSG_ERROR] = "error",
    [FTC__MSG_BACKEND] = "backend",
};

static const char *const perr_names[FTC__PERR_COUNT] = {
    [FTC__PERR_NONE] = "none",
    [FTC__PERR_BAD_JSON] = "bad_json",
    [FTC__PERR_BAD_VERSION] = "bad_version",
    [FTC__PERR_TOO_LARGE] = "too_large",
    [FTC__PERR_BAD_MESSAGE] = "bad_message",
    [FTC__PERR_NOT_AUTHENTICATED] = "not_authenticated",
    [FTC__PERR_AUTH] = "auth_failed",
    [FTC__PERR_WRONG_JOB] = "wrong_job",
    [FTC__PERR_BAD_SLOT] = "bad_slot",
    [FTC__PERR_DUPLICATE_SLOT] = "duplicate_slot",
    [FTC__PERR_UNEXPECTED] = "unexpected",
    [FTC__PERR_EXCLUDED] = "excluded",
    [FTC__PERR_SHUTTING_DOWN] = "shutting_down",
    [FTC__PERR_INTERNAL] = "internal",
};

const char *ftc__msg_type_name(ftc__msg_type_t t) {
  if ((int)t < 0 || t >= FTC__MSG_TYPE_COUNT) return "?";
  return type_names[t];
}

const char *ftc__perr_name(ftc__perr_t e) {
  if ((int)e < 0 || e >= FTC__PERR_COUNT) return "?";
  return perr_names[e];
}

ftc_status_t ftc__perr_status(ftc__perr_t e) {
  switch (e) {
    case FTC__PERR_NONE: return FTC_OK;
    case FTC__PERR_AUTH: return FTC_ERR_AUTH;
    case FTC__PERR_WRONG_JOB:
    case FTC__PERR_BAD_SLOT:
    case FTC__PERR_DUPLICATE_SLOT: return FTC_ERR_CONFIG;
    case FTC__PERR_SHUTTING_DOWN:
    case FTC__PERR_EXCLUDED: return FTC_ERR_COORDINATOR;
    case FTC__PERR_INTERNAL: return FTC_ERR_INTERNAL;
    default: return FTC_ERR_PROTOCOL;
  }
}

static void *jansson_malloc(size_t n) { return ftc__malloc(n); }
static void jansson_free(void *p) { ftc__free(p); }

/* libwebsockets' own errors and warnings (e.g. "connection refused" while a
 * rank retries) go to the ftcomm log at debug level, subsystem net. */
static void lws_log_emit(int level, const char *line) {
  size_t n = strlen(line);
  while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
  FTC_DEBUG(FTC_SUB_NET, "lws%s: %.*s", level == LLL_ERR ? " error" : "", (int)n, line);
}

static void proto_init_once(void) {
  json_set_alloc_funcs(jansson_malloc, jansson_free);
  lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_emit);
}
static pthread_once_t proto_once = PTHREAD_ONCE_INIT;

void ftc__proto_init(void) { pthread_once(&proto_once, proto_init_once); }

int ftc__proto_token_equal(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  /* Walk the whole of the expected secret whatever the input, so the time
   * depends on neither where the first difference is nor a's length. */
  unsigned char diff = (unsigned char)(la != lb);
  for (size_t i = 0; i < lb; i++) {
    unsigned char ca = i < la ? (unsigned char)a[i] : 0;
    diff |= (unsigned char)(ca ^ (unsigned char)b[i]);
  }
  return diff == 0;
}

/* ---- builders ---- */

static json_t *msg_new(ftc__msg_type_t t) {
  return json_pack("{s:i,s:s}", "v", FTC__PROTO_VERSION, "type", type_names[t]);
}

/* Set a field; a NULL value (allocation failed) marks the object as failed. */
static int set(json_t *o, const char *k, json_t *v) {
  if (!v) return -1;
  return json_object_set_new(o, k, v);
}

static json_t *finish(json_t *o, int err) {
  if (err) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static json_t *members_array(const ftc__wire_member_t *members, int n) {
  json_t *arr = json_array();
  for (int i = 0; arr && i < n; i++) {
    json_t *m = json_pack("{s:i,s:i,s:I,s:I,s:s}", "rank", members[i].rank, "slot",
                          members[i].slot, "member_id", (json_int_t)members[i].member_id,
                          "joined_epoch", (json_int_t)members[i].joined_epoch, "addr",
                          members[i].addr ? members[i].addr : "");
    if (m && members[i].state &&
        json_object_set_new(m, "fresh", json_boolean(members[i].state == 1))) {
      json_decref(m);
      m = NULL;
    }
    if (!m || json_array_append_new(arr, m)) {
      json_decref(arr);
      return NULL;
    }
  }
  return arr;
}

json_t *ftc__proto_hello(const ftc__hello_t *h) {
  json_t *o = msg_new(FTC__MSG_HELLO);
  if (!o) return NULL;
  int err = 0;
  err |= set(o, "job", json_string(h->job ? h->job : ""));
  err |= set(o, "token", json_string(h->token ? h->token : ""));
  err |= set(o, "slot", json_integer(h->slot));
  err |= set(o, "world_size", json_integer(h->world_size));
  err |= set(o, "min_size", json_integer(h->min_size));
  err |= set(o, "joiner", json_boolean(h->joiner));
  err |= set(o, "addr", json_string(h->addr ? h->addr : ""));
  if (h->pod) err |= set(o, "pod", json_string(h->pod));
  if (h->node) err |= set(o, "node", json_string(h->node));
  if (h->host) err |= set(o, "host", json_string(h->host));
  if (h->pid) err |= set(o, "pid", json_integer(h->pid));
  err |= set(o, "known_epoch", json_integer((json_int_t)h->known_epoch));
  if (h->prev_member_id)
    err |= set(o, "prev_member_id", json_integer((json_int_t)h->prev_member_id));
  if (h->view_n > 0) err |= set(o, "view", members_array(h->view, h->view_n));
  return finish(o, err);
}

json_t *ftc__proto_welcome(uint64_t member_id, uint64_t epoch, int heartbeat_ms,
                           int max_message) {
  json_t *o = msg_new(FTC__MSG_WELCOME);
  if (!o) return NULL;
  int err = 0;
  err |= set(o, "member_id", json_integer((json_int_t)member_id));
  err |= set(o, "epoch", json_integer((json_int_t)epoch));
  err |= set(o, "heartbeat_ms", json_integer(heartbeat_ms));
  err |= set(o, "max_message", json_integer(max_message));
  return finish(o, err);
}

json_t *ftc__proto_view(uint64_t epoch, const ftc__wire_member_t *members, int n,
                        const char *backend) {
  json_t *o = msg_new(FTC__MSG_VIEW);
  if (!o) return NULL;
  int err = 0;
  err |= set(o, "epoch", json_integer((json_int_t)epoch));
  err |= set(o, "members", members_array(members, n));
  err |= set(o, "backend", backend ? json_string(backend) : json_null());
  return finish(o, err);
}

json_t *ftc__proto_view_dropped(json_t *view, const ftc__wire_dropped_t *d, int n) {
  if (!view || n <= 0) return view;
  json_t *arr = json_array();
  int err = !arr;
  for (int i = 0; !err && i < n; i++) {
    json_t *o = json_object();
    err |= !o;
    if (!o) break;
    err |= set(o, "member_id", json_integer((json_int_t)d[i].member_id));
    err |= set(o, "reason", json_string(d[i].reason ? d[i].reason : "lost"));
    if (d[i].detail && *d[i].detail) {
      /* Cut to the limit at a character boundary (json_string wants UTF-8). */
      size_t len = strlen(d[i].detail);
      if (len > FTC__PROTO_MAX_DROP_DETAIL) {
        len = FTC__PROTO_MAX_DROP_DETAIL;
        while (len > 0 && ((unsigned char)d[i].detail[len] & 0xc0) == 0x80) len--;
      }
      err |= set(o, "detail", json_stringn(d[i].detail, len));
    }
    err |= json_array_append_new(arr, o);
  }
  if (err || json_object_set_new(view, "dropped", arr)) {
    if (!err) arr = NULL; /* stolen by the failed set */
    json_decref(arr);
    json_decref(view);
    return NULL;
  }
  return view;
}

json_t *ftc__proto_view_left(json_t *view, const uint64_t *ids, int n) {
  if (!view || n <= 0) return view;
  json_t *arr = json_array();
  int err = !arr;
  for (int i = 0; !err && i < n; i++) err |= json_array_append_new(arr, json_integer((json_int_t)ids[i]));
  if (err || json_object_set_new(view, "left", arr)) {
    if (!err) arr = NULL; /* stolen by the failed set */
    json_decref(arr);
    json_decref(view);
    return NULL;
  }
  return view;
}

json_t *ftc__proto_backend(uint64_t epoch, const char *blob) {
  json_t *o = msg_new(FTC__MSG_BACKEND);
  if (!o) return NULL;
  int err = 0;
  err |= set(o, "epoch", json_integer((json_int_t)epoch));
  err |= set(o, "blob", json_string(blob ? blob : ""));
  return finish(o, err);
}

json_t *ftc__proto_heartbeat(uint64_t epoch) {
  json_t *o = msg_new(FTC__MSG_HEARTBEAT);
  if (!o) return NULL;
  return finish(o, set(o, "epoch", json_integer((json_int_t)epoch)));
}

json_t *ftc__proto_heartbeat_ready(uint64_t epoch, uint64_t ready) {
  json_t *o = ftc__proto_heartbeat(epoch);
  if (!o || !ready) return o;
  return finish(o, set(o, "ready", json_integer((json_int_t)ready)));
}

json_t *ftc__proto_failure(uint64_t epoch, const int *ranks, const uint64_t *member_ids, int n,
                           ftc_status_t why) {
  json_t *o = msg_new(FTC__MSG_FAILURE);
  if (!o) return NULL;
  int err = 0;
  err |= set(o, "epoch", json_integer((json_int_t)epoch));
  json_t *arr = json_array();
  for (int i = 0; arr && i < n; i++)
    if (json_array_append_new(arr, json_integer(ranks[i]))) err = -1;
  err |= set(o, "ranks", arr);
  if (member_ids) {
    json_t *ids = json_array();
    for (int i = 0; ids && i < n; i++)
      if (json_array_append_new(ids, json_integer((json_int_t)member_ids[i]))) err = -1;
    err |= set(o, "member_ids", ids);
  }
  err |= set(o, "status", json_integer(why));
  err |= set(o, "reason", json_string(ftc_strerror(why)));
  return finish(o, err);
}

json_t *ftc__proto_leave(const char *reason) {
  json_t *o = msg_new(FTC__MSG_LEAVE);
  if (!o) return NULL;
  return finish(o, set(o, "reason", json_string(reason ? reason : "")));
}

json_t *ftc__proto_dump_request(const char *incident, const char *reason, uint64_t epoch) {
  json_t *o = msg_new(FTC__MSG_DUMP_REQUEST);
  if (!o) return NULL;
  int err = 0;
  err |= set(o, "incident", json_string(incident));
  err |= set(o, "reason", json_string(reason ? reason : ""));
  err |= set(o, "epoch", json_integer((json_int_t)epoch));
  return finish(o, err);
}

json_t *ftc__proto_dump(const char *incident, int rank, uint64_t offset, uint64_t total,
                        const char *data, size_t len, int last) {
  json_t *o = msg_new(FTC__MSG_DUMP);
  if (!o) return NULL;
  int err = 0;
  err |= set(o, "incident", json_string(incident));
  err |= set(o, "rank", json_integer(rank));
  err |= set(o, "offset", json_integer((json_int_t)offset));
  err |= set(o, "total", json_integer((json_int_t)total));
  err |= set(o, "last", json_boolean(last));
  err |= set(o, "data", json_stringn(data, len));
  return finish(o, err);
}

json_t *ftc__proto_error(ftc__perr_t code, const char *reason) {
  json_t *o = msg_new(FTC__MSG_ERROR);
  if (!o) return NULL;
  int err = 0;
  err |= set(o, "code", json_string(ftc__perr_name(code)));
  err |= set(o, "reason", json_string(reason ? reason : ""));
  return finish(o, err);
}

ftc__frame_t *ftc__proto_encode(json_t *msg, size_t headroom) {
  ftc__frame_t *f = NULL;
  if (!msg) return NULL;
  size_t n = json_dumpb(msg, NULL, 0, JSON_COMPACT);
  if (n == 0) goto out_decref;
  f = ftc__malloc(sizeof(*f) + headroom + n);
  if (!f) goto out_decref;
  if (json_dumpb(msg, (char *)f->buf + headroom, n, JSON_COMPACT) != n) {
    ftc__free(f);
    f = NULL;
    goto out_decref;
  }
  f->next = NULL;
  f->len = n;
  f->close_after = 0;
out_decref:
  json_decref(msg);
  return f;
}

void ftc__frameq_push_front(ftc__frameq_t *q, ftc__frame_t *f) {
  f->next = q->head;
  q->head = f;
  if (!q->tail) q->tail = f;
  q->count++;
}

void ftc__frameq_push(ftc__frameq_t *q, ftc__frame_t *f) {
  f->next = NULL;
  if (q->tail)
    q->tail->next = f;
  else
    q->head = f;
  q->tail = f;
  q->count++;
}

ftc__frame_t *ftc__frameq_pop(ftc__frameq_t *q) {
  ftc__frame_t *f = q->head;
  if (!f) return NULL;
  q->head = f->next;
  if (!q->head) q->tail = NULL;
  q->count--;
  f->next = NULL;
  return f;
}

void ftc__frameq_clear(ftc__frameq_t *q) {
  ftc__frame_t *f;
  while ((f = ftc__frameq_pop(q))) ftc__free(f);
}

size_t ftc__proto_utf8_cut(const char *data, size_t len, size_t max) {
  if (len <= max) return len;
  size_t cut = max;
  /* Back off continuation bytes (10xxxxxx) to the start of a character. */
  while (cut > 0 && ((unsigned char)data[cut] & 0xC0) == 0x80 && max - cut < 4) cut--;
  return cut ? cut : max;
}

/* ---- decoding ---- */

typedef struct dec {
  json_t *o;
  char *why;
  size_t whylen;
  int bad;
} dec_t;

static void fail(dec_t *d, const char *fmt, const char *field) {
  if (!d->bad) snprintf(d->why, d->whylen, fmt, field);
  d->bad = 1;
}

/* An integer field in [lo, hi]; optional fields keep *out when absent. */
static void get_int(dec_t *d, json_t *o, const char *k, int64_t lo, int64_t hi, int optional,
                    int64_t *out) {
  json_t *v = json_object_get(o, k);
  if (!v) {
    if (!optional) fail(d, "field \"%s\" is missing", k);
    return;
  }
  if (!json_is_integer(v)) {
    fail(d, "field \"%s\" must be an integer", k);
    return;
  }
  json_int_t x = json_integer_value(v);
  if (x < lo || x > hi) {
    fail(d, "field \"%s\" is out of range", k);
    return;
  }
  *out = x;
}

static int get_i32(dec_t *d, json_t *o, const char *k, int64_t lo, int64_t hi, int optional,
                   int def) {
  int64_t v = def;
  get_int(d, o, k, lo, hi, optional, &v);
  return (int)v;
}

static uint64_t get_u64(dec_t *d, json_t *o, const char *k, int optional) {
  int64_t v = 0;
  get_int(d, o, k, 0, INT64_MAX, optional, &v);
  return (uint64_t)v;
}

static const char *get_str(dec_t *d, json_t *o, const char *k, size_t maxlen, int optional) {
  json_t *v = json_object_get(o, k);
  if (!v || (optional && json_is_null(v))) {
    if (!optional) fail(d, "field \"%s\" is missing", k);
    return NULL;
  }
  if (!json_is_string(v)) {
    fail(d, "field \"%s\" must be a string", k);
    return NULL;
  }
  if (json_string_length(v) > maxlen) {
    fail(d, "field \"%s\" is too long", k);
    return NULL;
  }
  return json_string_value(v);
}

static int get_bool(dec_t *d, json_t *o, const char *k, int optional) {
  json_t *v = json_object_get(o, k);
  if (!v) {
    if (!optional) fail(d, "field \"%s\" is missing", k);
    return 0;
  }
  if (!json_is_boolean(v)) {
    fail(d, "field \"%s\" must be true or false", k);
    return 0;
  }
  return json_is_true(v);
}

/* A members array (of a view, or of a reconnecting rank's hello). */
static void decode_members(dec_t *d, json_t *arr, const char *name, ftc__msg_t *m) {
  if (!json_is_array(arr)) {
    fail(d, "field \"%s\" must be an array", name);
    return;
  }
  size_t n = json_array_size(arr);
  if (n > 1048576) {
    fail(d, "field \"%s\" has too many entries", name);
    return;
  }
  m->members = ftc__calloc(n ? n : 1, sizeof(*m->members));
  if (!m->members) {
    fail(d, "out of memory decoding %s", name);
    return;
  }
  m->nmembers = (int)n;
  for (size_t i = 0; i < n && !d->bad; i++) {
    json_t *e = json_array_get(arr, i);
    if (!json_is_object(e)) {
      fail(d, "entries of \"%s\" must be objects", name);
      return;
    }
    ftc__wire_member_t *w = &m->members[i];
    w->rank = get_i32(d, e, "rank", 0, 1048575, 0, 0);
    w->slot = get_i32(d, e, "slot", 0, 1048575, 0, 0);
    w->member_id = get_u64(d, e, "member_id", 0);
    w->joined_epoch = get_u64(d, e, "joined_epoch", 0);
    w->addr = get_str(d, e, "addr", FTC__PROTO_MAX_ADDR, 0);
    w->state = !json_object_get(e, "fresh") ? 0 : get_bool(d, e, "fresh", 1) ? 1 : 2;
    if (!d->bad && w->rank != (int)i) fail(d, "\"%s\" must be ordered by rank", name);
  }
}

static void decode_dropped(dec_t *d, ftc__msg_t *m);

static void decode_view_members(dec_t *d, ftc__msg_t *m) {
  m->epoch = get_u64(d, d->o, "epoch", 0);
  m->backend = get_str(d, d->o, "backend", FTC__PROTO_MAX_BLOB, 1);
  decode_members(d, json_object_get(d->o, "members"), "members", m);
  json_t *left = json_object_get(d->o, "left");
  if (!left || d->bad) return;
  size_t n = json_is_array(left) ? json_array_size(left) : 0;
  if (!json_is_array(left) || n > FTC__PROTO_MAX_FAILED) {
    fail(d, "field \"%s\" must be an array of at most 65536 member ids", "left");
    return;
  }
  if (!n) return;
  if (!(m->left = ftc__calloc(n, sizeof(uint64_t)))) {
    fail(d, "out of memory decoding %s", "left");
    return;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(left, i);
    if (!json_is_integer(e) || json_integer_value(e) <= 0) {
      fail(d, "entries of \"%s\" must be member ids", "left");
      return;
    }
    m->left[i] = (uint64_t)json_integer_value(e);
  }
  m->nleft = (int)n;
}

static void decode_view(dec_t *d, ftc__msg_t *m) {
  decode_view_members(d, m);
  decode_dropped(d, m);
}

static void decode_dropped(dec_t *d, ftc__msg_t *m) {
  json_t *arr = json_object_get(d->o, "dropped");
  if (!arr || d->bad) return;
  size_t n = json_is_array(arr) ? json_array_size(arr) : 0;
  if (!json_is_array(arr) || n > FTC__PROTO_MAX_FAILED) {
    fail(d, "field \"%s\" must be an array of at most 65536 members", "dropped");
    return;
  }
  if (!n) return;
  if (!(m->dropped = ftc__calloc(n, sizeof(*m->dropped)))) {
    fail(d, "out of memory decoding %s", "dropped");
    return;
  }
  for (size_t i = 0; i < n && !d->bad; i++) {
    json_t *e = json_array_get(arr, i);
    if (!json_is_object(e)) {
      fail(d, "entries of \"%s\" must be objects", "dropped");
      return;
    }
    ftc__wire_dropped_t *x = &m->dropped[i];
    x->member_id = get_u64(d, e, "member_id", 0);
    x->reason = get_str(d, e, "reason", FTC__PROTO_MAX_DROP_REASON, 0);
    x->detail = get_str(d, e, "detail", FTC__PROTO_MAX_DROP_DETAIL, 1);
    if (!d->bad && !x->member_id) fail(d, "entries of \"%s\" must name a member id", "dropped");
  }
  m->ndropped = (int)n;
}

static void decode_failure(dec_t *d, ftc__msg_t *m) {
  m->epoch = get_u64(d, d->o, "epoch", 0);
  m->status = get_i32(d, d->o, "status", 0, 1000, 1, FTC_ERR_PEER_LOST);
  m->reason = get_str(d, d->o, "reason", 1024, 1);
  json_t *arr = json_object_get(d->o, "ranks");
  if (!json_is_array(arr)) {
    fail(d, "field \"%s\" must be an array", "ranks");
    return;
  }
  size_t n = json_array_size(arr);
  if (n > FTC__PROTO_MAX_FAILED) {
    fail(d, "field \"%s\" has too many entries", "ranks");
    return;
  }
  m->ranks = ftc__calloc(n ? n : 1, sizeof(int));
  if (!m->ranks) {
    fail(d, "out of memory decoding %s", "ranks");
    return;
  }
  m->nranks = (int)n;
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(arr, i);
    if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 1048575) {
      fail(d, "entries of \"%s\" must be ranks", "ranks");
      return;
    }
    m->ranks[i] = (int)json_integer_value(e);
  }
  json_t *ids = json_object_get(d->o, "member_ids");
  if (!ids) return;
  if (!json_is_array(ids) || json_array_size(ids) != n) {
    fail(d, "field \"%s\" must be an array as long as ranks", "member_ids");
    return;
  }
  m->member_ids = ftc__calloc(n ? n : 1, sizeof(uint64_t));
  if (!m->member_ids) {
    fail(d, "out of memory decoding %s", "member_ids");
    return;
  }
  m->nmember_ids = (int)n;
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(ids, i);
    if (!json_is_integer(e) || json_integer_value(e) <= 0) {
      fail(d, "entries of \"%s\" must be member ids", "member_ids");
      return;
    }
    m->member_ids[i] = (uint64_t)json_integer_value(e);
  }
}

ftc__perr_t ftc__proto_decode(const char *text, size_t len, size_t max_len, ftc__msg_t *msg,
                              char *why, size_t whylen) {
  json_error_t jerr;
  memset(msg, 0, sizeof(*msg));
  if (len > max_len) {
    snprintf(why, whylen, "message of %zu bytes is over the limit of %zu", len, max_len);
    return FTC__PERR_TOO_LARGE;
  }
  json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!o) {
    snprintf(why, whylen, "not JSON: %s at line %d column %d", jerr.text, jerr.line,
             jerr.column);
    return FTC__PERR_BAD_JSON;
  }
  if (!json_is_object(o)) {
    snprintf(why, whylen, "a message must be a JSON object");
    json_decref(o);
    return FTC__PERR_BAD_JSON;
  }
  json_t *v = json_object_get(o, "v");
  if (!json_is_integer(v)) {
    snprintf(why, whylen, "field \"v\" (protocol version) is missing or not an integer");
    json_decref(o);
    return FTC__PERR_BAD_VERSION;
  }
  if (json_integer_value(v) != FTC__PROTO_VERSION) {
    snprintf(why, whylen, "protocol version %lld is not supported (this side speaks %d)",
             (long long)json_integer_value(v), FTC__PROTO_VERSION);
    json_decref(o);
    return FTC__PERR_BAD_VERSION;
  }
  dec_t d = {o, why, whylen, 0};
  const char *type = get_str(&d, o, "type", 64, 0);
  if (d.bad) {
    json_decref(o);
    return FTC__PERR_BAD_MESSAGE;
  }
  msg->root = o;
  for (int t = FTC__MSG_HELLO; t < FTC__MSG_TYPE_COUNT; t++)
    if (strcmp(type, type_names[t]) == 0) msg->type = (ftc__msg_type_t)t;
  switch (msg->type) {
    case FTC__MSG_HELLO: {
      ftc__hello_t *h = &msg->hello;
      h->job = get_str(&d, o, "job", FTC__PROTO_MAX_NAME, 0);
      h->token = get_str(&d, o, "token", FTC__PROTO_MAX_TOKEN, 0);
      h->slot = get_i32(&d, o, "slot", 0, 1048575, 0, 0);
      h->world_size = get_i32(&d, o, "world_size", 1, 1048576, 0, 0);
      h->min_size = get_i32(&d, o, "min_size", 1, 1048576, 0, 0);
      h->joiner = get_bool(&d, o, "joiner", 1);
      h->addr = get_str(&d, o, "addr", FTC__PROTO_MAX_ADDR, 0);
      h->pod = get_str(&d, o, "pod", FTC__PROTO_MAX_NAME, 1);
      h->node = get_str(&d, o, "node", FTC__PROTO_MAX_NAME, 1);
      h->host = get_str(&d, o, "host", FTC__PROTO_MAX_NAME, 1);
      int64_t pid = 0;
      get_int(&d, o, "pid", 0, INT32_MAX, 1, &pid);
      h->pid = pid;
      h->known_epoch = get_u64(&d, o, "known_epoch", 1);
      h->prev_member_id = get_u64(&d, o, "prev_member_id", 1);
      if (!d.bad && json_object_get(o, "view")) {
        decode_members(&d, json_object_get(o, "view"), "view", msg);
        h->view = msg->members;
        h->view_n = msg->nmembers;
      }
      break;
    }
    case FTC__MSG_WELCOME:
      msg->member_id = get_u64(&d, o, "member_id", 0);
      msg->epoch = get_u64(&d, o, "epoch", 0);
      msg->heartbeat_ms =
          get_i32(&d, o, "heartbeat_ms", 1, 3600000, 1, FTC__PROTO_DEFAULT_HEARTBEAT_MS);
      msg->max_message =
          get_i32(&d, o, "max_message", 1024, INT32_MAX, 1, FTC__PROTO_MAX_RANK_MSG);
      if (!d.bad && msg->member_id == 0) fail(&d, "field \"%s\" must not be 0", "member_id");
      break;
    case FTC__MSG_VIEW: decode_view(&d, msg); break;
    case FTC__MSG_HEARTBEAT:
      msg->epoch = get_u64(&d, o, "epoch", 1);
      msg->ready = get_u64(&d, o, "ready", 1);
      break;
    case FTC__MSG_BACKEND:
      msg->epoch = get_u64(&d, o, "epoch", 0);
      msg->backend = get_str(&d, o, "blob", FTC__PROTO_MAX_BACKEND, 0);
      if (!d.bad && msg->epoch == 0) fail(&d, "field \"%s\" must not be 0", "epoch");
      break;
    case FTC__MSG_FAILURE: decode_failure(&d, msg); break;
    case FTC__MSG_LEAVE: msg->reason = get_str(&d, o, "reason", 1024, 1); break;
    case FTC__MSG_DUMP_REQUEST:
      msg->incident = get_str(&d, o, "incident", FTC__PROTO_MAX_NAME, 0);
      msg->reason = get_str(&d, o, "reason", 1024, 1);
      msg->epoch = get_u64(&d, o, "epoch", 1);
      break;
    case FTC__MSG_DUMP: {
      msg->incident = get_str(&d, o, "incident", FTC__PROTO_MAX_NAME, 0);
      msg->rank = get_i32(&d, o, "rank", 0, 1048575, 0, 0);
      msg->offset = get_u64(&d, o, "offset", 0);
      msg->total = get_u64(&d, o, "total", 0);
      msg->last = get_bool(&d, o, "last", 0);
      msg->data = get_str(&d, o, "data", FTC__PROTO_DUMP_CHUNK, 0);
      if (d.bad) break;
      msg->data_len = strlen(msg->data);
      if (msg->offset + msg->data_len > msg->total)
        fail(&d, "fragment of \"%s\" runs past the total size", "data");
      else if (msg->last && msg->offset + msg->data_len != msg->total)
        fail(&d, "last fragment of \"%s\" does not end at the total size", "data");
      break;
    }
    case FTC__MSG_ERROR: {
      msg->code_name = get_str(&d, o, "code", 64, 0);
      msg->reason = get_str(&d, o, "reason", 4096, 1);
      msg->code = FTC__PERR_COUNT; /* unknown codes stay FTC__PERR_COUNT */
      for (int e = FTC__PERR_BAD_JSON; !d.bad && e < FTC__PERR_COUNT; e++)
        if (strcmp(msg->code_name, perr_names[e]) == 0) msg->code = (ftc__perr_t)e;
      break;
    }
    default:
      snprintf(why, whylen, "unknown message type \"%.64s\"", type);
      d.bad = 1;
      break;
  }
  if (d.bad) {
    ftc__msg_clear(msg);
    return FTC__PERR_BAD_MESSAGE;
  }
  return FTC__PERR_NONE;
}

void ftc__msg_clear(ftc__msg_t *msg) {
  if (!msg) return;
  ftc__free(msg->members);
  ftc__free(msg->ranks);
  ftc__free(msg->member_ids);
  ftc__free(msg->left);
  ftc__free(msg->dropped);
  json_decref(msg->root);
  memset(msg, 0, sizeof(*msg));
}
