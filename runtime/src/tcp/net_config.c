/*
 * net_config.c - the TCP backend's settings (FTCOMM_* read once per
 * communicator, the congestion control tried on a scratch socket) and what
 * it counts of the host: its CPUs and the cgroup's CPU quota, read from
 * /proc and /sys.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ftc_addr.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftc_time.h"
#include "tcp/net_int.h"
#include "tcp/tcp_int.h"

/* One line of a /proc/sys file into out ("?" if unreadable). */
void ftc__net_read_sysctl(const char *path, char *out, size_t len) {
  FILE *f = fopen(path, "re");
  if (!f || !fgets(out, (int)len, f)) snprintf(out, len, "?");
  if (f) fclose(f);
  out[strcspn(out, "\n")] = 0;
}

/* FTCOMM_TCP_CONGESTION: auto, system, or a name the kernel accepts (tried on
 * a scratch socket here, so that a refused one fails ftc_comm_create rather
 * than each connection). */
static ftc_status_t congestion_parse(const char *s, ftc__tcp_cfg_t *cfg) {
  const size_t n = s ? strlen(s) : 0;
  cfg->congestion_name[0] = 0;
  if (!s || strcasecmp(s, "auto") == 0) { /* (keywords in any case, as FTCOMM_BACKEND's) */
    cfg->congestion = FTC__TCP_CC_AUTO;
    return FTC_OK;
  }
  if (strcasecmp(s, "system") == 0) {
    cfg->congestion = FTC__TCP_CC_SYSTEM;
    return FTC_OK;
  }
  char avail[256], allowed[256];
  ftc__net_read_sysctl("/proc/sys/net/ipv4/tcp_available_congestion_control", avail, sizeof(avail));
  ftc__net_read_sysctl("/proc/sys/net/ipv4/tcp_allowed_congestion_control", allowed, sizeof(allowed));
  if (n == 0 || n >= sizeof(cfg->congestion_name) ||
      strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_-") != n)
    return ftc__error(FTC_ERR_CONFIG,
                      "FTCOMM_TCP_CONGESTION=\"%s\" is not a congestion control; use auto, system "
                      "or one of this host's: %s",
                      s, avail);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ftc__error(FTC_ERR_SYSTEM, "socket: %s", strerror(errno));
  int rc = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, s, (socklen_t)n), err = errno;
  close(fd);
  if (rc != 0)
    return ftc__error(FTC_ERR_CONFIG,
                      "FTCOMM_TCP_CONGESTION=%s: the kernel refused it (%s); available: %s; allowed "
                      "without CAP_NET_ADMIN: %s",
                      s, err == ENOENT ? "not available on this host" : strerror(err), avail, allowed);
  memcpy(cfg->congestion_name, s, n + 1);
  cfg->congestion = FTC__TCP_CC_NAMED;
  return FTC_OK;
}

/* The cgroup's CPU quota, read once per process (reading the files costs
 * more than a joiner's admission can spare; and every communicator of the
 * process then counts the same). */
long ftc__tcp_cpu_quota(void) {
  static long quota = -1;
  long q = __atomic_load_n(&quota, __ATOMIC_ACQUIRE);
  if (q < 0) {
    q = ftc__tcp_cgroup_cpus("/sys/fs/cgroup", "/proc/self/cgroup");
    __atomic_store_n(&quota, q, __ATOMIC_RELEASE);
  }
  return q;
}

ftc_status_t ftc__tcp_cfg_from_env(ftc__tcp_cfg_t *cfg) {
  int64_t v;
  ftc_status_t st;
  if ((st = ftc__param_int(FTC_P_SOCKET_BUFFER, &v)) != FTC_OK) return st;
  cfg->socket_buffer = v;
  if ((st = ftc__param_int(FTC_P_CHUNK_BYTES, &v)) != FTC_OK) return st;
  cfg->chunk_bytes = (size_t)v & ~(size_t)63;
  if ((st = ftc__param_int(FTC_P_RING_THRESHOLD, &v)) != FTC_OK) return st;
  cfg->ring_threshold = (size_t)v;
  if ((st = ftc__param_int(FTC_P_HALVING_MAX, &v)) != FTC_OK) return st;
  cfg->halving_max = (size_t)v;
  if ((st = ftc__param_int(FTC_P_SPIN_US, &v)) != FTC_OK) return st;
  cfg->spin_us = (int)v;
  if ((st = ftc__param_int(FTC_P_HOST_CPUS, &v)) != FTC_OK) return st;
  cfg->host_cpus = (long)v;
  cfg->cpu_quota = FTC__TCP_QUOTA_UNREAD; /* read when first counted (ftc__tcp_usable_cpus) */
  if ((st = ftc__param_int(FTC_P_TCP_SOCKETS, &v)) != FTC_OK) return st;
  cfg->sockets = (int)v;
  ftc_algo_t algo;
  if ((st = ftc__algo_parse("FTCOMM_ALLREDUCE_ALGO", ftc__param_str(FTC_P_ALLREDUCE_ALGO), &algo)) != FTC_OK)
    return st;
  cfg->allreduce_algo = (int)algo;
  cfg->ifname = ftc__param_str(FTC_P_SOCKET_IFNAME);
  if ((st = congestion_parse(ftc__param_str(FTC_P_TCP_CONGESTION), cfg)) != FTC_OK) return st;
  return ftc__addr_family_parse("FTCOMM_SOCKET_FAMILY", ftc__param_str(FTC_P_SOCKET_FAMILY),
                                &cfg->family);
}

