/*
 * fuzz_pickle.c - ftcomm-trace's pickle reader (recorder/tools/ftcomm-trace/
 * pickle.c) and the PyTorch Flight Recorder mapping over what it reads: the
 * files PyTorch writes on a timeout, which a user points the analyzer at,
 * possibly cut short by the crash that made them, or not a dump at all.
 *
 * Input: one file's bytes.
 *
 * Checks: a refused pickle says why; an accepted one is a finite tree (a
 * walk over every value ends); the same bytes as a dump are read or refused
 * with a reason, and a dump read is analyzed and printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "pickle.h"
#include "trace.h"

static FILE *devnull;

/* Values in t, counting shared ones each time they are met (bounded: the
 * reader caps nesting, and sharing at most squares a small input). */
static size_t count(const tv_t *t, int depth) {
  FUZZ_CHECK(depth <= TR_PICKLE_MAX_DEPTH);
  size_t n = 1;
  if (t->type == TV_LIST)
    for (uint32_t i = 0; i < t->n && n < 1000000; i++) n += count(t->u.items[i], depth + 1);
  if (t->type == TV_DICT)
    for (uint32_t i = 0; i < t->n && n < 1000000; i++) {
      FUZZ_CHECK(t->u.kv[i].k != NULL);
      n += count(t->u.kv[i].v, depth + 1);
    }
  if (t->type == TV_STR) FUZZ_CHECK(t->u.s[t->n] == '\0' && tv_utf8(t->u.s, t->n));
  return n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  devnull = fopen("/dev/null", "w");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char why[512] = "";
  tv_arena_t a = {0};
  tv_t *t = tr_pickle_load(&a, data, size, why, sizeof(why));
  if (!t) FUZZ_CHECK(why[0] != '\0');
  else FUZZ_CHECK(count(t, 0) >= 1);
  tv_arena_free(&a);
  tr_set_t set = {.d = tr_xcalloc(1, sizeof(tr_dump_t))};
  why[0] = '\0';
  int rc = tr_parse_pytorch_pickle(data, size, 0, set.d, why, sizeof(why));
  FUZZ_CHECK(rc == 0 || rc == -1);
  if (rc < 0) FUZZ_CHECK(why[0] != '\0');
  set.nd = 1;
  if (rc == 0) {
    set.d->path = tr_xstrndup("fuzz/rank_0", 11);
    set.d->file = set.d->path + 5;
    tr_report_t rep;
    tr_analyze(&set, &rep);
    tr_print_text(devnull, &set, &rep, 1);
    tr_print_json(devnull, &set, &rep);
    tr_report_free(&rep);
  }
  tr_set_free(&set);
  return 0;
}
