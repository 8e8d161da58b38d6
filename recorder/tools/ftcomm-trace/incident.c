/*
 * incident.c - ftcomm-trace reads the coordinator's incident record,
 * DIR/incident.json (docs/dump-format.md, "The incident record"): which
 * ranks it asked for a dump, which answered, which could not and why, and
 * whom it dropped. With it a missing dump says why ("rank 2: hung, its dump
 * request unanswered") instead of only "no dump", and a folder whose dumps
 * carry no verdict yet still gets the coordinator's.
 */
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ftc_alloc.h"
#include "trace.h"

typedef struct tr_inc_rank {
  int rank, slot;
  int asked;
  char state[16];   /* asked, answered, lost, no_answer, not_asked */
  char why[32];
  char detail[256];
  char file[128];
  long long after_ms;
} tr_inc_rank_t;

struct tr_incident {
  char name[128];
  char reason[256];
  long long epoch, next_epoch; /* next_epoch -1: none announced */
  int silent_rank;
  tr_inc_rank_t *r;
  size_t nr;
  tr_inc_rank_t *dropped; /* rank, slot, why (the reason word), detail */
  size_t ndropped;
};

/* Cut a UTF-8 sequence that a truncation left incomplete at the end of s:
 * the fields below are copied into fixed buffers, and a string cut inside
 * a character is no JSON string (--json would lose the whole record, and
 * the headline that names its ranks). */
static void utf8_trim(char *s) {
  size_t n = strlen(s), k = n;
  while (k > 0 && n - k < 4 && ((unsigned char)s[k - 1] & 0xC0) == 0x80) k--;
  if (k == 0) return;
  unsigned char lead = (unsigned char)s[k - 1];
  size_t want = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3
              : (lead & 0xF8) == 0xF0 ? 4 : 0;
  if (want && n - (k - 1) < want) s[k - 1] = '\0';
}

static void copy_str(char *dst, size_t len, json_t *v) {
  snprintf(dst, len, "%s", json_is_string(v) ? json_string_value(v) : "");
  utf8_trim(dst);
}

static long long int_or(json_t *v, long long def) {
  return json_is_integer(v) ? (long long)json_integer_value(v) : def;
}

/* One entry of "ranks" or "verdict.dropped". -1: not an object with a rank. */
static int parse_rank(json_t *o, tr_inc_rank_t *x, int dropped) {
  if (!json_is_object(o) || !json_is_integer(json_object_get(o, "rank"))) return -1;
  /* Range-checked before the cast: 4294967298 is no rank 2. */
  long long rank = int_or(json_object_get(o, "rank"), -1), slot = int_or(json_object_get(o, "slot"), -1);
  if (rank < 0 || rank >= TR_MAX_RANKS) return -1;
  memset(x, 0, sizeof(*x));
  x->rank = (int)rank;
  x->slot = slot >= 0 && slot <= INT_MAX ? (int)slot : -1;
  x->asked = json_is_true(json_object_get(o, "asked"));
  copy_str(x->state, sizeof(x->state), json_object_get(o, "state"));
  copy_str(x->why, sizeof(x->why), json_object_get(o, dropped ? "reason" : "why"));
  copy_str(x->detail, sizeof(x->detail), json_object_get(o, "detail"));
  copy_str(x->file, sizeof(x->file), json_object_get(o, "file"));
  x->after_ms = int_or(json_object_get(o, "answered_after_ms"), -1);
  return 0;
}

static tr_inc_rank_t *parse_list(json_t *a, size_t *n, int dropped) {
  *n = 0;
  if (!json_is_array(a) || json_array_size(a) == 0) return NULL;
  tr_inc_rank_t *v = tr_xcalloc(json_array_size(a), sizeof(*v));
  size_t i;
  json_t *o;
  json_array_foreach(a, i, o) if (parse_rank(o, &v[*n], dropped) == 0)(*n)++;
  return v;
}

