/*
 * test_nccl_flows.c - the NCCL backend end to end against the versioned
 * NCCL test double, each rank a forked process: collectives on a stream,
 * a killed rank (peer lost, then shrink or abort + re-init by version), a
 * replacement taken in (grow or re-init), a hang inside the library that
 * becomes a timeout, in-progress answers, asynchronous failures, and abort
 * (never destroy) of every communicator that saw a failure; FTCOMM_CHECK_ARGS
 * turning ranks' different arguments into FTC_ERR_MISMATCH.
 *
 * Unique ids travel through files (the coordinator's role in production).
 * The double appends its lifecycle calls to DIR/log, which the parent reads.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ftc_error.h"
#include "ftc_recorder.h"
#include "nccl_test_util.h"

#define TMO 15000 /* ms: generous bound for one step on a busy 2-core host */

typedef struct flow {
  const char *kind; /* "nccl" or "rccl": which double */
  const char *ver;
  char dir[256];
  char log[300];
  ftc__nccl_lib_t *lib; /* in the child */
  ftc__nccl_xchg_t x;
} flow_t;

static int vcode(const char *ver) {
  int a = 0, b = 0, c = 0;
  sscanf(ver, "%d.%d.%d", &a, &b, &c);
  return a * 10000 + b * 100 + c;
}

#define CHILD_CHECK(cond, code, ...)                                         \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "[pid %d] %s:%d: ", (int)getpid(), __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, " (last error: %s)\n", ftc_last_error());              \
      _exit(code);                                                           \
    }                                                                        \
  } while (0)

static void child_setup(flow_t *f) {
  setenv("NCCL_DOUBLE_DIR", f->dir, 1);
  setenv("NCCL_DOUBLE_LOG", f->log, 1);
  char path[512];
  snprintf(path, sizeof path, "%s/lib%s_double_%s.so", NCCL_DOUBLE_DIR, f->kind, f->ver);
  ftc_status_t st = ftc__nccl_lib_open(path, cudart_double_path(), &f->lib);
  CHILD_CHECK(st == FTC_OK, 90, "open %s", path);
  f->x.publish = file_publish;
  f->x.fetch = file_fetch;
  f->x.arg = f->dir;
}

static ftc__nccl_opts_t opts(int timeout_ms) {
  ftc__nccl_opts_t o = {0, timeout_ms, NULL};
  return o;
}

/* Run op and wait for it. */
static ftc_status_t run(ftc__nccl_comm_t *c, ftc__op_t op, int timeout_ms, ftc__nccl_work_t *wout) {
  ftc__nccl_work_t w;
  ftc_status_t st = ftc__nccl_comm_launch(c, &op, NULL, &w);
  if (st != FTC_OK) return st;
  st = ftc__nccl_comm_wait(c, &w, ftc__deadline_ns(timeout_ms));
  if (wout) *wout = w;
  else if (st == FTC_OK) ftc__nccl_work_release(c, &w);
  return st;
}

/* Epoch 1 of a one-rank job (slot 0, member 1): the view of the flows that
 * need no peer. */
static ftc__view_t *solo_view(void) {
  static const int slot[] = {0};
  static const uint64_t id[] = {1}, joined[] = {1};
  return make_view(1, 1, slot, id, joined, 0);
}

/* allreduce(sum) of `mine` over count floats; every element must be want. */
static ftc_status_t allreduce_check(ftc__nccl_comm_t *c, float mine, float want, int *bad) {
  enum { N = 4096 };
  float *buf = malloc(N * sizeof *buf);
  for (int i = 0; i < N; i++) buf[i] = mine;
  ftc__op_t op = {FTC__COLL_ALLREDUCE, buf, buf, N, FTC_F32, FTC_SUM, -1};
  ftc_status_t st = run(c, op, TMO, NULL);
  *bad = 0;
  if (st == FTC_OK)
    for (int i = 0; i < N; i++)
      if (buf[i] != want) {
        *bad = 1;
        fprintf(stderr, "allreduce: element %d is %g, want %g\n", i, buf[i], want);
        break;
      }
  free(buf);
  return st;
}

/* allgather of each rank's view rank: must read 0, 1, ..., size-1. */
static int order_ok(ftc__nccl_comm_t *c) {
  int n = ftc__nccl_comm_size(c);
  int32_t mine = ftc__nccl_comm_rank(c), *all = calloc((size_t)n, sizeof *all);
  ftc__op_t op = {FTC__COLL_ALLGATHER, &mine, all, 1, FTC_I32, FTC_SUM, -1};
  ftc_status_t st = run(c, op, TMO, NULL);
  int ok = st == FTC_OK;
  for (int i = 0; ok && i < n; i++) ok = all[i] == i;
  free(all);
  return ok;
}

static void record_step(flow_t *f, const char *who, ftc__nccl_comm_t *c) {
  ftc__nccl_step_t s;
  int64_t ns;
  ftc__nccl_comm_last_step(c, &s, &ns);
  char path[512];
  snprintf(path, sizeof path, "%s/steps-%s", f->dir, who);
  FILE *o = fopen(path, "a");
  if (o) {
    fprintf(o, "%s ", ftc__nccl_step_name(s));
    fclose(o);
  }
}

static void read_steps(flow_t *f, const char *who, char *buf, size_t len) {
  char path[512];
  snprintf(path, sizeof path, "%s/steps-%s", f->dir, who);
  buf[0] = '\0';
  FILE *i = fopen(path, "r");
  if (!i) return;
  size_t n = fread(buf, 1, len - 1, i);
  buf[n] = '\0';
  fclose(i);
}

/* --- kill, shrink, grow ----------------------------------------------------- */

static const int slots3[] = {0, 1, 2};
static const uint64_t ids3[] = {101, 102, 103};
static const uint64_t joined3[] = {1, 1, 1};

static const char *g_survivor_recovery; /* FTCOMM_NCCL_RECOVERY for the survivors, NULL: auto */

static void survivor(flow_t *f, int slot) {
  if (g_survivor_recovery) setenv("FTCOMM_NCCL_RECOVERY", g_survivor_recovery, 1);
  child_setup(f);
  char who[16];
  snprintf(who, sizeof who, "slot%d", slot);
  ftc__nccl_opts_t o = opts(TMO);
  ftc__nccl_comm_t *c = NULL;
  int bad;
  ftc__view_t *v1 = make_view(1, 3, slots3, ids3, joined3, slot);
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v1, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 10, "epoch 1: %s", ftc_strerror(st));
  record_step(f, who, c);
  st = allreduce_check(c, (float)(slot + 1), 6.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 11, "epoch 1 allreduce: %s", ftc_strerror(st));
  if (slot == 1) raise(SIGKILL); /* the failure: a rank dies between steps */

  int64_t t0 = ftc__now_ns();
  st = allreduce_check(c, 1.0f, 0.0f, &bad);
  CHILD_CHECK(st == FTC_ERR_PEER_LOST, 12, "allreduce with a dead peer gave %s, want peer lost",
              ftc_strerror(st));
  CHILD_CHECK(ftc__now_ns() - t0 < (int64_t)TMO * 1000000, 13, "peer loss took too long");
  CHILD_CHECK(ftc__nccl_comm_error(c) == FTC_ERR_PEER_LOST, 14, "epoch not marked failed");
  ftc__op_t op = {FTC__COLL_BARRIER, NULL, NULL, 0, FTC_U8, FTC_SUM, -1};
  ftc__nccl_work_t w;
  CHILD_CHECK(ftc__nccl_comm_launch(c, &op, NULL, &w) == FTC_ERR_REVOKED, 15,
              "a collective on a failed epoch must say revoked");
  st = ftc__nccl_comm_revoke(c, FTC_ERR_PEER_LOST);
  CHILD_CHECK(st == FTC_OK, 16, "revoke: %s", ftc_strerror(st));

  int s2[] = {0, 2};
  uint64_t i2[] = {101, 103}, j2[] = {1, 1};
  ftc__view_t *v2 = make_view(2, 2, s2, i2, j2, slot == 0 ? 0 : 1);
  st = ftc__nccl_enter_epoch(f->lib, &c, v2, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 17, "epoch 2: %s", ftc_strerror(st));
  record_step(f, who, c);
  CHILD_CHECK(ftc__nccl_comm_size(c) == 2 && ftc__nccl_comm_epoch(c) == 2, 18, "epoch 2 size");
  st = allreduce_check(c, (float)(slot + 1), 4.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 19, "epoch 2 allreduce: %s", ftc_strerror(st));

  uint64_t i3[] = {101, 104, 103}, j3[] = {1, 3, 1};
  ftc__view_t *v3 = make_view(3, 3, slots3, i3, j3, slot == 0 ? 0 : 2);
  st = ftc__nccl_enter_epoch(f->lib, &c, v3, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 20, "epoch 3: %s", ftc_strerror(st));
  record_step(f, who, c);
  st = allreduce_check(c, (float)(slot + 1), 6.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 21, "epoch 3 allreduce: %s", ftc_strerror(st));
  CHILD_CHECK(order_ok(c), 22, "epoch 3 rank order differs from the view");
  ftc__nccl_comm_free(c);
  free_view(v1), free_view(v2), free_view(v3);
  _exit(0);
}

