/*
 * ftc_param.c - the FTCOMM_* table, read once and cached under a lock.
 */
#include "ftc_param.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftc_error.h"

static const ftc_param_desc_t params[FTC_P_COUNT] = {
#define FTC_PARAM_INT(id, name, def, lo, hi, doc) [FTC_P_##id] = {name, 1, def, lo, hi, NULL, doc},
#define FTC_PARAM_STR(id, name, def, doc) [FTC_P_##id] = {name, 0, 0, 0, 0, def, doc},
#include "ftc_params.def"
#undef FTC_PARAM_INT
#undef FTC_PARAM_STR
};

static pthread_mutex_t param_lock = PTHREAD_MUTEX_INITIALIZER;
static int cached[FTC_P_COUNT];
static int64_t cached_int[FTC_P_COUNT];
static ftc_status_t cached_status[FTC_P_COUNT];
static char cached_err[FTC_P_COUNT][192];

const ftc_param_desc_t *ftc__param_desc(ftc_param_id_t id) {
  if ((int)id < 0 || id >= FTC_P_COUNT) return NULL;
  return &params[id];
}

/* status, with its message in err (err_len bytes; err may be NULL): the
 * parse's failure, which is not the thread's last error. */
static ftc_status_t parse_failed(ftc_status_t status, char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ftc_status_t parse_failed(ftc_status_t status, char *err, size_t err_len, const char *fmt, ...) {
  if (err && err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return status;
}

ftc_status_t ftc__param_parse_int(ftc_param_id_t id, const char *text, int64_t *out, char *err,
                                  size_t err_len) {
  const ftc_param_desc_t *d = ftc__param_desc(id);
  if (!d || !d->is_int)
    return parse_failed(FTC_ERR_INTERNAL, err, err_len, "parameter %d is not an integer", (int)id);
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text || *end != '\0') {
    return parse_failed(FTC_ERR_CONFIG, err, err_len,
                        "%s=\"%s\" is not an integer; set it to a value in [%lld, %lld]", d->name, text,
                        (long long)d->lo, (long long)d->hi);
  }
  if (v < d->lo || v > d->hi) {
    return parse_failed(FTC_ERR_CONFIG, err, err_len,
                        "%s=%lld is out of range; set it to a value in [%lld, %lld]", d->name, v,
                        (long long)d->lo, (long long)d->hi);
  }
  *out = v;
  return FTC_OK;
}

ftc_status_t ftc__param_int(ftc_param_id_t id, int64_t *out) {
  const ftc_param_desc_t *d = ftc__param_desc(id);
  if (!d || !d->is_int) return ftc__error(FTC_ERR_INTERNAL, "parameter %d is not an integer", (int)id);
  pthread_mutex_lock(&param_lock);
  if (!cached[id]) {
    const char *env = getenv(d->name);
    cached_int[id] = d->def;
    cached_status[id] = FTC_OK;
    cached_err[id][0] = '\0';
    if (env && *env) {
      int64_t v;
      ftc_status_t st = ftc__param_parse_int(id, env, &v, cached_err[id], sizeof(cached_err[id]));
      if (st == FTC_OK)
        cached_int[id] = v;
      else
        cached_status[id] = st;
    }
    cached[id] = 1;
  }
  *out = cached_int[id];
  ftc_status_t st = cached_status[id];
  char err[192];
  memcpy(err, cached_err[id], sizeof(err));
  pthread_mutex_unlock(&param_lock);
  if (st != FTC_OK) return ftc__error(st, "%s", err);
  return FTC_OK;
}

ftc_status_t ftc__param_int_now(ftc_param_id_t id, int64_t *out) {
  const ftc_param_desc_t *d = ftc__param_desc(id);
  if (!d || !d->is_int) return ftc__error(FTC_ERR_INTERNAL, "parameter %d is not an integer", (int)id);
  const char *env = getenv(d->name);
  if (!env || !*env) {
    *out = d->def;
    return FTC_OK;
  }
  char err[192];
  ftc_status_t st = ftc__param_parse_int(id, env, out, err, sizeof err);
  return st == FTC_OK ? FTC_OK : ftc__error(st, "%s", err);
}

const char *ftc__param_str(ftc_param_id_t id) {
  const ftc_param_desc_t *d = ftc__param_desc(id);
  if (!d || d->is_int) return NULL;
  const char *env = getenv(d->name);
  if (env && *env) return env;
  return d->def_str;
}

void ftc__param_reset(void) {
  pthread_mutex_lock(&param_lock);
  memset(cached, 0, sizeof(cached));
  pthread_mutex_unlock(&param_lock);
}
