/*
 * jobspec.c - defaults, pod construction and condition bookkeeping for
 * TrainingJobs. Everything here is deterministic in its inputs: the same
 * job, slot and incarnation always give the same pod, which is what makes
 * the reconciler idempotent across restarts.
 */
#include "jobspec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ftc_param.h"
#include "ftc_time.h"
#include "kube_client.h"
#include "kube_json.h"

/* The spec's fields are checked as the CRD's schema checks them (types,
 * bounds, enums: crds/ftcomm.dev_trainingjobs.yaml), so an object the API
 * server did not validate (a CRD installed without its schema, an object
 * stored before an upgrade) is refused with words that say what to fix,
 * rather than read as something else: "replicas": "4" as 1 replica, an
 * integer over 2^31 cut to 32 bits, "onHang": "dumponly" as restartAll. A
 * field that is absent or null takes the CRD's default. */
typedef struct spec_reader {
  const json_t *spec;
  char *err;
  size_t err_len;
  int bad;
} spec_reader_t;

static void refuse(spec_reader_t *r, const char *fmt, const char *path, long long a, long long b,
                   long long c) {
  if (r->bad) return;
  snprintf(r->err, r->err_len, fmt, path, a, b, c);
  r->bad = 1;
}

static int spec_int(spec_reader_t *r, const char *path, long long lo, long long hi, int def) {
  json_t *v = ftck_jget(r->spec, path);
  if (!v || json_is_null(v)) return def;
  if (!json_is_integer(v)) {
    refuse(r, "spec.%s must be an integer in [%lld, %lld]", path, lo, hi, 0);
    return def;
  }
  long long x = (long long)json_integer_value(v);
  if (x < lo || x > hi) {
    refuse(r, "spec.%s must be at least %lld and at most %lld; it is %lld", path, lo, hi, x);
    return def;
  }
  return (int)x;
}

static int spec_bool(spec_reader_t *r, const char *path, int def) {
  json_t *v = ftck_jget(r->spec, path);
  if (!v || json_is_null(v)) return def;
  if (!json_is_boolean(v)) {
    refuse(r, "spec.%s must be true or false", path, 0, 0, 0);
    return def;
  }
  return json_is_true(v);
}

/* The index of the field's word in words (n of them, the CRD's enum), or
 * def when absent; an unknown word is refused with the list. */
static int spec_word(spec_reader_t *r, const char *path, const char *const *words, int n, int def) {
  json_t *v = ftck_jget(r->spec, path);
  if (!v || json_is_null(v)) return def;
  const char *w = json_string_value(v);
  for (int i = 0; w && i < n; i++)
    if (!strcmp(w, words[i])) return i;
  if (!r->bad) {
    char list[128] = "";
    size_t off = 0;
    for (int i = 0; i < n && off < sizeof list; i++)
      off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", i ? ", " : "", words[i]);
    if (w)
      snprintf(r->err, r->err_len, "spec.%s is \"%.64s\"; use one of %s", path, w, list);
    else
      snprintf(r->err, r->err_len, "spec.%s must be a string, one of %s", path, list);
    r->bad = 1;
  }
  return def;
}

/* A runtime parameter as a container's env gives it to the rank: the last
 * entry of that name wins (as in Kubernetes); its value parsed as the
 * runtime parses it (the default when invalid); from valueFrom (a Secret,
 * a ConfigMap, a field), which is not read here, the top of its range. */
static int64_t container_param(const json_t *c, ftc_param_id_t id) {
  const ftc_param_desc_t *d = ftc__param_desc(id);
  int64_t v = d->def;
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(c, "env"), i, e) {
    const char *name = json_string_value(json_object_get(e, "name"));
    if (!name || strcmp(name, d->name) != 0) continue;
    const char *text = json_string_value(json_object_get(e, "value"));
    v = d->def;
    if (text && ftc__param_parse_int(id, text, &v, NULL, 0) != FTC_OK) v = d->def;
    else if (!text && json_object_get(e, "valueFrom")) v = d->hi;
  }
  return v;
}

