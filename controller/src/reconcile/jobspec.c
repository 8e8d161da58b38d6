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

#include "ftc_time.h"
#include "kube_client.h"
#include "kube_json.h"

static int get_int(const json_t *o, const char *path, int def) { return (int)ftck_jint(o, path, def); }

int ftck_job_spec_parse(const json_t *job, ftck_job_spec_t *s, char *err, size_t err_len) {
  memset(s, 0, sizeof *s);
  const json_t *spec = ftck_jget(job, "spec");
  s->replicas = get_int(spec, "replicas", 1);
  s->min_replicas = get_int(spec, "minReplicas", s->replicas);
  const char *b = ftck_jstr(spec, "backend");
  snprintf(s->backend, sizeof s->backend, "%s", b ? b : "auto");
  s->collective_timeout_s = get_int(spec, "timeouts.collectiveTimeoutSeconds", 600);
  s->hang_timeout_s = get_int(spec, "timeouts.hangTimeoutSeconds", 300);
  s->max_replacements = get_int(spec, "failurePolicy.maxReplacements", 10);
  s->backoff_s = get_int(spec, "failurePolicy.backoffSeconds", 10);
  s->avoid_failed_nodes = ftck_jbool(spec, "failurePolicy.avoidFailedNodes", 1);
  const char *h = ftck_jstr(spec, "failurePolicy.onHang");
  s->on_hang = !h || !strcmp(h, "replace") ? FTCK_ON_HANG_REPLACE
               : !strcmp(h, "dumpOnly")    ? FTCK_ON_HANG_DUMP_ONLY
                                           : FTCK_ON_HANG_RESTART_ALL;
  const char *m = ftck_jstr(spec, "failurePolicy.mode");
  s->mode = m && !strcmp(m, "restartAll") ? FTCK_MODE_RESTART_ALL : FTCK_MODE_REPLACE;
  s->recorder_enabled = ftck_jbool(spec, "recorder.enabled", 1);
  s->recorder_entries = get_int(spec, "recorder.entries", 2000);
  s->suspend = ftck_jbool(spec, "suspend", 0);
  const char *why = NULL;
  if (s->replicas < 1) why = "spec.replicas must be at least 1";
  else if (s->min_replicas < 1 || s->min_replicas > s->replicas) why = "spec.minReplicas must be in [1, spec.replicas]";
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
  bad |= json_object_set_new(labels, "app.kubernetes.io/name", json_string("ftcomm"));
  bad |= json_object_set_new(labels, "app.kubernetes.io/instance", json_string(job_name));
  bad |= json_object_set_new(labels, "app.kubernetes.io/component", json_string("worker"));
  bad |= json_object_set_new(labels, "app.kubernetes.io/managed-by", json_string(FTCK_MANAGER));
  bad |= json_object_set_new(labels, FTCK_LABEL_JOB, json_string(job_name));
  bad |= json_object_set_new(labels, FTCK_LABEL_SLOT, json_string(sbuf));
  bad |= json_object_set_new(labels, FTCK_LABEL_INCARNATION, json_string(ibuf));
  if (avoid && *avoid) {
    bad |= json_object_set_new(annotations, FTCK_ANNOT_AVOID, json_string(avoid));
    bad |= add_avoid_affinity(podspec, avoid);
  }
  bad |= json_object_set_new(podspec, "restartPolicy", json_string("Never"));
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
    if (best >= 0) best -= ftck_jint(pod, "metadata.deletionGracePeriodSeconds", 0) * 1000000000LL;
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
