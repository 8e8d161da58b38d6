/*
 * tcp_int.h - the TCP transport's state and the stream engine shared by the
 * connection code (net*.c), the engine (xfer.c) and the algorithms (algo.c).
 *
 * A collective is a sequence of runs; a run is a set of byte streams, at most
 * one per (peer, direction), progressed together over nonblocking sockets
 * with poll(). A send stream may depend on a receive stream: it may only send
 * up to `lag` bytes ahead of what that stream has landed (and reduced), which
 * is how the ring and chain pipelines forward chunk by chunk.
 */
#ifndef FTC_TCP_INT_H
#define FTC_TCP_INT_H

#include <poll.h>

#include "tcp/tcp.h"

/* The descriptor that leads a collective's bytes on each connection it
 * uses, and every send/recv message (docs/protocol.md, "Descriptors"): the
 * receiver compares it with its own call's before it takes a byte of data
 * from that peer. Little-endian:
 *   0 u8 kind (ftc__coll_t)  1 u8 dtype  2 u8 reduce op (0xff: none)
 *   3 u8 FTC__DESC_TAG        4 i32 root or peer (-1: none)
 *   8 u64 sequence            16 u64 count  24 u64 extra (allreduce: the
 *   algorithm it runs; allgatherv: a hash of the counts; alltoallv: the
 *   elements of this pair's block) */
#define FTC__DESC_SIZE 32
#define FTC__DESC_TAG 0xD5

typedef struct ftc__tcp_peer {
  int fd;             /* receives from the peer (-1 for self) */
  int sfd;            /* sends to the peer: its own socket, or fd itself */
  uint64_t member_id;
  int left;           /* atomic: said goodbye (ftc__tcp_mark_left) */
  int spare_fd, spare_sfd; /* atomic: a spare of fd and sfd, never used yet (-1: none),
                       * for the next epoch. Only the thread that owns the data plane
                       * changes them. */
  unsigned char spare_reno; /* FTCOMM_TCP_CONGESTION=auto gave the spares reno (written
                       * before they are stored) */
  unsigned char reno; /* and fd/sfd: what a planned move that keeps them starts from */
  int kept_from;      /* fd/sfd were kept from this peer slot of the epoch before, -1 not
                       * (a connect that fails gives them back: ftc__tcp_connect) */
  /* An adopted pair whose peer's ADOPT is not read yet (net_adopt.c, "Lazy
   * adoption"): no byte of a run moves on it before ftc__tcp_confirm reads
   * it. A planned move that keeps the pair takes this with it. */
  unsigned char unconfirmed;
  unsigned char owe;       /* this end's ADOPT is not sent yet (ftc__tcp_pay; only while
                            * unconfirmed: a pair is confirmed after paying) */
  unsigned char alane;     /* the lane of the ADOPTs, both ways (the shared socket) */
  unsigned char settle_due; /* a run saw an event on it: settle it before waiting again */
  unsigned char broken;    /* its peer did not adopt it, and it is not connected anew yet
                            * (a run that did not need it tried briefly: xfer.c) */
  unsigned char ahave;     /* bytes of it read into abuf */
  uint8_t abuf[FTC__TCP_ADOPT_SIZE];
  uint64_t aepoch;         /* the epoch it must name: the one that adopted the pair */
} ftc__tcp_peer_t;

struct ftc__boot;