int ftck_job_spec_parse(const json_t *job, ftck_job_spec_t *s, char *err, size_t err_len) {
  memset(s, 0, sizeof *s);
  const json_t *spec = ftck_jget(job, "spec");
  spec_reader_t r = {spec, err, err_len, 0};
  static const char *const backends[] = {"auto", "nccl", "tcp"};
  static const char *const hangs[] = {"replace", "dumpOnly", "restartAll"};
  static const char *const modes[] = {"replace", "restartAll"};
  s->replicas = spec_int(&r, "replicas", 1, 65536, 1);
  s->min_replicas = spec_int(&r, "minReplicas", 1, 65536, s->replicas);
  snprintf(s->backend, sizeof s->backend, "%s", backends[spec_word(&r, "backend", backends, 3, 0)]);
  s->collective_timeout_s = spec_int(&r, "timeouts.collectiveTimeoutSeconds", 1, 86400, 600);
  s->hang_timeout_s = spec_int(&r, "timeouts.hangTimeoutSeconds", 1, 86400, 300);
  s->max_replacements = spec_int(&r, "failurePolicy.maxReplacements", 0, 100000, 10);
  s->backoff_s = spec_int(&r, "failurePolicy.backoffSeconds", 0, 3600, 10);
  s->avoid_failed_nodes = spec_bool(&r, "failurePolicy.avoidFailedNodes", 1);
  s->on_hang = (ftck_on_hang_t)spec_word(&r, "failurePolicy.onHang", hangs, 3, FTCK_ON_HANG_REPLACE);
  s->mode = (ftck_mode_t)spec_word(&r, "failurePolicy.mode", modes, 2, FTCK_MODE_REPLACE);
  s->recorder_enabled = spec_bool(&r, "recorder.enabled", 1);
  s->recorder_entries = spec_int(&r, "recorder.entries", 1, 1048576, 2000);
  s->suspend = spec_bool(&r, "suspend", 0);
  if (r.bad) return -1;
  /* The name goes into label values of every pod (ftcomm.dev/job,
   * app.kubernetes.io/instance), which Kubernetes bounds at 63 characters;
   * the pod names (<name>-<slot>-<incarnation>) then fit their 253. */
  const char *name = ftck_jstr(job, "metadata.name");
  if (name && strlen(name) > 63) {
    snprintf(err, err_len,
             "metadata.name is %zu characters; the pods carry it in a label, which takes at most 63: "
             "use a shorter name", strlen(name));
    return -1;
  }
  const char *why = NULL;
  if (s->min_replicas > s->replicas) why = "spec.minReplicas must be in [1, spec.replicas]";
  else if (ftck_jget(spec, "timeouts.hangTimeoutSeconds") && ftck_jget(spec, "timeouts.collectiveTimeoutSeconds") &&
           s->hang_timeout_s > s->collective_timeout_s)
    why = "spec.timeouts.hangTimeoutSeconds must not exceed spec.timeouts.collectiveTimeoutSeconds: a hang "
          "has to be detected before the collective times out";
  else if (!json_is_object(ftck_jget(spec, "template.spec"))) why = "spec.template.spec is required";
  else if (!json_is_array(ftck_jget(spec, "template.spec.containers")) ||
           json_array_size(ftck_jget(spec, "template.spec.containers")) == 0)
    why = "spec.template.spec.containers needs at least one container";
  if (why) {
    snprintf(err, err_len, "%s", why);
    return -1;
  }
  return 0;
}

int ftck_pod_name(const char *job, int slot, int incarnation, char *buf, size_t n) {
  int w = snprintf(buf, n, "%s-%d-%d", job, slot, incarnation);
  return w < 0 || (size_t)w >= n || w > 253 ? -1 : 0;
}

