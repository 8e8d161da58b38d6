/*
 * net_adopt.c - the pairs whose peer's ADOPT is still to come.
 *
 * Lazy adoption: the move takes the spares at once, the pair unconfirmed;
 * the first run that uses the pair sends this end's ADOPT (ftc__tcp_pay)
 * and reads the peer's (ftc__tcp_confirm) before any byte of its own, and
 * a pair whose peer did not adopt it (its end, or another epoch's ADOPT)
 * is connected anew inside that run (ftc__tcp_reconnect), unless the
 * peer's process is gone (peer_gone: a failure, as any other end). So a
 * survivor goes from its view to its first collective without waiting for
 * every peer, and a pair no run uses sends nothing.
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

/* Whether the process of `rank` is gone: a connection to its listener is
 * refused (the listener lives as long as the process; a running epoch's
 * peers never see it refused otherwise). An unconfirmed pair that ends
 * before its ADOPT came is either a peer that did not adopt it (it connects
 * anew, or waits for this rank to) or one that died before it used the
 * pair: this tells them apart at once, rather than after the coordinator's
 * next view. Waits at most 100 ms for an answer (a host that does not
 * answer: alive as far as this knows). */
int ftc__net_peer_gone(const ftc__tcp_t *tp, int rank) {
  struct sockaddr_storage ss;
  socklen_t sl;
  char why[320];
  if (ftc__net_parse_addr(tp->view.members[rank].addr, tp->cfg.family, &ss, &sl, why, sizeof(why)) != 0)
    return 0;
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int gone = 0;
  if (connect(fd, (struct sockaddr *)&ss, sl) != 0) {
    if (errno == ECONNREFUSED) {
      gone = 1;
    } else if (errno == EINPROGRESS) {
      struct pollfd p = {fd, POLLOUT, 0};
      int err = 0;
      socklen_t el = sizeof(err);
      if (poll(&p, 1, 100) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0)
        gone = err == ECONNREFUSED;
    }
  }
  close(fd);
  return gone;
}

ftc_status_t ftc__tcp_reconnect(ftc__tcp_t *tp, int rank, int64_t deadline, int64_t hold) {
  if (__atomic_load_n(&tp->shut, __ATOMIC_ACQUIRE))
    return ftc__error(FTC_ERR_REVOKED, "epoch %llu was stopped", (unsigned long long)tp->epoch);
  ftc_status_t broke = ftc__tcp_break(tp, rank); /* (broken until it is whole) */
  if (broke != FTC_OK) return broke;
  boot_t *b = ftc__net_boot_new(tp, &tp->view, 0, 0);
  if (b && !(b->waited = ftc__calloc((size_t)tp->size, 1))) ftc__net_boot_free(b), b = NULL;
  if (!b) return ftc__error(FTC_ERR_NO_MEMORY, "allocating the bootstrap state");
  b->waited[rank] = 1;
  /* Every other pair counts as connected: only this one is waited for. */
  b->connected = tp->cfg.sockets * (tp->size - 2);
  for (int lane = 0; lane < tp->cfg.sockets; lane++) {
    pend_t *p = &b->conn[2 * rank + lane];
    p->rank = rank;
    p->lane = lane;
    if (ftc__net_makes_connection(b, tp->rank, rank)) ftc__net_conn_start(b, p);
  }
  b->listens = ftc__net_makes_connection(b, rank, tp->rank);
  b->repair = 1;
  b->hold_until = hold;
  int64_t t0 = ftc__now_ns();
  ftc_status_t st = ftc__net_boot_loop(b, tp->listen_fd, deadline);
  ftc__net_boot_free(b);
  /* Every pair it touched (this one; another whose peer did not adopt it
   * or connected it meanwhile) is whole, or broken: none of its sockets,
   * for a run to connect anew (never a pair without sockets taken as
   * settled). */
  for (int r = 0; r < tp->size; r++) {
    ftc__tcp_peer_t *p = &tp->peers[r];
    if (r == tp->rank || p->unconfirmed) continue;
    if (ftc__net_lanes_of(tp, r) == tp->cfg.sockets) {
      if (!p->broken) continue;
      ftc__net_set_broken(tp, r, 0);
      if (r != rank)
        FTC_INFO(FTC_SUB_NET, "rank %d: connected to rank %d anew for epoch %llu", tp->rank, r,
                 (unsigned long long)tp->epoch);
      if (__atomic_load_n(&tp->shut, __ATOMIC_ACQUIRE)) ftc__net_peer_shutdown(p);
      continue;
    }
    ftc__net_break_pair(tp, r);
  }
  if (st == FTC_OK)
    FTC_INFO(FTC_SUB_NET, "rank %d: connected to rank %d anew for epoch %llu in %.1f ms", tp->rank,
             rank, (unsigned long long)tp->epoch, (double)(ftc__now_ns() - t0) / 1e6);
  return st;
}

ftc_status_t ftc__tcp_settle(ftc__tcp_t *tp, int rank, int64_t deadline) {
  if (!tp || rank < 0 || rank >= tp->size || rank == tp->rank) return FTC_OK;
  for (;;) {
    int c = ftc__tcp_exchange(tp, rank);
    if (c > 0) return FTC_OK;
    int64_t now = ftc__now_ns();
    if (c < 0) {
      int64_t bound = ftc__deadline_ns(tp->cfg.connect_timeout_ms);
      int64_t until = deadline > now && deadline < bound ? deadline : bound;
      ftc_status_t st = ftc__tcp_reconnect(tp, rank, until, until);
      if (st == FTC_ERR_TIMEOUT) __atomic_store_n(&tp->failed_peer, rank, __ATOMIC_RELEASE);
      return st;
    }
    if (now >= deadline)
      return ftc__error(FTC_ERR_TIMEOUT, "rank %d: no ADOPT from rank %d for epoch %llu in time",
                        tp->rank, rank, (unsigned long long)tp->peers[rank].aepoch);
    if (tp->cfg.interrupt && __atomic_load_n(tp->cfg.interrupt, __ATOMIC_ACQUIRE))
      return ftc__error((ftc_status_t)__atomic_load_n(tp->cfg.interrupt, __ATOMIC_ACQUIRE),
                        "the communicator was stopped");
    if (ftc__member_latest_epoch(tp->cfg.member) > tp->epoch)
      return ftc__error(FTC_ERR_REVOKED, "epoch %llu was superseded", (unsigned long long)tp->epoch);
    int64_t left = (deadline - now + 999999) / 1000000;
    struct pollfd p = {ftc__tcp_adopt_fd(tp, rank), POLLIN, 0};
    if (poll(&p, 1, left > 50 ? 50 : (int)left) < 0 && errno != EINTR)
      return ftc__error(FTC_ERR_SYSTEM, "poll: %s", strerror(errno));
  }
}

int ftc__tcp_unconfirmed(const ftc__tcp_t *tp, int rank) {
  return tp && rank >= 0 && rank < tp->size &&
         __atomic_load_n(&tp->peers[rank].unconfirmed, __ATOMIC_ACQUIRE);
}
