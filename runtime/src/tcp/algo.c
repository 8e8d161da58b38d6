/*
 * algo.c - the collective algorithms of the TCP backend, expressed as runs
 * of the stream engine (xfer.c):
 *   allreduce       recursive doubling with the non-power-of-two fold below
 *                   FTCOMM_RING_THRESHOLD bytes (a flat reduce to rank 0
 *                   and broadcast instead when the ranks share one host
 *                   with at least 2 per core: ftc__tcp_crowded); from there to
 *                   FTCOMM_HALVING_MAX recursive halving + doubling
 *                   (Rabenseifner) with the same fold; above it a ring
 *                   reduce-scatter + allgather as one pipelined stream per
 *                   neighbour (a block is forwarded chunk by chunk as soon
 *                   as it is reduced); FTCOMM_ALLREDUCE_ALGO or
 *                   ftc_comm_set_allreduce_algo force one for every size
 *   broadcast       binomial tree (small) or pipelined chain (large)
 *   reduce          binomial tree (small) or pipelined chain (large)
 *   allgather       ring, received straight into the result (zero copy)
 *   reduce_scatter  ring, reduced through the staging chunk
 *   alltoall        pairwise exchange with every pair in flight at once
 *   allgatherv      the allgather ring, a block of its own size per rank
 *   alltoallv       the alltoall exchange, a block of its own size per pair
 *   gather/scatter  every block straight from/to the root, all at once
 *   barrier         dissemination, one byte per round
 *   send/recv       one in-order byte stream per peer and direction
 * Every rank of a view runs the same sequence of runs, which is what keeps
 * the byte streams between two ranks aligned; a descriptor of the call
 * (ftc__stream_t.desc) leads the collective's bytes on each connection it
 * uses, and the ring of descriptors (each rank's to the next rank) makes
 * every pair of neighbours compare their calls, so ranks that called one
 * collective with different arguments fail it with FTC_ERR_MISMATCH instead
 * of reading each other's bytes as data. Every send/recv message carries
 * one too (its sequence per pair and direction, dtype and count).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/reduce.h"
#include "ftc_error.h"
#include "tcp/tcp_int.h"

static inline int mod(int a, int n) { return ((a % n) + n) % n; }

static inline size_t blk_off(size_t count, int n, int b) {
  size_t q = count / (size_t)n, r = count % (size_t)n;
  return (size_t)b * q + ((size_t)b < r ? (size_t)b : r);
}
static inline size_t blk_len(size_t count, int n, int b) {
  return count / (size_t)n + ((size_t)b < count % (size_t)n ? 1 : 0);
}

static ftc__stream_t *stream_at(ftc__tcp_t *tp, int i, int peer, int send, ftc__seg_t *segs,
                                int nseg) {
  ftc__stream_t *s = &tp->streams[i];
  memset(s, 0, sizeof(*s));
  s->peer = peer;
  s->send = send;
  s->segs = segs;
  s->nseg = nseg;
  s->dep = -1;
  s->after = -1;
  return s;
}

/* The algorithm an allreduce of op runs on tp. */
static ftc_algo_t allreduce_algo(const ftc__tcp_t *tp, const ftc__op_t *op) {
  const size_t bytes = op->count * ftc_dtype_size(op->dtype);
  ftc_algo_t a = op->algo;
  const ftc_algo_t small = tp->crowded ? FTC_ALGO_FLAT : FTC_ALGO_DOUBLING;
  if (a == FTC_ALGO_AUTO)
    a = op->count < (size_t)tp->size || bytes < tp->cfg.ring_threshold ? small
        : bytes < tp->cfg.halving_max                                  ? FTC_ALGO_HALVING
                                                                       : FTC_ALGO_RING;
  else if (op->count < (size_t)tp->size && (a == FTC_ALGO_RING || a == FTC_ALGO_HALVING))
    a = small; /* their blocks would be empty */
  return a;
}

/* ---- descriptors ---- */

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static int reduces(ftc__coll_t c) {
  return c == FTC__COLL_ALLREDUCE || c == FTC__COLL_REDUCE || c == FTC__COLL_REDUCE_SCATTER;
}
static int rooted(ftc__coll_t c) {
  return c == FTC__COLL_BROADCAST || c == FTC__COLL_REDUCE || c == FTC__COLL_GATHER ||
         c == FTC__COLL_SCATTER;
}

void ftc__desc_of(const ftc__tcp_t *tp, const ftc__op_t *op, uint64_t seq, int peer, int send,
                  uint8_t out[FTC__DESC_SIZE]) {
  (void)tp;
  ftc__coll_t c = op->coll == FTC__COLL_RECV ? FTC__COLL_SEND : op->coll;
  uint64_t count = op->count, extra = 0;
  if (c == FTC__COLL_BARRIER) count = 0;
  if (c == FTC__COLL_ALLGATHERV) { /* every rank passes the same counts */
    extra = 1469598103934665603ull;
    for (int q = 0; q < op->nranks; q++) extra = (extra ^ op->rcounts[q]) * 1099511628211ull;
  }
  if (c == FTC__COLL_ALLTOALLV) { /* each passes its own: this pair's block must agree */
    count = 0;
    extra = send ? op->scounts[peer] : op->rcounts[peer];
  }
  if (c == FTC__COLL_ALLREDUCE && tp) extra = (uint64_t)allreduce_algo(tp, op); /* set per call */
  out[0] = (uint8_t)c;
  out[1] = (uint8_t)op->dtype;
  out[2] = reduces(c) ? (uint8_t)op->op : 0xff;
  out[3] = FTC__DESC_TAG;
  put32(out + 4, (uint32_t)(rooted(c) ? op->peer : -1));
  put64(out + 8, seq);
  put64(out + 16, count);
  put64(out + 24, extra);
}

