/*
 * config.c - resolution of ftc_config_t: every field the caller left unset
 * is taken from the FTCOMM_* table (environment, then default), and every
 * value is range-checked against the table so a bad value is reported with
 * the variable's name and its allowed range. A config from an older
 * header (a smaller size) is taken as NCCL takes its config: the fields that
 * fit are copied, the rest keep their defaults. Also ftc_version() and the
 * allreduce algorithm names (FTCOMM_ALLREDUCE_ALGO).
 */
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "core/backend.h"
#include "core/op.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftcomm.h"

int ftc_version(void) { return FTC_VERSION_CODE; }

static const char *const algo_names[FTC_ALGO_COUNT] = {"auto", "ring", "halving", "doubling", "flat"};

const char *ftc_algo_name(ftc_algo_t algo) {
  return (unsigned)algo < FTC_ALGO_COUNT ? algo_names[algo] : "?";
}

ftc_status_t ftc__algo_parse(const char *what, const char *name, ftc_algo_t *out) {
  for (int i = 0; name && i < FTC_ALGO_COUNT; i++)
    if (strcasecmp(name, algo_names[i]) == 0) {
      *out = (ftc_algo_t)i;
      return FTC_OK;
    }
  return ftc__error(FTC_ERR_CONFIG, "%s=\"%s\" is not an algorithm; use one of auto, ring, halving, doubling, flat",
                    what, name ? name : "");
}

static ftc_status_t resolve_int(int *field, ftc_param_id_t id) {
  const ftc_param_desc_t *d = ftc__param_desc(id);
  if (*field == FTC_UNSET_INT) {
    int64_t v;
    ftc_status_t st = ftc__param_int_now(id, &v); /* the environment now (a setenv since is seen) */
    if (st != FTC_OK) return st;
    *field = (int)v;
    return FTC_OK;
  }
  if (*field < d->lo || *field > d->hi)
    return ftc__error(FTC_ERR_CONFIG,
                      "config field for %s is %d, out of range; set it to a value in [%lld, %lld]",
                      d->name, *field, (long long)d->lo, (long long)d->hi);
  return FTC_OK;
}

/* The fields after size and version, in order (a field is copied from a
 * caller's config only when all of it lies within the caller's size). */
#define CFG_FIELD(f) {offsetof(ftc_config_t, f), sizeof(((ftc_config_t *)0)->f)}
static const struct {
  size_t off, len;
} cfg_fields[] = {CFG_FIELD(job),        CFG_FIELD(coordinator),     CFG_FIELD(token),
                  CFG_FIELD(slot),       CFG_FIELD(world_size),      CFG_FIELD(min_size),
                  CFG_FIELD(joiner),     CFG_FIELD(timeout_ms),      CFG_FIELD(connect_timeout_ms),
                  CFG_FIELD(backend),    CFG_FIELD(bind_host),       CFG_FIELD(advertise_host),
                  CFG_FIELD(dump_dir),   CFG_FIELD(recorder_entries)};
#undef CFG_FIELD
/* A field appended to ftc_config_t goes into cfg_fields too (else a caller's
 * value of it would be dropped): recorder_entries must stay the last one
 * (this catches any field but an int that fits the tail padding). */
_Static_assert((offsetof(ftc_config_t, recorder_entries) + sizeof(int) + _Alignof(ftc_config_t) - 1) /
                       _Alignof(ftc_config_t) * _Alignof(ftc_config_t) ==
                   sizeof(ftc_config_t),
               "a field was appended to ftc_config_t: add it to cfg_fields");

ftc_status_t ftc__config_import(const ftc_config_t *in, ftc_config_t *out) {
  const ftc_config_t init = FTC_CONFIG_INITIALIZER;
  *out = init;
  if (in->version < 1 || in->version > FTC_CONFIG_VERSION || in->size < offsetof(ftc_config_t, job))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "config has size %zu version %u; this library takes versions 1 to %d (size "
                      "up to %zu): initialize it with FTC_CONFIG_INITIALIZER",
                      in->size, in->version, FTC_CONFIG_VERSION, sizeof(ftc_config_t));
  for (size_t i = 0; i < sizeof(cfg_fields) / sizeof(cfg_fields[0]); i++)
    if (cfg_fields[i].off + cfg_fields[i].len <= in->size)
      memcpy((char *)out + cfg_fields[i].off, (const char *)in + cfg_fields[i].off, cfg_fields[i].len);
  return FTC_OK;
}

