/*
 * driver.c - runs fuzz targets without libFuzzer: each file of a corpus
 * goes through LLVMFuzzerTestOneInput once, so the targets build with gcc
 * and run in `make test` (under ASan and UBSan) as regression tests over
 * the checked-in corpus, crashers included.
 *
 *   fuzz_X [FILE|DIR]...   no argument: the target's corpus in the source
 *                          tree (tests/fuzz/corpus/<target>, from the
 *                          repository root, where tests/run.sh runs it)
 *
 * A sanitizer report (an allocation over 2 GiB included), a failed check of
 * the target or an input that runs over 60 s (a hang) ends the run with a non-zero status; so does a corpus
 * with no files (a test of nothing).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#ifndef FUZZ_CORPUS
#error "build with -DFUZZ_CORPUS=\"tests/fuzz/corpus/<target>\""
#endif

/* As libFuzzer's -malloc_limit_mb: an allocation over 2 GiB is a report
 * (an input that makes a parser size its tables by a number in it), not a
 * machine brought to a crawl. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "max_allocation_size_mb=2048"; }

/* An input that takes longer than this is a hang (libFuzzer's -timeout). */
#define INPUT_TIMEOUT_S 60
static const char *current;

static void on_alarm(int sig) {
  (void)sig;
  static const char m1[] = "fuzz driver: hang: over 60 s on ";
  ssize_t w = write(2, m1, sizeof(m1) - 1);
  w = write(2, current, strlen(current));
  w = write(2, "\n", 1);
  (void)w;
  _exit(1);
}

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz driver: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (!buf) break;
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (n < cap) break;
    uint8_t *b = realloc(buf, cap * 2);
    if (!b) { free(buf); buf = NULL; break; }
    buf = b, cap *= 2;
  }
  int err = ferror(f);
  fclose(f);
  if (!buf || err) {
    fprintf(stderr, "fuzz driver: cannot read %s\n", path);
    free(buf);
    return -1;
  }
  /* Exactly n bytes, so that ASan sees a read past the input. */
  uint8_t *exact = malloc(n ? n : 1);
  if (!exact) { free(buf); return -1; }
  memcpy(exact, buf, n);
  free(buf);
  fprintf(stderr, "fuzz driver: %s (%zu bytes)\n", path, n);
  current = path;
  alarm(INPUT_TIMEOUT_S);
  LLVMFuzzerTestOneInput(exact, n);
  alarm(0);
  free(exact);
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Files of dir, in name order (the run is the same everywhere). */
static int run_dir(const char *dir, int *count) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "fuzz driver: cannot open %s: %s\n", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t nn = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (nn == cap) {
      cap = cap ? cap * 2 : 64;
      char **nb = realloc(names, cap * sizeof(*names));
      if (!nb) break;
      names = nb;
    }
    names[nn++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, nn, sizeof(*names), by_name);
  int rc = 0;
  for (size_t i = 0; i < nn; i++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
      if (run_file(path) < 0) rc = -1;
      else (*count)++;
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  signal(SIGALRM, on_alarm);
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  static char *dflt[] = {NULL, FUZZ_CORPUS, NULL};
  if (argc < 2) {
    dflt[0] = argv[0];
    argv = dflt;
    argc = 2;
  }
  int count = 0, rc = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "fuzz driver: %s: %s\n", argv[i], strerror(errno));
      rc = 1;
    } else if (S_ISDIR(st.st_mode)) {
      if (run_dir(argv[i], &count) < 0) rc = 1;
    } else if (run_file(argv[i]) < 0) {
      rc = 1;
    } else {
      count++;
    }
  }
  if (count == 0) {
    fprintf(stderr, "fuzz driver: no input files: a corpus must not be empty\n");
    return 1;
  }
  printf("%s: %d inputs passed\n", argv[0], count);
  return rc;
}
