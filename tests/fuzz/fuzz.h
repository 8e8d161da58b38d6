/*
 * fuzz.h - what the fuzz targets share: a check that reports and aborts
 * (so libFuzzer and the regression driver both see it as a crash), in
 * release builds too (NDEBUG leaves it on).
 */
#ifndef FTC_FUZZ_H
#define FTC_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, #cond);   \
      abort();                                                                        \
    }                                                                                 \
  } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
