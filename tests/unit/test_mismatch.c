/*
 * test_mismatch.c - ranks that pass different arguments to one collective
 * (forked ranks, 2, 3 and 4 of them): every collective with a count, dtype,
 * root, reduce op or kind that differs on the last rank. The ranks that
 * compare their descriptor with a rank whose call differs fail it with
 * FTC_ERR_MISMATCH naming both calls; at 2 ranks both do (their calls are
 * compared both ways); no rank ever reads the other's bytes as data: every
 * rank's next collective fails (the epoch is failed), none returns FTC_OK.
 * A NULL recvbuf on the reduce root alone is refused there, and the others'
 * reduce fails with the mismatch when the root's next call comes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "harness.h"

static const harness_opts_t opts = {
    .time_limit_s = 120,
    .timeout_ms = 10000,
    .env = {"FTCOMM_SPIN_US=0", "FTCOMM_RING_THRESHOLD=4096", "FTCOMM_CHUNK_BYTES=4096"},
};

enum {
  AR_COUNT, AR_DTYPE, AR_OP, AR_COUNT_LARGE, BC_ROOT, BC_COUNT, BC_ROOT_LARGE, RED_ROOT, RED_OP,
  AG_COUNT, RS_COUNT, A2A_COUNT, GATHER_ROOT, SCATTER_ROOT, BARRIER_VS_AR, AGV_COUNTS,
  A2AV_BLOCK, A2AV_UNEXPECTED, NCASES
};
static const char *const case_names[NCASES] = {
    "allreduce count", "allreduce dtype", "allreduce op", "allreduce count (ring)",
    "broadcast root", "broadcast count", "broadcast root (chain)", "reduce root", "reduce op",
    "allgather count", "reduce_scatter count", "alltoall count", "gather root", "scatter root",
    "barrier vs allreduce", "allgatherv counts", "alltoallv block",
    "alltoallv block where none is expected",
};

/* Call case c; `odd` (the last rank) passes the differing argument. */
static ftc_status_t call(int c, ftc_comm_t *comm, int rank, int n, int odd, char *a, char *b) {
  const int to = FTC_TIMEOUT_DEFAULT;
  size_t cnt[8], cnt2[8];
  switch (c) {
    case AR_COUNT: return ftc_allreduce(a, b, odd ? 16 : 8, FTC_F32, FTC_SUM, comm, to);
    case AR_DTYPE: return ftc_allreduce(a, b, 8, odd ? FTC_I32 : FTC_F32, FTC_SUM, comm, to);
    case AR_OP: return ftc_allreduce(a, b, 8, FTC_F32, odd ? FTC_MAX : FTC_SUM, comm, to);
    case AR_COUNT_LARGE: return ftc_allreduce(a, b, odd ? 20001 : 20000, FTC_F32, FTC_SUM, comm, to);
    case BC_ROOT: return ftc_broadcast(a, 64, FTC_F32, odd ? 1 : 0, comm, to);
    case BC_COUNT: return ftc_broadcast(a, odd ? 32 : 64, FTC_F32, 0, comm, to);
    case BC_ROOT_LARGE: return ftc_broadcast(a, 20000, FTC_F32, odd ? 1 : 0, comm, to);
    case RED_ROOT: return ftc_reduce(a, b, 64, FTC_F32, FTC_SUM, odd ? 1 : 0, comm, to);
    case RED_OP: return ftc_reduce(a, b, 64, FTC_F32, odd ? FTC_MIN : FTC_SUM, 0, comm, to);
    case AG_COUNT: return ftc_allgather(a, b, odd ? 5 : 4, FTC_I32, comm, to);
    case RS_COUNT: return ftc_reduce_scatter(a, b, odd ? 5 : 4, FTC_I32, FTC_SUM, comm, to);
    case A2A_COUNT: return ftc_alltoall(a, b, odd ? 5 : 4, FTC_I32, comm, to);
    case GATHER_ROOT: return ftc_gather(a, b, 4, FTC_I32, odd ? 1 : 0, comm, to);
    case SCATTER_ROOT: return ftc_scatter(a, b, 4, FTC_I32, odd ? 1 : 0, comm, to);
    case BARRIER_VS_AR:
      return odd ? ftc_barrier(comm, to) : ftc_allreduce(a, b, 1, FTC_F32, FTC_SUM, comm, to);
    case AGV_COUNTS:
      for (int q = 0; q < n; q++) cnt[q] = (size_t)(q + 1) + (odd && q == 0 ? 1 : 0);
      return ftc_allgatherv(a, b, cnt, NULL, FTC_I32, comm, to);
    case A2AV_BLOCK: /* the last rank sends rank 0 one element more than it expects */
      for (int q = 0; q < n; q++) cnt[q] = cnt2[q] = 3;
      if (odd) cnt[0] = 4;
      (void)rank;
      return ftc_alltoallv(a, cnt, NULL, b, cnt2, NULL, FTC_I32, comm, to);
    case A2AV_UNEXPECTED: /* every block empty but the last rank's to rank n-2 (not the rank
                           * whose descriptor rank n-2 reads in the ring), which expects none */
      for (int q = 0; q < n; q++) cnt[q] = cnt2[q] = 0;
      if (odd) cnt[n >= 3 ? n - 2 : 0] = 3;
      return ftc_alltoallv(a, cnt, NULL, b, cnt2, NULL, FTC_I32, comm, to);
    default: return FTC_ERR_INTERNAL;
  }
}