/* One side's call, as the mismatch error names it. */
static void desc_text(const uint8_t d[FTC__DESC_SIZE], int sender, char *buf, size_t len) {
  ftc__coll_t c = (ftc__coll_t)d[0];
  int root = (int32_t)get32(d + 4);
  unsigned long long seq = (unsigned long long)get64(d + 8), count = (unsigned long long)get64(d + 16),
                     extra = (unsigned long long)get64(d + 24);
  const char *dt = ftc_dtype_name((ftc_dtype_t)d[1]);
  if (c == FTC__COLL_SEND) {
    snprintf(buf, len, "%s message #%llu of %llu x %s", sender ? "sent" : "receives", seq, count, dt);
    return;
  }
  char rootb[24] = "", opb[24] = "";
  if (rooted(c)) snprintf(rootb, sizeof(rootb), " root %d", root);
  if (reduces(c)) snprintf(opb, sizeof(opb), " %s", ftc_op_name((ftc_op_t)d[2]));
  if (c == FTC__COLL_ALLTOALLV)
    snprintf(buf, len, "called alltoallv #%llu with a block of %llu x %s %s", seq, extra, dt,
             sender ? "for this rank" : "from it");
  else if (c == FTC__COLL_ALLGATHERV)
    snprintf(buf, len, "called allgatherv #%llu x%llu %s (counts hash %016llx)", seq, count, dt, extra);
  else if (c == FTC__COLL_BARRIER)
    snprintf(buf, len, "called barrier #%llu", seq);
  else if (c == FTC__COLL_ALLREDUCE)
    snprintf(buf, len, "called allreduce #%llu%s x%llu %s (%s)", seq, opb, count, dt,
             ftc_algo_name((ftc_algo_t)extra));
  else
    snprintf(buf, len, "called %s #%llu%s%s x%llu %s", ftc__coll_name(c), seq, rootb, opb, count, dt);
}

ftc_status_t ftc__desc_mismatch(const ftc__tcp_t *tp, int peer, const uint8_t got[FTC__DESC_SIZE],
                                const uint8_t want[FTC__DESC_SIZE]) {
  char mine[128], theirs[128];
  desc_text(want, 0, mine, sizeof(mine));
  if (got[3] != FTC__DESC_TAG || got[0] >= FTC__COLL_COUNT || got[1] >= FTC_DTYPE_COUNT)
    return ftc__error(FTC_ERR_MISMATCH,
                      "rank %d sent bytes that are not a descriptor where this rank (%d) %s: their "
                      "earlier call moved more bytes than this rank's did",
                      peer, tp->rank, mine);
  desc_text(got, 1, theirs, sizeof(theirs));
  if (want[0] == FTC__COLL_SEND && got[0] == FTC__COLL_SEND)
    return ftc__error(FTC_ERR_MISMATCH, "rank %d %s where this rank (%d) %s from it", peer, theirs,
                      tp->rank, mine);
  return ftc__error(FTC_ERR_MISMATCH, "rank %d %s where this rank (%d) %s", peer, theirs, tp->rank,
                    mine);
}

/* One send to `to` and one receive from `from`, plain bytes, together. */
static ftc_status_t sendrecv(ftc__tcp_t *tp, int to, const void *sbuf, size_t slen, int from,
                             void *rbuf, size_t rlen, const ftc__red_t *red, int64_t deadline) {
  ftc__seg_t *g = tp->segs;
  int n = 0;
  if (to >= 0) {
    g[0] = (ftc__seg_t){.src = sbuf, .len = slen};
    stream_at(tp, n++, to, 1, &g[0], 1);
  }
  if (from >= 0) {
    g[1] = (ftc__seg_t){.dst = rbuf, .len = rlen};
    stream_at(tp, n++, from, 0, &g[1], 1);
  }
  return ftc__xfer_run(tp, tp->streams, n, red, deadline);
}

/* Receive from `from` and reduce into dst (dst = local op incoming). */
static ftc_status_t recv_reduce(ftc__tcp_t *tp, int from, char *dst, const char *local, size_t len,
                                int finish, const ftc__red_t *red, int64_t deadline) {
  tp->segs[0] = (ftc__seg_t){.dst = dst, .src = local, .len = len, .reduce = 1, .finish = (unsigned char)finish};
  stream_at(tp, 0, from, 0, &tp->segs[0], 1);
  return ftc__xfer_run(tp, tp->streams, 1, red, deadline);
}

