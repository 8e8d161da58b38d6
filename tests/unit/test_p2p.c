/*
 * test_p2p.c - point-to-point in any legal order (forked ranks): every order
 * in which two ranks may post k sends to and k receives from each other
 * (k = 1, 2, 3: C(2k, k) orders per rank, every pair of them) completes with
 * each receive holding the matching send's bytes (per pair, first posted
 * first matched: MPI's non-overtaking rule), small and far larger than the
 * socket buffers; receives posted before any send; a send waited for before
 * the rank posts its receives; a ring of 3 ranks each posting 2 sends and
 * 2 receives to and from both neighbours in shuffled orders (200 rounds of
 * 12-byte messages, 6 of 4 MiB). Three ranks, every pair at once: every
 * combination of the ranks' orders of one send and one receive per pair
 * (24^3), every order of each rank for two per pair (2,520), drawn orders
 * for three, and 64 MiB messages in the orders that stalled. A receive whose sender sent another count
 * or dtype fails with FTC_ERR_MISMATCH naming both instead of reading the
 * bytes as data.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

static const harness_opts_t opts = {
    .time_limit_s = 240,
    .timeout_ms = 30000,
    .env = {"FTCOMM_SPIN_US=0"},
};

/* The orders of k sends and k receives: bit i of a mask set means the
 * i-th operation posted is a send. */
static int orders(int k, unsigned *out) {
  int n = 0;
  for (unsigned m = 0; m < (1u << (2 * k)); m++)
    if (__builtin_popcount(m) == k) out[n++] = m;
  return n;
}

/* Element j of message `msg` that `src` sends: every message differs. */
static uint32_t val(int src, int msg, size_t j, int round) {
  return (uint32_t)(src * 1000003u + (unsigned)msg * 7919u + (unsigned)round * 104729u) ^ (uint32_t)j;
}

typedef struct order_arg {
  int k;
  size_t count; /* u32 elements per message */
} order_arg_t;

/* Post k sends and k receives with the peer in the order of this rank's
 * mask, wait for them all in posting order, check each receive. */
static int post_in_order(ftc_comm_t *comm, int rank, int peer, int k, size_t count, unsigned mask,
                         uint32_t **sbuf, uint32_t **rbuf, int round) {
  ftc_request_t *req[6];
  int ns = 0, nr = 0;
  for (int m = 0; m < k; m++)
    for (size_t j = 0; j < count; j++) sbuf[m][j] = val(rank, m, j, round);
  for (int i = 0; i < 2 * k; i++) {
    ftc_status_t st;
    if (mask & (1u << i)) {
      st = ftc_isend(sbuf[ns], count, FTC_I32, peer, comm, &req[i]);
      ns++;
    } else {
      memset(rbuf[nr], 0, count * sizeof(uint32_t));
      st = ftc_irecv(rbuf[nr], count, FTC_I32, peer, comm, &req[i]);
      nr++;
    }
    if (st != FTC_OK) return RANK_FAIL(rank, "posting op %d of order %#x: %s", i, mask, ftc_last_error());
  }
  int bad = 0;
  for (int i = 0; i < 2 * k; i++) {
    if (ftc_wait(req[i], 30000) != FTC_OK)
      bad |= RANK_FAIL(rank, "op %d of order %#x (k %d, %zu elements): %s", i, mask, k, count,
                       ftc_last_error());
    ftc_request_free(req[i]);
  }
  if (bad) return 1;
  for (int m = 0; m < k; m++)
    for (size_t j = 0; j < count; j++)
      if (rbuf[m][j] != val(peer, m, j, round))
        return RANK_FAIL(rank, "receive %d of order %#x (k %d): element %zu is %u, want %u", m,
                         mask, k, j, rbuf[m][j], val(peer, m, j, round));
  return 0;
}

static int order_body(ftc_comm_t *comm, int rank, int n, void *argp) {
  (void)n;
  const order_arg_t *a = argp;
  unsigned ord[20];
  int no = orders(a->k, ord);
  uint32_t *sbuf[3], *rbuf[3];
  for (int m = 0; m < a->k; m++) {
    sbuf[m] = malloc(a->count * sizeof(uint32_t));
    rbuf[m] = malloc(a->count * sizeof(uint32_t));
  }
  int bad = 0, round = 0;
  for (int x = 0; x < no && !bad; x++)
    for (int y = 0; y < no && !bad; y++, round++)
      bad = post_in_order(comm, rank, 1 - rank, a->k, a->count, rank == 0 ? ord[x] : ord[y], sbuf,
                          rbuf, round);
  for (int m = 0; m < a->k; m++) free(sbuf[m]), free(rbuf[m]);
  return bad;
}

