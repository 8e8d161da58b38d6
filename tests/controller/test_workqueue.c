/*
 * test_workqueue.c - the work queue behaves like client-go's: dedup, one
 * worker per key, dirty keys queued again at done, delays, per-item
 * exponential backoff until forget, shutdown wakes getters. Also the
 * backoff helper's doubling, cap and jitter bounds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backoff.h"
#include "ftc_alloc.h"
#include "ftc_time.h"
#include "kube_json.h"
#include "workqueue.h"

static ftck_workqueue_t *mk(void) {
  ftck_workqueue_t *q = NULL;
  assert_int_equal(ftck_workqueue_create(20, 160, &q), FTC_OK);
  return q;
}

static char *get_now(ftck_workqueue_t *q) {
  char *k = NULL;
  assert_int_equal(ftck_workqueue_get(q, 0, &k), FTC_OK);
  return k;
}

static void test_adds_of_a_queued_key_merge(void **state) {
  (void)state;
  ftck_workqueue_t *q = mk();
  ftck_workqueue_add(q, "ns/a");
  ftck_workqueue_add(q, "ns/b");
  ftck_workqueue_add(q, "ns/a");
  assert_int_equal(ftck_workqueue_len(q), 2);
  char *k = get_now(q);
  assert_string_equal(k, "ns/a"); /* FIFO */
  ftck_workqueue_done(q, k);
  ftc__free(k);
  k = get_now(q);
  assert_string_equal(k, "ns/b");
  ftck_workqueue_done(q, k);
  ftc__free(k);
  char *none = NULL;
  assert_int_equal(ftck_workqueue_get(q, 10, &none), FTC_ERR_TIMEOUT);
  ftck_workqueue_destroy(q);
}

static void test_key_in_processing_is_not_handed_out_again_until_done(void **state) {
  (void)state;
  ftck_workqueue_t *q = mk();
  ftck_workqueue_add(q, "ns/a");
  char *k = get_now(q);
  ftck_workqueue_add(q, "ns/a"); /* changed while being processed */
  assert_int_equal(ftck_workqueue_len(q), 0);
  char *other = NULL;
  assert_int_equal(ftck_workqueue_get(q, 10, &other), FTC_ERR_TIMEOUT);
  ftck_workqueue_done(q, k);
  ftc__free(k);
  assert_int_equal(ftck_workqueue_len(q), 1); /* queued again: the change is not lost */
  k = get_now(q);
  assert_string_equal(k, "ns/a");
  ftck_workqueue_done(q, k);
  ftc__free(k);
  assert_int_equal(ftck_workqueue_len(q), 0);
  ftck_workqueue_destroy(q);
}

static void test_add_after_waits_and_keeps_the_earliest(void **state) {
  (void)state;
  ftck_workqueue_t *q = mk();
  int64_t t0 = ftc__now_ns();
  ftck_workqueue_add_after(q, "ns/late", 500);
  ftck_workqueue_add_after(q, "ns/late", 60); /* earlier wins */
  assert_int_equal(ftck_workqueue_waiting(q), 1);
  assert_int_equal(ftck_workqueue_len(q), 0);
  char *k = NULL;
  assert_int_equal(ftck_workqueue_get(q, 2000, &k), FTC_OK);
  int64_t waited_ms = (ftc__now_ns() - t0) / 1000000;
  assert_string_equal(k, "ns/late");
  assert_true(waited_ms >= 55 && waited_ms < 450);
  ftck_workqueue_done(q, k);
  ftc__free(k);
  ftck_workqueue_destroy(q);
}

static void test_rate_limited_adds_back_off_exponentially_until_forget(void **state) {
  (void)state;
  ftck_workqueue_t *q = mk(); /* base 20 ms, cap 160 ms */
  int64_t expect[] = {20, 40, 80, 160, 160};
  for (int i = 0; i < 5; i++) {
    int64_t t0 = ftc__now_ns();
    ftck_workqueue_add_rate_limited(q, "ns/flaky");
    assert_int_equal(ftck_workqueue_requeues(q, "ns/flaky"), i + 1);
    char *k = NULL;
    assert_int_equal(ftck_workqueue_get(q, 2000, &k), FTC_OK);
    int64_t ms = (ftc__now_ns() - t0) / 1000000;
    if (ms < expect[i] - 2 || ms > expect[i] + 150) fail_msg("attempt %d waited %lld ms, expected ~%lld", i, (long long)ms, (long long)expect[i]);
    ftck_workqueue_done(q, k);
    ftc__free(k);
  }
  ftck_workqueue_forget(q, "ns/flaky");
  assert_int_equal(ftck_workqueue_requeues(q, "ns/flaky"), 0);
  ftck_workqueue_destroy(q);
}