int ftck_secret_name(const char *job, char *buf, size_t n) {
  int w = snprintf(buf, n, "%s-ftcomm-token", job);
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

json_t *ftck_owner_ref(const json_t *job) {
  return json_pack("{s:s, s:s, s:s?, s:s?, s:b, s:b}", "apiVersion", FTCK_API_VERSION, "kind", FTCK_KIND, "name",
                   ftck_jstr(job, "metadata.name"), "uid", ftck_jstr(job, "metadata.uid"), "controller", 1,
                   "blockOwnerDeletion", 1);
}

static int set_env(json_t *envs, const char *name, json_t *entry) {
  if (!entry) return -1;
  size_t i;
  json_t *e;
  json_array_foreach(envs, i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    if (n && !strcmp(n, name)) return json_array_set_new(envs, i, entry);
  }
  return json_array_append_new(envs, entry);
}

static int set_env_str(json_t *envs, const char *name, const char *value) {
  return set_env(envs, name, json_pack("{s:s, s:s}", "name", name, "value", value));
}

static int set_env_int(json_t *envs, const char *name, long long v) {
  char b[32];
  snprintf(b, sizeof b, "%lld", v);
  return set_env_str(envs, name, b);
}

/* Add `key NotIn nodes` to every nodeSelectorTerm (terms are ORed, so the
 * expression has to be in each), or make one term. */
static int add_avoid_affinity(json_t *podspec, const char *avoid) {
  json_t *values = json_array();
  if (!values) return -1;
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", avoid);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (*t && json_array_append_new(values, json_string(t)) != 0) {
      json_decref(values);
      return -1;
    }
  }
  if (json_array_size(values) == 0) {
    json_decref(values);
    return 0;
  }
  json_t *expr = json_pack("{s:s, s:s, s:o}", "key", "kubernetes.io/hostname", "operator", "NotIn", "values", values);
  if (!expr) return -1;
  /* Walk down affinity.nodeAffinity.required...nodeSelectorTerms, making
   * each level that is missing; every step is checked (a failed set frees
   * the value it was given). */
  static const char *const path[] = {"affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"};
  json_t *cur = podspec;
  int rc = 0;
  for (size_t i = 0; i < sizeof path / sizeof path[0]; i++) {
    json_t *next = json_object_get(cur, path[i]);
    if (!json_is_object(next)) {
      next = json_object();
      if (!next || json_object_set_new(cur, path[i], next) != 0) {
        rc = -1;
        goto out_free_expr;
      }
    }
    cur = next;
  }
  json_t *terms = json_object_get(cur, "nodeSelectorTerms");
  if (!json_is_array(terms) || json_array_size(terms) == 0) {
    terms = json_array();
    if (!terms || json_object_set_new(cur, "nodeSelectorTerms", terms) != 0 ||
        json_array_append_new(terms, json_object()) != 0) {
      rc = -1;
      goto out_free_expr;
    }
  }
  size_t i;
  json_t *term;
  json_array_foreach(terms, i, term) {
    json_t *me = json_object_get(term, "matchExpressions");
    if (!json_is_array(me)) {
      me = json_array();
      if (!me || json_object_set_new(term, "matchExpressions", me) != 0) {
        rc = -1;
        goto out_free_expr;
      }
    }
    if (json_array_append(me, expr) != 0) {
      rc = -1;
      goto out_free_expr;
    }
  }
out_free_expr:
  json_decref(expr);
  return rc;
}

/* A deleted pod's ranks get SIGTERM, and libftcomm ends a rank only once
 * the dumps it captured are written and uploaded, at most
 * FTCOMM_DUMP_DRAIN_MS later (runtime/src/core/dumpwriter.c): the pod's
 * grace period covers that, plus 5 s to exit, and is never lowered below
 * the template's (or Kubernetes' default, 30 s). */
static int set_termination_grace(json_t *podspec) {
  int64_t drain_ms = 0;
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(podspec, "containers"), i, c) {
    int64_t d = container_param(c, FTC_P_DUMP_DRAIN_MS);
    if (d > drain_ms) drain_ms = d;
  }
  json_t *t = json_object_get(podspec, "terminationGracePeriodSeconds");
  long long grace = json_is_integer(t) ? (long long)json_integer_value(t) : 30;
  long long need = (drain_ms + 999) / 1000 + 5;
  if (grace < need) grace = need;
  return json_object_set_new(podspec, "terminationGracePeriodSeconds", json_integer(grace));
}