struct ftc__tcp {
  ftc__tcp_cfg_t cfg;
  uint64_t epoch;
  int rank, size;
  ftc__tcp_peer_t *peers; /* size entries; fd and sfd change (a planned move takes them,
                           * a failed one gives them back: net.c) on the thread that owns
                           * the data plane, so other threads load them atomically */
  int shut;               /* atomic: ftc__tcp_shutdown ran (what is given back later is shut too) */
  char *stage;            /* reduction staging chunk */
  size_t stage_cap;
  char *scratch;          /* per-collective work area, grown on demand */
  size_t scratch_cap;
  struct pollfd *pfd;     /* 2 * size + 2 entries, for the engine's poll */
  int *pidx;              /* 2 * size: (peer, direction) -> pfd index in a run */
  struct ftc__seg *segs;  /* segment and stream tables for the algorithms */
  int seg_cap;
  struct ftc__stream *streams;
  int stream_cap;
  int failed_peer;        /* see ftc__tcp_failed_peer() */
  int ended_peer;         /* atomic: see ftc__tcp_mark_ended(), -1 none */
  ftc__view_t view;       /* a copy of the epoch's view (members owned), for spares */
  struct ftc__boot *spare_boot; /* spare connections being made, NULL before */
  int adopted;            /* connections of this epoch that were spares */
  int unconfirmed;        /* pairs whose peer's ADOPT is not read yet (ftc__tcp_confirm) */
  int broken;             /* pairs to connect anew (peers[].broken) */
  int listen_fd;          /* the listener of its bootstrap, for a pair connected anew later */
  int kept;               /* connections of this epoch kept from the one before (a planned
                           * move: ftc__tcp_cfg_t.planned_move) */
  int early_made;         /* connections of this epoch made before it was taken up */
  struct ftc__tcp *early; /* the next epoch's transport, connecting its new members early
                           * (ftc__tcp_early_start), NULL when none; its bootstrap state
                           * is early->spare_boot */
  int shared;             /* this run uses each pair's shared socket both ways */
  /* Descriptors (ftc__stream_t.desc) of the collective being run: each run
   * leads the first stream of the collective to or from a peer with one
   * (desc_sent/desc_recv[peer] == coll_seq once it has). */
  const ftc__op_t *desc_op; /* NULL outside a collective (send/recv set their own) */
  uint64_t coll_seq;        /* collectives run in this epoch, this one included */
  int desc_ring;            /* the collective also compares each rank with both ring
                             * neighbours (algo.c, ftc__tcp_run) */
  uint8_t desc_cur[FTC__DESC_SIZE]; /* desc_op's descriptor (alltoallv: the pair's differs) */
  uint64_t *desc_sent, *desc_recv; /* size entries each */
  uint64_t *msg_sent, *msg_recv;   /* send/recv messages per peer, each way */
  unsigned char *msg_done;         /* stream_cap entries: a send/recv run's finished streams */
  int crowded;            /* ftc__tcp_crowded() of the view: auto picks flat for small
                           * allreduces */
};

/* The pair's shared socket: the one the higher rank sends on (UP when the
 * higher rank connected the pair, DOWN when the lower one connected to a
 * joiner: net.c, ftc__net_makes_connection) and, in runs of small collectives, the
 * lower rank too: its data and acknowledgements then travel together, as on
 * one socket (with two, each small message would cost a pure ACK segment
 * more). With FTCOMM_TCP_SOCKETS=1 it is the only socket. */
static inline int ftc__tcp_shared_fd(const ftc__tcp_t *tp, int peer) {
  return tp->rank < peer ? tp->peers[peer].fd : tp->peers[peer].sfd;
}

/* The socket a stream of the current run moves its bytes on. */
static inline int ftc__tcp_stream_fd(const ftc__tcp_t *tp, int peer, int send) {
  if (tp->shared) return ftc__tcp_shared_fd(tp, peer);
  return send ? tp->peers[peer].sfd : tp->peers[peer].fd;
}

typedef struct ftc__seg {
  char *dst;       /* recv: where bytes land, or where the reduction goes */
  const char *src; /* send: the bytes; reducing recv: the local operand */
  size_t len;
  unsigned char reduce; /* recv: dst = src op incoming */
  unsigned char finish; /* reducing recv: apply the AVG division */
} ftc__seg_t;


typedef struct ftc__stream {
  int peer;
  int send;   /* 1 send, 0 receive */
  ftc__seg_t *segs;
  int nseg;
  int dep;    /* send: index of the receive stream it follows, -1 for none */
  size_t lag; /* send: bytes it may run ahead of that stream */
  int after;  /* index of a stream of the same peer and direction whose bytes go first
               * (queued send/recv messages), -1 for none */
  unsigned char hlen; /* descriptor bytes to move before the segments: 0 or FTC__DESC_SIZE */
  unsigned char hoff;
  uint8_t desc[FTC__DESC_SIZE]; /* send: this rank's descriptor; recv: the one it expects */
  uint8_t din[FTC__DESC_SIZE];  /* recv: the one that came */
  /* engine state */
  int cur;
  size_t off, done, total, fill;
} ftc__stream_t;

/* All of a stream's bytes moved (its descriptor included). */
static inline int ftc__stream_done(const ftc__stream_t *s) {
  return s->done == s->total && s->hoff == s->hlen;
}

