/*
 * test_retention.c - the dump volume's retention on a temporary folder,
 * without a server: a deleted job's folder is marked, then removed once the
 * ttl has passed; a live job's folder stays (and loses a marker left from
 * an earlier deletion); in the folder of a job re-created under the same
 * name only the earlier job's incidents go (by .job-uid, or by time when an
 * incident has none); links are never followed, anywhere; names that are
 * not namespaces or job names are left alone; only the watched namespace is
 * swept; a lookup that cannot tell leaves the folder alone; removal goes in
 * slices with no hold held between them, and a sweep stopped between two
 * leaves trash that the next one empties; the per-job count; the duration
 * flag.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "ftc_error.h"
#include "options.h"
#include "retention.h"

#define NOW 1800000000LL /* 2027-01-15 */
#define TTL 3600LL

/* The jobs that exist, as "ns/name=uid@created" lines; "ns/name=?" cannot tell. */
typedef struct world {
  const char *jobs[8];
  int lookups, holds, held, max_held;
  char looked_up[1024];
  int yields, stop_at;  /* yield: calls so far; the call that says stop (0: none) */
  const char *vol;      /* for the yield's checks */
  int gone_at_yield;    /* the folder being removed had left its name at every yield */
} world_t;

static int yield(void *ud) {
  world_t *w = ud;
  w->yields++;
  assert_int_equal(w->held, 0); /* a reconcile may make a job's folder meanwhile */
  char p[PATH_MAX + 16];
  struct stat sb;
  snprintf(p, sizeof p, "%s/ml/gone", w->vol);
  if (lstat(p, &sb) == 0) w->gone_at_yield = 0;
  return w->stop_at && w->yields >= w->stop_at;
}

static int lookup(void *ud, const char *ns, const char *name, ftck_job_ref_t *ref) {
  world_t *w = ud;
  char key[512];
  snprintf(key, sizeof key, "%s/%s=", ns, name);
  w->lookups++;
  assert_int_equal(w->held, 1); /* always under hold */
  snprintf(w->looked_up + strlen(w->looked_up), sizeof w->looked_up - strlen(w->looked_up), "%s/%s ", ns, name);
  for (int i = 0; i < 8 && w->jobs[i]; i++) {
    if (strncmp(w->jobs[i], key, strlen(key)) != 0) continue;
    const char *v = w->jobs[i] + strlen(key);
    if (!strcmp(v, "?")) return -1;
    const char *at = strchr(v, '@');
    snprintf(ref->uid, sizeof ref->uid, "%.*s", (int)(at - v), v);
    ref->created_s = strtoll(at + 1, NULL, 10);
    return 1;
  }
  return 0;
}

static void hold(void *ud, int on) {
  world_t *w = ud;
  w->held += on ? 1 : -1;
  assert_in_range(w->held, 0, 1);
  if (on) w->holds++;
}

typedef struct fixture {
  char vol[PATH_MAX], outside[PATH_MAX];
  world_t w;
} fixture_t;

static int setup(void **state) {
  fixture_t *fx = calloc(1, sizeof *fx);
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(fx->vol, sizeof fx->vol, "%s/ftck-retention.XXXXXX", tmp);
  assert_non_null(mkdtemp(fx->vol));
  snprintf(fx->outside, sizeof fx->outside, "%s/ftck-outside.XXXXXX", tmp);
  assert_non_null(mkdtemp(fx->outside));
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture_t *fx = *state;
  char cmd[2 * PATH_MAX + 32];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", fx->vol, fx->outside);
  assert_int_equal(system(cmd), 0);
  free(fx);
  return 0;
}

/* path relative to the volume (or absolute) */
static const char *at(fixture_t *fx, const char *rel, char *buf, size_t n) {
  if (rel[0] == '/') snprintf(buf, n, "%s", rel);
  else snprintf(buf, n, "%s/%s", fx->vol, rel);
  return buf;
}

