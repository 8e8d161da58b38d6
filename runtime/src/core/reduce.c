/*
 * reduce.c - the reduction kernels: one plain loop per dtype and op, which
 * the compiler vectorizes, and the f16/bf16 conversions (compute in float,
 * round once per binary operation to nearest even). Also the dtype and op
 * names of the public API.
 */
#pragma GCC optimize("tree-vectorize")

#include "core/reduce.h"

#include <string.h>

size_t ftc_dtype_size(ftc_dtype_t dtype) {
  switch (dtype) {
    case FTC_F32: return 4;
    case FTC_F64: return 8;
    case FTC_F16: return 2;
    case FTC_BF16: return 2;
    case FTC_I32: return 4;
    case FTC_I64: return 8;
    case FTC_U8: return 1;
    default: return 0;
  }
}

const char *ftc_dtype_name(ftc_dtype_t dtype) {
  static const char *const names[FTC_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16",
                                                     "i32", "i64", "u8"};
  if ((int)dtype < 0 || dtype >= FTC_DTYPE_COUNT) return "?";
  return names[dtype];
}

const char *ftc_op_name(ftc_op_t op) {
  static const char *const names[FTC_OP_COUNT] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};
  if ((int)op < 0 || op >= FTC_OP_COUNT) return "?";
  return names[op];
}

float ftc__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  float f;
  if (exp == 0) {
    f = (float)man * 5.9604644775390625e-8f; /* man * 2^-24, exact */
    memcpy(&bits, &f, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  }
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t ftc__f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* quiet NaN */
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflows or halfway past 65504 */
  if (ax < 0x38800000u) {
    /* Below the smallest normal: adding 0.5 lines the subnormal's bits up
     * with the float's low mantissa, and the FPU rounds to nearest even. */
    float af;
    memcpy(&af, &ax, 4);
    af += 0.5f;
    uint32_t r;
    memcpy(&r, &af, 4);
    return (uint16_t)(sign | (uint16_t)(r - 0x3f000000u));
  }
  uint32_t odd = (ax >> 13) & 1u;
  ax += (uint32_t)(-112 * (1 << 23)) + 0xfffu + odd; /* rebias 127 -> 15, round */
  return (uint16_t)(sign | (uint16_t)(ax >> 13));
}

float ftc__bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t ftc__f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

#define OP_SUM(x, y) ((x) + (y))
#define OP_PROD(x, y) ((x) * (y))
#define OP_MIN(x, y) ((y) < (x) ? (y) : (x))
#define OP_MAX(x, y) ((y) > (x) ? (y) : (x))

#define DEFINE_LOOPS(T, suffix)                                                   \
  static void red_sum_##suffix(T *o, const T *a, const T *b, size_t n) {          \
    for (size_t i = 0; i < n; i++) o[i] = (T)OP_SUM(a[i], b[i]);                  \
  }                                                                               \
  static void red_prod_##suffix(T *o, const T *a, const T *b, size_t n) {         \
    for (size_t i = 0; i < n; i++) o[i] = (T)OP_PROD(a[i], b[i]);                 \
  }                                                                               \
  static void red_min_##suffix(T *o, const T *a, const T *b, size_t n) {          \
    for (size_t i = 0; i < n; i++) o[i] = OP_MIN(a[i], b[i]);                     \
  }                                                                               \
  static void red_max_##suffix(T *o, const T *a, const T *b, size_t n) {          \
    for (size_t i = 0; i < n; i++) o[i] = OP_MAX(a[i], b[i]);                     \
  }                                                                               \
  static void reduce_##suffix(void *o, const void *a, const void *b, size_t n,    \
                              ftc_op_t op) {                                      \
    switch (op) {                                                                 \
      case FTC_PROD: red_prod_##suffix(o, a, b, n); break;                        \
      case FTC_MIN: red_min_##suffix(o, a, b, n); break;                          \
      case FTC_MAX: red_max_##suffix(o, a, b, n); break;                          \
      default: red_sum_##suffix(o, a, b, n); break;                               \
    }                                                                             \
  }

/* Bitwise ops, for the integer types. */
#define DEFINE_BITS(T, suffix)                                                    \
  static void reduce_bits_##suffix(T *o, const T *a, const T *b, size_t n, ftc_op_t op) { \
    if (op == FTC_BAND)                                                           \
      for (size_t i = 0; i < n; i++) o[i] = (T)(a[i] & b[i]);                     \
    else if (op == FTC_BOR)                                                       \
      for (size_t i = 0; i < n; i++) o[i] = (T)(a[i] | b[i]);                     \
    else                                                                          \
      for (size_t i = 0; i < n; i++) o[i] = (T)(a[i] ^ b[i]);                     \
  }

