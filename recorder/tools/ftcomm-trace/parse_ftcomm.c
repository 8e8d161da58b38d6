/*
 * parse_ftcomm.c - the fast reader of ftcomm dumps (docs/dump-format.md).
 *
 * A job of 4096 ranks leaves about a gigabyte of dumps, so this reader is a
 * single pass over the file held in memory: strings are unescaped in place,
 * numbers converted as they are met, and entries stored straight into the
 * 64-byte model. Unknown keys and unknown entry columns are skipped, as the
 * format asks of readers. Any syntax error makes the caller re-read the file
 * with jansson, which names the line and column.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftc_recorder.h"
#include "trace.h"

typedef struct parser {
  char *p, *end, *base;
  jmp_buf fail;
  char *why;
  size_t whylen;
} parser_t;

static void fail(parser_t *P, const char *msg) {
  snprintf(P->why, P->whylen, "%s at byte %ld", msg, (long)(P->p - P->base));
  longjmp(P->fail, 1);
}

static inline void ws(parser_t *P) {
  while (P->p < P->end && (*P->p == ' ' || *P->p == '\n' || *P->p == '\r' || *P->p == '\t'))
    P->p++;
}

static inline char peek(parser_t *P) {
  ws(P);
  if (P->p >= P->end) fail(P, "unexpected end of file");
  return *P->p;
}

static inline void expect(parser_t *P, char c) {
  if (peek(P) != c) {
    char m[64];
    snprintf(m, sizeof(m), "expected '%c'", c);
    fail(P, m);
  }
  P->p++;
}

/* Accept ',' and return 1, or the closing character and return 0. */
static inline int more(parser_t *P, char close) {
  char c = peek(P);
  P->p++;
  if (c == ',') return 1;
  if (c == close) return 0;
  fail(P, close == ']' ? "expected ',' or ']'" : "expected ',' or '}'");
  return 0;
}

static int hexval(parser_t *P, char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  fail(P, "bad \\u escape");
  return 0;
}

static unsigned read_u4(parser_t *P) {
  if (P->end - P->p < 4) fail(P, "truncated \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) v = v << 4 | (unsigned)hexval(P, *P->p++);
  return v;
}

/* A string, unescaped in place and NUL-terminated; *n its length. */
static char *str(parser_t *P, size_t *n) {
  expect(P, '"');
  char *start = P->p, *w = P->p;
  for (;;) {
    if (P->p >= P->end) fail(P, "unterminated string");
    char c = *P->p++;
    if (c == '"') break;
    if ((unsigned char)c < 0x20) fail(P, "control character in string");
    if (c != '\\') {
      *w++ = c;
      continue;
    }
    if (P->p >= P->end) fail(P, "unterminated string");
    c = *P->p++;
    switch (c) {
      case '"': case '\\': case '/': *w++ = c; break;
      case 'b': *w++ = '\b'; break;
      case 'f': *w++ = '\f'; break;
      case 'n': *w++ = '\n'; break;
      case 'r': *w++ = '\r'; break;
      case 't': *w++ = '\t'; break;
      case 'u': {
        /* As jansson, which then names the line and column: a surrogate
         * only in a high-low pair, no NUL (it would end the string). */
        unsigned cp = read_u4(P);
        if (cp >= 0xd800 && cp < 0xdc00) {
          unsigned lo = 0;
          if (P->end - P->p >= 6 && P->p[0] == '\\' && P->p[1] == 'u') {
            P->p += 2;
            lo = read_u4(P);
          }
          if (lo < 0xdc00 || lo > 0xdfff) fail(P, "unpaired UTF-16 surrogate in a \\u escape");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp < 0xe000) {
          fail(P, "unpaired UTF-16 surrogate in a \\u escape");
        } else if (cp == 0) {
          fail(P, "\\u0000 in a string");
        }
        if (cp < 0x80) *w++ = (char)cp;
        else if (cp < 0x800) { *w++ = (char)(0xc0 | cp >> 6); *w++ = (char)(0x80 | (cp & 0x3f)); }
        else if (cp < 0x10000) {
          *w++ = (char)(0xe0 | cp >> 12); *w++ = (char)(0x80 | ((cp >> 6) & 0x3f));
          *w++ = (char)(0x80 | (cp & 0x3f));
        } else {
          *w++ = (char)(0xf0 | cp >> 18); *w++ = (char)(0x80 | ((cp >> 12) & 0x3f));
          *w++ = (char)(0x80 | ((cp >> 6) & 0x3f)); *w++ = (char)(0x80 | (cp & 0x3f));
        }
        break;
      }
      default: fail(P, "bad escape in string");
    }
  }
  *w = '\0';
  *n = (size_t)(w - start);
  return start;
}

/* Past a string without changing it (a skipped region may be read again). */
static void skip_str(parser_t *P) {
  expect(P, '"');
  for (;;) {
    if (P->p >= P->end) fail(P, "unterminated string");
    char c = *P->p++;
    if (c == '"') return;
    if ((unsigned char)c < 0x20) fail(P, "control character in string");
    if (c == '\\') {
      if (P->p >= P->end) fail(P, "unterminated string");
      P->p++;
    }
  }
}

static int lit(parser_t *P, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(P->end - P->p) >= n && !memcmp(P->p, word, n)) {
    P->p += n;
    return 1;
  }
  return 0;
}