static void mkdirs(fixture_t *fx, const char *rel) {
  char p[2 * PATH_MAX], cmd[2 * PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", at(fx, rel, p, sizeof p));
  assert_int_equal(system(cmd), 0);
}

static void put(fixture_t *fx, const char *rel, const char *text) {
  char p[2 * PATH_MAX];
  FILE *f = fopen(at(fx, rel, p, sizeof p), "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void link_to(fixture_t *fx, const char *target, const char *rel) {
  char p[2 * PATH_MAX];
  assert_int_equal(symlink(target, at(fx, rel, p, sizeof p)), 0);
}

static void set_mtime(fixture_t *fx, const char *rel, int64_t t) {
  char p[2 * PATH_MAX];
  struct timeval tv[2] = {{.tv_sec = (time_t)t}, {.tv_sec = (time_t)t}};
  assert_int_equal(utimes(at(fx, rel, p, sizeof p), tv), 0);
}

static int exists(fixture_t *fx, const char *rel) {
  char p[2 * PATH_MAX];
  struct stat sb;
  return lstat(at(fx, rel, p, sizeof p), &sb) == 0;
}

/* Each path (relative to the volume, or absolute) of the NULL-terminated
 * list exists (want 1) or does not. */
static void expect_exist(fixture_t *fx, int want, const char *rel, va_list ap) {
  for (; rel; rel = va_arg(ap, const char *))
    if (exists(fx, rel) != want) fail_msg("%s %s", rel, want ? "is gone" : "is still there");
}
static void expect_there(fixture_t *fx, const char *rel, ...) {
  va_list ap;
  va_start(ap, rel);
  expect_exist(fx, 1, rel, ap);
  va_end(ap);
}
static void expect_gone(fixture_t *fx, const char *rel, ...) {
  va_list ap;
  va_start(ap, rel);
  expect_exist(fx, 0, rel, ap);
  va_end(ap);
}

static void read_text(fixture_t *fx, const char *rel, char *buf, size_t n) {
  char p[2 * PATH_MAX];
  FILE *f = fopen(at(fx, rel, p, sizeof p), "r");
  assert_non_null(f);
  size_t k = fread(buf, 1, n - 1, f);
  buf[k] = '\0';
  fclose(f);
}

static ftck_retention_result_t sweep_at(fixture_t *fx, int64_t now, const char *ns) {
  ftck_retention_opts_t o = {.volume = fx->vol, .ns = ns, .ttl_s = TTL, .now_s = now,
                             .lookup = lookup, .hold = hold, .ud = &fx->w, .quiet = 1};
  ftck_retention_result_t r;
  assert_int_equal(ftck_retention_sweep(&o, &r), FTC_OK);
  assert_int_equal(fx->w.held, 0);
  return r;
}

static void a_deleted_jobs_folder_goes_once_the_ttl_has_passed(void **state) {
  fixture_t *fx = *state;
  mkdirs(fx, "ml/gone/hang-e1-100");
  put(fx, "ml/gone/hang-e1-100/rank-0.json", "{}");
  mkdirs(fx, "ml/live/hang-e1-100");
  fx->w.jobs[0] = "ml/live=uid-live@1700000000";
  ftck_retention_result_t r = sweep_at(fx, NOW, NULL);
  assert_int_equal(r.waiting, 1);
  assert_int_equal(r.deleted, 0);
  char t[64];
  read_text(fx, "ml/gone/" FTCK_MARK_DELETED, t, sizeof t);
  assert_string_equal(t, "1800000000\n"); /* when it was first found gone */
  assert_false(exists(fx, "ml/live/" FTCK_MARK_DELETED));
  /* Not before the ttl, counted from the mark (not from now). */
  r = sweep_at(fx, NOW + TTL - 1, NULL);
  assert_int_equal(r.waiting, 1);
  assert_true(exists(fx, "ml/gone/hang-e1-100/rank-0.json"));
  r = sweep_at(fx, NOW + TTL, NULL);
  assert_int_equal(r.deleted, 1);
  assert_int_equal(r.waiting, 0);
  assert_false(exists(fx, "ml/gone"));
  assert_true(exists(fx, "ml/live/hang-e1-100"));
  /* The namespace folder goes with its last job folder. */
  fx->w.jobs[0] = NULL;
  sweep_at(fx, NOW + TTL, NULL);
  sweep_at(fx, NOW + 3 * TTL, NULL);
  assert_false(exists(fx, "ml"));
  assert_true(exists(fx, "."));
}

static void a_job_that_exists_again_keeps_its_folder(void **state) {
  fixture_t *fx = *state;
  mkdirs(fx, "ml/back/hang-e1-100");
  put(fx, "ml/back/" FTCK_MARK_DELETED, "1000\n"); /* gone long ago, by this mark */
  put(fx, "ml/back/hang-e1-100/" FTCK_MARK_JOB_UID, "uid-back\n");
  fx->w.jobs[0] = "ml/back=uid-back@1700000000";
  ftck_retention_result_t r = sweep_at(fx, NOW, NULL);
  assert_int_equal(r.deleted + r.stale + r.waiting, 0);
  assert_false(exists(fx, "ml/back/" FTCK_MARK_DELETED));
  assert_true(exists(fx, "ml/back/hang-e1-100"));
  /* Deleted again: the ttl counts from now, not from the old mark. */
  fx->w.jobs[0] = NULL;
  r = sweep_at(fx, NOW + 10, NULL);
  assert_int_equal(r.waiting, 1);
  assert_true(exists(fx, "ml/back/hang-e1-100"));
}

static void a_recreated_job_loses_only_the_earlier_jobs_incidents(void **state) {
  fixture_t *fx = *state;
  const int64_t created = NOW - TTL; /* the new job: exactly ttl old at NOW */
  const char *incs[] = {"old-stamped", "new-stamped", "old-unstamped", "skewed-unstamped", "new-unstamped"};
  for (int i = 0; i < 5; i++) {
    char rel[128];
    snprintf(rel, sizeof rel, "ml/llm/%s", incs[i]);
    mkdirs(fx, rel);
  }
  put(fx, "ml/llm/old-stamped/" FTCK_MARK_JOB_UID, "uid-1\n");
  put(fx, "ml/llm/new-stamped/" FTCK_MARK_JOB_UID, "uid-2\n");
  set_mtime(fx, "ml/llm/old-stamped", created + 500); /* the stamp, not the time, decides */
  set_mtime(fx, "ml/llm/new-stamped", created - 5000);
  set_mtime(fx, "ml/llm/old-unstamped", created - 61);
  set_mtime(fx, "ml/llm/skewed-unstamped", created - 59); /* within a minute: may be the new job's */
  set_mtime(fx, "ml/llm/new-unstamped", created + 10);
  fx->w.jobs[0] = "ml/llm=uid-2@1799996400";
  ftck_retention_result_t r = sweep_at(fx, NOW - 1, NULL); /* the new job is not ttl old yet */
  assert_int_equal(r.stale, 0);
  assert_true(exists(fx, "ml/llm/old-stamped"));
  r = sweep_at(fx, NOW, NULL);
  assert_int_equal(r.stale, 2);
  assert_int_equal(r.deleted, 0);
  expect_gone(fx, "ml/llm/old-stamped", "ml/llm/old-unstamped", NULL);
  expect_there(fx, "ml/llm/new-stamped", "ml/llm/skewed-unstamped", "ml/llm/new-unstamped", NULL);
}

static void links_are_never_followed(void **state) {
  fixture_t *fx = *state;
  char p[2 * PATH_MAX], o[2 * PATH_MAX];
  snprintf(o, sizeof o, "%s/precious", fx->outside);
  put(fx, o, "keep me\n");
  snprintf(o, sizeof o, "%s/ml/gone/hang-e1-1", fx->outside); /* looks like a job folder */
  mkdirs(fx, o);
  /* At every level of the volume. */
  link_to(fx, fx->outside, "evil");                      /* a namespace */
  mkdirs(fx, "ml/gone/hang-e1-1");
  link_to(fx, fx->outside, "ml/escape");                 /* a job */
  snprintf(p, sizeof p, "%s/ml", fx->outside);
  link_to(fx, p, "ml/gone/hang-link");                   /* an incident of a deleted job */
  snprintf(p, sizeof p, "%s/precious", fx->outside);
  link_to(fx, p, "ml/gone/hang-e1-1/rank-0.json");       /* a dump */
  mkdirs(fx, "ml/gone2");
  link_to(fx, p, "ml/gone2/" FTCK_MARK_DELETED);         /* the mark */
  mkdirs(fx, "ml/live");
  link_to(fx, fx->outside, "ml/live/hang-link");         /* an incident of a live job */
  fx->w.jobs[0] = "ml/live=uid-live@1000";
  ftck_retention_result_t r = sweep_at(fx, NOW, NULL);
  assert_int_equal(fx->w.lookups, 3); /* ml/gone, ml/gone2, ml/live: no link */
  assert_null(strstr(fx->w.looked_up, "escape"));
  assert_null(strstr(fx->w.looked_up, "evil"));
  assert_int_equal(r.skipped, 3); /* evil, ml/escape, ml/live/hang-link */
  assert_int_equal(r.waiting, 2);
  /* The mark that was a link was replaced, not written through. */
  struct stat sb;
  assert_int_equal(lstat(at(fx, "ml/gone2/" FTCK_MARK_DELETED, p, sizeof p), &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  r = sweep_at(fx, NOW + TTL, NULL);
  assert_int_equal(r.deleted, 2);
  expect_gone(fx, "ml/gone", "ml/gone2", NULL);
  /* Links in the volume stay; what they point at is untouched. */
  expect_there(fx, "evil", "ml/escape", "ml/live/hang-link", NULL);
  char t[64];
  snprintf(o, sizeof o, "%s/precious", fx->outside);
  read_text(fx, o, t, sizeof t);
  assert_string_equal(t, "keep me\n");
  snprintf(o, sizeof o, "%s/ml/gone/hang-e1-1", fx->outside);
  assert_true(exists(fx, o));
}

static void odd_names_are_left_alone(void **state) {
  fixture_t *fx = *state;
  const char *odd[] = {"lost+found", "Bad Name/gone", "UPPER/gone", "ml/Job_1", "ml/-x", "ml/x-", "ml/a..b",
                       "ml/line\nbreak", "toolongnamespace-toolongnamespace-toolongnamespace-toolongnamespace"};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) mkdirs(fx, odd[i]);
  put(fx, "ml/file.txt", "not a folder");
  put(fx, "README", "not a folder");
  mkdirs(fx, ".snapshot/ml/gone"); /* hidden: silently */
  mkdirs(fx, "ml/.hidden");
  ftck_retention_result_t r = sweep_at(fx, NOW, NULL);
  assert_int_equal(fx->w.lookups, 0);
  assert_int_equal(r.skipped, 11); /* the 9, README, ml/file.txt */
  r = sweep_at(fx, NOW + 10 * TTL, NULL);
  assert_int_equal(r.deleted + r.waiting, 0);
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) assert_true(exists(fx, odd[i]));
  expect_there(fx, "ml/file.txt", ".snapshot/ml/gone", NULL);
  /* A dotted job name is a name like any other. */
  mkdirs(fx, "ml/llm.v2");
  sweep_at(fx, NOW, NULL);
  assert_true(exists(fx, "ml/llm.v2/" FTCK_MARK_DELETED));
}

static void only_the_watched_namespace_is_swept(void **state) {
  fixture_t *fx = *state;
  mkdirs(fx, "team/gone");
  mkdirs(fx, "ml/gone");
  ftck_retention_result_t r = sweep_at(fx, NOW, "team");
  assert_int_equal(r.waiting, 1);
  r = sweep_at(fx, NOW + TTL, "team");
  assert_int_equal(r.deleted, 1);
  assert_false(exists(fx, "team"));
  assert_true(exists(fx, "ml/gone"));
  assert_false(exists(fx, "ml/gone/" FTCK_MARK_DELETED));
}

static void a_lookup_that_cannot_tell_leaves_the_folder_alone(void **state) {
  fixture_t *fx = *state;
  mkdirs(fx, "ml/unsure");
  put(fx, "ml/unsure/" FTCK_MARK_DELETED, "1000\n");
  fx->w.jobs[0] = "ml/unsure=?";
  ftck_retention_result_t r = sweep_at(fx, NOW, NULL);
  assert_int_equal(r.deleted + r.waiting + r.stale, 0);
  assert_true(exists(fx, "ml/unsure/" FTCK_MARK_DELETED));
  /* A mark that is not a time is counted from now. */
  fx->w.jobs[0] = NULL;
  put(fx, "ml/unsure/" FTCK_MARK_DELETED, "yesterday\n");
  r = sweep_at(fx, NOW, NULL);
  assert_int_equal(r.waiting, 1);
  char t[64];
  read_text(fx, "ml/unsure/" FTCK_MARK_DELETED, t, sizeof t);
  assert_string_equal(t, "1800000000\n");
}

static void a_missing_volume_is_nothing_to_do_and_a_file_is_an_error(void **state) {
  fixture_t *fx = *state;
  char p[2 * PATH_MAX];
  ftck_retention_opts_t o = {.volume = at(fx, "none", p, sizeof p), .ttl_s = TTL, .now_s = NOW, .lookup = lookup,
                             .ud = &fx->w};
  ftck_retention_result_t r;
  assert_int_equal(ftck_retention_sweep(&o, &r), FTC_OK);
  put(fx, "file", "x");
  o.volume = at(fx, "file", p, sizeof p);
  assert_int_equal(ftck_retention_sweep(&o, &r), FTC_ERR_SYSTEM);
  assert_non_null(strstr(ftc_last_error(), "Not a directory"));
}

static void the_count_keeps_the_newest_incidents_and_no_link(void **state) {
  fixture_t *fx = *state;
  const char *names[] = {"hang-e1-100", "hang-e2-200", "hang-e3-300", "hang-e4-400"};
  for (int i = 0; i < 4; i++) {
    char rel[64];
    snprintf(rel, sizeof rel, "ml/job/%s", names[i]);
    mkdirs(fx, rel);
    set_mtime(fx, rel, 1000000 + i);
  }
  link_to(fx, fx->outside, "ml/job/hang-e0-0");
  char p[2 * PATH_MAX];
  assert_int_equal(ftck_prune_incidents(at(fx, "ml/job", p, sizeof p), 2), 2);
  expect_gone(fx, "ml/job/hang-e1-100", "ml/job/hang-e2-200", NULL);
  expect_there(fx, "ml/job/hang-e3-300", "ml/job/hang-e4-400", "ml/job/hang-e0-0", fx->outside, NULL);
}

static void an_incident_is_stamped_with_its_job(void **state) {
  fixture_t *fx = *state;
  char p[2 * PATH_MAX], q[2 * PATH_MAX], t[64];
  mkdirs(fx, "ml/job");
  assert_int_equal(ftck_stamp_incident(at(fx, "ml/job/hang-e1-1", p, sizeof p), "0f3c-uid"), 0);
  read_text(fx, "ml/job/hang-e1-1/" FTCK_MARK_JOB_UID, t, sizeof t);
  assert_string_equal(t, "0f3c-uid\n");
  /* A link there is replaced, not written through. */
  snprintf(p, sizeof p, "%s/precious", fx->outside);
  put(fx, p, "keep me\n");
  assert_int_equal(unlink(at(fx, "ml/job/hang-e1-1/" FTCK_MARK_JOB_UID, q, sizeof q)), 0);
  link_to(fx, p, "ml/job/hang-e1-1/" FTCK_MARK_JOB_UID);
  assert_int_equal(ftck_stamp_incident(at(fx, "ml/job/hang-e1-1", q, sizeof q), "0f3c-uid"), 0);
  read_text(fx, p, t, sizeof t);
  assert_string_equal(t, "keep me\n");
}

static void durations_parse_and_bad_ones_say_what_to_type(void **state) {
  (void)state;
  struct { const char *v; int64_t s; } good[] = {{"0", 0},      {"7d", 604800}, {"36h", 129600}, {"90m", 5400},
                                                 {"45s", 45},   {"1h30m", 5400}, {"1d12h", 129600}, {"3650d", 315360000}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    int64_t s = -1;
    assert_int_equal(ftck_parse_duration("dump-ttl-after-deletion", good[i].v, &s), FTC_OK);
    assert_int_equal(s, good[i].s);
  }
  const char *bad[] = {"", "7", "7 days", "-1h", "1.5h", "h", "7w", "1h 30m", "0s0"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t s = -1;
    assert_int_equal(ftck_parse_duration("dump-ttl-after-deletion", bad[i], &s), FTC_ERR_CONFIG);
    if (!strstr(ftc_last_error(), "--dump-ttl-after-deletion: expected a duration such as 7d"))
      fail_msg("\"%s\": %s", bad[i], ftc_last_error());
  }
  int64_t s;
  assert_int_equal(ftck_parse_duration("dump-ttl-after-deletion", "3651d", &s), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "longer than the most it takes, 3650d"));
  assert_int_equal(ftck_parse_duration("dump-ttl-after-deletion", "99999999999999999999s", &s), FTC_ERR_CONFIG);
  /* Through the flags: the default, a value, an error naming the flag. */
  ftck_options_t o;
  char *a1[] = {"x", NULL};
  assert_int_equal(ftck_options_parse(1, a1, &o), FTC_OK);
  assert_int_equal(o.dump_ttl_after_deletion_s, 7 * 86400);
  char *a2[] = {"x", "--dump-ttl-after-deletion=0", NULL};
  assert_int_equal(ftck_options_parse(2, a2, &o), FTC_OK);
  assert_int_equal(o.dump_ttl_after_deletion_s, 0);
  char *a3[] = {"x", "--dump-ttl-after-deletion", "2h", NULL};
  assert_int_equal(ftck_options_parse(3, a3, &o), FTC_OK);
  assert_int_equal(o.dump_ttl_after_deletion_s, 7200);
  char *a4[] = {"x", "--dump-ttl-after-deletion=7", NULL};
  assert_int_equal(ftck_options_parse(2, a4, &o), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "got \"7\""));
  char buf[32];
  ftck_format_duration(604800, buf, sizeof buf);
  assert_string_equal(buf, "7d");
  ftck_format_duration(5403, buf, sizeof buf);
  assert_string_equal(buf, "1h30m3s");
  ftck_format_duration(0, buf, sizeof buf);
  assert_string_equal(buf, "0s");
}

