/*
 * backend.c - the TCP data plane as a backend of the core (core/backend.h):
 * each operation maps onto one ftc__tcp_* call of this folder. The
 * communicator's state here: the tunables (FTCOMM_*, with the host's token
 * and interrupt), the standby acceptor of ftc_comm_create_begin until the
 * first bootstrap took its sockets, and the previous epoch's transport,
 * retired until the new epoch settled.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>

#include "core/backend.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "tcp/tcp.h"

typedef struct tcp_state {
  const ftc__backend_host_t *host;
  ftc__tcp_cfg_t cfg;        /* the tunables; token and interrupt point at the host's */
  ftc__tcp_preacc_t *preacc; /* the standby acceptor, stopped or running, or NULL */
  ftc__tcp_t *retired;       /* the previous epoch's transport, closed once this epoch settled */
  int retired_planned;       /* it was left by a planned move (closed with goodbyes) */
} tcp_state_t;

static ftc_status_t tcp_open(const ftc__backend_host_t *host, void **out) {
  tcp_state_t *s = ftc__calloc(1, sizeof(*s));
  *out = NULL;
  if (!s) return ftc__error(FTC_ERR_NO_MEMORY, "allocating the TCP backend's state");
  ftc_status_t st = ftc__tcp_cfg_from_env(&s->cfg);
  if (st != FTC_OK) {
    ftc__free(s);
    return st;
  }
  s->host = host;
  s->cfg.token = host->token;
  s->cfg.interrupt = host->interrupt;
  s->cfg.intr_fd = host->intr_fd;
  *out = s;
  return FTC_OK;
}

static void tcp_destroy(void *sv) {
  tcp_state_t *s = sv;
  if (!s) return;
  ftc__tcp_preaccept_free(s->preacc);
  if (s->retired) {
    if (s->retired_planned) ftc__tcp_say_goodbye(s->retired);
    ftc__tcp_destroy(s->retired);
  }
  ftc__free(s);
}

static ftc_status_t tcp_listen(void *sv, const char *bind_host, const char *advertise_host, int *fd,
                               char *addr, size_t addrlen) {
  tcp_state_t *s = sv;
  return ftc__tcp_listen(bind_host, advertise_host, s->cfg.family, s->cfg.ifname,
                         s->cfg.socket_buffer, fd, addr, addrlen);
}

/* The data plane counts the cgroup's CPU quota at its first connect (its
 * hellos, the crowded decision); read while the coordinator answers, it
 * costs that connect nothing. */
static void tcp_prepare(void *sv) {
  (void)sv;
  (void)ftc__tcp_cpu_quota();
}

/* A standby accepts the running ranks' early connections while it waits
 * (they connect on the coordinator's prospect) and sends their nonces;
 * without the acceptor (no thread) they are answered after the join. */
static void tcp_standby(void *sv, int listen_fd, int on) {
  tcp_state_t *s = sv;
  if (!on) {
    ftc__tcp_preaccept_stop(s->preacc);
    return;
  }
  if (!s->preacc && ftc__tcp_preaccept_start(listen_fd, s->cfg.socket_buffer, &s->preacc) != FTC_OK)
    FTC_DEBUG(FTC_SUB_INIT, "no standby acceptor (%s): early connections wait for the join",
              ftc_last_error());
}

static int tcp_allreduce_algo(const void *sv) {
  return ((const tcp_state_t *)sv)->cfg.allreduce_algo; /* FTCOMM_ALLREDUCE_ALGO */
}

