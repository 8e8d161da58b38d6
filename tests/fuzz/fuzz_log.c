/*
 * fuzz_log.c - the parsers of FTCOMM_LOG_LEVEL and FTCOMM_LOG_SUBSYS
 * (common/ftc_log.c, ftc__log_parse_level and ftc__log_parse_subsys), read
 * by every ftcomm process at its first log line.
 *
 * Input: the level value, a newline, the subsystem value (bytes up to the
 * first NUL).
 *
 * Checks, against an independent reading here: a level is accepted exactly
 * when it is a level's name in any case, "warning", or decimal digits of 0
 * to 5, and then gives that level; a subsystem list exactly when each comma
 * item is a known name or "all" (any case; empty items aside), and then
 * gives their mask (its complement after a leading '^'); a list that names
 * nothing without '^' ("", ",") is refused with no item; a refusal names an
 * item of the value that is not a name, and leaves the result untouched.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ftc_log.h"
#include "fuzz.h"

static const char *const names[] = {"init", "coll", "net", "coord", "recovery",
                                    "recorder", "nccl", "k8s", "ctrl", "run"};
static const char *const levels[] = {"none", "error", "warn", "info", "debug", "trace"};

static int want_level(const char *s) {
  for (int i = 0; i < 6; i++)
    if (!strcasecmp(s, levels[i])) return i;
  if (!strcasecmp(s, "warning")) return FTC_LOG_WARN;
  size_t n = strspn(s, "0123456789");
  if (n == 0 || s[n]) return -1;
  while (*s == '0' && s[1]) s++; /* leading zeros */
  return strlen(s) == 1 && *s <= '5' ? *s - '0' : -1;
}

/* 1 and *mask, or 0 and the first unknown item in bad. */
static int want_subsys(const char *s, unsigned int *mask, char *bad, size_t badlen) {
  int exclude = *s == '^', named = 0;
  unsigned int m = 0;
  char *copy = strdup(s + exclude);
  FUZZ_CHECK(copy);
  int ok = 1;
  /* strsep, unlike strtok, keeps empty items: they name nothing */
  for (char *p = copy, *tok; ok && (tok = strsep(&p, ","));) {
    if (!*tok) continue;
    named++;
    unsigned int bit = 0;
    if (!strcasecmp(tok, "all")) bit = FTC_SUB_ALL;
    for (unsigned int i = 0; i < sizeof(names) / sizeof(names[0]); i++)
      if (!strcasecmp(tok, names[i])) bit = 1u << i;
    if (!bit) {
      snprintf(bad, badlen, "%.64s", tok);
      ok = 0;
    }
    m |= bit;
  }
  free(copy);
  if (ok && !named && !exclude) { /* names nothing: refused, no item to name */
    bad[0] = '\0';
    ok = 0;
  }
  *mask = exclude ? ~m : m;
  return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  char *nl = strchr(text, '\n');
  const char *level_s = text, *subsys_s = nl ? nl + 1 : "";
  if (nl) *nl = '\0';

  int level = 99, want = want_level(level_s);
  int rc = ftc__log_parse_level(level_s, &level);
  if ((rc == 0) != (want >= 0)) {
    fprintf(stderr, "FTCOMM_LOG_LEVEL=\"%s\": parser %d, grammar %d\n", level_s, rc, want);
    FUZZ_CHECK(!"the level parser reads the documented values");
  }
  FUZZ_CHECK(rc == 0 ? level == want : level == 99);

  unsigned int mask = 0x5a5a5a5au, wmask = 0;
  char bad[80] = "", wbad[80] = "";
  rc = ftc__log_parse_subsys(subsys_s, &mask, bad, sizeof(bad));
  int ok = want_subsys(subsys_s, &wmask, wbad, sizeof(wbad));
  if ((rc == 0) != ok) {
    fprintf(stderr, "FTCOMM_LOG_SUBSYS=\"%s\": parser %d, grammar %d\n", subsys_s, rc, ok);
    FUZZ_CHECK(!"the subsystem parser reads the documented names");
  }
  if (rc == 0) {
    FUZZ_CHECK(mask == wmask);
  } else {
    FUZZ_CHECK(mask == 0x5a5a5a5au);
    FUZZ_CHECK(!strcmp(bad, wbad)); /* the first item that is not a name */
  }
  free(text);
  return 0;
}
