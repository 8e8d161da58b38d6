/*
 * router.c - one listening socket for the coordinators of every job. A
 * connection goes through four states: it sends its HTTP upgrade request
 * (answered here with 101, as its coordinator would), then its first message
 * (the hello: job and token), then it is connected to the job's coordinator
 * on loopback, which is sent the rank's bytes verbatim and whose own 101 is
 * swallowed; then bytes are copied both ways until either side closes. The
 * coordinator sees exactly the rank's byte stream, so the protocol (and its
 * errors, e.g. a wrong token) is the coordinator's, unchanged.
 *
 * One thread polls every socket; buffers are bounded per direction, so a
 * side that does not read stops the other from being read (back-pressure).
 */
#include "router.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libwebsockets.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_time.h"
#include "ftc_proto_wire.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_PROTOCOL FTC__PROTO_WS_NAME
#define WS_PROTOCOL_HELLO FTC__PROTO_WS_NAME_HELLO /* the hello in the request header */
#define MAX_PRELUDE (256 * 1024)  /* upgrade request + hello frames */
#define MAX_HELLO (64 * 1024)
#define MAX_PENDING (512 * 1024)  /* per direction, while splicing */
#define PRELUDE_TIMEOUT_NS (15LL * 1000000000LL)

enum { ST_REQUEST, ST_HELLO, ST_CONNECT, ST_UPGRADE, ST_SPLICE };

typedef struct buf {
  char *p;
  size_t len, cap;
} buf_t;

typedef struct conn {
  int fd[2];           /* 0: the rank, 1: its coordinator (-1 until routed) */
  int state;
  int closing;         /* one side ended: flush the other, then close */
  buf_t prelude;       /* the rank's bytes until routed; then those after its upgrade request,
                        * held until the coordinator's 101 (lws wants none before it) */
  size_t hdr_len;      /* upgrade request length within prelude */
  int hello_in_request; /* the 101 selected WS_PROTOCOL_HELLO: the hello is the request's
                         * X-Ftcomm-Hello header, and no hello frame follows */
  buf_t tx[2];         /* bytes waiting to be written to side i */
  buf_t upgrade;       /* the coordinator's 101 response, swallowed */
  int64_t deadline_ns; /* before splicing */
  char peer[64];
} conn_t;

struct ftck_router {
  int lfd, port;
  int wake[2];
  int stop; /* atomic */
  pthread_t thread;
  ftck_route_fn route;
  void *ud;
  conn_t **conns;
  size_t nconns, cap;
  char *hello; /* MAX_HELLO + 1 bytes for read_hello, made at the first one. Not a
                * static __thread array: static TLS is zeroed, page by page, in
                * every thread of the process (64 KiB x 100 coordinator threads) */
  ftck_router_stats_t stats; /* atomics */
};

static int buf_add(buf_t *b, const void *p, size_t n, size_t limit) {
  if (b->len + n > limit) return -1;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    char *np = ftc__realloc(b->p, cap);
    if (!np) return -1;
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, p, n);
  b->len += n;
  return 0;
}

static void buf_drop(buf_t *b, size_t n) {
  memmove(b->p, b->p + n, b->len - n);
  b->len -= n;
}

static void buf_free(buf_t *b) {
  ftc__free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}

void ftck_ws_accept(const char *key, char *out, size_t n) {
  char cat[256];
  unsigned char sha[20];
  snprintf(cat, sizeof cat, "%s%s", key, WS_GUID);
  lws_SHA1((const unsigned char *)cat, strlen(cat), sha);
  if (lws_b64_encode_string((const char *)sha, 20, out, (int)n) < 0 && n) out[0] = '\0';
}

long ftck_ws_frame(const unsigned char *b, size_t len, int *fin, int *opcode, char *payload, size_t cap,
                   size_t *plen) {
  if (len < 2) return 0;
  *fin = (b[0] & 0x80) != 0;
  *opcode = b[0] & 0x0f;
  if (b[0] & 0x70) return -1; /* no extension was negotiated */
  int masked = (b[1] & 0x80) != 0;
  uint64_t n = b[1] & 0x7f;
  size_t off = 2;
  if (n == 126) {
    if (len < 4) return 0;
    n = ((uint64_t)b[2] << 8) | b[3];
    off = 4;
  } else if (n == 127) {
    if (len < 10) return 0;
    n = 0;
    for (int i = 0; i < 8; i++) n = (n << 8) | b[2 + i];
    off = 10;
  }
  if (!masked) return -1; /* RFC 6455 5.1: a client masks every frame */
  if (n > MAX_PRELUDE) return -1;
  if (len < off + 4) return 0;
  const unsigned char *mask = b + off;
  off += 4;
  if (len < off + n) return 0;
  if (*opcode == 0 || *opcode == 1) {
    if (*plen + n > cap) return -1;
    for (uint64_t i = 0; i < n; i++) payload[*plen + i] = (char)(b[off + i] ^ mask[i & 3]);
    *plen += n;
  }
  return (long)(off + n);
}

