/*
 * test_bench_util.c - the shared benchmark core behaves as the rows promise:
 * sizes parse with K/M/G suffixes, a sweep ends on its largest size, the
 * geometry of each collective follows nccl-tests, busbw factors are the
 * nccl-tests ones, and the first-iteration check counts exactly the wrong
 * elements (zero for the right answer, one for one corrupted element) for
 * every collective, dtype and op. Without this, "#wrong = 0" would prove
 * nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bench_util.h"

static void sizes_parse_with_binary_suffixes(void **state) {
  (void)state;
  size_t v;
  assert_int_equal(bench_parse_size("8", &v), 0);
  assert_int_equal(v, 8);
  assert_int_equal(bench_parse_size("4K", &v), 0);
  assert_int_equal(v, 4096);
  assert_int_equal(bench_parse_size("256M", &v), 0);
  assert_int_equal(v, 256u << 20);
  assert_int_equal(bench_parse_size("1G", &v), 0);
  assert_int_equal(v, 1u << 30);
  assert_int_equal(bench_parse_size("2MB", &v), 0);
  assert_int_equal(v, 2u << 20);
  assert_int_equal(bench_parse_size("12X", &v), -1);
  assert_int_equal(bench_parse_size("", &v), -1);
  assert_int_equal(bench_parse_size("-1", &v), -1);
}

static void parse(bench_opts_t *o, int argc, char **argv, int want) {
  char err[128];
  assert_int_equal(bench_parse_args(argc, argv, o, "t", NULL, err, sizeof(err)), want);
}

static void options_parse_and_bad_values_are_refused(void **state) {
  (void)state;
  bench_opts_t o;
  char *ok[] = {"x", "-b", "8", "-e", "1M", "-f", "4", "-c", "alltoall", "-d", "bf16",
                "-o", "max", "-n", "3", "-w", "1", "-a", "--csv", NULL};
  parse(&o, 19, ok, 0);
  assert_int_equal(o.min_bytes, 8);
  assert_int_equal(o.max_bytes, 1 << 20);
  assert_int_equal(o.coll, BENCH_ALLTOALL);
  assert_int_equal(o.dtype, FTC_BF16);
  assert_int_equal(o.op, FTC_MAX);
  assert_int_equal(o.iters, 3);
  assert_int_equal(o.async, 1);
  assert_int_equal(o.csv, 1);
  char *bad_op[] = {"x", "-o", "xor", NULL};
  parse(&o, 3, bad_op, -1);
  char *bad_range[] = {"x", "-b", "1M", "-e", "8", NULL};
  parse(&o, 5, bad_range, -1);
  char *bad_factor[] = {"x", "-f", "1", NULL};
  parse(&o, 3, bad_factor, -1);
}

static void a_sweep_ends_on_its_largest_size(void **state) {
  (void)state;
  bench_opts_t o;
  char *argv[] = {"x", "-b", "8", "-e", "256M", "-f", "4", NULL};
  parse(&o, 7, argv, 0);
  size_t s[64];
  int n = bench_sizes(&o, s, 64);
  assert_int_equal(s[0], 8);
  assert_int_equal(s[1], 32);
  assert_int_equal(s[n - 1], 256u << 20);
  assert_true(s[n - 2] < s[n - 1]);
}

static void big_sizes_get_fewer_iterations(void **state) {
  (void)state;
  bench_opts_t o;
  char *argv[] = {"x", "-n", "20", "-w", "5", "-I", "512M", NULL};
  parse(&o, 7, argv, 0);
  int w, n;
  bench_iterations(&o, 8, &w, &n);
  assert_int_equal(n, 20);
  assert_int_equal(w, 5);
  bench_iterations(&o, 256u << 20, &w, &n);
  assert_int_equal(n, 2);
  assert_int_equal(w, 1);
}

static void geometry_and_busbw_follow_nccl_tests(void **state) {
  (void)state;
  bench_geom_t g;
  assert_int_equal(bench_geometry(BENCH_ALLREDUCE, 1024, 4, FTC_F32, &g), 0);
  assert_int_equal(g.per_rank, 256);
  assert_int_equal(g.recv_elems, 256);
  assert_int_equal(bench_geometry(BENCH_ALLGATHER, 1024, 4, FTC_F32, &g), 0);
  assert_int_equal(g.per_rank, 64);
  assert_int_equal(g.recv_elems, 256);
  assert_int_equal(bench_geometry(BENCH_REDUCE_SCATTER, 1000, 3, FTC_F64, &g), 0);
  assert_int_equal(g.per_rank, 41); /* 125 elements, 41 per rank, size rounded down */
  assert_int_equal(g.bytes, 41 * 3 * 8);
  assert_int_equal(bench_geometry(BENCH_ALLTOALL, 8, 4, FTC_F32, &g), -1); /* < 1 per peer */
  assert_true(bench_busbw_factor(BENCH_ALLREDUCE, 4) == 1.5);
  assert_true(bench_busbw_factor(BENCH_BROADCAST, 8) == 1.0);
  assert_true(bench_busbw_factor(BENCH_ALLGATHER, 4) == 0.75);
}