static void resolve_str(const char **field, ftc_param_id_t id) {
  if (!*field) *field = ftc__param_str(id);
}

static ftc_status_t config_resolve(ftc_config_t *cfg);

ftc_status_t ftc_config_resolve(ftc_config_t *cfg) {
  if (!cfg) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "cfg is NULL; pass a ftc_config_t filled with FTC_CONFIG_INITIALIZER");
  if (cfg->size == sizeof(ftc_config_t) && cfg->version == FTC_CONFIG_VERSION)
    return config_resolve(cfg);
  /* An older (smaller) config: resolved whole here, and what fits written
   * back; the caller's size and version stay. */
  ftc_config_t full;
  ftc_status_t st = ftc__config_import(cfg, &full);
  if (st != FTC_OK) return st;
  st = config_resolve(&full);
  for (size_t i = 0; i < sizeof(cfg_fields) / sizeof(cfg_fields[0]); i++)
    if (cfg_fields[i].off + cfg_fields[i].len <= cfg->size)
      memcpy((char *)cfg + cfg_fields[i].off, (const char *)&full + cfg_fields[i].off, cfg_fields[i].len);
  return st;
}

static ftc_status_t config_resolve(ftc_config_t *cfg) {
  ftc_status_t st;
  resolve_str(&cfg->job, FTC_P_JOB);
  resolve_str(&cfg->coordinator, FTC_P_COORDINATOR);
  resolve_str(&cfg->token, FTC_P_TOKEN);
  resolve_str(&cfg->backend, FTC_P_BACKEND);
  resolve_str(&cfg->bind_host, FTC_P_BIND_HOST);
  resolve_str(&cfg->advertise_host, FTC_P_ADVERTISE_HOST);
  resolve_str(&cfg->dump_dir, FTC_P_DUMP_DIR);
  if ((st = resolve_int(&cfg->slot, FTC_P_SLOT)) != FTC_OK) return st;
  if ((st = resolve_int(&cfg->world_size, FTC_P_WORLD_SIZE)) != FTC_OK) return st;
  if ((st = resolve_int(&cfg->min_size, FTC_P_MIN_SIZE)) != FTC_OK) return st;
  if ((st = resolve_int(&cfg->joiner, FTC_P_JOINER)) != FTC_OK) return st;
  if ((st = resolve_int(&cfg->timeout_ms, FTC_P_TIMEOUT_MS)) != FTC_OK) return st;
  if ((st = resolve_int(&cfg->connect_timeout_ms, FTC_P_CONNECT_TIMEOUT_MS)) != FTC_OK) return st;
  if ((st = resolve_int(&cfg->recorder_entries, FTC_P_RECORDER_ENTRIES)) != FTC_OK) return st;
  if (cfg->backend && strcasecmp(cfg->backend, "auto") != 0 && !ftc__backend_find(cfg->backend)) {
    char names[128];
    ftc__backend_names(names, sizeof(names));
    return ftc__error(FTC_ERR_CONFIG, "FTCOMM_BACKEND=\"%s\" is not one of %s, auto", cfg->backend,
                      names);
  }
  ftc_algo_t algo;
  if ((st = ftc__algo_parse("FTCOMM_ALLREDUCE_ALGO", ftc__param_str(FTC_P_ALLREDUCE_ALGO), &algo)) != FTC_OK)
    return st;
  if (cfg->slot >= cfg->world_size && !cfg->joiner)
    return ftc__error(FTC_ERR_CONFIG,
                      "FTCOMM_SLOT=%d is not below FTCOMM_WORLD_SIZE=%d; slots are 0 .. world size - 1",
                      cfg->slot, cfg->world_size);
  if (cfg->min_size > cfg->world_size)
    return ftc__error(FTC_ERR_CONFIG,
                      "FTCOMM_MIN_SIZE=%d is larger than FTCOMM_WORLD_SIZE=%d; lower it",
                      cfg->min_size, cfg->world_size);
  return FTC_OK;
}
