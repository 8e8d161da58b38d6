/*
 * test_dumpwriter.c - the process's dump writer thread (core/dumpwriter.c):
 * at most 16 dumps wait, one more drops the oldest waiting one; destroying
 * a communicator waits up to FTCOMM_DUMP_DRAIN_MS for its dumps and drops
 * those still waiting then, and only its own. A failure dump written before
 * the coordinator's verdict gets it when it comes: written with it if it
 * still waits, else the file is replaced whole by the same dump with it (a
 * reader never sees a torn file), and a removed dump is not brought back.
 *
 * The disk is made slow with the fault point dumpwrite:MS (every write
 * sleeps), so jobs pile up behind the one being written. Which dumps landed
 * is read back from the files: each job describes its own epoch.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
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
#include "ftc_log.h"
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

/* Hand owner's failure dump of `epoch` to the writer, with no verdict
 * yet; keep: until one comes (its id), else 0. */
static uint64_t submit_kept(ftc_comm_t *owner, int64_t epoch, int keep) {
  ftc_rec_outcome_t o = FTC_REC_OUTCOME_INIT;
  o.epoch = epoch;
  o.failed = 1;
  o.status = FTC_ERR_TIMEOUT;
  o.pending = "a test: no verdict yet";
  ftc_rec_capture_t *c = ftc_rec_capture();
  assert_non_null(c);
  ftc__dw_job_t *j = ftc__dw_job_new(owner, c, "timeout", &o, (uint64_t)epoch, FTC_ERR_TIMEOUT, NULL, 0);
  assert_non_null(j);
  uint64_t id = keep ? ftc__dw_job_keep_for_verdict(j) : 0;
  ftc__dw_submit(j);
  return id;
}

static void submit(ftc_comm_t *owner, int64_t epoch) { submit_kept(owner, epoch, 0); }

/* The coordinator's verdict on `epoch`: epoch + 1 dropped rank 1, crashed. */
static void verdict(ftc_comm_t *owner, uint64_t id, int64_t epoch) {
  ftc_rec_dropped_t gone = {1, 1, 42, "crashed", "a test: its session closed"};
  ftc_rec_outcome_t o = FTC_REC_OUTCOME_INIT;
  o.epoch = epoch;
  o.failed = 1;
  o.status = FTC_ERR_TIMEOUT;
  o.next_epoch = epoch + 1;
  o.dropped = &gone;
  o.ndropped = 1;
  ftc__dw_verdict(owner, id, &o);
}

/* Until the writer has nothing to do. */
static void wait_writer_idle(void) {
  int64_t deadline = ftc__now_ns() + 10000000000LL;
  for (;;) {
    int queued, busy;
    ftc__dw_stats(&queued, &busy);
    if (!busy && queued == 0) return;
    assert_true(ftc__now_ns() < deadline);
    usleep(1000);
  }
}

/* The only file in dir (a dump: hidden temporaries fail the test). */
static void only_dump(const char *dir, char *path, size_t len) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    assert_true(e->d_name[0] != '.');
    snprintf(path, len, "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(d);
  assert_int_equal(n, 1);
}

static char *slurp(const char *path) {
  static char buf[65536];
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  size_t len = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[len] = '\0';
  return buf;
}

#define DECIDED "\"verdict\":{\"epoch\":3,\"decided\":true,\"next_epoch\":4,\"dropped\":[{\"rank\":1,"
#define PENDING "\"verdict\":{\"epoch\":3,\"decided\":false,"

/* How many dumps in dir contain text. */
static int dumps_saying(const char *dir, const char *text) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  char path[512];
  int n = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    n += strstr(slurp(path), text) != NULL;
  }
  closedir(d);
  return n;
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

/* Epoch 3's dump of a, written and kept for its verdict (none yet); its
 * path in path. */
static uint64_t written_awaiting_verdict(fixture_t *fx, char *path, size_t len) {
  set_drain_ms("60000");
  ftc__dw_retain();
  uint64_t id = submit_kept(fx->a, 3, 1);
  wait_writer_idle();
  only_dump(fx->dir, path, len);
  return id;
}

