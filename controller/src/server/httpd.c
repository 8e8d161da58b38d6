/*
 * httpd.c - the health and metrics listener. poll() on the listening socket
 * and an eventfd; each accepted connection is read with a 2 s deadline,
 * answered and closed on the server thread (requests are rare and cheap).
 */
#include "httpd.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_time.h"

struct ftck_httpd {
  int lfd, efd, port;
  ftck_http_handler h;
  void *ud;
  pthread_t thread;
};

static void write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

static void serve_one(ftck_httpd_t *s, int fd) {
  char req[4096];
  size_t len = 0;
  int64_t deadline = ftc__now_ns() + 2000000000LL;
  while (len < sizeof req - 1 && !memmem(req, len, "\r\n\r\n", 4) && !memmem(req, len, "\n\n", 2)) {
    int left = (int)((deadline - ftc__now_ns()) / 1000000);
    if (left <= 0) return;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, left) <= 0) return;
    ssize_t r = recv(fd, req + len, sizeof req - 1 - len, 0);
    if (r <= 0) return;
    len += (size_t)r;
  }
  req[len] = '\0';
  char method[16], path[1024];
  int status = 400;
  const char *ctype = "text/plain; charset=utf-8";
  char *body = NULL;
  if (sscanf(req, "%15s %1023s", method, path) == 2 && strcmp(method, "GET") == 0) {
    char *q = strchr(path, '?');
    if (q) *q = '\0';
    s->h(path, &status, &ctype, &body, s->ud);
  } else {
    status = 405;
  }
  const char *text = status == 200 ? "OK" : status == 404 ? "Not Found" : status == 503 ? "Service Unavailable"
                                        : status == 405 ? "Method Not Allowed" : "Error";
  const char *b = body ? body : text;
  char head[256];
  int hn = snprintf(head, sizeof head,
                    "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                    status, text, ctype, strlen(b));
  write_all(fd, head, (size_t)hn);
  write_all(fd, b, strlen(b));
  ftc__free(body);
}

static void *httpd_main(void *arg) {
  ftck_httpd_t *s = arg;
  for (;;) {
    struct pollfd p[2] = {{.fd = s->lfd, .events = POLLIN}, {.fd = s->efd, .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents) break;
    if (!(p[0].revents & POLLIN)) continue;
    int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    serve_one(s, fd);
    close(fd);
  }
  return NULL;
}

ftc_status_t ftck_httpd_start(const char *addr, ftck_http_handler h, void *ud, ftck_httpd_t **out) {
  ftc_status_t st = FTC_OK;
  *out = NULL;
  char host[256] = "", port[32];
  const char *colon = strrchr(addr, ':');
  if (!colon) return ftc__error(FTC_ERR_CONFIG, "listen address \"%s\": expected host:port or :port", addr);
  snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
  snprintf(port, sizeof port, "%s", colon + 1);
  if (host[0] == '[') { /* [::1]:8080 */
    memmove(host, host + 1, strlen(host));
    char *e = strchr(host, ']');
    if (e) *e = '\0';
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
  int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
  if (rc != 0) return ftc__error(FTC_ERR_CONFIG, "listen address \"%s\": %s", addr, gai_strerror(rc));
  ftck_httpd_t *s = ftc__calloc(1, sizeof *s);
  if (!s) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "httpd: no memory");
    goto out_free_ai;
  }
  s->h = h;
  s->ud = ud;
  s->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->lfd < 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "httpd: socket: %s", strerror(errno));
    goto out_free_server;
  }
  int one = 1;
  setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(s->lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(s->lfd, 16) != 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "httpd: cannot listen on %s: %s", addr, strerror(errno));
    goto out_close_listener;
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(s->lfd, (struct sockaddr *)&ss, &sl);
  s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                            : ((struct sockaddr_in *)&ss)->sin_port);
  s->efd = eventfd(0, EFD_CLOEXEC);
  if (s->efd < 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "httpd: eventfd: %s", strerror(errno));
    goto out_close_listener;
  }
  rc = pthread_create(&s->thread, NULL, httpd_main, s);
  if (rc != 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "httpd: cannot start its thread: %s", strerror(rc));
    goto out_close_eventfd;
  }
  pthread_setname_np(s->thread, "ftck-httpd");
  freeaddrinfo(ai);
  *out = s;
  return FTC_OK;
out_close_eventfd:
  close(s->efd);
out_close_listener:
  close(s->lfd);
out_free_server:
  ftc__free(s);
out_free_ai:
  freeaddrinfo(ai);
  return st;
}

int ftck_httpd_port(const ftck_httpd_t *s) { return s->port; }

void ftck_httpd_stop(ftck_httpd_t *s) {
  if (!s) return;
  uint64_t one = 1;
  if (write(s->efd, &one, sizeof one) < 0) FTC_WARN(FTC_SUB_CTRL, "httpd: cannot wake the server thread");
  pthread_join(s->thread, NULL);
  close(s->efd);
  close(s->lfd);
  ftc__free(s);
}
