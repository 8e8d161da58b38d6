/*
 * xfer.c - the stream engine: progresses a run's send and receive streams
 * together over nonblocking sockets, so sends and receives to different
 * peers (and both directions with one peer) move at once and two ranks that
 * send each other large messages cannot deadlock. Plain receives land
 * straight in the destination (zero copy); reducing receives go through one
 * staging chunk and are reduced chunk by chunk as they arrive, which is what
 * a dependent send forwards. The engine busy-polls for FTCOMM_SPIN_US after
 * the last progress, then sleeps in poll() until data, the deadline, a
 * shutdown of the sockets by ftc__tcp_shutdown(), or the interrupt eventfd
 * (cfg.intr_fd).
 */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/reduce.h"
#include "ftc_error.h"
#include "ftc_time.h"
#include "tcp/tcp_int.h"

#define POLL_CAP_MS 500

static inline size_t stream_allowed(const ftc__stream_t *s, const ftc__stream_t *all) {
  if (!s->send || s->dep < 0) return s->total;
  size_t a = s->lag + all[s->dep].done;
  return a < s->total ? a : s->total;
}

static inline void skip_empty(ftc__stream_t *s) {
  while (s->cur < s->nseg && s->off == s->segs[s->cur].len) {
    s->cur++;
    s->off = 0;
  }
}

/* Descriptor and data up to this size move through a copy on the stack. */
#define BOUNCE (FTC__DESC_SIZE + 1024)

/* n bytes moved by one call that carried the descriptor's hlen - hoff
 * remaining bytes (head) ahead of the data: the descriptor's part first. */
static void desc_moved(ftc__stream_t *s, size_t n, size_t head) {
  size_t h = n < head ? n : head;
  s->hoff = (unsigned char)(s->hoff + h);
  s->off += n - h;
  s->done += n - h;
}

/* The descriptor ahead of a stream's data, with as much of the data as
 * may go (one system call for both, as for the data alone). Returns as
 * pump_send. */
