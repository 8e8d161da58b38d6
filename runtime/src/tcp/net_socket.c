/*
 * net_socket.c - the sockets of the data plane: options set on every
 * connection, the address a peer is described by in logs, the listener and
 * the address it advertises (FTCOMM_SOCKET_IFNAME, FTCOMM_SOCKET_FAMILY),
 * and refusing connections nobody will accept.
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

void ftc__net_set_sockopts(int fd, int64_t bufsize) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (bufsize > 0) {
    int b = bufsize > INT_MAX ? INT_MAX : (int)bufsize;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
  }
}

void ftc__net_describe_peer(int fd, char *buf, size_t len) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof(ss);
  if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
    ftc__addr_format((struct sockaddr *)&ss, sl, buf, len);
  else
    snprintf(buf, len, "?");
}

/* NCCL_SOCKET_IFNAME's syntax: a comma-separated list of name prefixes,
 * "=" before it for exact names, "^" (first) to exclude those instead. */
static int ifname_match(const char *spec, const char *name) {
  int exclude = 0, exact = 0, hit = 0;
  if (*spec == '^') exclude = 1, spec++;
  if (*spec == '=') exact = 1, spec++;
  for (const char *p = spec; *p && !hit;) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n) hit = strncmp(name, p, n) == 0 && (!exact || name[n] == '\0');
    p = e ? e + 1 : p + n;
  }
  return exclude ? !hit : hit;
}

/* The first address of family on an interface that is up (AF_INET, or
 * AF_INET6 outside fe80::/10, whose zone would not reach another host):
 * with ifname (FTCOMM_SOCKET_IFNAME) set, of an interface it selects, else
 * of any but loopback. */
static int first_addr(int family, const char *ifname, char *out, size_t len) {
  struct ifaddrs *ifs, *i;
  int found = 0;
  int any = !ifname || !*ifname;
  if (getifaddrs(&ifs) != 0) return 0;
  for (i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != family || !(i->ifa_flags & IFF_UP)) continue;
    if (any ? (i->ifa_flags & IFF_LOOPBACK) != 0 : !ifname_match(ifname, i->ifa_name)) continue;
    if (!any && ifname[0] == '^' && (i->ifa_flags & IFF_LOOPBACK)) continue;
    if (family == AF_INET) {
      const struct sockaddr_in *sin = (const struct sockaddr_in *)i->ifa_addr;
      found = inet_ntop(AF_INET, &sin->sin_addr, out, (socklen_t)len) != NULL;
    } else {
      const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)i->ifa_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) continue;
      if (any && IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr)) continue;
      found = inet_ntop(AF_INET6, &s6->sin6_addr, out, (socklen_t)len) != NULL;
    }
  }
  freeifaddrs(ifs);
  return found;
}

/* "lo (ipv4, ipv6), eth0 (ipv4)": the interfaces that are up, for errors. */
static void list_interfaces(char *out, size_t len) {
  struct ifaddrs *ifs, *i;
  size_t o = 0;
  out[0] = '\0';
  if (getifaddrs(&ifs) != 0) return;
  for (i = ifs; i && o + 1 < len; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    int f = i->ifa_addr->sa_family;
    if (f != AF_INET && f != AF_INET6) continue;
    char item[IFNAMSIZ + 8];
    snprintf(item, sizeof(item), "%s %s", i->ifa_name, f == AF_INET ? "ipv4" : "ipv6");
    int seen = 0; /* an interface with several addresses of a family: once */
    for (const char *p = out; !seen && (p = strstr(p, item)) != NULL; p++)
      seen = (p == out || p[-1] == ' ') && (p[strlen(item)] == ',' || p[strlen(item)] == '\0');
    if (!seen) o += (size_t)snprintf(out + o, len - o, "%s%s", o ? ", " : "", item);
  }
  freeifaddrs(ifs);
}

/* Connections a listener holds until they are accepted. A joiner's holds
 * two from every other rank of its epoch, made early while it is still on
 * its way to its view (ftc__net_makes_connection): with 128, past 65 ranks the rest
 * waited for the SYN's retransmission (1 s). The kernel caps it at
 * net.core.somaxconn (4096 since Linux 5.4). */
