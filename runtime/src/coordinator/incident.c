/*
 * incident.c - the coordinator's record of an incident, incident.json
 * (incident.h; the format: docs/dump-format.md, "The incident record").
 *
 * A rank's entry moves from "asked" to "answered" (its dump is stored), or
 * to "lost" (the coordinator dropped it before its dump came: crashed,
 * hung, lost, left), or "no_answer" (still nothing FTC__INCIDENT_ANSWER_MS
 * after the request, or when the coordinator stopped); a late answer still
 * makes it "answered". "not_asked": it had no session at the request.
 */
#include "coordinator/incident.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_log.h"
#include "ftc_time.h"

enum { R_ASKED, R_ANSWERED, R_LOST, R_NO_ANSWER, R_NOT_ASKED };
static const char *const state_words[] = {"asked", "answered", "lost", "no_answer", "not_asked"};

typedef struct inc_rank {
  int rank, slot;
  uint64_t member_id;
  char host[64];
  int state;
  int asked;
  char why[16];      /* lost: the drop's word; no_answer, not_asked: a word too */
  char detail[256];
  char file[96];     /* answered: the stored file's name */
  int64_t answered_ms; /* after the request */
} inc_rank_t;

typedef struct inc_drop {
  int rank, slot;
  uint64_t member_id;
  char reason[16];
  char detail[256];
} inc_drop_t;

struct ftc__incident {
  char *dir;  /* DIR/<incident> */
  char *job, *name, *reason;
  uint64_t epoch, next_epoch; /* next_epoch 0: none announced yet */
  int silent_rank, silent_slot;
  int64_t t_mono, t_wall;
  inc_rank_t *r;
  int nr, capr;
  inc_drop_t *d;
  int nd, capd;
  int waiting; /* ranks in R_ASKED */
  int dirty;   /* changed since the last write (ftc__incident_mark) */
};

ftc__incident_t *ftc__incident_new(const char *dump_dir, const char *job, const char *name,
                                   uint64_t epoch, const char *reason, int silent_rank,
                                   int silent_slot) {
  ftc__incident_t *inc = ftc__calloc(1, sizeof(*inc));
  if (!inc) return NULL;
  size_t dl = strlen(dump_dir) + strlen(name) + 2;
  inc->dir = ftc__malloc(dl);
  inc->job = ftc__strdup(job ? job : "");
  inc->name = ftc__strdup(name);
  inc->reason = ftc__strdup(reason ? reason : "");
  if (!inc->dir || !inc->job || !inc->name || !inc->reason) {
    ftc__incident_free(inc);
    return NULL;
  }
  snprintf(inc->dir, dl, "%s/%s", dump_dir, name);
  inc->epoch = epoch;
  inc->silent_rank = silent_rank;
  inc->silent_slot = silent_slot;
  inc->t_mono = ftc__now_ns();
  inc->t_wall = ftc__wall_ns();
  return inc;
}

void ftc__incident_free(ftc__incident_t *inc) {
  if (!inc) return;
  ftc__free(inc->dir);
  ftc__free(inc->job);
  ftc__free(inc->name);
  ftc__free(inc->reason);
  ftc__free(inc->r);
  ftc__free(inc->d);
  ftc__free(inc);
}

const char *ftc__incident_name(const ftc__incident_t *inc) { return inc->name; }
uint64_t ftc__incident_epoch(const ftc__incident_t *inc) { return inc->epoch; }

void ftc__incident_add(ftc__incident_t *inc, int rank, int slot, uint64_t member_id,
                       const char *host, int asked, const char *why_not) {
  if (inc->nr == inc->capr) {
    int ncap = inc->capr ? 2 * inc->capr : 16;
    inc_rank_t *nr = ftc__realloc(inc->r, (size_t)ncap * sizeof(*nr));
    if (!nr) return; /* out of memory: the rank is not listed */
    inc->r = nr, inc->capr = ncap;
  }
  inc_rank_t *x = &inc->r[inc->nr++];
  memset(x, 0, sizeof(*x));
  x->rank = rank;
  x->slot = slot;
  x->member_id = member_id;
  snprintf(x->host, sizeof(x->host), "%s", host ? host : "");
  x->state = asked ? R_ASKED : R_NOT_ASKED;
  x->asked = asked != 0;
  inc->waiting += asked != 0;
  if (!asked) {
    snprintf(x->why, sizeof(x->why), "no_session");
    snprintf(x->detail, sizeof(x->detail), "%s", why_not ? why_not : "");
  }
}

