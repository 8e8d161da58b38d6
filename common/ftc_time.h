/*
 * ftc_time.h - clocks. Monotonic nanoseconds for timeouts and durations,
 * wall-clock nanoseconds for dumps and logs.
 */
#ifndef FTC_TIME_H
#define FTC_TIME_H

#include <stdint.h>
#include <time.h>

static inline int64_t ftc__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int64_t ftc__wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A deadline from a timeout in ms; a negative timeout means none (INT64_MAX). */
static inline int64_t ftc__deadline_ns(int64_t timeout_ms) {
  if (timeout_ms < 0) return INT64_MAX;
  return ftc__now_ns() + timeout_ms * 1000000LL;
}

#endif
