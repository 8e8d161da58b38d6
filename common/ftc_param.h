/*
 * ftc_param.h - typed, range-checked access to the FTCOMM_* table in
 * ftc_params.def. Each variable is read from the environment once and
 * cached; a value out of range or not a number is an FTC_ERR_CONFIG that
 * names the variable and its range.
 */
#ifndef FTC_PARAM_H
#define FTC_PARAM_H

#include <stddef.h>
#include <stdint.h>

#include "ftcomm.h"

typedef enum ftc_param_id {
#define FTC_PARAM_INT(id, name, def, lo, hi, doc) FTC_P_##id,
#define FTC_PARAM_STR(id, name, def, doc) FTC_P_##id,
#include "ftc_params.def"
#undef FTC_PARAM_INT
#undef FTC_PARAM_STR
  FTC_P_COUNT
} ftc_param_id_t;

typedef struct ftc_param_desc {
  const char *name;
  int is_int;
  int64_t def, lo, hi;
  const char *def_str;
  const char *doc;
} ftc_param_desc_t;

const ftc_param_desc_t *ftc__param_desc(ftc_param_id_t id);

/* Value of an integer parameter. FTC_ERR_CONFIG (with ftc_last_error())
 * when the environment holds something invalid; *out is then the default. */
ftc_status_t ftc__param_int(ftc_param_id_t id, int64_t *out);

/* Value of a string parameter: the environment's, else the default (may be
 * NULL). The pointer stays valid for the life of the process. */
const char *ftc__param_str(ftc_param_id_t id);

/* As ftc__param_int, but from the environment as it is now, not cached:
 * ftc_config_resolve, whose caller may have set a variable since the first
 * read. */
ftc_status_t ftc__param_int_now(ftc_param_id_t id, int64_t *out);

/* Parse and range-check one integer value as the named parameter would,
 * for a caller that handles a bad value itself (the controller, reading a
 * pod template's env): the thread's ftc_last_error() is left as it was. On
 * failure (FTC_ERR_CONFIG naming the variable and its range; FTC_ERR_INTERNAL
 * for an id that is not an integer parameter) the message goes to err (up to
 * err_len bytes; err may be NULL) and *out is left as it was. ftc__param_int
 * is the one that records the message for ftc_last_error(). */
ftc_status_t ftc__param_parse_int(ftc_param_id_t id, const char *text, int64_t *out, char *err,
                                  size_t err_len);

/* Forget cached values (tests that change the environment). */
void ftc__param_reset(void);

#endif