static void every_order_of_one_send_and_receive_completes(void **state) {
  (void)state;
  order_arg_t a = {1, 5};
  assert_int_equal(harness_run(2, order_body, &a, &opts), 0);
  a.count = 8u << 20; /* 32 MiB: far past the socket buffers */
  assert_int_equal(harness_run(2, order_body, &a, &opts), 0);
}

static void every_order_of_two_sends_and_receives_completes_small(void **state) {
  (void)state;
  order_arg_t a = {2, 1};
  assert_int_equal(harness_run(2, order_body, &a, &opts), 0);
  a.count = 3000;
  assert_int_equal(harness_run(2, order_body, &a, &opts), 0);
}

static void every_order_of_two_sends_and_receives_completes_at_16_mib(void **state) {
  (void)state;
  order_arg_t a = {2, 4u << 20};
  assert_int_equal(harness_run(2, order_body, &a, &opts), 0);
}

static void every_order_of_three_sends_and_receives_completes(void **state) {
  (void)state;
  order_arg_t a = {3, 7};
  assert_int_equal(harness_run(2, order_body, &a, &opts), 0);
}

/* Large: the orders that stalled (every receive first on one side, every
 * send first on the other, and alternating), 64 MiB per message. */
static int big_order_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  static const unsigned pick[][2] = {{0x07, 0x07}, {0x38, 0x38}, {0x07, 0x38}, {0x15, 0x2a}, {0x38, 0x07}};
  size_t count = 16u << 20;
  uint32_t *sbuf[3], *rbuf[3];
  for (int m = 0; m < 3; m++) sbuf[m] = malloc(count * 4), rbuf[m] = malloc(count * 4);
  int bad = 0;
  for (int i = 0; i < 5 && !bad; i++)
    bad = post_in_order(comm, rank, 1 - rank, 3, count, pick[i][rank], sbuf, rbuf, i);
  for (int m = 0; m < 3; m++) free(sbuf[m]), free(rbuf[m]);
  return bad;
}

static void three_sends_and_receives_of_64_mib_complete_in_any_order(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, big_order_body, NULL, &opts), 0);
}

/* A send waited for before the rank posts anything else: it completes as
 * its bytes have gone, not when the receives posted before it do. */
static int send_alone_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  int32_t a = 1, b = 2, got1 = 0, got2 = 0;
  ftc_request_t *r, *s;
  if (rank == 0) {
    if (ftc_irecv(&got1, 1, FTC_I32, 1, comm, &r) != FTC_OK ||
        ftc_isend(&a, 1, FTC_I32, 1, comm, &s) != FTC_OK || ftc_wait(s, 10000) != FTC_OK)
      return RANK_FAIL(rank, "send behind a posted receive: %s", ftc_last_error());
    ftc_request_free(s);
    if (ftc_send(&b, 1, FTC_I32, 1, comm, 10000) != FTC_OK || ftc_wait(r, 10000) != FTC_OK)
      return RANK_FAIL(rank, "%s", ftc_last_error());
    ftc_request_free(r);
    if (got1 != 7) return RANK_FAIL(rank, "got %d", got1);
  } else {
    /* Both of rank 0's sends first: it sends its second only once its
     * first completed. */
    if (ftc_recv(&got1, 1, FTC_I32, 0, comm, 10000) != FTC_OK ||
        ftc_recv(&got2, 1, FTC_I32, 0, comm, 10000) != FTC_OK)
      return RANK_FAIL(rank, "%s", ftc_last_error());
    int32_t seven = 7;
    if (ftc_send(&seven, 1, FTC_I32, 0, comm, 10000) != FTC_OK)
      return RANK_FAIL(rank, "%s", ftc_last_error());
    if (got1 != 1 || got2 != 2) return RANK_FAIL(rank, "got %d %d", got1, got2);
  }
  return 0;
}

static void a_send_completes_while_an_earlier_receive_waits(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, send_alone_body, NULL, &opts), 0);
}

/* A ring of 3: each rank posts 2 sends to and 2 receives from each
 * neighbour in an order of its own (shuffled per rank and round); arg: the
 * message size and the rounds. */
typedef struct ring_arg {
  size_t count; /* i32 elements per message */
  int rounds;
} ring_arg_t;