/* The value of header `name` in an HTTP request, trimmed, into out; -1 if absent. */
static int header(const char *req, size_t len, const char *name, char *out, size_t n) {
  size_t nl = strlen(name);
  const char *p = memchr(req, '\n', len);
  while (p && (size_t)(p + 1 - req) < len) {
    const char *line = p + 1;
    const char *eol = memchr(line, '\n', len - (size_t)(line - req));
    if (!eol) break;
    if ((size_t)(eol - line) > nl && !strncasecmp(line, name, nl) && line[nl] == ':') {
      const char *v = line + nl + 1, *e = eol;
      while (v < e && (*v == ' ' || *v == '\t')) v++;
      while (e > v && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) e--;
      snprintf(out, n, "%.*s", (int)(e - v), v);
      return 0;
    }
    p = eol;
  }
  return -1;
}

static void conn_close(ftck_router_t *r, size_t i) {
  conn_t *c = r->conns[i];
  for (int s = 0; s < 2; s++) {
    if (c->fd[s] >= 0) close(c->fd[s]);
    buf_free(&c->tx[s]);
  }
  buf_free(&c->prelude);
  buf_free(&c->upgrade);
  FTC_DEBUG(FTC_SUB_CTRL, "router: connection from %s closed", c->peer);
  ftc__free(c);
  r->conns[i] = r->conns[--r->nconns];
  __atomic_sub_fetch(&r->stats.open, 1, __ATOMIC_RELAXED);
}

/* The subprotocol lws selects for the list `protos`: the first name in it
 * that the coordinator serves (both names); NULL: none. */
static const char *select_protocol(const char *protos) {
  for (const char *p = protos; *p;) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    size_t n = strcspn(p, ", \t");
    if (n == strlen(WS_PROTOCOL_HELLO) && !strncmp(p, WS_PROTOCOL_HELLO, n)) return WS_PROTOCOL_HELLO;
    if (n == strlen(WS_PROTOCOL) && !strncmp(p, WS_PROTOCOL, n)) return WS_PROTOCOL;
    p += n;
  }
  return NULL;
}

/* The upgrade request is complete: answer it as the coordinator would
 * (selecting the subprotocol it will select when it is sent the request).
 * -1: not a WebSocket upgrade for the membership protocol. */
static int answer_upgrade(conn_t *c) {
  char key[128], protos[256], accept[64], resp[512];
  const char *req = c->prelude.p;
  if (c->hdr_len < 4 || strncmp(req, "GET ", 4) != 0 ||
      header(req, c->hdr_len, "Sec-WebSocket-Key", key, sizeof key) != 0)
    return -1;
  int has_proto = header(req, c->hdr_len, "Sec-WebSocket-Protocol", protos, sizeof protos) == 0;
  const char *sel = has_proto ? select_protocol(protos) : NULL;
  if (has_proto && !sel) return -1;
  c->hello_in_request = sel && !strcmp(sel, WS_PROTOCOL_HELLO);
  ftck_ws_accept(key, accept, sizeof accept);
  int n = snprintf(resp, sizeof resp,
                   "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Accept: %s\r\n%s%s%s\r\n",
                   accept, has_proto ? "Sec-WebSocket-Protocol: " : "", has_proto ? sel : "",
                   has_proto ? "\r\n" : "");
  return buf_add(&c->tx[0], resp, (size_t)n, MAX_PENDING);
}

/* The job and token of a hello message's text; 1 found, -1 not a hello. */
static int hello_job_token(const char *text, size_t len, char *job, size_t jn, char *token, size_t tn) {
  json_t *msg = json_loadb(text, len, 0, NULL);
  const char *type = json_string_value(json_object_get(msg, "type"));
  const char *j = json_string_value(json_object_get(msg, "job"));
  const char *t = json_string_value(json_object_get(msg, "token"));
  int rc = -1;
  if (type && !strcmp(type, "hello") && j && t) {
    snprintf(job, jn, "%s", j);
    snprintf(token, tn, "%s", t);
    rc = 1;
  }
  json_decref(msg);
  return rc;
}

/* The hello in the request's X-Ftcomm-Hello header: 1 read, -1 absent or not
 * a hello (its coordinator would refuse it; unroutable here). */
