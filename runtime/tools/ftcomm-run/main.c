/*
 * main.c - ftcomm-run, the local launcher: hosts the job's coordinator on
 * 127.0.0.1 (an ephemeral port, a fresh random token), starts N ranks with
 * the FTCOMM_* environment, prefixes their output lines with the slot, shows
 * a status line on a terminal, forwards SIGINT/SIGTERM (and SIGUSR1/2, which
 * do not stop the run), stops stragglers after the first failure (a grace
 * period, then SIGTERM, on which a rank first writes the dumps it captured,
 * then SIGKILL once FTCOMM_DUMP_DRAIN_MS has passed) and exits with the
 * first failing rank's code, saying which rank it was and how it died.
 * With --replace a failed rank is restarted as a joiner after a delay; a
 * rank the coordinator excludes while its process lives (hung, stopped) is
 * killed first. --inject passes faults to ranks (FTCOMM_FAULT) or restarts
 * the coordinator on its port.
 *
 * One thread (main) runs the event loop: poll() over the ranks' output pipes
 * and a self-pipe fed by the signal handlers. A rank that exits is seen at
 * once (waitid with WNOWAIT) and reaped REAP_DELAY_MS later: reaping makes
 * the kernel tear down the process's /proc entries, CPU that the survivors
 * need for their recovery at that moment (docs/performance/recovery.md,
 * "The shrink path"). The coordinator runs its own
 * thread; main only reads its stats. Ranks start with posix_spawnp in their
 * own process groups, so a terminal's Ctrl-C reaches ftcomm-run alone and is
 * forwarded once to each rank's whole group.
 *
 * Main runs as SCHED_BATCH (main_batch): a line a rank writes or a
 * coordinator event wakes it without preempting the thread that runs, the
 * coordinator's own thread above all, which was forming the next epoch while
 * main forwarded the survivors' failure lines (docs/ftcomm-run.md,
 * "Scheduling"). The coordinator thread and the ranks keep the policy
 * ftcomm-run was started with.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ftc_coord.h"
#include "ftc_addr.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_param.h"
#include "ftc_proc.h"
#include "ftc_time.h"
#include "options.h"

extern char **environ;

#define LINE_MAX_BYTES 65536
#define STATUS_PERIOD_MS 250
#define DRAIN_AFTER_EXIT_MS 300
#define EXIT_TIMEOUT 124
#define REAP_DELAY_MS 20

typedef struct stream {
  int fd;            /* -1 once closed */
  int out_fd;        /* where its lines go: 1 or 2 */
  size_t len;
  char buf[LINE_MAX_BYTES];
} stream_t;

typedef struct rank {
  int slot;
  pid_t pid;         /* 0 once it exited */
  int status;        /* its wait status, valid once it exited */
  pid_t zombie;      /* an exited process not reaped yet, 0: none */
  int64_t reap_at;   /* when to reap it */
  int killed_by_us;  /* SIGKILL sent by the launcher */
  int incarnation;   /* 0 for the first process, then one per replacement */
  int64_t respawn_at; /* --replace: when to start the next one, 0: none planned */
  int64_t spawned_ns; /* when its current (or last) process started */
  int quick_fails;   /* --replace: replacements in a row that failed within QUICK_FAIL_S */
  int not_replaced;  /* --replace: it failed as the job was finishing */
  stream_t out, err;
} rank_t;

#define MAX_REPLACEMENTS 100
/* A replacement that exits with an error code within QUICK_FAIL_S of its
 * start doubles the slot's next --replace-delay, up to BACKOFF_MAX_S (or
 * --replace-delay when longer), as Kubernetes backs off a container that
 * keeps crashing: one that can never join (a wrong setting, a missing file)
 * is not restarted ten times a second. One that lived longer, or was killed
 * by a signal (a node's or an operator's doing, and every trial of the
 * recovery benchmark), starts the slot over at the delay. */
#define QUICK_FAIL_S 10
#define BACKOFF_MAX_S 30.0

typedef struct run {
  run_opts_t o;
  ftc__coord_t *co;
  char token[65];
  char coord_addr[64];
  const char *loopback;    /* "127.0.0.1", or "::1" with FTCOMM_SOCKET_FAMILY=ipv6 */
  char dump_dir[PATH_MAX];
  rank_t *ranks;
  int alive;
  int first_fail;          /* slot of the first failing rank, -1 */
  int failures;            /* ranks that failed on their own */
  int failure_stop;        /* a failure took the job below its minimum: stopping */
  int stopping;            /* a failure, signal or timeout started the shutdown */
  int signals;             /* SIGINT/SIGTERM received */
  int timed_out;
  int64_t kill_at_ns;      /* SIGTERM (then SIGKILL) the survivors then; 0: not planned */
  int termed;              /* SIGTERM was sent: kill_at_ns is the SIGKILL */
  int64_t drain_ns;        /* how long a rank may take to write its dumps after SIGTERM */
  int64_t start_ns;
  int status_tty;
  int status_shown;
  int64_t status_next_ns;
  int lost_since_epoch;    /* a rank was dropped (not a clean leave) since the last epoch */
  int replacements;        /* ranks restarted by --replace */
  int finishing;           /* --replace: a rank exited 0, the job is ending */
  int coord_port;
  int64_t coord_restart_at; /* --inject coord-restart: when, 0: done or none */
} run_t;

static int sig_pipe[2] = {-1, -1};
/* Whether ftcomm-run was started as SCHED_OTHER (main's policy at its
 * first main_batch): only then main goes SCHED_BATCH, and the coordinator
 * thread and the ranks get SCHED_OTHER back. Another start policy (real
 * time, SCHED_IDLE: the user's choice) is left to all of them. The nice
 * value is not touched either way. */