json_t *ftck_build_pod(const json_t *job, const ftck_job_spec_t *spec, int slot, int incarnation, int joiner,
                       const char *avoid, const ftck_pod_env_t *env) {
  const char *job_name = ftck_jstr(job, "metadata.name");
  const char *ns = ftck_jstr(job, "metadata.namespace");
  char name[300], secret[300], sbuf[16], ibuf[16];
  if (!job_name || !ns || ftck_pod_name(job_name, slot, incarnation, name, sizeof name) != 0 ||
      ftck_secret_name(job_name, secret, sizeof secret) != 0)
    return NULL;
  snprintf(sbuf, sizeof sbuf, "%d", slot);
  snprintf(ibuf, sizeof ibuf, "%d", incarnation);
  json_t *tmpl_meta = ftck_jget(job, "spec.template.metadata");
  json_t *podspec = json_deep_copy(ftck_jget(job, "spec.template.spec"));
  json_t *tlabels = json_object_get(tmpl_meta, "labels"), *tannots = json_object_get(tmpl_meta, "annotations");
  json_t *labels = tlabels ? json_deep_copy(tlabels) : json_object();
  json_t *annotations = tannots ? json_deep_copy(tannots) : json_object();
  json_t *owner = ftck_owner_ref(job);
  json_t *pod = NULL;
  if (!podspec || !labels || !annotations || !owner) goto out_free;
  int bad = 0;
  /* app.kubernetes.io/name, instance and component describe the user's application:
   * the template's own win; these are only defaults. The ftcomm.dev/ labels are the
   * controller's (its pod informer selects by them). */
  if (!json_object_get(labels, "app.kubernetes.io/name"))
    bad |= json_object_set_new(labels, "app.kubernetes.io/name", json_string("ftcomm"));
  if (!json_object_get(labels, "app.kubernetes.io/instance"))
    bad |= json_object_set_new(labels, "app.kubernetes.io/instance", json_string(job_name));
  if (!json_object_get(labels, "app.kubernetes.io/component"))
    bad |= json_object_set_new(labels, "app.kubernetes.io/component", json_string("worker"));
  if (!json_object_get(labels, "app.kubernetes.io/managed-by"))
    bad |= json_object_set_new(labels, "app.kubernetes.io/managed-by", json_string(FTCK_MANAGER));
  bad |= json_object_set_new(labels, FTCK_LABEL_JOB, json_string(job_name));
  bad |= json_object_set_new(labels, FTCK_LABEL_SLOT, json_string(sbuf));
  bad |= json_object_set_new(labels, FTCK_LABEL_INCARNATION, json_string(ibuf));
  if (avoid && *avoid) {
    bad |= json_object_set_new(annotations, FTCK_ANNOT_AVOID, json_string(avoid));
    bad |= add_avoid_affinity(podspec, avoid);
  }
  bad |= json_object_set_new(podspec, "restartPolicy", json_string("Never"));
  bad |= set_termination_grace(podspec);
  json_t *containers = json_object_get(podspec, "containers");
  size_t i;
  json_t *c;
  json_array_foreach(containers, i, c) {
    json_t *envs = json_object_get(c, "env");
    if (!json_is_array(envs)) {
      envs = json_array();
      if (!envs || json_object_set_new(c, "env", envs) != 0) { /* a failed set frees envs */
        bad = 1;
        break;
      }
    }
    bad |= set_env_str(envs, "FTCOMM_JOB", job_name);
    bad |= set_env_int(envs, "FTCOMM_SLOT", slot);
    bad |= set_env_int(envs, "FTCOMM_WORLD_SIZE", spec->replicas);
    bad |= set_env_int(envs, "FTCOMM_MIN_SIZE", spec->min_replicas);
    bad |= set_env_int(envs, "FTCOMM_JOINER", joiner != 0);
    bad |= set_env(envs, "FTCOMM_TOKEN",
                   json_pack("{s:s, s:{s:{s:s, s:s}}}", "name", "FTCOMM_TOKEN", "valueFrom", "secretKeyRef", "name",
                             secret, "key", "token"));
    bad |= set_env_str(envs, "FTCOMM_COORDINATOR", env->coordinator);
    bad |= set_env_str(envs, "FTCOMM_DUMP_DIR", env->dump_dir);
    bad |= set_env_int(envs, "FTCOMM_TIMEOUT_MS", (long long)spec->collective_timeout_s * 1000);
    bad |= set_env_str(envs, "FTCOMM_BACKEND", spec->backend);
    bad |= set_env_int(envs, "FTCOMM_RECORDER_ENTRIES", spec->recorder_enabled ? spec->recorder_entries : 0);
    bad |= set_env(envs, "FTCOMM_ADVERTISE_HOST",
                   json_pack("{s:s, s:{s:{s:s}}}", "name", "FTCOMM_ADVERTISE_HOST", "valueFrom", "fieldRef",
                             "fieldPath", "status.podIP"));
  }
  if (bad) goto out_free;
  pod = json_pack("{s:s, s:s, s:{s:s, s:s, s:O, s:O, s:[O]}, s:O}", "apiVersion", "v1", "kind", "Pod", "metadata",
                  "name", name, "namespace", ns, "labels", labels, "annotations", annotations, "ownerReferences",
                  owner, "spec", podspec);
out_free:
  json_decref(podspec);
  json_decref(labels);
  json_decref(annotations);
  json_decref(owner);
  return pod;
}