/* The right answer for `rank`, built from every rank's input the slow way. */
static void reference(const bench_opts_t *o, const bench_geom_t *g, int rank, int nranks,
                      unsigned char *out, unsigned char in[][4096]) {
  size_t ts = bench_dtype_size(o->dtype);
  for (int r = 0; r < nranks; r++) bench_fill(o, g, r, nranks, in[r], NULL);
  switch (o->coll) {
  case BENCH_BROADCAST: memcpy(out, in[o->root], g->recv_elems * ts); break;
  case BENCH_ALLGATHER:
    for (int r = 0; r < nranks; r++) memcpy(out + r * g->per_rank * ts, in[r], g->per_rank * ts);
    break;
  case BENCH_ALLTOALL:
    for (int r = 0; r < nranks; r++)
      memcpy(out + r * g->per_rank * ts, in[r] + rank * g->per_rank * ts, g->per_rank * ts);
    break;
  default: break;
  }
}

static void check_counts_exactly_the_wrong_elements(void **state) {
  (void)state;
  const int nranks = 3, rank = 1;
  static unsigned char in[3][4096], out[4096];
  const bench_coll_t moves[] = {BENCH_BROADCAST, BENCH_ALLGATHER, BENCH_ALLTOALL};
  for (int d = 0; d < FTC_DTYPE_COUNT; d++) {
    for (size_t c = 0; c < sizeof(moves) / sizeof(moves[0]); c++) {
      bench_opts_t o;
      char *argv[] = {"x", NULL};
      parse(&o, 1, argv, 0);
      o.coll = moves[c];
      o.dtype = (ftc_dtype_t)d;
      o.root = 2;
      bench_geom_t g;
      assert_int_equal(bench_geometry(o.coll, 600, nranks, o.dtype, &g), 0);
      reference(&o, &g, rank, nranks, out, in);
      assert_int_equal(bench_check(&o, &g, rank, nranks, out), 0);
      out[(g.recv_elems / 2) * bench_dtype_size(o.dtype)] ^= 0x40;
      assert_int_equal(bench_check(&o, &g, rank, nranks, out), 1);
    }
  }
}

static void check_of_reductions_rejects_poison_and_one_rank_input(void **state) {
  (void)state;
  const bench_coll_t reds[] = {BENCH_ALLREDUCE, BENCH_REDUCE_SCATTER};
  static unsigned char send[4096], recv[4096];
  for (int d = 0; d < FTC_DTYPE_COUNT; d++) {
    for (int op = 0; op < FTC_OP_COUNT; op++) {
      if (op >= FTC_BAND && d != FTC_I32 && d != FTC_I64 && d != FTC_U8) continue; /* integer only */
      for (size_t c = 0; c < 2; c++) {
        bench_opts_t o;
        char *argv[] = {"x", NULL};
        parse(&o, 1, argv, 0);
        o.coll = reds[c];
        o.dtype = (ftc_dtype_t)d;
        o.op = (ftc_op_t)op;
        bench_geom_t g;
        assert_int_equal(bench_geometry(o.coll, 1200, 4, o.dtype, &g), 0);
        bench_fill(&o, &g, 0, 4, send, recv);
        /* the poisoned receive buffer is wrong everywhere */
        assert_int_equal(bench_check(&o, &g, 0, 4, recv), g.recv_elems);
        /* one rank's input is not the reduction of four */
        assert_true(bench_check(&o, &g, 0, 4, send) > 0);
      }
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sizes_parse_with_binary_suffixes),
      cmocka_unit_test(options_parse_and_bad_values_are_refused),
      cmocka_unit_test(a_sweep_ends_on_its_largest_size),
      cmocka_unit_test(big_sizes_get_fewer_iterations),
      cmocka_unit_test(geometry_and_busbw_follow_nccl_tests),
      cmocka_unit_test(check_counts_exactly_the_wrong_elements),
      cmocka_unit_test(check_of_reductions_rejects_poison_and_one_rank_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
