/*
 * test_nccl_caps.c - loading NCCL with dlopen, capabilities and the
 * recovery path per version (against the versioned test doubles and, when
 * `make deps` installed it, the real libnccl.so.2), status mapping, unique
 * id blobs and the epoch planner.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ftc_param.h"
#include "nccl_test_util.h"

enum { NB = FTC__NCCL_CAP_NONBLOCKING, SP = FTC__NCCL_CAP_SPLIT, SH = FTC__NCCL_CAP_SHRINK,
       RV = FTC__NCCL_CAP_REVOKE, GR = FTC__NCCL_CAP_GROW };

static void caps_follow_the_version_table(void **state) {
  (void)state;
  /* every symbol present: the version decides */
  assert_int_equal(ftc__nccl_caps_for(21300, 0, 1, 1, 1, 1), 0);
  assert_int_equal(ftc__nccl_caps_for(21400, 0, 1, 1, 1, 1), NB);
  assert_int_equal(ftc__nccl_caps_for(22605, 0, 1, 1, 1, 1), NB | SP);
  assert_int_equal(ftc__nccl_caps_for(22700, 0, 1, 1, 1, 1), NB | SP | SH);
  assert_int_equal(ftc__nccl_caps_for(22806, 0, 1, 1, 1, 1), NB | SP | SH);
  assert_int_equal(ftc__nccl_caps_for(22807, 0, 1, 1, 1, 1), NB | SP | SH | RV);
  assert_int_equal(ftc__nccl_caps_for(22901, 0, 1, 1, 1, 1), NB | SP | SH | RV);
  assert_int_equal(ftc__nccl_caps_for(22902, 0, 1, 1, 1, 1), NB | SP | SH | RV | GR);
  /* a missing symbol wins over the version */
  assert_int_equal(ftc__nccl_caps_for(23203, 0, 1, 0, 1, 1), NB | SP | RV | GR);
  assert_int_equal(ftc__nccl_caps_for(23203, 0, 1, 1, 0, 0), NB | SP | SH);
  /* grow needs split to restore the view's rank order */
  assert_int_equal(ftc__nccl_caps_for(23203, 0, 0, 1, 1, 1), NB | SH | RV);
  /* RCCL: the fault-tolerance calls count from 2.30.7 */
  assert_int_equal(ftc__nccl_caps_for(22902, 1, 1, 1, 1, 1), NB | SP);
  assert_int_equal(ftc__nccl_caps_for(23006, 1, 1, 1, 1, 1), NB | SP);
  assert_int_equal(ftc__nccl_caps_for(23007, 1, 1, 1, 1, 1), NB | SP | SH | RV | GR);
}

static void path_is_the_best_the_caps_allow_or_the_wish(void **state) {
  (void)state;
  unsigned all = NB | SP | SH | RV | GR;
  assert_int_equal(ftc__nccl_path_for(NB | SP, "auto"), FTC__NCCL_PATH_REINIT);
  assert_int_equal(ftc__nccl_path_for(NB | SP | SH, NULL), FTC__NCCL_PATH_SHRINK);
  assert_int_equal(ftc__nccl_path_for(NB | SP | SH | RV, "auto"), FTC__NCCL_PATH_SHRINK);
  assert_int_equal(ftc__nccl_path_for(all, "auto"), FTC__NCCL_PATH_SHRINK_GROW);
  assert_int_equal(ftc__nccl_path_for(all, "reinit"), FTC__NCCL_PATH_REINIT);
  assert_int_equal(ftc__nccl_path_for(all, "shrink"), FTC__NCCL_PATH_SHRINK);
  /* a wish above the caps is lowered */
  assert_int_equal(ftc__nccl_path_for(NB | SP, "shrink+grow"), FTC__NCCL_PATH_REINIT);
  assert_string_equal(ftc__nccl_path_name(FTC__NCCL_PATH_REINIT), "abort+reinit");
  assert_string_equal(ftc__nccl_path_name(FTC__NCCL_PATH_SHRINK_GROW), "shrink+grow");
}

