/*
 * test_coord_incident.c - the coordinator's incident record,
 * DIR/<incident>/incident.json (coordinator/incident.c): every rank asked
 * or not, then answered, lost (dropped before its dump came, with the
 * coordinator's word) or without an answer in time; the verdict's drops and
 * next epoch. The file is read back as a user would.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "coordinator/incident.h"
#include "ftc_time.h"

static json_t *read_record(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s/incident.json", dir, name);
  json_error_t e;
  json_t *j = json_load_file(path, 0, &e);
  if (!j) fail_msg("%s: %s", path, e.text);
  return j;
}

static json_t *rank_entry(json_t *j, int rank) {
  size_t i;
  json_t *o;
  json_array_foreach(json_object_get(j, "ranks"), i, o)
    if (json_integer_value(json_object_get(o, "rank")) == rank) return o;
  fail_msg("rank %d is not in the record", rank);
  return NULL;
}

static const char *str_of(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_string(v) ? json_string_value(v) : "(absent)";
}

static void rm_rf(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static void test_a_record_says_who_answered_who_was_lost_and_why(void **state) {
  (void)state;
  char dir[] = "/tmp/ftc-incident-XXXXXX";
  assert_non_null(mkdtemp(dir));
  ftc__incident_t *inc = ftc__incident_new(dir, "job-a", "hang-e3-1", 3,
                                           "rank 1 timed out in a collective of epoch 3", -1, -1);
  assert_non_null(inc);
  ftc__incident_add(inc, 0, 0, 100, "pod-0", 1, NULL);
  ftc__incident_add(inc, 1, 1, 101, "pod-1", 1, NULL);
  ftc__incident_add(inc, 2, 2, 102, "pod-2", 1, NULL);
  ftc__incident_add(inc, 3, 5, 105, "pod-5", 0, "its coordinator session was closed at the request");
  ftc__incident_add(inc, 4, 4, 104, "pod-4", 1, NULL); /* never answers */
  assert_int_equal(ftc__incident_write(inc), 0);

  json_t *j = read_record(dir, "hang-e3-1");
  assert_string_equal(str_of(j, "format"), "ftcomm-incident");
  assert_string_equal(str_of(j, "job"), "job-a");
  assert_int_equal(json_integer_value(json_object_get(j, "epoch")), 3);
  assert_string_equal(str_of(rank_entry(j, 0), "state"), "asked");
  assert_string_equal(str_of(rank_entry(j, 3), "state"), "not_asked");
  assert_true(json_is_false(json_object_get(rank_entry(j, 3), "asked")));
  assert_true(json_is_false(json_object_get(j, "complete")));
  json_decref(j);

  ftc__incident_answered(inc, 0, 100, "rank-0.json");
  ftc__incident_answered(inc, 1, 101, "rank-1.json");
  ftc__incident_answered(inc, 1, 101, "rank-1-101.json"); /* a second copy: the first counts */
  ftc__incident_dropped(inc, 102, "hung", "was silent for 1594 ms (heartbeat timeout)", 1);
  ftc__incident_dropped(inc, 101, "crashed", "its process is exiting", 1); /* after it answered */
  assert_int_equal(ftc__incident_write(inc), 0);
  j = read_record(dir, "hang-e3-1");
  assert_string_equal(str_of(rank_entry(j, 0), "state"), "answered");
  assert_string_equal(str_of(rank_entry(j, 1), "file"), "rank-1.json");
  assert_string_equal(str_of(rank_entry(j, 1), "state"), "answered");
  json_t *r2 = rank_entry(j, 2);
  assert_string_equal(str_of(r2, "state"), "lost");
  assert_string_equal(str_of(r2, "why"), "hung");
  assert_string_equal(str_of(r2, "detail"), "was silent for 1594 ms (heartbeat timeout)");
  json_t *v = json_object_get(j, "verdict");
  assert_true(json_is_false(json_object_get(v, "decided")));
  assert_true(json_is_null(json_object_get(v, "next_epoch")));
  assert_int_equal(json_array_size(json_object_get(v, "dropped")), 2);
  assert_string_equal(str_of(json_array_get(json_object_get(v, "dropped"), 0), "reason"), "hung");
  assert_int_equal(json_integer_value(json_object_get(j, "answered")), 2);
  json_decref(j);

  ftc__incident_next_epoch(inc, 4);
  ftc__incident_next_epoch(inc, 5); /* the first epoch after it is the verdict */
  ftc__incident_close(inc);          /* the coordinator stops */
  assert_int_equal(ftc__incident_write(inc), 0);
  j = read_record(dir, "hang-e3-1");
  v = json_object_get(j, "verdict");
  assert_true(json_is_true(json_object_get(v, "decided")));
  assert_int_equal(json_integer_value(json_object_get(v, "next_epoch")), 4);
  assert_string_equal(str_of(rank_entry(j, 2), "state"), "lost"); /* stays as it was */
  assert_string_equal(str_of(rank_entry(j, 4), "state"), "no_answer");
  assert_non_null(strstr(str_of(rank_entry(j, 4), "detail"), "no dump before the coordinator stopped"));
  json_decref(j);
  ftc__incident_free(inc);
  rm_rf(dir);
}

