/*
 * nccl-double.c - TEST DOUBLE of the NCCL API subset ftcomm's NCCL backend
 * uses, for CPU-only tests. Built once per emulated version as
 * libnccl_double_<ver>.so (tests/nccl/module.mk); never shipped.
 *
 * It reports DOUBLE_VERSION (an NCCL_VERSION code given with -D) from
 * ncclGetVersion and defines only the symbols that version of NCCL has:
 * ncclCommShrink from 2.27, ncclCommRevoke from 2.28.7, ncclCommGetUniqueId
 * and ncclCommGrow from 2.29.2.
 *
 * Ranks are processes (or threads). A unique id names a rendezvous: every
 * rank listens on 127.0.0.1, writes its port to <dir>/ftcdbl-<token>-<rank>
 * (dir: NCCL_DOUBLE_DIR, default /tmp) and connects to every lower rank, so
 * a communicator is a full mesh of TCP sockets. Collectives run "on the
 * stream" through cudaLaunchHostFunc (the CUDA double's stream thread) on
 * host memory: each rank sends its contribution to the ranks that need it
 * and reduces locally. A peer that dies shows as a broken socket:
 * ncclRemoteError from ncclCommGetAsyncError, as in NCCL.
 *
 * Switches (environment, read at each call):
 *   NCCL_DOUBLE_HANG_AT=k         the k-th collective of a communicator never
 *                                 completes (until abort or revoke)
 *   NCCL_DOUBLE_HANG_INIT=1       init, shrink, grow and split never complete
 *   NCCL_DOUBLE_FAIL_AT=k         the k-th collective fails asynchronously with
 *                                 NCCL_DOUBLE_FAIL_CODE (default ncclSystemError)
 *   NCCL_DOUBLE_INPROGRESS_MS=ms  communicator creation stays ncclInProgress at
 *                                 least this long
 *   NCCL_DOUBLE_ENQUEUE_INPROGRESS_MS=ms  collectives return ncclInProgress and
 *                                 the communicator stays in progress this long
 *   NCCL_DOUBLE_COLL_MS=ms        each collective takes at least ms on the stream
 *   NCCL_DOUBLE_ASYNC_READ_MS=ms  ncclCommGetAsyncError, while a collective is in
 *                                 flight, returns the state it read ms earlier (a
 *                                 caller preempted between its reads: what it read
 *                                 may be stale by the time it queries the stream)
 *   NCCL_DOUBLE_DEVICE_ONLY=1     a buffer that is neither cudaMalloc'd nor pinned is
 *                                 refused (ncclInvalidArgument), as a GPU cannot read it
 *   NCCL_DOUBLE_LOG=path          append one line per lifecycle call
 *                                 ("<pid> <call> rank=<r> size=<n> failed=<0|1>";
 *                                 getuniqueid and init add the NCCL_SOCKET_FAMILY
 *                                 and NCCL_SOCKET_IFNAME they saw),
 *                                 and one per collective enqueued
 *                                 ("... enqueue ... seq=<k> t_ns=<monotonic> recv=<buffer>")
 */
#include <arpa/inet.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef DOUBLE_VERSION
#error "DOUBLE_VERSION (an NCCL_VERSION code) must be defined"
#endif

#define EXPORT __attribute__((visibility("default")))
#define MAGIC "FTCDBL1"

typedef struct {
  char magic[8];
  uint64_t token;
  char dir[112];
} uid_t_;
_Static_assert(sizeof(uid_t_) <= sizeof(ncclUniqueId), "uid layout");

struct ncclComm {
  int refs; /* atomic: the user's, each queued op's, the creation thread's */
  uint64_t token;
  char dir[112];
  int rank, nranks;
  int *fd;  /* per peer, -1 for self */
  int async; /* atomic ncclResult_t */
  int aborted, revoked, finalized, failed; /* atomics */
  int busy; /* atomic: ops queued or running */
  int ncoll;
  int64_t ready_at; /* monotonic ns before which the state reads in progress */
  int grow_pending;
  uint64_t grow_token;
  int split_seq;
  char lasterr[256];
  pthread_mutex_t mu;
};

static __thread char g_lasterr[256];

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void ms_sleep(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static long env_int(const char *name, long def) {
  const char *e = getenv(name);
  return e && *e ? strtol(e, NULL, 10) : def;
}

static void dlog(const char *call, const struct ncclComm *c, const char *fmt, ...) {
  const char *path = getenv("NCCL_DOUBLE_LOG");
  if (!path || !*path) return;
  char line[512], extra[256] = "";
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(extra, sizeof extra, fmt, ap);
    va_end(ap);
  }
  int n = snprintf(line, sizeof line, "%d %s rank=%d size=%d failed=%d%s%s\n", (int)getpid(),
                   call, c ? c->rank : -1, c ? c->nranks : -1,
                   c ? __atomic_load_n(&c->failed, __ATOMIC_ACQUIRE) : 0, *extra ? " " : "",
                   extra);
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  if (write(fd, line, (size_t)n) < 0) { /* best effort */ }
  close(fd);
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 33);
}

static uint64_t random_token(void) {
  uint64_t t = 0;
  int fd = open("/dev/urandom", O_RDONLY);
  if (fd >= 0) {
    if (read(fd, &t, sizeof t) != (ssize_t)sizeof t) t = 0;
    close(fd);
  }
  return mix(t, (uint64_t)now_ns() ^ (uint64_t)getpid());
}

