/*
 * test_recorder_ring.c - the flight-recorder ring: what one entry holds,
 * wraparound, the disabled ring, state transitions, progress counters,
 * allocation failures, and concurrent recording while other threads read
 * (run under SANITIZE=thread to check the lock-free protocol).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <pthread.h>

#include "ftc_alloc.h"
#include "ftc_param.h"
#include "ftc_recorder.h"
#include "ftc_time.h"

static void one_entry_holds_what_was_recorded(void **state) {
  (void)state;
  ftc_rec_t *rec;
  assert_int_equal(ftc_rec_create(8, 0xabcdef, "world", 3, 2, 4, &rec), FTC_OK);
  int64_t before = ftc__now_ns();
  uint64_t id = ftc_rec_schedule(rec, 3, 17, FTC_REC_BROADCAST, FTC_F32, 1024, 4096, 1, 5000);
  assert_int_equal(id, 0);
  ftc_rec_started(rec, id, 111);
  ftc_rec_completed(rec, id, 222);
  ftc_rec_entry_t e[8];
  assert_int_equal(ftc_rec_snapshot(rec, e, 8), 1);
  assert_int_equal(e[0].epoch, 3);
  assert_int_equal(e[0].seq, 17);
  assert_int_equal(e[0].op, FTC_REC_BROADCAST);
  assert_int_equal(e[0].dtype, FTC_F32);
  assert_int_equal(e[0].count, 1024);
  assert_int_equal(e[0].bytes, 4096);
  assert_int_equal(e[0].peer, 1);
  assert_int_equal(e[0].rank, 2);
  assert_int_equal(e[0].size, 4);
  assert_int_equal(e[0].state, FTC_REC_COMPLETED);
  assert_true(e[0].t_created >= before);
  assert_int_equal(e[0].t_started, 111);
  assert_int_equal(e[0].t_completed, 222);
  assert_int_equal(e[0].timeout_ns, 5000);
  ftc_rec_destroy(rec);
}

static void wraparound_keeps_the_newest_entries_oldest_first(void **state) {
  (void)state;
  ftc_rec_t *rec;
  assert_int_equal(ftc_rec_create(5, 1, "w", 0, 0, 1, &rec), FTC_OK);
  for (uint64_t s = 1; s <= 13; s++)
    ftc_rec_completed(rec, ftc_rec_schedule(rec, 0, s, FTC_REC_ALLREDUCE, FTC_F32, s, 4 * s, -1, -1), 0);
  ftc_rec_entry_t e[16];
  size_t n = ftc_rec_snapshot(rec, e, 16);
  assert_int_equal(n, 5);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(e[i].seq, 9 + i);
    assert_int_equal(e[i].id, 8 + i);
  }
  /* A smaller buffer gets the newest ones. */
  assert_int_equal(ftc_rec_snapshot(rec, e, 2), 2);
  assert_int_equal(e[0].seq, 12);
  assert_int_equal(e[1].seq, 13);
  ftc_rec_progress_t p;
  ftc_rec_progress(rec, &p);
  assert_int_equal(p.recorded, 13);
  assert_int_equal(p.last_completed, 13);
  ftc_rec_destroy(rec);
}

static void a_stale_id_does_not_touch_the_entry_that_replaced_it(void **state) {
  (void)state;
  ftc_rec_t *rec;
  assert_int_equal(ftc_rec_create(2, 1, "w", 0, 0, 1, &rec), FTC_OK);
  uint64_t old = ftc_rec_schedule(rec, 0, 1, FTC_REC_ALLREDUCE, FTC_F32, 1, 4, -1, -1);
  ftc_rec_schedule(rec, 0, 2, FTC_REC_ALLREDUCE, FTC_F32, 1, 4, -1, -1);
  ftc_rec_schedule(rec, 0, 3, FTC_REC_ALLREDUCE, FTC_F32, 1, 4, -1, -1); /* reuses old's slot */
  ftc_rec_completed(rec, old, 0);
  ftc_rec_entry_t e[2];
  assert_int_equal(ftc_rec_snapshot(rec, e, 2), 2);
  assert_int_equal(e[1].seq, 3);
  assert_int_equal(e[1].state, FTC_REC_SCHEDULED);
  assert_int_equal(e[1].t_completed, 0);
  ftc_rec_destroy(rec);
}

