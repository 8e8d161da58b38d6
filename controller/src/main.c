/*
 * main.c - ftcomm-controller: parse options, load the kube config, serve
 * /healthz, /readyz and /metrics, fill the caches, take the leader Lease,
 * then open the coordinator port, label this pod as the leader (the
 * Service sends ranks only to the leader's coordinators) and reconcile
 * until SIGTERM/SIGINT (or the Lease is lost), sweeping the dump volume for
 * the folders of deleted jobs meanwhile (on the sweeper thread of the
 * coordinators, off this loop); then stop in reverse order,
 * drop the label and release the Lease so a successor starts at once.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_time.h"
#include "httpd.h"
#include "jobcoord.h"
#include "kube_client.h"
#include "kube_config.h"
#include "kube_json.h"
#include "leader.h"
#include "metrics.h"
#include "options.h"
#include "token.h"
#include "trainingjob.h"

/* Set by SIGTERM/SIGINT or by the Lease thread; read by the main thread and
 * the waits. Atomic (lock-free, so also safe in a signal handler). */
static volatile int g_stop;

static int stopping(void) { return __atomic_load_n(&g_stop, __ATOMIC_ACQUIRE); }

static void on_signal(int sig) {
  (void)sig;
  __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
}

typedef struct app {
  ftck_options_t opt;
  ftck_client_t *client;
  ftck_reconciler_t *rec;
  ftck_leader_t *leader;
  ftck_coords_t *coords;
  int lost; /* atomic: set on the Lease thread */
} app_t;

#define LEADER_LABEL "ftcomm.dev/leader"

/* A coordinator has news for a job: reconcile it (on a coordinator thread). */
static void on_coord_news(void *ud, const char *key) {
  app_t *a = ud;
  ftck_reconciler_t *rec = __atomic_load_n(&a->rec, __ATOMIC_ACQUIRE);
  if (rec) ftck_workqueue_add(ftck_reconciler_queue(rec), key);
}

/* Put the leader label on our own pod, or take it off. The chart's Service
 * selects it, so ranks reach only the leader's coordinator port. */
static void leader_label(app_t *a, int on) {
  if (!a->opt.leader_label || !a->opt.pod_name[0] || !a->opt.pod_namespace[0]) return;
  char *path = ftck_path("", "v1", a->opt.pod_namespace, "pods", a->opt.pod_name);
  json_t *patch = json_pack("{s:{s:{s:o}}}", "metadata", "labels", LEADER_LABEL, on ? json_string("true") : json_null());
  long code = 0;
  ftc_status_t st = path && patch ? ftck_merge_patch(a->client, path, patch, &code, NULL)
                                  : ftc__error(FTC_ERR_NO_MEMORY, "no memory");
  if (st == FTC_OK)
    fprintf(stderr, "ftcomm-controller: pod %s/%s %s %s\n", a->opt.pod_namespace, a->opt.pod_name,
            on ? "labeled" : "no longer labeled", LEADER_LABEL "=true");
  else
    fprintf(stderr, "ftcomm-controller: cannot %s the label %s on pod %s/%s: %s\n", on ? "set" : "remove",
            LEADER_LABEL, a->opt.pod_namespace, a->opt.pod_name, ftc_last_error());
  json_decref(patch);
  ftc__free(path);
}

/* For the dump sweep: does TrainingJob ns/name exist in the synced cache? */
static int job_lookup(void *ud, const char *ns, const char *name, ftck_job_ref_t *ref) {
  app_t *a = ud;
  ftck_informer_t *jobs = ftck_reconciler_informer(a->rec, 0);
  if (!jobs || !ftck_informer_synced(jobs)) return -1;
  char key[512];
  snprintf(key, sizeof key, "%s/%s", ns, name);
  json_t *job = ftck_informer_get(jobs, key);
  if (!job) return 0;
  const char *uid = ftck_jstr(job, "metadata.uid");
  int64_t created = ftck_parse_time(ftck_jstr(job, "metadata.creationTimestamp"));
  snprintf(ref->uid, sizeof ref->uid, "%s", uid ? uid : "");
  ref->created_s = created < 0 ? -1 : created / 1000000000LL;
  json_decref(job);
  return 1;
}

/* How often the leader sweeps the dump volume: a quarter of the ttl,
 * between 1 s and 1 min. */
static int64_t sweep_period_ns(int64_t ttl_s) {
  int64_t p = ttl_s / 4;
  return (p < 1 ? 1 : p > 60 ? 60 : p) * 1000000000LL;
}