static void test_an_asked_rank_without_an_answer_is_marked_then_a_late_answer_counts(void **state) {
  (void)state;
  char dir[] = "/tmp/ftc-incident-XXXXXX";
  assert_non_null(mkdtemp(dir));
  ftc__incident_t *inc = ftc__incident_new(dir, "j", "hang-e1-2", 1, "rank 0 stopped heartbeating",
                                           0, 0);
  assert_non_null(inc);
  ftc__incident_add(inc, 0, 0, 7, "", 1, NULL);
  ftc__incident_add(inc, 1, 1, 8, "", 1, NULL);
  int64_t now = ftc__now_ns();
  assert_int_equal(ftc__incident_check(inc, now), 0); /* not yet */
  assert_int_equal(ftc__incident_check(inc, now + (FTC__INCIDENT_ANSWER_MS + 1) * 1000000LL), 1);
  assert_int_equal(ftc__incident_write(inc), 0);
  json_t *j = read_record(dir, "hang-e1-2");
  assert_string_equal(str_of(rank_entry(j, 1), "state"), "no_answer");
  assert_string_equal(str_of(rank_entry(j, 1), "why"), "no_answer");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "silent"), "rank")), 0);
  json_decref(j);
  ftc__incident_answered(inc, 1, 8, "rank-1.json");
  ftc__incident_add(inc, 2, 2, 9, "", 1, NULL);
  /* Dropped in a later epoch while its dump was awaited: it will not come. */
  assert_int_equal(ftc__incident_dropped(inc, 9, "lost", "pod p-2-0 is being deleted", 0), 1);
  assert_int_equal(ftc__incident_dropped(inc, 8, "crashed", "gone", 0), 0); /* answered: stays */
  ftc__incident_close(inc);
  assert_int_equal(ftc__incident_write(inc), 0);
  j = read_record(dir, "hang-e1-2");
  assert_string_equal(str_of(rank_entry(j, 1), "state"), "answered");
  assert_string_equal(str_of(rank_entry(j, 0), "state"), "no_answer");
  assert_non_null(strstr(str_of(rank_entry(j, 0), "detail"), "no dump within 10000 ms of the request"));
  assert_string_equal(str_of(rank_entry(j, 2), "state"), "lost");
  assert_string_equal(str_of(rank_entry(j, 2), "detail"), "pod p-2-0 is being deleted");
  assert_int_equal(json_array_size(json_object_get(json_object_get(j, "verdict"), "dropped")), 0);
  json_decref(j);
  ftc__incident_free(inc);
  rm_rf(dir);
}

static void test_an_unwritable_folder_is_an_error_not_a_crash(void **state) {
  (void)state;
  ftc__incident_t *inc = ftc__incident_new("/proc/no-such-dir", "j", "hang-e1-3", 1, "r", -1, -1);
  assert_non_null(inc);
  ftc__incident_add(inc, 0, 0, 1, "", 1, NULL);
  assert_int_equal(ftc__incident_write(inc), -1);
  ftc__incident_free(inc);
  ftc__incident_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_a_record_says_who_answered_who_was_lost_and_why),
      cmocka_unit_test(test_an_asked_rank_without_an_answer_is_marked_then_a_late_answer_counts),
      cmocka_unit_test(test_an_unwritable_folder_is_an_error_not_a_crash),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