static void a_verdict_after_the_write_replaces_the_dump_with_it(void **state) {
  fixture_t *fx = *state;
  char path[512], before[4096];
  uint64_t id = written_awaiting_verdict(fx, path, sizeof(path));
  const char *text = slurp(path);
  assert_non_null(strstr(text, PENDING));
  const char *t = strstr(text, "\"trigger_time_ns\":");
  assert_non_null(t);
  snprintf(before, sizeof(before), "%.40s", t);
  uint64_t written = ftc_rec_dump_count();
  verdict(fx->a, id, 3);
  ftc__dw_release(fx->a);
  char again[512];
  only_dump(fx->dir, again, sizeof(again)); /* the same file, nothing beside it */
  assert_string_equal(again, path);
  text = slurp(path);
  assert_non_null(strstr(text, DECIDED));
  assert_non_null(strstr(text, "\"reason\":\"crashed\""));
  assert_null(strstr(text, "\"pending\""));
  assert_non_null(strstr(text, before)); /* the same dump: taken at the same time */
  assert_int_equal(ftc_rec_dump_count(), written); /* not a new dump */
}

static void a_verdict_before_the_write_is_in_the_file(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("60000");
  ftc__dw_retain();
  submit(fx->b, 0); /* keeps the writer busy */
  wait_writer_busy();
  uint64_t id = submit_kept(fx->a, 3, 1);
  verdict(fx->a, id, 3);
  ftc__dw_release(fx->a);
  ftc__dw_release(fx->b);
  int landed[4];
  landed_epochs(fx->dir, landed, 4);
  assert_int_equal(landed[3], 1);
  assert_int_equal(dumps_saying(fx->dir, DECIDED), 1);
}

static void a_verdict_while_it_is_written_follows(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("60000");
  ftc__dw_retain();
  uint64_t id = submit_kept(fx->a, 3, 1);
  wait_writer_busy(); /* sleeping in the write of epoch 3 */
  verdict(fx->a, id, 3);
  ftc__dw_release(fx->a);
  char path[512];
  only_dump(fx->dir, path, sizeof(path));
  assert_non_null(strstr(slurp(path), DECIDED));
}

typedef struct reader {
  const char *path;
  int stop, reads, torn;
} reader_t;

static void *read_loop(void *arg) {
  reader_t *r = arg;
  while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
    const char *text = slurp(r->path);
    r->reads++;
    size_t len = text ? strlen(text) : 0;
    if (!text || len < 20 || strcmp(text + len - 19, "\"truncated\":false}\n") ||
        (!strstr(text, PENDING) && !strstr(text, DECIDED)))
      r->torn++;
  }
  return NULL;
}

static void readers_never_see_a_torn_dump_while_its_verdict_is_added(void **state) {
  fixture_t *fx = *state;
  char path[512];
  uint64_t id = written_awaiting_verdict(fx, path, sizeof(path));
  reader_t r = {.path = path};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, read_loop, &r), 0);
  verdict(fx->a, id, 3);
  ftc__dw_release(fx->a);
  __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  assert_true(r.reads > 0);
  assert_int_equal(r.torn, 0);
  assert_non_null(strstr(slurp(path), DECIDED));
}

static void a_removed_dump_is_not_brought_back_by_its_verdict(void **state) {
  fixture_t *fx = *state;
  char path[512];
  uint64_t id = written_awaiting_verdict(fx, path, sizeof(path));
  assert_int_equal(unlink(path), 0); /* collected, cleaned up */
  verdict(fx->a, id, 3);
  ftc__dw_release(fx->a);
  DIR *d = opendir(fx->dir);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  assert_int_equal(n, 0);
}

/* A verdict that comes while 16 dumps wait for the disk is let go (its file
 * stays "pending"): it never pushes out a dump that is not written at all. */
static void a_late_verdict_never_drops_a_dump_not_yet_written(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("60000");
  ftc__dw_retain();
  ftc__dw_retain();
  uint64_t id = submit_kept(fx->a, 20, 1);
  wait_writer_idle(); /* epoch 20 is on disk, pending */
  submit(fx->b, 0);
  wait_writer_busy();
  for (int e = 1; e <= 16; e++) submit(fx->b, e);
  verdict(fx->a, id, 20);
  int queued, busy;
  ftc__dw_stats(&queued, &busy);
  assert_int_equal(queued, 16);
  ftc__dw_release(fx->a);
  ftc__dw_release(fx->b);
  int landed[21];
  landed_epochs(fx->dir, landed, 21);
  for (int e = 0; e <= 16; e++) assert_int_equal(landed[e], 1);
  assert_int_equal(landed[20], 1);
}

