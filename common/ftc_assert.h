/*
 * ftc_assert.h - contracts checked where it is cheap to look: FTC_ASSERT is
 * on in DEBUG=1 and sanitizer builds (the Makefile defines FTC_ASSERTS
 * there) and compiled out elsewhere, where its expression is not evaluated.
 * A failed check prints the expression, where it is and the function, then
 * aborts (a core dump, or the sanitizer's stack).
 *
 * FTC_ASSERT_HELD(mu): the calling thread holds mu; the precondition of the
 * *_locked functions, first thing in each.
 */
#ifndef FTC_ASSERT_H
#define FTC_ASSERT_H

#include <pthread.h>

#ifdef FTC_ASSERTS
#define FTC_ASSERT(cond) ((cond) ? (void)0 : ftc__assert_fail(#cond, __FILE__, __LINE__, __func__))
#define FTC_ASSERT_HELD(mu) FTC_ASSERT(ftc__mutex_held(mu))
#else
#define FTC_ASSERT(cond) ((void)sizeof(!(cond)))
#define FTC_ASSERT_HELD(mu) ((void)sizeof(mu))
#endif

__attribute__((noreturn)) void ftc__assert_fail(const char *expr, const char *file, int line,
                                                const char *fn);
/* 1 when the calling thread holds mu (glibc records a mutex's owner; elsewhere:
 * some thread holds it). */
int ftc__mutex_held(pthread_mutex_t *mu);

#endif