static void a_disabled_ring_records_nothing(void **state) {
  (void)state;
  ftc_rec_t *rec;
  assert_int_equal(ftc_rec_create(0, 1, "w", 0, 0, 1, &rec), FTC_OK);
  assert_non_null(rec);
  assert_int_equal(ftc_rec_capacity(rec), 0);
  uint64_t id = ftc_rec_schedule(rec, 0, 1, FTC_REC_BARRIER, FTC_DTYPE_COUNT, 0, 0, -1, -1);
  assert_true(id == FTC_REC_NO_ID);
  ftc_rec_started(rec, id, 0);
  ftc_rec_completed(rec, 0, 0);
  ftc_rec_entry_t e[1];
  assert_int_equal(ftc_rec_snapshot(rec, e, 1), 0);
  ftc_rec_progress_t p;
  ftc_rec_progress(rec, &p);
  assert_int_equal(p.recorded, 0);
  ftc_rec_destroy(rec);
  /* A NULL recorder is a no-op everywhere. */
  assert_true(ftc_rec_schedule(NULL, 0, 1, FTC_REC_BARRIER, 0, 0, 0, -1, -1) == FTC_REC_NO_ID);
  ftc_rec_started(NULL, 0, 0);
  ftc_rec_failed(NULL, 0, 0);
  ftc_rec_destroy(NULL);
}

static void ring_size_comes_from_the_environment(void **state) {
  (void)state;
  setenv("FTCOMM_RECORDER_ENTRIES", "7", 1);
  ftc__param_reset();
  ftc_rec_t *rec;
  assert_int_equal(ftc_rec_create(-1, 1, "w", 0, 0, 1, &rec), FTC_OK);
  assert_int_equal(ftc_rec_capacity(rec), 7);
  ftc_rec_destroy(rec);
  setenv("FTCOMM_RECORDER_ENTRIES", "0", 1);
  ftc__param_reset();
  assert_int_equal(ftc_rec_create(-1, 1, "w", 0, 0, 1, &rec), FTC_OK);
  assert_int_equal(ftc_rec_capacity(rec), 0);
  ftc_rec_destroy(rec);
  setenv("FTCOMM_RECORDER_ENTRIES", "lots", 1);
  ftc__param_reset();
  assert_int_equal(ftc_rec_create(-1, 1, "w", 0, 0, 1, &rec), FTC_ERR_CONFIG);
  assert_null(rec);
  unsetenv("FTCOMM_RECORDER_ENTRIES");
  ftc__param_reset();
}

static void state_never_goes_backwards(void **state) {
  (void)state;
  ftc_rec_t *rec;
  assert_int_equal(ftc_rec_create(4, 1, "w", 0, 0, 1, &rec), FTC_OK);
  uint64_t a = ftc_rec_schedule(rec, 0, 1, FTC_REC_ALLREDUCE, FTC_F32, 1, 4, -1, -1);
  ftc_rec_completed(rec, a, 50);
  ftc_rec_started(rec, a, 40);
  ftc_rec_failed(rec, a, 60);
  uint64_t b = ftc_rec_schedule(rec, 0, 2, FTC_REC_ALLREDUCE, FTC_F32, 1, 4, -1, -1);
  ftc_rec_started(rec, b, 70);
  ftc_rec_failed(rec, b, 80);
  ftc_rec_completed(rec, b, 90);
  ftc_rec_entry_t e[4];
  assert_int_equal(ftc_rec_snapshot(rec, e, 4), 2);
  assert_int_equal(e[0].state, FTC_REC_COMPLETED);
  assert_int_equal(e[0].t_started, 0);
  assert_int_equal(e[0].t_completed, 50);
  assert_int_equal(e[1].state, FTC_REC_FAILED);
  assert_int_equal(e[1].t_started, 70);
  assert_int_equal(e[1].t_completed, 80);
  ftc_rec_destroy(rec);
}