static int batch_checked, batch_ok;

/* Main's own policy: SCHED_BATCH (on) or SCHED_OTHER (off). A thread that
 * main creates inherits main's policy: the coordinator's is created with it
 * off. */
static void main_batch(int on) {
  if (!batch_checked) {
    batch_checked = 1;
    batch_ok = sched_getscheduler(0) == SCHED_OTHER;
  }
  if (!batch_ok) return;
  struct sched_param sp = {0};
  if (sched_setscheduler(0, on ? SCHED_BATCH : SCHED_OTHER, &sp) != 0)
    FTC_DEBUG(FTC_SUB_RUN, "main thread to %s: %s", on ? "SCHED_BATCH" : "SCHED_OTHER",
              strerror(errno));
}

/* Coordinator events, written by its thread (on_coord_event), read by main. */
static int ev_pipe[2] = {-1, -1};

typedef struct run_event {
  int kind;
  unsigned long long epoch;
  int size, joined, slot, rank, left;
  long long pid;
  char reason[96];
} run_event_t; /* smaller than PIPE_BUF: one write is one record */

static void on_coord_event(void *arg, const ftc__coord_event_t *ev) {
  (void)arg;
  run_event_t e = {ev->kind, (unsigned long long)ev->epoch, ev->size, ev->joined,
                   ev->slot, ev->rank, ev->left, (long long)ev->pid, ""};
  snprintf(e.reason, sizeof(e.reason), "%s", ev->reason ? ev->reason : "");
  ssize_t w = write(ev_pipe[1], &e, sizeof(e)); /* a full pipe loses the line, not the run */
  (void)w;
}

/* One record per signal on the self-pipe: which one, and who sent it (a
 * process's kill(2): its pid; 0 for the kernel, e.g. a terminal's ^C).
 * Smaller than PIPE_BUF: one write is one record. */
typedef struct sig_rec {
  int sig;
  int pid;
} sig_rec_t;

static void on_signal(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  int saved = errno;
  int sent = si && (si->si_code == SI_USER || si->si_code == SI_QUEUE);
  sig_rec_t rec = {sig, sent ? (int)si->si_pid : 0};
  ssize_t w = write(sig_pipe[1], &rec, sizeof(rec));
  (void)w;
  errno = saved;
}

/* " (sent by pid N: its command line)" for a signal a process sent, "" else:
 * a stop nobody here asked for (e.g. a kill of a recycled process group
 * id) says where it came from. */
static void describe_sender(int pid, char *buf, size_t len) {
  buf[0] = '\0';
  if (pid <= 0) return;
  char path[64], cmd[160] = "";
  snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, cmd, sizeof(cmd) - 1);
    close(fd);
    for (ssize_t i = 0; i < n; i++)
      if (cmd[i] == '\0') cmd[i] = ' ';
    cmd[n > 0 ? n : 0] = '\0';
  }
  snprintf(buf, len, " (sent by pid %d: %s)", pid, cmd[0] ? cmd : "gone");
}

/* ---- output ---- */

static void write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return; /* a closed stdout loses output, not the run */
    p += w;
    n -= (size_t)w;
  }
}

static void status_clear(run_t *r) {
  if (r->status_shown) write_all(2, "\r\033[K", 4);
  r->status_shown = 0;
}

static void status_draw(run_t *r) {
  if (!r->status_tty || r->o.quiet || !r->co) return;
  int64_t now = ftc__now_ns();
  if (now < r->status_next_ns) return;
  r->status_next_ns = now + STATUS_PERIOD_MS * 1000000LL;
  ftc__coord_stats_t st;
  ftc__coord_stats(r->co, &st);
  char line[256];
  int n;
  if (st.epoch)
    n = snprintf(line, sizeof(line), "\r\033[K[ftcomm-run] %s: %d/%d ranks alive, epoch %llu (%d members), %llds%s",
                 r->o.job, r->alive, r->o.nranks, (unsigned long long)st.epoch, st.epoch_size,
                 (long long)((now - r->start_ns) / 1000000000LL), r->stopping ? ", stopping" : "");
  else
    n = snprintf(line, sizeof(line), "\r\033[K[ftcomm-run] %s: %d/%d ranks alive, %d joined, %llds%s",
                 r->o.job, r->alive, r->o.nranks, st.connected,
                 (long long)((now - r->start_ns) / 1000000000LL), r->stopping ? ", stopping" : "");
  if (n > 0) write_all(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
  r->status_shown = 1;
}

static void say(run_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(run_t *r, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof(buf) - 2) n = (int)sizeof(buf) - 2;
  buf[n++] = '\n';
  status_clear(r);
  write_all(2, "ftcomm-run: ", 12);
  write_all(2, buf, (size_t)n);
}

/* Emit the complete lines in s->buf as "[slot] line"; with `all`, also the
 * unterminated rest (end of stream, or a line longer than the buffer). */
static void emit_lines(run_t *r, int slot, stream_t *s, int all) {
  char prefix[24];
  int pl = snprintf(prefix, sizeof(prefix), "[%d] ", slot);
  size_t start = 0;
  for (;;) {
    char *nl = memchr(s->buf + start, '\n', s->len - start);
    size_t end = nl ? (size_t)(nl - s->buf) + 1 : s->len;
    if (!nl && (!all || start == s->len)) break;
    status_clear(r);
    write_all(s->out_fd, prefix, (size_t)pl);
    write_all(s->out_fd, s->buf + start, end - start);
    if (!nl) write_all(s->out_fd, "\n", 1);
    start = end;
  }
  memmove(s->buf, s->buf + start, s->len - start);
  s->len -= start;
}

static void read_stream(run_t *r, int slot, stream_t *s) {
  ssize_t n = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    emit_lines(r, slot, s, 1);
    close(s->fd);
    s->fd = -1;
    return;
  }
  s->len += (size_t)n;
  emit_lines(r, slot, s, s->len == sizeof(s->buf));
}