static ftc_status_t allreduce_rd(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                                 int64_t deadline) {
  const int n = tp->size, r = tp->rank;
  const size_t bytes = op->count * red->esize;
  char *buf = op->recvbuf, *tmp;
  ftc_status_t st;
  if ((st = ftc__tcp_scratch(tp, bytes, &tmp)) != FTC_OK) return st;
  if (op->sendbuf != buf) memcpy(buf, op->sendbuf, bytes);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  int vr;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      if ((st = sendrecv(tp, r + 1, buf, bytes, -1, NULL, 0, red, deadline)) != FTC_OK) return st;
      vr = -1;
    } else {
      if ((st = sendrecv(tp, -1, NULL, 0, r - 1, tmp, bytes, red, deadline)) != FTC_OK) return st;
      ftc__reduce(buf, tmp, buf, op->count, red->dtype, red->op);
      vr = r / 2;
    }
  } else {
    vr = r - rem;
  }
  if (vr >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) {
      int pv = vr ^ mask;
      int partner = pv < rem ? pv * 2 + 1 : pv + rem;
      if ((st = sendrecv(tp, partner, buf, bytes, partner, tmp, bytes, red, deadline)) != FTC_OK)
        return st;
      /* Lower rank's operand first, so every rank rounds identically. */
      if (partner < r)
        ftc__reduce(buf, tmp, buf, op->count, red->dtype, red->op);
      else
        ftc__reduce(buf, buf, tmp, op->count, red->dtype, red->op);
    }
    if (red->op == FTC_AVG) ftc__reduce_avg_finish(buf, op->count, red->dtype, n);
  }
  if (r < 2 * rem) {
    if (r % 2 == 1)
      st = sendrecv(tp, r - 1, buf, bytes, -1, NULL, 0, red, deadline);
    else
      st = sendrecv(tp, -1, NULL, 0, r + 1, buf, bytes, red, deadline);
  }
  return st;
}

/* Recursive halving reduce-scatter + recursive doubling allgather
 * (Rabenseifner): log2(p) exchanges each way instead of the ring's n - 1,
 * the same bytes per rank. Non-powers of two fold first, as in
 * allreduce_rd: of the first 2 * rem ranks the even ones hand their vector
 * to the odd neighbour and get the result back at the end. Every element is
 * reduced by one rank only and then copied, so all ranks agree bitwise. At 2
 * ranks this is the ring. */
static ftc_status_t allreduce_rhd(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                                  int64_t deadline) {
  const int n = tp->size, r = tp->rank;
  const size_t es = red->esize, count = op->count, bytes = count * es;
  const char *sb = op->sendbuf;
  char *rb = op->recvbuf;
  ftc_status_t st;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  int vr;
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      if ((st = sendrecv(tp, r + 1, sb, bytes, -1, NULL, 0, red, deadline)) != FTC_OK) return st;
      return sendrecv(tp, -1, NULL, 0, r + 1, rb, bytes, red, deadline);
    }
    if ((st = recv_reduce(tp, r - 1, rb, sb, bytes, 0, red, deadline)) != FTC_OK) return st;
    sb = rb; /* this rank's operand is now the pair's sum */
    vr = r / 2;
  } else {
    vr = r - rem;
  }
#define REAL(v) ((v) < rem ? (v) * 2 + 1 : (v) + rem)
#define OFF(b) (blk_off(count, p, (b)) * es)
  ftc__seg_t *g = tp->segs;
  int lo = 0, hi = p;
  for (int mask = p / 2; mask > 0; mask >>= 1) {
    const int peer = REAL(vr ^ mask), mid = lo + mask;
    int klo = lo, khi = mid, slo = mid, shi = hi; /* keep, send */
    if (vr & mask) klo = mid, khi = hi, slo = lo, shi = mid;
    g[0] = (ftc__seg_t){.src = sb + OFF(slo), .len = OFF(shi) - OFF(slo)};
    g[2] = (ftc__seg_t){.dst = rb + OFF(klo), .src = sb + OFF(klo), .len = OFF(khi) - OFF(klo),
                        .reduce = 1, .finish = (unsigned char)(mask == 1)};
    ftc__stream_t *snd = stream_at(tp, 1, peer, 1, &g[0], 1);
    stream_at(tp, 0, peer, 0, &g[2], 1);
    if (mask == 1) {
      /* The last halving step and the first doubling step go to the same
       * peer: one run, the reduced block forwarded chunk by chunk as soon as
       * it is reduced (what the ring does at 2 ranks), the peer's block
       * received in place. */
      g[1] = (ftc__seg_t){.src = rb + OFF(klo), .len = g[2].len};
      g[3] = (ftc__seg_t){.dst = rb + OFF(slo), .len = g[0].len};
      snd->nseg = 2;
      snd->dep = 0;
      snd->lag = g[0].len;
      tp->streams[0].nseg = 2;
    }
    if ((st = ftc__xfer_run(tp, tp->streams, 2, red, deadline)) != FTC_OK) return st;
    sb = rb;
    lo = klo, hi = khi;
  }
  lo &= ~1, hi = lo + 2;
  for (int mask = 2; mask < p; mask <<= 1) {
    const int peer = REAL(vr ^ mask);
    const int plo = (vr & mask) ? lo - mask : hi, phi = plo + mask;
    g[0] = (ftc__seg_t){.src = rb + OFF(lo), .len = OFF(hi) - OFF(lo)};
    g[1] = (ftc__seg_t){.dst = rb + OFF(plo), .len = OFF(phi) - OFF(plo)};
    stream_at(tp, 0, peer, 1, &g[0], 1);
    stream_at(tp, 1, peer, 0, &g[1], 1);
    if ((st = ftc__xfer_run(tp, tp->streams, 2, red, deadline)) != FTC_OK) return st;
    if (plo < lo)
      lo = plo;
    else
      hi = phi;
  }
#undef OFF
#undef REAL
  if (r < 2 * rem) return sendrecv(tp, r - 1, rb, bytes, -1, NULL, 0, red, deadline);
  return FTC_OK;
}

/* Up to this many bytes of the other ranks' vectors together, rank 0 of
 * the flat allreduce receives them all at once (into scratch) instead of
 * one rank after another through the staging chunk. */
#define FLAT_GATHER_MAX (256u << 10)