/* A new dump that finds 16 waiting pushes out a waiting verdict (its file
 * is on disk already) before any dump that is not written yet. */
static void a_new_dump_drops_a_waiting_verdict_first(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("60000");
  ftc__dw_retain();
  ftc__dw_retain();
  uint64_t id = submit_kept(fx->a, 20, 1);
  wait_writer_idle();
  submit(fx->b, 0);
  wait_writer_busy();
  for (int e = 1; e <= 8; e++) submit(fx->b, e);
  verdict(fx->a, id, 20); /* waits behind 1-8 */
  for (int e = 9; e <= 16; e++) submit(fx->b, e); /* the 16th: the verdict goes */
  int queued, busy;
  ftc__dw_stats(&queued, &busy);
  assert_int_equal(queued, 16);
  ftc__dw_release(fx->a);
  ftc__dw_release(fx->b);
  int landed[21];
  landed_epochs(fx->dir, landed, 21);
  for (int e = 0; e <= 16; e++) assert_int_equal(landed[e], 1);
  assert_int_equal(dumps_saying(fx->dir, "\"verdict\":{\"epoch\":20,\"decided\":false,"), 1); /* as written */
}

/* At most 16 written dumps are kept for their verdicts: a 17th lets the
 * oldest go, with a log line, and its file stays "pending" when its verdict
 * comes; the 16 kept get theirs. */
static void a_seventeenth_dump_kept_for_a_verdict_lets_the_oldest_go(void **state) {
  fixture_t *fx = *state;
  char log[] = "/tmp/ftc-test-dw-log-XXXXXX", line[128];
  ftc__log_init();
  int logfd = mkstemp(log), saved = dup(2), level = __atomic_load_n(&ftc__log_level, __ATOMIC_ACQUIRE);
  assert_true(logfd >= 0 && saved >= 0);
  set_drain_ms("60000");
  ftc__dw_retain();
  uint64_t ids[17];
  fflush(stderr);
  assert_int_equal(dup2(logfd, 2), 2);
  __atomic_store_n(&ftc__log_level, FTC_LOG_WARN, __ATOMIC_RELEASE); /* whatever the environment says */
  ids[0] = submit_kept(fx->a, 0, 1);
  wait_writer_busy(); /* the other 16 then fit in the queue */
  for (int e = 1; e < 17; e++) ids[e] = submit_kept(fx->a, e, 1);
  wait_writer_idle();
  fflush(stderr);
  dup2(saved, 2);
  __atomic_store_n(&ftc__log_level, level, __ATOMIC_RELEASE);
  verdict(fx->a, ids[0], 0);
  wait_writer_idle();
  for (int e = 1; e < 17; e++) verdict(fx->a, ids[e], e); /* 16 rewrites: they fit in the queue */
  ftc__dw_release(fx->a); /* after the rewrites */
  assert_int_equal(dumps_saying(fx->dir, "\"verdict\":{\"epoch\":0,\"decided\":false,"), 1);
  for (int e = 1; e < 17; e++) {
    snprintf(line, sizeof(line), "\"verdict\":{\"epoch\":%d,\"decided\":true,\"next_epoch\":%d,", e, e + 1);
    assert_int_equal(dumps_saying(fx->dir, line), 1);
  }
  const char *text = slurp(log);
  assert_non_null(text);
  const char *said = strstr(text, "more than 16 written failure dumps wait for the coordinator's "
                                  "verdict: let go of the oldest, ");
  assert_non_null(said);
  assert_non_null(strstr(said, fx->dir)); /* names the file */
  assert_non_null(strstr(said, ".json (it stays as written, its verdict pending)\n"));
  assert_null(strstr(said + 1, "more than 16 written")); /* once */
  close(logfd);
  close(saved);
  unlink(log);
}

static void a_dump_whose_verdict_never_came_stays_pending(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("60000");
  ftc__dw_retain();
  uint64_t id = submit_kept(fx->a, 3, 1);
  wait_writer_idle();
  ftc__dw_release(fx->a); /* lets go of the capture it kept */
  verdict(fx->a, id, 3);  /* too late: its communicator is gone */
  char path[512];
  only_dump(fx->dir, path, sizeof(path));
  assert_non_null(strstr(slurp(path), PENDING));
}

