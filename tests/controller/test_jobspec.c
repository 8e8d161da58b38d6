/*
 * test_jobspec.c - TrainingJob defaults, the pod of a slot (name, labels,
 * owner, restart policy, the FTCOMM_* environment, affinity away from
 * failed nodes), pod bookkeeping, and Kubernetes-style conditions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "jobspec.h"
#include "kube_json.h"

static json_t *job_from(const char *spec_json) {
  char buf[4096];
  snprintf(buf, sizeof buf,
           "{\"apiVersion\":\"ftcomm.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{\"name\":\"llm\","
           "\"namespace\":\"team\",\"uid\":\"u-1\",\"generation\":2},\"spec\":%s}", spec_json);
  json_error_t e;
  json_t *j = json_loads(buf, 0, &e);
  if (!j) fail_msg("bad test JSON: %s", e.text);
  return j;
}

#define TEMPLATE "\"template\":{\"metadata\":{\"labels\":{\"team\":\"x\"}},\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"i\",\"env\":[{\"name\":\"FTCOMM_SLOT\",\"value\":\"99\"},{\"name\":\"MINE\",\"value\":\"1\"}]},{\"name\":\"b\",\"image\":\"i\"}]}}"

static const char *env_value(json_t *container, const char *name) {
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(container, "env"), i, e) {
    if (!strcmp(json_string_value(json_object_get(e, "name")), name)) {
      const char *v = json_string_value(json_object_get(e, "value"));
      return v ? v : "<valueFrom>";
    }
  }
  return NULL;
}

static void test_defaults_follow_the_crd(void **state) {
  (void)state;
  json_t *j = job_from("{" TEMPLATE "}");
  ftck_job_spec_t s;
  char err[128];
  assert_int_equal(ftck_job_spec_parse(j, &s, err, sizeof err), 0);
  assert_int_equal(s.replicas, 1);
  assert_int_equal(s.min_replicas, 1);
  assert_string_equal(s.backend, "auto");
  assert_int_equal(s.collective_timeout_s, 600);
  assert_int_equal(s.max_replacements, 10);
  assert_int_equal(s.backoff_s, 10);
  assert_true(s.avoid_failed_nodes);
  assert_int_equal(s.on_hang, FTCK_ON_HANG_REPLACE);
  assert_int_equal(s.mode, FTCK_MODE_REPLACE);
  assert_true(s.recorder_enabled);
  assert_int_equal(s.recorder_entries, 2000);
  json_decref(j);
  j = job_from("{\"replicas\":8," TEMPLATE "}");
  assert_int_equal(ftck_job_spec_parse(j, &s, err, sizeof err), 0);
  assert_int_equal(s.min_replicas, 8); /* minReplicas defaults to replicas */
  json_decref(j);
}

/* The controller takes an invalid FTCOMM_* value in the env as the runtime's
 * default and goes on: the parse leaves the thread's ftc_last_error() as it
 * was, so a later failure's caller does not read this one's message. */
static void test_an_invalid_env_value_leaves_the_last_error_alone(void **state) {
  (void)state;
  const char *spec = "{\"template\":{\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"i\",\"env\":["
                     "{\"name\":\"FTCOMM_DUMP_DRAIN_MS\",\"value\":\"1m\"}]}]}}}";
  const char *before[] = {"an earlier failure", ""};
  for (size_t i = 0; i < sizeof before / sizeof before[0]; i++) {
    if (*before[i])
      ftc__error(FTC_ERR_TIMEOUT, "%s", before[i]);
    else
      ftc__error_clear();
    json_t *j = job_from(spec);
    ftck_job_spec_t s;
    char err[128];
    assert_int_equal(ftck_job_spec_parse(j, &s, err, sizeof err), 0);
    ftck_pod_env_t env = {.coordinator = "c:1", .dump_dir = "/d"};
    json_t *pod = ftck_build_pod(j, &s, 0, 0, 0, "", &env);
    assert_non_null(pod);
    /* invalid: the runtime's default drain (10 s) + 5 s is under Kubernetes' 30 s */
    assert_int_equal(json_integer_value(ftck_jget(pod, "spec.terminationGracePeriodSeconds")), 30);
    assert_string_equal(ftc_last_error(), before[i]);
    json_decref(pod);
    json_decref(j);
  }
}