/* Every rank sends its vector to rank 0, which reduces them in rank order
 * (received all at once up to FLAT_GATHER_MAX bytes together, else one
 * rank at a time, chunk by chunk through the staging chunk) and sends the
 * result to every rank at once: 2 (n - 1) messages and two steps, where
 * recursive doubling sends n log2(n) in log2(n) steps. Each rank other than
 * 0 waits once; so when ranks crowd the cores (ftc__tcp_crowded)
 * fewer of them need a core at each moment, which is what the latency is
 * made of there (docs/performance/tcp.md). Rank 0's result is what every rank
 * gets, so all agree bitwise. */
static ftc_status_t allreduce_flat(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                                   int64_t deadline) {
  const int n = tp->size, r = tp->rank;
  const size_t bytes = op->count * red->esize;
  char *rb = op->recvbuf;
  ftc_status_t st;
  if (r != 0) return sendrecv(tp, 0, op->sendbuf, bytes, 0, rb, bytes, red, deadline);
  const char *src = op->sendbuf;
  char *all;
  if (bytes && bytes <= FLAT_GATHER_MAX / (size_t)(n - 1)) { /* (no product to wrap) */
    /* Small vectors: receive every rank's at once, then reduce in rank
     * order (the same operations in the same order as below: the same
     * bits). Rank 0 waits on every rank together, so one that died is seen
     * at once, not after the ranks before it have sent. */
    if ((st = ftc__tcp_scratch(tp, (size_t)(n - 1) * bytes, &all)) != FTC_OK) return st;
    for (int q = 1; q < n; q++) {
      tp->segs[q] = (ftc__seg_t){.dst = all + (size_t)(q - 1) * bytes, .len = bytes};
      stream_at(tp, q - 1, q, 0, &tp->segs[q], 1);
    }
    if ((st = ftc__xfer_run(tp, tp->streams, n - 1, red, deadline)) != FTC_OK) return st;
    for (int q = 1; q < n; q++, src = rb) {
      ftc__reduce(rb, src, all + (size_t)(q - 1) * bytes, op->count, red->dtype, red->op);
      if (q == n - 1 && red->op == FTC_AVG) ftc__reduce_avg_finish(rb, op->count, red->dtype, red->nranks);
    }
  } else {
    for (int q = 1; q < n; q++) {
      if ((st = recv_reduce(tp, q, rb, src, bytes, q == n - 1, red, deadline)) != FTC_OK) return st;
      src = rb;
    }
  }
  for (int q = 1; q < n; q++) {
    tp->segs[q] = (ftc__seg_t){.src = rb, .len = bytes};
    stream_at(tp, q - 1, q, 1, &tp->segs[q], 1);
  }
  return ftc__xfer_run(tp, tp->streams, n - 1, red, deadline);
}

static ftc_status_t allreduce_ring(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                                   int64_t deadline) {
  const int n = tp->size, r = tp->rank;
  const size_t es = red->esize, count = op->count;
  const char *sb = op->sendbuf;
  char *rb = op->recvbuf;
  const int nseg = 2 * (n - 1);
  ftc__seg_t *ss = tp->segs, *rs = tp->segs + nseg;
#define OFF(b) (blk_off(count, n, (b)) * es)
#define LEN(b) (blk_len(count, n, (b)) * es)
  for (int s = 0; s < n - 1; s++) {
    int b = mod(r - s, n);
    ss[s] = (ftc__seg_t){.src = (s == 0 ? sb : rb) + OFF(b), .len = LEN(b)};
    int b2 = mod(r - s - 1, n);
    rs[s] = (ftc__seg_t){.dst = rb + OFF(b2), .src = sb + OFF(b2), .len = LEN(b2), .reduce = 1,
                         .finish = (unsigned char)(s == n - 2)};
  }
  for (int k = 0; k < n - 1; k++) {
    int b = mod(r + 1 - k, n);
    ss[n - 1 + k] = (ftc__seg_t){.src = rb + OFF(b), .len = LEN(b)};
    int b2 = mod(r - k, n);
    rs[n - 1 + k] = (ftc__seg_t){.dst = rb + OFF(b2), .len = LEN(b2)};
  }
  stream_at(tp, 0, mod(r - 1, n), 0, rs, nseg);
  ftc__stream_t *snd = stream_at(tp, 1, mod(r + 1, n), 1, ss, nseg);
  snd->dep = 0;
  snd->lag = LEN(r);
#undef OFF
#undef LEN
  return ftc__xfer_run(tp, tp->streams, 2, red, deadline);
}

static ftc_status_t reduce_scatter_ring(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                                        int64_t deadline) {
  const int n = tp->size, r = tp->rank;
  const size_t blk = op->count * red->esize;
  const char *sb = op->sendbuf;
  char *rb = op->recvbuf, *work;
  const int in_place = (const void *)sb == (void *)rb;
  ftc_status_t st;
  if (in_place)
    work = rb;
  else if ((st = ftc__tcp_scratch(tp, blk * (size_t)n, &work)) != FTC_OK)
    return st;
  ftc__seg_t *ss = tp->segs, *rs = tp->segs + (n - 1);
  for (int s = 0; s < n - 1; s++) {
    int bs = mod(r - 1 - s, n);
    ss[s] = (ftc__seg_t){.src = (s == 0 ? sb : work) + (size_t)bs * blk, .len = blk};
    int br = mod(r - 2 - s, n);
    int last = s == n - 2;
    rs[s] = (ftc__seg_t){.dst = (last && !in_place) ? rb : work + (size_t)br * blk,
                         .src = sb + (size_t)br * blk, .len = blk, .reduce = 1,
                         .finish = (unsigned char)last};
  }
  stream_at(tp, 0, mod(r - 1, n), 0, rs, n - 1);
  ftc__stream_t *snd = stream_at(tp, 1, mod(r + 1, n), 1, ss, n - 1);
  snd->dep = 0;
  snd->lag = blk;
  if ((st = ftc__xfer_run(tp, tp->streams, 2, red, deadline)) != FTC_OK) return st;
  if (in_place && r != 0) memmove(rb, rb + (size_t)r * blk, blk);
  return FTC_OK;
}