static void joiner(flow_t *f) {
  child_setup(f);
  ftc__nccl_opts_t o = opts(TMO);
  ftc__nccl_comm_t *c = NULL;
  int bad;
  uint64_t i3[] = {101, 104, 103}, j3[] = {1, 3, 1};
  ftc__view_t *v3 = make_view(3, 3, slots3, i3, j3, 1);
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v3, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 30, "joiner epoch 3: %s", ftc_strerror(st));
  record_step(f, "joiner", c);
  st = allreduce_check(c, 2.0f, 6.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 31, "joiner allreduce: %s", ftc_strerror(st));
  CHILD_CHECK(order_ok(c), 32, "joiner: rank order differs from the view");
  ftc__nccl_comm_free(c);
  free_view(v3);
  _exit(0);
}

static void flow_init(flow_t *f, const char *ver, const char *tag) {
  memset(f, 0, sizeof *f);
  f->kind = "nccl";
  f->ver = ver;
  make_tmpdir(f->dir, sizeof f->dir, tag);
  snprintf(f->log, sizeof f->log, "%s/log", f->dir);
}

static void kill_shrink_grow_of(const char *kind, const char *ver) {
  flow_t f;
  flow_init(&f, ver, "ksg");
  f.kind = kind;
  int v = vcode(ver);
  pid_t pid[4];
  for (int s = 0; s < 3; s++)
    if ((pid[s] = fork()) == 0) survivor(&f, s);
  if ((pid[3] = fork()) == 0) joiner(&f);
  int rc[4];
  for (int i = 0; i < 4; i++) rc[i] = wait_child(pid[i], 4 * TMO);
  char st0[128], st2[128], stj[128];
  read_steps(&f, "slot0", st0, sizeof st0);
  read_steps(&f, "slot2", st2, sizeof st2);
  read_steps(&f, "joiner", stj, sizeof stj);
  print_message("%s double %s: slot0 [%s] slot2 [%s] joiner [%s]; exits %d %d %d %d\n", kind, ver,
                st0, st2, stj, rc[0], rc[1], rc[2], rc[3]);
  assert_int_equal(rc[0], 0);
  assert_int_equal(rc[1], 128 + SIGKILL);
  assert_int_equal(rc[2], 0);
  assert_int_equal(rc[3], 0);
  /* the path chosen by version */
  const char *want = v >= 22902 ? "init shrink grow " : v >= 22700 ? "init shrink init "
                                                                    : "init init init ";
  assert_string_equal(st0, want);
  assert_string_equal(st2, want);
  assert_string_equal(stj, v >= 22902 ? "join " : "init ");
  /* abort, never destroy, a communicator that saw the failure */
  assert_int_equal(count_lines(f.log, " destroy ", "failed=1"), 0);
  assert_true(count_lines(f.log, " abort ", "failed=1") >= 1);
  assert_int_equal(count_lines(f.log, " revoke ", NULL), v >= 22807 ? 2 : 0);
  if (v >= 22700) {
    /* revoke first where there is one, else shrink with NCCL_SHRINK_ABORT */
    assert_int_equal(count_lines(f.log, " shrink ", v >= 22807 ? "flags=0" : "flags=1"), 2);
  } else {
    assert_int_equal(count_lines(f.log, " shrink ", NULL), 0);
  }
  assert_int_equal(count_lines(f.log, " grow ", NULL), v >= 22902 ? 3 : 0);
  assert_int_equal(count_lines(f.log, " commgetuniqueid ", NULL), v >= 22902 ? 1 : 0);
  /* the joiner sat at view rank 1, NCCL put it last: one split to reorder */
  assert_int_equal(count_lines(f.log, " split ", NULL), v >= 22902 ? 3 : 0);
  assert_int_equal(count_lines(f.log, " init ", NULL), v >= 22902 ? 3 : v >= 22700 ? 6 : 8);
  rm_tmpdir(f.dir);
}

static void kill_shrink_grow(const char *ver) { kill_shrink_grow_of("nccl", ver); }
static void kill_shrink_grow_2_26(void **s) { (void)s; kill_shrink_grow("2.26.5"); }
static void kill_shrink_grow_2_27(void **s) { (void)s; kill_shrink_grow("2.27.3"); }
static void kill_shrink_grow_2_28(void **s) { (void)s; kill_shrink_grow("2.28.9"); }
static void kill_shrink_grow_2_29(void **s) { (void)s; kill_shrink_grow("2.29.2"); }
static void kill_shrink_grow_2_32(void **s) { (void)s; kill_shrink_grow("2.32.3"); }
/* A joiner whose library could grow follows the survivors' re-init: the
 * blob's kind decides, not its own plan. */
static void joiner_follows_the_survivors_reinit(void **st) {
  (void)st;
  flow_t f;
  flow_init(&f, "2.32.3", "follow");
  g_survivor_recovery = "reinit";
  pid_t pid[4];
  for (int s = 0; s < 3; s++)
    if ((pid[s] = fork()) == 0) survivor(&f, s);
  if ((pid[3] = fork()) == 0) joiner(&f);
  g_survivor_recovery = NULL;
  int rc[4];
  for (int i = 0; i < 4; i++) rc[i] = wait_child(pid[i], 4 * TMO);
  char st0[128], stj[128];
  read_steps(&f, "slot0", st0, sizeof st0);
  read_steps(&f, "joiner", stj, sizeof stj);
  assert_int_equal(rc[0], 0);
  assert_int_equal(rc[2], 0);
  assert_int_equal(rc[3], 0);
  assert_string_equal(st0, "init init init ");
  assert_string_equal(stj, "init ");
  assert_int_equal(count_lines(f.log, " grow ", NULL), 0);
  rm_tmpdir(f.dir);
}

/* RCCL 2.30.7 through the HIP runtime's names: the fast path too. */
static void kill_shrink_grow_rccl_2_30(void **s) { (void)s; kill_shrink_grow_of("rccl", "2.30.7"); }

/* --- the exclusion list -------------------------------------------------------- */

/* 4 ranks; 1 and 3 leave; 0 and 2 shrink them away naming them out of order
 * ({3, 1}). NCCL sorts the list in place: the double does too and logs the
 * order it was given and the order it left, so the test sees that the
 * library got an unsorted list and sorted it, and that ftcomm's own list is
 * untouched; the new communicator has the right ranks and reduces right. */