static void each_double_version_is_detected_with_its_caps_and_path(void **state) {
  (void)state;
  static const struct {
    int version;
    unsigned caps;
    ftc__nccl_path_t path;
  } want[N_TEST_VERSIONS] = {
      {22605, NB | SP, FTC__NCCL_PATH_REINIT},
      {22703, NB | SP | SH, FTC__NCCL_PATH_SHRINK},
      {22809, NB | SP | SH | RV, FTC__NCCL_PATH_SHRINK},
      {22902, NB | SP | SH | RV | GR, FTC__NCCL_PATH_SHRINK_GROW},
      {23203, NB | SP | SH | RV | GR, FTC__NCCL_PATH_SHRINK_GROW},
  };
  for (int i = 0; i < N_TEST_VERSIONS; i++) {
    char path[512];
    double_path(test_versions[i], path, sizeof path);
    ftc__nccl_lib_t *lib = NULL;
    ftc_status_t st = ftc__nccl_lib_open(path, cudart_double_path(), &lib);
    if (st != FTC_OK) fail_msg("%s: %s: %s", path, ftc_strerror(st), ftc_last_error());
    const ftc__nccl_info_t *in = ftc__nccl_lib_info(lib);
    assert_int_equal(in->version, want[i].version);
    assert_int_equal(in->caps, want[i].caps);
    assert_int_equal(in->path, want[i].path);
    assert_int_equal(in->rccl, 0);
    assert_int_equal(in->devices, 1);
    char d[512];
    ftc__nccl_describe(lib, d, sizeof d);
    char v[32];
    snprintf(v, sizeof v, "NCCL %s ", test_versions[i]);
    assert_non_null(strstr(d, v));
    assert_non_null(strstr(d, ftc__nccl_path_name(want[i].path)));
    ftc__nccl_lib_close(lib);
  }
}

static void rccl_counts_revoke_shrink_grow_from_2_30_7(void **state) {
  (void)state;
  static const struct {
    const char *ver;
    unsigned caps;
    ftc__nccl_path_t path;
  } want[] = {
      {"2.29.2", NB | SP, FTC__NCCL_PATH_REINIT}, /* every symbol there, too old for RCCL */
      {"2.30.7", NB | SP | SH | RV | GR, FTC__NCCL_PATH_SHRINK_GROW},
  };
  for (int i = 0; i < 2; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/librccl_double_%s.so", NCCL_DOUBLE_DIR, want[i].ver);
    ftc__nccl_lib_t *lib = NULL;
    ftc_status_t st = ftc__nccl_lib_open(path, cudart_double_path(), &lib);
    if (st != FTC_OK) fail_msg("%s: %s: %s", path, ftc_strerror(st), ftc_last_error());
    const ftc__nccl_info_t *in = ftc__nccl_lib_info(lib);
    assert_int_equal(in->rccl, 1);
    assert_int_equal(in->caps, want[i].caps);
    assert_int_equal(in->path, want[i].path);
    char d[512];
    ftc__nccl_describe(lib, d, sizeof d);
    assert_non_null(strstr(d, "RCCL "));
    ftc__nccl_lib_close(lib);
  }
}

static void recovery_wish_from_the_environment_lowers_the_path(void **state) {
  (void)state;
  char path[512];
  double_path("2.32.3", path, sizeof path);
  setenv("FTCOMM_NCCL_RECOVERY", "reinit", 1);
  ftc__param_reset();
  ftc__nccl_lib_t *lib = NULL;
  assert_int_equal(ftc__nccl_lib_open(path, cudart_double_path(), &lib), FTC_OK);
  assert_int_equal(ftc__nccl_lib_info(lib)->path, FTC__NCCL_PATH_REINIT);
  ftc__nccl_lib_close(lib);
  unsetenv("FTCOMM_NCCL_RECOVERY");
  ftc__param_reset();
}

