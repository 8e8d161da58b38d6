/*
 * ftc_alloc.c - the allocation hook with fault injection for tests.
 */
#include "ftc_alloc.h"

#include <stdlib.h>
#include <string.h>

static long fail_at;  /* 0: never fail */
static long counter;

static _Thread_local long thread_fail_at, thread_counter; /* ftc__alloc_fail_at_thread */

/* Allocations are counted only while a test has armed a failure: the
 * shared counter's atomic add was a cache line that every thread of a
 * process bounced on every allocation. */
static int should_fail(void) {
  if (thread_fail_at > 0 && ++thread_counter == thread_fail_at) return 1;
  long f = __atomic_load_n(&fail_at, __ATOMIC_RELAXED);
  if (f <= 0) return 0;
  return __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) == f;
}

void ftc__alloc_fail_at_thread(long n) {
  thread_counter = 0;
  thread_fail_at = n;
}

void ftc__alloc_fail_at(long n) {
  __atomic_store_n(&counter, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&fail_at, n, __ATOMIC_RELAXED);
}

long ftc__alloc_count(void) { return __atomic_load_n(&counter, __ATOMIC_RELAXED); }

void *ftc__malloc(size_t n) { return should_fail() ? NULL : malloc(n ? n : 1); }

void *ftc__calloc(size_t nmemb, size_t size) {
  return should_fail() ? NULL : calloc(nmemb ? nmemb : 1, size ? size : 1);
}

void *ftc__realloc(void *p, size_t n) { return should_fail() ? NULL : realloc(p, n ? n : 1); }

char *ftc__strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = ftc__malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

void ftc__free(void *p) { free(p); }