static void unsorted_shrink_child(flow_t *f, int rank) {
  child_setup(f);
  ftc__nccl_opts_t o = opts(TMO);
  ftc__nccl_comm_t *c = NULL;
  int s4[] = {0, 1, 2, 3};
  uint64_t i4[] = {1, 2, 3, 4}, j4[] = {1, 1, 1, 1};
  ftc__view_t *v = make_view(1, 4, s4, i4, j4, rank);
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 120, "init: %s", ftc_strerror(st));
  int bad;
  st = allreduce_check(c, (float)(rank + 1), 10.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 121, "epoch 1 allreduce: %s", ftc_strerror(st));
  if (rank == 1 || rank == 3) _exit(0); /* gone, without a word */
  const int excl[2] = {3, 1};
  int mine[2] = {3, 1};
  st = ftc__nccl_comm_shrink(c, mine, 2, ftc__deadline_ns(TMO));
  CHILD_CHECK(st == FTC_OK, 122, "shrink: %s", ftc_strerror(st));
  CHILD_CHECK(mine[0] == excl[0] && mine[1] == excl[1], 123,
              "ftcomm's exclusion list was changed to {%d, %d}", mine[0], mine[1]);
  int nr = -1, ns = -1;
  st = ftc__nccl_comm_nccl_rank(c, &nr, &ns);
  CHILD_CHECK(st == FTC_OK && ns == 2 && nr == rank / 2, 124, "rank %d of %d after the shrink",
              nr, ns);
  st = allreduce_check(c, (float)(rank + 1), 4.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 125, "allreduce after the shrink: %s", ftc_strerror(st));
  /* what NCCL refuses, ftcomm refuses first: an empty list */
  CHILD_CHECK(ftc__nccl_comm_shrink(c, mine, 0, ftc__deadline_ns(TMO)) ==
                  FTC_ERR_INVALID_ARGUMENT, 126, "an empty exclusion list");
  ftc__nccl_comm_free(c);
  free_view(v);
  _exit(0);
}

static void shrink_takes_an_unsorted_exclusion_list(const char *ver) {
  flow_t f;
  flow_init(&f, ver, "unsorted");
  pid_t p[4];
  for (int r = 0; r < 4; r++)
    if ((p[r] = fork()) == 0) unsorted_shrink_child(&f, r);
  for (int r = 0; r < 4; r++) assert_int_equal(wait_child(p[r], 2 * TMO), 0);
  assert_int_equal(count_lines(f.log, " shrink ", "excl_given=3,1 excl_sorted=1,3"), 2);
  rm_tmpdir(f.dir);
}
static void shrink_takes_an_unsorted_exclusion_list_2_27(void **s) {
  (void)s;
  shrink_takes_an_unsorted_exclusion_list("2.27.3");
}
static void shrink_takes_an_unsorted_exclusion_list_2_32(void **s) {
  (void)s;
  shrink_takes_an_unsorted_exclusion_list("2.32.3");
}

/* --- a hang inside the library ----------------------------------------------- */

static void hang_rank(flow_t *f, int rank, int hang) {
  if (hang) setenv("NCCL_DOUBLE_HANG_AT", "2", 1);
  child_setup(f);
  ftc__nccl_opts_t o = opts(TMO);
  ftc__nccl_comm_t *c = NULL;
  int s2[] = {0, 1};
  uint64_t i2[] = {1, 2}, j2[] = {1, 1};
  ftc__view_t *v = make_view(1, 2, s2, i2, j2, rank);
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 40, "init: %s", ftc_strerror(st));
  int bad;
  st = allreduce_check(c, 1.0f, 2.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 41, "first allreduce: %s", ftc_strerror(st));

  float x[16] = {0};
  ftc__op_t op = {FTC__COLL_ALLREDUCE, x, x, 16, FTC_F32, FTC_SUM, -1};
  ftc__nccl_work_t w;
  ftc_rec_t *rec = NULL;
  CHILD_CHECK(ftc_rec_create(16, 9, "world", 1, rank, 2, &rec) == FTC_OK, 54, "recorder");
  uint64_t id = ftc_rec_schedule(rec, 1, 2, FTC_REC_ALLREDUCE, FTC_F32, 16, 64, -1, 300000000);
  int64_t t0 = ftc__now_ns();
  st = ftc__nccl_comm_launch_rec(c, &op, NULL, rec, id, &w);
  if (st == FTC_OK) st = ftc__nccl_comm_wait(c, &w, ftc__deadline_ns(300));
  int64_t waited = ftc__now_ns() - t0;
  ftc_rec_entry_t e;
  CHILD_CHECK(ftc_rec_snapshot(rec, &e, 1) == 1 && e.state == FTC_REC_FAILED &&
                  e.t_started == w.started_ns && e.t_completed >= t0 + 290000000LL,
              55, "recorder: a hung collective is started, then failed at the timeout");
  ftc_rec_destroy(rec);
  CHILD_CHECK(st == FTC_ERR_TIMEOUT, 42, "hung collective gave %s, want timeout", ftc_strerror(st));
  CHILD_CHECK(waited >= 290000000LL && waited < 3000000000LL, 43, "waited %lld ns", (long long)waited);
  CHILD_CHECK(w.started_ns != 0 && w.completed_ns == 0, 44, "the event before it ran, not the one after");
  CHILD_CHECK(ftc__nccl_comm_error(c) == FTC_ERR_TIMEOUT, 45, "epoch not failed by the timeout");
  /* Both ranks time out before either aborts: an abort closes sockets, and
   * the other rank would rightly see a lost peer instead. */
  char mine[300], other[300];
  snprintf(mine, sizeof mine, "%s/timed-out-%d", f->dir, rank);
  snprintf(other, sizeof other, "%s/timed-out-%d", f->dir, 1 - rank);
  fclose(fopen(mine, "w"));
  for (int64_t d = ftc__deadline_ns(TMO); access(other, F_OK) != 0 && ftc__now_ns() < d;)
    usleep(2000);
  t0 = ftc__now_ns();
  st = ftc__nccl_comm_revoke(c, FTC_ERR_TIMEOUT);
  CHILD_CHECK(st == FTC_OK, 46, "revoke: %s", ftc_strerror(st));
  st = ftc__nccl_comm_abort(c);
  CHILD_CHECK(st == FTC_OK, 47, "abort: %s", ftc_strerror(st));
  CHILD_CHECK(ftc__now_ns() - t0 < 3000000000LL, 48, "revoke+abort took too long");
  CHILD_CHECK(ftc__nccl_comm_launch(c, &op, NULL, &w) == FTC_ERR_ABORTED, 49, "launch after abort");
  ftc__nccl_comm_free(c); /* the hung work has ended: the stream joins */
  free_view(v);
  _exit(0);
}

static void hang_becomes_timeout(const char *ver) {
  flow_t f;
  flow_init(&f, ver, "hang");
  pid_t a = fork();
  if (a == 0) hang_rank(&f, 0, 0);
  pid_t b = fork();
  if (b == 0) hang_rank(&f, 1, 1);
  assert_int_equal(wait_child(a, 2 * TMO), 0);
  assert_int_equal(wait_child(b, 2 * TMO), 0);
  assert_int_equal(count_lines(f.log, " destroy ", NULL), 0);
  assert_int_equal(count_lines(f.log, " abort ", NULL), 2);
  assert_int_equal(count_lines(f.log, " revoke ", NULL), vcode(ver) >= 22807 ? 2 : 0);
  rm_tmpdir(f.dir);
}

static void hang_becomes_timeout_2_26(void **s) { (void)s; hang_becomes_timeout("2.26.5"); }
static void hang_becomes_timeout_2_32(void **s) { (void)s; hang_becomes_timeout("2.32.3"); }

/* A hang in communicator creation is a timeout too, and the abort returns. */
static void hang_in_init_child(flow_t *f) {
  setenv("NCCL_DOUBLE_HANG_INIT", "1", 1);
  child_setup(f);
  ftc__nccl_opts_t o = opts(300);
  ftc__nccl_comm_t *c = NULL;
  ftc__view_t *v = solo_view();
  int64_t t0 = ftc__now_ns();
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  CHILD_CHECK(st == FTC_ERR_TIMEOUT, 50, "hung init gave %s", ftc_strerror(st));
  CHILD_CHECK(strstr(ftc_last_error(), "ncclCommInitRankConfig"), 51, "message names the call");
  CHILD_CHECK(c == NULL, 52, "no communicator on failure");
  CHILD_CHECK(ftc__now_ns() - t0 < 3000000000LL, 53, "took too long");
  free_view(v);
  _exit(0);
}