/* The record in j (not consumed); NULL with why filled when it is none. */
static tr_incident_t *from_json(json_t *j, char *why, size_t whylen) {
  if (!json_is_object(j) || !json_is_string(json_object_get(j, "format")) ||
      strcmp(json_string_value(json_object_get(j, "format")), "ftcomm-incident")) {
    snprintf(why, whylen, "not an ftcomm incident record (\"format\" is not \"ftcomm-incident\")");
    return NULL;
  }
  tr_incident_t *inc = tr_xcalloc(1, sizeof(*inc));
  copy_str(inc->name, sizeof(inc->name), json_object_get(j, "incident"));
  copy_str(inc->reason, sizeof(inc->reason), json_object_get(j, "reason"));
  inc->epoch = int_or(json_object_get(j, "epoch"), -1);
  json_t *silent = json_object_get(j, "silent");
  long long sr = json_is_object(silent) ? int_or(json_object_get(silent, "rank"), -1) : -1;
  inc->silent_rank = sr >= 0 && sr < TR_MAX_RANKS ? (int)sr : -1;
  inc->r = parse_list(json_object_get(j, "ranks"), &inc->nr, 0);
  json_t *v = json_object_get(j, "verdict");
  inc->next_epoch = int_or(json_object_get(v, "next_epoch"), -1);
  inc->dropped = parse_list(json_object_get(v, "dropped"), &inc->ndropped, 1);
  return inc;
}

tr_incident_t *tr_incident_parse(const char *buf, size_t len, char *why, size_t whylen) {
  json_error_t err;
  json_t *j = json_loadb(buf, len, 0, &err);
  if (!j) {
    snprintf(why, whylen, "%s", err.text);
    return NULL;
  }
  tr_incident_t *inc = from_json(j, why, whylen);
  json_decref(j);
  return inc;
}

tr_incident_t *tr_incident_load(const char *dir, tr_set_t *set) {
  char path[4096], why[256];
  snprintf(path, sizeof(path), "%s/incident.json", dir);
  /* It is no dump: the loader listed it as a file it could not use. */
  for (size_t i = 0; i < set->nbad; i++) {
    if (strcmp(set->bad[i].file, "incident.json")) continue;
    ftc__free(set->bad[i].path);
    set->bad[i] = set->bad[--set->nbad];
    break;
  }
  if (access(path, F_OK) != 0) return NULL; /* a folder of dumps without a record */
  json_error_t err;
  json_t *j = json_load_file(path, 0, &err);
  tr_incident_t *inc = j ? from_json(j, why, sizeof(why)) : NULL;
  if (!inc)
    fprintf(stderr, "ftcomm-trace: %s: %s; the incident record is left aside\n", path,
            j ? why : err.text);
  json_decref(j);
  return inc;
}

void tr_incident_free(tr_incident_t *inc) {
  if (!inc) return;
  ftc__free(inc->r);
  ftc__free(inc->dropped);
  ftc__free(inc);
}

static const tr_inc_rank_t *rank_of(const tr_incident_t *inc, int rank) {
  for (size_t i = 0; i < inc->nr; i++)
    if (inc->r[i].rank == rank) return &inc->r[i];
  return NULL;
}

/* Why rank x has no dump, in a few words. */
static void why_missing(const tr_inc_rank_t *x, char *buf, size_t len) {
  if (!strcmp(x->state, "lost"))
    snprintf(buf, len, "%s (%s), dropped by the coordinator %s", x->why, x->detail,
             x->asked ? "before its dump came" : "before the dumps were asked for");
  else if (!strcmp(x->state, "no_answer"))
    snprintf(buf, len, "asked, no answer (%s)", x->detail);
  else if (!strcmp(x->state, "not_asked"))
    snprintf(buf, len, "not asked (%s)", x->detail);
  else if (!strcmp(x->state, "asked"))
    snprintf(buf, len, "asked, no answer yet");
  else if (!strcmp(x->state, "answered"))
    snprintf(buf, len, "it answered (%s) but that file is not usable here", x->file);
  else
    snprintf(buf, len, "%s", x->state);
}

