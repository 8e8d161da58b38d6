/*
 * registry.c - the data-plane backends this library has: the one place
 * that names them. The core finds a backend by FTCOMM_BACKEND's name
 * (ftc__backend_find) and, under auto, probes them in this order: a device
 * backend first, TCP last (it runs everywhere, so auto always ends there).
 * A test may add a backend of its own (ftc__backend_register), which only
 * its name selects.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/backend.h"
#include "ftc_error.h"

extern const ftc__backend_ops_t ftc__backend_nccl; /* nccl/backend.c */
extern const ftc__backend_ops_t ftc__backend_tcp;  /* tcp/backend.c */

const ftc__backend_ops_t *const ftc__backends[] = {&ftc__backend_nccl, &ftc__backend_tcp, NULL};

/* Registered before the first communicator is made, read after: the
 * count is published with a release store after its entry. */
#define EXTRA_MAX 4
static const ftc__backend_ops_t *extra[EXTRA_MAX];
static int nextra;

const ftc__backend_ops_t *ftc__backend_find(const char *name) {
  if (!name) return NULL;
  int n = __atomic_load_n(&nextra, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n; i++)
    if (strcasecmp(extra[i]->name, name) == 0) return extra[i];
  for (int i = 0; ftc__backends[i]; i++)
    if (strcasecmp(ftc__backends[i]->name, name) == 0) return ftc__backends[i];
  return NULL;
}

ftc_status_t ftc__backend_register(const ftc__backend_ops_t *ops) {
  if (!ops || !ops->name || !ops->connect || !ops->run || !ops->close || !ops->interrupt ||
      !ops->failed_peer || !ops->listen != !ops->refuse || !ops->peer_fds != !ops->peer_peek)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "a backend needs a name and connect, run, interrupt, close and failed_peer "
                      "(and refuse with listen, peer_peek with peer_fds)");
  if (ftc__backend_find(ops->name) || strcasecmp(ops->name, "auto") == 0)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "a backend called \"%s\" exists already",
                      ops->name);
  if (nextra == EXTRA_MAX)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "at most %d backends can be registered", EXTRA_MAX);
  extra[nextra] = ops;
  __atomic_store_n(&nextra, nextra + 1, __ATOMIC_RELEASE);
  return FTC_OK;
}

void ftc__backend_names(char *buf, size_t len) {
  size_t l = 0;
  if (len) buf[0] = '\0';
  int n = __atomic_load_n(&nextra, __ATOMIC_ACQUIRE);
  for (int i = 0; i < n + (int)(sizeof(ftc__backends) / sizeof(ftc__backends[0])) - 1; i++) {
    const ftc__backend_ops_t *b = i < n ? extra[i] : ftc__backends[i - n];
    if (l < len) l += (size_t)snprintf(buf + l, len - l, "%s%s", l ? ", " : "", b->name);
  }
}
