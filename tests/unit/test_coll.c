/*
 * test_coll.c - every collective, every dtype and (for reductions) every op,
 * against the serial reference, at world sizes 1, 2, 3, 4, 7 and 8 (forked
 * ranks): counts 0, 1, odd, both sides of the recursive-doubling/ring
 * cutover and around the pipeline chunk, in place and not, blocking and
 * asynchronous. The chunk and the cutover are made small
 * (FTCOMM_CHUNK_BYTES=4096, FTCOMM_RING_THRESHOLD=2048) so small buffers
 * cross every code path. Big buffers are sampled: 64 MiB f32 sum allreduce
 * at 2 and 4 ranks with the default chunk. Each allreduce algorithm is also
 * forced for every size (FTCOMM_ALLREDUCE_ALGO) and must give every rank
 * the same bits with inputs whose reductions round.
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/op.h"
#include "core/reduce.h"
#include "ftc_time.h"
#include "harness.h"
#include "refdata.h"

static const harness_opts_t small_opts = {
    .time_limit_s = 120,
    .env = {"FTCOMM_CHUNK_BYTES=4096", "FTCOMM_RING_THRESHOLD=2048", "FTCOMM_SPIN_US=0"},
};

#define NCOUNTS 6
static void counts_for(int n, size_t c[NCOUNTS]) {
  c[0] = 0, c[1] = 1, c[2] = 7, c[3] = 300;
  c[4] = (size_t)n * 1024;         /* f32 blocks of exactly one chunk */
  c[5] = 2 * (size_t)n * 1024 + 5; /* blocks that straddle chunks, uneven */
}

/* Run one collective blocking or async. */
static ftc_status_t run(ftc_rec_op_t coll, const void *s, void *r, size_t count, ftc_dtype_t dt,
                        ftc_op_t op, int root, ftc_comm_t *comm, int async) {
  if (!async) {
    switch (coll) {
      case FTC_REC_ALLREDUCE: return ftc_allreduce(s, r, count, dt, op, comm, FTC_TIMEOUT_DEFAULT);
      case FTC_REC_BROADCAST: return ftc_broadcast(r, count, dt, root, comm, FTC_TIMEOUT_DEFAULT);
      case FTC_REC_REDUCE: return ftc_reduce(s, r, count, dt, op, root, comm, FTC_TIMEOUT_DEFAULT);
      case FTC_REC_ALLGATHER: return ftc_allgather(s, r, count, dt, comm, FTC_TIMEOUT_DEFAULT);
      case FTC_REC_REDUCE_SCATTER:
        return ftc_reduce_scatter(s, r, count, dt, op, comm, FTC_TIMEOUT_DEFAULT);
      case FTC_REC_ALLTOALL: return ftc_alltoall(s, r, count, dt, comm, FTC_TIMEOUT_DEFAULT);
      default: return FTC_ERR_INTERNAL;
    }
  }
  ftc_request_t *req = NULL;
  ftc_status_t st;
  switch (coll) {
    case FTC_REC_ALLREDUCE: st = ftc_iallreduce(s, r, count, dt, op, comm, &req); break;
    case FTC_REC_BROADCAST: st = ftc_ibroadcast(r, count, dt, root, comm, &req); break;
    case FTC_REC_REDUCE: st = ftc_ireduce(s, r, count, dt, op, root, comm, &req); break;
    case FTC_REC_ALLGATHER: st = ftc_iallgather(s, r, count, dt, comm, &req); break;
    case FTC_REC_REDUCE_SCATTER: st = ftc_ireduce_scatter(s, r, count, dt, op, comm, &req); break;
    case FTC_REC_ALLTOALL: st = ftc_ialltoall(s, r, count, dt, comm, &req); break;
    default: return FTC_ERR_INTERNAL;
  }
  if (st != FTC_OK) return st;
  st = ftc_wait(req, FTC_TIMEOUT_DEFAULT);
  ftc_request_free(req);
  return st;
}

