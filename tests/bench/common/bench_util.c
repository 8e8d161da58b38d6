/*
 * bench_util.c - the command line, data patterns, correctness check and row
 * format shared by ftcomm-bench and the peer harnesses (see bench_util.h).
 * Values are small integers (or averages of them) so that every dtype and
 * every reduction order gives an exact or tightly bounded result, and the
 * check of a rank costs one pass over its receive buffer.
 */
#include "bench_util.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PATTERN_PERIOD 61 /* reduction inputs repeat with this period */

static const char *const coll_names[BENCH_COLL_COUNT] = {
    "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall"};
static const char *const dtype_names[FTC_DTYPE_COUNT] = {"f32", "f64", "f16", "bf16",
                                                          "i32", "i64", "u8"};
static const size_t dtype_sizes[FTC_DTYPE_COUNT] = {4, 8, 2, 2, 4, 8, 1};
static const char *const op_names[FTC_OP_COUNT] = {"sum", "prod", "min", "max", "avg", "band", "bor", "bxor"};

size_t bench_dtype_size(ftc_dtype_t dtype) {
  return (unsigned)dtype < FTC_DTYPE_COUNT ? dtype_sizes[dtype] : 0;
}
const char *bench_dtype_name(ftc_dtype_t dtype) {
  return (unsigned)dtype < FTC_DTYPE_COUNT ? dtype_names[dtype] : "?";
}
const char *bench_op_name(ftc_op_t op) {
  return (unsigned)op < FTC_OP_COUNT ? op_names[op] : "?";
}
const char *bench_coll_name(bench_coll_t coll) {
  return (unsigned)coll < BENCH_COLL_COUNT ? coll_names[coll] : "?";
}

static int coll_has_op(bench_coll_t c) {
  return c == BENCH_ALLREDUCE || c == BENCH_REDUCE || c == BENCH_REDUCE_SCATTER;
}
static int coll_has_root(bench_coll_t c) { return c == BENCH_BROADCAST || c == BENCH_REDUCE; }

