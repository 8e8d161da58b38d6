/*
 * recover.c - recovery at step boundaries and the per-communicator watchdog.
 *
 * ftc_comm_recover() and ftc_comm_step() move the communicator to a later
 * epoch announced by the coordinator (the single decision point): shrink
 * after a failure, grow when a joiner was admitted. ftc_comm_step() makes
 * the grow decision consistent with one 8-byte MAX allreduce of the newest
 * epoch each rank has heard of: as soon as any rank has heard of a newer
 * epoch, all of them move, in the same call; a rank that has not heard of
 * it yet waits for its view (already on its way from the coordinator).
 * ftc_comm_step_vote()/ftc_comm_step_voted() let the application's own
 * reduction carry a one-bit vote ahead of it, so that allreduce runs only
 * when some rank has heard of a newer epoch.
 *
 * The watchdog thread ("ftc-watchdog") sleeps on comm->wd.fd and reacts to:
 * a failed epoch (it writes the "timeout"/"error"/"revoked" dump and reports
 * the broken peer to the coordinator, once per epoch; the dump is captured
 * at the failure and handed to the dump writer at once, with the
 * coordinator's verdict on the epoch as known by then, and written again
 * with the verdict when it comes later: docs/dump-format.md), a dump request from
 * the coordinator (it dumps and uploads, even while the application thread
 * is stuck in a collective), and a newer epoch that leaves out a member of
 * the current one (it revokes the current epoch, which releases a collective
 * blocked on a hung peer) or that supersedes an epoch being connected (it
 * interrupts that attempt so the recovery takes the newer one).
 */
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/comm.h"
#include "proto/proto.h"
#include "ftc_alloc.h"
#include "ftc_assert.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftc_time.h"

#define RETRY_PAUSE_MS 20

/* ---- epoch descriptions ---- */

static int view_has(const ftc__view_t *v, uint64_t member_id) {
  for (int i = 0; v && i < v->size; i++)
    if (v->members[i].member_id == member_id) return 1;
  return 0;
}

/* Whether the coordinator said, for every member of v, whether it holds
 * state ("fresh" in the view; absent from an older coordinator), and some
 * member does (otherwise: a first epoch, or an application that never calls
 * ftc_comm_step; the per-process rule applies). */
static int view_has_fresh(const ftc__view_t *v) {
  int held = 0;
  for (int r = 0; r < v->size; r++) {
    if (v->members[r].state == FTC__STATE_UNKNOWN) return 0;
    held |= v->members[r].state == FTC__STATE_HELD;
  }
  return held;
}

/* Whether member r of v is new, i.e. needs the application's state. With the
 * coordinator's "fresh" bits (every rank of v reads the same ones): r holds
 * no state (never completed a step boundary) while another member does. An
 * older coordinator: r was not in prev; without prev, r was admitted in v
 * while older members exist. */
static int member_is_new(const ftc__view_t *v, const ftc__view_t *prev, int r, int any_old) {
  if (view_has_fresh(v)) return any_old && v->members[r].state == FTC__STATE_FRESH;
  if (prev) return !view_has(prev, v->members[r].member_id);
  return any_old && v->members[r].joined_epoch == v->epoch;
}

/* Whether some member of v holds state (see member_is_new). */
static int view_any_old(const ftc__view_t *v) {
  int bits = view_has_fresh(v), any = 0;
  for (int r = 0; r < v->size; r++)
    any |= bits ? v->members[r].state == FTC__STATE_HELD : v->members[r].joined_epoch < v->epoch;
  return any;
}

/* Describe comm's current view against prev (NULL: a first epoch). */
static void describe(const ftc_comm_t *comm, const ftc__view_t *prev, int changed,
                     ftc_epoch_info_t *info) {
  const ftc__view_t *v = comm->view;
  memset(info, 0, sizeof(*info));
  info->struct_size = sizeof(*info);
  info->epoch = v->epoch;
  info->rank = v->my_rank;
  info->size = v->size;
  info->changed = changed;
  info->prev_rank = prev ? prev->my_rank : -1;
  info->prev_size = prev ? prev->size : 0;
  info->joiner = comm->joiner_pending;
  info->sync_root = -1;
  if (view_has_fresh(v)) {
    /* The same answer on every rank: the coordinator's bits. */
    int any_old = view_any_old(v);
    for (int r = 0; r < v->size; r++) {
      int is_new = member_is_new(v, prev, r, any_old);
      if (!is_new && any_old && info->sync_root < 0) info->sync_root = r;
      info->joined += is_new;
    }
  } else {
    for (int r = 0; r < v->size; r++) {
      /* Without a previous epoch, members admitted before this one hold state. */
      int old = prev ? view_has(prev, v->members[r].member_id)
                     : v->members[r].joined_epoch < v->epoch;
      if (old && info->sync_root < 0) info->sync_root = r;
      if (!old && (prev || info->joiner || v->members[r].joined_epoch == v->epoch)) info->joined++;
    }
    if (!prev && info->sync_root < 0) info->joined = 0; /* a first epoch: nobody is new */
  }
  for (int r = 0; prev && r < prev->size; r++)
    if (!view_has(v, prev->members[r].member_id)) info->lost++;
}

static int64_t recover_deadline(int timeout_ms) {
  int64_t v;
  if (timeout_ms == FTC_TIMEOUT_INFINITE) return INT64_MAX;
  if (timeout_ms == FTC_TIMEOUT_DEFAULT) {
    if (ftc__param_int(FTC_P_RECOVER_TIMEOUT_MS, &v) != FTC_OK) v = 60000;
    return ftc__now_ns() + v * 1000000LL;
  }
  return ftc__now_ns() + (int64_t)timeout_ms * 1000000LL;
}

/*
 * Move to the newest epoch the coordinator announced (at least min_epoch),
 * connecting its data plane; when connecting fails (a member died or hung
 * meanwhile) take the next epoch, until deadline. On success *prev_out gets
 * the old view (the caller's).
 */
