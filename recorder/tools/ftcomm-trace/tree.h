/*
 * tree.h - a read-only value tree (null, bools, ints, reals, strings, lists,
 * dicts) held in an arena, as PyTorch Flight Recorder dumps are read: the
 * pickle reader builds it, JSON is turned into it, and one mapping reads
 * dumps from it. Every node and string lives in the arena and goes with it
 * at once: no reference counts, no frees of single values.
 */
#ifndef FTC_TRACE_TREE_H
#define FTC_TRACE_TREE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

enum tv_type { TV_NULL = 0, TV_FALSE, TV_TRUE, TV_INT, TV_REAL, TV_STR, TV_LIST, TV_DICT };

typedef struct tv tv_t;
typedef struct tv_kv {
  const char *k; /* NUL-terminated, in the arena */
  size_t kn;     /* its length */
  tv_t *v;
} tv_kv_t;

struct tv {
  uint8_t type;
  uint8_t walk;   /* tv_check's marks */
  uint8_t kids;   /* a list or dict with a list or dict in it */
  uint8_t inside; /* the pickle reader put it in a container */
  int32_t height; /* levels of containers at and below this one, once checked */
  uint32_t n, cap; /* string length, and 1 when it holds a NUL (tv_strn);
                    * items of a list or dict, and room for them */
  union {
    int64_t i;
    double d;
    const char *s; /* NUL-terminated */
    tv_t **items;
    tv_kv_t *kv; /* in the order set; a key set twice is there twice, the last counts */
  } u;
};

typedef struct tv_arena {
  void *chunks; /* list of blocks */
  char *p, *end;
  unsigned blocks;
} tv_arena_t;

void *tv_alloc(tv_arena_t *a, size_t n);
/* Frees the arena; its megabyte blocks are kept for the thread's next
 * arena (up to 32 of them, freed when the thread ends). */
void tv_arena_free(tv_arena_t *a);

tv_t *tv_new(tv_arena_t *a, int type);
/* A string copied into the arena (NUL-terminated). */
tv_t *tv_strn(tv_arena_t *a, const char *s, size_t n);
/* Appends v to list l (0), or -1 past 2^32 items. */
int tv_append(tv_arena_t *a, tv_t *l, tv_t *v);
/* Sets key (NUL-terminated, copied) to v in dict d. */
int tv_set(tv_arena_t *a, tv_t *d, const char *key, size_t klen, tv_t *v);

/* The same with key not copied: it must live as long as the tree (a
 * string of the same arena, or a literal). */
int tv_set_borrowed(tv_arena_t *a, tv_t *d, const char *key, size_t klen, tv_t *v);

/* Lookups: NULL when t is not of the right type or has no such item. */
tv_t *tv_get(const tv_t *dict, const char *key);
tv_t *tv_getn(const tv_t *dict, const char *key, size_t klen);
/* A literal key: no strlen at run time. */
#define TV_GET(dict, lit) tv_getn(dict, lit, sizeof(lit) - 1)
tv_t *tv_at(const tv_t *list, size_t i);
size_t tv_len(const tv_t *t); /* items of a list or dict, else 0 */
const char *tv_str(const tv_t *t);
int tv_is_true(const tv_t *t);
int tv_is_number(const tv_t *t);
double tv_number(const tv_t *t);

/* 0 when t nests at most max_depth levels of containers and none inside
 * itself; -1 when one contains itself, -2 when deeper. Shared containers
 * are walked once (a tree is checked once: the marks stay). */
int tv_check(tv_t *t, int max_depth);

/* The JSON text in buf[0..len) (buf[len] must be NUL) as a tree: strings
 * are unescaped in place and point into buf, which must outlive the tree. NULL when it is not
 * valid JSON (or nests past 64, or has an integer past 64 bits, or a
 * string that is not UTF-8): ask jansson why. */
tv_t *tv_parse_json(tv_arena_t *a, char *buf, size_t len);

/* A copy of a jansson value (depth bounded by jansson's parser). */
tv_t *tv_from_json(tv_arena_t *a, const json_t *j);

/* 1 when s[0..n) is UTF-8 (no surrogates, no overlongs). */
int tv_utf8(const char *s, size_t n);

#endif
