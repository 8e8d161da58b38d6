/*
 * net.c - TCP connection management of the data plane: the listener and the
 * address it advertises, the authenticated bootstrap that connects the
 * peers of a view (the higher rank connects, the lower accepts; a member
 * the epoch admits is connected to by the others, see makes_connection),
 * refusal of strangers, socket options, and teardown.
 *
 * Each pair has two connections by default (FTCOMM_TCP_SOCKETS=2), one per
 * direction: UP, on which the connecting rank sends (the higher one but for
 * a joiner's pairs), and DOWN, on which the accepting rank sends. A rank then never sends on the socket its peer's data
 * arrives on, so its send() never processes (from the socket backlog) data
 * and acknowledgements that arrived while it held that socket's lock, which
 * on loopback was a third of a 2-rank allreduce's time. With
 * FTCOMM_TCP_SOCKETS=1 one connection carries both directions.
 *
 * Handshake, once per connection (92-byte messages, little-endian): the
 * acceptor sends a 16-byte random nonce; the connector answers HELLO (kind
 * HELLO for the one socket of a pair, HELLO_UP or HELLO_DOWN for one of
 * two) {magic, protocol, kind, epoch, member_id, rank, size, wire settings
 * (FTCOMM_RING_THRESHOLD, FTCOMM_HALVING_MAX, FTCOMM_ALLREDUCE_ALGO,
 * FTCOMM_TCP_SOCKETS, and the CPUs the sender counts), HMAC-SHA256(token,
 * nonce || header)}; the acceptor
 * checks the magic and protocol from the first 8 bytes (another version is
 * refused before the rest, whose size may differ), the MAC, the epoch, that
 * (rank, member_id) is that member of its view, that the wire settings are
 * its own, that the kind matches its FTCOMM_TCP_SOCKETS and that this
 * connection of the pair is not connected yet, and answers ACK with its own
 * settings, MACed the same way, which the connector checks in turn.
 * Anything else is refused (closed) and logged. A member whose settings
 * differ gets a MISMATCH answer first, with the acceptor's settings, so both
 * ends can say which differ: a process creating its communicator then fails
 * it with FTC_ERR_CONFIG (after finishing the handshake with its other
 * peers, for at most 3 s, so they hear it too); a running one (an epoch
 * after the first) only refuses the newcomer, whose creation fails.
 *
 * The connection management is split by concern, each file opening with
 * what it owns: net.c (this: the bootstrap's state machine, the epoch's
 * connection set from creation to teardown), net_config.c (the backend's
 * settings and what it counts of the host), net_handshake.c (the hello and
 * its wire settings), net_socket.c (the listener and socket options),
 * net_adopt.c (lazy adoption), net_standby.c (a standby member's acceptor),
 * net_spare.c (early and spare connections); net_int.h holds what they
 * share.
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

/* ---- bootstrap ---- */

/* Resolve a peer's advertised "host:port" / "[IPv6]:port" with the
 * configured family; on failure why says what is wrong. */
int ftc__net_parse_addr(const char *addr, int family, struct sockaddr_storage *ss, socklen_t *sl,
                        char *why, size_t whylen) {
  char host[FTC__ADDR_HOST_MAX], port[8];
  int p, rc;
  if (ftc__addr_split("its address", addr, host, sizeof(host), &p) != FTC_OK) {
    snprintf(why, whylen, "%s", ftc_last_error());
    return -1;
  }
  snprintf(port, sizeof(port), "%d", p);
  struct addrinfo hints = {0}, *ai = NULL;
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  if ((rc = getaddrinfo(host, port, &hints, &ai)) != 0 || !ai) {
    snprintf(why, whylen, "%s cannot be resolved%s%s: %s", host,
             family != AF_UNSPEC ? " as " : "", family != AF_UNSPEC ? ftc__addr_family_name(family) : "",
             gai_strerror(rc));
    return -1;
  }
  memcpy(ss, ai->ai_addr, ai->ai_addrlen);
  *sl = ai->ai_addrlen;
  freeaddrinfo(ai);
  return 0;
}

void ftc__net_pend_close(pend_t *p) {
  if (p->fd >= 0) close(p->fd);
  p->fd = -1;
  p->have = 0;
}

static void conn_retry(boot_t *b, pend_t *p, const char *why) {
  snprintf(b->last_problem, sizeof(b->last_problem), "rank %d (%s): %s", p->rank,
           b->view->members[p->rank].addr, why);
  ftc__net_pend_close(p);
  if (b->spare || b->early) { /* a spare is not worth a retry: the next epoch connects anew;
                               * an early connection is made again by its bootstrap */
    FTC_DEBUG(FTC_SUB_NET, "no %s connection to %s", b->spare ? "spare" : "early",
              b->last_problem);
    p->state = P_IDLE;
    return;
  }
  FTC_DEBUG(FTC_SUB_NET, "connecting to %s; retrying", b->last_problem);
  p->state = P_RETRY;
  p->retry_at = ftc__now_ns() + RETRY_NS;
}

void ftc__net_conn_start(boot_t *b, pend_t *p) {
  struct sockaddr_storage ss;
  socklen_t sl;
  char why[320];
  if (ftc__net_parse_addr(b->view->members[p->rank].addr, b->tp->cfg.family, &ss, &sl, why,
                          sizeof(why)) != 0) {
    conn_retry(b, p, why);
    return;
  }
  p->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (p->fd < 0) {
    conn_retry(b, p, strerror(errno));
    return;
  }
  ftc__net_set_sockopts(p->fd, b->tp->cfg.socket_buffer);
  p->have = 0;
  if (connect(p->fd, (struct sockaddr *)&ss, sl) == 0)
    p->state = P_WAIT_NONCE;
  else if (errno == EINPROGRESS)
    p->state = P_CONNECTING;
  else
    conn_retry(b, p, strerror(errno));
}

/* Read into p->buf until `need` bytes; 1 when complete, 0 when more is
 * needed, -1 on EOF or error. */
static int read_some(pend_t *p, size_t need) {
  while (p->have < need) {
    ssize_t n = recv(p->fd, p->buf + p->have, need - p->have, MSG_DONTWAIT);
    if (n > 0) {
      p->have += (size_t)n;
    } else if (n == 0) {
      return -1;
    } else {
      if (errno == EINTR) continue;
      return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    }
  }
  return 1;
}

static int write_all_small(int fd, const void *buf, size_t n) {
  return send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

void ftc__net_refuse(boot_t *b, pend_t *p, const char *fmt, ...) {
  char why[400], who[96];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  ftc__net_describe_peer(p->fd, who, sizeof(who));
  FTC_WARN(FTC_SUB_NET, "rank %d refused a data-plane connection from %s: %s", b->tp->rank, who,
           why);
  ftc__net_pend_close(p);
  p->state = P_IDLE;
}

/* A member of the view whose wire settings differ (why says which and what
 * to do). A process creating its communicator (b->strict) ends the
 * bootstrap with FTC_ERR_CONFIG and that message; a running one refuses the
 * peer and goes on: the peer is a new process, which fails its own
 * creation (and leaves the job), and the message stays for a timeout. */
static void wire_mismatch(boot_t *b, int peer, const char *why) {
  b->differs[peer] = 1;
  snprintf(b->last_problem, sizeof(b->last_problem), "%s", why);
  if (b->strict && b->fatal == FTC_OK) {
    b->fatal = FTC_ERR_CONFIG;
    snprintf(b->fatal_why, sizeof(b->fatal_why), "%s", why);
  }
}

/* The socket of `rank` on `lane` (0: we send on it, 1: we receive; the
 * one socket of a pair is both), of the epoch or its spare. */
int *ftc__net_lane_slot(ftc__tcp_t *tp, int rank, int lane, int spare) {
  ftc__tcp_peer_t *peer = &tp->peers[rank];
  if (spare) return lane == 0 ? &peer->spare_sfd : &peer->spare_fd;
  return lane == 0 ? &peer->sfd : &peer->fd;
}

/* The system's congestion control (net.ipv4.tcp_congestion_control), read
 * once per process; "" if unreadable. */
static char cc_default[16];
static pthread_once_t cc_default_once = PTHREAD_ONCE_INIT;
static void cc_default_read(void) {
  ftc__net_read_sysctl("/proc/sys/net/ipv4/tcp_congestion_control", cc_default, sizeof(cc_default));
  if (!strcmp(cc_default, "?")) cc_default[0] = 0;
}

/* FTCOMM_TCP_CONGESTION on a finished data connection to `peer`. had: -1
 * a new connection (the system's default), else a spare made in an earlier
 * epoch, which carries that epoch's choice: 1 auto's reno, 0 not (known
 * from when it was made, so no getsockopt: a syscall per socket of a
 * move). Returns 1 when auto left it with reno. */
static int set_congestion(const boot_t *b, int peer, int fd, int had) {
  const ftc__tcp_cfg_t *cfg = &b->tp->cfg;
  const char *name = cfg->congestion_name;
  if (cfg->congestion == FTC__TCP_CC_SYSTEM) return 0;
  if (cfg->congestion == FTC__TCP_CC_NAMED && had >= 0) return 0; /* set when it was made */
  if (cfg->congestion == FTC__TCP_CC_AUTO) {
    if (!b->reno_here || !ftc__tcp_same_host(b->view, b->view->my_rank, peer)) {
      /* An adopted spare that got reno in a view with a CPU per 2 ranks goes
       * back to the system's in one without (a grow past the host's CPUs). */
      if (had != 1) return 0;
      pthread_once(&cc_default_once, cc_default_read);
      if (!cc_default[0] || !strcmp(cc_default, "reno")) return 0;
      name = cc_default;
    } else {
      if (had == 1) return 1;
      name = "reno";
    }
  }
  static int warned; /* once per process: a refusal is the host's, every connection gets it */
  if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name)) != 0) {
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      FTC_WARN(FTC_SUB_NET, "TCP congestion control %s refused on a data connection (%s); the "
               "connections keep the system's (FTCOMM_TCP_CONGESTION=system: without this "
               "warning)", name, strerror(errno));
    return had == 1 && name == cc_default;
  }
  return cfg->congestion == FTC__TCP_CC_AUTO && name != cc_default;
}

