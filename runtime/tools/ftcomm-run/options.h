/*
 * options.h - ftcomm-run's command line. Every option is one row of a table
 * (options.c) with its help text and a setter, so --help, the error messages
 * and the parser cannot drift apart, and a new flag (--replace, --inject
 * kill:R@STEP, ...) is one row and one setter.
 */
#ifndef FTC_RUN_OPTIONS_H
#define FTC_RUN_OPTIONS_H

#define RUN_MAX_INJECT 32

/* One --inject: a fault for one slot's first process (passed as
 * FTCOMM_FAULT), or a restart of the coordinator after some time. */
typedef struct run_inject {
  int slot;             /* -1: not a rank fault */
  char fault[48];       /* FTCOMM_FAULT item, e.g. "kill@5" */
  int joiner;           /* 1: for the slot's first replacement, not its first process */
  double coord_restart_s; /* coord-restart: seconds after the start, 0: none */
} run_inject_t;

typedef struct run_opts {
  int nranks;           /* -n: ranks to start (the world size) */
  int min_size;         /* --min-size: smallest world after failures; 0: nranks */
  const char *job;      /* --job: job name */
  const char *dump_dir; /* --dump-dir: NULL: FTCOMM_DUMP_DIR or its default */
  double timeout_s;     /* --timeout: whole run; 0: none */
  double grace_s;       /* --grace: after the first failure, before SIGKILL */
  int quiet;            /* --quiet: no status line */
  int replace;          /* --replace: restart a failed rank as a joiner */
  double replace_delay_s; /* --replace-delay: after the failure, before the restart */
  const char *coord_host; /* --coordinator-host: the coordinator's address; NULL: loopback */
  int keep_excluded;    /* --keep-excluded: leave a rank the coordinator excludes alive */
  run_inject_t inject[RUN_MAX_INJECT]; /* --inject, in order */
  int ninject;
  char **argv;          /* the program and its arguments (points into main's argv) */
} run_opts_t;

enum {
  RUN_OPTS_OK = 0,     /* run the program */
  RUN_OPTS_EXIT = 1,   /* --help or --version was printed: exit 0 */
  RUN_OPTS_USAGE = 2,  /* bad command line: the error was printed; exit 2 */
};

/* Parse argv into *o (defaults first). Prints --help/--version to stdout and
 * errors to stderr. */
int run_opts_parse(int argc, char **argv, run_opts_t *o);

#endif
