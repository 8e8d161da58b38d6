/*
 * refdata.h - deterministic test data and the serial reference reductions:
 * rank r's element i is a small integer (exact in every dtype, including
 * f16/bf16 partial sums and products), so the expected result of any
 * reduction order is computed exactly in int64 and stored in the dtype the
 * way the library rounds (AVG divides once, in float for the float types).
 */
#ifndef FTC_TEST_REFDATA_H
#define FTC_TEST_REFDATA_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/reduce.h"
#include "ftcomm.h"

/* Whether op applies to dt (bitwise ops: integer dtypes only). */
static inline int op_fits(ftc_dtype_t dt, ftc_op_t op) {
  return !ftc__op_is_bitwise(op) || ftc__dtype_is_integer(dt);
}

static inline int64_t gen_val(ftc_dtype_t dt, ftc_op_t op, int rank, size_t i) {
  if (op == FTC_PROD) {
    static const int64_t f[4] = {1, 2, -1, -2}, u[4] = {1, 2, 3, 1};
    return dt == FTC_U8 ? u[(rank + i) % 4] : f[(rank + i) % 4];
  }
  int64_t v = (int64_t)(((size_t)rank + 1) * 7 + i * 3) % 11 - 5;
  return dt == FTC_U8 ? v + 5 : v;
}

static inline void store_val(ftc_dtype_t dt, void *buf, size_t i, double v) {
  switch (dt) {
    case FTC_F32: ((float *)buf)[i] = (float)v; break;
    case FTC_F64: ((double *)buf)[i] = v; break;
    case FTC_F16: ((uint16_t *)buf)[i] = ftc__f32_to_f16((float)v); break;
    case FTC_BF16: ((uint16_t *)buf)[i] = ftc__f32_to_bf16((float)v); break;
    case FTC_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case FTC_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case FTC_U8: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
    default: break;
  }
}

static inline double load_val(ftc_dtype_t dt, const void *buf, size_t i) {
  switch (dt) {
    case FTC_F32: return ((const float *)buf)[i];
    case FTC_F64: return ((const double *)buf)[i];
    case FTC_F16: return ftc__f16_to_f32(((const uint16_t *)buf)[i]);
    case FTC_BF16: return ftc__bf16_to_f32(((const uint16_t *)buf)[i]);
    case FTC_I32: return ((const int32_t *)buf)[i];
    case FTC_I64: return (double)((const int64_t *)buf)[i];
    case FTC_U8: return ((const uint8_t *)buf)[i];
    default: return 0;
  }
}

/* buf[k] = rank's element i0 + k. */
static inline void gen_fill(ftc_dtype_t dt, ftc_op_t op, int rank, void *buf, size_t count,
                            size_t i0) {
  for (size_t k = 0; k < count; k++) store_val(dt, buf, k, (double)gen_val(dt, op, rank, i0 + k));
}

/* buf[k] = the reduction over ranks 0..n-1 of element i0 + k. */
static inline void ref_fill(ftc_dtype_t dt, ftc_op_t op, int n, void *buf, size_t count, size_t i0) {
  for (size_t k = 0; k < count; k++) {
    int64_t acc = gen_val(dt, op, 0, i0 + k);
    for (int r = 1; r < n; r++) {
      int64_t v = gen_val(dt, op, r, i0 + k);
      switch (op) {
        case FTC_PROD: acc *= v; break;
        case FTC_MIN: acc = v < acc ? v : acc; break;
        case FTC_MAX: acc = v > acc ? v : acc; break;
        case FTC_BAND: acc &= v; break;
        case FTC_BOR: acc |= v; break;
        case FTC_BXOR: acc ^= v; break;
        default: acc += v; break;
      }
    }
    if (dt == FTC_U8) acc &= 0xff;
    double out = (double)acc;
    if (op == FTC_AVG) {
      if (dt == FTC_F64)
        out = (double)acc / n;
      else if (dt == FTC_F32 || dt == FTC_F16 || dt == FTC_BF16)
        out = (double)((float)acc / (float)n);
      else
        out = (double)(acc / n);
    }
    store_val(dt, buf, k, out);
  }
}

/* 0 when equal; else prints the first difference and returns 1. */
static inline int compare(const char *what, int rank, ftc_dtype_t dt, const void *got,
                          const void *want, size_t count) {
  size_t es = ftc_dtype_size(dt);
  if (!count || memcmp(got, want, count * es) == 0) return 0;
  for (size_t k = 0; k < count; k++)
    if (memcmp((const char *)got + k * es, (const char *)want + k * es, es) != 0) {
      fprintf(stderr, "rank %d: %s: %s element %zu of %zu is %g, expected %g\n", rank, what,
              ftc_dtype_name(dt), k, count, load_val(dt, got, k), load_val(dt, want, k));
      return 1;
    }
  return 1;
}

#endif
