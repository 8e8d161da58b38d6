/*
 * nccl_int.h - what the backend's two files share: the dlsym'd function
 * tables of NCCL and of the CUDA (or HIP) runtime, typed from the real
 * nccl.h and cuda_runtime_api.h. HIP's runtime has the same signatures and
 * error numbers for the calls used here (hipSuccess 0, hipErrorNotReady 600),
 * so one table serves both, filled with a "cuda" or "hip" prefix.
 */
#ifndef FTC_NCCL_INT_H
#define FTC_NCCL_INT_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "nccl/nccl_backend.h"

typedef struct ftc__nccl_fns {
  /* always present (>= 2.14) */
  ncclResult_t (*GetVersion)(int *);
  ncclResult_t (*GetUniqueId)(ncclUniqueId *);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommFinalize)(ncclComm_t);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommCount)(const ncclComm_t, int *);
  ncclResult_t (*CommUserRank)(const ncclComm_t, int *);
  const char *(*GetErrorString)(ncclResult_t);
  const char *(*GetLastError)(ncclComm_t); /* may be NULL */
  ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int,
                         ncclComm_t, cudaStream_t);
  ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                                ncclComm_t, cudaStream_t);
  ncclResult_t (*Send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  /* by version */
  ncclResult_t (*CommSplit)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
  ncclResult_t (*CommShrink)(ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int);
  ncclResult_t (*CommRevoke)(ncclComm_t, int);
  ncclResult_t (*CommGetUniqueId)(ncclComm_t, ncclUniqueId *);
  ncclResult_t (*CommGrow)(ncclComm_t, int, const ncclUniqueId *, int, ncclComm_t *,
                           ncclConfig_t *);
} ftc__nccl_fns_t;

typedef struct ftc__cuda_fns {
  cudaError_t (*GetDeviceCount)(int *);
  cudaError_t (*SetDevice)(int);
  cudaError_t (*GetDevice)(int *);
  cudaError_t (*StreamCreateWithFlags)(cudaStream_t *, unsigned int);
  cudaError_t (*StreamDestroy)(cudaStream_t);
  cudaError_t (*StreamQuery)(cudaStream_t);
  cudaError_t (*EventCreateWithFlags)(cudaEvent_t *, unsigned int);
  cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*EventQuery)(cudaEvent_t);
  cudaError_t (*EventElapsedTime)(float *, cudaEvent_t, cudaEvent_t);
  cudaError_t (*EventDestroy)(cudaEvent_t);
  cudaError_t (*Malloc)(void **, size_t);
  cudaError_t (*Free)(void *);
  const char *(*GetErrorString)(cudaError_t);
  /* host staging of small collectives on host buffers (CUDA only; NULL on
   * HIP, whose pointer attributes differ): all four or none */
  cudaError_t (*PointerGetAttributes)(struct cudaPointerAttributes *, const void *);
  cudaError_t (*MemcpyAsync)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
  cudaError_t (*HostAlloc)(void **, size_t, unsigned int);
  cudaError_t (*FreeHost)(void *);
  cudaError_t (*GetLastError)(void);
} ftc__cuda_fns_t;

struct ftc__nccl_lib {
  void *nccl_handle, *rt_handle;
  ftc__nccl_fns_t n;
  ftc__cuda_fns_t rt;
  ftc__nccl_info_t info;
  int64_t spin_ns; /* FTCOMM_NCCL_SPIN_US */
};

#endif