/* One case: fills inputs, runs, checks. Returns 0 on success. */
static int one_case(ftc_comm_t *comm, int rank, int n, ftc_rec_op_t coll, ftc_dtype_t dt,
                    ftc_op_t op, size_t count, int in_place, int async, int iter) {
  size_t es = ftc_dtype_size(dt);
  size_t nb = (coll == FTC_REC_ALLGATHER || coll == FTC_REC_REDUCE_SCATTER || coll == FTC_REC_ALLTOALL)
                  ? (size_t)n * count
                  : count;
  char *send = malloc(nb * es + 1), *recv = malloc(nb * es + 1), *want = malloc(nb * es + 1),
       *orig = malloc(nb * es + 1);
  int root = iter % n, bad = 0;
  char what[160];
  snprintf(what, sizeof(what), "%s %s %s count %zu%s%s", ftc_rec_op_name(coll), ftc_dtype_name(dt),
           ftc_op_name(op), count, in_place ? " in-place" : "", async ? " async" : "");
  memset(recv, 0x5a, nb * es);
  const void *s = send;
  void *r = recv;
  size_t want_n = count;
  switch (coll) {
    case FTC_REC_ALLREDUCE:
    case FTC_REC_REDUCE:
      gen_fill(dt, op, rank, send, count, 0);
      ref_fill(dt, op, n, want, count, 0);
      if (in_place) memcpy(recv, send, count * es), s = recv;
      if (coll == FTC_REC_REDUCE && rank != root) {
        memcpy(want, recv, count * es); /* untouched off the root */
        if (!in_place && (iter & 1)) r = NULL;
      }
      break;
    case FTC_REC_BROADCAST:
      if (rank == root) gen_fill(dt, op, root, recv, count, 0);
      gen_fill(dt, op, root, want, count, 0);
      break;
    case FTC_REC_ALLGATHER:
      gen_fill(dt, op, rank, send, count, 0);
      for (int q = 0; q < n; q++) gen_fill(dt, op, q, want + (size_t)q * count * es, count, 0);
      if (in_place) memcpy(recv + (size_t)rank * count * es, send, count * es),
                    s = recv + (size_t)rank * count * es;
      want_n = nb;
      break;
    case FTC_REC_REDUCE_SCATTER:
      gen_fill(dt, op, rank, send, nb, 0);
      ref_fill(dt, op, n, want, count, (size_t)rank * count);
      if (in_place) memcpy(recv, send, nb * es), s = recv;
      break;
    case FTC_REC_ALLTOALL:
      gen_fill(dt, op, rank, send, nb, 0);
      for (int q = 0; q < n; q++)
        gen_fill(dt, op, q, want + (size_t)q * count * es, count, (size_t)rank * count);
      if (in_place) memcpy(recv, send, nb * es), s = recv;
      want_n = nb;
      break;
    default: break;
  }
  memcpy(orig, send, nb * es);
  ftc_status_t st = run(coll, s, r, count, dt, op, root, comm, async);
  if (st != FTC_OK) {
    bad = RANK_FAIL(rank, "%s: %s: %s", what, ftc_strerror(st), ftc_last_error());
  } else {
    bad = compare(what, rank, dt, recv, want, want_n);
    if (!bad && !in_place && memcmp(orig, send, nb * es) != 0)
      bad = RANK_FAIL(rank, "%s modified its send buffer", what);
  }
  free(send), free(recv), free(want), free(orig);
  return bad;
}

static int is_reduction(ftc_rec_op_t c) {
  return c == FTC_REC_ALLREDUCE || c == FTC_REC_REDUCE || c == FTC_REC_REDUCE_SCATTER;
}

static int matrix_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  ftc_rec_op_t coll = (ftc_rec_op_t)(intptr_t)arg;
  size_t counts[NCOUNTS];
  counts_for(n, counts);
  int iter = 0;
  for (int dt = 0; dt < FTC_DTYPE_COUNT; dt++) {
    int nops = is_reduction(coll) ? FTC_OP_COUNT : 1;
    for (int op = 0; op < nops; op++) {
      if (!op_fits((ftc_dtype_t)dt, (ftc_op_t)op)) continue;
      for (int c = 0; c < NCOUNTS; c++) {
        for (int variant = 0; variant < 4; variant++) {
          /* Every variant for the small counts; one rotating variant for the
           * larger ones to bound the run time. */
          if (c >= 4 && variant != (iter % 4)) {
            iter++;
            continue;
          }
          if (one_case(comm, rank, n, coll, (ftc_dtype_t)dt, (ftc_op_t)op, counts[c], variant & 1,
                       variant >> 1, iter++))
            return 1;
        }
      }
    }
  }
  return 0;
}

/* The same with the allreduce's ring in place of halving and doubling. */
static const harness_opts_t ring_opts = {
    .time_limit_s = 120,
    .env = {"FTCOMM_CHUNK_BYTES=4096", "FTCOMM_RING_THRESHOLD=2048", "FTCOMM_SPIN_US=0",
            "FTCOMM_HALVING_MAX=0"},
};

#define MATRIX_TEST(name, coll, n, opts)                                                \
  static void name(void **state) {                                                      \
    (void)state;                                                                        \
    assert_int_equal(harness_run(n, matrix_body, (void *)(intptr_t)(coll), opts), 0);    \
  }