static int read_hello_header(ftck_router_t *r, conn_t *c, char *job, size_t jn, char *token, size_t tn) {
  if (!r->hello && !(r->hello = ftc__malloc(MAX_HELLO + 1))) return -1;
  char *enc = ftc__malloc(FTC__PROTO_MAX_HELLO_HEADER + 2);
  if (!enc) return -1;
  int rc = -1;
  if (header(c->prelude.p, c->hdr_len, FTC__PROTO_HELLO_HEADER, enc, FTC__PROTO_MAX_HELLO_HEADER + 2) == 0) {
    size_t el = strlen(enc);
    long n = el <= FTC__PROTO_MAX_HELLO_HEADER ? ftc__b64url_decode(enc, el, (unsigned char *)r->hello) : -1;
    if (n >= 0) rc = hello_job_token(r->hello, (size_t)n, job, jn, token, tn);
  }
  ftc__free(enc);
  return rc;
}

/* 1: the hello is complete and its job and token are in the out buffers;
 * 0: more bytes needed; -1: not a hello. */
static int read_hello(ftck_router_t *r, conn_t *c, char *job, size_t jn, char *token, size_t tn) {
  if (!r->hello && !(r->hello = ftc__malloc(MAX_HELLO + 1))) return -1;
  char *payload = r->hello;
  size_t plen = 0, off = c->hdr_len;
  for (;;) {
    int fin = 0, op = 0;
    long used = ftck_ws_frame((unsigned char *)c->prelude.p + off, c->prelude.len - off, &fin, &op, payload,
                              MAX_HELLO, &plen);
    if (used <= 0) return (int)used;
    off += (size_t)used;
    if (op == 8 || op == 2) return -1;     /* a close or a binary frame first */
    if (op >= 9) continue;                  /* ping, pong */
    if (fin) break;
  }
  payload[plen] = '\0';
  return hello_job_token(payload, plen, job, jn, token, tn);
}

static int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/* Read what side s has. 0 keep, -1 close the connection now. */
static int on_readable(ftck_router_t *r, conn_t *c, int s) {
  char tmp[65536];
  ssize_t n = read(c->fd[s], tmp, sizeof tmp);
  if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
  if (n == 0) {
    c->closing = 1; /* flush what the other side still has to get, then close */
    return c->state == ST_SPLICE ? 0 : -1;
  }
  if (s == 1 && c->state == ST_UPGRADE) {
    if (buf_add(&c->upgrade, tmp, (size_t)n, 16384) != 0) return -1;
    char *end = memmem(c->upgrade.p, c->upgrade.len, "\r\n\r\n", 4);
    if (!end) return 0;
    if (c->upgrade.len < 12 || strncmp(c->upgrade.p + 9, "101", 3) != 0) {
      FTC_WARN(FTC_SUB_CTRL, "router: the coordinator refused the upgrade of %s: %.40s", c->peer, c->upgrade.p);
      return -1;
    }
    size_t hl = (size_t)(end + 4 - c->upgrade.p);
    if (buf_add(&c->tx[0], c->upgrade.p + hl, c->upgrade.len - hl, MAX_PENDING) != 0) return -1;
    buf_free(&c->upgrade);
    if (buf_add(&c->tx[1], c->prelude.p, c->prelude.len, MAX_PENDING + MAX_PRELUDE) != 0) return -1;
    buf_free(&c->prelude);
    c->state = ST_SPLICE;
    return 0;
  }
  if (c->state == ST_SPLICE) return buf_add(&c->tx[1 - s], tmp, (size_t)n, MAX_PENDING + sizeof tmp);
  if (s == 1) return -1; /* a coordinator speaks only after the upgrade */
  if (c->state == ST_CONNECT || c->state == ST_UPGRADE) return buf_add(&c->prelude, tmp, (size_t)n, MAX_PRELUDE);
  if (buf_add(&c->prelude, tmp, (size_t)n, MAX_PRELUDE) != 0) return -1;
  if (c->state == ST_REQUEST) {
    char *end = memmem(c->prelude.p, c->prelude.len, "\r\n\r\n", 4);
    if (!end) return 0;
    c->hdr_len = (size_t)(end + 4 - c->prelude.p);
    if (answer_upgrade(c) != 0) {
      FTC_DEBUG(FTC_SUB_CTRL, "router: %s did not ask for a membership WebSocket", c->peer);
      return -1;
    }
    c->state = ST_HELLO;
  }
  char job[256], token[256];
  int h = c->hello_in_request ? read_hello_header(r, c, job, sizeof job, token, sizeof token)
                               : read_hello(r, c, job, sizeof job, token, sizeof token);
  if (h == 0) return 0;
  int port = h > 0 ? r->route(r->ud, job, token) : -1;
  if (port <= 0) {
    __atomic_add_fetch(&r->stats.unrouted, 1, __ATOMIC_RELAXED);
    FTC_INFO(FTC_SUB_CTRL, "router: %s: %s%s%s; closing (it reconnects)", c->peer,
             h > 0 ? "no coordinator for job " : c->hello_in_request ? "the " FTC__PROTO_HELLO_HEADER
             " header is not a hello" : "the first message is not a hello", h > 0 ? job : "", "");
    return -1;
  }
  c->fd[1] = connect_loopback(port);
  if (c->fd[1] < 0) return -1;
  if (buf_add(&c->tx[1], c->prelude.p, c->hdr_len, MAX_PRELUDE) != 0) return -1;
  buf_drop(&c->prelude, c->hdr_len);
  c->state = ST_CONNECT;
  __atomic_add_fetch(&r->stats.routed, 1, __ATOMIC_RELAXED);
  FTC_DEBUG(FTC_SUB_CTRL, "router: %s -> job %s (coordinator port %d)", c->peer, job, port);
  return 0;
}

