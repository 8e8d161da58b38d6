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
#include <zlib.h>

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
    [FTC__MSG_JOIN] = "join",
    [FTC__MSG_PROSPECT] = "prospect",
    [FTC__MSG_VIEW_DELTA] = "view_delta",
    [FTC__MSG_VIEW_REQUEST] = "view_request",
    [FTC__MSG_PROBE] = "probe",
    [FTC__MSG_REACH] = "reach",
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
    [FTC__PERR_DATAPLANE_MISMATCH] = "dataplane_mismatch",
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
    case FTC__PERR_DATAPLANE_MISMATCH: /* versions differ: the rank's FTC_ERR_PROTOCOL */
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
  if (h->dataplane) err |= set(o, "dataplane", json_integer(h->dataplane));
  if (h->standby) err |= set(o, "standby", json_true());
  if (h->delta) err |= set(o, "delta", json_true());
  if (h->probes) err |= set(o, "probes", json_true());
  if (h->deflate) err |= set(o, "deflate", json_true());
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

json_t *ftc__proto_welcome_standby(json_t *welcome) {
  if (welcome && json_object_set_new(welcome, "standby", json_true())) {
    json_decref(welcome);
    return NULL;
  }
  return welcome;
}

json_t *ftc__proto_join(void) { return msg_new(FTC__MSG_JOIN); }

json_t *ftc__proto_prospect(uint64_t epoch, const ftc__wire_member_t *members, int n) {
  json_t *o = msg_new(FTC__MSG_PROSPECT);
  if (!o) return NULL;
  int err = 0;
  err |= set(o, "epoch", json_integer((json_int_t)epoch));
  err |= set(o, "members", members_array(members, n));
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

static json_t *ids_array(const uint64_t *ids, int n) {
  json_t *arr = json_array();
  for (int i = 0; arr && i < n; i++)
    if (json_array_append_new(arr, json_integer((json_int_t)ids[i]))) {
      json_decref(arr);
      return NULL;
    }
  return arr;
}

json_t *ftc__proto_view_delta(uint64_t epoch, uint64_t base, uint64_t hash, int size,
                              const uint64_t *removed, int nremoved,
                              const ftc__wire_member_t *joined, int njoined,
                              const uint64_t *ready, int nready) {
  json_t *o = msg_new(FTC__MSG_VIEW_DELTA);
  if (!o) return NULL;
  char hex[17];
  snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)hash);
  int err = 0;
  err |= set(o, "epoch", json_integer((json_int_t)epoch));
  err |= set(o, "base", json_integer((json_int_t)base));
  err |= set(o, "size", json_integer(size));
  err |= set(o, "hash", json_string(hex));
  if (nremoved) err |= set(o, "removed", ids_array(removed, nremoved));
  if (njoined) err |= set(o, "joined", members_array(joined, njoined));
  if (nready < 0)
    err |= set(o, "ready_all", json_true());
  else if (nready)
    err |= set(o, "ready", ids_array(ready, nready));
  return finish(o, err);
}

json_t *ftc__proto_view_request(void) { return msg_new(FTC__MSG_VIEW_REQUEST); }

