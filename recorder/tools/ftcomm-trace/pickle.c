/*
 * pickle.c - reads the data-only subset of Python's pickle format
 * (protocols 2 to 5) into an arena value tree (tree.h), for PyTorch Flight Recorder
 * dumps: PyTorch writes them on a timeout as pickles, and a user whose job
 * just hung has those, not JSON.
 *
 * A pickle is a program for a small stack machine. This reader runs only
 * the opcodes that build plain values: dicts, lists, tuples and sets (as
 * arrays), str, bytes (as strings), ints up to 64 bits, floats, bools,
 * None, the memo (PUT/GET/MEMOIZE), MARK, FRAME. Every opcode that would
 * import a name or call one (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST,
 * OBJ, NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID) is refused with its
 * name and offset, as are out-of-band buffers and protocol 0's text
 * opcodes: nothing in a pickle can run code here, and no Python is needed.
 *
 * Nesting is capped at TR_PICKLE_MAX_DEPTH as values are put in
 * containers. When every container is complete before it goes into
 * another (as pickle writers write them, whatever the memo shares), the
 * heights found then are final and no container can be inside itself.
 * Only a container that grows after it went into one (through the memo or
 * DUP) calls for a walk over the result, which finds containers inside
 * themselves and checks the depth again (shared ones are walked once). Values live in the arena: sharing costs nothing, and
 * whatever the program built goes with the arena at once.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ftc_alloc.h"
#include "pickle.h"
#include "trace.h"

/* Opcodes by byte, as Python's pickle.py names them. */
static const char *op_name(unsigned char op) {
  switch (op) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'I': return "INT";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'L': return "LONG";
    case 'M': return "BININT2";
    case 'N': return "NONE";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'X': return "BINUNICODE";
    case 'a': return "APPEND";
    case 'b': return "BUILD";
    case 'c': return "GLOBAL";
    case 'd': return "DICT";
    case '}': return "EMPTY_DICT";
    case 'e': return "APPENDS";
    case 'g': return "GET";
    case 'h': return "BINGET";
    case 'i': return "INST";
    case 'j': return "LONG_BINGET";
    case 'l': return "LIST";
    case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";
    case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return NULL;
  }
}

typedef struct pk {
  const unsigned char *p, *base, *end;
  size_t op_at; /* offset of the opcode being run */
  unsigned char op;
  tv_arena_t *a;
  tv_t **stack;
  size_t nstack, capstack;
  size_t *marks;
  size_t nmarks, capmarks;
  tv_t **memo; /* sparse: NULL where nothing was put */
  size_t capmemo, nmemo_put;
  int late; /* a container grew after it went into another: heights may be stale */
  char *why;
  size_t whylen;
} pk_t;

static int failf(pk_t *P, const char *fmt, const char *detail) {
  char msg[256];
  snprintf(msg, sizeof(msg), fmt, detail ? detail : "");
  const char *name = op_name(P->op);
  snprintf(P->why, P->whylen, "pickle opcode %s (0x%02x) at offset %zu: %s", name ? name : "unknown",
           P->op, P->op_at, msg);
  return -1;
}

static int need(pk_t *P, size_t n) {
  if ((size_t)(P->end - P->p) < n) {
    char m[96];
    snprintf(m, sizeof(m), "%zu", n);
    return failf(P, "the file ends inside its argument (%s more bytes needed): truncated", m);
  }
  return 0;
}

static uint64_t le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static int push(pk_t *P, tv_t *v) {
  if (!v) return failf(P, "a string of 4 GiB or more", NULL);
  if (P->nstack == P->capstack) {
    P->capstack = P->capstack ? 2 * P->capstack : 64;
    P->stack = tr_xrealloc(P->stack, P->capstack * sizeof(*P->stack));
  }
  P->stack[P->nstack++] = v;
  return 0;
}

/* Items on the stack above the innermost mark: as in Python's unpickler,
 * where MARK starts a new stack, no opcode reaches below it. */
static size_t avail(const pk_t *P) { return P->nstack - (P->nmarks ? P->marks[P->nmarks - 1] : 0); }

static int underflow(pk_t *P) { return failf(P, "not enough items on the stack above the last MARK", NULL); }

static tv_t *top(pk_t *P) { return avail(P) ? P->stack[P->nstack - 1] : NULL; }

/* The stack's first item above the innermost mark; pops the mark. */
static int pop_mark(pk_t *P, size_t *from) {
  if (!P->nmarks) return failf(P, "no MARK before it", NULL);
  *from = P->marks[--P->nmarks];
  return 0;
}

