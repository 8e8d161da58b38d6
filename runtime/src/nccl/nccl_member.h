/*
 * nccl_member.h - the NCCL backend's unique-id exchange through a
 * membership session: the coordinator relays an epoch's blob (the `backend`
 * message of docs/protocol.md). Header-only, so that programs which link the
 * backend without the membership client (tests/gpu) need not bring
 * libwebsockets.
 */
#ifndef FTC_NCCL_MEMBER_H
#define FTC_NCCL_MEMBER_H

#include "ftc_time.h"
#include "membership/member.h"
#include "nccl/nccl_backend.h"

static inline ftc_status_t ftc__nccl_member_publish(void *arg, uint64_t epoch, const char *blob) {
  return ftc__member_publish_backend((ftc__member_t *)arg, epoch, blob);
}

static inline ftc_status_t ftc__nccl_member_fetch(void *arg, uint64_t epoch, char *blob,
                                                  size_t len, int64_t deadline_ns) {
  int64_t ms = -1;
  if (deadline_ns != INT64_MAX) {
    ms = (deadline_ns - ftc__now_ns() + 999999) / 1000000;
    if (ms < 0) ms = 0;
    if (ms > INT32_MAX) ms = INT32_MAX;
  }
  return ftc__member_wait_backend((ftc__member_t *)arg, epoch, (int)ms, blob, len);
}

/* An exchange that goes through membership session m (which must outlive it). */
static inline uint64_t ftc__nccl_member_latest(void *arg) {
  return ftc__member_latest_epoch((ftc__member_t *)arg);
}

static inline ftc__nccl_xchg_t ftc__nccl_xchg_member(ftc__member_t *m) {
  ftc__nccl_xchg_t x = {ftc__nccl_member_publish, ftc__nccl_member_fetch, m,
                        ftc__nccl_member_latest};
  return x;
}

#endif
