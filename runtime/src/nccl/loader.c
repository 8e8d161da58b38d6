/*
 * loader.c - finds and opens NCCL (or RCCL) and the CUDA (or HIP) runtime
 * with dlopen, fills the function tables, reads the library's version and
 * decides once which recovery path this process will use. Also the pure
 * helpers: capability and path rules, status mapping, unique-id blobs.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ftc_addr.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_param.h"
#include "nccl/nccl_int.h"

/* Versions (NCCL_VERSION codes) at which each capability appeared. */
#define V_NONBLOCKING 21400
#define V_SPLIT 21800
#define V_SHRINK 22700
#define V_REVOKE 22807
#define V_GROW 22902
#define V_RCCL_FT 23007 /* RCCL: revoke, shrink and grow together */

unsigned int ftc__nccl_caps_for(int version, int rccl, int has_split, int has_shrink,
                                int has_revoke, int has_grow) {
  unsigned int caps = 0;
  if (version >= V_NONBLOCKING) caps |= FTC__NCCL_CAP_NONBLOCKING;
  if (has_split && version >= V_SPLIT) caps |= FTC__NCCL_CAP_SPLIT;
  int ft_ok = !rccl || version >= V_RCCL_FT;
  if (ft_ok && has_shrink && version >= V_SHRINK) caps |= FTC__NCCL_CAP_SHRINK;
  if (ft_ok && has_revoke && version >= V_REVOKE) caps |= FTC__NCCL_CAP_REVOKE;
  /* A grow needs the split to put joiners at their view ranks. */
  if (ft_ok && has_grow && version >= V_GROW && (caps & FTC__NCCL_CAP_SPLIT))
    caps |= FTC__NCCL_CAP_GROW;
  return caps;
}

ftc__nccl_path_t ftc__nccl_path_for(unsigned int caps, const char *want) {
  ftc__nccl_path_t best = FTC__NCCL_PATH_REINIT;
  if (caps & FTC__NCCL_CAP_SHRINK)
    best = (caps & FTC__NCCL_CAP_GROW) ? FTC__NCCL_PATH_SHRINK_GROW : FTC__NCCL_PATH_SHRINK;
  if (!want || !strcmp(want, "auto")) return best;
  ftc__nccl_path_t w = FTC__NCCL_PATH_REINIT;
  if (!strcmp(want, "shrink")) w = FTC__NCCL_PATH_SHRINK;
  if (!strcmp(want, "shrink+grow")) w = FTC__NCCL_PATH_SHRINK_GROW;
  return w < best ? w : best;
}

const char *ftc__nccl_path_name(ftc__nccl_path_t p) {
  switch (p) {
  case FTC__NCCL_PATH_REINIT: return "abort+reinit";
  case FTC__NCCL_PATH_SHRINK: return "shrink";
  case FTC__NCCL_PATH_SHRINK_GROW: return "shrink+grow";
  }
  return "?";
}

ftc_status_t ftc__nccl_status(int r, const char *what, const char *detail) {
  const char *d = detail && *detail ? detail : "";
  switch ((ncclResult_t)r) {
  case ncclSuccess: return FTC_OK;
  case ncclInProgress: return FTC_ERR_IN_PROGRESS;
  case ncclRemoteError:
    return ftc__error(FTC_ERR_PEER_LOST, "%s: a peer rank failed or its connection broke "
                      "(NCCL remote error) %s", what, d);
  case ncclTimeout:
    return ftc__error(FTC_ERR_TIMEOUT, "%s: NCCL timed out %s", what, d);
  case ncclInvalidArgument:
  case ncclInvalidUsage:
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: NCCL refused the call (%s) %s", what,
                      r == ncclInvalidArgument ? "invalid argument" : "invalid usage", d);
  case ncclUnhandledCudaError:
    return ftc__error(FTC_ERR_BACKEND, "%s: a CUDA call inside NCCL failed %s", what, d);
  case ncclSystemError:
    return ftc__error(FTC_ERR_BACKEND, "%s: NCCL system error (a socket, a file or memory) %s",
                      what, d);
  case ncclInternalError:
    return ftc__error(FTC_ERR_BACKEND, "%s: NCCL internal error %s", what, d);
  default:
    return ftc__error(FTC_ERR_BACKEND, "%s: NCCL returned %d %s", what, r, d);
  }
}

