/*
 * fault.c - fault injection for tests, off unless FTCOMM_FAULT is set. The
 * variable is parsed once, at the first communicator; a comma-separated
 * list of:
 *   kill@STEP      SIGKILL this process at step boundary STEP (ftc_comm_step
 *                  calls, counted from 1)
 *   stop@STEP      SIGSTOP this process there (a hang: heartbeats stop too)
 *   slow:MS        sleep MS milliseconds at every step boundary (a straggler)
 *   drop@SEQ       break the connection to a peer (rank ^ 1) before collective
 *                  SEQ of an epoch (once per process)
 *   delay:MS@SEQ   sleep MS milliseconds before collective SEQ (once)
 *   giveup@SEQ     fail collective SEQ of an epoch on this rank after it
 *                  completed here (once): the peers complete it, this rank
 *                  gives up on it, as if its last message had been lost (the
 *                  late-completion interleaving of docs/recovery.md, forced)
 *   rkill@N        SIGKILL this process in its N-th recovery, after the new
 *                  epoch is known and before connecting it (a kill during
 *                  recovery)
 *   movehold@N     in its N-th move to a new epoch, once that epoch is
 *                  connected, hold the move until the coordinator announces
 *                  a later one (at most MOVE_HOLD_MS): a recovering thread
 *                  descheduled on a busy host just before its move ends
 *   jkill          SIGKILL this process (a joiner) once it is admitted to an
 *                  epoch, before connecting it (a joiner killed while joining)
 *   blink@STEP     drop the coordinator session at step boundary STEP without
 *                  a leave, as a network blink would; it reconnects
 *   lateview:MS    the coordinator session stalls MS milliseconds on every
 *                  view that admits a member (this rank hears of a joiner's
 *                  epoch late; the others move without waiting for it)
 *   dumpwrite:MS   the dump writer thread sleeps MS milliseconds before each
 *                  dump it writes (a slow or busy disk)
 * Each number is decimal digits only, at most FTC__FAULT_MAX (10^12); a
 * STEP, SEQ or N after '@' is at least 1 (they count from 1: @0 would never
 * fire). An item that is none of these turns fault injection off, with a
 * warning that names it and lists the items.
 * ftcomm-run --inject passes these to the target rank's environment. When
 * nothing is armed the hot path pays one load of ftc__fault_armed.
 */
#include <pthread.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/comm.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftc_time.h"

int ftc__fault_armed;

static struct {
  ftc__fault_spec_t s;
  int drop_done, delay_done, giveup_done; /* atomic */
} fault = {FTC__FAULT_SPEC_INIT, 0, 0, 0};

static pthread_once_t fault_once = PTHREAD_ONCE_INIT;

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* A count or milliseconds, [s, end): decimal digits only, at most
 * FTC__FAULT_MAX. */
static int parse_num(const char *s, const char *end, int64_t *out) {
  if (s >= end) return -1;
  int64_t v = 0;
  for (const char *p = s; p < end; p++) {
    if (*p < '0' || *p > '9') return -1;
    v = v * 10 + (*p - '0');
    if (v > FTC__FAULT_MAX) return -1; /* (leading zeros are fine) */
  }
  *out = v;
  return 0;
}

/* One item of the list, [s, end): NAME@N, NAME:N, delay:MS@SEQ or jkill,
 * nothing else. */
static int parse_item(const char *s, const char *end, ftc__fault_spec_t *f) {
  static const struct {
    const char *name;
    char sep; /* '@' or ':' before the number, 0 none */
    size_t off;
  } items[] = {
      {"kill", '@', offsetof(ftc__fault_spec_t, kill_step)},
      {"stop", '@', offsetof(ftc__fault_spec_t, stop_step)},
      {"slow", ':', offsetof(ftc__fault_spec_t, slow_ms)},
      {"drop", '@', offsetof(ftc__fault_spec_t, drop_seq)},
      {"rkill", '@', offsetof(ftc__fault_spec_t, rkill)},
      {"jkill", 0, offsetof(ftc__fault_spec_t, jkill)},
      {"blink", '@', offsetof(ftc__fault_spec_t, blink_step)},
      {"lateview", ':', offsetof(ftc__fault_spec_t, late_view_ms)},
      {"dumpwrite", ':', offsetof(ftc__fault_spec_t, dump_write_ms)},
      {"giveup", '@', offsetof(ftc__fault_spec_t, giveup_seq)},
      {"movehold", '@', offsetof(ftc__fault_spec_t, move_hold)},
  };
  const char *k = s;
  while (k < end && *k != '@' && *k != ':') k++;
  size_t kl = (size_t)(k - s);
  if (kl == 5 && !strncmp(s, "delay", 5)) {
    const char *at = k < end && *k == ':' ? memchr(k, '@', (size_t)(end - k)) : NULL;
    int64_t ms, seq;
    if (!at || parse_num(k + 1, at, &ms) || parse_num(at + 1, end, &seq) || seq < 1) return -1;
    f->delay_ms = ms;
    f->delay_seq = seq;
    return 0;
  }
  for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++) {
    if (strlen(items[i].name) != kl || strncmp(s, items[i].name, kl)) continue;
    int64_t *field = (int64_t *)((char *)f + items[i].off);
    if (!items[i].sep) return k == end ? (*field = 1, 0) : -1;
    int64_t v;
    if (k == end || *k != items[i].sep || parse_num(k + 1, end, &v)) return -1;
    if (items[i].sep == '@' && v < 1) return -1; /* steps, collectives, recoveries count from 1 */
    *field = v;
    return 0;
  }
  return -1;
}

