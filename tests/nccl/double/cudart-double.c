/*
 * cudart-double.c - TEST DOUBLE of the CUDA runtime, for CPU-only tests of
 * ftcomm's NCCL backend. Built as libcudart_double.so; never shipped.
 *
 * "Device" memory is host memory. A stream is a worker thread that runs
 * what is queued on it in order: host functions (cudaLaunchHostFunc, which
 * the NCCL double uses to run its collectives "on the stream") and event
 * records. cudaStreamQuery and cudaEventQuery answer cudaErrorNotReady
 * until the stream has got there, like a GPU that is still busy.
 *
 * Switches (environment): CUDA_DOUBLE_DEVICES=N devices reported (default
 * 1; 0 makes a host without a GPU); HIP_DOUBLE_VERSION=v what
 * hipRuntimeGetVersion answers (default 60400000, ROCm 6.4; below 60000000
 * hipPointerGetAttributes behaves as ROCm 5's, below).
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct item {
  cudaHostFn_t fn;
  void *arg;
  struct CUevent_st *ev; /* an event record when fn is NULL */
  struct item *next;
} item_t;

struct CUstream_st {
  pthread_mutex_t mu;
  pthread_cond_t cv, idle;
  item_t *head, *tail;
  int busy, stop;
  pthread_t thread;
};

struct CUevent_st {
  int recorded;  /* atomic: 1 once recorded, 2 once the stream reached it */
  int refs;      /* atomic: the owner's (until cudaEventDestroy) and one per
                  * record the stream has not reached: destroying a pending
                  * event frees it once reached, as CUDA releases it */
  int64_t t_ns;
};

static void event_put(struct CUevent_st *ev) {
  if (__atomic_sub_fetch(&ev->refs, 1, __ATOMIC_ACQ_REL) == 0) free(ev);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *stream_main(void *arg) {
  struct CUstream_st *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head) break;
    item_t *it = s->head;
    s->head = it->next;
    if (!s->head) s->tail = NULL;
    s->busy = 1;
    pthread_mutex_unlock(&s->mu);
    if (it->fn) {
      it->fn(it->arg);
    } else {
      it->ev->t_ns = now_ns();
      __atomic_store_n(&it->ev->recorded, 2, __ATOMIC_RELEASE);
      event_put(it->ev);
    }
    free(it);
    pthread_mutex_lock(&s->mu);
    s->busy = 0;
    if (!s->head) pthread_cond_broadcast(&s->idle);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static struct CUstream_st *stream_new(void) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_cond_init(&s->idle, NULL);
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    free(s);
    return NULL;
  }
  pthread_setname_np(s->thread, "cuda-double-str");
  return s;
}

static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static struct CUstream_st *default_stream;
static void default_init(void) { default_stream = stream_new(); }

static struct CUstream_st *S(cudaStream_t s) {
  if (s) return s;
  pthread_once(&default_once, default_init);
  return default_stream;
}

static cudaError_t push(struct CUstream_st *s, cudaHostFn_t fn, void *arg, struct CUevent_st *ev) {
  item_t *it = calloc(1, sizeof *it);
  if (!it) return cudaErrorMemoryAllocation;
  it->fn = fn, it->arg = arg, it->ev = ev;
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = it;
  else s->head = it;
  s->tail = it;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return cudaSuccess;
}

static int devices(void) {
  const char *e = getenv("CUDA_DOUBLE_DEVICES");
  return e ? atoi(e) : 1;
}

static __thread int cur_device;

EXPORT cudaError_t cudaGetDeviceCount(int *n) {
  *n = devices();
  return *n > 0 ? cudaSuccess : cudaErrorNoDevice;
}
EXPORT cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= devices()) return cudaErrorInvalidDevice;
  cur_device = d;
  return cudaSuccess;
}
EXPORT cudaError_t cudaGetDevice(int *d) {
  *d = cur_device;
  return cudaSuccess;
}
EXPORT cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags) {
  (void)flags;
  *out = stream_new();
  return *out ? cudaSuccess : cudaErrorMemoryAllocation;
}
EXPORT cudaError_t cudaStreamCreate(cudaStream_t *out) { return cudaStreamCreateWithFlags(out, 0); }

EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t st) {
  struct CUstream_st *s = S(st);
  pthread_mutex_lock(&s->mu);
  while (s->head || s->busy) pthread_cond_wait(&s->idle, &s->mu);
  pthread_mutex_unlock(&s->mu);
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t st) {
  struct CUstream_st *s = st;
  if (!s) return cudaErrorInvalidResourceHandle;
  /* Like CUDA: pending work finishes first, then the stream goes. */
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  free(s);
  return cudaSuccess;
}

