/*
 * ftcomm_bench.c - ftcomm-bench, the nccl-tests style benchmark of libftcomm's
 * collectives, written against the public API only. Every rank runs it under
 * a launcher (ftcomm-run -n N -- ftcomm-bench ...), joins the job from the
 * FTCOMM_* environment, and sweeps sizes; rank 0 prints one row per size:
 * size, count, type, op, time, algbw, busbw and #wrong, the number of wrong
 * elements in the first iteration's result summed over the ranks. The
 * options, data, check and row format are shared with the Open MPI and Gloo
 * harnesses (tests/bench/common), so the numbers compare one to one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "ftcomm.h"

struct bench {
  const bench_opts_t *o;
  const bench_geom_t *g;
  ftc_comm_t *comm;
  void *sbuf, *rbuf;
};

/* Blocking form of one collective. */
static ftc_status_t run_blocking(const struct bench *b) {
  const bench_opts_t *o = b->o;
  size_t n = b->g->per_rank;
  switch (o->coll) {
  case BENCH_ALLREDUCE:
    return ftc_allreduce(b->sbuf, b->rbuf, n, o->dtype, o->op, b->comm, o->timeout_ms);
  case BENCH_BROADCAST: return ftc_broadcast(b->sbuf, n, o->dtype, o->root, b->comm, o->timeout_ms);
  case BENCH_REDUCE:
    return ftc_reduce(b->sbuf, b->rbuf, n, o->dtype, o->op, o->root, b->comm, o->timeout_ms);
  case BENCH_ALLGATHER: return ftc_allgather(b->sbuf, b->rbuf, n, o->dtype, b->comm, o->timeout_ms);
  case BENCH_REDUCE_SCATTER:
    return ftc_reduce_scatter(b->sbuf, b->rbuf, n, o->dtype, o->op, b->comm, o->timeout_ms);
  case BENCH_ALLTOALL: return ftc_alltoall(b->sbuf, b->rbuf, n, o->dtype, b->comm, o->timeout_ms);
  default: return FTC_ERR_INVALID_ARGUMENT;
  }
}

/* Nonblocking form: starts one collective into *req. */
static ftc_status_t start(const struct bench *b, ftc_request_t **req) {
  const bench_opts_t *o = b->o;
  size_t n = b->g->per_rank;
  switch (o->coll) {
  case BENCH_ALLREDUCE: return ftc_iallreduce(b->sbuf, b->rbuf, n, o->dtype, o->op, b->comm, req);
  case BENCH_BROADCAST: return ftc_ibroadcast(b->sbuf, n, o->dtype, o->root, b->comm, req);
  case BENCH_REDUCE: return ftc_ireduce(b->sbuf, b->rbuf, n, o->dtype, o->op, o->root, b->comm, req);
  case BENCH_ALLGATHER: return ftc_iallgather(b->sbuf, b->rbuf, n, o->dtype, b->comm, req);
  case BENCH_REDUCE_SCATTER:
    return ftc_ireduce_scatter(b->sbuf, b->rbuf, n, o->dtype, o->op, b->comm, req);
  case BENCH_ALLTOALL: return ftc_ialltoall(b->sbuf, b->rbuf, n, o->dtype, b->comm, req);
  default: return FTC_ERR_INVALID_ARGUMENT;
  }
}

/* `iters` collectives: blocking one after another, or (-a) all started
 * back to back on the same buffers and then waited for in order. */
static ftc_status_t run_many(const struct bench *b, int iters, ftc_request_t **reqs) {
  if (!b->o->async) {
    for (int i = 0; i < iters; i++) {
      ftc_status_t st = run_blocking(b);
      if (st != FTC_OK) return st;
    }
    return FTC_OK;
  }
  ftc_status_t st = FTC_OK;
  int started = 0;
  for (; started < iters; started++) {
    st = start(b, &reqs[started]);
    if (st != FTC_OK) break;
  }
  for (int i = 0; i < started; i++) {
    ftc_status_t w = ftc_wait(reqs[i], b->o->timeout_ms);
    if (st == FTC_OK) st = w;
    ftc_request_free(reqs[i]);
  }
  return st;
}

static void fail(const char *what, int rank, ftc_status_t st) {
  fprintf(stderr, "ftcomm-bench: rank %d: %s: %s (%s)\n", rank, what, ftc_strerror(st),
          ftc_last_error());
}