static ftc_status_t move_epoch(ftc_comm_t *comm, uint64_t min_epoch, int64_t deadline,
                               ftc__view_t **prev_out) {
  ftc_status_t st;
  ftc__view_t *prev = ftc__view_copy(comm->view);
  if (!prev) return ftc__error(FTC_ERR_NO_MEMORY, "copying the view of the failed epoch");
  int saved_connect = comm->connect_timeout_ms;
  int64_t t0 = ftc__now_ns();
  /* Under comm->lock: a revoke the watchdog decided before (for the epoch
   * being left) either lands before this, and the connect clears it, or
   * sees it and is dropped (ftc__comm_fail_epoch). */
  pthread_mutex_lock(&comm->lock);
  __atomic_store_n(&comm->recovering, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&comm->lock);
  for (int attempt = 0;;) {
    int64_t now = ftc__now_ns();
    if (now >= deadline) {
      int below = prev->size - 1 < comm->cfg.min_size;
      st = ftc__error(below ? FTC_ERR_BELOW_MIN_SIZE : FTC_ERR_TIMEOUT,
                      "no usable epoch after %llu within the recovery timeout (%lld ms)%s",
                      (unsigned long long)prev->epoch, (long long)((now - t0) / 1000000),
                      below ? "; fewer ranks than FTCOMM_MIN_SIZE remain and no joiner came"
                            : "");
      break;
    }
    if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE)) {
      st = ftc__error(FTC_ERR_ABORTED, "the communicator was aborted during recovery");
      break;
    }
    ftc__view_t *v = NULL;
    int64_t slice = (deadline - now) / 1000000;
    if (slice > 100) slice = 100;
    /* Epochs below min_epoch are not waited for (nor spun on). */
    uint64_t after = min_epoch - 1 > comm->view->epoch ? min_epoch - 1 : comm->view->epoch;
    st = ftc__member_wait_view(comm->member, after, (int)(slice < 1 ? 1 : slice), &v);
    if (st == FTC_ERR_TIMEOUT) continue;
    if (st != FTC_OK) {
      char why[512]; /* ftc_last_error() is the buffer ftc__error() writes */
      snprintf(why, sizeof(why), "%s", ftc_last_error());
      st = ftc__error(FTC_ERR_COORDINATOR,
                      "the coordinator session ended during recovery (this rank was excluded, "
                      "or the coordinator is gone): %s",
                      why);
      break;
    }
    if (v->epoch < min_epoch || v->my_rank < 0) {
      int excluded = v->my_rank < 0;
      ftc__view_free(v);
      if (excluded) {
        st = ftc__error(FTC_ERR_COORDINATOR, "this process is not a member of the next epoch");
        break;
      }
      continue;
    }
    if (__builtin_expect(ftc__fault_armed, 0) && attempt == 0) ftc__fault_recover(++comm->moves);
    /* The old epoch's dumps (failure, coordinator request) are captured
     * first, so they show it; the watchdog writes them meanwhile. */
    ftc__watchdog_capture(comm);
    int64_t left_ms = (deadline - ftc__now_ns()) / 1000000;
    comm->connect_timeout_ms =
        left_ms < saved_connect ? (int)(left_ms < 1 ? 1 : left_ms) : saved_connect;
    __atomic_store_n(&comm->target_epoch, v->epoch, __ATOMIC_RELEASE);
    FTC_INFO(FTC_SUB_RECOVERY, "moving from epoch %llu to %llu: rank %d of %d (attempt %d)",
             (unsigned long long)prev->epoch, (unsigned long long)v->epoch, v->my_rank, v->size,
             attempt + 1);
    st = ftc__comm_rebuild(comm, v);
    if (__builtin_expect(ftc__fault_armed, 0) && st == FTC_OK)
      ftc__fault_moved(comm, comm->moves, v->epoch);
    attempt++;
    __atomic_store_n(&comm->target_epoch, 0, __ATOMIC_RELEASE);
    uint64_t tried = v->epoch;
    ftc__view_free(v);
    if (st == FTC_OK || st == FTC_ERR_ABORTED) break;
    FTC_INFO(FTC_SUB_RECOVERY, "connecting epoch %llu failed: %s; retrying with the newest epoch",
             (unsigned long long)tried, ftc_last_error());
    /* A later epoch (the usual reason) is taken at once; the same one again
     * after a pause. */
    ftc__view_t *later = NULL;
    if (ftc__member_wait_view(comm->member, tried, RETRY_PAUSE_MS, &later) == FTC_OK)
      ftc__view_free(later);
  }
  comm->connect_timeout_ms = saved_connect;
  __atomic_store_n(&comm->recovering, 0, __ATOMIC_RELEASE);
  if (st != FTC_OK) {
    ftc__view_free(prev);
    return st;
  }
  *prev_out = prev;
  return FTC_OK;
}

/* After a successful move: keep prev for ftc_comm_info, describe, log. */
static void moved(ftc_comm_t *comm, ftc__view_t *prev, int64_t t0, const char *why,
                  ftc_epoch_info_t *info) {
  ftc_epoch_info_t tmp;
  if (!info) info = &tmp;
  ftc__view_free(comm->prev_view);
  comm->prev_view = prev;
  describe(comm, prev, 1, info);
  comm->joiner_pending = 0; /* a joiner that recovered has passed its admission */
  FTC_INFO(FTC_SUB_RECOVERY,
           "%s: epoch %llu -> %llu in %.1f ms: rank %d of %d (was %d of %d), %d lost, %d joined",
           why, (unsigned long long)prev->epoch, (unsigned long long)info->epoch,
           (double)(ftc__now_ns() - t0) / 1e6, info->rank, info->size, info->prev_rank,
           info->prev_size, info->lost, info->joined);
}

/* A sub-communicator's recovery: re-derived from its parent's current
 * epoch (split.c), connected among its members that are still in it. */
static ftc_status_t recover_child(ftc_comm_t *comm, int timeout_ms, ftc_epoch_info_t *info) {
  ftc__view_t *v = NULL;
  ftc_status_t st = ftc__split_next_view(comm, &v);
  if (st != FTC_OK) return st;
  if (!v) {
    if (info) {
      describe(comm, NULL, 0, info);
      info->joined = 0;
      info->sync_root = -1;
    }
    return FTC_OK;
  }
  int64_t t0 = ftc__now_ns(), deadline = recover_deadline(timeout_ms);
  ftc__view_t *prev = ftc__view_copy(comm->view);
  if (!prev) {
    ftc__view_free(v);
    return ftc__error(FTC_ERR_NO_MEMORY, "copying the sub-communicator's view");
  }
  int saved = comm->connect_timeout_ms;
  int64_t left_ms = (deadline - t0) / 1000000;
  if (left_ms < saved) comm->connect_timeout_ms = (int)(left_ms < 1 ? 1 : left_ms);
  pthread_mutex_lock(&comm->lock);
  __atomic_store_n(&comm->recovering, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&comm->lock);
  FTC_INFO(FTC_SUB_RECOVERY, "sub-communicator: from epoch %llu to the parent's %llu: rank %d of %d",
           (unsigned long long)prev->epoch, (unsigned long long)v->epoch, v->my_rank, v->size);
  st = ftc__comm_rebuild(comm, v);
  __atomic_store_n(&comm->recovering, 0, __ATOMIC_RELEASE);
  comm->connect_timeout_ms = saved;
  if (st == FTC_OK) ftc__split_moved(comm, v->epoch);
  ftc__view_free(v);
  if (st != FTC_OK) {
    ftc__view_free(prev);
    return st;
  }
  moved(comm, prev, t0, "sub-communicator re-derived", info);
  return FTC_OK;
}

/* How much of the caller's *info the library may write (struct_size, 0:
 * this header's); FTC_ERR_INVALID_ARGUMENT for a size without the fields
 * every version has. NULL: nothing. */
