/*
 * harness.c - forks the ranks of a test world and reaps them; see harness.h.
 */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_param.h"
#include "tcp/tcp.h"

void harness_config(ftc_config_t *cfg, int timeout_ms, int connect_timeout_ms) {
  ftc_config_t c = FTC_CONFIG_INITIALIZER;
  c.token = HARNESS_TOKEN;
  c.job = "unit";
  c.timeout_ms = timeout_ms > 0 ? timeout_ms : 20000;
  c.connect_timeout_ms = connect_timeout_ms > 0 ? connect_timeout_ms : 10000;
  c.recorder_entries = 64;
  c.backend = "tcp";
  c.bind_host = "127.0.0.1";
  *cfg = c;
}

void harness_hello(struct ftc__tcp_hello *h, uint16_t kind, uint64_t epoch, uint64_t member_id,
                   uint32_t rank, uint32_t size) {
  ftc__tcp_cfg_t cfg = {0};
  if (ftc__tcp_cfg_from_env(&cfg) != FTC_OK) {
    fprintf(stderr, "harness: %s\n", ftc_last_error());
    abort();
  }
  *h = (ftc__tcp_hello_t){kind, epoch, member_id, rank, size, {0}};
  ftc__tcp_wire_of(&cfg, &h->wire);
}

ftc__view_t *harness_view(int n, int my_rank, uint64_t epoch, int *fds) {
  ftc__view_t *v = calloc(1, sizeof(*v));
  v->members = calloc((size_t)n, sizeof(*v->members));
  v->epoch = epoch;
  v->size = n;
  v->my_rank = my_rank;
  v->my_member_id = 1000 + (uint64_t)my_rank;
  for (int r = 0; r < n; r++) {
    v->members[r].rank = r;
    v->members[r].slot = r;
    v->members[r].member_id = 1000 + (uint64_t)r;
    v->members[r].joined_epoch = 1;
    if (fds) {
      if (ftc__tcp_listen("127.0.0.1", NULL, AF_UNSPEC, NULL, 0, &fds[r], v->members[r].addr,
                          sizeof(v->members[r].addr)) != FTC_OK) {
        fprintf(stderr, "harness: listen failed: %s\n", ftc_last_error());
        abort();
      }
    }
  }
  return v;
}

void harness_view_free(ftc__view_t *v) {
  if (!v) return;
  free(v->members);
  free(v);
}

static int rank_main(int rank, int n, ftc__view_t *view, int *fds, rank_body_fn body, void *arg,
                     const harness_opts_t *o) {
  for (int r = 0; r < n; r++)
    if (r != rank) close(fds[r]);
  for (int i = 0; i < 8 && o->env[i]; i++) putenv((char *)o->env[i]);
  for (int i = 0; rank < 4 && i < 2 && o->rank_env[rank][i]; i++) putenv((char *)o->rank_env[rank][i]);
  ftc__param_reset();
  view->my_rank = rank;
  view->my_member_id = view->members[rank].member_id;
  ftc_config_t cfg;
  harness_config(&cfg, o->timeout_ms, o->connect_timeout_ms);
  ftc_comm_t *comm = NULL;
  ftc_status_t st = ftc__comm_create_from_view(&cfg, view, fds[rank], &comm);
  if (st != FTC_OK && o->create_failed) return o->create_failed(st, ftc_last_error(), rank, n, arg);
  if (st != FTC_OK) {
    fprintf(stderr, "rank %d: communicator creation failed: %s: %s\n", rank, ftc_strerror(st),
            ftc_last_error());
    return 2;
  }
  int rc = body(comm, rank, n, arg);
  ftc_comm_destroy(comm);
  return rc;
}

int harness_run(int n, rank_body_fn body, void *arg, const harness_opts_t *opts) {
  harness_opts_t o = {0};
  if (opts) o = *opts;
  int limit = o.time_limit_s > 0 ? o.time_limit_s : 60;
  int *fds = calloc((size_t)n, sizeof(int));
  pid_t *pids = calloc((size_t)n, sizeof(pid_t));
  ftc__view_t *view = harness_view(n, 0, 1, fds);
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) { /* exit: leak checks run, so free what the parent allocated first */
      int rc = rank_main(r, n, view, fds, body, arg, &o);
      harness_view_free(view);
      free(pids);
      free(fds);
      exit(rc);
    }
  }
  for (int r = 0; r < n; r++) close(fds[r]);
  int failed = 0, left = n;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (left > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < n; r++) {
        if (pids[r] != p) continue;
        pids[r] = 0;
        left--;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          failed++;
          if (WIFEXITED(status))
            fprintf(stderr, "harness: rank %d of %d exited with %d\n", r, n, WEXITSTATUS(status));
          else
            fprintf(stderr, "harness: rank %d of %d died of signal %d\n", r, n, WTERMSIG(status));
        }
      }
      continue;
    }
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > limit) {
      for (int r = 0; r < n; r++)
        if (pids[r] > 0) {
          fprintf(stderr, "harness: rank %d of %d still running after %d s; killed\n", r, n, limit);
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          failed++;
        }
      break;
    }
    usleep(2000);
  }
  harness_view_free(view);
  free(pids);
  free(fds);
  return failed;
}

int harness_dial(const char *addr, int timeout_s) {
  char host[128];
  snprintf(host, sizeof(host), "%s", addr);
  char *colon = strrchr(host, ':');
  if (!colon) return -1;
  *colon = '\0';
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
  if (inet_pton(AF_INET, host, &sin.sin_addr) != 1) return -1;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct timeval tv = {timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int harness_read_full(int fd, void *buf, size_t n) {
  size_t have = 0;
  while (have < n) {
    ssize_t r = recv(fd, (char *)buf + have, n - have, 0);
    if (r <= 0) return -1;
    have += (size_t)r;
  }
  return 0;
}