#define MATRIX_SET_WITH(prefix, coll, opts)   \
  MATRIX_TEST(prefix##_1, coll, 1, opts) \
  MATRIX_TEST(prefix##_2, coll, 2, opts) \
  MATRIX_TEST(prefix##_3, coll, 3, opts) \
  MATRIX_TEST(prefix##_4, coll, 4, opts) \
  MATRIX_TEST(prefix##_7, coll, 7, opts) \
  MATRIX_TEST(prefix##_8, coll, 8, opts)
#define MATRIX_SET(prefix, coll) MATRIX_SET_WITH(prefix, coll, &small_opts)

/* Each algorithm forced for every size (FTCOMM_ALLREDUCE_ALGO): the ring and
 * halving below the threshold too, recursive doubling above it. */
static const harness_opts_t forced_ring_opts = {
    .time_limit_s = 120,
    .env = {"FTCOMM_CHUNK_BYTES=4096", "FTCOMM_RING_THRESHOLD=2048", "FTCOMM_SPIN_US=0",
            "FTCOMM_ALLREDUCE_ALGO=ring"},
};
static const harness_opts_t forced_halving_opts = {
    .time_limit_s = 120,
    .env = {"FTCOMM_CHUNK_BYTES=4096", "FTCOMM_RING_THRESHOLD=2048", "FTCOMM_SPIN_US=0",
            "FTCOMM_ALLREDUCE_ALGO=halving"},
};
static const harness_opts_t forced_doubling_opts = {
    .time_limit_s = 120,
    .env = {"FTCOMM_CHUNK_BYTES=4096", "FTCOMM_RING_THRESHOLD=2048", "FTCOMM_SPIN_US=0",
            "FTCOMM_ALLREDUCE_ALGO=doubling"},
};
static const harness_opts_t forced_flat_opts = {
    .time_limit_s = 120,
    .env = {"FTCOMM_CHUNK_BYTES=4096", "FTCOMM_RING_THRESHOLD=2048", "FTCOMM_SPIN_US=0",
            "FTCOMM_ALLREDUCE_ALGO=flat"},
};

MATRIX_SET(allreduce_matches_reference_at_size, FTC_REC_ALLREDUCE)
MATRIX_SET_WITH(allreduce_by_ring_matches_reference_at_size, FTC_REC_ALLREDUCE, &ring_opts)
MATRIX_SET_WITH(allreduce_forced_to_ring_matches_reference_at_size, FTC_REC_ALLREDUCE,
                &forced_ring_opts)
MATRIX_SET_WITH(allreduce_forced_to_halving_matches_reference_at_size, FTC_REC_ALLREDUCE,
                &forced_halving_opts)
MATRIX_SET_WITH(allreduce_forced_to_doubling_matches_reference_at_size, FTC_REC_ALLREDUCE,
                &forced_doubling_opts)
MATRIX_SET_WITH(allreduce_forced_to_flat_matches_reference_at_size, FTC_REC_ALLREDUCE,
                &forced_flat_opts)

/* Results feed training, so every rank must get the same bits, with inputs
 * whose sums round (the reference matrix uses exact ones): each algorithm,
 * f32/f64/f16/bf16, sum/prod/avg, counts below and above the cutover;
 * every rank's result is gathered and compared byte for byte. Flat must
 * also equal the serial reduction in rank order (rank 0 reduces
 * x0 op x1, then op x2, ...), bit for bit. */
static void inexact_fill(ftc_dtype_t dt, int rank, void *buf, size_t count) {
  for (size_t i = 0; i < count; i++) {
    uint32_t h = (uint32_t)(rank + 1) * 2654435761u ^ (uint32_t)i * 40503u;
    h ^= h >> 13, h *= 0x5bd1e995u, h ^= h >> 15;
    double v = 0.75 + (double)(h % 100003u) / 200006.0; /* [0.75, 1.25): products stay finite */
    switch (dt) {
      case FTC_F32: ((float *)buf)[i] = (float)v; break;
      case FTC_F64: ((double *)buf)[i] = v / 3.0; break;
      case FTC_F16: ((uint16_t *)buf)[i] = ftc__f32_to_f16((float)v); break;
      default: ((uint16_t *)buf)[i] = ftc__f32_to_bf16((float)v); break;
    }
  }
}

static int bitwise_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  const ftc_dtype_t dts[] = {FTC_F32, FTC_F64, FTC_F16, FTC_BF16};
  const ftc_op_t ops[] = {FTC_SUM, FTC_PROD, FTC_AVG};
  const size_t counts[] = {1, 7, 300, (size_t)n * 1024 + 3};
  enum { MAXC = 8 * 1024 + 3 };
  static char x[MAXC * 8], y[MAXC * 8], serial[MAXC * 8], all[8 * MAXC * 8];
  for (int a = 0; a < FTC_ALGO_COUNT; a++)
    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
      for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
          const size_t count = counts[c], bytes = count * ftc_dtype_size(dts[d]);
          char what[128];
          snprintf(what, sizeof(what), "%s %s %s count %zu", ftc_algo_name((ftc_algo_t)a),
                   ftc_dtype_name(dts[d]), ftc_op_name(ops[o]), count);
          if (ftc_comm_set_allreduce_algo(comm, (ftc_algo_t)a) != FTC_OK)
            return RANK_FAIL(rank, "set %s: %s", what, ftc_last_error());
          inexact_fill(dts[d], rank, x, count);
          if (ftc_allreduce(x, y, count, dts[d], ops[o], comm, FTC_TIMEOUT_DEFAULT) != FTC_OK ||
              ftc_allgather(y, all, bytes, FTC_U8, comm, FTC_TIMEOUT_DEFAULT) != FTC_OK)
            return RANK_FAIL(rank, "%s: %s", what, ftc_last_error());
          for (int q = 1; q < n; q++)
            if (memcmp(all, all + (size_t)q * bytes, bytes) != 0)
              return RANK_FAIL(rank, "%s: rank %d's result differs from rank 0's", what, q);
          if (a != FTC_ALGO_FLAT) continue;
          inexact_fill(dts[d], 0, serial, count);
          for (int q = 1; q < n; q++) {
            inexact_fill(dts[d], q, x, count);
            ftc__reduce(serial, serial, x, count, dts[d], ops[o]);
          }
          if (ops[o] == FTC_AVG) ftc__reduce_avg_finish(serial, count, dts[d], n);
          if (memcmp(serial, y, bytes) != 0)
            return RANK_FAIL(rank, "%s: not the serial reduction in rank order", what);
        }
  return 0;
}

static void every_algorithm_gives_every_rank_the_same_bits_at_3_ranks(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, bitwise_body, NULL, &small_opts), 0);
}

static void every_algorithm_gives_every_rank_the_same_bits_at_8_ranks(void **state) {
  (void)state;
  assert_int_equal(harness_run(8, bitwise_body, NULL, &small_opts), 0);
}

/* Halving and doubling with more steps than the matrix reaches: 16 ranks
 * (four steps each way) and 12 (the fold, then three), counts around the
 * block and 4 KiB chunk boundaries, a few dtypes and ops. */
static int halving_wide_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  const size_t counts[] = {(size_t)n, (size_t)n + 1, 300, (size_t)n * 1024, 2 * (size_t)n * 1024 + 5};
  const ftc_dtype_t dts[] = {FTC_F32, FTC_I64, FTC_F16};
  const ftc_op_t ops[] = {FTC_SUM, FTC_AVG, FTC_MAX};
  int iter = 0;
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
      for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++, iter++)
        if (one_case(comm, rank, n, FTC_REC_ALLREDUCE, dts[d], ops[o], counts[c], iter & 1,
                     (iter >> 1) & 1, iter))
          return 1;
  return 0;
}

