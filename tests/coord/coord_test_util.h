/*
 * coord_test_util.h - helpers for the coordinator and membership suites: a
 * raw WebSocket client (plain sockets, hand-made frames) that can send what a
 * well-behaved client never would, and a free local port nobody listens on.
 */
#ifndef FTC_COORD_TEST_UTIL_H
#define FTC_COORD_TEST_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ftc_time.h"

#define WS_TEXT 0x1
#define WS_BINARY 0x2
#define WS_CLOSE 0x8

/* A port on 127.0.0.1 that was free a moment ago and has no listener. */
static inline int test_closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
      getsockname(fd, (struct sockaddr *)&a, &len)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

static inline int raw_write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Read exactly n bytes before the deadline; -1 on EOF, error or timeout. */
static inline int raw_read_full(int fd, void *p, size_t n, int64_t deadline) {
  char *c = p;
  while (n) {
    int64_t left = (deadline - ftc__now_ns()) / 1000000;
    if (left <= 0) return -1;
    struct pollfd pfd = {fd, POLLIN, 0};
    int r = poll(&pfd, 1, (int)left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    ssize_t got = recv(fd, c, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;
    c += got;
    n -= (size_t)got;
  }
  return 0;
}

/* Connect and send an upgrade request offering the subprotocols `protos`
 * (e.g. "ftcomm.membership.v1-hello, ftcomm.membership.v1"), with an
 * X-Ftcomm-Hello header of value `hello_hdr` unless NULL. Returns the
 * socket once the response is 101 (its Sec-WebSocket-Protocol in sel, ""
 * if none), -2 when the server answered otherwise or closed, -1 when it
 * could not connect or send. */
static inline int raw_ws_connect_ex(int port, const char *protos, const char *hello_hdr,
                                    char *sel, size_t sel_len) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
    close(fd);
    return -1;
  }
  size_t cap = 512 + strlen(protos) + (hello_hdr ? strlen(hello_hdr) : 0);
  char *req = malloc(cap);
  if (!req) {
    close(fd);
    return -1;
  }
  int rl = snprintf(req, cap,
                    "GET /ftcomm/v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                    "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: %s\r\n%s%s%s\r\n",
                    protos, hello_hdr ? "X-Ftcomm-Hello: " : "", hello_hdr ? hello_hdr : "",
                    hello_hdr ? "\r\n" : "");
  int wr = raw_write_all(fd, req, (size_t)rl);
  free(req);
  if (wr) {
    close(fd);
    return -1;
  }
  char resp[2048];
  size_t n = 0;
  int64_t deadline = ftc__deadline_ns(5000);
  while (n < sizeof(resp) - 1) {
    if (raw_read_full(fd, resp + n, 1, deadline)) break;
    n++;
    if (n >= 4 && memcmp(resp + n - 4, "\r\n\r\n", 4) == 0) break;
  }
  resp[n] = '\0';
  if (strncmp(resp, "HTTP/1.1 101", 12) != 0) {
    close(fd);
    return -2;
  }
  if (sel && sel_len) {
    sel[0] = '\0';
    const char *p = strcasestr(resp, "\r\nSec-WebSocket-Protocol:");
    if (p) {
      p += strlen("\r\nSec-WebSocket-Protocol:");
      while (*p == ' ') p++;
      size_t l = strcspn(p, "\r");
      snprintf(sel, sel_len, "%.*s", (int)l, p);
    }
  }
  return fd;
}

/* Connect to the coordinator and complete the WebSocket handshake. -1 on failure. */
static inline int raw_ws_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&a, sizeof(a))) goto out_close;
  static const char req[] =
      "GET /ftcomm/v1 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
      "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: ftcomm.membership.v1\r\n\r\n";
  if (raw_write_all(fd, req, sizeof(req) - 1)) goto out_close;
  char resp[2048];
  size_t n = 0;
  int64_t deadline = ftc__deadline_ns(5000);
  while (n < sizeof(resp) - 1) {
    if (raw_read_full(fd, resp + n, 1, deadline)) goto out_close;
    n++;
    if (n >= 4 && memcmp(resp + n - 4, "\r\n\r\n", 4) == 0) break;
  }
  resp[n] = '\0';
  if (strncmp(resp, "HTTP/1.1 101", 12) != 0) goto out_close;
  return fd;