/* What the double's ncclGetUniqueId saw of NCCL_SOCKET_FAMILY/IFNAME after
 * ftc__nccl_lib_open with the given ftcomm settings (NULL: unset) and a
 * user's own NCCL_SOCKET_IFNAME (NULL: unset): the log line's tail. */
static ftc_status_t socket_env_seen(const char *family, const char *ifname,
                                    const char *user_ifname, char *seen, size_t len) {
  char path[512], dir[256], log[300];
  double_path("2.32.3", path, sizeof path);
  make_tmpdir(dir, sizeof dir, "sockenv");
  snprintf(log, sizeof log, "%s/log", dir);
  setenv("NCCL_DOUBLE_LOG", log, 1);
  unsetenv("NCCL_SOCKET_FAMILY");
  unsetenv("NCCL_SOCKET_IFNAME");
  if (family) setenv("FTCOMM_SOCKET_FAMILY", family, 1);
  if (ifname) setenv("FTCOMM_SOCKET_IFNAME", ifname, 1);
  if (user_ifname) setenv("NCCL_SOCKET_IFNAME", user_ifname, 1);
  ftc__param_reset();
  ftc__nccl_lib_t *lib = NULL;
  ftc_status_t st = ftc__nccl_lib_open(path, cudart_double_path(), &lib);
  seen[0] = '\0';
  if (st == FTC_OK) {
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(h);
    int (*get_id)(void *) = (int (*)(void *))dlsym(h, "ncclGetUniqueId");
    assert_non_null(get_id);
    char id[128];
    assert_int_equal(get_id(id), 0);
    dlclose(h);
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char line[512];
    while (fgets(line, sizeof line, f)) {
      char *p = strstr(line, "socket_family=");
      if (strstr(line, " getuniqueid ") && p) {
        p[strcspn(p, "\n")] = '\0';
        snprintf(seen, len, "%s", p);
      }
    }
    fclose(f);
    ftc__nccl_lib_close(lib);
  }
  unsetenv("FTCOMM_SOCKET_FAMILY");
  unsetenv("FTCOMM_SOCKET_IFNAME");
  unsetenv("NCCL_SOCKET_FAMILY");
  unsetenv("NCCL_SOCKET_IFNAME");
  unsetenv("NCCL_DOUBLE_LOG");
  ftc__param_reset();
  rm_tmpdir(dir);
  return st;
}

/* FTCOMM_SOCKET_FAMILY/IFNAME reach NCCL's own sockets as
 * NCCL_SOCKET_FAMILY/IFNAME before NCCL reads them; a user's NCCL_* value
 * is kept; auto and no interface set nothing; a bad family is refused. */
static void socket_settings_carry_over_to_nccl_unless_set(void **state) {
  (void)state;
  char seen[256];
  assert_int_equal(socket_env_seen("ipv4", "lo", NULL, seen, sizeof seen), FTC_OK);
  assert_string_equal(seen, "socket_family=AF_INET socket_ifname=lo");
  assert_int_equal(socket_env_seen("ipv6", "=eth0,ib", NULL, seen, sizeof seen), FTC_OK);
  assert_string_equal(seen, "socket_family=AF_INET6 socket_ifname==eth0,ib");
  assert_int_equal(socket_env_seen("ipv6", "lo", "^docker", seen, sizeof seen), FTC_OK);
  assert_string_equal(seen, "socket_family=AF_INET6 socket_ifname=^docker");
  assert_int_equal(socket_env_seen("auto", NULL, NULL, seen, sizeof seen), FTC_OK);
  assert_string_equal(seen, "socket_family=(unset) socket_ifname=(unset)");
  assert_int_equal(socket_env_seen("ipv5", NULL, NULL, seen, sizeof seen), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_SOCKET_FAMILY=\"ipv5\" is not an address family"));
  /* a user's NCCL_SOCKET_FAMILY too */
  setenv("NCCL_SOCKET_FAMILY", "AF_INET", 1);
  char buf[128];
  setenv("FTCOMM_SOCKET_FAMILY", "ipv6", 1);
  ftc__param_reset();
  assert_int_equal(ftc__nccl_socket_env(buf, sizeof buf), FTC_OK);
  assert_string_equal(buf, "");
  assert_string_equal(getenv("NCCL_SOCKET_FAMILY"), "AF_INET");
  unsetenv("NCCL_SOCKET_FAMILY");
  assert_int_equal(ftc__nccl_socket_env(buf, sizeof buf), FTC_OK);
  assert_string_equal(buf, "NCCL_SOCKET_FAMILY=AF_INET6");
  unsetenv("NCCL_SOCKET_FAMILY");
  unsetenv("FTCOMM_SOCKET_FAMILY");
  ftc__param_reset();
}