static ftc_status_t info_room(const char *fn, const ftc_epoch_info_t *info, size_t *room) {
  *room = 0;
  if (!info) return FTC_OK;
  size_t n = info->struct_size ? info->struct_size : sizeof(ftc_epoch_info_t);
  if (n < offsetof(ftc_epoch_info_t, joiner) + sizeof(info->joiner))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "%s: info->struct_size is %zu, less than any ftc_epoch_info_t; initialize it "
                      "with FTC_EPOCH_INFO_INIT",
                      fn, info->struct_size);
  *room = n < sizeof(ftc_epoch_info_t) ? n : sizeof(ftc_epoch_info_t);
  return FTC_OK;
}

/* The fields of full that fit in room bytes of the caller's *info (its
 * struct_size stays). */
static void info_put(ftc_epoch_info_t *info, const ftc_epoch_info_t *full, size_t room) {
  size_t off = offsetof(ftc_epoch_info_t, epoch);
  if (info && room > off) memcpy((char *)info + off, (const char *)full + off, room - off);
}

/* votes for comm_step: none given, run the allreduce that agrees. */
#define NO_VOTES (-1)

static ftc_status_t comm_recover(ftc_comm_t *comm, int timeout_ms, ftc_epoch_info_t *info);
static ftc_status_t comm_step(ftc_comm_t *comm, int timeout_ms, ftc_epoch_info_t *info, int votes);

ftc_status_t ftc_comm_recover(ftc_comm_t *comm, int timeout_ms, ftc_epoch_info_t *info) {
  ftc_epoch_info_t full = FTC_EPOCH_INFO_INIT;
  size_t room;
  ftc_status_t st = info_room("ftc_comm_recover", info, &room);
  if (st == FTC_OK && (st = comm_recover(comm, timeout_ms, info ? &full : NULL)) == FTC_OK)
    info_put(info, &full, room);
  return st;
}

ftc_status_t ftc_comm_step(ftc_comm_t *comm, int timeout_ms, ftc_epoch_info_t *info) {
  ftc_epoch_info_t full = FTC_EPOCH_INFO_INIT;
  size_t room;
  ftc_status_t st = info_room("ftc_comm_step", info, &room);
  if (st == FTC_OK && (st = comm_step(comm, timeout_ms, info ? &full : NULL, NO_VOTES)) == FTC_OK)
    info_put(info, &full, room);
  return st;
}

ftc_status_t ftc_comm_step_vote(ftc_comm_t *comm, int *vote) {
  if (!comm || !vote)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_step_vote: comm and vote must not be NULL");
  *vote = ftc__member_latest_epoch(comm->member) > comm->view->epoch;
  return FTC_OK;
}

ftc_status_t ftc_comm_step_voted(ftc_comm_t *comm, int votes, int timeout_ms, ftc_epoch_info_t *info) {
  ftc_epoch_info_t full = FTC_EPOCH_INFO_INIT;
  size_t room;
  ftc_status_t st = info_room("ftc_comm_step_voted", info, &room);
  if (st == FTC_OK && (st = comm_step(comm, timeout_ms, info ? &full : NULL, votes != 0)) == FTC_OK)
    info_put(info, &full, room);
  return st;
}

static ftc_status_t comm_recover(ftc_comm_t *comm, int timeout_ms, ftc_epoch_info_t *info) {
  if (!comm) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_recover: comm is NULL");
  if (timeout_ms < FTC_TIMEOUT_INFINITE)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "ftc_comm_recover: timeout_ms %d; use milliseconds >= 0, "
                      "FTC_TIMEOUT_DEFAULT or FTC_TIMEOUT_INFINITE",
                      timeout_ms);
  if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE))
    return ftc__error(FTC_ERR_ABORTED, "the communicator was aborted; destroy it");
  if (!comm->member && comm->tree.members) return recover_child(comm, timeout_ms, info);
  if (!comm->member)
    return ftc__error(FTC_ERR_NOT_SUPPORTED,
                      "ftc_comm_recover: this communicator has no coordinator to agree with");
  int64_t t0 = ftc__now_ns();
  int failed = __atomic_load_n(&comm->error, __ATOMIC_ACQUIRE) != 0;
  uint64_t latest = ftc__member_latest_epoch(comm->member);
  if (!failed && latest <= comm->view->epoch) {
    if (info) {
      describe(comm, NULL, 0, info);
      info->joined = 0;
      info->sync_root = -1;
    }
    return FTC_OK;
  }
  if (!failed) {
    char detail[128];
    snprintf(detail, sizeof(detail), "the application recovers to epoch %llu",
             (unsigned long long)latest);
    ftc__comm_fail(comm, FTC_ERR_REVOKED, detail);
  }
  ftc__view_t *prev = NULL;
  ftc_status_t st = move_epoch(comm, comm->view->epoch + 1, recover_deadline(timeout_ms), &prev);
  if (st != FTC_OK) return st;
  moved(comm, prev, t0, "recovered", info);
  return FTC_OK;
}

/* The boundary's allreduce failed: say so as ftc_comm_step, not as ftc_allreduce. */
static ftc_status_t step_failed(ftc_status_t st) {
  char why[512];
  const char *e = ftc_last_error();
  if (!strncmp(e, "ftc_allreduce: ", 15)) e += 15;
  snprintf(why, sizeof why, "%s", e);
  return ftc__error(st, "ftc_comm_step: the step boundary's allreduce failed: %s", why);
}

/* votes: NO_VOTES (ftc_comm_step), or the reduced votes of ftc_comm_step_vote
 * as 0 (nobody has heard of a newer epoch: no allreduce) or 1. */
static ftc_status_t comm_step(ftc_comm_t *comm, int timeout_ms, ftc_epoch_info_t *info, int votes) {
  if (!comm) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_step: comm is NULL");
  ftc_status_t st = ftc__check_timeout("ftc_comm_step", timeout_ms);
  if (st != FTC_OK) return st;
  uint64_t step = ++comm->steps;
  if (__builtin_expect(ftc__fault_armed, 0)) ftc__fault_step(comm, step);
  if (comm->joiner_pending) {
    /* A joiner's first step boundary is the one at which the others admitted
     * it: they return from it with changed = 1, and so does the joiner. */
    if (info) describe(comm, NULL, 1, info);
    comm->joiner_pending = 0;
    return FTC_OK;
  }
  uint64_t epoch = comm->view->epoch;
  int64_t heard = (int64_t)ftc__member_latest_epoch(comm->member);
  if (heard < (int64_t)epoch) heard = (int64_t)epoch;
  int64_t v = heard;
  if (votes == 0) {
    /* The application's reduction carried the agreement: every rank voted
     * 0, i.e. knew of no epoch after this one when it voted. */
    if ((st = ftc__comm_gate(comm)) != FTC_OK) return st;
    v = (int64_t)epoch;
  } else if ((st = ftc_allreduce(&v, &v, 1, FTC_I64, FTC_MAX, comm, timeout_ms)) != FTC_OK) {
    return step_failed(st);
  }
  /* A completed step boundary: this process holds the application's state
   * (whatever was sent to it at the boundary that admitted it came before). */
  if (!comm->ready && comm->member) {
    ftc__member_set_ready(comm->member, epoch);
    comm->ready = 1;
  }
  if ((uint64_t)v <= epoch) {
    if (info) {
      *info = (ftc_epoch_info_t){.struct_size = sizeof(ftc_epoch_info_t),
                                 .epoch = epoch,
                                 .rank = comm->view->my_rank,
                                 .size = comm->view->size,
                                 .prev_rank = comm->view->my_rank,
                                 .prev_size = comm->view->size,
                                 .sync_root = -1};
    }
    return FTC_OK;
  }
  /* Some rank has heard of epoch v: all move in this call. One that has not
   * waits in move_epoch for its view, which the coordinator sent to every
   * member; if its session broke meanwhile, it comes back with the view, or
   * the coordinator drops it and the others take the epoch after
   * (docs/recovery.md, "The step boundary"). */
  if (heard < v)
    FTC_INFO(FTC_SUB_RECOVERY,
             "step boundary: moving to epoch %lld, which this rank has not heard of yet "
             "(it knows %lld); waiting for its view", (long long)v, (long long)heard);
  int64_t t0 = ftc__now_ns();
  ftc__view_t *prev = NULL;
  st = move_epoch(comm, (uint64_t)v, recover_deadline(FTC_TIMEOUT_DEFAULT), &prev);
  if (st != FTC_OK) return st;
  moved(comm, prev, t0, "step boundary", info);
  return FTC_OK;
}

