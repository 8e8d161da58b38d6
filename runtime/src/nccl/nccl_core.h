/*
 * nccl_core.h - what the core needs to choose the NCCL backend (backend.c):
 * its ops for core/backend.h, and a probe for FTCOMM_BACKEND=nccl|auto.
 */
#ifndef FTC_NCCL_CORE_H
#define FTC_NCCL_CORE_H

#include <stddef.h>

#include "core/backend.h"

extern const ftc__backend_ops_t ftc__backend_nccl;

/* FTC_OK when NCCL (or RCCL) and its runtime load (once per process) and,
 * with need_device, the runtime sees a GPU; else the status and
 * ftc_last_error() of what is missing (FTC_ERR_LIBRARY_NOT_FOUND names the
 * files looked for). FTCOMM_BACKEND=nccl: probe(0) and fail with its
 * status; auto: NCCL when probe(1) is FTC_OK, else TCP. */
ftc_status_t ftc__nccl_backend_probe(int need_device);

/* "NCCL 2.32.3 (libnccl.so.2) path shrink+grow caps ...", for logs and the
 * backend version in dumps. */
void ftc__nccl_backend_describe(char *buf, size_t len);

#endif