static void on_lost(void *ud) {
  app_t *a = ud;
  __atomic_store_n(&a->lost, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
}

static void handle(const char *path, int *status, const char **ctype, char **body, void *ud) {
  app_t *a = ud;
  if (!strcmp(path, "/healthz") || !strcmp(path, "/livez")) {
    int lost = __atomic_load_n(&a->lost, __ATOMIC_ACQUIRE);
    *status = lost ? 503 : 200;
    *body = ftc__strdup(lost ? "leader lease lost\n" : "ok\n");
  } else if (!strcmp(path, "/readyz")) {
    int ready = a->rec && ftck_reconciler_synced(a->rec);
    *status = ready ? 200 : 503;
    *body = ftc__strdup(ready ? "ok\n" : "caches not synced\n");
  } else if (!strcmp(path, "/metrics")) {
    ftck_leader_stats_t ls;
    if (a->leader) ftck_leader_get_stats(a->leader, &ls);
    ftck_metrics_src_t src = {a->client, a->rec, a->leader ? ftck_leader_is_leader(a->leader) : 1, a->coords,
                              a->leader ? &ls : NULL};
    *body = ftck_metrics_render(&src);
    *status = *body ? 200 : 500;
    *ctype = "text/plain; version=0.0.4; charset=utf-8";
  } else {
    *status = 404;
    *body = ftc__strdup("not found; try /healthz, /readyz or /metrics\n");
  }
}

int main(int argc, char **argv) {
  app_t a = {0};
  int rc = 1;
  ftck_json_use_ftc_alloc();
  if (ftck_options_parse(argc, argv, &a.opt) != FTC_OK) {
    fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
    return 2;
  }
  if (a.opt.show_help) {
    ftck_options_usage(argv[0]);
    return 0;
  }
  ftck_config_t *cfg = NULL;
  if (ftck_config_load(a.opt.kubeconfig, a.opt.context[0] ? a.opt.context : NULL,
                       a.opt.service_account_dir[0] ? a.opt.service_account_dir : NULL, &cfg) != FTC_OK) {
    fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
    return 2;
  }
  if (!a.opt.lease_namespace[0]) snprintf(a.opt.lease_namespace, sizeof a.opt.lease_namespace, "%s", cfg->namespace);
  if (ftck_client_create(cfg, &a.client) != FTC_OK) {
    fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
    goto out_free_config;
  }
  if (a.opt.token_check_s)
    fprintf(stderr, "ftcomm-controller: --token-check is deprecated and ignored: a deleted token Secret is made "
                    "again before the next pod that needs it\n");
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  ftck_coords_opts_t co = {.bind = a.opt.coordinator_bind,
                           .dump_volume = a.opt.dump_volume,
                           .dump_retention = a.opt.dump_retention,
                           .dump_wait_ms = a.opt.dump_wait_s * 1000,
                           .analyzer = a.opt.analyzer,
                           .notify = on_coord_news,
                           .ud = &a};
  if (ftck_coords_create(&co, &a.coords) != FTC_OK) {
    fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
    goto out_destroy_client;
  }
  ftck_reconciler_opts_t ro = {.watch_namespace = a.opt.watch_namespace,
                               .env = {.coordinator = a.opt.coordinator_address, .dump_dir = a.opt.dump_dir},
                               .identity = a.opt.identity,
                               .workers = a.opt.workers,
                               .resync_ms = (int64_t)a.opt.resync_s * 1000,
                               .no_nodes = !a.opt.watch_nodes,
                               .coords = a.coords};
  /* Before any reconcile: every job's token derives from this key. */
  if (ftck_token_key_load(a.client, a.opt.lease_namespace, a.opt.token_key_secret, ro.token_key) != FTC_OK) {
    fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
    goto out_destroy_coords;
  }
  ftck_reconciler_t *rec = NULL;
  if (ftck_reconciler_create(a.client, &ro, &rec) != FTC_OK) {
    fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
    goto out_destroy_coords;
  }
  __atomic_store_n(&a.rec, rec, __ATOMIC_RELEASE);
  ftck_httpd_t *httpd = NULL;
  if (ftck_httpd_start(a.opt.listen_addr, handle, &a, &httpd) != FTC_OK) {
    fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
    goto out_destroy_reconciler;
  }
  fprintf(stderr, "ftcomm-controller: server %s, namespace %s, health and metrics on port %d, identity %s\n",
          ftck_client_server(a.client), a.opt.watch_namespace[0] ? a.opt.watch_namespace : "(all)",
          ftck_httpd_port(httpd), a.opt.identity);
  if (a.opt.leader_elect) {
    ftck_leader_opts_t lo = {.ns = a.opt.lease_namespace, .name = a.opt.lease_name, .identity = a.opt.identity,
                             .lease_duration_s = a.opt.lease_duration_s, .renew_deadline_s = a.opt.renew_deadline_s,
                             .retry_period_s = a.opt.retry_period_s, .on_lost = on_lost, .ud = &a};
    if (ftck_leader_create(a.client, &lo, &a.leader) != FTC_OK) {
      fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
      goto out_stop_httpd;
    }
  }
  /* Caches fill while we wait for the Lease, so a new leader starts warm. */
  if (ftck_reconciler_start_informers(a.rec) != FTC_OK) {
    fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
    goto out_destroy_leader;
  }
  if (a.leader) {
    leader_label(&a, 0); /* a label left by this pod's previous container */
    if (ftck_leader_acquire(a.leader, &g_stop) != FTC_OK) {
      rc = 0; /* stopped while waiting */
      goto out_stop_reconciler;
    }
    fprintf(stderr, "ftcomm-controller: %s leads (Lease %s/%s)\n", a.opt.identity, a.opt.lease_namespace,
            a.opt.lease_name);
    if (ftck_leader_start_renewing(a.leader) != FTC_OK) {
      fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
      goto out_release;
    }
  }
  /* The coordinator port opens once we lead; a port still held (e.g. by
   * the previous leader on this node) is tried again every 2 s. */
  int64_t next_listen = 0;
  while (!stopping() && !ftck_reconciler_synced(a.rec)) usleep(50000);
  if (!stopping() && ftck_reconciler_start_workers(a.rec) != FTC_OK) {
    fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
    goto out_release;
  }
  /* The first sweep at once (the caches have synced), on its own thread. */
  if (!a.opt.dump_ttl_after_deletion_s) {
    fprintf(stderr, "ftcomm-controller: --dump-ttl-after-deletion=0: the dump folders of deleted jobs are kept\n");
  } else {
    ftck_coords_sweep_opts_t so = {.ns = a.opt.watch_namespace,
                                   .ttl_s = a.opt.dump_ttl_after_deletion_s,
                                   .lookup = job_lookup,
                                   .ud = &a};
    if (ftck_coords_start_sweeper(a.coords, &so, sweep_period_ns(a.opt.dump_ttl_after_deletion_s)) != FTC_OK) {
      fprintf(stderr, "ftcomm-controller: %s\n", ftc_last_error());
      goto out_release;
    }
  }
  while (!stopping()) {
    if (ftck_coords_port(a.coords) < 0 && ftc__now_ns() >= next_listen) {
      if (ftck_coords_listen(a.coords) == FTC_OK) {
        fprintf(stderr, "ftcomm-controller: coordinator port %d (%s), dumps in %s\n", ftck_coords_port(a.coords),
                a.opt.coordinator_bind, a.opt.dump_volume);
        leader_label(&a, 1);
      } else {
        fprintf(stderr, "ftcomm-controller: %s; trying again in 2 s\n", ftc_last_error());
        next_listen = ftc__now_ns() + 2000000000LL;
      }
    }
    ftck_coords_poll(a.coords);
    usleep(100000);
  }
  ftck_coords_stop_sweeper(a.coords); /* before the caches its lookups read stop */
  int lost = __atomic_load_n(&a.lost, __ATOMIC_ACQUIRE);
  rc = lost ? 1 : 0;
  fprintf(stderr, "ftcomm-controller: %s; shutting down\n", lost ? "lost the leader Lease" : "signal received");
out_release:
  ftck_reconciler_stop(a.rec);
  if (ftck_coords_port(a.coords) >= 0) leader_label(&a, 0);
  if (a.leader) ftck_leader_release(a.leader);
out_stop_reconciler:
  ftck_reconciler_stop(a.rec);
out_destroy_leader:
  ftck_leader_destroy(a.leader);
out_stop_httpd:
  ftck_httpd_stop(httpd);
out_destroy_reconciler:
  /* Workers first (they call into the coordinators), then the coordinators
   * (their events reach the reconciler's queue), then the reconciler. */
  ftck_reconciler_stop(a.rec);
  ftck_coords_destroy(a.coords);
  a.coords = NULL;
  __atomic_store_n(&a.rec, NULL, __ATOMIC_RELEASE);
  ftck_reconciler_destroy(rec);
out_destroy_coords:
  ftck_coords_destroy(a.coords);
out_destroy_client:
  ftck_client_destroy(a.client);
out_free_config:
  ftck_config_free(cfg);
  return rc;
}