/* An integer; a fraction or exponent is converted; null gives dflt. */
static int64_t num(parser_t *P, int64_t dflt) {
  char c = peek(P);
  if (c == 'n') {
    if (!lit(P, "null")) fail(P, "bad literal");
    return dflt;
  }
  char *s = P->p;
  int neg = 0;
  if (*P->p == '-') { neg = 1; P->p++; }
  if (P->p >= P->end || *P->p < '0' || *P->p > '9') fail(P, "expected a number");
  /* Every number the writer writes fits an int64; a larger one is a
   * damaged file (jansson refuses such integers too), not one to wrap. */
  uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  int big = 0;
  while (P->p < P->end && *P->p >= '0' && *P->p <= '9') {
    unsigned d = (unsigned)(*P->p++ - '0');
    if (v > (lim - d) / 10) big = 1;
    else v = v * 10 + d;
  }
  if (P->p < P->end && (*P->p == '.' || *P->p == 'e' || *P->p == 'E')) {
    char tmp[64];
    while (P->p < P->end && strchr("0123456789.eE+-", *P->p)) P->p++;
    size_t k = (size_t)(P->p - s) < sizeof(tmp) - 1 ? (size_t)(P->p - s) : sizeof(tmp) - 1;
    memcpy(tmp, s, k);
    tmp[k] = '\0';
    double d = strtod(tmp, NULL);
    /* -2^63 <= d < 2^63, and not NaN: the range a conversion is defined on */
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
      fail(P, "number out of range (a dump's numbers fit 64-bit integers)");
    return (int64_t)d;
  }
  if (big) fail(P, "integer out of range (a dump's numbers fit 64-bit integers)");
  return neg ? (v > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)v) : (int64_t)v;
}

static void skip(parser_t *P, int depth) {
  if (depth > 64) fail(P, "nesting too deep");
  char c = peek(P);
  if (c == '"') { skip_str(P); return; }
  if (c == '{') {
    P->p++;
    if (peek(P) == '}') { P->p++; return; }
    do { skip_str(P); expect(P, ':'); skip(P, depth + 1); } while (more(P, '}'));
    return;
  }
  if (c == '[') {
    P->p++;
    if (peek(P) == ']') { P->p++; return; }
    do skip(P, depth + 1); while (more(P, ']'));
    return;
  }
  if (lit(P, "true") || lit(P, "false") || lit(P, "null")) return;
  num(P, 0);
}

/* A string or null (NULL); copied. Numbers are accepted and kept as text. */
static char *dup_str(parser_t *P) {
  size_t n;
  char c = peek(P);
  if (c == 'n' && lit(P, "null")) return NULL;
  if (c != '"') {
    char *s = P->p;
    skip(P, 0);
    return tr_xstrndup(s, (size_t)(P->p - s));
  }
  char *s = str(P, &n);
  return tr_xstrndup(s, n);
}

static int boolean(parser_t *P) {
  peek(P);
  if (lit(P, "true")) return 1;
  if (lit(P, "false") || lit(P, "null")) return 0;
  return num(P, 0) != 0;
}

/* The 1.1 members "failure" and "verdict" (docs/dump-format.md). The writer
 * never writes them otherwise, so a wrong type or an odd value makes the
 * file unreadable, with a message that names the member. */
