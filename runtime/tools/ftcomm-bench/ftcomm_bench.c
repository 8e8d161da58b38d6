/*
 * ftcomm_bench.c - ftcomm-bench, the nccl-tests style benchmark of libftcomm's
 * collectives, written against the public API only. Every rank runs it under
 * a launcher (ftcomm-run -n N -- ftcomm-bench ...), joins the job from the
 * FTCOMM_* environment, and sweeps sizes; rank 0 prints one row per size:
 * size, count, type, op, time, algbw, busbw and #wrong, the number of wrong
 * elements in the first iteration's result summed over the ranks. The
 * options, data, check and row format are shared with the Open MPI and Gloo
 * harnesses (tests/bench/common), so the numbers compare one to one.
 *
 * -A a,b,... (allreduce on TCP) compares algorithms in one run: at each size
 * every algorithm is checked, warmed up and then timed in alternating blocks
 * (ALGO_BLOCK timed calls after one untimed call per block, the order
 * reversed every round), so each sees the same noise; rank 0 prints one row
 * per algorithm, whose time is the median per call (each rank's, then the
 * slowest rank's). One algorithm alone is set once and timed as usual.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

#define MAX_ALGOS 8
#define ALGO_BLOCK 3

static const char extra_help[] =
    "  -A, --algorithm LIST    allreduce algorithms to compare, comma-separated:\n"
    "                          auto|ring|halving|doubling|flat; each size is timed for each,\n"
    "                          interleaved, one row per algorithm (time: median per call)\n";

/* "ring,halving" -> algos[]; returns how many, or -1 with a message in err. */
static int parse_algos(const char *list, ftc_algo_t *algos, char *err, size_t errlen) {
  int n = 0;
  const char *p = list;
  for (;;) {
    size_t len = strcspn(p, ",");
    int found = -1;
    for (int a = 0; a < FTC_ALGO_COUNT; a++)
      if (strlen(ftc_algo_name((ftc_algo_t)a)) == len &&
          strncasecmp(p, ftc_algo_name((ftc_algo_t)a), len) == 0)
        found = a;
    if (found < 0 || n == MAX_ALGOS) {
      if (found < 0)
        snprintf(err, errlen, "-A: '%.*s' is not an algorithm; use auto, ring, halving, doubling or flat",
                 (int)len, p);
      else
        snprintf(err, errlen, "-A: at most %d algorithms", MAX_ALGOS);
      return -1;
    }
    algos[n++] = (ftc_algo_t)found;
    if (!p[len]) return n;
    p += len + 1;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The interleaved comparison of one size: per-call medians into us[a]. */
static ftc_status_t time_interleaved(const struct bench *b, const ftc_algo_t *algos, int nalgo,
                                     int iters, double *us) {
  double *t = malloc(sizeof(double) * (size_t)nalgo * (size_t)iters);
  int got[MAX_ALGOS] = {0};
  ftc_status_t st = FTC_OK;
  if (!t) return FTC_ERR_NO_MEMORY;
  for (int round = 0, left = nalgo; left > 0 && st == FTC_OK; round++) {
    for (int k = 0; k < nalgo && st == FTC_OK; k++) {
      int a = round % 2 ? nalgo - 1 - k : k;
      if (got[a] == iters) continue;
      if ((st = ftc_comm_set_allreduce_algo(b->comm, algos[a])) != FTC_OK ||
          (st = run_blocking(b)) != FTC_OK)
        break;
      for (int i = 0; i < ALGO_BLOCK && got[a] < iters; i++) {
        double t0 = bench_now();
        if ((st = run_blocking(b)) != FTC_OK) break;
        t[(size_t)a * (size_t)iters + (size_t)got[a]++] = (bench_now() - t0) * 1e6;
      }
      if (got[a] == iters) left--;
    }
  }
  for (int a = 0; a < nalgo && st == FTC_OK; a++) {
    double *ta = t + (size_t)a * (size_t)iters;
    qsort(ta, (size_t)iters, sizeof(double), cmp_double);
    us[a] = iters % 2 ? ta[iters / 2] : (ta[iters / 2 - 1] + ta[iters / 2]) / 2;
  }
  free(t);
  return st;
}

int main(int argc, char **argv) {
  bench_opts_t o;
  char err[256];
  int rc = bench_parse_args(argc, argv, &o, "ftcomm", extra_help, err, sizeof(err));
  if (rc > 0) return 0;
  ftc_algo_t algos[MAX_ALGOS];
  int nalgo = 0;
  if (rc == 0 && o.algo) {
    nalgo = parse_algos(o.algo, algos, err, sizeof(err));
    if (nalgo < 0)
      rc = -1;
    else if (o.coll != BENCH_ALLREDUCE)
      rc = -1, snprintf(err, sizeof(err), "-A: only allreduce has algorithms to choose (-c allreduce)");
    else if (nalgo > 1 && o.async)
      rc = -1, snprintf(err, sizeof(err), "-A with several algorithms times blocking calls; drop -a");
  }
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
  if (nalgo > 0) {
    if ((st = ftc_comm_set_allreduce_algo(comm, algos[0])) != FTC_OK) {
      fail("-A", rank, st);
      ftc_comm_destroy(comm);
      return 2;
    }
    o.row_algo = ftc_algo_name(algos[0]);
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

    /* the first iteration (of each algorithm) is checked */
    int64_t wrong = 0, wrongs[MAX_ALGOS] = {0};
    for (int a = 0; a < (nalgo > 1 ? nalgo : 1); a++) {
      if (nalgo > 1) {
        ftc_comm_set_allreduce_algo(comm, algos[a]);
        if (a > 0) bench_fill(&o, &g, rank, size, b.sbuf, b.rbuf);
      }
      if ((st = run_many(&b, 1, reqs)) != FTC_OK) {
        fail(bench_coll_name(o.coll), rank, st);
        failed = 1;
        goto next;
      }
      wrongs[a] = o.check ? (int64_t)bench_check(&o, &g, rank, size,
                                                 o.coll == BENCH_BROADCAST ? b.sbuf : b.rbuf)
                          : 0;
      if ((st = run_many(&b, warmup, reqs)) != FTC_OK) {
        fail("warmup", rank, st);
        failed = 1;
        goto next;
      }
    }
    if ((st = ftc_allreduce(wrongs, wrongs, MAX_ALGOS, FTC_I64, FTC_SUM, comm, o.timeout_ms)) != FTC_OK ||
        (st = ftc_barrier(comm, o.timeout_ms)) != FTC_OK) {
      fail("warmup", rank, st);
      failed = 1;
      goto next;
    }
    if (nalgo > 1) {
      double us[MAX_ALGOS];
      if ((st = time_interleaved(&b, algos, nalgo, iters, us)) != FTC_OK ||
          (st = ftc_allreduce(us, us, (size_t)nalgo, FTC_F64, FTC_MAX, comm, o.timeout_ms)) != FTC_OK) {
        fail("interleaved allreduce", rank, st);
        failed = 1;
        goto next;
      }
      for (int a = 0; a < nalgo; a++) {
        if (rank == 0) {
          o.row_algo = ftc_algo_name(algos[a]);
          bench_print_row(stdout, &o, size, &g, us[a], (size_t)wrongs[a]);
          busbw_sum += us[a] > 0 ? (double)g.bytes / (us[a] * 1e3) * bench_busbw_factor(o.coll, size) : 0;
          rows++;
        }
        total_wrong += (size_t)wrongs[a];
      }
      goto next;
    }
    wrong = wrongs[0];
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
