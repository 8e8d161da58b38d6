/*
 * test_backend_seam.c - the core's recovery paths on a backend it has never
 * heard of: tests/unit/fake_backend.c, built against core/backend.h alone
 * and registered at run time. Three ranks are threads of this process, each
 * with its own communicator and session to a coordinator in this process
 * (the real one); the public API drives them through a lost rank and the
 * shrink that follows, a grow that admits a joiner at a step boundary, and
 * a revoke of an epoch the coordinator replaced while a collective waited
 * on a hung member.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ftc_coord.h"
#include "fake_backend.h"
#include "ftcomm.h"

#define TOKEN "seam-test-token"
#define N 3

/* A barrier that gives up after GATE_S seconds, so that a rank that failed
 * early (and never comes) fails the test instead of hanging it. */
#define GATE_S 60
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n, arrived;
} gate_t;

static void gate_init(gate_t *g, int n) {
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->n = n;
  g->arrived = 0;
}

static void gate_wait(gate_t *g) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += GATE_S;
  pthread_mutex_lock(&g->mu);
  if (++g->arrived >= g->n) pthread_cond_broadcast(&g->cv);
  while (g->arrived < g->n && pthread_cond_timedwait(&g->cv, &g->mu, &ts) == 0) {}
  pthread_mutex_unlock(&g->mu);
}

typedef struct job {
  ftc__coord_t *co;
  char addr[64];
  gate_t crashed;    /* the victim is gone (lost rank) / the hung rank may leave */
  gate_t grown;      /* the survivors have shrunk: the joiner may start */
  int result[N + 1]; /* what each thread found: 0 ok */
  int revoked;       /* collectives that ended FTC_ERR_REVOKED */
  int summed;        /* ranks past the revoke test's first allreduce */
  char why[N + 1][256];
} job_t;

typedef struct rank_arg {
  job_t *job;
  int slot, joiner;
  int (*body)(job_t *job, ftc_comm_t *comm, int slot);
} rank_arg_t;

static int fail_at(job_t *job, int slot, int line, const char *what, ftc_status_t st) {
  snprintf(job->why[slot], sizeof(job->why[slot]), "line %d: %s: %s (%s)", line, what,
           ftc_strerror(st), ftc_last_error());
  return 1;
}
#define CHECK(cond, what, st)                                                                      \
  do {                                                                                             \
    if (!(cond)) return fail_at(job, slot, __LINE__, what, st);                                    \
  } while (0)

static void job_start(job_t *job) {
  static uint64_t jobs;
  memset(job, 0, sizeof(*job));
  ftc__coord_cfg_t cfg = {
      .bind_host = "127.0.0.1",
      .job = "seam",
      .token = TOKEN,
      .world_size = N,
      .min_size = 2,
      .heartbeat_ms = 100,
      .heartbeat_timeout_ms = 5000,
      /* Member ids apart from an earlier job's (the fake's crashed ones). */
      .member_id_base = 1000 * ++jobs,
  };
  assert_int_equal(ftc__coord_create(&cfg, &job->co), FTC_OK);
  snprintf(job->addr, sizeof(job->addr), "127.0.0.1:%d", ftc__coord_port(job->co));
}

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  job_t *job = a->job;
  int slot = a->slot;
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  cfg.job = "seam";
  cfg.token = TOKEN;
  cfg.coordinator = job->addr;
  cfg.slot = a->slot;
  cfg.world_size = N;
  cfg.min_size = 2;
  cfg.joiner = a->joiner;
  cfg.backend = "fake";
  cfg.timeout_ms = 20000;
  cfg.connect_timeout_ms = 20000;
  cfg.recorder_entries = 0;
  ftc_comm_t *comm = NULL;
  ftc_status_t st = ftc_comm_create(&cfg, &comm);
  int idx = a->joiner ? N : slot;
  if (st != FTC_OK) {
    job->result[idx] = fail_at(job, idx, __LINE__, "ftc_comm_create", st);
    return NULL;
  }
  char be[64];
  if (ftc_comm_backend(comm, be, sizeof(be)) != FTC_OK || strcmp(be, "fake") != 0) {
    job->result[idx] = fail_at(job, idx, __LINE__, "the communicator's backend is not fake",
                               FTC_OK);
  } else {
    job->result[idx] = a->body(job, comm, idx);
  }
  if (comm) ftc_comm_destroy(comm);
  return NULL;
}

/* Run body on slots 0 .. N-1 as threads; meanwhile this thread runs
 * between (NULL: nothing), which may start a joiner's thread in t[N]. */
