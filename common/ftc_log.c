/*
 * ftc_log.c - the one logger: level and subsystem mask from the environment,
 * one write(2) per line so lines from threads and processes do not interleave.
 */
#include "ftc_log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int ftc__log_level = -1;
unsigned int ftc__log_mask = FTC_SUB_ALL;
/* The process's prefix ("rank 3"): set by whichever communicator came up
 * last while other threads log, so it is copied in and out under its lock. */
static char log_prefix[64];
static pthread_mutex_t log_prefix_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_time; /* FTCOMM_LOG_TIME: 0 none, 1 UTC date and time, 2 seconds since the epoch */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static const struct {
  const char *name;
  unsigned int bit;
} subsys_names[] = {
    {"init", FTC_SUB_INIT},         {"coll", FTC_SUB_COLL},   {"net", FTC_SUB_NET},
    {"coord", FTC_SUB_COORD},       {"recovery", FTC_SUB_RECOVERY},
    {"recorder", FTC_SUB_RECORDER}, {"nccl", FTC_SUB_NCCL},   {"k8s", FTC_SUB_K8S},
    {"ctrl", FTC_SUB_CTRL},         {"run", FTC_SUB_RUN},
};

static const char *level_names[] = {"NONE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

static const char *subsys_name(unsigned int bit) {
  for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
    if (subsys_names[i].bit == bit) return subsys_names[i].name;
  return "misc";
}

int ftc__log_parse_level(const char *s, int *level) {
  if (!s) return -1;
  for (int i = 0; i <= FTC_LOG_TRACE; i++) {
    if (strcasecmp(s, level_names[i]) == 0 || (i == FTC_LOG_WARN && strcasecmp(s, "warning") == 0)) {
      *level = i;
      return 0;
    }
  }
  /* Or its number: decimal digits only. */
  int v = 0;
  const char *p = s;
  for (; *p >= '0' && *p <= '9' && v <= FTC_LOG_TRACE; p++) v = v * 10 + (*p - '0');
  if (p == s || *p || v > FTC_LOG_TRACE) return -1;
  *level = v;
  return 0;
}

int ftc__log_parse_subsys(const char *s, unsigned int *mask, char *bad, size_t badlen) {
  if (!s) return -1;
  int exclude = (*s == '^'), named = 0;
  unsigned int m = 0;
  for (const char *tok = s + exclude; *tok;) {
    size_t n = strcspn(tok, ",");
    int known = n == 0; /* an empty item (",,", a trailing ",") names nothing */
    if (n == 3 && !strncasecmp(tok, "all", 3)) m = FTC_SUB_ALL, known = 1;
    for (size_t i = 0; !known && i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
      if (strlen(subsys_names[i].name) == n && !strncasecmp(tok, subsys_names[i].name, n))
        m |= subsys_names[i].bit, known = 1;
    if (!known) {
      if (badlen) snprintf(bad, badlen, "%.*s", (int)(n > 64 ? 64 : n), tok);
      return -1;
    }
    named += n > 0;
    tok += n + (tok[n] == ',');
  }
  /* A list that names nothing ("," or "") would turn off every line,
   * errors too: refused, with an empty bad. ("^" alone excludes nothing.) */
  if (!named && !exclude) {
    if (badlen) bad[0] = '\0';
    return -1;
  }
  *mask = exclude ? ~m : m;
  return 0;
}

static void log_init_once(void) {
  int level = FTC_LOG_WARN;
  const char *l = getenv("FTCOMM_LOG_LEVEL");
  if (l && *l && ftc__log_parse_level(l, &level) != 0)
    fprintf(stderr,
            "ftcomm WARN init FTCOMM_LOG_LEVEL=%.200s is not one of none, error, warn, "
            "info, debug, trace (or 0 to 5); using warn\n",
            l);
  const char *s = getenv("FTCOMM_LOG_SUBSYS");
  char bad[80];
  unsigned int mask;
  if (s && *s) {
    if (ftc__log_parse_subsys(s, &mask, bad, sizeof(bad)) == 0)
      ftc__log_mask = mask;
    else if (!bad[0])
      fprintf(stderr,
              "ftcomm WARN init FTCOMM_LOG_SUBSYS=%.200s names no subsystem; name some of init, "
              "coll, net, coord, recovery, recorder, nccl, k8s, ctrl, run, all; logging every "
              "subsystem\n",
              s);
    else
      fprintf(stderr,
              "ftcomm WARN init FTCOMM_LOG_SUBSYS=%.200s: \"%s\" is not one of init, coll, net, "
              "coord, recovery, recorder, nccl, k8s, ctrl, run, all; logging every subsystem\n",
              s, bad);
  }
  const char *t = getenv("FTCOMM_LOG_TIME");
  if (t && *t) {
    if (!strcmp(t, "0") || !strcasecmp(t, "none")) log_time = 0;
    else if (!strcmp(t, "1") || !strcasecmp(t, "utc")) log_time = 1;
    else if (!strcasecmp(t, "epoch")) log_time = 2;
    else
      fprintf(stderr, "ftcomm WARN init FTCOMM_LOG_TIME=%.200s is not one of none (0), utc (1), epoch; "
                      "logging without a time\n", t);
  }
  __atomic_store_n(&ftc__log_level, level, __ATOMIC_RELEASE);
}

/* The time prefix of a line (FTCOMM_LOG_TIME), microseconds of CLOCK_REALTIME:
 * comparable across the processes and hosts of a job as far as their clocks agree. */
static int time_prefix(char *buf, size_t len) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (log_time == 2)
    return snprintf(buf, len, "%lld.%06ld ", (long long)ts.tv_sec, ts.tv_nsec / 1000);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  return snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
}

void ftc__log_init(void) { pthread_once(&log_once, log_init_once); }

void ftc__log_set_prefix(const char *prefix) {
  pthread_mutex_lock(&log_prefix_lock);
  snprintf(log_prefix, sizeof(log_prefix), "%s", prefix ? prefix : "");
  pthread_mutex_unlock(&log_prefix_lock);
}

void ftc__log_write(int level, unsigned int subsys, const char *file, int line,
                    const char *fmt, ...) {
  char buf[1024];
  int n;
  if (level < FTC_LOG_ERROR || level > FTC_LOG_TRACE) level = FTC_LOG_ERROR;
  int t = log_time ? time_prefix(buf, 64) : 0;
  if (t < 0 || t >= 64) t = 0;
  char prefix[sizeof(log_prefix)];
  pthread_mutex_lock(&log_prefix_lock);
  memcpy(prefix, log_prefix, sizeof(prefix));
  pthread_mutex_unlock(&log_prefix_lock);
  if (prefix[0])
    n = snprintf(buf + t, sizeof(buf) - (size_t)t, "ftcomm %s %s [%s] ", level_names[level],
                 subsys_name(subsys), prefix);
  else
    n = snprintf(buf + t, sizeof(buf) - (size_t)t, "ftcomm %s %s ", level_names[level],
                 subsys_name(subsys));
  if (n < 0 || (size_t)(n + t) >= sizeof(buf)) n = 0;
  n += t;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
  va_end(ap);
  if (m < 0) m = 0;
  size_t len = (size_t)n + (size_t)m;
  if (len > sizeof(buf) - 2) len = sizeof(buf) - 2;
  if (ftc__log_level >= FTC_LOG_DEBUG) {
    int k = snprintf(buf + len, sizeof(buf) - len, " (%s:%d)", file, line);
    if (k > 0) len += (size_t)k;
    if (len > sizeof(buf) - 2) len = sizeof(buf) - 2;
  }
  buf[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, buf, len);
  (void)w;
}
