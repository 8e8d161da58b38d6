/*
 * ftc_proc.c - a process's state from /proc (ftc_proc.h).
 *
 * do_exit() sets PF_EXITING in a thread's flags first thing, and in a group
 * exit (SIGKILL, exit_group) every thread goes through it; the process's
 * files, sockets included, close when the last thread drops them, so by
 * then every thread has the flag or is gone. One thread with the flag says
 * nothing of the process: a main thread that called pthread_exit() is a
 * zombie with PF_EXITING while the other threads run on.
 */
#include "ftc_proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PF_EXITING_FLAG 0x4ul /* include/linux/sched.h */

enum { T_LIVES, T_EXITING, T_GONE };

/* One /proc/.../stat file: its state letter and flags word (the 3rd and
 * 9th fields; the 2nd, the name, may hold spaces and parentheses). */
static int stat_state(const char *path) {
  char buf[512];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return T_GONE;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return T_GONE;
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  char state = 0;
  unsigned long flags = 0;
  /* after the name: state ppid pgrp session tty_nr tpgid flags */
  if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2) return T_LIVES;
  if (state == 'Z' || state == 'X') return T_GONE;
  return flags & PF_EXITING_FLAG ? T_EXITING : T_LIVES;
}

ftc__proc_state_t ftc__proc_state(pid_t pid) {
  char path[96];
  if (pid <= 0) return FTC__PROC_GONE;
  snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return FTC__PROC_GONE; /* reaped meanwhile */
  int exiting = 0, lives = 0;
  struct dirent *e;
  while (!lives && (e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    snprintf(path, sizeof(path), "/proc/%d/task/%.20s/stat", (int)pid, e->d_name);
    switch (stat_state(path)) {
      case T_LIVES: lives = 1; break;
      case T_EXITING: exiting = 1; break;
      default: break; /* a thread gone meanwhile, or a zombie main thread */
    }
  }
  closedir(d);
  if (lives) return FTC__PROC_LIVES;
  return exiting ? FTC__PROC_EXITING : FTC__PROC_GONE;
}
