/*
 * dumpwriter.c - the process's dump writer thread ("ftc-dumpwriter").
 *
 * The watchdogs capture failure and coordinator dumps and decide when they
 * are due (recover.c); the files are formatted, written and fsynced here,
 * and those the coordinator asked for are uploaded, so that a slow disk
 * never holds up a watchdog's revokes, heartbeats or reports (a 4 s fsync
 * under load timed out the survivors' collectives: docs/recovery.md).
 *
 * One thread per process, started at the first job and joined when the last
 * communicator that uses it lets go (ftc__dw_release). Jobs wait in a FIFO of
 * at most DW_MAX_QUEUED; a job beyond that drops the oldest waiting one, with
 * a log line (a waiting rewrite with a late verdict goes first: its dump is
 * on disk already; a rewrite never drops a dump that is not). ftc__dw_release(comm) waits, up to FTCOMM_DUMP_DRAIN_MS, for
 * comm's jobs to be written (and uploaded: the upload uses comm's membership
 * session) and drops, with a log line, those that are still waiting then.
 *
 * A failure dump written before the coordinator's verdict came (its
 * verdict says "pending") is kept, capture and path, when the watchdog
 * asked for it (ftc__dw_job_keep_for_verdict): at most DW_MAX_LATE, the
 * oldest let go beyond. When the verdict comes (ftc__dw_verdict) the file
 * is written again from the same capture with it and swapped in whole by
 * one rename (ftc_rec_capture_rewrite_outcome); one still waiting to be
 * written just takes the verdict, one being written takes it right after.
 *
 * Every dump is handed here as soon as it is captured, and written at once,
 * verdict or not: no write waits for the job's next epoch. The thread runs
 * as SCHED_BATCH (when the process runs as SCHED_OTHER): a dump that comes
 * during a recovery is written without preempting the threads that recover.
 *
 * A captured dump outlives a normal termination: while a communicator lives,
 * SIGTERM and SIGINT (those the application left at their default) end the
 * process only once the writer is idle and the uploads it queued are sent,
 * at most FTCOMM_DUMP_DRAIN_MS after the signal. The handler ends the process
 * at once when nothing is pending (as without ftcomm) or at a second signal;
 * else it posts a semaphore, and the thread "ftc-dwdrain" waits for the
 * writer, then restores the default action and sends the signal again.
 *
 * Lock order: term_mu -> dw.mu -> the membership session's lock (the upload, which only
 * queues frames; the drain, which asks whether they went). The thread touches
 * a communicator only through job->owner (and dw.flush), and only under
 * dw.mu, which ftc__dw_release takes before it lets go.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/comm.h"
#include "proto/proto.h"
#include "ftc_alloc.h"
#include "ftc_assert.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftc_time.h"

#define DW_MAX_QUEUED 16
#define DW_MAX_LATE 16 /* written dumps kept for a verdict that may still come */
#define DW_MAX_FLUSH 16 /* communicators whose uploads may still wait in their session */

struct ftc__dw_job {
  struct ftc__dw_job *next;
  ftc_comm_t *owner;          /* under dw.mu; NULL once the owner stopped waiting */
  ftc_rec_capture_t *capture;
  const char *reason;         /* static */
  char dir[1024];
  ftc_rec_outcome_t o;        /* points into the job's own copies below */
  int has_outcome;
  uint64_t epoch;
  int status;                 /* the failure, for the log */
  char incident[128];         /* "" for the rank's own dump */
  int rank;
  char pending[512];
  ftc_rec_dropped_t *dropped; /* and their reasons and details, one block */
  uint64_t id;                /* for ftc__dw_verdict; 0: not kept */
  int rewrite;                /* 1: path holds it already; write it again with the verdict */
  struct ftc__dw_job *verdict; /* under dw.mu: a verdict that came while it was being written */
  char path[1400];            /* where it was written */
};

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;          /* a job, a finished job, or stop */
  struct ftc__dw_job *head;   /* waiting, oldest first (at most DW_MAX_QUEUED) */
  int queued;
  struct ftc__dw_job *busy;   /* the job being written */
  struct ftc__dw_job *late;   /* written, kept for its verdict; oldest first */
  int nlate;
  uint64_t next_id;
  int users;                  /* communicators that may submit */
  int started, stop;
  pthread_t thread;
  ftc_comm_t *flush[DW_MAX_FLUSH]; /* uploaded since the drain last saw their sessions empty */
  int nflush;
} dw = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, NULL, NULL, 0, 0, 0, 0, 0, 0};