__attribute__((format(printf, 2, 3))) static void failf(parser_t *P, const char *fmt, ...) {
  char m[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof(m), fmt, ap);
  va_end(ap);
  fail(P, m);
}

static int64_t int_at_least(parser_t *P, const char *what, int64_t lo) {
  char c = peek(P);
  if (c != '-' && (c < '0' || c > '9')) failf(P, "%s must be an integer", what);
  char *s = P->p;
  int64_t v = num(P, 0);
  for (char *q = s; q < P->p; q++)
    if (*q == '.' || *q == 'e' || *q == 'E') failf(P, "%s must be an integer", what);
  if (v < lo) failf(P, "%s is %lld; it must be at least %lld", what, (long long)v, (long long)lo);
  return v;
}

/* A dump's "rank" (size 0) or "world_size" (1): -1 when negative (not
 * known), else at most a job's size. A larger number is a damaged file;
 * the analyzer would otherwise size its tables by it. */
static int rank_or_size(parser_t *P, const char *what, int size) {
  int64_t v = num(P, -1);
  if (v < 0) return -1;
  if (v > TR_MAX_RANKS - 1 + size)
    failf(P, "\"%s\" is %lld; a job has at most %d ranks", what, (long long)v, TR_MAX_RANKS);
  return (int)v;
}

/* v, a rank (size 0: a rank, a peer, a slot) or a count of ranks (size 1)
 * that the file gives as what: refused past a job's size rather than cut
 * to an int (4294967297 would read as rank 1). */
static int64_t in_a_job(parser_t *P, const char *what, int64_t v, int size) {
  if (v > TR_MAX_RANKS - 1 + size)
    failf(P, "%s is %lld; a job has at most %d ranks", what, (long long)v, TR_MAX_RANKS);
  if (v < INT32_MIN) failf(P, "%s is %lld, not a rank", what, (long long)v);
  return v;
}

static int rank_at_least(parser_t *P, const char *what, int64_t lo) {
  return (int)in_a_job(P, what, int_at_least(P, what, lo), 0);
}

/* Callers replace a field with what it returns only after it returned: a
 * failure jumps out of it with the old value still the field's, freed once
 * with the dump. */
static char *string_of(parser_t *P, const char *what, int nonempty) {
  size_t n;
  if (peek(P) != '"') failf(P, "%s must be a string", what);
  char *s = str(P, &n);
  if (nonempty && !n) failf(P, "%s must not be empty", what);
  return tr_xstrndup(s, n);
}

static int bool_of(parser_t *P, const char *what) {
  peek(P);
  if (lit(P, "true")) return 1;
  if (lit(P, "false")) return 0;
  failf(P, "%s must be true or false", what);
  return 0;
}

static void failure_member(parser_t *P, tr_failure_t *f) {
  int have_epoch = 0;
  size_t n;
  if (peek(P) != '{') fail(P, "\"failure\" must be an object");
  if (f->present) fail(P, "\"failure\" appears twice");
  f->present = 1;
  f->peer = -1;
  P->p++;
  if (peek(P) != '}') {
    do {
      char *k = str(P, &n);
      expect(P, ':');
      if (!strcmp(k, "epoch")) f->epoch = int_at_least(P, "\"failure\" \"epoch\"", 0), have_epoch = 1;
      else if (!strcmp(k, "status")) { char *nv = string_of(P, "\"failure\" \"status\"", 1); free(f->status); f->status = nv; }
      else if (!strcmp(k, "peer")) f->peer = rank_at_least(P, "\"failure\" \"peer\"", -1);
      else skip(P, 1);
    } while (more(P, '}'));
  } else {
    P->p++;
  }
  if (!have_epoch || !f->status) fail(P, "\"failure\" needs \"epoch\" and \"status\"");
}