static void test_unusable_specs_say_what_to_fix(void **state) {
  (void)state;
  struct { const char *spec, *msg; } cases[] = {
      {"{\"replicas\":2,\"minReplicas\":3," TEMPLATE "}", "spec.minReplicas must be in [1, spec.replicas]"},
      {"{\"replicas\":0," TEMPLATE "}", "spec.replicas must be at least 1"},
      {"{\"replicas\":2}", "spec.template.spec is required"},
      {"{\"template\":{\"spec\":{\"containers\":[]}}}", "at least one container"},
      /* What the CRD's schema refuses, for objects it did not check. */
      {"{\"replicas\":\"4\"," TEMPLATE "}", "spec.replicas must be an integer in [1, 65536]"},
      {"{\"replicas\":4294967297," TEMPLATE "}", "spec.replicas must be at least 1 and at most 65536; it is 4294967297"},
      {"{\"backend\":\"mpi\"," TEMPLATE "}", "spec.backend is \"mpi\"; use one of auto, nccl, tcp"},
      {"{\"failurePolicy\":{\"onHang\":\"dumponly\"}," TEMPLATE "}",
       "spec.failurePolicy.onHang is \"dumponly\"; use one of replace, dumpOnly, restartAll"},
      {"{\"failurePolicy\":{\"mode\":7}," TEMPLATE "}", "spec.failurePolicy.mode must be a string, one of replace, restartAll"},
      {"{\"recorder\":{\"enabled\":\"false\"}," TEMPLATE "}", "spec.recorder.enabled must be true or false"},
      {"{\"recorder\":{\"entries\":0}," TEMPLATE "}", "spec.recorder.entries must be at least 1 and at most 1048576"},
      {"{\"timeouts\":{\"collectiveTimeoutSeconds\":60,\"hangTimeoutSeconds\":120}," TEMPLATE "}",
       "spec.timeouts.hangTimeoutSeconds must not exceed spec.timeouts.collectiveTimeoutSeconds"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    json_t *j = job_from(cases[i].spec);
    ftck_job_spec_t s;
    char err[256] = "";
    assert_int_equal(ftck_job_spec_parse(j, &s, err, sizeof err), -1);
    if (!strstr(err, cases[i].msg)) fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].msg);
    json_decref(j);
  }
  /* A name too long for the pods' labels. */
  json_t *j = job_from("{" TEMPLATE "}");
  json_object_set_new(json_object_get(j, "metadata"), "name",
                      json_string("a-training-job-with-a-name-far-too-long-for-a-kubernetes-label-value"));
  ftck_job_spec_t s;
  char err[256] = "";
  assert_int_equal(ftck_job_spec_parse(j, &s, err, sizeof err), -1);
  assert_non_null(strstr(err, "metadata.name is 68 characters; the pods carry it in a label, which takes at most 63"));
  json_decref(j);
}

static void test_template_app_labels_are_kept_and_the_controllers_ftcomm_dev_labels_are_forced(void **state) {
  (void)state;
  json_t *j = job_from("{\"template\":{\"metadata\":{\"labels\":{\"app.kubernetes.io/name\":\"llm-trainer\","
                       "\"app.kubernetes.io/component\":\"rank\",\"app.kubernetes.io/managed-by\":\"someone\","
                       "\"ftcomm.dev/slot\":\"7\"}},\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"i\"}]}}}");
  ftck_job_spec_t s;
  char err[128];
  assert_int_equal(ftck_job_spec_parse(j, &s, err, sizeof err), 0);
  ftck_pod_env_t env = {.coordinator = "c:1", .dump_dir = "/d"};
  json_t *pod = ftck_build_pod(j, &s, 1, 0, 0, "", &env);
  assert_non_null(pod);
  json_t *labels = ftck_jget(pod, "metadata.labels");
  assert_string_equal(json_string_value(json_object_get(labels, "app.kubernetes.io/name")), "llm-trainer");
  assert_string_equal(json_string_value(json_object_get(labels, "app.kubernetes.io/component")), "rank");
  assert_string_equal(json_string_value(json_object_get(labels, "app.kubernetes.io/instance")), "llm"); /* absent: default */
  /* the template's: the controller's own are under ftcomm.dev/ */
  assert_string_equal(json_string_value(json_object_get(labels, "app.kubernetes.io/managed-by")), "someone");
  assert_string_equal(json_string_value(json_object_get(labels, "ftcomm.dev/slot")), "1");
  json_decref(pod);
  json_decref(j);
}