static int on_writable(conn_t *c, int s) {
  if (s == 1 && c->state == ST_CONNECT) {
    int err = 0;
    socklen_t l = sizeof err;
    if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &l) != 0 || err) return -1;
    c->state = ST_UPGRADE;
  }
  buf_t *b = &c->tx[s];
  if (!b->len) return 0;
  ssize_t n = send(c->fd[s], b->p, b->len, MSG_NOSIGNAL);
  if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
  buf_drop(b, (size_t)n);
  return 0;
}

static void accept_all(ftck_router_t *r) {
  for (;;) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(r->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (r->nconns == r->cap) {
      size_t cap = r->cap ? r->cap * 2 : 64;
      conn_t **nc = ftc__realloc(r->conns, cap * sizeof *nc);
      if (!nc) {
        close(fd);
        continue;
      }
      r->conns = nc;
      r->cap = cap;
    }
    conn_t *c = ftc__calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd[0] = fd;
    c->fd[1] = -1;
    c->state = ST_REQUEST;
    c->deadline_ns = ftc__now_ns() + PRELUDE_TIMEOUT_NS;
    char host[INET6_ADDRSTRLEN] = "?", port[16] = "";
    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(c->peer, sizeof c->peer, "%s:%s", host, port);
    r->conns[r->nconns++] = c;
    __atomic_add_fetch(&r->stats.accepted, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&r->stats.open, 1, __ATOMIC_RELAXED);
  }
}

static void *router_main(void *arg) {
  ftck_router_t *r = arg;
  struct pollfd *pfd = NULL;
  size_t pcap = 0;
  while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
    size_t need = 2 + 2 * r->nconns;
    if (need > pcap) {
      struct pollfd *np = ftc__realloc(pfd, need * sizeof *pfd);
      if (!np) {
        usleep(100000);
        continue;
      }
      pfd = np;
      pcap = need;
    }
    pfd[0] = (struct pollfd){.fd = r->wake[0], .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = r->lfd, .events = POLLIN};
    for (size_t i = 0; i < r->nconns; i++) {
      conn_t *c = r->conns[i];
      for (int s = 0; s < 2; s++) {
        short ev = 0;
        if (c->fd[s] >= 0) {
          /* Read a side only while the other side's queue has room. */
          if (!c->closing && c->tx[1 - s].len < MAX_PENDING) ev |= POLLIN;
          if (c->tx[s].len || (s == 1 && c->state == ST_CONNECT)) ev |= POLLOUT;
        }
        pfd[2 + 2 * i + s] = (struct pollfd){.fd = c->fd[s], .events = ev};
      }
    }
    int n = poll(pfd, 2 + 2 * r->nconns, 1000);
    if (n < 0 && errno != EINTR) break;
    if (pfd[0].revents) {
      char b[64];
      while (read(r->wake[0], b, sizeof b) > 0) {}
    }
    int64_t now = ftc__now_ns();
    size_t count = r->nconns;
    /* Walk backwards: conn_close moves the last connection into slot i. */
    for (size_t k = count; k-- > 0;) {
      conn_t *c = r->conns[k];
      int bad = 0;
      for (int s = 0; s < 2 && !bad; s++) {
        short re = pfd[2 + 2 * k + s].revents;
        if (c->fd[s] < 0 || !re) continue;
        if ((re & POLLOUT) && on_writable(c, s) != 0) bad = 1;
        if (!bad && (re & (POLLIN | POLLHUP | POLLERR)) && on_readable(r, c, s) != 0) bad = 1;
      }
      if (!bad && c->state != ST_SPLICE && now > c->deadline_ns) {
        FTC_INFO(FTC_SUB_CTRL, "router: %s sent no hello within %lld s; closing", c->peer,
                 PRELUDE_TIMEOUT_NS / 1000000000LL);
        bad = 1;
      }
      if (!bad && c->closing && !c->tx[0].len && !c->tx[1].len) bad = 1;
      if (bad) conn_close(r, k);
    }
    if (pfd[1].revents & POLLIN) accept_all(r);
  }
  ftc__free(pfd);
  return NULL;
}

