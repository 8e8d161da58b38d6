/*
 * backoff.h - exponential backoff with jitter, for retries against the API
 * server (watch restarts, failed requests) and the work queue's per-item
 * delays. Deterministic when seeded, so tests can check the bounds.
 */
#ifndef FTCK_BACKOFF_H
#define FTCK_BACKOFF_H

#include <stdint.h>

typedef struct ftck_backoff {
  int64_t base_ms;  /* first delay */
  int64_t max_ms;   /* cap */
  double jitter;    /* 0..1: a delay d becomes uniform in [d*(1-jitter), d] */
  int attempt;      /* failures so far */
  uint64_t rng;     /* xorshift state; 0 seeds from the clock */
} ftck_backoff_t;

#define FTCK_BACKOFF_INIT(base, max) {(base), (max), 0.5, 0, 0}

/* The un-jittered delay of failure number `attempt` (0-based): base * 2^attempt, capped. */
int64_t ftck_backoff_raw(int64_t base_ms, int64_t max_ms, int attempt);
/* The next delay in ms, and count one more failure. */
int64_t ftck_backoff_next(ftck_backoff_t *b);
/* Forget the failures (after a success). */
void ftck_backoff_reset(ftck_backoff_t *b);

#endif
