/*
 * json_tree.c - a single-pass JSON reader into the arena value tree
 * (tree.h), for PyTorch Flight Recorder JSON dumps: a 128-rank job leaves
 * a hundred megabytes of them, and building jansson values for all of it
 * cost several seconds. Strings are unescaped in place in the caller's
 * buffer and pointed at; numbers are converted as they are met.
 *
 * It accepts what RFC 8259 accepts, with strings in UTF-8 and integers
 * that fit 64 bits, and nests at most TV_JSON_MAX_DEPTH deep. Anything else
 * makes it return NULL: the caller then asks jansson, which says what is
 * wrong and where, in its words.
 */
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "tree.h"

#define TV_JSON_MAX_DEPTH 64

typedef struct jp {
  char *p, *end;
  tv_arena_t *a;
  jmp_buf fail;
} jp_t;

static void bad(jp_t *J) { longjmp(J->fail, 1); }

static inline void ws(jp_t *J) {
  while (J->p < J->end && (*J->p == ' ' || *J->p == '\n' || *J->p == '\r' || *J->p == '\t')) J->p++;
}

static unsigned hex4(jp_t *J) {
  if (J->end - J->p < 4) bad(J);
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = *J->p++;
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else bad(J);
  }
  return v;
}

/* A string (J->p after its opening quote), unescaped in place. */
static tv_t *str(jp_t *J) {
  char *start = J->p, *w = J->p;
  int high = 0;
  for (;;) {
    if (J->p >= J->end) bad(J);
    unsigned char c = (unsigned char)*J->p++;
    if (c == '"') break;
    if (c < 0x20) bad(J);
    if (c >= 0x80) high = 1;
    if (c != '\\') {
      *w++ = (char)c;
      continue;
    }
    if (J->p >= J->end) bad(J);
    switch (*J->p++) {
      case '"': *w++ = '"'; break;
      case '\\': *w++ = '\\'; break;
      case '/': *w++ = '/'; break;
      case 'b': *w++ = '\b'; break;
      case 'f': *w++ = '\f'; break;
      case 'n': *w++ = '\n'; break;
      case 'r': *w++ = '\r'; break;
      case 't': *w++ = '\t'; break;
      case 'u': {
        unsigned cp = hex4(J);
        if (cp >= 0xd800 && cp < 0xdc00) {
          if (J->end - J->p < 6 || J->p[0] != '\\' || J->p[1] != 'u') bad(J);
          J->p += 2;
          unsigned lo = hex4(J);
          if (lo < 0xdc00 || lo > 0xdfff) bad(J);
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if ((cp >= 0xdc00 && cp < 0xe000) || cp == 0) {
          bad(J); /* an unpaired surrogate; NUL would end the string */
        }
        if (cp < 0x80) {
          *w++ = (char)cp;
        } else if (cp < 0x800) {
          *w++ = (char)(0xc0 | cp >> 6);
          *w++ = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
          *w++ = (char)(0xe0 | cp >> 12);
          *w++ = (char)(0x80 | ((cp >> 6) & 0x3f));
          *w++ = (char)(0x80 | (cp & 0x3f));
        } else {
          *w++ = (char)(0xf0 | cp >> 18);
          *w++ = (char)(0x80 | ((cp >> 12) & 0x3f));
          *w++ = (char)(0x80 | ((cp >> 6) & 0x3f));
          *w++ = (char)(0x80 | (cp & 0x3f));
        }
        break;
      }
      default: bad(J);
    }
  }
  /* The closing quote is behind w: room for the NUL. */
  *w = '\0';
  size_t n = (size_t)(w - start);
  if ((high && !tv_utf8(start, n)) || n >= UINT32_MAX) bad(J);
  tv_t *t = tv_new(J->a, TV_STR);
  t->u.s = start;
  t->n = (uint32_t)n;
  return t;
}

static tv_t *num(jp_t *J) {
  char *s = J->p;
  int neg = 0;
  if (*J->p == '-') neg = 1, J->p++;
  if (J->p >= J->end || *J->p < '0' || *J->p > '9') bad(J);
  if (*J->p == '0' && J->p + 1 < J->end && J->p[1] >= '0' && J->p[1] <= '9') bad(J); /* 01 */
  uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  int big = 0;
  while (J->p < J->end && *J->p >= '0' && *J->p <= '9') {
    unsigned d = (unsigned)(*J->p++ - '0');
    if (v > (lim - d) / 10) big = 1;
    else v = v * 10 + d;
  }
  if (J->p < J->end && (*J->p == '.' || *J->p == 'e' || *J->p == 'E')) {
    if (*J->p == '.') {
      J->p++;
      if (J->p >= J->end || *J->p < '0' || *J->p > '9') bad(J);
      while (J->p < J->end && *J->p >= '0' && *J->p <= '9') J->p++;
    }
    if (J->p < J->end && (*J->p == 'e' || *J->p == 'E')) {
      J->p++;
      if (J->p < J->end && (*J->p == '+' || *J->p == '-')) J->p++;
      if (J->p >= J->end || *J->p < '0' || *J->p > '9') bad(J);
      while (J->p < J->end && *J->p >= '0' && *J->p <= '9') J->p++;
    }
    /* The text is terminated (buf[len] is NUL) and the number checked:
     * strtod reads just it. */
    char *e;
    tv_t *t = tv_new(J->a, TV_REAL);
    t->u.d = strtod(s, &e);
    if (e != J->p) bad(J);
    if (!(t->u.d - t->u.d == 0)) bad(J); /* overflowed to an infinity */
    return t;
  }
  if (big) bad(J); /* an integer past 64 bits: jansson refuses it too, in words */
  tv_t *t = tv_new(J->a, TV_INT);
  t->u.i = neg ? (v > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)v) : (int64_t)v;
  return t;
}