static int send_desc(ftc__stream_t *s, size_t allowed, int fd, int *err) {
  struct iovec iov[2] = {{s->desc + s->hoff, (size_t)(s->hlen - s->hoff)}, {NULL, 0}};
  int niov = 1;
  skip_empty(s);
  if (s->done < allowed && s->cur < s->nseg) {
    const ftc__seg_t *g = &s->segs[s->cur];
    size_t want = g->len - s->off;
    if (want > allowed - s->done) want = allowed - s->done;
    iov[1] = (struct iovec){(void *)(g->src + s->off), want};
    niov = 2;
  }
  ssize_t n;
  if (iov[0].iov_len + iov[1].iov_len <= BOUNCE) {
    /* Small: one contiguous send (sendmsg's iovec import costs more than
     * the copy, measured on the 8-byte allreduce). */
    char b[BOUNCE];
    memcpy(b, iov[0].iov_base, iov[0].iov_len);
    if (niov == 2) memcpy(b + iov[0].iov_len, iov[1].iov_base, iov[1].iov_len);
    do n = send(fd, b, iov[0].iov_len + iov[1].iov_len, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
  } else {
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
    do n = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    *err = errno;
    return -1;
  }
  desc_moved(s, (size_t)n, iov[0].iov_len);
  return 1;
}

/* Returns 1 if bytes moved, 0 if the socket would block, -1 on a broken
 * connection (errno-like code in *err, 0 for an orderly close). */
static int pump_send(ftc__tcp_t *tp, ftc__stream_t *s, const ftc__stream_t *all, int *err) {
  int moved = 0;
  int fd = ftc__tcp_stream_fd(tp, s->peer, 1);
  size_t allowed = stream_allowed(s, all);
  if (s->hoff < s->hlen) {
    int r = send_desc(s, allowed, fd, err);
    if (r <= 0) return r;
    if (s->hoff < s->hlen) return 1;
    moved = 1;
  }
  while (s->done < allowed) {
    skip_empty(s);
    const ftc__seg_t *g = &s->segs[s->cur];
    size_t want = g->len - s->off;
    if (want > allowed - s->done) want = allowed - s->done;
    ssize_t n = send(fd, g->src + s->off, want, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      *err = errno;
      return -1;
    }
    s->off += (size_t)n;
    s->done += (size_t)n;
    moved = 1;
  }
  skip_empty(s);
  return moved;
}

/* Receive the descriptor ahead of a stream's data (with the first plain
 * segment's bytes, in one system call) and check it against the expected
 * one. Returns as pump_recv, and -2 when it differs. */
static int recv_desc(ftc__stream_t *s, int fd, int *err) {
  struct iovec iov[2] = {{s->din + s->hoff, (size_t)(s->hlen - s->hoff)}, {NULL, 0}};
  int niov = 1;
  skip_empty(s);
  if (s->done < s->total && !s->segs[s->cur].reduce) {
    const ftc__seg_t *g = &s->segs[s->cur];
    iov[1] = (struct iovec){g->dst + s->off, g->len - s->off};
    niov = 2;
  }
  ssize_t n;
  if (iov[0].iov_len + iov[1].iov_len <= BOUNCE) {
    char b[BOUNCE]; /* small: one contiguous receive, as send_desc */
    do n = recv(fd, b, iov[0].iov_len + iov[1].iov_len, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
      size_t h = (size_t)n < iov[0].iov_len ? (size_t)n : iov[0].iov_len;
      memcpy(iov[0].iov_base, b, h);
      if ((size_t)n > h) memcpy(iov[1].iov_base, b + h, (size_t)n - h);
    }
  } else {
    do n = readv(fd, iov, niov);
    while (n < 0 && errno == EINTR);
  }
  if (n == 0) {
    *err = 0;
    return -1;
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    *err = errno;
    return -1;
  }
  desc_moved(s, (size_t)n, iov[0].iov_len);
  if (s->hoff == s->hlen && memcmp(s->din, s->desc, FTC__DESC_SIZE) != 0) return -2;
  return 1;
}

static int pump_recv(ftc__tcp_t *tp, ftc__stream_t *s, const ftc__red_t *red, int *err) {
  int moved = 0;
  int fd = ftc__tcp_stream_fd(tp, s->peer, 0);
  if (s->hoff < s->hlen) {
    int r = recv_desc(s, fd, err);
    if (r <= 0) return r;
    if (s->hoff < s->hlen) return 1;
    moved = 1;
  }
  while (s->done < s->total) {
    skip_empty(s);
    const ftc__seg_t *g = &s->segs[s->cur];
    ssize_t n;
    if (!g->reduce) {
      n = recv(fd, g->dst + s->off, g->len - s->off, MSG_DONTWAIT);
      if (n > 0) {
        s->off += (size_t)n;
        s->done += (size_t)n;
      }
    } else {
      size_t piece = g->len - s->off;
      if (piece > tp->stage_cap) piece = tp->stage_cap;
      n = recv(fd, tp->stage + s->fill, piece - s->fill, MSG_DONTWAIT);
      if (n > 0) {
        s->fill += (size_t)n;
        if (s->fill == piece) {
          size_t cnt = piece / red->esize;
          ftc__reduce(g->dst + s->off, g->src + s->off, tp->stage, cnt, red->dtype, red->op);
          if (g->finish && red->op == FTC_AVG)
            ftc__reduce_avg_finish(g->dst + s->off, cnt, red->dtype, red->nranks);
          s->off += piece;
          s->done += piece;
          s->fill = 0;
        }
      }
    }
    if (n > 0) {
      moved = 1;
      continue;
    }
    if (n == 0) {
      *err = 0;
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    *err = errno;
    return -1;
  }
  skip_empty(s);
  return moved;
}

static ftc_status_t broken(ftc__tcp_t *tp, const ftc__stream_t *s, int err) {
  int iv = tp->cfg.interrupt ? __atomic_load_n(tp->cfg.interrupt, __ATOMIC_ACQUIRE) : 0;
  if (iv) return ftc__error((ftc_status_t)iv, "the communicator was stopped: %s", ftc_strerror((ftc_status_t)iv));
  __atomic_store_n(&tp->failed_peer, s->peer, __ATOMIC_RELEASE);
  if (err == 0)
    return ftc__error(FTC_ERR_PEER_LOST, "rank %d closed its connection (%s %zu of %zu bytes)",
                      s->peer, s->send ? "sent" : "received", s->done, s->total);
  return ftc__error(FTC_ERR_PEER_LOST, "connection to rank %d broke: %s (%s %zu of %zu bytes)",
                    s->peer, strerror(err), s->send ? "sent" : "received", s->done, s->total);
}

/* The idle watch saw `peer`'s connection end (ftc__tcp_mark_ended). */
static ftc_status_t ended_peer(ftc__tcp_t *tp, int peer) {
  __atomic_store_n(&tp->failed_peer, peer, __ATOMIC_RELEASE);
  return ftc__error(FTC_ERR_PEER_LOST, "rank %d closed its connection", peer);
}

/* How long a run tries at a time to connect anew a pair it does not use. */
#define REPAIR_SLICE_NS (20 * 1000000LL)

/* A lazily adopted pair (net_adopt.c): send this end's ADOPT if it is owed, read
 * the peer's if it has come, or connect the pair anew when the peer did not
 * adopt it. FTC_OK also while the peer's ADOPT is on its way (the pair
 * stays unconfirmed). A pair the run needs is connected within the run's
 * deadline and FTCOMM_CONNECT_TIMEOUT_MS. One it does not need is not
 * waited on (try 0): its end is a failure when the peer's process is gone
 * (a crash, seen at once), else it only marks the pair broken (most often
 * its peer moved on to a newer epoch, as every rank does at a failure, and
 * a try would hold this run while it should see the failure); a run that
 * stalls tries a broken pair for REPAIR_SLICE_NS at a time (try 1: the
 * peer may be waiting for it in its bootstrap, having lacked a spare). */
static ftc_status_t settle_pair(ftc__tcp_t *tp, int peer, int64_t deadline_ns, int needed,
                                int try) {
  if (!tp->peers[peer].broken) {
    if (ftc__tcp_exchange(tp, peer) >= 0) return FTC_OK;
    if (!needed && !try) return ftc__tcp_break(tp, peer);
  }
  int64_t bound = ftc__deadline_ns(tp->cfg.connect_timeout_ms);
  int64_t hold = deadline_ns < bound ? deadline_ns : bound, slice = ftc__now_ns() + REPAIR_SLICE_NS;
  ftc_status_t st = ftc__tcp_reconnect(tp, peer, needed || hold < slice ? hold : slice, hold);
  if (st == FTC_ERR_TIMEOUT && !needed) return FTC_OK; /* (broken: ftc__tcp_reconnect) */
  if (st == FTC_ERR_TIMEOUT) __atomic_store_n(&tp->failed_peer, peer, __ATOMIC_RELEASE);
  return st;
}

void ftc__xfer_stream_init(ftc__stream_t *s) {
  s->cur = 0, s->off = 0, s->done = 0, s->fill = 0, s->total = 0, s->hoff = 0;
  for (int k = 0; k < s->nseg; k++) s->total += s->segs[k].len;
}

/* The running collective's descriptor on the stream to (send) or from peer. */
static inline void coll_desc(const ftc__tcp_t *tp, int peer, int send, uint8_t *out) {
  if (tp->desc_op->coll == FTC__COLL_ALLTOALLV)
    ftc__desc_of(tp, tp->desc_op, tp->coll_seq, peer, send, out);
  else
    memcpy(out, tp->desc_cur, FTC__DESC_SIZE);
}

/* A stream of the descriptor alone, to or from `peer`. */
static void desc_only(ftc__tcp_t *tp, ftc__stream_t *s, int peer, int send) {
  memset(s, 0, sizeof(*s));
  s->peer = peer, s->send = send, s->dep = -1, s->after = -1;
  (send ? tp->desc_sent : tp->desc_recv)[peer] = tp->coll_seq;
  s->hlen = FTC__DESC_SIZE;
  coll_desc(tp, peer, send, s->desc);
}

/* Lead the first stream of the collective to or from each peer with the
 * descriptor. The ring of descriptors (tp->desc_ring, algo.c): a first run
 * that moves nothing between this rank and the next (or the previous) rank
 * of the ring carries the descriptor alone, so that run compares this
 * rank's call with both neighbours', whatever the algorithm moves, and a
 * rank whose call differs is seen at once, not after the ranks waiting for
 * it have timed out. */
static int attach_descs(ftc__tcp_t *tp, ftc__stream_t *st, int n) {
  const uint64_t seq = tp->coll_seq;
  const int next = (tp->rank + 1) % tp->size, prev = (tp->rank + tp->size - 1) % tp->size;
  for (int i = 0; i < n; i++) {
    ftc__stream_t *s = &st[i];
    uint64_t *mark = s->send ? &tp->desc_sent[s->peer] : &tp->desc_recv[s->peer];
    if (*mark == seq) continue;
    *mark = seq;
    s->hlen = FTC__DESC_SIZE;
    coll_desc(tp, s->peer, s->send, s->desc);
  }
  if (st != tp->streams || !tp->desc_ring) return n;
  if (tp->desc_sent[next] != seq && n < tp->stream_cap) desc_only(tp, &st[n++], next, 1);
  if (tp->desc_recv[prev] != seq && n < tp->stream_cap) desc_only(tp, &st[n++], prev, 0);
  return n;
}

ftc_status_t ftc__xfer_run(ftc__tcp_t *tp, ftc__stream_t *st, int n, const ftc__red_t *red,
                           int64_t deadline_ns) {
  return ftc__xfer_run_more(tp, st, n, red, deadline_ns, NULL);
}

ftc_status_t ftc__xfer_run_more(ftc__tcp_t *tp, ftc__stream_t *st, int n, const ftc__red_t *red,
                                int64_t deadline_ns, const ftc__xfer_more_t *more) {
  int pending = 0;
  if (tp->desc_op && tp->size > 1) n = attach_descs(tp, st, n);
  for (int i = 0; i < n; i++) {
    ftc__xfer_stream_init(&st[i]);
    int bytes = st[i].total || st[i].hlen;
    if (bytes) pending++;
    if (bytes && __atomic_load_n(&tp->peers[st[i].peer].left, __ATOMIC_ACQUIRE)) {
      __atomic_store_n(&tp->failed_peer, st[i].peer, __ATOMIC_RELEASE);
      return ftc__error(FTC_ERR_PEER_LOST, "rank %d left the communicator (it was destroyed)",
                        st[i].peer);
    }
  }
  if (!pending && !more) return FTC_OK;
  int ended = __atomic_load_n(&tp->ended_peer, __ATOMIC_ACQUIRE);
  if (ended >= 0) return ended_peer(tp, ended);
  const int64_t spin_ns = (int64_t)tp->cfg.spin_us * 1000;
  int settle_due = 0; /* some unconfirmed pair's socket had an event (peers[].settle_due) */
  int stalled = 0;    /* the last poll timed out with a pair broken */
  int64_t spin_until = ftc__now_ns() + spin_ns;
  for (;;) {
    int moved = 0, err = 0;
    if (more) n = more->fn(more->ctx, st, n);
    pending = 0;
    for (int i = 0; i < n; i++) {
      ftc__stream_t *s = &st[i];
      if (ftc__stream_done(s)) continue;
      if (s->after >= 0 && !ftc__stream_done(&st[s->after])) { /* a message ahead of it */
        pending++;
        continue;
      }
      /* No byte moves on a pair before its peer's ADOPT is read. */
      if (__builtin_expect(tp->unconfirmed || tp->broken, 0) &&
          (tp->peers[s->peer].unconfirmed || tp->peers[s->peer].broken)) {
        ftc_status_t cs = settle_pair(tp, s->peer, deadline_ns, 1, 1);
        if (cs != FTC_OK) return cs;
        if (tp->peers[s->peer].unconfirmed) {
          pending++;
          continue;
        }
      }
      int r = s->send ? pump_send(tp, s, st, &err) : pump_recv(tp, s, red, &err);
      if (__builtin_expect(r == -2, 0)) {
        /* The descriptors this run still owes its peers go first (best
         * effort), so that they learn the mismatch too rather than only
         * this rank's end. */
        for (int k = 0; k < n; k++)
          if (st[k].send && st[k].hoff < st[k].hlen && !tp->peers[st[k].peer].unconfirmed &&
              (st[k].after < 0 || ftc__stream_done(&st[st[k].after])))
            send_desc(&st[k], st[k].done, ftc__tcp_stream_fd(tp, st[k].peer, 1), &err);
        return ftc__desc_mismatch(tp, s->peer, s->din, s->desc);
      }
      if (r < 0) return broken(tp, s, err);
      moved |= r;
      if (!ftc__stream_done(s)) pending++;
    }
    if (!pending) return FTC_OK;
    for (int r = 0; settle_due && r < tp->size; r++) {
      if (!tp->peers[r].settle_due) continue;
      tp->peers[r].settle_due = 0;
      ftc_status_t cs = settle_pair(tp, r, deadline_ns, 0, 0);
      if (cs != FTC_OK) return cs;
    }
    settle_due = 0;
    if (stalled) {
      /* Nothing came for a while with a pair broken: try it (a peer may
       * wait in its bootstrap for this rank to connect it). */
      stalled = 0;
      for (int r = 0; tp->broken && r < tp->size; r++) {
        if (!tp->peers[r].broken) continue;
        ftc_status_t cs = settle_pair(tp, r, deadline_ns, 0, 1);
        if (cs != FTC_OK) return cs;
      }
    }
    if (tp->cfg.interrupt) {
      int iv = __atomic_load_n(tp->cfg.interrupt, __ATOMIC_ACQUIRE);
      if (iv)
        return ftc__error((ftc_status_t)iv, "the communicator was stopped: %s",
                          ftc_strerror((ftc_status_t)iv));
    }
    int64_t now = ftc__now_ns();
    if (now >= deadline_ns) {
      for (int i = 0; i < n; i++)
        if (!ftc__stream_done(&st[i])) {
          __atomic_store_n(&tp->failed_peer, st[i].peer, __ATOMIC_RELEASE);
          return ftc__error(FTC_ERR_TIMEOUT, "timed out waiting for rank %d (%s %zu of %zu bytes)",
                            st[i].peer, st[i].send ? "sent" : "received", st[i].done, st[i].total);
        }
    }
    if (moved) {
      spin_until = now + spin_ns;
      continue;
    }
    if (now < spin_until) {
      /* Yield rather than pause: on a machine with more ranks than idle
       * cores, the peer this rank waits for may need this core; with a
       * core per rank the yield costs nothing (docs/performance/tcp.md,
       * "The spin's yield"). */
      sched_yield();
      continue;
    }
    int np = 0;
    for (int i = 0; i < n; i++) tp->pidx[2 * st[i].peer + st[i].send] = -1;
    for (int i = 0; i < n; i++) {
      ftc__stream_t *s = &st[i];
      if (ftc__stream_done(s) || tp->peers[s->peer].unconfirmed) continue;
      if (s->after >= 0 && !ftc__stream_done(&st[s->after])) continue;
      short ev;
      if (s->send) {
        if (stream_allowed(s, st) == s->done && s->hoff == s->hlen)
          continue; /* waiting on its receive stream */
        ev = POLLOUT;
      } else {
        ev = POLLIN;
      }
      int *slot = &tp->pidx[2 * s->peer + s->send];
      if (*slot < 0) {
        int fd = ftc__tcp_stream_fd(tp, s->peer, s->send), k;
        for (k = 0; k < np && tp->pfd[k].fd != fd; k++) continue; /* one socket both ways */
        if (k == np) tp->pfd[np++] = (struct pollfd){fd, 0, 0};
        *slot = k;
      }
      int k = *slot;
      tp->pfd[k].events |= ev;
    }
    /* Every unconfirmed pair, for its peer's ADOPT and its end, the run's
     * and the others: a peer that did not adopt its pair with this rank
     * closed it and waits for it to be connected anew, and a peer whose run
     * uses the pair waits for this rank's ADOPT (its blocking send to this
     * rank, while this rank's blocking send goes to a third: a ring of
     * them), neither of which may wait for this run to end. A pair no run
     * of either end uses stays quiet. */
    int uk = np;
    for (int r = 0; tp->unconfirmed && r < tp->size; r++)
      if (tp->peers[r].unconfirmed)
        tp->pfd[np++] = (struct pollfd){ftc__tcp_adopt_fd(tp, r), POLLIN | POLLRDHUP, 0};
    const int ue = np;
    int wk = -1, ik = -1;
    if (more && more->wake_fd >= 0) wk = np, tp->pfd[np++] = (struct pollfd){more->wake_fd, POLLIN, 0};
    if (tp->cfg.intr_fd) ik = np, tp->pfd[np++] = (struct pollfd){*tp->cfg.intr_fd, POLLIN, 0};
    int64_t left = deadline_ns - now;
    int timeout = left / 1000000 >= POLL_CAP_MS ? POLL_CAP_MS : (int)((left + 999999) / 1000000);
    if (tp->broken && timeout > REPAIR_SLICE_NS / 1000000) timeout = REPAIR_SLICE_NS / 1000000;
    int rc = poll(tp->pfd, (nfds_t)np, timeout);
    if (rc < 0 && errno != EINTR)
      return ftc__error(FTC_ERR_SYSTEM, "poll on the data plane: %s", strerror(errno));
    if (rc == 0 && tp->broken) stalled = 1;
    if (rc <= 0) continue;
    /* The interrupt eventfd stays readable until the next epoch's connect
     * drains it (every run of the failed epoch must see it); one left over
     * from an older epoch is drained here. The status (and a peer's end
     * seen by the idle watch) is checked again before the next poll: one
     * stored after these loads is not missed. */
    if (ik >= 0 && (tp->pfd[ik].revents & POLLIN) &&
        !(tp->cfg.interrupt && __atomic_load_n(tp->cfg.interrupt, __ATOMIC_ACQUIRE))) {
      int gone = __atomic_load_n(&tp->ended_peer, __ATOMIC_ACQUIRE);
      if (gone >= 0) return ended_peer(tp, gone);
      uint64_t v;
      ssize_t r = read(*tp->cfg.intr_fd, &v, sizeof(v));
      (void)r;
    }
    /* Settled after the streams had their turn (the next round): a run
     * that can complete does, whatever happened on a pair it does not use
     * (a peer at the end of the job closes it); a pair it does not use whose
     * peer's ADOPT came is paid and confirmed there (settle_pair). */
    for (int r = 0, k = uk; k < ue && r < tp->size; r++) {
      if (!tp->peers[r].unconfirmed || tp->pfd[k].fd != ftc__tcp_adopt_fd(tp, r)) continue;
      if (tp->pfd[k++].revents) tp->peers[r].settle_due = 1, settle_due = 1;
    }
    if (wk >= 0 && (tp->pfd[wk].revents & POLLIN)) {
      uint64_t v;
      ssize_t r = read(more->wake_fd, &v, sizeof(v));
      (void)r;
    }
    /* An error or hangup on a socket we only send on (a receive would see it
     * as end of file) means the peer is gone. */
    for (int i = 0; i < n; i++) {
      ftc__stream_t *s = &st[i];
      if (!s->send || ftc__stream_done(s)) continue;
      if (s->after >= 0 && !ftc__stream_done(&st[s->after])) continue;
      int k = tp->pidx[2 * s->peer + 1];
      if (k >= 0 && (tp->pfd[k].revents & (POLLERR | POLLHUP)) && !(tp->pfd[k].revents & POLLOUT)) {
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        getsockopt(ftc__tcp_stream_fd(tp, s->peer, 1), SOL_SOCKET, SO_ERROR, &soerr, &sl);
        return broken(tp, s, soerr);
      }
    }
    spin_until = ftc__now_ns() + spin_ns;
  }
}