ftc_status_t ftc_comm_info(const ftc_comm_t *comm, ftc_epoch_info_t *info) {
  if (!comm || !info) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "comm and info must not be NULL");
  ftc_epoch_info_t full;
  size_t room;
  ftc_status_t st = info_room("ftc_comm_info", info, &room);
  if (st != FTC_OK) return st;
  describe(comm, comm->prev_view, 0, &full);
  info_put(info, &full, room);
  return FTC_OK;
}

ftc_status_t ftc_comm_rank_is_new(const ftc_comm_t *comm, int rank, int *is_new) {
  if (!comm || !is_new) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "comm and is_new must not be NULL");
  const ftc__view_t *v = comm->view;
  if (rank < 0 || rank >= v->size)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "rank %d is out of range; the epoch has ranks 0 .. %d",
                      rank, v->size - 1);
  *is_new = member_is_new(v, comm->prev_view, rank, view_any_old(v));
  return FTC_OK;
}

const char *ftc_drop_reason_name(ftc_drop_reason_t reason) {
  static const char *const names[] = {"lost", "crashed", "hung", "left"};
  return (unsigned)reason < sizeof(names) / sizeof(names[0]) ? names[reason] : "?";
}

/* The coordinator's word for why member_id was dropped, as the views said. */
static ftc_drop_reason_t drop_reason_of(ftc__member_t *m, uint64_t member_id) {
  char word[32] = "";
  if (!ftc__member_drop_reason(m, member_id, word, sizeof(word), NULL, 0))
    return ftc__member_left_cleanly(m, member_id) ? FTC_DROP_LEFT : FTC_DROP_LOST;
  return !strcmp(word, "crashed") ? FTC_DROP_CRASHED
         : !strcmp(word, "hung")  ? FTC_DROP_HUNG
         : !strcmp(word, "left")  ? FTC_DROP_LEFT
                                  : FTC_DROP_LOST;
}

ftc_status_t ftc_comm_lost(const ftc_comm_t *comm, int index, int *prev_rank, int *slot,
                           ftc_drop_reason_t *reason) {
  if (!comm) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_lost: comm is NULL");
  const ftc__view_t *prev = comm->prev_view, *v = comm->view;
  int n = 0;
  for (int r = 0; prev && r < prev->size; r++) {
    if (view_has(v, prev->members[r].member_id)) continue;
    if (n++ != index) continue;
    if (prev_rank) *prev_rank = r;
    if (slot) *slot = prev->members[r].slot;
    /* a sub-communicator's members were dropped by its parent's coordinator */
    ftc_comm_t *p = __atomic_load_n(&comm->tree.parent, __ATOMIC_ACQUIRE);
    ftc__member_t *m = comm->member ? comm->member : p ? p->member : NULL;
    if (reason) *reason = m ? drop_reason_of(m, prev->members[r].member_id) : FTC_DROP_LOST;
    return FTC_OK;
  }
  return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                    "ftc_comm_lost: index %d is out of range; the epoch before epoch %llu lost %d "
                    "member%s (ftc_epoch_info_t.lost)",
                    index, (unsigned long long)v->epoch, n, n == 1 ? "" : "s");
}

ftc_status_t ftc_comm_dump(ftc_comm_t *comm, const char *reason, char *path, size_t path_len) {
  if (!comm) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_dump: comm is NULL");
  return ftc_rec_dump(comm->cfg.dump_dir, reason && *reason ? reason : "api", path, path_len);
}

/* ---- the watchdog ---- */

void ftc__watchdog_kick(ftc_comm_t *comm) {
  uint64_t one = 1;
  if (comm->wd.fd < 0) return;
  ssize_t w = write(comm->wd.fd, &one, sizeof(one));
  (void)w;
}

/* A dump captured when it was due and handed to the dump writer later by
 * the watchdog (comm->wd.dumps, under wd.mu): the rank's own dump of a failed epoch, or
 * one the coordinator asked for (incident set: uploaded under it). */
struct ftc__wd_dump {
  struct ftc__wd_dump *next;
  ftc_rec_capture_t *capture;
  const char *reason;
  uint64_t epoch;
  int status;             /* the failure, for the log */
  char incident[128];     /* "" for the rank's own dump */
  int rank;
  int peer;               /* the rank the backend saw fail (own dump), -1 none */
  int64_t t_ns;           /* when it was captured */
  ftc__view_t *view;      /* the epoch's view, for the verdict; NULL if it was gone */
  uint64_t late_id;       /* written before the verdict: the dump writer's id to add it */
};

/* The view of `epoch`, copied under comm->lock (NULL if comm moved on). */
static ftc__view_t *wd_view_of(ftc_comm_t *comm, uint64_t epoch) {
  ftc__view_t *v = NULL;
  pthread_mutex_lock(&comm->lock);
  if (comm->view && comm->view->epoch == epoch) v = ftc__view_copy(comm->view);
  pthread_mutex_unlock(&comm->lock);
  return v;
}

static void wd_dump_free(struct ftc__wd_dump *d) {
  ftc_rec_capture_free(d->capture);
  ftc__view_free(d->view);
  ftc__free(d);
}

/* Queue a captured dump for the watchdog to hand to the dump writer in
 * its next pass, which the capture's kick starts at once: no file waits
 * for the next epoch or the coordinator's verdict (a job that cannot go on
 * leaves its dumps too; a verdict that comes later is added to the file:
 * wd_late_verdicts). The writer's thread runs as SCHED_BATCH, so the write
 * does not preempt the recovery (dumpwriter.c). */
static void wd_queue(ftc_comm_t *comm, struct ftc__wd_dump *d) {
  pthread_mutex_lock(&comm->wd.mu);
  struct ftc__wd_dump **tail = &comm->wd.dumps;
  while (*tail) tail = &(*tail)->next;
  *tail = d;
  pthread_mutex_unlock(&comm->wd.mu);
}

