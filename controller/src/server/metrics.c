/*
 * metrics.c - renders the counters that the client, the informers, the work
 * queue and the reconciler keep into Prometheus text.
 */
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ftc_alloc.h"

typedef struct out {
  char *p;
  size_t len, cap;
  int failed;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...) {
  if (o->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      o->failed = 1;
      return;
    }
    if ((size_t)n < o->cap - o->len) {
      o->len += (size_t)n;
      return;
    }
    size_t cap = o->cap * 2 + (size_t)n;
    char *np = ftc__realloc(o->p, cap);
    if (!np) {
      o->failed = 1;
      return;
    }
    o->p = np;
    o->cap = cap;
  }
}

static void api_stat(const char *verb, long code, uint64_t n, void *ud) {
  put(ud, "ftcomm_controller_api_requests_total{verb=\"%s\",code=\"%ld\"} %llu\n", verb, code, (unsigned long long)n);
}

char *ftck_metrics_render(const ftck_metrics_src_t *src) {
  out_t o = {.cap = 4096};
  o.p = ftc__malloc(o.cap);
  if (!o.p) return NULL;
  o.p[0] = '\0';
  ftck_reconciler_stats_t rs = {0};
  if (src->reconciler) ftck_reconciler_get_stats(src->reconciler, &rs);
  put(&o, "# HELP ftcomm_controller_reconciles_total TrainingJob reconciles by result.\n"
          "# TYPE ftcomm_controller_reconciles_total counter\n"
          "ftcomm_controller_reconciles_total{result=\"success\"} %llu\n"
          "ftcomm_controller_reconciles_total{result=\"error\"} %llu\n",
      (unsigned long long)rs.reconciles_ok, (unsigned long long)rs.reconciles_error);
  if (src->reconciler) {
    ftck_workqueue_t *q = ftck_reconciler_queue(src->reconciler);
    put(&o, "# HELP ftcomm_controller_workqueue_depth Job keys ready to be reconciled.\n"
            "# TYPE ftcomm_controller_workqueue_depth gauge\n"
            "ftcomm_controller_workqueue_depth %zu\n"
            "# HELP ftcomm_controller_workqueue_waiting Job keys waiting for a backoff or requeue delay.\n"
            "# TYPE ftcomm_controller_workqueue_waiting gauge\n"
            "ftcomm_controller_workqueue_waiting %zu\n",
        ftck_workqueue_len(q), ftck_workqueue_waiting(q));
  }
  put(&o, "# HELP ftcomm_controller_api_requests_total Requests to the API server by verb and HTTP code (0: no answer).\n"
          "# TYPE ftcomm_controller_api_requests_total counter\n");
  if (src->client) ftck_client_each_stat(src->client, api_stat, &o);
  put(&o, "# HELP ftcomm_controller_api_connections_total Connections opened to the API server (others are reused).\n"
          "# TYPE ftcomm_controller_api_connections_total counter\n"
          "ftcomm_controller_api_connections_total %llu\n",
      src->client ? (unsigned long long)ftck_client_connections(src->client) : 0ULL);
  put(&o, "# HELP ftcomm_controller_watch_restarts_total Watches restarted, by informer and reason (expired: 410 Gone).\n"
          "# TYPE ftcomm_controller_watch_restarts_total counter\n");
  for (int w = 0; src->reconciler && w < 3; w++) {
    ftck_informer_t *inf = ftck_reconciler_informer(src->reconciler, w);
    if (!inf) continue;
    ftck_informer_stats_t s;
    ftck_informer_get_stats(inf, &s);
    const char *n = ftck_informer_name(inf);
    put(&o, "ftcomm_controller_watch_restarts_total{informer=\"%s\",reason=\"expired\"} %llu\n", n,
        (unsigned long long)s.restarts_expired);
    put(&o, "ftcomm_controller_watch_restarts_total{informer=\"%s\",reason=\"error\"} %llu\n", n,
        (unsigned long long)s.restarts_error);
    put(&o, "ftcomm_controller_watch_restarts_total{informer=\"%s\",reason=\"closed\"} %llu\n", n,
        (unsigned long long)s.restarts_closed);
  }
  put(&o, "# HELP ftcomm_controller_lists_total Full lists done by each informer.\n"
          "# TYPE ftcomm_controller_lists_total counter\n");
  for (int w = 0; src->reconciler && w < 3; w++) {
    ftck_informer_t *inf = ftck_reconciler_informer(src->reconciler, w);
    if (!inf) continue;
    ftck_informer_stats_t s;
    ftck_informer_get_stats(inf, &s);
    put(&o, "ftcomm_controller_lists_total{informer=\"%s\"} %llu\n", ftck_informer_name(inf),
        (unsigned long long)s.lists);
  }
  put(&o, "# HELP ftcomm_controller_pods_created_total Pods created.\n"
          "# TYPE ftcomm_controller_pods_created_total counter\n"
          "ftcomm_controller_pods_created_total %llu\n"
          "# HELP ftcomm_controller_pods_deleted_total Pods deleted.\n"
          "# TYPE ftcomm_controller_pods_deleted_total counter\n"
          "ftcomm_controller_pods_deleted_total %llu\n"
          "# HELP ftcomm_controller_replacements_total Lost pods replaced.\n"
          "# TYPE ftcomm_controller_replacements_total counter\n"
          "ftcomm_controller_replacements_total %llu\n"
          "# HELP ftcomm_controller_reconciler_records Records the reconciler keeps per job beside its caches (each job's token; pods found missing until replaced; token Secrets seen deleted; a restart of every pod until its older pods are gone); 0 once every job is deleted.\n"
          "# TYPE ftcomm_controller_reconciler_records gauge\n"
          "ftcomm_controller_reconciler_records %llu\n"
          "# HELP ftcomm_controller_leader 1 while this instance holds the leader Lease.\n"
          "# TYPE ftcomm_controller_leader gauge\n"
          "ftcomm_controller_leader %d\n",
      (unsigned long long)rs.pods_created, (unsigned long long)rs.pods_deleted, (unsigned long long)rs.replacements,
      (unsigned long long)rs.remembered, src->leader);
  if (src->lease)
    put(&o, "# HELP ftcomm_controller_lease_requests_total Requests sent for the leader Lease, by verb (a steady leader sends one PUT per retry period).\n"
            "# TYPE ftcomm_controller_lease_requests_total counter\n"
            "ftcomm_controller_lease_requests_total{verb=\"GET\"} %llu\n"
            "ftcomm_controller_lease_requests_total{verb=\"PUT\"} %llu\n"
            "ftcomm_controller_lease_requests_total{verb=\"POST\"} %llu\n",
        (unsigned long long)src->lease->gets, (unsigned long long)src->lease->puts,
        (unsigned long long)src->lease->posts);
  if (src->coords) {
    ftck_coords_stats_t cs;
    ftck_coords_get_stats(src->coords, &cs);
    put(&o, "# HELP ftcomm_controller_coordinator_listening 1 while the coordinator port accepts ranks.\n"
            "# TYPE ftcomm_controller_coordinator_listening gauge\n"
            "ftcomm_controller_coordinator_listening %d\n"
            "# HELP ftcomm_controller_coordinators_started_total Job coordinators started (or remade).\n"
            "# TYPE ftcomm_controller_coordinators_started_total counter\n"
            "ftcomm_controller_coordinators_started_total %llu\n"
            "# HELP ftcomm_controller_epochs_total Membership epochs formed by the job coordinators.\n"
            "# TYPE ftcomm_controller_epochs_total counter\n"
            "ftcomm_controller_epochs_total %llu\n"
            "# HELP ftcomm_controller_slots_declared_lost_total Slots the controller declared lost to a coordinator.\n"
            "# TYPE ftcomm_controller_slots_declared_lost_total counter\n"
            "ftcomm_controller_slots_declared_lost_total %llu\n"
            "# HELP ftcomm_controller_hangs_total Hangs reported by the job coordinators.\n"
            "# TYPE ftcomm_controller_hangs_total counter\n"
            "ftcomm_controller_hangs_total %llu\n"
            "# HELP ftcomm_controller_dumps_total Flight-recorder dumps stored in the dump volume.\n"
            "# TYPE ftcomm_controller_dumps_total counter\n"
            "ftcomm_controller_dumps_total %llu\n"
            "# HELP ftcomm_controller_coordinator_sessions Rank connections open on the coordinator port.\n"
            "# TYPE ftcomm_controller_coordinator_sessions gauge\n"
            "ftcomm_controller_coordinator_sessions %llu\n"
            "# HELP ftcomm_controller_coordinator_connections_total Rank connections by outcome (unrouted: no coordinator for their job yet).\n"
            "# TYPE ftcomm_controller_coordinator_connections_total counter\n"
            "ftcomm_controller_coordinator_connections_total{result=\"routed\"} %llu\n"
            "ftcomm_controller_coordinator_connections_total{result=\"unrouted\"} %llu\n",
        cs.listening, (unsigned long long)cs.coordinators, (unsigned long long)cs.epochs,
        (unsigned long long)cs.slots_declared_lost, (unsigned long long)cs.hangs, (unsigned long long)cs.dumps,
        (unsigned long long)cs.router_open, (unsigned long long)cs.router_routed,
        (unsigned long long)cs.router_unrouted);
    put(&o, "# HELP ftcomm_controller_dump_dirs_removed_total Folders removed from the dump volume, by reason: job_deleted (a deleted TrainingJob's folder, after --dump-ttl-after-deletion), job_recreated (an incident of an earlier job of the same name), retention (beyond --dump-retention).\n"
            "# TYPE ftcomm_controller_dump_dirs_removed_total counter\n"
            "ftcomm_controller_dump_dirs_removed_total{reason=\"job_deleted\"} %llu\n"
            "ftcomm_controller_dump_dirs_removed_total{reason=\"job_recreated\"} %llu\n"
            "ftcomm_controller_dump_dirs_removed_total{reason=\"retention\"} %llu\n"
            "# HELP ftcomm_controller_dump_dirs_awaiting_removal Folders of deleted TrainingJobs waiting out --dump-ttl-after-deletion (at the last sweep).\n"
            "# TYPE ftcomm_controller_dump_dirs_awaiting_removal gauge\n"
            "ftcomm_controller_dump_dirs_awaiting_removal %llu\n"
            "# HELP ftcomm_controller_dump_sweeps_total Sweeps of the dump volume for the folders of deleted TrainingJobs.\n"
            "# TYPE ftcomm_controller_dump_sweeps_total counter\n"
            "ftcomm_controller_dump_sweeps_total %llu\n",
        (unsigned long long)cs.dirs_removed_deleted, (unsigned long long)cs.dirs_removed_stale,
        (unsigned long long)cs.dirs_removed_retention, (unsigned long long)cs.dirs_waiting,
        (unsigned long long)cs.sweeps);
  }
  if (o.failed) {
    ftc__free(o.p);
    return NULL;
  }
  return o.p;
}
