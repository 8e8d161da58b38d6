/*
 * test_proc.c - ftc__proc_state (common/ftc_proc.h): a live process, one
 * caught in the kernel's exit (killed, or exiting with a failure status), a
 * zombie, a reaped one; a process exiting with status 0 and one whose main
 * thread ended while another thread runs on are not called dying (its main
 * thread's stat cannot tell the two apart).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ftc_proc.h"
#include "ftc_time.h"

/* A child that signals on `ready` once it is set up, then sleeps. */
static pid_t child(void (*setup)(void), int ready[2]) {
  assert_int_equal(pipe(ready), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(ready[0]);
    if (setup) setup();
    if (write(ready[1], "r", 1) != 1) _exit(3);
    for (;;) pause();
  }
  close(ready[1]);
  char c;
  assert_int_equal(read(ready[0], &c, 1), 1);
  close(ready[0]);
  return pid;
}

/* Waits (not reaping) until pid has exited: a zombie. */
static void wait_zombie(pid_t pid) {
  siginfo_t si;
  memset(&si, 0, sizeof(si));
  assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
  assert_int_equal(si.si_pid, pid);
}

static void a_live_process_lives_and_an_exited_one_is_gone(void **state) {
  (void)state;
  assert_int_equal(ftc__proc_state(getpid()), FTC__PROC_LIVES);
  int ready[2];
  pid_t pid = child(NULL, ready);
  assert_int_equal(ftc__proc_state(pid), FTC__PROC_LIVES);
  kill(pid, SIGKILL);
  wait_zombie(pid);
  assert_int_equal(ftc__proc_state(pid), FTC__PROC_GONE); /* a zombie */
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  assert_int_equal(ftc__proc_state(pid), FTC__PROC_GONE); /* reaped */
  assert_int_equal(ftc__proc_state(0), FTC__PROC_GONE);
  assert_int_equal(ftc__proc_state(-1), FTC__PROC_GONE);
}

/* A large address space takes the kernel tens of milliseconds to tear
 * down at exit, with every thread already marked exiting: the state is
 * EXITING in between, then GONE. */
#define BIG_BYTES (256u << 20)
static void touch_big(void) {
  char *p = mmap(NULL, BIG_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) _exit(4);
  for (size_t i = 0; i < BIG_BYTES; i += 4096) p[i] = 1;
}

static void *sleeper(void *arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}
static void touch_big_with_a_thread(void) {
  touch_big();
  pthread_t t;
  if (pthread_create(&t, NULL, sleeper, NULL) != 0) _exit(5);
}

static void a_process_in_its_exit_is_exiting(void **state) {
  (void)state;
  int ready[2];
  pid_t pid = child(touch_big_with_a_thread, ready);
  assert_int_equal(ftc__proc_state(pid), FTC__PROC_LIVES);
  kill(pid, SIGKILL);
  int exiting = 0, polls = 0;
  int64_t deadline = ftc__deadline_ns(10000);
  ftc__proc_state_t s;
  while ((s = ftc__proc_state(pid)) != FTC__PROC_GONE) {
    if (s == FTC__PROC_EXITING) exiting++;
    polls++;
    if (ftc__now_ns() > deadline) fail_msg("still %d after 10 s", (int)s);
  }
  wait_zombie(pid);
  waitpid(pid, NULL, 0);
  print_message("# %d of %d looks before it was gone saw it exiting\n", exiting, polls);
  assert_true(exiting > 0);
}

/* A child with a large address space that exits with `code` when told:
 * how many of the looks until it was gone saw it exiting. */
static int exiting_seen_at_exit(int code) {
  int ready[2], go[2];
  assert_int_equal(pipe(ready), 0);
  assert_int_equal(pipe(go), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(ready[0]);
    close(go[1]);
    touch_big();
    char c;
    if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1) _exit(6);
    exit(code);
  }
  close(ready[1]);
  close(go[0]);
  char c;
  assert_int_equal(read(ready[0], &c, 1), 1);
  close(ready[0]);
  assert_int_equal(ftc__proc_state(pid), FTC__PROC_LIVES);
  assert_int_equal(write(go[1], "g", 1), 1);
  close(go[1]);
  int exiting = 0;
  int64_t deadline = ftc__deadline_ns(10000);
  ftc__proc_state_t s;
  while ((s = ftc__proc_state(pid)) != FTC__PROC_GONE) {
    if (s == FTC__PROC_EXITING) exiting++;
    if (ftc__now_ns() > deadline) fail_msg("still %d after 10 s", (int)s);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == code);
  return exiting;
}

static void a_failing_exit_is_exiting_a_clean_one_is_not(void **state) {
  (void)state;
  assert_true(exiting_seen_at_exit(3) > 0);
  assert_int_equal(exiting_seen_at_exit(0), 0);
}

/* The main thread ends (pthread_exit: a zombie main thread with
 * PF_EXITING and exit code 0) while another thread runs on: it lives. */
static void *ender(void *arg) {
  (void)arg;
  for (;;) pause();
  return NULL;
}
static void end_main_thread(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, ender, NULL) != 0) _exit(5);
}

static void a_process_whose_main_thread_ended_lives(void **state) {
  (void)state;
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(ready[0]);
    end_main_thread();
    if (write(ready[1], "r", 1) != 1) _exit(3);
    pthread_exit(NULL); /* the other thread keeps the process */
  }
  close(ready[1]);
  char c;
  assert_int_equal(read(ready[0], &c, 1), 1);
  close(ready[0]);
  /* wait for the main thread to be a zombie */
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int64_t deadline = ftc__deadline_ns(10000);
  for (;;) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (p && p[1] == ' ' && p[2] == 'Z') break;
    if (ftc__now_ns() > deadline) fail_msg("the main thread did not end: %s", buf);
    usleep(1000);
  }
  assert_int_equal(ftc__proc_state(pid), FTC__PROC_LIVES);
  kill(pid, SIGKILL);
  wait_zombie(pid);
  assert_int_equal(ftc__proc_state(pid), FTC__PROC_GONE);
  waitpid(pid, NULL, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_live_process_lives_and_an_exited_one_is_gone),
      cmocka_unit_test(a_process_in_its_exit_is_exiting),
      cmocka_unit_test(a_failing_exit_is_exiting_a_clean_one_is_not),
      cmocka_unit_test(a_process_whose_main_thread_ended_lives),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