/* What a termination signal waits for: jobs waiting or being written, and
 * communicators whose uploads may not be sent yet. Written under dw.mu,
 * read by the signal handler. */
static int dw_pending;

static void pending_update_locked(void) {
  FTC_ASSERT_HELD(&dw.mu);
  __atomic_store_n(&dw_pending, dw.queued + (dw.busy != NULL) + dw.nflush, __ATOMIC_RELEASE);
}

static void job_free(struct ftc__dw_job *j) {
  if (!j) return;
  job_free(j->verdict);
  ftc_rec_capture_free(j->capture);
  ftc__free(j->dropped);
  ftc__free(j);
}

static const char *job_what(const struct ftc__dw_job *j, char *buf, size_t len) {
  if (j->rewrite)
    snprintf(buf, len, "the verdict for %.400s (it stays as written, its verdict pending)", j->path);
  else if (j->incident[0])
    snprintf(buf, len, "the dump for incident %s", j->incident);
  else
    snprintf(buf, len, "the failure dump of epoch %llu", (unsigned long long)j->epoch);
  return buf;
}

/* Copy o (its strings and dropped members too) into j, replacing j's
 * outcome. -1: out of memory (j unchanged). */
static int job_set_outcome(struct ftc__dw_job *j, const ftc_rec_outcome_t *o) {
  ftc_rec_dropped_t *dropped = NULL;
  if (o->ndropped > 0) {
    /* The entries, then each one's reason and detail. */
    size_t n = (size_t)o->ndropped, dlen = FTC__PROTO_MAX_DROP_DETAIL + 1, rlen = 16;
    dropped = ftc__calloc(1, n * (sizeof(*dropped) + dlen + rlen));
    if (!dropped) return -1;
    for (size_t i = 0; i < n; i++) {
      char *detail = (char *)(dropped + n) + i * (dlen + rlen), *why = detail + dlen;
      dropped[i] = o->dropped[i];
      snprintf(why, rlen, "%s", o->dropped[i].reason ? o->dropped[i].reason : "lost");
      dropped[i].reason = why;
      if (o->dropped[i].detail) {
        snprintf(detail, dlen, "%s", o->dropped[i].detail);
        dropped[i].detail = detail;
      }
    }
  }
  ftc__free(j->dropped);
  j->dropped = dropped;
  j->has_outcome = 1;
  j->o = *o;
  j->o.pending = NULL;
  j->o.dropped = dropped;
  if (o->pending) {
    snprintf(j->pending, sizeof(j->pending), "%s", o->pending);
    j->o.pending = j->pending;
  }
  return 0;
}

/* Move src's outcome to dst (src keeps none). */
static void job_take_outcome(struct ftc__dw_job *dst, struct ftc__dw_job *src) {
  ftc__free(dst->dropped);
  dst->dropped = src->dropped;
  src->dropped = NULL;
  dst->has_outcome = src->has_outcome;
  dst->o = src->o;
  dst->o.dropped = dst->dropped;
  memcpy(dst->pending, src->pending, sizeof(dst->pending));
  if (src->o.pending) dst->o.pending = dst->pending;
}

ftc__dw_job_t *ftc__dw_job_new(ftc_comm_t *owner, ftc_rec_capture_t *capture, const char *reason,
                               const ftc_rec_outcome_t *o, uint64_t epoch, int status,
                               const char *incident, int rank) {
  struct ftc__dw_job *j = ftc__calloc(1, sizeof(*j));
  if (!j) return NULL;
  j->owner = owner;
  j->reason = reason;
  snprintf(j->dir, sizeof(j->dir), "%s", owner->cfg.dump_dir ? owner->cfg.dump_dir : "");
  j->epoch = epoch;
  j->status = status;
  snprintf(j->incident, sizeof(j->incident), "%s", incident ? incident : "");
  j->rank = rank;
  if (o && job_set_outcome(j, o) != 0) {
    ftc__free(j);
    return NULL;
  }
  j->capture = capture; /* stolen only on success */
  return j;
}

