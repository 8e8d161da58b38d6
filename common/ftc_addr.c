/*
 * ftc_addr.c - parsing and printing of "host:port" / "[IPv6]:port" and of
 * the address family setting; see ftc_addr.h.
 */
#include "ftc_addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ftc_error.h"

ftc_status_t ftc__addr_family_parse(const char *what, const char *s, int *family) {
  if (!s || !*s || strcasecmp(s, "auto") == 0) {
    *family = AF_UNSPEC;
  } else if (strcasecmp(s, "ipv4") == 0 || strcasecmp(s, "inet") == 0 || strcmp(s, "4") == 0) {
    *family = AF_INET;
  } else if (strcasecmp(s, "ipv6") == 0 || strcasecmp(s, "inet6") == 0 || strcmp(s, "6") == 0) {
    *family = AF_INET6;
  } else {
    return ftc__error(FTC_ERR_CONFIG, "%s=\"%.64s\" is not an address family; set auto, ipv4 or ipv6",
                      what, s);
  }
  return FTC_OK;
}

const char *ftc__addr_family_name(int family) {
  return family == AF_INET ? "ipv4" : family == AF_INET6 ? "ipv6" : "auto";
}

static int name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

/* An IPv6 literal, with an optional zone ("fe80::1%eth0"). */
static int is_ipv6_literal(const char *h, size_t n) {
  char buf[INET6_ADDRSTRLEN + 1];
  const char *pct = memchr(h, '%', n);
  size_t an = pct ? (size_t)(pct - h) : n;
  if (an == 0 || an >= sizeof(buf)) return 0;
  memcpy(buf, h, an);
  buf[an] = '\0';
  struct in6_addr a6;
  if (inet_pton(AF_INET6, buf, &a6) != 1) return 0;
  if (pct) {
    if (pct + 1 == h + n) return 0;
    for (const char *z = pct + 1; z < h + n; z++)
      if (!name_char(*z)) return 0;
  }
  return 1;
}

int ftc__addr_literal_family(const char *host) {
  struct in_addr a4;
  if (!host) return AF_UNSPEC;
  if (inet_pton(AF_INET, host, &a4) == 1) return AF_INET;
  if (is_ipv6_literal(host, strlen(host))) return AF_INET6;
  return AF_UNSPEC;
}

/* Check the host text h[0..n) (brackets stripped; bracketed: it was in
 * brackets) and copy it to out. */
static ftc_status_t check_host(const char *what, const char *s, const char *h, size_t n,
                               int bracketed, char *out, size_t outlen) {
  if (n == 0)
    return ftc__error(FTC_ERR_CONFIG, "%s=\"%.300s\" has an empty host; write host:port or [IPv6]:port",
                      what, s);
  if (n >= outlen || n >= FTC__ADDR_HOST_MAX)
    return ftc__error(FTC_ERR_CONFIG, "%s=\"%.300s\": the host is longer than %d characters", what,
                      s, FTC__ADDR_HOST_MAX - 1);
  if (bracketed || memchr(h, ':', n)) {
    if (!is_ipv6_literal(h, n))
      return ftc__error(FTC_ERR_CONFIG,
                        "%s=\"%.300s\": \"%.*s\" is not an IPv6 address (only IPv6 addresses take "
                        "colons or brackets, e.g. [fd00::1]; an IPv4 address or a name goes "
                        "without them)",
                        what, s, (int)n, h);
  } else {
    for (size_t i = 0; i < n; i++)
      if (!name_char(h[i]))
        return ftc__error(FTC_ERR_CONFIG,
                          "%s=\"%.300s\": the host has the character '%c', which no host name or "
                          "address has",
                          what, s, h[i]);
  }
  memcpy(out, h, n);
  out[n] = '\0';
  return FTC_OK;
}

ftc_status_t ftc__addr_host(const char *what, const char *s, char *out, size_t outlen) {
  if (!s) s = "";
  size_t n = strlen(s);
  if (n && s[0] == '[') {
    if (n < 2 || s[n - 1] != ']')
      return ftc__error(FTC_ERR_CONFIG,
                        "%s=\"%.300s\" opens a bracket it does not close; write [fd00::1] or "
                        "fd00::1 (a host, no port)",
                        what, s);
    return check_host(what, s, s + 1, n - 2, 1, out, outlen);
  }
  if (n && strchr(s, ':') && !strchr(strchr(s, ':') + 1, ':'))
    return ftc__error(FTC_ERR_CONFIG,
                      "%s=\"%.300s\" looks like host:port; this setting takes a host only, without "
                      "a port",
                      what, s);
  return check_host(what, s, s, n, 0, out, outlen);
}

ftc_status_t ftc__addr_split(const char *what, const char *s, char *host, size_t hostlen,
                             int *port) {
  const char *h, *hend, *ps;
  int bracketed = 0;
  if (!s || !*s)
    return ftc__error(FTC_ERR_CONFIG, "%s is empty; set it to host:port or [IPv6]:port", what);
  if (s[0] == '[') {
    const char *close = strchr(s, ']');
    if (!close)
      return ftc__error(FTC_ERR_CONFIG,
                        "%s=\"%.300s\" opens a bracket it does not close; write [IPv6]:port, e.g. "
                        "[fd00::1]:7470",
                        what, s);
    if (close[1] != ':')
      return ftc__error(FTC_ERR_CONFIG,
                        "%s=\"%.300s\" has no :port after the bracketed address; write "
                        "[IPv6]:port, e.g. [fd00::1]:7470",
                        what, s);
    h = s + 1, hend = close, ps = close + 2, bracketed = 1;
  } else {
    const char *colon = strchr(s, ':');
    if (!colon)
      return ftc__error(FTC_ERR_CONFIG, "%s=\"%.300s\" has no port; write host:port or [IPv6]:port",
                        what, s);
    if (strchr(colon + 1, ':'))
      return ftc__error(FTC_ERR_CONFIG,
                        "%s=\"%.300s\" has several colons: an IPv6 address with a port must be in "
                        "brackets, e.g. [fd00::1]:7470",
                        what, s);
    h = s, hend = colon, ps = colon + 1;
  }
  char *end;
  errno = 0;
  long p = (*ps >= '0' && *ps <= '9') ? strtol(ps, &end, 10) : -1;
  if (p < 1 || p > 65535 || errno || *end)
    return ftc__error(FTC_ERR_CONFIG, "%s=\"%.300s\" has no valid port (1..65535) after the host",
                      what, s);
  ftc_status_t st = check_host(what, s, h, (size_t)(hend - h), bracketed, host, hostlen);
  if (st != FTC_OK) return st;
  *port = (int)p;
  return FTC_OK;
}

int ftc__addr_join(const char *host, int port, char *out, size_t outlen) {
  if (strchr(host, ':')) return snprintf(out, outlen, "[%s]:%d", host, port);
  return snprintf(out, outlen, "%s:%d", host, port);
}

void ftc__addr_format(const struct sockaddr *sa, socklen_t len, char *out, size_t outlen) {
  char h[INET6_ADDRSTRLEN];
  if (sa && sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &a->sin_addr, h, sizeof(h));
    snprintf(out, outlen, "%s:%u", h, (unsigned)ntohs(a->sin_port));
  } else if (sa && sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], h, sizeof(h));
      snprintf(out, outlen, "%s:%u", h, (unsigned)ntohs(a->sin6_port));
    } else {
      inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof(h));
      snprintf(out, outlen, "[%s]:%u", h, (unsigned)ntohs(a->sin6_port));
    }
  } else {
    snprintf(out, outlen, "?");
  }
}
