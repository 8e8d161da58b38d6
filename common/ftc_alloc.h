/*
 * ftc_alloc.h - every allocation in ftcomm goes through these, so tests can
 * make the Nth allocation fail (ftc__alloc_fail_at) and loop until the call
 * under test succeeds, checking that each failure is clean.
 */
#ifndef FTC_ALLOC_H
#define FTC_ALLOC_H

#include <stddef.h>

void *ftc__malloc(size_t n);
void *ftc__calloc(size_t nmemb, size_t size);
void *ftc__realloc(void *p, size_t n);
char *ftc__strdup(const char *s);
void ftc__free(void *p);

/* Make allocation number n (counted from now, 1-based) fail; 0 disables. */
void ftc__alloc_fail_at(long n);
/* Allocations attempted since the last ftc__alloc_fail_at(n > 0); none are
 * counted while no failure is armed. */
long ftc__alloc_count(void);
/* The same, counting only the calling thread's allocations: for a call under
 * test while the library's own threads (progress, watchdog, membership)
 * allocate too, which would take the process-wide failure instead. */
void ftc__alloc_fail_at_thread(long n);

#endif
