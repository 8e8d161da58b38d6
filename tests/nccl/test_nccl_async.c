/*
 * test_nccl_async.c - asynchronous requests on the NCCL backend (against the
 * NCCL and CUDA runtime test doubles): the progress thread enqueues them on
 * the stream back to back and discovers their completions later, in order,
 * from their CUDA events; the flight recorder gets those times; a hang in
 * one of them becomes its timeout, the requests behind it are revoked, and
 * the communicator is aborted, never destroyed.
 *
 * One rank in this process (a one-rank epoch needs no coordinator for its
 * unique id). Each collective of the double takes NCCL_DOUBLE_COLL_MS on the
 * stream; the double logs when each was enqueued (NCCL_DOUBLE_LOG).
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/comm.h"
#include "harness.h"
#include "nccl_test_util.h"

#define NREQ 4
#define COLL_MS 100

static const char *g_expect = "NCCL 2.32.3"; /* the backend line this process loads */
static const char *g_self;                   /* argv[0], to run the RCCL mode */

typedef struct fixture {
  char dir[256], log[300];
  ftc_comm_t *comm;
} fixture_t;

static void open_comm(fixture_t *f, const char *tag, int timeout_ms) {
  make_tmpdir(f->dir, sizeof f->dir, tag);
  snprintf(f->log, sizeof f->log, "%s/log", f->dir);
  setenv("NCCL_DOUBLE_DIR", f->dir, 1);
  setenv("NCCL_DOUBLE_LOG", f->log, 1);
  int fd;
  ftc__view_t *v = harness_view(1, 0, 1, &fd);
  ftc_config_t cfg;
  harness_config(&cfg, timeout_ms, 5000);
  cfg.backend = "nccl";
  f->comm = NULL;
  assert_int_equal(ftc__comm_create_from_view(&cfg, v, fd, &f->comm), FTC_OK);
  harness_view_free(v);
  char be[256];
  assert_int_equal(ftc_comm_backend(f->comm, be, sizeof be), FTC_OK);
  if (!strstr(be, g_expect)) fail_msg("backend \"%s\", expected %s", be, g_expect);
}

/* When the double enqueued collective seq (0: not found). */
static int64_t enqueued_at(const char *log, int seq) {
  FILE *in = fopen(log, "r");
  if (!in) return 0;
  char line[512], want[32];
  snprintf(want, sizeof want, " seq=%d ", seq);
  int64_t t = 0;
  while (fgets(line, sizeof line, in))
    if (strstr(line, " enqueue ") && strstr(line, want)) {
      const char *p = strstr(line, "t_ns=");
      if (p) t = strtoll(p + 5, NULL, 10);
    }
  fclose(in);
  return t;
}

/* The recorder's entries of epoch 1, by sequence number (1..n). */
static void entries(ftc_comm_t *comm, ftc_rec_entry_t *by_seq, int n) {
  ftc_rec_entry_t all[64];
  int got = ftc_rec_snapshot(comm->rec, all, 64);
  memset(by_seq, 0, (size_t)n * sizeof *by_seq);
  for (int i = 0; i < got; i++)
    if (all[i].seq >= 1 && all[i].seq <= (uint64_t)n) by_seq[all[i].seq - 1] = all[i];
}

/* Four iallreduces, each COLL_MS on the stream: all four are enqueued
 * before the first completes (the old engine enqueued each after the one
 * before had completed), they complete in order, and each record's started
 * time is no earlier than the completion before it. */
