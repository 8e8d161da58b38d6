/*
 * fuzz_jsontree.c - the fast JSON reader of PyTorch dumps
 * (recorder/tools/ftcomm-trace/json_tree.c) against jansson, on the same
 * bytes: it must accept what jansson accepts (but for nesting past its 64
 * levels, and bytes after a NUL, which jansson ignores) and refuse what
 * jansson refuses, and read the same values.
 *
 * Input: one JSON text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "trace.h"
#include "tree.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  return 0;
}

static int depth_of(const json_t *j) {
  int d = 0;
  size_t i;
  const char *k;
  json_t *v;
  if (json_is_array(j)) json_array_foreach(j, i, v) { int e = depth_of(v); if (e > d) d = e; }
  else if (json_is_object(j)) json_object_foreach((json_t *)j, k, v) { int e = depth_of(v); if (e > d) d = e; }
  else return 0;
  return d + 1;
}

/* t holds what j holds (a key set twice: the last counts, as in jansson). */
static void same(const tv_t *t, const json_t *j) {
  switch (json_typeof(j)) {
    case JSON_OBJECT: {
      FUZZ_CHECK(t->type == TV_DICT);
      const char *k;
      json_t *v;
      size_t n = 0;
      json_object_foreach((json_t *)j, k, v) {
        const tv_t *u = tv_get(t, k);
        FUZZ_CHECK(u != NULL);
        same(u, v);
        n++;
      }
      FUZZ_CHECK(t->n >= n);
      return;
    }
    case JSON_ARRAY: {
      FUZZ_CHECK(t->type == TV_LIST && t->n == json_array_size(j));
      for (size_t i = 0; i < t->n; i++) same(t->u.items[i], json_array_get(j, i));
      return;
    }
    case JSON_STRING:
      FUZZ_CHECK(t->type == TV_STR && t->n == json_string_length(j) &&
                 !memcmp(t->u.s, json_string_value(j), t->n));
      return;
    case JSON_INTEGER: FUZZ_CHECK(t->type == TV_INT && t->u.i == json_integer_value(j)); return;
    case JSON_REAL: FUZZ_CHECK(t->type == TV_REAL && t->u.d == json_real_value(j)); return;
    case JSON_TRUE: FUZZ_CHECK(t->type == TV_TRUE); return;
    case JSON_FALSE: FUZZ_CHECK(t->type == TV_FALSE); return;
    case JSON_NULL: FUZZ_CHECK(t->type == TV_NULL); return;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = tr_xmalloc(size + 1);
  memcpy(buf, data, size);
  buf[size] = '\0';
  tv_arena_t a = {0};
  tv_t *t = tv_parse_json(&a, buf, size);
  json_error_t err;
  json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, &err);
  if (t) {
    FUZZ_CHECK(j != NULL); /* accepted only what jansson accepts */
    same(t, j);
  } else if (j) {
    /* refused what jansson takes: only past its nesting limit, or text
     * after a NUL byte (jansson stops reading at one; it is no JSON) */
    FUZZ_CHECK(depth_of(j) > 64 || memchr(data, 0, size) != NULL);
  }
  json_decref(j);
  tv_arena_free(&a);
  free(buf);
  return 0;
}
