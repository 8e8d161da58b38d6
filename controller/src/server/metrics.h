/*
 * metrics.h - the controller's Prometheus text exposition (format 0.0.4):
 * reconciles, queue depth, API requests by verb and code, watch restarts
 * and lists per informer, pods created/deleted, replacements, leadership,
 * and the embedded coordinators (epochs, hangs, dumps, the port's sessions).
 */
#ifndef FTCK_METRICS_H
#define FTCK_METRICS_H

#include "jobcoord.h"
#include "kube_client.h"
#include "leader.h"
#include "trainingjob.h"

typedef struct ftck_metrics_src {
  ftck_client_t *client;
  ftck_reconciler_t *reconciler;
  int leader; /* 1 leader, 0 not (or election off: 1) */
  ftck_coords_t *coords; /* may be NULL */
  const ftck_leader_stats_t *lease; /* NULL when leader election is off */
} ftck_metrics_src_t;

/* New text (ftc__free), or NULL on no memory. */
char *ftck_metrics_render(const ftck_metrics_src_t *src);

#endif