/* ---- ranks ---- */

static void describe(int status, char *buf, size_t len) {
  if (WIFEXITED(status))
    snprintf(buf, len, "exited with code %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  else
    snprintf(buf, len, "ended with status 0x%x", status);
}

static int failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

static void signal_ranks(run_t *r, int sig) {
  for (int i = 0; i < r->o.nranks; i++) {
    rank_t *k = &r->ranks[i];
    if (!k->pid) continue;
    /* A replacement still running once the job finished (it came too late
     * to be admitted) is stopped by us, whatever the signal: not a failure. */
    if (sig == SIGKILL || (r->finishing && k->incarnation)) k->killed_by_us = 1;
    /* The rank leads its own process group: reach its children too. */
    if (kill(-k->pid, sig) && errno == ESRCH) kill(k->pid, sig);
  }
}

static void begin_stop(run_t *r, double grace_s) {
  if (r->kill_at_ns) return;
  r->stopping = 1;
  r->kill_at_ns = ftc__now_ns() + (int64_t)(grace_s * 1e9);
}

/* The wait status of a child that exited, from waitid's siginfo. */
static int status_of(const siginfo_t *si) {
  if (si->si_code == CLD_EXITED) return (si->si_status & 0xff) << 8;
  return (si->si_status & 0x7f) | (si->si_code == CLD_DUMPED ? 0x80 : 0);
}

/* Reap the exited ranks' processes that are due (all of them with `all`);
 * the earliest left for later lowers *wake. */
static void reap_zombies(run_t *r, int all, int64_t *wake) {
  int64_t now = ftc__now_ns();
  for (int i = 0; i < r->o.nranks; i++) {
    rank_t *k = &r->ranks[i];
    if (!k->zombie) continue;
    if (all || now >= k->reap_at) {
      int status;
      while (waitpid(k->zombie, &status, 0) < 0 && errno == EINTR) {
      }
      __atomic_store_n(&k->zombie, 0, __ATOMIC_RELEASE);
    } else if (wake && k->reap_at < *wake) {
      *wake = k->reap_at;
    }
  }
}

/* --replace-delay doubled per replacement in a row that failed quickly,
 * at most BACKOFF_MAX_S (or the delay itself when that is longer). */
static double replace_delay(const run_opts_t *o, int quick_fails) {
  double cap = o->replace_delay_s > BACKOFF_MAX_S ? o->replace_delay_s : BACKOFF_MAX_S;
  double d = o->replace_delay_s;
  for (int i = 0; i < quick_fails && d < cap; i++) d = d > 0 ? d * 2 : 0.05;
  return d < cap ? d : cap;
}

static void reap(run_t *r) {
  for (int i = 0; i < r->o.nranks; i++) {
    rank_t *k = &r->ranks[i];
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (!k->pid || waitid(P_PID, (id_t)k->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        si.si_pid != k->pid)
      continue;
    int status = status_of(&si);
    {
      if (k->zombie) { /* the slot's previous process, not yet reaped */
        while (waitpid(k->zombie, &(int){0}, 0) < 0 && errno == EINTR) {
        }
      }
      __atomic_store_n(&k->zombie, k->pid, __ATOMIC_RELEASE);
      k->reap_at = ftc__now_ns() + REAP_DELAY_MS * 1000000LL;
      __atomic_store_n(&k->pid, 0, __ATOMIC_RELEASE);
      k->status = status;
      r->alive--;
      /* After --timeout, ranks die of the launcher's signals: not failures. */
      if (!failed(status) && r->o.replace && !r->finishing) {
        /* The job is finishing: no more replacements; one that is still
         * waiting to join gets the grace period, then SIGKILL. */
        r->finishing = 1;
        for (int j = 0; j < r->o.nranks; j++)
          if (r->ranks[j].respawn_at) {
            r->ranks[j].respawn_at = 0;
            r->ranks[j].not_replaced = 1;
          }
        begin_stop(r, r->o.grace_s);
      }
      if (failed(status) && r->co) {
        /* The process is gone: the coordinator need not wait to see that
         * its session stays closed (a session that blinks keeps its place
         * for a while). */
        char lost[160];
        describe(status, lost, sizeof(lost));
        ftc__coord_slot_lost(r->co, i, lost);
      }
      if (!failed(status) || k->killed_by_us || r->timed_out) continue;
      r->failures++;
      if (r->first_fail < 0) r->first_fail = i;
      if (r->signals || r->stopping) continue;
      char how[128];
      describe(status, how, sizeof(how));
      /* With --min-size below -n, the job survives losing ranks: only going
       * below the minimum stops it. */
      int min = r->o.min_size ? r->o.min_size : r->o.nranks;
      if (r->o.replace && r->finishing) {
        k->not_replaced = 1;
      } else if (r->o.replace && r->replacements < MAX_REPLACEMENTS) {
        int64_t now = ftc__now_ns();
        if (k->incarnation > 0 && WIFEXITED(status) &&
            now - k->spawned_ns < QUICK_FAIL_S * 1000000000LL)
          k->quick_fails++;
        else
          k->quick_fails = 0;
        double delay = replace_delay(&r->o, k->quick_fails);
        k->respawn_at = now + (int64_t)(delay * 1e9);
        if (k->quick_fails)
          say(r, "rank %d %s; restarting it as a joiner in %.3g s (its replacement exited within "
                 "%d s of its start, %d time%s in a row: backing off)",
              i, how, delay, QUICK_FAIL_S, k->quick_fails, k->quick_fails == 1 ? "" : "s");
        else
          say(r, "rank %d %s; restarting it as a joiner in %.3g s", i, how, delay);
      } else if (r->o.nranks - r->failures >= min) {
        say(r, "rank %d %s; the job goes on with %d of %d ranks (--min-size %d)", i, how,
            r->o.nranks - r->failures, r->o.nranks, min);
      } else {
        r->failure_stop = 1;
        say(r, "rank %d %s; stopping the other ranks in %.3g s", i, how, r->o.grace_s);
        begin_stop(r, r->o.grace_s);
      }
    }
  }
}

static ftc_status_t make_dirs(const char *path) {
  char p[PATH_MAX];
  snprintf(p, sizeof(p), "%s", path);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(p, 0755) && errno != EEXIST)
      return ftc__error(FTC_ERR_SYSTEM, "cannot create %s: %s", p, strerror(errno));
    *s = '/';
  }
  if (mkdir(p, 0755) && errno != EEXIST)
    return ftc__error(FTC_ERR_SYSTEM, "cannot create %s: %s", p, strerror(errno));
  return FTC_OK;
}