static void drop_to(pk_t *P, size_t from) {
  if (P->nstack > from) P->nstack = from;
}

/* A Python str: must be UTF-8, as pickle writes it. */
static int push_str(pk_t *P, size_t n) {
  if (need(P, n) < 0) return -1;
  if (!tv_utf8((const char *)P->p, n)) return failf(P, "the string is not valid UTF-8", NULL);
  tv_t *s = tv_strn(P->a, (const char *)P->p, n);
  P->p += n;
  return push(P, s);
}

/* bytes: as a string, its bytes read as Latin-1 unless they are UTF-8. */
static int push_bytes(pk_t *P, size_t n) {
  if (need(P, n) < 0) return -1;
  tv_t *s;
  if (tv_utf8((const char *)P->p, n)) {
    s = tv_strn(P->a, (const char *)P->p, n);
  } else {
    if (n > UINT32_MAX / 2) return failf(P, "bytes of 2 GiB or more", NULL);
    char *u = tv_alloc(P->a, 2 * n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
      unsigned char c = P->p[i];
      if (c < 0x80) u[k++] = (char)c;
      else u[k++] = (char)(0xc0 | c >> 6), u[k++] = (char)(0x80 | (c & 0x3f));
    }
    u[k] = '\0';
    s = tv_new(P->a, TV_STR);
    s->u.s = u;
    s->n = (uint32_t)k;
    s->cap = memchr(u, 0, k) ? 1 : 0;
  }
  P->p += n;
  return push(P, s);
}

static int is_container(const tv_t *t) { return t->type == TV_LIST || t->type == TV_DICT; }

static tv_t *new_container(pk_t *P, int type) {
  tv_t *t = tv_new(P->a, type);
  t->height = 1;
  return t;
}

/* child went into parent: the parent's height, within the cap. */
static int nest(pk_t *P, tv_t *parent, tv_t *child) {
  if (!is_container(child)) return 0;
  child->inside = 1; /* first: a container put into itself is then late */
  if (parent->inside) P->late = 1;
  if (child->height + 1 > parent->height) {
    parent->height = child->height + 1;
    if (parent->height > TR_PICKLE_MAX_DEPTH)
      return failf(P, "containers nest deeper than %s levels", TR_PICKLE_MAX_DEPTH_STR);
  }
  return 0;
}

static int push_int(pk_t *P, int64_t v) {
  tv_t *t = tv_new(P->a, TV_INT);
  t->u.i = v;
  return push(P, t);
}

/* Little-endian two's complement of n bytes (LONG1, LONG4), up to 64 bits. */
static int push_long(pk_t *P, size_t n) {
  if (need(P, n) < 0) return -1;
  const unsigned char *b = P->p;
  int neg = n && (b[n - 1] & 0x80);
  /* Bytes past the eighth may only repeat the sign. */
  for (size_t i = 8; i < n; i++)
    if (b[i] != (neg ? 0xff : 0x00)) return failf(P, "the integer does not fit 64 bits", NULL);
  if (n > 8 && ((b[7] & 0x80) != 0) != neg) return failf(P, "the integer does not fit 64 bits", NULL);
  uint64_t v = le(b, n < 8 ? (int)n : 8);
  if (neg && n < 8) v |= ~(uint64_t)0 << (8 * n);
  P->p += n;
  return push_int(P, (int64_t)v);
}

static int memo_put(pk_t *P, uint64_t idx) {
  tv_t *v = top(P);
  if (!v) return underflow(P);
  /* The writer numbers memo entries from 0, one per PUT; an index past the
   * file's length cannot come from it. */
  if (idx > (uint64_t)(P->end - P->base) + 1) return failf(P, "memo index past the file's length", NULL);
  if (idx >= P->capmemo) {
    size_t cap = P->capmemo ? P->capmemo : 64;
    while (cap <= idx) cap *= 2;
    P->memo = tr_xrealloc(P->memo, cap * sizeof(*P->memo));
    memset(P->memo + P->capmemo, 0, (cap - P->capmemo) * sizeof(*P->memo));
    P->capmemo = cap;
  }
  P->memo[idx] = v;
  P->nmemo_put++;
  return 0;
}

static int memo_get(pk_t *P, uint64_t idx) {
  if (idx >= P->capmemo || !P->memo[idx]) {
    char m[32];
    snprintf(m, sizeof(m), "%llu", (unsigned long long)idx);
    return failf(P, "memo entry %s was never put", m);
  }
  return push(P, P->memo[idx]);
}

