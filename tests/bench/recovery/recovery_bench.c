/*
 * recovery_bench.c - one rank of the recovery benchmark (run.sh drives it
 * under ftcomm-run --replace). The ranks run steps back to back: the step
 * boundary (ftc_comm_step) and a small allreduce that also carries rank 0's
 * schedule (which rank fails next, the trial number, stop). At each trial
 * the chosen rank prints its wall-clock time and kills (--mode crash) or
 * stops (--mode hang) itself; the others print when their collective
 * returned the failure ("notified"), recover, and print when their first
 * collective in the smaller epoch succeeded ("shrunk"). ftcomm-run restarts
 * the victim as a joiner, which prints when it is ready to create its
 * communicator ("ready"); every rank prints when its first collective in
 * the grown epoch succeeded ("grown"), and every rank that was there before
 * when it entered the step boundary that moved it to the grown epoch
 * ("moved": what is left of a grow once the application reached its step
 * boundary). --mode baseline prints the time of
 * the first collective after start (the restart-everything path). Times are
 * CLOCK_REALTIME ns, comparable across the processes of one host.
 *
 * The lines are buffered (stdout fully buffered, 64 KiB) and written when
 * the process exits, and by the victim before it fails: a line written at
 * once goes through a pipe to the launcher, which wakes and relays it,
 * inside the very window being measured (at 16 ranks on 2 cores the
 * launcher's relaying took 0.5 ms of CPU per shrink window;
 * tests/bench/recovery/windows.sh). report.py orders them by timestamp.
 *
 * A joiner begins its communicator at its start (ftc_comm_create_begin:
 * the coordinator session, the listener, the recorder, as a standby member),
 * then does its own initialization (--init-us, default 2000: a real model
 * takes seconds to load), and finishes it when "ready" (--join create: it
 * calls ftc_comm_create only then, the path without the early start).
 * Process start and initialization are outside the grow, as the issue asks.
 *
 * A joiner also waits a random 0 to --ready-jitter-us microseconds (default 2000,
 * about two steps) before it is ready: the victim dies at a step boundary and
 * the launcher restarts it a fixed delay later, so without it the joiner
 * became ready at the same point of the running ranks' step every time (0.22
 * to 0.33 ms before a step boundary in 15 of 20 grows at 4 ranks, and its
 * view came just after that boundary: nearly a whole step's wait each time).
 * A replacement on a cluster comes at any point of the step; so does this
 * one. The jitter is before "ready", outside the grow's window.
 *
 * Between steps every rank "computes" for 1 ms (a pause). --kill-at says
 * when the chosen rank fails: "step" (the default) at the end of its
 * compute, as it would enter the next step, where the others are entering
 * that step's collective: the window from the failure to the recovery then
 * holds the library's work only, as the restart-everything baseline's does
 * (no application compute in it); "after" right after the collective that
 * chose it, so the others notice at their next collective, after 1 ms of
 * their own compute (the window holds that compute: detection and shrink
 * are at least 1 ms by construction).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ftcomm.h"

static long long wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void pause_us(long us) {
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
  const char *mode = "crash";
  const char *kill_at = "step";
  const char *join = "begin";
  int trials = 20, gap = 30, jitter_us = 2000, init_us = 2000;
  for (int i = 1; i < argc; i += 2) {
    char *end = NULL;
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    long n = v ? strtol(v, &end, 10) : 0;
    int number = v && *v && !*end && n >= 0 && n <= 1000000;
    if (v && !strcmp(argv[i], "--mode")) mode = v;
    else if (v && !strcmp(argv[i], "--kill-at")) kill_at = v;
    else if (v && !strcmp(argv[i], "--join")) join = v;
    else if (number && !strcmp(argv[i], "--init-us")) init_us = (int)n;
    else if (number && !strcmp(argv[i], "--trials")) trials = (int)n;
    else if (number && !strcmp(argv[i], "--gap")) gap = (int)n;
    else if (number && !strcmp(argv[i], "--ready-jitter-us")) jitter_us = (int)n;
    else {
      fprintf(stderr,
              "recovery_bench: usage: recovery_bench [--mode crash|hang|baseline] [--kill-at "
              "step|after] [--join begin|create] [--trials N] [--gap STEPS] [--init-us US] "
              "[--ready-jitter-us US]; not \"%s%s%s\"\n",
              argv[i], v ? " " : "", v ? v : "");
      return 2;
    }
  }
  if (strcmp(mode, "crash") && strcmp(mode, "hang") && strcmp(mode, "baseline")) {
    fprintf(stderr, "recovery_bench: --mode must be crash, hang or baseline, not \"%s\"\n", mode);
    return 2;
  }
  if (strcmp(join, "begin") && strcmp(join, "create")) {
    fprintf(stderr, "recovery_bench: --join must be begin or create, not \"%s\"\n", join);
    return 2;
  }
  if (strcmp(kill_at, "step") && strcmp(kill_at, "after")) {
    fprintf(stderr, "recovery_bench: --kill-at must be step or after, not \"%s\"\n", kill_at);
    return 2;
  }
  static char outbuf[1 << 16];
  setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));
  const char *j = getenv("FTCOMM_JOINER");
  int joiner = j && !strcmp(j, "1");
  const char *slot = getenv("FTCOMM_SLOT");
  ftc_comm_t *comm = NULL;
  ftc_comm_pending_t *pending = NULL;
  ftc_status_t st = FTC_OK;
  int early = joiner && !strcmp(join, "begin");
  if (early && (st = ftc_comm_create_begin(NULL, &pending)) != FTC_OK) {
    fprintf(stderr, "recovery_bench: create_begin: %s: %s\n", ftc_strerror(st), ftc_last_error());
    return 1;
  }
  if (joiner) {
    /* the application's own start (loading a model takes seconds), then
     * a random phase against the running ranks' steps */
    long us = init_us;
    if (jitter_us > 0) {
      unsigned seed = (unsigned)getpid() ^ (unsigned)wall_ns();
      us += (long)(rand_r(&seed) % (unsigned)jitter_us);
    }
    if (us > 0) pause_us(us);
    printf("BENCH ready slot=%s ts=%lld\n", slot ? slot : "?", wall_ns());
  }
  st = early ? ftc_comm_create_finish(pending, &comm) : ftc_comm_create(NULL, &comm);
  if (st != FTC_OK) {
    fprintf(stderr, "recovery_bench: create: %s: %s\n", ftc_strerror(st), ftc_last_error());
    return 1;
  }
  if (joiner) printf("BENCH up slot=%s ts=%lld\n", slot ? slot : "?", wall_ns());
  int rank, size, world;
  ftc_comm_rank(comm, &rank);
  ftc_comm_size(comm, &world);
  size = world;
  if (!strcmp(mode, "baseline")) {
    int64_t v = 1;
    st = ftc_allreduce(&v, &v, 1, FTC_I64, FTC_SUM, comm, FTC_TIMEOUT_DEFAULT);
    printf("BENCH first rank=%d ts=%lld ok=%d\n", rank, wall_ns(), st == FTC_OK);
    ftc_comm_destroy(comm);
    return st == FTC_OK ? 0 : 1;
  }
  const char *world_env = getenv("FTCOMM_WORLD_SIZE");
  if (world_env) world = atoi(world_env);
  int hang = !strcmp(mode, "hang");
  /* rank 0's schedule; only slot 0 (always rank 0: it never fails) uses it */
  int trial = 0, since_full = 0, after_failure = 0, after_grow = joiner, first_step = 1;
  for (;;) {
    ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;
    /* A recovery is the step boundary of the step after it. */
    st = FTC_OK;
    long long entered = wall_ns();
    if (!after_failure) st = ftc_comm_step(comm, FTC_TIMEOUT_DEFAULT, &info);
    if (st == FTC_OK && !after_failure && info.changed) {
      after_grow = 1;
      /* (a joiner's first boundary is part of its admission, not a move) */
      if (!(joiner && first_step)) printf("BENCH moved rank=%d ts=%lld\n", rank, entered);
    }
    if (!after_failure) first_step = 0;
    int64_t plan[3] = {0, 0, 0}; /* victim + 1, trial, stop */
    if (st == FTC_OK) {
      ftc_comm_rank(comm, &rank);
      ftc_comm_size(comm, &size);
      if (rank == 0) {
        since_full = size == world ? since_full + 1 : 0;
        if (trial >= trials && since_full > 3) plan[2] = 1;
        else if (trial < trials && since_full >= gap) {
          plan[0] = 1 + (trial % (world - 1)) + 1; /* ranks 1 .. world-1 */
          plan[1] = trial;
          trial++;
          since_full = 0;
        }
      }
      st = ftc_allreduce(plan, plan, 3, FTC_I64, FTC_MAX, comm, FTC_TIMEOUT_DEFAULT);
    }
    if (st == FTC_OK) {
      if (after_failure) printf("BENCH shrunk rank=%d size=%d ts=%lld\n", rank, size, wall_ns());
      if (after_grow) printf("BENCH grown rank=%d size=%d ts=%lld\n", rank, size, wall_ns());
      after_failure = after_grow = 0;
      if (plan[2]) break;
      int victim = plan[0] && plan[0] - 1 == rank;
      if (victim && !strcmp(kill_at, "step")) {
        fflush(stdout);
        pause_us(1000); /* its compute, as the others'; it fails entering the next step */
      }
      if (victim) {
        printf("BENCH %s trial=%lld rank=%d ts=%lld\n", hang ? "stop" : "kill", (long long)plan[1],
               rank, wall_ns());
        fflush(stdout);
        raise(hang ? SIGSTOP : SIGKILL);
      }
      pause_us(1000);
      continue;
    }
    printf("BENCH notified rank=%d status=%d ts=%lld\n", rank, (int)st, wall_ns());
    ftc_epoch_info_t rinfo = FTC_EPOCH_INFO_INIT;
    st = ftc_comm_recover(comm, FTC_TIMEOUT_DEFAULT, &rinfo);
    if (st == FTC_OK && rinfo.joined) after_grow = 1;
    if (st != FTC_OK) {
      fprintf(stderr, "recovery_bench: recover: %s: %s\n", ftc_strerror(st), ftc_last_error());
      ftc_comm_destroy(comm);
      return 1;
    }
    after_failure = 1;
  }
  fflush(stdout);
  ftc_comm_destroy(comm);
  return 0;
}
