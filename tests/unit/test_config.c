/*
 * test_config.c - ftc_config_resolve(): unset fields come from FTCOMM_*,
 * then from the defaults; explicit fields win; a bad variable or field is
 * FTC_ERR_CONFIG naming it and its range.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/op.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftcomm.h"

static int clean_env(void **state) {
  (void)state;
  const char *vars[] = {"FTCOMM_JOB", "FTCOMM_TIMEOUT_MS", "FTCOMM_WORLD_SIZE", "FTCOMM_SLOT",
                        "FTCOMM_MIN_SIZE", "FTCOMM_BACKEND", "FTCOMM_CONNECT_TIMEOUT_MS",
                        "FTCOMM_COORDINATOR", "FTCOMM_TOKEN", "FTCOMM_ALLREDUCE_ALGO"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
  ftc__param_reset();
  return 0;
}

static void unset_fields_take_the_defaults(void **state) {
  (void)state;
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  assert_int_equal(ftc_config_resolve(&cfg), FTC_OK);
  assert_string_equal(cfg.job, "local");
  assert_int_equal(cfg.timeout_ms, 600000);
  assert_int_equal(cfg.world_size, 1);
  assert_int_equal(cfg.slot, 0);
  assert_int_equal(cfg.recorder_entries, 2000);
  assert_string_equal(cfg.backend, "auto");
  assert_null(cfg.coordinator);
}

static void unset_fields_come_from_the_environment(void **state) {
  (void)state;
  setenv("FTCOMM_JOB", "resnet", 1);
  setenv("FTCOMM_TIMEOUT_MS", "1234", 1);
  setenv("FTCOMM_WORLD_SIZE", "8", 1);
  setenv("FTCOMM_SLOT", "5", 1);
  ftc__param_reset();
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  assert_int_equal(ftc_config_resolve(&cfg), FTC_OK);
  assert_string_equal(cfg.job, "resnet");
  assert_int_equal(cfg.timeout_ms, 1234);
  assert_int_equal(cfg.world_size, 8);
  assert_int_equal(cfg.slot, 5);
}

/* The header says ftc_config_resolve reads the environment: a variable set
 * after an earlier read (here by a first resolve) is seen, not a cached value. */