static struct ftc__wd_dump *wd_capture_new(const char *reason) {
  struct ftc__wd_dump *d = ftc__calloc(1, sizeof(*d));
  if (d && !(d->capture = ftc_rec_capture())) {
    ftc__free(d);
    d = NULL;
  }
  if (d) d->reason = reason, d->peer = -1, d->t_ns = ftc__now_ns();
  return d;
}

/* A dump request from the coordinator: capture now, write and upload later. */
static int wd_dump_request(ftc_comm_t *comm) {
  char incident[128];
  if (!comm->member || !ftc__member_take_dump_request(comm->member, incident, sizeof(incident)))
    return 0;
  struct ftc__wd_dump *d = wd_capture_new("coordinator");
  if (!d) {
    FTC_WARN(FTC_SUB_RECOVERY, "cannot capture the dump the coordinator asked for (%s): out of memory",
             incident);
    return 1;
  }
  snprintf(d->incident, sizeof(d->incident), "%s", incident);
  d->rank = __atomic_load_n(&comm->rank, __ATOMIC_ACQUIRE);
  d->epoch = __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE);
  d->view = wd_view_of(comm, d->epoch);
  wd_queue(comm, d);
  return 1;
}

/* The peer the current epoch's backend saw fail, -1 none. */
static int wd_failed_peer(ftc_comm_t *comm) {
  pthread_mutex_lock(&comm->lock);
  int peer = comm->bh ? comm->be->failed_peer(comm->bh) : -1;
  pthread_mutex_unlock(&comm->lock);
  return peer;
}

/* The same, if comm is still at `epoch` (its backend is that epoch's). */
static int wd_failed_peer_in(ftc_comm_t *comm, uint64_t epoch) {
  pthread_mutex_lock(&comm->lock);
  int peer = comm->bh && comm->view && comm->view->epoch == epoch ? comm->be->failed_peer(comm->bh) : -1;
  pthread_mutex_unlock(&comm->lock);
  return peer;
}

/*
 * Every survivor of a crash sees the lost peer's connections end, and the
 * coordinator needs one report to form the next epoch: the peer's successor
 * (the next rank of the epoch, wrapping) reports it at once; the others hold
 * their report back FTCOMM_REPORT_DEFER_MS (default 10) and send it then
 * only if no later epoch came meanwhile (ftc__member_report_failure drops a
 * stale one). On a crowded host those reports were membership and
 * coordinator work in the middle of the recovery; one held back for a
 * successor that failed too goes that much later (the coordinator also sees
 * the sessions close, and a launcher reports the lost slots). Other
 * failures (a timeout: a hang; no peer known) are reported at once by every
 * rank (docs/recovery.md, "Who decides a failure").
 */

/* Whether this rank reports `peer`'s end at once (see above). */
static int wd_first_reporter(ftc_comm_t *comm, int peer) {
  int size = __atomic_load_n(&comm->size, __ATOMIC_ACQUIRE);
  return peer < 0 || peer >= size || __atomic_load_n(&comm->rank, __ATOMIC_ACQUIRE) == (peer + 1) % size;
}

/* Send the report of `peer` (-1: none known) of `epoch`, the epoch's one
 * (wd.cap_mu held). */
static void wd_send_report_locked(ftc_comm_t *comm, int e, uint64_t epoch, int peer) {
  FTC_ASSERT_HELD(&comm->wd.cap_mu);
  comm->wd.reported = epoch;
  comm->wd.defer_epoch = 0;
  ftc__member_report_failure(comm->member, epoch, peer >= 0 ? &peer : NULL, peer >= 0 ? 1 : 0,
                             (ftc_status_t)e);
}

/* Report `peer` (-1: none known) of the failed epoch `epoch` with status e,
 * once per epoch, or hold it back (wd.cap_mu held). */
static void wd_report_peer_locked(ftc_comm_t *comm, int e, uint64_t epoch, int peer) {
  FTC_ASSERT_HELD(&comm->wd.cap_mu);
  if (comm->wd.reported == epoch || !comm->member) return;
  if (e == FTC_ERR_PEER_LOST && comm->report_defer_ms > 0 && !wd_first_reporter(comm, peer)) {
    if (comm->wd.defer_epoch != epoch) {
      comm->wd.defer_epoch = epoch;
      comm->wd.defer_peer = peer;
      comm->wd.defer_ns = ftc__now_ns() + comm->report_defer_ms * 1000000LL;
      FTC_DEBUG(FTC_SUB_RECOVERY, "epoch %llu: rank %d's connection ended; its successor reports "
                "it, this rank's report is held back %d ms", (unsigned long long)epoch, peer,
                comm->report_defer_ms);
      /* The watchdog sends it when due: it sleeps by a timeout worked out
       * before this (a collective that had all its data completes on the
       * peer's end and wakes nobody). */
      ftc__watchdog_kick(comm);
    }
    return;
  }
  wd_send_report_locked(comm, e, epoch, peer);
}

/* The epoch's failure status (0: none) and the epoch, read together: a move
 * swaps the epoch and clears the failure in one step under comm->lock
 * (comm.c, ftc__comm_connect_view). */
static int wd_failed_epoch(ftc_comm_t *comm, uint64_t *epoch) {
  pthread_mutex_lock(&comm->lock);
  int e = __atomic_load_n(&comm->error, __ATOMIC_ACQUIRE);
  *epoch = __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE);
  pthread_mutex_unlock(&comm->lock);
  return e;
}

/* Tell the coordinator about the failed epoch `epoch` (wd.cap_mu held). */
static void wd_report_locked(ftc_comm_t *comm, int e, uint64_t epoch) {
  FTC_ASSERT_HELD(&comm->wd.cap_mu);
  if (comm->wd.reported == epoch || !comm->member) return;
  wd_report_peer_locked(comm, e, epoch, wd_failed_peer(comm));
}

/* A report held back that is due (watchdog thread): sent, unless a later
 * epoch came (dropped by ftc__member_report_failure then). Returns the
 * milliseconds until the one held back is due, -1 none. */
static int wd_deferred_report(ftc_comm_t *comm) {
  pthread_mutex_lock(&comm->wd.cap_mu);
  int left_ms = -1;
  if (comm->wd.defer_epoch && comm->wd.defer_epoch != comm->wd.reported) {
    int64_t left = comm->wd.defer_ns - ftc__now_ns();
    if (left <= 0)
      wd_send_report_locked(comm, FTC_ERR_PEER_LOST, comm->wd.defer_epoch, comm->wd.defer_peer);
    else
      left_ms = (int)((left + 999999) / 1000000);
  } else {
    comm->wd.defer_epoch = 0;
  }
  pthread_mutex_unlock(&comm->wd.cap_mu);
  return left_ms;
}

void ftc__watchdog_report(ftc_comm_t *comm) {
  if (!comm->member) return;
  pthread_mutex_lock(&comm->wd.cap_mu);
  uint64_t epoch;
  int e = wd_failed_epoch(comm, &epoch);
  if (e && e != FTC_ERR_ABORTED) wd_report_locked(comm, e, epoch);
  pthread_mutex_unlock(&comm->wd.cap_mu);
}

