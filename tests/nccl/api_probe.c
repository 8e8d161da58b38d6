/*
 * api_probe.c - one rank (under ftcomm-run) of the backend-selection checks:
 * creates a communicator from the environment and prints what it got.
 *
 *   api_probe expect-nccl    the backend is NCCL: ftc_comm_backend names it,
 *                            an allreduce of device memory runs on a stream
 *                            set with ftc_comm_set_stream (memory and stream
 *                            from the runtime of FTCOMM_CUDA_RUNTIME_LIBRARY),
 *                            then on its own (also on a real GPU)
 *   api_probe expect-tcp     the backend is TCP: ftc_comm_set_stream is
 *                            refused with FTC_ERR_NOT_SUPPORTED
 *   api_probe expect-fail    ftc_comm_create fails: prints the status and
 *                            ftc_last_error()
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftcomm.h"

/* Device memory from the runtime of FTCOMM_CUDA_RUNTIME_LIBRARY (on a GPU
 * the NCCL backend needs it; the test double's is host memory); NULL
 * functions: plain host memory (TCP). */
static int (*rt_malloc)(void **, size_t);
static int (*rt_memcpy)(void *, const void *, size_t, int);
static int (*rt_free)(void *);

static int allreduce_ok(ftc_comm_t *c, int size) {
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = 1.0f;
  void *buf = x;
  if (rt_malloc && (rt_malloc(&buf, sizeof x) != 0 || rt_memcpy(buf, x, sizeof x, 1) != 0)) {
    printf("cudaMalloc/cudaMemcpy failed\n");
    return 0;
  }
  ftc_status_t st = ftc_allreduce(buf, buf, 64, FTC_F32, FTC_SUM, c, 20000);
  if (st != FTC_OK) printf("allreduce: %s: %s\n", ftc_strerror(st), ftc_last_error());
  else if (rt_malloc) rt_memcpy(x, buf, sizeof x, 2);
  if (rt_malloc && rt_free) rt_free(buf);
  return st == FTC_OK && x[63] == (float)size;
}

int main(int argc, char **argv) {
  const char *want = argc > 1 ? argv[1] : "";
  ftc_comm_t *c = NULL;
  ftc_status_t st = ftc_comm_create(NULL, &c);
  if (!strcmp(want, "expect-fail")) {
    printf("create: %s: %s\n", ftc_strerror(st), ftc_last_error());
    return st == FTC_OK ? 1 : 0;
  }
  if (st != FTC_OK) {
    printf("create failed: %s: %s\n", ftc_strerror(st), ftc_last_error());
    return 1;
  }
  int size = 0, rc = 1;
  ftc_comm_size(c, &size);
  char be[512];
  ftc_comm_backend(c, be, sizeof be);
  printf("backend: %s\n", be);
  if (!strcmp(want, "expect-tcp")) {
    st = ftc_comm_set_stream(c, (void *)1);
    rc = strcmp(be, "tcp") != 0 || st != FTC_ERR_NOT_SUPPORTED || !allreduce_ok(c, size);
  } else if (!strcmp(want, "expect-nccl")) {
    void *rt = dlopen(getenv("FTCOMM_CUDA_RUNTIME_LIBRARY"), RTLD_NOW);
    int (*create)(void **) = rt ? (int (*)(void **))dlsym(rt, "cudaStreamCreate") : NULL;
    *(void **)&rt_malloc = rt ? dlsym(rt, "cudaMalloc") : NULL;
    *(void **)&rt_memcpy = rt ? dlsym(rt, "cudaMemcpy") : NULL;
    *(void **)&rt_free = rt ? dlsym(rt, "cudaFree") : NULL;
    if (!rt_malloc || !rt_memcpy) rt_malloc = NULL;
    void *stream = NULL;
    if (!create || create(&stream) != 0) {
      printf("no cudaStreamCreate in %s\n", getenv("FTCOMM_CUDA_RUNTIME_LIBRARY"));
    } else if (strncmp(be, "NCCL ", 5) != 0 || !strstr(be, " path ")) {
      printf("not the NCCL backend\n");
    } else if (ftc_comm_set_stream(c, stream) != FTC_OK || !allreduce_ok(c, size)) {
      printf("allreduce on the given stream failed\n");
    } else if (ftc_comm_set_stream(c, NULL) != FTC_OK || !allreduce_ok(c, size)) {
      printf("allreduce on the communicator's own stream failed\n");
    } else {
      rc = 0;
    }
    ftc_comm_destroy(c); /* before the stream it may use goes */
    c = NULL;
    int (*destroy)(void *) = rt ? (int (*)(void *))dlsym(rt, "cudaStreamDestroy") : NULL;
    if (stream && destroy) destroy(stream);
  }
  printf("%s: %s\n", want, rc ? "FAILED" : "ok");
  ftc_comm_destroy(c);
  return rc;
}