static void a_setenv_after_an_earlier_resolve_is_seen(void **state) {
  (void)state;
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  assert_int_equal(ftc_config_resolve(&cfg), FTC_OK);
  assert_int_equal(cfg.timeout_ms, 600000);
  setenv("FTCOMM_TIMEOUT_MS", "4321", 1);
  setenv("FTCOMM_WORLD_SIZE", "3", 1);
  ftc_config_t again = FTC_CONFIG_INITIALIZER;
  assert_int_equal(ftc_config_resolve(&again), FTC_OK);
  assert_int_equal(again.timeout_ms, 4321);
  assert_int_equal(again.world_size, 3);
  setenv("FTCOMM_TIMEOUT_MS", "soon", 1);
  ftc_config_t bad = FTC_CONFIG_INITIALIZER;
  assert_int_equal(ftc_config_resolve(&bad), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_TIMEOUT_MS"));
}

static void explicit_fields_win_over_the_environment(void **state) {
  (void)state;
  setenv("FTCOMM_TIMEOUT_MS", "1234", 1);
  ftc__param_reset();
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  cfg.timeout_ms = 50;
  cfg.job = "mine";
  assert_int_equal(ftc_config_resolve(&cfg), FTC_OK);
  assert_int_equal(cfg.timeout_ms, 50);
  assert_string_equal(cfg.job, "mine");
}

static void a_non_numeric_variable_is_a_config_error_naming_it(void **state) {
  (void)state;
  setenv("FTCOMM_TIMEOUT_MS", "soon", 1);
  ftc__param_reset();
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  assert_int_equal(ftc_config_resolve(&cfg), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_TIMEOUT_MS"));
}

static void an_out_of_range_variable_is_a_config_error_with_the_range(void **state) {
  (void)state;
  setenv("FTCOMM_WORLD_SIZE", "0", 1);
  ftc__param_reset();
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  assert_int_equal(ftc_config_resolve(&cfg), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_WORLD_SIZE"));
  assert_non_null(strstr(ftc_last_error(), "[1, 1048576]"));
}

static void an_out_of_range_field_is_a_config_error_naming_its_variable(void **state) {
  (void)state;
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  cfg.connect_timeout_ms = 0;
  assert_int_equal(ftc_config_resolve(&cfg), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_CONNECT_TIMEOUT_MS"));
}

static void an_unknown_backend_is_a_config_error(void **state) {
  (void)state;
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  cfg.backend = "mpi";
  assert_int_equal(ftc_config_resolve(&cfg), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_BACKEND"));
}

static void every_allreduce_algorithm_name_is_accepted(void **state) {
  (void)state;
  const char *names[] = {"auto", "ring", "halving", "doubling", "flat", "Ring", "Flat", "" /* unset */};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    setenv("FTCOMM_ALLREDUCE_ALGO", names[i], 1);
    ftc__param_reset();
    ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
    assert_int_equal(ftc_config_resolve(&cfg), FTC_OK);
  }
  for (int a = 0; a < FTC_ALGO_COUNT; a++) {
    ftc_algo_t got;
    assert_int_equal(ftc__algo_parse("X", ftc_algo_name((ftc_algo_t)a), &got), FTC_OK);
    assert_int_equal(got, a);
  }
  assert_string_equal(ftc_algo_name(FTC_ALGO_COUNT), "?");
}

static void an_unknown_allreduce_algorithm_is_a_config_error_listing_the_valid_ones(void **state) {
  (void)state;
  const char *bad[] = {"tree", "ring,halving", "rings"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    setenv("FTCOMM_ALLREDUCE_ALGO", bad[i], 1);
    ftc__param_reset();
    ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
    assert_int_equal(ftc_config_resolve(&cfg), FTC_ERR_CONFIG);
    assert_non_null(strstr(ftc_last_error(), "FTCOMM_ALLREDUCE_ALGO"));
    assert_non_null(strstr(ftc_last_error(), bad[i]));
    assert_non_null(strstr(ftc_last_error(), "auto, ring, halving, doubling, flat"));
    /* ftc_comm_create resolves the config first: refused before connecting */
    ftc_comm_t *comm = (ftc_comm_t *)&cfg;
    assert_int_equal(ftc_comm_create(NULL, &comm), FTC_ERR_CONFIG);
    assert_null(comm);
    assert_non_null(strstr(ftc_last_error(), "FTCOMM_ALLREDUCE_ALGO"));
  }
}

static void a_slot_outside_the_world_is_a_config_error(void **state) {
  (void)state;
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  cfg.world_size = 4;
  cfg.slot = 4;
  assert_int_equal(ftc_config_resolve(&cfg), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_SLOT"));
}

static void a_min_size_above_the_world_is_a_config_error(void **state) {
  (void)state;
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  cfg.world_size = 4;
  cfg.min_size = 5;
  assert_int_equal(ftc_config_resolve(&cfg), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_MIN_SIZE"));
}

static void a_config_without_the_initializer_is_refused(void **state) {
  (void)state;
  ftc_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  assert_int_equal(ftc_config_resolve(&cfg), FTC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(ftc_last_error(), "FTC_CONFIG_INITIALIZER"));
  assert_int_equal(ftc_config_resolve(NULL), FTC_ERR_INVALID_ARGUMENT);
}

/* A program built against an older, smaller ftc_config_t: the fields that
 * fit are read and resolved, the rest of its memory is not touched; a
 * version this library does not know, or no room for the header, is
 * refused. */
static void a_smaller_config_from_an_older_header_is_read_field_by_field(void **state) {
  (void)state;
  union {
    ftc_config_t cfg;
    unsigned char bytes[sizeof(ftc_config_t) + 16];
  } u;
  memset(&u, 0x5a, sizeof(u));
  const size_t old = offsetof(ftc_config_t, backend); /* up to connect_timeout_ms */
  ftc_config_t init = FTC_CONFIG_INITIALIZER;
  memcpy(&u.cfg, &init, old);
  u.cfg.size = old;
  u.cfg.job = "older";
  u.cfg.world_size = 3;
  assert_int_equal(ftc_config_resolve(&u.cfg), FTC_OK);
  assert_string_equal(u.cfg.job, "older");
  assert_int_equal(u.cfg.world_size, 3);
  assert_int_equal(u.cfg.size, old);
  assert_true(u.cfg.timeout_ms > 0); /* resolved from the table */
  for (size_t i = old; i < sizeof(u.bytes); i++) assert_int_equal(u.bytes[i], 0x5a);
  /* ftc_comm_create takes it the same way: it gets as far as the missing
   * coordinator, past the config. */
  u.cfg.coordinator = NULL;
  ftc_comm_t *comm = NULL;
  assert_int_equal(ftc_comm_create(&u.cfg, &comm), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_COORDINATOR"));
  u.cfg.version = FTC_CONFIG_VERSION + 1;
  assert_int_equal(ftc_config_resolve(&u.cfg), FTC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(ftc_last_error(), "FTC_CONFIG_INITIALIZER"));
  u.cfg.version = FTC_CONFIG_VERSION;
  u.cfg.size = sizeof(size_t);
  assert_int_equal(ftc_config_resolve(&u.cfg), FTC_ERR_INVALID_ARGUMENT);
}

/* ftc__param_parse_int gives a bad value's message to its caller, which
 * handles it (the controller), and leaves ftc_last_error() as it was;
 * ftc__param_int, whose callers return the status, records that message. */
static void a_parse_gives_its_message_to_the_caller_and_leaves_the_last_error(void **state) {
  (void)state;
  struct { const char *text, *msg; } cases[] = {
      {"soon", "FTCOMM_TIMEOUT_MS=\"soon\" is not an integer; set it to a value in [1, 86400000]"},
      {"0", "FTCOMM_TIMEOUT_MS=0 is out of range; set it to a value in [1, 86400000]"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ftc__error(FTC_ERR_TIMEOUT, "an earlier failure");
    int64_t v = 42;
    char err[192] = "";
    assert_int_equal(ftc__param_parse_int(FTC_P_TIMEOUT_MS, cases[i].text, &v, err, sizeof(err)),
                     FTC_ERR_CONFIG);
    assert_string_equal(err, cases[i].msg);
    assert_int_equal(v, 42);
    assert_int_equal(ftc__param_parse_int(FTC_P_TIMEOUT_MS, cases[i].text, &v, NULL, 0), FTC_ERR_CONFIG);
    assert_string_equal(ftc_last_error(), "an earlier failure");

    setenv("FTCOMM_TIMEOUT_MS", cases[i].text, 1);
    ftc__param_reset();
    assert_int_equal(ftc__param_int(FTC_P_TIMEOUT_MS, &v), FTC_ERR_CONFIG);
    assert_int_equal(v, 600000); /* the default */
    assert_string_equal(ftc_last_error(), cases[i].msg);
  }
  int64_t v = 42;
  char err[64] = "";
  assert_int_equal(ftc__param_parse_int(FTC_P_TIMEOUT_MS, "1234", &v, err, sizeof(err)), FTC_OK);
  assert_int_equal(v, 1234);
  assert_string_equal(err, "");
  /* a string parameter: the caller's mistake, said in err too */
  ftc__error_clear();
  assert_int_equal(ftc__param_parse_int(FTC_P_BACKEND, "1", &v, err, sizeof(err)), FTC_ERR_INTERNAL);
  assert_non_null(strstr(err, "is not an integer"));
  assert_string_equal(ftc_last_error(), "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(unset_fields_take_the_defaults, clean_env),
      cmocka_unit_test_setup(unset_fields_come_from_the_environment, clean_env),
      cmocka_unit_test_setup(explicit_fields_win_over_the_environment, clean_env),
      cmocka_unit_test_setup(a_setenv_after_an_earlier_resolve_is_seen, clean_env),
      cmocka_unit_test_setup(a_non_numeric_variable_is_a_config_error_naming_it, clean_env),
      cmocka_unit_test_setup(an_out_of_range_variable_is_a_config_error_with_the_range, clean_env),
      cmocka_unit_test_setup(an_out_of_range_field_is_a_config_error_naming_its_variable, clean_env),
      cmocka_unit_test_setup(an_unknown_backend_is_a_config_error, clean_env),
      cmocka_unit_test_setup(every_allreduce_algorithm_name_is_accepted, clean_env),
      cmocka_unit_test_setup(an_unknown_allreduce_algorithm_is_a_config_error_listing_the_valid_ones,
                             clean_env),
      cmocka_unit_test_setup(a_slot_outside_the_world_is_a_config_error, clean_env),
      cmocka_unit_test_setup(a_min_size_above_the_world_is_a_config_error, clean_env),
      cmocka_unit_test_setup(a_config_without_the_initializer_is_refused, clean_env),
      cmocka_unit_test_setup(a_smaller_config_from_an_older_header_is_read_field_by_field, clean_env),
      cmocka_unit_test_setup(a_parse_gives_its_message_to_the_caller_and_leaves_the_last_error, clean_env),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