/* Whether `me` makes the connections of its pair with `peer` in b's
 * bootstrap (the other end accepts them). The higher rank does, except
 * that the members an epoch admits (joined_epoch == epoch: a joiner) are
 * connected to by the others, whatever the ranks: they connect as soon as
 * they hear of the epoch (ftc__tcp_early_start), while the joiner is still
 * on its way to its view; it then only answers the hellos waiting at its
 * listener, one round trip less on its way to its first collective than
 * connecting to each survivor below it. Both ends read it from the same
 * view. Spare connections keep the rank rule. */
int ftc__net_makes_connection(const boot_t *b, int me, int peer) {
  if (!b->spare) {
    const ftc__view_t *v = b->view;
    int me_new = v->members[me].joined_epoch == v->epoch;
    int peer_new = v->members[peer].joined_epoch == v->epoch;
    if (me_new != peer_new) return peer_new;
  }
  return peer < me;
}

/* Where a finished connection to `rank` on `lane` goes; had: as
 * set_congestion's. */
static void keep_fd(boot_t *b, int rank, int lane, int fd, int had) {
  int one = b->tp->cfg.sockets == 1;
  int reno = set_congestion(b, rank, fd, had);
  if (b->spare) b->tp->peers[rank].spare_reno = (unsigned char)reno; /* before the fd's store */
  else b->tp->peers[rank].reno = (unsigned char)reno;
  for (int k = 0; k < 2; k++)
    if (one || k == lane) __atomic_store_n(ftc__net_lane_slot(b->tp, rank, k, b->spare), fd, __ATOMIC_RELEASE);
  if (b->spare)
    FTC_DEBUG(FTC_SUB_NET, "rank %d has a spare connection to rank %d (socket %d)", b->tp->rank,
              rank, lane);
  else
    b->connected++;
}

static void conn_event(boot_t *b, pend_t *p, short revents) {
  ftc__tcp_t *tp = b->tp;
  if (p->state == P_CONNECTING) {
    int err = 0;
    socklen_t el = sizeof(err);
    if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
    if (err) {
      conn_retry(b, p, strerror(err));
      return;
    }
    p->state = P_WAIT_NONCE;
    p->have = 0;
    return;
  }
  if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
  if (p->state == P_WAIT_NONCE) {
    int r = read_some(p, FTC__TCP_NONCE_SIZE);
    if (r < 0) {
      conn_retry(b, p, "connection closed before the handshake");
      return;
    }
    if (r == 0) return;
    memcpy(p->nonce, p->buf, FTC__TCP_NONCE_SIZE);
    uint16_t kind = tp->cfg.sockets == 1 ? FTC__TCP_HELLO : p->lane ? FTC__TCP_HELLO_DOWN : FTC__TCP_HELLO_UP;
    if (b->spare) kind = (uint16_t)FTC__TCP_SPARE_OF(kind);
    ftc__tcp_hello_t h = {kind, b->view->epoch, b->view->my_member_id,
                          (uint32_t)tp->rank, (uint32_t)tp->size, {0}};
    ftc__tcp_wire_of(&tp->cfg, &h.wire);
    uint8_t msg[FTC__TCP_HELLO_SIZE];
    ftc__tcp_hello_encode(msg, &h, tp->cfg.token, p->nonce);
    if (write_all_small(p->fd, msg, sizeof(msg)) != 0) {
      conn_retry(b, p, "sending the handshake failed");
      return;
    }
    p->have = 0;
    p->state = P_WAIT_ACK;
    return;
  }
  if (p->state == P_WAIT_ACK) {
    int r = read_some(p, FTC__TCP_HELLO_SIZE);
    if (r < 0) {
      conn_retry(b, p, "the peer closed the connection during the handshake (wrong job token, "
                       "epoch or ftcomm version? its log says why)");
      return;
    }
    if (r == 0) return;
    ftc__tcp_hello_t h;
    const ftc__view_member_t *m = &b->view->members[p->rank];
    int d = ftc__tcp_hello_decode(p->buf, &h, tp->cfg.token, p->nonce);
    if (d != 0 || (h.kind != FTC__TCP_ACK && h.kind != FTC__TCP_MISMATCH) ||
        h.epoch != b->view->epoch || h.rank != (uint32_t)p->rank || h.member_id != m->member_id) {
      FTC_WARN(FTC_SUB_NET, "rank %d: the process at %s is not rank %d of epoch %llu (%s); %s",
               tp->rank, m->addr, p->rank, (unsigned long long)b->view->epoch,
               d == -2 ? "bad token MAC" : d == -1 ? "not an ftcomm peer" : "wrong identity",
               b->spare ? "no spare connection" : "retrying");
      conn_retry(b, p, "the acceptor is not the expected member");
      return;
    }
    /* The member it should be: its settings must be ours (it checked ours). */
    ftc__tcp_wire_t ours;
    char why[400] = "";
    ftc__tcp_wire_of(&tp->cfg, &ours);
    if (ftc__tcp_wire_diff(&h.wire, p->rank, &ours, tp->rank,
                           ftc__tcp_same_host(b->view, p->rank, tp->rank), why, sizeof(why)) ||
        h.kind == FTC__TCP_MISMATCH) {
      if (h.kind == FTC__TCP_MISMATCH && why[0] == '\0')
        snprintf(why, sizeof(why), "rank %d refused this rank's settings, which are its own", p->rank);
      wire_mismatch(b, p->rank, why);
      if (b->strict)
        ftc__net_pend_close(p), p->state = P_IDLE;
      else
        conn_retry(b, p, why);
      return;
    }
    keep_fd(b, p->rank, p->lane, p->fd, -1);
    p->fd = -1;
    p->state = P_DONE;
    FTC_DEBUG(FTC_SUB_NET, "rank %d connected to rank %d (socket %d)", tp->rank, p->rank, p->lane);
  }
}

/* ADOPT {magic, protocol, kind, epoch}: this end takes the spare sockets of
 * a pair for `epoch`, sent on the pair's shared socket only. */
static void adopt_encode(uint8_t out[FTC__TCP_ADOPT_SIZE], uint64_t epoch) {
  put_u32(out, FTC__TCP_MAGIC);
  put_u16(out + 4, FTC__TCP_PROTO);
  put_u16(out + 6, FTC__TCP_ADOPT);
  put_u64(out + 8, epoch);
}

/* The lane of the pair's shared socket (UP) at this end: the higher rank
 * sends on it (lane 0), the lower receives (lane 1); the one socket of
 * FTCOMM_TCP_SOCKETS=1 is lane 0. */
static int shared_lane(const ftc__tcp_t *tp, int peer) {
  return tp->cfg.sockets == 1 || tp->rank > peer ? 0 : 1;
}

/* How many of the pair with `rank`'s sockets of this epoch are connected
 * (its lanes: each of the two sockets, or the one). */
int ftc__net_lanes_of(const ftc__tcp_t *tp, int rank) {
  const ftc__tcp_peer_t *p = &tp->peers[rank];
  return tp->cfg.sockets == 1 ? p->fd >= 0 : (p->fd >= 0) + (p->sfd >= 0);
}

/* Mark the pair with `rank` broken (none of its sockets: a run connects it
 * anew) or not; the idle watch loads the flag (ftc__tcp_peer_fds). */
void ftc__net_set_broken(ftc__tcp_t *tp, int rank, int on) {
  ftc__tcp_peer_t *p = &tp->peers[rank];
  if (p->broken == on) return;
  __atomic_store_n(&p->broken, (unsigned char)on, __ATOMIC_RELEASE);
  tp->broken += on ? 1 : -1;
}

/* The pair with `rank`'s sockets of this epoch, closed: each slot is
 * emptied before its close (other threads load them). Returns how many
 * sockets the pair had (what its keep_fd calls counted). */