static void hang_in_init_becomes_timeout(void **s) {
  (void)s;
  flow_t f;
  flow_init(&f, "2.32.3", "hinit");
  pid_t a = fork();
  if (a == 0) hang_in_init_child(&f);
  assert_int_equal(wait_child(a, 2 * TMO), 0);
  assert_int_equal(count_lines(f.log, " abort ", NULL), 1);
  assert_int_equal(count_lines(f.log, " destroy ", NULL), 0);
  rm_tmpdir(f.dir);
}

/* --- an interrupt from another thread (the core's ftc__comm_fail) --------------- */

static int g_interrupt;

static void *interrupter(void *arg) {
  (void)arg;
  usleep(200000);
  __atomic_store_n(&g_interrupt, (int)FTC_ERR_PEER_LOST, __ATOMIC_RELEASE);
  return NULL;
}

static void interrupt_child(flow_t *f) {
  setenv("NCCL_DOUBLE_HANG_AT", "1", 1);
  child_setup(f);
  ftc__nccl_opts_t o = {0, TMO, NULL, &g_interrupt};
  ftc__nccl_comm_t *c = NULL;
  ftc__view_t *v = solo_view();
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 110, "init: %s", ftc_strerror(st));
  float x[4] = {0};
  ftc__op_t op = {FTC__COLL_ALLREDUCE, x, x, 4, FTC_F32, FTC_SUM, -1};
  ftc__nccl_work_t w;
  CHILD_CHECK(ftc__nccl_comm_launch(c, &op, NULL, &w) == FTC_OK, 111, "launch");
  pthread_t t;
  pthread_create(&t, NULL, interrupter, NULL);
  int64_t t0 = ftc__now_ns();
  st = ftc__nccl_comm_wait(c, &w, ftc__deadline_ns(TMO));
  int64_t took = ftc__now_ns() - t0;
  pthread_join(t, NULL);
  CHILD_CHECK(st == FTC_ERR_PEER_LOST, 112, "interrupted wait gave %s", ftc_strerror(st));
  CHILD_CHECK(took >= 150000000LL && took < 5000000000LL, 113, "took %lld ns", (long long)took);
  CHILD_CHECK(ftc__nccl_comm_error(c) == FTC_ERR_PEER_LOST, 114, "epoch failed by the interrupt");
  CHILD_CHECK(ftc__nccl_comm_abort(c) == FTC_OK, 115, "abort");
  ftc__nccl_comm_free(c);

  /* creation, too */
  __atomic_store_n(&g_interrupt, 0, __ATOMIC_RELEASE);
  setenv("NCCL_DOUBLE_HANG_INIT", "1", 1);
  c = NULL;
  v->epoch = 2, v->members[0].joined_epoch = 2;
  pthread_create(&t, NULL, interrupter, NULL);
  st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  pthread_join(t, NULL);
  CHILD_CHECK(st == FTC_ERR_PEER_LOST && c == NULL, 116, "interrupted init gave %s", ftc_strerror(st));
  free_view(v);
  _exit(0);
}

static void another_thread_interrupts_a_wait(void **s) {
  (void)s;
  flow_t f;
  flow_init(&f, "2.32.3", "intr");
  pid_t a = fork();
  if (a == 0) interrupt_child(&f);
  assert_int_equal(wait_child(a, 2 * TMO), 0);
  assert_int_equal(count_lines(f.log, " destroy ", NULL), 0);
  assert_int_equal(count_lines(f.log, " abort ", NULL), 2);
  rm_tmpdir(f.dir);
}

/* --- a grow given up by its root -------------------------------------------------- */

/* Slots 0 and 1 hold epoch 1. Slot 0 alone starts growing epoch 2 (slot 2
 * admitted) and gives it up (interrupted, as when epoch 3 supersedes it
 * before the others moved), after its grow sent epoch 2's id through the
 * parent; slot 1 never hears of epoch 2. Epoch 3 adds slots 2 and 3: a
 * grow from the same parent would hand slot 1 epoch 2's id (it never met
 * the others: two-joiners on the double, 2 of 50 loaded runs). Slot 0
 * publishes an init instead, and everyone follows it. */
static int g_giveup;

static void *giveup_later(void *arg) {
  (void)arg;
  usleep(300000);
  __atomic_store_n(&g_giveup, (int)FTC_ERR_REVOKED, __ATOMIC_RELEASE);
  return NULL;
}

static const int gslots[] = {0, 1, 2, 3};
static const uint64_t gids[] = {201, 202, 203, 204};
static const uint64_t gjoined[] = {1, 1, 2, 3};

/* A view of the first n of gslots at epoch e, slots 0 and 1 holding state. */
static ftc__view_t *giveup_view(uint64_t e, int n, int me) {
  ftc__view_t *v = make_view(e, n, gslots, gids, gjoined, me);
  for (int i = 0; i < n; i++)
    v->members[i].state = e == 1 ? FTC__STATE_FRESH : i < 2 ? FTC__STATE_HELD : FTC__STATE_FRESH;
  return v;
}

static void giveup_child(flow_t *f, int slot) {
  child_setup(f);
  ftc__nccl_opts_t o = {0, 5000, NULL, &g_giveup};
  ftc__nccl_comm_t *c = NULL;
  char who[16];
  snprintf(who, sizeof who, "slot%d", slot);
  int bad;
  ftc_status_t st;
  if (slot < 2) {
    ftc__view_t *v1 = giveup_view(1, 2, slot);
    st = ftc__nccl_enter_epoch(f->lib, &c, v1, &f->x, &o);
    CHILD_CHECK(st == FTC_OK, 120, "epoch 1: %s", ftc_strerror(st));
    record_step(f, who, c);
    st = allreduce_check(c, 1.0f, 2.0f, &bad);
    CHILD_CHECK(st == FTC_OK && !bad, 121, "epoch 1 allreduce: %s", ftc_strerror(st));
    free_view(v1);
  }
  if (slot == 0) {
    ftc__view_t *v2 = giveup_view(2, 3, 0);
    pthread_t t;
    pthread_create(&t, NULL, giveup_later, NULL);
    st = ftc__nccl_enter_epoch(f->lib, &c, v2, &f->x, &o);
    pthread_join(t, NULL);
    CHILD_CHECK(st == FTC_ERR_REVOKED, 122, "the given-up grow of epoch 2 gave %s", ftc_strerror(st));
    __atomic_store_n(&g_giveup, 0, __ATOMIC_RELEASE);
    free_view(v2);
    /* epoch 3's blob may be published only now: the others wait for it */
  }
  ftc__view_t *v3 = giveup_view(3, 4, slot);
  st = ftc__nccl_enter_epoch(f->lib, &c, v3, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 123, "epoch 3: %s", ftc_strerror(st));
  record_step(f, who, c);
  st = allreduce_check(c, 1.0f, 4.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 124, "epoch 3 allreduce: %s", ftc_strerror(st));
  CHILD_CHECK(order_ok(c), 125, "epoch 3 rank order differs from the view");
  ftc__nccl_comm_free(c);
  free_view(v3);
  _exit(0);
}