void ftc__dw_job_free(ftc__dw_job_t *j) { job_free(j); }

uint64_t ftc__dw_job_keep_for_verdict(ftc__dw_job_t *j) {
  pthread_mutex_lock(&dw.mu);
  j->id = ++dw.next_id;
  pthread_mutex_unlock(&dw.mu);
  return j->id;
}

/* Read a dump file whole (for the upload). */
static char *read_file(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat sb;
  char *buf = NULL;
  if (fstat(fd, &sb) != 0 || sb.st_size <= 0) goto out_close;
  buf = ftc__malloc((size_t)sb.st_size);
  if (!buf) goto out_close;
  size_t off = 0;
  while (off < (size_t)sb.st_size) {
    ssize_t n = read(fd, buf + off, (size_t)sb.st_size - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ftc__free(buf);
      buf = NULL;
      goto out_close;
    }
    off += (size_t)n;
  }
  *len = off;
out_close:
  close(fd);
  return buf;
}

/* owner queued an upload (dw.mu held): a termination waits until its
 * session sent it. A full list keeps its oldest (the drain then waits for
 * the writer alone for the newest ones: the bound is the drain time). */
static void flush_add_locked(ftc_comm_t *owner) {
  FTC_ASSERT_HELD(&dw.mu);
  for (int i = 0; i < dw.nflush; i++)
    if (dw.flush[i] == owner) return;
  if (dw.nflush < DW_MAX_FLUSH) dw.flush[dw.nflush++] = owner;
  pending_update_locked();
}

/* Let go of owner, or (NULL) of every owner whose session sent all it
 * queued (dw.mu held). */
static void flush_drop_locked(ftc_comm_t *owner) {
  FTC_ASSERT_HELD(&dw.mu);
  for (int i = 0; i < dw.nflush;) {
    if (owner ? dw.flush[i] == owner : ftc__member_sent_all(dw.flush[i]->member))
      dw.flush[i] = dw.flush[--dw.nflush];
    else
      i++;
  }
  pending_update_locked();
}

/* Write j (no lock held: this is where the disk may be slow), then upload it
 * if the coordinator asked for it and its communicator still waits. */
static void job_run(struct ftc__dw_job *j) {
  char *path = j->path;
  if (__builtin_expect(ftc__fault_armed, 0)) ftc__fault_dump_write();
  if (j->rewrite) {
    if (ftc_rec_capture_rewrite_outcome(j->capture, path, j->reason, &j->o) == FTC_OK)
      FTC_INFO(FTC_SUB_RECOVERY, "the coordinator's verdict on epoch %llu (epoch %lld, %d dropped) "
               "came after its failure dump was written; rewrote %s with it",
               (unsigned long long)j->epoch, (long long)j->o.next_epoch, j->o.ndropped, path);
    else
      FTC_WARN(FTC_SUB_RECOVERY, "the coordinator's verdict on epoch %llu came after its failure "
               "dump was written; cannot add it: %s", (unsigned long long)j->epoch, ftc_last_error());
    return;
  }
  ftc_status_t st = ftc_rec_capture_write_outcome(j->capture, j->dir, j->reason,
                                                  j->has_outcome ? &j->o : NULL, path, sizeof(j->path));
  /* On disk this long after the capture (docs/recovery.md: the bound is 1 s). */
  long long after_ms = (long long)((ftc__now_ns() - ftc_rec_capture_time_ns(j->capture)) / 1000000);
  if (st != FTC_OK) j->id = 0; /* nothing on disk to add a verdict to */
  if (!j->incident[0]) {
    if (st == FTC_OK)
      FTC_INFO(FTC_SUB_RECOVERY, "epoch %llu failed (%s): dump written to %s, %lld ms after its capture",
               (unsigned long long)j->epoch, ftc_strerror((ftc_status_t)j->status), path, after_ms);
    else
      FTC_WARN(FTC_SUB_RECOVERY, "epoch %llu failed; cannot write a dump: %s",
               (unsigned long long)j->epoch, ftc_last_error());
    return;
  }
  if (st != FTC_OK) {
    FTC_WARN(FTC_SUB_RECOVERY, "cannot write the dump the coordinator asked for (%s): %s",
             j->incident, ftc_last_error());
    return;
  }
  size_t len = 0;
  char *data = read_file(path, &len);
  ftc_status_t up = FTC_ERR_SYSTEM;
  int gone = 0;
  pthread_mutex_lock(&dw.mu);
  if (!j->owner)
    gone = 1;
  else if (data && j->owner->member)
    up = ftc__member_upload_dump(j->owner->member, j->incident, j->rank, data, len);
  if (up == FTC_OK) flush_add_locked(j->owner);
  pthread_mutex_unlock(&dw.mu);
  if (gone)
    FTC_WARN(FTC_SUB_RECOVERY, "wrote %s for incident %s but its communicator was destroyed "
             "before the upload (FTCOMM_DUMP_DRAIN_MS passed)", path, j->incident);
  else if (up != FTC_OK)
    FTC_WARN(FTC_SUB_RECOVERY, "wrote %s for incident %s but cannot upload it: %s", path,
             j->incident, data ? ftc_last_error() : "cannot read it back");
  else
    FTC_INFO(FTC_SUB_RECOVERY, "dump for incident %s: %s, %lld ms after its capture (uploaded)",
             j->incident, path, after_ms);
  ftc__free(data);
}