static int drop_pair(ftc__tcp_t *tp, int rank) {
  ftc__tcp_peer_t *p = &tp->peers[rank];
  int fd = __atomic_exchange_n(&p->fd, -1, __ATOMIC_ACQ_REL);
  int sfd = __atomic_exchange_n(&p->sfd, -1, __ATOMIC_ACQ_REL);
  int had = (fd >= 0) + (sfd >= 0 && sfd != fd);
  if (sfd >= 0 && sfd != fd) close(sfd);
  if (fd >= 0) close(fd);
  if (p->unconfirmed) {
    __atomic_store_n(&p->unconfirmed, 0, __ATOMIC_RELEASE);
    tp->unconfirmed--;
    tp->adopted -= tp->cfg.sockets;
  }
  p->ahave = 0;
  p->owe = 0;
  return had;
}

/* drop_pair, the pair marked broken first (the idle watch loads the mark
 * before and after the sockets: ftc__tcp_peer_fds). */
int ftc__net_break_pair(ftc__tcp_t *tp, int rank) {
  ftc__net_set_broken(tp, rank, 1);
  return drop_pair(tp, rank);
}

ftc_status_t ftc__tcp_break(ftc__tcp_t *tp, int rank) {
  if (ftc__net_peer_gone(tp, rank)) {
    __atomic_store_n(&tp->failed_peer, rank, __ATOMIC_RELEASE);
    return ftc__error(FTC_ERR_PEER_LOST, "rank %d closed its connection, and its process is gone "
                      "(its listener refuses connections)", rank);
  }
  ftc__net_break_pair(tp, rank);
  return FTC_OK;
}

int ftc__tcp_exchange(ftc__tcp_t *tp, int rank) {
  if (tp->peers[rank].broken || ftc__tcp_pay(tp, rank) < 0) return -1;
  return ftc__tcp_confirm(tp, rank);
}

/* The pair with `rank` is whole with the sockets fd[lane] (every lane),
 * made in an earlier epoch (reno: what auto gave them then). */
static void take_pair(boot_t *b, int rank, const int *fd, int reno) {
  for (int lane = 0; lane < b->tp->cfg.sockets; lane++) {
    pend_t *q = &b->conn[2 * rank + lane];
    q->rank = rank;
    q->lane = lane;
    q->state = P_DONE;
    keep_fd(b, rank, lane, fd[lane], reno);
  }
}

/* Adopt the pair's spare sockets fd[lane] (every lane of the pair) for
 * b's epoch: take them at once, unconfirmed, this end's ADOPT owed (sent
 * on the shared one by the first run that uses the pair: ftc__tcp_pay). */
static void adopt_start(boot_t *b, int rank, const int *fd, int reno) {
  ftc__tcp_t *tp = b->tp;
  ftc__tcp_peer_t *p = &tp->peers[rank];
  p->alane = (unsigned char)shared_lane(tp, rank);
  p->ahave = 0;
  p->owe = 1;
  p->aepoch = b->view->epoch;
  __atomic_store_n(&p->unconfirmed, 1, __ATOMIC_RELEASE);
  tp->unconfirmed++;
  take_pair(b, rank, fd, reno);
  tp->adopted += tp->cfg.sockets;
}

int ftc__tcp_pay(ftc__tcp_t *tp, int rank) {
  ftc__tcp_peer_t *p = &tp->peers[rank];
  if (!p->owe) return 0;
  uint8_t msg[FTC__TCP_ADOPT_SIZE];
  adopt_encode(msg, p->aepoch);
  p->owe = 0;
  if (write_all_small(ftc__tcp_adopt_fd(tp, rank), msg, sizeof(msg)) == 0) return 0;
  FTC_DEBUG(FTC_SUB_NET, "rank %d: the spare connection(s) to rank %d adopted for epoch %llu are "
            "closed (%s)", tp->rank, rank, (unsigned long long)p->aepoch, strerror(errno));
  return -1;
}

/* An unconfirmed pair's state moves with its sockets (a planned move keeps
 * them; a failed one gives them back). */
static void move_unconfirmed(ftc__tcp_t *to, int rt, ftc__tcp_t *from, int rf) {
  ftc__tcp_peer_t *t = &to->peers[rt], *f = &from->peers[rf];
  if (!f->unconfirmed) return;
  __atomic_store_n(&t->unconfirmed, 1, __ATOMIC_RELEASE);
  t->alane = f->alane;
  t->owe = f->owe;
  t->ahave = f->ahave;
  t->aepoch = f->aepoch;
  memcpy(t->abuf, f->abuf, sizeof(t->abuf));
  to->unconfirmed++;
  __atomic_store_n(&f->unconfirmed, 0, __ATOMIC_RELEASE);
  f->ahave = 0;
  f->owe = 0;
  from->unconfirmed--;
}

int ftc__tcp_adopt_fd(const ftc__tcp_t *tp, int rank) {
  const ftc__tcp_peer_t *p = &tp->peers[rank];
  return __atomic_load_n(p->alane ? &p->fd : &p->sfd, __ATOMIC_ACQUIRE);
}