static void a_grow_its_root_gave_up_is_followed_by_an_init(void **s) {
  (void)s;
  flow_t f;
  flow_init(&f, "2.32.3", "giveup");
  pid_t pid[4];
  for (int r = 0; r < 4; r++)
    if ((pid[r] = fork()) == 0) giveup_child(&f, r);
  int rc[4];
  for (int r = 0; r < 4; r++) rc[r] = wait_child(pid[r], 4 * TMO);
  char st[4][64];
  for (int r = 0; r < 4; r++) {
    char who[16];
    snprintf(who, sizeof who, "slot%d", r);
    read_steps(&f, who, st[r], sizeof st[r]);
  }
  print_message("slot0 [%s] slot1 [%s] slot2 [%s] slot3 [%s]; exits %d %d %d %d\n", st[0], st[1],
                st[2], st[3], rc[0], rc[1], rc[2], rc[3]);
  for (int r = 0; r < 4; r++) assert_int_equal(rc[r], 0);
  /* the root started epoch 2's grow and gave it up; epoch 3 is an init for all */
  assert_int_equal(count_lines(f.log, " grow ", "root=1"), 1);
  assert_int_equal(count_lines(f.log, " grow ", NULL), 1);
  assert_string_equal(st[0], "init init ");
  assert_string_equal(st[1], "init init ");
  assert_string_equal(st[2], "init ");
  assert_string_equal(st[3], "init ");
  assert_int_equal(count_lines(f.log, " destroy ", "failed=1"), 0);
  rm_tmpdir(f.dir);
}

/* --- in progress, asynchronous errors ------------------------------------------ */

static void in_progress_child(flow_t *f) {
  setenv("NCCL_DOUBLE_INPROGRESS_MS", "300", 1);
  child_setup(f);
  ftc__nccl_opts_t o = opts(TMO);
  ftc__nccl_comm_t *c = NULL;
  ftc__view_t *v = solo_view();
  int64_t t0 = ftc__now_ns();
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 60, "init: %s", ftc_strerror(st));
  CHILD_CHECK(ftc__now_ns() - t0 >= 300000000LL, 61, "init returned before the library was ready");
  int bad;
  setenv("NCCL_DOUBLE_ENQUEUE_INPROGRESS_MS", "150", 1);
  t0 = ftc__now_ns();
  st = allreduce_check(c, 3.0f, 3.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 62, "allreduce: %s", ftc_strerror(st));
  CHILD_CHECK(ftc__now_ns() - t0 >= 150000000LL, 63, "enqueue in progress not waited for");
  unsetenv("NCCL_DOUBLE_ENQUEUE_INPROGRESS_MS");
  ftc__nccl_comm_free(c);
  c = NULL;
  /* in progress for longer than the timeout: a timeout */
  ftc__nccl_opts_t quick = opts(100);
  v->epoch = 2;
  v->members[0].joined_epoch = 2; /* a fresh process in a new job */
  st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &quick);
  CHILD_CHECK(st == FTC_ERR_TIMEOUT, 64, "gave %s", ftc_strerror(st));
  CHILD_CHECK(strstr(ftc_last_error(), "in progress"), 65, "message says why");
  free_view(v);
  _exit(0);
}

static void in_progress_is_polled_within_the_timeout(void **s) {
  (void)s;
  flow_t f;
  flow_init(&f, "2.29.2", "inprog");
  pid_t a = fork();
  if (a == 0) in_progress_child(&f);
  assert_int_equal(wait_child(a, 2 * TMO), 0);
  assert_int_equal(count_lines(f.log, " abort ", NULL), 1); /* the timed-out init */
  rm_tmpdir(f.dir);
}

/* FTCOMM_CHECK_ARGS=1: two ranks agree on an allreduce, then call a
 * broadcast with different roots: neither enqueues it, both fail the epoch
 * with FTC_ERR_MISMATCH naming rank 1's call and rank 0's, and the next
 * collective is revoked. */
static void check_args_child(flow_t *f, int slot) {
  setenv("FTCOMM_CHECK_ARGS", "1", 1);
  child_setup(f);
  ftc__nccl_opts_t o = opts(TMO);
  ftc__nccl_comm_t *c = NULL;
  static const int s2[] = {0, 1};
  static const uint64_t i2[] = {101, 102}, j2[] = {1, 1};
  ftc__view_t *v = make_view(1, 2, s2, i2, j2, slot);
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 80, "epoch 1: %s", ftc_strerror(st));
  int bad;
  st = allreduce_check(c, (float)(slot + 1), 3.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 81, "a matching allreduce under the check: %s", ftc_strerror(st));
  float buf[64] = {0};
  ftc__op_t op = {FTC__COLL_BROADCAST, buf, buf, 64, FTC_F32, FTC_SUM, slot};
  st = run(c, op, TMO, NULL);
  CHILD_CHECK(st == FTC_ERR_MISMATCH, 82, "a broadcast with another root gave %s", ftc_strerror(st));
  CHILD_CHECK(strstr(ftc_last_error(), "rank 1 called broadcast #2 root 1 x64 f32 where rank 0 called broadcast #2 "
                                       "root 0 x64 f32"),
              83, "the message names both calls: %s", ftc_last_error());
  CHILD_CHECK(ftc__nccl_comm_error(c) == FTC_ERR_MISMATCH, 84, "the epoch is failed with the mismatch");
  ftc__op_t bar = {FTC__COLL_BARRIER, NULL, NULL, 0, FTC_U8, FTC_SUM, -1};
  ftc__nccl_work_t w;
  CHILD_CHECK(ftc__nccl_comm_launch(c, &bar, NULL, &w) == FTC_ERR_REVOKED, 85, "the next collective is revoked");
  ftc__nccl_comm_free(c);
  free_view(v);
  _exit(0);
}

static void check_args_turns_a_mismatch_into_an_error(void **s) {
  (void)s;
  flow_t f;
  flow_init(&f, "2.29.2", "args");
  pid_t pid[2];
  for (int i = 0; i < 2; i++)
    if ((pid[i] = fork()) == 0) check_args_child(&f, i);
  for (int i = 0; i < 2; i++) assert_int_equal(wait_child(pid[i], 2 * TMO), 0);
  rm_tmpdir(f.dir);
}

static void async_fail_child(flow_t *f, const char *code, ftc_status_t want) {
  setenv("NCCL_DOUBLE_FAIL_AT", "2", 1);
  if (code) setenv("NCCL_DOUBLE_FAIL_CODE", code, 1);
  child_setup(f);
  ftc__nccl_opts_t o = opts(TMO);
  ftc__nccl_comm_t *c = NULL;
  ftc__view_t *v = solo_view();
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 70, "init: %s", ftc_strerror(st));
  int bad;
  st = allreduce_check(c, 1.0f, 1.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 71, "first allreduce: %s", ftc_strerror(st));
  st = allreduce_check(c, 1.0f, 1.0f, &bad);
  CHILD_CHECK(st == want, 72, "async failure gave %s, want %s", ftc_strerror(st), ftc_strerror(want));
  CHILD_CHECK(strstr(ftc_last_error(), "injected failure"), 73, "NCCL's text is kept");
  st = allreduce_check(c, 1.0f, 1.0f, &bad);
  CHILD_CHECK(st == FTC_ERR_REVOKED, 74, "next collective gave %s", ftc_strerror(st));
  /* the next epoch, same members: the broken communicator is replaced */
  v->epoch = 2;
  st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 75, "epoch 2: %s", ftc_strerror(st));
  unsetenv("NCCL_DOUBLE_FAIL_AT");
  st = allreduce_check(c, 5.0f, 5.0f, &bad);
  CHILD_CHECK(st == FTC_OK && !bad, 76, "epoch 2 allreduce: %s", ftc_strerror(st));
  ftc__nccl_comm_free(c);
  free_view(v);
  _exit(0);
}

static void async_error(const char *code, ftc_status_t want) {
  flow_t f;
  flow_init(&f, "2.32.3", "async");
  pid_t a = fork();
  if (a == 0) async_fail_child(&f, code, want);
  assert_int_equal(wait_child(a, 2 * TMO), 0);
  assert_int_equal(count_lines(f.log, " destroy ", "failed=1"), 0);
  assert_int_equal(count_lines(f.log, " abort ", "failed=1"), 1);
  rm_tmpdir(f.dir);
}

static void async_system_error_is_a_backend_status(void **s) {
  (void)s;
  async_error(NULL, FTC_ERR_BACKEND);
}
static void async_remote_error_is_peer_lost(void **s) {
  (void)s;
  async_error("6", FTC_ERR_PEER_LOST);
}
/* The error comes while the rank is between its check of the error and its
 * query of the stream (the double's ncclCommGetAsyncError returns a state
 * 100 ms old; the failing collective ends 30 ms in): the collective looks
 * complete and must still fail (CI once: "allreduce with a dead peer gave
 * success", its buffer untouched). */