static void async_allreduces_are_enqueued_back_to_back(void **state) {
  (void)state;
  setenv("NCCL_DOUBLE_COLL_MS", "100", 1);
  fixture_t f;
  open_comm(&f, "async", 10000);
  float in[NREQ][64], out[NREQ][64];
  ftc_request_t *req[NREQ];
  for (int k = 0; k < NREQ; k++) {
    for (int i = 0; i < 64; i++) in[k][i] = (float)(k * 100 + i), out[k][i] = -1;
    assert_int_equal(ftc_iallreduce(in[k], out[k], 64, FTC_F32, FTC_SUM, f.comm, &req[k]), FTC_OK);
  }
  int done = -1;
  assert_int_equal(ftc_wait(req[0], 5000), FTC_OK);
  assert_int_equal(ftc_test(req[NREQ - 1], &done), FTC_OK);
  assert_int_equal(done, 0); /* three collectives of 100 ms are still ahead of it */
  for (int k = 1; k < NREQ; k++) assert_int_equal(ftc_wait(req[k], 5000), FTC_OK);
  for (int k = 0; k < NREQ; k++) {
    assert_true(out[k][7] == in[k][7]);
    ftc_request_free(req[k]);
  }
  ftc_rec_entry_t e[NREQ];
  entries(f.comm, e, NREQ);
  for (int k = 0; k < NREQ; k++) {
    print_message("#%d enqueued +%.1f ms started +%.1f ms completed +%.1f ms\n", k + 1,
                  (double)(enqueued_at(f.log, k + 1) - e[0].t_created) / 1e6,
                  (double)(e[k].t_started - e[0].t_created) / 1e6,
                  (double)(e[k].t_completed - e[0].t_created) / 1e6);
    assert_int_equal(e[k].state, FTC_REC_COMPLETED);
    assert_true(e[k].t_started >= e[k].t_created);
    assert_true(e[k].t_completed - e[k].t_started >= (COLL_MS - 5) * 1000000LL);
    if (k > 0) assert_true(e[k].t_started >= e[k - 1].t_completed);
    int64_t enq = enqueued_at(f.log, k + 1);
    assert_true(enq > 0);
    assert_true(enq < e[0].t_completed); /* enqueued while the first still ran */
  }
  assert_int_equal(ftc_comm_destroy(f.comm), FTC_OK);
  assert_int_equal(count_lines(f.log, " destroy ", NULL), 1); /* healthy: finalized, destroyed */
  assert_int_equal(count_lines(f.log, " abort ", NULL), 0);
  unsetenv("NCCL_DOUBLE_COLL_MS");
  rm_tmpdir(f.dir);
}

/* The third of four hangs inside the library: the first two complete, the
 * third times out after the timeout (started on the GPU, never completed),
 * the fourth, queued behind it on the stream, is revoked; the communicator
 * is aborted, never destroyed. */
static void a_hang_in_flight_becomes_its_timeout(void **state) {
  (void)state;
  setenv("NCCL_DOUBLE_COLL_MS", "20", 1);
  setenv("NCCL_DOUBLE_HANG_AT", "3", 1);
  fixture_t f;
  open_comm(&f, "asynchang", 400);
  float in[NREQ][16], out[NREQ][16];
  ftc_request_t *req[NREQ];
  int64_t t0 = ftc__now_ns();
  for (int k = 0; k < NREQ; k++) {
    memset(in[k], 0, sizeof in[k]);
    assert_int_equal(ftc_iallreduce(in[k], out[k], 16, FTC_F32, FTC_SUM, f.comm, &req[k]), FTC_OK);
  }
  ftc_status_t st[NREQ];
  for (int k = 0; k < NREQ; k++) st[k] = ftc_wait(req[k], 10000);
  int64_t waited = ftc__now_ns() - t0;
  print_message("statuses %s %s %s %s after %.0f ms\n", ftc_strerror(st[0]), ftc_strerror(st[1]),
                ftc_strerror(st[2]), ftc_strerror(st[3]), (double)waited / 1e6);
  assert_int_equal(st[0], FTC_OK);
  assert_int_equal(st[1], FTC_OK);
  assert_int_equal(st[2], FTC_ERR_TIMEOUT);
  assert_int_equal(st[3], FTC_ERR_REVOKED);
  assert_true(waited >= 390 * 1000000LL && waited < 5000 * 1000000LL);
  for (int k = 0; k < NREQ; k++) ftc_request_free(req[k]);
  ftc_rec_entry_t e[NREQ];
  entries(f.comm, e, NREQ);
  assert_int_equal(e[0].state, FTC_REC_COMPLETED);
  assert_int_equal(e[1].state, FTC_REC_COMPLETED);
  assert_int_equal(e[2].state, FTC_REC_FAILED);
  assert_true(e[2].t_started >= e[1].t_completed); /* it did start on the GPU */
  assert_true(e[2].t_completed - e[2].t_created >= 390 * 1000000LL);
  assert_int_equal(e[3].state, FTC_REC_FAILED);
  /* the epoch is failed: the next collective is refused at once */
  float x = 0;
  assert_int_equal(ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, f.comm, 1000), FTC_ERR_REVOKED);
  assert_int_equal(ftc_comm_destroy(f.comm), FTC_OK);
  assert_int_equal(count_lines(f.log, " destroy ", NULL), 0);
  assert_true(count_lines(f.log, " abort ", NULL) >= 1);
  unsetenv("NCCL_DOUBLE_HANG_AT");
  unsetenv("NCCL_DOUBLE_COLL_MS");
  rm_tmpdir(f.dir);
}