static int label_int(const json_t *pod, const char *label) {
  const char *v = json_string_value(json_object_get(ftck_jget(pod, "metadata.labels"), label));
  if (!v || !*v) return -1;
  char *end;
  long n = strtol(v, &end, 10);
  return *end || n < 0 || n > 1000000 ? -1 : (int)n;
}

int ftck_pod_slot(const json_t *pod) { return label_int(pod, FTCK_LABEL_SLOT); }
int ftck_pod_incarnation(const json_t *pod) { return label_int(pod, FTCK_LABEL_INCARNATION); }

int ftck_incarnation_from_name(const char *job, int slot, const char *pod_name) {
  if (!job || !pod_name) return -1;
  char prefix[300];
  int w = snprintf(prefix, sizeof prefix, "%s-%d-", job, slot);
  if (w < 0 || (size_t)w >= sizeof prefix || strncmp(pod_name, prefix, (size_t)w) != 0) return -1;
  const char *p = pod_name + w;
  char *end;
  long n = strtol(p, &end, 10);
  return !*p || *end || n < 0 || n > 1000000 ? -1 : (int)n;
}

int ftck_pod_is_lost(const json_t *pod) {
  const char *phase = ftck_jstr(pod, "status.phase");
  if (phase && !strcmp(phase, "Failed")) return 1;
  return ftck_jstr(pod, "metadata.deletionTimestamp") != NULL;
}

int64_t ftck_pod_failed_at(const json_t *pod, int64_t now_ns) {
  int64_t best = -1;
  size_t i;
  json_t *cs;
  json_array_foreach(ftck_jget(pod, "status.containerStatuses"), i, cs) {
    int64_t t = ftck_parse_time(ftck_jstr(cs, "state.terminated.finishedAt"));
    if (t > best) best = t;
  }
  if (best < 0) {
    /* deletionTimestamp is when the grace period ends; the loss began when it started. */
    best = ftck_parse_time(ftck_jstr(pod, "metadata.deletionTimestamp"));
    int64_t grace = ftck_jint(pod, "metadata.deletionGracePeriodSeconds", 0);
    if (best >= 0 && grace > 0 && grace <= best / 1000000000LL) best -= grace * 1000000000LL;
  }
  return best < 0 || best > now_ns ? now_ns : best;
}