void tr_incident_explain(const tr_incident_t *inc, tr_report_t *rep) {
  char *h = rep->headline;
  size_t hl = sizeof(rep->headline), off = strlen(h);
  int said = 0;
  for (size_t i = 0; i < rep->nmissing && off < hl; i++) {
    const tr_inc_rank_t *x = rank_of(inc, rep->missing[i]);
    if (!x) continue;
    char why[600];
    why_missing(x, why, sizeof(why));
    off += (size_t)snprintf(h + off, hl - off, "%s rank %d's dump: %s", said ? ";" : "; incident.json:",
                            x->rank, why);
    said = 1;
  }
  /* The dumps carry no decided verdict (they were written before it): the
   * record's drops are the coordinator's word. */
  if (rep->verdict.agreement != TR_AGREE_NONE || off >= hl) {
    utf8_trim(h);
    return;
  }
  for (size_t i = 0; i < inc->ndropped && off < hl; i++) {
    const tr_inc_rank_t *d = &inc->dropped[i];
    if (!strcmp(d->why, "left")) continue;
    int missing = 0;
    for (size_t k = 0; k < rep->nmissing; k++) missing |= rep->missing[k] == d->rank;
    if (missing) continue; /* said above */
    const tr_inc_rank_t *x = rank_of(inc, d->rank);
    if (x && !strcmp(x->state, "answered")) continue; /* dropped after it answered: the job's end */
    off += (size_t)snprintf(h + off, hl - off, "; the coordinator dropped rank %d: %s (%s)", d->rank,
                            d->why, d->detail);
  }
  utf8_trim(h); /* the headline may have been cut at its end */
}

void tr_incident_print_text(FILE *out, const tr_incident_t *inc) {
  size_t answered = 0;
  for (size_t i = 0; i < inc->nr; i++) answered += !strcmp(inc->r[i].state, "answered");
  fprintf(out, "incident: %s (%s), epoch %lld: %zu of %zu ranks answered", inc->name, inc->reason,
          inc->epoch, answered, inc->nr);
  if (inc->next_epoch >= 0) fprintf(out, "; the coordinator announced epoch %lld", inc->next_epoch);
  else fprintf(out, "; no later epoch announced");
  fprintf(out, "\n");
  for (size_t i = 0; i < inc->nr; i++) {
    const tr_inc_rank_t *x = &inc->r[i];
    if (!strcmp(x->state, "answered")) {
      fprintf(out, "  rank %-5d answered: %s, %lld ms after the request\n", x->rank, x->file, x->after_ms);
    } else {
      char why[600];
      why_missing(x, why, sizeof(why));
      fprintf(out, "  rank %-5d no dump: %s\n", x->rank, why);
    }
  }
  for (size_t i = 0; i < inc->ndropped; i++)
    fprintf(out, "  dropped: rank %d (slot %d) %s: %s\n", inc->dropped[i].rank, inc->dropped[i].slot,
            inc->dropped[i].why, inc->dropped[i].detail);
}

void *tr_incident_json(const tr_incident_t *inc) {
  json_t *ranks = json_array(), *dropped = json_array();
  for (size_t i = 0; i < inc->nr; i++) {
    const tr_inc_rank_t *x = &inc->r[i];
    json_t *o = json_pack("{s:i, s:i, s:b, s:s}", "rank", x->rank, "slot", x->slot, "asked", x->asked,
                          "state", x->state);
    if (!strcmp(x->state, "answered")) {
      json_object_set_new(o, "file", json_string(x->file));
    } else {
      char why[600];
      why_missing(x, why, sizeof(why));
      json_object_set_new(o, "why", json_string(x->why));
      json_object_set_new(o, "missing", json_string(why));
    }
    json_array_append_new(ranks, o);
  }
  for (size_t i = 0; i < inc->ndropped; i++)
    json_array_append_new(dropped, json_pack("{s:i, s:i, s:s, s:s}", "rank", inc->dropped[i].rank,
                                             "slot", inc->dropped[i].slot, "reason",
                                             inc->dropped[i].why, "detail", inc->dropped[i].detail));
  json_t *next = inc->next_epoch >= 0 ? json_integer(inc->next_epoch) : json_null();
  return json_pack("{s:s, s:s, s:I, s:o, s:o, s:o}", "name", inc->name, "reason", inc->reason,
                   "epoch", (json_int_t)inc->epoch, "next_epoch", next, "ranks", ranks, "dropped",
                   dropped);
}
