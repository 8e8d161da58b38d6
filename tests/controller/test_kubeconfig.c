/*
 * test_kubeconfig.c - kubeconfig and in-cluster parsing: the fields that
 * are read, the errors that name what is missing, TLS that cannot be turned
 * off, and clean failure at every allocation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "kube_config.h"
#include "kube_json.h"

static char dir[256];

static void write_file(const char *name, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static ftc_status_t load(const char *text, const char *context, ftck_config_t **out) {
  write_file("kubeconfig", text);
  char p[512];
  snprintf(p, sizeof p, "%s/kubeconfig", dir);
  return ftck_config_from_kubeconfig(p, context, out);
}

/* "-----BEGIN CERTIFICATE-----\nCA\n" base64-encoded */
#define CA_B64 "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkNBCg=="

static const char *full =
    "apiVersion: v1\n"
    "kind: Config\n"
    "current-context: dev\n"
    "clusters:\n"
    "- name: other\n"
    "  cluster: {server: https://other:1}\n"
    "- name: local\n"
    "  cluster:\n"
    "    server: https://127.0.0.1:6443/\n"
    "    certificate-authority-data: " CA_B64 "\n"
    "contexts:\n"
    "- name: dev\n"
    "  context: {cluster: local, user: admin, namespace: team-a}\n"
    "- name: certs\n"
    "  context: {cluster: local, user: certuser}\n"
    "users:\n"
    "- name: admin\n"
    "  user: {token: abc.def}\n"
    "- name: certuser\n"
    "  user:\n"
    "    client-certificate: client.crt\n"
    "    client-key-data: a2V5\n";

static void test_current_context_gives_server_ca_token_namespace(void **state) {
  (void)state;
  ftck_config_t *c = NULL;
  assert_int_equal(load(full, NULL, &c), FTC_OK);
  assert_string_equal(c->server, "https://127.0.0.1:6443");
  assert_string_equal(c->namespace, "team-a");
  assert_string_equal(c->token, "abc.def");
  assert_string_equal(c->context, "dev");
  assert_string_equal(c->ca.data, "-----BEGIN CERTIFICATE-----\nCA\n");
  assert_null(c->cert.data);
  ftck_config_free(c);
}

static void test_named_context_reads_client_cert_file_relative_to_kubeconfig(void **state) {
  (void)state;
  write_file("client.crt", "CERT-PEM");
  ftck_config_t *c = NULL;
  assert_int_equal(load(full, "certs", &c), FTC_OK);
  assert_string_equal(c->cert.data, "CERT-PEM");
  assert_string_equal(c->key.data, "key");
  assert_null(c->token);
  assert_string_equal(c->namespace, "default");
  ftck_config_free(c);
}

static void expect_error(const char *text, const char *context, const char *needle) {
  ftck_config_t *c = (ftck_config_t *)1;
  assert_int_equal(load(text, context, &c), FTC_ERR_CONFIG);
  assert_null(c);
  if (!strstr(ftc_last_error(), needle)) fail_msg("error \"%s\" does not mention \"%s\"", ftc_last_error(), needle);
}

static void test_errors_name_the_missing_field(void **state) {
  (void)state;
  expect_error("apiVersion: v1\nclusters: []\n", NULL, "no current-context");
  expect_error(full, "nope", "no entry named \"nope\" under contexts");
  expect_error("current-context: a\ncontexts:\n- name: a\n  context: {user: u}\n", NULL, "context.cluster");
  expect_error("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\n", NULL,
               "names cluster \"c\", which is not under clusters");
  expect_error("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\nclusters:\n- name: c\n  cluster: {}\n",
               NULL, "cluster.server");
  expect_error("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\nclusters:\n- name: c\n"
               "  cluster: {server: https://x}\n", NULL, "names user \"u\", which is not under users");
  expect_error("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\nclusters:\n- name: c\n"
               "  cluster: {server: https://x}\nusers:\n- name: u\n  user: {client-certificate-data: Yw==}\n",
               NULL, "has client-certificate(-data) but no client-key(-data)");
  expect_error("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\nclusters:\n- name: c\n"
               "  cluster: {server: https://x, certificate-authority: /nonexistent/ca.crt}\n", NULL,
               "certificate-authority: cannot open /nonexistent/ca.crt");
  expect_error("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\nclusters:\n- name: c\n"
               "  cluster: {server: https://x, certificate-authority-data: '@@@'}\n", NULL,
               "certificate-authority-data is not valid base64");
  expect_error("a: [unclosed\n", NULL, "YAML error at line");
  expect_error("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\nclusters:\n- name: c\n"
               "  cluster: {server: https://x}\nusers:\n- name: u\n  user: {exec: {command: gke-gcloud-auth-plugin}}\n",
               NULL, "uses an exec plugin, which the controller does not run");
}