int ftc__tcp_confirm(ftc__tcp_t *tp, int rank) {
  ftc__tcp_peer_t *p = &tp->peers[rank];
  if (!p->unconfirmed) return 1;
  int fd = ftc__tcp_adopt_fd(tp, rank);
  while (p->ahave < FTC__TCP_ADOPT_SIZE) {
    ssize_t n = fd < 0 ? 0 : recv(fd, p->abuf + p->ahave, FTC__TCP_ADOPT_SIZE - p->ahave, MSG_DONTWAIT);
    if (n > 0) {
      p->ahave += (unsigned char)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    FTC_INFO(FTC_SUB_NET, "rank %d: rank %d closed the spare connection(s) adopted for epoch %llu "
             "before its ADOPT%s; connecting anew", tp->rank, rank,
             (unsigned long long)p->aepoch, n < 0 ? " (an error)" : "");
    return -1;
  }
  uint8_t want[FTC__TCP_ADOPT_SIZE];
  adopt_encode(want, p->aepoch);
  if (memcmp(p->abuf, want, sizeof(want)) != 0) {
    if (memcmp(p->abuf, want, 8) == 0)
      FTC_INFO(FTC_SUB_NET, "rank %d: rank %d took the spare connection(s) for epoch %llu, this "
               "rank for %llu; connecting anew", tp->rank, rank,
               (unsigned long long)get_u64(p->abuf + 8), (unsigned long long)p->aepoch);
    else
      FTC_WARN(FTC_SUB_NET, "rank %d: rank %d answered an adopted spare connection with something "
               "that is not an ADOPT of this ftcomm version; connecting anew", tp->rank, rank);
    return -1;
  }
  __atomic_store_n(&p->unconfirmed, 0, __ATOMIC_RELEASE);
  tp->unconfirmed--;
  return 1;
}

static void acc_event(boot_t *b, pend_t *p, short revents) {
  ftc__tcp_t *tp = b->tp;
  if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
  /* Magic and version first: another version's hello may be of another size. */
  int r = read_some(p, FTC__TCP_PREFIX_SIZE);
  if (r > 0) {
    int v = ftc__tcp_hello_version(p->buf);
    if (v < 0) { ftc__net_refuse(b, p, "not an ftcomm data-plane handshake (bad magic)"); return; }
    if (v != FTC__TCP_PROTO)
      { ftc__net_refuse(b, p, "it speaks data-plane protocol %d and this rank %d: run the same ftcomm "
                     "version on every rank", v, FTC__TCP_PROTO); return; }
    r = read_some(p, FTC__TCP_HELLO_SIZE);
  }
  if (r < 0 && p->have == 0) { /* (a caller that sent nothing: a repairing peer's probe) */
    FTC_DEBUG(FTC_SUB_NET, "rank %d: a data-plane connection closed before its handshake",
              tp->rank);
    ftc__net_pend_close(p);
    p->state = P_IDLE;
    return;
  }
  if (r < 0) {
    ftc__net_refuse(b, p, "closed before completing the handshake");
    return;
  }
  if (r == 0) return;
  ftc__tcp_hello_t h;
  int d = ftc__tcp_hello_decode(p->buf, &h, tp->cfg.token, p->nonce);
  if (d == -1) { ftc__net_refuse(b, p, "not an ftcomm data-plane handshake (bad magic or protocol version)"); return; }
  if (d == -2) { ftc__net_refuse(b, p, "the handshake is not signed with this job's token"); return; }
  int regular = h.kind == FTC__TCP_HELLO || h.kind == FTC__TCP_HELLO_UP || h.kind == FTC__TCP_HELLO_DOWN;
  int spare = h.kind == FTC__TCP_SPARE || h.kind == FTC__TCP_SPARE_UP || h.kind == FTC__TCP_SPARE_DOWN;
  if ((b->spare || b->early) && regular && h.epoch > b->view->epoch) {
    /* A peer already connecting the next epoch, which this rank has not
     * heard of yet: its bootstrap answers (ftc__tcp_connect, prev). */
    p->state = P_HELD;
    FTC_DEBUG(FTC_SUB_NET, "rank %d keeps a hello for epoch %llu from rank %u", tp->rank,
              (unsigned long long)h.epoch, h.rank);
    return;
  }
  if (b->spare ? !spare : !regular)
    { ftc__net_refuse(b, p, "unexpected message kind %u%s", h.kind, b->spare ? " (between epochs)" : ""); return; }
  int kind = b->spare ? h.kind - FTC__TCP_SPARE_OF(0) : h.kind;
  if (h.epoch != b->view->epoch) {
    /* A member (the MAC is the job's) at another epoch: one side has moved
     * on first (the other follows, or its epoch is superseded), and its
     * connector retries every 5 ms meanwhile: said once per bootstrap. */
    char who[96];
    ftc__net_describe_peer(p->fd, who, sizeof(who));
    if (b->said_epoch++)
      FTC_DEBUG(FTC_SUB_NET, "rank %d refused a data-plane connection from %s: epoch %llu, this "
                "view is epoch %llu", tp->rank, who, (unsigned long long)h.epoch,
                (unsigned long long)b->view->epoch);
    else
      FTC_INFO(FTC_SUB_NET, "rank %d refused a data-plane connection from %s: epoch %llu, this "
               "view is epoch %llu (a member at another epoch; said once)", tp->rank, who,
               (unsigned long long)h.epoch, (unsigned long long)b->view->epoch);
    ftc__net_pend_close(p);
    p->state = P_IDLE;
    return;
  }
  if (h.rank >= (uint32_t)tp->size || h.rank == (uint32_t)tp->rank ||
      !ftc__net_makes_connection(b, (int)h.rank, tp->rank))
    { ftc__net_refuse(b, p, "rank %u may not connect to rank %d in a view of %d (this rank connects to "
                   "it)", h.rank, tp->rank, tp->size); return; }
  if (h.member_id != b->view->members[h.rank].member_id)
    { ftc__net_refuse(b, p, "member %llu is not rank %u of epoch %llu (expected member %llu)",
                  (unsigned long long)h.member_id, h.rank, (unsigned long long)h.epoch,
                  (unsigned long long)b->view->members[h.rank].member_id); return; }
  /* A member of the view: it runs the same algorithms as this rank only
   * with the same settings. The answer tells it this rank's. */
  ftc__tcp_hello_t ack = {FTC__TCP_ACK, b->view->epoch, b->view->my_member_id, (uint32_t)tp->rank,
                          (uint32_t)tp->size, {0}};
  ftc__tcp_wire_of(&tp->cfg, &ack.wire);
  uint8_t msg[FTC__TCP_HELLO_SIZE];
  char why[400];
  if (ftc__tcp_wire_diff(&h.wire, (int)h.rank, &ack.wire, tp->rank,
                         ftc__tcp_same_host(b->view, (int)h.rank, tp->rank), why, sizeof(why))) {
    ack.kind = FTC__TCP_MISMATCH;
    ftc__tcp_hello_encode(msg, &ack, tp->cfg.token, p->nonce);
    (void)write_all_small(p->fd, msg, sizeof(msg)); /* best effort: it finds out anyway */
    wire_mismatch(b, (int)h.rank, why);
    ftc__net_refuse(b, p, "%s", why);
    return;
  }
  if ((kind == FTC__TCP_HELLO) != (tp->cfg.sockets == 1))
    { ftc__net_refuse(b, p, "it uses %s per peer pair and this rank %s (FTCOMM_TCP_SOCKETS differs)",
                      kind == FTC__TCP_HELLO ? "one socket" : "two sockets",
                      tp->cfg.sockets == 1 ? "one" : "two"); return; }
  /* The connector sends on UP (we receive on it: lane 1) and receives on
   * DOWN (we send: lane 0). */
  int lane = kind == FTC__TCP_HELLO_UP ? 1 : 0;
  /* The peer connects anew: it did not take the spares this rank adopted
   * for the pair (it lacked one, or took them for another epoch); neither
   * does this rank (it connects every socket of the pair anew). */
  if (!b->spare && tp->peers[h.rank].unconfirmed) {
    b->connected -= b->repair ? ftc__net_break_pair(tp, (int)h.rank) : drop_pair(tp, (int)h.rank);
    if (b->waited) b->waited[h.rank] = 1;
  } else if (b->waited && !b->waited[h.rank]) {
    /* A repair counts the other pairs as connected: a broken one (none of
     * its sockets) that its peer connects now is waited for too. */
    b->waited[h.rank] = 1;
    b->connected -= tp->cfg.sockets - ftc__net_lanes_of(tp, (int)h.rank);
  }
  if (*ftc__net_lane_slot(tp, (int)h.rank, lane, b->spare) >= 0)
    { ftc__net_refuse(b, p, "rank %u is already connected", h.rank); return; }
  ftc__tcp_hello_encode(msg, &ack, tp->cfg.token, p->nonce);
  if (write_all_small(p->fd, msg, sizeof(msg)) != 0) { ftc__net_refuse(b, p, "sending the answer failed"); return; }
  keep_fd(b, (int)h.rank, lane, p->fd, -1);
  p->fd = -1;
  p->state = P_IDLE;
  FTC_DEBUG(FTC_SUB_NET, "rank %d accepted rank %u (socket %d%s)", tp->rank, h.rank, lane,
            b->spare ? ", spare" : "");
}

/* A free handshake slot for the next accepted connection, NULL when all
 * MAX_PENDING_ACCEPTS are taken: the listener is then left alone (not
 * polled, not accepted from) and its backlog holds the callers until a
 * handshake ends, rather than refusing callers the view expects (a joiner
 * starts its bootstrap with two connections per other rank waiting; an
 * early one refused is made again only at its caller's step boundary). */
pend_t *ftc__net_acc_slot(boot_t *b) {
  for (int i = 0; i < b->nacc; i++)
    if (b->acc[i].state == P_IDLE) return &b->acc[i];
  return b->nacc < MAX_PENDING_ACCEPTS ? &b->acc[b->nacc] : NULL;
}

/* The acceptor's first step of a handshake: a fresh nonce sent to the
 * connection just accepted (its options set). 0, or -1 when it could not
 * be sent. */
int ftc__net_send_nonce(int fd, int64_t socket_buffer, uint8_t nonce[FTC__TCP_NONCE_SIZE]) {
  ftc__net_set_sockopts(fd, socket_buffer);
  if (getrandom(nonce, FTC__TCP_NONCE_SIZE, 0) != FTC__TCP_NONCE_SIZE) return -1;
  return write_all_small(fd, nonce, FTC__TCP_NONCE_SIZE);
}

static void accept_new(boot_t *b, int listen_fd) {
  for (;;) {
    pend_t *p = ftc__net_acc_slot(b);
    if (!p) return;
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (p == &b->acc[b->nacc]) b->nacc++;
    memset(p, 0, sizeof(*p));
    p->fd = fd;
    p->rank = -1;
    p->retry_at = ftc__now_ns() + SPARE_HELLO_NS;
    if (ftc__net_send_nonce(fd, b->tp->cfg.socket_buffer, p->nonce) != 0) {
      ftc__net_refuse(b, p, "sending the nonce failed");
      continue;
    }
    p->state = P_WAIT_HELLO;
  }
}

void ftc__net_dispatch(boot_t *b, int listen_fd, pend_t *owner, short revents) {
  if (!owner)
    accept_new(b, listen_fd);
  else if (owner->state == P_WAIT_HELLO)
    acc_event(b, owner, revents);
  else
    conn_event(b, owner, revents);
}

int ftc__net_pend_waits(const pend_t *p) {
  return p->state == P_CONNECTING || p->state == P_WAIT_NONCE || p->state == P_WAIT_ACK;
}

/* Take prev's spare socket on `lane` to `member_id`, -1 if none; *reno:
 * whether auto gave it reno when it was made. */
static int take_spare(ftc__tcp_t *prev, uint64_t member_id, int lane, int *reno) {
  for (int k = 0; prev && k < prev->size; k++) {
    if (prev->peers[k].member_id != member_id) continue;
    int *slot = ftc__net_lane_slot(prev, k, lane, 1), fd = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (fd < 0) return -1;
    *reno = prev->peers[k].spare_reno;
    __atomic_store_n(slot, -1, __ATOMIC_RELEASE);
    if (prev->cfg.sockets == 1) __atomic_store_n(ftc__net_lane_slot(prev, k, 1 - lane, 1), -1, __ATOMIC_RELEASE);
    return fd;
  }
  return -1;
}

void ftc__net_peer_shutdown(const ftc__tcp_peer_t *p) {
  int fd = __atomic_load_n(&p->fd, __ATOMIC_ACQUIRE), sfd = __atomic_load_n(&p->sfd, __ATOMIC_ACQUIRE);
  if (fd >= 0) shutdown(fd, SHUT_RDWR);
  if (sfd >= 0 && sfd != fd) shutdown(sfd, SHUT_RDWR);
}

/* A planned move to the epoch right after prev's that drops none of its
 * members keeps every pair's connections of prev: both ends of a pair
 * decide it from the same two views (and a step boundary that both passed:
 * no byte of prev's epoch is left unread on them), so no ADOPT is needed.
 * Anything else (a failure here, an epoch skipped, a member dropped or
 * left, a peer already seen to end) moves as before: spares with an ADOPT,
 * or new connections. An end that keeps them while the other does not
 * (the other saw a failure first) is a failure too: the other's epoch is
 * superseded by the one without the failed member, and this end's ends
 * in that epoch's revoke. */
static int keeps_connections(const ftc__tcp_t *tp, const ftc__tcp_t *prev, const ftc__view_t *view) {
  if (!tp->cfg.planned_move || !prev || view->epoch != prev->epoch + 1 ||
      prev->cfg.sockets != tp->cfg.sockets ||
      __atomic_load_n(&prev->ended_peer, __ATOMIC_ACQUIRE) >= 0 ||
      __atomic_load_n(&prev->failed_peer, __ATOMIC_ACQUIRE) >= 0 ||
      __atomic_load_n(&prev->shut, __ATOMIC_ACQUIRE))
    return 0;
  for (int k = 0; k < prev->size; k++) {
    if (k == prev->rank) continue;
    int found = 0;
    for (int r = 0; r < view->size && !found; r++) found = view->members[r].member_id == prev->peers[k].member_id;
    if (!found) return 0;
  }
  return 1;
}

/* Take prev's connections (every lane) to `member_id` into fd[]; 0 if prev
 * has none open to it. The pair's spares stay in prev, closed with it once
 * the new epoch has settled (closed now, each close's FIN would wake the
 * peer's progress thread while it moves, slowing the grow), or before a
 * move that follows a failure, if the new epoch fails
 * first (ftc__tcp_close_spares), so that a peer that adopts them then reads
 * their end and connects anew. */
static int take_live(ftc__tcp_t *prev, uint64_t member_id, int *fd, int *reno, int *from) {
  for (int k = 0; k < prev->size; k++) {
    ftc__tcp_peer_t *p = &prev->peers[k];
    if (k == prev->rank || p->member_id != member_id) continue;
    if (p->fd < 0 || p->sfd < 0 || __atomic_load_n(&p->left, __ATOMIC_ACQUIRE)) return 0;
    fd[0] = p->sfd;
    fd[1] = p->fd;
    *reno = p->reno;
    *from = k;
    __atomic_store_n(&p->fd, -1, __ATOMIC_RELEASE);
    __atomic_store_n(&p->sfd, -1, __ATOMIC_RELEASE);
    return 1;
  }
  return 0;
}

/* A connect that failed after keeping connections of prev (its epoch was
 * superseded while it waited for a joiner, ...) gives them back rather than
 * closing them: a peer still at prev's epoch would read their end as a
 * crash of this rank. */
static void give_back_live(ftc__tcp_t *tp, ftc__tcp_t *prev) {
  for (int r = 0; prev && r < tp->size; r++) {
    ftc__tcp_peer_t *p = &tp->peers[r];
    int k = p->kept_from;
    if (k < 0 || k >= prev->size || prev->peers[k].fd >= 0 || prev->peers[k].sfd >= 0) continue;
    prev->peers[k].reno = p->reno; /* (the keep may have set its congestion control) */
    move_unconfirmed(prev, k, tp, r); /* (an ADOPT still to read goes back with them) */
    __atomic_store_n(&prev->peers[k].sfd, p->sfd, __ATOMIC_RELEASE);
    __atomic_store_n(&prev->peers[k].fd, p->fd, __ATOMIC_RELEASE);
    p->fd = p->sfd = -1;
    p->kept_from = -1;
    /* prev was shut (an abort, a loud failure) while they were away */
    if (__atomic_load_n(&prev->shut, __ATOMIC_ACQUIRE)) ftc__net_peer_shutdown(&prev->peers[k]);
  }
}

/* Move the hellos `from` kept for a later epoch into b and answer them. */
void ftc__net_take_held(boot_t *b, boot_t *from) {
  for (int i = 0; from && i < from->nacc; i++) {
    pend_t *h = &from->acc[i];
    if (h->state != P_HELD || b->nacc >= MAX_PENDING_ACCEPTS) continue;
    pend_t *p = &b->acc[b->nacc++];
    *p = *h;
    p->state = P_WAIT_HELLO;
    h->fd = -1;
    h->state = P_IDLE;
    acc_event(b, p, POLLIN);
  }
}

/* Every peer is connected (each socket of the pair) or known to differ. */
static int all_settled(const boot_t *b) {
  const ftc__tcp_t *tp = b->tp;
  for (int r = 0; r < tp->size; r++)
    if (r != tp->rank && !b->differs[r] && (tp->peers[r].fd < 0 || tp->peers[r].sfd < 0)) return 0;
  return 1;
}

static ftc_status_t bootstrap(boot_t *b, int listen_fd, ftc__tcp_t *prev, int64_t deadline) {
  ftc__tcp_t *tp = b->tp;
  const int lanes = tp->cfg.sockets;
  /* Hellos for this epoch that prev's spare acceptor (or an abandoned
   * early bootstrap) kept: answer them here as if they had just arrived. */
  if (prev) ftc__net_take_held(b, prev->spare_boot);
  if (prev && prev->early) {
    ftc__net_take_held(b, prev->early->spare_boot);
    ftc__tcp_destroy(prev->early);
    prev->early = NULL;
  }
  if (prev) ftc__tcp_spare_stop(prev);
  /* Each pair: adopt prev's spares when there is one for every socket of
   * it and none is connected yet, else the end that makes the pair's
   * connections (ftc__net_makes_connection) connects. */
  int adopted = 0, keep = keeps_connections(tp, prev, b->view);
  for (int r = 0; r < tp->size; r++) {
    if (r == tp->rank) continue;
    int fd[2] = {-1, -1}, fresh = 0, have = 0, reno = 0, from = -1;
    if (keep && !ftc__net_pend_waits(&b->conn[2 * r]) && *ftc__net_lane_slot(tp, r, 0, 0) < 0 &&
        *ftc__net_lane_slot(tp, r, 1, 0) < 0 &&
        take_live(prev, b->view->members[r].member_id, fd, &reno, &from)) {
      tp->peers[r].kept_from = from;
      move_unconfirmed(tp, r, prev, from); /* (its peer's ADOPT still to read) */
      take_pair(b, r, fd, reno);
      tp->kept += lanes;
      continue;
    }
    for (int lane = 0; lane < lanes; lane++) {
      pend_t *p = &b->conn[2 * r + lane];
      if (lane == 0) b->listens |= ftc__net_makes_connection(b, r, tp->rank);
      fd[lane] = take_spare(prev, b->view->members[r].member_id, lane, &reno);
      have += fd[lane] >= 0;
      if (ftc__net_pend_waits(p)) { /* started early (ftc__tcp_early_start) */
        fresh = 1;
        continue;
      }
      p->rank = r;
      p->lane = lane;
      if (*ftc__net_lane_slot(tp, r, lane, 0) >= 0) fresh = 1; /* a kept hello connected it */
    }
    if (have == lanes && !fresh) {
      adopt_start(b, r, fd, reno);
      adopted++;
      continue;
    }
    /* Not adoptable: closed at once, so that a peer that adopted them reads
     * their end and connects anew without waiting for prev's. */
    for (int lane = 0; lane < lanes; lane++) {
      if (fd[lane] >= 0) close(fd[lane]);
      pend_t *p = &b->conn[2 * r + lane];
      if (ftc__net_makes_connection(b, tp->rank, r) && !ftc__net_pend_waits(p) && *ftc__net_lane_slot(tp, r, lane, 0) < 0)
        ftc__net_conn_start(b, p);
    }
  }
  if (adopted)
    FTC_DEBUG(FTC_SUB_NET, "rank %d: adopted the spares of %d pair(s) for epoch %llu", tp->rank,
              adopted, (unsigned long long)b->view->epoch);
  /* prev's pairs still unconfirmed that this epoch does not keep: their
   * peer may be waiting in a run for this rank's ADOPT in an epoch that
   * this rank leaves, and would wait until prev's retired transport is
   * closed, after this epoch has settled (a collective timeout, or a
   * deadlock when this epoch needs that peer). After a failure, the owed
   * ADOPT is sent: a peer at prev's epoch takes the pair (its run fails
   * with that epoch, which the coordinator revokes), one at another epoch
   * reads it as not adopted and connects anew, where it finds this one
   * (closing them instead would wake every survivor still in its failed
   * collective with an end to look into, on the CPUs the recovery needs;
   * docs/protocol.md, protocol 7). A planned move that skips an epoch closes
   * them: a peer still at prev's epoch would otherwise take the pair and
   * wait in that epoch, which nothing revokes; their end makes it connect
   * anew, where it finds the newer epoch. Broken in prev: should prev go on
   * (a planned move that fails), a run of it connects the pair anew. */
  for (int k = 0; prev && k < prev->size; k++) {
    if (k == prev->rank || !prev->peers[k].unconfirmed) continue;
    if (!tp->cfg.planned_move) {
      (void)ftc__tcp_pay(prev, k);
      continue;
    }
    if (keep) continue;
    FTC_DEBUG(FTC_SUB_NET, "rank %d: closing the pair with rank %d adopted for epoch %llu, "
              "never confirmed", tp->rank, k, (unsigned long long)prev->peers[k].aepoch);
    ftc__net_break_pair(prev, k);
  }
  return ftc__net_boot_loop(b, listen_fd, deadline);
}

/* An unconfirmed pair that the bootstrap found its peer did not adopt
 * (its end, or another epoch's ADOPT): connected anew in the same
 * bootstrap. */
static void unadopt(boot_t *b, int rank) {
  b->connected -= b->repair ? ftc__net_break_pair(b->tp, rank) : drop_pair(b->tp, rank);
  if (b->waited) b->waited[rank] = 1;
  for (int lane = 0; lane < b->tp->cfg.sockets; lane++) {
    pend_t *p = &b->conn[2 * rank + lane];
    p->rank = rank;
    p->lane = lane;
    p->state = P_IDLE;
    if (ftc__net_makes_connection(b, b->tp->rank, rank)) ftc__net_conn_start(b, p);
  }
  if (ftc__net_makes_connection(b, rank, b->tp->rank)) b->listens = 1;
}

/* A repair's handshake is under way: this rank sent a hello (the peer may
 * have answered it and taken the socket), or a pair has some of its
 * sockets and not all (the peer may have all of its own). Abandoned there,
 * the peer would hold a pair that this rank closes. */
static int repair_engaged(const boot_t *b) {
  const ftc__tcp_t *tp = b->tp;
  for (int r = 0; r < tp->size; r++) {
    if (r == tp->rank) continue;
    int d = ftc__net_lanes_of(tp, r);
    if (d > 0 && d < tp->cfg.sockets) return 1;
    for (int lane = 0; lane < tp->cfg.sockets; lane++)
      if (b->conn[2 * r + lane].state == P_WAIT_ACK) return 1;
  }
  return 0;
}

/* Wait until every pair of b's view is connected (b->connected counts the
 * sockets), driving the handshakes; while it waits, a peer's ADOPT that
 * comes on a pair it adopted is answered and read, and a pair whose peer
 * did not adopt it is connected anew. */
ftc_status_t ftc__net_boot_loop(boot_t *b, int listen_fd, int64_t deadline) {
  ftc__tcp_t *tp = b->tp;
  const int need = tp->cfg.sockets * (tp->size - 1);
  int npfd_max = 2 + 3 * tp->size + MAX_PENDING_ACCEPTS;
  struct pollfd *pfd = ftc__calloc((size_t)npfd_max, sizeof(*pfd));
  pend_t **owner = ftc__calloc((size_t)npfd_max, sizeof(*owner));
  ftc_status_t st = FTC_OK;
  if (!pfd || !owner) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "allocating the bootstrap poll set");
    goto out_free;
  }
  while (b->connected < need || b->fatal != FTC_OK) {
    int64_t now = ftc__now_ns();
    if (b->fatal != FTC_OK) {
      /* Before giving up, finish the handshake with every peer, connected
       * or refused: each one then hears of the difference from this rank
       * too, rather than running into its connect timeout. */
      if (!b->fatal_until) b->fatal_until = deadline < now + SETTLE_NS ? deadline : now + SETTLE_NS;
      if (now >= b->fatal_until || all_settled(b)) {
        st = ftc__error(b->fatal, "%s", b->fatal_why);
        goto out_free;
      }
    }
    /* The peers that matter are moving to a newer epoch (a second joiner
     * was admitted, another member failed): those already there refuse
     * this epoch's hellos, so waiting for them would only run out the
     * connect timeout. Give up at once; the caller takes the newer one. */
    uint64_t latest = ftc__member_latest_epoch(tp->cfg.member);
    if (latest > b->view->epoch && b->fatal != FTC_OK) {
      st = ftc__error(b->fatal, "%s", b->fatal_why); /* a later epoch would not change it */
      goto out_free;
    }
    if (latest > b->view->epoch) {
      st = ftc__error(FTC_ERR_REVOKED,
                      "rank %d: epoch %llu was superseded by epoch %llu while connecting its "
                      "data plane (%d of %d connections made); moving on to the newer epoch",
                      tp->rank, (unsigned long long)b->view->epoch, (unsigned long long)latest,
                      b->connected, need);
      goto out_free;
    }
    if (now >= deadline && b->repair && b->hold_until > deadline && repair_engaged(b))
      deadline = b->hold_until; /* (a short try that found its peer at work: finish with it) */
    if (now >= deadline) {
      char missing[256] = "";
      size_t len = 0;
      for (int r = 0; r < tp->size && len < sizeof(missing) - 16; r++)
        if (r != tp->rank && (tp->peers[r].fd < 0 || tp->peers[r].sfd < 0))
          len += (size_t)snprintf(missing + len, sizeof(missing) - len, "%s%d", len ? ", " : "", r);
      st = ftc__error(FTC_ERR_TIMEOUT,
                      "rank %d of epoch %llu: no data-plane connection with rank(s) %s within "
                      "FTCOMM_CONNECT_TIMEOUT_MS=%d%s%s",
                      tp->rank, (unsigned long long)b->view->epoch, missing,
                      tp->cfg.connect_timeout_ms, b->last_problem[0] ? "; last problem: " : "",
                      b->last_problem);
      goto out_free;
    }
    int64_t wake = b->fatal_until ? b->fatal_until : deadline;
    int n = 0;
    if (b->listens && ftc__net_acc_slot(b)) {
      pfd[n] = (struct pollfd){listen_fd, POLLIN, 0};
      owner[n++] = NULL;
    }
    for (int i = 0; i < 2 * tp->size; i++) {
      pend_t *p = &b->conn[i];
      if (p->fd < 0 && p->state != P_RETRY) continue;
      if (p->state == P_RETRY) {
        if (p->retry_at <= now)
          ftc__net_conn_start(b, p);
        else if (p->retry_at < wake)
          wake = p->retry_at;
      }
      if (ftc__net_pend_waits(p)) {
        pfd[n] = (struct pollfd){p->fd, p->state == P_CONNECTING ? POLLOUT : POLLIN, 0};
        owner[n++] = p;
      } else if (p->state == P_RETRY && p->retry_at < wake) {
        wake = p->retry_at;
      }
    }
    for (int i = 0; i < b->nacc; i++) {
      if (b->acc[i].state != P_WAIT_HELLO) continue;
      pfd[n] = (struct pollfd){b->acc[i].fd, POLLIN, 0};
      owner[n++] = &b->acc[i];
    }
    /* Then the unconfirmed pairs: an ADOPT on one (a peer's run waits for
     * this rank's) or its end (a peer that did not adopt the pair). A pair
     * nobody uses stays quiet, its ADOPTs owed. */
    const int nboot = n;
    for (int r = 0; tp->unconfirmed && r < tp->size; r++)
      if (tp->peers[r].unconfirmed)
        pfd[n++] = (struct pollfd){ftc__tcp_adopt_fd(tp, r), POLLIN | POLLRDHUP, 0};
    /* A repair runs inside a run: the revoke of its epoch wakes it, and so
     * does a peer's end that the idle watch saw (ftc__tcp_mark_ended). */
    int ik = -1;
    if (b->repair && tp->cfg.intr_fd) ik = n, pfd[n++] = (struct pollfd){*tp->cfg.intr_fd, POLLIN, 0};
    int64_t wait_ns = wake - now;
    int timeout = wait_ns <= 0 ? 0 : (int)((wait_ns + 999999) / 1000000);
    /* Short sleeps: a recovery interrupts a stale attempt through the flag. */
    if (timeout > 50) timeout = 50;
    int rc = poll(pfd, (nfds_t)n, timeout);
    if (rc < 0) {
      if (errno == EINTR) continue;
      st = ftc__error(FTC_ERR_SYSTEM, "poll during the data-plane bootstrap: %s", strerror(errno));
      goto out_free;
    }
    if (tp->cfg.interrupt && __atomic_load_n(tp->cfg.interrupt, __ATOMIC_ACQUIRE)) {
      st = ftc__error((ftc_status_t)__atomic_load_n(tp->cfg.interrupt, __ATOMIC_ACQUIRE),
                      "the communicator was stopped while connecting to its peers");
      goto out_free;
    }
    if (ik >= 0 && (pfd[ik].revents & POLLIN)) {
      int gone = __atomic_load_n(&tp->ended_peer, __ATOMIC_ACQUIRE);
      if (gone >= 0) {
        __atomic_store_n(&tp->failed_peer, gone, __ATOMIC_RELEASE);
        st = ftc__error(FTC_ERR_PEER_LOST, "rank %d closed its connection", gone);
        goto out_free;
      }
      uint64_t v; /* left over from an older epoch (as in a run: xfer.c) */
      ssize_t rd = read(*tp->cfg.intr_fd, &v, sizeof(v));
      (void)rd;
    }
    for (int i = 0; i < nboot; i++) {
      /* An event may have closed a later entry's handshake: skip what is no
       * longer waited on. */
      if (!pfd[i].revents || (owner[i] && owner[i]->fd != pfd[i].fd)) continue;
      ftc__net_dispatch(b, listen_fd, owner[i], pfd[i].revents);
    }
    for (int r = 0, i = nboot; r < tp->size && i < n; r++) {
      if (!tp->peers[r].unconfirmed || pfd[i].fd != ftc__tcp_adopt_fd(tp, r)) continue;
      /* An ADOPT: the peer's run uses the pair and waits for this rank's
       * (as a run answers one, xfer.c); the end: it did not adopt it. */
      if (pfd[i++].revents && ftc__tcp_exchange(tp, r) < 0) unadopt(b, r);
    }
  }