static void set_err(struct ncclComm *c, ncclResult_t r, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  snprintf(g_lasterr, sizeof g_lasterr, "%s", buf);
  if (!c) return;
  /* The first error sticks. Its text is written before the error is
   * published: whoever sees the error (acquire) reads a finished text. */
  pthread_mutex_lock(&c->mu);
  int now = __atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
  if (now == ncclSuccess || now == ncclInProgress) {
    snprintf(c->lasterr, sizeof c->lasterr, "%s", buf);
    /* creation may finish (in progress -> success) meanwhile: retry on it */
    while (!__atomic_compare_exchange_n(&c->async, &now, (int)r, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE) &&
           (now == ncclSuccess || now == ncclInProgress)) {
    }
  }
  pthread_mutex_unlock(&c->mu);
}

static struct ncclComm *comm_new(uint64_t token, const char *dir, int rank, int nranks) {
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->fd = malloc((size_t)nranks * sizeof(int));
  if (!c->fd) {
    free(c);
    return NULL;
  }
  for (int i = 0; i < nranks; i++) c->fd[i] = -1;
  c->refs = 1;
  c->token = token;
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  c->rank = rank, c->nranks = nranks;
  c->async = ncclInProgress;
  pthread_mutex_init(&c->mu, NULL);
  return c;
}

static void comm_put(struct ncclComm *c) {
  if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  for (int i = 0; i < c->nranks; i++)
    if (c->fd[i] >= 0) close(c->fd[i]);
  free(c->fd);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static int stopped(struct ncclComm *c) {
  return __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE) ||
         __atomic_load_n(&c->revoked, __ATOMIC_ACQUIRE);
}

/* From any thread (abort, revoke) while creation may still be filling the
 * mesh: the fds are read and written atomically. */
static void shut_all(struct ncclComm *c) {
  for (int i = 0; i < c->nranks; i++) {
    int fd = __atomic_load_n(&c->fd[i], __ATOMIC_ACQUIRE);
    if (fd >= 0) shutdown(fd, SHUT_RDWR);
  }
}

/* --- the mesh -------------------------------------------------------------- */

static int full_io(struct ncclComm *c, int fd, void *buf, size_t n, int out) {
  char *p = buf;
  while (n) {
    struct pollfd pf = {fd, (short)(out ? POLLOUT : POLLIN), 0};
    if (stopped(c)) return -1;
    int r = poll(&pf, 1, 20);
    if (r <= 0) continue;
    ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k == 0) return -2;
    if (k < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return -2;
    }
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* Connect this rank to every other rank of c (same token). 0, or -1 when
 * stopped. */
static int rendezvous(struct ncclComm *c) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 64) < 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &al) < 0) {
    if (lfd >= 0) close(lfd);
    return -3;
  }
  char path[256], tmp[300];
  snprintf(path, sizeof path, "%s/ftcdbl-%016llx-%d", c->dir, (unsigned long long)c->token,
           c->rank);
  snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) {
    close(lfd);
    return -3;
  }
  fprintf(f, "%d\n", ntohs(a.sin_port));
  fclose(f);
  rename(tmp, path);
  int rc = 0;
  for (int j = 0; j < c->rank && rc == 0; j++) {
    char pj[256];
    snprintf(pj, sizeof pj, "%s/ftcdbl-%016llx-%d", c->dir, (unsigned long long)c->token, j);
    int port = -1;
    while (port < 0) {
      if (stopped(c)) { rc = -1; break; }
      FILE *g = fopen(pj, "r");
      if (g) {
        if (fscanf(g, "%d", &port) != 1) port = -1;
        fclose(g);
      }
      if (port < 0) ms_sleep(2);
    }
    if (rc) break;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in b = {0};
    b.sin_family = AF_INET;
    b.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    b.sin_port = htons((uint16_t)port);
    if (fd < 0 || connect(fd, (struct sockaddr *)&b, sizeof b) < 0) {
      if (fd >= 0) close(fd);
      rc = -3;
      break;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint64_t hello[2] = {c->token, (uint64_t)c->rank};
    __atomic_store_n(&c->fd[j], fd, __ATOMIC_RELEASE);
    if (full_io(c, fd, hello, sizeof hello, 1)) rc = -1;
  }
  int need = c->nranks - 1 - c->rank;
  while (rc == 0 && need > 0) {
    struct pollfd pf = {lfd, POLLIN, 0};
    if (stopped(c)) { rc = -1; break; }
    if (poll(&pf, 1, 20) <= 0) continue;
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) continue;
    uint64_t hello[2];
    if (full_io(c, fd, hello, sizeof hello, 0) || hello[0] != c->token ||
        hello[1] <= (uint64_t)c->rank || hello[1] >= (uint64_t)c->nranks ||
        c->fd[hello[1]] >= 0) {
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    __atomic_store_n(&c->fd[hello[1]], fd, __ATOMIC_RELEASE);
    need--;
  }
  close(lfd);
  return rc;
}

/* Creation: rendezvous, then the in-progress window, then success. */
typedef struct {
  struct ncclComm *c;
  struct ncclComm *parent; /* grow: the existing communicator (ref held) */
  int grow_root;           /* grow: 1 on the rank that made the id */
} create_job_t;

