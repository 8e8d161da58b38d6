/*
 * options.c - flag and environment parsing for ftcomm-controller. Every
 * flag is one row of the table below, which also prints the usage.
 */
#include "options.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ftc_addr.h"
#include "ftc_error.h"

enum kind { STR, INT, BOOL, DUR };

typedef struct flag {
  const char *name;
  enum kind kind;
  size_t off, size;
  int lo, hi;
  const char *doc;
} flag_t;

#define S(f) STR, offsetof(ftck_options_t, f), sizeof(((ftck_options_t *)0)->f), 0, 0
#define I(f, lo, hi) INT, offsetof(ftck_options_t, f), 0, lo, hi
#define B(f) BOOL, offsetof(ftck_options_t, f), 0, 0, 1
#define D(f) DUR, offsetof(ftck_options_t, f), 0, 0, 0

#define DUR_MAX_S (3650LL * 86400) /* ten years */

static const flag_t flags[] = {
    {"kubeconfig", S(kubeconfig), "kubeconfig file (default $KUBECONFIG, in-cluster, ~/.kube/config)"},
    {"context", S(context), "kubeconfig context (default current-context)"},
    {"service-account-dir", S(service_account_dir), "in-cluster token, ca.crt and namespace (default /var/run/secrets/kubernetes.io/serviceaccount)"},
    {"namespace", S(watch_namespace), "watch only this namespace (default $WATCH_NAMESPACE; empty: all)"},
    {"listen-address", S(listen_addr), "host:port of /healthz, /readyz and /metrics (default :8080; port 0 picks one)"},
    {"leader-elect", B(leader_elect), "hold a coordination.k8s.io Lease before reconciling (default true)"},
    {"lease-name", S(lease_name), "name of the Lease (default ftcomm-controller)"},
    {"lease-namespace", S(lease_namespace), "namespace of the Lease (default $POD_NAMESPACE, else the kubeconfig's)"},
    {"identity", S(identity), "leader-election identity (default $POD_NAME, else hostname_pid)"},
    {"lease-duration", I(lease_duration_s, 2, 3600), "seconds a Lease is valid without renewal (default 15)"},
    {"renew-deadline", I(renew_deadline_s, 1, 3600), "seconds the leader keeps trying to renew before it gives up (default 10)"},
    {"retry-period", I(retry_period_s, 1, 600), "seconds between Lease attempts (default 2)"},
    {"workers", I(workers, 1, 64), "reconcile workers (default 2)"},
    {"watch-nodes", B(watch_nodes), "watch Nodes to replace pods on a node that is not Ready (default true; needs the ftcomm-controller-nodes ClusterRole)"},
    {"resync", I(resync_s, 0, 86400), "seconds between full resyncs of the caches; 0 never (default 300)"},
    {"coordinator-address", S(coordinator_address), "FTCOMM_COORDINATOR given to pods (default ftcomm-controller.ftcomm-system.svc:7470)"},
    {"dump-dir", S(dump_dir), "FTCOMM_DUMP_DIR given to pods (default /var/run/ftcomm/dumps)"},
    {"coordinator-bind", S(coordinator_bind), "host:port where ranks reach the jobs' coordinators (default :7470; port 0 picks one, logged)"},
    {"dump-volume", S(dump_volume), "folder of incidents: <namespace>/<job>/<incident>/rank-<r>.json and analysis (default /var/lib/ftcomm/dumps)"},
    {"dump-retention", I(dump_retention, 1, 100000), "incidents kept per job, the newest (default 10)"},
    {"dump-ttl-after-deletion", D(dump_ttl_after_deletion_s), "how long the dump folder of a deleted TrainingJob stays, e.g. 7d, 36h, 90m; 0 keeps it forever (default 7d)"},
    {"dump-wait", I(dump_wait_s, 1, 3600), "seconds an incident waits for every rank's dump before it is analyzed (default 10; a rank writes and uploads its dump within about 1 s of the request)"},
    {"token-check", I(token_check_s, 1, 86400), "deprecated, ignored: a deleted token Secret is made again before the next pod that needs it"},
    {"token-key-secret", S(token_key_secret), "Secret in the controller's namespace (--lease-namespace) holding the key job tokens derive from; made at first start (default ftcomm-controller-token-key)"},
    {"analyzer", S(analyzer), "the ftcomm-trace binary (default: next to this one, else $PATH)"},
    {"leader-label", B(leader_label), "label this pod ftcomm.dev/leader=true while it leads, for the Service (default true; needs $POD_NAME)"},
};

