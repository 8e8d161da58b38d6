/*
 * ftc_proc.c - a process's state from /proc (ftc_proc.h).
 *
 * One read of /proc/PID/stat, the main thread's: its state (3rd field),
 * flags (9th: PF_EXITING, set first thing in do_exit), thread count (20th)
 * and exit code (52nd, set in do_exit before the address space and the
 * files are released; the parent may read it). A process killed by a
 * signal or exiting with a non-zero status (exit_group, a fatal signal:
 * every thread goes through do_exit) shows PF_EXITING and that code on its
 * main thread before any of its sockets closes.
 *
 * What one thread's flag does not say is left as alive: a main thread
 * that called pthread_exit() is a zombie with exit code 0 while the other
 * threads run on, and a process exiting with status 0 looks the same while
 * its last threads finish. Reading each thread's stat instead
 * (/proc/PID/task/) would take a read per thread at a crash instead of
 * one.
 */
#include "ftc_proc.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PF_EXITING_FLAG 0x4ul /* include/linux/sched.h */

ftc__proc_state_t ftc__proc_state(pid_t pid) {
  char path[64], buf[1024];
  if (pid <= 0) return FTC__PROC_GONE;
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FTC__PROC_GONE;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return FTC__PROC_GONE; /* reaped meanwhile */
  buf[n] = '\0';
  /* after the name (which may hold spaces and parentheses): field 3 on */
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return FTC__PROC_LIVES;
  char state = p[2];
  unsigned long flags = 0;
  long threads = 0, exit_code = 0;
  int field = 3;
  for (char *s = p + 2; *s && field <= 52; field++) {
    if (field == 9) flags = strtoul(s, NULL, 10);
    else if (field == 20) threads = strtol(s, NULL, 10);
    else if (field == 52) exit_code = strtol(s, NULL, 10);
    s = strchr(s, ' ');
    if (!s) break;
    s++;
  }
  int zombie = state == 'Z' || state == 'X';
  if (exit_code != 0 && (zombie || (flags & PF_EXITING_FLAG)))
    return zombie && threads <= 1 ? FTC__PROC_GONE : FTC__PROC_EXITING;
  if (zombie && threads <= 1) return FTC__PROC_GONE; /* exited with status 0 */
  return FTC__PROC_LIVES;
}