out_close:
  close(fd);
  return -1;
}

/* Send a frame header declaring `declared` payload bytes, then `n` bytes of
 * payload (masked, as a client must). `fin` 0 starts a fragmented message. */
static inline int raw_ws_send_partial(int fd, int opcode, int fin, const void *p, size_t n,
                                      uint64_t declared) {
  unsigned char h[14];
  size_t hl = 0;
  h[hl++] = (unsigned char)((fin ? 0x80 : 0) | opcode);
  if (declared < 126) {
    h[hl++] = (unsigned char)(0x80 | declared);
  } else if (declared < 65536) {
    h[hl++] = 0x80 | 126;
    h[hl++] = (unsigned char)(declared >> 8);
    h[hl++] = (unsigned char)declared;
  } else {
    h[hl++] = 0x80 | 127;
    for (int i = 7; i >= 0; i--) h[hl++] = (unsigned char)(declared >> (8 * i));
  }
  static const unsigned char key[4] = {0x12, 0x34, 0x56, 0x78};
  memcpy(h + hl, key, 4);
  hl += 4;
  if (raw_write_all(fd, h, hl)) return -1;
  unsigned char *buf = malloc(n ? n : 1);
  if (!buf) return -1;
  for (size_t i = 0; i < n; i++) buf[i] = ((const unsigned char *)p)[i] ^ key[i % 4];
  int rc = raw_write_all(fd, buf, n);
  free(buf);
  return rc;
}

static inline int raw_ws_send(int fd, int opcode, const void *p, size_t n) {
  return raw_ws_send_partial(fd, opcode, 1, p, n, n);
}

static inline int raw_ws_send_text(int fd, const char *s) {
  return raw_ws_send(fd, WS_TEXT, s, strlen(s));
}

/* Receive one frame: its opcode, and its payload NUL-terminated in *out
 * (malloc'd). -1 on EOF or timeout. */
static inline int raw_ws_recv(int fd, char **out, int timeout_ms) {
  int64_t deadline = ftc__deadline_ns(timeout_ms);
  unsigned char h[2];
  *out = NULL;
  if (raw_read_full(fd, h, 2, deadline)) return -1;
  uint64_t len = h[1] & 0x7f;
  if (len == 126) {
    unsigned char e[2];
    if (raw_read_full(fd, e, 2, deadline)) return -1;
    len = (uint64_t)e[0] << 8 | e[1];
  } else if (len == 127) {
    unsigned char e[8];
    if (raw_read_full(fd, e, 8, deadline)) return -1;
    len = 0;
    for (int i = 0; i < 8; i++) len = len << 8 | e[i];
  }
  if (len > (64u << 20)) return -1;
  char *buf = malloc(len + 1);
  if (!buf) return -1;
  if (raw_read_full(fd, buf, len, deadline)) {
    free(buf);
    return -1;
  }
  buf[len] = '\0';
  *out = buf;
  return h[0] & 0x0f;
}

/* 1 when the peer closes the connection (close frame or EOF) within timeout. */
static inline int raw_ws_closed(int fd, int timeout_ms) {
  int64_t deadline = ftc__deadline_ns(timeout_ms);
  for (;;) {
    char *p;
    int left = (int)((deadline - ftc__now_ns()) / 1000000);
    if (left <= 0) return 0;
    int op = raw_ws_recv(fd, &p, left);
    free(p);
    if (op < 0) return ftc__now_ns() < deadline;
    if (op == WS_CLOSE) return 1;
  }
}

#endif
