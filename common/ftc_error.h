/*
 * ftc_error.h - status codes with a thread-local detail message, and the one
 * checked-call macro. ftc__error() records "what went wrong and what to do"
 * for ftc_last_error() and returns the status, so a failure is reported in
 * one line: return ftc__error(FTC_ERR_INVALID_ARGUMENT, "root %d ...", r);
 */
#ifndef FTC_ERROR_H
#define FTC_ERROR_H

#include "ftc_log.h"
#include "ftcomm.h"

ftc_status_t ftc__error(ftc_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void ftc__error_clear(void);

/* Run a call returning ftc_status_t; on failure log file:line -> status at
 * debug level, store it in `res` and jump to `label`. */
#define FTC_CHECK_GOTO(call, res, label)                                          \
  do {                                                                            \
    (res) = (call);                                                               \
    if ((res) != FTC_OK) {                                                        \
      FTC_DEBUG(FTC_SUB_ALL, "%s:%d -> %s", __FILE__, __LINE__, ftc_strerror(res)); \
      goto label;                                                                 \
    }                                                                             \
  } while (0)

#endif
