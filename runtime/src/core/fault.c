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
 *   jkill          SIGKILL this process (a joiner) once it is admitted to an
 *                  epoch, before connecting it (a joiner killed while joining)
 *   blink@STEP     drop the coordinator session at step boundary STEP without
 *                  a leave, as a network blink would; it reconnects
 *   lateview:MS    the coordinator session stalls MS milliseconds on every
 *                  view that admits a member (this rank hears of a joiner's
 *                  epoch late; the others move without waiting for it)
 *   dumpwrite:MS   the dump writer thread sleeps MS milliseconds before each
 *                  dump it writes (a slow or busy disk)
 * ftcomm-run --inject passes these to the target rank's environment. When
 * nothing is armed the hot path pays one load of ftc__fault_armed.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/comm.h"
#include "ftc_error.h"
#include "ftc_param.h"

int ftc__fault_armed;

static struct {
  int64_t kill_step, stop_step, slow_ms;
  int64_t drop_seq, delay_seq, delay_ms, rkill, jkill, giveup_seq, blink_step, late_view_ms;
  int64_t dump_write_ms;
  int drop_done, delay_done, giveup_done; /* atomic */
} fault = {-1, -1, 0, -1, -1, 0, -1, 0, -1, -1, 0, 0, 0, 0, 0};

static pthread_once_t fault_once = PTHREAD_ONCE_INIT;

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static int parse_num(const char *s, const char *end, int64_t *out) {
  char buf[32];
  size_t n = (size_t)(end - s);
  if (n == 0 || n >= sizeof(buf)) return -1;
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *e;
  long long v = strtoll(buf, &e, 10);
  if (*e || v < 0) return -1;
  *out = v;
  return 0;
}

/* One item of the list, [s, end). */
static int parse_item(const char *s, const char *end) {
  const char *at = memchr(s, '@', (size_t)(end - s));
  const char *colon = memchr(s, ':', (size_t)(end - s));
  size_t kl = (size_t)((colon ? colon : at ? at : end) - s);
  if (kl == 4 && !strncmp(s, "kill", 4) && at) return parse_num(at + 1, end, &fault.kill_step);
  if (kl == 4 && !strncmp(s, "stop", 4) && at) return parse_num(at + 1, end, &fault.stop_step);
  if (kl == 4 && !strncmp(s, "slow", 4) && colon) return parse_num(colon + 1, end, &fault.slow_ms);
  if (kl == 4 && !strncmp(s, "drop", 4) && at) return parse_num(at + 1, end, &fault.drop_seq);
  if (kl == 5 && !strncmp(s, "rkill", 5) && at) return parse_num(at + 1, end, &fault.rkill);
  if (kl == 5 && !strncmp(s, "jkill", 5) && !at && !colon) return fault.jkill = 1, 0;
  if (kl == 5 && !strncmp(s, "blink", 5) && at) return parse_num(at + 1, end, &fault.blink_step);
  if (kl == 8 && !strncmp(s, "lateview", 8) && colon && !at)
    return parse_num(colon + 1, end, &fault.late_view_ms);
  if (kl == 9 && !strncmp(s, "dumpwrite", 9) && colon && !at)
    return parse_num(colon + 1, end, &fault.dump_write_ms);
  if (kl == 6 && !strncmp(s, "giveup", 6) && at && !colon)
    return parse_num(at + 1, end, &fault.giveup_seq);
  if (kl == 5 && !strncmp(s, "delay", 5) && colon && at && at > colon)
    return parse_num(colon + 1, at, &fault.delay_ms) || parse_num(at + 1, end, &fault.delay_seq);
  return -1;
}

static void fault_parse(void) {
  const char *spec = ftc__param_str(FTC_P_FAULT);
  if (!spec || !*spec) return;
  const char *s = spec;
  while (*s) {
    const char *end = strchr(s, ',');
    if (!end) end = s + strlen(s);
    if (parse_item(s, end)) {
      FTC_WARN(FTC_SUB_RECOVERY, "FTCOMM_FAULT=%s: cannot parse \"%.*s\"; fault injection is off",
               spec, (int)(end - s), s);
      return;
    }
    s = *end ? end + 1 : end;
  }
  FTC_WARN(FTC_SUB_RECOVERY, "fault injection armed: FTCOMM_FAULT=%s", spec);
  __atomic_store_n(&ftc__fault_armed, 1, __ATOMIC_RELEASE);
}

void ftc__fault_init(void) { pthread_once(&fault_once, fault_parse); }

void ftc__fault_step(ftc_comm_t *comm, uint64_t step) {
  if (step == 1 && fault.late_view_ms > 0 && comm->member)
    ftc__member_fault_late_views(comm->member, (int)fault.late_view_ms);
  if ((int64_t)step == fault.blink_step && comm->member) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: dropping the coordinator session at step %llu",
             (unsigned long long)step);
    ftc__member_fault_drop(comm->member);
  }
  if ((int64_t)step == fault.kill_step) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: killing this process at step %llu",
             (unsigned long long)step);
    fflush(NULL);
    raise(SIGKILL);
  }
  if ((int64_t)step == fault.stop_step) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: stopping this process at step %llu",
             (unsigned long long)step);
    fflush(NULL);
    raise(SIGSTOP);
  }
  if (fault.slow_ms > 0) sleep_ms(fault.slow_ms);
}

void ftc__fault_recover(uint64_t n) {
  if ((int64_t)n == fault.rkill) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: killing this process in recovery %llu",
             (unsigned long long)n);
    fflush(NULL);
    raise(SIGKILL);
  }
}

void ftc__fault_join(void) {
  if (fault.jkill) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: killing this joiner after its admission");
    fflush(NULL);
    raise(SIGKILL);
  }
}

void ftc__fault_coll(ftc_comm_t *comm, uint64_t seq) {
  int zero = 0;
  if ((int64_t)seq == fault.delay_seq &&
      __atomic_compare_exchange_n(&fault.delay_done, &zero, 1, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    FTC_WARN(FTC_SUB_RECOVERY, "fault injection: delaying collective #%llu by %lld ms",
             (unsigned long long)seq, (long long)fault.delay_ms);
    sleep_ms(fault.delay_ms);
  }
  zero = 0;
  if ((int64_t)seq == fault.drop_seq && comm->size > 1 &&
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
  if ((int64_t)seq != fault.giveup_seq ||
      !__atomic_compare_exchange_n(&fault.giveup_done, &zero, 1, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE))
    return FTC_OK;
  FTC_WARN(FTC_SUB_RECOVERY, "fault injection: giving up on collective #%llu after it completed "
           "on rank %d", (unsigned long long)seq, comm->rank);
  return ftc__error(FTC_ERR_PEER_LOST, "fault injection: gave up on a collective that completed");
}

void ftc__fault_dump_write(void) {
  if (fault.dump_write_ms <= 0) return;
  FTC_WARN(FTC_SUB_RECOVERY, "fault injection: delaying a dump write by %lld ms",
           (long long)fault.dump_write_ms);
  sleep_ms(fault.dump_write_ms);
}