static ftc_status_t tcp_connect(void *sv, const ftc__backend_host_t *host, const ftc__view_t *view,
                                int listen_fd, void *prev, ftc_status_t prev_error, void **out) {
  tcp_state_t *s = sv;
  ftc__tcp_cfg_t cfg = s->cfg;
  cfg.connect_timeout_ms = host->connect_timeout_ms;
  cfg.member = host->member;
  cfg.preacc = s->preacc; /* a stopped standby acceptor (ftc_comm_create_finish) or NULL */
  /* A move whose old epoch did not fail here (a step boundary's) keeps the
   * pairs' connections when it goes to the very next epoch and drops no
   * member (net.c, keeps_connections). */
  cfg.planned_move = prev && prev_error == FTC_OK;
  /* A move before the last one settled (moves back to back: a failure or a
   * later epoch soon after a move): the epoch before that one (retired,
   * closed once its successor settles) still holds its spares, those of the
   * pairs that kept their connections among them. A peer that moves from
   * that epoch may adopt them now; closed, it reads their end and connects
   * anew instead of waiting for an ADOPT from here. Nobody polls a retired
   * epoch's spares, so the closes wake no one. */
  if (s->retired) ftc__tcp_close_spares(s->retired);
  ftc__tcp_t *tp = NULL;
  /* The previous epoch's transport lends its spare connections; it is
   * retired after this returns. */
  ftc_status_t st = ftc__tcp_connect(&cfg, view, listen_fd, prev, &tp);
  if (st == FTC_OK && s->preacc) {
    /* The first bootstrap took the acceptor's sockets and answered them;
     * what it left are callers that went away. */
    ftc__tcp_preaccept_free(s->preacc);
    s->preacc = NULL;
  }
  *out = tp;
  return st;
}

static void tcp_close(void *h, int planned) {
  if (planned) ftc__tcp_say_goodbye(h);
  ftc__tcp_destroy(h);
}

/* A planned move's old sockets are closed (with a goodbye) only once the
 * new epoch is in use, when every peer has moved too: closed now, each
 * goodbye would wake a peer that is still moving (the core's idle watch).
 * A failed epoch's sockets are shut already (interrupt at the failure: its
 * peers have seen them end); closing them is CPU that every survivor
 * would spend while the others still move (a close each, 2 per peer), so
 * they are closed then too. */
static void tcp_retire(void *sv, void *prev, int planned, int shut) {
  tcp_state_t *s = sv;
  if (s->retired) tcp_close(s->retired, s->retired_planned);
  if (shut) ftc__tcp_shutdown(prev); /* (a no-op if shut at the failure) */
  s->retired = prev;
  s->retired_planned = planned;
}

static void tcp_settled(void *sv) {
  tcp_state_t *s = sv;
  if (!s->retired) return;
  tcp_close(s->retired, s->retired_planned);
  s->retired = NULL;
}

static ftc_status_t tcp_run(void *h, const ftc__op_t *op, int64_t deadline_ns) {
  return ftc__tcp_run(h, op, deadline_ns);
}

static ftc_status_t tcp_run_p2p(void *h, const ftc__op_t **ops, int n, int cap, int64_t deadline_ns,
                                ftc__backend_more_fn more, void *ctx, int wake_fd) {
  return ftc__tcp_run_p2p(h, ops, n, cap, deadline_ns, more, ctx, wake_fd);
}

static void tcp_interrupt(void *h) { ftc__tcp_shutdown(h); }

static int tcp_failed_peer(const void *h) { return ftc__tcp_failed_peer(h); }
static int tcp_peer_fds(const void *h, int *fds, int *ranks, int max) {
  return ftc__tcp_peer_fds(h, fds, ranks, max);
}
/* A peer says goodbye with one byte on each socket, after its data. */
static int tcp_peer_peek(int fd) {
  unsigned char buf[2];
  ssize_t got = recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
  if (got == 1 && buf[0] == FTC__TCP_GOODBYE) return FTC__PEER_GOODBYE;
  if (got > 0) return FTC__PEER_DATA;
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return FTC__PEER_QUIET;
  return FTC__PEER_ENDED;
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
static int tcp_early_start(void *h, const ftc__view_t *next) {
  return ftc__tcp_early_start(h, next);
}
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
    .dataplane = FTC__TCP_PROTO,
    .open = tcp_open,
    .destroy = tcp_destroy,
    .listen = tcp_listen,
    .refuse = ftc__tcp_refuse_pending,
    .prepare = tcp_prepare,
    .standby = tcp_standby,
    .allreduce_algo = tcp_allreduce_algo,
    .connect = tcp_connect,
    .retire = tcp_retire,
    .settled = tcp_settled,
    .quiet_stop = 1,
    .run = tcp_run,
    .run_p2p = tcp_run_p2p,
    .interrupt = tcp_interrupt,
    .close = tcp_close,
    .failed_peer = tcp_failed_peer,
    .blames_at_once = 1,
    .rebuild_inline = 1,
    .peer_fds = tcp_peer_fds,
    .peer_peek = tcp_peer_peek,
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
