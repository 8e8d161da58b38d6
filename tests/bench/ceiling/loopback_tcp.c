/*
 * loopback_tcp.c - the ceiling any TCP collective on this host can reach: two
 * processes joined by one loopback TCP connection stream large buffers both
 * ways at once for a fixed time, and the rate each side received is reported
 * in GB/s per direction. A ring allreduce moves data the same way: every rank
 * sends to one neighbour while it receives from the other. Two ways to drive
 * the socket are timed, and the better one is the ceiling: a sender and a
 * receiver thread per side, or one thread per side multiplexing both
 * directions with poll() as a single-threaded rank would (4 MiB socket
 * buffers, TCP_NODELAY, in both).
 *   loopback_tcp [-t SECONDS] [-s CHUNK_BYTES] [-m threads|poll|both] [--csv]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct side {
  int fd;
  double seconds;
  size_t chunk;
  uint64_t received;
  double recv_secs;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *sender(void *arg) {
  struct side *s = arg;
  char *buf = malloc(s->chunk);
  if (!buf) return NULL;
  memset(buf, 0x5a, s->chunk);
  double end = now() + s->seconds;
  while (now() < end) {
    size_t off = 0;
    while (off < s->chunk) {
      ssize_t n = send(s->fd, buf + off, s->chunk - off, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        goto out;
      }
      off += (size_t)n;
    }
  }
out:
  shutdown(s->fd, SHUT_WR);
  free(buf);
  return NULL;
}

static void *receiver(void *arg) {
  struct side *s = arg;
  char *buf = malloc(s->chunk);
  if (!buf) return NULL;
  double first = 0, last = 0;
  for (;;) {
    ssize_t n = recv(s->fd, buf, s->chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    last = now();
    if (!s->received) first = last;
    s->received += (uint64_t)n;
  }
  s->recv_secs = last - first;
  free(buf);
  return NULL;
}

/* One thread, both directions, nonblocking sends and receives under poll(). */
static void stream_poll(struct side *s) {
  char *sbuf = malloc(s->chunk), *rbuf = malloc(s->chunk);
  if (!sbuf || !rbuf) goto out;
  memset(sbuf, 0x5a, s->chunk);
  double end = now() + s->seconds, first = 0, last = 0;
  int sending = 1, receiving = 1;
  size_t off = 0;
  while (sending || receiving) {
    struct pollfd p = {s->fd, (short)((sending ? POLLOUT : 0) | (receiving ? POLLIN : 0)), 0};
    if (poll(&p, 1, 1000) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (sending && (p.revents & (POLLOUT | POLLERR))) {
      ssize_t n = send(s->fd, sbuf + off, s->chunk - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) off = (off + (size_t)n) % s->chunk;
      else if (n < 0 && errno != EAGAIN && errno != EINTR) sending = 0;
      if (now() >= end) {
        shutdown(s->fd, SHUT_WR);
        sending = 0;
      }
    }
    if (receiving && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = recv(s->fd, rbuf, s->chunk, MSG_DONTWAIT);
      if (n > 0) {
        last = now();
        if (!s->received) first = last;
        s->received += (uint64_t)n;
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        receiving = 0;
      }
    }
  }
  s->recv_secs = last - first;
out:
  free(sbuf);
  free(rbuf);
}

/* Stream both ways on fd; returns this side's receive rate in bytes/s. */
static double stream(int fd, double seconds, size_t chunk, int use_poll) {
  int sz = 4 << 20, one = 1;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct side s = {fd, seconds, chunk, 0, 0};
  if (use_poll) {
    stream_poll(&s);
    return s.recv_secs > 0 ? (double)s.received / s.recv_secs : 0;
  }
  pthread_t ts, tr;
  if (pthread_create(&tr, NULL, receiver, &s) || pthread_create(&ts, NULL, sender, &s)) return -1;
  pthread_join(ts, NULL);
  pthread_join(tr, NULL);
  return s.recv_secs > 0 ? (double)s.received / s.recv_secs : 0;
}

/* One measurement: this process and a forked peer stream both ways; the two
 * receive rates come back in rates[]. Returns 0 on success. */
static int measure(double seconds, size_t chunk, int use_poll, double rates[2]) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof(addr);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) || listen(lfd, 1) ||
      getsockname(lfd, (struct sockaddr *)&addr, &alen)) {
    perror("loopback_tcp: listen");
    return -1;
  }
  int pipefd[2];
  if (pipe(pipefd)) {
    perror("loopback_tcp: pipe");
    close(lfd);
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("loopback_tcp: fork");
    return -1;
  }
  if (pid == 0) {
    close(lfd);
    close(pipefd[0]);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr))) _exit(1);
    double rate = stream(fd, seconds, chunk, use_poll);
    _exit(write(pipefd[1], &rate, sizeof(rate)) == sizeof(rate) ? 0 : 1);
  }
  close(pipefd[1]);
  int rc = -1, fd = accept(lfd, NULL, NULL);
  close(lfd);
  if (fd < 0) {
    perror("loopback_tcp: accept");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(pipefd[0]);
    return -1;
  }
  rates[0] = stream(fd, seconds, chunk, use_poll);
  int status;
  if (read(pipefd[0], &rates[1], sizeof(double)) == sizeof(double) && waitpid(pid, &status, 0) == pid &&
      WIFEXITED(status) && WEXITSTATUS(status) == 0)
    rc = 0;
  else
    fprintf(stderr, "loopback_tcp: the peer process failed\n");
  close(fd);
  close(pipefd[0]);
  return rc;
}

int main(int argc, char **argv) {
  double seconds = 3;
  size_t chunk = 1 << 20;
  int csv = 0, modes = 3; /* bit 0: threads, bit 1: poll */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-t") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "-s") && i + 1 < argc) chunk = (size_t)atol(argv[++i]);
    else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
      i++;
      modes = !strcmp(argv[i], "threads") ? 1 : !strcmp(argv[i], "poll") ? 2 : !strcmp(argv[i], "both") ? 3 : 0;
    } else if (!strcmp(argv[i], "--csv")) csv = 1;
    else modes = 0;
    if (!modes) break;
  }
  if (!(seconds > 0) || seconds > 60 || chunk == 0 || !modes) {
    fprintf(stderr, "usage: %s [-t SECONDS<=60] [-s CHUNK_BYTES] [-m threads|poll|both] [--csv]\n",
            argv[0]);
    return 2;
  }
  alarm((unsigned)(seconds * 2) + 30); /* bounded even if the peer vanishes */
  static const char *const names[2] = {"threads", "poll"};
  double best[2] = {0, 0};
  const char *best_mode = NULL;
  for (int m = 0; m < 2; m++) {
    if (!(modes & (1 << m))) continue;
    double r[2];
    if (measure(seconds, chunk, m, r)) return 1;
    if (!csv)
      printf("loopback TCP, both ways at once, %s, %zu-byte writes, %.1f s: %.3f and %.3f GB/s, "
             "%.3f GB/s per direction\n",
             names[m], chunk, seconds, r[0] / 1e9, r[1] / 1e9, (r[0] + r[1]) / 2e9);
    if (!best_mode || r[0] + r[1] > best[0] + best[1]) {
      best[0] = r[0];
      best[1] = r[1];
      best_mode = names[m];
    }
  }
  if (csv)
    printf("loopback_tcp,%.4f,%.4f,%.4f,%s\n", best[0] / 1e9, best[1] / 1e9,
           (best[0] + best[1]) / 2e9, best_mode);
  return 0;
}