static ftc_status_t allgather_ring(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                                   int64_t deadline) {
  const int n = tp->size, r = tp->rank;
  const size_t blk = op->count * red->esize;
  char *rb = op->recvbuf;
  if ((const char *)op->sendbuf != rb + (size_t)r * blk) memmove(rb + (size_t)r * blk, op->sendbuf, blk);
  ftc__seg_t *ss = tp->segs, *rs = tp->segs + (n - 1);
  for (int k = 0; k < n - 1; k++) {
    ss[k] = (ftc__seg_t){.src = rb + (size_t)mod(r - k, n) * blk, .len = blk};
    rs[k] = (ftc__seg_t){.dst = rb + (size_t)mod(r - k - 1, n) * blk, .len = blk};
  }
  stream_at(tp, 0, mod(r - 1, n), 0, rs, n - 1);
  ftc__stream_t *snd = stream_at(tp, 1, mod(r + 1, n), 1, ss, n - 1);
  snd->dep = 0;
  snd->lag = blk;
  return ftc__xfer_run(tp, tp->streams, 2, red, deadline);
}

static ftc_status_t broadcast(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                              int64_t deadline) {
  const int n = tp->size, v = mod(tp->rank - op->peer, n);
  const size_t bytes = op->count * red->esize;
  char *buf = op->recvbuf;
  int ns = 0, have_recv = 0;
  ftc__seg_t *g = tp->segs;
  g[0] = (ftc__seg_t){.dst = buf, .src = buf, .len = bytes};
#define REAL(x) mod((x) + op->peer, n)
  if (bytes >= tp->cfg.ring_threshold) {
    /* Pipelined chain root -> root+1 -> ...: each rank forwards what it
     * has received as soon as it lands. */
    if (v > 0) {
      stream_at(tp, ns++, REAL(v - 1), 0, g, 1);
      have_recv = 1;
    }
    if (v < n - 1) {
      ftc__stream_t *s = stream_at(tp, ns++, REAL(v + 1), 1, g, 1);
      s->dep = have_recv ? 0 : -1;
    }
  } else {
    int mask = 1;
    while (mask < n) {
      if (v & mask) {
        stream_at(tp, ns++, REAL(v - mask), 0, g, 1);
        have_recv = 1;
        break;
      }
      mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (v + mask >= n) continue;
      ftc__stream_t *s = stream_at(tp, ns++, REAL(v + mask), 1, g, 1);
      s->dep = have_recv ? 0 : -1;
    }
  }
#undef REAL
  return ftc__xfer_run(tp, tp->streams, ns, red, deadline);
}

static ftc_status_t reduce(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                           int64_t deadline) {
  const int n = tp->size, v = mod(tp->rank - op->peer, n);
  const size_t bytes = op->count * red->esize;
  const char *sb = op->sendbuf;
  char *work;
  ftc_status_t st;
#define REAL(x) mod((x) + op->peer, n)
  if (v == 0)
    work = op->recvbuf;
  else if ((st = ftc__tcp_scratch(tp, bytes, &work)) != FTC_OK)
    return st;
  if (bytes >= tp->cfg.ring_threshold) {
    /* Pipelined chain n-1 -> ... -> 1 -> root: each rank reduces what
     * arrives with its own data and forwards each reduced chunk. */
    if (v == n - 1) return sendrecv(tp, REAL(v - 1), sb, bytes, -1, NULL, 0, red, deadline);
    tp->segs[0] = (ftc__seg_t){.dst = work, .src = sb, .len = bytes, .reduce = 1,
                               .finish = (unsigned char)(v == 0)};
    tp->segs[1] = (ftc__seg_t){.src = work, .len = bytes};
    stream_at(tp, 0, REAL(v + 1), 0, &tp->segs[0], 1);
    if (v > 0) stream_at(tp, 1, REAL(v - 1), 1, &tp->segs[1], 1)->dep = 0;
    return ftc__xfer_run(tp, tp->streams, v > 0 ? 2 : 1, red, deadline);
  }
  if (work != sb) memcpy(work, sb, bytes);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) return sendrecv(tp, REAL(v - mask), work, bytes, -1, NULL, 0, red, deadline);
    if (v + mask < n &&
        (st = recv_reduce(tp, REAL(v + mask), work, work, bytes, 0, red, deadline)) != FTC_OK)
      return st;
  }
#undef REAL
  if (red->op == FTC_AVG) ftc__reduce_avg_finish(work, op->count, red->dtype, n);
  return FTC_OK;
}