EXPORT cudaError_t cudaStreamQuery(cudaStream_t st) {
  struct CUstream_st *s = S(st);
  pthread_mutex_lock(&s->mu);
  int pending = s->head || s->busy;
  pthread_mutex_unlock(&s->mu);
  return pending ? cudaErrorNotReady : cudaSuccess;
}

EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t st, cudaHostFn_t fn, void *arg) {
  return push(S(st), fn, arg, NULL);
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
  (void)flags;
  *ev = calloc(1, sizeof(struct CUevent_st));
  if (!*ev) return cudaErrorMemoryAllocation;
  (*ev)->refs = 1;
  return cudaSuccess;
}
EXPORT cudaError_t cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, 0); }

EXPORT cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t st) {
  __atomic_store_n(&ev->recorded, 1, __ATOMIC_RELEASE);
  __atomic_add_fetch(&ev->refs, 1, __ATOMIC_ACQ_REL);
  cudaError_t e = push(S(st), NULL, NULL, ev);
  if (e != cudaSuccess) event_put(ev);
  return e;
}

EXPORT cudaError_t cudaEventQuery(cudaEvent_t ev) {
  int r = __atomic_load_n(&ev->recorded, __ATOMIC_ACQUIRE);
  return r == 1 ? cudaErrorNotReady : cudaSuccess;
}

EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  while (__atomic_load_n(&ev->recorded, __ATOMIC_ACQUIRE) == 1) {
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  if (__atomic_load_n(&a->recorded, __ATOMIC_ACQUIRE) != 2 ||
      __atomic_load_n(&b->recorded, __ATOMIC_ACQUIRE) != 2)
    return cudaErrorNotReady;
  *ms = (float)(b->t_ns - a->t_ns) / 1e6f;
  return cudaSuccess;
}

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  event_put(ev);
  return cudaSuccess;
}

/* "Device" and pinned memory are host memory, remembered so that
 * cudaPointerGetAttributes can tell them from plain host memory. */
typedef struct region {
  char *p;
  size_t n;
  enum cudaMemoryType type;
  struct region *next;
} region_t;
static pthread_mutex_t regions_mu = PTHREAD_MUTEX_INITIALIZER;
static region_t *regions;

static cudaError_t region_alloc(void **p, size_t n, enum cudaMemoryType type) {
  region_t *r = calloc(1, sizeof *r);
  *p = calloc(1, n ? n : 1);
  if (!r || !*p) {
    free(r), free(*p);
    *p = NULL;
    return cudaErrorMemoryAllocation;
  }
  r->p = *p, r->n = n ? n : 1, r->type = type;
  pthread_mutex_lock(&regions_mu);
  r->next = regions, regions = r;
  pthread_mutex_unlock(&regions_mu);
  return cudaSuccess;
}

static void region_free(void *p) {
  if (!p) return;
  pthread_mutex_lock(&regions_mu);
  for (region_t **q = &regions; *q; q = &(*q)->next)
    if ((*q)->p == p) {
      region_t *r = *q;
      *q = r->next;
      free(r);
      break;
    }
  pthread_mutex_unlock(&regions_mu);
  free(p);
}

EXPORT cudaError_t cudaMalloc(void **p, size_t n) { return region_alloc(p, n, cudaMemoryTypeDevice); }
EXPORT cudaError_t cudaFree(void *p) {
  region_free(p);
  return cudaSuccess;
}
EXPORT cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
  (void)flags;
  return region_alloc(p, n, cudaMemoryTypeHost);
}
EXPORT cudaError_t cudaFreeHost(void *p) {
  region_free(p);
  return cudaSuccess;
}
EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *ptr) {
  memset(a, 0, sizeof *a);
  a->type = cudaMemoryTypeUnregistered;
  pthread_mutex_lock(&regions_mu);
  for (region_t *r = regions; r; r = r->next)
    if ((const char *)ptr >= r->p && (const char *)ptr < r->p + r->n) {
      a->type = r->type;
      a->devicePointer = a->hostPointer = (void *)ptr;
      break;
    }
  pthread_mutex_unlock(&regions_mu);
  return cudaSuccess;
}
EXPORT cudaError_t cudaGetLastError(void) { return cudaSuccess; }

