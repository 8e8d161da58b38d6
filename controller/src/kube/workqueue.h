/*
 * workqueue.h - a rate-limited work queue of string keys ("ns/name"), with
 * the semantics of client-go's workqueue:
 *   - an item is in the queue at most once (adds while queued are merged);
 *   - an item being processed (between get and done) is never handed to a
 *     second worker; adds meanwhile mark it dirty and it is queued again at
 *     done;
 *   - add_after delays an add; add_rate_limited delays it by a per-item
 *     exponential backoff (base * 2^failures, capped) until forget.
 * All calls are thread safe. One mutex, never held while calling out.
 */
#ifndef FTCK_WORKQUEUE_H
#define FTCK_WORKQUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "ftcomm.h"

typedef struct ftck_workqueue ftck_workqueue_t;

ftc_status_t ftck_workqueue_create(int64_t base_delay_ms, int64_t max_delay_ms, ftck_workqueue_t **out);
void ftck_workqueue_destroy(ftck_workqueue_t *q);

ftc_status_t ftck_workqueue_add(ftck_workqueue_t *q, const char *key);
ftc_status_t ftck_workqueue_add_after(ftck_workqueue_t *q, const char *key, int64_t delay_ms);
ftc_status_t ftck_workqueue_add_rate_limited(ftck_workqueue_t *q, const char *key);
/* Stop tracking the failures of key (its next rate-limited add is fast). */
void ftck_workqueue_forget(ftck_workqueue_t *q, const char *key);
/* Rate-limited adds of key since the last forget. */
int ftck_workqueue_requeues(ftck_workqueue_t *q, const char *key);

/* Block until an item is ready (at most timeout_ms; negative waits
 * forever). FTC_OK with *key (owned by the caller; pass it to done, then
 * ftc__free it); FTC_ERR_TIMEOUT; FTC_ERR_ABORTED after shutdown. */
ftc_status_t ftck_workqueue_get(ftck_workqueue_t *q, int64_t timeout_ms, char **key);
void ftck_workqueue_done(ftck_workqueue_t *q, const char *key);

/* Items ready now (queued, not processing, not waiting on a delay). */
size_t ftck_workqueue_len(ftck_workqueue_t *q);
/* Items waiting for their delay. */
size_t ftck_workqueue_waiting(ftck_workqueue_t *q);
/* Wake every getter; later gets return FTC_ERR_ABORTED. */
void ftck_workqueue_shutdown(ftck_workqueue_t *q);

#endif
