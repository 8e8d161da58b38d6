/*
 * trainingjob.h - the TrainingJob reconciler: informers on TrainingJobs, on
 * the pods the controller manages (and on Nodes), a
 * rate-limited work queue of job keys,
 * and worker threads ("ftck-worker-N") that bring each job's pods and status
 * in line with its spec: a token Secret, one pod per slot with the runtime
 * environment, replacements for lost pods (budget, backoff, away from the
 * failed node), status with conditions, members and incidents, and Events.
 * With coordinators (opts.coords) each running job has its coordinator: a
 * lost pod's slot is declared lost at once, epochs fill status.epoch,
 * worldSize and the members' ranks, and hangs become incidents (dumps,
 * analysis, Event) followed by spec.failurePolicy.onHang.
 */
#ifndef FTCK_TRAININGJOB_H
#define FTCK_TRAININGJOB_H

#include <stdint.h>

#include "informer.h"
#include "jobcoord.h"
#include "jobspec.h"
#include "kube_client.h"
#include "workqueue.h"

typedef struct ftck_reconciler_opts {
  const char *watch_namespace; /* NULL or "": all namespaces */
  ftck_pod_env_t env;
  const char *identity;        /* Events' reportingInstance */
  int workers;
  int64_t resync_ms;
  int no_nodes;                /* 1: no Node informer (no RBAC on nodes); node loss is then
                                * seen only when the pods fail or are deleted */
  unsigned char token_key[32]; /* the key job tokens derive from (token.h) */
  ftck_coords_t *coords;       /* the embedded coordinators (borrowed; outlives the reconciler's
                                * workers); NULL: pods are run without one (tests) */
} ftck_reconciler_opts_t;

typedef struct ftck_reconciler_stats {
  uint64_t reconciles_ok, reconciles_error;
  uint64_t pods_created, pods_deleted, replacements;
  uint64_t remembered; /* records kept per job beside the caches: its token Secret made, missing pods,
                        * a restart of every pod in progress, the last pod refusal told in an Event */
} ftck_reconciler_stats_t;

typedef struct ftck_reconciler ftck_reconciler_t;

ftc_status_t ftck_reconciler_create(ftck_client_t *c, const ftck_reconciler_opts_t *o, ftck_reconciler_t **out);
/* Start the informers (the workers start once ftck_reconciler_synced). */
ftc_status_t ftck_reconciler_start_informers(ftck_reconciler_t *r);
ftc_status_t ftck_reconciler_start_workers(ftck_reconciler_t *r);
/* 1 when every cache has synced. */
int ftck_reconciler_synced(ftck_reconciler_t *r);
/* Reconcile one "ns/name" key now, on the calling thread (tests, workers).
 * *requeue_ms (may be NULL) gets a delay after which to look again, or -1. */
ftc_status_t ftck_reconcile(ftck_reconciler_t *r, const char *key, int64_t *requeue_ms);
/* Shut the queue, join the workers, stop the informers. Idempotent. */
void ftck_reconciler_stop(ftck_reconciler_t *r);
void ftck_reconciler_destroy(ftck_reconciler_t *r);

void ftck_reconciler_get_stats(ftck_reconciler_t *r, ftck_reconciler_stats_t *out);
ftck_workqueue_t *ftck_reconciler_queue(ftck_reconciler_t *r);
/* 0 jobs, 1 pods, 2 nodes (NULL when opts.no_nodes); NULL beyond. */
ftck_informer_t *ftck_reconciler_informer(ftck_reconciler_t *r, int which);

#endif
