/*
 * test_nccl_coord.c - the NCCL backend with the real membership protocol:
 * a coordinator process, ranks that take their epochs from it and whose
 * unique ids travel through it (the `backend` message), a rank killed, the
 * survivors reporting it and moving to the next epoch (shrink, or abort +
 * re-init on an old NCCL), then a replacement admitted as a joiner and
 * grown in (or re-initialised). Against the NCCL test double.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ftc_coord.h"
#include "ftc_error.h"
#include "membership/member.h"
#include "nccl/nccl_member.h"
#include "nccl_test_util.h"

#define TMO 15000
#define TOKEN "nccl-coord-token"

typedef struct ctx {
  const char *ver;
  char dir[256], log[300];
} ctx_t;

#define CHECK(cond, code, ...)                                                \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "[pid %d] %s:%d: ", (int)getpid(), __FILE__, __LINE__);  \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, " (last error: %s)\n", ftc_last_error());               \
      _exit(code);                                                            \
    }                                                                         \
  } while (0)

static void touch(const ctx_t *x, const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", x->dir, name);
  FILE *f = fopen(p, "w");
  if (f) fclose(f);
}

static int exists(const ctx_t *x, const char *name) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", x->dir, name);
  return access(p, F_OK) == 0;
}

static int wait_file(const ctx_t *x, const char *name, int ms) {
  for (int64_t d = ftc__deadline_ns(ms); !exists(x, name);) {
    if (ftc__now_ns() > d) return -1;
    usleep(5000);
  }
  return 0;
}

static void coord_main(ctx_t *x) {
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .job = "ncclj", .token = TOKEN,
                          .world_size = 3, .min_size = 2, .heartbeat_ms = 100,
                          .heartbeat_timeout_ms = 5000};
  ftc__coord_t *co = NULL;
  CHECK(ftc__coord_create(&cfg, &co) == FTC_OK, 100, "coordinator");
  char p[512];
  snprintf(p, sizeof p, "%s/port.tmp", x->dir);
  FILE *f = fopen(p, "w");
  fprintf(f, "%d\n", ftc__coord_port(co));
  fclose(f);
  char q[512];
  snprintf(q, sizeof q, "%s/port", x->dir);
  rename(p, q);
  wait_file(x, "stop", 6 * TMO);
  ftc__coord_destroy(co);
  _exit(0);
}

static ftc__member_t *open_member(ctx_t *x, int slot, int joiner) {
  int port = 0;
  char p[512], addr[64], data[64];
  snprintf(p, sizeof p, "%s/port", x->dir);
  FILE *f = fopen(p, "r");
  CHECK(f && fscanf(f, "%d", &port) == 1, 101, "no coordinator port");
  fclose(f);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  snprintf(data, sizeof data, "127.0.0.1:%d", 42000 + slot);
  ftc__member_cfg_t c = {.coordinator = addr, .job = "ncclj", .token = TOKEN, .slot = slot,
                         .world_size = 3, .min_size = 2, .joiner = joiner, .data_addr = data,
                         .host = "localhost", .connect_timeout_ms = TMO};
  ftc__member_t *m = NULL;
  CHECK(ftc__member_open(&c, &m) == FTC_OK, 102, "slot %d: member_open", slot);
  return m;
}

static ftc__nccl_lib_t *open_lib(ctx_t *x) {
  setenv("NCCL_DOUBLE_DIR", x->dir, 1);
  setenv("NCCL_DOUBLE_LOG", x->log, 1);
  char path[512];
  double_path(x->ver, path, sizeof path);
  ftc__nccl_lib_t *lib = NULL;
  CHECK(ftc__nccl_lib_open(path, cudart_double_path(), &lib) == FTC_OK, 103, "open %s", path);
  return lib;
}

static ftc_status_t allreduce(ftc__nccl_comm_t *c, float mine, float want) {
  float buf[256];
  for (int i = 0; i < 256; i++) buf[i] = mine;
  ftc__op_t op = {FTC__COLL_ALLREDUCE, buf, buf, 256, FTC_F32, FTC_SUM, -1};
  ftc__nccl_work_t w;
  ftc_status_t st = ftc__nccl_comm_launch(c, &op, NULL, &w);
  if (st == FTC_OK) st = ftc__nccl_comm_wait(c, &w, ftc__deadline_ns(TMO));
  if (st != FTC_OK) return st;
  ftc__nccl_work_release(c, &w);
  for (int i = 0; i < 256; i++)
    if (buf[i] != want) return ftc__error(FTC_ERR_INTERNAL, "got %g, want %g", buf[i], want);
  return FTC_OK;
}

static int order_ok(ftc__nccl_comm_t *c) {
  int32_t mine = ftc__nccl_comm_rank(c), all[8] = {0};
  ftc__op_t op = {FTC__COLL_ALLGATHER, &mine, all, 1, FTC_I32, FTC_SUM, -1};
  ftc__nccl_work_t w;
  if (ftc__nccl_comm_launch(c, &op, NULL, &w) != FTC_OK ||
      ftc__nccl_comm_wait(c, &w, ftc__deadline_ns(TMO)) != FTC_OK)
    return 0;
  for (int i = 0; i < ftc__nccl_comm_size(c); i++)
    if (all[i] != i) return 0;
  return 1;
}

static void note_step(ctx_t *x, const char *who, ftc__nccl_comm_t *c) {
  ftc__nccl_step_t s;
  ftc__nccl_comm_last_step(c, &s, NULL);
  char p[512];
  snprintf(p, sizeof p, "%s/steps-%s", x->dir, who);
  FILE *f = fopen(p, "a");
  if (f) {
    fprintf(f, "%s ", ftc__nccl_step_name(s));
    fclose(f);
  }
}

static void rank_main(ctx_t *x, int slot) {
  ftc__nccl_lib_t *lib = open_lib(x);
  ftc__member_t *m = open_member(x, slot, 0);
  ftc__nccl_xchg_t xc = ftc__nccl_xchg_member(m);
  ftc__nccl_opts_t o = {0, TMO, NULL};
  char who[16];
  snprintf(who, sizeof who, "slot%d", slot);
  ftc__view_t *v = NULL;
  CHECK(ftc__member_wait_view(m, 0, TMO, &v) == FTC_OK && v->epoch == 1, 10, "epoch 1");
  ftc__nccl_comm_t *c = NULL;
  ftc_status_t st = ftc__nccl_enter_epoch(lib, &c, v, &xc, &o);
  CHECK(st == FTC_OK, 11, "enter epoch 1: %s", ftc_strerror(st));
  note_step(x, who, c);
  st = allreduce(c, (float)(slot + 1), 6.0f);
  CHECK(st == FTC_OK, 12, "epoch 1 allreduce: %s", ftc_strerror(st));
  if (slot == 2) raise(SIGKILL);

  st = allreduce(c, 1.0f, 0.0f);
  CHECK(st == FTC_ERR_PEER_LOST, 13, "with a dead peer: %s", ftc_strerror(st));
  ftc__nccl_comm_revoke(c, st);
  int dead = 2;
  CHECK(ftc__member_report_failure(m, 1, &dead, 1, st) == FTC_OK, 14, "report");
  ftc__view_free(v);
  CHECK(ftc__member_wait_view(m, 1, TMO, &v) == FTC_OK && v->size == 2, 15, "epoch 2");
  st = ftc__nccl_enter_epoch(lib, &c, v, &xc, &o);
  CHECK(st == FTC_OK, 16, "enter epoch %llu: %s", (unsigned long long)v->epoch, ftc_strerror(st));
  note_step(x, who, c);
  st = allreduce(c, (float)(slot + 1), 3.0f);
  CHECK(st == FTC_OK, 17, "epoch 2 allreduce: %s", ftc_strerror(st));
  snprintf(who, sizeof who, "e2-%d", slot);
  touch(x, who);
  snprintf(who, sizeof who, "slot%d", slot);

  uint64_t e2 = v->epoch;
  ftc__view_free(v);
  CHECK(ftc__member_wait_view(m, e2, TMO, &v) == FTC_OK && v->size == 3, 18, "epoch 3");
  st = ftc__nccl_enter_epoch(lib, &c, v, &xc, &o);
  CHECK(st == FTC_OK, 19, "enter epoch 3: %s", ftc_strerror(st));
  note_step(x, who, c);
  st = allreduce(c, (float)(slot + 1), 6.0f);
  CHECK(st == FTC_OK, 20, "epoch 3 allreduce: %s", ftc_strerror(st));
  CHECK(order_ok(c), 21, "rank order");
  ftc__nccl_comm_free(c);
  ftc__view_free(v);
  ftc__member_close(m);
  _exit(0);
}

static void joiner_main(ctx_t *x) {
  ftc__nccl_lib_t *lib = open_lib(x);
  ftc__member_t *m = open_member(x, 2, 1);
  ftc__nccl_xchg_t xc = ftc__nccl_xchg_member(m);
  ftc__nccl_opts_t o = {0, TMO, NULL};
  ftc__view_t *v = NULL;
  CHECK(ftc__member_wait_view(m, 0, TMO, &v) == FTC_OK && v->size == 3, 30, "joiner's epoch");
  CHECK(v->members[v->my_rank].joined_epoch == v->epoch, 31, "admitted as a joiner");
  ftc__nccl_comm_t *c = NULL;
  ftc_status_t st = ftc__nccl_enter_epoch(lib, &c, v, &xc, &o);
  CHECK(st == FTC_OK, 32, "joiner enter: %s", ftc_strerror(st));
  note_step(x, "joiner", c);
  st = allreduce(c, 3.0f, 6.0f);
  CHECK(st == FTC_OK, 33, "joiner allreduce: %s", ftc_strerror(st));
  CHECK(order_ok(c), 34, "joiner rank order");
  ftc__nccl_comm_free(c);
  ftc__view_free(v);
  ftc__member_close(m);
  _exit(0);
}

static void read_file(const ctx_t *x, const char *name, char *buf, size_t len) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", x->dir, name);
  buf[0] = '\0';
  FILE *f = fopen(p, "r");
  if (!f) return;
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = '\0';
  fclose(f);
}

static void through_the_coordinator(const char *ver) {
  ctx_t x = {.ver = ver};
  make_tmpdir(x.dir, sizeof x.dir, "coord");
  snprintf(x.log, sizeof x.log, "%s/log", x.dir);
  pid_t co = fork();
  if (co == 0) coord_main(&x);
  assert_int_equal(wait_file(&x, "port", TMO), 0);
  pid_t r[3];
  for (int s = 0; s < 3; s++)
    if ((r[s] = fork()) == 0) rank_main(&x, s);
  /* the replacement comes once the survivors are in epoch 2 */
  int ready = wait_file(&x, "e2-0", 2 * TMO) == 0 && wait_file(&x, "e2-1", 2 * TMO) == 0;
  pid_t j = fork();
  if (j == 0) {
    if (!ready) _exit(99);
    joiner_main(&x);
  }
  int rc[4];
  for (int s = 0; s < 3; s++) rc[s] = wait_child(r[s], 4 * TMO);
  rc[3] = wait_child(j, 4 * TMO);
  touch(&x, "stop");
  int rco = wait_child(co, TMO);
  char s0[64], s1[64], sj[64];
  read_file(&x, "steps-slot0", s0, sizeof s0);
  read_file(&x, "steps-slot1", s1, sizeof s1);
  read_file(&x, "steps-joiner", sj, sizeof sj);
  print_message("NCCL double %s via the coordinator: slot0 [%s] slot1 [%s] joiner [%s]; "
                "exits %d %d %d %d, coordinator %d\n", ver, s0, s1, sj, rc[0], rc[1], rc[2],
                rc[3], rco);
  assert_int_equal(rc[0], 0);
  assert_int_equal(rc[1], 0);
  assert_int_equal(rc[2], 128 + SIGKILL);
  assert_int_equal(rc[3], 0);
  assert_int_equal(rco, 0);
  int a = 0, b = 0, c = 0;
  sscanf(ver, "%d.%d.%d", &a, &b, &c);
  int v = a * 10000 + b * 100 + c >= 22902; /* grow: the fast path both ways */
  assert_string_equal(s0, v ? "init shrink grow " : "init init init ");
  assert_string_equal(s1, v ? "init shrink grow " : "init init init ");
  assert_string_equal(sj, v ? "join " : "init ");
  assert_int_equal(count_lines(x.log, " destroy ", "failed=1"), 0);
  rm_tmpdir(x.dir);
}

static void kill_shrink_grow_through_the_coordinator_2_32(void **s) {
  (void)s;
  through_the_coordinator("2.32.3");
}
static void kill_reinit_through_the_coordinator_2_26(void **s) {
  (void)s;
  through_the_coordinator("2.26.5");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(kill_shrink_grow_through_the_coordinator_2_32),
      cmocka_unit_test(kill_reinit_through_the_coordinator_2_26),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