out_free:
  for (int i = 0; i < b->nacc; i++)
    if (b->acc[i].fd >= 0 && b->acc[i].state == P_WAIT_HELLO) {
      if (st == FTC_OK) ftc__net_refuse(b, &b->acc[i], "did not complete the handshake");
      ftc__net_pend_close(&b->acc[i]);
    }
  for (int i = 0; i < 2 * tp->size; i++) ftc__net_pend_close(&b->conn[i]);
  ftc__free(owner);
  ftc__free(pfd);
  return st;
}

boot_t *ftc__net_boot_new(ftc__tcp_t *tp, const ftc__view_t *view, int spare, int early) {
  boot_t *b = ftc__calloc(1, sizeof(*b));
  if (!b) return NULL;
  b->tp = tp;
  b->view = view;
  b->spare = spare;
  b->early = early;
  b->conn = ftc__calloc(2 * (size_t)view->size, sizeof(*b->conn));
  b->differs = ftc__calloc((size_t)view->size, 1);
  b->owner = spare || early
                 ? ftc__calloc(1 + 2 * (size_t)view->size + MAX_PENDING_ACCEPTS, sizeof(*b->owner))
                 : NULL;
  if (!b->conn || !b->differs || ((spare || early) && !b->owner)) {
    ftc__free(b->conn);
    ftc__free(b->differs);
    ftc__free(b->owner);
    ftc__free(b);
    return NULL;
  }
  for (int i = 0; i < 2 * view->size; i++) b->conn[i].fd = -1;
  /* Reno while the host has a CPU per 2 of its ranks; more crowded, it is
   * slower than the system's default for mid-size messages
   * (docs/performance/tcp.md, "Congestion control within one host"). */
  b->reno_here = tp->cfg.congestion == FTC__TCP_CC_AUTO &&
                 ftc__tcp_host_ranks(view, view->my_rank) <= 2 * ftc__tcp_usable_cpus(&tp->cfg);
  return b;
}

