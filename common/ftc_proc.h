/*
 * ftc_proc.h - what Linux's /proc says of a process: alive, exiting, or
 * gone. A process's sockets close while the kernel tears it down (after its
 * address space, before its parent's SIGCHLD); a parent that sees one of
 * its child's connections close can ask here whether the child is dying.
 * Thread-safe; no allocation.
 */
#ifndef FTC_PROC_H
#define FTC_PROC_H

#include <sys/types.h>

typedef enum ftc__proc_state {
  FTC__PROC_LIVES,   /* running, or not known to be dying (below) */
  FTC__PROC_EXITING, /* in the kernel's exit, killed or failed (non-zero status) */
  FTC__PROC_GONE,    /* exited (a zombie), or no such process */
} ftc__proc_state_t;

/* The state of process `pid` from /proc/PID/stat. Ask only about a process
 * whose pid cannot have been taken by another one: your own child that you
 * have not reaped. A process exiting with status 0 is said to live until
 * its last thread is gone, as is one whose /proc cannot be read: its main
 * thread alone is read, and an exit with status 0 looks like a main thread
 * that called pthread_exit() while the others run on. */
ftc__proc_state_t ftc__proc_state(pid_t pid);

#endif