static ftc_status_t alltoall(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                             int64_t deadline) {
  const int n = tp->size, r = tp->rank;
  const size_t blk = op->count * red->esize;
  const char *src = op->sendbuf;
  char *rb = op->recvbuf;
  ftc_status_t st;
  if ((const void *)src == (void *)rb) {
    char *copy;
    if ((st = ftc__tcp_scratch(tp, blk * (size_t)n, &copy)) != FTC_OK) return st;
    memcpy(copy, src, blk * (size_t)n);
    src = copy;
  } else {
    memcpy(rb + (size_t)r * blk, src + (size_t)r * blk, blk);
  }
  int ns = 0;
  for (int k = 1; k < n; k++) {
    int to = mod(r + k, n), from = mod(r - k, n);
    tp->segs[2 * k] = (ftc__seg_t){.src = src + (size_t)to * blk, .len = blk};
    tp->segs[2 * k + 1] = (ftc__seg_t){.dst = rb + (size_t)from * blk, .len = blk};
    stream_at(tp, ns++, to, 1, &tp->segs[2 * k], 1);
    stream_at(tp, ns++, from, 0, &tp->segs[2 * k + 1], 1);
  }
  return ftc__xfer_run(tp, tp->streams, ns, red, deadline);
}

/* The ring of allgather with a block of its own size per rank: each
 * block received in place and forwarded as it lands (a send that follows
 * its receive stream by this rank's own block, as in allgather_ring). */
static ftc_status_t allgatherv_ring(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                                    int64_t deadline) {
  const int n = tp->size, r = tp->rank;
  const size_t es = red->esize, *cnt = op->rcounts;
  char *rb = op->recvbuf;
#define OFF(b) (ftc__op_displ(cnt, op->rdispls, (b)) * es)
  if (cnt[r] && (const char *)op->sendbuf != rb + OFF(r)) memmove(rb + OFF(r), op->sendbuf, cnt[r] * es);
  if (n == 1) return FTC_OK;
  ftc__seg_t *ss = tp->segs, *rs = tp->segs + (n - 1);
  for (int k = 0; k < n - 1; k++) {
    int b = mod(r - k, n), b2 = mod(r - k - 1, n);
    ss[k] = (ftc__seg_t){.src = rb + OFF(b), .len = cnt[b] * es};
    rs[k] = (ftc__seg_t){.dst = rb + OFF(b2), .len = cnt[b2] * es};
  }
#undef OFF
  stream_at(tp, 0, mod(r - 1, n), 0, rs, n - 1);
  ftc__stream_t *snd = stream_at(tp, 1, mod(r + 1, n), 1, ss, n - 1);
  snd->dep = 0;
  snd->lag = cnt[r] * es;
  return ftc__xfer_run(tp, tp->streams, 2, red, deadline);
}

/* Pairwise exchange as alltoall, each pair's block of its own size. A
 * block of 0 bytes is still a stream, of the pair's descriptor alone: each
 * side sizes its blocks itself, so a receiver that expects nothing from a
 * peer must still read that peer's descriptor, or a peer that sent it a
 * block would complete into its socket (neither rank failing, the bytes
 * left for the next collective to trip on) and one that expects a block
 * nobody sends would wait for its timeout instead of failing at once. */
static ftc_status_t alltoallv(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                              int64_t deadline) {
  const int n = tp->size, r = tp->rank;
  const size_t es = red->esize;
  const char *sb = op->sendbuf;
  char *rb = op->recvbuf;
#define SOFF(q) (ftc__op_displ(op->scounts, op->sdispls, (q)) * es)
#define ROFF(q) (ftc__op_displ(op->rcounts, op->rdispls, (q)) * es)
  if (op->rcounts[r]) memmove(rb + ROFF(r), sb + SOFF(r), op->rcounts[r] * es);
  int ns = 0;
  for (int k = 1; k < n; k++) {
    int to = mod(r + k, n), from = mod(r - k, n);
    tp->segs[2 * k] = (ftc__seg_t){.src = op->scounts[to] ? sb + SOFF(to) : NULL, .len = op->scounts[to] * es};
    tp->segs[2 * k + 1] = (ftc__seg_t){.dst = op->rcounts[from] ? rb + ROFF(from) : NULL, .len = op->rcounts[from] * es};
    stream_at(tp, ns++, to, 1, &tp->segs[2 * k], op->scounts[to] ? 1 : 0);
    stream_at(tp, ns++, from, 0, &tp->segs[2 * k + 1], op->rcounts[from] ? 1 : 0);
  }
#undef SOFF
#undef ROFF
  return ftc__xfer_run(tp, tp->streams, ns, red, deadline);
}

/* Every rank's block straight to the root, which receives them all at
 * once, in place. */
static ftc_status_t gather(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                           int64_t deadline) {
  const int n = tp->size, r = tp->rank, root = op->peer;
  const size_t blk = op->count * red->esize;
  char *rb = op->recvbuf;
  if (r != root) return sendrecv(tp, root, op->sendbuf, blk, -1, NULL, 0, red, deadline);
  if ((const char *)op->sendbuf != rb + (size_t)root * blk) memmove(rb + (size_t)root * blk, op->sendbuf, blk);
  int ns = 0;
  for (int q = 0; q < n; q++) {
    if (q == root) continue;
    tp->segs[q] = (ftc__seg_t){.dst = rb + (size_t)q * blk, .len = blk};
    stream_at(tp, ns++, q, 0, &tp->segs[q], 1);
  }
  return ftc__xfer_run(tp, tp->streams, ns, red, deadline);
}

/* The root sends every rank its block at once. */
static ftc_status_t scatter(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                            int64_t deadline) {
  const int n = tp->size, r = tp->rank, root = op->peer;
  const size_t blk = op->count * red->esize;
  const char *sb = op->sendbuf;
  if (r != root) return sendrecv(tp, -1, NULL, 0, root, op->recvbuf, blk, red, deadline);
  if ((char *)op->recvbuf != sb + (size_t)root * blk) memmove(op->recvbuf, sb + (size_t)root * blk, blk);
  int ns = 0;
  for (int q = 0; q < n; q++) {
    if (q == root) continue;
    tp->segs[q] = (ftc__seg_t){.src = sb + (size_t)q * blk, .len = blk};
    stream_at(tp, ns++, q, 1, &tp->segs[q], 1);
  }
  return ftc__xfer_run(tp, tp->streams, ns, red, deadline);
}

