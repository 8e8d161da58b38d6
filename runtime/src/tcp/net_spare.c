/*
 * net_spare.c - connections made ahead of the epoch that uses them, by the
 * idle progress thread.
 *
 * Early connections: a rank that hears of the next epoch (the coordinator's
 * prospect) connects to the members it adds before the epoch is formed
 * (ftc__tcp_early_start and its poll/events pair).
 *
 * Spare connections: between collectives the idle progress thread makes
 * the same sockets again for every pair (SPARE hellos, kind + 4), unused
 * until the next epoch adopts them with one ADOPT {epoch} message each way
 * per pair, on its shared socket (ftc__tcp_connect with prev); a failed
 * epoch shuts only its own sockets, so the survivors of a failure
 * reconnect without a new connection.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ftc_addr.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftc_time.h"
#include "tcp/net_int.h"
#include "tcp/tcp_int.h"

int ftc__tcp_early_start(ftc__tcp_t *tp, const ftc__view_t *next) {
  if (!tp) return 0;
  ftc__tcp_t *old = tp->early;
  /* (begun on the coordinator's prospect: the epoch it formed may differ) */
  if (old && ftc__net_same_epoch_view(old, next)) return 1;
  tp->early = NULL;
  int fresh = 0;
  if (next->epoch > tp->epoch && next->my_rank >= 0 && next->my_rank < next->size && next->size > 1)
    for (int r = 0; r < next->size; r++) {
      int known = 0;
      for (int k = 0; k < tp->size && !known; k++)
        known = tp->peers[k].member_id == next->members[r].member_id;
      fresh += !known;
    }
  ftc__tcp_t *e = fresh ? ftc__net_tp_new(&tp->cfg, next) : NULL;
  boot_t *b = e ? ftc__net_boot_new(e, &e->view, 0, 1) : NULL;
  if (e && !b) ftc__tcp_destroy(e), e = NULL;
  if (b) {
    e->spare_boot = b;
    /* Hellos for a later epoch kept meanwhile: maybe for this one. */
    if (old) ftc__net_take_held(b, old->spare_boot);
    ftc__net_take_held(b, tp->spare_boot);
    for (int r = 0; r < e->size; r++) {
      if (r == e->rank || !ftc__net_makes_connection(b, e->rank, r)) continue; /* it connects to us */
      int known = 0;
      for (int k = 0; k < tp->size && !known; k++) known = tp->peers[k].member_id == e->peers[r].member_id;
      if (known) continue; /* a running rank: kept (or its spare adopted) at the step boundary */
      for (int lane = 0; lane < e->cfg.sockets; lane++) {
        pend_t *p = &b->conn[2 * r + lane];
        p->rank = r;
        p->lane = lane;
        ftc__net_conn_start(b, p);
      }
    }
    tp->early = e;
    FTC_DEBUG(FTC_SUB_NET, "rank %d: connecting early to the %d new member(s) of epoch %llu",
              e->rank, fresh, (unsigned long long)next->epoch);
  }
  ftc__tcp_destroy(old);
  return tp->early != NULL;
}

/* The descriptors a background bootstrap waits on: the listener, its connections to the
 * first nconn pending slots, and accepted sockets waiting for their hello; b->owner[i]
 * names what pfd[i] belongs to (NULL: the listener) for boot_events. */
static int boot_pollfds(boot_t *b, int listen_fd, int nconn, struct pollfd *pfd, int max) {
  int n = 0;
  if (ftc__net_acc_slot(b)) {
    pfd[n] = (struct pollfd){listen_fd, POLLIN, 0};
    b->owner[n++] = NULL;
  }
  for (int i = 0; i < nconn && n < max; i++) {
    pend_t *p = &b->conn[i];
    if (!ftc__net_pend_waits(p)) continue;
    pfd[n] = (struct pollfd){p->fd, p->state == P_CONNECTING ? POLLOUT : POLLIN, 0};
    b->owner[n++] = p;
  }
  for (int i = 0; i < b->nacc && n < max; i++) {
    pend_t *p = &b->acc[i];
    if (p->state != P_WAIT_HELLO) continue;
    pfd[n] = (struct pollfd){p->fd, POLLIN, 0};
    b->owner[n++] = p;
  }
  b->nowner = n;
  return n;
}