typedef struct copy_job {
  void *dst;
  const void *src;
  size_t n;
} copy_job_t;
static void copy_main(void *arg) {
  copy_job_t *j = arg;
  memmove(j->dst, j->src, j->n);
  free(j);
}
EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
                                   cudaStream_t st) {
  (void)k;
  copy_job_t *j = malloc(sizeof *j);
  if (!j) return cudaErrorMemoryAllocation;
  j->dst = dst, j->src = src, j->n = n;
  cudaError_t e = push(S(st), copy_main, j, NULL);
  if (e != cudaSuccess) free(j);
  return e;
}
EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k) {
  (void)k;
  memmove(dst, src, n);
  return cudaSuccess;
}

EXPORT const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error (cuda double)";
  case cudaErrorNotReady: return "device not ready (cuda double)";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected (cuda double)";
  case cudaErrorInvalidDevice: return "invalid device ordinal (cuda double)";
  case cudaErrorMemoryAllocation: return "out of memory (cuda double)";
  default: return "error (cuda double)";
  }
}

/* The HIP runtime's names for the same calls (RCCL's runtime): same
 * signatures and error numbers for everything the backend uses. */
#define HIP_ALIAS(hip, cuda) EXPORT __typeof__(cuda) hip __attribute__((alias(#cuda)));
HIP_ALIAS(hipGetDeviceCount, cudaGetDeviceCount)
HIP_ALIAS(hipSetDevice, cudaSetDevice)
HIP_ALIAS(hipGetDevice, cudaGetDevice)
HIP_ALIAS(hipStreamCreateWithFlags, cudaStreamCreateWithFlags)
HIP_ALIAS(hipStreamDestroy, cudaStreamDestroy)
HIP_ALIAS(hipStreamQuery, cudaStreamQuery)
HIP_ALIAS(hipEventCreateWithFlags, cudaEventCreateWithFlags)
HIP_ALIAS(hipEventRecord, cudaEventRecord)
HIP_ALIAS(hipEventQuery, cudaEventQuery)
HIP_ALIAS(hipEventElapsedTime, cudaEventElapsedTime)
HIP_ALIAS(hipEventDestroy, cudaEventDestroy)
HIP_ALIAS(hipGetErrorString, cudaGetErrorString)
HIP_ALIAS(hipMalloc, cudaMalloc)
HIP_ALIAS(hipFree, cudaFree)
HIP_ALIAS(hipMemcpyAsync, cudaMemcpyAsync)
HIP_ALIAS(hipHostMalloc, cudaHostAlloc)
HIP_ALIAS(hipHostFree, cudaFreeHost)
HIP_ALIAS(hipGetLastError, cudaGetLastError)

static int hip_version(void) {
  const char *e = getenv("HIP_DOUBLE_VERSION");
  return e && *e ? atoi(e) : 60400000;
}

/* HIP's entry points: no header of theirs here. */
EXPORT cudaError_t hipRuntimeGetVersion(int *v);

EXPORT cudaError_t hipRuntimeGetVersion(int *v) {
  *v = hip_version();
  return cudaSuccess;
}

/* hipPointerAttribute_t and hipPointerGetAttributes as ROCm 6 has them
 * (hip_runtime_api.h): type Unregistered 0, Host 1, Device 2, and the two
 * fields CUDA's struct lacks, all written. As ROCm 5 (HIP_DOUBLE_VERSION below
 * 60000000): Host 0, Device 1, and hipErrorInvalidValue (1) for memory that
 * is neither. */
typedef struct hip_pointer_attr {
  int type;
  int device;
  void *devicePointer;
  void *hostPointer;
  int isManaged;
  unsigned allocationFlags;
} hip_pointer_attr_t;

EXPORT cudaError_t hipPointerGetAttributes(hip_pointer_attr_t *a, const void *ptr);

EXPORT cudaError_t hipPointerGetAttributes(hip_pointer_attr_t *a, const void *ptr) {
  struct cudaPointerAttributes c;
  cudaPointerGetAttributes(&c, ptr);
  int v5 = hip_version() < 60000000;
  memset(a, 0, sizeof *a);
  a->device = 0;
  a->isManaged = 0;
  a->allocationFlags = 0;
  if (c.type == cudaMemoryTypeUnregistered) {
    if (v5) return cudaErrorInvalidValue;
    a->type = 0;
    return cudaSuccess;
  }
  a->type = c.type == cudaMemoryTypeDevice ? (v5 ? 1 : 2) : (v5 ? 0 : 1);
  a->devicePointer = a->hostPointer = (void *)ptr;
  return cudaSuccess;
}
