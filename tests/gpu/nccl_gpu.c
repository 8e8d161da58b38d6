/*
 * nccl_gpu.c - the NCCL backend on a real GPU with the real NCCL, ranks as
 * processes on one machine (several on one GPU with NCCL >= 2.30 and
 * NCCL_MULTI_RANK_GPU_ENABLE=1). Driven by tests/gpu/run.sh.
 *
 *   nccl_gpu --version            print the library, version, caps and path
 *   nccl_gpu NRANKS DIR           NRANKS ranks: allreduce correctness, busbw of
 *                                 ftcomm beside raw NCCL on the same GPU, then
 *                                 (NRANKS >= 2) kill the last rank, shrink,
 *                                 grow a replacement back, and a full re-init,
 *                                 with their latencies
 *
 * The library and runtime come from FTCOMM_NCCL_LIBRARY and
 * FTCOMM_CUDA_RUNTIME_LIBRARY. Unique ids travel through files in DIR.
 * Exit 0 when every check passed.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ftc_error.h"
#include "ftc_time.h"
#include "nccl/nccl_int.h"

static char g_dir[256];
static ftc__nccl_lib_t *g_lib;
static struct {
  cudaError_t (*Malloc)(void **, size_t);
  cudaError_t (*Free)(void *);
  cudaError_t (*Memcpy)(void *, const void *, size_t, enum cudaMemcpyKind);
  cudaError_t (*StreamCreate)(cudaStream_t *);
  cudaError_t (*StreamSynchronize)(cudaStream_t);
  cudaError_t (*SetDevice)(int);
} rt;

#define DIE(code, ...)                                                          \
  do {                                                                          \
    fprintf(stderr, "nccl_gpu[%d]: ", (int)getpid());                           \
    fprintf(stderr, __VA_ARGS__);                                               \
    fprintf(stderr, " (%s)\n", ftc_last_error());                               \
    _exit(code);                                                                \
  } while (0)

static ftc_status_t publish(void *arg, uint64_t epoch, const char *blob) {
  (void)arg;
  char p[512], t[600];
  snprintf(p, sizeof p, "%s/blob-%llu", g_dir, (unsigned long long)epoch);
  snprintf(t, sizeof t, "%s.%d", p, (int)getpid());
  FILE *f = fopen(t, "w");
  if (!f) return FTC_ERR_SYSTEM;
  fputs(blob, f);
  fclose(f);
  return rename(t, p) ? FTC_ERR_SYSTEM : FTC_OK;
}

static ftc_status_t fetch(void *arg, uint64_t epoch, char *blob, size_t len, int64_t deadline) {
  (void)arg;
  char p[512];
  snprintf(p, sizeof p, "%s/blob-%llu", g_dir, (unsigned long long)epoch);
  for (;;) {
    FILE *f = fopen(p, "r");
    if (f) {
      size_t n = fread(blob, 1, len - 1, f);
      blob[n] = '\0';
      fclose(f);
      return FTC_OK;
    }
    if (ftc__now_ns() > deadline) return ftc__error(FTC_ERR_TIMEOUT, "no blob for epoch %llu",
                                                    (unsigned long long)epoch);
    usleep(1000);
  }
}

static const ftc__nccl_xchg_t xchg = {publish, fetch, NULL};

static ftc__view_t *view(uint64_t epoch, int n, const uint64_t *ids, const uint64_t *joined,
                         int me) {
  ftc__view_t *v = calloc(1, sizeof *v);
  v->epoch = epoch, v->size = n, v->my_rank = me;
  v->members = calloc((size_t)n, sizeof *v->members);
  for (int i = 0; i < n; i++) {
    v->members[i].rank = i, v->members[i].slot = i;
    v->members[i].member_id = ids[i], v->members[i].joined_epoch = joined[i];
  }
  v->my_member_id = ids[me];
  return v;
}

static void load(void) {
  ftc_status_t st = ftc__nccl_lib_open(NULL, NULL, &g_lib);
  if (st != FTC_OK) DIE(2, "cannot load NCCL: %s", ftc_strerror(st));
  void *h = g_lib->rt_handle;
  *(void **)&rt.Malloc = dlsym(h, "cudaMalloc");
  *(void **)&rt.Free = dlsym(h, "cudaFree");
  *(void **)&rt.Memcpy = dlsym(h, "cudaMemcpy");
  *(void **)&rt.StreamCreate = dlsym(h, "cudaStreamCreate");
  *(void **)&rt.StreamSynchronize = dlsym(h, "cudaStreamSynchronize");
  *(void **)&rt.SetDevice = dlsym(h, "cudaSetDevice");
  if (!rt.Malloc || !rt.Memcpy || !rt.StreamCreate || !rt.StreamSynchronize || !rt.SetDevice)
    DIE(2, "the CUDA runtime lacks cudaMalloc/cudaMemcpy/cudaStreamCreate");
}

/* allreduce(sum) of `mine` over n floats on the device; every element must be want. */
static ftc_status_t check_allreduce(ftc__nccl_comm_t *c, float *dev, size_t n, float mine,
                                    float want, int timeout_ms) {
  float *host = malloc(n * sizeof *host);
  for (size_t i = 0; i < n; i++) host[i] = mine;
  rt.Memcpy(dev, host, n * sizeof *host, cudaMemcpyHostToDevice);
  ftc__op_t op = {FTC__COLL_ALLREDUCE, dev, dev, n, FTC_F32, FTC_SUM, -1};
  ftc__nccl_work_t w;
  ftc_status_t st = ftc__nccl_comm_launch(c, &op, NULL, &w);
  if (st == FTC_OK) st = ftc__nccl_comm_wait(c, &w, ftc__deadline_ns(timeout_ms));
  if (st == FTC_OK) {
    ftc__nccl_work_release(c, &w);
    rt.Memcpy(host, dev, n * sizeof *host, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; i++)
      if (host[i] != want) {
        st = ftc__error(FTC_ERR_INTERNAL, "allreduce element %zu is %g, want %g", i, host[i], want);
        break;
      }
  }
  free(host);
  return st;
}