/* A GPU cannot read plain host memory, and the double (NCCL_DOUBLE_DEVICE_ONLY)
 * refuses it too. A scalar collective on host memory, as the core's step
 * boundary makes (ftc_comm_step's allreduce of a stack variable), is staged
 * through pinned and device memory: it works, blocking and asynchronous;
 * a large host buffer is not staged and is refused. */
/* The receive buffer of the double's last enqueued collective (NULL: none). */
static void *last_recv(const char *log) {
  FILE *in = fopen(log, "r");
  if (!in) return NULL;
  char line[512];
  void *p = NULL;
  while (fgets(line, sizeof line, in)) {
    const char *r = strstr(line, " recv=");
    if (strstr(line, " enqueue ") && r) p = (void *)(uintptr_t)strtoull(r + 6, NULL, 16);
  }
  fclose(in);
  return p;
}

static void a_scalar_on_host_memory_is_staged(void **state) {
  (void)state;
  setenv("NCCL_DOUBLE_DEVICE_ONLY", "1", 1);
  fixture_t f;
  open_comm(&f, "stage", 10000);
  int64_t a = 7, b = 0;
  assert_int_equal(ftc_allreduce(&a, &b, 1, FTC_I64, FTC_MIN, f.comm, 5000), FTC_OK);
  assert_int_equal(b, 7);
  void *seen = last_recv(f.log);
  assert_non_null(seen);
  assert_ptr_not_equal(seen, &b); /* NCCL got the staging slot */
  /* pinned memory (the runtime's own host allocation) is passed as it is */
  void *rt = dlopen(cudart_double_path(), RTLD_NOW | RTLD_NOLOAD);
  assert_non_null(rt);
  int (*host_alloc)(void **, size_t, unsigned) =
      (int (*)(void **, size_t, unsigned))dlsym(rt, strstr(g_expect, "RCCL") ? "hipHostMalloc" : "cudaHostAlloc");
  int (*host_free)(void *) = (int (*)(void *))dlsym(rt, strstr(g_expect, "RCCL") ? "hipHostFree" : "cudaFreeHost");
  assert_true(host_alloc && host_free);
  int64_t *pinned = NULL;
  assert_int_equal(host_alloc((void **)&pinned, 2 * sizeof *pinned, 0), 0);
  pinned[0] = 5;
  assert_int_equal(ftc_allreduce(&pinned[0], &pinned[1], 1, FTC_I64, FTC_MAX, f.comm, 5000), FTC_OK);
  assert_int_equal(pinned[1], 5);
  assert_ptr_equal(last_recv(f.log), &pinned[1]);
  host_free(pinned);
  dlclose(rt);
  double d[4] = {1.5, 2.5, 3.5, 4.5}, e[4] = {0};
  ftc_request_t *req;
  assert_int_equal(ftc_iallreduce(d, e, 4, FTC_F64, FTC_SUM, f.comm, &req), FTC_OK);
  assert_int_equal(ftc_wait(req, 5000), FTC_OK);
  ftc_request_free(req);
  assert_true(e[0] == 1.5 && e[3] == 4.5);
  int32_t root = 11;
  assert_int_equal(ftc_broadcast(&root, 1, FTC_I32, 0, f.comm, 5000), FTC_OK);
  assert_int_equal(root, 11);
  /* NCCL has no bitwise reductions: refused before anything runs, saying
   * what to use instead; the communicator goes on. */
  int32_t flags = 3;
  assert_int_equal(ftc_allreduce(&flags, &flags, 1, FTC_I32, FTC_BOR, f.comm, 5000), FTC_ERR_NOT_SUPPORTED);
  if (!strstr(ftc_last_error(), "no bitwise") || !strstr(ftc_last_error(), "FTCOMM_BACKEND=tcp"))
    fail_msg("last error: %s", ftc_last_error());
  assert_int_equal(ftc_allreduce(&flags, &flags, 1, FTC_I32, FTC_MAX, f.comm, 5000), FTC_OK);
  static float big[1024];
  assert_int_equal(ftc_allreduce(big, big, 1024, FTC_F32, FTC_SUM, f.comm, 5000),
                   FTC_ERR_INVALID_ARGUMENT);
  if (!strstr(ftc_last_error(), "invalid argument")) fail_msg("last error: %s", ftc_last_error());
  assert_int_equal(ftc_comm_destroy(f.comm), FTC_OK);
  unsetenv("NCCL_DOUBLE_DEVICE_ONLY");
  rm_tmpdir(f.dir);
}