static int ring_body(ftc_comm_t *comm, int rank, int n, void *argp) {
  const ring_arg_t *a = argp;
  const size_t count = a->count;
  int peers[2] = {(rank + 1) % n, (rank + n - 1) % n};
  uint32_t *sb[4], *rb[4];
  for (int i = 0; i < 4; i++) sb[i] = malloc(count * 4), rb[i] = malloc(count * 4);
  int bad = 0;
  for (int round = 0; round < a->rounds && !bad; round++) {
    ftc_request_t *req[8];
    int order[8] = {0, 1, 2, 3, 4, 5, 6, 7}; /* op o: peer o / 4, send if o % 4 < 2, message o % 2 */
    unsigned seed = (unsigned)(rank * 31 + round * 7 + 1);
    for (int i = 7; i > 0; i--) {
      seed = seed * 1103515245u + 12345u;
      int j = (int)((seed >> 16) % (unsigned)(i + 1)), t = order[i];
      order[i] = order[j], order[j] = t;
    }
    /* Per peer and direction, messages in order: message 0 before 1. */
    for (int p = 0; p < 8; p++)
      for (int q = p + 1; q < 8; q++)
        if (order[p] / 2 == order[q] / 2 && order[p] > order[q]) {
          int t = order[p];
          order[p] = order[q], order[q] = t;
        }
    for (int i = 0; i < 8 && !bad; i++) {
      int o = order[i], pi = o / 4, send = o % 4 < 2, m = o % 2, buf = pi * 2 + m;
      ftc_status_t st;
      if (send) {
        for (size_t j = 0; j < count; j++) sb[buf][j] = val(rank, m * 10 + peers[pi], j, round);
        st = ftc_isend(sb[buf], count, FTC_I32, peers[pi], comm, &req[i]);
      } else {
        st = ftc_irecv(rb[buf], count, FTC_I32, peers[pi], comm, &req[i]);
      }
      if (st != FTC_OK) bad = RANK_FAIL(rank, "post: %s", ftc_last_error());
    }
    for (int i = 0; i < 8 && !bad; i++) {
      if (ftc_wait(req[i], 30000) != FTC_OK) bad = RANK_FAIL(rank, "round %d: %s", round, ftc_last_error());
      ftc_request_free(req[i]);
    }
    for (int pi = 0; pi < 2 && !bad; pi++)
      for (int m = 0; m < 2 && !bad; m++)
        for (size_t j = 0; j < count; j++)
          if (rb[pi * 2 + m][j] != val(peers[pi], m * 10 + rank, j, round)) {
            bad = RANK_FAIL(rank, "round %d: message %d from rank %d, element %zu wrong", round, m,
                            peers[pi], j);
            break;
          }
  }
  for (int i = 0; i < 4; i++) free(sb[i]), free(rb[i]);
  return bad;
}

static void a_ring_of_three_in_shuffled_orders_completes(void **state) {
  (void)state;
  ring_arg_t small = {3, 200}, big = {1u << 20, 6}; /* 12 B x 200 rounds; 4 MiB x 6 */
  assert_int_equal(harness_run(3, ring_body, &small, &opts), 0);
  assert_int_equal(harness_run(3, ring_body, &big, &opts), 0);
}

/* Three ranks, every pair: each rank posts k sends to and k receives from
 * each of the other two, 4k operations in an order of its own. An order is
 * a sequence of the four streams (send to the next rank, receive from it,
 * send to the one after, receive from it), each k times: (4k)! / (k!)^4 of
 * them, 24 for k = 1, 2,520 for k = 2, 369,600 for k = 3. */
enum { TRI_MAX_K = 3, TRI_OPS = 4 * TRI_MAX_K };
typedef unsigned char tri_order_t[TRI_OPS];

static void tri_orders_rec(int k, int pos, int *left, tri_order_t cur, tri_order_t *out, int *n) {
  if (pos == 4 * k) {
    memcpy(out[(*n)++], cur, sizeof(tri_order_t));
    return;
  }
  for (int s = 0; s < 4; s++)
    if (left[s]) {
      left[s]--, cur[pos] = (unsigned char)s;
      tri_orders_rec(k, pos + 1, left, cur, out, n);
      left[s]++;
    }
}

/* Every order for k = 1 or 2 into out (room for 2,520); their number. */
static int tri_orders(int k, tri_order_t *out) {
  int left[4] = {k, k, k, k}, n = 0;
  tri_order_t cur = {0};
  tri_orders_rec(k, 0, left, cur, out, &n);
  return n;
}