void ftc__watchdog_report_ended(ftc_comm_t *comm, uint64_t epoch, int rank) {
  if (!comm->member) return;
  pthread_mutex_lock(&comm->wd.cap_mu);
  wd_report_peer_locked(comm, FTC_ERR_PEER_LOST, epoch, rank);
  pthread_mutex_unlock(&comm->wd.cap_mu);
}

/* A failed epoch, once: tell the coordinator (unless the failing thread
 * did), then capture the rank's own dump. Returns whether it was not
 * handled before. */
static int wd_failure(ftc_comm_t *comm) {
  uint64_t epoch;
  int e = wd_failed_epoch(comm, &epoch);
  if (!e || e == FTC_ERR_ABORTED || comm->wd.handled == epoch) return 0;
  comm->wd.handled = epoch;
  /* A sub-communicator's failure fails its parent's epoch too (split.c),
   * whose dump holds every recorder of the process, this one's included. */
  if (__atomic_load_n(&comm->tree.parent, __ATOMIC_ACQUIRE)) return 0;
  wd_report_locked(comm, e, epoch);
  struct ftc__wd_dump *d =
      wd_capture_new(e == FTC_ERR_TIMEOUT ? "timeout" : e == FTC_ERR_REVOKED ? "revoked" : "error");
  if (!d) {
    FTC_WARN(FTC_SUB_RECOVERY, "epoch %llu failed; cannot capture a dump: out of memory",
             (unsigned long long)epoch);
    return 1;
  }
  d->epoch = epoch;
  d->status = e;
  d->peer = wd_failed_peer_in(comm, epoch);
  d->view = wd_view_of(comm, epoch);
  wd_queue(comm, d);
  return 1;
}

/* Just before the move: the backend of the failed epoch may name its
 * failed peer by now (NCCL learns it from the coordinator's epoch). A dump
 * still queued takes it; one already handed off takes it when it is
 * written again with the verdict (wd_outcome reads comm->wd.peer). */
static void wd_update_peer(ftc_comm_t *comm) {
  uint64_t epoch = __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE);
  int peer = wd_failed_peer_in(comm, epoch); /* comm->lock is not under wd.mu */
  if (peer < 0) return;
  pthread_mutex_lock(&comm->wd.mu);
  comm->wd.peer = peer;
  comm->wd.peer_epoch = epoch;
  for (struct ftc__wd_dump *d = comm->wd.dumps; d; d = d->next)
    if (!d->incident[0] && d->epoch == epoch && d->peer < 0) d->peer = peer;
  pthread_mutex_unlock(&comm->wd.mu);
}

void ftc__watchdog_capture(ftc_comm_t *comm) {
  if (!comm->wd.started) return; /* nobody would write them */
  pthread_mutex_lock(&comm->wd.cap_mu);
  int new = wd_dump_request(comm);
  new |= wd_failure(comm);
  wd_update_peer(comm);
  pthread_mutex_unlock(&comm->wd.cap_mu);
  /* It hands them to the writer (and sends a report held back): only when
   * this call captured something. The failure's own kick (comm.c) has most
   * often had the watchdog capture it already, and a wake-up now, as every
   * survivor moves, is CPU they need. */
  if (new) ftc__watchdog_kick(comm);
}

/* The coordinator's verdict on d's epoch, as far as it is known now: the
 * newest epoch it announced after it, and the members of d's epoch that
 * this one leaves out (and why, as the views said). *dropped is allocated
 * (the caller frees it); pending[len] says why there is no verdict. */
static void wd_verdict(ftc_comm_t *comm, const struct ftc__wd_dump *d, ftc_rec_outcome_t *o,
                       ftc_rec_dropped_t **dropped, char *pending, size_t len) {
  *dropped = NULL;
  o->next_epoch = -1;
  o->pending = pending;
  if (!comm->member) {
    snprintf(pending, len, "this communicator has no coordinator to decide on epoch %llu",
             (unsigned long long)d->epoch);
    return;
  }
  if (!d->view) {
    snprintf(pending, len, "this rank had moved past epoch %llu when its dump was captured",
             (unsigned long long)d->epoch);
    return;
  }
  ftc__view_t *v = NULL;
  if (ftc__member_wait_view(comm->member, d->epoch, 0, &v) != FTC_OK || !v) {
    int off = snprintf(pending, len,
                       "the coordinator had announced no epoch after %llu %lld ms after this "
                       "dump was captured",
                       (unsigned long long)d->epoch, (long long)((ftc__now_ns() - d->t_ns) / 1000000));
    if (d->view->size - 1 < comm->cfg.min_size && off > 0 && (size_t)off < len)
      off += snprintf(pending + off, len - (size_t)off,
                      "; without one of its %d members the job is below its minimum size %d, "
                      "so the coordinator waits for a joiner before the next epoch",
                      d->view->size, comm->cfg.min_size);
    if (ftc__member_error(comm->member) != FTC_OK && off > 0 && (size_t)off < len)
      snprintf(pending + off, len - (size_t)off, "; the coordinator session has ended (%s)",
               ftc_strerror(ftc__member_error(comm->member)));
    return;
  }
  o->next_epoch = (int64_t)v->epoch;
  /* The list, then each one's detail (FTC__PROTO_MAX_DROP_DETAIL + 1 bytes). */
  size_t n = (size_t)d->view->size + 1, dlen = FTC__PROTO_MAX_DROP_DETAIL + 1;
  *dropped = ftc__calloc(1, n * (sizeof(**dropped) + dlen));
  if (!*dropped) {
    o->next_epoch = -1;
    snprintf(pending, len, "out of memory listing the members epoch %llu left out",
             (unsigned long long)v->epoch);
    ftc__view_free(v);
    return;
  }
  for (int r = 0; r < d->view->size; r++) {
    const ftc__view_member_t *m = &d->view->members[r];
    if (view_has(v, m->member_id)) continue;
    char *detail = (char *)(*dropped + n) + (size_t)o->ndropped * dlen;
    ftc_rec_dropped_t *x = &(*dropped)[o->ndropped++];
    x->rank = r;
    x->slot = m->slot;
    x->member_id = m->member_id;
    x->detail = detail;
    /* The coordinator's word; a view without one (an older coordinator)
     * still says who left cleanly. */
    ftc__member_drop_reason(comm->member, m->member_id, NULL, 0, detail, dlen);
    x->reason = ftc_drop_reason_name(drop_reason_of(comm->member, m->member_id));
  }
  o->dropped = *dropped;
  ftc__view_free(v);
}

/* d's outcome as known now: the rank's failure (its own dump) and the
 * coordinator's verdict (wd_verdict: *dropped and pending back it). */