uint64_t ftc__proto_view_hash(const ftc__wire_member_t *m, int n) {
  uint64_t h = 1469598103934665603ULL;
#define FNV_BYTES(p, len)                                  \
  for (size_t k_ = 0; k_ < (len); k_++) h = (h ^ ((const unsigned char *)(p))[k_]) * 1099511628211ULL
  for (int i = 0; i < n; i++) {
    uint64_t f[4] = {(uint64_t)m[i].slot, m[i].member_id, m[i].joined_epoch, (uint64_t)m[i].state};
    FNV_BYTES(f, sizeof(f));
    const char *a = m[i].addr ? m[i].addr : "";
    FNV_BYTES(a, strlen(a) + 1);
  }
#undef FNV_BYTES
  return h;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Whether id is among the n sorted ids. */
static int has_id(const uint64_t *sorted, int n, uint64_t id) {
  return n > 0 && bsearch(&id, sorted, (size_t)n, sizeof(*sorted), cmp_u64) != NULL;
}

int ftc__proto_view_apply(const ftc__wire_member_t *base, int n, const ftc__msg_t *d,
                          ftc__wire_member_t **out) {
  *out = NULL;
  if (d->type != FTC__MSG_VIEW_DELTA || d->view_size < 0 || d->view_size > n + d->nmembers)
    return -1;
  /* Removed: the ids in "removed", "left" and "dropped". */
  int nrm = d->nremoved + d->nleft + d->ndropped;
  uint64_t *rm = ftc__malloc((size_t)(nrm + d->nready + 1) * sizeof(*rm));
  ftc__wire_member_t *v = ftc__calloc((size_t)(d->view_size ? d->view_size : 1), sizeof(*v));
  int k = 0, j = 0, ok = rm && v;
  if (ok) {
    uint64_t *rd = rm + nrm;
    memcpy(rm, d->removed, (size_t)d->nremoved * sizeof(*rm));
    memcpy(rm + d->nremoved, d->left, (size_t)d->nleft * sizeof(*rm));
    for (int i = 0; i < d->ndropped; i++) rm[d->nremoved + d->nleft + i] = d->dropped[i].member_id;
    memcpy(rd, d->ready_ids, (size_t)d->nready * sizeof(*rd));
    qsort(rm, (size_t)nrm, sizeof(*rm), cmp_u64);
    qsort(rd, (size_t)d->nready, sizeof(*rd), cmp_u64);
    /* Survivors keep their order; joiners go where their rank says, before
     * the next survivor (a replacement often takes a removed member's slot). */
    for (int i = 0; ok && i <= n; i++) {
      if (i < n && has_id(rm, nrm, base[i].member_id)) continue;
      while (ok && j < d->nmembers && d->members[j].rank == k) {
        ok = k < d->view_size && (i == n || d->members[j].slot < base[i].slot) &&
             (k == 0 || v[k - 1].slot < d->members[j].slot);
        if (ok) v[k++] = d->members[j++];
      }
      if (!ok || i == n) continue;
      ok = k < d->view_size && (k == 0 || v[k - 1].slot < base[i].slot);
      if (!ok) break;
      v[k] = base[i];
      v[k].rank = k;
      if (d->ready_all || has_id(rd, d->nready, base[i].member_id))
        v[k].state = 2; /* holds state now */
      k++;
    }
  }
  ftc__free(rm);
  if (!ok || j != d->nmembers || k != d->view_size || ftc__proto_view_hash(v, k) != d->view_hash) {
    ftc__free(v);
    return -1;
  }
  *out = v;
  return k;
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

json_t *ftc__proto_probe(uint64_t epoch) {
  json_t *o = msg_new(FTC__MSG_PROBE);
  if (!o) return NULL;
  return finish(o, set(o, "epoch", json_integer((json_int_t)epoch)));
}

json_t *ftc__proto_reach(uint64_t epoch, const uint64_t *unreachable, int n) {
  json_t *o = msg_new(FTC__MSG_REACH);
  if (!o) return NULL;
  int err = set(o, "epoch", json_integer((json_int_t)epoch));
  json_t *ids = json_array();
  for (int i = 0; ids && i < n; i++)
    if (json_array_append_new(ids, json_integer((json_int_t)unreachable[i]))) err = -1;
  err |= set(o, "unreachable", ids);
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
  f->binary = 0;
  f->ref = NULL;
  f->refs = 1;
out_decref:
  json_decref(msg);
  return f;
}

/* ---- base64url (the hello in the upgrade request) ---- */

static const char b64url_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t ftc__b64url_len(size_t n) { return n / 3 * 4 + (n % 3 ? n % 3 + 1 : 0); }

size_t ftc__b64url_encode(const void *src, size_t n, char *dst) {
  const unsigned char *p = src;
  size_t o = 0, i = 0;
  for (; i + 2 < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
    dst[o++] = b64url_alphabet[v >> 18];
    dst[o++] = b64url_alphabet[(v >> 12) & 63];
    dst[o++] = b64url_alphabet[(v >> 6) & 63];
    dst[o++] = b64url_alphabet[v & 63];
  }
  if (n - i == 1) {
    uint32_t v = (uint32_t)p[i] << 16;
    dst[o++] = b64url_alphabet[v >> 18];
    dst[o++] = b64url_alphabet[(v >> 12) & 63];
  } else if (n - i == 2) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
    dst[o++] = b64url_alphabet[v >> 18];
    dst[o++] = b64url_alphabet[(v >> 12) & 63];
    dst[o++] = b64url_alphabet[(v >> 6) & 63];
  }
  dst[o] = '\0';
  return o;
}

static int b64url_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

long ftc__b64url_decode(const char *src, size_t n, unsigned char *dst) {
  while (n > 0 && src[n - 1] == '=') n--;
  if (n % 4 == 1) return -1;
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    int v = b64url_value((unsigned char)src[i]);
    if (v < 0) return -1;
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      dst[o++] = (unsigned char)(acc >> bits);
      acc &= (1u << bits) - 1;
    }
  }
  return (long)o;
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
  while ((f = ftc__frameq_pop(q))) ftc__frame_release(f);
}

