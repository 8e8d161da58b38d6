/*
 * mpi_bench.c - the Open MPI peer of ftcomm-bench: the same options, sizes,
 * data, correctness check and rows (tests/bench/common), with the collective
 * done by MPI. Run it under mpirun; the transport (TCP or shared memory) is
 * chosen on the mpirun command line with --mca, and named with -l.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

static MPI_Datatype mpi_dtype(ftc_dtype_t t) {
  switch (t) {
  case FTC_F32: return MPI_FLOAT;
  case FTC_F64: return MPI_DOUBLE;
  case FTC_I32: return MPI_INT32_T;
  case FTC_I64: return MPI_INT64_T;
  case FTC_U8: return MPI_UINT8_T;
  default: return MPI_DATATYPE_NULL; /* MPI has no standard f16/bf16 */
  }
}

static MPI_Op mpi_op(ftc_op_t op) {
  switch (op) {
  case FTC_SUM: return MPI_SUM;
  case FTC_PROD: return MPI_PROD;
  case FTC_MIN: return MPI_MIN;
  case FTC_MAX: return MPI_MAX;
  case FTC_BAND: return MPI_BAND;
  case FTC_BOR: return MPI_BOR;
  case FTC_BXOR: return MPI_BXOR;
  default: return MPI_OP_NULL; /* avg is not an MPI reduction */
  }
}

static int run_once(const bench_opts_t *o, const bench_geom_t *g, void *sbuf, void *rbuf) {
  MPI_Datatype t = mpi_dtype(o->dtype);
  int n = (int)g->per_rank;
  switch (o->coll) {
  case BENCH_ALLREDUCE: return MPI_Allreduce(sbuf, rbuf, n, t, mpi_op(o->op), MPI_COMM_WORLD);
  case BENCH_BROADCAST: return MPI_Bcast(sbuf, n, t, o->root, MPI_COMM_WORLD);
  case BENCH_REDUCE: return MPI_Reduce(sbuf, rbuf, n, t, mpi_op(o->op), o->root, MPI_COMM_WORLD);
  case BENCH_ALLGATHER: return MPI_Allgather(sbuf, n, t, rbuf, n, t, MPI_COMM_WORLD);
  case BENCH_REDUCE_SCATTER:
    return MPI_Reduce_scatter_block(sbuf, rbuf, n, t, mpi_op(o->op), MPI_COMM_WORLD);
  case BENCH_ALLTOALL: return MPI_Alltoall(sbuf, n, t, rbuf, n, t, MPI_COMM_WORLD);
  default: return MPI_ERR_ARG;
  }
}

int main(int argc, char **argv) {
  bench_opts_t o;
  char err[256];
  int rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rc = bench_parse_args(argc, argv, &o, "openmpi", NULL, err, sizeof(err));
  if (rc == 0 && (mpi_dtype(o.dtype) == MPI_DATATYPE_NULL ||
                  ((o.coll == BENCH_ALLREDUCE || o.coll == BENCH_REDUCE ||
                    o.coll == BENCH_REDUCE_SCATTER) && mpi_op(o.op) == MPI_OP_NULL))) {
    snprintf(err, sizeof(err), "dtype %s / op %s not supported by this harness",
             bench_dtype_name(o.dtype), bench_op_name(o.op));
    rc = -1;
  }
  if (rc == 0 && o.async) {
    snprintf(err, sizeof(err), "-a is not supported by the MPI harness");
    rc = -1;
  }
  if (rc == 0 && o.root >= size) {
    snprintf(err, sizeof(err), "root %d out of range", o.root);
    rc = -1;
  }
  if (rc != 0) {
    if (rc < 0 && rank == 0) fprintf(stderr, "mpi_bench: %s\n", err);
    MPI_Finalize();
    return rc < 0 ? 2 : 0;
  }
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int vlen;
  MPI_Get_library_version(version, &vlen);
  for (int i = 0; i < vlen; i++)
    if (version[i] == ',' || version[i] == '\n') version[i] = '\0';
  if (rank == 0) bench_print_header(stdout, &o, size, version);

  size_t total_wrong = 0;
  double busbw_sum = 0;
  int rows = 0, failed = 0;
  size_t sizes[256];
  int nsizes = bench_sizes(&o, sizes, 256);
  for (int si = 0; si < nsizes; si++) {
    bench_geom_t g;
    if (bench_geometry(o.coll, sizes[si], size, o.dtype, &g) != 0 || g.per_rank > (size_t)INT32_MAX)
      continue;
    size_t ts = bench_dtype_size(o.dtype);
    void *sbuf = bench_alloc(g.send_elems * ts), *rbuf = bench_alloc(g.recv_elems * ts);
    if (!sbuf || !rbuf) {
      fprintf(stderr, "mpi_bench: out of memory at %zu bytes\n", g.bytes);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    void *out = o.coll == BENCH_BROADCAST ? sbuf : rbuf;
    int warmup, iters;
    bench_iterations(&o, g.bytes, &warmup, &iters);
    bench_fill(&o, &g, rank, size, sbuf, rbuf);
    if (run_once(&o, &g, sbuf, rbuf) != MPI_SUCCESS) failed = 1;
    unsigned long long wrong = o.check ? bench_check(&o, &g, rank, size, out) : 0, wrong_all = 0;
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    for (int i = 0; i < warmup; i++) run_once(&o, &g, sbuf, rbuf);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    for (int i = 0; i < iters; i++) run_once(&o, &g, sbuf, rbuf);
    double us = (bench_now() - t0) * 1e6 / iters, us_max = 0;
    MPI_Reduce(&us, &us_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      bench_print_row(stdout, &o, size, &g, us_max, (size_t)wrong_all);
      total_wrong += wrong_all;
      busbw_sum += us_max > 0 ? (double)g.bytes / (us_max * 1e3) * bench_busbw_factor(o.coll, size) : 0;
      rows++;
    }
    bench_free(sbuf);
    bench_free(rbuf);
  }
  if (rank == 0) bench_print_footer(stdout, &o, total_wrong, busbw_sum, rows);
  MPI_Finalize();
  return failed || total_wrong ? 1 : 0;
}