/* Append j to the queue (dw.mu held). When DW_MAX_QUEUED wait already, one
 * goes, for the caller to log and free (else NULL): the oldest waiting
 * rewrite, whose dump is on disk already ("pending"), or j itself if it is
 * a rewrite and none waits; else the oldest waiting job. A verdict never
 * pushes out a dump that is not written at all. */
static struct ftc__dw_job *enqueue_locked(struct ftc__dw_job *j) {
  FTC_ASSERT_HELD(&dw.mu);
  struct ftc__dw_job *dropped = NULL;
  if (dw.queued >= DW_MAX_QUEUED) {
    struct ftc__dw_job **p = &dw.head;
    while (*p && !(*p)->rewrite) p = &(*p)->next;
    if (!*p && j->rewrite) return j;
    if (!*p) p = &dw.head;
    dropped = *p;
    *p = dropped->next;
    dw.queued--;
  }
  j->next = NULL;
  struct ftc__dw_job **end = &dw.head; /* a short queue: walked, no tail to keep */
  while (*end) end = &(*end)->next;
  *end = j;
  dw.queued++;
  pending_update_locked();
  pthread_cond_broadcast(&dw.cv);
  return dropped;
}

static void log_dropped(struct ftc__dw_job *dropped) {
  if (!dropped) return;
  char what[512];
  FTC_WARN(FTC_SUB_RECOVERY, "dumps come faster than the disk takes them (%d waiting): "
           "dropped %s%s", DW_MAX_QUEUED, job_what(dropped, what, sizeof(what)),
           dropped->rewrite ? "" : ", the oldest");
  job_free(dropped);
}

/* j was just written (dw.mu held): queue it again if its verdict came
 * meanwhile, keep it if one may still come; what to free, or NULL. */
static struct ftc__dw_job *after_run_locked(struct ftc__dw_job *j) {
  FTC_ASSERT_HELD(&dw.mu);
  if (!j->id || !j->owner) return j; /* not kept, not on disk, or its communicator is gone */
  if (j->verdict) {                  /* the verdict came while it was being written */
    job_take_outcome(j, j->verdict);
    job_free(j->verdict);
    j->verdict = NULL;
    j->rewrite = 1;
    struct ftc__dw_job *dropped = enqueue_locked(j);
    if (dropped) {
      pthread_mutex_unlock(&dw.mu);
      log_dropped(dropped);
      pthread_mutex_lock(&dw.mu);
    }
    return NULL;
  }
  if (j->rewrite || (j->has_outcome && j->o.next_epoch >= 0)) return j; /* it has its verdict */
  struct ftc__dw_job *old = NULL;
  if (dw.nlate >= DW_MAX_LATE) {
    old = dw.late;
    dw.late = old->next;
    dw.nlate--;
  }
  j->next = NULL;
  struct ftc__dw_job **p = &dw.late;
  while (*p) p = &(*p)->next;
  *p = j;
  dw.nlate++;
  if (old)
    FTC_WARN(FTC_SUB_RECOVERY, "more than %d written failure dumps wait for the coordinator's "
             "verdict: let go of the oldest, %s (it stays as written, its verdict pending)",
             DW_MAX_LATE, old->path);
  return old;
}