static double now_s(void) { return (double)ftc__now_ns() / 1e9; }

/* busbw of ftcomm (launch + bounded wait per call, as ftc_allreduce does)
 * beside raw NCCL (ncclAllReduce + cudaStreamSynchronize) on the same GPU. */
static void bench(ftc__nccl_comm_t *c, ncclComm_t raw, cudaStream_t s, float *dev, int rank,
                  int n) {
  static const size_t sizes[] = {1 << 20, 8 << 20, 64 << 20, 256 << 20};
  const char *cap = getenv("NCCL_GPU_BENCH_MAX_MIB"); /* a dry run on the CPU doubles */
  size_t max = cap ? (size_t)atol(cap) << 20 : (size_t)256 << 20;
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && sizes[k] <= max; k++) {
    size_t bytes = sizes[k], count = bytes / 4;
    int iters = bytes >= (64u << 20) ? 20 : 50;
    double t_ft = 0, t_raw = 0;
    for (int pass = 0; pass < 2; pass++) { /* pass 0 warms up */
      double t0 = now_s();
      for (int i = 0; i < iters; i++) {
        ftc__op_t op = {FTC__COLL_ALLREDUCE, dev, dev, count, FTC_F32, FTC_SUM, -1};
        ftc__nccl_work_t w;
        if (ftc__nccl_comm_launch(c, &op, NULL, &w) != FTC_OK ||
            ftc__nccl_comm_wait(c, &w, ftc__deadline_ns(60000)) != FTC_OK)
          DIE(20, "bench allreduce failed");
        ftc__nccl_work_release(c, &w);
      }
      t_ft = (now_s() - t0) / iters;
      t0 = now_s();
      for (int i = 0; i < iters; i++) {
        if (g_lib->n.AllReduce(dev, dev, count, ncclFloat32, ncclSum, raw, s) != ncclSuccess)
          DIE(21, "raw ncclAllReduce failed");
        rt.StreamSynchronize(s);
      }
      t_raw = (now_s() - t0) / iters;
    }
    double f = n > 1 ? 2.0 * (n - 1) / n : 1.0;
    double bw_ft = bytes / t_ft * f / 1e9, bw_raw = bytes / t_raw * f / 1e9;
    if (rank == 0)
      printf("  allreduce %4zu MiB  ranks %d  ftcomm busbw %7.2f GB/s  raw NCCL busbw %7.2f GB/s"
             "  ratio %5.1f%%\n", bytes >> 20, n, bw_ft, bw_raw, 100.0 * bw_ft / bw_raw);
    fflush(stdout);
  }
}

static void record(const char *what, int64_t ns) {
  char p[512];
  snprintf(p, sizeof p, "%s/lat-%s", g_dir, what);
  FILE *f = fopen(p, "w");
  if (f) {
    fprintf(f, "%.1f\n", (double)ns / 1e6);
    fclose(f);
  }
}