int bench_parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) return -1;
  double mul = 1;
  switch (*end) {
  case 'k': case 'K': mul = 1024.0; end++; break;
  case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
  case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
  default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

static int lookup(const char *s, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

int bench_parse_args(int argc, char **argv, bench_opts_t *o, const char *default_label,
                     const char *extra_help, char *err, size_t errlen) {
  static const struct option longopts[] = {
      {"minbytes", required_argument, NULL, 'b'}, {"maxbytes", required_argument, NULL, 'e'},
      {"stepfactor", required_argument, NULL, 'f'}, {"op", required_argument, NULL, 'o'},
      {"datatype", required_argument, NULL, 'd'}, {"collective", required_argument, NULL, 'c'},
      {"warmup_iters", required_argument, NULL, 'w'}, {"iters", required_argument, NULL, 'n'},
      {"iter_bytes", required_argument, NULL, 'I'}, {"async", no_argument, NULL, 'a'},
      {"root", required_argument, NULL, 'r'}, {"check", required_argument, NULL, 'C'},
      {"timeout", required_argument, NULL, 't'}, {"label", required_argument, NULL, 'l'},
      {"algorithm", required_argument, NULL, 'A'}, {"nranks", required_argument, NULL, 'N'},
      {"csv", no_argument, NULL, 'S'}, {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof(*o));
  o->min_bytes = 32 * 1024 * 1024;
  o->max_bytes = 32 * 1024 * 1024;
  o->factor = 2;
  o->op = FTC_SUM;
  o->dtype = FTC_F32;
  o->coll = BENCH_ALLREDUCE;
  o->warmup = 5;
  o->iters = 20;
  o->check = 1;
  o->timeout_ms = 600000;
  o->label = default_label;
  o->algo = NULL;
  o->nranks = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, "b:e:f:o:d:c:w:n:I:ar:C:t:l:A:N:h", longopts, NULL)) != -1) {
    int bad = 0;
    switch (c) {
    case 'b': bad = bench_parse_size(optarg, &o->min_bytes); break;
    case 'e': bad = bench_parse_size(optarg, &o->max_bytes); break;
    case 'I': bad = bench_parse_size(optarg, &o->iter_bytes); break;
    case 'f': o->factor = strtod(optarg, NULL); bad = !(o->factor > 1.0); break;
    case 'o': { int v = lookup(optarg, op_names, FTC_OP_COUNT); bad = v < 0; o->op = (ftc_op_t)(v < 0 ? 0 : v); break; }
    case 'd': { int v = lookup(optarg, dtype_names, FTC_DTYPE_COUNT); bad = v < 0; o->dtype = (ftc_dtype_t)(v < 0 ? 0 : v); break; }
    case 'c': { int v = lookup(optarg, coll_names, BENCH_COLL_COUNT); bad = v < 0; o->coll = (bench_coll_t)(v < 0 ? 0 : v); break; }
    case 'w': o->warmup = atoi(optarg); bad = o->warmup < 0; break;
    case 'n': o->iters = atoi(optarg); bad = o->iters < 1; break;
    case 'a': o->async = 1; break;
    case 'r': o->root = atoi(optarg); bad = o->root < 0; break;
    case 'C': o->check = atoi(optarg); break;
    case 't': o->timeout_ms = atoi(optarg); bad = o->timeout_ms < 1; break;
    case 'l': o->label = optarg; break;
    case 'A': o->algo = optarg; break;
    case 'N': o->nranks = atoi(optarg); bad = o->nranks < 1; break;
    case 'S': o->csv = 1; break;
    case 'h':
      printf("usage: %s [options]\n"
             "  -b, --minbytes SIZE     smallest size (K/M/G suffixes), default 32M\n"
             "  -e, --maxbytes SIZE     largest size, default 32M\n"
             "  -f, --stepfactor F      size multiplier between rows, default 2\n"
             "  -o, --op OP             sum|prod|min|max|avg, default sum\n"
             "  -d, --datatype T        f32|f64|f16|bf16|i32|i64|u8, default f32\n"
             "  -c, --collective C      allreduce|broadcast|reduce|allgather|reduce_scatter|alltoall\n"
             "  -w, --warmup_iters N    warmup iterations, default 5\n"
             "  -n, --iters N           timed iterations, default 20\n"
             "  -I, --iter_bytes SIZE   scale iterations down for big sizes: min(n, max(2, SIZE/size))\n"
             "  -a, --async             nonblocking calls, all iterations in flight, then wait\n"
             "  -r, --root R            root of broadcast and reduce, default 0\n"
             "  -C, --check 0|1         check the first iteration's result, default 1\n"
             "  -t, --timeout MS        per-collective timeout, default 600000\n"
             "  -l, --label NAME        system name in the rows, default %s\n"
             "      --csv               CSV rows instead of the table\n%s",
             argv[0], default_label, extra_help ? extra_help : "");
      return 1;
    default:
      snprintf(err, errlen, "unknown option (try --help)");
      return -1;
    }
    if (bad) {
      snprintf(err, errlen, "bad value '%s' for -%c (try --help)", optarg ? optarg : "", c);
      return -1;
    }
  }
  if (optind < argc) {
    snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
    return -1;
  }
  if (o->min_bytes == 0 || o->max_bytes < o->min_bytes) {
    snprintf(err, errlen, "need 0 < -b <= -e");
    return -1;
  }
  return 0;
}

int bench_geometry(bench_coll_t coll, size_t bytes, int nranks, ftc_dtype_t dtype,
                   bench_geom_t *g) {
  size_t ts = bench_dtype_size(dtype), n = (size_t)nranks;
  size_t count = bytes / ts;
  memset(g, 0, sizeof(*g));
  switch (coll) {
  case BENCH_ALLREDUCE:
  case BENCH_BROADCAST:
  case BENCH_REDUCE:
    g->per_rank = count;
    g->send_elems = count;
    g->recv_elems = count;
    g->count = count;
    break;
  case BENCH_ALLGATHER:
    g->per_rank = count / n;
    g->send_elems = g->per_rank;
    g->recv_elems = g->per_rank * n;
    g->count = g->per_rank * n;
    break;
  case BENCH_REDUCE_SCATTER:
    g->per_rank = count / n;
    g->send_elems = g->per_rank * n;
    g->recv_elems = g->per_rank;
    g->count = g->per_rank * n;
    break;
  case BENCH_ALLTOALL:
    g->per_rank = count / n; /* elements to each peer */
    g->send_elems = g->per_rank * n;
    g->recv_elems = g->per_rank * n;
    g->count = g->per_rank * n;
    break;
  default:
    return -1;
  }
  g->bytes = g->count * ts;
  return g->per_rank ? 0 : -1;
}