void ftc__net_boot_free(boot_t *b) {
  if (!b) return;
  for (int i = 0; i < b->nacc; i++) ftc__net_pend_close(&b->acc[i]);
  for (int i = 0; i < 2 * b->tp->size; i++) ftc__net_pend_close(&b->conn[i]);
  ftc__free(b->conn);
  ftc__free(b->waited);
  ftc__free(b->differs);
  ftc__free(b->owner);
  ftc__free(b);
}

/* tp's configuration from cfg: a chunk of at least 4096 bytes, 1 or 2
 * sockets per pair, the OS's CPU count read once for the epoch (its hellos
 * and its crowded decision). A continued early bootstrap (continued) keeps
 * what its hellos already said: its sockets and CPU count. */
static void tp_configure(ftc__tcp_t *tp, const ftc__tcp_cfg_t *cfg, int continued) {
  int sockets = tp->cfg.sockets;
  long cpus = tp->cfg.os_cpus;
  tp->cfg = *cfg;
  if (tp->cfg.chunk_bytes < 4096) tp->cfg.chunk_bytes = 4096;
  if (continued) {
    tp->cfg.sockets = sockets;
    tp->cfg.os_cpus = cpus;
    return;
  }
  if (tp->cfg.sockets != 1) tp->cfg.sockets = 2;
  tp->cfg.os_cpus = 0;
  tp->cfg.os_cpus = ftc__tcp_ncpu(&tp->cfg);
}