int main(int argc, char **argv) {
  bench_opts_t o;
  char err[256];
  int rc = bench_parse_args(argc, argv, &o, "ftcomm", NULL, err, sizeof(err));
  if (rc > 0) return 0;
  if (rc < 0) {
    fprintf(stderr, "ftcomm-bench: %s\n", err);
    return 2;
  }

  ftc_comm_t *comm = NULL;
  int rank = -1, size = 0;
  ftc_status_t st = ftc_comm_create(NULL, &comm);
  if (st != FTC_OK) {
    fail("ftc_comm_create", rank, st);
    return 1;
  }
  ftc_comm_rank(comm, &rank);
  ftc_comm_size(comm, &size);
  if (o.root >= size) {
    if (rank == 0) fprintf(stderr, "ftcomm-bench: root %d out of range for %d ranks\n", o.root, size);
    ftc_comm_destroy(comm);
    return 2;
  }
  if (rank == 0) {
    char detail[96];
    const char *backend = getenv("FTCOMM_BACKEND");
    snprintf(detail, sizeof(detail), "ftcomm %d.%d.%d, backend %s", ftc_version() / 10000,
             ftc_version() / 100 % 100, ftc_version() % 100, backend ? backend : "default");
    bench_print_header(stdout, &o, size, detail);
  }

  size_t sizes[256];
  int nsizes = bench_sizes(&o, sizes, 256);
  size_t total_wrong = 0;
  double busbw_sum = 0;
  int rows = 0, failed = 0;
  ftc_request_t **reqs = calloc((size_t)o.iters + (size_t)o.warmup + 1, sizeof(*reqs));
  if (!reqs) {
    fprintf(stderr, "ftcomm-bench: out of memory\n");
    failed = 1;
  }
  for (int si = 0; si < nsizes && !failed; si++) {
    bench_geom_t g;
    if (bench_geometry(o.coll, sizes[si], size, o.dtype, &g) != 0) continue;
    size_t ts = bench_dtype_size(o.dtype);
    struct bench b = {&o, &g, comm, bench_alloc(g.send_elems * ts),
                      bench_alloc(g.recv_elems * ts)};
    if (!b.sbuf || !b.rbuf) {
      fprintf(stderr, "ftcomm-bench: rank %d: out of memory at %zu bytes\n", rank, g.bytes);
      failed = 1;
      goto next;
    }
    int warmup, iters;
    bench_iterations(&o, g.bytes, &warmup, &iters);
    bench_fill(&o, &g, rank, size, b.sbuf, b.rbuf);

    /* the first iteration is checked */
    if ((st = run_many(&b, 1, reqs)) != FTC_OK) {
      fail(bench_coll_name(o.coll), rank, st);
      failed = 1;
      goto next;
    }
    int64_t wrong = o.check ? (int64_t)bench_check(&o, &g, rank, size,
                                                   o.coll == BENCH_BROADCAST ? b.sbuf : b.rbuf)
                            : 0;
    if ((st = ftc_allreduce(&wrong, &wrong, 1, FTC_I64, FTC_SUM, comm, o.timeout_ms)) != FTC_OK ||
        (st = run_many(&b, warmup, reqs)) != FTC_OK ||
        (st = ftc_barrier(comm, o.timeout_ms)) != FTC_OK) {
      fail("warmup", rank, st);
      failed = 1;
      goto next;
    }
    double t0 = bench_now();
    st = run_many(&b, iters, reqs);
    double us = (bench_now() - t0) * 1e6 / iters;
    if (st != FTC_OK) {
      fail(bench_coll_name(o.coll), rank, st);
      failed = 1;
      goto next;
    }
    if ((st = ftc_allreduce(&us, &us, 1, FTC_F64, FTC_MAX, comm, o.timeout_ms)) != FTC_OK) {
      fail("time reduction", rank, st);
      failed = 1;
      goto next;
    }
    if (rank == 0) {
      bench_print_row(stdout, &o, size, &g, us, (size_t)wrong);
      busbw_sum += us > 0 ? (double)g.bytes / (us * 1e3) * bench_busbw_factor(o.coll, size) : 0;
      rows++;
    }
    total_wrong += (size_t)wrong;
  next:
    bench_free(b.sbuf);
    bench_free(b.rbuf);
  }
  if (rank == 0 && !failed) bench_print_footer(stdout, &o, total_wrong, busbw_sum, rows);
  free(reqs);
  if (failed) {
    ftc_comm_abort(comm);
    ftc_comm_destroy(comm);
    return 1;
  }
  st = ftc_comm_destroy(comm);
  if (st != FTC_OK) fail("ftc_comm_destroy", rank, st);
  return total_wrong || st != FTC_OK ? 1 : 0;
}
