/*
 * test_kube_util.c - what goes on the wire: percent-encoded label and field
 * selectors, API paths for core and grouped resources, query building,
 * RFC 3339 times both ways, dotted JSON lookups and object keys.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "ftc_alloc.h"
#include "informer.h"
#include "kube_client.h"
#include "kube_json.h"

static void test_selectors_are_percent_encoded(void **state) {
  (void)state;
  char *e = ftck_query_escape("app.kubernetes.io/managed-by=ftcomm-controller,ftcomm.dev/job in (a b),!x");
  assert_string_equal(e, "app.kubernetes.io%2Fmanaged-by%3Dftcomm-controller%2Cftcomm.dev%2Fjob%20in%20%28a%20b%29%2C%21x");
  ftc__free(e);
  e = ftck_query_escape("status.phase!=Running&x");
  assert_string_equal(e, "status.phase%21%3DRunning%26x");
  ftc__free(e);
  e = ftck_query_escape("Az09-._~");
  assert_string_equal(e, "Az09-._~");
  ftc__free(e);
}

static void test_query_parameters_append_with_question_mark_then_ampersand(void **state) {
  (void)state;
  char *p = ftc__strdup("/api/v1/pods");
  assert_int_equal(ftck_path_add_query(&p, "labelSelector", "a=b"), FTC_OK);
  assert_int_equal(ftck_path_add_query(&p, "fieldSelector", NULL), FTC_OK); /* absent: no change */
  assert_int_equal(ftck_path_add_query(&p, "continue", ""), FTC_OK);
  assert_int_equal(ftck_path_add_query(&p, "limit", "500"), FTC_OK);
  assert_string_equal(p, "/api/v1/pods?labelSelector=a%3Db&limit=500");
  ftc__free(p);
}

static void test_paths_for_core_and_grouped_resources(void **state) {
  (void)state;
  char *p = ftck_path("", "v1", "demo", "pods", "demo-0-0");
  assert_string_equal(p, "/api/v1/namespaces/demo/pods/demo-0-0");
  ftc__free(p);
  p = ftck_path("ftcomm.dev", "v1alpha1", NULL, "trainingjobs", NULL);
  assert_string_equal(p, "/apis/ftcomm.dev/v1alpha1/trainingjobs");
  ftc__free(p);
  p = ftck_path("coordination.k8s.io", "v1", "ftcomm-system", "leases", "ftcomm-controller");
  assert_string_equal(p, "/apis/coordination.k8s.io/v1/namespaces/ftcomm-system/leases/ftcomm-controller");
  ftc__free(p);
}

static void test_times_format_and_parse(void **state) {
  (void)state;
  char buf[64];
  int64_t t = 1764477296123456000LL; /* 2025-11-30T04:34:56.123456Z */
  ftck_format_microtime(t, buf, sizeof buf);
  assert_string_equal(buf, "2025-11-30T04:34:56.123456Z");
  assert_int_equal(ftck_parse_time(buf), t);
  ftck_format_time(t, buf, sizeof buf);
  assert_string_equal(buf, "2025-11-30T04:34:56Z");
  assert_int_equal(ftck_parse_time(buf), t - 123456000LL);
  assert_int_equal(ftck_parse_time("2025-11-30 04:34:56"), -1);
  assert_int_equal(ftck_parse_time(NULL), -1);
}

static void test_dotted_lookups_and_keys(void **state) {
  (void)state;
  json_t *o = json_loads("{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\",\"generation\":3,"
                         "\"labels\":{\"ftcomm.dev/job\":\"j\"}},\"spec\":{\"suspend\":true}}", 0, NULL);
  assert_non_null(o);
  assert_string_equal(ftck_jstr(o, "metadata.name"), "a");
  assert_int_equal(ftck_jint(o, "metadata.generation", -1), 3);
  assert_int_equal(ftck_jint(o, "metadata.missing", -1), -1);
  assert_int_equal(ftck_jbool(o, "spec.suspend", 0), 1);
  assert_null(ftck_jstr(o, "metadata.generation")); /* not a string */
  assert_string_equal(json_string_value(json_object_get(ftck_jget(o, "metadata.labels"), "ftcomm.dev/job")), "j");
  char key[64], ns[16], name[16];
  assert_int_equal(ftck_object_key(o, key, sizeof key), 0);
  assert_string_equal(key, "ns/a");
  assert_int_equal(ftck_object_key(o, key, 3), -1);
  assert_int_equal(ftck_split_key("ns/a", ns, sizeof ns, name, sizeof name), 0);
  assert_string_equal(ns, "ns");
  assert_string_equal(name, "a");
  assert_int_equal(ftck_split_key("cluster-scoped", ns, sizeof ns, name, sizeof name), 0);
  assert_string_equal(ns, "");
  json_decref(o);
}

/* The informer's default transform: what the reconciler reads stays, the
 * bulk (managedFields, pod spec objects, node status other than conditions
 * and addresses) goes. */
