/*
 * bench_record.c - cost of recording one collective in the flight recorder:
 * schedule + started + completed with the times passed in (as the runtime
 * does, from the clock reads it makes anyway) on a 2000-entry ring (the
 * default), versus a disabled ring (FTCOMM_RECORDER_ENTRIES=0); and
 * ftc_rec_schedule() alone, which reads the clock itself. Prints "name ns" lines, the
 * best of several runs. With --callgrind N it records N collectives through
 * record_one() only, for `valgrind --tool=callgrind --toggle-collect=record_one`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftc_recorder.h"
#include "ftc_time.h"

__attribute__((noinline)) void record_one(ftc_rec_t *rec, uint64_t seq, int64_t t);
__attribute__((noinline)) void record_one(ftc_rec_t *rec, uint64_t seq, int64_t t) {
  uint64_t id = ftc_rec_schedule_at(rec, t, 0, seq, FTC_REC_ALLREDUCE, FTC_F32, 1 << 20, 4 << 20,
                                    -1, 600000000000LL);
  ftc_rec_started(rec, id, t + 1);
  ftc_rec_completed(rec, id, t + 2);
}

__attribute__((noinline)) static void schedule_one(ftc_rec_t *rec, uint64_t seq) {
  ftc_rec_schedule(rec, 0, seq, FTC_REC_ALLREDUCE, FTC_F32, 1 << 20, 4 << 20, -1, 600000000000LL);
}

static double run(ftc_rec_t *rec, long n, int full) {
  double best = 1e18;
  for (int rep = 0; rep < 5; rep++) {
    int64_t t0 = ftc__now_ns();
    for (long i = 0; i < n; i++) {
      if (full) record_one(rec, (uint64_t)i + 1, t0);
      else schedule_one(rec, (uint64_t)i + 1);
    }
    double ns = (double)(ftc__now_ns() - t0) / (double)n;
    if (ns < best) best = ns;
  }
  return best;
}

int main(int argc, char **argv) {
  setenv("FTCOMM_DUMP_SIGNAL", "0", 1);
  ftc_rec_t *on, *off;
  if (ftc_rec_create(2000, 1, "bench", 0, 0, 1, &on) != FTC_OK ||
      ftc_rec_create(0, 2, "off", 0, 0, 1, &off) != FTC_OK) {
    fprintf(stderr, "bench_record: %s\n", ftc_last_error());
    return 1;
  }
  if (argc == 3 && !strcmp(argv[1], "--callgrind")) {
    long n = atol(argv[2]);
    for (long i = 0; i < n; i++) record_one(on, (uint64_t)i + 1, 1000);
    printf("recorded %ld\n", n);
  } else {
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    /* Clock read alone, to show what part of schedule is the timestamp. */
    int64_t t0 = ftc__now_ns(), sink = 0;
    for (long i = 0; i < n; i++) sink += ftc__now_ns();
    double clock_ns = (double)(ftc__now_ns() - t0) / (double)n;
    printf("record_on_ns %.1f\n", run(on, n, 1));
    printf("record_off_ns %.1f\n", run(off, n, 1));
    printf("schedule_on_ns %.1f\n", run(on, n, 0));
    printf("clock_ns %.1f\n", clock_ns + (sink == 42 ? 1 : 0));
  }
  ftc_rec_destroy(on);
  ftc_rec_destroy(off);
  return 0;
}
