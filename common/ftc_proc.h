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
  FTC__PROC_LIVES,   /* some thread of it is not exiting */
  FTC__PROC_EXITING, /* every thread of it is in the kernel's exit (PF_EXITING) */
  FTC__PROC_GONE,    /* a zombie, or no such process */
} ftc__proc_state_t;

/* The state of process `pid` from /proc/PID/task/TID/stat (each thread's
 * flags word and state). Ask only about a process whose pid cannot have
 * been taken by another one: your own child that you have not reaped. A
 * process whose /proc cannot be read in part is said to live. */
ftc__proc_state_t ftc__proc_state(pid_t pid);

#endif