/* --- blobs ---------------------------------------------------------------- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int ftc__nccl_blob_encode(const char *kind, const uint8_t uid[FTC__NCCL_UID_BYTES], char *out,
                          size_t len) {
  int n = snprintf(out, len, "nccl-%s:", kind);
  if (n < 0 || (size_t)n >= len) return -1;
  size_t o = (size_t)n;
  for (size_t i = 0; i < FTC__NCCL_UID_BYTES; i += 3) {
    uint32_t v = (uint32_t)uid[i] << 16;
    int k = 1;
    if (i + 1 < FTC__NCCL_UID_BYTES) { v |= (uint32_t)uid[i + 1] << 8; k++; }
    if (i + 2 < FTC__NCCL_UID_BYTES) { v |= uid[i + 2]; k++; }
    if (o + 5 > len) return -1;
    out[o++] = b64[(v >> 18) & 63];
    out[o++] = b64[(v >> 12) & 63];
    out[o++] = k > 1 ? b64[(v >> 6) & 63] : '=';
    out[o++] = k > 2 ? b64[v & 63] : '=';
  }
  out[o] = '\0';
  return (int)o;
}

static int b64_val(char c) {
  const char *p = c ? strchr(b64, c) : NULL;
  return p ? (int)(p - b64) : -1;
}

ftc_status_t ftc__nccl_blob_decode(const char *blob, const char *kind,
                                   uint8_t uid[FTC__NCCL_UID_BYTES]) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "nccl-%s:", kind);
  size_t pl = strlen(prefix);
  if (!blob || strncmp(blob, prefix, pl) != 0)
    return ftc__error(FTC_ERR_PROTOCOL, "the epoch's backend blob is not an NCCL %s id "
                      "(got \"%.24s\"): do all ranks load the same NCCL version?", kind,
                      blob ? blob : "(none)");
  const char *s = blob + pl;
  size_t o = 0, n = strlen(s);
  if (n != (FTC__NCCL_UID_BYTES + 2) / 3 * 4) goto bad;
  for (size_t i = 0; i < n; i += 4) {
    int a = b64_val(s[i]), b = b64_val(s[i + 1]);
    int c = s[i + 2] == '=' ? 0 : b64_val(s[i + 2]);
    int d = s[i + 3] == '=' ? 0 : b64_val(s[i + 3]);
    if (a < 0 || b < 0 || c < 0 || d < 0) goto bad;
    uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
    uint8_t bytes[3] = {(uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    for (int k = 0; k < 3 && o < FTC__NCCL_UID_BYTES; k++) uid[o++] = bytes[k];
  }
  return FTC_OK;
bad:
  return ftc__error(FTC_ERR_PROTOCOL, "malformed NCCL %s id in the epoch's backend blob", kind);
}

/* --- loading -------------------------------------------------------------- */

static void *open_first(const char *const *names, int n, char *found, size_t flen,
                        char *tried, size_t tlen, char *err, size_t elen) {
  tried[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (!names[i]) continue;
    size_t tl = strlen(tried);
    snprintf(tried + tl, tlen - tl, "%s%s", tl ? ", " : "", names[i]);
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      snprintf(found, flen, "%s", names[i]);
      return h;
    }
    const char *e = dlerror(); /* the first failure says most (the usual name) */
    if (!err[0]) snprintf(err, elen, "%s", e ? e : "?");
  }
  return NULL;
}