/* ---- termination: SIGTERM waits for the writer (forked children) ---- */

static int count_dumps(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* A child that holds the writer, submits njobs dumps (each write takes
 * WRITE_MS), then gets SIGTERM once (twice with `again`, the second after
 * 50 ms) and waits to be ended. Returns its wait status; *ms: how long
 * after the first signal it ended. */
static int child_terminated(fixture_t *fx, int njobs, int again, int64_t *ms) {
  int64_t t0 = 0;
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(pipefd[0]);
    ftc__dw_retain();
    for (int i = 0; i < njobs; i++) submit(fx->a, i);
    char c = 'x';
    if (write(pipefd[1], &c, 1) != 1) _exit(3);
    raise(SIGTERM);
    if (again) {
      usleep(50000);
      raise(SIGTERM);
    }
    for (;;) pause(); /* the drain thread ends the process */
  }
  close(pipefd[1]);
  char c;
  assert_int_equal(read(pipefd[0], &c, 1), 1);
  close(pipefd[0]);
  t0 = ftc__now_ns();
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  *ms = (ftc__now_ns() - t0) / 1000000;
  return status;
}

static void sigterm_ends_the_process_once_its_dumps_are_written(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("60000");
  int64_t ms;
  int status = child_terminated(fx, 4, 0, &ms);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGTERM); /* ended by the signal, as without ftcomm */
  assert_int_equal(count_dumps(fx->dir), 4);    /* every dump on disk first */
  assert_true(ms >= 3 * WRITE_MS);              /* it waited for them */
}

static void sigterm_with_nothing_to_write_ends_the_process_at_once(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("60000");
  int64_t ms;
  int status = child_terminated(fx, 0, 0, &ms);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGTERM);
  assert_true(ms < 2000); /* (a bound on a busy host, not the expectation: at once) */
}

static void sigterm_waits_no_longer_than_the_drain_time(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("250");
  int64_t ms;
  int status = child_terminated(fx, 12, 0, &ms); /* 1.2 s of writes */
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGTERM);
  assert_true(ms >= 200 && ms < 1100);
  assert_true(count_dumps(fx->dir) < 12);
}

static void a_second_sigterm_ends_the_process_at_once(void **state) {
  fixture_t *fx = *state;
  set_drain_ms("60000");
  int64_t ms;
  int status = child_terminated(fx, 12, 1, &ms); /* 1.2 s of writes */
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGTERM);
  assert_true(ms < 1100);
  assert_true(count_dumps(fx->dir) < 12);
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
      cmocka_unit_test_setup_teardown(a_verdict_after_the_write_replaces_the_dump_with_it, setup, teardown),
      cmocka_unit_test_setup_teardown(a_verdict_before_the_write_is_in_the_file, setup, teardown),
      cmocka_unit_test_setup_teardown(a_verdict_while_it_is_written_follows, setup, teardown),
      cmocka_unit_test_setup_teardown(readers_never_see_a_torn_dump_while_its_verdict_is_added, setup, teardown),
      cmocka_unit_test_setup_teardown(a_removed_dump_is_not_brought_back_by_its_verdict, setup, teardown),
      cmocka_unit_test_setup_teardown(a_dump_whose_verdict_never_came_stays_pending, setup, teardown),
      cmocka_unit_test_setup_teardown(a_late_verdict_never_drops_a_dump_not_yet_written, setup, teardown),
      cmocka_unit_test_setup_teardown(a_new_dump_drops_a_waiting_verdict_first, setup, teardown),
      cmocka_unit_test_setup_teardown(a_seventeenth_dump_kept_for_a_verdict_lets_the_oldest_go, setup, teardown),
      cmocka_unit_test_setup_teardown(sigterm_ends_the_process_once_its_dumps_are_written, setup, teardown),
      cmocka_unit_test_setup_teardown(sigterm_with_nothing_to_write_ends_the_process_at_once, setup, teardown),
      cmocka_unit_test_setup_teardown(sigterm_waits_no_longer_than_the_drain_time, setup, teardown),
      cmocka_unit_test_setup_teardown(a_second_sigterm_ends_the_process_at_once, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