/* A transport for view, not connected yet (NULL: out of memory). */
ftc__tcp_t *ftc__net_tp_new(const ftc__tcp_cfg_t *cfg, const ftc__view_t *view) {
  ftc__tcp_t *tp = ftc__calloc(1, sizeof(*tp));
  if (!tp) return NULL;
  tp_configure(tp, cfg, 0);
  tp->epoch = view->epoch;
  tp->rank = view->my_rank;
  tp->size = view->size;
  tp->peers = ftc__calloc((size_t)view->size, sizeof(*tp->peers));
  tp->pfd = ftc__calloc(2 * (size_t)view->size + 2, sizeof(*tp->pfd));
  tp->pidx = ftc__calloc(2 * (size_t)view->size, sizeof(*tp->pidx));
  tp->stage_cap = tp->cfg.chunk_bytes;
  tp->stage = ftc__malloc(tp->stage_cap);
  /* Streams: a collective's (at most 2 per peer, and the descriptor
   * ring's), or the send/recv messages in flight at once (the core's
   * FTC__P2P_CAP: 2 * size + 64). */
  tp->seg_cap = 4 * view->size + 72;
  tp->segs = ftc__calloc((size_t)tp->seg_cap, sizeof(*tp->segs));
  tp->stream_cap = 2 * view->size + 72;
  tp->streams = ftc__calloc((size_t)tp->stream_cap, sizeof(*tp->streams));
  tp->msg_done = ftc__calloc((size_t)tp->stream_cap, 1);
  tp->desc_sent = ftc__calloc(4 * (size_t)view->size, sizeof(*tp->desc_sent));
  if (tp->desc_sent) {
    tp->desc_recv = tp->desc_sent + view->size;
    tp->msg_sent = tp->desc_sent + 2 * view->size;
    tp->msg_recv = tp->desc_sent + 3 * view->size;
  }
  tp->view = *view;
  tp->view.backend_blob = NULL;
  tp->view.members = ftc__calloc((size_t)view->size, sizeof(*tp->view.members));
  tp->failed_peer = -1;
  tp->ended_peer = -1;
  tp->listen_fd = -1;
  for (int r = 0; tp->peers && r < view->size; r++) { /* before any ftc__tcp_destroy */
    tp->peers[r].fd = tp->peers[r].sfd = -1;
    tp->peers[r].spare_fd = tp->peers[r].spare_sfd = -1;
    tp->peers[r].kept_from = -1;
    tp->peers[r].member_id = view->members[r].member_id;
  }
  if (!tp->peers || !tp->pfd || !tp->pidx || !tp->stage || !tp->segs || !tp->streams ||
      !tp->desc_sent || !tp->msg_done || !tp->view.members) {
    ftc__tcp_destroy(tp);
    return NULL;
  }
  memcpy(tp->view.members, view->members, (size_t)view->size * sizeof(*view->members));
  return tp;
}

/* The host part of "host:port" or "[v6]:port": its length. */
static size_t addr_host_len(const char *addr) {
  const char *c = strrchr(addr, ':');
  if (!c || (addr[0] == '[' && c[-1] != ']')) return strlen(addr);
  return (size_t)(c - addr);
}

int ftc__tcp_same_host(const ftc__view_t *view, int a, int b) {
  if (a < 0 || b < 0 || a >= view->size || b >= view->size) return 0;
  const char *ha = view->members[a].addr, *hb = view->members[b].addr;
  size_t la = addr_host_len(ha);
  return la == addr_host_len(hb) && strncmp(ha, hb, la) == 0;
}

int ftc__tcp_host_ranks(const ftc__view_t *view, int r) {
  int n = 0;
  for (int q = 0; q < view->size; q++) n += ftc__tcp_same_host(view, r, q);
  return n;
}

/* Whether the transport t is for exactly that view (epoch, this rank, the
 * members in order): a bootstrap begun for it may be continued. */
int ftc__net_same_epoch_view(const ftc__tcp_t *t, const ftc__view_t *v) {
  if (!t || t->epoch != v->epoch || t->rank != v->my_rank || t->size != v->size) return 0;
  for (int r = 0; r < v->size; r++)
    if (t->peers[r].member_id != v->members[r].member_id) return 0;
  return 1;
}

int ftc__tcp_crowded(const ftc__view_t *view, long ncpu) {
  if (view->size < 2 || ncpu < 1 || view->size < 2 * ncpu) return 0;
  const char *h0 = view->members[0].addr;
  size_t l0 = addr_host_len(h0);
  for (int r = 1; r < view->size; r++) {
    const char *h = view->members[r].addr;
    if (addr_host_len(h) != l0 || strncmp(h, h0, l0) != 0) return 0;
  }
  return 1;
}