/* A full re-init of every rank in the same run, for comparison. */
static void full_reinit(int n, int rank, const uint64_t *ids, const ftc__nccl_opts_t *o) {
  ftc__nccl_comm_t *fresh = NULL;
  uint64_t j4[8];
  for (int i = 0; i < n; i++) j4[i] = 4;
  ftc__view_t *v4 = view(4, n, ids, j4, rank);
  ftc_status_t st = ftc__nccl_enter_epoch(g_lib, &fresh, v4, &xchg, o);
  if (st != FTC_OK) DIE(13, "full re-init: %s", ftc_strerror(st));
  int64_t ns;
  ftc__nccl_comm_last_step(fresh, NULL, &ns);
  if (rank == 0) {
    record("full-reinit", ns);
    printf("  full re-init of %d ranks: %.1f ms\n", n, ns / 1e6);
  }
  ftc__nccl_comm_free(fresh);
}

static void rank_main(int n, int rank) {
  load();
  rt.SetDevice(0);
  size_t elems = 4 << 20; /* 16 MiB of f32 for the checks */
  float *dev = NULL, *big = NULL;
  if (rt.Malloc((void **)&dev, elems * 4) != cudaSuccess ||
      rt.Malloc((void **)&big, 256u << 20) != cudaSuccess)
    DIE(3, "cudaMalloc failed");
  uint64_t ids[8], joined[8];
  for (int i = 0; i < n; i++) ids[i] = 100 + (uint64_t)i, joined[i] = 1;
  ftc__nccl_opts_t o = {0, 120000, NULL};
  ftc__nccl_comm_t *c = NULL;
  ftc__view_t *v1 = view(1, n, ids, joined, rank);
  ftc_status_t st = ftc__nccl_enter_epoch(g_lib, &c, v1, &xchg, &o);
  if (st != FTC_OK) DIE(4, "epoch 1 init: %s", ftc_strerror(st));
  int64_t ns;
  ftc__nccl_comm_last_step(c, NULL, &ns);
  if (rank == 0) record("init", ns);
  st = check_allreduce(c, dev, elems, (float)(rank + 1), (float)(n * (n + 1) / 2), 60000);
  if (st != FTC_OK) DIE(5, "epoch 1 allreduce: %s", ftc_strerror(st));
  if (rank == 0) printf("  epoch 1: %d ranks, allreduce of %zu floats correct\n", n, elems);

  /* raw NCCL communicator beside it, for the bandwidth comparison */
  ncclUniqueId uid;
  char blob[FTC__NCCL_BLOB_MAX];
  if (rank == 0) {
    g_lib->n.GetUniqueId(&uid);
    ftc__nccl_blob_encode("init", (const uint8_t *)uid.internal, blob, sizeof blob);
    publish(NULL, 1000, blob);
  } else {
    if (fetch(NULL, 1000, blob, sizeof blob, ftc__deadline_ns(60000)) != FTC_OK)
      DIE(6, "no raw id");
    ftc__nccl_blob_decode(blob, "init", (uint8_t *)uid.internal);
  }
  ncclComm_t raw = NULL;
  if (g_lib->n.CommInitRankConfig(&raw, n, uid, rank, NULL) != ncclSuccess) DIE(7, "raw init");
  cudaStream_t s;
  rt.StreamCreate(&s);
  bench(c, raw, s, big, rank, n);
  if (n < 2) goto out;

  /* kill the last rank; the survivors see peer lost or a timeout */
  if (rank == n - 1) raise(SIGKILL);
  g_lib->n.CommAbort(raw); /* its peer is gone: abort, never destroy */
  int64_t t0 = ftc__now_ns();
  st = check_allreduce(c, dev, elems, 1.0f, 0.0f, 10000);
  if (st == FTC_OK) DIE(8, "allreduce with a dead peer succeeded");
  if (rank == 0)
    printf("  rank %d killed: survivors' allreduce gave \"%s\" after %.1f s\n", n - 1,
           ftc_strerror(st), (double)(ftc__now_ns() - t0) / 1e9);
  ftc__nccl_comm_revoke(c, st);
  ftc__view_t *v2 = view(2, n - 1, ids, joined, rank);
  st = ftc__nccl_enter_epoch(g_lib, &c, v2, &xchg, &o);
  if (st != FTC_OK) DIE(9, "epoch 2: %s", ftc_strerror(st));
  ftc__nccl_step_t step;
  ftc__nccl_comm_last_step(c, &step, &ns);
  if (rank == 0) record(step == FTC__NCCL_STEP_SHRINK ? "shrink" : "reinit-after-loss", ns);
  if (rank == 0)
    printf("  epoch 2: %d ranks by %s in %.1f ms\n", n - 1, ftc__nccl_step_name(step), ns / 1e6);
  st = check_allreduce(c, dev, elems, (float)(rank + 1), (float)((n - 1) * n / 2), 60000);
  if (st != FTC_OK) DIE(10, "epoch 2 allreduce: %s", ftc_strerror(st));

  /* a replacement joins at epoch 3 (the parent started it) */
  ids[n - 1] = 200, joined[n - 1] = 3;
  ftc__view_t *v3 = view(3, n, ids, joined, rank);
  st = ftc__nccl_enter_epoch(g_lib, &c, v3, &xchg, &o);
  if (st != FTC_OK) DIE(11, "epoch 3: %s", ftc_strerror(st));
  ftc__nccl_comm_last_step(c, &step, &ns);
  if (rank == 0) {
    record(step == FTC__NCCL_STEP_GROW ? "grow" : "reinit-join", ns);
    printf("  epoch 3: %d ranks by %s in %.1f ms\n", n, ftc__nccl_step_name(step), ns / 1e6);
  }
  st = check_allreduce(c, dev, elems, (float)(rank + 1), (float)(n * (n + 1) / 2), 60000);
  if (st != FTC_OK) DIE(12, "epoch 3 allreduce: %s", ftc_strerror(st));
  full_reinit(n, rank, ids, &o);
out:
  ftc__nccl_comm_free(c);
  _exit(0);
}

