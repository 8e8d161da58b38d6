/*
 * fuzz_fault.c - the FTCOMM_FAULT parser (runtime/src/core/fault.c,
 * ftc__fault_parse): a list that ftcomm-run --inject and test scripts
 * write, and a person types.
 *
 * Input: the value, bytes up to the first NUL.
 *
 * Checks: the value is accepted exactly when every comma-separated item
 * (a trailing comma aside) is one of the documented forms, NAME@N, NAME:N,
 * delay:MS@SEQ or jkill, with N in decimal digits up to FTC__FAULT_MAX
 * (and at least 1 after '@': steps, collectives and recoveries count from 1), as
 * an independent reading here decides; an accepted value arms what that
 * reading found and reads back the same from its canonical form; a refused
 * one names an item of it that is refused alone too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "fuzz.h"

/* [s, end) is decimal digits, at most FTC__FAULT_MAX: *v. */
static int digits(const char *s, const char *end, int64_t *v) {
  if (s >= end) return 0;
  *v = 0;
  for (; s < end; s++) {
    if (*s < '0' || *s > '9' || *v > FTC__FAULT_MAX / 10) return 0;
    *v = *v * 10 + (*s - '0');
  }
  return *v <= FTC__FAULT_MAX;
}

/* The independent reading of one item into f: 1 if it is one. */
static int item(const char *s, const char *end, ftc__fault_spec_t *f) {
  struct {
    const char *prefix;
    int64_t *field;
  } at[] = {{"kill@", &f->kill_step},  {"stop@", &f->stop_step},   {"drop@", &f->drop_seq},
            {"rkill@", &f->rkill},     {"blink@", &f->blink_step}, {"giveup@", &f->giveup_seq},
            {"movehold@", &f->move_hold},
            {"slow:", &f->slow_ms},    {"lateview:", &f->late_view_ms},
            {"dumpwrite:", &f->dump_write_ms}};
  size_t n = (size_t)(end - s);
  if (n == 5 && !memcmp(s, "jkill", 5)) return f->jkill = 1, 1;
  for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
    size_t pl = strlen(at[i].prefix);
    if (n > pl && !memcmp(s, at[i].prefix, pl))
      return digits(s + pl, end, at[i].field) && (at[i].prefix[pl - 1] != '@' || *at[i].field >= 1);
  }
  if (n > 6 && !memcmp(s, "delay:", 6)) {
    const char *a = memchr(s + 6, '@', n - 6);
    return a && digits(s + 6, a, &f->delay_ms) && digits(a + 1, end, &f->delay_seq) &&
           f->delay_seq >= 1;
  }
  return 0;
}

static int oracle(const char *spec, ftc__fault_spec_t *f) {
  *f = (ftc__fault_spec_t)FTC__FAULT_SPEC_INIT;
  for (const char *s = spec; *s;) {
    const char *end = strchr(s, ',');
    if (!end) end = s + strlen(s);
    if (!item(s, end, f)) return 0;
    s = *end ? end + 1 : end;
  }
  return 1;
}

/* The canonical form of f: its items in a fixed order. */
static void canonical(const ftc__fault_spec_t *f, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  struct {
    const char *fmt;
    int64_t v, unset;
  } items[] = {{"kill@%lld", f->kill_step, -1},     {"stop@%lld", f->stop_step, -1},
               {"slow:%lld", f->slow_ms, 0},        {"drop@%lld", f->drop_seq, -1},
               {"rkill@%lld", f->rkill, -1},        {"blink@%lld", f->blink_step, -1},
               {"giveup@%lld", f->giveup_seq, -1},  {"lateview:%lld", f->late_view_ms, 0},
               {"dumpwrite:%lld", f->dump_write_ms, 0}, {"movehold@%lld", f->move_hold, -1}};
  for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++) {
    if (items[i].v == items[i].unset) continue;
    if (n) n += (size_t)snprintf(buf + n, len - n, ",");
    n += (size_t)snprintf(buf + n, len - n, items[i].fmt, (long long)items[i].v);
  }
  if (f->jkill) n += (size_t)snprintf(buf + n, len - n, "%sjkill", n ? "," : "");
  if (f->delay_seq >= 0 || f->delay_ms)
    n += (size_t)snprintf(buf + n, len - n, "%sdelay:%lld@%lld", n ? "," : "", (long long)f->delay_ms,
                          (long long)f->delay_seq);
  FUZZ_CHECK(n < len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *spec = malloc(size + 1);
  if (!spec) return 0;
  memcpy(spec, data, size);
  spec[size] = '\0';
  ftc__fault_spec_t got = FTC__FAULT_SPEC_INIT, want, again = FTC__FAULT_SPEC_INIT;
  const char *bad = NULL;
  int badlen = -1;
  int rc = ftc__fault_parse(spec, &got, &bad, &badlen);
  int ok = oracle(spec, &want);
  if ((rc == 0) != ok) {
    fprintf(stderr, "FTCOMM_FAULT=\"%s\": the parser %s it, the grammar %s\n", spec,
            rc == 0 ? "accepts" : "refuses", ok ? "accepts" : "refuses");
    FUZZ_CHECK(!"the parser reads the documented grammar");
  }
  if (rc == 0) {
    FUZZ_CHECK(!memcmp(&got, &want, sizeof(got)));
    char buf[512];
    canonical(&got, buf, sizeof(buf));
    FUZZ_CHECK(ftc__fault_parse(buf, &again, &bad, &badlen) == 0);
    FUZZ_CHECK(!memcmp(&got, &again, sizeof(got)));
  } else {
    FUZZ_CHECK(bad >= spec && badlen >= 0 && bad + badlen <= spec + strlen(spec));
    FUZZ_CHECK(!memcmp(&got, &again, sizeof(got))); /* untouched */
    char *alone = strndup(bad, (size_t)badlen); /* "" for an empty item: a value of its own */
    FUZZ_CHECK(alone);
    ftc__fault_spec_t f;
    FUZZ_CHECK(!*alone || ftc__fault_parse(alone, &f, &bad, &badlen) != 0);
    free(alone);
  }
  free(spec);
  return 0;
}