/* Ranks are listed in rank order: rank `hint` is looked at first. */
static inc_rank_t *by_member_at(ftc__incident_t *inc, int hint, uint64_t member_id) {
  if (hint >= 0 && hint < inc->nr && inc->r[hint].member_id == member_id) return &inc->r[hint];
  for (int i = 0; i < inc->nr; i++)
    if (inc->r[i].member_id == member_id) return &inc->r[i];
  return NULL;
}

static inc_rank_t *by_member(ftc__incident_t *inc, uint64_t member_id) {
  return by_member_at(inc, -1, member_id);
}

/* x leaves R_ASKED for `state`. */
static void settle(ftc__incident_t *inc, inc_rank_t *x, int state) {
  if (x->state == R_ASKED) inc->waiting--;
  x->state = state;
}

void ftc__incident_answered(ftc__incident_t *inc, int rank, uint64_t member_id, const char *file) {
  inc_rank_t *x = by_member_at(inc, rank, member_id);
  if (!x || x->state == R_ANSWERED) return; /* a later copy: the first one counts */
  settle(inc, x, R_ANSWERED);
  x->why[0] = x->detail[0] = '\0';
  snprintf(x->file, sizeof(x->file), "%s", file);
  x->answered_ms = (ftc__now_ns() - inc->t_mono) / 1000000;
}

int ftc__incident_dropped(ftc__incident_t *inc, uint64_t member_id, const char *word,
                          const char *detail, int in_epoch) {
  inc_rank_t *x = by_member(inc, member_id);
  if (!x) return 0;
  int changed = 0;
  if (x->state == R_ASKED || x->state == R_NO_ANSWER || (in_epoch && x->state == R_NOT_ASKED)) {
    changed = 1;
    settle(inc, x, R_LOST);
    snprintf(x->why, sizeof(x->why), "%s", word);
    snprintf(x->detail, sizeof(x->detail), "%s", detail ? detail : "");
  }
  if (!in_epoch) return changed;
  if (inc->nd == inc->capd) {
    int ncap = inc->capd ? 2 * inc->capd : 8;
    inc_drop_t *nd = ftc__realloc(inc->d, (size_t)ncap * sizeof(*nd));
    if (!nd) return changed;
    inc->d = nd, inc->capd = ncap;
  }
  inc_drop_t *d = &inc->d[inc->nd++];
  d->rank = x->rank;
  d->slot = x->slot;
  d->member_id = member_id;
  snprintf(d->reason, sizeof(d->reason), "%s", word);
  snprintf(d->detail, sizeof(d->detail), "%s", detail ? detail : "");
  return 1;
}

void ftc__incident_next_epoch(ftc__incident_t *inc, uint64_t next) {
  if (!inc->next_epoch) inc->next_epoch = next;
}

int ftc__incident_check(ftc__incident_t *inc, int64_t now_ns) {
  if ((now_ns - inc->t_mono) / 1000000 < FTC__INCIDENT_ANSWER_MS) return 0;
  int changed = 0;
  for (int i = 0; i < inc->nr; i++) {
    inc_rank_t *x = &inc->r[i];
    if (x->state != R_ASKED) continue;
    settle(inc, x, R_NO_ANSWER);
    snprintf(x->why, sizeof(x->why), "no_answer");
    snprintf(x->detail, sizeof(x->detail),
             "no dump within %d ms of the request while its session stayed open",
             FTC__INCIDENT_ANSWER_MS);
    changed = 1;
  }
  return changed;
}

int ftc__incident_waiting(const ftc__incident_t *inc) { return inc->waiting; }

void ftc__incident_mark(ftc__incident_t *inc) { inc->dirty = 1; }

int ftc__incident_flush(ftc__incident_t *inc) { return inc->dirty ? ftc__incident_write(inc) : 0; }

void ftc__incident_close(ftc__incident_t *inc) {
  long long ms = (long long)((ftc__now_ns() - inc->t_mono) / 1000000);
  for (int i = 0; i < inc->nr; i++) {
    inc_rank_t *x = &inc->r[i];
    if (x->state != R_ASKED) continue;
    settle(inc, x, R_NO_ANSWER);
    snprintf(x->why, sizeof(x->why), "no_answer");
    snprintf(x->detail, sizeof(x->detail),
             "no dump before the coordinator stopped, %lld ms after the request", ms);
  }
}