static void test_tls_verification_cannot_be_turned_off(void **state) {
  (void)state;
  expect_error("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\nclusters:\n- name: c\n"
               "  cluster: {server: https://x, insecure-skip-tls-verify: true}\n", NULL, "always verifies TLS");
  expect_error("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c}\nclusters:\n- name: c\n"
               "  cluster: {server: 'http://x:8080'}\n", NULL, "TLS is required");
}

static void test_token_file_is_read_and_reloaded(void **state) {
  (void)state;
  write_file("tok", "first\n");
  ftck_config_t *c = NULL;
  assert_int_equal(load("current-context: a\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\nclusters:\n"
                        "- name: c\n  cluster: {server: https://x}\nusers:\n- name: u\n  user: {tokenFile: tok}\n",
                        NULL, &c), FTC_OK);
  assert_string_equal(c->token, "first");
  write_file("tok", "second");
  assert_int_equal(ftck_config_reload_token(c), FTC_OK);
  assert_string_equal(c->token, "second");
  ftck_config_free(c);
}

static void test_in_cluster_reads_service_account_files(void **state) {
  (void)state;
  write_file("token", "sa-token\n");
  write_file("ca.crt", "CA-PEM");
  write_file("namespace", "ftcomm-system\n");
  setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  ftck_config_t *c = NULL;
  assert_int_equal(ftck_config_in_cluster(dir, &c), FTC_OK);
  assert_string_equal(c->server, "https://10.0.0.1:443");
  assert_string_equal(c->token, "sa-token");
  assert_string_equal(c->ca.data, "CA-PEM");
  assert_string_equal(c->namespace, "ftcomm-system");
  ftck_config_free(c);
  setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  assert_int_equal(ftck_config_in_cluster(dir, &c), FTC_OK);
  assert_string_equal(c->server, "https://[fd00::1]:443");
  ftck_config_free(c);
  unsetenv("KUBERNETES_SERVICE_HOST");
  assert_int_equal(ftck_config_in_cluster(dir, &c), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "KUBERNETES_SERVICE_HOST"));
}

static void test_every_allocation_failure_is_clean(void **state) {
  (void)state;
  write_file("client.crt", "CERT-PEM");
  write_file("kubeconfig", full);
  char p[512];
  snprintf(p, sizeof p, "%s/kubeconfig", dir);
  for (long n = 1;; n++) {
    ftck_config_t *c = NULL;
    ftc__alloc_fail_at(n);
    ftc_status_t st = ftck_config_from_kubeconfig(p, "certs", &c);
    ftc__alloc_fail_at(0);
    if (st == FTC_OK) {
      assert_string_equal(c->cert.data, "CERT-PEM");
      ftck_config_free(c);
      assert_true(n > 3);
      break;
    }
    assert_int_equal(st, FTC_ERR_NO_MEMORY);
    assert_null(c);
    assert_true(n < 1000);
  }
}

static void test_base64_round_trip_and_bad_input(void **state) {
  (void)state;
  const char *samples[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
  for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
    char *enc = ftck_base64_encode((const unsigned char *)samples[i], strlen(samples[i]));
    char *dec = NULL;
    size_t n = 0;
    assert_int_equal(ftck_base64_decode(enc, &dec, &n), FTC_OK);
    assert_int_equal(n, strlen(samples[i]));
    assert_memory_equal(dec, samples[i], n);
    ftc__free(enc);
    ftc__free(dec);
  }
  char *enc = ftck_base64_encode((const unsigned char *)"foobar", 6);
  assert_string_equal(enc, "Zm9vYmFy");
  ftc__free(enc);
  char *dec = NULL;
  assert_int_equal(ftck_base64_decode("Zm9v\nYmFy\n", &dec, NULL), FTC_OK); /* wrapped lines */
  assert_string_equal(dec, "foobar");
  ftc__free(dec);
  assert_int_equal(ftck_base64_decode("Zm9v*", &dec, NULL), FTC_ERR_INVALID_ARGUMENT);
}

int main(void) {
  ftck_json_use_ftc_alloc();
  snprintf(dir, sizeof dir, "/tmp/ftck-kc-XXXXXX");
  if (!mkdtemp(dir)) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_current_context_gives_server_ca_token_namespace),
      cmocka_unit_test(test_named_context_reads_client_cert_file_relative_to_kubeconfig),
      cmocka_unit_test(test_errors_name_the_missing_field),
      cmocka_unit_test(test_tls_verification_cannot_be_turned_off),
      cmocka_unit_test(test_token_file_is_read_and_reloaded),
      cmocka_unit_test(test_in_cluster_reads_service_account_files),
      cmocka_unit_test(test_every_allocation_failure_is_clean),
      cmocka_unit_test(test_base64_round_trip_and_bad_input),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) return 1;
  return rc;
}