/* The same on RCCL (the HIP runtime's hipPointerGetAttributes, whose struct
 * and memory-type numbers are its own): this program run again in its
 * "rccl" mode (the library is chosen once per process), as ROCm 6 answers
 * and as ROCm 5 does (HIP_DOUBLE_VERSION=50700000: an error for plain host
 * memory, other numbers). */
static void a_scalar_on_host_memory_is_staged_on_rccl(void **state) {
  (void)state;
  const char *versions[] = {NULL, "50700000"};
  for (int i = 0; i < 2; i++) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      if (versions[i]) setenv("HIP_DOUBLE_VERSION", versions[i], 1);
      execl(g_self, g_self, "rccl", (char *)NULL);
      _exit(127);
    }
    int rc = wait_child(pid, 60000);
    if (rc != 0) fail_msg("the RCCL run (HIP_DOUBLE_VERSION=%s) exited %d", versions[i] ? versions[i] : "default", rc);
  }
}

int main(int argc, char **argv) {
  char lib[512];
  g_self = argv[0];
  if (argc > 1 && !strcmp(argv[1], "rccl")) {
    snprintf(lib, sizeof lib, "%s/librccl_double_2.30.7.so", NCCL_DOUBLE_DIR);
    setenv("FTCOMM_NCCL_LIBRARY", lib, 1);
    setenv("FTCOMM_CUDA_RUNTIME_LIBRARY", cudart_double_path(), 1);
    g_expect = "RCCL 2.30.7";
    const struct CMUnitTest rccl[] = {cmocka_unit_test(a_scalar_on_host_memory_is_staged)};
    return cmocka_run_group_tests_name("rccl", rccl, NULL, NULL);
  }
  double_path("2.32.3", lib, sizeof lib);
  setenv("FTCOMM_NCCL_LIBRARY", lib, 1);
  setenv("FTCOMM_CUDA_RUNTIME_LIBRARY", cudart_double_path(), 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(async_allreduces_are_enqueued_back_to_back),
      cmocka_unit_test(a_hang_in_flight_becomes_its_timeout),
      cmocka_unit_test(a_scalar_on_host_memory_is_staged),
      cmocka_unit_test(a_scalar_on_host_memory_is_staged_on_rccl),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