long ftc__tcp_ncpu(const ftc__tcp_cfg_t *cfg) {
  if (cfg->host_cpus > 0) return cfg->host_cpus;
  if (cfg->os_cpus > 0) return cfg->os_cpus;
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 0;
}

/* Quota / period of one cgroup directory (v2 cpu.max "QUOTA PERIOD" or
 * "max PERIOD"; v1 cpu.cfs_quota_us, -1 for none, and cpu.cfs_period_us),
 * rounded up; 0 for none or unreadable. */
static long cgroup_dir_cpus(const char *dir, int v2) {
  char path[PATH_MAX], a[64] = "", b[64] = "";
  long long q = 0, per = 0;
  FILE *f;
  if (v2) {
    if (snprintf(path, sizeof(path), "%s/cpu.max", dir) >= (int)sizeof(path)) return 0;
    if (!(f = fopen(path, "re"))) return 0;
    int got = fscanf(f, "%63s %63s", a, b);
    fclose(f);
    if (got != 2 || !strcmp(a, "max")) return 0;
  } else {
    if (snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir) >= (int)sizeof(path)) return 0;
    if (!(f = fopen(path, "re"))) return 0;
    int got = fscanf(f, "%63s", a);
    fclose(f);
    if (snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir) >= (int)sizeof(path)) return 0;
    if (got != 1 || !(f = fopen(path, "re"))) return 0;
    got = fscanf(f, "%63s", b);
    fclose(f);
    if (got != 1) return 0;
  }
  char *e1, *e2;
  q = strtoll(a, &e1, 10);
  per = strtoll(b, &e2, 10);
  if (*e1 || *e2 || q <= 0 || per <= 0) return 0;
  long long n = (q + per - 1) / per;
  return n > LONG_MAX ? LONG_MAX : (long)n;
}

long ftc__tcp_cgroup_cpus(const char *root, const char *proc_cgroup) {
  FILE *f = fopen(proc_cgroup, "re");
  if (!f) return 0;
  char line[PATH_MAX + 64];
  long best = 0;
  while (fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = 0;
    /* "ID:CONTROLLERS:PATH": v2's is "0::PATH", v1's cpu controller "N:cpu,cpuacct:PATH" */
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c1 = 0, *c2 = 0;
    const char *ctl = c1 + 1, *cg = c2 + 1;
    int v2 = !strcmp(line, "0") && !*ctl;
    char mnt[64] = "";
    if (!v2) {
      int cpu = 0;
      for (const char *t = ctl; *t;) {
        size_t n = strcspn(t, ",");
        cpu |= n == 3 && !strncmp(t, "cpu", 3);
        t += n + (t[n] == ',');
      }
      if (!cpu) continue;
      snprintf(mnt, sizeof(mnt), "/%.60s", ctl); /* /sys/fs/cgroup/cpu,cpuacct */
    }
    /* Every directory from the process's cgroup up to the mount's root: a
     * parent's quota bounds its children, and in a container the mount's
     * root is its own cgroup while the path may name the host's. */
    char dir[PATH_MAX];
    for (size_t len = strlen(cg);;) {
      for (int k = 0; k < (v2 ? 1 : 2); k++) {
        const char *m = v2 ? "" : k == 0 ? mnt : "/cpu";
        if (snprintf(dir, sizeof(dir), "%s%s%.*s", root, m, (int)len, cg) >= (int)sizeof(dir))
          continue;
        long n = cgroup_dir_cpus(dir, v2);
        if (n > 0 && (best == 0 || n < best)) best = n;
        if (!v2 && !strcmp(mnt, "/cpu")) break;
      }
      if (len <= 1) break;
      while (len > 0 && cg[len - 1] != '/') len--;
      if (len > 1) len--; /* the parent, without its trailing '/' */
    }
  }
  fclose(f);
  return best;
}

long ftc__tcp_usable_cpus(const ftc__tcp_cfg_t *cfg) {
  long n = ftc__tcp_ncpu(cfg);
  if (cfg->host_cpus > 0) return n;
  long quota = cfg->cpu_quota == FTC__TCP_QUOTA_UNREAD ? ftc__tcp_cpu_quota() : cfg->cpu_quota;
  return quota > 0 && quota < n ? quota : n;
}