static void boot_events(boot_t *b, int listen_fd, const struct pollfd *pfd, int n) {
  for (int i = 0; i < n && i < b->nowner; i++) {
    pend_t *o = b->owner[i];
    if (!pfd[i].revents || (o && o->fd != pfd[i].fd)) continue;
    ftc__net_dispatch(b, listen_fd, o, pfd[i].revents);
  }
}

int ftc__tcp_early_poll(ftc__tcp_t *tp, int listen_fd, struct pollfd *pfd, int max) {
  boot_t *b = tp && tp->early ? tp->early->spare_boot : NULL;
  if (!b || max < 1) return 0;
  return boot_pollfds(b, listen_fd, 2 * tp->early->size, pfd, max);
}

void ftc__tcp_early_events(ftc__tcp_t *tp, int listen_fd, const struct pollfd *pfd, int n) {
  boot_t *b = tp && tp->early ? tp->early->spare_boot : NULL;
  if (b) boot_events(b, listen_fd, pfd, n);
}

/* ---- spare connections ---- */

int ftc__tcp_spare_poll(ftc__tcp_t *tp, int listen_fd, int build, struct pollfd *pfd, int max) {
  if (max < 1) return 0;
  boot_t *b = tp->spare_boot;
  if (!b && !(b = tp->spare_boot = ftc__net_boot_new(tp, &tp->view, 1, 0))) {
    pfd[0] = (struct pollfd){listen_fd, POLLIN, 0}; /* out of memory: refuse callers */
    return 1;
  }
  int64_t now = ftc__now_ns();
  if (build && !b->started) {
    b->started = 1;
    for (int r = 0; r < tp->rank; r++)
      for (int lane = 0; lane < tp->cfg.sockets; lane++) {
        pend_t *p = &b->conn[2 * r + lane];
        p->rank = r;
        p->lane = lane;
        if (*ftc__net_lane_slot(tp, r, lane, 1) < 0 && *ftc__net_lane_slot(tp, r, lane, 0) >= 0) ftc__net_conn_start(b, p);
      }
  }
  for (int i = 0; i < b->nacc; i++) {
    pend_t *p = &b->acc[i];
    if ((p->state == P_WAIT_HELLO || p->state == P_HELD) && p->retry_at <= now)
      ftc__net_refuse(b, p, "no handshake for this epoch within %lld ms", SPARE_HELLO_NS / 1000000);
  }
  return boot_pollfds(b, listen_fd, 2 * tp->rank, pfd, max);
}

void ftc__tcp_spare_events(ftc__tcp_t *tp, int listen_fd, const struct pollfd *pfd, int n) {
  boot_t *b = tp->spare_boot;
  if (!b) {
    if (n > 0 && pfd[0].revents) ftc__tcp_refuse_pending(listen_fd);
    return;
  }
  boot_events(b, listen_fd, pfd, n);
}

void ftc__tcp_close_spares(ftc__tcp_t *tp) {
  if (!tp) return;
  ftc__tcp_spare_stop(tp);
  for (int k = 0; k < tp->size; k++) {
    if (k == tp->rank) continue;
    for (int lane = 0; lane < 2; lane++) {
      int fd = __atomic_exchange_n(ftc__net_lane_slot(tp, k, lane, 1), -1, __ATOMIC_ACQ_REL);
      if (fd >= 0 && (tp->cfg.sockets != 1 || lane == 0)) close(fd);
    }
  }
}

void ftc__tcp_spare_stop(ftc__tcp_t *tp) {
  boot_t *b = tp ? tp->spare_boot : NULL;
  if (!b) return;
  for (int i = 0; i < b->nacc; i++)
    if (b->acc[i].state != P_HELD) ftc__net_pend_close(&b->acc[i]), b->acc[i].state = P_IDLE;
  for (int i = 0; i < 2 * tp->size; i++) ftc__net_pend_close(&b->conn[i]), b->conn[i].state = P_IDLE;
}

int ftc__tcp_spare_count(const ftc__tcp_t *tp) {
  int n = 0;
  for (int r = 0; tp && r < tp->size; r++)
    n += __atomic_load_n(&tp->peers[r].spare_fd, __ATOMIC_ACQUIRE) >= 0 &&
         __atomic_load_n(&tp->peers[r].spare_sfd, __ATOMIC_ACQUIRE) >= 0;
  return n;
}