int bench_sizes(const bench_opts_t *o, size_t *sizes, int cap) {
  int n = 0;
  double s = (double)o->min_bytes;
  while (n < cap && s <= (double)o->max_bytes * (1 + 1e-9)) {
    sizes[n++] = (size_t)(s + 0.5);
    s *= o->factor;
  }
  if (n > 0 && sizes[n - 1] != o->max_bytes) {
    if ((double)sizes[n - 1] >= 0.99 * (double)o->max_bytes) sizes[n - 1] = o->max_bytes;
    else if (n < cap) sizes[n++] = o->max_bytes;
  }
  return n;
}

void bench_iterations(const bench_opts_t *o, size_t bytes, int *warmup, int *iters) {
  int n = o->iters;
  if (o->iter_bytes && bytes && (double)bytes * n > (double)o->iter_bytes) {
    size_t k = o->iter_bytes / bytes;
    n = k < 2 ? 2 : (int)k;
    if (n > o->iters) n = o->iters;
  }
  int w = o->warmup;
  if (n < o->iters) {
    int wmax = n / 4 < 1 ? 1 : n / 4;
    if (w > wmax) w = wmax;
  }
  *warmup = w;
  *iters = n;
}

double bench_busbw_factor(bench_coll_t coll, int nranks) {
  double n = nranks;
  switch (coll) {
  case BENCH_ALLREDUCE: return 2.0 * (n - 1) / n;
  case BENCH_BROADCAST:
  case BENCH_REDUCE: return 1.0;
  case BENCH_ALLGATHER:
  case BENCH_REDUCE_SCATTER:
  case BENCH_ALLTOALL: return (n - 1) / n;
  default: return 0;
  }
}

/* IEEE binary16 and bfloat16, round to nearest even. */
static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return (uint16_t)sign;
    mant |= 0x800000;
    int shift = 14 - exp;
    uint32_t half = 1u << (shift - 1), rem = mant & ((1u << shift) - 1);
    uint32_t v = mant >> shift;
    if (rem > half || (rem == half && (v & 1))) v++;
    return (uint16_t)(sign | v);
  }
  uint32_t v = ((uint32_t)exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (v & 1))) v++;
  return (uint16_t)(sign | v);
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, x;
  if (exp == 0) {
    float v = ldexpf((float)mant, -24);
    return sign ? -v : v;
  }
  if (exp == 31) x = sign | 0x7f800000 | (mant << 13);
  else x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static void store(ftc_dtype_t t, void *buf, size_t i, double v) {
  switch (t) {
  case FTC_F32: ((float *)buf)[i] = (float)v; break;
  case FTC_F64: ((double *)buf)[i] = v; break;
  case FTC_F16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
  case FTC_BF16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
  case FTC_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case FTC_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case FTC_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  default: break;
  }
}

static double load(ftc_dtype_t t, const void *buf, size_t i) {
  switch (t) {
  case FTC_F32: return ((const float *)buf)[i];
  case FTC_F64: return ((const double *)buf)[i];
  case FTC_F16: return f16_to_f32(((const uint16_t *)buf)[i]);
  case FTC_BF16: return bf16_to_f32(((const uint16_t *)buf)[i]);
  case FTC_I32: return ((const int32_t *)buf)[i];
  case FTC_I64: return (double)((const int64_t *)buf)[i];
  case FTC_U8: return ((const uint8_t *)buf)[i];
  default: return NAN;
  }
}

/* Reduction input of `rank` at global index i. Products stay <= 2^ceil(n/5). */
static double red_value(ftc_op_t op, int rank, size_t i) {
  unsigned k = (unsigned)(i % PATTERN_PERIOD);
  if (op == FTC_PROD) return ((k + (unsigned)rank) % 5 == 0) ? 2.0 : 1.0;
  return (double)((k + 3u * (unsigned)rank) % 8u);
}

