/*
 * bench_util.h - what every collective benchmark harness shares: the
 * nccl-tests style command line (-b -e -f -o -d -c -w -n ...), the size
 * sweep, the data patterns and the first-iteration correctness check, the
 * bus-bandwidth factors and the row format (text or CSV). ftcomm-bench and
 * the Open MPI and Gloo harnesses use it, so their rows are comparable by
 * construction. Nothing here communicates: each harness moves the data with
 * its own library and hands buffers to these functions.
 */
#ifndef FTC_BENCH_UTIL_H
#define FTC_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ftcomm.h" /* dtype and op enums only; no library call is made here */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bench_coll {
  BENCH_ALLREDUCE = 0,
  BENCH_BROADCAST,
  BENCH_REDUCE,
  BENCH_ALLGATHER,
  BENCH_REDUCE_SCATTER,
  BENCH_ALLTOALL,
  BENCH_COLL_COUNT
} bench_coll_t;

typedef struct bench_opts {
  size_t min_bytes;   /* -b */
  size_t max_bytes;   /* -e */
  double factor;      /* -f, > 1 */
  ftc_op_t op;        /* -o */
  ftc_dtype_t dtype;  /* -d */
  bench_coll_t coll;  /* -c */
  int warmup;         /* -w: warmup iterations at small sizes */
  int iters;          /* -n: timed iterations at small sizes */
  size_t iter_bytes;  /* -I: if > 0, iterations at size s are min(n, max(2, I/s)) */
  int async;          /* -a: nonblocking calls where the library has them */
  int csv;            /* --csv */
  int root;           /* -r: root of broadcast and reduce */
  int check;          /* -C 0 disables the check of the first iteration */
  int timeout_ms;     /* -t: per-collective timeout where the library takes one */
  const char *label;  /* -l: system name in the rows */
  const char *algo;   /* -A: algorithm name (ftcomm-bench: a comma list) for harnesses that offer several */
  const char *row_algo; /* set by the harness: the algorithm of the next row, printed as a last
                         * text column ("algo" in the header when set at header time) and as
                         * "label:algo" in CSV rows; NULL: none */
  int nranks;         /* -N: ranks to start, for harnesses that start their own */
} bench_opts_t;

/* Parse argv into *o (defaults first). Returns 0 to run, 1 after printing
 * help to stdout, -1 on a bad option (message in err). */
int bench_parse_args(int argc, char **argv, bench_opts_t *o, const char *default_label,
                     const char *extra_help, char *err, size_t errlen);

/* "12K" -> 12288; K, M, G binary suffixes. Returns 0, or -1 if malformed. */
int bench_parse_size(const char *s, size_t *out);

size_t bench_dtype_size(ftc_dtype_t dtype);
const char *bench_dtype_name(ftc_dtype_t dtype);
const char *bench_op_name(ftc_op_t op);
const char *bench_coll_name(bench_coll_t coll);

/* The geometry of one row: the size actually measured (rounded down as
 * nccl-tests does), the element count printed, the elements per rank passed
 * to the library, and the send and receive buffer lengths in elements.
 * Returns 0, or -1 when the size holds less than one element per rank. */
typedef struct bench_geom {
  size_t bytes;      /* printed size: the whole vector, as in nccl-tests */
  size_t count;      /* printed count: bytes / dtype size */
  size_t per_rank;   /* the count argument of the collective */
  size_t send_elems; /* send buffer length */
  size_t recv_elems; /* receive buffer length */
} bench_geom_t;
int bench_geometry(bench_coll_t coll, size_t bytes, int nranks, ftc_dtype_t dtype,
                   bench_geom_t *g);

/* The sizes of the sweep, min * factor^k up to max, and max itself when the
 * factor does not land on it. Writes at most `cap` sizes; returns how many. */
int bench_sizes(const bench_opts_t *o, size_t *sizes, int cap);

/* Iterations and warmup for one size under the options. */
void bench_iterations(const bench_opts_t *o, size_t bytes, int *warmup, int *iters);

/* nccl-tests bus-bandwidth factor: busbw = algbw * factor. */
double bench_busbw_factor(bench_coll_t coll, int nranks);

/* Fill the send buffer of `rank` and poison the receive buffer. */
void bench_fill(const bench_opts_t *o, const bench_geom_t *g, int rank, int nranks,
                void *sendbuf, void *recvbuf);

/* Count the wrong elements of rank's result after one collective. */
size_t bench_check(const bench_opts_t *o, const bench_geom_t *g, int rank, int nranks,
                   const void *recvbuf);

/* Output, from rank 0 only. */
void bench_print_header(FILE *f, const bench_opts_t *o, int nranks, const char *detail);
void bench_print_row(FILE *f, const bench_opts_t *o, int nranks, const bench_geom_t *g,
                     double time_us, size_t wrong);
void bench_print_footer(FILE *f, const bench_opts_t *o, size_t total_wrong, double busbw_sum,
                        int rows);

/* Monotonic time in seconds. */
double bench_now(void);

/* Page-aligned zeroed buffer of at least `bytes` (never NULL on success); free
 * with bench_free. Touches every page so first-touch faults stay out of the
 * timed loop. */
void *bench_alloc(size_t bytes);
void bench_free(void *p);

#ifdef __cplusplus
}
#endif

#endif