static void set_str(ftck_options_t *o, const flag_t *f, const char *v) {
  snprintf((char *)o + f->off, f->size, "%s", v);
}

static ftc_status_t set_flag(ftck_options_t *o, const flag_t *f, const char *v) {
  if (f->kind == STR) {
    if (strlen(v) >= f->size) return ftc__error(FTC_ERR_CONFIG, "--%s: value too long (at most %zu characters)", f->name, f->size - 1);
    set_str(o, f, v);
    return FTC_OK;
  }
  if (f->kind == DUR) return ftck_parse_duration(f->name, v, (int64_t *)((char *)o + f->off));
  int *dst = (int *)((char *)o + f->off);
  if (f->kind == BOOL) {
    if (!strcmp(v, "true") || !strcmp(v, "1")) *dst = 1;
    else if (!strcmp(v, "false") || !strcmp(v, "0")) *dst = 0;
    else return ftc__error(FTC_ERR_CONFIG, "--%s: expected true or false, got \"%s\"", f->name, v);
    return FTC_OK;
  }
  char *end;
  long n = strtol(v, &end, 10);
  if (!*v || *end || n < f->lo || n > f->hi)
    return ftc__error(FTC_ERR_CONFIG, "--%s: expected an integer in [%d, %d], got \"%s\"", f->name, f->lo, f->hi, v);
  *dst = (int)n;
  return FTC_OK;
}

ftc_status_t ftck_parse_duration(const char *what, const char *v, int64_t *out) {
  int64_t total = 0;
  const char *p = v;
  if (!strcmp(v, "0")) {
    *out = 0;
    return FTC_OK;
  }
  while (*p) {
    if (*p < '0' || *p > '9') goto out_bad;
    int64_t n = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
      n = n * 10 + (*p - '0');
      if (n > DUR_MAX_S) goto out_too_long;
    }
    int64_t unit = *p == 's' ? 1 : *p == 'm' ? 60 : *p == 'h' ? 3600 : *p == 'd' ? 86400 : 0;
    if (!unit) goto out_bad;
    p++;
    if (n > (DUR_MAX_S - total) / unit) goto out_too_long;
    total += n * unit;
  }
  if (p == v) goto out_bad;
  *out = total;
  return FTC_OK;
out_too_long:
  return ftc__error(FTC_ERR_CONFIG, "--%s: \"%s\" is longer than the most it takes, 3650d", what, v);
out_bad:
  return ftc__error(FTC_ERR_CONFIG, "--%s: expected a duration such as 7d, 36h, 90m, 45s or 1h30m (0 keeps the "
                    "folders forever), got \"%s\"", what, v);
}

void ftck_options_usage(const char *argv0) {
  printf("usage: %s [--flag=value ...]\n\nRuns TrainingJobs (ftcomm.dev/v1alpha1) on Kubernetes.\n\n", argv0);
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    printf("  --%-24s %s\n", flags[i].name, flags[i].doc);
  printf("  --%-24s %s\n", "help", "this text");
  printf("\nEnvironment: KUBECONFIG, WATCH_NAMESPACE, POD_NAME, POD_NAMESPACE; logging with FTCOMM_LOG_LEVEL and\n"
         "FTCOMM_LOG_SUBSYS (k8s, ctrl).\n");
}

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