static void finish_create(struct ncclComm *c, int rc) {
  if (rc == -1) {
    set_err(c, ncclInvalidUsage, "communicator creation aborted");
    return;
  }
  if (rc) {
    set_err(c, ncclSystemError, "rendezvous failed (socket or file in %s)", c->dir);
    return;
  }
  while (now_ns() < c->ready_at && !stopped(c)) ms_sleep(1);
  int expect = ncclInProgress;
  __atomic_compare_exchange_n(&c->async, &expect, ncclSuccess, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
}

static void *create_main(void *arg) {
  create_job_t *j = arg;
  struct ncclComm *c = j->c;
  int rc = 0;
  if (env_int("NCCL_DOUBLE_HANG_INIT", 0)) {
    while (!stopped(c)) ms_sleep(2);
    rc = -1;
  }
  if (!rc && j->parent) {
    /* Grow: the root hands the new token to the existing ranks over the
     * parent's mesh; the others take it from whoever sends it. */
    struct ncclComm *p = j->parent;
    if (j->grow_root) {
      for (int k = 0; k < p->nranks && !rc; k++)
        if (p->fd[k] >= 0 && full_io(p, p->fd[k], &c->token, 8, 1)) rc = -2;
    } else {
      uint64_t t = 0;
      int got = 0;
      while (!got && !rc) {
        if (stopped(c)) { rc = -1; break; }
        struct pollfd pf[64];
        int n = 0, who[64];
        for (int k = 0; k < p->nranks && n < 64; k++)
          if (p->fd[k] >= 0) pf[n] = (struct pollfd){p->fd[k], POLLIN, 0}, who[n++] = k;
        if (poll(pf, (nfds_t)n, 20) <= 0) continue;
        for (int k = 0; k < n && !got; k++)
          if (pf[k].revents) {
            if (full_io(p, p->fd[who[k]], &t, 8, 0)) rc = -2;
            else got = 1;
          }
      }
      c->token = t;
    }
    comm_put(p);
  }
  if (!rc) rc = rendezvous(c);
  finish_create(c, rc);
  comm_put(c);
  free(j);
  return NULL;
}

static ncclResult_t start_create(struct ncclComm *c, ncclConfig_t *config,
                                 struct ncclComm *parent, int grow_root) {
  int blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking;
  c->ready_at = now_ns() + env_int("NCCL_DOUBLE_INPROGRESS_MS", 0) * 1000000LL;
  create_job_t *j = calloc(1, sizeof *j);
  if (!j) return ncclSystemError;
  j->c = c, j->parent = parent, j->grow_root = grow_root;
  __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
  if (parent) __atomic_add_fetch(&parent->refs, 1, __ATOMIC_ACQ_REL);
  pthread_t t;
  if (pthread_create(&t, NULL, create_main, j) != 0) {
    comm_put(c);
    if (parent) comm_put(parent);
    free(j);
    return ncclSystemError;
  }
  pthread_setname_np(t, "nccl-double-init");
  if (!blocking) {
    pthread_detach(t);
    return ncclInProgress;
  }
  pthread_join(t, NULL);
  return (ncclResult_t)__atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
}

static ncclResult_t check_config(ncclConfig_t *config) {
  if (config && config->magic != NCCL_API_MAGIC) {
    snprintf(g_lasterr, sizeof g_lasterr, "config not initialized with NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* --- API: versions, ids, lifecycle ---------------------------------------- */

EXPORT ncclResult_t ncclGetVersion(int *v) {
  *v = DOUBLE_VERSION;
  return ncclSuccess;
}

static void make_uid(ncclUniqueId *id, uint64_t token) {
  uid_t_ u;
  memset(&u, 0, sizeof u);
  memcpy(u.magic, MAGIC, sizeof MAGIC);
  u.token = token;
  const char *d = getenv("NCCL_DOUBLE_DIR");
  snprintf(u.dir, sizeof u.dir, "%s", d && *d ? d : "/tmp");
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &u, sizeof u);
}

static int read_uid(const ncclUniqueId *id, uid_t_ *u) {
  memcpy(u, id->internal, sizeof *u);
  return memcmp(u->magic, MAGIC, sizeof MAGIC) == 0 ? 0 : -1;
}

/* What NCCL's bootstrap would read at this call: its socket settings. */
static const char *env_or_unset(const char *name) {
  const char *e = getenv(name);
  return e && *e ? e : "(unset)";
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  make_uid(id, random_token());
  dlog("getuniqueid", NULL, "socket_family=%s socket_ifname=%s",
       env_or_unset("NCCL_SOCKET_FAMILY"), env_or_unset("NCCL_SOCKET_IFNAME"));
  return ncclSuccess;
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank,
                                           ncclConfig_t *config) {
  uid_t_ u;
  *out = NULL;
  if (check_config(config) != ncclSuccess) return ncclInvalidArgument;
  if (read_uid(&id, &u) || nranks < 1 || rank < 0 || rank >= nranks) {
    snprintf(g_lasterr, sizeof g_lasterr, "bad unique id, rank %d or size %d", rank, nranks);
    return ncclInvalidArgument;
  }
  struct ncclComm *c = comm_new(u.token, u.dir, rank, nranks);
  if (!c) return ncclSystemError;
  *out = c;
  dlog("init", c, "socket_family=%s socket_ifname=%s", env_or_unset("NCCL_SOCKET_FAMILY"),
       env_or_unset("NCCL_SOCKET_IFNAME"));
  return start_create(c, config, NULL, 0);
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(out, nranks, id, rank, NULL);
}

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
  if (!c) return ncclInvalidArgument;
  int a = __atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
  int busy = __atomic_load_n(&c->busy, __ATOMIC_ACQUIRE);
  if (a == ncclSuccess && now_ns() < c->ready_at) a = ncclInProgress;
  if (a == ncclSuccess && busy > 0 &&
      (__atomic_load_n(&c->revoked, __ATOMIC_ACQUIRE) ||
       __atomic_load_n(&c->finalized, __ATOMIC_ACQUIRE)))
    a = ncclInProgress;
  long stale_ms = env_int("NCCL_DOUBLE_ASYNC_READ_MS", 0);
  if (stale_ms > 0 && busy > 0) ms_sleep(stale_ms);
  *err = (ncclResult_t)a;
  return ncclSuccess;
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (!c) return ncclSuccess;
  dlog("abort", c, NULL);
  __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
  shut_all(c);
  comm_put(c);
  return ncclSuccess;
}

EXPORT ncclResult_t ncclCommFinalize(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  dlog("finalize", c, NULL);
  __atomic_store_n(&c->finalized, 1, __ATOMIC_RELEASE);
  return ncclInProgress;
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return ncclSuccess;
  dlog("destroy", c, "busy=%d", __atomic_load_n(&c->busy, __ATOMIC_ACQUIRE));
  __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
  shut_all(c);
  comm_put(c);
  return ncclSuccess;
}

EXPORT ncclResult_t ncclCommCount(const ncclComm_t c, int *n) {
  *n = c->nranks;
  return ncclSuccess;
}
EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r) {
  *r = c->rank;
  return ncclSuccess;
}
EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *d) {
  (void)c;
  *d = 0;
  return ncclSuccess;
}