static void *blocked_getter(void *arg) {
  char *k = NULL;
  ftc_status_t st = ftck_workqueue_get(arg, -1, &k);
  return (void *)(intptr_t)st;
}

static void test_shutdown_wakes_a_blocked_getter(void **state) {
  (void)state;
  ftck_workqueue_t *q = mk();
  pthread_t t;
  pthread_create(&t, NULL, blocked_getter, q);
  usleep(50000);
  ftck_workqueue_shutdown(q);
  void *rv;
  pthread_join(t, &rv);
  assert_int_equal((int)(intptr_t)rv, FTC_ERR_ABORTED);
  assert_int_equal(ftck_workqueue_add(q, "ns/x"), FTC_OK); /* ignored after shutdown */
  assert_int_equal(ftck_workqueue_len(q), 0);
  ftck_workqueue_destroy(q);
}

static void test_allocation_failures_lose_nothing(void **state) {
  (void)state;
  for (long n = 1; n < 200; n++) {
    ftck_workqueue_t *q = NULL;
    ftc__alloc_fail_at(n);
    ftc_status_t st = ftck_workqueue_create(1, 10, &q);
    if (st == FTC_OK) st = ftck_workqueue_add(q, "ns/a");
    ftc__alloc_fail_at(0);
    if (q && st == FTC_OK) {
      char *k = get_now(q);
      assert_string_equal(k, "ns/a");
      ftck_workqueue_done(q, k);
      ftc__free(k);
    }
    ftck_workqueue_destroy(q);
    if (st == FTC_OK && n > 5) break;
  }
}

static void test_backoff_doubles_up_to_the_cap_with_bounded_jitter(void **state) {
  (void)state;
  assert_int_equal(ftck_backoff_raw(100, 1000, 0), 100);
  assert_int_equal(ftck_backoff_raw(100, 1000, 1), 200);
  assert_int_equal(ftck_backoff_raw(100, 1000, 3), 800);
  assert_int_equal(ftck_backoff_raw(100, 1000, 4), 1000);
  assert_int_equal(ftck_backoff_raw(100, 1000, 60), 1000);
  ftck_backoff_t b = FTCK_BACKOFF_INIT(100, 1000);
  b.rng = 42;
  int64_t seen_min = INT64_MAX, seen_max = 0;
  for (int round = 0; round < 200; round++) {
    ftck_backoff_reset(&b);
    for (int i = 0; i < 6; i++) {
      int64_t raw = ftck_backoff_raw(100, 1000, i);
      int64_t d = ftck_backoff_next(&b);
      assert_true(d >= raw / 2 && d <= raw);
      if (i == 0) {
        if (d < seen_min) seen_min = d;
        if (d > seen_max) seen_max = d;
      }
    }
  }
  assert_true(seen_max - seen_min > 20); /* jitter spreads retries */
  ftck_backoff_t fixed = FTCK_BACKOFF_INIT(100, 1000);
  fixed.jitter = 0;
  assert_int_equal(ftck_backoff_next(&fixed), 100);
  assert_int_equal(ftck_backoff_next(&fixed), 200);
}

int main(void) {
  ftck_json_use_ftc_alloc();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adds_of_a_queued_key_merge),
      cmocka_unit_test(test_key_in_processing_is_not_handed_out_again_until_done),
      cmocka_unit_test(test_add_after_waits_and_keeps_the_earliest),
      cmocka_unit_test(test_rate_limited_adds_back_off_exponentially_until_forget),
      cmocka_unit_test(test_shutdown_wakes_a_blocked_getter),
      cmocka_unit_test(test_allocation_failures_lose_nothing),
      cmocka_unit_test(test_backoff_doubles_up_to_the_cap_with_bounded_jitter),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