ftc_status_t ftc__tcp_connect(const ftc__tcp_cfg_t *cfg, const ftc__view_t *view, int listen_fd,
                              ftc__tcp_t *prev, ftc__tcp_t **out) {
  ftc_status_t st = FTC_OK;
  *out = NULL;
  if (view->my_rank < 0 || view->my_rank >= view->size)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "this process is not a member of epoch %llu",
                      (unsigned long long)view->epoch);
  ftc__tcp_t *tp = NULL;
  boot_t *b = NULL;
  ftc__tcp_t *early = prev ? prev->early : NULL;
  if (ftc__net_same_epoch_view(early, view)) {
    /* This epoch's bootstrap began early: continue it. */
    prev->early = NULL;
    tp = early;
    b = tp->spare_boot;
    tp->spare_boot = NULL;
    b->early = 0;
    tp_configure(tp, cfg, 1);
    tp->early_made = b->connected;
  } else if (!(tp = ftc__net_tp_new(cfg, view))) {
    return ftc__error(FTC_ERR_NO_MEMORY, "allocating the TCP transport for %d ranks", view->size);
  }
  if (view->size > 1) {
    if (!b && !(b = ftc__net_boot_new(tp, view, 0, 0))) {
      st = ftc__error(FTC_ERR_NO_MEMORY, "allocating the bootstrap state");
      goto out_destroy;
    }
    b->strict = prev == NULL; /* creating the communicator: nothing to keep running */
    tp->listen_fd = listen_fd;
    if (cfg->preacc) ftc__net_preacc_seed(b, cfg->preacc);
    st = bootstrap(b, listen_fd, prev, ftc__deadline_ns(cfg->connect_timeout_ms));
    ftc__net_boot_free(b);
    if (st != FTC_OK) goto out_destroy;
  } else {
    ftc__net_boot_free(b);
  }
  const long ncpu = ftc__tcp_usable_cpus(&tp->cfg); /* as in its hellos */
  tp->crowded = ftc__tcp_crowded(view, ncpu);
  if (tp->crowded && cfg->allreduce_algo == FTC_ALGO_AUTO && tp->rank == 0)
    FTC_INFO(FTC_SUB_NET,
             "epoch %llu: %d ranks on one host with %ld CPUs: allreduces below "
             "FTCOMM_RING_THRESHOLD use flat (FTCOMM_ALLREDUCE_ALGO)",
             (unsigned long long)tp->epoch, tp->size, ncpu);
  char how[128] = "";
  if (tp->kept && tp->early_made)
    snprintf(how, sizeof(how), " (%d socket(s) kept from epoch %llu, %d to new members made early)",
             tp->kept, (unsigned long long)prev->epoch, tp->early_made);
  else if (tp->kept)
    snprintf(how, sizeof(how), " (%d socket(s) kept from epoch %llu)", tp->kept,
             (unsigned long long)prev->epoch);
  else if (tp->early_made)
    snprintf(how, sizeof(how), " (%d socket(s) to new members made early)", tp->early_made);
  FTC_INFO(FTC_SUB_NET, "rank %d: data plane of epoch %llu connected to %d peers%s", tp->rank,
           (unsigned long long)tp->epoch, tp->size - 1, how);
  *out = tp;
  return FTC_OK;

out_destroy:
  give_back_live(tp, prev);
  ftc__tcp_destroy(tp);
  return st;
}

int ftc__tcp_adopted(const ftc__tcp_t *tp) { return tp ? tp->adopted : 0; }

int ftc__tcp_kept(const ftc__tcp_t *tp) { return tp ? tp->kept : 0; }

void ftc__tcp_shutdown(ftc__tcp_t *tp) {
  if (!tp) return;
  __atomic_store_n(&tp->shut, 1, __ATOMIC_RELEASE);
  for (int r = 0; r < tp->size; r++) ftc__net_peer_shutdown(&tp->peers[r]);
}

void ftc__tcp_destroy(ftc__tcp_t *tp) {
  if (!tp) return;
  ftc__tcp_destroy(tp->early);
  ftc__net_boot_free(tp->spare_boot);
  if (tp->peers)
    for (int r = 0; r < tp->size; r++) {
      ftc__tcp_peer_t *p = &tp->peers[r];
      if (p->sfd >= 0 && p->sfd != p->fd) close(p->sfd);
      if (p->fd >= 0) close(p->fd);
      if (p->spare_sfd >= 0 && p->spare_sfd != p->spare_fd) close(p->spare_sfd);
      if (p->spare_fd >= 0) close(p->spare_fd);
    }
  ftc__free(tp->view.members);
  ftc__free(tp->peers);
  ftc__free(tp->pfd);
  ftc__free(tp->pidx);
  ftc__free(tp->stage);
  ftc__free(tp->scratch);
  ftc__free(tp->segs);
  ftc__free(tp->streams);
  ftc__free(tp->desc_sent);
  ftc__free(tp->msg_done);
  ftc__free(tp);
}

int ftc__tcp_failed_peer(const ftc__tcp_t *tp) {
  return tp ? __atomic_load_n(&tp->failed_peer, __ATOMIC_ACQUIRE) : -1;
}

void ftc__tcp_drop_peer(ftc__tcp_t *tp, int rank) {
  if (tp && rank >= 0 && rank < tp->size) ftc__net_peer_shutdown(&tp->peers[rank]);
}

void ftc__tcp_mark_ended(ftc__tcp_t *tp, int rank) {
  if (!tp || rank < 0 || rank >= tp->size) return;
  int none = -1;
  __atomic_compare_exchange_n(&tp->ended_peer, &none, rank, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  if (tp->cfg.intr_fd) {
    uint64_t one = 1;
    ssize_t w = write(*tp->cfg.intr_fd, &one, sizeof(one));
    (void)w;
  }
}

void ftc__tcp_note_failed_peer(ftc__tcp_t *tp, int rank) {
  if (tp) __atomic_store_n(&tp->failed_peer, rank, __ATOMIC_RELEASE);
}

int ftc__tcp_peer_left(const ftc__tcp_t *tp, int rank) {
  return tp && rank >= 0 && rank < tp->size && __atomic_load_n(&tp->peers[rank].left, __ATOMIC_ACQUIRE);
}

void ftc__tcp_mark_left(ftc__tcp_t *tp, int rank) {
  if (tp && rank >= 0 && rank < tp->size) __atomic_store_n(&tp->peers[rank].left, 1, __ATOMIC_RELEASE);
}

void ftc__tcp_say_goodbye(ftc__tcp_t *tp) {
  static const unsigned char bye = FTC__TCP_GOODBYE;
  if (!tp) return;
  for (int r = 0; r < tp->size; r++)
    if (tp->peers[r].sfd >= 0) {
      /* An unconfirmed pair's ADOPT first, if still owed: the peer reads
       * the pair as confirmed, then the goodbye, as on any other pair. */
      if (r != tp->rank && ftc__tcp_pay(tp, r) < 0) continue;
      /* After everything this rank sent on each socket it sends on. */
      ssize_t n = send(tp->peers[r].sfd, &bye, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      int x = r != tp->rank ? ftc__tcp_shared_fd(tp, r) : -1;
      if (x >= 0 && x != tp->peers[r].sfd) n = send(x, &bye, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      (void)n;
    }
}

/* Whether the idle watch may take the pair with `rank`'s sockets: neither
 * unconfirmed nor broken. Loaded before and after its sockets: a pair
 * whose sockets a run closes (drop_pair) is marked first, and one given
 * back unconfirmed (give_back_live) is marked before its sockets come. */
static int watchable(const ftc__tcp_t *tp, int rank) {
  return !ftc__tcp_unconfirmed(tp, rank) && !__atomic_load_n(&tp->peers[rank].broken, __ATOMIC_ACQUIRE);
}

int ftc__tcp_peer_fds(const ftc__tcp_t *tp, int *fds, int *ranks, int max) {
  int n = 0;
  for (int r = 0; tp && r < tp->size && n < max; r++) {
    if (!watchable(tp, r)) continue;
    int fd = __atomic_load_n(&tp->peers[r].fd, __ATOMIC_ACQUIRE);
    if (fd < 0 || !watchable(tp, r)) continue;
    fds[n] = fd;
    ranks[n++] = r;
  }
  /* Then the lower ranks' shared sockets, on which they also send. */
  for (int r = 0; tp && r < tp->rank && n < max; r++) {
    if (!watchable(tp, r)) continue;
    int fd = __atomic_load_n(&tp->peers[r].fd, __ATOMIC_ACQUIRE);
    int x = __atomic_load_n(tp->rank < r ? &tp->peers[r].fd : &tp->peers[r].sfd, __ATOMIC_ACQUIRE);
    if (x < 0 || x == fd || !watchable(tp, r)) continue;
    fds[n] = x;
    ranks[n++] = r;
  }
  return n;
}

ftc_status_t ftc__tcp_scratch(ftc__tcp_t *tp, size_t n, char **out) {
  if (n > tp->scratch_cap) {
    char *p = ftc__malloc(n);
    if (!p) return ftc__error(FTC_ERR_NO_MEMORY, "allocating %zu bytes of collective scratch", n);
    ftc__free(tp->scratch);
    tp->scratch = p;
    tp->scratch_cap = n;
  }
  *out = tp->scratch;
  return FTC_OK;
}
