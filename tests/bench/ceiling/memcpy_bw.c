/*
 * memcpy_bw.c - the memory-copy ceiling of one core: one thread memcpy()s a
 * 64 MiB buffer into another, repeatedly for a fixed time, and reports the
 * bytes copied per second (GB/s, 1e9). A rank on loopback copies every byte
 * at least twice (into and out of the kernel), so this bounds what any
 * transport on this host can do per core.
 *   memcpy_bw [-t SECONDS] [-s BYTES] [--csv]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  double seconds = 2;
  size_t bytes = 64u << 20;
  int csv = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-t") && i + 1 < argc) seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "-s") && i + 1 < argc) bytes = (size_t)atol(argv[++i]);
    else if (!strcmp(argv[i], "--csv")) csv = 1;
    else {
      fprintf(stderr, "usage: %s [-t SECONDS] [-s BYTES] [--csv]\n", argv[0]);
      return 2;
    }
  }
  if (!(seconds > 0) || seconds > 60 || bytes == 0) {
    fprintf(stderr, "memcpy_bw: need 0 < -t <= 60 and -s > 0\n");
    return 2;
  }
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) {
    fprintf(stderr, "memcpy_bw: out of memory\n");
    return 1;
  }
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  memcpy(b, a, bytes); /* warm */
  double t0 = now(), t;
  long reps = 0;
  do {
    memcpy(reps & 1 ? a : b, reps & 1 ? b : a, bytes);
    reps++;
    t = now();
  } while (t - t0 < seconds);
  double gbs = (double)bytes * (double)reps / (t - t0) / 1e9;
  if (csv)
    printf("memcpy,%zu,%.4f\n", bytes, gbs);
  else
    printf("memcpy, one thread, %zu-byte buffers, %ld copies: %.3f GB/s\n", bytes, reps, gbs);
  int rc = a[bytes - 1] == 3 ? 3 : 0; /* never true; keeps the copies observable */
  free(a);
  free(b);
  return rc;
}