/* ml/gone, deleted long ago: 4 incidents of 10 dumps (46 entries in all). */
static void a_big_deleted_folder(fixture_t *fx) {
  mkdirs(fx, "ml/gone");
  put(fx, "ml/gone/" FTCK_MARK_DELETED, "1000\n");
  for (int i = 0; i < 4; i++) {
    char rel[128];
    snprintf(rel, sizeof rel, "ml/gone/hang-e%d-100", i);
    mkdirs(fx, rel);
    for (int k = 0; k < 10; k++) {
      snprintf(rel, sizeof rel, "ml/gone/hang-e%d-100/rank-%d.json", i, k);
      put(fx, rel, "{}");
    }
  }
}

static ftck_retention_result_t sweep_sliced(fixture_t *fx, int slice) {
  fx->w.vol = fx->vol;
  fx->w.gone_at_yield = 1;
  ftck_retention_opts_t o = {.volume = fx->vol, .ttl_s = TTL, .now_s = NOW, .lookup = lookup, .hold = hold,
                             .ud = &fx->w, .quiet = 1, .slice_entries = slice, .yield = yield};
  ftck_retention_result_t r;
  assert_int_equal(ftck_retention_sweep(&o, &r), FTC_OK);
  assert_int_equal(fx->w.held, 0);
  return r;
}