ftc__frame_t *ftc__frame_ref(ftc__frame_t *shared) {
  ftc__frame_t *f = ftc__calloc(1, sizeof(*f));
  if (!f) return NULL;
  f->len = shared->len;
  f->ref = shared;
  f->refs = 1;
  shared->refs++;
  return f;
}

void ftc__frame_release(ftc__frame_t *f) {
  if (!f) return;
  if (f->ref) ftc__frame_release(f->ref);
  if (--f->refs <= 0) ftc__free(f);
}

ftc__frame_t *ftc__proto_deflate(const ftc__frame_t *text, size_t headroom) {
  const ftc__frame_t *b = text->ref ? text->ref : text;
  uLong cap = compressBound((uLong)b->len);
  ftc__frame_t *f = ftc__malloc(sizeof(*f) + headroom + cap);
  if (!f) return NULL;
  uLongf n = cap;
  if (compress2(f->buf + headroom, &n, b->buf + headroom, (uLong)b->len, Z_DEFAULT_COMPRESSION) !=
      Z_OK) {
    ftc__free(f);
    return NULL;
  }
  ftc__frame_t *shrunk = ftc__realloc(f, sizeof(*f) + headroom + n);
  if (shrunk) f = shrunk;
  f->next = NULL;
  f->len = n;
  f->close_after = 0;
  f->binary = 1;
  f->ref = NULL;
  f->refs = 1;
  return f;
}

int ftc__proto_inflate(const void *in, size_t len, size_t max, char **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  z_stream z;
  memset(&z, 0, sizeof(z));
  if (inflateInit(&z) != Z_OK) return -1;
  size_t cap = len * 4 + 64 < max ? len * 4 + 64 : max;
  char *buf = ftc__malloc(cap + 1);
  int rc = -1, zr = Z_OK;
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)len;
  size_t have = 0;
  while (buf) {
    z.next_out = (Bytef *)buf + have;
    z.avail_out = (uInt)(cap - have);
    zr = inflate(&z, Z_NO_FLUSH);
    have = cap - z.avail_out;
    if (zr == Z_STREAM_END) {
      rc = z.avail_in == 0 ? 0 : -1; /* (bytes after the stream: not ours) */
      break;
    }
    if (zr != Z_OK && zr != Z_BUF_ERROR) break;
    if (have < cap) break; /* the input ended before the stream did */
    if (cap == max) {
      rc = 1;
      break;
    }
    size_t ncap = cap * 2 < max ? cap * 2 : max;
    char *nb = ftc__realloc(buf, ncap + 1);
    if (!nb) break;
    buf = nb, cap = ncap;
  }
  inflateEnd(&z);
  if (rc < 0) {
    ftc__free(buf);
    return -1;
  }
  buf[have] = 0;
  *out = buf;
  *out_len = have;
  return rc;
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
static void decode_members_ex(dec_t *d, json_t *arr, const char *name, ftc__msg_t *m,
                              int ordered);
static void decode_members(dec_t *d, json_t *arr, const char *name, ftc__msg_t *m) {
  decode_members_ex(d, arr, name, m, 1);
}

/* ordered 1: ranks are the indices (a whole view); 0: ranks ascend (a
 * delta's joined members). */