static void dropped_members(parser_t *P, tr_verdict_t *v) {
  size_t n, cap = 0;
  if (peek(P) != '[') fail(P, "\"verdict\" \"dropped\" must be an array");
  if (v->dropped) fail(P, "\"verdict\" \"dropped\" appears twice");
  P->p++;
  if (peek(P) == ']') { P->p++; return; }
  do {
    if (v->ndropped == cap) {
      cap = cap ? 2 * cap : 4;
      v->dropped = tr_xrealloc(v->dropped, cap * sizeof(*v->dropped));
    }
    tr_dropped_t *d = &v->dropped[v->ndropped++];
    memset(d, 0, sizeof(*d));
    d->rank = -1;
    d->slot = -1;
    if (peek(P) != '{') fail(P, "\"verdict\" \"dropped\" entries must be objects");
    P->p++;
    if (peek(P) != '}') {
      do {
        char *k = str(P, &n);
        expect(P, ':');
        if (!strcmp(k, "rank")) d->rank = rank_at_least(P, "a dropped member's \"rank\"", 0);
        else if (!strcmp(k, "slot")) d->slot = rank_at_least(P, "a dropped member's \"slot\"", -1);
        else if (!strcmp(k, "reason")) { char *nv = string_of(P, "a dropped member's \"reason\"", 1); free(d->reason); d->reason = nv; }
        else if (!strcmp(k, "detail")) { char *nv = string_of(P, "a dropped member's \"detail\"", 0); free(d->detail); d->detail = nv; }
        else skip(P, 1);
      } while (more(P, '}'));
    } else {
      P->p++;
    }
    if (d->rank < 0 || !d->reason) fail(P, "a dropped member needs \"rank\" and \"reason\"");
    for (size_t i = 0; i + 1 < v->ndropped; i++)
      if (v->dropped[i].rank == d->rank) failf(P, "\"verdict\" drops rank %d twice", d->rank);
  } while (more(P, ']'));
}

static void verdict_member(parser_t *P, tr_verdict_t *v) {
  int have_epoch = 0, have_decided = 0, have_next = 0;
  size_t n;
  if (peek(P) != '{') fail(P, "\"verdict\" must be an object");
  if (v->present) fail(P, "\"verdict\" appears twice");
  v->present = 1;
  v->next_epoch = -1;
  P->p++;
  if (peek(P) != '}') {
    do {
      char *k = str(P, &n);
      expect(P, ':');
      if (!strcmp(k, "epoch")) v->epoch = int_at_least(P, "\"verdict\" \"epoch\"", 0), have_epoch = 1;
      else if (!strcmp(k, "decided")) v->decided = bool_of(P, "\"verdict\" \"decided\""), have_decided = 1;
      else if (!strcmp(k, "next_epoch")) {
        have_next = 1;
        if (peek(P) == 'n' && lit(P, "null")) v->next_epoch = -1;
        else v->next_epoch = int_at_least(P, "\"verdict\" \"next_epoch\"", 1);
      } else if (!strcmp(k, "dropped")) dropped_members(P, v);
      else if (!strcmp(k, "pending")) { char *nv = string_of(P, "\"verdict\" \"pending\"", 1); free(v->pending); v->pending = nv; }
      else skip(P, 1);
    } while (more(P, '}'));
  } else {
    P->p++;
  }
  if (!have_epoch || !have_decided || !have_next)
    fail(P, "\"verdict\" needs \"epoch\", \"decided\" and \"next_epoch\"");
  if (v->decided && v->next_epoch <= v->epoch)
    failf(P, "\"verdict\" is decided but its next epoch %lld is not after epoch %lld",
          (long long)v->next_epoch, (long long)v->epoch);
  if (!v->decided && (v->next_epoch >= 0 || v->ndropped))
    fail(P, "\"verdict\" is not decided yet names a next epoch or dropped members");
  if (!v->decided && !v->pending) fail(P, "\"verdict\" is not decided and does not say why (\"pending\")");
}

/* A key the reader stores may appear once in its object: a second one would
 * leave the reader two values (and the first one's memory) for one field. */
static const char *const top_keys[] = {
    "format", "version", "job", "pod", "node", "host", "backend", "backend_version", "reason",
    "rank", "world_size", "epoch", "trigger_time_ns", "trigger_monotonic_ns", "truncated",
    "entry_fields", "communicators"};
static const char *const comm_keys[] = {
    "id", "name", "epoch", "rank", "size", "capacity", "recorded", "dropped",
    "last_enqueued_seq", "last_started_seq", "last_completed_seq", "entries", "pg_name",
    "pg_desc"};

static void once(parser_t *P, const char *k, const char *const *keys, size_t n, unsigned *seen,
                 const char *where) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(k, keys[i])) continue;
    if (*seen & (1u << i)) failf(P, "%s\"%s\" appears twice", where, k);
    *seen |= 1u << i;
    return;
  }
}