static void missing_library_names_what_was_looked_for(void **state) {
  (void)state;
  ftc__nccl_lib_t *lib = (ftc__nccl_lib_t *)1;
  assert_int_equal(ftc__nccl_lib_open("/nonexistent/libnccl.so.2", NULL, &lib),
                   FTC_ERR_LIBRARY_NOT_FOUND);
  assert_null(lib);
  assert_non_null(strstr(ftc_last_error(), "/nonexistent/libnccl.so.2"));
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_NCCL_LIBRARY"));

  /* through the environment variable, the same */
  setenv("FTCOMM_NCCL_LIBRARY", "/nonexistent/librccl.so", 1);
  ftc__param_reset();
  assert_int_equal(ftc__nccl_lib_open(NULL, NULL, &lib), FTC_ERR_LIBRARY_NOT_FOUND);
  assert_non_null(strstr(ftc_last_error(), "/nonexistent/librccl.so"));
  unsetenv("FTCOMM_NCCL_LIBRARY");
  ftc__param_reset();

  /* the default search names every file it tried (unless this host has a system NCCL) */
  ftc_status_t st = ftc__nccl_lib_open(NULL, NULL, &lib);
  if (st == FTC_OK) {
    ftc__nccl_lib_close(lib);
  } else {
    assert_int_equal(st, FTC_ERR_LIBRARY_NOT_FOUND);
    assert_non_null(strstr(ftc_last_error(), "libnccl.so.2, libnccl.so, librccl.so.1, librccl.so"));
    assert_non_null(strstr(ftc_last_error(), "libnccl.so.2: cannot open"));
  }

  /* NCCL found, the CUDA runtime not */
  char path[512];
  double_path("2.32.3", path, sizeof path);
  assert_int_equal(ftc__nccl_lib_open(path, "/nonexistent/libcudart.so.13", &lib),
                   FTC_ERR_LIBRARY_NOT_FOUND);
  assert_non_null(strstr(ftc_last_error(), "CUDA runtime"));
  assert_non_null(strstr(ftc_last_error(), "/nonexistent/libcudart.so.13"));
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_CUDA_RUNTIME_LIBRARY"));

  /* a library that is not NCCL */
  assert_int_equal(ftc__nccl_lib_open(cudart_double_path(), NULL, &lib),
                   FTC_ERR_LIBRARY_NOT_FOUND);
  assert_non_null(strstr(ftc_last_error(), "ncclGetVersion"));
}

/* The real NCCL from the nvidia-nccl-cu13 wheel loads on a host without a
 * GPU: its version and symbols give every capability. */