static void async_error_after_the_check_still_fails_the_collective(void **s) {
  (void)s;
  setenv("NCCL_DOUBLE_COLL_MS", "30", 1);
  setenv("NCCL_DOUBLE_ASYNC_READ_MS", "100", 1);
  async_error("6", FTC_ERR_PEER_LOST);
  unsetenv("NCCL_DOUBLE_ASYNC_READ_MS");
  unsetenv("NCCL_DOUBLE_COLL_MS");
}

/* Another thread revokes the epoch while the waiting rank is between its
 * look at the epoch and its query of the stream (the double's
 * ncclCommGetAsyncError answers 150 ms late; the revoke comes 50 ms in and
 * ends the 400 ms collective): the collective looks complete, untouched,
 * and must still fail. */
static ftc__nccl_comm_t *g_revoke_comm;
static void *revoker(void *arg) {
  (void)arg;
  usleep(50000);
  ftc__nccl_comm_revoke(g_revoke_comm, FTC_ERR_PEER_LOST);
  return NULL;
}

static void revoke_child(flow_t *f) {
  setenv("NCCL_DOUBLE_COLL_MS", "400", 1);
  child_setup(f);
  ftc__nccl_opts_t o = opts(TMO);
  ftc__nccl_comm_t *c = NULL;
  ftc__view_t *v = solo_view();
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 120, "init: %s", ftc_strerror(st));
  setenv("NCCL_DOUBLE_ASYNC_READ_MS", "150", 1);
  float x[4] = {1, 1, 1, 1};
  ftc__op_t op = {FTC__COLL_ALLREDUCE, x, x, 4, FTC_F32, FTC_SUM, -1};
  ftc__nccl_work_t w;
  CHILD_CHECK(ftc__nccl_comm_launch(c, &op, NULL, &w) == FTC_OK, 121, "launch");
  g_revoke_comm = c;
  pthread_t t;
  pthread_create(&t, NULL, revoker, NULL);
  st = ftc__nccl_comm_wait(c, &w, ftc__deadline_ns(TMO));
  pthread_join(t, NULL);
  CHILD_CHECK(st == FTC_ERR_PEER_LOST, 122, "a collective revoked mid-way gave %s",
              ftc_strerror(st));
  unsetenv("NCCL_DOUBLE_ASYNC_READ_MS");
  ftc__nccl_comm_free(c);
  free_view(v);
  _exit(0);
}

static void a_revoke_during_the_wait_fails_the_collective(void **s) {
  (void)s;
  flow_t f;
  flow_init(&f, "2.32.3", "revoke");
  pid_t a = fork();
  if (a == 0) revoke_child(&f);
  assert_int_equal(wait_child(a, 2 * TMO), 0);
  rm_tmpdir(f.dir);
}

/* --- every collective ----------------------------------------------------------- */

static void colls_child(flow_t *f, int rank) {
  child_setup(f);
  ftc__nccl_opts_t o = opts(TMO);
  ftc__nccl_comm_t *c = NULL;
  int s3[] = {0, 1, 2};
  uint64_t i3[] = {1, 2, 3}, j3[] = {1, 1, 1};
  ftc__view_t *v = make_view(1, 3, s3, i3, j3, rank);
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 80, "init: %s", ftc_strerror(st));
  enum { N = 1000 };
  int32_t a[3 * N], b[3 * N];
  /* allreduce max, i32, recorded: the events' discovery feeds the recorder */
  ftc_rec_t *rec = NULL;
  CHILD_CHECK(ftc_rec_create(16, 7, "world", 1, rank, 3, &rec) == FTC_OK, 93, "recorder");
  uint64_t id = ftc_rec_schedule(rec, 1, 1, FTC_REC_ALLREDUCE, FTC_I32, N, N * 4, -1, -1);
  for (int i = 0; i < N; i++) a[i] = rank * 10 + i;
  ftc__nccl_work_t w;
  ftc__op_t ar = {FTC__COLL_ALLREDUCE, a, b, N, FTC_I32, FTC_MAX, -1};
  st = ftc__nccl_comm_launch_rec(c, &ar, NULL, rec, id, &w);
  if (st == FTC_OK) st = ftc__nccl_comm_wait(c, &w, ftc__deadline_ns(TMO));
  CHILD_CHECK(st == FTC_OK && b[7] == 27, 81, "allreduce max: %s %d", ftc_strerror(st), b[7]);
  ftc_rec_entry_t ent;
  CHILD_CHECK(ftc_rec_snapshot(rec, &ent, 1) == 1 && ent.state == FTC_REC_COMPLETED &&
                  ent.t_started == w.started_ns && ent.t_completed == w.completed_ns &&
                  ent.t_started >= ent.t_created,
              94, "recorder entry: state %d started %lld completed %lld", (int)ent.state,
              (long long)ent.t_started, (long long)ent.t_completed);
  ftc_rec_destroy(rec);
  float ms = -1;
  CHILD_CHECK(ftc__nccl_work_elapsed_ms(c, &w, &ms) == FTC_OK && ms >= 0, 82, "event timing");
  CHILD_CHECK(w.started_ns >= w.enqueued_ns && w.completed_ns >= w.started_ns, 83, "times");
  ftc__nccl_work_release(c, &w);
  /* broadcast from 1 */
  for (int i = 0; i < N; i++) a[i] = rank == 1 ? 500 + i : -1;
  st = run(c, (ftc__op_t){FTC__COLL_BROADCAST, a, a, N, FTC_I32, FTC_SUM, 1}, TMO, NULL);
  CHILD_CHECK(st == FTC_OK && a[3] == 503, 84, "broadcast");
  /* reduce sum to 2 */
  for (int i = 0; i < N; i++) a[i] = rank + 1, b[i] = -1;
  st = run(c, (ftc__op_t){FTC__COLL_REDUCE, a, b, N, FTC_I32, FTC_SUM, 2}, TMO, NULL);
  CHILD_CHECK(st == FTC_OK && (rank != 2 || b[9] == 6), 85, "reduce");
  /* allgather */
  for (int i = 0; i < N; i++) a[i] = rank * 1000 + i;
  st = run(c, (ftc__op_t){FTC__COLL_ALLGATHER, a, b, N, FTC_I32, FTC_SUM, -1}, TMO, NULL);
  CHILD_CHECK(st == FTC_OK && b[N + 5] == 1005 && b[2 * N] == 2000, 86, "allgather");
  /* reduce-scatter sum */
  for (int i = 0; i < 3 * N; i++) a[i] = i;
  st = run(c, (ftc__op_t){FTC__COLL_REDUCE_SCATTER, a, b, N, FTC_I32, FTC_SUM, -1}, TMO, NULL);
  CHILD_CHECK(st == FTC_OK && b[1] == 3 * (rank * N + 1), 87, "reduce_scatter");
  /* all-to-all: block j of rank r holds r*100+j */
  for (int j = 0; j < 3; j++)
    for (int i = 0; i < N; i++) a[j * N + i] = rank * 100 + j;
  st = run(c, (ftc__op_t){FTC__COLL_ALLTOALL, a, b, N, FTC_I32, FTC_SUM, -1}, TMO, NULL);
  CHILD_CHECK(st == FTC_OK && b[0] == rank && b[2 * N] == 200 + rank, 88, "alltoall");
  /* send/recv: 0 -> 2 */
  if (rank == 0) {
    for (int i = 0; i < N; i++) a[i] = 77;
    st = run(c, (ftc__op_t){FTC__COLL_SEND, a, NULL, N, FTC_I32, FTC_SUM, 2}, TMO, NULL);
    CHILD_CHECK(st == FTC_OK, 89, "send");
  } else if (rank == 2) {
    st = run(c, (ftc__op_t){FTC__COLL_RECV, NULL, b, N, FTC_I32, FTC_SUM, 0}, TMO, NULL);
    CHILD_CHECK(st == FTC_OK && b[N - 1] == 77, 90, "recv");
  }
  /* a ring exchange as one group: send to the next, receive from the previous */
  for (int i = 0; i < N; i++) a[i] = rank * 7 + 1, b[i] = -1;
  ftc__op_t snd = {FTC__COLL_SEND, a, NULL, N, FTC_I32, FTC_SUM, (rank + 1) % 3};
  ftc__op_t rcv = {FTC__COLL_RECV, NULL, b, N, FTC_I32, FTC_SUM, (rank + 2) % 3};
  const ftc__op_t *grp[2] = {&snd, &rcv};
  st = ftc__nccl_comm_launch_p2p(c, grp, 2, NULL, &w);
  if (st == FTC_OK) st = ftc__nccl_comm_wait(c, &w, ftc__deadline_ns(TMO));
  CHILD_CHECK(st == FTC_OK && b[N - 1] == ((rank + 2) % 3) * 7 + 1, 95, "p2p group: %s %d",
              ftc_strerror(st), b[N - 1]);
  ftc__nccl_work_release(c, &w);
  const ftc__op_t *bad[2] = {&ar, &rcv};
  CHILD_CHECK(ftc__nccl_comm_launch_p2p(c, bad, 2, NULL, &w) == FTC_ERR_INVALID_ARGUMENT, 96,
              "a group with a collective is refused");
  st = run(c, (ftc__op_t){FTC__COLL_BARRIER, NULL, NULL, 0, FTC_U8, FTC_SUM, -1}, TMO, NULL);
  CHILD_CHECK(st == FTC_OK, 91, "barrier");
  /* avg of f64 */
  double d[4] = {rank * 3.0, 1, 2, 3}, e[4];
  st = run(c, (ftc__op_t){FTC__COLL_ALLREDUCE, d, e, 4, FTC_F64, FTC_AVG, -1}, TMO, NULL);
  CHILD_CHECK(st == FTC_OK && e[0] == 3.0 && e[3] == 3.0, 92, "avg f64");
  ftc__nccl_comm_free(c);
  free_view(v);
  _exit(0);
}

