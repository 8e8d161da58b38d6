/*
 * harness.h - multi-rank test harness without a coordinator: the parent
 * creates one data-plane listener per rank, builds the epoch-1 view from
 * their addresses, and forks one process per rank, each of which brings its
 * communicator up with ftc__comm_create_from_view() and runs the test body.
 * A rank passes by returning 0; the parent reaps every rank within a time
 * limit (killing stragglers) and reports which ranks failed.
 */
#ifndef FTC_TEST_HARNESS_H
#define FTC_TEST_HARNESS_H

#include <stdint.h>
#include <stdio.h>

#include "core/comm.h"
#include "ftcomm.h"
#include "membership/member.h"

#define HARNESS_TOKEN "unit-test-token"

typedef int (*rank_body_fn)(ftc_comm_t *comm, int rank, int size, void *arg);

typedef struct harness_opts {
  int time_limit_s;       /* whole run; 0: 60 */
  int timeout_ms;         /* collective timeout; 0: 20000 */
  int connect_timeout_ms; /* 0: 10000 */
  const char *env[8];     /* "NAME=value" set in every rank before creation */
  const char *rank_env[4][2]; /* "NAME=value" set in rank 0 .. 3 only, after env */
  /* When set, a rank whose communicator creation fails returns what this
   * returns (0: as the test expects) instead of failing; why is
   * ftc_last_error(). */
  int (*create_failed)(ftc_status_t st, const char *why, int rank, int size, void *arg);
} harness_opts_t;

/* Run body on n forked ranks; returns how many ranks failed (0: pass). */
int harness_run(int n, rank_body_fn body, void *arg, const harness_opts_t *opts);

/* A view of n members at 127.0.0.1 listeners created here (fds[] out), for
 * tests that play some ranks themselves. members get ids 1000 + rank.
 * Free with harness_view_free. */
ftc__view_t *harness_view(int n, int my_rank, uint64_t epoch, int *fds);
void harness_view_free(ftc__view_t *v);

/* A data-plane hello with this process's wire settings (FTCOMM_* as the
 * test set them), for tests that play a peer. */
struct ftc__tcp_hello;
void harness_hello(struct ftc__tcp_hello *h, uint16_t kind, uint64_t epoch, uint64_t member_id,
                   uint32_t rank, uint32_t size);

/* A TCP connection to a member's data-plane address ("127.0.0.1:port"),
 * with receives timing out after timeout_s; -1 if it cannot connect. */
int harness_dial(const char *addr, int timeout_s);

/* Receive exactly n bytes: 0, or -1 on a close, an error or the timeout. */
int harness_read_full(int fd, void *buf, size_t n);

/* A configuration for tests: token, timeouts, recorder off. */
void harness_config(ftc_config_t *cfg, int timeout_ms, int connect_timeout_ms);

/* Report a failed check from a rank and return 1 (for `return fail(...)`). */
#define RANK_FAIL(rank, ...)                                                      \
  (fprintf(stderr, "rank %d: %s:%d: ", (rank), __FILE__, __LINE__),               \
   fprintf(stderr, __VA_ARGS__), fprintf(stderr, "\n"), 1)

#endif