static void *dw_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "ftc-dumpwriter"); /* (by itself: see engine.c) */
  /* A write due during a recovery does not preempt the threads that
   * recover (the policy is this thread's alone on Linux). */
  struct sched_param sp = {0};
  if (sched_getscheduler(0) == SCHED_OTHER && sched_setscheduler(0, SCHED_BATCH, &sp) != 0)
    FTC_DEBUG(FTC_SUB_RECOVERY, "dump writer to SCHED_BATCH: %s", strerror(errno));
  pthread_mutex_lock(&dw.mu);
  for (;;) {
    while (!dw.head && !dw.stop) pthread_cond_wait(&dw.cv, &dw.mu);
    struct ftc__dw_job *j = dw.head;
    if (!j) break; /* stop, and nothing left */
    dw.head = j->next;
    dw.queued--;
    dw.busy = j;
    pthread_mutex_unlock(&dw.mu);
    job_run(j);
    pthread_mutex_lock(&dw.mu);
    dw.busy = NULL;
    struct ftc__dw_job *gone = after_run_locked(j);
    pending_update_locked();
    pthread_cond_broadcast(&dw.cv);
    pthread_mutex_unlock(&dw.mu);
    job_free(gone);
    pthread_mutex_lock(&dw.mu);
  }
  pthread_mutex_unlock(&dw.mu);
  return NULL;
}

/* ---- termination: SIGTERM and SIGINT wait for the writer ---- */

static const int term_sigs[] = {SIGTERM, SIGINT};
#define NTERM ((int)(sizeof(term_sigs) / sizeof(term_sigs[0])))
static struct {
  sem_t sem;                 /* posted by the handler (async-signal-safe), and to stop */
  int sig;                   /* atomic (set by the handler): the signal being handled, 0 none */
  int quit;                  /* under dw.mu: the thread ends */
  int running;               /* atomic: the thread runs (read by the handler) */
  pthread_t thread;
  int installed[NTERM];      /* our handler is installed for term_sigs[i] */
  struct sigaction old[NTERM];
} term;

static void term_default(int sig) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
}

static void on_term(int sig) {
  int saved = errno;
  if (__atomic_load_n(&dw_pending, __ATOMIC_ACQUIRE) == 0 ||
      __atomic_load_n(&term.sig, __ATOMIC_ACQUIRE) ||
      !__atomic_load_n(&term.running, __ATOMIC_ACQUIRE)) {
    /* Nothing to write, a second signal, or no drain thread (a forked
     * child): the default action, now (the signal is raised again once
     * this handler returns). */
    term_default(sig);
    raise(sig);
  } else {
    __atomic_store_n(&term.sig, sig, __ATOMIC_RELEASE);
    sem_post(&term.sem);
  }
  errno = saved;
}

/* Wait, up to FTCOMM_DUMP_DRAIN_MS, for the writer to be idle and the
 * uploads it queued to be sent. */