/* The environment of one rank: ours, minus FTCOMM_* set here, plus those. */
static char **rank_env(run_t *r, int slot) {
  static const char *const ours[] = {"FTCOMM_JOB=", "FTCOMM_COORDINATOR=", "FTCOMM_TOKEN=",
                                     "FTCOMM_SLOT=", "FTCOMM_WORLD_SIZE=", "FTCOMM_MIN_SIZE=",
                                     "FTCOMM_DUMP_DIR=", "FTCOMM_JOINER="};
  char fault[256] = "";
  size_t fl = 0;
  for (int i = 0; i < r->o.ninject; i++)
    if (r->o.inject[i].slot == slot && fl < sizeof(fault) - 64 &&
        r->ranks[slot].incarnation == (r->o.inject[i].joiner ? 1 : 0))
      fl += (size_t)snprintf(fault + fl, sizeof(fault) - fl, "%s%s", fl ? "," : "",
                             r->o.inject[i].fault);
  int incarnation = r->ranks[slot].incarnation;
  size_t n = 0;
  while (environ[n]) n++;
  char **env = ftc__calloc(n + 16, sizeof(char *));
  if (!env) return NULL;
  size_t k = 0;
  int have_bind = 0, have_adv = 0;
  for (size_t i = 0; i < n; i++) {
    int skip = 0;
    for (size_t j = 0; j < sizeof(ours) / sizeof(ours[0]); j++)
      if (strncmp(environ[i], ours[j], strlen(ours[j])) == 0) skip = 1;
    if (strncmp(environ[i], "FTCOMM_BIND_HOST=", 17) == 0) have_bind = 1;
    /* FTCOMM_SOCKET_IFNAME picks the advertised address itself. */
    if (strncmp(environ[i], "FTCOMM_ADVERTISE_HOST=", 22) == 0 ||
        strncmp(environ[i], "FTCOMM_SOCKET_IFNAME=", 21) == 0)
      have_adv = 1;
    /* A replacement does not inherit the fault that killed its predecessor. */
    if ((fault[0] || incarnation) && strncmp(environ[i], "FTCOMM_FAULT=", 13) == 0) skip = 1;
    if (!skip) env[k++] = ftc__strdup(environ[i]);
  }
  char buf[PATH_MAX + 32];
#define ADD(...)                                \
  do {                                          \
    snprintf(buf, sizeof(buf), __VA_ARGS__);    \
    env[k++] = ftc__strdup(buf);                \
  } while (0)
  ADD("FTCOMM_JOB=%s", r->o.job);
  ADD("FTCOMM_COORDINATOR=%s", r->coord_addr);
  ADD("FTCOMM_TOKEN=%s", r->token);
  ADD("FTCOMM_SLOT=%d", slot);
  ADD("FTCOMM_WORLD_SIZE=%d", r->o.nranks);
  ADD("FTCOMM_MIN_SIZE=%d", r->o.min_size ? r->o.min_size : r->o.nranks);
  ADD("FTCOMM_DUMP_DIR=%s", r->dump_dir);
  if (incarnation) ADD("FTCOMM_JOINER=1");
  if (fault[0]) ADD("FTCOMM_FAULT=%s", fault);
  /* Everything is on this machine: keep the data plane on loopback. */
  if (!have_bind) ADD("FTCOMM_BIND_HOST=%s", r->loopback);
  if (!have_adv) ADD("FTCOMM_ADVERTISE_HOST=%s", r->loopback);
#undef ADD
  env[k] = NULL;
  for (size_t i = 0; i < k; i++) {
    if (!env[i]) {
      for (size_t j = 0; j < k; j++) ftc__free(env[j]);
      ftc__free(env);
      return NULL;
    }
  }
  return env;
}

static void free_env(char **env) {
  if (!env) return;
  for (size_t i = 0; env[i]; i++) ftc__free(env[i]);
  ftc__free(env);
}