static void every_collective_runs_on_the_stream(void **s) {
  (void)s;
  flow_t f;
  flow_init(&f, "2.32.3", "colls");
  pid_t p[3];
  for (int r = 0; r < 3; r++)
    if ((p[r] = fork()) == 0) colls_child(&f, r);
  for (int r = 0; r < 3; r++) assert_int_equal(wait_child(p[r], 2 * TMO), 0);
  /* healthy communicators are finalized and destroyed */
  assert_int_equal(count_lines(f.log, " finalize ", NULL), 3);
  assert_int_equal(count_lines(f.log, " destroy ", "failed=0"), 3);
  rm_tmpdir(f.dir);
}

/* --- uneven counts, gather and scatter ---------------------------------------- */

/* allgatherv, alltoallv (zero counts among the uneven ones, gapped and
 * reversed displacements), then gather and scatter from every root (in
 * place on the root every other time), at n ranks: one NCCL group of
 * sends and receives each. */
static void vcolls_child(flow_t *f, int n, int rank) {
  child_setup(f);
  ftc__nccl_opts_t o = opts(TMO);
  ftc__nccl_comm_t *c = NULL;
  int slots[8];
  uint64_t ids[8], joined[8];
  for (int q = 0; q < n; q++) slots[q] = q, ids[q] = (uint64_t)q + 1, joined[q] = 1;
  ftc__view_t *v = make_view(1, n, slots, ids, joined, rank);
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 80, "init: %s", ftc_strerror(st));
  enum { M = 64 };
  int32_t a[8 * M], b[8 * M + 64];
  size_t cnt[8], dsp[8], sc[8], rc[8], rd[8], at = 1;
  /* allgatherv: rank q gives (3q + 1) % 4 elements (rank 1 none), blocks
   * in reverse rank order with a gap of 2 */
  for (int q = n - 1; q >= 0; q--) cnt[q] = (size_t)(3 * q + 1) % 4, dsp[q] = at, at += cnt[q] + 2;
  for (size_t i = 0; i < cnt[rank]; i++) a[i] = rank * 100 + (int)i;
  for (size_t i = 0; i < at; i++) b[i] = -1;
  ftc__op_t agv = {FTC__COLL_ALLGATHERV, a, b, 0, FTC_I32, FTC_SUM, -1};
  agv.rcounts = cnt, agv.rdispls = dsp, agv.nranks = n;
  st = run(c, agv, TMO, NULL);
  CHILD_CHECK(st == FTC_OK, 97, "allgatherv: %s", ftc_strerror(st));
  for (int q = 0; q < n; q++) {
    for (size_t i = 0; i < cnt[q]; i++)
      CHILD_CHECK(b[dsp[q] + i] == q * 100 + (int)i, 97, "allgatherv block %d [%zu] = %d", q, i,
                  b[dsp[q] + i]);
    CHILD_CHECK(b[dsp[q] + cnt[q]] == -1, 97, "allgatherv wrote past block %d", q);
  }
  /* alltoallv: r sends (r + 2q) % 3 elements to q, packed; received with gaps */
  size_t so = 0;
  for (int q = 0; q < n; q++) {
    sc[q] = (size_t)(rank + 2 * q) % 3, rc[q] = (size_t)(q + 2 * rank) % 3;
    for (size_t i = 0; i < sc[q]; i++) a[so + i] = rank * 1000 + q * 10 + (int)i;
    so += sc[q];
  }
  at = 0;
  for (int q = 0; q < n; q++) rd[q] = at, at += rc[q] + 1;
  for (size_t i = 0; i < at; i++) b[i] = -1;
  ftc__op_t atv = {FTC__COLL_ALLTOALLV, a, b, so, FTC_I32, FTC_SUM, -1};
  atv.scounts = sc, atv.rcounts = rc, atv.rdispls = rd, atv.nranks = n;
  st = run(c, atv, TMO, NULL);
  CHILD_CHECK(st == FTC_OK, 98, "alltoallv: %s", ftc_strerror(st));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i <= rc[q]; i++)
      CHILD_CHECK(b[rd[q] + i] == (i < rc[q] ? q * 1000 + rank * 10 + (int)i : -1), 98,
                  "alltoallv from %d [%zu] = %d", q, i, b[rd[q] + i]);
  /* gather and scatter of 5 elements from every root */
  for (int root = 0; root < n; root++) {
    int in_place = rank == root && (root & 1);
    for (int i = 0; i < 5; i++) a[i] = rank * 10 + i;
    for (int i = 0; i < 5 * n; i++) b[i] = -1;
    if (in_place) memcpy(b + 5 * root, a, 5 * sizeof *a);
    ftc__op_t g = {FTC__COLL_GATHER, in_place ? b + 5 * root : a, b, 5, FTC_I32, FTC_SUM, root};
    st = run(c, g, TMO, NULL);
    CHILD_CHECK(st == FTC_OK, 99, "gather to %d: %s", root, ftc_strerror(st));
    for (int i = 0; i < 5 * n; i++)
      CHILD_CHECK(b[i] == (rank == root ? (i / 5) * 10 + i % 5 : -1), 99, "gather to %d [%d] = %d",
                  root, i, b[i]);
    for (int i = 0; i < 5 * n; i++) a[i] = rank == root ? 7000 + i : -2;
    for (int i = 0; i < 5; i++) b[i] = -1;
    ftc__op_t sct = {FTC__COLL_SCATTER, a, in_place ? a + 5 * root : b, 5, FTC_I32, FTC_SUM, root};
    st = run(c, sct, TMO, NULL);
    CHILD_CHECK(st == FTC_OK, 100, "scatter from %d: %s", root, ftc_strerror(st));
    const int32_t *got = in_place ? a + 5 * root : b;
    for (int i = 0; i < 5; i++)
      CHILD_CHECK(got[i] == 7000 + 5 * rank + i, 100, "scatter from %d [%d] = %d", root, i, got[i]);
  }
  ftc__nccl_comm_free(c);
  free_view(v);
  _exit(0);
}