static void real_nccl_from_the_wheel_loads_and_reports_its_caps(void **state) {
  (void)state;
  char path[512], rt[512];
  snprintf(path, sizeof path, "%s/py/nvidia/nccl/lib/libnccl.so.2", DEPS_PREFIX);
  snprintf(rt, sizeof rt, "%s/py/nvidia/cu13/lib/libcudart.so.13", DEPS_PREFIX);
  if (access(path, R_OK) != 0 || access(rt, R_OK) != 0) skip();
  ftc__nccl_lib_t *lib = NULL;
  ftc_status_t st = ftc__nccl_lib_open(path, rt, &lib);
  if (st != FTC_OK) fail_msg("%s: %s", ftc_strerror(st), ftc_last_error());
  const ftc__nccl_info_t *in = ftc__nccl_lib_info(lib);
  assert_true(in->version >= 22902);
  assert_int_equal(in->caps, NB | SP | SH | RV | GR);
  assert_int_equal(in->path, FTC__NCCL_PATH_SHRINK_GROW);
  assert_int_equal(in->devices, 0); /* no GPU here */
  ftc__nccl_lib_close(lib);
}

static void nccl_results_map_to_clear_statuses(void **state) {
  (void)state;
  assert_int_equal(ftc__nccl_status(0, "x", NULL), FTC_OK);
  assert_int_equal(ftc__nccl_status(7, "x", NULL), FTC_ERR_IN_PROGRESS);
  assert_int_equal(ftc__nccl_status(6, "allreduce", "peer 2 gone"), FTC_ERR_PEER_LOST);
  assert_non_null(strstr(ftc_last_error(), "allreduce"));
  assert_non_null(strstr(ftc_last_error(), "peer 2 gone"));
  assert_int_equal(ftc__nccl_status(8, "x", NULL), FTC_ERR_TIMEOUT);
  assert_int_equal(ftc__nccl_status(4, "x", NULL), FTC_ERR_INVALID_ARGUMENT);
  assert_int_equal(ftc__nccl_status(5, "x", NULL), FTC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(ftc_last_error(), "invalid usage"));
  assert_int_equal(ftc__nccl_status(1, "x", NULL), FTC_ERR_BACKEND);
  assert_non_null(strstr(ftc_last_error(), "CUDA"));
  assert_int_equal(ftc__nccl_status(2, "x", NULL), FTC_ERR_BACKEND);
  assert_int_equal(ftc__nccl_status(3, "x", NULL), FTC_ERR_BACKEND);
  assert_int_equal(ftc__nccl_status(42, "x", NULL), FTC_ERR_BACKEND);
  assert_non_null(strstr(ftc_last_error(), "42"));
}

static void blobs_round_trip_and_refuse_the_wrong_kind(void **state) {
  (void)state;
  uint8_t uid[FTC__NCCL_UID_BYTES], back[FTC__NCCL_UID_BYTES];
  for (int i = 0; i < FTC__NCCL_UID_BYTES; i++) uid[i] = (uint8_t)(i * 37 + 11);
  char blob[FTC__NCCL_BLOB_MAX];
  assert_true(ftc__nccl_blob_encode("grow", uid, blob, sizeof blob) > 0);
  assert_memory_equal(blob, "nccl-grow:", 10);
  assert_int_equal(ftc__nccl_blob_decode(blob, "grow", back), FTC_OK);
  assert_memory_equal(uid, back, sizeof uid);
  assert_int_equal(ftc__nccl_blob_decode(blob, "init", back), FTC_ERR_PROTOCOL);
  assert_non_null(strstr(ftc_last_error(), "same NCCL version"));
  assert_int_equal(ftc__nccl_blob_decode(NULL, "init", back), FTC_ERR_PROTOCOL);
  assert_int_equal(ftc__nccl_blob_decode("nccl-init:AAAA", "init", back), FTC_ERR_PROTOCOL);
  blob[20] = '!';
  assert_int_equal(ftc__nccl_blob_decode(blob, "grow", back), FTC_ERR_PROTOCOL);
  char small[40];
  assert_int_equal(ftc__nccl_blob_encode("init", uid, small, sizeof small), -1);
}

