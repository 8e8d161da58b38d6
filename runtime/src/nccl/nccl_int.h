/*
 * nccl_int.h - what the backend's two files share: the dlsym'd function
 * tables of NCCL and of the CUDA (or HIP) runtime, typed from the real
 * nccl.h and cuda_runtime_api.h. HIP's runtime has the same signatures and
 * error numbers for the calls used here (hipSuccess 0, hipErrorNotReady 600),
 * so one table serves both, filled with a "cuda" or "hip" prefix; only
 * hipPointerGetAttributes has a struct of its own (below).
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

/* hipPointerAttribute_t of ROCm 6 and later (hip_runtime_api.h): type is
 * enum hipMemoryType, Unregistered 0, Host 1, Device 2, Managed 3, Array 10,
 * Unified 11. ROCm 5 named the first field memoryType, numbered Host 0,
 * Device 1, Array 2, Unified 3, and answered hipErrorInvalidValue for
 * unregistered host memory. */
struct ftc__hip_pointer_attr {
  int type;
  int device;
  void *devicePointer;
  void *hostPointer;
  int isManaged;
  unsigned allocationFlags;
};
#define FTC__HIP_MEMORY_UNREGISTERED 0
#define FTC__HIP_VERSION_6 60000000

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
  /* host staging of small collectives on host buffers (can_stage when all
   * of them are there): cudaPointerGetAttributes on CUDA,
   * hipPointerGetAttributes (its own struct) on HIP; hipHostMalloc and
   * hipHostFree stand for cudaHostAlloc and cudaFreeHost */
  cudaError_t (*PointerGetAttributes)(struct cudaPointerAttributes *, const void *);
  cudaError_t (*HipPointerGetAttributes)(struct ftc__hip_pointer_attr *, const void *);
  cudaError_t (*MemcpyAsync)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
  cudaError_t (*HostAlloc)(void **, size_t, unsigned int);
  cudaError_t (*FreeHost)(void *);
  cudaError_t (*GetLastError)(void);
  int can_stage;
  int hip_version; /* hipRuntimeGetVersion (HIP_VERSION: major * 10^7 + minor * 10^5 + patch) */
} ftc__cuda_fns_t;

struct ftc__nccl_lib {
  void *nccl_handle, *rt_handle;
  ftc__nccl_fns_t n;
  ftc__cuda_fns_t rt;
  ftc__nccl_info_t info;
  int64_t spin_ns; /* FTCOMM_NCCL_SPIN_US */
};

#endif