/* The trash a sweep left in ml (names starting with .ftcomm-removing-). */
static int trash_in_ml(fixture_t *fx) {
  char cmd[PATH_MAX + 64];
  snprintf(cmd, sizeof cmd, "ls -A '%s/ml' 2>/dev/null | grep -q '^\\.ftcomm-removing-'", fx->vol);
  return system(cmd) == 0;
}

static void removal_goes_in_slices_with_no_hold_between_them(void **state) {
  fixture_t *fx = *state;
  a_big_deleted_folder(fx);
  ftck_retention_result_t r = sweep_sliced(fx, 8);
  assert_int_equal(r.deleted, 1);
  assert_int_equal(r.stopped, 0);
  assert_int_equal(r.slices, fx->w.yields);
  assert_true(fx->w.yields >= 46 / 8); /* every 8 entries */
  assert_int_equal(fx->w.gone_at_yield, 1); /* its name left at once, under the hold */
  assert_false(exists(fx, "ml")); /* emptied, then the namespace went too */
}

static void a_stopped_sweep_leaves_trash_that_the_next_one_empties(void **state) {
  fixture_t *fx = *state;
  a_big_deleted_folder(fx);
  mkdirs(fx, "ml/live");
  fx->w.jobs[0] = "ml/live=uid-live@1700000000";
  fx->w.stop_at = 2;
  ftck_retention_result_t r = sweep_sliced(fx, 8);
  assert_int_equal(r.stopped, 1);
  assert_int_equal(fx->w.yields, 2);
  assert_false(exists(fx, "ml/gone"));
  assert_true(trash_in_ml(fx));
  fx->w.stop_at = 0;
  r = sweep_sliced(fx, 8);
  assert_int_equal(r.stopped, 0);
  assert_int_equal(r.deleted, 0); /* counted once, when it left its name */
  assert_false(trash_in_ml(fx));
  assert_true(exists(fx, "ml/live"));
}