EXPORT const char *ncclGetErrorString(ncclResult_t r) {
  static const char *s[] = {"no error", "unhandled cuda error", "unhandled system error",
                            "internal error", "invalid argument", "invalid usage",
                            "remote process exited or there was a network error",
                            "NCCL operation in progress", "timeout"};
  return (unsigned)r < sizeof s / sizeof s[0] ? s[r] : "unknown result code";
}

EXPORT const char *ncclGetLastError(ncclComm_t c) { return c ? c->lasterr : g_lasterr; }

EXPORT ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out,
                                  ncclConfig_t *config) {
  *out = NULL;
  if (check_config(config) != ncclSuccess) return ncclInvalidArgument;
  /* Exchange (color, key) with every rank over the mesh. */
  int32_t mine[2] = {color, key}, *all = calloc((size_t)c->nranks * 2, sizeof(int32_t));
  if (!all) return ncclSystemError;
  all[2 * c->rank] = color, all[2 * c->rank + 1] = key;
  int rc = 0;
  for (int j = 0; j < c->nranks && !rc; j++)
    if (j != c->rank) {
      int lo = c->rank < j;
      /* lower rank sends first, so the pair never waits on each other */
      if (lo) rc = full_io(c, c->fd[j], mine, sizeof mine, 1) || full_io(c, c->fd[j], all + 2 * j, 8, 0);
      else rc = full_io(c, c->fd[j], all + 2 * j, 8, 0) || full_io(c, c->fd[j], mine, sizeof mine, 1);
    }
  if (rc) {
    free(all);
    set_err(c, ncclRemoteError, "split: a peer is gone");
    return ncclRemoteError;
  }
  int seq = c->split_seq++;
  if (color == NCCL_SPLIT_NOCOLOR) {
    free(all);
    return ncclSuccess;
  }
  int n = 0, me = 0;
  for (int j = 0; j < c->nranks; j++)
    if (all[2 * j] == color) {
      n++;
      if (all[2 * j + 1] < key || (all[2 * j + 1] == key && j < c->rank)) me++;
    }
  free(all);
  struct ncclComm *nc =
      comm_new(mix(mix(c->token, 0x5b117ULL + (uint64_t)seq), (uint64_t)color), c->dir, me, n);
  if (!nc) return ncclSystemError;
  *out = nc;
  dlog("split", nc, "parent_rank=%d", c->rank);
  return start_create(nc, config, NULL, 0);
}

#if DOUBLE_VERSION >= 22700
static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

