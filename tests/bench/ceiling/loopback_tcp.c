/*
 * loopback_tcp.c - the ceiling any TCP collective on this host can reach: two
 * processes joined by one loopback TCP connection stream large buffers both
 * ways at once (a sender and a receiver thread on each side, 4 MiB socket
 * buffers) for a fixed time, and the rate each side received is reported in
 * GB/s per direction. A ring allreduce moves data the same way: every rank
 * sends to one neighbour while it receives from the other.
 *   loopback_tcp [-t SECONDS] [-s CHUNK_BYTES] [--csv]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

/* Stream both ways on fd; returns this side's receive rate in bytes/s. */
static double stream(int fd, double seconds, size_t chunk) {
  int sz = 4 << 20, one = 1;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct side s = {fd, seconds, chunk, 0, 0};
  pthread_t ts, tr;
  if (pthread_create(&tr, NULL, receiver, &s) || pthread_create(&ts, NULL, sender, &s)) return -1;
  pthread_join(ts, NULL);
  pthread_join(tr, NULL);
  return s.recv_secs > 0 ? (double)s.received / s.recv_secs : 0;
}

int main(int argc, char **argv) {
  double seconds = 3;
  size_t chunk = 1 << 20;
  int csv = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-t") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "-s") && i + 1 < argc) chunk = (size_t)atol(argv[++i]);
    else if (!strcmp(argv[i], "--csv")) csv = 1;
    else {
      fprintf(stderr, "usage: %s [-t SECONDS] [-s CHUNK_BYTES] [--csv]\n", argv[0]);
      return 2;
    }
  }
  if (!(seconds > 0) || seconds > 60 || chunk == 0) {
    fprintf(stderr, "loopback_tcp: need 0 < -t <= 60 and -s > 0\n");
    return 2;
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof(addr);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) || listen(lfd, 1) ||
      getsockname(lfd, (struct sockaddr *)&addr, &alen)) {
    perror("loopback_tcp: listen");
    return 1;
  }
  int pipefd[2];
  if (pipe(pipefd)) {
    perror("loopback_tcp: pipe");
    return 1;
  }
  alarm((unsigned)seconds + 30); /* bounded even if the peer vanishes */
  pid_t pid = fork();
  if (pid < 0) {
    perror("loopback_tcp: fork");
    return 1;
  }
  if (pid == 0) {
    close(lfd);
    close(pipefd[0]);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr))) _exit(1);
    double rate = stream(fd, seconds, chunk);
    _exit(write(pipefd[1], &rate, sizeof(rate)) == sizeof(rate) ? 0 : 1);
  }
  close(pipefd[1]);
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0) {
    perror("loopback_tcp: accept");
    kill(pid, SIGKILL);
    return 1;
  }
  double mine = stream(fd, seconds, chunk), theirs = 0;
  int status;
  if (read(pipefd[0], &theirs, sizeof(theirs)) != sizeof(theirs) || waitpid(pid, &status, 0) < 0 ||
      !WIFEXITED(status) || WEXITSTATUS(status)) {
    fprintf(stderr, "loopback_tcp: the peer process failed\n");
    return 1;
  }
  double per_dir = (mine + theirs) / 2 / 1e9;
  if (csv)
    printf("loopback_tcp,%.4f,%.4f,%.4f\n", mine / 1e9, theirs / 1e9, per_dir);
  else
    printf("loopback TCP, both ways at once, %zu-byte writes, %.1f s: %.3f and %.3f GB/s, "
           "%.3f GB/s per direction\n",
           chunk, seconds, mine / 1e9, theirs / 1e9, per_dir);
  return 0;
}