static void uneven_and_rooted_collectives_run_as_groups_at(int n) {
  flow_t f;
  char tag[32];
  snprintf(tag, sizeof tag, "vcolls%d", n);
  flow_init(&f, "2.32.3", tag);
  pid_t p[8];
  for (int r = 0; r < n; r++)
    if ((p[r] = fork()) == 0) vcolls_child(&f, n, r);
  for (int r = 0; r < n; r++) assert_int_equal(wait_child(p[r], 2 * TMO), 0);
  rm_tmpdir(f.dir);
}

static void uneven_and_rooted_collectives_run_as_groups(void **s) {
  (void)s;
  static const int sizes[] = {1, 2, 3, 4, 8};
  for (int i = 0; i < 5; i++) uneven_and_rooted_collectives_run_as_groups_at(sizes[i]);
}

/* Where rank q's alltoallv block for rank `to` starts in its packed send
 * buffer (vop: q sends (q + j) % 3 elements to j). */
static size_t so_of(int q, int to, int n) {
  size_t at = 0;
  for (int j = 0; j < to && j < n; j++) at += (size_t)((q + j) % 3);
  return at;
}

/* One of allgatherv, alltoallv, gather (to 0) and scatter (from 0), k = 0
 * .. 3, at the epoch's size with uneven counts (zeros among them): its
 * status, FTC_ERR_INTERNAL when the data is wrong. */
static ftc_status_t vop(ftc__nccl_comm_t *c, int k) {
  int n = ftc__nccl_comm_size(c), me = ftc__nccl_comm_rank(c);
  int32_t in[64], out[64];
  size_t sc[8] = {0}, rc[8] = {0};
  for (int i = 0; i < 64; i++) in[i] = me * 100 + i, out[i] = -1;
  ftc__op_t op = {FTC__COLL_ALLGATHERV, in, out, 0, FTC_I32, FTC_SUM, -1};
  op.nranks = n;
  if (k == 0) {
    for (int q = 0; q < n; q++) rc[q] = (size_t)((q + 1) % 3);
    op.rcounts = rc;
  } else if (k == 1) {
    for (int q = 0; q < n; q++) sc[q] = (size_t)((me + q) % 3), rc[q] = (size_t)((q + me) % 3);
    op.coll = FTC__COLL_ALLTOALLV, op.scounts = sc, op.rcounts = rc;
  } else {
    op.coll = k == 2 ? FTC__COLL_GATHER : FTC__COLL_SCATTER, op.count = 2, op.peer = 0;
  }
  ftc_status_t st = run(c, op, TMO, NULL);
  if (st != FTC_OK) return st;
  size_t at = 0;
  for (int q = 0; q < n; q++) {
    size_t want_n = k == 0 ? rc[q] : k == 1 ? rc[q] : (k == 2 && me == 0) || (k == 3 && q == 0) ? 2 : 0;
    for (size_t i = 0; i < want_n; i++) {
      int32_t want = k == 0 ? q * 100 + (int)i
                     : k == 1 ? q * 100 + (int)(so_of(q, me, n) + i)
                     : k == 2 ? q * 100 + (int)i
                              : (int)(2 * me + i);
      size_t where = k == 3 ? i : at + i;
      if (out[where] != want) return ftc__error(FTC_ERR_INTERNAL, "op %d: [%zu] = %d, want %d", k, where, out[where], want);
    }
    at += want_n;
  }
  return FTC_OK;
}

/* 3 ranks; slot 1 dies after a healthy round of collective k: the
 * survivors' next one fails with peer lost, and after the shrink (revoke,
 * epoch 2 of 2 ranks) it runs right. */
static void vkill_child(flow_t *f, int slot, int k) {
  child_setup(f);
  ftc__nccl_opts_t o = opts(TMO);
  ftc__nccl_comm_t *c = NULL;
  ftc__view_t *v1 = make_view(1, 3, slots3, ids3, joined3, slot);
  ftc_status_t st = ftc__nccl_enter_epoch(f->lib, &c, v1, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 40, "epoch 1: %s", ftc_strerror(st));
  st = vop(c, k);
  CHILD_CHECK(st == FTC_OK, 41, "op %d in epoch 1: %s", k, ftc_strerror(st));
  if (slot == 1) raise(SIGKILL);
  st = vop(c, k);
  /* a gather's sender or a scatter's receiver off the root may finish its
   * part; the root waits for the dead rank */
  if (st == FTC_OK) st = vop(c, 0);
  CHILD_CHECK(st == FTC_ERR_PEER_LOST, 42, "op %d with a dead peer gave %s, want peer lost", k, ftc_strerror(st));
  CHILD_CHECK(ftc__nccl_comm_revoke(c, FTC_ERR_PEER_LOST) == FTC_OK, 43, "revoke");
  int s2[] = {0, 2};
  uint64_t i2[] = {101, 103}, j2[] = {1, 1};
  ftc__view_t *v2 = make_view(2, 2, s2, i2, j2, slot == 0 ? 0 : 1);
  st = ftc__nccl_enter_epoch(f->lib, &c, v2, &f->x, &o);
  CHILD_CHECK(st == FTC_OK, 44, "epoch 2: %s", ftc_strerror(st));
  st = vop(c, k);
  CHILD_CHECK(st == FTC_OK, 45, "op %d in epoch 2: %s: %s", k, ftc_strerror(st), ftc_last_error());
  ftc__nccl_comm_free(c);
  free_view(v1), free_view(v2);
  _exit(0);
}

static void a_dead_peer_fails_each_uneven_or_rooted_collective_and_the_shrink_runs_it(void **s) {
  (void)s;
  for (int k = 0; k < 4; k++) {
    flow_t f;
    flow_init(&f, "2.32.3", "vkill");
    pid_t p[3];
    for (int r = 0; r < 3; r++)
      if ((p[r] = fork()) == 0) vkill_child(&f, r, k);
    assert_int_equal(wait_child(p[0], 4 * TMO), 0);
    assert_int_equal(wait_child(p[1], 4 * TMO), 128 + SIGKILL);
    assert_int_equal(wait_child(p[2], 4 * TMO), 0);
    rm_tmpdir(f.dir);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_collective_runs_on_the_stream),
      cmocka_unit_test(uneven_and_rooted_collectives_run_as_groups),
      cmocka_unit_test(a_dead_peer_fails_each_uneven_or_rooted_collective_and_the_shrink_runs_it),
      cmocka_unit_test(kill_shrink_grow_2_26),
      cmocka_unit_test(kill_shrink_grow_2_27),
      cmocka_unit_test(kill_shrink_grow_2_28),
      cmocka_unit_test(kill_shrink_grow_2_29),
      cmocka_unit_test(kill_shrink_grow_2_32),
      cmocka_unit_test(kill_shrink_grow_rccl_2_30),
      cmocka_unit_test(joiner_follows_the_survivors_reinit),
      cmocka_unit_test(shrink_takes_an_unsorted_exclusion_list_2_27),
      cmocka_unit_test(shrink_takes_an_unsorted_exclusion_list_2_32),
      cmocka_unit_test(hang_becomes_timeout_2_26),
      cmocka_unit_test(hang_becomes_timeout_2_32),
      cmocka_unit_test(hang_in_init_becomes_timeout),
      cmocka_unit_test(another_thread_interrupts_a_wait),
      cmocka_unit_test(a_grow_its_root_gave_up_is_followed_by_an_init),
      cmocka_unit_test(in_progress_is_polled_within_the_timeout),
      cmocka_unit_test(check_args_turns_a_mismatch_into_an_error),
      cmocka_unit_test(async_system_error_is_a_backend_status),
      cmocka_unit_test(async_remote_error_is_peer_lost),
      cmocka_unit_test(async_error_after_the_check_still_fails_the_collective),
      cmocka_unit_test(a_revoke_during_the_wait_fails_the_collective),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