static void wd_outcome(ftc_comm_t *comm, struct ftc__wd_dump *d, ftc_rec_outcome_t *o,
                       ftc_rec_dropped_t **dropped, char *pending, size_t len) {
  *o = (ftc_rec_outcome_t)FTC_REC_OUTCOME_INIT;
  o->epoch = (int64_t)d->epoch;
  if (!d->incident[0]) {
    o->failed = 1;
    o->status = d->status;
    /* Not moved yet (the application has not recovered): the epoch's
     * backend may name the peer by now (NCCL learns it from the coordinator). */
    if (d->peer < 0) d->peer = wd_failed_peer_in(comm, d->epoch);
    if (d->peer < 0) {
      pthread_mutex_lock(&comm->wd.mu);
      if (comm->wd.peer_epoch == d->epoch) d->peer = comm->wd.peer;
      pthread_mutex_unlock(&comm->wd.mu);
    }
    o->peer = d->peer;
  }
  wd_verdict(comm, d, o, dropped, pending, len);
}

/* Hand d to the dump writer with its outcome as known now. Nothing here
 * waits on the disk (docs/recovery.md, "The watchdog thread"). 1: the
 * rank's own dump goes out before the coordinator's verdict, which may
 * still come (a coordinator, the epoch's view): d waits in comm->wd.late
 * for it, and the writer keeps the file's capture. */
static int wd_hand_off(ftc_comm_t *comm, struct ftc__wd_dump *d) {
  ftc_rec_outcome_t o;
  ftc_rec_dropped_t *dropped = NULL;
  char pending[512];
  wd_outcome(comm, d, &o, &dropped, pending, sizeof(pending));
  ftc__dw_job_t *job = ftc__dw_job_new(comm, d->capture, d->reason, &o, d->epoch, d->status,
                                       d->incident, d->rank);
  ftc__free(dropped);
  if (!job) {
    FTC_WARN(FTC_SUB_RECOVERY, "cannot hand %s%s dump of epoch %llu to the dump writer: out of memory",
             d->incident[0] ? "the incident " : "the failure", d->incident,
             (unsigned long long)d->epoch);
    return 0;
  }
  d->capture = NULL; /* the job's now */
  int late = !d->incident[0] && o.next_epoch < 0 && comm->member && d->view;
  if (late) d->late_id = ftc__dw_job_keep_for_verdict(job);
  ftc__dw_submit(job);
  return late;
}

/* Hand the captured dumps to the dump writer, oldest first. */
static void wd_write_dumps(ftc_comm_t *comm) {
  for (;;) {
    pthread_mutex_lock(&comm->wd.mu);
    struct ftc__wd_dump *d = comm->wd.dumps;
    if (d) comm->wd.dumps = d->next;
    pthread_mutex_unlock(&comm->wd.mu);
    if (!d) return;
    if (wd_hand_off(comm, d)) {
      /* A handful at most: an epoch fails once, and the next one, which
       * can fail in turn, is this one's verdict. */
      d->next = comm->wd.late;
      comm->wd.late = d;
    } else {
      wd_dump_free(d);
    }
  }
}

/* The coordinator's verdicts that came after their failure dumps were
 * handed off: to the dump writer, which writes them into those files. */
static void wd_late_verdicts(ftc_comm_t *comm) {
  if (!comm->wd.late) return;
  uint64_t latest = ftc__member_latest_epoch(comm->member);
  for (struct ftc__wd_dump **p = &comm->wd.late; *p;) {
    struct ftc__wd_dump *d = *p;
    if (latest <= d->epoch) {
      p = &d->next;
      continue;
    }
    ftc_rec_outcome_t o;
    ftc_rec_dropped_t *dropped = NULL;
    char pending[512];
    wd_outcome(comm, d, &o, &dropped, pending, sizeof(pending));
    if (o.next_epoch >= 0) ftc__dw_verdict(comm, d->late_id, &o);
    ftc__free(dropped);
    if (o.next_epoch < 0) { /* not readable yet after all: next time */
      p = &d->next;
      continue;
    }
    *p = d->next;
    wd_dump_free(d);
  }
}

/* Those whose verdict did not come while comm lived: they stay "pending". */
static void wd_late_free(ftc_comm_t *comm) {
  while (comm->wd.late) {
    struct ftc__wd_dump *d = comm->wd.late;
    comm->wd.late = d->next;
    wd_dump_free(d);
  }
}

/* Whether this rank's connection to `rank` of the current epoch is closed
 * by the peer (ftc__comm_peer_closed). Under comm->lock: a backend is
 * swapped out under it before it is closed, so comm->bh's sockets stay open
 * meanwhile. */
static int peer_closed_locked(ftc_comm_t *comm, int rank) {
  FTC_ASSERT_HELD(&comm->lock);
  if (!comm->bh || !comm->view) return 0;
  return ftc__comm_peer_closed(comm->be, comm->bh, comm->view->size, rank);
}

/* Whether the views said the coordinator dropped member_id for a failure
 * (crashed, hung, lost: any word but "left"). */
static int dropped_failed(ftc__member_t *m, uint64_t member_id) {
  char word[32] = "";
  return ftc__member_drop_reason(m, member_id, word, sizeof(word), NULL, 0) &&
         strcmp(word, "left") != 0;
}

/* A newer epoch: revoke the current one if it leaves out one of our
 * members that failed (the coordinator dropped it as crashed, hung or lost)
 * or whose connection is still open (a hang: only the revoke releases a
 * collective blocked on it); interrupt a recovery that is connecting an
 * older one. A member that left (a goodbye, or the views name it as left)
 * needs no revoke: a collective that still needs it fails on that
 * connection by itself, and one that already has all its data completes,
 * so ranks that are finishing the same last collective as a peer that
 * finished it first and left all complete it too. One that crashed is
 * revoked for although its connection is closed too: a rank blocked on a
 * live peer that has not failed yet would otherwise wait for the failures
 * to reach it from peer to peer (each shutting its sockets), on a busy host
 * milliseconds after this view (docs/performance/recovery.md). Without the
 * coordinator's word (an older one), a closed connection is taken as a
 * finished member's. */