/* A dict key: str, bytes, int, bool or None (as Python would print it). */
static int set_item(pk_t *P, tv_t *dict, tv_t *k, tv_t *v) {
  char num[32];
  const char *key;
  size_t klen;
  switch (k->type) {
    case TV_STR: /* the key string is in the arena already, and usually memoized: not copied */
      if (k->cap) return failf(P, "a dict key with a NUL character", NULL);
      if (tv_set_borrowed(P->a, dict, k->u.s, k->n, v) < 0) return failf(P, "a dict of 2^32 items", NULL);
      return nest(P, dict, v);
    case TV_INT: klen = (size_t)snprintf(num, sizeof(num), "%lld", (long long)k->u.i), key = num; break;
    case TV_TRUE: key = "True", klen = 4; break;
    case TV_FALSE: key = "False", klen = 5; break;
    case TV_NULL: key = "None", klen = 4; break;
    default: return failf(P, "a dict key that is not a str, bytes, int, bool or None", NULL);
  }
  if (strlen(key) != klen) return failf(P, "a dict key with a NUL character", NULL);
  if (tv_set(P->a, dict, key, klen, v) < 0) return failf(P, "a dict of 2^32 items", NULL);
  return nest(P, dict, v);
}

/* One opcode that takes items above the innermost mark. */
static int marked(pk_t *P) {
  size_t from = 0;
  if (pop_mark(P, &from) < 0) return -1;
  size_t n = P->nstack - from;
  tv_t **it = n ? P->stack + from : NULL; /* (no stack yet: NULL + 0 is undefined) */
  switch (P->op) {
    case '1': /* POP_MARK */
      drop_to(P, from);
      return 0;
    case 't': case 'l': case 0x91: { /* TUPLE, LIST, FROZENSET */
      tv_t *a = new_container(P, TV_LIST);
      for (size_t i = 0; i < n; i++) {
        if (tv_append(P->a, a, it[i]) < 0) return failf(P, "a list of 2^32 items", NULL);
        if (nest(P, a, it[i]) < 0) return -1;
      }
      drop_to(P, from);
      return push(P, a);
    }
    case 'd': { /* DICT */
      if (n % 2) return failf(P, "an odd number of items for a dict", NULL);
      tv_t *o = new_container(P, TV_DICT);
      for (size_t i = 0; i < n; i += 2)
        if (set_item(P, o, it[i], it[i + 1]) < 0) return -1;
      drop_to(P, from);
      return push(P, o);
    }
    case 'e': case 0x90: { /* APPENDS, ADDITEMS */
      if (from <= (P->nmarks ? P->marks[P->nmarks - 1] : 0)) return failf(P, "no list below the MARK", NULL);
      tv_t *a = P->stack[from - 1];
      if (a->type != TV_LIST) return failf(P, "the item below the MARK is not a list", NULL);
      for (size_t i = 0; i < n; i++) {
        if (tv_append(P->a, a, it[i]) < 0) return failf(P, "a list of 2^32 items", NULL);
        if (nest(P, a, it[i]) < 0) return -1;
      }
      drop_to(P, from);
      return 0;
    }
    case 'u': { /* SETITEMS */
      if (from <= (P->nmarks ? P->marks[P->nmarks - 1] : 0)) return failf(P, "no dict below the MARK", NULL);
      tv_t *o = P->stack[from - 1];
      if (o->type != TV_DICT) return failf(P, "the item below the MARK is not a dict", NULL);
      if (n % 2) return failf(P, "an odd number of items for a dict", NULL);
      for (size_t i = 0; i < n; i += 2)
        if (set_item(P, o, it[i], it[i + 1]) < 0) return -1;
      drop_to(P, from);
      return 0;
    }
  }
  return failf(P, "internal: not a marked opcode", NULL);
}

/* Refused: what each kind of opcode would do. */
static int refuse(pk_t *P) {
  switch (P->op) {
    case 'c': case 0x93: case 'R': case 'b': case 'i': case 'o': case 0x81: case 0x92:
    case 0x82: case 0x83: case 0x84: case 'P': case 'Q':
      return failf(P, "it imports or calls Python code, which a Flight Recorder dump never needs: refused", NULL);
    case 0x97: case 0x98:
      return failf(P, "out-of-band buffers are not part of a Flight Recorder dump: refused", NULL);
    case 'F': case 'I': case 'L': case 'S': case 'V': case 'g': case 'p':
      return failf(P, "a protocol 0 text opcode; this reader takes protocols 2 to 5 (PyTorch writes 2)", NULL);
    default:
      return failf(P, "not a pickle opcode: the file is damaged or not a pickle", NULL);
  }
}

