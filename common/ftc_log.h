/*
 * ftc_log.h - logging for every part of ftcomm.
 *
 * A message has a level and a subsystem. FTCOMM_LOG_LEVEL (error, warn, info,
 * debug, trace; default warn) and FTCOMM_LOG_SUBSYS (comma list of subsystem
 * names, or "all"; a leading '^' excludes) are read once. Lines go to stderr
 * as "ftcomm <LEVEL> <subsys> [prefix] message". Nothing is printed on a hot
 * path unless debug or trace is enabled; the level test is one load.
 */
#ifndef FTC_LOG_H
#define FTC_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum ftc_log_level {
  FTC_LOG_NONE = 0,
  FTC_LOG_ERROR = 1,
  FTC_LOG_WARN = 2,
  FTC_LOG_INFO = 3,
  FTC_LOG_DEBUG = 4,
  FTC_LOG_TRACE = 5,
};

enum ftc_log_subsys {
  FTC_SUB_INIT = 1u << 0,
  FTC_SUB_COLL = 1u << 1,
  FTC_SUB_NET = 1u << 2,
  FTC_SUB_COORD = 1u << 3,
  FTC_SUB_RECOVERY = 1u << 4,
  FTC_SUB_RECORDER = 1u << 5,
  FTC_SUB_NCCL = 1u << 6,
  FTC_SUB_K8S = 1u << 7,
  FTC_SUB_CTRL = 1u << 8,
  FTC_SUB_RUN = 1u << 9,
  FTC_SUB_ALL = 0xffffffffu,
};

extern int ftc__log_level;           /* resolved level; -1 until first use */
extern unsigned int ftc__log_mask;   /* enabled subsystems */

void ftc__log_init(void);
/* The parsers of FTCOMM_LOG_LEVEL (a level's name, any case, "warning", or
 * its number 0 to 5) and FTCOMM_LOG_SUBSYS (a comma list of subsystem names
 * or "all", any case; a leading '^' excludes them): 0 with the result, or
 * -1 (and the first name that is not one in bad, badlen > 0) with it
 * untouched. */
int ftc__log_parse_level(const char *s, int *level);
int ftc__log_parse_subsys(const char *s, unsigned int *mask, char *bad, size_t badlen);
void ftc__log_set_prefix(const char *prefix); /* e.g. "rank 3"; copied */
void ftc__log_write(int level, unsigned int subsys, const char *file, int line,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static inline int ftc__log_enabled(int level, unsigned int subsys) {
  /* acquire: the mask is written before the level is published */
  int l = __atomic_load_n(&ftc__log_level, __ATOMIC_ACQUIRE);
  if (__builtin_expect(l < 0, 0)) {
    ftc__log_init();
    l = __atomic_load_n(&ftc__log_level, __ATOMIC_ACQUIRE);
  }
  return level <= l && (subsys & ftc__log_mask);
}

#define FTC_LOG(level, subsys, ...)                                         \
  do {                                                                      \
    if (ftc__log_enabled((level), (subsys)))                                \
      ftc__log_write((level), (subsys), __FILE__, __LINE__, __VA_ARGS__);   \
  } while (0)

#define FTC_ERROR(subsys, ...) FTC_LOG(FTC_LOG_ERROR, subsys, __VA_ARGS__)
#define FTC_WARN(subsys, ...) FTC_LOG(FTC_LOG_WARN, subsys, __VA_ARGS__)
#define FTC_INFO(subsys, ...) FTC_LOG(FTC_LOG_INFO, subsys, __VA_ARGS__)
#define FTC_DEBUG(subsys, ...) FTC_LOG(FTC_LOG_DEBUG, subsys, __VA_ARGS__)
#define FTC_TRACE(subsys, ...) FTC_LOG(FTC_LOG_TRACE, subsys, __VA_ARGS__)

#endif
