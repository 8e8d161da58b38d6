/*
 * net_standby.c - a standby member's acceptor: a member registered
 * before it is ready (ftc_comm_create_begin) accepts its future peers'
 * connections on a thread of its own and answers their nonces, so the
 * epoch that admits it takes sockets already handshaking
 * (ftc__tcp_preaccept_*, seeded into the bootstrap by
 * ftc__net_preacc_seed).
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

struct ftc__tcp_preacc {
  int listen_fd, stop_fd;
  int64_t socket_buffer;
  pthread_t thread;
  int started;
  int n; /* accepted sockets with their nonces; the thread's until it is stopped */
  struct {
    int fd;
    uint8_t nonce[FTC__TCP_NONCE_SIZE];
  } s[MAX_PENDING_ACCEPTS];
};

static void *preacc_main(void *arg) {
  ftc__tcp_preacc_t *pa = arg;
  pthread_setname_np(pthread_self(), "ftc-standby");
  struct pollfd pfd[2 + MAX_PENDING_ACCEPTS];
  for (;;) {
    int n = 0;
    pfd[n++] = (struct pollfd){pa->stop_fd, POLLIN, 0};
    /* Full: the backlog holds the rest for the bootstrap. */
    pfd[n++] = (struct pollfd){pa->n < MAX_PENDING_ACCEPTS ? pa->listen_fd : -1, POLLIN, 0};
    for (int i = 0; i < pa->n; i++) pfd[n++] = (struct pollfd){pa->s[i].fd, POLLRDHUP, 0};
    if (poll(pfd, (nfds_t)n, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pfd[0].revents) break;
    /* A caller that went away (its prospect changed, it failed): closed
     * here, not answered later. */
    for (int i = pa->n - 1; i >= 0; i--)
      if (pfd[2 + i].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
        close(pa->s[i].fd);
        pa->s[i] = pa->s[--pa->n];
      }
    while ((pfd[1].revents & POLLIN) && pa->n < MAX_PENDING_ACCEPTS) {
      int fd = accept4(pa->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      if (ftc__net_send_nonce(fd, pa->socket_buffer, pa->s[pa->n].nonce) != 0) {
        close(fd);
        continue;
      }
      pa->s[pa->n++].fd = fd;
      FTC_DEBUG(FTC_SUB_NET, "standby: accepted an early connection (%d waiting)", pa->n);
    }
  }
  return NULL;
}

ftc_status_t ftc__tcp_preaccept_start(int listen_fd, int64_t socket_buffer,
                                      ftc__tcp_preacc_t **out) {
  *out = NULL;
  ftc__tcp_preacc_t *pa = ftc__calloc(1, sizeof(*pa));
  if (!pa) return ftc__error(FTC_ERR_NO_MEMORY, "allocating the standby acceptor");
  pa->listen_fd = listen_fd;
  pa->socket_buffer = socket_buffer;
  pa->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int err = pa->stop_fd < 0 ? errno : pthread_create(&pa->thread, NULL, preacc_main, pa);
  if (err) {
    if (pa->stop_fd >= 0) close(pa->stop_fd);
    ftc__free(pa);
    return ftc__error(FTC_ERR_SYSTEM, "cannot start the standby acceptor: %s", strerror(err));
  }
  pa->started = 1;
  *out = pa;
  return FTC_OK;
}

void ftc__tcp_preaccept_stop(ftc__tcp_preacc_t *pa) {
  if (!pa || !pa->started) return;
  uint64_t one = 1;
  ssize_t w = write(pa->stop_fd, &one, sizeof(one));
  (void)w;
  pthread_join(pa->thread, NULL);
  pa->started = 0;
}

void ftc__tcp_preaccept_free(ftc__tcp_preacc_t *pa) {
  if (!pa) return;
  ftc__tcp_preaccept_stop(pa);
  for (int i = 0; i < pa->n; i++) close(pa->s[i].fd);
  close(pa->stop_fd);
  ftc__free(pa);
}

/* The first bootstrap takes the sockets a standby acceptor accepted: their
 * callers' hellos answer the nonces it sent. */
void ftc__net_preacc_seed(boot_t *b, ftc__tcp_preacc_t *pa) {
  int64_t now = ftc__now_ns();
  int taken = 0;
  for (int i = 0; i < pa->n; i++) {
    pend_t *p = ftc__net_acc_slot(b);
    if (!p) { /* (cannot happen: the acceptor holds at most as many) */
      close(pa->s[i].fd);
      continue;
    }
    if (p == &b->acc[b->nacc]) b->nacc++;
    memset(p, 0, sizeof(*p));
    p->fd = pa->s[i].fd;
    p->rank = -1;
    p->retry_at = now + SPARE_HELLO_NS;
    memcpy(p->nonce, pa->s[i].nonce, FTC__TCP_NONCE_SIZE);
    p->state = P_WAIT_HELLO;
    taken++;
  }
  pa->n = 0;
  if (taken)
    FTC_INFO(FTC_SUB_NET, "rank %d: %d connection(s) accepted while standby, their handshakes "
             "waiting", b->tp->rank, taken);
}
