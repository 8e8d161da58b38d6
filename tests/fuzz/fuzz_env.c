/*
 * fuzz_env.c - the FTCOMM_* environment as a rank reads it: the parameter
 * table (common/ftc_param.c), ftc_config_resolve (runtime/src/core/
 * config.c), the TCP backend's settings (ftc__tcp_cfg_from_env) and the
 * address parsers (common/ftc_addr.c) that FTCOMM_COORDINATOR,
 * FTCOMM_BIND_HOST, FTCOMM_ADVERTISE_HOST and FTCOMM_SOCKET_FAMILY go
 * through.
 *
 * Input: lines NAME=VALUE (a NAME without the FTCOMM_ prefix gets it), set
 * in the environment for one run and removed after it.
 *
 * Checks: every refusal is FTC_ERR_CONFIG (or INVALID_ARGUMENT) with a
 * message that names the variable; every accepted integer is in its
 * table range; a resolved configuration keeps slot < world size (or is a
 * joiner) and min size <= world size; an accepted coordinator address
 * joins and splits back to the same host and port.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ftc_addr.h"
#include "ftc_param.h"
#include "fuzz.h"
#include "tcp/tcp.h"

#define MAX_VARS 16

static void refused(ftc_status_t st, const char *name) {
  const char *e = ftc_last_error();
  FUZZ_CHECK(st == FTC_ERR_CONFIG || st == FTC_ERR_INVALID_ARGUMENT);
  FUZZ_CHECK(e && *e);
  if (name && !strstr(e, name)) {
    fprintf(stderr, "error without the name %s: %s\n", name, e);
    FUZZ_CHECK(!"the error names the variable");
  }
}

static void addr_checks(void) {
  char host[FTC__ADDR_HOST_MAX + 1], again[FTC__ADDR_MAX + 1], host2[FTC__ADDR_HOST_MAX + 1];
  int port, port2, family;
  const char *c = ftc__param_str(FTC_P_COORDINATOR);
  if (c) {
    ftc_status_t st = ftc__addr_split("FTCOMM_COORDINATOR", c, host, sizeof(host), &port);
    if (st != FTC_OK) {
      refused(st, "FTCOMM_COORDINATOR");
    } else {
      FUZZ_CHECK(port >= 1 && port <= 65535 && host[0]);
      int n = ftc__addr_join(host, port, again, sizeof(again));
      FUZZ_CHECK(n > 0 && (size_t)n < sizeof(again));
      FUZZ_CHECK(ftc__addr_split("again", again, host2, sizeof(host2), &port2) == FTC_OK);
      FUZZ_CHECK(port2 == port && !strcmp(host, host2));
    }
  }
  const char *hosts[] = {"FTCOMM_BIND_HOST", "FTCOMM_ADVERTISE_HOST"};
  const ftc_param_id_t ids[] = {FTC_P_BIND_HOST, FTC_P_ADVERTISE_HOST};
  for (int i = 0; i < 2; i++) {
    const char *s = ftc__param_str(ids[i]);
    if (!s) continue;
    ftc_status_t st = ftc__addr_host(hosts[i], s, host, sizeof(host));
    if (st != FTC_OK) refused(st, hosts[i]);
    else (void)ftc__addr_literal_family(host);
  }
  ftc_status_t st = ftc__addr_family_parse("FTCOMM_SOCKET_FAMILY", ftc__param_str(FTC_P_SOCKET_FAMILY),
                                           &family);
  if (st != FTC_OK) refused(st, "FTCOMM_SOCKET_FAMILY");
  else FUZZ_CHECK(family == AF_UNSPEC || family == AF_INET || family == AF_INET6);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  char *names[MAX_VARS];
  int nset = 0;
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && nset < MAX_VARS;
       line = strtok_r(NULL, "\n", &save)) {
    char *eq = strchr(line, '=');
    if (!eq || eq == line) continue;
    *eq = '\0';
    size_t nl = strlen(line);
    char *name = malloc(nl + 8);
    if (!name) break;
    snprintf(name, nl + 8, "%s%s", strncmp(line, "FTCOMM_", 7) ? "FTCOMM_" : "", line);
    if (setenv(name, eq + 1, 1) != 0) {
      free(name);
      continue;
    }
    names[nset++] = name;
  }
  ftc__param_reset();

  for (int id = 0; id < FTC_P_COUNT; id++) {
    const ftc_param_desc_t *d = ftc__param_desc((ftc_param_id_t)id);
    if (!d->is_int) {
      (void)ftc__param_str((ftc_param_id_t)id);
      continue;
    }
    int64_t v = 0;
    ftc_status_t st = ftc__param_int((ftc_param_id_t)id, &v);
    if (st != FTC_OK) {
      refused(st, d->name);
      FUZZ_CHECK(v == d->def);
    } else {
      FUZZ_CHECK(v >= d->lo && v <= d->hi);
    }
  }

  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  ftc_status_t st = ftc_config_resolve(&cfg);
  if (st != FTC_OK) {
    refused(st, NULL);
    FUZZ_CHECK(strstr(ftc_last_error(), "FTCOMM_") != NULL);
  } else {
    FUZZ_CHECK(cfg.joiner || cfg.slot < cfg.world_size);
    FUZZ_CHECK(cfg.min_size <= cfg.world_size);
  }

  ftc__tcp_cfg_t tcfg;
  memset(&tcfg, 0, sizeof(tcfg));
  st = ftc__tcp_cfg_from_env(&tcfg);
  if (st != FTC_OK) {
    refused(st, NULL);
    FUZZ_CHECK(strstr(ftc_last_error(), "FTCOMM_") != NULL);
  } else {
    FUZZ_CHECK(tcfg.sockets == 1 || tcfg.sockets == 2);
    FUZZ_CHECK(tcfg.allreduce_algo >= 0 && tcfg.allreduce_algo < FTC_ALGO_COUNT);
  }

  addr_checks();

  for (int i = 0; i < nset; i++) {
    unsetenv(names[i]);
    free(names[i]);
  }
  ftc__param_reset();
  free(text);
  return 0;
}