static void iso_time(int64_t wall_ns, char *buf, size_t len) {
  time_t s = (time_t)(wall_ns / 1000000000LL);
  struct tm tm;
  gmtime_r(&s, &tm);
  char sec[32];
  strftime(sec, sizeof(sec), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, len, "%s.%03dZ", sec, (int)(wall_ns % 1000000000LL / 1000000));
}

static json_t *to_json(const ftc__incident_t *inc) {
  char t[64], u[64];
  iso_time(inc->t_wall, t, sizeof(t));
  iso_time(ftc__wall_ns(), u, sizeof(u));
  json_t *ranks = json_array(), *dropped = json_array();
  int answered = 0;
  for (int i = 0; ranks && i < inc->nr; i++) {
    const inc_rank_t *x = &inc->r[i];
    json_t *o = json_pack("{s:i, s:i, s:I, s:s, s:b, s:s}", "rank", x->rank, "slot", x->slot,
                          "member_id", (json_int_t)x->member_id, "host", x->host, "asked",
                          x->asked, "state", state_words[x->state]);
    if (o && x->state == R_ANSWERED) {
      answered++;
      json_object_set_new(o, "file", json_string(x->file));
      json_object_set_new(o, "answered_after_ms", json_integer(x->answered_ms));
    } else if (o) {
      if (x->why[0]) json_object_set_new(o, "why", json_string(x->why));
      if (x->detail[0]) json_object_set_new(o, "detail", json_string(x->detail));
    }
    if (!o || json_array_append_new(ranks, o)) {
      json_decref(ranks);
      ranks = NULL;
    }
  }
  for (int i = 0; dropped && i < inc->nd; i++) {
    const inc_drop_t *d = &inc->d[i];
    json_t *o = json_pack("{s:i, s:i, s:I, s:s, s:s}", "rank", d->rank, "slot", d->slot,
                          "member_id", (json_int_t)d->member_id, "reason", d->reason, "detail",
                          d->detail);
    if (!o || json_array_append_new(dropped, o)) {
      json_decref(dropped);
      dropped = NULL;
    }
  }
  if (!ranks || !dropped) {
    json_decref(ranks);
    json_decref(dropped);
    return NULL;
  }
  json_t *silent = inc->silent_rank >= 0
                       ? json_pack("{s:i, s:i}", "rank", inc->silent_rank, "slot", inc->silent_slot)
                       : json_null();
  json_t *next = inc->next_epoch ? json_integer((json_int_t)inc->next_epoch) : json_null();
  return json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:o, s:s, s:I, s:s, s:i, s:i, s:b, s:o, s:{s:b, s:o, s:o}}",
                   "format", "ftcomm-incident", "version", "1.0", "job", inc->job, "incident",
                   inc->name, "epoch", (json_int_t)inc->epoch, "reason", inc->reason, "silent",
                   silent, "requested_time", t, "requested_time_ns", (json_int_t)inc->t_wall,
                   "updated_time", u, "asked", inc->nr, "answered", answered, "complete",
                   answered == inc->nr, "ranks", ranks, "verdict", "decided",
                   inc->next_epoch != 0, "next_epoch", next, "dropped", dropped);
}

int ftc__incident_write(ftc__incident_t *inc) {
  char tmp[4200], path[4200];
  inc->dirty = 0;
  const char *what = "encoding it";
  json_t *j = to_json(inc);
  if (!j) goto out_log;
  what = inc->dir;
  if (mkdir(inc->dir, 0755) && errno != EEXIST) goto out_log_errno;
  snprintf(tmp, sizeof(tmp), "%s/.incident.json.tmp", inc->dir);
  snprintf(path, sizeof(path), "%s/incident.json", inc->dir);
  if (json_dump_file(j, tmp, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0) goto out_log_errno;
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    errno = e;
    goto out_log_errno;
  }
  json_decref(j);
  return 0;
out_log_errno:
  FTC_ERROR(FTC_SUB_COORD, "job %s: cannot write the record of incident %s (%s): %s", inc->job,
            inc->name, what, strerror(errno));
  json_decref(j);
  return -1;
out_log:
  FTC_ERROR(FTC_SUB_COORD, "job %s: cannot write the record of incident %s: out of memory %s",
            inc->job, inc->name, what);
  return -1;
}