static int lit(jp_t *J, const char *w, size_t n) {
  if ((size_t)(J->end - J->p) < n || memcmp(J->p, w, n)) return 0;
  J->p += n;
  return 1;
}

static tv_t *value(jp_t *J, int depth) {
  ws(J);
  if (J->p >= J->end) bad(J);
  char c = *J->p;
  if (c == '"') {
    J->p++;
    return str(J);
  }
  if (c == '{' || c == '[') {
    if (depth >= TV_JSON_MAX_DEPTH) bad(J);
    J->p++;
    int obj = c == '{';
    tv_t *t = tv_new(J->a, obj ? TV_DICT : TV_LIST);
    ws(J);
    if (J->p < J->end && *J->p == (obj ? '}' : ']')) {
      J->p++;
      return t;
    }
    for (;;) {
      if (obj) {
        ws(J);
        if (J->p >= J->end || *J->p != '"') bad(J);
        J->p++;
        tv_t *k = str(J);
        if (strlen(k->u.s) != k->n) bad(J);
        ws(J);
        if (J->p >= J->end || *J->p != ':') bad(J);
        J->p++;
        tv_t *v = value(J, depth + 1);
        if (t->n == UINT32_MAX) bad(J);
        /* the key stays where it is: tv_set would copy it */
        if (t->n == t->cap) {
          uint32_t cap = t->cap ? 2 * t->cap : 8;
          tv_kv_t *kv = tv_alloc(J->a, (size_t)cap * sizeof(*kv));
          if (t->n) memcpy(kv, t->u.kv, (size_t)t->n * sizeof(*kv));
          t->u.kv = kv;
          t->cap = cap;
        }
        t->u.kv[t->n++] = (tv_kv_t){k->u.s, k->n, v};
        if (v->type == TV_LIST || v->type == TV_DICT) t->kids = 1;
      } else if (tv_append(J->a, t, value(J, depth + 1)) < 0) {
        bad(J);
      }
      ws(J);
      if (J->p >= J->end) bad(J);
      char d = *J->p++;
      if (d == ',') continue;
      if (d == (obj ? '}' : ']')) return t;
      bad(J);
    }
  }
  if (c == '-' || (c >= '0' && c <= '9')) return num(J);
  if (lit(J, "true", 4)) return tv_new(J->a, TV_TRUE);
  if (lit(J, "false", 5)) return tv_new(J->a, TV_FALSE);
  if (lit(J, "null", 4)) return tv_new(J->a, TV_NULL);
  bad(J);
  return NULL;
}

tv_t *tv_parse_json(tv_arena_t *a, char *buf, size_t len) {
  jp_t J = {.p = buf, .end = buf + len, .a = a};
  if (setjmp(J.fail)) return NULL;
  tv_t *t = value(&J, 0);
  ws(&J);
  return J.p == J.end ? t : NULL;
}