static ftc_status_t spawn_rank(run_t *r, int slot) {
  rank_t *k = &r->ranks[slot];
  int out[2], err[2];
  /* What the previous process of this slot left unread is flushed now. */
  stream_t *old[2] = {&k->out, &k->err};
  for (int j = 0; j < 2; j++)
    if (old[j]->fd >= 0) {
      emit_lines(r, slot, old[j], 1);
      close(old[j]->fd);
      old[j]->fd = -1;
    }
  ftc_status_t st = FTC_OK;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  if (pipe2(out, O_CLOEXEC)) return ftc__error(FTC_ERR_SYSTEM, "pipe: %s", strerror(errno));
  if (pipe2(err, O_CLOEXEC)) {
    st = ftc__error(FTC_ERR_SYSTEM, "pipe: %s", strerror(errno));
    goto out_close_out;
  }
  char **env = rank_env(r, slot);
  if (!env) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "out of memory building the environment");
    goto out_close_err;
  }
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawnattr_init(&attr);
  sigset_t none, dfl;
  sigemptyset(&none);
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGINT);
  sigaddset(&dfl, SIGTERM);
  sigaddset(&dfl, SIGPIPE);
  sigaddset(&dfl, SIGCHLD);
  sigaddset(&dfl, SIGHUP);
  sigaddset(&dfl, SIGUSR1);
  sigaddset(&dfl, SIGUSR2);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  posix_spawnattr_setpgroup(&attr, 0);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP;
  if (batch_ok) {
    /* Not main's SCHED_BATCH: the rank gets the policy ftcomm-run had. */
    struct sched_param sp = {0};
    posix_spawnattr_setschedpolicy(&attr, SCHED_OTHER);
    posix_spawnattr_setschedparam(&attr, &sp);
    flags |= POSIX_SPAWN_SETSCHEDULER;
  }
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = 0;
  int e = posix_spawnp(&pid, r->o.argv[0], &fa, &attr, r->o.argv, env);
  __atomic_store_n(&k->pid, e ? 0 : pid, __ATOMIC_RELEASE); /* (read by process_gone) */
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  free_env(env);
  if (e) {
    st = ftc__error(FTC_ERR_SYSTEM, "cannot run %s: %s", r->o.argv[0], strerror(e));
    goto out_close_err;
  }
  close(out[1]);
  close(err[1]);
  k->out.fd = out[0];
  k->err.fd = err[0];
  k->spawned_ns = ftc__now_ns();
  r->alive++;
  return FTC_OK;

out_close_err:
  close(err[0]);
  close(err[1]);
out_close_out:
  close(out[0]);
  close(out[1]);
  return st;
}

/* ---- the run ---- */

/* The coordinator's question when a member's session closed without a
 * leave (ftc_coord.h, process_gone; its thread): is that member's process
 * a child of ours that is exiting or exited? Only a slot's current child
 * (k->pid) is looked up in /proc, and one that reap() saw exit (k->zombie)
 * is gone. reap() only marks an exited child, with WNOWAIT; it is reaped
 * REAP_DELAY_MS later, so its pid is not another process's when /proc is
 * read (the end of the run reaps at once, when nothing new is decided).
 * k->pid is read first: reap() clears it after it sets k->zombie. A rank
 * run through a shell that does not exec it is not our child: the
 * coordinator then waits for a report or the SIGCHLD, as before. */
static int process_gone(void *arg, int slot, int64_t pid) {
  run_t *r = arg;
  if (slot < 0 || slot >= r->o.nranks || pid <= 0) return 0;
  rank_t *k = &r->ranks[slot];
  if (__atomic_load_n(&k->pid, __ATOMIC_ACQUIRE) == (pid_t)pid)
    return ftc__proc_state((pid_t)pid) != FTC__PROC_LIVES;
  return __atomic_load_n(&k->zombie, __ATOMIC_ACQUIRE) == (pid_t)pid;
}

/* Tell the user what the coordinator decided when the job changes shape:
 * epochs after the first; with --min-size below -n also lost ranks and a job
 * below its minimum (without it, a lost rank stops the run anyway). */
static void handle_events(run_t *r) {
  run_event_t e;
  int tolerant = r->o.min_size && r->o.min_size < r->o.nranks;
  while (read(ev_pipe[0], &e, sizeof(e)) == (ssize_t)sizeof(e)) {
    switch (e.kind) {
      case FTC__COORD_EV_EPOCH:
        r->lost_since_epoch = 0;
        if (e.epoch > 1)
          say(r, "epoch %llu: %d rank%s%s", e.epoch, e.size, e.size == 1 ? "" : "s",
              e.joined ? " (with joiners)" : "");
        break;
      case FTC__COORD_EV_DROPPED:
        if (e.left) break;
        r->lost_since_epoch = 1;
        /* Excluded while its process lives (hung, stopped): end it, so the
         * run can finish and --replace can restart it. */
        if (!r->o.keep_excluded && e.slot >= 0 && e.slot < r->o.nranks && e.pid > 0 &&
            r->ranks[e.slot].pid == (pid_t)e.pid && !r->stopping &&
            ftc__proc_state((pid_t)e.pid) == FTC__PROC_LIVES) {
          say(r, "slot %d (pid %lld) %s; killing it", e.slot, e.pid, e.reason);
          kill(-(pid_t)e.pid, SIGCONT);
          if (kill(-(pid_t)e.pid, SIGKILL) && errno == ESRCH) kill((pid_t)e.pid, SIGKILL);
        }
        if ((tolerant || r->o.replace) && e.rank >= 0)
          say(r, "slot %d (rank %d of epoch %llu) %s", e.slot, e.rank, e.epoch, e.reason);
        break;
      case FTC__COORD_EV_BELOW_MIN:
        if (tolerant && r->lost_since_epoch)
          say(r, "%d rank%s left, below --min-size %d: no new epoch until ranks join", e.size,
              e.size == 1 ? "" : "s", r->o.min_size);
        break;
      default: break;
    }
  }
}