static void test_pod_of_a_slot_carries_identity_owner_and_environment(void **state) {
  (void)state;
  json_t *j = job_from("{\"replicas\":4,\"minReplicas\":3,\"backend\":\"tcp\",\"timeouts\":{\"collectiveTimeoutSeconds\":30},"
                       "\"recorder\":{\"enabled\":false}," TEMPLATE "}");
  ftck_job_spec_t s;
  char err[128];
  assert_int_equal(ftck_job_spec_parse(j, &s, err, sizeof err), 0);
  ftck_pod_env_t env = {.coordinator = "ctl.ftcomm-system.svc:7470", .dump_dir = "/dumps"};
  json_t *pod = ftck_build_pod(j, &s, 2, 0, 0, "", &env);
  assert_non_null(pod);
  assert_string_equal(ftck_jstr(pod, "metadata.name"), "llm-2-0");
  assert_string_equal(ftck_jstr(pod, "metadata.namespace"), "team");
  json_t *labels = ftck_jget(pod, "metadata.labels");
  assert_string_equal(json_string_value(json_object_get(labels, "ftcomm.dev/job")), "llm");
  assert_string_equal(json_string_value(json_object_get(labels, "ftcomm.dev/slot")), "2");
  assert_string_equal(json_string_value(json_object_get(labels, "ftcomm.dev/incarnation")), "0");
  assert_string_equal(json_string_value(json_object_get(labels, "app.kubernetes.io/managed-by")), "ftcomm-controller");
  assert_string_equal(json_string_value(json_object_get(labels, "app.kubernetes.io/instance")), "llm");
  assert_string_equal(json_string_value(json_object_get(labels, "team")), "x"); /* template labels kept */
  json_t *owner = json_array_get(ftck_jget(pod, "metadata.ownerReferences"), 0);
  assert_string_equal(ftck_jstr(owner, "kind"), "TrainingJob");
  assert_string_equal(ftck_jstr(owner, "uid"), "u-1");
  assert_true(json_is_true(json_object_get(owner, "controller")));
  assert_string_equal(ftck_jstr(pod, "spec.restartPolicy"), "Never");
  assert_null(ftck_jget(pod, "spec.affinity"));
  json_t *containers = ftck_jget(pod, "spec.containers");
  for (size_t c = 0; c < 2; c++) {
    json_t *ct = json_array_get(containers, c);
    assert_string_equal(env_value(ct, "FTCOMM_JOB"), "llm");
    assert_string_equal(env_value(ct, "FTCOMM_SLOT"), "2");
    assert_string_equal(env_value(ct, "FTCOMM_WORLD_SIZE"), "4");
    assert_string_equal(env_value(ct, "FTCOMM_MIN_SIZE"), "3");
    assert_string_equal(env_value(ct, "FTCOMM_JOINER"), "0");
    assert_string_equal(env_value(ct, "FTCOMM_COORDINATOR"), "ctl.ftcomm-system.svc:7470");
    assert_string_equal(env_value(ct, "FTCOMM_DUMP_DIR"), "/dumps");
    assert_string_equal(env_value(ct, "FTCOMM_TIMEOUT_MS"), "30000");
    assert_string_equal(env_value(ct, "FTCOMM_BACKEND"), "tcp");
    assert_string_equal(env_value(ct, "FTCOMM_RECORDER_ENTRIES"), "0");
    assert_string_equal(env_value(ct, "FTCOMM_TOKEN"), "<valueFrom>");
  }
  json_t *tok = NULL;
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(json_array_get(containers, 0), "env"), i, e)
    if (!strcmp(json_string_value(json_object_get(e, "name")), "FTCOMM_TOKEN")) tok = e;
  assert_string_equal(ftck_jstr(tok, "valueFrom.secretKeyRef.name"), "llm-ftcomm-token");
  assert_string_equal(ftck_jstr(tok, "valueFrom.secretKeyRef.key"), "token");
  assert_string_equal(env_value(json_array_get(containers, 0), "MINE"), "1"); /* user env kept */
  /* The template itself is untouched (its FTCOMM_SLOT stays 99). */
  assert_string_equal(env_value(json_array_get(ftck_jget(j, "spec.template.spec.containers"), 0), "FTCOMM_SLOT"), "99");
  json_decref(pod);
  json_decref(j);
}