static void joiner_main(int n) {
  load();
  rt.SetDevice(0);
  float *dev = NULL;
  size_t elems = 4 << 20;
  if (rt.Malloc((void **)&dev, elems * 4) != cudaSuccess) DIE(3, "cudaMalloc failed");
  uint64_t ids[8], joined[8];
  for (int i = 0; i < n; i++) ids[i] = 100 + (uint64_t)i, joined[i] = 1;
  ids[n - 1] = 200, joined[n - 1] = 3;
  ftc__nccl_opts_t o = {0, 300000, NULL};
  ftc__nccl_comm_t *c = NULL;
  ftc__view_t *v3 = view(3, n, ids, joined, n - 1);
  ftc_status_t st = ftc__nccl_enter_epoch(g_lib, &c, v3, &xchg, &o);
  if (st != FTC_OK) DIE(30, "joiner epoch 3: %s", ftc_strerror(st));
  st = check_allreduce(c, dev, elems, (float)n, (float)(n * (n + 1) / 2), 60000);
  if (st != FTC_OK) DIE(31, "joiner allreduce: %s", ftc_strerror(st));
  full_reinit(n, n - 1, ids, &o);
  ftc__nccl_comm_free(c);
  _exit(0);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* ranks leave with _exit */
  if (argc == 2 && !strcmp(argv[1], "--version")) {
    load();
    char d[512];
    ftc__nccl_describe(g_lib, d, sizeof d);
    printf("%s; runtime %s; %d device(s); version code %d\n", d, g_lib->info.runtime,
           g_lib->info.devices, g_lib->info.version);
    return 0;
  }
  if (argc != 3) {
    fprintf(stderr, "usage: nccl_gpu --version | nccl_gpu NRANKS DIR\n");
    return 2;
  }
  int n = atoi(argv[1]);
  if (n < 1 || n > 8) return 2;
  snprintf(g_dir, sizeof g_dir, "%s", argv[2]);
  mkdir(g_dir, 0700);
  pid_t pid[9];
  for (int r = 0; r < n; r++)
    if ((pid[r] = fork()) == 0) rank_main(n, r);
  if (n >= 2 && (pid[n] = fork()) == 0) joiner_main(n);
  int fails = 0;
  for (int r = 0; r < n + (n >= 2); r++) {
    int status;
    waitpid(pid[r], &status, 0);
    int killed = n >= 2 && r == n - 1;
    int ok = killed ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                    : WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) {
      fprintf(stderr, "nccl_gpu: %s %d ended with status 0x%x\n", r == n ? "joiner" : "rank", r,
              status);
      fails++;
    }
  }
  printf("  %d ranks: %s\n", n, fails ? "FAILED" : "passed");
  return fails ? 1 : 0;
}