static void allreduce_forced_to_halving_matches_reference_at_16_ranks(void **state) {
  (void)state;
  assert_int_equal(harness_run(16, halving_wide_body, NULL, &forced_halving_opts), 0);
}

static void allreduce_forced_to_halving_matches_reference_at_12_ranks(void **state) {
  (void)state;
  assert_int_equal(harness_run(12, halving_wide_body, NULL, &forced_halving_opts), 0);
}

/* ftc_comm_set_allreduce_algo switches the algorithm from the next call:
 * every algorithm in turn, blocking and async, each call checked (what
 * ftcomm-bench -A a,b does); a request started before a switch keeps its
 * algorithm. Bad arguments are refused. */
static int switching_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  if (ftc_comm_set_allreduce_algo(comm, FTC_ALGO_COUNT) != FTC_ERR_INVALID_ARGUMENT)
    return RANK_FAIL(rank, "an unknown algorithm was not refused: %s", ftc_last_error());
  for (int a = 0; a < FTC_ALGO_COUNT; a++) { /* the refusal lists every one */
    char want[32];
    int len = snprintf(want, sizeof(want), "FTC_ALGO_%s", ftc_algo_name((ftc_algo_t)a));
    for (int i = 9; i < len && i < (int)sizeof(want) - 1; i++) want[i] = (char)toupper((unsigned char)want[i]);
    if (!strstr(ftc_last_error(), want))
      return RANK_FAIL(rank, "the refusal of an unknown algorithm does not name %s: %s", want, ftc_last_error());
  }
  if (ftc_comm_set_allreduce_algo(NULL, FTC_ALGO_RING) != FTC_ERR_INVALID_ARGUMENT)
    return RANK_FAIL(rank, "a NULL communicator was not refused");
  const size_t counts[] = {300, (size_t)n * 1024, 2 * (size_t)n * 1024 + 5};
  int iter = 0;
  for (int round = 0; round < 2; round++)
    for (int a = 0; a < FTC_ALGO_COUNT; a++)
      for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        ftc_status_t st = ftc_comm_set_allreduce_algo(comm, (ftc_algo_t)a);
        if (st != FTC_OK) return RANK_FAIL(rank, "set %s: %s", ftc_algo_name((ftc_algo_t)a), ftc_last_error());
        if (one_case(comm, rank, n, FTC_REC_ALLREDUCE, FTC_F32, FTC_SUM, counts[c], iter & 1,
                     round, iter))
          return RANK_FAIL(rank, "with algorithm %s", ftc_algo_name((ftc_algo_t)a));
        iter++;
      }
  /* started under one algorithm, waited for after a switch */
  enum { C = 5000 };
  static float x[C], y[C];
  for (int i = 0; i < C; i++) x[i] = (float)(rank + i % 7);
  ftc_request_t *req = NULL;
  if (ftc_comm_set_allreduce_algo(comm, FTC_ALGO_HALVING) != FTC_OK)
    return RANK_FAIL(rank, "set: %s", ftc_last_error());
  if (ftc_iallreduce(x, y, C, FTC_F32, FTC_SUM, comm, &req) != FTC_OK)
    return RANK_FAIL(rank, "iallreduce: %s", ftc_last_error());
  /* the ranks now disagree: harmless unless the started request changed */
  ftc_comm_set_allreduce_algo(comm, rank % 2 ? FTC_ALGO_RING : FTC_ALGO_DOUBLING);
  ftc_status_t st = ftc_wait(req, FTC_TIMEOUT_DEFAULT);
  ftc_request_free(req);
  if (st != FTC_OK) return RANK_FAIL(rank, "wait: %s", ftc_last_error());
  for (int i = 0; i < C; i++)
    if (y[i] != (float)(n * (n - 1) / 2 + n * (i % 7)))
      return RANK_FAIL(rank, "element %d is %g", i, y[i]);
  return 0;
}