static void progress_tracks_the_current_epoch_only(void **state) {
  (void)state;
  ftc_rec_t *rec;
  assert_int_equal(ftc_rec_create(16, 1, "w", 1, 0, 4, &rec), FTC_OK);
  for (uint64_t s = 1; s <= 3; s++) {
    uint64_t id = ftc_rec_schedule(rec, 1, s, FTC_REC_ALLREDUCE, FTC_F32, 1, 4, -1, -1);
    if (s <= 2) ftc_rec_started(rec, id, 0);
    if (s <= 1) ftc_rec_completed(rec, id, 0);
  }
  /* p2p entries have their own sequence and do not move the counters. */
  ftc_rec_completed(rec, ftc_rec_schedule(rec, 1, 99, FTC_REC_SEND, FTC_F32, 1, 4, 2, -1), 0);
  ftc_rec_progress_t p;
  ftc_rec_progress(rec, &p);
  assert_int_equal(p.epoch, 1);
  assert_int_equal(p.last_enqueued, 3);
  assert_int_equal(p.last_started, 2);
  assert_int_equal(p.last_completed, 1);
  ftc_rec_set_epoch(rec, 2, 0, 3);
  ftc_rec_progress(rec, &p);
  assert_int_equal(p.epoch, 2);
  assert_int_equal(p.last_enqueued, 0);
  ftc_rec_completed(rec, ftc_rec_schedule(rec, 2, 1, FTC_REC_ALLREDUCE, FTC_F32, 1, 4, -1, -1), 0);
  ftc_rec_progress(rec, &p);
  assert_int_equal(p.last_completed, 1);
  ftc_rec_entry_t e[16];
  size_t n = ftc_rec_snapshot(rec, e, 16);
  assert_int_equal(e[n - 1].epoch, 2);
  assert_int_equal(e[n - 1].size, 3);
  assert_int_equal(e[0].size, 4);
  ftc_rec_destroy(rec);
}

static void a_failed_allocation_is_reported_and_leaks_nothing(void **state) {
  (void)state;
  for (long k = 1;; k++) {
    ftc_rec_t *rec = (ftc_rec_t *)&rec;
    ftc__alloc_fail_at(k);
    ftc_status_t st = ftc_rec_create(10, 1, "w", 0, 0, 1, &rec);
    ftc__alloc_fail_at(0);
    if (st == FTC_OK) {
      assert_true(k > 2);
      ftc_rec_destroy(rec);
      break;
    }
    assert_int_equal(st, FTC_ERR_NO_MEMORY);
    assert_null(rec);
  }
}

/* Concurrency: one thread schedules, one completes what was scheduled, two
 * read snapshots. Every entry a reader sees must be internally consistent. */
#define CONC_ENTRIES 64
#define CONC_RECORDS 200000
static ftc_rec_t *conc_rec;
static uint64_t conc_done;     /* set when the writer has finished */
static uint64_t conc_last_id;  /* newest id handed out, for the completer */