static void handle_signals(run_t *r) {
  sig_rec_t recs[64];
  ssize_t n = read(sig_pipe[0], recs, sizeof(recs));
  for (ssize_t i = 0; i < n / (ssize_t)sizeof(recs[0]); i++) {
    int sig = recs[i].sig;
    if (sig == SIGCHLD) continue;
    char from[200];
    describe_sender(recs[i].pid, from, sizeof(from));
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      /* Not a stop: e.g. SIGUSR1 makes every rank dump its flight recorder. */
      say(r, "forwarding %s to the ranks", strsignal(sig));
      signal_ranks(r, sig);
      continue;
    }
    r->signals++;
    if (r->signals == 1) {
      say(r, "got %s; forwarding it to the ranks (again to kill them now)%s", strsignal(sig),
          from);
      signal_ranks(r, sig);
      begin_stop(r, r->o.grace_s);
    } else {
      say(r, "got %s again; killing the ranks%s", strsignal(sig), from);
      signal_ranks(r, SIGKILL);
    }
  }
  reap(r);
}

static int open_streams(const run_t *r) {
  int n = 0;
  for (int i = 0; i < r->o.nranks; i++) n += (r->ranks[i].out.fd >= 0) + (r->ranks[i].err.fd >= 0);
  return n;
}

static int respawn_pending(const run_t *r) {
  for (int i = 0; i < r->o.nranks; i++)
    if (r->ranks[i].respawn_at) return 1;
  return 0;
}

static ftc_status_t start_coordinator(run_t *r, int port) {
  ftc__coord_cfg_t cc = {
      .bind_host = r->o.coord_host ? r->o.coord_host : r->loopback,
      .port = port,
      .job = r->o.job,
      .token = r->token,
      .world_size = r->o.nranks,
      .min_size = r->o.min_size,
      .dump_dir = r->dump_dir,
      .on_event = on_coord_event,
      .process_gone = process_gone,
      .process_gone_arg = r,
  };
  main_batch(0); /* its thread inherits main's policy */
  ftc_status_t st = ftc__coord_create(&cc, &r->co);
  main_batch(1);
  if (st == FTC_OK) r->coord_port = ftc__coord_port(r->co);
  return st;
}

/* Restarts due now: replacements (--replace) and the coordinator
 * (--inject coord-restart). Returns the next time one is due, or `wake`. */
static int64_t run_restarts(run_t *r, int64_t now, int64_t wake) {
  for (int i = 0; i < r->o.nranks; i++) {
    rank_t *k = &r->ranks[i];
    if (!k->respawn_at) continue;
    if (r->stopping || k->pid) {
      k->respawn_at = 0;
      continue;
    }
    if (now < k->respawn_at) {
      if (k->respawn_at < wake) wake = k->respawn_at;
      continue;
    }
    k->respawn_at = 0;
    k->incarnation++;
    r->replacements++;
    if (spawn_rank(r, i) != FTC_OK) {
      say(r, "cannot restart rank %d: %s", i, ftc_last_error());
      continue;
    }
    say(r, "restarted rank %d as a joiner (pid %d)", i, (int)k->pid);
  }
  if (r->coord_restart_at && now >= r->coord_restart_at) {
    r->coord_restart_at = 0;
    say(r, "restarting the coordinator on port %d (--inject coord-restart)", r->coord_port);
    ftc__coord_destroy(r->co);
    r->co = NULL;
    for (int tries = 0; tries < 50; tries++) {
      if (start_coordinator(r, r->coord_port) == FTC_OK) break;
      struct timespec ts = {0, 20 * 1000000L};
      nanosleep(&ts, NULL);
    }
    if (!r->co) {
      say(r, "cannot restart the coordinator: %s; killing the ranks", ftc_last_error());
      signal_ranks(r, SIGKILL);
      begin_stop(r, 0);
    }
  } else if (r->coord_restart_at && r->coord_restart_at < wake) {
    wake = r->coord_restart_at;
  }
  return wake;
}