/* Trash an interrupted sweep left inside a live job's folder (an incident
 * of an earlier job) goes at the next sweep, however young the job (it may
 * have been re-created since): it is ours, nothing else's. */
static void trash_in_a_young_jobs_folder_goes_at_the_next_sweep(void **state) {
  fixture_t *fx = *state;
  mkdirs(fx, "ml/llm/.ftcomm-removing-1-7/hang-e1-100");
  put(fx, "ml/llm/.ftcomm-removing-1-7/hang-e1-100/rank-0.json", "{}");
  mkdirs(fx, "ml/llm/hang-e2-200");
  fx->w.jobs[0] = "ml/llm=uid-2@1799999990"; /* created 10 s before NOW */
  ftck_retention_result_t r = sweep_sliced(fx, 8);
  assert_int_equal(r.stale + r.deleted + r.errors, 0);
  expect_gone(fx, "ml/llm/.ftcomm-removing-1-7", NULL);
  expect_there(fx, "ml/llm/hang-e2-200", NULL);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(a_deleted_jobs_folder_goes_once_the_ttl_has_passed),
      T(a_job_that_exists_again_keeps_its_folder),
      T(a_recreated_job_loses_only_the_earlier_jobs_incidents),
      T(links_are_never_followed),
      T(odd_names_are_left_alone),
      T(only_the_watched_namespace_is_swept),
      T(a_lookup_that_cannot_tell_leaves_the_folder_alone),
      T(a_missing_volume_is_nothing_to_do_and_a_file_is_an_error),
      T(removal_goes_in_slices_with_no_hold_between_them),
      T(a_stopped_sweep_leaves_trash_that_the_next_one_empties),
      T(trash_in_a_young_jobs_folder_goes_at_the_next_sweep),
      T(the_count_keeps_the_newest_incidents_and_no_link),
      T(an_incident_is_stamped_with_its_job),
      cmocka_unit_test(durations_parse_and_bad_ones_say_what_to_type),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
