/*
 * fuzz_trace.c - ftcomm-trace's dump readers (recorder/tools/ftcomm-trace/
 * parse_ftcomm.c, the fast reader of the flight recorder's own format, and
 * parse_pytorch.c, jansson over PyTorch's NCCL flight-recorder JSON) and
 * the analysis and reports over what they read: the files a user points
 * the analyzer at after an incident, possibly cut short by a crash.
 *
 * Input: one or more dumps separated by a line "#NEXT#" (a set of ranks'
 * dumps, so the analyzer compares them), each read the way the loader
 * reads a file: NUL-terminated, the fast reader first, then jansson if it
 * is not ours.
 *
 * A part may also be a coordinator's incident record (incident.json,
 * incident.c): the last one read explains the set's missing dumps.
 *
 * Checks: a refused dump or record says why; every usable dump is analyzed
 * and printed as text, JSON and HTML without a fault, in bounded time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "trace.h"

#define MAX_DUMPS 8
static const char sep[] = "\n#NEXT#\n";
static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  devnull = fopen("/dev/null", "w");
  return 0;
}

/* The loader's load_one, on bytes instead of a file: 1 a dump, 0 not. */
static int load(const uint8_t *p, size_t n, int idx, tr_dump_t *d) {
  char why[512] = "";
  char *buf = tr_xmalloc(n + 1);
  memcpy(buf, p, n);
  buf[n] = '\0';
  memset(d, 0, sizeof(*d));
  int rc = tr_parse_ftcomm(buf, n, d, why, sizeof(why));
  int ok = 0;
  tr_set_t one = {.d = d, .nd = 1};
  if (rc == 1) {
    /* not ours: the fast reader may have unescaped in place, so again */
    tr_set_t tmp = one;
    tmp.d = tr_xcalloc(1, sizeof(tr_dump_t));
    *tmp.d = *d;
    tr_set_free(&tmp); /* frees what the fast reader kept */
    memset(d, 0, sizeof(*d));
    memcpy(buf, p, n);
    buf[n] = '\0';
    rc = tr_parse_pytorch(buf, n, idx, d, why, sizeof(why));
  }
  if (rc < 0) FUZZ_CHECK(why[0] != '\0');
  if (rc == 0 && d->rank >= 0) {
    char path[64];
    snprintf(path, sizeof(path), "fuzz/rank-%d.json", idx);
    d->path = tr_xstrndup(path, strlen(path));
    d->file = strrchr(d->path, '/') + 1;
    ok = 1;
  } else {
    tr_set_t tmp = {.d = tr_xcalloc(1, sizeof(tr_dump_t)), .nd = 1};
    *tmp.d = *d;
    tr_set_free(&tmp);
    memset(d, 0, sizeof(*d));
  }
  free(buf);
  (void)one;
  return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tr_set_t set = {.d = tr_xcalloc(MAX_DUMPS, sizeof(tr_dump_t))};
  tr_incident_t *inc = NULL;
  const uint8_t *p = data, *end = data + size;
  for (int i = 0; i < MAX_DUMPS && p <= end; i++) {
    const uint8_t *q = memmem(p, (size_t)(end - p), sep, sizeof(sep) - 1);
    size_t n = q ? (size_t)(q - p) : (size_t)(end - p);
    char why[256] = "";
    tr_incident_t *x = tr_incident_parse((const char *)p, n, why, sizeof(why));
    if (x) {
      tr_incident_free(inc);
      inc = x;
    } else {
      FUZZ_CHECK(why[0] != '\0');
    }
    if (load(p, n, i, &set.d[set.nd])) set.nd++;
    if (!q) break;
    p = q + sizeof(sep) - 1;
  }
  if (set.nd > 0) {
    tr_report_t rep;
    tr_analyze(&set, &rep);
    FUZZ_CHECK(rep.exit_status == TR_EXIT_HEALTHY || rep.exit_status == TR_EXIT_FINDING ||
               rep.exit_status == TR_EXIT_UNUSABLE);
    if (inc) {
      rep.incident = inc;
      tr_incident_explain(inc, &rep);
    }
    tr_print_text(devnull, &set, &rep, 1);
    tr_print_json(devnull, &set, &rep);
    FUZZ_CHECK(tr_write_html("/dev/null", &set, &rep) == 0);
    tr_report_free(&rep);
  }
  if (inc) tr_incident_print_text(devnull, inc);
  tr_incident_free(inc);
  tr_set_free(&set);
  return 0;
}
