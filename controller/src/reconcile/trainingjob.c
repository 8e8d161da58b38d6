/*
 * trainingjob.c - reconcile one TrainingJob at a time per key (the work
 * queue never hands a key to two workers). Reads come from the informer
 * caches; writes go to the API server with deterministic names, so a
 * repeated or concurrent attempt meets 409 AlreadyExists instead of making a
 * duplicate. A cached view that lags (a pod created but not yet seen) is
 * settled with a direct GET before anything is replaced.
 *
 * This file is the reconciler's plumbing: the informers' handlers that
 * enqueue a job's key, the worker threads and the lifecycle. One reconcile
 * pass over a job is pass.c; the status it computes, status.c; its writes
 * of Secrets and pods, writes.c; reconcile_int.h holds what they share.
 */
#include "trainingjob.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_time.h"
#include "kube_json.h"
#include "reconcile_int.h"
#include "token.h"

static void enqueue_obj(ftck_reconciler_t *r, json_t *obj) {
  char key[512];
  if (ftck_object_key(obj, key, sizeof key) == 0) ftck_workqueue_add(r->q, key);
}

static void job_add(json_t *o, void *ud) { enqueue_obj(ud, o); }
static void job_update(json_t *old, json_t *o, void *ud) { (void)old; enqueue_obj(ud, o); }
static void job_delete(json_t *o, void *ud) { enqueue_obj(ud, o); }

static void pod_event(ftck_reconciler_t *r, json_t *pod) {
  const char *job = json_string_value(json_object_get(ftck_jget(pod, "metadata.labels"), FTCK_LABEL_JOB));
  const char *ns = ftck_jstr(pod, "metadata.namespace");
  if (!job || !ns) return;
  char key[512];
  snprintf(key, sizeof key, "%s/%s", ns, job);
  ftck_workqueue_add(r->q, key);
}
/* A node that stops being Ready (or goes away) makes its pods lost: queue
 * the jobs that have a pod there. Runs on the nodes informer thread; reads
 * the pod cache under its lock. */
typedef struct node_scan {
  ftck_reconciler_t *r;
  const char *node;
} node_scan_t;

static void enqueue_if_on_node(const json_t *pod, void *ud) {
  node_scan_t *ns = ud;
  const char *n = ftck_jstr(pod, "spec.nodeName");
  if (n && !strcmp(n, ns->node)) pod_event(ns->r, (json_t *)pod);
}

static void node_changed(ftck_reconciler_t *r, const json_t *node) {
  node_scan_t scan = {r, ftck_jstr(node, "metadata.name")};
  if (scan.node) ftck_informer_each(r->pods, enqueue_if_on_node, &scan);
}

static void node_update(json_t *old, json_t *o, void *ud) {
  if (old == o || ftck_node_ready(old) != ftck_node_ready(o)) node_changed(ud, o);
}
static void node_delete(json_t *o, void *ud) { node_changed(ud, o); }

static void pod_add(json_t *o, void *ud) { pod_event(ud, o); }
static void pod_update(json_t *old, json_t *o, void *ud) { (void)old; pod_event(ud, o); }
static void pod_delete(json_t *o, void *ud) { pod_event(ud, o); }

ftc_status_t ftck_reconciler_create(ftck_client_t *c, const ftck_reconciler_opts_t *o, ftck_reconciler_t **out) {
  ftc_status_t st = FTC_OK;
  *out = NULL;
  ftck_reconciler_t *r = ftc__calloc(1, sizeof *r);
  if (!r) return ftc__error(FTC_ERR_NO_MEMORY, "reconciler: no memory");
  pthread_mutex_init(&r->mu, NULL);
  r->c = c;
  r->ns = o->watch_namespace && *o->watch_namespace ? ftc__strdup(o->watch_namespace) : NULL;
  r->coordinator = ftc__strdup(o->env.coordinator ? o->env.coordinator : "");
  r->dump_dir = ftc__strdup(o->env.dump_dir ? o->env.dump_dir : "/var/run/ftcomm/dumps");
  r->identity = ftc__strdup(o->identity ? o->identity : "ftcomm-controller");
  r->secrets_ok = json_object();
  memcpy(r->token_key, o->token_key, sizeof r->token_key);
  r->vanished = json_object();
  r->fresh = json_object();
  r->refusals = json_object();
  r->coords = o->coords;
  r->workers = o->workers > 0 ? (o->workers < MAX_WORKERS ? o->workers : MAX_WORKERS) : 2;
  if ((o->watch_namespace && *o->watch_namespace && !r->ns) || !r->coordinator || !r->dump_dir || !r->identity ||
      !r->secrets_ok || !r->vanished || !r->fresh || !r->refusals) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "reconciler: no memory");
    goto out_destroy;
  }
  r->env.coordinator = r->coordinator;
  r->env.dump_dir = r->dump_dir;
  FTC_CHECK_GOTO(ftck_workqueue_create(200, 300000, &r->q), st, out_destroy);
  char *jobs_path = ftck_path(FTCK_GROUP, FTCK_VERSION, r->ns, FTCK_PLURAL, NULL);
  char *pods_path = ftck_path("", "v1", r->ns, "pods", NULL);
  if (!jobs_path || !pods_path) {
    ftc__free(jobs_path);
    ftc__free(pods_path);
    st = ftc__error(FTC_ERR_NO_MEMORY, "reconciler: no memory");
    goto out_destroy;
  }
  ftck_informer_opts_t jo = {.name = "jobs", .collection = jobs_path, .resync_ms = o->resync_ms};
  ftck_handlers_t jh = {job_add, job_update, job_delete, r};
  st = ftck_informer_create(c, &jo, &jh, &r->jobs);
  if (st == FTC_OK) {
    ftck_informer_opts_t po = {.name = "pods", .collection = pods_path, .label_selector = FTCK_POD_SELECTOR,
                               .resync_ms = 0};
    ftck_handlers_t ph = {pod_add, pod_update, pod_delete, r};
    st = ftck_informer_create(c, &po, &ph, &r->pods);
  }
  if (st == FTC_OK && !o->no_nodes) {
    ftck_informer_opts_t no = {.name = "nodes", .collection = "/api/v1/nodes", .resync_ms = 0};
    ftck_handlers_t nh = {NULL, node_update, node_delete, r};
    st = ftck_informer_create(c, &no, &nh, &r->nodes);
  }
  ftc__free(jobs_path);
  ftc__free(pods_path);
  if (st != FTC_OK) goto out_destroy;
  *out = r;
  return FTC_OK;