static void wd_view(ftc_comm_t *comm, uint64_t *checked) {
  if (!comm->member) return;
  uint64_t latest = ftc__member_latest_epoch(comm->member);
  uint64_t epoch = __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE);
  if (latest <= epoch) return;
  if (__atomic_load_n(&comm->recovering, __ATOMIC_ACQUIRE)) {
    uint64_t target = __atomic_load_n(&comm->target_epoch, __ATOMIC_ACQUIRE);
    /* Only while the target is being connected: once its transport is in
     * place (comm->view swapped under comm->lock) the stop would land on
     * the new epoch's first collective instead, a quiet one its peers wait
     * out to their timeout; the step boundary takes the newer epoch. A stop
     * set just before the swap is taken back by the rebuild (engine.c,
     * do_rebuild). */
    pthread_mutex_lock(&comm->lock);
    int stop = target && latest > target && comm->view && comm->view->epoch < target;
    if (stop) {
      int expected = 0;
      __atomic_compare_exchange_n(&comm->interrupt, &expected, (int)FTC_ERR_REVOKED, 0,
                                  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    pthread_mutex_unlock(&comm->lock);
    if (stop)
      FTC_INFO(FTC_SUB_RECOVERY, "epoch %llu supersedes epoch %llu being connected; retrying",
               (unsigned long long)latest, (unsigned long long)target);
    return;
  }
  if (*checked == latest || __atomic_load_n(&comm->error, __ATOMIC_ACQUIRE)) return;
  *checked = latest;
  ftc__view_t *v = NULL;
  if (ftc__member_wait_view(comm->member, epoch, 0, &v) != FTC_OK) {
    if (comm->spares) ftc__engine_wake(comm);
    return;
  }
  /* comm->view is swapped under comm->lock by the thread that rebuilds. */
  pthread_mutex_lock(&comm->lock);
  int gone = -1;
  for (int r = 0; comm->view && r < comm->view->size && gone < 0; r++)
    if (!view_has(v, comm->view->members[r].member_id) &&
        !(comm->be->peer_left && comm->be->peer_left(comm->bh, r)) &&
        !ftc__member_left_cleanly(comm->member, comm->view->members[r].member_id) &&
        (dropped_failed(comm->member, comm->view->members[r].member_id) ||
         !peer_closed_locked(comm, r)))
      gone = r; /* a member that said goodbye (or the coordinator says left) left on purpose */
  pthread_mutex_unlock(&comm->lock);
  if (gone >= 0) {
    char detail[160];
    snprintf(detail, sizeof(detail), "the coordinator announced epoch %llu without rank %d",
             (unsigned long long)v->epoch, gone);
    /* Quiet (comm.c): every survivor revokes at this view, or has seen the
     * member's end itself. The progress thread is left alone, as at a rank
     * that saw the failure itself: its work (the move) comes with the
     * recovery's request, and a wake-up now would be one more runnable
     * thread per survivor while they recover. */
    ftc__comm_fail_epoch(comm, epoch, FTC_ERR_REVOKED, detail, gone);
  } else if (comm->spares && !(comm->be->early_start && ftc__view_admits(v))) {
    /* A planned change (members left cleanly): the idle progress thread
     * stops taking spare connections for this epoch. A view that admits a
     * member woke it already, from the membership thread (comm.c,
     * ftc__member_set_view_notify): it connects early to the new members
     * (engine.c, idle_wait). */
    ftc__engine_wake(comm);
  }
  ftc__view_free(v);
}

int ftc__comm_quiet_covered_locked(ftc_comm_t *comm, const ftc__view_t *view) {
  FTC_ASSERT_HELD(&comm->lock);
  if (comm->quiet == 2) return 1;
  return comm->quiet == 1 && comm->member && !view_has(view, comm->quiet_member) &&
         dropped_failed(comm->member, comm->quiet_member);
}

/* A quiet failure (comm.c, comm_stop_locked) left this epoch's sockets
 * open: once a view covers it they stay so (the move closes them after the
 * next epoch settled); else at its deadline they are shut, as a loud
 * failure's are at once, for the peers that see nothing of it. Returns
 * the nanoseconds to that deadline, 0 when none is pending. */
static int64_t wd_quiet(ftc_comm_t *comm) {
  int64_t left = 0;
  ftc__view_t *v = NULL;
  uint64_t epoch = __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE);
  pthread_mutex_lock(&comm->lock);
  int pending = comm->quiet == 1;
  pthread_mutex_unlock(&comm->lock);
  if (!pending) return 0;
  if (comm->member && ftc__member_latest_epoch(comm->member) > epoch)
    (void)ftc__member_wait_view(comm->member, epoch, 0, &v);
  pthread_mutex_lock(&comm->lock);
  if (comm->quiet == 1 && __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE) == epoch) {
    if (v && ftc__comm_quiet_covered_locked(comm, v)) {
      comm->quiet = 2;
    } else if ((left = comm->quiet_until_ns - ftc__now_ns()) <= 0) {
      FTC_INFO(FTC_SUB_RECOVERY,
               "epoch %llu failed quietly and no view dropped the member blamed; shutting its "
               "connections",
               (unsigned long long)epoch);
      if (comm->bh) comm->be->interrupt(comm->bh);
      comm->quiet = 0;
      left = 0;
    }
  }
  pthread_mutex_unlock(&comm->lock);
  ftc__view_free(v);
  return left;
}

static void *watchdog_main(void *arg) {
  ftc_comm_t *comm = arg;
  pthread_setname_np(pthread_self(), "ftc-watchdog"); /* (by itself: see engine.c) */
  int64_t period;
  if (ftc__param_int(FTC_P_WATCHDOG_MS, &period) != FTC_OK) period = 1000;
  uint64_t checked = 0;
  int64_t quiet = 0;
  int defer_ms = -1;
  for (;;) {
    struct pollfd p = {comm->wd.fd, POLLIN, 0};
    int wait_ms = (int)period;
    if (quiet && (quiet + 999999) / 1000000 < wait_ms) wait_ms = (int)((quiet + 999999) / 1000000);
    if (defer_ms >= 0 && defer_ms < wait_ms) wait_ms = defer_ms;
    if (poll(&p, 1, wait_ms) > 0) {
      uint64_t n;
      ssize_t r = read(comm->wd.fd, &n, sizeof(n));
      (void)r;
    }
    pthread_mutex_lock(&comm->wd.mu);
    int stop = comm->wd.stop;
    pthread_mutex_unlock(&comm->wd.mu);
    if (stop) break;
    pthread_mutex_lock(&comm->wd.cap_mu);
    wd_dump_request(comm);
    wd_failure(comm);
    pthread_mutex_unlock(&comm->wd.cap_mu);
    defer_ms = wd_deferred_report(comm);
    wd_view(comm, &checked);
    quiet = wd_quiet(comm);
    wd_write_dumps(comm);
    wd_late_verdicts(comm);
  }
  /* A failure just before the communicator was destroyed (its kick may have
   * come with the stop): captured and written now. */
  pthread_mutex_lock(&comm->wd.cap_mu);
  wd_failure(comm);
  pthread_mutex_unlock(&comm->wd.cap_mu);
  wd_write_dumps(comm);
  wd_late_verdicts(comm);
  wd_late_free(comm);
  return NULL;
}

ftc_status_t ftc__watchdog_start(ftc_comm_t *comm) {
  int rc = pthread_create(&comm->wd.thread, NULL, watchdog_main, comm);
  if (rc != 0) return ftc__error(FTC_ERR_SYSTEM, "starting the watchdog thread: %s", strerror(rc));
  comm->wd.started = 1;
  ftc__dw_retain();
  return FTC_OK;
}

void ftc__watchdog_stop(ftc_comm_t *comm) {
  if (!comm->wd.started) return;
  pthread_mutex_lock(&comm->wd.mu);
  comm->wd.stop = 1;
  pthread_mutex_unlock(&comm->wd.mu);
  ftc__watchdog_kick(comm);
  pthread_join(comm->wd.thread, NULL);
  comm->wd.started = 0;
  ftc__dw_release(comm); /* its dumps are written (and uploaded) before it goes */
}