static void run_job(job_t *job, int (*body)(job_t *, ftc_comm_t *, int),
                    int (*between)(job_t *, pthread_t *, rank_arg_t *)) {
  pthread_t t[N + 1];
  rank_arg_t a[N + 1] = {{0}};
  int joined = 0, threads = N;
  gate_init(&job->crashed, N);
  gate_init(&job->grown, N);
  for (int i = 0; i < N; i++) {
    a[i] = (rank_arg_t){job, i, 0, body};
    assert_int_equal(pthread_create(&t[i], NULL, rank_main, &a[i]), 0);
  }
  if (between) {
    joined = between(job, t, a); /* the slot whose thread it joined, or -1 */
    if (a[N].body) threads = N + 1;
  }
  for (int i = 0; i < threads; i++)
    if (i != joined) pthread_join(t[i], NULL);
  for (int i = 0; i < threads; i++)
    if (job->result[i]) print_error("rank thread %d: %s\n", i, job->why[i]);
  for (int i = 0; i < threads; i++) assert_int_equal(job->result[i], 0);
  ftc__coord_destroy(job->co);
}

/* Every rank contributes rank + 1: the sum is size * (size + 1) / 2. */
static int sum_check(job_t *job, ftc_comm_t *comm, int slot, int size) {
  int rank = -1;
  ftc_comm_rank(comm, &rank);
  int64_t x = rank + 1;
  ftc_status_t st = ftc_allreduce(&x, &x, 1, FTC_I64, FTC_SUM, comm, 10000);
  CHECK(st == FTC_OK, "allreduce", st);
  CHECK(x == size * (size + 1) / 2, "the allreduce's sum", st);
  return 0;
}

/* ---- a lost rank, the shrink, the grow ---- */

static int lost_then_grow_body(job_t *job, ftc_comm_t *comm, int slot) {
  ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;
  ftc_status_t st;
  /* A step boundary first: each rank then holds the application's state
   * in the coordinator's eyes (its ready goes ahead of the failure report
   * on the same session), so the grow below names the joiner alone new. */
  st = ftc_comm_step(comm, 10000, &info);
  CHECK(st == FTC_OK && !info.changed, "the first step", st);
  if (sum_check(job, comm, slot, N)) return 1;
  if (slot == N - 1) { /* the victim: crashes between collectives */
    fake_kill_slot(slot);
    ftc_comm_abort(comm);
    gate_wait(&job->crashed);
    return 0;
  }
  gate_wait(&job->crashed);
  /* The next collective meets the crash: the peer is lost, the epoch fails. */
  int64_t x = 1;
  st = ftc_allreduce(&x, &x, 1, FTC_I64, FTC_SUM, comm, 10000);
  CHECK(st == FTC_ERR_PEER_LOST || st == FTC_ERR_REVOKED, "the allreduce after the crash", st);
  ftc_status_t err = FTC_OK;
  ftc_comm_get_async_error(comm, &err);
  CHECK(err != FTC_OK, "the epoch is failed", err);
  st = ftc_allreduce(&x, &x, 1, FTC_I64, FTC_SUM, comm, 10000);
  CHECK(st == FTC_ERR_REVOKED, "a collective on the failed epoch", st);
  /* The shrink: the survivors agree on epoch 2 without the victim. */
  st = ftc_comm_recover(comm, 20000, &info);
  CHECK(st == FTC_OK, "ftc_comm_recover", st);
  CHECK(info.changed == 1 && info.size == N - 1 && info.lost == 1 && info.prev_size == N &&
            info.rank == slot && info.epoch >= 2,
        "the shrunk epoch's info", st);
  if (sum_check(job, comm, slot, N - 1)) return 1;
  gate_wait(&job->grown); /* the joiner starts now */
  /* The grow: step boundaries until every survivor has heard of the
   * joiner's epoch, then all of them move to it in the same call. */
  uint64_t shrunk = info.epoch;
  int steps = 0;
  do {
    st = ftc_comm_step(comm, 10000, &info);
    CHECK(st == FTC_OK, "ftc_comm_step", st);
    if (!info.changed) usleep(10000);
  } while (!info.changed && ++steps < 1000);
  if (!(info.changed && info.size == N && info.joined == 1 && info.epoch > shrunk &&
        info.sync_root == 0)) {
    snprintf(job->why[slot], sizeof(job->why[slot]),
             "the grown epoch's info after %d steps: changed %d size %d joined %d epoch %llu "
             "(shrunk: %llu) sync_root %d",
             steps, info.changed, info.size, info.joined, (unsigned long long)info.epoch,
             (unsigned long long)shrunk, info.sync_root);
    return 1;
  }
  int64_t state = 4242; /* the application's state, from the sync root */
  st = ftc_broadcast(&state, 1, FTC_I64, info.sync_root, comm, 10000);
  CHECK(st == FTC_OK, "the state's broadcast", st);
  return sum_check(job, comm, slot, N);
}

static int joiner_body(job_t *job, ftc_comm_t *comm, int slot) {
  ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;
  ftc_status_t st = ftc_comm_step(comm, 10000, &info);
  CHECK(st == FTC_OK && info.changed && info.joiner && info.size == N && info.rank == N - 1,
        "the joiner's first step", st);
  int64_t state = 0;
  st = ftc_broadcast(&state, 1, FTC_I64, info.sync_root, comm, 10000);
  CHECK(st == FTC_OK && state == 4242, "the joiner receives the state", st);
  return sum_check(job, comm, slot, N);
}