static void decode_members_ex(dec_t *d, json_t *arr, const char *name, ftc__msg_t *m,
                              int ordered) {
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
    if (!d->bad && (ordered ? w->rank != (int)i : i > 0 && w->rank <= m->members[i - 1].rank))
      fail(d, "\"%s\" must be ordered by rank", name);
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

/* An optional array of member ids: *out allocated (NULL when absent or empty). */
static void decode_ids(dec_t *d, const char *name, uint64_t **out, int *nout) {
  json_t *arr = json_object_get(d->o, name);
  if (!arr || d->bad) return;
  size_t n = json_is_array(arr) ? json_array_size(arr) : 0;
  if (!json_is_array(arr) || n > 1048576) {
    fail(d, "field \"%s\" must be an array of member ids", name);
    return;
  }
  if (!n) return;
  if (!(*out = ftc__calloc(n, sizeof(uint64_t)))) {
    fail(d, "out of memory decoding %s", name);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(arr, i);
    if (!json_is_integer(e) || json_integer_value(e) <= 0) {
      fail(d, "entries of \"%s\" must be member ids", name);
      return;
    }
    (*out)[i] = (uint64_t)json_integer_value(e);
  }
  *nout = (int)n;
}

static void decode_dropped(dec_t *d, ftc__msg_t *m);

static void decode_view_delta(dec_t *d, ftc__msg_t *m) {
  m->epoch = get_u64(d, d->o, "epoch", 0);
  m->base_epoch = get_u64(d, d->o, "base", 0);
  m->view_size = get_i32(d, d->o, "size", 0, 1048576, 0, 0);
  const char *hex = get_str(d, d->o, "hash", 16, 0);
  if (!d->bad) {
    char *end = NULL;
    m->view_hash = strtoull(hex, &end, 16);
    if (strlen(hex) != 16 || *end) fail(d, "field \"%s\" must be 16 hex digits", "hash");
  }
  if (!d->bad && m->epoch <= m->base_epoch) fail(d, "field \"%s\" must be above base", "epoch");
  decode_ids(d, "removed", &m->removed, &m->nremoved);
  decode_ids(d, "ready", &m->ready_ids, &m->nready);
  m->ready_all = get_bool(d, d->o, "ready_all", 1);
  json_t *joined = json_object_get(d->o, "joined");
  if (joined && !d->bad) decode_members_ex(d, joined, "joined", m, 0);
  decode_ids(d, "left", &m->left, &m->nleft);
  decode_dropped(d, m);
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

static void decode_reach(dec_t *d, ftc__msg_t *m) {
  m->epoch = get_u64(d, d->o, "epoch", 0);
  json_t *ids = json_object_get(d->o, "unreachable");
  if (d->bad) return;
  size_t n = json_array_size(ids);
  if (!json_is_array(ids) || n > FTC__PROTO_MAX_FAILED) {
    fail(d, "field \"%s\" must be an array of at most 65536 member ids", "unreachable");
    return;
  }
  m->member_ids = ftc__calloc(n ? n : 1, sizeof(uint64_t));
  if (!m->member_ids) {
    fail(d, "out of memory decoding %s", "unreachable");
    return;
  }
  m->nmember_ids = (int)n;
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(ids, i);
    if (!json_is_integer(e) || json_integer_value(e) <= 0) {
      fail(d, "entries of \"%s\" must be member ids", "unreachable");
      return;
    }
    m->member_ids[i] = (uint64_t)json_integer_value(e);
  }
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

/* ---- the view's fast path ----
 *
 * Every survivor decodes the coordinator's view while the job recovers;
 * through jansson that is a tree of some 20 allocations per member, on CPUs
 * the recovery needs. A view in the form
 * the coordinator writes (jansson's compact output: no whitespace, "v" and
 * "type" first, strings of printable ASCII without escapes, the known
 * fields only, each once) is read here in one pass into one allocation:
 * the members array followed by a copy of the text, whose strings the
 * members point into. Anything else (whitespace, an escape, an unknown or
 * repeated field, a number that is not a plain non-negative integer below
 * 2^63, a field out of range) goes to the general decoder, which accepts
 * or refuses it and says why; this path only ever accepts what the general
 * one accepts, with the same result (tests/fuzz/fuzz_proto.c checks both). */

#define VIEW_PREFIX "{\"v\":1,\"type\":\"view\","
#define FAST_MIN_MEMBER 60 /* {"rank":0,"slot":0,"member_id":0,"joined_epoch":0,"addr":""} */

int ftc__proto_fast_views = 1;

typedef struct fast {
  char *p, *end;
} fast_t;

static int fast_lit(fast_t *f, const char *lit, size_t n) {
  if ((size_t)(f->end - f->p) < n || memcmp(f->p, lit, n) != 0) return 0;
  f->p += n;
  return 1;
}

static int fast_char(fast_t *f, char c) {
  if (f->p >= f->end || *f->p != c) return 0;
  f->p++;
  return 1;
}

/* A plain non-negative integer: no sign, no leading zero, no fraction or
 * exponent (the character after it is checked by the caller's separator). */
static int fast_uint(fast_t *f, uint64_t *out) {
  uint64_t v = 0;
  char *s = f->p;
  while (f->p < f->end && *f->p >= '0' && *f->p <= '9') {
    if (v > ((uint64_t)INT64_MAX - (uint64_t)(*f->p - '0')) / 10) return 0;
    v = v * 10 + (uint64_t)(*f->p - '0');
    f->p++;
  }
  if (f->p == s || (*s == '0' && f->p - s > 1)) return 0;
  *out = v;
  return 1;
}

/* A string of printable ASCII without escapes, NUL-terminated in place
 * (its closing quote is overwritten once read past). */
static int fast_str(fast_t *f, const char **out, size_t *len) {
  if (!fast_char(f, '"')) return 0;
  char *s = f->p;
  while (f->p < f->end && *f->p != '"') {
    unsigned char c = (unsigned char)*f->p;
    if (c < 0x20 || c > 0x7e || c == '\\') return 0;
    f->p++;
  }
  if (f->p >= f->end) return 0;
  *len = (size_t)(f->p - s);
  *f->p++ = '\0';
  *out = s;
  return 1;
}

/* A key and its colon; the key's text in *k, *klen. */
static int fast_key(fast_t *f, const char **k, size_t *klen) {
  if (!fast_char(f, '"')) return 0;
  char *s = f->p;
  while (f->p < f->end && *f->p != '"') {
    if (*f->p == '\\') return 0;
    f->p++;
  }
  if (f->p >= f->end) return 0;
  *k = s;
  *klen = (size_t)(f->p - s);
  f->p++;
  return fast_char(f, ':');
}

static int key_is(const char *k, size_t klen, const char *name) {
  return strlen(name) == klen && memcmp(k, name, klen) == 0;
}

/* Each key of an object once: `bit` not yet in *seen. */
static int fast_once(unsigned *seen, unsigned bit) {
  if (*seen & bit) return 0;
  *seen |= bit;
  return 1;
}

/* ',' (more) or `close` (done) after a value: 1 more, 0 done, -1 neither. */
static int fast_next(fast_t *f, char close) {
  if (fast_char(f, ',')) return 1;
  if (fast_char(f, close)) return 0;
  return -1;
}

static int fast_member(fast_t *f, ftc__wire_member_t *w, int index) {
  enum { RANK = 1, SLOT = 2, ID = 4, JOINED = 8, ADDR = 16, FRESH = 32 };
  unsigned seen = 0;
  uint64_t x;
  size_t n;
  if (!fast_char(f, '{')) return 0;
  for (;;) {
    const char *k;
    size_t kl;
    if (!fast_key(f, &k, &kl)) return 0;
    if (key_is(k, kl, "rank")) {
      if (!fast_once(&seen, RANK) || !fast_uint(f, &x) || x != (uint64_t)index) return 0;
      w->rank = index;
    } else if (key_is(k, kl, "slot")) {
      if (!fast_once(&seen, SLOT) || !fast_uint(f, &x) || x > 1048575) return 0;
      w->slot = (int)x;
    } else if (key_is(k, kl, "member_id")) {
      if (!fast_once(&seen, ID) || !fast_uint(f, &w->member_id)) return 0;
    } else if (key_is(k, kl, "joined_epoch")) {
      if (!fast_once(&seen, JOINED) || !fast_uint(f, &w->joined_epoch)) return 0;
    } else if (key_is(k, kl, "addr")) {
      if (!fast_once(&seen, ADDR) || !fast_str(f, &w->addr, &n) || n > FTC__PROTO_MAX_ADDR)
        return 0;
    } else if (key_is(k, kl, "fresh")) {
      if (!fast_once(&seen, FRESH)) return 0;
      if (fast_lit(f, "true", 4))
        w->state = 1;
      else if (fast_lit(f, "false", 5))
        w->state = 2;
      else
        return 0;
    } else {
      return 0;
    }
    int more = fast_next(f, '}');
    if (more < 0) return 0;
    if (!more) break;
  }
  return (seen & (RANK | SLOT | ID | JOINED | ADDR)) == (RANK | SLOT | ID | JOINED | ADDR);
}

static int fast_dropped(fast_t *f, ftc__wire_dropped_t *x) {
  enum { ID = 1, REASON = 2, DETAIL = 4 };
  unsigned seen = 0;
  size_t n;
  if (!fast_char(f, '{')) return 0;
  for (;;) {
    const char *k;
    size_t kl;
    if (!fast_key(f, &k, &kl)) return 0;
    if (key_is(k, kl, "member_id")) {
      if (!fast_once(&seen, ID) || !fast_uint(f, &x->member_id) || !x->member_id) return 0;
    } else if (key_is(k, kl, "reason")) {
      if (!fast_once(&seen, REASON) || !fast_str(f, &x->reason, &n) ||
          n > FTC__PROTO_MAX_DROP_REASON)
        return 0;
    } else if (key_is(k, kl, "detail")) {
      if (!fast_once(&seen, DETAIL)) return 0;
      if (fast_lit(f, "null", 4))
        x->detail = NULL;
      else if (!fast_str(f, &x->detail, &n) || n > FTC__PROTO_MAX_DROP_DETAIL)
        return 0;
    } else {
      return 0;
    }
    int more = fast_next(f, '}');
    if (more < 0) return 0;
    if (!more) break;
  }
  return (seen & (ID | REASON)) == (ID | REASON);
}

/* Grow a small array (left, dropped) to hold one more entry. */
static int fast_grow(void **arr, int n, int *cap, size_t size) {
  if (n < *cap) return 0;
  int ncap = *cap ? *cap * 2 : 4;
  void *a = ftc__realloc(*arr, (size_t)ncap * size);
  if (!a) return -1;
  *arr = a;
  *cap = ncap;
  return 0;
}

/* 1: decoded into *m; 0: not in the coordinator's form (the general decoder
 * decides); -1: out of memory (why[] says so). */
static int fast_view(const char *text, size_t len, ftc__msg_t *m, char *why, size_t whylen) {
  enum { EPOCH = 1, MEMBERS = 2, BACKEND = 4, LEFT = 8, DROPPED = 16 };
  const size_t plen = sizeof(VIEW_PREFIX) - 1;
  if (len < plen || memcmp(text, VIEW_PREFIX, plen) != 0) return 0;
  size_t cap = len / FAST_MIN_MEMBER + 1;
  ftc__wire_member_t *block = ftc__malloc(cap * sizeof(*block) + len + 1);
  if (!block) {
    snprintf(why, whylen, "out of memory decoding %s", "members");
    return -1;
  }
  char *copy = (char *)(block + cap);
  memcpy(copy, text, len);
  copy[len] = '\0';
  fast_t f = {copy + plen, copy + len};
  unsigned seen = 0;
  int capl = 0, capd = 0, ok = 0;
  memset(m, 0, sizeof(*m));
  m->type = FTC__MSG_VIEW;
  m->members = block;
  for (;;) {
    const char *k;
    size_t kl, n;
    if (!fast_key(&f, &k, &kl)) goto out;
    if (key_is(k, kl, "epoch")) {
      if (!fast_once(&seen, EPOCH) || !fast_uint(&f, &m->epoch)) goto out;
    } else if (key_is(k, kl, "backend")) {
      if (!fast_once(&seen, BACKEND)) goto out;
      if (fast_lit(&f, "null", 4))
        m->backend = NULL;
      else if (!fast_str(&f, &m->backend, &n) || n > FTC__PROTO_MAX_BLOB)
        goto out;
    } else if (key_is(k, kl, "members")) {
      if (!fast_once(&seen, MEMBERS) || !fast_char(&f, '[')) goto out;
      if (!fast_char(&f, ']')) {
        for (;;) {
          if ((size_t)m->nmembers >= cap || m->nmembers >= 1048576) goto out;
          memset(&block[m->nmembers], 0, sizeof(*block));
          if (!fast_member(&f, &block[m->nmembers], m->nmembers)) goto out;
          m->nmembers++;
          int more = fast_next(&f, ']');
          if (more < 0) goto out;
          if (!more) break;
        }
      }
    } else if (key_is(k, kl, "left")) {
      if (!fast_once(&seen, LEFT) || !fast_char(&f, '[')) goto out;
      if (!fast_char(&f, ']')) {
        for (;;) {
          uint64_t id;
          if (m->nleft >= FTC__PROTO_MAX_FAILED || !fast_uint(&f, &id) || !id) goto out;
          if (fast_grow((void **)&m->left, m->nleft, &capl, sizeof(*m->left))) goto out_nomem;
          m->left[m->nleft++] = id;
          int more = fast_next(&f, ']');
          if (more < 0) goto out;
          if (!more) break;
        }
      }
    } else if (key_is(k, kl, "dropped")) {
      if (!fast_once(&seen, DROPPED) || !fast_char(&f, '[')) goto out;
      if (!fast_char(&f, ']')) {
        for (;;) {
          if (m->ndropped >= FTC__PROTO_MAX_FAILED) goto out;
          if (fast_grow((void **)&m->dropped, m->ndropped, &capd, sizeof(*m->dropped)))
            goto out_nomem;
          memset(&m->dropped[m->ndropped], 0, sizeof(*m->dropped));
          if (!fast_dropped(&f, &m->dropped[m->ndropped])) goto out;
          m->ndropped++;
          int more = fast_next(&f, ']');
          if (more < 0) goto out;
          if (!more) break;
        }
      }
    } else {
      goto out;
    }
    int more = fast_next(&f, '}');
    if (more < 0) goto out;
    if (!more) break;
  }
  /* The object ends the text; epoch and members are required. */
  ok = f.p == f.end && (seen & (EPOCH | MEMBERS)) == (EPOCH | MEMBERS);
out:
  if (!ok) ftc__msg_clear(m);
  return ok;
out_nomem:
  ftc__msg_clear(m);
  snprintf(why, whylen, "out of memory decoding %s", "a view");
  return -1;
}

ftc__perr_t ftc__proto_decode(const char *text, size_t len, size_t max_len, ftc__msg_t *msg,
                              char *why, size_t whylen) {
  json_error_t jerr;
  memset(msg, 0, sizeof(*msg));
  if (len > max_len) {
    snprintf(why, whylen, "message of %zu bytes is over the limit of %zu", len, max_len);
    return FTC__PERR_TOO_LARGE;
  }
  int fast = ftc__proto_fast_views ? fast_view(text, len, msg, why, whylen) : 0;
  if (fast > 0) return FTC__PERR_NONE;
  if (fast < 0) return FTC__PERR_BAD_MESSAGE;
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
      h->dataplane = get_i32(&d, o, "dataplane", 1, 65535, 1, 0);
      h->standby = get_bool(&d, o, "standby", 1);
      h->delta = get_bool(&d, o, "delta", 1);
      h->probes = get_bool(&d, o, "probes", 1);
      h->deflate = get_bool(&d, o, "deflate", 1);
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
      msg->standby = get_bool(&d, o, "standby", 1);
      if (!d.bad && msg->member_id == 0) fail(&d, "field \"%s\" must not be 0", "member_id");
      break;
    case FTC__MSG_VIEW: decode_view(&d, msg); break;
    case FTC__MSG_PROSPECT:
      msg->epoch = get_u64(&d, o, "epoch", 0);
      decode_members(&d, json_object_get(o, "members"), "members", msg);
      if (!d.bad && msg->epoch == 0) fail(&d, "field \"%s\" must not be 0", "epoch");
      break;
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
    case FTC__MSG_PROBE:
      msg->epoch = get_u64(&d, o, "epoch", 0);
      if (!d.bad && msg->epoch == 0) fail(&d, "field \"%s\" must not be 0", "epoch");
      break;
    case FTC__MSG_REACH: decode_reach(&d, msg); break;
    case FTC__MSG_LEAVE: msg->reason = get_str(&d, o, "reason", 1024, 1); break;
    case FTC__MSG_JOIN: break; /* no fields */
    case FTC__MSG_VIEW_REQUEST: break; /* no fields */
    case FTC__MSG_VIEW_DELTA: decode_view_delta(&d, msg); break;
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
  ftc__free(msg->removed);
  ftc__free(msg->ready_ids);
  json_decref(msg->root);
  memset(msg, 0, sizeof(*msg));
}