static void *conc_writer(void *arg) {
  (void)arg;
  for (uint64_t s = 1; s <= CONC_RECORDS; s++) {
    uint64_t id = ftc_rec_schedule(conc_rec, 0, s, (ftc_rec_op_t)(s % 7), (int)(s % 7), 3 * s,
                                   12 * s, (int)(s % 5), (int64_t)s);
    __atomic_store_n(&conc_last_id, id, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&conc_done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void *conc_completer(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&conc_done, __ATOMIC_ACQUIRE)) {
    uint64_t id = __atomic_load_n(&conc_last_id, __ATOMIC_ACQUIRE);
    ftc_rec_started(conc_rec, id, 1000 + (int64_t)id);
    ftc_rec_completed(conc_rec, id, 2000 + (int64_t)id);
  }
  return NULL;
}

static void *conc_reader(void *arg) {
  long *checked = arg;
  ftc_rec_entry_t e[CONC_ENTRIES];
  while (!__atomic_load_n(&conc_done, __ATOMIC_ACQUIRE)) {
    size_t n = ftc_rec_snapshot(conc_rec, e, CONC_ENTRIES);
    for (size_t i = 0; i < n; i++) {
      uint64_t s = e[i].seq;
      if (s != e[i].id + 1 || e[i].count != 3 * s || e[i].bytes != 12 * s ||
          e[i].peer != (int)(s % 5) || e[i].op != (ftc_rec_op_t)(s % 7) ||
          e[i].timeout_ns != (int64_t)s || (i > 0 && e[i].id <= e[i - 1].id))
        return (void *)1;
      if (e[i].state >= FTC_REC_STARTED && e[i].t_started != 1000 + (int64_t)e[i].id)
        return (void *)1;
      if (e[i].state == FTC_REC_COMPLETED && e[i].t_completed != 2000 + (int64_t)e[i].id)
        return (void *)1;
      (*checked)++;
    }
  }
  return NULL;
}

static void concurrent_readers_see_only_consistent_entries(void **state) {
  (void)state;
  assert_int_equal(ftc_rec_create(CONC_ENTRIES, 9, "conc", 0, 0, 1, &conc_rec), FTC_OK);
  pthread_t w, c, r[2];
  long checked[2] = {0, 0};
  void *res;
  assert_int_equal(pthread_create(&r[0], NULL, conc_reader, &checked[0]), 0);
  assert_int_equal(pthread_create(&r[1], NULL, conc_reader, &checked[1]), 0);
  assert_int_equal(pthread_create(&c, NULL, conc_completer, NULL), 0);
  assert_int_equal(pthread_create(&w, NULL, conc_writer, NULL), 0);
  pthread_join(w, NULL);
  pthread_join(c, NULL);
  for (int i = 0; i < 2; i++) {
    pthread_join(r[i], &res);
    assert_null(res);
  }
  ftc_rec_progress_t p;
  ftc_rec_progress(conc_rec, &p);
  assert_int_equal(p.recorded, CONC_RECORDS);
  assert_int_equal(p.last_enqueued, CONC_RECORDS);
  ftc_rec_entry_t e[CONC_ENTRIES];
  assert_int_equal(ftc_rec_snapshot(conc_rec, e, CONC_ENTRIES), CONC_ENTRIES);
  assert_int_equal(e[CONC_ENTRIES - 1].seq, CONC_RECORDS);
  print_message("readers checked %ld + %ld entries\n", checked[0], checked[1]);
  ftc_rec_destroy(conc_rec);
}

static void names_round_trip(void **state) {
  (void)state;
  for (int op = 0; op < FTC_REC_OP_COUNT; op++)
    assert_int_equal(ftc_rec_op_from_name(ftc_rec_op_name((ftc_rec_op_t)op)), op);
  for (int s = 0; s < FTC_REC_STATE_COUNT; s++)
    assert_int_equal(ftc_rec_state_from_name(ftc_rec_state_name((ftc_rec_state_t)s)), s);
  assert_string_equal(ftc_rec_op_name(FTC_REC_REDUCE_SCATTER), "reduce_scatter");
  assert_string_equal(ftc_rec_op_name(FTC_REC_OP_COUNT), "unknown");
  assert_int_equal(ftc_rec_op_from_name("allsum"), -1);
}

int main(void) {
  setenv("FTCOMM_DUMP_SIGNAL", "0", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_entry_holds_what_was_recorded),
      cmocka_unit_test(wraparound_keeps_the_newest_entries_oldest_first),
      cmocka_unit_test(a_stale_id_does_not_touch_the_entry_that_replaced_it),
      cmocka_unit_test(a_disabled_ring_records_nothing),
      cmocka_unit_test(ring_size_comes_from_the_environment),
      cmocka_unit_test(state_never_goes_backwards),
      cmocka_unit_test(progress_tracks_the_current_epoch_only),
      cmocka_unit_test(a_failed_allocation_is_reported_and_leaks_nothing),
      cmocka_unit_test(concurrent_readers_see_only_consistent_entries),
      cmocka_unit_test(names_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
