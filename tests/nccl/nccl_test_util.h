/*
 * nccl_test_util.h - helpers for the NCCL backend suites: where the test
 * doubles are, views built by hand, a file-based unique-id exchange (the
 * coordinator's role), and ranks as forked processes.
 */
#ifndef FTC_NCCL_TEST_UTIL_H
#define FTC_NCCL_TEST_UTIL_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ftc_time.h"
#include "nccl/nccl_backend.h"

static const char *const test_versions[] = {"2.26.5", "2.27.3", "2.28.9", "2.29.2", "2.32.3"};
#define N_TEST_VERSIONS 5

static inline void double_path(const char *ver, char *buf, size_t len) {
  snprintf(buf, len, "%s/libnccl_double_%s.so", NCCL_DOUBLE_DIR, ver);
}
static inline const char *cudart_double_path(void) {
  return NCCL_DOUBLE_DIR "/libcudart_double.so";
}

/* A view of `n` members: slots[i], ids[i], joined[i]; my_rank set from me. */
static inline ftc__view_t *make_view(uint64_t epoch, int n, const int *slots,
                                     const uint64_t *ids, const uint64_t *joined, int me) {
  ftc__view_t *v = calloc(1, sizeof *v);
  v->epoch = epoch;
  v->size = n;
  v->my_rank = me;
  v->members = calloc((size_t)n, sizeof *v->members);
  for (int i = 0; i < n; i++) {
    v->members[i].rank = i;
    v->members[i].slot = slots[i];
    v->members[i].member_id = ids[i];
    v->members[i].joined_epoch = joined[i];
    snprintf(v->members[i].addr, sizeof v->members[i].addr, "127.0.0.1:%d", 1000 + i);
  }
  v->my_member_id = me >= 0 ? ids[me] : 0;
  return v;
}

static inline void free_view(ftc__view_t *v) {
  if (!v) return;
  free(v->members);
  free(v);
}

/* The unique-id exchange through files in a directory: DIR/blob-<epoch>. */
static inline ftc_status_t file_publish(void *arg, uint64_t epoch, const char *blob) {
  char path[512], tmp[600];
  snprintf(path, sizeof path, "%s/blob-%llu", (const char *)arg, (unsigned long long)epoch);
  snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return FTC_ERR_SYSTEM;
  fputs(blob, f);
  fclose(f);
  return rename(tmp, path) == 0 ? FTC_OK : FTC_ERR_SYSTEM;
}

static inline ftc_status_t file_fetch(void *arg, uint64_t epoch, char *blob, size_t len,
                                      int64_t deadline_ns) {
  char path[512];
  snprintf(path, sizeof path, "%s/blob-%llu", (const char *)arg, (unsigned long long)epoch);
  for (;;) {
    FILE *f = fopen(path, "r");
    if (f) {
      size_t n = fread(blob, 1, len - 1, f);
      fclose(f);
      blob[n] = '\0';
      return FTC_OK;
    }
    if (ftc__now_ns() >= deadline_ns) return FTC_ERR_TIMEOUT;
    usleep(2000);
  }
}

/* A fresh directory under /tmp for one test's files. */
static inline void make_tmpdir(char *buf, size_t len, const char *tag) {
  snprintf(buf, len, "/tmp/ftc-nccl-%s-XXXXXX", tag);
  if (!mkdtemp(buf)) {
    perror("mkdtemp");
    abort();
  }
}

static inline void rm_tmpdir(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* Wait for pid up to timeout_ms; kill it if it is still there. Returns the
 * exit code, 128+signal, or -1 on timeout. */
static inline int wait_child(pid_t pid, int timeout_ms) {
  int64_t deadline = ftc__deadline_ns(timeout_ms);
  for (;;) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (ftc__now_ns() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    usleep(5000);
  }
}

/* Count lines of file that contain every one of the words. */
static inline int count_lines(const char *file, const char *w1, const char *w2) {
  FILE *f = fopen(file, "r");
  if (!f) return 0;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, w1) && (!w2 || strstr(line, w2))) n++;
  fclose(f);
  return n;
}

#endif