static void term_drain(int sig) {
  int64_t drain_ms;
  if (ftc__param_int(FTC_P_DUMP_DRAIN_MS, &drain_ms) != FTC_OK) drain_ms = 10000;
  int64_t t0 = ftc__now_ns(), deadline = t0 + drain_ms * 1000000LL;
  pthread_mutex_lock(&dw.mu);
  flush_drop_locked(NULL);
  int jobs = dw.queued + (dw.busy != NULL), uploads = dw.nflush;
  if (jobs || uploads)
    FTC_WARN(FTC_SUB_RECOVERY, "got %s: %d captured dump%s to write, %d upload%s to send before the "
             "process ends (at most FTCOMM_DUMP_DRAIN_MS, %lld ms)", strsignal(sig), jobs,
             jobs == 1 ? "" : "s", uploads, uploads == 1 ? "" : "s", (long long)drain_ms);
  for (;;) {
    flush_drop_locked(NULL);
    if (!dw.head && !dw.busy && !dw.nflush) break;
    int64_t now = ftc__now_ns();
    if (now >= deadline) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t wait = deadline - now < 20000000 ? deadline - now : 20000000; /* uploads: polled */
    ts.tv_nsec += (long)wait;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&dw.cv, &dw.mu, &ts);
  }
  int left = dw.queued + (dw.busy != NULL) + dw.nflush;
  pthread_mutex_unlock(&dw.mu);
  long long took = (long long)((ftc__now_ns() - t0) / 1000000);
  if (left)
    FTC_WARN(FTC_SUB_RECOVERY, "%s: %d dump%s or upload%s still pending after %lld ms "
             "(FTCOMM_DUMP_DRAIN_MS); ending the process", strsignal(sig), left,
             left == 1 ? "" : "s", left == 1 ? "" : "s", took);
  else if (jobs || uploads)
    FTC_WARN(FTC_SUB_RECOVERY, "%s: the dumps are written and sent (%lld ms); ending the process",
             strsignal(sig), took);
}

static void *term_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "ftc-dwdrain");
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  for (;;) {
    while (sem_wait(&term.sem) != 0 && errno == EINTR) {
    }
    int sig = __atomic_load_n(&term.sig, __ATOMIC_ACQUIRE);
    if (sig) {
      term_drain(sig);
      /* The signal again, with its default action: the process ends as it
       * would have without ftcomm, only later. */
      term_default(sig);
      kill(getpid(), sig);
      return NULL;
    }
    pthread_mutex_lock(&dw.mu);
    int quit = term.quit;
    pthread_mutex_unlock(&dw.mu);
    if (quit) return NULL;
  }
}

/* Serializes term_start and term_stop (a communicator made as the last
 * one goes); taken before dw.mu. */
static pthread_mutex_t term_mu = PTHREAD_MUTEX_INITIALIZER;

/* The first communicator: the drain thread, and our handler for each
 * termination signal still at its default action (term_mu held). */
static void term_start(void) {
  if (__atomic_load_n(&term.running, __ATOMIC_ACQUIRE)) return; /* the last one's stop is due */
  if (sem_init(&term.sem, 0, 0) != 0) return;
  __atomic_store_n(&term.sig, 0, __ATOMIC_RELEASE);
  term.quit = 0;
  int rc = pthread_create(&term.thread, NULL, term_main, NULL);
  if (rc != 0) {
    FTC_WARN(FTC_SUB_RECOVERY, "cannot start the dump drain thread (%s): SIGTERM ends the process "
             "without waiting for dumps being written", strerror(rc));
    sem_destroy(&term.sem);
    return;
  }
  __atomic_store_n(&term.running, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < NTERM; i++) {
    struct sigaction cur, sa;
    if (sigaction(term_sigs[i], NULL, &cur) != 0 || (cur.sa_flags & SA_SIGINFO) ||
        cur.sa_handler != SIG_DFL)
      continue; /* the application's own handler (or SIG_IGN) stays */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_term;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(term_sigs[i], &sa, &term.old[i]) == 0) term.installed[i] = 1;
  }
}

/* The last communicator let go: the default actions back, the thread
 * stopped (one that is handling a signal ends the process instead); not
 * when another communicator came meanwhile (term_mu held). */