ftc_status_t ftck_options_parse(int argc, char **argv, ftck_options_t *o) {
  memset(o, 0, sizeof *o);
  snprintf(o->listen_addr, sizeof o->listen_addr, ":8080");
  o->leader_elect = 1;
  snprintf(o->lease_name, sizeof o->lease_name, "ftcomm-controller");
  snprintf(o->token_key_secret, sizeof o->token_key_secret, "ftcomm-controller-token-key");
  o->lease_duration_s = 15;
  o->renew_deadline_s = 10;
  o->retry_period_s = 2;
  o->workers = 2;
  o->watch_nodes = 1;
  o->resync_s = 300;
  snprintf(o->coordinator_address, sizeof o->coordinator_address, "ftcomm-controller.ftcomm-system.svc:7470");
  snprintf(o->dump_dir, sizeof o->dump_dir, "/var/run/ftcomm/dumps");
  snprintf(o->coordinator_bind, sizeof o->coordinator_bind, ":7470");
  snprintf(o->dump_volume, sizeof o->dump_volume, "/var/lib/ftcomm/dumps");
  o->dump_retention = 10;
  o->dump_ttl_after_deletion_s = 7 * 86400;
  o->dump_wait_s = 10;
  o->leader_label = 1;
  if (env("KUBECONFIG")) snprintf(o->kubeconfig, sizeof o->kubeconfig, "%s", env("KUBECONFIG"));
  if (env("WATCH_NAMESPACE")) snprintf(o->watch_namespace, sizeof o->watch_namespace, "%s", env("WATCH_NAMESPACE"));
  if (env("POD_NAMESPACE")) snprintf(o->lease_namespace, sizeof o->lease_namespace, "%s", env("POD_NAMESPACE"));
  if (env("POD_NAME")) snprintf(o->identity, sizeof o->identity, "%s", env("POD_NAME"));
  if (env("POD_NAME")) snprintf(o->pod_name, sizeof o->pod_name, "%s", env("POD_NAME"));
  if (env("POD_NAMESPACE")) snprintf(o->pod_namespace, sizeof o->pod_namespace, "%s", env("POD_NAMESPACE"));
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      o->show_help = 1;
      continue;
    }
    if (strncmp(a, "--", 2) != 0) return ftc__error(FTC_ERR_CONFIG, "unexpected argument \"%s\" (flags are --name=value)", a);
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t nl = eq ? (size_t)(eq - name) : strlen(name);
    const flag_t *f = NULL;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
      if (strlen(flags[k].name) == nl && !strncmp(flags[k].name, name, nl)) f = &flags[k];
    if (!f) return ftc__error(FTC_ERR_CONFIG, "unknown flag \"%s\"; see --help", a);
    const char *v;
    if (eq) v = eq + 1;
    else if (f->kind == BOOL) v = "true";
    else if (i + 1 < argc) v = argv[++i];
    else return ftc__error(FTC_ERR_CONFIG, "--%s needs a value", f->name);
    ftc_status_t st = set_flag(o, f, v);
    if (st != FTC_OK) return st;
  }
  if (o->renew_deadline_s >= o->lease_duration_s)
    return ftc__error(FTC_ERR_CONFIG, "--renew-deadline (%d) must be shorter than --lease-duration (%d)",
                      o->renew_deadline_s, o->lease_duration_s);
  if (o->retry_period_s >= o->renew_deadline_s)
    return ftc__error(FTC_ERR_CONFIG, "--retry-period (%d) must be shorter than --renew-deadline (%d)",
                      o->retry_period_s, o->renew_deadline_s);
  /* Pods get it as FTCOMM_COORDINATOR: refuse here what every rank would. */
  char ch[FTC__ADDR_HOST_MAX];
  int cp;
  if (ftc__addr_split("--coordinator-address", o->coordinator_address, ch, sizeof ch, &cp) != FTC_OK)
    return FTC_ERR_CONFIG;
  if (!o->identity[0]) {
    char host[200] = "unknown";
    gethostname(host, sizeof host - 1);
    snprintf(o->identity, sizeof o->identity, "%s_%d", host, (int)getpid());
  }
  return FTC_OK;
}
