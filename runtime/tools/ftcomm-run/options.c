/*
 * options.c - ftcomm-run's option table, its parser (getopt_long built from
 * the table) and the --help text generated from the same rows.
 */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftcomm.h"

typedef int (*setter_t)(run_opts_t *o, const char *arg, char *err, size_t errlen);

typedef struct opt_row {
  const char *name;  /* long name */
  int key;           /* short letter, or a value above 255 for long-only options */
  const char *arg;   /* argument name in --help; NULL for a flag */
  const char *help;
  setter_t set;      /* NULL for --help and --version */
} opt_row_t;

static int parse_int(const char *arg, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(arg, &end, 10);
  if (errno || end == arg || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_seconds(const char *arg, double *out) {
  char *end;
  errno = 0;
  double v = strtod(arg, &end);
  if (errno || end == arg || *end || !isfinite(v) || v < 0 || v > 31536000) return -1;
  *out = v;
  return 0;
}

static int set_n(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  long v;
  if (parse_int(arg, 1, 1048576, &v)) {
    snprintf(err, errlen, "-n needs a number of ranks in 1..1048576, not '%s'", arg);
    return -1;
  }
  o->nranks = (int)v;
  return 0;
}

static int set_min_size(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  long v;
  if (parse_int(arg, 1, 1048576, &v)) {
    snprintf(err, errlen, "--min-size needs a number of ranks in 1..1048576, not '%s'", arg);
    return -1;
  }
  o->min_size = (int)v;
  return 0;
}

static int set_job(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  size_t n = strlen(arg);
  if (n == 0 || n > 63 || strspn(arg, "abcdefghijklmnopqrstuvwxyz0123456789-._") != n) {
    snprintf(err, errlen,
             "--job needs a name of 1..63 lowercase letters, digits, '-', '.' or '_', not '%s'",
             arg);
    return -1;
  }
  o->job = arg;
  return 0;
}

static int set_dump_dir(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  if (!*arg) {
    snprintf(err, errlen, "--dump-dir needs a directory");
    return -1;
  }
  o->dump_dir = arg;
  return 0;
}

static int set_timeout(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  if (parse_seconds(arg, &o->timeout_s) || o->timeout_s == 0) {
    snprintf(err, errlen, "--timeout needs a positive number of seconds, not '%s'", arg);
    return -1;
  }
  return 0;
}

static int set_grace(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  if (parse_seconds(arg, &o->grace_s)) {
    snprintf(err, errlen, "--grace needs a number of seconds, not '%s'", arg);
    return -1;
  }
  return 0;
}

static int set_quiet(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  (void)arg, (void)err, (void)errlen;
  o->quiet = 1;
  return 0;
}

static int set_replace(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  (void)arg, (void)err, (void)errlen;
  o->replace = 1;
  return 0;
}

static int set_replace_delay(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  if (parse_seconds(arg, &o->replace_delay_s)) {
    snprintf(err, errlen, "--replace-delay needs a number of seconds, not '%s'", arg);
    return -1;
  }
  return 0;
}

static int set_coord_host(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  size_t n = strlen(arg);
  if (n == 0 || n > 63 || strspn(arg, "0123456789abcdefABCDEF.:") != n) {
    snprintf(err, errlen,
             "--coordinator-host needs an IPv4 or IPv6 address of this host, not '%s'", arg);
    return -1;
  }
  o->coord_host = arg;
  return 0;
}

static int set_keep_excluded(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  (void)arg, (void)err, (void)errlen;
  o->keep_excluded = 1;
  return 0;
}

/* kill:R@STEP, stop:R@STEP, slow:R:MS, drop:R@SEQ, delay:R:MS@SEQ,
 * blink:R@STEP, late-view:R:MS, hold-move:R@N, coord-restart:SECONDS. */
static int set_inject(run_opts_t *o, const char *arg, char *err, size_t errlen) {
  if (o->ninject >= RUN_MAX_INJECT) {
    snprintf(err, errlen, "at most %d --inject options", RUN_MAX_INJECT);
    return -1;
  }
  run_inject_t *in = &o->inject[o->ninject];
  memset(in, 0, sizeof(*in));
  in->slot = -1;
  char kind[16];
  long slot, a, b;
  char tail;
  double secs;
  /* sscanf's numbers would take " 5", "+5" and digits past a long; the
   * library's FTCOMM_FAULT does not (docs/recovery.md "Fault injection"). */
  size_t run = 0, longest = 0;
  for (const char *c = arg; *c; c++) {
    run = isdigit((unsigned char)*c) ? run + 1 : 0;
    if (run > longest) longest = run;
  }
  if (strpbrk(arg, " \t\n\r\v\f+") || longest > 12) {
    snprintf(err, errlen,
             "--inject '%s': numbers are plain decimal digits, at most 12 (no sign, no spaces)",
             arg);
    return -1;
  }
  if (sscanf(arg, "coord-restart:%lf%c", &secs, &tail) == 1 && secs > 0 && secs < 86400) {
    in->coord_restart_s = secs;
  } else if (sscanf(arg, "%15[a-z]:%ld@%ld%c", kind, &slot, &a, &tail) == 3 &&
             (!strcmp(kind, "kill") || !strcmp(kind, "stop") || !strcmp(kind, "drop") ||
              !strcmp(kind, "blink")) &&
             a >= 1 && slot >= 0) {
    in->slot = (int)slot;
    snprintf(in->fault, sizeof(in->fault), "%s@%ld", kind, a);
  } else if (sscanf(arg, "kill-recover:%ld@%ld%c", &slot, &a, &tail) == 2 && slot >= 0 &&
             a >= 1) {
    in->slot = (int)slot;
    snprintf(in->fault, sizeof(in->fault), "rkill@%ld", a);
  } else if (sscanf(arg, "hold-move:%ld@%ld%c", &slot, &a, &tail) == 2 && slot >= 0 && a >= 1) {
    in->slot = (int)slot;
    snprintf(in->fault, sizeof(in->fault), "movehold@%ld", a);
  } else if (sscanf(arg, "kill-joiner:%ld%c", &slot, &tail) == 1 && slot >= 0) {
    in->slot = (int)slot;
    in->joiner = 1;
    snprintf(in->fault, sizeof(in->fault), "jkill");
  } else if (sscanf(arg, "delay:%ld:%ld@%ld%c", &slot, &a, &b, &tail) == 3 && slot >= 0 &&
             a >= 0 && b >= 1) {
    in->slot = (int)slot;
    snprintf(in->fault, sizeof(in->fault), "delay:%ld@%ld", a, b);
  } else if (sscanf(arg, "slow:%ld:%ld%c", &slot, &a, &tail) == 2 && slot >= 0 && a >= 0) {
    in->slot = (int)slot;
    snprintf(in->fault, sizeof(in->fault), "slow:%ld", a);
  } else if (sscanf(arg, "late-view:%ld:%ld%c", &slot, &a, &tail) == 2 && slot >= 0 && a >= 1 &&
             a <= 600000) {
    in->slot = (int)slot;
    snprintf(in->fault, sizeof(in->fault), "lateview:%ld", a);
  } else {
    snprintf(err, errlen,
             "--inject needs kill:RANK@STEP, stop:RANK@STEP, slow:RANK:MS, drop:RANK@SEQ, "
             "delay:RANK:MS@SEQ, kill-recover:RANK@N, hold-move:RANK@N, kill-joiner:RANK, "
             "blink:RANK@STEP, "
             "late-view:RANK:MS or "
             "coord-restart:SECONDS, "
             "not '%s'",
             arg);
    return -1;
  }
  o->ninject++;
  return 0;
}

enum { KEY_JOB = 256, KEY_TIMEOUT, KEY_DUMP_DIR, KEY_MIN_SIZE, KEY_GRACE, KEY_VERSION,
       KEY_REPLACE, KEY_REPLACE_DELAY, KEY_INJECT, KEY_COORD_HOST, KEY_KEEP_EXCLUDED };

static const opt_row_t rows[] = {
    {"np", 'n', "N", "start N ranks (slots 0..N-1); required", set_n},
    {"job", KEY_JOB, "NAME", "job name (default: local)", set_job},
    {"min-size", KEY_MIN_SIZE, "M", "keep training while at least M ranks remain (default: N)",
     set_min_size},
    {"timeout", KEY_TIMEOUT, "SECONDS", "stop the whole run after SECONDS (exit code 124)",
     set_timeout},
    {"grace", KEY_GRACE, "SECONDS",
     "after the first failure or a signal, wait SECONDS before SIGKILL (default: 5)", set_grace},
    {"dump-dir", KEY_DUMP_DIR, "DIR",
     "where ranks write flight-recorder dumps (default: $FTCOMM_DUMP_DIR or /tmp/ftcomm-dumps)",
     set_dump_dir},
    {"replace", KEY_REPLACE, NULL,
     "restart a rank that fails (or is excluded) as a joiner (FTCOMM_JOINER=1)", set_replace},
    {"replace-delay", KEY_REPLACE_DELAY, "SECONDS",
     "wait SECONDS before restarting a failed rank (default: 1)", set_replace_delay},
    {"inject", KEY_INJECT, "FAULT",
     "kill:R@STEP, stop:R@STEP (SIGSTOP), slow:R:MS, drop:R@SEQ, delay:R:MS@SEQ (rank R's "
     "first process, steps counted by ftc_comm_step), kill-recover:R@N (in its N-th "
     "recovery), hold-move:R@N (its N-th move holds, once connected, until a later epoch "
     "is announced), kill-joiner:R (R's first replacement, once admitted), blink:R@STEP (its "
     "coordinator session drops and reconnects), late-view:R:MS (it hears of a joiner's "
     "epoch MS ms late), coord-restart:SECONDS; "
     "repeatable",
     set_inject},
    {"coordinator-host", KEY_COORD_HOST, "ADDR",
     "the coordinator listens on ADDR, an address of this host, and the ranks reach it there "
     "(default: loopback)",
     set_coord_host},
    {"keep-excluded", KEY_KEEP_EXCLUDED, NULL,
     "leave a rank the coordinator excludes while its process lives to end on its own "
     "(default: kill it)",
     set_keep_excluded},
    {"quiet", 'q', NULL, "no status line on the terminal", set_quiet},
    {"help", 'h', NULL, "show this help and exit", NULL},
    {"version", KEY_VERSION, NULL, "show the version and exit", NULL},
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

static void usage(FILE *f) {
  fprintf(f,
          "Usage: ftcomm-run -n N [OPTION]... [--] PROGRAM [ARG]...\n"
          "Run N ranks of PROGRAM on this machine with an in-process ftcomm coordinator.\n"
          "Each rank gets FTCOMM_JOB, FTCOMM_COORDINATOR, FTCOMM_TOKEN, FTCOMM_SLOT,\n"
          "FTCOMM_WORLD_SIZE, FTCOMM_MIN_SIZE and FTCOMM_DUMP_DIR; its output lines are\n"
          "prefixed with its slot (\"[3] ...\").\n\nOptions:\n");
  for (size_t i = 0; i < NROWS; i++) {
    char left[64];
    if (rows[i].key < 256)
      snprintf(left, sizeof(left), "-%c, --%s%s%s", rows[i].key, rows[i].name,
               rows[i].arg ? " " : "", rows[i].arg ? rows[i].arg : "");
    else
      snprintf(left, sizeof(left), "    --%s%s%s", rows[i].name, rows[i].arg ? " " : "",
               rows[i].arg ? rows[i].arg : "");
    fprintf(f, "  %-26s %s\n", left, rows[i].help);
  }
  fprintf(f,
          "\nA failing rank stops the run (the others get --grace seconds, then SIGKILL),\n"
          "unless --min-size M < N and at least M ranks have not failed: the job goes on;\n"
          "with --replace it is restarted as a joiner instead (at most 100 times). A rank\n"
          "the coordinator excludes while its process lives (a hang) is killed.\n"
          "\nExit status: 0 when every rank exits 0 (or only tolerated ranks failed);\n"
          "otherwise the exit code of the first rank that failed (128+N if it was killed\n"
          "by signal N); 124 on --timeout; 127 if PROGRAM cannot be run; 2 for a bad\n"
          "command line; 1 when ftcomm-run itself fails.\n"
          "\nSIGINT and SIGTERM are forwarded to the ranks; a second one kills them at\n"
          "once. SIGUSR1 and SIGUSR2 are forwarded without stopping the run (with the\n"
          "default FTCOMM_DUMP_SIGNAL, SIGUSR1 makes every rank write a dump).\n");
}

int run_opts_parse(int argc, char **argv, run_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->job = "local";
  o->grace_s = 5;
  o->replace_delay_s = 1;
  struct option longopts[NROWS + 1];
  char shortopts[2 * NROWS + 2];
  size_t k = 0;
  shortopts[k++] = '+'; /* stop at the program: its options are its own */
  for (size_t i = 0; i < NROWS; i++) {
    longopts[i] = (struct option){rows[i].name, rows[i].arg ? required_argument : no_argument,
                                  NULL, rows[i].key};
    if (rows[i].key < 256) {
      shortopts[k++] = (char)rows[i].key;
      if (rows[i].arg) shortopts[k++] = ':';
    }
  }
  longopts[NROWS] = (struct option){0, 0, 0, 0};
  shortopts[k] = '\0';
  opterr = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
    if (c == '?' || c == ':') {
      const char *bad = argv[optind - 1];
      const opt_row_t *row = NULL;
      for (size_t i = 0; i < NROWS; i++)
        if (optopt && rows[i].key == optopt) row = &rows[i];
      if (row && row->key < 256)
        fprintf(stderr, "ftcomm-run: option -%c needs an argument (%s)\n", row->key, row->arg);
      else if (row)
        fprintf(stderr, "ftcomm-run: option --%s needs an argument (%s)\n", row->name, row->arg);
      else if (optopt && optopt < 256)
        fprintf(stderr, "ftcomm-run: option -%c is not known\n", optopt);
      else
        fprintf(stderr, "ftcomm-run: option '%s' is not known\n", bad);
      fprintf(stderr, "Try 'ftcomm-run --help'.\n");
      return RUN_OPTS_USAGE;
    }
    if (c == 'h') {
      usage(stdout);
      return RUN_OPTS_EXIT;
    }
    if (c == KEY_VERSION) {
      printf("ftcomm-run (ftcomm) %d.%d.%d\n", FTC_VERSION_MAJOR, FTC_VERSION_MINOR,
             FTC_VERSION_PATCH);
      return RUN_OPTS_EXIT;
    }
    for (size_t i = 0; i < NROWS; i++) {
      if (rows[i].key != c || !rows[i].set) continue;
      char err[256];
      if (rows[i].set(o, optarg, err, sizeof(err))) {
        fprintf(stderr, "ftcomm-run: %s\nTry 'ftcomm-run --help'.\n", err);
        return RUN_OPTS_USAGE;
      }
    }
  }
  if (o->nranks == 0) {
    fprintf(stderr, "ftcomm-run: say how many ranks to start with -n N\nTry 'ftcomm-run --help'.\n");
    return RUN_OPTS_USAGE;
  }
  if (o->min_size > o->nranks) {
    fprintf(stderr, "ftcomm-run: --min-size %d is larger than -n %d\n", o->min_size, o->nranks);
    return RUN_OPTS_USAGE;
  }
  for (int i = 0; i < o->ninject; i++)
    if (o->inject[i].slot >= o->nranks) {
      fprintf(stderr, "ftcomm-run: --inject names rank %d; ranks are 0..%d\n", o->inject[i].slot,
              o->nranks - 1);
      return RUN_OPTS_USAGE;
    }
  if (optind >= argc) {
    fprintf(stderr, "ftcomm-run: no program to run (ftcomm-run -n N -- PROGRAM ARGS)\n"
                    "Try 'ftcomm-run --help'.\n");
    return RUN_OPTS_USAGE;
  }
  o->argv = argv + optind;
  return RUN_OPTS_OK;
}
