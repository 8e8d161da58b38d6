/*
 * ftc_assert.c - the failure end of FTC_ASSERT and the owner test of
 * FTC_ASSERT_HELD (ftc_assert.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ftc_assert.h"

void ftc__assert_fail(const char *expr, const char *file, int line, const char *fn) {
  fprintf(stderr, "ftcomm: contract broken: %s (%s:%d, %s)\n", expr, file, line, fn);
  fflush(stderr);
  abort();
}

int ftc__mutex_held(pthread_mutex_t *mu) {
#ifdef __GLIBC__
  /* glibc stores the owner's thread id in every mutex it locks; only the
   * owner writes it while the mutex is held, so reading it here races with
   * nothing when the answer is yes. */
  return mu->__data.__owner == gettid();
#else
  if (pthread_mutex_trylock(mu) == EBUSY) return 1;
  pthread_mutex_unlock(mu);
  return 0;
#endif
}