enum col {
  C_SKIP = 0, C_EPOCH, C_SEQ, C_OP, C_DTYPE, C_COUNT, C_PEER, C_RANK, C_SIZE, C_STATE,
  C_CREATED, C_STARTED, C_COMPLETED, C_TIMEOUT, C_NAME
};
static const struct { const char *name; enum col col; } known_cols[] = {
    {"epoch", C_EPOCH}, {"seq", C_SEQ}, {"op", C_OP}, {"dtype", C_DTYPE},
    {"count", C_COUNT}, {"peer", C_PEER}, {"rank", C_RANK}, {"size", C_SIZE},
    {"state", C_STATE}, {"created_ns", C_CREATED}, {"started_ns", C_STARTED},
    {"completed_ns", C_COMPLETED}, {"timeout_ns", C_TIMEOUT}, {"name", C_NAME},
};
#define MAX_COLS 64

typedef struct cols {
  enum col c[MAX_COLS];
  int n;  /* -1: entry_fields not seen yet */
} cols_t;

/* Interned names with a small cache per reader, so the shared table (and
 * its lock) is touched a few times per file, not per entry. */
typedef struct name_cache {
  struct { char s[24]; size_t n; int idx, p2p; } e[16];
  int n;
} name_cache_t;

static int intern_cached(const char *s, size_t n, name_cache_t *c, int *p2p) {
  for (int i = 0; i < c->n; i++)
    if (c->e[i].n == n && !memcmp(c->e[i].s, s, n)) {
      if (p2p) *p2p = c->e[i].p2p;
      return c->e[i].idx;
    }
  int idx = tr_intern(s, n);
  int is_p2p = !strcmp(s, "send") || !strcmp(s, "recv");
  if (p2p) *p2p = is_p2p;
  if (c->n < 16 && n < sizeof(c->e[0].s)) {
    memcpy(c->e[c->n].s, s, n);
    c->e[c->n].n = n;
    c->e[c->n].idx = idx;
    c->e[c->n].p2p = is_p2p;
    c->n++;
  }
  return idx;
}

static int state_of(const char *s) {
  switch (s[0]) {
    case 'c': return !strcmp(s, "completed") ? TR_COMPLETED : TR_SCHEDULED;
    case 'f': return !strcmp(s, "failed") ? TR_FAILED : TR_SCHEDULED;
    case 's': return !strcmp(s, "started") ? TR_STARTED : TR_SCHEDULED;
    default: return TR_SCHEDULED; /* unknown states read as merely scheduled */
  }
}

static void entries(parser_t *P, const cols_t *cols, tr_comm_t *c) {
  name_cache_t ops = {.n = 0}, dtypes = {.n = 0}, names = {.n = 0};
  int unknown_op = tr_intern("unknown", 7), no_dtype = tr_intern("none", 4);
  expect(P, '[');
  if (peek(P) == ']') { P->p++; return; }
  do {
    if (c->n == c->cap_e) {
      c->cap_e = c->cap_e ? 2 * c->cap_e : (c->capacity && c->capacity < 1048576 ? c->capacity : 256);
      c->e = tr_xrealloc(c->e, c->cap_e * sizeof(*c->e));
    }
    tr_entry_t *e = &c->e[c->n];
    memset(e, 0, sizeof(*e));
    e->peer = -1;
    e->rank = -1;
    e->size = -1;
    e->timeout_ns = -1;
    e->op = (uint8_t)unknown_op;
    e->dtype = (uint8_t)no_dtype;
    expect(P, '[');
    int k = 0;
    if (peek(P) != ']') {
      do {
        size_t n;
        enum col col = k < cols->n ? cols->c[k] : C_SKIP;
        k++;
        switch (col) {
          case C_EPOCH: e->epoch = (uint32_t)num(P, 0); break;
          case C_SEQ: e->seq = (uint64_t)num(P, 0); break;
          case C_COUNT: e->count = (uint64_t)num(P, 0); break;
          case C_PEER: e->peer = (int32_t)in_a_job(P, "an entry's \"peer\"", num(P, -1), 0); break;
          case C_RANK: e->rank = (int32_t)in_a_job(P, "an entry's \"rank\"", num(P, -1), 0); break;
          case C_SIZE: e->size = (int32_t)in_a_job(P, "an entry's \"size\"", num(P, -1), 1); break;
          case C_CREATED: e->t_created = num(P, 0); break;
          case C_STARTED: e->t_started = num(P, 0); break;
          case C_COMPLETED: e->t_completed = num(P, 0); break;
          case C_TIMEOUT: e->timeout_ns = num(P, -1); break;
          case C_OP: {
            char *s = str(P, &n);
            int p2p;
            e->op = (uint8_t)intern_cached(s, n, &ops, &p2p);
            e->p2p = (uint8_t)p2p;
            break;
          }
          case C_DTYPE: {
            char *s = str(P, &n);
            e->dtype = (uint8_t)intern_cached(s, n, &dtypes, NULL);
            break;
          }
          case C_STATE: e->state = (uint8_t)state_of(str(P, &n)); break;
          case C_NAME: {
            char *s = str(P, &n);
            if (n) e->name = (uint32_t)intern_cached(s, n, &names, NULL) + 1;
            break;
          }
          default: skip(P, 1);
        }
      } while (more(P, ']'));
    } else {
      P->p++;
    }
    c->n++;
  } while (more(P, ']'));
}