/* A deleted pod's ranks write the dumps they captured before they exit
 * (at most FTCOMM_DUMP_DRAIN_MS): the grace period covers it, and a longer
 * one from the template stays. */
static void test_pod_grace_period_covers_the_dump_drain(void **state) {
  (void)state;
  static const struct {
    const char *tmpl;
    long long want;
  } cases[] = {
      {"{\"containers\":[{\"name\":\"a\",\"image\":\"i\"}]}", 30},
      {"{\"terminationGracePeriodSeconds\":3,\"containers\":[{\"name\":\"a\",\"image\":\"i\"}]}", 15},
      {"{\"terminationGracePeriodSeconds\":120,\"containers\":[{\"name\":\"a\",\"image\":\"i\"}]}", 120},
      {"{\"containers\":[{\"name\":\"a\",\"image\":\"i\"},{\"name\":\"b\",\"image\":\"i\",\"env\":["
       "{\"name\":\"FTCOMM_DUMP_DRAIN_MS\",\"value\":\"60500\"}]}]}", 66},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char doc[512];
    snprintf(doc, sizeof doc, "{\"replicas\":2,\"template\":{\"spec\":%s}}", cases[i].tmpl);
    json_t *j = job_from(doc);
    ftck_job_spec_t s;
    char err[128];
    assert_int_equal(ftck_job_spec_parse(j, &s, err, sizeof err), 0);
    ftck_pod_env_t env = {.coordinator = "c:1", .dump_dir = "/d"};
    json_t *pod = ftck_build_pod(j, &s, 0, 0, 0, "", &env);
    assert_non_null(pod);
    json_t *g = ftck_jget(pod, "spec.terminationGracePeriodSeconds");
    assert_true(json_is_integer(g));
    assert_int_equal(json_integer_value(g), cases[i].want);
    json_decref(pod);
    json_decref(j);
  }
}

static void test_replacement_joins_and_avoids_failed_nodes_in_every_term(void **state) {
  (void)state;
  json_t *j = job_from("{\"replicas\":2,\"template\":{\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"i\"}],"
                       "\"affinity\":{\"nodeAffinity\":{\"requiredDuringSchedulingIgnoredDuringExecution\":{"
                       "\"nodeSelectorTerms\":[{\"matchExpressions\":[{\"key\":\"gpu\",\"operator\":\"Exists\"}]},"
                       "{\"matchExpressions\":[{\"key\":\"tpu\",\"operator\":\"Exists\"}]}]}}}}}}");
  ftck_job_spec_t s;
  char err[128];
  assert_int_equal(ftck_job_spec_parse(j, &s, err, sizeof err), 0);
  ftck_pod_env_t env = {.coordinator = "c:1", .dump_dir = "/d"};
  json_t *pod = ftck_build_pod(j, &s, 1, 3, 1, "node-a,node-b", &env);
  assert_string_equal(ftck_jstr(pod, "metadata.name"), "llm-1-3");
  assert_string_equal(env_value(json_array_get(ftck_jget(pod, "spec.containers"), 0), "FTCOMM_JOINER"), "1");
  assert_string_equal(json_string_value(json_object_get(ftck_jget(pod, "metadata.annotations"), "ftcomm.dev/avoid-nodes")),
                      "node-a,node-b");
  json_t *terms = ftck_jget(pod, "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms");
  assert_int_equal(json_array_size(terms), 2);
  for (size_t t = 0; t < 2; t++) {
    json_t *me = json_object_get(json_array_get(terms, t), "matchExpressions");
    assert_int_equal(json_array_size(me), 2);
    json_t *x = json_array_get(me, 1);
    assert_string_equal(ftck_jstr(x, "key"), "kubernetes.io/hostname");
    assert_string_equal(ftck_jstr(x, "operator"), "NotIn");
    assert_string_equal(json_string_value(json_array_get(json_object_get(x, "values"), 1)), "node-b");
  }
  json_decref(pod);
  json_decref(j);
}