static void event_loop(run_t *r) {
  int nfds_max = 2 * r->o.nranks + 2;
  struct pollfd *pfd = ftc__calloc((size_t)nfds_max, sizeof(*pfd));
  stream_t **who = ftc__calloc((size_t)nfds_max, sizeof(*who));
  int *whose = ftc__calloc((size_t)nfds_max, sizeof(*whose));
  if (!pfd || !who || !whose) {
    say(r, "out of memory; killing the ranks");
    signal_ranks(r, SIGKILL);
    goto out_free;
  }
  int64_t deadline = r->o.timeout_s > 0 ? r->start_ns + (int64_t)(r->o.timeout_s * 1e9) : 0;
  int64_t drain_until = 0;
  for (;;) {
    int64_t now = ftc__now_ns();
    if (r->alive == 0 && !respawn_pending(r)) {
      if (!drain_until) drain_until = now + DRAIN_AFTER_EXIT_MS * 1000000LL;
      /* Output left by grandchildren that outlive their rank is cut here. */
      if (open_streams(r) == 0 || now >= drain_until) break;
    }
    if (deadline && now >= deadline && !r->timed_out && r->alive) {
      r->timed_out = 1;
      say(r, "timed out after %.3g s; stopping the ranks", r->o.timeout_s);
      signal_ranks(r, SIGTERM);
      begin_stop(r, r->o.grace_s < 2 ? r->o.grace_s : 2);
      /* SIGKILL no sooner than a rank may take to write its dumps. */
      r->termed = 1;
      if (r->kill_at_ns < now + r->drain_ns) r->kill_at_ns = now + r->drain_ns;
    }
    if (r->kill_at_ns && now >= r->kill_at_ns && r->alive) {
      int stragglers = 0;
      for (int i = 0; i < r->o.nranks; i++) stragglers += r->ranks[i].pid != 0;
      if (!r->termed) {
        /* A rank ends on SIGTERM once the dumps it captured are on disk
         * (libftcomm's dump writer; at once when it has none). */
        say(r, "stopping %d rank%s still running after the grace period (SIGTERM; SIGKILL in "
               "%.3g s if still running: time to write their dumps, FTCOMM_DUMP_DRAIN_MS)",
            stragglers, stragglers == 1 ? "" : "s", (double)r->drain_ns / 1e9);
        signal_ranks(r, SIGTERM);
        r->termed = 1;
        r->kill_at_ns = now + r->drain_ns;
      } else {
        say(r, "killing %d rank%s still running after the grace period", stragglers,
            stragglers == 1 ? "" : "s");
        signal_ranks(r, SIGKILL);
        r->kill_at_ns = INT64_MAX; /* once */
      }
    }
    int n = 0;
    pfd[n++] = (struct pollfd){sig_pipe[0], POLLIN, 0};
    pfd[n++] = (struct pollfd){ev_pipe[0], POLLIN, 0};
    for (int i = 0; i < r->o.nranks; i++) {
      stream_t *ss[2] = {&r->ranks[i].out, &r->ranks[i].err};
      for (int j = 0; j < 2; j++) {
        if (ss[j]->fd < 0) continue;
        who[n] = ss[j];
        whose[n] = i;
        pfd[n++] = (struct pollfd){ss[j]->fd, POLLIN, 0};
      }
    }
    int64_t wake = run_restarts(r, now, now + STATUS_PERIOD_MS * 1000000LL);
    if (deadline && deadline < wake && !r->timed_out) wake = deadline;
    if (r->kill_at_ns && r->kill_at_ns < wake) wake = r->kill_at_ns;
    if (drain_until && drain_until < wake) wake = drain_until;
    reap_zombies(r, 0, &wake);
    int timeout = (int)((wake - now + 999999) / 1000000);
    int rc = poll(pfd, (nfds_t)n, timeout < 0 ? 0 : timeout);
    if (rc < 0 && errno != EINTR) {
      say(r, "poll: %s; killing the ranks", strerror(errno));
      signal_ranks(r, SIGKILL);
      break;
    }
    for (int i = 2; rc > 0 && i < n; i++)
      if (pfd[i].revents) read_stream(r, whose[i], who[i]);
    if (rc > 0 && pfd[1].revents) handle_events(r);
    /* A child's exit is a SIGCHLD on the self-pipe, and handle_signals
     * reaps: no waitid per rank at every line a rank prints (16 ranks
     * printing during a recovery made the launcher 7% of the job's CPU). */
    if (rc > 0 && pfd[0].revents) handle_signals(r);
    status_draw(r);
  }
  /* Wait for anything killed but not yet reaped. */
  reap_zombies(r, 1, NULL);
  while (r->alive > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    for (int i = 0; i < r->o.nranks; i++)
      if (r->ranks[i].pid == pid) {
        __atomic_store_n(&r->ranks[i].pid, 0, __ATOMIC_RELEASE);
        r->ranks[i].status = status;
        r->alive--;
      }
  }
out_free:
  ftc__free(pfd);
  ftc__free(who);
  ftc__free(whose);
}

static int install_signals(void) {
  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK)) return -1;
  if (pipe2(ev_pipe, O_CLOEXEC | O_NONBLOCK)) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGUSR2, &sa, NULL);
  sa.sa_flags = SA_RESTART | SA_SIGINFO | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

static int exit_code(run_t *r) {
  status_clear(r);
  if (r->first_fail >= 0 && !r->failure_stop && !r->signals && !r->timed_out && r->o.replace) {
    /* Failed processes were replaced: the job is the replacements' result. */
    for (int i = 0; i < r->o.nranks; i++) {
      if (!failed(r->ranks[i].status)) continue;
      if (r->ranks[i].not_replaced) continue;
      if (r->ranks[i].killed_by_us && r->ranks[i].incarnation && r->finishing) {
        say(r, "replacement of rank %d came after the job finished; it was stopped", i);
        continue;
      }
      char how[128];
      describe(r->ranks[i].status, how, sizeof(how));
      say(r, "rank %d %s (after %d replacement%s)", i, how, r->replacements,
          r->replacements == 1 ? "" : "s");
      return WIFEXITED(r->ranks[i].status) ? WEXITSTATUS(r->ranks[i].status)
                                          : 128 + WTERMSIG(r->ranks[i].status);
    }
    say(r, "%d rank failure%s, %d replacement%s; the job finished", r->failures,
        r->failures == 1 ? "" : "s", r->replacements, r->replacements == 1 ? "" : "s");
    return 0;
  }
  if (r->first_fail >= 0 && !r->failure_stop && !r->signals && !r->timed_out) {
    char how[128];
    describe(r->ranks[r->first_fail].status, how, sizeof(how));
    say(r, "%d rank%s failed (first rank %d, which %s); the job finished with the other %d",
        r->failures, r->failures == 1 ? "" : "s", r->first_fail, how,
        r->o.nranks - r->failures);
    return 0;
  }
  if (r->first_fail >= 0) {
    rank_t *k = &r->ranks[r->first_fail];
    char how[128];
    describe(k->status, how, sizeof(how));
    int others = 0;
    for (int i = 0; i < r->o.nranks; i++)
      others += i != r->first_fail && failed(r->ranks[i].status);
    say(r, "rank %d failed first: it %s%s", r->first_fail, how,
        others ? " (other ranks failed or were stopped after it)" : "");
    if (r->timed_out) return EXIT_TIMEOUT;
    return WIFEXITED(k->status) ? WEXITSTATUS(k->status) : 128 + WTERMSIG(k->status);
  }
  if (r->timed_out) {
    say(r, "the run timed out after %.3g s (--timeout); its ranks were stopped", r->o.timeout_s);
    return EXIT_TIMEOUT;
  }
  for (int i = 0; i < r->o.nranks; i++) {
    if (failed(r->ranks[i].status)) {
      char how[128];
      describe(r->ranks[i].status, how, sizeof(how));
      say(r, "rank %d %s", i, how);
      return WIFEXITED(r->ranks[i].status) ? WEXITSTATUS(r->ranks[i].status)
                                          : 128 + WTERMSIG(r->ranks[i].status);
    }
  }
  if (r->signals) return 130;
  return 0;
}