static int step(pk_t *P) {
  P->op_at = (size_t)(P->p - P->base);
  P->op = *P->p++;
  const unsigned char *a = P->p;
  switch (P->op) {
    case 0x95: /* FRAME: a length, then the frame's opcodes inline */
      if (need(P, 8) < 0) return -1;
      if (le(a, 8) > (uint64_t)(P->end - P->p - 8)) return failf(P, "the frame is longer than the rest of the file: truncated", NULL);
      P->p += 8;
      return 0;
    case 0x80:
      return failf(P, "a second PROTO", NULL);
    case '(':
      if (P->nmarks >= TR_PICKLE_MAX_DEPTH) return failf(P, "more than %s open MARKs", TR_PICKLE_MAX_DEPTH_STR);
      if (P->nmarks == P->capmarks) {
        P->capmarks = P->capmarks ? 2 * P->capmarks : 16;
        P->marks = tr_xrealloc(P->marks, P->capmarks * sizeof(*P->marks));
      }
      P->marks[P->nmarks++] = P->nstack;
      return 0;
    case '0': /* POP */
      if (!avail(P)) return underflow(P);
      P->nstack--;
      return 0;
    case '2': /* DUP */
      if (!avail(P)) return underflow(P);
      return push(P, top(P));
    case 'N': return push(P, tv_new(P->a, TV_NULL));
    case 0x88: return push(P, tv_new(P->a, TV_TRUE));
    case 0x89: return push(P, tv_new(P->a, TV_FALSE));
    case 'J':
      if (need(P, 4) < 0) return -1;
      P->p += 4;
      return push_int(P, (int32_t)(uint32_t)le(a, 4));
    case 'K':
      if (need(P, 1) < 0) return -1;
      P->p += 1;
      return push_int(P, a[0]);
    case 'M':
      if (need(P, 2) < 0) return -1;
      P->p += 2;
      return push_int(P, (int64_t)le(a, 2));
    case 0x8a:
      if (need(P, 1) < 0) return -1;
      P->p += 1;
      return push_long(P, a[0]);
    case 0x8b: {
      if (need(P, 4) < 0) return -1;
      int32_t n = (int32_t)(uint32_t)le(a, 4);
      if (n < 0) return failf(P, "a negative length", NULL);
      P->p += 4;
      return push_long(P, (size_t)n);
    }
    case 'G': {
      if (need(P, 8) < 0) return -1;
      uint64_t bits = 0;
      for (int i = 0; i < 8; i++) bits = bits << 8 | a[i];
      double d;
      memcpy(&d, &bits, sizeof(d));
      P->p += 8;
      /* NaN and infinities as null: JSON has none, and the reports are JSON */
      tv_t *r = tv_new(P->a, d == d && d - d == 0 ? TV_REAL : TV_NULL);
      r->u.d = d;
      return push(P, r);
    }
    case 'X':
      if (need(P, 4) < 0) return -1;
      P->p += 4;
      return push_str(P, (size_t)le(a, 4));
    case 0x8c:
      if (need(P, 1) < 0) return -1;
      P->p += 1;
      return push_str(P, a[0]);
    case 0x8d: {
      if (need(P, 8) < 0) return -1;
      uint64_t n = le(a, 8);
      P->p += 8;
      if (n > (uint64_t)(P->end - P->p)) return need(P, SIZE_MAX);
      return push_str(P, (size_t)n);
    }
    case 'C': case 'U':
      if (need(P, 1) < 0) return -1;
      P->p += 1;
      return push_bytes(P, a[0]);
    case 'B':
      if (need(P, 4) < 0) return -1;
      P->p += 4;
      return push_bytes(P, (size_t)le(a, 4));
    case 'T': {
      if (need(P, 4) < 0) return -1;
      int32_t n = (int32_t)(uint32_t)le(a, 4);
      if (n < 0) return failf(P, "a negative length", NULL);
      P->p += 4;
      return push_bytes(P, (size_t)n);
    }
    case 0x8e: case 0x96: {
      if (need(P, 8) < 0) return -1;
      uint64_t n = le(a, 8);
      P->p += 8;
      if (n > (uint64_t)(P->end - P->p)) return need(P, SIZE_MAX);
      return push_bytes(P, (size_t)n);
    }
    case '}': return push(P, new_container(P, TV_DICT));
    case ']': case ')': case 0x8f: return push(P, new_container(P, TV_LIST));
    case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
      size_t n = (size_t)(P->op - 0x84);
      if (avail(P) < n) return underflow(P);
      tv_t *t = new_container(P, TV_LIST);
      for (size_t i = P->nstack - n; i < P->nstack; i++) {
        tv_append(P->a, t, P->stack[i]);
        if (nest(P, t, P->stack[i]) < 0) return -1;
      }
      drop_to(P, P->nstack - n);
      return push(P, t);
    }
    case 'a': { /* APPEND */
      if (avail(P) < 2) return underflow(P);
      tv_t *l = P->stack[P->nstack - 2], *v = P->stack[P->nstack - 1];
      if (l->type != TV_LIST) return failf(P, "the item below is not a list", NULL);
      if (tv_append(P->a, l, v) < 0) return failf(P, "a list of 2^32 items", NULL);
      if (nest(P, l, v) < 0) return -1;
      drop_to(P, P->nstack - 1);
      return 0;
    }
    case 's': { /* SETITEM */
      if (avail(P) < 3) return underflow(P);
      tv_t *o = P->stack[P->nstack - 3];
      if (o->type != TV_DICT) return failf(P, "the item below is not a dict", NULL);
      if (set_item(P, o, P->stack[P->nstack - 2], P->stack[P->nstack - 1]) < 0) return -1;
      drop_to(P, P->nstack - 2);
      return 0;
    }
    case '1': case 't': case 'l': case 'd': case 'e': case 0x90: case 'u': case 0x91:
      return marked(P);
    case 'q':
      if (need(P, 1) < 0) return -1;
      P->p += 1;
      return memo_put(P, a[0]);
    case 'r':
      if (need(P, 4) < 0) return -1;
      P->p += 4;
      return memo_put(P, le(a, 4));
    case 0x94:
      return memo_put(P, P->nmemo_put);
    case 'h':
      if (need(P, 1) < 0) return -1;
      P->p += 1;
      return memo_get(P, a[0]);
    case 'j':
      if (need(P, 4) < 0) return -1;
      P->p += 4;
      return memo_get(P, le(a, 4));
    default:
      return refuse(P);
  }
}