#define SYM(h, tab, field, name)                                          \
  do {                                                                     \
    *(void **)&(tab).field = dlsym((h), (name));                           \
  } while (0)

static ftc_status_t load_runtime(ftc__nccl_lib_t *lib, const char *override) {
  const char *env = override ? override : ftc__param_str(FTC_P_CUDA_RUNTIME_LIBRARY);
  const char *cuda_names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                              "libcudart.so"};
  const char *hip_names[] = {"libamdhip64.so.6", "libamdhip64.so.7", "libamdhip64.so"};
  char tried[512], err[512] = "";
  if (env && *env)
    lib->rt_handle = open_first(&env, 1, lib->info.runtime, sizeof lib->info.runtime, tried,
                                sizeof tried, err, sizeof err);
  else if (lib->info.rccl)
    lib->rt_handle = open_first(hip_names, 3, lib->info.runtime, sizeof lib->info.runtime, tried,
                                sizeof tried, err, sizeof err);
  else
    lib->rt_handle = open_first(cuda_names, 4, lib->info.runtime, sizeof lib->info.runtime,
                                tried, sizeof tried, err, sizeof err);
  if (!lib->rt_handle)
    return ftc__error(FTC_ERR_LIBRARY_NOT_FOUND,
                      "the %s runtime was not found: looked for %s (set "
                      "FTCOMM_CUDA_RUNTIME_LIBRARY to its path): %s",
                      lib->info.rccl ? "HIP" : "CUDA", tried, err);
  const char *pre = lib->info.rccl ? "hip" : "cuda";
  struct {
    void **slot;
    const char *name;
  } t[] = {
      {(void **)&lib->rt.GetDeviceCount, "GetDeviceCount"},
      {(void **)&lib->rt.SetDevice, "SetDevice"},
      {(void **)&lib->rt.GetDevice, "GetDevice"},
      {(void **)&lib->rt.StreamCreateWithFlags, "StreamCreateWithFlags"},
      {(void **)&lib->rt.StreamDestroy, "StreamDestroy"},
      {(void **)&lib->rt.StreamQuery, "StreamQuery"},
      {(void **)&lib->rt.EventCreateWithFlags, "EventCreateWithFlags"},
      {(void **)&lib->rt.EventRecord, "EventRecord"},
      {(void **)&lib->rt.EventQuery, "EventQuery"},
      {(void **)&lib->rt.EventElapsedTime, "EventElapsedTime"},
      {(void **)&lib->rt.EventDestroy, "EventDestroy"},
      {(void **)&lib->rt.GetErrorString, "GetErrorString"},
      {(void **)&lib->rt.Malloc, "Malloc"},
      {(void **)&lib->rt.Free, "Free"},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    char name[64];
    snprintf(name, sizeof name, "%s%s", pre, t[i].name);
    *t[i].slot = dlsym(lib->rt_handle, name);
    if (!*t[i].slot)
      return ftc__error(FTC_ERR_LIBRARY_NOT_FOUND, "%s has no %s: not a usable %s runtime",
                        lib->info.runtime, name, lib->info.rccl ? "HIP" : "CUDA");
  }
  void *h = lib->rt_handle;
  if (!lib->info.rccl) {
    *(void **)&lib->rt.PointerGetAttributes = dlsym(h, "cudaPointerGetAttributes");
    *(void **)&lib->rt.MemcpyAsync = dlsym(h, "cudaMemcpyAsync");
    *(void **)&lib->rt.HostAlloc = dlsym(h, "cudaHostAlloc");
    *(void **)&lib->rt.FreeHost = dlsym(h, "cudaFreeHost");
    *(void **)&lib->rt.GetLastError = dlsym(h, "cudaGetLastError");
    lib->rt.can_stage = lib->rt.PointerGetAttributes != NULL;
  } else {
    /* hipHostMalloc, not the deprecated hipHostAlloc; same signatures and
     * hipMemcpyKind numbers as CUDA's */
    *(void **)&lib->rt.HipPointerGetAttributes = dlsym(h, "hipPointerGetAttributes");
    *(void **)&lib->rt.MemcpyAsync = dlsym(h, "hipMemcpyAsync");
    *(void **)&lib->rt.HostAlloc = dlsym(h, "hipHostMalloc");
    *(void **)&lib->rt.FreeHost = dlsym(h, "hipHostFree");
    *(void **)&lib->rt.GetLastError = dlsym(h, "hipGetLastError");
    cudaError_t (*get_version)(int *);
    *(void **)&get_version = dlsym(h, "hipRuntimeGetVersion");
    if (!get_version || get_version(&lib->rt.hip_version) != cudaSuccess)
      lib->rt.hip_version = FTC__HIP_VERSION_6; /* libamdhip64.so.6 or later by name */
    lib->rt.can_stage = lib->rt.HipPointerGetAttributes != NULL;
  }
  if (!lib->rt.MemcpyAsync || !lib->rt.HostAlloc || !lib->rt.FreeHost || !lib->rt.GetLastError)
    lib->rt.can_stage = 0;
  if (lib->rt.GetDeviceCount(&lib->info.devices) != cudaSuccess) lib->info.devices = 0;
  return FTC_OK;
}

