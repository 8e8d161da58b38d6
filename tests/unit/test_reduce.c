/*
 * test_reduce.c - the reduction kernels on their own: f16 and bf16
 * conversions (round to nearest even, subnormals, overflow, NaN), every op
 * of every dtype on a few elements, in-place operands, AVG's division, and
 * the dtype/op names of the public API.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/reduce.h"
#include "ftcomm.h"

static void f16_converts_exact_values_both_ways(void **state) {
  (void)state;
  assert_int_equal(ftc__f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(ftc__f32_to_f16(-2.0f), 0xc000);
  assert_int_equal(ftc__f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(ftc__f32_to_f16(0.0f), 0x0000);
  assert_int_equal(ftc__f32_to_f16(-0.0f), 0x8000);
  assert_int_equal(ftc__f32_to_f16(ldexpf(1.0f, -14)), 0x0400); /* smallest normal */
  assert_int_equal(ftc__f32_to_f16(ldexpf(1.0f, -24)), 0x0001); /* smallest subnormal */
  for (uint32_t h = 0; h < 0x7c00; h++) /* every finite positive half round-trips */
    assert_int_equal(ftc__f32_to_f16(ftc__f16_to_f32((uint16_t)h)), h);
}

static void f16_rounds_halfway_cases_to_even(void **state) {
  (void)state;
  /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even 1. */
  assert_int_equal(ftc__f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
  /* 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9: goes up. */
  assert_int_equal(ftc__f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
  /* Just above halfway rounds up. */
  assert_int_equal(ftc__f32_to_f16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3c01);
  /* Subnormal ties: 2^-25 is half the smallest subnormal: to even (0). */
  assert_int_equal(ftc__f32_to_f16(ldexpf(1.0f, -25)), 0x0000);
  assert_int_equal(ftc__f32_to_f16(3 * ldexpf(1.0f, -25)), 0x0002);
}

static void f16_overflows_to_infinity_and_keeps_nan(void **state) {
  (void)state;
  assert_int_equal(ftc__f32_to_f16(65519.0f), 0x7bff);  /* below the halfway point */
  assert_int_equal(ftc__f32_to_f16(65520.0f), 0x7c00);  /* halfway: ties to even = inf */
  assert_int_equal(ftc__f32_to_f16(1e10f), 0x7c00);
  assert_int_equal(ftc__f32_to_f16(-INFINITY), 0xfc00);
  uint16_t n = ftc__f32_to_f16(NAN);
  assert_true((n & 0x7c00) == 0x7c00 && (n & 0x03ff) != 0);
  assert_true(isnan(ftc__f16_to_f32(0x7e00)));
  assert_true(isinf(ftc__f16_to_f32(0x7c00)));
}

static void bf16_rounds_to_nearest_even(void **state) {
  (void)state;
  assert_int_equal(ftc__f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(ftc__f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80);     /* tie -> even */
  assert_int_equal(ftc__f32_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)), 0x3f82); /* tie -> even (up) */
  assert_int_equal(ftc__f32_to_bf16(1.0f + ldexpf(1.0f, -8) + ldexpf(1.0f, -16)), 0x3f81);
  assert_true(isnan(ftc__bf16_to_f32(ftc__f32_to_bf16(NAN))));
  assert_int_equal(ftc__f32_to_bf16(INFINITY), 0x7f80);
  assert_true(ftc__bf16_to_f32(0x4049) == 3.140625f);
}

static void f16_sum_rounds_once_per_addition(void **state) {
  (void)state;
  /* 2048 + 1 = 2049 is not a half; it is a tie between 2048 and 2050 -> 2048. */
  uint16_t a[2] = {ftc__f32_to_f16(2048.0f), ftc__f32_to_f16(2048.0f)};
  uint16_t b[2] = {ftc__f32_to_f16(1.0f), ftc__f32_to_f16(3.0f)};
  uint16_t out[2];
  ftc__reduce(out, a, b, 2, FTC_F16, FTC_SUM);
  assert_true(ftc__f16_to_f32(out[0]) == 2048.0f);
  assert_true(ftc__f16_to_f32(out[1]) == 2052.0f); /* 2051 ties to even 2052 */
}

static void bf16_sum_rounds_once_per_addition(void **state) {
  (void)state;
  uint16_t a = ftc__f32_to_bf16(256.0f), b = ftc__f32_to_bf16(1.0f), out;
  ftc__reduce(&out, &a, &b, 1, FTC_BF16, FTC_SUM);
  assert_true(ftc__bf16_to_f32(out) == 256.0f); /* 257 ties to even 256 */
  b = ftc__f32_to_bf16(3.0f);
  ftc__reduce(&out, &a, &b, 1, FTC_BF16, FTC_SUM);
  assert_true(ftc__bf16_to_f32(out) == 260.0f); /* 259 -> 260 */
}

static void every_op_of_f32_and_i32_matches_its_definition(void **state) {
  (void)state;
  float fa[4] = {1, -2, 3.5f, 0}, fb[4] = {4, 5, -1, -0.5f}, fo[4];
  ftc__reduce(fo, fa, fb, 4, FTC_F32, FTC_SUM);
  assert_true(fo[0] == 5 && fo[1] == 3 && fo[2] == 2.5f && fo[3] == -0.5f);
  ftc__reduce(fo, fa, fb, 4, FTC_F32, FTC_PROD);
  assert_true(fo[0] == 4 && fo[1] == -10 && fo[2] == -3.5f && fo[3] == 0);
  ftc__reduce(fo, fa, fb, 4, FTC_F32, FTC_MIN);
  assert_true(fo[0] == 1 && fo[1] == -2 && fo[2] == -1 && fo[3] == -0.5f);
  ftc__reduce(fo, fa, fb, 4, FTC_F32, FTC_MAX);
  assert_true(fo[0] == 4 && fo[1] == 5 && fo[2] == 3.5f && fo[3] == 0);
  int32_t ia[3] = {INT32_MAX, -7, 9}, ib[3] = {1, 3, -9}, io[3];
  ftc__reduce(io, ia, ib, 3, FTC_I32, FTC_SUM);
  assert_true(io[0] == INT32_MIN && io[1] == -4 && io[2] == 0); /* wraps, no UB */
  ftc__reduce(io, ia, ib, 3, FTC_I32, FTC_MIN);
  assert_true(io[0] == 1 && io[1] == -7 && io[2] == -9);
}

static void u8_and_i64_wrap_around(void **state) {
  (void)state;
  uint8_t a[2] = {250, 16}, b[2] = {10, 16}, o[2];
  ftc__reduce(o, a, b, 2, FTC_U8, FTC_SUM);
  assert_int_equal(o[0], 4);
  ftc__reduce(o, a, b, 2, FTC_U8, FTC_PROD);
  assert_int_equal(o[1], 0);
  int64_t x = INT64_MAX, y = 1, z;
  ftc__reduce(&z, &x, &y, 1, FTC_I64, FTC_SUM);
  assert_true(z == INT64_MIN);
}

static void reduce_works_in_place(void **state) {
  (void)state;
  double a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
  ftc__reduce(a, a, b, 3, FTC_F64, FTC_SUM);
  assert_true(a[0] == 11 && a[1] == 22 && a[2] == 33);
  ftc__reduce(b, a, b, 3, FTC_F64, FTC_MAX);
  assert_true(b[0] == 11 && b[1] == 22 && b[2] == 33);
}

static void avg_divides_once_and_truncates_integers(void **state) {
  (void)state;
  int32_t i[3] = {7, -7, 6};
  ftc__reduce_avg_finish(i, 3, FTC_I32, 2);
  assert_true(i[0] == 3 && i[1] == -3 && i[2] == 3);
  float f[1] = {1.0f};
  ftc__reduce_avg_finish(f, 1, FTC_F32, 3);
  assert_true(f[0] == 1.0f / 3.0f);
  uint16_t h = ftc__f32_to_f16(1.0f);
  ftc__reduce_avg_finish(&h, 1, FTC_F16, 3);
  assert_int_equal(h, ftc__f32_to_f16(1.0f / 3.0f));
  uint8_t u = 255;
  ftc__reduce_avg_finish(&u, 1, FTC_U8, 4);
  assert_int_equal(u, 63);
}

static void avg_reduces_as_sum(void **state) {
  (void)state;
  int64_t a = 5, b = 7, o;
  ftc__reduce(&o, &a, &b, 1, FTC_I64, FTC_AVG);
  assert_true(o == 12);
}

static void bitwise_ops_work_on_every_integer_type(void **state) {
  (void)state;
  int32_t a32[2] = {0x0ff0, -1}, b32[2] = {0x00ff, 6}, o32[2];
  ftc__reduce(o32, a32, b32, 2, FTC_I32, FTC_BAND);
  assert_true(o32[0] == 0x00f0 && o32[1] == 6);
  ftc__reduce(o32, a32, b32, 2, FTC_I32, FTC_BOR);
  assert_true(o32[0] == 0x0fff && o32[1] == -1);
  ftc__reduce(o32, a32, b32, 2, FTC_I32, FTC_BXOR);
  assert_true(o32[0] == 0x0f0f && o32[1] == ~6);
  int64_t a64 = INT64_MIN | 5, b64 = 3, o64;
  ftc__reduce(&o64, &a64, &b64, 1, FTC_I64, FTC_BXOR);
  assert_true(o64 == (INT64_MIN | 6));
  uint8_t a8[17], b8[17], o8[17]; /* past one vector's width */
  for (int i = 0; i < 17; i++) a8[i] = (uint8_t)(i * 37), b8[i] = (uint8_t)(255 - i);
  ftc__reduce(o8, a8, b8, 17, FTC_U8, FTC_BOR);
  for (int i = 0; i < 17; i++) assert_int_equal(o8[i], (uint8_t)(a8[i] | b8[i]));
  assert_string_equal(ftc_op_name(FTC_BAND), "band");
  assert_string_equal(ftc_op_name(FTC_BXOR), "bxor");
}

static void dtype_sizes_and_names(void **state) {
  (void)state;
  assert_int_equal(ftc_dtype_size(FTC_F32), 4);
  assert_int_equal(ftc_dtype_size(FTC_F64), 8);
  assert_int_equal(ftc_dtype_size(FTC_F16), 2);
  assert_int_equal(ftc_dtype_size(FTC_BF16), 2);
  assert_int_equal(ftc_dtype_size(FTC_I32), 4);
  assert_int_equal(ftc_dtype_size(FTC_I64), 8);
  assert_int_equal(ftc_dtype_size(FTC_U8), 1);
  assert_int_equal(ftc_dtype_size(FTC_DTYPE_COUNT), 0);
  assert_int_equal(ftc_dtype_size((ftc_dtype_t)-1), 0);
  assert_string_equal(ftc_dtype_name(FTC_BF16), "bf16");
  assert_string_equal(ftc_dtype_name((ftc_dtype_t)99), "?");
  assert_string_equal(ftc_op_name(FTC_AVG), "avg");
  assert_string_equal(ftc_op_name((ftc_op_t)-3), "?");
  assert_int_equal(ftc_version(), FTC_VERSION_CODE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bitwise_ops_work_on_every_integer_type),
      cmocka_unit_test(f16_converts_exact_values_both_ways),
      cmocka_unit_test(f16_rounds_halfway_cases_to_even),
      cmocka_unit_test(f16_overflows_to_infinity_and_keeps_nan),
      cmocka_unit_test(bf16_rounds_to_nearest_even),
      cmocka_unit_test(f16_sum_rounds_once_per_addition),
      cmocka_unit_test(bf16_sum_rounds_once_per_addition),
      cmocka_unit_test(every_op_of_f32_and_i32_matches_its_definition),
      cmocka_unit_test(u8_and_i64_wrap_around),
      cmocka_unit_test(reduce_works_in_place),
      cmocka_unit_test(avg_divides_once_and_truncates_integers),
      cmocka_unit_test(avg_reduces_as_sum),
      cmocka_unit_test(dtype_sizes_and_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