#define LISTEN_BACKLOG 4096

/* A socket bound and listening on sa; -1 with errno. v6only: -1 leaves the
 * kernel's default, else IPV6_V6ONLY for an AF_INET6 socket. */
static int listen_on(const struct sockaddr *sa, socklen_t sl, int v6only, int64_t socket_buffer) {
  int one = 1;
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (sa->sa_family == AF_INET6 && v6only >= 0)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
  ftc__net_set_sockopts(fd, socket_buffer);
  if (bind(fd, sa, sl) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

ftc_status_t ftc__tcp_listen(const char *bind_host, const char *advertise_host, int family,
                             const char *ifname, int64_t socket_buffer, int *fd_out, char *addr, size_t addrlen) {
  char bh[FTC__ADDR_HOST_MAX], host[FTC__ADDR_HOST_MAX];
  const char *fam = ftc__addr_family_name(family);
  ftc_status_t st;
  int fd = -1;
  if (!bind_host || !*bind_host) bind_host = "*";
  if (strcmp(bind_host, "*") == 0)
    snprintf(bh, sizeof(bh), "*");
  else if ((st = ftc__addr_host("FTCOMM_BIND_HOST", bind_host, bh, sizeof(bh))) != FTC_OK)
    return st;
  int bfam = ftc__addr_literal_family(bh);
  if (family != AF_UNSPEC && bfam != AF_UNSPEC && bfam != family)
    return ftc__error(FTC_ERR_CONFIG,
                      "FTCOMM_BIND_HOST=%s is an %s address but FTCOMM_SOCKET_FAMILY=%s; set one "
                      "of that family, or * for all of them",
                      bind_host, bfam == AF_INET ? "IPv4" : "IPv6", fam);
  /* Where the listener is: the wildcard of a family, or one address. */
  int wild = strcmp(bh, "*") == 0 || strcmp(bh, "0.0.0.0") == 0 || strcmp(bh, "::") == 0;
  int lfam = AF_UNSPEC; /* family of the socket; AF_INET6 dual-stack unless v6only */
  int v6only = -1;
  if (wild) {
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
    int want = strcmp(bh, "0.0.0.0") == 0 ? AF_INET : strcmp(bh, "::") == 0 ? AF_INET6 : family;
    if (want != AF_INET) { /* IPv6, or both on one dual-stack socket */
      v6only = family == AF_INET6;
      fd = listen_on((struct sockaddr *)&a6, sizeof(a6), v6only, socket_buffer);
      lfam = AF_INET6;
      if (fd < 0 && want == AF_UNSPEC &&
          (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL || errno == EPROTONOSUPPORT)) {
        FTC_DEBUG(FTC_SUB_NET, "no IPv6 on this host (%s); listening on IPv4 only",
                  strerror(errno));
        want = AF_INET;
      }
    }
    if (want == AF_INET) {
      fd = listen_on((struct sockaddr *)&a4, sizeof(a4), -1, socket_buffer);
      lfam = AF_INET;
    }
  } else {
    struct addrinfo hints = {0}, *ai = NULL;
    int rc;
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if ((rc = getaddrinfo(bh, "0", &hints, &ai)) != 0 || !ai)
      return ftc__error(FTC_ERR_CONFIG, "FTCOMM_BIND_HOST=%s cannot be resolved%s%s: %s", bind_host,
                        family != AF_UNSPEC ? " as " : "", family != AF_UNSPEC ? fam : "",
                        gai_strerror(rc));
    lfam = ai->ai_family;
    v6only = 1; /* one address: no mapped IPv4 */
    fd = listen_on(ai->ai_addr, ai->ai_addrlen, v6only, socket_buffer);
    freeaddrinfo(ai);
  }
  if (fd < 0)
    return ftc__error(FTC_ERR_SYSTEM,
                      "binding the data plane to %s (%s): %s (check FTCOMM_BIND_HOST and "
                      "FTCOMM_SOCKET_FAMILY=%s)",
                      bind_host, lfam == AF_INET ? "IPv4" : "IPv6", strerror(errno), fam);
  struct sockaddr_storage ss;
  socklen_t sl = sizeof(ss);
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "getsockname: %s", strerror(errno));
    goto out_close_fd;
  }
  unsigned port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
  /* The address peers use, and the setting it came from. */
  const char *pod_ip = getenv("POD_IP"), *from;
  if (advertise_host && *advertise_host) {
    from = "FTCOMM_ADVERTISE_HOST";
    if ((st = ftc__addr_host(from, advertise_host, host, sizeof(host))) != FTC_OK) goto out_close_fd;
  } else if (ifname && *ifname) {
    /* The address of the interfaces named, of a family the listener serves. */
    from = "FTCOMM_SOCKET_IFNAME";
    if (!((lfam == AF_INET || v6only != 1) && first_addr(AF_INET, ifname, host, sizeof(host))) &&
        !(lfam == AF_INET6 && first_addr(AF_INET6, ifname, host, sizeof(host)))) {
      char ifs[512];
      list_interfaces(ifs, sizeof(ifs));
      st = ftc__error(FTC_ERR_CONFIG,
                      "FTCOMM_SOCKET_IFNAME=%s selects no interface that is up with an %s "
                      "address (link-local IPv6 does not count); interfaces up: %s",
                      ifname,
                      lfam == AF_INET ? "IPv4" : v6only == 1 ? "IPv6" : "IPv4 or IPv6", ifs);
      goto out_close_fd;
    }
  } else if (pod_ip && *pod_ip) {
    from = "POD_IP";
    if ((st = ftc__addr_host(from, pod_ip, host, sizeof(host))) != FTC_OK) goto out_close_fd;
  } else if (!wild) {
    from = "FTCOMM_BIND_HOST";
    snprintf(host, sizeof(host), "%s", bh);
  } else {
    from = NULL;
    if (!((lfam == AF_INET || v6only != 1) && first_addr(AF_INET, NULL, host, sizeof(host))) &&
        !(lfam == AF_INET6 && first_addr(AF_INET6, NULL, host, sizeof(host))))
      snprintf(host, sizeof(host), "%s", lfam == AF_INET6 && v6only == 1 ? "::1" : "127.0.0.1");
  }
  int afam = ftc__addr_literal_family(host);
  if (from && afam != AF_UNSPEC) {
    const char *why = NULL;
    if (family != AF_UNSPEC && afam != family)
      why = "FTCOMM_SOCKET_FAMILY";
    else if (afam == AF_INET6 && lfam == AF_INET)
      why = "FTCOMM_BIND_HOST (an IPv4 listener)";
    else if (afam == AF_INET && lfam == AF_INET6 && v6only == 1)
      why = "FTCOMM_BIND_HOST (an IPv6-only listener)";
    if (why) {
      st = ftc__error(FTC_ERR_CONFIG,
                      "%s=%s is an %s address, which %s rules out; peers could not connect. Set "
                      "FTCOMM_SOCKET_FAMILY=auto with FTCOMM_BIND_HOST=*, or addresses of one "
                      "family",
                      from, host, afam == AF_INET ? "IPv4" : "IPv6", why);
      goto out_close_fd;
    }
  }
  if (ftc__addr_join(host, (int)port, addr, addrlen) >= (int)addrlen) {
    st = ftc__error(FTC_ERR_CONFIG, "the data-plane address %s is too long", host);
    goto out_close_fd;
  }
  *fd_out = fd;
  FTC_DEBUG(FTC_SUB_NET, "data plane listening on %s (%s%s), advertised as %s", bind_host,
            lfam == AF_INET ? "IPv4" : "IPv6", lfam == AF_INET6 && v6only != 1 ? " and IPv4" : "",
            addr);
  return FTC_OK;

out_close_fd:
  close(fd);
  return st;
}

void ftc__tcp_refuse_pending(int listen_fd) {
  for (;;) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return;
    char who[96];
    ftc__net_describe_peer(fd, who, sizeof(who));
    FTC_WARN(FTC_SUB_NET, "refused a data-plane connection from %s: no view is being connected",
             who);
    close(fd);
  }
}
