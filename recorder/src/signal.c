/*
 * signal.c - the dump trigger by signal (FTCOMM_DUMP_SIGNAL, default
 * SIGUSR1) and the recorder's dump thread "ftc-recorder".
 *
 * The handler only writes one byte to a non-blocking pipe (async-signal-
 * safe); the dump thread waits on the pipe and writes the dump, so no dump
 * work ever runs in signal context. The handler is installed only if the
 * application has none of its own for that signal, and the previous
 * disposition is restored when the last recorder goes away. Stop = a byte
 * 'q' + join.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_param.h"
#include "rec_internal.h"

static int pipe_fds[2] = {-1, -1};
static volatile sig_atomic_t wake_fd = -1; /* what the handler writes to */
static pthread_t thread;
static int thread_running;
static int installed_sig;  /* 0 when no handler of ours is installed */
static struct sigaction old_action;

static void on_signal(int sig) {
  (void)sig;
  int saved = errno;
  int fd = wake_fd;
  if (fd >= 0) {
    char c = 's';
    ssize_t n = write(fd, &c, 1); /* a full pipe already holds a request */
    (void)n;
  }
  errno = saved;
}

static void *dump_thread(void *arg) {
  (void)arg;
  /* Named by itself: from another thread glibc writes /proc/self/task/N/comm. */
  pthread_setname_np(pthread_self(), "ftc-recorder");
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  for (;;) {
    struct pollfd p = {.fd = pipe_fds[0], .events = POLLIN};
    if (poll(&p, 1, -1) < 0) {
      if (errno == EINTR) continue;
      FTC_WARN(FTC_SUB_RECORDER, "flight recorder: dump thread poll failed: %s", strerror(errno));
      break;
    }
    char buf[64];
    ssize_t n = read(pipe_fds[0], buf, sizeof(buf));
    if (n <= 0) continue;
    int quit = 0, by_signal = 0, by_request = 0;
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] == 'q') quit = 1;
      else if (buf[i] == 's') by_signal = 1;
      else by_request = 1;
    }
    if (quit) break;
    /* Several requests that arrive together make one dump. */
    if (by_signal || by_request) ftc_rec_dump(NULL, by_signal ? "signal" : "request", NULL, 0);
  }
  return NULL;
}

void ftc__rec_sigthread_start(void) {
  int64_t sig = 0;
  if (ftc__param_int(FTC_P_DUMP_SIGNAL, &sig) != FTC_OK)
    FTC_WARN(FTC_SUB_RECORDER, "%s", ftc_last_error());
  if (pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) < 0) {
    FTC_WARN(FTC_SUB_RECORDER, "flight recorder: no dump thread (pipe: %s)", strerror(errno));
    return;
  }
  int err = pthread_create(&thread, NULL, dump_thread, NULL);
  if (err) {
    FTC_WARN(FTC_SUB_RECORDER, "flight recorder: no dump thread (%s)", strerror(err));
    goto out_close_pipe;
  }
  thread_running = 1;
  wake_fd = pipe_fds[1];
  if (sig <= 0) return;

  struct sigaction cur;
  if (sigaction((int)sig, NULL, &cur) < 0) {
    FTC_WARN(FTC_SUB_RECORDER, "flight recorder: signal %d: %s", (int)sig, strerror(errno));
    return;
  }
  if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_IGN || cur.sa_handler == SIG_DFL)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction((int)sig, &sa, &old_action) == 0) installed_sig = (int)sig;
    else
      FTC_WARN(FTC_SUB_RECORDER, "flight recorder: cannot handle signal %d: %s", (int)sig,
               strerror(errno));
  } else {
    FTC_WARN(FTC_SUB_RECORDER,
             "flight recorder: signal %d already has a handler; dumps by signal are off "
             "(set FTCOMM_DUMP_SIGNAL to a free signal)",
             (int)sig);
  }
  return;

out_close_pipe:
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  pipe_fds[0] = pipe_fds[1] = -1;
}

void ftc__rec_sigthread_stop(void) {
  if (installed_sig) {
    sigaction(installed_sig, &old_action, NULL);
    installed_sig = 0;
  }
  wake_fd = -1;
  if (thread_running) {
    char q = 'q';
    while (write(pipe_fds[1], &q, 1) < 0 && (errno == EINTR || errno == EAGAIN))
      usleep(1000); /* a full pipe: the thread is draining it */
    pthread_join(thread, NULL);
    thread_running = 0;
  }
  if (pipe_fds[0] >= 0) {
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    pipe_fds[0] = pipe_fds[1] = -1;
  }
}

ftc_status_t ftc_rec_request_dump(int reason_code) {
  int fd = wake_fd;
  if (fd < 0) return FTC_ERR_NOT_SUPPORTED;
  char c = reason_code == 0 ? 's' : 'r';
  ssize_t n = write(fd, &c, 1);
  (void)n; /* a full pipe already holds a pending request */
  return FTC_OK;
}
