/*
 * ftc_error.c - status strings and the thread-local last-error detail.
 */
#include "ftc_error.h"

#include <stdarg.h>
#include <stdio.h>

static __thread char last_error[512];

static const char *const status_strings[FTC_STATUS_COUNT] = {
    [FTC_OK] = "success",
    [FTC_ERR_INVALID_ARGUMENT] = "invalid argument",
    [FTC_ERR_NO_MEMORY] = "out of memory",
    [FTC_ERR_SYSTEM] = "system call failed",
    [FTC_ERR_TIMEOUT] = "operation timed out",
    [FTC_ERR_PEER_LOST] = "a peer rank was lost",
    [FTC_ERR_REVOKED] = "communicator epoch revoked; recover before the next collective",
    [FTC_ERR_AUTH] = "authentication failed (wrong job token)",
    [FTC_ERR_PROTOCOL] = "protocol error (malformed or unexpected message)",
    [FTC_ERR_BELOW_MIN_SIZE] = "fewer ranks than the job's minimum size",
    [FTC_ERR_NOT_SUPPORTED] = "not supported by this backend or library version",
    [FTC_ERR_BACKEND] = "backend library error",
    [FTC_ERR_LIBRARY_NOT_FOUND] = "backend library not found",
    [FTC_ERR_IN_PROGRESS] = "operation in progress",
    [FTC_ERR_ABORTED] = "communicator aborted",
    [FTC_ERR_CONFIG] = "invalid configuration",
    [FTC_ERR_COORDINATOR] = "coordinator unreachable or session closed",
    [FTC_ERR_INTERNAL] = "internal error",
    [FTC_ERR_MISMATCH] = "ranks passed different arguments to one collective or send/recv pair",
};

const char *ftc_strerror(ftc_status_t status) {
  if ((int)status < 0 || status >= FTC_STATUS_COUNT || !status_strings[status])
    return "unknown status code";
  return status_strings[status];
}

const char *ftc_last_error(void) { return last_error; }

void ftc__error_clear(void) { last_error[0] = '\0'; }

ftc_status_t ftc__error(ftc_status_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
  return status;
}