static const harness_opts_t switching_opts = {
    .time_limit_s = 120,
    .env = {"FTCOMM_CHUNK_BYTES=4096", "FTCOMM_RING_THRESHOLD=2048", "FTCOMM_SPIN_US=0"},
};

/* The setting is what runs: ranks set to different algorithms (ring on
 * rank 0, recursive doubling on rank 1) move the same bytes at 2 ranks but
 * reduce different blocks, so the result is wrong (or the call fails). */
static int disagreeing_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg, (void)n;
  enum { C = 4096 };
  static float x[C];
  for (int i = 0; i < C; i++) x[i] = (float)(rank * 100000 + i);
  if (ftc_comm_set_allreduce_algo(comm, rank == 0 ? FTC_ALGO_RING : FTC_ALGO_DOUBLING) != FTC_OK)
    return RANK_FAIL(rank, "set: %s", ftc_last_error());
  /* Both algorithms move the same bytes at 2 ranks: without the descriptor
   * each would sum the wrong blocks and return FTC_OK. */
  ftc_status_t st = ftc_allreduce(x, x, C, FTC_F32, FTC_SUM, comm, 2000);
  const char *want = rank == 0 ? "rank 1 called allreduce #1 sum x4096 f32 (doubling) where this rank (0) "
                                 "called allreduce #1 sum x4096 f32 (ring)"
                               : "rank 0 called allreduce #1 sum x4096 f32 (ring) where this rank (1) "
                                 "called allreduce #1 sum x4096 f32 (doubling)";
  if (st != FTC_ERR_MISMATCH || !strstr(ftc_last_error(), want))
    return RANK_FAIL(rank, "ranks on different algorithms: %s (%s)", ftc_strerror(st), ftc_last_error());
  return 0;
}

static void ranks_that_set_different_algorithms_fail_with_mismatch(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, disagreeing_body, NULL, &switching_opts), 0);
}


static void allreduce_algorithm_switched_per_call_matches_reference_at_3_ranks(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, switching_body, NULL, &switching_opts), 0);
}

static void allreduce_algorithm_switched_per_call_matches_reference_at_8_ranks(void **state) {
  (void)state;
  assert_int_equal(harness_run(8, switching_body, NULL, &switching_opts), 0);
}
MATRIX_SET(broadcast_delivers_root_data_at_size, FTC_REC_BROADCAST)
MATRIX_SET(reduce_matches_reference_on_root_at_size, FTC_REC_REDUCE)
MATRIX_SET(allgather_concatenates_in_rank_order_at_size, FTC_REC_ALLGATHER)
MATRIX_SET(reduce_scatter_gives_each_rank_its_block_at_size, FTC_REC_REDUCE_SCATTER)
MATRIX_SET(alltoall_transposes_blocks_at_size, FTC_REC_ALLTOALL)

/* ---- barrier ---- */

/* Shared by the forked ranks: arrived[i * 8 + r] is set by rank r just
 * before it enters barrier i. */
static int *arrived;