static void term_stop(void) {
  if (!__atomic_load_n(&term.running, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&dw.mu);
  int users = dw.users;
  pthread_mutex_unlock(&dw.mu);
  if (users > 0) return;
  for (int i = 0; i < NTERM; i++) {
    if (!term.installed[i]) continue;
    struct sigaction cur;
    /* Only ours: a handler the application installed since stays. */
    if (sigaction(term_sigs[i], NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
        cur.sa_handler == on_term)
      sigaction(term_sigs[i], &term.old[i], NULL);
    term.installed[i] = 0;
  }
  pthread_mutex_lock(&dw.mu);
  term.quit = 1;
  pthread_mutex_unlock(&dw.mu);
  sem_post(&term.sem);
  pthread_join(term.thread, NULL);
  __atomic_store_n(&term.running, 0, __ATOMIC_RELEASE);
  sem_destroy(&term.sem);
}

/* A forked child has no writer thread: it starts its own at its first job.
 * The parent's waiting jobs stay the parent's (their memory is left). The
 * child has no drain thread either: nothing of the parent's is pending in
 * it, so its handler ends it at once. */
static void dw_atfork_child(void) {
  pthread_mutex_init(&dw.mu, NULL);
  pthread_mutex_init(&term_mu, NULL);
  pthread_cond_init(&dw.cv, NULL);
  dw.head = dw.busy = dw.late = NULL;
  dw.queued = dw.nlate = dw.nflush = 0;
  dw.started = dw.stop = 0;
  dw.users = 0; /* the parent's communicators do not run here */
  __atomic_store_n(&dw_pending, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&term.running, 0, __ATOMIC_RELEASE);
}

static pthread_once_t dw_once = PTHREAD_ONCE_INIT;
static void dw_init(void) { pthread_atfork(NULL, NULL, dw_atfork_child); }

void ftc__dw_retain(void) {
  pthread_once(&dw_once, dw_init);
  pthread_mutex_lock(&term_mu);
  pthread_mutex_lock(&dw.mu);
  int first = dw.users++ <= 0;
  pthread_mutex_unlock(&dw.mu);
  if (first) term_start();
  pthread_mutex_unlock(&term_mu);
}

void ftc__dw_submit(ftc__dw_job_t *j) {
  struct ftc__dw_job *dropped = NULL;
  pthread_mutex_lock(&dw.mu);
  if (!dw.started) {
    int rc = pthread_create(&dw.thread, NULL, dw_main, NULL);
    if (rc != 0) {
      pthread_mutex_unlock(&dw.mu);
      /* No thread: written here, late rather than lost. */
      FTC_WARN(FTC_SUB_RECOVERY, "cannot start the dump writer thread (%s); writing the dump "
               "on the watchdog thread", strerror(rc));
      job_run(j);
      job_free(j);
      return;
    }
    dw.started = 1;
    dw.stop = 0;
  } else if (dw.stop) {
    /* The last communicator is letting go as another submits: written here. */
    pthread_mutex_unlock(&dw.mu);
    job_run(j);
    job_free(j);
    return;
  }
  dropped = enqueue_locked(j);
  pthread_mutex_unlock(&dw.mu);
  log_dropped(dropped);
}

void ftc__dw_verdict(ftc_comm_t *owner, uint64_t id, const ftc_rec_outcome_t *o) {
  struct ftc__dw_job *v = ftc__calloc(1, sizeof(*v)), *dropped = NULL, *j;
  if (!v || job_set_outcome(v, o) != 0) {
    ftc__free(v);
    FTC_WARN(FTC_SUB_RECOVERY, "the coordinator's verdict on epoch %lld came after its failure dump "
             "was written; cannot add it: out of memory", (long long)o->epoch);
    return;
  }
  pthread_mutex_lock(&dw.mu);
  for (j = dw.head; j && !(j->id == id && j->owner == owner); j = j->next) {
  }
  if (j) { /* not written yet: written once, with the verdict */
    job_take_outcome(j, v);
  } else if (dw.busy && dw.busy->id == id && dw.busy->owner == owner) {
    job_free(dw.busy->verdict);
    dw.busy->verdict = v; /* taken once it is written */
    v = NULL;
  } else {
    struct ftc__dw_job **p = &dw.late;
    while (*p && !((*p)->id == id && (*p)->owner == owner)) p = &(*p)->next;
    if ((j = *p) && dw.started && !dw.stop) { /* written: written again, with it */
      *p = j->next;
      dw.nlate--;
      job_take_outcome(j, v);
      j->rewrite = 1;
      dropped = enqueue_locked(j);
    }
    /* else let go (DW_MAX_LATE), or its write failed: nothing to add to */
  }
  pthread_mutex_unlock(&dw.mu);
  job_free(v);
  log_dropped(dropped);
}

void ftc__dw_stats(int *queued, int *busy) {
  pthread_mutex_lock(&dw.mu);
  *queued = dw.queued;
  *busy = dw.busy != NULL;
  pthread_mutex_unlock(&dw.mu);
}

/* Unlinks owner's jobs from *list and returns them in the list's order;
 * *n counts them down (dw.mu held). */
static struct ftc__dw_job *take_owned(struct ftc__dw_job **list, ftc_comm_t *owner, int *n) {
  struct ftc__dw_job *taken = NULL, **end = &taken;
  for (struct ftc__dw_job **p = list; *p;) {
    struct ftc__dw_job *j = *p;
    if (j->owner != owner) {
      p = &j->next;
      continue;
    }
    *p = j->next;
    (*n)--;
    j->next = NULL;
    *end = j;
    end = &j->next;
  }
  return taken;
}

/* Whether a job of owner is waiting or being written (dw.mu held). */
static int owner_busy_locked(ftc_comm_t *owner) {
  FTC_ASSERT_HELD(&dw.mu);
  if (dw.busy && dw.busy->owner == owner) return 1;
  for (struct ftc__dw_job *j = dw.head; j; j = j->next)
    if (j->owner == owner) return 1;
  return 0;
}

void ftc__dw_release(ftc_comm_t *owner) {
  int64_t drain_ms;
  if (ftc__param_int(FTC_P_DUMP_DRAIN_MS, &drain_ms) != FTC_OK) drain_ms = 10000;
  int64_t deadline = ftc__now_ns() + drain_ms * 1000000LL;
  pthread_mutex_lock(&dw.mu);
  while (owner_busy_locked(owner)) {
    int64_t now = ftc__now_ns();
    if (now >= deadline) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t wait = deadline - now < 100000000 ? deadline - now : 100000000; /* re-check often */
    ts.tv_nsec += (long)wait;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&dw.cv, &dw.mu, &ts);
  }
  /* Past the bound: drop what still waits, and let the one being written
   * finish without its communicator. */
  struct ftc__dw_job *left = take_owned(&dw.head, owner, &dw.queued); /* oldest first, for the log */
  if (dw.busy && dw.busy->owner == owner) dw.busy->owner = NULL;
  /* Kept for a verdict that did not come while owner lived: they stay as
   * written ("pending" says why). */
  struct ftc__dw_job *no_verdict = take_owned(&dw.late, owner, &dw.nlate);
  flush_drop_locked(owner);
  int last = --dw.users <= 0;
  int join = last && dw.started;
  if (join) dw.stop = 1;
  pthread_cond_broadcast(&dw.cv);
  pthread_mutex_unlock(&dw.mu);
  while (left) {
    struct ftc__dw_job *j = left;
    left = j->next;
    char what[512];
    FTC_WARN(FTC_SUB_RECOVERY, "dropped %s: not written within FTCOMM_DUMP_DRAIN_MS (%lld ms) "
             "of destroying its communicator", job_what(j, what, sizeof(what)),
             (long long)drain_ms);
    job_free(j);
  }
  while (no_verdict) {
    struct ftc__dw_job *j = no_verdict;
    no_verdict = j->next;
    FTC_DEBUG(FTC_SUB_RECOVERY, "%s keeps no verdict: none came before its communicator was destroyed",
              j->path);
    job_free(j);
  }
  if (last) {
    pthread_mutex_lock(&term_mu);
    term_stop();
    pthread_mutex_unlock(&term_mu);
  }
  if (!join) return;
  /* The last user: the queue holds no job of a live communicator. The one
   * being written (its communicator gave up on it) is finished first. */
  pthread_join(dw.thread, NULL);
  pthread_mutex_lock(&dw.mu);
  dw.started = 0;
  dw.stop = 0;
  pthread_mutex_unlock(&dw.mu);
}
