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

int main(void) {
  ftck_json_use_ftc_alloc();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_selectors_are_percent_encoded),
      cmocka_unit_test(test_query_parameters_append_with_question_mark_then_ampersand),
      cmocka_unit_test(test_paths_for_core_and_grouped_resources),
      cmocka_unit_test(test_times_format_and_parse),
      cmocka_unit_test(test_dotted_lookups_and_keys),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