static int barrier_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  for (int i = 0; i < 4; i++) {
    usleep((useconds_t)((rank * 7 + i * 3) % 5) * 5000);
    __atomic_store_n(&arrived[i * 8 + rank], 1, __ATOMIC_SEQ_CST);
    ftc_status_t st;
    if (i < 3) {
      st = ftc_barrier(comm, FTC_TIMEOUT_DEFAULT);
    } else {
      ftc_request_t *req;
      st = ftc_ibarrier(comm, &req);
      if (st == FTC_OK) st = ftc_wait(req, FTC_TIMEOUT_DEFAULT), ftc_request_free(req);
    }
    if (st != FTC_OK) return RANK_FAIL(rank, "barrier %d: %s", i, ftc_last_error());
    /* Nobody leaves before every rank has arrived. */
    for (int q = 0; q < n; q++)
      if (!__atomic_load_n(&arrived[i * 8 + q], __ATOMIC_SEQ_CST))
        return RANK_FAIL(rank, "left barrier %d before rank %d arrived", i, q);
  }
  return 0;
}

static void barrier_waits_for_the_last_rank(void **state) {
  (void)state;
  arrived = mmap(NULL, 4 * 8 * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(arrived != MAP_FAILED);
  for (int n = 1; n <= 8; n++) {
    memset(arrived, 0, 4 * 8 * sizeof(int));
    assert_int_equal(harness_run(n, barrier_body, NULL, &small_opts), 0);
  }
  munmap(arrived, 4 * 8 * sizeof(int));
}

/* ---- send / recv ---- */

static int p2p_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  if (n < 2) return 0;
  int right = (rank + 1) % n, left = (rank + n - 1) % n;
  size_t counts[NCOUNTS];
  counts_for(n, counts);
  for (int dt = 0; dt < FTC_DTYPE_COUNT; dt++) {
    for (int c = 0; c < NCOUNTS; c++) {
      size_t count = counts[c], es = ftc_dtype_size((ftc_dtype_t)dt);
      char *out = malloc(count * es + 1), *in = malloc(count * es + 1), *want = malloc(count * es + 1);
      gen_fill((ftc_dtype_t)dt, FTC_SUM, rank, out, count, 0);
      gen_fill((ftc_dtype_t)dt, FTC_SUM, left, want, count, 0);
      ftc_status_t s1, s2;
      int async = (c + dt) & 1;
      /* Even ranks send first, odd ranks receive first: no cycle of
       * blocked senders even for a ring of odd size. */
      if (async) {
        ftc_request_t *a, *b;
        if (rank % 2 == 0) {
          s1 = ftc_isend(out, count, (ftc_dtype_t)dt, right, comm, &a);
          s2 = ftc_irecv(in, count, (ftc_dtype_t)dt, left, comm, &b);
        } else {
          s2 = ftc_irecv(in, count, (ftc_dtype_t)dt, left, comm, &b);
          s1 = ftc_isend(out, count, (ftc_dtype_t)dt, right, comm, &a);
        }
        if (s1 == FTC_OK) s1 = ftc_wait(a, FTC_TIMEOUT_DEFAULT), ftc_request_free(a);
        if (s2 == FTC_OK) s2 = ftc_wait(b, FTC_TIMEOUT_DEFAULT), ftc_request_free(b);
      } else if (rank % 2 == 0) {
        s1 = ftc_send(out, count, (ftc_dtype_t)dt, right, comm, FTC_TIMEOUT_DEFAULT);
        s2 = ftc_recv(in, count, (ftc_dtype_t)dt, left, comm, FTC_TIMEOUT_DEFAULT);
      } else {
        s2 = ftc_recv(in, count, (ftc_dtype_t)dt, left, comm, FTC_TIMEOUT_DEFAULT);
        s1 = ftc_send(out, count, (ftc_dtype_t)dt, right, comm, FTC_TIMEOUT_DEFAULT);
      }
      int bad = 0;
      if (s1 != FTC_OK || s2 != FTC_OK)
        bad = RANK_FAIL(rank, "send/recv %zu: %s", count, ftc_last_error());
      else
        bad = compare("recv", rank, (ftc_dtype_t)dt, in, want, count);
      free(out), free(in), free(want);
      if (bad) return 1;
    }
  }
  return 0;
}

static void send_recv_deliver_in_a_ring(void **state) {
  (void)state;
  for (int n = 2; n <= 8; n++) {
    if (n == 5 || n == 6) continue;
    assert_int_equal(harness_run(n, p2p_body, NULL, &small_opts), 0);
  }
}

static int p2p_order_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg, (void)n;
  int32_t v[3] = {11, 22, 33}, got[3] = {0};
  if (rank == 0) {
    for (int i = 0; i < 3; i++)
      if (ftc_send(&v[i], 1, FTC_I32, 1, comm, FTC_TIMEOUT_DEFAULT) != FTC_OK)
        return RANK_FAIL(rank, "send: %s", ftc_last_error());
  } else {
    for (int i = 0; i < 3; i++)
      if (ftc_recv(&got[i], 1, FTC_I32, 0, comm, FTC_TIMEOUT_DEFAULT) != FTC_OK)
        return RANK_FAIL(rank, "recv: %s", ftc_last_error());
    if (got[0] != 11 || got[1] != 22 || got[2] != 33)
      return RANK_FAIL(rank, "messages arrived as %d %d %d", got[0], got[1], got[2]);
  }
  return 0;
}

