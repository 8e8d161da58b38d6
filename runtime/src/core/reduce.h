/*
 * reduce.h - element-wise reduction kernels for every dtype and op, and the
 * f16/bf16 conversions they use. Shared by the TCP algorithms and the
 * serial reference in the tests.
 */
#ifndef FTC_CORE_REDUCE_H
#define FTC_CORE_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "ftcomm.h"

/* out[i] = a[i] op b[i] for count elements. out may equal a or b. FTC_AVG
 * reduces as FTC_SUM; ftc__reduce_avg_finish divides afterwards. dtype and
 * op must be valid (checked by the caller). */
void ftc__reduce(void *out, const void *a, const void *b, size_t count, ftc_dtype_t dtype,
                 ftc_op_t op);

/* A bitwise op (FTC_BAND, FTC_BOR, FTC_BXOR): integer dtypes only. */
static inline int ftc__op_is_bitwise(ftc_op_t op) { return op == FTC_BAND || op == FTC_BOR || op == FTC_BXOR; }
static inline int ftc__dtype_is_integer(ftc_dtype_t d) { return d == FTC_I32 || d == FTC_I64 || d == FTC_U8; }

/* buf[i] /= n (integer types truncate toward zero, f16/bf16 round to nearest
 * even once). */
void ftc__reduce_avg_finish(void *buf, size_t count, ftc_dtype_t dtype, int n);

/* IEEE binary16 and bfloat16 <-> float, round to nearest even. */
float ftc__f16_to_f32(uint16_t h);
uint16_t ftc__f32_to_f16(float f);
float ftc__bf16_to_f32(uint16_t h);
uint16_t ftc__f32_to_bf16(float f);

#endif
