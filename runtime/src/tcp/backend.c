/*
 * backend.c - the TCP data plane as a backend of the core (core/backend.h):
 * each operation maps onto one ftc__tcp_* call of this folder. The
 * configuration comes from the communicator (comm->tcfg: tunables, token,
 * interrupt flag) and its listener, created before the first view.
 */
#include <stdio.h>

#include "core/backend.h"
#include "core/comm.h"
#include "tcp/tcp.h"

static ftc_status_t tcp_connect(ftc_comm_t *comm, const ftc__view_t *view, void **out) {
  ftc__tcp_cfg_t cfg = comm->tcfg;
  cfg.connect_timeout_ms = comm->connect_timeout_ms;
  cfg.member = comm->member;
  cfg.preacc = comm->preacc; /* a stopped standby acceptor (ftc_comm_create_finish) or NULL */
  /* A move whose old epoch did not fail here (a step boundary's) keeps the
   * pairs' connections when it goes to the very next epoch and drops no
   * member (net.c, keeps_connections). */
  cfg.planned_move = comm->bh && !__atomic_load_n(&comm->error, __ATOMIC_ACQUIRE);
  /* A move before the last one settled (moves back to back: a failure or a
   * later epoch soon after a move): the epoch before that one (retired,
   * closed once its successor settles) still holds its spares, those of the
   * pairs that kept their connections among them. A peer that moves from
   * that epoch may adopt them now; closed, it reads their end and connects
   * anew instead of waiting for an ADOPT from here. Nobody polls a retired
   * epoch's spares, so the closes wake no one. */
  if (comm->retired) ftc__tcp_close_spares(comm->retired);
  ftc__tcp_t *tp = NULL;
  /* The previous epoch's transport (still comm->bh) lends its spare
   * connections; it is closed after this returns. */
  ftc_status_t st = ftc__tcp_connect(&cfg, view, comm->listen_fd, comm->bh, &tp);
  *out = tp;
  return st;
}

static ftc_status_t tcp_run(void *h, const ftc__op_t *op, int64_t deadline_ns) {
  return ftc__tcp_run(h, op, deadline_ns);
}

static ftc_status_t tcp_run_p2p(void *h, const ftc__op_t **ops, int n, int cap, int64_t deadline_ns,
                                ftc__backend_more_fn more, void *ctx, int wake_fd) {
  return ftc__tcp_run_p2p(h, ops, n, cap, deadline_ns, more, ctx, wake_fd);
}

static void tcp_interrupt(void *h) { ftc__tcp_shutdown(h); }

static void tcp_close(void *h, int planned) {
  if (planned) ftc__tcp_say_goodbye(h);
  ftc__tcp_destroy(h);
}

static int tcp_failed_peer(const void *h) { return ftc__tcp_failed_peer(h); }
static int tcp_peer_fds(const void *h, int *fds, int *ranks, int max) {
  return ftc__tcp_peer_fds(h, fds, ranks, max);
}
static void tcp_mark_left(void *h, int rank) { ftc__tcp_mark_left(h, rank); }
static int tcp_peer_left(const void *h, int rank) { return ftc__tcp_peer_left(h, rank); }
static void tcp_note_failed_peer(void *h, int rank) { ftc__tcp_note_failed_peer(h, rank); }
static void tcp_mark_ended(void *h, int rank) { ftc__tcp_mark_ended(h, rank); }
static void tcp_drop_peer(void *h, int rank) { ftc__tcp_drop_peer(h, rank); }
static int tcp_spare_poll(void *h, int listen_fd, int build, struct pollfd *pfd, int max) {
  return ftc__tcp_spare_poll(h, listen_fd, build, pfd, max);
}
static void tcp_spare_events(void *h, int listen_fd, const struct pollfd *pfd, int n) {
  ftc__tcp_spare_events(h, listen_fd, pfd, n);
}
static void tcp_spare_stop(void *h) { ftc__tcp_spare_stop(h); }
static int tcp_early_start(void *h, const ftc__view_t *next) { return ftc__tcp_early_start(h, next); }
static int tcp_early_poll(void *h, int listen_fd, struct pollfd *pfd, int max) {
  return ftc__tcp_early_poll(h, listen_fd, pfd, max);
}
static void tcp_early_events(void *h, int listen_fd, const struct pollfd *pfd, int n) {
  ftc__tcp_early_events(h, listen_fd, pfd, n);
}

/* The TCP backend is part of libftcomm: its version is the library's. */
static void tcp_version(char *buf, size_t len) {
  snprintf(buf, len, "%d.%d.%d", FTC_VERSION_MAJOR, FTC_VERSION_MINOR, FTC_VERSION_PATCH);
}

const ftc__backend_ops_t ftc__backend_tcp = {
    .name = "tcp",
    .version = tcp_version,
    .connect = tcp_connect,
    .run = tcp_run,
    .run_p2p = tcp_run_p2p,
    .interrupt = tcp_interrupt,
    .close = tcp_close,
    .failed_peer = tcp_failed_peer,
    .blames_at_once = 1,
    .rebuild_inline = 1,
    .peer_fds = tcp_peer_fds,
    .mark_left = tcp_mark_left,
    .peer_left = tcp_peer_left,
    .note_failed_peer = tcp_note_failed_peer,
    .mark_ended = tcp_mark_ended,
    .drop_peer = tcp_drop_peer,
    .spare_poll = tcp_spare_poll,
    .spare_events = tcp_spare_events,
    .spare_stop = tcp_spare_stop,
    .early_start = tcp_early_start,
    .early_poll = tcp_early_poll,
    .early_events = tcp_early_events,
};