static void messages_between_two_ranks_arrive_in_order(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, p2p_order_body, NULL, &small_opts), 0);
}

static int exchange_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  size_t count = 4u << 20; /* 16 MiB of f32 each way: far more than the socket buffers */
  float *out = malloc(count * sizeof(float)), *in = calloc(count, sizeof(float));
  int right = (rank + 1) % n, left = (rank + n - 1) % n;
  for (size_t i = 0; i < count; i++) out[i] = (float)(rank * 1000 + (int)(i % 997));
  ftc_request_t *s, *r;
  /* Every rank sends first: only safe because queued sends and receives
   * progress together. */
  if (ftc_isend(out, count, FTC_F32, right, comm, &s) != FTC_OK ||
      ftc_irecv(in, count, FTC_F32, left, comm, &r) != FTC_OK)
    return RANK_FAIL(rank, "isend/irecv: %s", ftc_last_error());
  if (ftc_wait(s, 20000) != FTC_OK || ftc_wait(r, 20000) != FTC_OK)
    return RANK_FAIL(rank, "exchange: %s", ftc_last_error());
  ftc_request_free(s);
  ftc_request_free(r);
  for (size_t i = 0; i < count; i++)
    if (in[i] != (float)(left * 1000 + (int)(i % 997)))
      return RANK_FAIL(rank, "element %zu is %g", i, in[i]);
  free(out), free(in);
  return 0;
}

static void queued_sends_and_receives_of_large_messages_do_not_deadlock(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, exchange_body, NULL, &small_opts), 0);
  assert_int_equal(harness_run(3, exchange_body, NULL, &small_opts), 0);
}

/* ---- many requests in flight ---- */

static int inflight_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  enum { K = 16 };
  size_t count = 5000;
  float *buf[K], want[5000];
  ftc_request_t *req[K];
  ref_fill(FTC_F32, FTC_SUM, n, want, count, 0);
  for (int k = 0; k < K; k++) {
    buf[k] = malloc(count * sizeof(float));
    gen_fill(FTC_F32, FTC_SUM, rank, buf[k], count, 0);
    if (ftc_iallreduce(buf[k], buf[k], count, FTC_F32, FTC_SUM, comm, &req[k]) != FTC_OK)
      return RANK_FAIL(rank, "iallreduce: %s", ftc_last_error());
  }
  /* A blocking call behind the queue waits its turn. */
  float one = 1.0f;
  if (ftc_allreduce(&one, &one, 1, FTC_F32, FTC_SUM, comm, FTC_TIMEOUT_DEFAULT) != FTC_OK ||
      one != (float)n)
    return RANK_FAIL(rank, "blocking allreduce behind the queue: %s", ftc_last_error());
  int bad = 0;
  for (int k = K - 1; k >= 0; k--) {
    int done = 0;
    if (ftc_test(req[k], &done) != FTC_OK || !done)
      bad |= RANK_FAIL(rank, "request %d not complete after a later blocking call", k);
    if (ftc_wait(req[k], FTC_TIMEOUT_DEFAULT) != FTC_OK)
      bad |= RANK_FAIL(rank, "wait %d: %s", k, ftc_last_error());
    bad |= compare("iallreduce in flight", rank, FTC_F32, buf[k], want, count);
    ftc_request_free(req[k]);
    free(buf[k]);
  }
  return bad;
}

static void requests_complete_in_the_order_started(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, inflight_body, NULL, &small_opts), 0);
  assert_int_equal(harness_run(4, inflight_body, NULL, &small_opts), 0);
}

/* ---- big buffers ---- */

static int big_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  size_t count = (size_t)(uintptr_t)arg;
  float *buf = calloc(count, sizeof(float));
  for (size_t i = 0; i < count; i++) buf[i] = (float)((rank + 1) * ((i % 13) + 1));
  ftc_status_t st = ftc_allreduce(buf, buf, count, FTC_F32, FTC_SUM, comm, FTC_TIMEOUT_DEFAULT);
  if (st != FTC_OK) return RANK_FAIL(rank, "64 MiB allreduce: %s", ftc_last_error());
  float tri = (float)(n * (n + 1) / 2);
  for (size_t i = 0; i < count; i++)
    if (buf[i] != tri * (float)((i % 13) + 1))
      return RANK_FAIL(rank, "element %zu is %g, expected %g", i, buf[i], tri * (float)((i % 13) + 1));
  free(buf);
  return 0;
}