/* Data-movement value of `rank` at index i (broadcast, allgather, alltoall). */
static double move_value(int rank, size_t i) {
  return (double)((i * 7u + (size_t)rank * 13u) % 101u);
}

static double reduced(ftc_op_t op, ftc_dtype_t t, int nranks, size_t i) {
  double acc = red_value(op, 0, i);
  for (int r = 1; r < nranks; r++) {
    double v = red_value(op, r, i);
    switch (op) {
    case FTC_SUM: case FTC_AVG: acc += v; break;
    case FTC_PROD: acc *= v; break;
    case FTC_MIN: acc = v < acc ? v : acc; break;
    case FTC_MAX: acc = v > acc ? v : acc; break;
    case FTC_BAND: acc = (double)((int64_t)acc & (int64_t)v); break;
    case FTC_BOR: acc = (double)((int64_t)acc | (int64_t)v); break;
    case FTC_BXOR: acc = (double)((int64_t)acc ^ (int64_t)v); break;
    default: break;
    }
  }
  if (op == FTC_AVG) {
    acc /= nranks;
    if (t == FTC_I32 || t == FTC_I64 || t == FTC_U8) acc = trunc(acc);
  }
  return acc;
}

void bench_fill(const bench_opts_t *o, const bench_geom_t *g, int rank, int nranks,
                void *sendbuf, void *recvbuf) {
  size_t ts = bench_dtype_size(o->dtype);
  (void)nranks;
  /* poison: all-ones bytes are NaN in the float types and -1 or 255 in the
   * integer ones, never a right answer */
  if (recvbuf) memset(recvbuf, 0xff, g->recv_elems * ts);
  if (!sendbuf) return;
  if (coll_has_op(o->coll)) {
    for (size_t i = 0; i < g->send_elems; i++) store(o->dtype, sendbuf, i, red_value(o->op, rank, i));
  } else if (o->coll == BENCH_BROADCAST) {
    /* broadcast is in place: non-roots start from poison in the same buffer */
    if (rank == o->root)
      for (size_t i = 0; i < g->send_elems; i++) store(o->dtype, sendbuf, i, move_value(rank, i));
    else
      memset(sendbuf, 0xff, g->send_elems * ts);
  } else {
    for (size_t i = 0; i < g->send_elems; i++) store(o->dtype, sendbuf, i, move_value(rank, i));
  }
}

/* Compare with what the dtype can represent of the exact answer. Inputs are
 * small integers, so moved data and sum/prod/min/max results are exact in
 * every dtype and reduction order; only averages may round. */
static int matches(ftc_dtype_t t, int approx, double got, double want) {
  unsigned char tmp[8];
  store(t, tmp, 0, want);
  double rep = load(t, tmp, 0);
  if (!approx) return got == rep;
  if (t == FTC_F32 || t == FTC_F64)
    return fabs(got - rep) <= 1e-5 * (fabs(rep) > 1 ? fabs(rep) : 1);
  if (t == FTC_F16 || t == FTC_BF16)
    return fabs(got - rep) <= 1e-2 * (fabs(rep) > 1 ? fabs(rep) : 1);
  return got == rep;
}