/* What the error of the broadcast-root case says on rank 0 at 2 ranks, in
 * full. */
#define BC_ROOT_TEXT "rank 1 called broadcast #1 root 1 x64 f32 where this rank (0) called broadcast #1 root 0 x64 f32"

static int *seen; /* shared with the ranks: how many failed with the mismatch */

static int mismatch_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  const int c = *(const int *)arg, odd = rank == n - 1;
  char *a = calloc(1, 1 << 20), *b = calloc(1, 1 << 20);
  ftc_status_t st = call(c, comm, rank, n, odd, a, b);
  char why[512];
  snprintf(why, sizeof(why), "%s", ftc_last_error());
  int bad = 0;
  if (st != FTC_OK && st != FTC_ERR_MISMATCH && st != FTC_ERR_PEER_LOST && st != FTC_ERR_REVOKED)
    bad = RANK_FAIL(rank, "%s: %s (%s)", case_names[c], ftc_strerror(st), why);
  if (st == FTC_ERR_MISMATCH && !strstr(why, "where this rank"))
    bad = RANK_FAIL(rank, "%s: the error does not name both calls: %s", case_names[c], why);
  /* At 2 ranks each compares the other's call: both fail with it (an
   * alltoallv pair that agrees one way completes that way). */
  if (n == 2 && c != A2AV_BLOCK && c != A2AV_UNEXPECTED && st != FTC_ERR_MISMATCH)
    bad = RANK_FAIL(rank, "%s at 2 ranks: %s (%s)", case_names[c], ftc_strerror(st), why);
  if (n == 2 && c == BC_ROOT && rank == 0 && !strstr(why, BC_ROOT_TEXT))
    bad = RANK_FAIL(rank, "broadcast root: want \"%s\" in: %s", BC_ROOT_TEXT, why);
  int32_t one = 1;
  ftc_status_t next = ftc_allreduce(&one, &one, 1, FTC_I32, FTC_SUM, comm, FTC_TIMEOUT_DEFAULT);
  if (next == FTC_OK)
    bad = RANK_FAIL(rank, "%s: the allreduce after it returned OK (%d): the epoch must be failed",
                    case_names[c], one);
  free(a), free(b);
  if (st == FTC_ERR_MISMATCH) __atomic_fetch_add(seen, 1, __ATOMIC_RELAXED);
  return bad;
}

static void run_all(int n) {
  seen = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(seen != MAP_FAILED);
  for (int c = 0; c < NCASES; c++) {
    int arg = c;
    *seen = 0;
    if (harness_run(n, mismatch_body, &arg, &opts) != 0)
      fail_msg("case \"%s\" at %d ranks", case_names[c], n);
    if (*seen == 0) fail_msg("case \"%s\" at %d ranks: no rank saw the mismatch", case_names[c], n);
  }
  munmap(seen, sizeof(int));
}