static ftc_status_t barrier(ftc__tcp_t *tp, const ftc__red_t *red, int64_t deadline) {
  const int n = tp->size, r = tp->rank;
  static const char token = 'B';
  char got;
  for (int dist = 1; dist < n; dist <<= 1) {
    ftc_status_t st = sendrecv(tp, mod(r + dist, n), &token, 1, mod(r - dist, n), &got, 1, red, deadline);
    if (st != FTC_OK) return st;
  }
  return FTC_OK;
}

/* The end of the ring of descriptors: the previous rank's, if no run of
 * the collective received from it (the first run sent this rank's to the
 * next, xfer.c). So two neighbours always compare their calls, also where
 * the algorithm moves no byte between them (a broadcast's root receives
 * nothing): ranks whose calls differ cannot all complete it. */
static ftc_status_t ring_check(ftc__tcp_t *tp, const ftc__red_t *red, int64_t deadline) {
  const int prev = mod(tp->rank - 1, tp->size), next = mod(tp->rank + 1, tp->size);
  if (tp->desc_recv[prev] == tp->coll_seq && tp->desc_sent[next] == tp->coll_seq) return FTC_OK;
  int ns = 0;
  if (tp->desc_recv[prev] != tp->coll_seq) stream_at(tp, ns++, prev, 0, NULL, 0);
  return ftc__xfer_run(tp, tp->streams, ns, red, deadline);
}

static ftc_status_t run_coll(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *red,
                             int64_t deadline_ns);

ftc_status_t ftc__tcp_run(ftc__tcp_t *tp, const ftc__op_t *op, int64_t deadline_ns) {
  ftc__red_t red = {op->dtype, op->op, ftc_dtype_size(op->dtype), tp->size};
  if (tp->cfg.interrupt) {
    int iv = __atomic_load_n(tp->cfg.interrupt, __ATOMIC_ACQUIRE);
    if (iv) return ftc__error((ftc_status_t)iv, "the communicator was stopped: %s", ftc_strerror((ftc_status_t)iv));
  }
  if (op->coll == FTC__COLL_SEND || op->coll == FTC__COLL_RECV) {
    const ftc__op_t *one[1] = {op};
    return ftc__tcp_run_p2p(tp, one, 1, 1, deadline_ns, NULL, NULL, -1);
  }
  if (tp->size == 1) return run_coll(tp, op, &red, deadline_ns);
  tp->coll_seq++;
  tp->desc_op = op;
  ftc__desc_of(tp, op, tp->coll_seq, 0, 1, tp->desc_cur); /* the same to every peer but alltoallv's */
  /* The ring of descriptors where the algorithm's own exchanges may leave
   * ranks uncompared: a root decides who talks to whom (two ranks that
   * both take themselves for the root only send), an alltoallv's pairs
   * compare only their own blocks, a count of 0 runs nothing. The others' exchanges
   * (doubling, halving, rings, flat's star, alltoall, the barrier's first
   * round) compare every rank with a partner both ways in a graph that
   * joins them all, and the ring's extra messages would cost the small
   * allreduce (a crowded host's flat one: every rank would wait for its
   * neighbours to enter). */
  tp->desc_ring = rooted(op->coll) || op->coll == FTC__COLL_ALLTOALLV || op->count == 0;
  ftc_status_t st = run_coll(tp, op, &red, deadline_ns);
  if (st == FTC_OK && tp->desc_ring) st = ring_check(tp, &red, deadline_ns);
  tp->desc_op = NULL;
  return st;
}

static ftc_status_t run_coll(ftc__tcp_t *tp, const ftc__op_t *op, const ftc__red_t *redp,
                             int64_t deadline_ns) {
  ftc__red_t red = *redp;
  const size_t bytes = op->count * red.esize;
  /* Small collectives (every rank decides the same from the same count)
   * move both ways on each pair's shared socket; large ones, and sends and
   * receives (whose sizes each side chooses), on the socket of each
   * direction. */
  tp->shared = bytes < tp->cfg.ring_threshold;
  if (op->coll == FTC__COLL_BARRIER) return barrier(tp, &red, deadline_ns);
  if (op->coll == FTC__COLL_ALLGATHERV || op->coll == FTC__COLL_ALLTOALLV) {
    if (op->nranks != tp->size)
      return ftc__error(FTC_ERR_REVOKED, "%s: counts for %d ranks in an epoch of %d",
                        ftc__coll_name(op->coll), op->nranks, tp->size);
    if (op->coll == FTC__COLL_ALLGATHERV) return allgatherv_ring(tp, op, &red, deadline_ns);
    /* Each side of a pair sizes its blocks itself (its count is this
     * rank's sum alone): the socket of each direction, as send/recv. */
    tp->shared = 0;
    return alltoallv(tp, op, &red, deadline_ns);
  }
  if (op->count == 0) return FTC_OK;
  if (tp->size == 1) {
    /* A world of one: every collective is a copy. */
    switch (op->coll) {
      case FTC__COLL_ALLREDUCE:
      case FTC__COLL_ALLGATHER:
      case FTC__COLL_REDUCE_SCATTER:
      case FTC__COLL_ALLTOALL:
      case FTC__COLL_REDUCE:
      case FTC__COLL_GATHER:
      case FTC__COLL_SCATTER:
        if (op->recvbuf != op->sendbuf) memmove(op->recvbuf, op->sendbuf, bytes);
        return FTC_OK;
      default:
        return FTC_OK;
    }
  }
  switch (op->coll) {
    case FTC__COLL_ALLREDUCE: {
      ftc_algo_t a = allreduce_algo(tp, op);
      if (a == FTC_ALGO_DOUBLING) return allreduce_rd(tp, op, &red, deadline_ns);
      if (a == FTC_ALGO_FLAT) return allreduce_flat(tp, op, &red, deadline_ns);
      if (a == FTC_ALGO_HALVING) return allreduce_rhd(tp, op, &red, deadline_ns);
      return allreduce_ring(tp, op, &red, deadline_ns);
    }
    case FTC__COLL_BROADCAST: return broadcast(tp, op, &red, deadline_ns);
    case FTC__COLL_REDUCE: return reduce(tp, op, &red, deadline_ns);
    case FTC__COLL_ALLGATHER: return allgather_ring(tp, op, &red, deadline_ns);
    case FTC__COLL_REDUCE_SCATTER: return reduce_scatter_ring(tp, op, &red, deadline_ns);
    case FTC__COLL_ALLTOALL: return alltoall(tp, op, &red, deadline_ns);
    case FTC__COLL_GATHER: return gather(tp, op, &red, deadline_ns);
    case FTC__COLL_SCATTER: return scatter(tp, op, &red, deadline_ns);
    default: return ftc__error(FTC_ERR_INTERNAL, "unknown collective %d", (int)op->coll);
  }
}