static void test_default_transform_trims_what_the_reconciler_does_not_read(void **state) {
  (void)state;
  json_t *pod = json_loads(
      "{\"metadata\":{\"name\":\"j-0-0\",\"namespace\":\"ml\",\"uid\":\"u\",\"resourceVersion\":\"7\","
      "\"deletionTimestamp\":\"2026-01-01T00:00:00Z\",\"labels\":{\"ftcomm.dev/job\":\"j\"},"
      "\"annotations\":{\"ftcomm.dev/avoid-nodes\":\"n1\",\"kubectl.kubernetes.io/last-applied-configuration\":\"{}\"},"
      "\"ownerReferences\":[{\"kind\":\"TrainingJob\",\"name\":\"j\"}],"
      "\"managedFields\":[{\"manager\":\"x\",\"fieldsV1\":{\"f:metadata\":{}}}]},"
      "\"spec\":{\"nodeName\":\"n2\",\"restartPolicy\":\"Never\",\"priority\":0,\"containers\":[{\"name\":\"c\"}],"
      "\"affinity\":{},\"tolerations\":[]},"
      "\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\",\"podIP\":\"10.0.0.1\","
      "\"containerStatuses\":[{\"state\":{\"terminated\":{\"finishedAt\":\"2026-01-01T00:00:00Z\"}}}]}}",
      0, NULL);
  assert_non_null(pod);
  ftck_transform_default(pod, "/api/v1/namespaces/ml/pods");
  assert_null(ftck_jget(pod, "metadata.managedFields"));
  assert_null(json_object_get(ftck_jget(pod, "metadata.annotations"), "kubectl.kubernetes.io/last-applied-configuration"));
  assert_string_equal(json_string_value(json_object_get(ftck_jget(pod, "metadata.annotations"), "ftcomm.dev/avoid-nodes")), "n1");
  assert_string_equal(json_string_value(json_object_get(ftck_jget(pod, "metadata.labels"), "ftcomm.dev/job")), "j");
  assert_string_equal(ftck_jstr(pod, "metadata.deletionTimestamp"), "2026-01-01T00:00:00Z");
  assert_non_null(ftck_jget(pod, "metadata.ownerReferences"));
  assert_string_equal(ftck_jstr(pod, "spec.nodeName"), "n2");
  assert_string_equal(ftck_jstr(pod, "spec.restartPolicy"), "Never");
  assert_int_equal(ftck_jint(pod, "spec.priority", -1), 0);
  assert_null(ftck_jget(pod, "spec.containers"));
  assert_null(ftck_jget(pod, "spec.affinity"));
  assert_null(ftck_jget(pod, "spec.tolerations"));
  assert_string_equal(ftck_jstr(pod, "status.reason"), "Evicted");
  assert_string_equal(ftck_jstr(pod, "status.podIP"), "10.0.0.1");
  assert_non_null(ftck_jget(pod, "status.containerStatuses"));
  json_decref(pod);

  json_t *node = json_loads("{\"metadata\":{\"name\":\"n\",\"managedFields\":[],\"annotations\":{"
                            "\"kubectl.kubernetes.io/last-applied-configuration\":\"{}\"}},"
                            "\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}],"
                            "\"addresses\":[],\"images\":[{\"names\":[\"a\"]}],\"nodeInfo\":{},\"capacity\":{}}}",
                            0, NULL);
  ftck_transform_default(node, "/api/v1/nodes");
  assert_null(ftck_jget(node, "metadata.managedFields"));
  assert_null(ftck_jget(node, "metadata.annotations")); /* emptied, so dropped */
  assert_non_null(ftck_jget(node, "status.conditions"));
  assert_non_null(ftck_jget(node, "status.addresses"));
  assert_int_equal(json_object_size(ftck_jget(node, "status")), 2);
  json_decref(node);

  /* Any other resource (and no collection): only managedFields and the annotation. */
  json_t *job = json_loads("{\"metadata\":{\"name\":\"j\",\"managedFields\":[]},\"spec\":{\"template\":{\"spec\":{}}}}", 0, NULL);
  ftck_transform_default(job, "/apis/ftcomm.dev/v1alpha1/trainingjobs");
  assert_null(ftck_jget(job, "metadata.managedFields"));
  assert_non_null(ftck_jget(job, "spec.template.spec"));
  ftck_transform_default(job, NULL);
  ftck_transform_none(job, NULL);
  assert_non_null(ftck_jget(job, "spec.template.spec"));
  json_decref(job);
}

int main(void) {
  ftck_json_use_ftc_alloc();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_selectors_are_percent_encoded),
      cmocka_unit_test(test_query_parameters_append_with_question_mark_then_ampersand),
      cmocka_unit_test(test_paths_for_core_and_grouped_resources),
      cmocka_unit_test(test_times_format_and_parse),
      cmocka_unit_test(test_dotted_lookups_and_keys),
      cmocka_unit_test(test_default_transform_trims_what_the_reconciler_does_not_read),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