int ftck_node_ready(const json_t *node) {
  size_t i;
  json_t *c;
  json_array_foreach(ftck_jget(node, "status.conditions"), i, c) {
    const char *t = json_string_value(json_object_get(c, "type"));
    if (t && !strcmp(t, "Ready")) {
      const char *st = json_string_value(json_object_get(c, "status"));
      return st && !strcmp(st, "True") ? 1 : 0;
    }
  }
  return -1;
}

int ftck_set_condition(json_t *conditions, const char *type, const char *status, const char *reason,
                       const char *message, int64_t observed_generation, const char *now) {
  size_t i;
  json_t *c, *found = NULL;
  json_array_foreach(conditions, i, c) {
    const char *t = json_string_value(json_object_get(c, "type"));
    if (t && !strcmp(t, type)) found = c;
  }
  if (!found) {
    found = json_object();
    if (!found || json_array_append_new(conditions, found) != 0) return -1;
    if (json_object_set_new(found, "type", json_string(type)) != 0) return -1;
  }
  int bad = 0;
  const char *old = json_string_value(json_object_get(found, "status"));
  if (!old || strcmp(old, status) != 0 || !json_object_get(found, "lastTransitionTime"))
    bad |= json_object_set_new(found, "lastTransitionTime", json_string(now));
  bad |= json_object_set_new(found, "status", json_string(status));
  bad |= json_object_set_new(found, "reason", json_string(reason));
  bad |= json_object_set_new(found, "message", json_string(message));
  bad |= json_object_set_new(found, "observedGeneration", json_integer(observed_generation));
  return bad ? -1 : 0;
}

int ftck_status_merge(json_t *obj, const ftck_status_update_t *u) {
  const char *uid = ftck_jstr(obj, "metadata.uid");
  if (u->uid && uid && strcmp(u->uid, uid) != 0) return 1; /* a different job with the same name */
  json_t *old = json_object_get(obj, "status");
  json_t *st = old ? json_deep_copy(old) : json_object();
  if (!st) return -1;
  int bad = 0;
  char now[64];
  ftck_format_time(ftc__wall_ns(), now, sizeof now);
  const char *k;
  json_t *v;
  json_object_foreach(u->computed, k, v) {
    if (!strcmp(k, "conditions") || !strcmp(k, "replacementsDelta")) continue;
    bad |= json_object_set(st, k, v);
  }
  bad |= json_object_set_new(st, "replacements", json_integer(ftck_jint(st, "replacements", 0) +
                                                               ftck_jint(u->computed, "replacementsDelta", 0)));
  json_t *conds = json_object_get(st, "conditions");
  if (!json_is_array(conds)) {
    conds = json_array();
    if (!conds || json_object_set_new(st, "conditions", conds) != 0) goto out_fail;
  }
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(u->computed, "conditions"), i, c)
    bad |= ftck_set_condition(conds, json_string_value(json_object_get(c, "type")),
                              json_string_value(json_object_get(c, "status")),
                              json_string_value(json_object_get(c, "reason")),
                              json_string_value(json_object_get(c, "message")), u->generation, now);
  if (json_array_size(u->incidents)) {
    json_t *inc = json_object_get(st, "incidents");
    if (!json_is_array(inc)) {
      inc = json_array();
      if (!inc || json_object_set_new(st, "incidents", inc) != 0) goto out_fail;
    }
    bad |= json_array_extend(inc, u->incidents);
    while (json_array_size(inc) > FTCK_MAX_INCIDENTS) json_array_remove(inc, 0);
  }
  bad |= json_object_set_new(st, "observedGeneration", json_integer(u->generation));
  if (bad) goto out_fail;
  if (old && json_equal(old, st)) {
    json_decref(st);
    return 1;
  }
  return json_object_set_new(obj, "status", st) == 0 ? 0 : -1;
out_fail:
  json_decref(st);
  return -1;
}