int ftc__fault_parse(const char *spec, ftc__fault_spec_t *out, const char **bad, int *badlen) {
  ftc__fault_spec_t f = FTC__FAULT_SPEC_INIT;
  const char *s = spec ? spec : "";
  while (*s) {
    const char *end = strchr(s, ',');
    if (!end) end = s + strlen(s);
    if (parse_item(s, end, &f)) {
      *bad = s;
      *badlen = (int)(end - s);
      return -1;
    }
    s = *end ? end + 1 : end;
  }
  *out = f;
  return 0;
}

static void fault_parse(void) {
  const char *spec = ftc__param_str(FTC_P_FAULT), *bad;
  int badlen;
  if (!spec || !*spec) return;
  if (ftc__fault_parse(spec, &fault.s, &bad, &badlen)) {
    FTC_WARN(FTC_SUB_RECOVERY, "FTCOMM_FAULT=%s: cannot parse \"%.*s\" (items: kill@STEP, "
             "stop@STEP, slow:MS, drop@SEQ, delay:MS@SEQ, giveup@SEQ, rkill@N, movehold@N, "
             "jkill, blink@STEP, lateview:MS, dumpwrite:MS; numbers in decimal digits up to %lld, "
             "STEP, SEQ and N from 1); "
             "fault injection is off", spec, badlen, bad, (long long)FTC__FAULT_MAX);
    return;
  }
  FTC_WARN(FTC_SUB_RECOVERY, "fault injection armed: FTCOMM_FAULT=%s", spec);
  __atomic_store_n(&ftc__fault_armed, 1, __ATOMIC_RELEASE);
}

void ftc__fault_init(void) { pthread_once(&fault_once, fault_parse); }

void ftc__fault_step(ftc_comm_t *comm, uint64_t step) {
  if (step == 1 && fault.s.late_view_ms > 0 && comm->member)
    ftc__member_fault_late_views(comm->member, (int)fault.s.late_view_ms);
  if ((int64_t)step == fault.s.blink_step && comm->member) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: dropping the coordinator session at step %llu",
             (unsigned long long)step);
    ftc__member_fault_drop(comm->member);
  }
  if ((int64_t)step == fault.s.kill_step) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: killing this process at step %llu",
             (unsigned long long)step);
    fflush(NULL);
    raise(SIGKILL);
  }
  if ((int64_t)step == fault.s.stop_step) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: stopping this process at step %llu",
             (unsigned long long)step);
    fflush(NULL);
    raise(SIGSTOP);
  }
  if (fault.s.slow_ms > 0) sleep_ms(fault.s.slow_ms);
}

void ftc__fault_recover(uint64_t n) {
  if ((int64_t)n == fault.s.rkill) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: killing this process in recovery %llu",
             (unsigned long long)n);
    fflush(NULL);
    raise(SIGKILL);
  }
}

/* How long movehold@N waits at most for a later epoch. */
#define MOVE_HOLD_MS 2000

void ftc__fault_moved(ftc_comm_t *comm, uint64_t n, uint64_t epoch) {
  if ((int64_t)n != fault.s.move_hold || !comm->member) return;
  FTC_WARN(FTC_SUB_RECOVERY, "fault injection: holding move %llu after connecting epoch %llu until "
           "a later epoch is announced (at most %d ms)", (unsigned long long)n,
           (unsigned long long)epoch, MOVE_HOLD_MS);
  int64_t until = ftc__now_ns() + MOVE_HOLD_MS * 1000000LL;
  while (ftc__member_latest_epoch(comm->member) <= epoch && ftc__now_ns() < until) sleep_ms(5);
  /* The watchdog's reaction to that epoch comes meanwhile. */
  sleep_ms(50);
}

void ftc__fault_join(void) {
  if (fault.s.jkill) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: killing this joiner after its admission");
    fflush(NULL);
    raise(SIGKILL);
  }
}

void ftc__fault_coll(ftc_comm_t *comm, uint64_t seq) {
  int zero = 0;
  if ((int64_t)seq == fault.s.delay_seq &&
      __atomic_compare_exchange_n(&fault.delay_done, &zero, 1, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: delaying collective #%llu by %lld ms",
             (unsigned long long)seq, (long long)fault.s.delay_ms);
    sleep_ms(fault.s.delay_ms);
  }
  zero = 0;
  if ((int64_t)seq == fault.s.drop_seq && comm->size > 1 &&
      __atomic_compare_exchange_n(&fault.drop_done, &zero, 1, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    /* The partner of the first exchange of recursive doubling: a peer the
     * next small collective talks to. */
    int peer = (comm->rank ^ 1) < comm->size ? comm->rank ^ 1 : (comm->rank + 1) % comm->size;
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: dropping the connection to rank %d before "
             "collective #%llu", peer, (unsigned long long)seq);
    pthread_mutex_lock(&comm->lock);
    if (comm->bh && comm->be->drop_peer) comm->be->drop_peer(comm->bh, peer);
    pthread_mutex_unlock(&comm->lock);
  }
}

ftc_status_t ftc__fault_coll_done(ftc_comm_t *comm, uint64_t seq) {
  int zero = 0;
  if ((int64_t)seq != fault.s.giveup_seq ||
      !__atomic_compare_exchange_n(&fault.giveup_done, &zero, 1, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return FTC_OK;
  FTC_WARN(FTC_SUB_RECOVERY, "fault injection: giving up on collective #%llu after it completed "
           "on rank %d", (unsigned long long)seq, comm->rank);
  return ftc__error(FTC_ERR_PEER_LOST, "fault injection: gave up on a collective that completed");
}

void ftc__fault_dump_write(void) {
  if (fault.s.dump_write_ms <= 0) return;
  FTC_WARN(FTC_SUB_RECOVERY, "fault injection: delaying a dump write by %lld ms",
           (long long)fault.s.dump_write_ms);
  sleep_ms(fault.s.dump_write_ms);
}