tv_t *tr_pickle_load(tv_arena_t *arena, const unsigned char *buf, size_t len, char *why,
                     size_t whylen) {
  pk_t P = {.p = buf, .base = buf, .end = buf + len, .a = arena, .why = why, .whylen = whylen};
  tv_t *result = NULL;
  if (len > TR_PICKLE_MAX_BYTES) {
    snprintf(why, whylen, "a pickle of %zu bytes, more than this reader takes (%llu)", len,
             (unsigned long long)TR_PICKLE_MAX_BYTES);
    return NULL;
  }
  if (len < 2 || buf[0] != 0x80) {
    snprintf(why, whylen, "not a pickle of protocol 2 or newer (no PROTO opcode at offset 0)");
    return NULL;
  }
  if (buf[1] < 2 || buf[1] > 5) {
    snprintf(why, whylen, "pickle protocol %u: this reader takes protocols 2 to 5", buf[1]);
    return NULL;
  }
  P.p += 2;
  for (;;) {
    if (P.p >= P.end) {
      snprintf(why, whylen, "the pickle ends at offset %zu without STOP: truncated", len);
      goto out;
    }
    if (*P.p == '.') {
      P.op_at = (size_t)(P.p - P.base);
      P.op = '.';
      if (P.nstack != 1 || P.nmarks) {
        failf(&P, P.nstack ? "%s" : "the stack is empty",
              P.nstack ? "values left over besides the result" : NULL);
        goto out;
      }
      break;
    }
    if (step(&P) < 0) goto out;
  }
  /* Shared containers make a graph, not a tree: check it is a finite one. */
  int rc = P.late ? tv_check(P.stack[0], TR_PICKLE_MAX_DEPTH) : 0;
  if (rc == -1) snprintf(why, whylen, "pickle: a container contains itself");
  else if (rc < 0) snprintf(why, whylen, "pickle: containers nest deeper than " TR_PICKLE_MAX_DEPTH_STR " levels");
  else result = P.stack[0];
out:
  ftc__free(P.stack);
  ftc__free(P.marks);
  ftc__free(P.memo);
  return result;
}