EXPORT ncclResult_t ncclCommShrink(ncclComm_t c, int *excl, int n, ncclComm_t *out,
                                   ncclConfig_t *config, int flags) {
  *out = NULL;
  if (check_config(config) != ncclSuccess) return ncclInvalidArgument;
  /* As NCCL's ncclCommShrink: a non-empty list, sorted in place (the
   * caller's array comes back sorted), the caller's rank not in it. */
  if (!excl || n <= 0) {
    snprintf(g_lasterr, sizeof g_lasterr, "shrink: excludeRanksList empty or NULL");
    return ncclInvalidArgument;
  }
  char given[128] = "", sorted[128] = "";
  for (int i = 0, k = 0; i < n && k < (int)sizeof given - 12; i++)
    k += snprintf(given + k, sizeof given - (size_t)k, "%s%d", i ? "," : "", excl[i]);
  qsort(excl, (size_t)n, sizeof *excl, cmp_int);
  for (int i = 0, k = 0; i < n && k < (int)sizeof sorted - 12; i++)
    k += snprintf(sorted + k, sizeof sorted - (size_t)k, "%s%d", i ? "," : "", excl[i]);
  int below = 0;
  uint64_t t = mix(c->token, 0x5412ULL);
  for (int i = 0; i < n; i++) {
    if (excl[i] == c->rank || excl[i] < 0 || excl[i] >= c->nranks) {
      snprintf(g_lasterr, sizeof g_lasterr, "shrink: bad exclusion list");
      return ncclInvalidArgument;
    }
    if (excl[i] < c->rank) below++;
    t = mix(t, (uint64_t)excl[i]);
  }
  if (!(flags & NCCL_SHRINK_ABORT) && !__atomic_load_n(&c->revoked, __ATOMIC_ACQUIRE) &&
      (__atomic_load_n(&c->busy, __ATOMIC_ACQUIRE) > 0 ||
       __atomic_load_n(&c->async, __ATOMIC_ACQUIRE) != ncclSuccess)) {
    snprintf(g_lasterr, sizeof g_lasterr,
             "shrink without NCCL_SHRINK_ABORT on a communicator with in-flight work or an error");
    return ncclInvalidUsage;
  }
  if (flags & NCCL_SHRINK_ABORT) {
    __atomic_store_n(&c->revoked, 1, __ATOMIC_RELEASE);
    shut_all(c);
  }
  struct ncclComm *nc = comm_new(t, c->dir, c->rank - below, c->nranks - n);
  if (!nc) return ncclSystemError;
  *out = nc;
  dlog("shrink", nc, "parent_rank=%d flags=%d excl_given=%s excl_sorted=%s", c->rank, flags,
       given, sorted);
  return start_create(nc, config, NULL, 0);
}
#endif

#if DOUBLE_VERSION >= 22807
EXPORT ncclResult_t ncclCommRevoke(ncclComm_t c, int flags) {
  if (!c || flags != 0) return ncclInvalidArgument;
  dlog("revoke", c, NULL);
  __atomic_store_n(&c->revoked, 1, __ATOMIC_RELEASE);
  shut_all(c);
  return ncclInProgress;
}
#endif

#if DOUBLE_VERSION >= 22902
EXPORT ncclResult_t ncclCommGetUniqueId(ncclComm_t c, ncclUniqueId *id) {
  if (!c) return ncclInvalidArgument;
  if (c->grow_pending) {
    snprintf(g_lasterr, sizeof g_lasterr, "a grow id is already outstanding");
    return ncclInvalidUsage;
  }
  c->grow_pending = 1;
  c->grow_token = random_token();
  make_uid(id, c->grow_token);
  dlog("commgetuniqueid", c, NULL);
  return ncclSuccess;
}