static void test_pod_bookkeeping(void **state) {
  (void)state;
  assert_int_equal(ftck_incarnation_from_name("llm", 2, "llm-2-7"), 7);
  assert_int_equal(ftck_incarnation_from_name("llm", 2, "llm-3-7"), -1);
  assert_int_equal(ftck_incarnation_from_name("llm", 2, "llm-2-"), -1);
  assert_int_equal(ftck_incarnation_from_name("llm", 2, "llm-2-7x"), -1);
  assert_int_equal(ftck_incarnation_from_name("llm", 2, NULL), -1);
  json_t *p = json_loads("{\"metadata\":{\"labels\":{\"ftcomm.dev/slot\":\"5\",\"ftcomm.dev/incarnation\":\"2\"}},"
                         "\"status\":{\"phase\":\"Failed\",\"containerStatuses\":["
                         "{\"state\":{\"terminated\":{\"finishedAt\":\"2026-01-01T00:00:10Z\"}}},"
                         "{\"state\":{\"terminated\":{\"finishedAt\":\"2026-01-01T00:00:20Z\"}}}]}}", 0, NULL);
  assert_int_equal(ftck_pod_slot(p), 5);
  assert_int_equal(ftck_pod_incarnation(p), 2);
  assert_true(ftck_pod_is_lost(p));
  assert_int_equal(ftck_pod_failed_at(p, INT64_MAX), 1767225620LL * 1000000000LL);
  assert_int_equal(ftck_pod_failed_at(p, 5), 5); /* never in the future */
  json_object_set_new(json_object_get(p, "status"), "phase", json_string("Running"));
  assert_false(ftck_pod_is_lost(p));
  json_object_set_new(json_object_get(p, "metadata"), "deletionTimestamp", json_string("2026-01-01T00:00:30Z"));
  json_object_set_new(json_object_get(p, "metadata"), "deletionGracePeriodSeconds", json_integer(30));
  assert_true(ftck_pod_is_lost(p)); /* going away counts as lost */
  json_object_del(json_object_get(p, "status"), "containerStatuses");
  assert_int_equal(ftck_pod_failed_at(p, INT64_MAX), 1767225600LL * 1000000000LL); /* when the deletion began */
  json_decref(p);
}

static void test_node_readiness_from_its_ready_condition(void **state) {
  (void)state;
  const char *cases[][2] = {
      {"{\"status\":{\"conditions\":[{\"type\":\"MemoryPressure\",\"status\":\"False\"},{\"type\":\"Ready\",\"status\":\"True\"}]}}", "1"},
      {"{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"False\"}]}}", "0"},
      {"{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"Unknown\"}]}}", "0"},
      {"{\"metadata\":{\"name\":\"n\"}}", "-1"}, /* no report yet: not judged */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    json_t *n = json_loads(cases[i][0], 0, NULL);
    assert_non_null(n);
    assert_int_equal(ftck_node_ready(n), atoi(cases[i][1]));
    json_decref(n);
  }
}