size_t bench_check(const bench_opts_t *o, const bench_geom_t *g, int rank, int nranks,
                   const void *recvbuf) {
  size_t wrong = 0;
  if (!recvbuf) return 0;
  if (coll_has_op(o->coll)) {
    if (o->coll == BENCH_REDUCE && rank != o->root) return 0;
    double table[PATTERN_PERIOD];
    size_t base = o->coll == BENCH_REDUCE_SCATTER ? (size_t)rank * g->per_rank : 0;
    for (size_t k = 0; k < PATTERN_PERIOD; k++) table[k] = reduced(o->op, o->dtype, nranks, k);
    for (size_t i = 0; i < g->recv_elems; i++)
      if (!matches(o->dtype, o->op == FTC_AVG, load(o->dtype, recvbuf, i),
                   table[(base + i) % PATTERN_PERIOD]))
        wrong++;
  } else if (o->coll == BENCH_BROADCAST) {
    for (size_t i = 0; i < g->recv_elems; i++)
      if (!matches(o->dtype, 0, load(o->dtype, recvbuf, i), move_value(o->root, i))) wrong++;
  } else if (o->coll == BENCH_ALLGATHER) {
    for (size_t i = 0; i < g->recv_elems; i++)
      if (!matches(o->dtype, 0, load(o->dtype, recvbuf, i),
                   move_value((int)(i / g->per_rank), i % g->per_rank)))
        wrong++;
  } else if (o->coll == BENCH_ALLTOALL) {
    /* block j of my receive buffer is block `rank` of rank j's send buffer */
    for (size_t i = 0; i < g->recv_elems; i++) {
      size_t j = i / g->per_rank, off = i % g->per_rank;
      if (!matches(o->dtype, 0, load(o->dtype, recvbuf, i),
                   move_value((int)j, (size_t)rank * g->per_rank + off)))
        wrong++;
    }
  }
  return wrong;
}

void bench_print_header(FILE *f, const bench_opts_t *o, int nranks, const char *detail) {
  if (o->csv) {
    fprintf(f, "system,collective,ranks,size,count,type,op,root,time_us,algbw_GBps,busbw_GBps,"
               "wrong,iters\n");
    return;
  }
  fprintf(f, "# %s: %s, %d ranks, warmup %d, iters %d%s%s%s\n", o->label,
          bench_coll_name(o->coll), nranks, o->warmup, o->iters, o->async ? ", async" : "",
          detail && *detail ? ", " : "", detail ? detail : "");
  fprintf(f, "#\n");
  const char *ac = o->row_algo ? "  algo" : "";
  fprintf(f, "# %10s %12s %6s %6s %6s %10s %8s %8s %7s %6s%s\n", "size", "count", "type", "redop",
          "root", "time", "algbw", "busbw", "#wrong", "iters", ac);
  fprintf(f, "# %10s %12s %6s %6s %6s %10s %8s %8s %7s %6s\n", "(B)", "(elements)", "", "", "",
          "(us)", "(GB/s)", "(GB/s)", "", "");
}

void bench_print_row(FILE *f, const bench_opts_t *o, int nranks, const bench_geom_t *g,
                     double time_us, size_t wrong) {
  double algbw = time_us > 0 ? (double)g->bytes / (time_us * 1e3) : 0;
  double busbw = algbw * bench_busbw_factor(o->coll, nranks);
  int root = coll_has_root(o->coll) ? o->root : -1;
  const char *op = coll_has_op(o->coll) ? bench_op_name(o->op) : "none";
  int w, n;
  bench_iterations(o, g->bytes, &w, &n);
  if (o->csv)
    fprintf(f, "%s%s%s,%s,%d,%zu,%zu,%s,%s,%d,%.3f,%.6f,%.6f,%zu,%d\n", o->label,
            o->row_algo ? ":" : "", o->row_algo ? o->row_algo : "", bench_coll_name(o->coll),
            nranks, g->bytes, g->count, bench_dtype_name(o->dtype), op, root, time_us, algbw, busbw,
            wrong, n);
  else
    fprintf(f, "  %10zu %12zu %6s %6s %6d %10.2f %8.3f %8.3f %7zu %6d%s%s\n", g->bytes, g->count,
            bench_dtype_name(o->dtype), op, root, time_us, algbw, busbw, wrong, n,
            o->row_algo ? "  " : "", o->row_algo ? o->row_algo : "");
  fflush(f);
}

void bench_print_footer(FILE *f, const bench_opts_t *o, size_t total_wrong, double busbw_sum,
                        int rows) {
  if (o->csv) return;
  fprintf(f, "# Out of bounds values : %zu %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
  fprintf(f, "# Avg bus bandwidth    : %.4f\n", rows ? busbw_sum / rows : 0.0);
  fflush(f);
}

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void *bench_alloc(size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t len = (bytes + page - 1) / page * page;
  if (len == 0) len = page;
  void *p = NULL;
  if (posix_memalign(&p, page, len)) return NULL;
  memset(p, 0, len);
  return p;
}

void bench_free(void *p) { free(p); }