/* One round: post the 4k operations of `ord`, wait for them in posting
 * order, check every receive (message m from peer p carries val(p, m * 10 +
 * rank, ...): its order among p's sends to this rank). */
static int tri_round(ftc_comm_t *comm, int rank, int k, size_t count, const unsigned char *ord, uint32_t **sb,
                     uint32_t **rb, int round) {
  const int peers[2] = {(rank + 1) % 3, (rank + 2) % 3};
  ftc_request_t *req[TRI_OPS];
  int next[4] = {0}, bad = 0, posted = 0;
  for (int i = 0; i < 4 * k && !bad; i++) {
    int stream = ord[i], pi = stream / 2, m = next[stream]++, buf = pi * TRI_MAX_K + m;
    ftc_status_t st;
    if (stream % 2 == 0) {
      for (size_t j = 0; j < count; j++) sb[buf][j] = val(rank, m * 10 + peers[pi], j, round);
      st = ftc_isend(sb[buf], count, FTC_I32, peers[pi], comm, &req[i]);
    } else {
      memset(rb[buf], 0, count * sizeof(uint32_t));
      st = ftc_irecv(rb[buf], count, FTC_I32, peers[pi], comm, &req[i]);
    }
    if (st != FTC_OK) bad = RANK_FAIL(rank, "round %d: posting op %d: %s", round, i, ftc_last_error());
    else posted++;
  }
  for (int i = 0; i < posted; i++) {
    if (ftc_wait(req[i], 30000) != FTC_OK && !bad)
      bad = RANK_FAIL(rank, "round %d (k %d, %zu elements): op %d (stream %d): %s", round, k, count, i, ord[i],
                      ftc_last_error());
    ftc_request_free(req[i]);
  }
  for (int pi = 0; pi < 2 && !bad; pi++)
    for (int m = 0; m < k && !bad; m++)
      for (size_t j = 0; j < count; j++)
        if (rb[pi * TRI_MAX_K + m][j] != val(peers[pi], m * 10 + rank, j, round)) {
          bad = RANK_FAIL(rank, "round %d (k %d): message %d from rank %d, element %zu is %u, want %u", round, k, m,
                          peers[pi], j, rb[pi * TRI_MAX_K + m][j], val(peers[pi], m * 10 + rank, j, round));
          break;
        }
  return bad;
}

typedef struct tri_arg {
  int k;
  size_t count;
  int rounds; /* k = 3 and the large runs: rounds of orders drawn per rank; else the whole matrix */
} tri_arg_t;

static int tri_body(ftc_comm_t *comm, int rank, int n, void *argp) {
  (void)n;
  const tri_arg_t *a = argp;
  static tri_order_t all[2520];
  int no = a->k <= 2 ? tri_orders(a->k, all) : 0;
  uint32_t *sb[2 * TRI_MAX_K], *rb[2 * TRI_MAX_K];
  for (int i = 0; i < 2 * TRI_MAX_K; i++) sb[i] = malloc(a->count * 4), rb[i] = malloc(a->count * 4);
  int bad = 0, round = 0;
  if (a->k == 1 && !a->rounds) {
    /* Every combination of the three ranks' orders: 24^3 rounds. */
    for (int x = 0; x < no && !bad; x++)
      for (int y = 0; y < no && !bad; y++)
        for (int z = 0; z < no && !bad; z++, round++) {
          int mine = rank == 0 ? x : rank == 1 ? y : z;
          bad = tri_round(comm, rank, 1, a->count, all[mine], sb, rb, round);
        }
  } else if (a->k == 2 && !a->rounds) {
    /* Every order of every rank, each once, against partners that vary:
     * round i runs order i * {1, 11, 13}[rank] mod 2520 (11 and 13 are
     * prime to 2520, so each rank goes through all of its orders). */
    static const int mult[3] = {1, 11, 13};
    for (round = 0; round < no && !bad; round++)
      bad = tri_round(comm, rank, 2, a->count, all[(round * mult[rank]) % no], sb, rb, round);
  } else {
    /* Orders drawn per rank and round (the same draw on every run): a
     * shuffle of the streams, each k times, in stream order within. */
    for (round = 0; round < a->rounds && !bad; round++) {
      unsigned char ord[TRI_OPS];
      for (int i = 0; i < 4 * a->k; i++) ord[i] = (unsigned char)(i % 4);
      unsigned seed = (unsigned)(rank * 7919 + round * 104729 + a->k);
      for (int i = 4 * a->k - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int j = (int)((seed >> 16) % (unsigned)(i + 1));
        unsigned char t = ord[i];
        ord[i] = ord[j], ord[j] = t;
      }
      if (round < 3) /* first the orders that stalled: every receive first, every send first, and mixed */
        for (int i = 0; i < 4 * a->k; i++)
          ord[i] = (unsigned char)((round == 0 || (round == 2 && rank == 1)) ? (i < 2 * a->k ? 1 + 2 * (i % 2) : 2 * (i % 2))
                                                                           : (i < 2 * a->k ? 2 * (i % 2) : 1 + 2 * (i % 2)));
      bad = tri_round(comm, rank, a->k, a->count, ord, sb, rb, round);
    }
  }
  for (int i = 0; i < 2 * TRI_MAX_K; i++) free(sb[i]), free(rb[i]);
  return bad;
}