DEFINE_BITS(uint32_t, i32)
DEFINE_BITS(uint64_t, i64)
DEFINE_BITS(uint8_t, u8)

DEFINE_LOOPS(float, f32)
DEFINE_LOOPS(double, f64)
DEFINE_LOOPS(int32_t, i32)
DEFINE_LOOPS(int64_t, i64)
DEFINE_LOOPS(uint8_t, u8)

/* Unsigned wraparound for sum/prod of the signed types, without the
 * undefined behaviour of signed overflow. */
static void reduce_int_wrap(void *o, const void *a, const void *b, size_t n, ftc_op_t op,
                            int wide) {
  if (op != FTC_SUM && op != FTC_AVG && op != FTC_PROD) {
    if (wide)
      reduce_i64(o, a, b, n, op);
    else
      reduce_i32(o, a, b, n, op);
    return;
  }
  if (wide) {
    uint64_t *d = o;
    const uint64_t *x = a, *y = b;
    if (op == FTC_PROD)
      for (size_t i = 0; i < n; i++) d[i] = x[i] * y[i];
    else
      for (size_t i = 0; i < n; i++) d[i] = x[i] + y[i];
  } else {
    uint32_t *d = o;
    const uint32_t *x = a, *y = b;
    if (op == FTC_PROD)
      for (size_t i = 0; i < n; i++) d[i] = x[i] * y[i];
    else
      for (size_t i = 0; i < n; i++) d[i] = x[i] + y[i];
  }
}

static inline float half_op(float x, float y, ftc_op_t op) {
  switch (op) {
    case FTC_PROD: return x * y;
    case FTC_MIN: return OP_MIN(x, y);
    case FTC_MAX: return OP_MAX(x, y);
    default: return x + y;
  }
}

static void reduce_f16(uint16_t *o, const uint16_t *a, const uint16_t *b, size_t n,
                       ftc_op_t op) {
  for (size_t i = 0; i < n; i++)
    o[i] = ftc__f32_to_f16(half_op(ftc__f16_to_f32(a[i]), ftc__f16_to_f32(b[i]), op));
}

static void reduce_bf16(uint16_t *o, const uint16_t *a, const uint16_t *b, size_t n,
                        ftc_op_t op) {
  for (size_t i = 0; i < n; i++)
    o[i] = ftc__f32_to_bf16(half_op(ftc__bf16_to_f32(a[i]), ftc__bf16_to_f32(b[i]), op));
}

void ftc__reduce(void *out, const void *a, const void *b, size_t count, ftc_dtype_t dtype,
                 ftc_op_t op) {
  if (ftc__op_is_bitwise(op)) {
    switch (dtype) {
      case FTC_I32: reduce_bits_i32(out, a, b, count, op); break;
      case FTC_I64: reduce_bits_i64(out, a, b, count, op); break;
      case FTC_U8: reduce_bits_u8(out, a, b, count, op); break;
      default: break; /* refused by the caller */
    }
    return;
  }
  switch (dtype) {
    case FTC_F32: reduce_f32(out, a, b, count, op); break;
    case FTC_F64: reduce_f64(out, a, b, count, op); break;
    case FTC_F16: reduce_f16(out, a, b, count, op); break;
    case FTC_BF16: reduce_bf16(out, a, b, count, op); break;
    case FTC_I32: reduce_int_wrap(out, a, b, count, op, 0); break;
    case FTC_I64: reduce_int_wrap(out, a, b, count, op, 1); break;
    case FTC_U8: reduce_u8(out, a, b, count, op); break;
    default: break;
  }
}

void ftc__reduce_avg_finish(void *buf, size_t count, ftc_dtype_t dtype, int n) {
  if (n <= 1) return;
  switch (dtype) {
    case FTC_F32: {
      float *p = buf;
      for (size_t i = 0; i < count; i++) p[i] /= (float)n;
      break;
    }
    case FTC_F64: {
      double *p = buf;
      for (size_t i = 0; i < count; i++) p[i] /= (double)n;
      break;
    }
    case FTC_F16: {
      uint16_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] = ftc__f32_to_f16(ftc__f16_to_f32(p[i]) / (float)n);
      break;
    }
    case FTC_BF16: {
      uint16_t *p = buf;
      for (size_t i = 0; i < count; i++)
        p[i] = ftc__f32_to_bf16(ftc__bf16_to_f32(p[i]) / (float)n);
      break;
    }
    case FTC_I32: {
      int32_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] /= n;
      break;
    }
    case FTC_I64: {
      int64_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] /= n;
      break;
    }
    case FTC_U8: {
      uint8_t *p = buf;
      for (size_t i = 0; i < count; i++) p[i] = (uint8_t)(p[i] / n);
      break;
    }
    default: break;
  }
}