/* Slots 0..3, ids 11..14, all from epoch 1. */
static const int s4[] = {0, 1, 2, 3};
static const uint64_t id4[] = {11, 12, 13, 14};
static const uint64_t join1[] = {1, 1, 1, 1};

static void plan_first_epoch_is_an_init_published_by_rank_0(void **state) {
  (void)state;
  ftc__view_t *v = make_view(1, 4, s4, id4, join1, 2);
  ftc__nccl_plan_t p;
  ftc__nccl_plan(FTC__NCCL_PATH_SHRINK_GROW, NULL, v, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_INIT);
  assert_int_equal(p.publisher, 0);
  assert_string_equal(p.blob_kind, "init");
  free_view(v);
}

static void plan_loss_shrinks_or_reinits_by_path(void **state) {
  (void)state;
  ftc__view_t *old = make_view(1, 4, s4, id4, join1, 0);
  int s2[] = {0, 2};
  uint64_t i2[] = {11, 13}, jj[] = {1, 1};
  ftc__view_t *next = make_view(2, 2, s2, i2, jj, 1);
  ftc__nccl_plan_t p;
  ftc__nccl_plan(FTC__NCCL_PATH_SHRINK, old, next, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_SHRINK);
  assert_int_equal(p.n_excluded, 2);
  assert_int_equal(p.excluded[0], 1);
  assert_int_equal(p.excluded[1], 3);
  assert_null(p.blob_kind);
  ftc__nccl_plan(FTC__NCCL_PATH_SHRINK_GROW, old, next, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_SHRINK);
  ftc__nccl_plan(FTC__NCCL_PATH_REINIT, old, next, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_INIT);
  assert_int_equal(p.publisher, 0);
  /* nothing changed: nothing to do */
  ftc__view_t *same = make_view(3, 4, s4, id4, join1, 0);
  ftc__nccl_plan(FTC__NCCL_PATH_REINIT, old, same, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_NONE);
  free_view(same);
  free_view(old);
  free_view(next);
}

static void plan_joiners_grow_with_reorder_or_reinit(void **state) {
  (void)state;
  int s3[] = {0, 2, 3};
  uint64_t i3[] = {11, 13, 14}, jj3[] = {1, 1, 1};
  ftc__view_t *old = make_view(2, 3, s3, i3, jj3, 1);
  /* slot 1 comes back as member 15 at epoch 3: rank 1 in the view */
  uint64_t i4[] = {11, 15, 13, 14}, jn[] = {1, 3, 1, 1};
  ftc__view_t *next = make_view(3, 4, s4, i4, jn, 2);
  ftc__nccl_plan_t p;
  ftc__nccl_plan(FTC__NCCL_PATH_SHRINK_GROW, old, next, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_GROW);
  assert_int_equal(p.survivors, 3);
  assert_int_equal(p.joiners, 1);
  assert_int_equal(p.publisher, 0);
  assert_string_equal(p.blob_kind, "grow");
  assert_int_equal(p.reorder, 1);
  /* the joiner plans the same grow without an old view */
  next->my_rank = 1;
  ftc__nccl_plan(FTC__NCCL_PATH_SHRINK_GROW, NULL, next, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_JOIN);
  assert_int_equal(p.publisher, 0);
  assert_int_equal(p.reorder, 1);
  /* without grow everyone re-inits, joiner included */
  ftc__nccl_plan(FTC__NCCL_PATH_SHRINK, NULL, next, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_INIT);
  next->my_rank = 2;
  ftc__nccl_plan(FTC__NCCL_PATH_SHRINK, old, next, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_INIT);
  /* a joiner at the end keeps NCCL's order: no reorder */
  int s4b[] = {0, 2, 3, 4};
  uint64_t i4b[] = {11, 13, 14, 16}, jt[] = {1, 1, 1, 3};
  ftc__view_t *tail = make_view(3, 4, s4b, i4b, jt, 0);
  ftc__nccl_plan(FTC__NCCL_PATH_SHRINK_GROW, old, tail, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_GROW);
  assert_int_equal(p.reorder, 0);
  free_view(tail);
  free_view(old);
  free_view(next);
}

