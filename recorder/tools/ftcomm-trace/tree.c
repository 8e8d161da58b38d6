/*
 * tree.c - the arena value tree of tree.h: bump allocation in blocks of up
 * to a megabyte, lists and dicts that grow by doubling inside the arena, and
 * the check that a tree built from a pickle's memo is a finite tree.
 */
#include <pthread.h>
#include <string.h>

#include "ftc_alloc.h"
#include "trace.h"
#include "tree.h"

#define TV_BLOCK (1u << 20)

typedef struct block {
  struct block *next;
  size_t size;
  max_align_t data[];
} block_t;

/* Each thread's spare TV_BLOCK blocks: a loader thread reads one file
 * after another, and a fresh megabyte per block from malloc is a fresh
 * mapping to fault in. */
#define TV_SPARE_MAX 32
typedef struct spare {
  block_t *list;
  unsigned n;
} spare_t;
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;

static void spare_drop(void *p) {
  spare_t *s = p;
  for (block_t *b = s->list, *next; b; b = next) {
    next = b->next;
    ftc__free(b);
  }
  ftc__free(s);
}

static void spare_init(void) { pthread_key_create(&spare_key, spare_drop); }

static spare_t *spares(void) {
  pthread_once(&spare_once, spare_init);
  spare_t *s = pthread_getspecific(spare_key);
  if (!s) {
    s = tr_xcalloc(1, sizeof(*s));
    pthread_setspecific(spare_key, s);
  }
  return s;
}

void *tv_alloc(tv_arena_t *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if ((size_t)(a->end - a->p) < n) {
    /* Blocks grow from 4 KiB to TV_BLOCK: a small file costs little. */
    size_t want = a->blocks < 8 ? (size_t)4096 << a->blocks : TV_BLOCK;
    a->blocks++;
    size_t sz = n > TV_BLOCK / 4 ? n : want > n ? want : TV_BLOCK;
    spare_t *sp = n <= TV_BLOCK / 4 ? spares() : NULL;
    block_t *b;
    if (sp && sp->list) {
      b = sp->list;
      sp->list = b->next;
      sp->n--;
      sz = TV_BLOCK;
    } else {
      b = tr_xmalloc(sizeof(block_t) + sz);
      b->size = sz;
    }
    b->next = a->chunks;
    a->chunks = b;
    if (n > TV_BLOCK / 4) return b->data; /* a big one: its own block, the current one goes on */
    a->p = (char *)b->data;
    a->end = a->p + sz;
  }
  void *r = a->p;
  a->p += n;
  return r;
}

void tv_arena_free(tv_arena_t *a) {
  spare_t *sp = a->chunks ? spares() : NULL;
  for (block_t *b = a->chunks, *next; b; b = next) {
    next = b->next;
    if (b->size == TV_BLOCK && sp->n < TV_SPARE_MAX) {
      b->next = sp->list;
      sp->list = b;
      sp->n++;
    } else {
      ftc__free(b);
    }
  }
  memset(a, 0, sizeof(*a));
}

tv_t *tv_new(tv_arena_t *a, int type) {
  tv_t *t = tv_alloc(a, sizeof(*t));
  memset(t, 0, sizeof(*t));
  t->type = (uint8_t)type;
  return t;
}

tv_t *tv_strn(tv_arena_t *a, const char *s, size_t n) {
  if (n >= UINT32_MAX) return NULL;
  tv_t *t = tv_new(a, TV_STR);
  char *c = tv_alloc(a, n + 1);
  if (n) memcpy(c, s, n);
  c[n] = '\0';
  t->u.s = c;
  t->n = (uint32_t)n;
  t->cap = n && memchr(c, 0, n) ? 1 : 0;
  return t;
}

/* Room for one more item of size sz in a list's or dict's array. */
static void *grow(tv_arena_t *a, tv_t *t, void *items, size_t sz) {
  if (t->n < t->cap) return items;
  uint32_t cap = t->cap ? (t->cap >= UINT32_MAX / 2 ? UINT32_MAX : 2 * t->cap) : 4;
  void *fresh = tv_alloc(a, (size_t)cap * sz);
  if (t->n) memcpy(fresh, items, (size_t)t->n * sz);
  t->cap = cap;
  return fresh;
}

int tv_append(tv_arena_t *a, tv_t *l, tv_t *v) {
  if (l->type != TV_LIST || l->n == UINT32_MAX) return -1;
  l->u.items = grow(a, l, l->u.items, sizeof(*l->u.items));
  l->u.items[l->n++] = v;
  if (v->type == TV_LIST || v->type == TV_DICT) l->kids = 1;
  return 0;
}

int tv_set(tv_arena_t *a, tv_t *d, const char *key, size_t klen, tv_t *v) {
  if (d->type != TV_DICT || d->n == UINT32_MAX) return -1;
  char *k = tv_alloc(a, klen + 1);
  memcpy(k, key, klen);
  k[klen] = '\0';
  d->u.kv = grow(a, d, d->u.kv, sizeof(*d->u.kv));
  d->u.kv[d->n++] = (tv_kv_t){k, klen, v};
  if (v->type == TV_LIST || v->type == TV_DICT) d->kids = 1;
  return 0;
}