EXPORT ncclResult_t ncclCommGrow(ncclComm_t c, int nranks, const ncclUniqueId *id, int rank,
                                 ncclComm_t *out, ncclConfig_t *config) {
  *out = NULL;
  if (check_config(config) != ncclSuccess) return ncclInvalidArgument;
  struct ncclComm *nc;
  if (c) {
    int root = id != NULL;
    if (rank != -1 || nranks <= c->nranks || (root && !c->grow_pending)) {
      snprintf(g_lasterr, sizeof g_lasterr, "grow: bad arguments for an existing rank");
      return ncclInvalidArgument;
    }
    if (root) {
      uid_t_ u;
      if (read_uid(id, &u) || u.token != c->grow_token) return ncclInvalidArgument;
      c->grow_pending = 0;
    }
    nc = comm_new(root ? c->grow_token : 0, c->dir, c->rank, nranks);
    if (!nc) return ncclSystemError;
    *out = nc;
    dlog("grow", nc, "existing=1 root=%d", root);
    return start_create(nc, config, c, root);
  }
  uid_t_ u;
  if (!id || read_uid(id, &u) || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  nc = comm_new(u.token, u.dir, rank, nranks);
  if (!nc) return ncclSystemError;
  *out = nc;
  dlog("grow", nc, "existing=0");
  return start_create(nc, config, NULL, 0);
}
#endif

/* --- collectives ------------------------------------------------------------ */

static float h2f(uint16_t h) {
  uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
  if (e == 0) {
    float f = (float)m / 16777216.0f; /* subnormal: m * 2^-24 */
    return s ? -f : f;
  }
  if (e == 31) u = s | 0x7f800000u | (m << 13);
  else u = s | ((e + 112) << 23) | (m << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t f2h(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t s = (u >> 16) & 0x8000;
  int e = (int)((u >> 23) & 255) - 112;
  uint32_t m = u & 0x7fffff;
  if (e <= 0) return (uint16_t)s;
  if (e >= 31) return (uint16_t)(s | 0x7c00);
  uint32_t h = s | ((uint32_t)e << 10) | (m >> 13);
  if ((m & 0x1fff) > 0x1000 || ((m & 0x1fff) == 0x1000 && (h & 1))) h++;
  return (uint16_t)h;
}

static size_t tsize(ncclDataType_t t) {
  switch (t) {
  case ncclInt8: case ncclUint8: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  default: return 0;
  }
}

static double load(const void *p, size_t i, ncclDataType_t t) {
  switch (t) {
  case ncclInt8: return ((const int8_t *)p)[i];
  case ncclUint8: return ((const uint8_t *)p)[i];
  case ncclInt32: return ((const int32_t *)p)[i];
  case ncclUint32: return ((const uint32_t *)p)[i];
  case ncclInt64: return (double)((const int64_t *)p)[i];
  case ncclUint64: return (double)((const uint64_t *)p)[i];
  case ncclFloat16: return h2f(((const uint16_t *)p)[i]);
  case ncclBfloat16: {
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  case ncclFloat32: return ((const float *)p)[i];
  case ncclFloat64: return ((const double *)p)[i];
  default: return 0;
  }
}

static void store(void *p, size_t i, ncclDataType_t t, double v) {
  switch (t) {
  case ncclInt8: ((int8_t *)p)[i] = (int8_t)v; break;
  case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
  case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)v; break;
  case ncclInt64: ((int64_t *)p)[i] = (int64_t)v; break;
  case ncclUint64: ((uint64_t *)p)[i] = (uint64_t)v; break;
  case ncclFloat16: ((uint16_t *)p)[i] = f2h((float)v); break;
  case ncclBfloat16: {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
    break;
  }
  case ncclFloat32: ((float *)p)[i] = (float)v; break;
  case ncclFloat64: ((double *)p)[i] = v; break;
  default: break;
  }
}

/* out[i] = op over blocks[0..n-1][i] in rank order. */
static void reduce(void *out, void *const *blocks, int n, size_t count, ncclDataType_t t,
                   ncclRedOp_t op) {
  int is_int = t != ncclFloat16 && t != ncclBfloat16 && t != ncclFloat32 && t != ncclFloat64;
  for (size_t i = 0; i < count; i++) {
    double acc = load(blocks[0], i, t);
    for (int k = 1; k < n; k++) {
      double v = load(blocks[k], i, t);
      switch (op) {
      case ncclSum: case ncclAvg: acc += v; break;
      case ncclProd: acc *= v; break;
      case ncclMax: acc = v > acc ? v : acc; break;
      case ncclMin: acc = v < acc ? v : acc; break;
      default: break;
      }
    }
    if (op == ncclAvg) acc = is_int ? (double)(int64_t)(acc / n) : acc / n;
    store(out, i, t, acc);
  }
}

typedef enum { K_ALLREDUCE, K_BCAST, K_REDUCE, K_ALLGATHER, K_REDSCAT, K_P2P } kind_t;

typedef struct p2p {
  int peer, send;
  void *buf;
  size_t bytes;
} p2p_t;

typedef struct op {
  struct ncclComm *c;
  kind_t kind;
  const void *send;
  void *recv;
  size_t count;
  ncclDataType_t t;
  ncclRedOp_t rop;
  int root;
  int hang, fail, seq;
  long delay_ms;
  p2p_t p2p[128];
  int np2p;
} op_t;

/* Move sbytes[j] from sbuf[j] to each peer j and rbytes[j] into rbuf[j],
 * all peers at once. 0, -1 stopped, -2 a peer is gone. */
static int exchange(struct ncclComm *c, const void *const *sbuf, const size_t *sbytes,
                    void *const *rbuf, const size_t *rbytes) {
  int n = c->nranks, rc = 0;
  size_t *so = calloc((size_t)n * 2, sizeof *so), *ro = so + n;
  if (!so) return -1;
  for (;;) {
    if (stopped(c)) { rc = -1; break; }
    struct pollfd pf[128];
    int who[128], np = 0;
    for (int j = 0; j < n && np < 128; j++) {
      if (j == c->rank) continue;
      short ev = 0;
      if (so[j] < sbytes[j]) ev |= POLLOUT;
      if (ro[j] < rbytes[j]) ev |= POLLIN;
      if (!ev) continue;
      pf[np] = (struct pollfd){c->fd[j], ev, 0};
      who[np++] = j;
    }
    if (!np) break;
    if (poll(pf, (nfds_t)np, 20) <= 0) continue;
    for (int k = 0; k < np && !rc; k++) {
      int j = who[k];
      if (pf[k].revents & (POLLERR | POLLHUP | POLLNVAL) && !(pf[k].revents & POLLIN)) {
        rc = stopped(c) ? -1 : -2 - j;
        break;
      }
      if ((pf[k].revents & POLLOUT) && so[j] < sbytes[j]) {
        ssize_t w = send(c->fd[j], (const char *)sbuf[j] + so[j], sbytes[j] - so[j],
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN && errno != EINTR) rc = stopped(c) ? -1 : -2 - j;
        if (w > 0) so[j] += (size_t)w;
      }
      if (!rc && (pf[k].revents & POLLIN) && ro[j] < rbytes[j]) {
        ssize_t r = recv(c->fd[j], (char *)rbuf[j] + ro[j], rbytes[j] - ro[j], MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
          rc = stopped(c) ? -1 : -2 - j;
        if (r > 0) ro[j] += (size_t)r;
      }
    }
    if (rc) break;
  }
  free(so);
  return rc;
}

static void run_op(void *arg) {
  op_t *o = arg;
  struct ncclComm *c = o->c;
  int n = c->nranks, me = c->rank;
  size_t es = tsize(o->t), bytes = o->count * es;
  const void **sb = calloc((size_t)n, sizeof *sb);
  void **rb = calloc((size_t)n, sizeof *rb);
  size_t *sn = calloc((size_t)n, sizeof *sn), *rn = calloc((size_t)n, sizeof *rn);
  char *tmp = NULL;
  int rc = 0;
  if (!sb || !rb || !sn || !rn) {
    set_err(c, ncclSystemError, "out of memory");
    goto out;
  }
  int async = __atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
  if (stopped(c) || async == ncclInProgress) goto out;
  if (async != ncclSuccess || o->hang) {
    /* As in NCCL, a collective behind a fatal error (a peer gone) never
     * completes: it ends with the abort the error leads to. Skipped as
     * done, it looked like a success to a caller that had read the async
     * error just before it was set (test_nccl_flows' kill_shrink_grow, once
     * under load: "allreduce with a dead peer gave success"). */
    while (!stopped(c)) ms_sleep(1);
    goto out;
  }
  for (int64_t until = now_ns() + o->delay_ms * 1000000LL; now_ns() < until && !stopped(c);)
    ms_sleep(1);
  if (o->fail) {
    set_err(c, (ncclResult_t)env_int("NCCL_DOUBLE_FAIL_CODE", ncclSystemError),
            "injected failure at collective %d (NCCL_DOUBLE_FAIL_AT)", o->seq);
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELEASE);
    goto out;
  }
  switch (o->kind) {
  case K_ALLREDUCE:
  case K_REDUCE:
  case K_REDSCAT: {
    size_t blk = bytes; /* each rank's block: its contribution, or the part it receives */
    tmp = malloc(blk * (size_t)n);
    if (!tmp) { set_err(c, ncclSystemError, "out of memory"); goto out; }
    for (int j = 0; j < n; j++) {
      if (j == me) continue;
      if (o->kind == K_REDSCAT) {
        sb[j] = (const char *)o->send + (size_t)j * blk, sn[j] = blk;
        rb[j] = tmp + (size_t)j * blk, rn[j] = blk;
      } else {
        int to_j = o->kind == K_ALLREDUCE || j == o->root;
        int from_j = o->kind == K_ALLREDUCE || me == o->root;
        sb[j] = o->send, sn[j] = to_j ? bytes : 0;
        rb[j] = tmp + (size_t)j * bytes, rn[j] = from_j ? bytes : 0;
      }
    }
    if (o->kind == K_REDSCAT) memcpy(tmp + (size_t)me * blk, (const char *)o->send + (size_t)me * blk, blk);
    else memcpy(tmp + (size_t)me * bytes, o->send, bytes);
    rc = exchange(c, sb, sn, rb, rn);
    if (rc) break;
    if (o->kind == K_REDUCE && me != o->root) break;
    void *blocks[128];
    for (int j = 0; j < n && j < 128; j++) blocks[j] = tmp + (size_t)j * blk;
    reduce(o->recv, blocks, n, o->count, o->t, o->rop);
    break;
  }
  case K_BCAST:
    for (int j = 0; j < n; j++) {
      if (j == me) continue;
      if (me == o->root) sb[j] = o->send, sn[j] = bytes;
      if (j == o->root) rb[j] = o->recv, rn[j] = bytes;
    }
    if (me == o->root && o->recv != o->send) memmove(o->recv, o->send, bytes);
    rc = exchange(c, sb, sn, rb, rn);
    break;
  case K_ALLGATHER:
    memmove((char *)o->recv + (size_t)me * bytes, o->send, bytes);
    for (int j = 0; j < n; j++) {
      if (j == me) continue;
      sb[j] = (char *)o->recv + (size_t)me * bytes, sn[j] = bytes;
      rb[j] = (char *)o->recv + (size_t)j * bytes, rn[j] = bytes;
    }
    rc = exchange(c, sb, sn, rb, rn);
    break;
  case K_P2P:
    for (int k = 0; k < o->np2p; k++) {
      p2p_t *p = &o->p2p[k];
      if (p->peer == me) continue;
      if (p->send) sb[p->peer] = p->buf, sn[p->peer] = p->bytes;
      else rb[p->peer] = p->buf, rn[p->peer] = p->bytes;
    }
    for (int k = 0; k < o->np2p; k++) /* to self: a copy */
      if (o->p2p[k].peer == me && !o->p2p[k].send)
        for (int m = 0; m < o->np2p; m++)
          if (o->p2p[m].peer == me && o->p2p[m].send)
            memmove(o->p2p[k].buf, o->p2p[m].buf, o->p2p[k].bytes);
    rc = exchange(c, sb, sn, rb, rn);
    break;
  }
  if (rc <= -2) {
    __atomic_store_n(&c->failed, 1, __ATOMIC_RELEASE);
    set_err(c, ncclRemoteError, "rank %d: connection to peer %d broke (peer process gone)", me,
            -2 - rc);
  }
out:
  free(tmp);
  free(sb), free(rb), free(sn), free(rn);
  __atomic_sub_fetch(&c->busy, 1, __ATOMIC_ACQ_REL);
  comm_put(c);
  free(o);
}

static ncclResult_t launch(op_t *o, cudaStream_t s) {
  struct ncclComm *c = o->c;
  if (__atomic_load_n(&c->revoked, __ATOMIC_ACQUIRE) || __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) {
    free(o);
    set_err(NULL, ncclInvalidUsage, "communicator revoked or aborted");
    return ncclInvalidUsage;
  }
  o->seq = ++c->ncoll;
  o->hang = env_int("NCCL_DOUBLE_HANG_AT", 0) == o->seq;
  o->fail = env_int("NCCL_DOUBLE_FAIL_AT", 0) == o->seq;
  o->delay_ms = env_int("NCCL_DOUBLE_COLL_MS", 0);
  dlog("enqueue", c, "seq=%d t_ns=%lld recv=%p", o->seq, (long long)now_ns(), o->recv);
  __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
  __atomic_add_fetch(&c->busy, 1, __ATOMIC_ACQ_REL);
  if (cudaLaunchHostFunc(s, run_op, o) != cudaSuccess) {
    __atomic_sub_fetch(&c->busy, 1, __ATOMIC_ACQ_REL);
    comm_put(c);
    free(o);
    return ncclUnhandledCudaError;
  }
  long ms = env_int("NCCL_DOUBLE_ENQUEUE_INPROGRESS_MS", 0);
  if (ms > 0) {
    c->ready_at = now_ns() + ms * 1000000LL;
    return ncclInProgress;
  }
  return ncclSuccess;
}

/* NCCL_DOUBLE_DEVICE_ONLY: 1 when p is memory a GPU could read. */
static int device_ok(const void *p) {
  if (!p || !env_int("NCCL_DOUBLE_DEVICE_ONLY", 0)) return 1;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) return 0;
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeHost;
}

static op_t *op_new(struct ncclComm *c, kind_t k, const void *s, void *r, size_t count,
                    ncclDataType_t t, ncclRedOp_t rop, int root) {
  if (!c || tsize(t) == 0 || (root < 0 || root >= c->nranks)) return NULL;
  if (!device_ok(s) || !device_ok(r)) return NULL; /* "bad argument" */
  op_t *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->c = c, o->kind = k, o->send = s, o->recv = r, o->count = count, o->t = t, o->rop = rop;
  o->root = root;
  return o;
}

#define LAUNCH(mk, s)                                       \
  do {                                                      \
    op_t *o_ = (mk); /* once: it allocates */               \
    if (!o_) {                                              \
      set_err(NULL, ncclInvalidArgument, "bad argument, or a buffer the GPU cannot read");   \
      return ncclInvalidArgument;                           \
    }                                                       \
    return launch(o_, (s));                                 \
  } while (0)

EXPORT ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t t,
                                  ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
  LAUNCH(op_new(c, K_ALLREDUCE, s, r, count, t, op, 0), st);
}
EXPORT ncclResult_t ncclBroadcast(const void *s, void *r, size_t count, ncclDataType_t t, int root,
                                  ncclComm_t c, cudaStream_t st) {
  LAUNCH(op_new(c, K_BCAST, s, r, count, t, ncclSum, root), st);
}
EXPORT ncclResult_t ncclReduce(const void *s, void *r, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t st) {
  LAUNCH(op_new(c, K_REDUCE, s, r, count, t, op, root), st);
}
EXPORT ncclResult_t ncclAllGather(const void *s, void *r, size_t count, ncclDataType_t t,
                                  ncclComm_t c, cudaStream_t st) {
  LAUNCH(op_new(c, K_ALLGATHER, s, r, count, t, ncclSum, 0), st);
}
EXPORT ncclResult_t ncclReduceScatter(const void *s, void *r, size_t count, ncclDataType_t t,
                                      ncclRedOp_t op, ncclComm_t c, cudaStream_t st) {
  LAUNCH(op_new(c, K_REDSCAT, s, r, count, t, op, 0), st);
}

/* Groups: send/recv calls between ncclGroupStart and ncclGroupEnd run as one. */
static __thread int g_depth;
static __thread op_t *g_op;
static __thread cudaStream_t g_stream;

/* (nccl.h declares both with an empty parameter list: no prototype in C.) */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

EXPORT ncclResult_t ncclGroupStart(void) {
  g_depth++;
  return ncclSuccess;
}

EXPORT ncclResult_t ncclGroupEnd(void) {
  if (g_depth <= 0) return ncclInvalidUsage;
  if (--g_depth > 0 || !g_op) return ncclSuccess;
  op_t *o = g_op;
  g_op = NULL;
  return launch(o, g_stream);
}

static ncclResult_t p2p(struct ncclComm *c, int send, void *buf, size_t count, ncclDataType_t t,
                        int peer, cudaStream_t s) {
  if (!c || peer < 0 || peer >= c->nranks || !tsize(t) || !device_ok(buf)) return ncclInvalidArgument;
  op_t *o = g_depth ? g_op : NULL;
  if (!o) {
    o = op_new(c, K_P2P, NULL, NULL, 0, t, ncclSum, 0);
    if (!o) return ncclInvalidArgument;
    if (g_depth) g_op = o, g_stream = s;
  }
  if (o->c != c || o->np2p >= 128) return ncclInvalidUsage;
  for (int k = 0; k < o->np2p; k++)
    if (o->p2p[k].peer == peer && o->p2p[k].send == send) return ncclInvalidUsage;
  o->p2p[o->np2p++] = (p2p_t){peer, send, buf, count * tsize(t)};
  return g_depth ? ncclSuccess : launch(o, s);
}

EXPORT ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer,
                             ncclComm_t c, cudaStream_t s) {
  return p2p(c, 1, (void *)buf, count, t, peer, s);
}
EXPORT ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                             cudaStream_t s) {
  return p2p(c, 0, buf, count, t, peer, s);
}