static void caps_names(unsigned int caps, char *buf, size_t len) {
  static const char *names[] = {"nonblocking", "split", "shrink", "revoke", "grow"};
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < 5; i++)
    if (caps & (1u << i)) {
      int n = snprintf(buf + o, len - o, "%s%s", o ? "," : "", names[i]);
      if (n < 0 || (size_t)n >= len - o) break;
      o += (size_t)n;
    }
  if (!o) snprintf(buf, len, "none");
}

void ftc__nccl_describe(const ftc__nccl_lib_t *lib, char *buf, size_t len) {
  char caps[96];
  caps_names(lib->info.caps, caps, sizeof caps);
  snprintf(buf, len, "%s %d.%d.%d (%s) path %s caps %s", lib->info.rccl ? "RCCL" : "NCCL",
           lib->info.major, lib->info.minor, lib->info.patch, lib->info.library,
           ftc__nccl_path_name(lib->info.path), caps);
}

/* NCCL's own sockets (its bootstrap; its data without InfiniBand) follow
 * NCCL_SOCKET_FAMILY (AF_INET or AF_INET6) and NCCL_SOCKET_IFNAME (the same
 * syntax as FTCOMM_SOCKET_IFNAME), which NCCL reads at its first unique id
 * or init. Before that, ftcomm's FTCOMM_SOCKET_FAMILY (ipv4, ipv6; auto sets
 * nothing) and FTCOMM_SOCKET_IFNAME fill them in where the user left them
 * unset; a user's NCCL_* value always wins. Writes what it set into buf. */
ftc_status_t ftc__nccl_socket_env(char *buf, size_t len) {
  int family = AF_UNSPEC;
  buf[0] = '\0';
  ftc_status_t st = ftc__addr_family_parse("FTCOMM_SOCKET_FAMILY",
                                           ftc__param_str(FTC_P_SOCKET_FAMILY), &family);
  if (st != FTC_OK) return st;
  const char *ifname = ftc__param_str(FTC_P_SOCKET_IFNAME);
  const char *fam = family == AF_INET ? "AF_INET" : family == AF_INET6 ? "AF_INET6" : NULL;
  struct {
    const char *name, *value;
  } t[] = {{"NCCL_SOCKET_FAMILY", fam}, {"NCCL_SOCKET_IFNAME", ifname && *ifname ? ifname : NULL}};
  size_t o = 0;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    const char *have = getenv(t[i].name);
    if (!t[i].value || (have && *have)) continue;
    if (setenv(t[i].name, t[i].value, 1) != 0)
      return ftc__error(FTC_ERR_SYSTEM, "could not set %s=%s for NCCL", t[i].name, t[i].value);
    int n = snprintf(buf + o, len - o, "%s%s=%s", o ? " " : "", t[i].name, t[i].value);
    if (n > 0 && (size_t)n < len - o) o += (size_t)n;
  }
  return FTC_OK;
}