static ftc_status_t make_token(char *out, size_t len) {
  unsigned char raw[32];
  size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ftc__error(FTC_ERR_SYSTEM, "getrandom: %s", strerror(errno));
    got += (size_t)n;
  }
  for (size_t i = 0; i < sizeof(raw) && 2 * i + 2 < len; i++)
    snprintf(out + 2 * i, 3, "%02x", raw[i]);
  return FTC_OK;
}

int main(int argc, char **argv) {
  run_t r;
  memset(&r, 0, sizeof(r));
  r.first_fail = -1;
  int pr = run_opts_parse(argc, argv, &r.o);
  if (pr == RUN_OPTS_EXIT) return 0;
  if (pr != RUN_OPTS_OK) return 2;
  ftc__log_set_prefix("ftcomm-run");
  int rc = 1;
  ftc_status_t st;

  const char *dd = r.o.dump_dir ? r.o.dump_dir : ftc__param_str(FTC_P_DUMP_DIR);
  if (!dd || !*dd) dd = "/tmp/ftcomm-dumps";
  if (dd[0] != '/') {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd))) cwd[0] = '\0';
    snprintf(r.dump_dir, sizeof(r.dump_dir), "%s/%s", cwd, dd);
  } else {
    snprintf(r.dump_dir, sizeof(r.dump_dir), "%s", dd);
  }
  if ((st = make_dirs(r.dump_dir)) != FTC_OK) {
    fprintf(stderr, "ftcomm-run: %s (--dump-dir)\n", ftc_last_error());
    return 1;
  }
  /* The ranks read the same FTCOMM_DUMP_DRAIN_MS (our environment is theirs):
   * after SIGTERM they get it, and half a second to exit. */
  int64_t drain_ms;
  if (ftc__param_int(FTC_P_DUMP_DRAIN_MS, &drain_ms) != FTC_OK) {
    fprintf(stderr, "ftcomm-run: %s\n", ftc_last_error());
    return 2;
  }
  r.drain_ns = (drain_ms + 500) * 1000000LL;
  /* The coordinator and the ranks' data plane are on loopback of the
   * family FTCOMM_SOCKET_FAMILY names (IPv4 unless it says ipv6). */
  int family;
  if (ftc__addr_family_parse("FTCOMM_SOCKET_FAMILY", getenv("FTCOMM_SOCKET_FAMILY"), &family) !=
      FTC_OK) {
    fprintf(stderr, "ftcomm-run: %s\n", ftc_last_error());
    return 1;
  }
  r.loopback = family == AF_INET6 ? "::1" : "127.0.0.1";
  if ((st = make_token(r.token, sizeof(r.token))) != FTC_OK) {
    fprintf(stderr, "ftcomm-run: %s\n", ftc_last_error());
    return 1;
  }
  /* Two pipes per rank and the coordinator's sessions: lift the soft limit
   * on open files to the hard one, so -n in the hundreds works. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (install_signals()) {
    fprintf(stderr, "ftcomm-run: cannot set up signal handling: %s\n", strerror(errno));
    return 1;
  }
  /* (before the coordinator's thread, which reads it: process_gone) */
  r.ranks = ftc__calloc((size_t)r.o.nranks, sizeof(*r.ranks));
  if (!r.ranks) {
    fprintf(stderr, "ftcomm-run: out of memory\n");
    goto out_close_signals;
  }
  for (int i = 0; i < r.o.nranks; i++) {
    r.ranks[i].slot = i;
    r.ranks[i].out = (stream_t){.fd = -1, .out_fd = 1};
    r.ranks[i].err = (stream_t){.fd = -1, .out_fd = 2};
  }
  if ((st = start_coordinator(&r, 0)) != FTC_OK) {
    fprintf(stderr, "ftcomm-run: cannot start the coordinator: %s\n", ftc_last_error());
    goto out_free_ranks;
  }
  ftc__addr_join(r.o.coord_host ? r.o.coord_host : r.loopback, ftc__coord_port(r.co), r.coord_addr,
                 sizeof(r.coord_addr));
  r.status_tty = isatty(2);
  r.start_ns = ftc__now_ns();
  for (int i = 0; i < r.o.ninject; i++)
    if (r.o.inject[i].coord_restart_s > 0)
      r.coord_restart_at = r.start_ns + (int64_t)(r.o.inject[i].coord_restart_s * 1e9);
  for (int i = 0; i < r.o.nranks; i++) {
    if ((st = spawn_rank(&r, i)) != FTC_OK) {
      say(&r, "rank %d: %s", i, ftc_last_error());
      signal_ranks(&r, SIGKILL);
      event_loop(&r);
      rc = st == FTC_ERR_SYSTEM && strstr(ftc_last_error(), "No such file") ? 127 : 1;
      goto out_free_ranks;
    }
  }
  event_loop(&r);
  rc = exit_code(&r);

out_free_ranks:
  for (int i = 0; i < r.o.nranks; i++) {
    if (r.ranks[i].out.fd >= 0) close(r.ranks[i].out.fd);
    if (r.ranks[i].err.fd >= 0) close(r.ranks[i].err.fd);
  }
  ftc__coord_destroy(r.co); /* (NULL when it did not start) */
  ftc__free(r.ranks);
out_close_signals:
  close(sig_pipe[0]);
  close(sig_pipe[1]);
  close(ev_pipe[0]);
  close(ev_pipe[1]);
  return rc;
}