static ftc_status_t listen_on(const char *addr, int *lfd, int *port) {
  char host[256] = "";
  const char *colon = strrchr(addr, ':');
  if (!colon) return ftc__error(FTC_ERR_CONFIG, "--coordinator-bind \"%s\" is not [host]:port", addr);
  const char *h = addr;
  size_t hl = (size_t)(colon - addr);
  if (hl >= 2 && addr[0] == '[' && colon[-1] == ']') {
    h++;
    hl -= 2;
  }
  snprintf(host, sizeof host, "%.*s", (int)hl, h);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
  int gai = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai);
  if (gai != 0) return ftc__error(FTC_ERR_CONFIG, "--coordinator-bind %s: %s", addr, gai_strerror(gai));
  /* An empty host means every address: the IPv6 wildcard first (dual
   * stack), the IPv4 one where IPv6 is off; otherwise the addresses in the
   * resolver's order. */
  int fd = -1, one = 1, zero = 0, err = 0;
  ftc_status_t st = FTC_OK;
  for (int pass = 0; pass < 2 && fd < 0; pass++) {
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
      if (!host[0] && (pass == 0) != (a->ai_family == AF_INET6)) continue;
      if (host[0] && pass == 1) break;
      fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        err = errno;
        continue;
      }
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
        err = errno;
        close(fd);
        fd = -1;
      }
    }
  }
  if (fd < 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "the coordinator port cannot listen on %s: %s", addr, strerror(err));
    goto out_free_ai;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  *port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                   : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  *lfd = fd;
out_free_ai:
  freeaddrinfo(ai);
  return st;
}

ftc_status_t ftck_router_start(const char *bind, ftck_route_fn route, void *ud, ftck_router_t **out) {
  *out = NULL;
  ftck_router_t *r = ftc__calloc(1, sizeof *r);
  if (!r) return ftc__error(FTC_ERR_NO_MEMORY, "router: no memory");
  r->route = route;
  r->ud = ud;
  r->wake[0] = r->wake[1] = -1;
  ftc_status_t st = listen_on(bind, &r->lfd, &r->port);
  if (st != FTC_OK) goto out_free;
  if (pipe2(r->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "router: pipe: %s", strerror(errno));
    goto out_close_listener;
  }
  int err = pthread_create(&r->thread, NULL, router_main, r);
  if (err) {
    st = ftc__error(FTC_ERR_SYSTEM, "router: cannot start its thread: %s", strerror(err));
    goto out_close_pipe;
  }
  pthread_setname_np(r->thread, "ftck-router");
  FTC_INFO(FTC_SUB_CTRL, "coordinator port listening on %s (port %d)", bind, r->port);
  *out = r;
  return FTC_OK;
out_close_pipe:
  close(r->wake[0]);
  close(r->wake[1]);
out_close_listener:
  close(r->lfd);
out_free:
  ftc__free(r);
  return st;
}

int ftck_router_port(const ftck_router_t *r) { return r->port; }

void ftck_router_get_stats(ftck_router_t *r, ftck_router_stats_t *out) {
  out->accepted = __atomic_load_n(&r->stats.accepted, __ATOMIC_RELAXED);
  out->routed = __atomic_load_n(&r->stats.routed, __ATOMIC_RELAXED);
  out->unrouted = __atomic_load_n(&r->stats.unrouted, __ATOMIC_RELAXED);
  out->open = __atomic_load_n(&r->stats.open, __ATOMIC_RELAXED);
}

void ftck_router_stop(ftck_router_t *r) {
  if (!r) return;
  __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
  ssize_t w = write(r->wake[1], "x", 1);
  (void)w;
  pthread_join(r->thread, NULL);
  while (r->nconns) conn_close(r, r->nconns - 1);
  ftc__free(r->conns);
  ftc__free(r->hello);
  close(r->lfd);
  close(r->wake[0]);
  close(r->wake[1]);
  ftc__free(r);
}