/* ---- send/recv ----
 * Each message is a stream of its own, led by its descriptor; the messages
 * of one peer and direction move one after the other in the order they
 * were posted (stream.after), those of different peers and directions at
 * once, so any order of posted sends and receives completes once the
 * matching ones are posted. A message that is done is handed back to the
 * core (more()) and its stream dropped while the others go on. */

typedef struct p2p_run {
  ftc__tcp_t *tp;
  const ftc__op_t **ops;
  int cap;
  ftc__tcp_more_fn more;
  void *ctx;
  unsigned char *done;
} p2p_run_t;

static void p2p_stream(ftc__tcp_t *tp, int i, const ftc__op_t *op) {
  size_t bytes = op->count * ftc_dtype_size(op->dtype);
  int send = op->coll == FTC__COLL_SEND;
  if (send)
    tp->segs[i] = (ftc__seg_t){.src = op->sendbuf, .len = bytes};
  else
    tp->segs[i] = (ftc__seg_t){.dst = op->recvbuf, .len = bytes};
  ftc__stream_t *s = stream_at(tp, i, op->peer, send, &tp->segs[i], 1);
  uint64_t *seq = send ? &tp->msg_sent[op->peer] : &tp->msg_recv[op->peer];
  s->hlen = FTC__DESC_SIZE;
  ftc__desc_of(tp, op, ++*seq, op->peer, send, s->desc);
  ftc__xfer_stream_init(s);
}

/* Each stream waits for the one before it of its peer and direction. */
static void p2p_link(ftc__stream_t *st, int from, int n) {
  for (int i = from; i < n; i++) {
    st[i].after = -1;
    for (int k = i - 1; k >= 0; k--)
      if (st[k].peer == st[i].peer && st[k].send == st[i].send) {
        st[i].after = k;
        break;
      }
  }
}

static int p2p_more(void *arg, ftc__stream_t *st, int n) {
  p2p_run_t *r = arg;
  ftc__tcp_t *tp = r->tp;
  int ndone = 0;
  for (int i = 0; i < n; i++) ndone += r->done[i] = (unsigned char)ftc__stream_done(&st[i]);
  int n2 = r->more(r->ctx, r->ops, n, r->cap, r->done);
  if (ndone) { /* drop the finished streams, as more() dropped their operations */
    int k = 0;
    for (int i = 0; i < n; i++) {
      if (r->done[i]) continue;
      if (k != i) {
        st[k] = st[i];
        tp->segs[k] = tp->segs[i];
        st[k].segs = &tp->segs[k];
      }
      k++;
    }
    p2p_link(st, 0, k);
  }
  int k = n - ndone;
  for (int i = k; i < n2; i++) p2p_stream(tp, i, r->ops[i]);
  p2p_link(st, k, n2);
  return n2;
}

ftc_status_t ftc__tcp_run_p2p(ftc__tcp_t *tp, const ftc__op_t **ops, int n, int cap,
                              int64_t deadline_ns, ftc__tcp_more_fn more, void *ctx, int wake_fd) {
  ftc__red_t red = {FTC_U8, FTC_SUM, 1, tp->size};
  if (cap > tp->stream_cap) cap = tp->stream_cap;
  if (cap > tp->seg_cap) cap = tp->seg_cap;
  if (n > cap) return ftc__error(FTC_ERR_INTERNAL, "%d point-to-point operations in one run", n);
  for (int i = 0; i < n; i++) p2p_stream(tp, i, ops[i]);
  p2p_link(tp->streams, 0, n);
  tp->shared = 0; /* each side's sizes may differ: the socket of each direction */
  tp->desc_op = NULL;
  p2p_run_t r = {tp, ops, cap, more, ctx, tp->msg_done};
  ftc__xfer_more_t m = {p2p_more, &r, wake_fd};
  return ftc__xfer_run_more(tp, tp->streams, n, &red, deadline_ns, more ? &m : NULL);
}
