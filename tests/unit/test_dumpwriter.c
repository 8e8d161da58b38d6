/*
 * test_dumpwriter.c - the process's dump writer thread (core/dumpwriter.c):
 * at most 16 dumps wait, one more drops the oldest waiting one; destroying
 * a communicator waits up to FTCOMM_DUMP_DRAIN_MS for its dumps and drops
 * those still waiting then, and only its own.
 *
 * The disk is made slow with the fault point dumpwrite:MS (every write
 * sleeps), so jobs pile up behind the one being written. Which dumps landed
 * is read back from the files: each job describes its own epoch.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/comm.h"
#include "ftc_alloc.h"
#include "ftc_param.h"
#include "ftc_time.h"

#define WRITE_MS 100 /* every dump write sleeps this long (dumpwrite:100) */

typedef struct fixture {
  char dir[64];
  ftc_comm_t *a, *b; /* two communicators, as far as the writer sees them */
} fixture_t;

static ftc_comm_t *fake_comm(const char *dir) {
  ftc_comm_t *c = calloc(1, sizeof(*c));
  assert_non_null(c);
  c->cfg.dump_dir = dir; /* the writer reads only this, and member (NULL) */
  return c;
}

static int setup(void **state) {
  fixture_t *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  snprintf(fx->dir, sizeof(fx->dir), "/tmp/ftc-test-dw-XXXXXX");
  assert_non_null(mkdtemp(fx->dir));
  fx->a = fake_comm(fx->dir);
  fx->b = fake_comm(fx->dir);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture_t *fx = *state;
  DIR *d = opendir(fx->dir);
  if (d) {
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      snprintf(path, sizeof(path), "%s/%s", fx->dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(fx->dir);
  free(fx->a);
  free(fx->b);
  free(fx);
  unsetenv("FTCOMM_DUMP_DRAIN_MS");
  ftc__param_reset();
  return 0;
}

static void set_drain_ms(const char *ms) {
  setenv("FTCOMM_DUMP_DRAIN_MS", ms, 1);
  ftc__param_reset();
}

/* Hand owner's failure dump of `epoch` to the writer. */
static void submit(ftc_comm_t *owner, int64_t epoch) {
  ftc_rec_outcome_t o = FTC_REC_OUTCOME_INIT;
  o.epoch = epoch;
  o.failed = 1;
  o.status = FTC_ERR_TIMEOUT;
  o.pending = "a test: no coordinator";
  ftc_rec_capture_t *c = ftc_rec_capture();
  assert_non_null(c);
  ftc__dw_job_t *j = ftc__dw_job_new(owner, c, "timeout", &o, (uint64_t)epoch, FTC_ERR_TIMEOUT, NULL, 0);
  assert_non_null(j);
  ftc__dw_submit(j);
}

/* Until the writer has taken the job in front (it sleeps in it). */
static void wait_writer_busy(void) {
  int64_t deadline = ftc__now_ns() + 10000000000LL;
  for (;;) {
    int queued, busy;
    ftc__dw_stats(&queued, &busy);
    if (busy && queued == 0) return;
    assert_true(ftc__now_ns() < deadline);
    usleep(1000);
  }
}

/* Which epochs have a dump in dir: landed[e] for e < n. */
static void landed_epochs(const char *dir, int *landed, int n) {
  memset(landed, 0, (size_t)n * sizeof(*landed));
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue; /* a temporary file is not a dump */
    char path[512], buf[8192];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    const char *v = strstr(buf, "\"failure\":{\"epoch\":");
    assert_non_null(v);
    int epoch = atoi(v + strlen("\"failure\":{\"epoch\":"));
    assert_true(epoch >= 0 && epoch < n);
    assert_int_equal(landed[epoch], 0); /* each job writes one file */
    landed[epoch] = 1;
  }
  closedir(d);
}

static void a_seventeenth_waiting_dump_drops_the_oldest_waiting_one(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("60000");
  ftc__dw_retain();
  submit(fx->a, 0);
  wait_writer_busy(); /* epoch 0 is being written: it does not wait */
  for (int e = 1; e <= 17; e++) submit(fx->a, e);
  int queued, busy;
  ftc__dw_stats(&queued, &busy);
  assert_int_equal(queued, 16);
  ftc__dw_release(fx->a); /* within the drain time: every waiting one is written */
  int landed[18];
  landed_epochs(fx->dir, landed, 18);
  assert_int_equal(landed[0], 1);  /* the one being written stays */
  assert_int_equal(landed[1], 0);  /* the oldest waiting one went */
  for (int e = 2; e <= 17; e++) assert_int_equal(landed[e], 1);
}

static void destroy_writes_every_dump_within_the_drain_time(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("60000");
  ftc__dw_retain();
  for (int e = 0; e < 4; e++) submit(fx->a, e);
  ftc__dw_release(fx->a);
  int landed[4];
  landed_epochs(fx->dir, landed, 4);
  for (int e = 0; e < 4; e++) assert_int_equal(landed[e], 1);
  int queued, busy;
  ftc__dw_stats(&queued, &busy);
  assert_int_equal(queued + busy, 0);
}

static void destroy_drops_the_dumps_still_waiting_after_the_drain_time(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("50"); /* half a write: epoch 0 is still being written then */
  ftc__dw_retain();
  submit(fx->a, 0);
  wait_writer_busy();
  for (int e = 1; e < 5; e++) submit(fx->a, e);
  ftc__dw_release(fx->a); /* the last user: joins the writer */
  int queued, busy;
  ftc__dw_stats(&queued, &busy);
  assert_int_equal(queued + busy, 0);
  usleep(3 * WRITE_MS * 1000); /* a dropped job written late would show now */
  int landed[5];
  landed_epochs(fx->dir, landed, 5);
  assert_int_equal(landed[0], 1); /* the one being written was finished */
  for (int e = 1; e < 5; e++) assert_int_equal(landed[e], 0);
}

static void destroy_drops_only_its_own_communicators_dumps(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("50");
  ftc__dw_retain();
  ftc__dw_retain();
  submit(fx->b, 0);
  wait_writer_busy();
  for (int e = 1; e < 7; e++) submit(e % 2 ? fx->a : fx->b, e); /* a: 1, 3, 5; b: 2, 4, 6 */
  ftc__dw_release(fx->a);
  int queued, busy;
  ftc__dw_stats(&queued, &busy);
  assert_int_equal(queued, 3); /* b's: the writer goes on */
  set_drain_ms("60000");
  ftc__dw_release(fx->b);
  int landed[7];
  landed_epochs(fx->dir, landed, 7);
  for (int e = 0; e < 7; e++) assert_int_equal(landed[e], e % 2 == 0);
}

int main(void) {
  /* Before the first job: the fault point is parsed once. */
  setenv("FTCOMM_FAULT", "dumpwrite:100", 1);
  ftc__fault_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_seventeenth_waiting_dump_drops_the_oldest_waiting_one, setup, teardown),
      cmocka_unit_test_setup_teardown(destroy_writes_every_dump_within_the_drain_time, setup, teardown),
      cmocka_unit_test_setup_teardown(destroy_drops_the_dumps_still_waiting_after_the_drain_time, setup, teardown),
      cmocka_unit_test_setup_teardown(destroy_drops_only_its_own_communicators_dumps, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
