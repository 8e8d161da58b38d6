/*
 * test_server.c - the controller's options (defaults, environment, flags,
 * errors that name the flag) and its health/metrics HTTP server, spoken to
 * over a real socket on a free port.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "httpd.h"
#include "kube_json.h"
#include "metrics.h"
#include "options.h"

static void test_options_defaults_env_and_flags(void **state) {
  (void)state;
  setenv("WATCH_NAMESPACE", "team", 1);
  setenv("POD_NAME", "ctl-abc", 1);
  setenv("POD_NAMESPACE", "ftcomm-system", 1);
  ftck_options_t o;
  char *argv1[] = {"x", NULL};
  assert_int_equal(ftck_options_parse(1, argv1, &o), FTC_OK);
  assert_string_equal(o.watch_namespace, "team");
  assert_string_equal(o.identity, "ctl-abc");
  assert_string_equal(o.lease_namespace, "ftcomm-system");
  assert_string_equal(o.listen_addr, ":8080");
  assert_int_equal(o.leader_elect, 1);
  assert_int_equal(o.lease_duration_s, 15);
  /* The coordinator port, the dump volume and the leader label. */
  assert_string_equal(o.coordinator_bind, ":7470");
  assert_string_equal(o.dump_volume, "/var/lib/ftcomm/dumps");
  assert_int_equal(o.dump_retention, 10);
  assert_int_equal(o.dump_wait_s, 10);
  assert_int_equal(o.token_check_s, 0); /* deprecated: the token Secrets are watched */
  assert_int_equal(o.leader_label, 1);
  assert_string_equal(o.pod_name, "ctl-abc");
  assert_string_equal(o.pod_namespace, "ftcomm-system");
  char *argv3[] = {"x", "--coordinator-bind=127.0.0.1:0", "--dump-volume", "/v", "--dump-retention=3",
                   "--dump-wait=2", "--leader-label=false", "--analyzer=/bin/ftcomm-trace", "--token-check=5", NULL};
  assert_int_equal(ftck_options_parse(9, argv3, &o), FTC_OK);
  assert_int_equal(o.token_check_s, 5); /* still accepted (old command lines start), main warns it is ignored */
  assert_string_equal(o.coordinator_bind, "127.0.0.1:0");
  assert_string_equal(o.dump_volume, "/v");
  assert_int_equal(o.dump_retention, 3);
  assert_int_equal(o.dump_wait_s, 2);
  assert_int_equal(o.leader_label, 0);
  assert_string_equal(o.analyzer, "/bin/ftcomm-trace");
  char *argv2[] = {"x", "--namespace=", "--leader-elect=false", "--workers", "4", "--listen-address=127.0.0.1:0",
                   "--lease-name=l", NULL};
  assert_int_equal(ftck_options_parse(7, argv2, &o), FTC_OK);
  assert_string_equal(o.watch_namespace, ""); /* flag beats env: all namespaces */
  assert_int_equal(o.leader_elect, 0);
  assert_int_equal(o.workers, 4);
  assert_string_equal(o.lease_name, "l");
  char *argv4[] = {"x", "--coordinator-address=[fd00::10]:7470", NULL};
  assert_int_equal(ftck_options_parse(2, argv4, &o), FTC_OK);
  assert_string_equal(o.coordinator_address, "[fd00::10]:7470");
  unsetenv("WATCH_NAMESPACE");
  unsetenv("POD_NAME");
  unsetenv("POD_NAMESPACE");
}

static void test_option_errors_name_the_flag(void **state) {
  (void)state;
  ftck_options_t o;
  struct { int argc; char *argv[4]; const char *msg; } cases[] = {
      {2, {"x", "--nope=1"}, "unknown flag \"--nope=1\""},
      {2, {"x", "--workers=0"}, "--workers: expected an integer in [1, 64]"},
      {2, {"x", "--leader-elect=maybe"}, "--leader-elect: expected true or false"},
      {2, {"x", "--kubeconfig"}, "--kubeconfig needs a value"},
      {3, {"x", "--lease-duration=10", "--renew-deadline=10"}, "--renew-deadline (10) must be shorter than --lease-duration (10)"},
      {2, {"x", "positional"}, "unexpected argument"},
      {2, {"x", "--dump-retention=0"}, "--dump-retention: expected an integer in [1, 100000]"},
      {2, {"x", "--coordinator-address=fd00::10:7470"}, "an IPv6 address with a port must be in brackets"},
      {2, {"x", "--coordinator-address=ftcomm-controller"}, "--coordinator-address=\"ftcomm-controller\" has no port"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(ftck_options_parse(cases[i].argc, cases[i].argv, &o), FTC_ERR_CONFIG);
    if (!strstr(ftc_last_error(), cases[i].msg)) fail_msg("case %zu: \"%s\" lacks \"%s\"", i, ftc_last_error(), cases[i].msg);
  }
}

static void handler(const char *path, int *status, const char **ctype, char **body, void *ud) {
  (void)ud;
  if (!strcmp(path, "/metrics")) {
    ftck_metrics_src_t src = {.leader = 1};
    *body = ftck_metrics_render(&src);
    *ctype = "text/plain; version=0.0.4";
    *status = 200;
  } else if (!strcmp(path, "/readyz")) {
    *status = 503;
    *body = ftc__strdup("caches not synced\n");
  } else {
    *status = 404;
  }
}

static size_t collect(char *p, size_t s, size_t n, void *ud) {
  strncat(ud, p, 8191 - strlen(ud) < s * n ? 8191 - strlen(ud) : s * n);
  return s * n;
}

static long http_get(int port, const char *path, char *body) {
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
  body[0] = '\0';
  CURL *e = curl_easy_init();
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(e, CURLOPT_TIMEOUT, 5L);
  long code = 0;
  if (curl_easy_perform(e) == CURLE_OK) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_cleanup(e);
  return code;
}

static void test_http_server_answers_metrics_readyz_and_404(void **state) {
  (void)state;
  ftck_httpd_t *s = NULL;
  assert_int_equal(ftck_httpd_start("127.0.0.1:0", handler, NULL, &s), FTC_OK);
  int port = ftck_httpd_port(s);
  assert_true(port > 0);
  char body[8192];
  assert_int_equal(http_get(port, "/metrics", body), 200);
  assert_non_null(strstr(body, "# TYPE ftcomm_controller_reconciles_total counter\n"));
  assert_non_null(strstr(body, "ftcomm_controller_reconciles_total{result=\"success\"} 0\n"));
  assert_non_null(strstr(body, "ftcomm_controller_leader 1\n"));
  assert_int_equal(http_get(port, "/readyz?verbose", body), 503);
  assert_string_equal(body, "caches not synced\n");
  assert_int_equal(http_get(port, "/nothing", body), 404);
  ftck_httpd_stop(s);
  assert_int_equal(http_get(port, "/metrics", body), 0); /* stopped: nobody listens */
}

static void test_bad_listen_address_is_a_config_error(void **state) {
  (void)state;
  ftck_httpd_t *s = NULL;
  assert_int_equal(ftck_httpd_start("no-port", handler, NULL, &s), FTC_ERR_CONFIG);
  assert_null(s);
}

int main(void) {
  ftck_json_use_ftc_alloc();
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_options_defaults_env_and_flags),
      cmocka_unit_test(test_option_errors_name_the_flag),
      cmocka_unit_test(test_http_server_answers_metrics_readyz_and_404),
      cmocka_unit_test(test_bad_listen_address_is_a_config_error),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