int tv_set_borrowed(tv_arena_t *a, tv_t *d, const char *key, size_t klen, tv_t *v) {
  if (d->type != TV_DICT || d->n == UINT32_MAX) return -1;
  d->u.kv = grow(a, d, d->u.kv, sizeof(*d->u.kv));
  d->u.kv[d->n++] = (tv_kv_t){key, klen, v};
  if (v->type == TV_LIST || v->type == TV_DICT) d->kids = 1;
  return 0;
}

tv_t *tv_getn(const tv_t *d, const char *key, size_t n) {
  if (!d || d->type != TV_DICT) return NULL;
  for (uint32_t i = d->n; i-- > 0;)
    if (d->u.kv[i].kn == n && !memcmp(d->u.kv[i].k, key, n)) return d->u.kv[i].v;
  return NULL;
}

tv_t *tv_get(const tv_t *d, const char *key) { return tv_getn(d, key, strlen(key)); }

tv_t *tv_at(const tv_t *l, size_t i) { return l && l->type == TV_LIST && i < l->n ? l->u.items[i] : NULL; }
size_t tv_len(const tv_t *t) { return t && (t->type == TV_LIST || t->type == TV_DICT) ? t->n : 0; }
const char *tv_str(const tv_t *t) { return t && t->type == TV_STR ? t->u.s : NULL; }
int tv_is_true(const tv_t *t) { return t && t->type == TV_TRUE; }
int tv_is_number(const tv_t *t) { return t && (t->type == TV_INT || t->type == TV_REAL); }
double tv_number(const tv_t *t) {
  return !t ? 0 : t->type == TV_INT ? (double)t->u.i : t->type == TV_REAL ? t->u.d : 0;
}

enum { W_NONE = 0, W_PATH, W_DONE };

/* The height of t, or -1 (inside itself) or -2 (deeper than left). */
static int walk(tv_t *t, int left) {
  if (t->type != TV_LIST && t->type != TV_DICT) return 0;
  if (t->walk == W_PATH) return -1;
  if (t->walk == W_NONE && !t->kids) { /* no container below: nothing to follow */
    t->height = 1;
    t->walk = W_DONE;
  }
  if (t->walk == W_NONE) {
    if (left <= 0) return -2;
    t->walk = W_PATH;
    int below = 0;
    for (uint32_t i = 0; i < t->n; i++) {
      tv_t *c = t->type == TV_LIST ? t->u.items[i] : t->u.kv[i].v;
      if (c->type != TV_LIST && c->type != TV_DICT) continue;
      int r = walk(c, left - 1);
      if (r < 0) return r;
      if (r > below) below = r;
    }
    t->height = below + 1;
    t->walk = W_DONE;
  }
  return t->height > left ? -2 : t->height;
}

int tv_check(tv_t *t, int max_depth) {
  int r = walk(t, max_depth);
  return r < 0 ? r : 0;
}

tv_t *tv_from_json(tv_arena_t *a, const json_t *j) {
  tv_t *t;
  switch (json_typeof(j)) {
    case JSON_OBJECT: {
      t = tv_new(a, TV_DICT);
      const char *k;
      json_t *v;
      json_object_foreach((json_t *)j, k, v) tv_set(a, t, k, strlen(k), tv_from_json(a, v));
      return t;
    }
    case JSON_ARRAY: {
      t = tv_new(a, TV_LIST);
      size_t i;
      json_t *v;
      json_array_foreach(j, i, v) tv_append(a, t, tv_from_json(a, v));
      return t;
    }
    case JSON_STRING: return tv_strn(a, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: t = tv_new(a, TV_INT); t->u.i = json_integer_value(j); return t;
    case JSON_REAL: t = tv_new(a, TV_REAL); t->u.d = json_real_value(j); return t;
    case JSON_TRUE: return tv_new(a, TV_TRUE);
    case JSON_FALSE: return tv_new(a, TV_FALSE);
    default: return tv_new(a, TV_NULL);
  }
}

int tv_utf8(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s, *end = p + n;
  while (p < end) {
    /* ASCII, eight bytes at a time */
    while (end - p >= 8) {
      uint64_t w;
      memcpy(&w, p, 8);
      if (w & 0x8080808080808080ull) break;
      p += 8;
    }
    if (p >= end) break;
    unsigned c = *p;
    if (c < 0x80) { p++; continue; }
    size_t k;
    unsigned cp;
    if (c >= 0xc2 && c <= 0xdf) k = 1, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) k = 2, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) k = 3, cp = c & 0x07;
    else return 0;
    if ((size_t)(end - p) <= k) return 0;
    for (size_t i = 1; i <= k; i++) {
      if ((p[i] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    p += k + 1;
  }
  return 1;
}