static void plan_loss_and_join_in_one_epoch_is_shrink_then_grow(void **state) {
  (void)state;
  ftc__view_t *old = make_view(1, 4, s4, id4, join1, 0);
  /* slot 1 lost, slot 1 replaced by member 15 in the same epoch */
  uint64_t i4[] = {11, 15, 13, 14}, jn[] = {1, 2, 1, 1};
  ftc__view_t *next = make_view(2, 4, s4, i4, jn, 0);
  ftc__nccl_plan_t p;
  ftc__nccl_plan(FTC__NCCL_PATH_SHRINK_GROW, old, next, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_SHRINK_GROW);
  assert_int_equal(p.n_excluded, 1);
  assert_int_equal(p.excluded[0], 1);
  assert_int_equal(p.reorder, 1);
  free_view(old);
  free_view(next);
}

/* A survivor whose communicator holds a member the view still calls fresh
 * (it finished a step boundary after the coordinator decided) inits; on
 * the grow path the fresh members only follow the blob, so the first
 * survivor publishes it, not a fresh view rank 0. */
static void plan_init_on_the_grow_path_is_published_by_the_first_survivor(void **state) {
  (void)state;
  int s2[] = {1, 2};
  uint64_t i2[] = {12, 13}, j2[] = {1, 2};
  ftc__view_t *old = make_view(2, 2, s2, i2, j2, 0);
  /* slot 0 comes back as member 15 (fresh, view rank 0); member 13 is in
   * old's communicator but still fresh */
  int s3[] = {0, 1, 2};
  uint64_t i3[] = {15, 12, 13}, j3[] = {3, 1, 2};
  ftc__view_t *next = make_view(3, 3, s3, i3, j3, 1);
  next->members[0].state = FTC__STATE_FRESH;
  next->members[1].state = FTC__STATE_HELD;
  next->members[2].state = FTC__STATE_FRESH;
  ftc__nccl_plan_t p;
  ftc__nccl_plan(FTC__NCCL_PATH_SHRINK_GROW, old, next, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_INIT);
  assert_string_equal(p.blob_kind, "init");
  assert_int_equal(p.publisher, 1);
  /* elsewhere everyone inits, joiners too: view rank 0 publishes */
  ftc__nccl_plan(FTC__NCCL_PATH_SHRINK, old, next, &p);
  assert_int_equal(p.step, FTC__NCCL_STEP_INIT);
  assert_int_equal(p.publisher, 0);
  free_view(old);
  free_view(next);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(caps_follow_the_version_table),
      cmocka_unit_test(path_is_the_best_the_caps_allow_or_the_wish),
      cmocka_unit_test(each_double_version_is_detected_with_its_caps_and_path),
      cmocka_unit_test(rccl_counts_revoke_shrink_grow_from_2_30_7),
      cmocka_unit_test(recovery_wish_from_the_environment_lowers_the_path),
      cmocka_unit_test(socket_settings_carry_over_to_nccl_unless_set),
      cmocka_unit_test(missing_library_names_what_was_looked_for),
      cmocka_unit_test(real_nccl_from_the_wheel_loads_and_reports_its_caps),
      cmocka_unit_test(nccl_results_map_to_clear_statuses),
      cmocka_unit_test(blobs_round_trip_and_refuse_the_wrong_kind),
      cmocka_unit_test(plan_first_epoch_is_an_init_published_by_rank_0),
      cmocka_unit_test(plan_loss_shrinks_or_reinits_by_path),
      cmocka_unit_test(plan_joiners_grow_with_reorder_or_reinit),
      cmocka_unit_test(plan_loss_and_join_in_one_epoch_is_shrink_then_grow),
      cmocka_unit_test(plan_init_on_the_grow_path_is_published_by_the_first_survivor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