ftc_status_t ftc__nccl_lib_open(const char *nccl_path, const char *runtime_path,
                                ftc__nccl_lib_t **out) {
  ftc_status_t st = FTC_OK;
  *out = NULL;
  char sockenv[256];
  st = ftc__nccl_socket_env(sockenv, sizeof sockenv);
  if (st != FTC_OK) return st;
  /* once: a later call finds them set */
  if (sockenv[0])
    FTC_INFO(FTC_SUB_NCCL, "set %s for NCCL's own sockets (from FTCOMM_SOCKET_FAMILY/IFNAME)",
             sockenv);
  ftc__nccl_lib_t *lib = ftc__calloc(1, sizeof *lib);
  if (!lib) return ftc__error(FTC_ERR_NO_MEMORY, "out of memory loading NCCL");
  const char *env = nccl_path ? nccl_path : ftc__param_str(FTC_P_NCCL_LIBRARY);
  const char *defaults[] = {"libnccl.so.2", "libnccl.so", "librccl.so.1", "librccl.so"};
  char tried[512], err[512] = "";
  if (env && *env)
    lib->nccl_handle = open_first(&env, 1, lib->info.library, sizeof lib->info.library, tried,
                                  sizeof tried, err, sizeof err);
  else
    lib->nccl_handle = open_first(defaults, 4, lib->info.library, sizeof lib->info.library,
                                  tried, sizeof tried, err, sizeof err);
  if (!lib->nccl_handle) {
    st = ftc__error(FTC_ERR_LIBRARY_NOT_FOUND,
                    "no NCCL or RCCL library: looked for %s (set FTCOMM_NCCL_LIBRARY to its "
                    "path): %s", tried, err);
    goto out_free;
  }
  void *h = lib->nccl_handle;
  const char *base = strrchr(lib->info.library, '/');
  base = base ? base + 1 : lib->info.library;
  lib->info.rccl = strstr(base, "rccl") != NULL || dlsym(h, "rcclGetVersion") != NULL;

  SYM(h, lib->n, GetVersion, "ncclGetVersion");
  SYM(h, lib->n, GetUniqueId, "ncclGetUniqueId");
  SYM(h, lib->n, CommInitRankConfig, "ncclCommInitRankConfig");
  SYM(h, lib->n, CommGetAsyncError, "ncclCommGetAsyncError");
  SYM(h, lib->n, CommAbort, "ncclCommAbort");
  SYM(h, lib->n, CommFinalize, "ncclCommFinalize");
  SYM(h, lib->n, CommDestroy, "ncclCommDestroy");
  SYM(h, lib->n, CommCount, "ncclCommCount");
  SYM(h, lib->n, CommUserRank, "ncclCommUserRank");
  SYM(h, lib->n, GetErrorString, "ncclGetErrorString");
  SYM(h, lib->n, GetLastError, "ncclGetLastError");
  SYM(h, lib->n, AllReduce, "ncclAllReduce");
  SYM(h, lib->n, Broadcast, "ncclBroadcast");
  SYM(h, lib->n, Reduce, "ncclReduce");
  SYM(h, lib->n, AllGather, "ncclAllGather");
  SYM(h, lib->n, ReduceScatter, "ncclReduceScatter");
  SYM(h, lib->n, Send, "ncclSend");
  SYM(h, lib->n, Recv, "ncclRecv");
  SYM(h, lib->n, GroupStart, "ncclGroupStart");
  SYM(h, lib->n, GroupEnd, "ncclGroupEnd");
  SYM(h, lib->n, CommSplit, "ncclCommSplit");
  SYM(h, lib->n, CommShrink, "ncclCommShrink");
  SYM(h, lib->n, CommRevoke, "ncclCommRevoke");
  SYM(h, lib->n, CommGetUniqueId, "ncclCommGetUniqueId");
  SYM(h, lib->n, CommGrow, "ncclCommGrow");
  if (!lib->n.GetVersion) {
    st = ftc__error(FTC_ERR_LIBRARY_NOT_FOUND, "%s has no ncclGetVersion: not an NCCL library",
                    lib->info.library);
    goto out_close;
  }
  if (lib->n.GetVersion(&lib->info.version) != ncclSuccess) {
    st = ftc__error(FTC_ERR_BACKEND, "ncclGetVersion failed in %s", lib->info.library);
    goto out_close;
  }
  int v = lib->info.version;
  if (v >= 10000) {
    lib->info.major = v / 10000, lib->info.minor = v / 100 % 100, lib->info.patch = v % 100;
  } else {
    lib->info.major = v / 1000, lib->info.minor = v / 100 % 10, lib->info.patch = v % 100;
  }
  void *required[] = {lib->n.GetUniqueId, lib->n.CommInitRankConfig, lib->n.CommGetAsyncError,
                      lib->n.CommAbort, lib->n.CommFinalize, lib->n.CommDestroy,
                      lib->n.CommCount, lib->n.GetErrorString, lib->n.AllReduce,
                      lib->n.Broadcast, lib->n.Reduce, lib->n.AllGather,
                      lib->n.ReduceScatter, lib->n.Send, lib->n.Recv, lib->n.GroupStart,
                      lib->n.GroupEnd};
  int have_all = 1;
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
    have_all &= required[i] != NULL;
  if (v < V_NONBLOCKING || !have_all) {
    st = ftc__error(FTC_ERR_NOT_SUPPORTED,
                    "%s is %s %d.%d.%d: ftcomm needs 2.14 or later (nonblocking communicators "
                    "with ncclCommGetAsyncError and ncclCommFinalize)",
                    lib->info.library, lib->info.rccl ? "RCCL" : "NCCL", lib->info.major,
                    lib->info.minor, lib->info.patch);
    goto out_close;
  }
  lib->info.caps = ftc__nccl_caps_for(v, lib->info.rccl, lib->n.CommSplit != NULL,
                                      lib->n.CommShrink != NULL, lib->n.CommRevoke != NULL,
                                      lib->n.CommGetUniqueId && lib->n.CommGrow);
  lib->info.path = ftc__nccl_path_for(lib->info.caps, ftc__param_str(FTC_P_NCCL_RECOVERY));
  FTC_CHECK_GOTO(load_runtime(lib, runtime_path), st, out_close);
  int64_t spin_us = 5000;
  FTC_CHECK_GOTO(ftc__param_int(FTC_P_NCCL_SPIN_US, &spin_us), st, out_close);
  lib->spin_ns = spin_us * 1000;

  static int logged;
  if (!__atomic_exchange_n(&logged, 1, __ATOMIC_ACQ_REL)) {
    char d[512];
    ftc__nccl_describe(lib, d, sizeof d);
    FTC_INFO(FTC_SUB_NCCL, "%s; runtime %s, %d device(s)", d, lib->info.runtime,
             lib->info.devices);
  }
  *out = lib;
  return FTC_OK;

out_close:
  if (lib->rt_handle) dlclose(lib->rt_handle);
  dlclose(lib->nccl_handle);
out_free:
  ftc__free(lib);
  return st;
}

void ftc__nccl_lib_close(ftc__nccl_lib_t *lib) {
  if (!lib) return;
  /* The libraries stay mapped: NCCL keeps proxy threads past its last
   * communicator, and unmapping their code under them would crash. */
  ftc__free(lib);
}

const ftc__nccl_info_t *ftc__nccl_lib_info(const ftc__nccl_lib_t *lib) { return &lib->info; }