static void every_collective_mismatch_fails_at_2_ranks(void **state) {
  (void)state;
  run_all(2);
}

static void every_collective_mismatch_fails_at_3_ranks(void **state) {
  (void)state;
  run_all(3);
}

static void every_collective_mismatch_fails_at_4_ranks(void **state) {
  (void)state;
  run_all(4);
}

/* A NULL recvbuf on the reduce root alone: refused there before anything
 * is sent; the root's next call meets the others' reduce (a rank whose
 * neighbours' calls agreed with its own may complete the reduce: its part
 * went out; its next call then fails). */
static int null_root_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg, (void)n;
  float x[16] = {1}, y[16];
  ftc_status_t st = ftc_reduce(x, rank == 0 ? NULL : y, 16, FTC_F32, FTC_SUM, 0, comm, 5000);
  if (rank == 0) {
    if (st != FTC_ERR_INVALID_ARGUMENT) return RANK_FAIL(rank, "reduce with a NULL recvbuf: %s", ftc_strerror(st));
    st = ftc_allreduce(x, y, 16, FTC_F32, FTC_SUM, comm, 5000);
    if (st != FTC_ERR_MISMATCH || !strstr(ftc_last_error(), "called reduce #1 root 0 sum x16 f32"))
      return RANK_FAIL(rank, "the allreduce after it: %s (%s)", ftc_strerror(st), ftc_last_error());
    return 0;
  }
  /* REVOKED: the root's mismatch and its shut connections reached this rank
   * before its own reduce started (the epoch failed earlier, a peer lost). */
  if (st != FTC_OK && st != FTC_ERR_MISMATCH && st != FTC_ERR_PEER_LOST && st != FTC_ERR_REVOKED)
    return RANK_FAIL(rank, "reduce whose root refused its call: %s (%s)", ftc_strerror(st), ftc_last_error());
  if (rank == 1 && st != FTC_ERR_MISMATCH) /* its ring descriptor comes from the root */
    return RANK_FAIL(rank, "reduce whose root refused its call: %s (%s)", ftc_strerror(st), ftc_last_error());
  if (st == FTC_OK && ftc_allreduce(x, y, 16, FTC_F32, FTC_SUM, comm, 5000) == FTC_OK)
    return RANK_FAIL(rank, "an allreduce after the root's refusal returned OK");
  return 0;
}

static void a_null_recvbuf_on_the_reduce_root_alone_fails_everywhere(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, null_root_body, NULL, &opts), 0);
  assert_int_equal(harness_run(3, null_root_body, NULL, &opts), 0);
}

/* Calls that agree still pass, after calls that differed in what may
 * differ (displacements, in place or not). */
static int agree_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  int32_t in[64], out[64 * 8];
  for (int i = 0; i < 64; i++) in[i] = rank + i;
  size_t cnt[8], dsp[8];
  for (int q = 0; q < n; q++) cnt[q] = 2, dsp[q] = rank == 0 ? (size_t)q * 2 : (size_t)(n - 1 - q) * 2;
  if (ftc_allgatherv(in, out, cnt, dsp, FTC_I32, comm, 5000) != FTC_OK)
    return RANK_FAIL(rank, "allgatherv with displacements of its own: %s", ftc_last_error());
  int32_t sum[64];
  if (ftc_allreduce(in, rank ? sum : in, 64, FTC_I32, FTC_SUM, comm, 5000) != FTC_OK)
    return RANK_FAIL(rank, "allreduce: %s", ftc_last_error());
  return 0;
}

static void calls_that_differ_only_locally_still_pass(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, agree_body, NULL, &opts), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_collective_mismatch_fails_at_2_ranks),
      cmocka_unit_test(every_collective_mismatch_fails_at_3_ranks),
      cmocka_unit_test(every_collective_mismatch_fails_at_4_ranks),
      cmocka_unit_test(a_null_recvbuf_on_the_reduce_root_alone_fails_everywhere),
      cmocka_unit_test(calls_that_differ_only_locally_still_pass),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