/* The joiner starts once the victim's thread has crashed and the
 * survivors have shrunk (else the coordinator may admit it in the
 * survivors' recovery already); the survivors step until it is in. */
static int start_joiner(job_t *job, pthread_t *t, rank_arg_t *a) {
  pthread_join(t[N - 1], NULL);
  gate_wait(&job->grown);
  a[N] = (rank_arg_t){job, N - 1, 1, joiner_body};
  assert_int_equal(pthread_create(&t[N], NULL, rank_main, &a[N]), 0);
  return N - 1;
}

static void a_lost_rank_is_shrunk_away_and_a_joiner_grows_the_epoch_back(void **state) {
  (void)state;
  job_t job;
  fake_stats_t before, after;
  fake_stats(&before);
  job_start(&job);
  run_job(&job, lost_then_grow_body, start_joiner);
  fake_stats(&after);
  assert_true(after.peer_lost > before.peer_lost); /* the backend saw the crash */
  assert_true(after.epochs >= before.epochs + 3);  /* 1, the shrink, the grow */
}

/* ---- a revoke ---- */

static int revoke_body(job_t *job, ftc_comm_t *comm, int slot) {
  ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;
  if (sum_check(job, comm, slot, N)) return 1;
  __atomic_fetch_add(&job->summed, 1, __ATOMIC_RELEASE);
  if (slot == N - 1) {
    /* Hung: it takes part in nothing more; its session lives until the
     * coordinator has dropped it and the others recovered. */
    gate_wait(&job->crashed);
    return 0;
  }
  /* Both wait in an allreduce that the hung rank never joins, until the
   * epoch that replaces theirs revokes it (drop_hung). The first to see
   * that epoch revokes; the other may instead see the first close its
   * handle of the failed epoch as it recovers (a lost peer). */
  int64_t x = 1;
  ftc_status_t st = ftc_allreduce(&x, &x, 1, FTC_I64, FTC_SUM, comm, 60000);
  CHECK(st == FTC_ERR_REVOKED || st == FTC_ERR_PEER_LOST, "the allreduce waiting on the hung rank",
        st);
  if (st == FTC_ERR_REVOKED) __atomic_fetch_add(&job->revoked, 1, __ATOMIC_RELAXED);
  st = ftc_comm_recover(comm, 20000, &info);
  CHECK(st == FTC_OK && info.changed && info.size == N - 1 && info.lost == 1,
        "ftc_comm_recover after the revoke", st);
  int r = sum_check(job, comm, slot, N - 1);
  gate_wait(&job->crashed);
  return r;
}

/* Once every rank is past the first allreduce and both survivors wait in
 * their second, the coordinator is told that the hung rank's slot is lost
 * (as a controller does for a failed pod): it forms an epoch without it.
 * Two ranks waiting is not enough alone: they may be waiting in the first
 * allreduce for the third rank, still on its way (slow under TSan). */
static int drop_hung(job_t *job, pthread_t *t, rank_arg_t *a) {
  (void)t;
  a[N].body = NULL;
  fake_stats_t s;
  for (int i = 0; i < 3000; i++) {
    fake_stats(&s);
    if (__atomic_load_n(&job->summed, __ATOMIC_ACQUIRE) == N && s.waiting >= N - 1) break;
    usleep(10000);
  }
  int summed = __atomic_load_n(&job->summed, __ATOMIC_ACQUIRE);
  if (summed != N || s.waiting != N - 1)
    for (int i = 0; i < N; i++)
      if (job->result[i]) print_error("rank thread %d: %s\n", i, job->why[i]);
  assert_int_equal(summed, N);
  assert_int_equal(s.waiting, N - 1);
  assert_int_equal(ftc__coord_slot_lost(job->co, N - 1, "hung in the test"), FTC_OK);
  return -1;
}

static void an_epoch_the_coordinator_replaced_is_revoked_under_a_waiting_collective(void **state) {
  (void)state;
  job_t job;
  fake_stats_t before, after;
  fake_stats(&before);
  job_start(&job);
  run_job(&job, revoke_body, drop_hung);
  fake_stats(&after);
  assert_true(job.revoked >= 1);
  assert_true(after.interrupted >= before.interrupted + 1); /* a run stopped by the revoke */
}

int main(void) {
  if (ftc__backend_register(&fake_backend) != FTC_OK) {
    fprintf(stderr, "registering the fake backend: %s\n", ftc_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_lost_rank_is_shrunk_away_and_a_joiner_grows_the_epoch_back),
      cmocka_unit_test(an_epoch_the_coordinator_replaced_is_revoked_under_a_waiting_collective),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