static void three_ranks_every_combination_of_one_send_and_receive_per_pair(void **state) {
  (void)state;
  tri_arg_t a = {1, 3, 0};
  assert_int_equal(harness_run(3, tri_body, &a, &opts), 0);
}

static void three_ranks_every_order_of_two_sends_and_receives_per_pair(void **state) {
  (void)state;
  tri_arg_t a = {2, 5, 0};
  assert_int_equal(harness_run(3, tri_body, &a, &opts), 0);
}

static void three_ranks_three_sends_and_receives_per_pair_in_drawn_orders(void **state) {
  (void)state;
  tri_arg_t a = {3, 7, 3000};
  assert_int_equal(harness_run(3, tri_body, &a, &opts), 0);
}

static void three_ranks_64_mib_messages_in_the_orders_that_stalled(void **state) {
  (void)state;
  tri_arg_t a = {1, 16u << 20, 4}; /* 64 MiB per message */
  assert_int_equal(harness_run(3, tri_body, &a, &opts), 0);
}

/* A receive of another count than its send: both ends learn it, no byte is
 * taken as data, and the epoch is failed (the next call is refused). */
static int p2p_mismatch_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  float buf[64] = {0};
  ftc_status_t st;
  if (rank == 0)
    st = ftc_send(buf, 64, FTC_F32, 1, comm, 10000);
  else
    st = ftc_recv(buf, 32, FTC_F32, 0, comm, 10000);
  if (rank == 1) {
    if (st != FTC_ERR_MISMATCH)
      return RANK_FAIL(rank, "recv of 32 from a send of 64: %s (%s)", ftc_strerror(st), ftc_last_error());
    if (!strstr(ftc_last_error(), "rank 0 sent message #1 of 64 x f32 where this rank (1) receives message #1 of 32 x f32"))
      return RANK_FAIL(rank, "the error does not name both: %s", ftc_last_error());
  }
  /* The sender's send may have completed into the socket buffer; the
   * epoch is failed on the receiver, whose sockets close: the next call
   * fails on both. */
  float x = 1;
  st = ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 10000);
  if (st == FTC_OK) return RANK_FAIL(rank, "an allreduce after the mismatch returned OK (%g)", x);
  return 0;
}

static void a_receive_of_another_count_fails_with_mismatch(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, p2p_mismatch_body, NULL, &opts), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_order_of_one_send_and_receive_completes),
      cmocka_unit_test(every_order_of_two_sends_and_receives_completes_small),
      cmocka_unit_test(every_order_of_two_sends_and_receives_completes_at_16_mib),
      cmocka_unit_test(every_order_of_three_sends_and_receives_completes),
      cmocka_unit_test(three_sends_and_receives_of_64_mib_complete_in_any_order),
      cmocka_unit_test(a_send_completes_while_an_earlier_receive_waits),
      cmocka_unit_test(a_ring_of_three_in_shuffled_orders_completes),
      cmocka_unit_test(three_ranks_every_combination_of_one_send_and_receive_per_pair),
      cmocka_unit_test(three_ranks_every_order_of_two_sends_and_receives_per_pair),
      cmocka_unit_test(three_ranks_three_sends_and_receives_per_pair_in_drawn_orders),
      cmocka_unit_test(three_ranks_64_mib_messages_in_the_orders_that_stalled),
      cmocka_unit_test(a_receive_of_another_count_fails_with_mismatch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
