/*
 * backoff.c - capped exponential backoff with jitter (xorshift64*, seeded
 * from the clock unless a test seeds it).
 */
#include "backoff.h"

#include "ftc_time.h"

int64_t ftck_backoff_raw(int64_t base_ms, int64_t max_ms, int attempt) {
  int64_t d = base_ms > 0 ? base_ms : 1;
  for (int i = 0; i < attempt && d < max_ms; i++) d *= 2;
  return d > max_ms ? max_ms : d;
}

static uint64_t next_rand(uint64_t *s) {
  if (*s == 0) *s = (uint64_t)ftc__now_ns() | 1;
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

int64_t ftck_backoff_next(ftck_backoff_t *b) {
  int64_t d = ftck_backoff_raw(b->base_ms, b->max_ms, b->attempt);
  if (b->attempt < 62) b->attempt++;
  double j = b->jitter < 0 ? 0 : b->jitter > 1 ? 1 : b->jitter;
  double u = (double)(next_rand(&b->rng) >> 11) / 9007199254740992.0; /* [0,1) */
  int64_t low = d - (int64_t)((double)d * j);
  return low + (int64_t)((double)(d - low) * u);
}

void ftck_backoff_reset(ftck_backoff_t *b) { b->attempt = 0; }