static void test_condition_transition_time_changes_only_with_status(void **state) {
  (void)state;
  json_t *c = json_array();
  ftck_set_condition(c, "Ready", "False", "MembersNotRunning", "0 of 2", 1, "T1");
  ftck_set_condition(c, "Ready", "False", "MembersNotRunning", "1 of 2", 2, "T2");
  assert_int_equal(json_array_size(c), 1);
  json_t *r = json_array_get(c, 0);
  assert_string_equal(ftck_jstr(r, "lastTransitionTime"), "T1");
  assert_string_equal(ftck_jstr(r, "message"), "1 of 2");
  assert_int_equal(ftck_jint(r, "observedGeneration", 0), 2);
  ftck_set_condition(c, "Ready", "True", "AllMembersRunning", "2 of 2", 2, "T3");
  assert_string_equal(ftck_jstr(r, "lastTransitionTime"), "T3");
  ftck_set_condition(c, "Failed", "False", "WithinBudget", "ok", 2, "T3");
  assert_int_equal(json_array_size(c), 2);
  json_decref(c);
}

static ftck_status_update_t update(json_t *computed, json_t *incidents, int64_t gen) {
  ftck_status_update_t u = {.uid = "u-1", .computed = computed, .incidents = incidents, .generation = gen};
  return u;
}

static void test_status_merge_keeps_foreign_fields_adds_deltas_and_skips_no_ops(void **state) {
  (void)state;
  json_t *job = job_from("{\"replicas\":2}");
  json_object_set_new(job, "status", json_pack("{s:i, s:i}", "epoch", 7, "replacements", 2));
  json_t *computed = json_pack("{s:s, s:i, s:i, s:[{s:s, s:s, s:s, s:s}]}", "phase", "Running", "alive", 2,
                               "replacementsDelta", 1, "conditions", "type", "Ready", "status", "True", "reason",
                               "AllMembersRunning", "message", "2 of 2");
  json_t *incidents = json_pack("[{s:s}]", "kind", "PodFailed");
  ftck_status_update_t u = update(computed, incidents, 2);
  assert_int_equal(ftck_status_merge(job, &u), 0);
  assert_int_equal(ftck_jint(job, "status.epoch", 0), 7); /* the coordinator's field is kept */
  assert_int_equal(ftck_jint(job, "status.replacements", 0), 3);
  assert_int_equal(ftck_jint(job, "status.observedGeneration", 0), 2);
  assert_string_equal(ftck_jstr(job, "status.phase"), "Running");
  assert_null(ftck_jget(job, "status.replacementsDelta"));
  assert_int_equal(json_array_size(ftck_jget(job, "status.incidents")), 1);
  const char *t1 = ftck_jstr(json_array_get(ftck_jget(job, "status.conditions"), 0), "lastTransitionTime");
  assert_non_null(t1);
  char first[64];
  snprintf(first, sizeof first, "%s", t1);
  /* The same status again, without a delta or incidents: nothing to write. */
  json_object_set_new(computed, "replacementsDelta", json_integer(0));
  json_array_clear(incidents);
  assert_int_equal(ftck_status_merge(job, &u), 1);
  /* Another uid (a new job with the same name): left alone. */
  u.uid = "u-2";
  assert_int_equal(ftck_status_merge(job, &u), 1);
  u.uid = "u-1";
  /* Incidents are bounded, the oldest go first. */
  for (int i = 0; i < FTCK_MAX_INCIDENTS + 5; i++) json_array_append_new(incidents, json_pack("{s:i}", "n", i));
  assert_int_equal(ftck_status_merge(job, &u), 0);
  json_t *inc = ftck_jget(job, "status.incidents");
  assert_int_equal(json_array_size(inc), FTCK_MAX_INCIDENTS);
  assert_int_equal(ftck_jint(json_array_get(inc, FTCK_MAX_INCIDENTS - 1), "n", -1), FTCK_MAX_INCIDENTS + 4);
  assert_string_equal(ftck_jstr(json_array_get(ftck_jget(job, "status.conditions"), 0), "lastTransitionTime"), first);
  json_decref(computed);
  json_decref(incidents);
  json_decref(job);
}