static const harness_opts_t big_opts = {.time_limit_s = 120, .env = {"FTCOMM_SPIN_US=0"}};

static void allreduce_of_64_mib_is_exact_at_2_ranks(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, big_body, (void *)(uintptr_t)(16u << 20), &big_opts), 0);
}

static void allreduce_of_64_mib_is_exact_at_4_ranks(void **state) {
  (void)state;
  assert_int_equal(harness_run(4, big_body, (void *)(uintptr_t)(16u << 20), &big_opts), 0);
}

/* Halving and doubling over 64 MiB, with the fold of a non-power of two. */
static const harness_opts_t halving_opts = {
    .time_limit_s = 120, .env = {"FTCOMM_SPIN_US=0", "FTCOMM_HALVING_MAX=1073741824"}};

static void allreduce_of_64_mib_by_halving_is_exact_at_3_ranks(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, big_body, (void *)(uintptr_t)(16u << 20), &halving_opts), 0);
}

static int huge_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  size_t count = (256u << 20) + 3; /* u8: just past 256 MiB, not a multiple of anything */
  uint8_t *buf = malloc(count);
  for (size_t i = 0; i < count; i++) buf[i] = (uint8_t)((i + (size_t)rank) % 7);
  ftc_status_t st = ftc_allreduce(buf, buf, count, FTC_U8, FTC_MAX, comm, FTC_TIMEOUT_DEFAULT);
  if (st != FTC_OK) return RANK_FAIL(rank, "256 MiB allreduce: %s", ftc_last_error());
  for (size_t i = 0; i < count; i++) {
    uint8_t want = 0;
    for (int r = 0; r < n; r++)
      if ((uint8_t)((i + (size_t)r) % 7) > want) want = (uint8_t)((i + (size_t)r) % 7);
    if (buf[i] != want) return RANK_FAIL(rank, "byte %zu is %u, expected %u", i, buf[i], want);
  }
  free(buf);
  return 0;
}

static void allreduce_past_256_mib_is_exact(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, huge_body, NULL, &big_opts), 0);
}

#define SET_ENTRIES(prefix)                                                          \
  cmocka_unit_test(prefix##_1), cmocka_unit_test(prefix##_2), cmocka_unit_test(prefix##_3), \
      cmocka_unit_test(prefix##_4), cmocka_unit_test(prefix##_7), cmocka_unit_test(prefix##_8)

int main(void) {
  const struct CMUnitTest tests[] = {
      SET_ENTRIES(allreduce_matches_reference_at_size),
      SET_ENTRIES(allreduce_by_ring_matches_reference_at_size),
      SET_ENTRIES(allreduce_forced_to_ring_matches_reference_at_size),
      SET_ENTRIES(allreduce_forced_to_halving_matches_reference_at_size),
      SET_ENTRIES(allreduce_forced_to_doubling_matches_reference_at_size),
      SET_ENTRIES(allreduce_forced_to_flat_matches_reference_at_size),
      cmocka_unit_test(every_algorithm_gives_every_rank_the_same_bits_at_3_ranks),
      cmocka_unit_test(every_algorithm_gives_every_rank_the_same_bits_at_8_ranks),
      cmocka_unit_test(allreduce_forced_to_halving_matches_reference_at_16_ranks),
      cmocka_unit_test(allreduce_forced_to_halving_matches_reference_at_12_ranks),
      cmocka_unit_test(allreduce_algorithm_switched_per_call_matches_reference_at_3_ranks),
      cmocka_unit_test(allreduce_algorithm_switched_per_call_matches_reference_at_8_ranks),
      cmocka_unit_test(ranks_that_set_different_algorithms_fail_with_mismatch),
      SET_ENTRIES(broadcast_delivers_root_data_at_size),
      SET_ENTRIES(reduce_matches_reference_on_root_at_size),
      SET_ENTRIES(allgather_concatenates_in_rank_order_at_size),
      SET_ENTRIES(reduce_scatter_gives_each_rank_its_block_at_size),
      SET_ENTRIES(alltoall_transposes_blocks_at_size),
      cmocka_unit_test(barrier_waits_for_the_last_rank),
      cmocka_unit_test(send_recv_deliver_in_a_ring),
      cmocka_unit_test(messages_between_two_ranks_arrive_in_order),
      cmocka_unit_test(queued_sends_and_receives_of_large_messages_do_not_deadlock),
      cmocka_unit_test(requests_complete_in_the_order_started),
      cmocka_unit_test(allreduce_of_64_mib_is_exact_at_2_ranks),
      cmocka_unit_test(allreduce_of_64_mib_is_exact_at_4_ranks),
      cmocka_unit_test(allreduce_of_64_mib_by_halving_is_exact_at_3_ranks),
      cmocka_unit_test(allreduce_past_256_mib_is_exact),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
