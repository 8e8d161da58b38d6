/*
 * fuzz_jobspec.c - the controller's reading of a TrainingJob and of the
 * pods and nodes it watches (controller/src/reconcile/jobspec.c): the spec
 * with the CRD's defaults, the pod built from it, labels, times and
 * conditions, and the status merge.
 *
 * Input: one JSON document, taken as the TrainingJob, and as a pod and a
 * node too (the same readers run on whatever the API server sends); its
 * "fuzz" member, when an object, gives the status update to merge.
 *
 * Checks: a spec the controller accepts is one the CRD accepts (every
 * field within the schema's bounds and enums, and what it uses is what
 * the object says: no integer cut to 32 bits, no unknown word taken for a
 * policy); a refusal names the field ("spec.…"); an accepted job with a
 * name and namespace gets its pod built.
 */
#include <string.h>

#include "fuzz.h"
#include "jobspec.h"
#include "kube_json.h"

static void same_int(const json_t *spec, const char *path, int got) {
  json_t *v = ftck_jget(spec, path);
  if (v && !json_is_null(v)) FUZZ_CHECK(json_is_integer(v) && json_integer_value(v) == got);
}

static void is_bool(const json_t *spec, const char *path) {
  json_t *v = ftck_jget(spec, path);
  if (v && !json_is_null(v)) FUZZ_CHECK(json_is_boolean(v));
}

static void in_enum(const json_t *spec, const char *path, const char *const *words, int n) {
  json_t *v = ftck_jget(spec, path);
  if (!v || json_is_null(v)) return;
  FUZZ_CHECK(json_is_string(v));
  for (int i = 0; i < n; i++)
    if (!strcmp(json_string_value(v), words[i])) return;
  FUZZ_CHECK(!"an accepted spec uses only the CRD's words");
}

static void check_spec(const json_t *job, const ftck_job_spec_t *s) {
  const json_t *spec = ftck_jget(job, "spec");
  FUZZ_CHECK(s->replicas >= 1 && s->replicas <= 65536);
  FUZZ_CHECK(s->min_replicas >= 1 && s->min_replicas <= s->replicas);
  FUZZ_CHECK(s->collective_timeout_s >= 1 && s->collective_timeout_s <= 86400);
  FUZZ_CHECK(s->hang_timeout_s >= 1 && s->hang_timeout_s <= 86400);
  /* The CRD's rule compares the two only when both are given. */
  if (ftck_jget(spec, "timeouts.hangTimeoutSeconds") && ftck_jget(spec, "timeouts.collectiveTimeoutSeconds"))
    FUZZ_CHECK(s->hang_timeout_s <= s->collective_timeout_s);
  FUZZ_CHECK(s->max_replacements >= 0 && s->max_replacements <= 100000);
  FUZZ_CHECK(s->backoff_s >= 0 && s->backoff_s <= 3600);
  FUZZ_CHECK(s->recorder_entries >= 1 && s->recorder_entries <= 1048576);
  FUZZ_CHECK(!strcmp(s->backend, "auto") || !strcmp(s->backend, "nccl") || !strcmp(s->backend, "tcp"));
  same_int(spec, "replicas", s->replicas);
  same_int(spec, "minReplicas", s->min_replicas);
  same_int(spec, "timeouts.collectiveTimeoutSeconds", s->collective_timeout_s);
  same_int(spec, "timeouts.hangTimeoutSeconds", s->hang_timeout_s);
  same_int(spec, "failurePolicy.maxReplacements", s->max_replacements);
  same_int(spec, "failurePolicy.backoffSeconds", s->backoff_s);
  same_int(spec, "recorder.entries", s->recorder_entries);
  static const char *const backends[] = {"auto", "nccl", "tcp"};
  static const char *const hangs[] = {"replace", "dumpOnly", "restartAll"};
  static const char *const modes[] = {"replace", "restartAll"};
  in_enum(spec, "backend", backends, 3);
  in_enum(spec, "failurePolicy.onHang", hangs, 3);
  in_enum(spec, "failurePolicy.mode", modes, 2);
  is_bool(spec, "failurePolicy.avoidFailedNodes");
  is_bool(spec, "recorder.enabled");
  is_bool(spec, "suspend");
}

/* The reconciler's own update (compute_status) names every condition with
 * four strings; the object it merges into is what the fuzzer varies. */
static int computed_ok(const json_t *computed) {
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(computed, "conditions"), i, c) {
    static const char *const k[] = {"type", "status", "reason", "message"};
    for (int j = 0; j < 4; j++)
      if (!json_is_string(json_object_get(c, k[j]))) return 0;
  }
  return 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  ftck_json_use_ftc_alloc();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_error_t jerr;
  json_t *job = json_loadb((const char *)data, size, 0, &jerr);
  if (!job) return 0;
  ftck_job_spec_t s;
  char err[256] = "";
  if (ftck_job_spec_parse(job, &s, err, sizeof err) == 0) {
    check_spec(job, &s);
    const char *name = ftck_jstr(job, "metadata.name"), *ns = ftck_jstr(job, "metadata.namespace");
    ftck_pod_env_t env = {"ftcomm-controller.ftcomm-system.svc:7470", "/var/lib/ftcomm/dumps"};
    json_t *pod = ftck_build_pod(job, &s, s.replicas - 1, 3, 1, "node-a,,node-b", &env);
    if (name && ns) FUZZ_CHECK(pod != NULL);
    if (pod) {
      FUZZ_CHECK(ftck_pod_slot(pod) == s.replicas - 1 && ftck_pod_incarnation(pod) == 3);
      FUZZ_CHECK(ftck_incarnation_from_name(name, s.replicas - 1, ftck_jstr(pod, "metadata.name")) == 3);
      json_decref(pod);
    }
  } else {
    FUZZ_CHECK(!strncmp(err, "spec.", 5) || !strncmp(err, "metadata.", 9));
  }
  /* The same document as a pod and a node. */
  (void)ftck_pod_slot(job);
  (void)ftck_pod_incarnation(job);
  (void)ftck_pod_is_lost(job);
  int64_t now = 2000000000LL * 1000000000LL;
  int64_t t = ftck_pod_failed_at(job, now);
  FUZZ_CHECK(t <= now);
  (void)ftck_node_ready(job);
  const char *pname = ftck_jstr(job, "metadata.name");
  if (pname) (void)ftck_incarnation_from_name("job", 0, pname);
  char key[300], kns[256], kname[300];
  if (ftck_object_key(job, key, sizeof key) == 0) (void)ftck_split_key(key, kns, sizeof kns, kname, sizeof kname);
  /* A status update from the document's "fuzz" member. */
  json_t *fz = json_object_get(job, "fuzz");
  if (json_is_object(fz)) {
    json_t *obj = json_deep_copy(job);
    ftck_status_update_t u = {ftck_jstr(fz, "uid"), json_object_get(fz, "computed"),
                              json_object_get(fz, "incidents"), ftck_jint(fz, "generation", 1)};
    if (obj && json_is_object(u.computed) && (!u.incidents || json_is_array(u.incidents)) &&
        computed_ok(u.computed))
      (void)ftck_status_merge(obj, &u);
    json_decref(obj);
  }
  json_decref(job);
  return 0;
}