static void communicators(parser_t *P, const cols_t *cols, tr_dump_t *d) {
  size_t cap = 0;
  expect(P, '[');
  if (peek(P) == ']') { P->p++; return; }
  do {
    if (d->ncomms == cap) {
      cap = cap ? 2 * cap : 4;
      d->comms = tr_xrealloc(d->comms, cap * sizeof(*d->comms));
    }
    tr_comm_t *c = &d->comms[d->ncomms++];
    memset(c, 0, sizeof(*c));
    c->rank = c->size = -1;
    c->last_enqueued = c->last_started = c->last_completed = -1;
    expect(P, '{');
    if (peek(P) != '}') {
      unsigned seen = 0;
      do {
        size_t n;
        char *k = str(P, &n);
        expect(P, ':');
        once(P, k, comm_keys, sizeof(comm_keys) / sizeof(comm_keys[0]), &seen, "a communicator's ");
        if (!strcmp(k, "id")) c->id = dup_str(P);
        else if (!strcmp(k, "name")) c->name = dup_str(P);
        else if (!strcmp(k, "pg_name")) c->pg_name = dup_str(P);
        else if (!strcmp(k, "pg_desc")) c->pg_desc = dup_str(P);
        else if (!strcmp(k, "epoch")) c->epoch = (uint64_t)num(P, 0);
        else if (!strcmp(k, "rank")) c->rank = (int)in_a_job(P, "a communicator's \"rank\"", num(P, -1), 0);
        else if (!strcmp(k, "size")) c->size = (int)in_a_job(P, "a communicator's \"size\"", num(P, -1), 1);
        else if (!strcmp(k, "capacity")) c->capacity = (uint64_t)num(P, 0);
        else if (!strcmp(k, "recorded")) c->recorded = (uint64_t)num(P, 0);
        else if (!strcmp(k, "dropped")) c->dropped = (uint64_t)num(P, 0);
        else if (!strcmp(k, "last_enqueued_seq")) c->last_enqueued = num(P, -1);
        else if (!strcmp(k, "last_started_seq")) c->last_started = num(P, -1);
        else if (!strcmp(k, "last_completed_seq")) c->last_completed = num(P, -1);
        else if (!strcmp(k, "entries")) entries(P, cols, c);
        else
          skip(P, 1);
      } while (more(P, '}'));
    } else {
      P->p++;
    }
    if (!c->id) fail(P, "a communicator without \"id\"");
    if (!c->name) c->name = tr_xstrndup("", 0);
    /* Entries take rank and size from their communicator when they lack
     * them (its keys may come after the entries). */
    for (size_t i = 0; i < c->n; i++) {
      if (c->e[i].rank < 0 && c->e[i].epoch == c->epoch) c->e[i].rank = c->rank;
      if (c->e[i].size < 0 && c->e[i].epoch == c->epoch) c->e[i].size = c->size;
    }
  } while (more(P, ']'));
}