static void test_pod_building_survives_every_allocation_failure(void **state) {
  (void)state;
  json_t *j = job_from("{\"replicas\":2," TEMPLATE "}");
  ftck_job_spec_t s;
  char err[128];
  assert_int_equal(ftck_job_spec_parse(j, &s, err, sizeof err), 0);
  ftck_pod_env_t env = {.coordinator = "c:1", .dump_dir = "/d"};
  for (long n = 1;; n++) {
    ftc__alloc_fail_at(n);
    json_t *pod = ftck_build_pod(j, &s, 1, 2, 1, "node-a", &env);
    ftc__alloc_fail_at(0);
    if (pod) {
      /* The first run that is not failed gives the whole pod. */
      json_t *ref = ftck_build_pod(j, &s, 1, 2, 1, "node-a", &env);
      assert_true(json_equal(pod, ref));
      json_decref(ref);
      json_decref(pod);
      assert_true(n > 10);
      break;
    }
    assert_true(n < 5000);
  }
  json_decref(j);
}

static void test_status_merge_survives_every_allocation_failure(void **state) {
  (void)state;
  json_t *job = job_from("{\"replicas\":2}");
  json_object_set_new(job, "status", json_pack("{s:i, s:[{s:s, s:s, s:s}]}", "epoch", 3, "conditions", "type", "Ready",
                                               "status", "False", "lastTransitionTime", "T0"));
  json_t *computed = json_pack("{s:s, s:i, s:[{s:i, s:s}], s:[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]}", "phase",
                               "Degraded", "replacementsDelta", 1, "members", "slot", 0, "state", "Running",
                               "conditions", "type", "Ready", "status", "False", "reason", "R", "message", "m",
                               "type", "Degraded", "status", "True", "reason", "D", "message", "d");
  json_t *incidents = json_pack("[{s:s}]", "kind", "PodFailed");
  ftck_status_update_t u = update(computed, incidents, 4);
  json_t *ref = json_deep_copy(job);
  assert_int_equal(ftck_status_merge(ref, &u), 0);
  for (long n = 1;; n++) {
    json_t *copy = json_deep_copy(job);
    ftc__alloc_fail_at(n);
    int rc = ftck_status_merge(copy, &u);
    ftc__alloc_fail_at(0);
    if (rc == -1) {
      assert_true(json_equal(ftck_jget(copy, "status"), ftck_jget(job, "status"))); /* untouched */
    } else {
      assert_int_equal(rc, 0);
      /* Same as the reference, except a Degraded condition's new timestamp. */
      json_object_del(json_array_get(ftck_jget(copy, "status.conditions"), 1), "lastTransitionTime");
      json_t *r2 = json_deep_copy(ref);
      json_object_del(json_array_get(ftck_jget(r2, "status.conditions"), 1), "lastTransitionTime");
      assert_true(json_equal(copy, r2));
      json_decref(r2);
      json_decref(copy);
      assert_true(n > 10);
      break;
    }
    json_decref(copy);
    assert_true(n < 5000);
  }
  json_decref(ref);
  json_decref(computed);
  json_decref(incidents);
  json_decref(job);
}

int main(void) {
  ftck_json_use_ftc_alloc();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_follow_the_crd),
      cmocka_unit_test(test_an_invalid_env_value_leaves_the_last_error_alone),
      cmocka_unit_test(test_unusable_specs_say_what_to_fix),
      cmocka_unit_test(test_pod_of_a_slot_carries_identity_owner_and_environment),
      cmocka_unit_test(test_template_app_labels_are_kept_and_the_controllers_ftcomm_dev_labels_are_forced),
      cmocka_unit_test(test_replacement_joins_and_avoids_failed_nodes_in_every_term),
      cmocka_unit_test(test_pod_bookkeeping),
      cmocka_unit_test(test_node_readiness_from_its_ready_condition),
      cmocka_unit_test(test_condition_transition_time_changes_only_with_status),
      cmocka_unit_test(test_status_merge_keeps_foreign_fields_adds_deltas_and_skips_no_ops),
      cmocka_unit_test(test_pod_grace_period_covers_the_dump_drain),
      cmocka_unit_test(test_pod_building_survives_every_allocation_failure),
      cmocka_unit_test(test_status_merge_survives_every_allocation_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