out_destroy:
  ftck_reconciler_destroy(r);
  return st;
}

/* ---- workers and lifecycle ---- */

static void *worker_main(void *arg) {
  ftck_reconciler_t *r = arg;
  for (;;) {
    char *key = NULL;
    ftc_status_t st = ftck_workqueue_get(r->q, -1, &key);
    if (st == FTC_ERR_ABORTED) break;
    if (st != FTC_OK) continue;
    int64_t requeue = -1;
    st = ftck_reconcile(r, key, &requeue);
    if (st == FTC_OK) {
      __atomic_add_fetch(&r->stats.reconciles_ok, 1, __ATOMIC_RELAXED);
      ftck_workqueue_forget(r->q, key);
      if (requeue >= 0) ftck_workqueue_add_after(r->q, key, requeue);
    } else {
      __atomic_add_fetch(&r->stats.reconciles_error, 1, __ATOMIC_RELAXED);
      FTC_WARN(FTC_SUB_CTRL, "reconcile %s failed (attempt %d): %s", key, ftck_workqueue_requeues(r->q, key) + 1,
               ftc_last_error());
      ftck_workqueue_add_rate_limited(r->q, key);
    }
    ftck_workqueue_done(r->q, key);
    ftc__free(key);
  }
  return NULL;
}

ftc_status_t ftck_reconciler_start_informers(ftck_reconciler_t *r) {
  ftc_status_t st = ftck_informer_start(r->pods);
  if (st == FTC_OK && r->nodes) st = ftck_informer_start(r->nodes);
  if (st == FTC_OK) st = ftck_informer_start(r->jobs);
  return st;
}

ftc_status_t ftck_reconciler_start_workers(ftck_reconciler_t *r) {
  for (int i = r->nthreads; i < r->workers; i++) {
    int rc = pthread_create(&r->threads[i], NULL, worker_main, r);
    if (rc != 0) return ftc__error(FTC_ERR_SYSTEM, "reconciler: cannot start worker %d: %s", i, strerror(rc));
    char tname[32];
    snprintf(tname, sizeof tname, "ftck-worker-%d", i % 100);
    tname[15] = '\0';
    pthread_setname_np(r->threads[i], tname);
    r->nthreads = i + 1;
  }
  return FTC_OK;
}

int ftck_reconciler_synced(ftck_reconciler_t *r) {
  return ftck_informer_synced(r->jobs) && ftck_informer_synced(r->pods) &&
         (!r->nodes || ftck_informer_synced(r->nodes));
}

void ftck_reconciler_stop(ftck_reconciler_t *r) {
  if (!r) return;
  if (r->q) ftck_workqueue_shutdown(r->q);
  for (int i = 0; i < r->nthreads; i++) pthread_join(r->threads[i], NULL);
  r->nthreads = 0;
  ftck_informer_stop(r->jobs);
  ftck_informer_stop(r->pods);
  ftck_informer_stop(r->nodes);
}

void ftck_reconciler_destroy(ftck_reconciler_t *r) {
  if (!r) return;
  ftck_reconciler_stop(r);
  ftck_informer_destroy(r->jobs);
  ftck_informer_destroy(r->pods);
  ftck_informer_destroy(r->nodes);
  ftck_workqueue_destroy(r->q);
  json_decref(r->secrets_ok);
  json_decref(r->vanished);
  json_decref(r->fresh);
  json_decref(r->refusals);
  pthread_mutex_destroy(&r->mu);
  memset(r->token_key, 0, sizeof r->token_key);
  ftc__free(r->ns);
  ftc__free(r->coordinator);
  ftc__free(r->dump_dir);
  ftc__free(r->identity);
  ftc__free(r);
}

void ftck_reconciler_get_stats(ftck_reconciler_t *r, ftck_reconciler_stats_t *out) {
  out->reconciles_ok = __atomic_load_n(&r->stats.reconciles_ok, __ATOMIC_RELAXED);
  out->reconciles_error = __atomic_load_n(&r->stats.reconciles_error, __ATOMIC_RELAXED);
  out->pods_created = __atomic_load_n(&r->stats.pods_created, __ATOMIC_RELAXED);
  out->pods_deleted = __atomic_load_n(&r->stats.pods_deleted, __ATOMIC_RELAXED);
  out->remembered = ftck__remembered(r);
  out->replacements = __atomic_load_n(&r->stats.replacements, __ATOMIC_RELAXED);
}

ftck_workqueue_t *ftck_reconciler_queue(ftck_reconciler_t *r) { return r->q; }
ftck_informer_t *ftck_reconciler_informer(ftck_reconciler_t *r, int which) {
  return which == 0 ? r->jobs : which == 1 ? r->pods : which == 2 ? r->nodes : NULL;
}