/* Returns 0 parsed, 1 not an ftcomm dump (try other readers), -1 broken. */
int tr_parse_ftcomm(char *buf, size_t len, tr_dump_t *d, char *why, size_t whylen) {
  parser_t P = {.p = buf, .end = buf + len, .base = buf, .why = why, .whylen = whylen};
  cols_t cols = {.n = -1};
  /* Kept across the longjmp of a parse error. */
  char *volatile comms_at = NULL;
  volatile int is_ftcomm = 0;
  d->rank = d->world_size = -1;
  d->epoch = -1;
  if (setjmp(P.fail)) return -1;
  expect(&P, '{');
  if (peek(&P) != '}') {
    unsigned seen = 0;
    do {
      size_t n;
      char *k = str(&P, &n);
      expect(&P, ':');
      once(&P, k, top_keys, sizeof(top_keys) / sizeof(top_keys[0]), &seen, "");
      if (!strcmp(k, "format")) {
        char *v = dup_str(&P);
        is_ftcomm = v && !strcmp(v, FTC_REC_FORMAT_NAME);
        free(v);
      } else if (!strcmp(k, "version")) {
        char *v = dup_str(&P);
        snprintf(d->version, sizeof(d->version), "%s", v ? v : "");
        free(v);
      } else if (!strcmp(k, "job")) d->job = dup_str(&P);
      else if (!strcmp(k, "pod")) d->pod = dup_str(&P);
      else if (!strcmp(k, "node")) d->node = dup_str(&P);
      else if (!strcmp(k, "host")) d->host = dup_str(&P);
      else if (!strcmp(k, "backend")) d->backend = dup_str(&P);
      else if (!strcmp(k, "backend_version")) d->backend_version = dup_str(&P);
      else if (!strcmp(k, "reason")) d->reason = dup_str(&P);
      else if (!strcmp(k, "rank")) d->rank = rank_or_size(&P, "rank", 0);
      else if (!strcmp(k, "world_size")) d->world_size = rank_or_size(&P, "world_size", 1);
      else if (!strcmp(k, "epoch")) d->epoch = num(&P, -1);
      else if (!strcmp(k, "trigger_time_ns")) d->trigger_wall_ns = num(&P, 0);
      else if (!strcmp(k, "trigger_monotonic_ns")) d->trigger_mono_ns = num(&P, 0);
      else if (!strcmp(k, "truncated")) d->truncated = boolean(&P);
      else if (!strcmp(k, "failure")) failure_member(&P, &d->failure);
      else if (!strcmp(k, "verdict")) verdict_member(&P, &d->verdict);
      else if (!strcmp(k, "entry_fields")) {
        cols.n = 0;
        expect(&P, '[');
        if (peek(&P) != ']') {
          do {
            char *f = str(&P, &n);
            enum col col = C_SKIP;
            for (size_t i = 0; i < sizeof(known_cols) / sizeof(known_cols[0]); i++)
              if (!strcmp(f, known_cols[i].name)) col = known_cols[i].col;
            if (cols.n < MAX_COLS) cols.c[cols.n++] = col;
          } while (more(&P, ']'));
        } else {
          P.p++;
        }
      } else if (!strcmp(k, "communicators")) {
        if (cols.n >= 0 && !d->comms) {
          communicators(&P, &cols, d);
        } else {
          comms_at = P.p; /* columns not known yet: read it at the end */
          skip(&P, 0);
        }
      } else {
        /* A PyTorch dump: no need to read on (the PyTorch reader checks it whole). */
        if (!strcmp(k, "pg_config") || !strcmp(k, "pg_status") || !strcmp(k, "nccl_comm_state"))
          return 1;
        skip(&P, 0);
      }
    } while (more(&P, '}'));
  } else {
    P.p++;
  }
  ws(&P);
  if (P.p != P.end) fail(&P, "text after the end of the top-level object");
  if (!is_ftcomm) return 1;
  int major = atoi(d->version);
  if (!d->version[0] || major < 1) {
    snprintf(why, whylen, "dump format version \"%s\" is not valid (want \"%d.x\")", d->version,
             FTC_REC_FORMAT_MAJOR);
    return -1;
  }
  if (major > FTC_REC_FORMAT_MAJOR) {
    snprintf(why, whylen,
             "dump format version %s is newer than this ftcomm-trace understands (%d.x); "
             "use the ftcomm-trace of the release that wrote it",
             d->version, FTC_REC_FORMAT_MAJOR);
    return -1;
  }
  if (cols.n < 0 && comms_at) {
    snprintf(why, whylen, "\"communicators\" present but \"entry_fields\" missing");
    return -1;
  }
  if (comms_at) {
    P.p = comms_at;
    communicators(&P, &cols, d);
  }
  return 0;
}