/* Reduction parameters for the reducing segments of a run. */
typedef struct ftc__red {
  ftc_dtype_t dtype;
  ftc_op_t op;
  size_t esize;
  int nranks; /* AVG divisor */
} ftc__red_t;

ftc_status_t ftc__xfer_run(ftc__tcp_t *tp, ftc__stream_t *st, int n, const ftc__red_t *red,
                           int64_t deadline_ns);

/* Reset a stream's engine state (its descriptor, hlen and desc, is kept). */
void ftc__xfer_stream_init(ftc__stream_t *s);

/* The descriptor of op (collective #seq of the epoch, or send/recv message
 * #seq of the pair's direction) on the stream to (send) or from `peer`. */
void ftc__desc_of(const ftc__tcp_t *tp, const ftc__op_t *op, uint64_t seq, int peer, int send,
                  uint8_t out[FTC__DESC_SIZE]);

/* The descriptor `what` differs from the expected one: FTC_ERR_MISMATCH
 * naming both ("rank 1 called broadcast #3 root 1 x1024 f32 where this rank
 * (0) called broadcast #3 root 0 x1024 f32"). */
ftc_status_t ftc__desc_mismatch(const ftc__tcp_t *tp, int peer, const uint8_t got[FTC__DESC_SIZE],
                                const uint8_t want[FTC__DESC_SIZE]);

/* A run that may change while it runs: before each round fn() may drop
 * streams that are done and append new ones (initialised with
 * ftc__xfer_stream_init), and returns the new count; wake_fd (or -1) is
 * polled too, so a new stream wakes a sleeping run. */
typedef struct ftc__xfer_more {
  int (*fn)(void *ctx, ftc__stream_t *st, int n);
  void *ctx;
  int wake_fd;
} ftc__xfer_more_t;
ftc_status_t ftc__xfer_run_more(ftc__tcp_t *tp, ftc__stream_t *st, int n, const ftc__red_t *red,
                                int64_t deadline_ns, const ftc__xfer_more_t *more);
/* Lazy adoption (net_adopt.c): the socket an unconfirmed pair's ADOPTs travel on. */
int ftc__tcp_adopt_fd(const ftc__tcp_t *tp, int rank);
/* Send this end's ADOPT on the pair with `rank` if it is owed (a run is
 * about to use the pair: the peer's run waits for it): 0, or -1 when the
 * pair is closed (the peer did not adopt it: connect it anew). */
int ftc__tcp_pay(ftc__tcp_t *tp, int rank);
/* Read the peer's ADOPT on the pair with `rank`, if it is there: 1 when the
 * pair is confirmed (or was not unconfirmed), 0 when it has not all come
 * yet, -1 when the peer did not adopt the pair for this epoch (it closed
 * it, or took it for another). Never blocks. */
int ftc__tcp_confirm(ftc__tcp_t *tp, int rank);
/* The two ends' ADOPTs on an unconfirmed pair: this end's sent if owed
 * (ftc__tcp_pay), the peer's read if it came (ftc__tcp_confirm); as
 * ftc__tcp_confirm returns, and -1 for a broken pair or one whose socket
 * refused this end's ADOPT. */
int ftc__tcp_exchange(ftc__tcp_t *tp, int rank);
/* A pair whose peer did not adopt it: FTC_ERR_PEER_LOST (failed peer set)
 * when the peer's process is gone (its listener refuses a connection),
 * else the pair is closed and marked broken (a run connects it anew,
 * ftc__tcp_reconnect, when it needs it or when it stalls). */
ftc_status_t ftc__tcp_break(ftc__tcp_t *tp, int rank);
/* Close the pair with `rank` and connect it anew for this epoch, with the
 * bootstrap's handshake (this rank connects or accepts as the bootstrap
 * would), until deadline, a newer epoch announced, or the interrupt; a
 * handshake under way at deadline (a hello sent, or some of a pair's
 * sockets made) is finished until hold (>= deadline), so that a short try
 * never leaves the peer a pair that this rank closes. A pair left without
 * all of its sockets (this one, or another that its peer connected
 * meanwhile) is broken (peers[].broken): none of its sockets, to connect
 * anew. */
ftc_status_t ftc__tcp_reconnect(ftc__tcp_t *tp, int rank, int64_t deadline, int64_t hold);

/* A scratch area of at least n bytes, valid until the next call. */
ftc_status_t ftc__tcp_scratch(ftc__tcp_t *tp, size_t n, char **out);

#endif
