/*
 * test_coord_join.c - the membership protocol end to end, in one process: a
 * coordinator on an ephemeral loopback port and real membership clients.
 * Joining forms epoch 1 in slot order, a wrong token is refused with
 * FTC_ERR_AUTH while others are still served, an unreachable coordinator
 * fails within the timeout, and lost, leaving, reported and joining members
 * produce the next epochs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "coord_test_util.h"
#include "ftc_coord.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_time.h"
#include "membership/member.h"
#include "proto/proto.h"

#define TOKEN "s3cret-token"
#define WAIT_MS 10000

typedef struct fixture {
  ftc__coord_t *co;
  char addr[64];
} fixture_t;

static ftc__coord_t *start_coord(int world, int min, fixture_t *fx) {
  ftc__coord_cfg_t cfg = {
      .bind_host = "127.0.0.1",
      .port = 0,
      .job = "testjob",
      .token = TOKEN,
      .world_size = world,
      .min_size = min,
      .heartbeat_ms = 100,
      .heartbeat_timeout_ms = 5000,
  };
  assert_int_equal(ftc__coord_create(&cfg, &fx->co), FTC_OK);
  assert_true(ftc__coord_port(fx->co) > 0);
  snprintf(fx->addr, sizeof(fx->addr), "127.0.0.1:%d", ftc__coord_port(fx->co));
  return fx->co;
}

/* A listening socket on an ephemeral loopback port, as a rank's data plane
 * (a coordinator's probe connects to it: docs/recovery.md, "Network
 * faults"); its port. Listeners live until the process ends. */
static int listen_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 64) ||
      getsockname(fd, (struct sockaddr *)&a, &len)) {
    fprintf(stderr, "cannot listen on loopback for a member's data address\n");
    abort();
  }
  return ntohs(a.sin_port);
}

/* The data-plane port of slot s: a listener of this process (slots 0..63;
 * any thread). */
static int data_port(int slot) {
  static int ports[64];
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  if (slot < 0 || slot >= 64) return 40000 + slot; /* (nothing listens: unreachable) */
  pthread_mutex_lock(&mu);
  if (!ports[slot]) ports[slot] = listen_port();
  int p = ports[slot];
  pthread_mutex_unlock(&mu);
  return p;
}

static ftc__member_cfg_t member_cfg(const fixture_t *fx, int slot, int world) {
  static __thread char data[32];
  snprintf(data, sizeof(data), "127.0.0.1:%d", data_port(slot));
  ftc__member_cfg_t c = {
      .coordinator = fx->addr,
      .job = "testjob",
      .token = TOKEN,
      .slot = slot,
      .world_size = world,
      .min_size = 1,
      .data_addr = data,
      .host = "localhost",
      .connect_timeout_ms = WAIT_MS,
  };
  return c;
}

static ftc__member_t *join(const fixture_t *fx, int slot, int world) {
  ftc__member_cfg_t c = member_cfg(fx, slot, world);
  ftc__member_t *m = NULL;
  ftc_status_t st = ftc__member_open(&c, &m);
  if (st != FTC_OK) fail_msg("slot %d: %s: %s", slot, ftc_strerror(st), ftc_last_error());
  return m;
}

static ftc__view_t *view_after(ftc__member_t *m, uint64_t after) {
  ftc__view_t *v = NULL;
  ftc_status_t st = ftc__member_wait_view(m, after, WAIT_MS, &v);
  if (st != FTC_OK) fail_msg("wait_view(%llu): %s: %s", (unsigned long long)after,
                             ftc_strerror(st), ftc_last_error());
  return v;
}

/* A one-slot member's configuration for a coordinator address where nobody
 * listens, with this connect timeout. */
static ftc__member_cfg_t unreachable_cfg(fixture_t *fx, int timeout_ms) {
  int port = test_closed_port();
  assert_true(port > 0);
  snprintf(fx->addr, sizeof(fx->addr), "127.0.0.1:%d", port);
  ftc__member_cfg_t c = member_cfg(fx, 0, 1);
  c.connect_timeout_ms = timeout_ms;
  return c;
}

/* The next view of m after `after` is epoch `epoch` of `size` ranks (and,
 * rank >= 0, m is rank `rank` in it). */
static void expect_epoch(ftc__member_t *m, uint64_t after, uint64_t epoch, int size, int rank) {
  ftc__view_t *v = view_after(m, after);
  assert_int_equal(v->epoch, epoch);
  assert_int_equal(v->size, size);
  if (rank >= 0) assert_int_equal(v->my_rank, rank);
  ftc__view_free(v);
}

/* Wait until the coordinator's stats satisfy `cond` (bounded). */
#define WAIT_STATS(co, s, cond)                                    \
  do {                                                             \
    int64_t dl_ = ftc__deadline_ns(WAIT_MS);                       \
    for (;;) {                                                     \
      ftc__coord_stats(co, &(s));                                  \
      if (cond) break;                                             \
      if (ftc__now_ns() > dl_) fail_msg("timed out waiting for " #cond); \
      usleep(10000);                                               \
    }                                                              \
  } while (0)

static void expect_join_works(const fixture_t *fx) {
  ftc__member_t *m = join(fx, 0, 1);
  ftc__view_t *v = view_after(m, 0);
  assert_int_equal(v->size, 1);
  ftc__view_free(v);
  ftc__member_close(m);
}

static void join_of_n_forms_epoch_1_with_ranks_in_slot_order(void **state) {
  (void)state;
  fixture_t fx;
  enum { N = 4 };
  start_coord(N, 0, &fx);
  ftc__member_t *m[N];
  /* Join in reverse slot order: ranks still follow slots. */
  for (int s = N - 1; s >= 0; s--) m[s] = join(&fx, s, N);
  ftc__view_t *v[N];
  for (int s = 0; s < N; s++) {
    v[s] = view_after(m[s], 0);
    assert_int_equal(v[s]->epoch, 1);
    assert_int_equal(v[s]->size, N);
    assert_int_equal(v[s]->my_rank, s);
    for (int r = 0; r < N; r++) {
      char want[32];
      snprintf(want, sizeof(want), "127.0.0.1:%d", data_port(r));
      assert_int_equal(v[s]->members[r].rank, r);
      assert_int_equal(v[s]->members[r].slot, r);
      assert_int_equal(v[s]->members[r].joined_epoch, 1);
      assert_string_equal(v[s]->members[r].addr, want);
      assert_int_equal(v[s]->members[r].member_id, v[0]->members[r].member_id);
      for (int q = 0; q < r; q++)
        assert_true(v[s]->members[q].member_id != v[s]->members[r].member_id);
    }
    assert_int_equal(v[s]->my_member_id, v[s]->members[s].member_id);
    assert_int_equal(ftc__member_error(m[s]), FTC_OK);
  }
  /* Nothing newer arrives while nobody changes: the wait times out. */
  ftc__view_t *none = NULL;
  assert_int_equal(ftc__member_wait_view(m[0], 1, 200, &none), FTC_ERR_TIMEOUT);
  assert_null(none);
  ftc__coord_stats_t st;
  ftc__coord_stats(fx.co, &st);
  assert_int_equal(st.epoch, 1);
  assert_int_equal(st.epoch_size, N);
  for (int s = 0; s < N; s++) {
    ftc__view_free(v[s]);
    ftc__member_close(m[s]);
  }
  ftc__coord_destroy(fx.co);
}

static void restored_coordinator_numbers_epochs_after_first_epoch(void **state) {
  (void)state;
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .job = "testjob", .token = TOKEN,
                          .world_size = 2, .heartbeat_ms = 100, .first_epoch = 41,
                          .member_id_base = 1000};
  fixture_t fx;
  assert_int_equal(ftc__coord_create(&cfg, &fx.co), FTC_OK);
  snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", ftc__coord_port(fx.co));
  ftc__member_t *a = join(&fx, 0, 2), *b = join(&fx, 1, 2);
  ftc__view_t *v = view_after(a, 0);
  assert_int_equal(v->epoch, 42);
  assert_int_equal(v->members[0].member_id, 1001);
  assert_int_equal(v->members[1].member_id, 1002);
  assert_int_equal(v->members[1].joined_epoch, 42);
  ftc__view_free(v);
  ftc__member_close(a);
  ftc__member_close(b);
  ftc__coord_destroy(fx.co);
}

static void wrong_token_is_refused_with_auth_and_others_are_served(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 0, &fx);
  ftc__member_cfg_t c = member_cfg(&fx, 0, 2);
  c.token = "not-the-token";
  ftc__member_t *bad = NULL;
  int64_t t0 = ftc__now_ns();
  assert_int_equal(ftc__member_open(&c, &bad), FTC_ERR_AUTH);
  assert_true(ftc__now_ns() - t0 < 5000000000LL); /* refused at once, not at the timeout */
  assert_null(bad);
  assert_non_null(strstr(ftc_last_error(), "token"));
  assert_null(strstr(ftc_last_error(), "not-the-token")); /* never echo secrets */
  ftc__member_t *a = join(&fx, 0, 2), *b = join(&fx, 1, 2);
  ftc__view_t *va = view_after(a, 0), *vb = view_after(b, 0);
  assert_int_equal(va->epoch, 1);
  assert_int_equal(vb->size, 2);
  ftc__coord_stats_t st;
  ftc__coord_stats(fx.co, &st);
  assert_int_equal(st.refused, 1);
  ftc__view_free(va);
  ftc__view_free(vb);
  ftc__member_close(a);
  ftc__member_close(b);
  ftc__coord_destroy(fx.co);
}

static void wrong_job_and_bad_slot_are_refused_as_config_errors(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 0, &fx);
  ftc__member_cfg_t c = member_cfg(&fx, 0, 2);
  c.job = "otherjob";
  ftc__member_t *m = NULL;
  assert_int_equal(ftc__member_open(&c, &m), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "otherjob"));
  c = member_cfg(&fx, 2, 2);
  assert_int_equal(ftc__member_open(&c, &m), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "slot 2"));
  ftc__coord_destroy(fx.co);
}

static void duplicate_of_a_live_slot_is_refused(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 0, &fx);
  ftc__member_t *a = join(&fx, 0, 2);
  ftc__member_cfg_t c = member_cfg(&fx, 0, 2);
  ftc__member_t *dup = NULL;
  assert_int_equal(ftc__member_open(&c, &dup), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "already has a live member"));
  /* The first holder of the slot is untouched and the job still forms. */
  ftc__member_t *b = join(&fx, 1, 2);
  ftc__view_t *v = view_after(a, 0);
  assert_int_equal(v->size, 2);
  ftc__view_free(v);
  ftc__member_close(a);
  ftc__member_close(b);
  ftc__coord_destroy(fx.co);
}

/* Two ranks with data-plane protocol `dp` form epoch 1; slot 1 leaves, so a
 * replacement for it can be tried against slot 0 still running. */
static ftc__member_t *running_rank_with_dataplane(fixture_t *fx, int dp) {
  start_coord(2, 1, fx);
  ftc__member_t *m[2];
  for (int s = 0; s < 2; s++) {
    ftc__member_cfg_t c = member_cfg(fx, s, 2);
    c.dataplane = dp;
    m[s] = NULL;
    ftc_status_t st = ftc__member_open(&c, &m[s]);
    if (st != FTC_OK) fail_msg("slot %d: %s: %s", s, ftc_strerror(st), ftc_last_error());
  }
  ftc__view_free(view_after(m[0], 0));
  ftc__member_close(m[1]);
  expect_epoch(m[0], 1, 2, 1, -1);
  return m[0];
}

/* A replacement for slot 1 with data-plane protocol `dp`: refused with
 * dataplane_mismatch (FTC_ERR_PROTOCOL) at once, its message saying each. */
static void expect_dataplane_refusal(const fixture_t *fx, int dp, const char *mine,
                                     const char *theirs) {
  ftc__member_cfg_t c = member_cfg(fx, 1, 2);
  c.joiner = 1;
  c.dataplane = dp;
  ftc__member_t *j = NULL;
  int64_t t0 = ftc__now_ns();
  ftc_status_t st = ftc__member_open(&c, &j);
  if (st != FTC_ERR_PROTOCOL)
    fail_msg("expected a protocol error, got %s: %s", ftc_strerror(st), ftc_last_error());
  assert_null(j);
  assert_true(ftc__now_ns() - t0 < (int64_t)WAIT_MS * 1000000 / 2); /* not at the timeout */
  const char *e = ftc_last_error();
  static const char *const says[] = {"dataplane_mismatch", "run the same ftcomm version"};
  for (int i = 0; i < 2; i++)
    if (!strstr(e, says[i])) fail_msg("\"%s\" does not say \"%s\"", e, says[i]);
  char want[128];
  snprintf(want, sizeof(want), "this rank's data plane speaks %s", mine);
  if (!strstr(e, want)) fail_msg("\"%s\" does not say \"%s\"", e, want);
  snprintf(want, sizeof(want), ") speak %s", theirs);
  if (!strstr(e, "running ranks (slot 0, member ") || !strstr(e, want))
    fail_msg("\"%s\" does not say \"running ranks (slot 0, member ...%s\"", e, want);
}

/* The replacement for slot 1 with data-plane protocol `dp` is admitted:
 * epoch 3 of both ranks. */
static void expect_dataplane_admitted(const fixture_t *fx, ftc__member_t *m0, int dp) {
  ftc__member_cfg_t c = member_cfg(fx, 1, 2);
  c.joiner = 1;
  c.dataplane = dp;
  ftc__member_t *j = NULL;
  ftc_status_t st = ftc__member_open(&c, &j);
  if (st != FTC_OK) fail_msg("%s: %s", ftc_strerror(st), ftc_last_error());
  expect_epoch(j, 0, 3, 2, -1);
  ftc__view_t *v = view_after(m0, 2);
  assert_int_equal(v->epoch, 3);
  ftc__view_free(v);
  ftc__member_close(j);
}

/* Who connects to a joiner changed with data-plane protocol 4: a joiner whose
 * protocol differs from the running ranks' would wait for them while they
 * wait for it. The coordinator refuses it at its hello instead, and the
 * running rank stays at its epoch; one with the same protocol is admitted. */
static void joiner_with_another_dataplane_protocol_is_refused(void **state) {
  (void)state;
  fixture_t fx;
  ftc__member_t *m0 = running_rank_with_dataplane(&fx, 4);
  expect_dataplane_refusal(&fx, 3, "protocol 3", "protocol 4");
  /* An older rank says nothing: refused too. */
  expect_dataplane_refusal(&fx, 0, "protocol 3 or older", "protocol 4");
  /* The same over a raw session, as an older ftcomm's hello reads. */
  int fd = raw_ws_connect(ftc__coord_port(fx.co));
  assert_true(fd >= 0);
  char hello[512];
  snprintf(hello, sizeof(hello),
           "{\"v\":1,\"type\":\"hello\",\"job\":\"testjob\",\"token\":\"%s\",\"slot\":1,"
           "\"world_size\":2,\"min_size\":1,\"addr\":\"127.0.0.1:50001\",\"joiner\":true}",
           TOKEN);
  assert_int_equal(raw_ws_send_text(fd, hello), 0);
  char *text = NULL;
  assert_int_equal(raw_ws_recv(fd, &text, WAIT_MS), WS_TEXT);
  if (!strstr(text, "\"code\":\"dataplane_mismatch\"") || !strstr(text, "speak protocol 4"))
    fail_msg("expected a dataplane_mismatch refusal, got %s", text);
  free(text);
  assert_true(raw_ws_closed(fd, WAIT_MS));
  close(fd);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.refused == 3);
  assert_int_equal(st.epoch, 2);
  expect_dataplane_admitted(&fx, m0, 4);
  ftc__member_close(m0);
  ftc__coord_destroy(fx.co);
}

/* The reverse mix: ranks of an older ftcomm run (no "dataplane" in their
 * hellos) and a newer replacement comes: refused; an older one is admitted. */
static void newer_joiner_among_older_ranks_is_refused(void **state) {
  (void)state;
  fixture_t fx;
  ftc__member_t *m0 = running_rank_with_dataplane(&fx, 0);
  expect_dataplane_refusal(&fx, 4, "protocol 4", "protocol 3 or older");
  expect_dataplane_admitted(&fx, m0, 0);
  ftc__member_close(m0);
  ftc__coord_destroy(fx.co);
}

static void unreachable_coordinator_fails_with_coordinator_error_within_timeout(void **state) {
  (void)state;
  fixture_t fx;
  ftc__member_cfg_t c = unreachable_cfg(&fx, 700);
  ftc__member_t *m = NULL;
  int64_t t0 = ftc__now_ns();
  assert_int_equal(ftc__member_open(&c, &m), FTC_ERR_COORDINATOR);
  int64_t ms = (ftc__now_ns() - t0) / 1000000;
  assert_null(m);
  assert_true(ms >= 650);  /* it retried until the timeout ... */
  assert_true(ms < 3000);  /* ... and not much longer */
  assert_non_null(strstr(ftc_last_error(), fx.addr));
}

static void bad_coordinator_address_is_a_config_error(void **state) {
  (void)state;
  fixture_t fx;
  snprintf(fx.addr, sizeof(fx.addr), "no-port-here");
  ftc__member_cfg_t c = member_cfg(&fx, 0, 1);
  ftc__member_t *m = NULL;
  assert_int_equal(ftc__member_open(&c, &m), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_COORDINATOR"));
}

/* A rank that joins later than the coordinator starts is still admitted:
 * the client retries until the coordinator listens. */
static void late_coordinator_is_reached_by_retrying(void **state) {
  (void)state;
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .job = "testjob", .token = TOKEN,
                          .world_size = 1, .heartbeat_ms = 100};
  int port = test_closed_port();
  cfg.port = port;
  fixture_t fx;
  snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", port);
  ftc__member_cfg_t c = member_cfg(&fx, 0, 1);
  c.connect_timeout_ms = 8000;
  /* Start the coordinator 300 ms after the rank starts trying. */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    usleep(300000);
    ftc__coord_t *co;
    if (ftc__coord_create(&cfg, &co) != FTC_OK) _exit(2);
    sleep(3);
    ftc__coord_destroy(co);
    _exit(0);
  }
  ftc__member_t *m = NULL;
  ftc_status_t st = ftc__member_open(&c, &m);
  if (st != FTC_OK) fail_msg("%s: %s", ftc_strerror(st), ftc_last_error());
  ftc__view_t *v = view_after(m, 0);
  assert_int_equal(v->epoch, 1);
  ftc__view_free(v);
  ftc__member_close(m);
  int status;
  waitpid(pid, &status, 0);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void lost_member_gives_next_epoch_without_it(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(3, 2, &fx);
  ftc__member_t *m[3];
  for (int s = 0; s < 3; s++) m[s] = join(&fx, s, 3);
  ftc__view_t *v = view_after(m[0], 0);
  assert_int_equal(v->epoch, 1);
  uint64_t id1 = v->members[1].member_id, id2 = v->members[2].member_id;
  ftc__view_free(v);
  /* Slot 1 disappears without a leave (its coordinator session is cut). */
  assert_int_equal(ftc__coord_slot_lost(fx.co, 1, "pod deleted"), FTC_OK);
  v = view_after(m[0], 1);
  assert_int_equal(v->epoch, 2);
  assert_int_equal(ftc__member_left_cleanly(m[0], id1), 0); /* lost, not left */
  assert_int_equal(v->size, 2);
  assert_int_equal(v->members[0].slot, 0);
  assert_int_equal(v->members[1].slot, 2);
  assert_int_equal(v->members[1].rank, 1);
  assert_int_equal(v->members[1].member_id, id2);
  assert_int_equal(v->members[1].joined_epoch, 1);
  ftc__view_free(v);
  v = view_after(m[2], 1);
  assert_int_equal(v->my_rank, 1);
  ftc__view_free(v);
  /* The lost member learns it was dropped. */
  ftc__view_t *none = NULL;
  assert_int_equal(ftc__member_wait_view(m[1], 1, WAIT_MS, &none), FTC_ERR_COORDINATOR);
  assert_non_null(strstr(ftc_last_error(), "pod deleted"));
  assert_int_equal(ftc__member_error(m[1]), FTC_ERR_COORDINATOR);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.lost == 1 && st.epoch == 2);
  for (int s = 0; s < 3; s++) ftc__member_close(m[s]);
  ftc__coord_destroy(fx.co);
}

/* "fresh" in views: every member until it says it completed a step boundary
 * (heartbeat "ready"), then never again; a joiner is fresh. */
static void members_are_fresh_until_they_report_ready(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(3, 2, &fx);
  ftc__member_t *m[3];
  for (int s = 0; s < 3; s++) m[s] = join(&fx, s, 3);
  ftc__view_t *v = view_after(m[0], 0);
  for (int r = 0; r < 3; r++) assert_int_equal(v->members[r].state, FTC__STATE_FRESH);
  ftc__view_free(v);
  ftc__member_set_ready(m[0], 1);
  ftc__member_set_ready(m[2], 1);
  ftc__member_set_ready(m[2], 5); /* only the first counts */
  usleep(300 * 1000); /* the ready heartbeats reach the coordinator (localhost) */
  ftc__member_close(m[1]);
  v = view_after(m[0], 1);
  assert_int_equal(v->epoch, 2);
  assert_int_equal(v->size, 2);
  assert_int_equal(v->members[0].state, FTC__STATE_HELD);
  assert_int_equal(v->members[1].state, FTC__STATE_HELD);
  ftc__view_free(v);
  ftc__member_cfg_t c = member_cfg(&fx, 1, 3);
  c.joiner = 1;
  ftc__member_t *j = NULL;
  assert_int_equal(ftc__member_open(&c, &j), FTC_OK);
  ftc__view_t *vj = view_after(j, 0);
  assert_int_equal(vj->epoch, 3);
  assert_int_equal(vj->members[0].state, FTC__STATE_HELD);
  assert_int_equal(vj->members[1].state, FTC__STATE_FRESH);
  assert_int_equal(vj->members[2].state, FTC__STATE_HELD);
  ftc__view_free(vj);
  ftc__member_close(j);
  ftc__member_close(m[0]);
  ftc__member_close(m[2]);
  ftc__coord_destroy(fx.co);
}

/* A standby session (ftc_comm_create_begin): its hello is out when this
 * returns; the membership thread reads the welcome and heartbeats. */
static ftc__member_t *standby(const fixture_t *fx, int slot, int world, int joiner) {
  ftc__member_cfg_t c = member_cfg(fx, slot, world);
  c.standby = 1;
  c.joiner = joiner;
  ftc__member_t *m = NULL;
  ftc_status_t st = ftc__member_start(&c, &m);
  if (st != FTC_OK) fail_msg("slot %d: %s: %s", slot, ftc_strerror(st), ftc_last_error());
  return m;
}

/* ftc_comm_create_finish's half: join, then wait for the welcome. */
static void join_now(ftc__member_t **m) {
  ftc__member_join(*m);
  ftc_status_t st = ftc__member_finish(m);
  if (st != FTC_OK) fail_msg("join: %s: %s", ftc_strerror(st), ftc_last_error());
}

static void standby_member_is_admitted_only_after_its_join(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 1, &fx);
  ftc__member_t *a = join(&fx, 0, 2);
  ftc__member_t *b = standby(&fx, 1, 2, 0);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.standby == 1 && st.pending == 1);
  /* Registered, but not counted for the first epoch. */
  ftc__view_t *none = NULL;
  assert_int_equal(ftc__member_wait_view(a, 0, 300, &none), FTC_ERR_TIMEOUT);
  assert_int_equal(ftc__member_error(b), FTC_OK);
  /* Its slot is taken all the same. */
  ftc__member_cfg_t c = member_cfg(&fx, 1, 2);
  ftc__member_t *dup = NULL;
  assert_int_equal(ftc__member_open(&c, &dup), FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "already has a live member"));
  join_now(&b);
  ftc__view_t *vb = view_after(b, 0);
  assert_int_equal(vb->epoch, 1);
  assert_int_equal(vb->size, 2);
  assert_int_equal(vb->my_rank, 1);
  ftc__view_t *va = view_after(a, 0);
  assert_int_equal(va->epoch, 1);
  ftc__view_free(va);
  ftc__view_free(vb);
  WAIT_STATS(fx.co, st, st.standby == 0 && st.pending == 0 && st.epoch_size == 2);
  /* A replacement for slot 1 waits as standby while slot 0 trains on. */
  ftc__member_close(b);
  expect_epoch(a, 1, 2, 1, -1);
  ftc__member_t *j = standby(&fx, 1, 2, 1);
  WAIT_STATS(fx.co, st, st.standby == 1);
  usleep(300000); /* three heartbeat intervals: it stays, and is not admitted */
  assert_int_equal(ftc__member_wait_view(a, 2, 1, &none), FTC_ERR_TIMEOUT);
  assert_int_equal(ftc__member_error(j), FTC_OK);
  ftc__coord_stats(fx.co, &st);
  assert_int_equal(st.standby, 1);
  assert_int_equal(st.lost, 0);
  join_now(&j);
  ftc__view_t *vj = view_after(j, 0);
  assert_int_equal(vj->epoch, 3);
  assert_int_equal(vj->size, 2);
  assert_int_equal(vj->my_rank, 1);
  assert_int_equal(vj->members[1].joined_epoch, 3);
  va = view_after(a, 2);
  assert_int_equal(va->epoch, 3);
  assert_int_equal(va->members[1].member_id, vj->my_member_id);
  ftc__view_free(va);
  ftc__view_free(vj);
  ftc__member_close(j);
  ftc__member_close(a);
  ftc__coord_destroy(fx.co);
}

/* The join may come before the welcome (the application was quick): it
 * goes out once the welcome says standby. Repeated, so that both orders
 * of the join and the welcome are met. */
static void join_before_the_welcome_is_sent_after_it(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 1, &fx);
  ftc__member_t *a = join(&fx, 0, 2);
  ftc__member_t *b = standby(&fx, 1, 2, 0);
  join_now(&b);
  ftc__view_t *v = view_after(b, 0);
  assert_int_equal(v->epoch, 1);
  ftc__view_free(v);
  for (uint64_t e = 1; e < 6; e += 2) {
    ftc__member_close(b);
    v = view_after(a, e);
    assert_int_equal(v->size, 1);
    ftc__view_free(v);
    b = standby(&fx, 1, 2, 1);
    join_now(&b);
    expect_epoch(b, 0, e + 2, 2, -1);
  }
  ftc__member_close(b);
  ftc__member_close(a);
  ftc__coord_destroy(fx.co);
}

static void all_saw_epoch_1(ftc__member_t **m, int n);

/* A job of 3 whose ranks speak data-plane protocol dp, shrunk to slots 0
 * and 1 (slot 2 left), with a standby replacement for slot 2 registered. */
static void shrunk_job_with_a_standby(fixture_t *fx, int dp, ftc__member_t **m,
                                      ftc__member_t **j) {
  start_coord(3, 2, fx);
  for (int s = 0; s < 3; s++) {
    ftc__member_cfg_t c = member_cfg(fx, s, 3);
    c.dataplane = dp;
    m[s] = NULL;
    ftc_status_t st = ftc__member_open(&c, &m[s]);
    if (st != FTC_OK) fail_msg("slot %d: %s: %s", s, ftc_strerror(st), ftc_last_error());
  }
  all_saw_epoch_1(m, 3);
  ftc__member_close(m[2]);
  for (int s = 0; s < 2; s++) {
    ftc__view_t *v = view_after(m[s], 1);
    assert_int_equal(v->epoch, 2);
    ftc__view_free(v);
  }
  ftc__member_cfg_t c = member_cfg(fx, 2, 3);
  c.standby = 1;
  c.joiner = 1;
  c.dataplane = dp;
  *j = NULL;
  assert_int_equal(ftc__member_start(&c, j), FTC_OK);
  ftc__coord_stats_t st;
  WAIT_STATS(fx->co, st, st.standby == 1);
}

/* The running ranks hear the epoch a standby member's join would form (the
 * coordinator's prospect), and the join forms exactly that epoch: their
 * data planes connect to it ahead of the join. Not an epoch: nobody moves. */
static void running_ranks_hear_the_prospect_and_the_join_forms_it(void **state) {
  (void)state;
  fixture_t fx;
  ftc__member_t *m[3], *j;
  shrunk_job_with_a_standby(&fx, FTC__PROTO_DATAPLANE_PROSPECT, m, &j);
  ftc__view_t *p[2];
  for (int s = 0; s < 2; s++) {
    int64_t dl = ftc__deadline_ns(WAIT_MS);
    while (ftc__member_prospect_seq(m[s]) == 0 && ftc__now_ns() < dl) usleep(2000);
    assert_int_equal(ftc__member_prospect_seq(m[s]), 1);
    assert_int_equal(ftc__member_prospect(m[s], &p[s]), 1);
    assert_int_equal(p[s]->epoch, 3);
    assert_int_equal(p[s]->size, 3);
    assert_int_equal(p[s]->my_rank, s);
    assert_int_equal(p[s]->members[2].slot, 2);
    assert_int_equal(p[s]->members[2].joined_epoch, 3);
    assert_int_equal(p[s]->members[0].joined_epoch, 1);
  }
  /* Nobody moves to it. */
  assert_int_equal(ftc__member_latest_epoch(m[0]), 2);
  ftc__view_t *none = NULL;
  assert_int_equal(ftc__member_wait_view(m[1], 2, 200, &none), FTC_ERR_TIMEOUT);
  join_now(&j);
  ftc__view_t *vj = view_after(j, 0);
  for (int s = 0; s < 2; s++) {
    ftc__view_t *v = view_after(m[s], 2);
    assert_int_equal(v->epoch, p[s]->epoch);
    assert_int_equal(v->size, p[s]->size);
    for (int r = 0; r < v->size; r++) {
      assert_int_equal(v->members[r].member_id, p[s]->members[r].member_id);
      assert_int_equal(v->members[r].slot, p[s]->members[r].slot);
      assert_int_equal(v->members[r].joined_epoch, p[s]->members[r].joined_epoch);
      assert_string_equal(v->members[r].addr, p[s]->members[r].addr);
    }
    assert_int_equal(v->members[2].member_id, vj->my_member_id);
    ftc__view_free(v);
    ftc__view_free(p[s]);
  }
  ftc__view_free(vj);
  /* No standby is left: no prospect after the epoch it formed. */
  usleep(300000);
  assert_int_equal(ftc__member_prospect_seq(m[0]), 1);
  ftc__member_close(j);
  ftc__member_close(m[0]);
  ftc__member_close(m[1]);
  ftc__coord_destroy(fx.co);
}

/* Ranks of an older data plane (protocol 5) would take a prospect for an
 * unknown message: they are sent none. */
static void older_ranks_hear_no_prospect(void **state) {
  (void)state;
  fixture_t fx;
  ftc__member_t *m[3], *j;
  shrunk_job_with_a_standby(&fx, FTC__PROTO_DATAPLANE_PROSPECT - 1, m, &j);
  usleep(300000);
  assert_int_equal(ftc__member_prospect_seq(m[0]), 0);
  assert_int_equal(ftc__member_prospect_seq(m[1]), 0);
  assert_int_equal(ftc__member_error(m[0]), FTC_OK);
  join_now(&j);
  ftc__view_t *v = view_after(m[0], 2);
  assert_int_equal(v->epoch, 3);
  ftc__view_free(v);
  ftc__member_close(j);
  ftc__member_close(m[0]);
  ftc__member_close(m[1]);
  ftc__coord_destroy(fx.co);
}

static void standby_that_leaves_frees_its_slot(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 1, &fx);
  ftc__member_t *a = join(&fx, 0, 2);
  ftc__member_t *b = standby(&fx, 1, 2, 0);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.standby == 1);
  ftc__member_close(b); /* ftc_comm_create_cancel */
  WAIT_STATS(fx.co, st, st.standby == 0 && st.left == 1);
  b = join(&fx, 1, 2);
  expect_epoch(a, 0, 1, 2, -1);
  ftc__member_close(b);
  ftc__member_close(a);
  ftc__coord_destroy(fx.co);
}

/* ftc_comm_create_cancel right after begin, before the welcome: the close
 * waits for it and leaves, so the slot is freed as left, not lost. */
static void standby_closed_before_its_welcome_leaves(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 1, &fx);
  for (int i = 0; i < 3; i++) ftc__member_close(standby(&fx, 1, 2, 0));
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.left == 3 && st.connected == 0);
  assert_int_equal(st.lost, 0);
  assert_int_equal(st.standby, 0);
  ftc__coord_destroy(fx.co);
}

static void leave_then_joiner_gives_two_new_epochs_never_reusing_numbers(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(3, 2, &fx);
  ftc__member_t *m[3];
  for (int s = 0; s < 3; s++) m[s] = join(&fx, s, 3);
  ftc__view_t *v = view_after(m[0], 0);
  uint64_t old_id1 = v->members[1].member_id;
  ftc__view_free(v);
  ftc__member_close(m[1]); /* a clean leave */
  v = view_after(m[0], 1);
  assert_int_equal(v->epoch, 2);
  assert_int_equal(v->size, 2);
  /* The view says so, so that its peers do not take it for a failure. */
  assert_int_equal(ftc__member_left_cleanly(m[0], old_id1), 1);
  assert_int_equal(ftc__member_left_cleanly(m[0], v->members[0].member_id), 0);
  ftc__view_free(v);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.left == 1);
  assert_int_equal(st.lost, 0);
  /* A replacement for slot 1 is admitted at epoch 3 with a new member id. */
  ftc__member_cfg_t c = member_cfg(&fx, 1, 3);
  c.joiner = 1;
  ftc__member_t *j = NULL;
  assert_int_equal(ftc__member_open(&c, &j), FTC_OK);
  ftc__view_t *vj = view_after(j, 0);
  assert_int_equal(vj->epoch, 3);
  assert_int_equal(vj->size, 3);
  assert_int_equal(vj->my_rank, 1);
  assert_true(vj->my_member_id != old_id1);
  assert_int_equal(vj->members[1].joined_epoch, 3);
  assert_int_equal(vj->members[0].joined_epoch, 1);
  v = view_after(m[2], 2);
  assert_int_equal(v->epoch, 3);
  assert_int_equal(v->members[1].member_id, vj->my_member_id);
  ftc__view_free(v);
  ftc__view_free(vj);
  ftc__member_close(j);
  ftc__member_close(m[0]);
  ftc__member_close(m[2]);
  ftc__coord_destroy(fx.co);
}

static void reported_rank_that_keeps_heartbeating_is_kept_in_a_new_epoch(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(3, 2, &fx);
  ftc__member_t *m[3];
  for (int s = 0; s < 3; s++) m[s] = join(&fx, s, 3);
  ftc__view_t *v = view_after(m[0], 0);
  ftc__view_free(v);
  int failed[] = {2};
  /* A report about an older epoch is not even sent (a_report_about_a_replaced_epoch_...) ... */
  assert_int_equal(ftc__member_report_failure(m[0], 0, failed, 1, FTC_ERR_PEER_LOST), FTC_OK);
  ftc__view_t *none = NULL;
  assert_int_equal(ftc__member_wait_view(m[1], 1, 300, &none), FTC_ERR_TIMEOUT);
  /* ... one about the current epoch is evidence, not a verdict: rank 2
   * still heartbeats, so it stays, and the broken epoch is replaced by one
   * with the same members. */
  assert_int_equal(ftc__member_report_failure(m[0], 1, failed, 1, FTC_ERR_PEER_LOST), FTC_OK);
  expect_epoch(m[1], 1, 2, 3, 1);
  v = view_after(m[2], 1);
  assert_int_equal(v->epoch, 2);
  assert_int_equal(v->my_rank, 2);
  ftc__view_free(v);
  for (int s = 0; s < 3; s++) ftc__member_close(m[s]);
  ftc__coord_destroy(fx.co);
}

/* A member the others cannot reach over the data plane while its session
 * heartbeats (a partition the coordinator does not see): the probe finds
 * it and it is dropped, with a refusal saying why; the others form the next
 * epoch without it. Slot 2's data address is a port nobody listens on. */
static void member_cut_from_its_peers_is_dropped_after_the_probe(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(3, 2, &fx);
  ftc__member_t *m[3];
  for (int s = 0; s < 2; s++) m[s] = join(&fx, s, 3);
  ftc__member_cfg_t c = member_cfg(&fx, 2, 3);
  c.data_addr = "127.0.0.1:1"; /* (nothing listens there: a refusal) */
  assert_int_equal(ftc__member_open(&c, &m[2]), FTC_OK);
  all_saw_epoch_1(m, 3);
  int failed[] = {2};
  assert_int_equal(ftc__member_report_failure(m[0], 1, failed, 1, FTC_ERR_TIMEOUT), FTC_OK);
  expect_epoch(m[1], 1, 2, 2, 1);
  ftc__view_t *none = NULL;
  assert_int_equal(ftc__member_wait_view(m[2], 1, WAIT_MS, &none), FTC_ERR_COORDINATOR);
  assert_non_null(strstr(ftc_last_error(), "cannot reach or be reached by 2 members"));
  for (int s = 0; s < 3; s++) ftc__member_close(m[s]);
  ftc__coord_destroy(fx.co);
}

/* No member reaches any other over the data plane (no data plane is up):
 * no partition cuts some members off from the others, so the probe drops
 * nobody and the same three form the next epoch (docs/recovery.md, "Network
 * faults"). Every data address is a port nobody listens on. */
static void probe_drops_nobody_when_no_member_reaches_any(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(3, 2, &fx);
  ftc__member_t *m[3];
  static const char *dead[] = {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"};
  for (int s = 0; s < 3; s++) {
    ftc__member_cfg_t c = member_cfg(&fx, s, 3);
    c.data_addr = dead[s];
    assert_int_equal(ftc__member_open(&c, &m[s]), FTC_OK);
  }
  all_saw_epoch_1(m, 3);
  int failed[] = {2};
  assert_int_equal(ftc__member_report_failure(m[0], 1, failed, 1, FTC_ERR_TIMEOUT), FTC_OK);
  for (int s = 0; s < 3; s++) expect_epoch(m[s], 1, 2, 3, s);
  for (int s = 0; s < 3; s++) ftc__member_close(m[s]);
  ftc__coord_destroy(fx.co);
}

static void reported_rank_that_is_silent_is_excluded_at_once(void **state) {
  (void)state;
  fixture_t fx;
  /* The heartbeat timeout (5 s) is far away: the report decides. */
  start_coord(3, 2, &fx);
  ftc__member_t *m[2];
  for (int s = 0; s < 2; s++) m[s] = join(&fx, s, 3);
  /* Slot 2 says hello over a raw connection and then never speaks again. */
  int fd = raw_ws_connect(ftc__coord_port(fx.co));
  assert_true(fd >= 0);
  char hello[512];
  snprintf(hello, sizeof(hello),
           "{\"v\":1,\"type\":\"hello\",\"job\":\"testjob\",\"token\":\"%s\",\"slot\":2,"
           "\"world_size\":3,\"min_size\":2,\"addr\":\"127.0.0.1:1\"}", TOKEN);
  assert_int_equal(raw_ws_send_text(fd, hello), 0);
  expect_epoch(m[0], 0, 1, 3, -1);
  /* Two heartbeat intervals (100 ms) and the slack pass in silence. */
  struct timespec ts = {0, 500 * 1000000L};
  nanosleep(&ts, NULL);
  int failed[] = {2};
  int64_t t0 = ftc__now_ns();
  assert_int_equal(ftc__member_report_failure(m[0], 1, failed, 1, FTC_ERR_TIMEOUT), FTC_OK);
  expect_epoch(m[1], 1, 2, 2, 1);
  assert_true((ftc__now_ns() - t0) / 1000000 < 4000); /* not the heartbeat timeout */
  assert_true(raw_ws_closed(fd, WAIT_MS));
  close(fd);
  for (int s = 0; s < 2; s++) ftc__member_close(m[s]);
  ftc__coord_destroy(fx.co);
}

static void below_min_size_waits_for_a_joiner(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 2, &fx);
  ftc__member_t *a = join(&fx, 0, 2), *b = join(&fx, 1, 2);
  ftc__view_t *v = view_after(a, 0);
  ftc__view_free(v);
  ftc__member_close(b);
  ftc__view_t *none = NULL;
  assert_int_equal(ftc__member_wait_view(a, 1, 300, &none), FTC_ERR_TIMEOUT);
  ftc__member_cfg_t c = member_cfg(&fx, 1, 2);
  c.joiner = 1;
  ftc__member_t *j = NULL;
  assert_int_equal(ftc__member_open(&c, &j), FTC_OK);
  expect_epoch(a, 1, 2, 2, -1);
  ftc__member_close(j);
  ftc__member_close(a);
  ftc__coord_destroy(fx.co);
}

static void silent_member_is_dropped_after_the_heartbeat_timeout(void **state) {
  (void)state;
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .job = "testjob", .token = TOKEN,
                          .world_size = 2, .min_size = 1, .heartbeat_ms = 50,
                          .heartbeat_timeout_ms = 400};
  fixture_t fx;
  assert_int_equal(ftc__coord_create(&cfg, &fx.co), FTC_OK);
  snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", ftc__coord_port(fx.co));
  ftc__member_t *a = join(&fx, 0, 2);
  /* Slot 1 says hello over a raw connection and then never speaks again. */
  int fd = raw_ws_connect(ftc__coord_port(fx.co));
  assert_true(fd >= 0);
  char hello[512];
  snprintf(hello, sizeof(hello),
           "{\"v\":1,\"type\":\"hello\",\"job\":\"testjob\",\"token\":\"%s\",\"slot\":1,"
           "\"world_size\":2,\"min_size\":1,\"addr\":\"127.0.0.1:1\"}", TOKEN);
  assert_int_equal(raw_ws_send_text(fd, hello), 0);
  ftc__view_t *v = view_after(a, 0);
  assert_int_equal(v->epoch, 1);
  ftc__view_free(v);
  /* The live member keeps heartbeating; the silent one is dropped. */
  expect_epoch(a, 1, 2, 1, 0);
  assert_true(raw_ws_closed(fd, WAIT_MS));
  close(fd);
  ftc__member_close(a);
  ftc__coord_destroy(fx.co);
}

static void dump_request_reaches_every_rank_and_fragmented_uploads_are_stored(void **state) {
  (void)state;
  char dir[] = "/tmp/ftc-coord-dumps-XXXXXX";
  assert_non_null(mkdtemp(dir));
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .job = "testjob", .token = TOKEN,
                          .world_size = 2, .heartbeat_ms = 100, .dump_dir = dir};
  fixture_t fx;
  assert_int_equal(ftc__coord_create(&cfg, &fx.co), FTC_OK);
  snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", ftc__coord_port(fx.co));
  ftc__member_t *m[2] = {join(&fx, 0, 2), join(&fx, 1, 2)};
  ftc__view_t *v = view_after(m[0], 0);
  ftc__view_free(v);
  char incident[64];
  assert_int_equal(ftc__member_take_dump_request(m[0], incident, sizeof(incident)), 0);
  assert_int_equal(ftc__coord_request_dumps(fx.co, "hang-1", "rank 1 is stuck"), FTC_OK);
  assert_int_equal(ftc__coord_request_dumps(fx.co, "../escape", "x"), FTC_ERR_INVALID_ARGUMENT);
  /* A dump of several fragments, with multi-byte UTF-8 characters across the
   * fragment boundaries and characters JSON must escape. */
  size_t len = 3 * 32 * 1024 + 1000;
  char *dump = malloc(len + 1);
  for (size_t i = 0; i < len; i++) dump[i] = "{\"\\\n abc"[i % 8];
  for (size_t i = 32 * 1024 - 2; i + 3 < len; i += 32 * 1024) memcpy(dump + i, "\xe2\x82\xac", 3);
  dump[len] = '\0';
  for (int r = 0; r < 2; r++) {
    int64_t dl = ftc__deadline_ns(WAIT_MS);
    while (!ftc__member_take_dump_request(m[r], incident, sizeof(incident))) {
      if (ftc__now_ns() > dl) fail_msg("rank %d got no dump request", r);
      usleep(10000);
    }
    assert_string_equal(incident, "hang-1");
    assert_int_equal(ftc__member_upload_dump(m[r], incident, r, dump, r ? 5 : len), FTC_OK);
  }
  for (int r = 0; r < 2; r++) {
    char path[256];
    snprintf(path, sizeof(path), "%s/hang-1/rank-%d.json", dir, r);
    size_t want = r ? 5 : len;
    int64_t dl = ftc__deadline_ns(WAIT_MS);
    FILE *f;
    while (!(f = fopen(path, "rb"))) {
      if (ftc__now_ns() > dl) fail_msg("no %s", path);
      usleep(10000);
    }
    char *got = malloc(want + 16);
    size_t n = fread(got, 1, want + 16, f);
    fclose(f);
    assert_int_equal(n, want);
    assert_memory_equal(got, dump, want);
    free(got);
    unlink(path);
  }
  /* Text that is not UTF-8, or holds a NUL, cannot be uploaded (and the
   * session survives: the coordinator would refuse it). */
  assert_int_equal(ftc__member_upload_dump(m[0], "hang-1", 0, "\xff\xfe", 2),
                   FTC_ERR_INVALID_ARGUMENT);
  assert_int_equal(ftc__member_upload_dump(m[0], "hang-1", 0, "a\0b", 3),
                   FTC_ERR_INVALID_ARGUMENT);
  assert_int_equal(ftc__member_error(m[0]), FTC_OK);
  free(dump);
  char sub[128];
  snprintf(sub, sizeof(sub), "%s/hang-1", dir);
  rmdir(sub);
  rmdir(dir);
  ftc__member_close(m[0]);
  ftc__member_close(m[1]);
  ftc__coord_destroy(fx.co);
}

typedef struct joiner_arg {
  const fixture_t *fx;
  int slot, world;
  ftc__member_t *m;
  ftc__view_t *v;
  ftc_status_t st;
} joiner_arg_t;

static void *join_thread(void *p) {
  joiner_arg_t *a = p;
  ftc__member_cfg_t c = member_cfg(a->fx, a->slot, a->world);
  a->st = ftc__member_open(&c, &a->m);
  if (a->st == FTC_OK) a->st = ftc__member_wait_view(a->m, 0, WAIT_MS, &a->v);
  return NULL;
}

static void many_ranks_joining_at_once_agree_on_epoch_1(void **state) {
  (void)state;
  enum { N = 32 };
  fixture_t fx;
  start_coord(N, 0, &fx);
  joiner_arg_t a[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    a[i] = (joiner_arg_t){.fx = &fx, .slot = i, .world = N};
    assert_int_equal(pthread_create(&t[i], NULL, join_thread, &a[i]), 0);
  }
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < N; i++) {
    if (a[i].st != FTC_OK) fail_msg("slot %d: %s", i, ftc_strerror(a[i].st));
    assert_int_equal(a[i].v->epoch, 1);
    assert_int_equal(a[i].v->size, N);
    assert_int_equal(a[i].v->my_rank, i);
    for (int r = 0; r < N; r++)
      assert_int_equal(a[i].v->members[r].member_id, a[0].v->members[r].member_id);
  }
  for (int i = 0; i < N; i++) {
    ftc__view_free(a[i].v);
    ftc__member_close(a[i].m);
  }
  ftc__coord_destroy(fx.co);
}

typedef struct hammer_arg {
  ftc__member_t *m;
  int which;
  int64_t until;
  int errors;
} hammer_arg_t;

static void *hammer(void *p) {
  hammer_arg_t *h = p;
  char inc[64];
  int stale[] = {0};
  while (ftc__now_ns() < h->until) {
    ftc__view_t *v = NULL;
    switch (h->which % 4) {
      case 0:
        if (ftc__member_wait_view(h->m, 0, 10, &v) != FTC_OK || v->epoch != 1) h->errors++;
        ftc__view_free(v);
        break;
      case 1:
        /* Reports about epoch 0 are stale: the coordinator ignores them. */
        if (ftc__member_report_failure(h->m, 0, stale, 1, FTC_ERR_PEER_LOST) != FTC_OK)
          h->errors++;
        break;
      case 2:
        if (ftc__member_wait_view(h->m, 1, 5, &v) != FTC_ERR_TIMEOUT) h->errors++;
        break;
      default:
        if (ftc__member_error(h->m) != FTC_OK) h->errors++;
        ftc__member_take_dump_request(h->m, inc, sizeof(inc));
        break;
    }
  }
  return NULL;
}

static void calls_from_many_threads_on_one_session_are_safe(void **state) {
  (void)state;
  enum { T = 8 };
  fixture_t fx;
  start_coord(2, 0, &fx);
  ftc__member_t *m0 = join(&fx, 0, 2), *m1 = join(&fx, 1, 2);
  ftc__view_t *v = view_after(m0, 0);
  ftc__view_free(v);
  hammer_arg_t h[T];
  pthread_t t[T];
  int64_t until = ftc__now_ns() + 400 * 1000000LL;
  for (int i = 0; i < T; i++) {
    h[i] = (hammer_arg_t){.m = m0, .which = i, .until = until};
    assert_int_equal(pthread_create(&t[i], NULL, hammer, &h[i]), 0);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(h[i].errors, 0);
  }
  /* The session is healthy and the job unchanged. */
  assert_int_equal(ftc__member_error(m0), FTC_OK);
  ftc__coord_stats_t st;
  ftc__coord_stats(fx.co, &st);
  assert_int_equal(st.epoch, 1);
  assert_int_equal(st.lost, 0);
  ftc__member_close(m0);
  ftc__member_close(m1);
  ftc__coord_destroy(fx.co);
}

static ftc__coord_t *coord_on_port(int world, int min, int port, int hb_timeout_ms) {
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .port = port, .job = "testjob",
                          .token = TOKEN, .world_size = world, .min_size = min,
                          .heartbeat_ms = 100, .heartbeat_timeout_ms = hb_timeout_ms};
  ftc__coord_t *co = NULL;
  /* The old listener's port may take a moment to be free again. */
  int64_t dl = ftc__deadline_ns(WAIT_MS);
  while (ftc__coord_create(&cfg, &co) != FTC_OK) {
    if (ftc__now_ns() > dl) fail_msg("cannot listen on port %d again: %s", port, ftc_last_error());
    usleep(50000);
  }
  return co;
}

static void all_saw_epoch_1(ftc__member_t **m, int n) {
  for (int s = 0; s < n; s++) {
    ftc__view_t *v = view_after(m[s], 0);
    assert_int_equal(v->epoch, 1);
    ftc__view_free(v);
  }
}

/* Send a raw hello and read the welcome; returns the member id given. */
static long long raw_hello(int fd, int slot, const char *extra) {
  char hello[1024];
  snprintf(hello, sizeof(hello),
           "{\"v\":1,\"type\":\"hello\",\"job\":\"testjob\",\"token\":\"%s\",\"slot\":%d,"
           "\"world_size\":2,\"min_size\":1,\"addr\":\"127.0.0.1:%d\"%s}",
           TOKEN, slot, 50000 + slot, extra);
  assert_int_equal(raw_ws_send_text(fd, hello), 0);
  char *text = NULL;
  assert_int_equal(raw_ws_recv(fd, &text, WAIT_MS), WS_TEXT);
  const char *id = strstr(text, "\"member_id\":");
  if (!strstr(text, "\"welcome\"") || !id) fail_msg("expected a welcome, got %s", text);
  long long v = atoll(id + strlen("\"member_id\":"));
  free(text);
  return v;
}

/* ---- the hello in the upgrade request, and mixed versions ---- */

/* A coordinator as before the hello in the request (legacy 1) or as now,
 * on `port` (0: any), for job `job`. */
static ftc__coord_t *coord_of(int legacy, const char *job, int world, int port) {
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .port = port, .job = job, .token = TOKEN,
                          .world_size = world, .min_size = 1, .heartbeat_ms = 100,
                          .heartbeat_timeout_ms = 5000, .no_hello_in_request = legacy};
  ftc__coord_t *co = NULL;
  int64_t dl = ftc__deadline_ns(WAIT_MS);
  while (ftc__coord_create(&cfg, &co) != FTC_OK) {
    if (ftc__now_ns() > dl) fail_msg("cannot listen on port %d: %s", port, ftc_last_error());
    usleep(50000);
  }
  return co;
}

static ftc__member_t *join_job(ftc__coord_t *co, const char *job, int slot, int world, int joiner,
                               const char *name) {
  char addr[64], data[32];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", ftc__coord_port(co));
  snprintf(data, sizeof(data), "127.0.0.1:%d", 41000 + slot);
  ftc__member_cfg_t c = {.coordinator = addr, .job = job, .token = TOKEN, .slot = slot,
                         .world_size = world, .min_size = 1, .data_addr = data, .joiner = joiner,
                         .pod = name, .node = name, .host = name, .connect_timeout_ms = WAIT_MS,
                         .heartbeat_ms = 100};
  ftc__member_t *m = NULL;
  ftc_status_t st = ftc__member_open(&c, &m);
  if (st != FTC_OK) fail_msg("slot %d: %s: %s", slot, ftc_strerror(st), ftc_last_error());
  return m;
}

/* A joiner's hello goes in its upgrade request: the coordinator counts it
 * there, and the joiner gets welcome and its first view. */
static void a_joiners_hello_goes_in_its_upgrade_request(void **state) {
  (void)state;
  ftc__coord_t *co = coord_of(0, "testjob", 2, 0);
  ftc__member_t *m0 = join_job(co, "testjob", 0, 2, 0, "rank-0");
  ftc__member_t *m1 = join_job(co, "testjob", 1, 2, 0, "rank-1");
  ftc__view_t *v = view_after(m0, 0);
  ftc__view_free(v);
  ftc__member_close(m1); /* slot 1 is lost; a joiner takes it */
  ftc__view_t *v2 = view_after(m0, 1);
  ftc__member_t *j = join_job(co, "testjob", 1, 2, 1, "rank-1b");
  ftc__view_t *vj = view_after(j, 0);
  assert_int_equal(vj->size, 2);
  assert_int_equal(vj->my_rank, 1);
  ftc__coord_stats_t st;
  ftc__coord_stats(co, &st);
  assert_int_equal(st.hello_in_request, 3);
  assert_int_equal(st.refused, 0);
  ftc__view_free(v2);
  ftc__view_free(vj);
  ftc__member_close(j);
  ftc__member_close(m0);
  ftc__coord_destroy(co);
}

/* Ranks of this version and coordinators of both, with a coordinator that
 * restarts as the other version under running ranks: always admitted. */
static void ranks_join_and_rejoin_coordinators_from_before_the_hello_in_the_request(void **state) {
  (void)state;
  for (int legacy_first = 0; legacy_first < 2; legacy_first++) {
    ftc__coord_t *co = coord_of(legacy_first, "testjob", 2, 0);
    int port = ftc__coord_port(co);
    ftc__member_t *m[2] = {join_job(co, "testjob", 0, 2, 0, "r0"), join_job(co, "testjob", 1, 2, 0, "r1")};
    all_saw_epoch_1(m, 2);
    ftc__coord_stats_t st;
    ftc__coord_stats(co, &st);
    assert_int_equal(st.hello_in_request, legacy_first ? 0 : 2);
    ftc__coord_destroy(co);
    usleep(200000);
    co = coord_of(!legacy_first, "testjob", 2, port);
    WAIT_STATS(co, st, st.connected == 2);
    assert_int_equal(st.hello_in_request, legacy_first ? 2 : 0);
    assert_int_equal(st.epoch, 1);
    assert_int_equal(st.refused, 0);
    for (int s = 0; s < 2; s++) {
      assert_int_equal(ftc__member_error(m[s]), FTC_OK);
      ftc__member_close(m[s]);
    }
    ftc__coord_destroy(co);
  }
}

/* Names at their longest make a hello too long for the request: it goes as
 * a frame, and the rank is admitted by coordinators of both versions. */
static void long_names_send_the_hello_as_a_frame(void **state) {
  (void)state;
  char job[FTC__PROTO_MAX_NAME + 1], name[FTC__PROTO_MAX_NAME + 1];
  memset(job, 'j', FTC__PROTO_MAX_NAME);
  job[FTC__PROTO_MAX_NAME] = '\0';
  memset(name, 'n', FTC__PROTO_MAX_NAME);
  name[FTC__PROTO_MAX_NAME] = '\0';
  for (int legacy = 0; legacy < 2; legacy++) {
    ftc__coord_t *co = coord_of(legacy, job, 1, 0);
    ftc__member_t *m = join_job(co, job, 0, 1, 0, name);
    ftc__view_t *v = view_after(m, 0);
    assert_int_equal(v->size, 1);
    ftc__view_free(v);
    ftc__coord_stats_t st;
    ftc__coord_stats(co, &st);
    assert_int_equal(st.hello_in_request, 0);
    assert_int_equal(st.refused, 0);
    ftc__coord_view_t *cv = NULL;
    assert_int_equal(ftc__coord_get_view(co, &cv), FTC_OK);
    assert_int_equal(cv->size, 1);
    ftc__coord_view_free(cv);
    ftc__member_close(m);
    ftc__coord_destroy(co);
  }
}

/* The coordinator restarted before every rank had seen the last epoch: a
 * rank without a view comes back first, one with the view second. The
 * coordinator keeps the first one's id, adopts the epoch from the second and
 * sends it to the first. */
static void rank_that_missed_the_epoch_learns_it_from_the_adopting_coordinator(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 1, &fx);
  int a = raw_ws_connect(ftc__coord_port(fx.co)), b = raw_ws_connect(ftc__coord_port(fx.co));
  assert_true(a >= 0 && b >= 0);
  assert_int_equal(raw_hello(b, 1, ",\"prev_member_id\":500,\"known_epoch\":0"), 500);
  assert_int_equal(raw_hello(a, 0, ",\"prev_member_id\":400,\"known_epoch\":7,\"view\":["
                                   "{\"rank\":0,\"slot\":0,\"member_id\":400,\"joined_epoch\":1,"
                                   "\"addr\":\"127.0.0.1:50000\"},{\"rank\":1,\"slot\":1,"
                                   "\"member_id\":500,\"joined_epoch\":3,\"addr\":\"127.0.0.1:50001\"}]"),
                   400);
  char *text = NULL;
  assert_int_equal(raw_ws_recv(b, &text, WAIT_MS), WS_TEXT);
  if (!strstr(text, "\"view\"") || !strstr(text, "\"epoch\":7") ||
      !strstr(text, "\"joined_epoch\":3"))
    fail_msg("expected the adopted epoch 7, got %s", text);
  free(text);
  ftc__coord_stats_t st;
  ftc__coord_stats(fx.co, &st);
  assert_int_equal(st.epoch, 7);
  assert_int_equal(st.epoch_size, 2);
  /* Changes go on above it: slot 0 leaves, slot 1 gets epoch 8. */
  assert_int_equal(raw_ws_send_text(a, "{\"v\":1,\"type\":\"leave\"}"), 0);
  assert_int_equal(raw_ws_recv(b, &text, WAIT_MS), WS_TEXT);
  if (!strstr(text, "\"epoch\":8") || !strstr(text, "\"member_id\":500"))
    fail_msg("expected epoch 8 with member 500, got %s", text);
  free(text);
  close(a);
  close(b);
  ftc__coord_destroy(fx.co);
}

static void ranks_reconnect_to_a_restarted_coordinator_which_adopts_their_epoch(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(3, 2, &fx);
  int port = ftc__coord_port(fx.co);
  ftc__member_t *m[3];
  for (int s = 0; s < 3; s++) m[s] = join(&fx, s, 3);
  ftc__view_t *v1 = view_after(m[0], 0);
  assert_int_equal(v1->epoch, 1);
  all_saw_epoch_1(m, 3);
  ftc__coord_destroy(fx.co); /* the coordinator goes away; the ranks keep going */
  usleep(300000);
  for (int s = 0; s < 3; s++) assert_int_equal(ftc__member_error(m[s]), FTC_OK);
  fx.co = coord_on_port(3, 2, port, 5000);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.connected == 3);
  /* Their hellos (with their views) came in the upgrade requests. */
  assert_int_equal(st.hello_in_request, 3);
  /* Same epoch, same members: nothing was announced. */
  assert_int_equal(st.epoch, 1);
  assert_int_equal(st.epoch_size, 3);
  assert_int_equal(st.lost, 0);
  ftc__view_t *none = NULL;
  assert_int_equal(ftc__member_wait_view(m[1], 1, 200, &none), FTC_ERR_TIMEOUT);
  /* Failures and changes go on from there: numbering continues above 1, and
   * member ids are the old ones. */
  ftc__member_close(m[2]);
  ftc__view_t *v2 = view_after(m[0], 1);
  assert_int_equal(v2->epoch, 2);
  assert_int_equal(v2->size, 2);
  assert_int_equal(v2->members[0].member_id, v1->members[0].member_id);
  assert_int_equal(v2->members[1].member_id, v1->members[1].member_id);
  assert_int_equal(v2->my_rank, 0);
  ftc__view_free(v1);
  ftc__view_free(v2);
  ftc__member_close(m[0]);
  ftc__member_close(m[1]);
  ftc__coord_destroy(fx.co);
}

/* A standby member reconnects to a restarted coordinator as standby, and
 * is admitted at its join there; the running epoch is adopted all the same. */
static void standby_member_waits_through_a_coordinator_restart(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(3, 2, &fx);
  int port = ftc__coord_port(fx.co);
  ftc__member_t *m[3];
  for (int s = 0; s < 3; s++) m[s] = join(&fx, s, 3);
  all_saw_epoch_1(m, 3);
  ftc__member_close(m[2]);
  ftc__view_t *v = view_after(m[0], 1);
  assert_int_equal(v->epoch, 2);
  ftc__view_free(v);
  ftc__member_t *j = standby(&fx, 2, 3, 1);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.standby == 1);
  ftc__coord_destroy(fx.co);
  usleep(300000);
  fx.co = coord_on_port(3, 2, port, 5000);
  WAIT_STATS(fx.co, st, st.connected == 3 && st.standby == 1);
  /* The running epoch came back with the ranks; the standby is not in it. */
  assert_int_equal(st.epoch, 2);
  assert_int_equal(st.epoch_size, 2);
  ftc__view_t *none = NULL;
  assert_int_equal(ftc__member_wait_view(m[0], 2, 200, &none), FTC_ERR_TIMEOUT);
  join_now(&j);
  expect_epoch(j, 0, 3, 3, 2);
  v = view_after(m[1], 2);
  assert_int_equal(v->epoch, 3);
  ftc__view_free(v);
  ftc__member_close(j);
  ftc__member_close(m[0]);
  ftc__member_close(m[1]);
  ftc__coord_destroy(fx.co);
}

/* The next message on a raw session: a view holding every `has` and no
 * `hasnt` (NULL: none). */
static void expect_raw_view(int fd, const char *const *has, int n, const char *hasnt) {
  char *text = NULL;
  assert_int_equal(raw_ws_recv(fd, &text, WAIT_MS), WS_TEXT);
  if (!strstr(text, "\"type\":\"view\"")) fail_msg("expected a view, got %s", text);
  for (int i = 0; i < n; i++)
    if (!strstr(text, has[i])) fail_msg("expected %s in %s", has[i], text);
  if (hasnt && strstr(text, hasnt)) fail_msg("did not expect %s in %s", hasnt, text);
  free(text);
}

/* A restarted coordinator meets a standby member first (a replacement that
 * began while it was down), then a running rank with its view. A view that
 * names the standby's slot (the member it replaces) or its id (this
 * coordinator's numbering) is not adopted: the slot would have two members,
 * or the standby would be taken for a rank of the view. */
static void view_naming_a_standby_members_slot_or_id_is_not_adopted(void **state) {
  (void)state;
  fixture_t fx;
  ftc__coord_stats_t st;
  /* Its slot: the view still has member 500 at slot 1. */
  start_coord(2, 1, &fx);
  int port = ftc__coord_port(fx.co);
  int c = raw_ws_connect(port), a = raw_ws_connect(port);
  assert_true(c >= 0 && a >= 0);
  assert_int_equal(raw_hello(c, 1, ",\"standby\":true,\"prev_member_id\":700"), 700);
  assert_int_equal(raw_hello(a, 0, ",\"prev_member_id\":400,\"known_epoch\":7,\"view\":["
                                   "{\"rank\":0,\"slot\":0,\"member_id\":400,\"joined_epoch\":1,"
                                   "\"addr\":\"127.0.0.1:50000\"},{\"rank\":1,\"slot\":1,"
                                   "\"member_id\":500,\"joined_epoch\":1,\"addr\":\"127.0.0.1:50001\"}]"),
                   400);
  WAIT_STATS(fx.co, st, st.connected == 2 && st.standby + st.pending == 2);
  assert_int_equal(st.epoch, 0);
  assert_int_equal(st.standby, 1);
  assert_int_equal(st.pending, 1);
  /* At the join, one epoch of the two live processes, numbered above 7. */
  assert_int_equal(raw_ws_send_text(c, "{\"v\":1,\"type\":\"join\"}"), 0);
  const char *both[] = {"\"epoch\":8", "\"member_id\":400", "\"member_id\":700"};
  expect_raw_view(a, both, 3, "\"member_id\":500");
  expect_raw_view(c, both, 3, "\"member_id\":500");
  close(a);
  close(c);
  ftc__coord_destroy(fx.co);

  /* Its id: a fresh standby at slot 2 gets an id of this coordinator's,
   * which the old one gave the rank at slot 0. */
  start_coord(3, 1, &fx);
  port = ftc__coord_port(fx.co);
  c = raw_ws_connect(port), a = raw_ws_connect(port);
  assert_true(c >= 0 && a >= 0);
  long long cid = raw_hello(c, 2, ",\"standby\":true");
  char extra[512];
  snprintf(extra, sizeof(extra),
           ",\"prev_member_id\":%lld,\"known_epoch\":7,\"view\":[{\"rank\":0,\"slot\":0,"
           "\"member_id\":%lld,\"joined_epoch\":1,\"addr\":\"127.0.0.1:50000\"},{\"rank\":1,"
           "\"slot\":1,\"member_id\":%lld,\"joined_epoch\":1,\"addr\":\"127.0.0.1:50001\"}]",
           cid, cid, cid + 1);
  assert_true(raw_hello(a, 0, extra) != cid);
  WAIT_STATS(fx.co, st, st.connected == 2 && st.standby + st.pending == 2);
  assert_int_equal(st.epoch, 0);
  assert_int_equal(st.standby, 1);
  assert_int_equal(st.pending, 1);
  close(a);
  close(c);
  ftc__coord_destroy(fx.co);
}

typedef struct restart_arg {
  int port, delay_ms;
  ftc__coord_t *co;
} restart_arg_t;

static void *restart_later(void *p) {
  restart_arg_t *r = p;
  usleep((useconds_t)r->delay_ms * 1000);
  r->co = coord_on_port(2, 1, r->port, 5000);
  return NULL;
}

/* The coordinator restarts while a standby process initializes, and its
 * finish comes while the session reconnects: finish waits for the
 * reconnection (its hello, without "standby", is the join) instead of
 * failing. */
static void finish_while_the_session_reconnects_waits_for_it(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 1, &fx);
  int port = ftc__coord_port(fx.co);
  ftc__member_t *a = join(&fx, 0, 2), *b = join(&fx, 1, 2);
  ftc__view_t *v = view_after(a, 0);
  assert_int_equal(v->epoch, 1);
  ftc__view_free(v);
  ftc__member_close(b);
  v = view_after(a, 1);
  assert_int_equal(v->size, 1);
  ftc__view_free(v);
  ftc__member_t *j = standby(&fx, 1, 2, 1);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.standby == 1);
  ftc__coord_destroy(fx.co);
  usleep(300000); /* both sessions saw it go: reconnecting */
  restart_arg_t r = {.port = port, .delay_ms = 300};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, restart_later, &r), 0);
  join_now(&j); /* while the coordinator is still away */
  pthread_join(t, NULL);
  fx.co = r.co;
  expect_epoch(j, 0, 3, 2, 1);
  expect_epoch(a, 2, 3, 2, -1);
  ftc__member_close(j);
  ftc__member_close(a);
  ftc__coord_destroy(fx.co);
}

/* finish's connect timeout counts from finish, not from begin: a standby
 * begun long before against an unreachable coordinator still retries for
 * the whole timeout after its join. */
static void finish_timeout_counts_from_the_join(void **state) {
  (void)state;
  fixture_t fx;
  ftc__member_cfg_t c = unreachable_cfg(&fx, 500);
  c.standby = 1;
  ftc__member_t *m = NULL;
  assert_int_equal(ftc__member_start(&c, &m), FTC_OK);
  usleep(800000); /* past the timeout counted from begin */
  int64_t t0 = ftc__now_ns();
  ftc__member_join(m);
  assert_int_equal(ftc__member_finish(&m), FTC_ERR_COORDINATOR);
  int64_t ms = (ftc__now_ns() - t0) / 1000000;
  assert_null(m);
  assert_true(ms >= 450);
  assert_true(ms < 3000);
  assert_non_null(strstr(ftc_last_error(), fx.addr));
}

/* A standby member that stops heartbeating is dropped at the heartbeat
 * timeout like any member (lost, its session closed), and frees its slot. */
static void silent_standby_is_dropped_at_the_heartbeat_timeout(void **state) {
  (void)state;
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .job = "testjob", .token = TOKEN,
                          .world_size = 2, .min_size = 1, .heartbeat_ms = 50,
                          .heartbeat_timeout_ms = 400};
  fixture_t fx;
  assert_int_equal(ftc__coord_create(&cfg, &fx.co), FTC_OK);
  snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", ftc__coord_port(fx.co));
  ftc__member_t *a = join(&fx, 0, 2);
  int fd = raw_ws_connect(ftc__coord_port(fx.co));
  assert_true(fd >= 0);
  char hello[512], *text = NULL;
  snprintf(hello, sizeof(hello),
           "{\"v\":1,\"type\":\"hello\",\"job\":\"testjob\",\"token\":\"%s\",\"slot\":1,"
           "\"world_size\":2,\"min_size\":1,\"addr\":\"127.0.0.1:1\",\"standby\":true}", TOKEN);
  assert_int_equal(raw_ws_send_text(fd, hello), 0);
  assert_int_equal(raw_ws_recv(fd, &text, WAIT_MS), WS_TEXT);
  if (!strstr(text, "\"welcome\"") || !strstr(text, "\"standby\":true"))
    fail_msg("expected a standby welcome, got %s", text);
  free(text);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.standby == 1);
  WAIT_STATS(fx.co, st, st.standby == 0 && st.lost == 1);
  assert_true(raw_ws_closed(fd, WAIT_MS));
  close(fd);
  /* It was in no epoch: the first one is still to come, with slot 1's
   * next process. */
  ftc__view_t *none = NULL;
  assert_int_equal(ftc__member_wait_view(a, 0, 1, &none), FTC_ERR_TIMEOUT);
  ftc__member_t *b = join(&fx, 1, 2);
  expect_epoch(a, 0, 1, 2, -1);
  ftc__member_close(b);
  ftc__member_close(a);
  ftc__coord_destroy(fx.co);
}

/* "join" from a member that is not standby (admitted at its hello, or a
 * standby's second join) is ignored: no refusal, no second epoch. */
static void join_from_a_member_not_standby_is_ignored(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 1, &fx);
  int port = ftc__coord_port(fx.co);
  int a = raw_ws_connect(port), c = raw_ws_connect(port);
  assert_true(a >= 0 && c >= 0);
  raw_hello(a, 0, "");
  assert_int_equal(raw_ws_send_text(a, "{\"v\":1,\"type\":\"join\"}"), 0);
  /* Still served: a heartbeat is answered. */
  assert_int_equal(raw_ws_send_text(a, "{\"v\":1,\"type\":\"heartbeat\",\"epoch\":0}"), 0);
  char *text = NULL;
  assert_int_equal(raw_ws_recv(a, &text, WAIT_MS), WS_TEXT);
  if (!strstr(text, "\"type\":\"heartbeat\"")) fail_msg("expected a heartbeat, got %s", text);
  free(text);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.pending == 1);
  assert_int_equal(st.standby, 0);
  assert_int_equal(st.refused, 0);
  assert_int_equal(st.epoch, 0);
  long long cid = raw_hello(c, 1, ",\"standby\":true");
  assert_int_equal(raw_ws_send_text(c, "{\"v\":1,\"type\":\"join\"}"), 0);
  assert_int_equal(raw_ws_send_text(c, "{\"v\":1,\"type\":\"join\"}"), 0);
  char want[64];
  snprintf(want, sizeof(want), "\"member_id\":%lld", cid);
  const char *has[] = {"\"epoch\":1", want};
  expect_raw_view(a, has, 2, NULL);
  expect_raw_view(c, has, 2, NULL);
  /* The second join changed nothing: a heartbeat's answer comes next, at
   * epoch 1, and no epoch 2. */
  assert_int_equal(raw_ws_send_text(c, "{\"v\":1,\"type\":\"heartbeat\",\"epoch\":1}"), 0);
  assert_int_equal(raw_ws_recv(c, &text, WAIT_MS), WS_TEXT);
  if (!strstr(text, "\"type\":\"heartbeat\"") || !strstr(text, "\"epoch\":1"))
    fail_msg("expected a heartbeat at epoch 1, got %s", text);
  free(text);
  ftc__coord_stats(fx.co, &st);
  assert_int_equal(st.epoch, 1);
  assert_int_equal(st.refused, 0);
  close(a);
  close(c);
  ftc__coord_destroy(fx.co);
}

/* A failure report about an epoch its member knows to be replaced is not
 * sent (the coordinator would ignore it, and on a crowded host the report
 * takes CPU from the recovery); one that comes anyway (its member had not
 * heard of the next epoch yet) is counted as stale and ignored. */
static void a_report_about_a_replaced_epoch_is_not_sent_and_ignored_when_it_comes(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 1, &fx);
  ftc__member_t *m = join(&fx, 0, 2);
  int a = raw_ws_connect(ftc__coord_port(fx.co));
  assert_true(a >= 0);
  raw_hello(a, 1, "");
  expect_epoch(m, 0, 1, 2, 0);
  const char *has[] = {"\"epoch\":1"};
  expect_raw_view(a, has, 1, NULL);
  int failed[] = {1};
  /* m knows epoch 1: its report about epoch 0 stays here ... */
  assert_int_equal(ftc__member_report_failure(m, 0, failed, 1, FTC_ERR_PEER_LOST), FTC_OK);
  /* ... the raw member's reaches the coordinator, which ignores it ... */
  assert_int_equal(raw_ws_send_text(a, "{\"v\":1,\"type\":\"failure\",\"epoch\":0,"
                                       "\"ranks\":[0],\"status\":5,\"reason\":\"lost\"}"),
                   0);
  /* ... and m's report about epoch 1 comes on the same session after where
   * the one about epoch 0 would have: two reports, one stale, never three. */
  assert_int_equal(ftc__member_report_failure(m, 1, failed, 1, FTC_ERR_PEER_LOST), FTC_OK);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.reports >= 2);
  usleep(200000);
  ftc__coord_stats(fx.co, &st);
  assert_int_equal(st.reports, 2);
  assert_int_equal(st.reports_stale, 1);
  /* The one about epoch 1 counts: slot 1 never heartbeats, so it goes. */
  expect_epoch(m, 1, 2, 1, 0);
  close(a);
  ftc__member_close(m);
  ftc__coord_destroy(fx.co);
}

/* A replacement begins while the member it replaces is detached (its
 * session closed, its place kept): its hello drops that member, the
 * running ranks get the epoch without it, and the join gives the grow. */
static void standby_replacement_drops_a_detached_member_of_its_slot(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(2, 1, &fx);
  ftc__member_t *a = join(&fx, 0, 2);
  int fd = raw_ws_connect(ftc__coord_port(fx.co));
  assert_true(fd >= 0);
  raw_hello(fd, 1, "");
  expect_epoch(a, 0, 1, 2, -1);
  close(fd); /* no leave: its place is kept for the evidence time */
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.connected == 1);
  ftc__member_t *j = standby(&fx, 1, 2, 1);
  expect_epoch(a, 1, 2, 1, -1);
  WAIT_STATS(fx.co, st, st.standby == 1 && st.lost == 1);
  join_now(&j);
  expect_epoch(j, 0, 3, 2, 1);
  ftc__member_close(j);
  ftc__member_close(a);
  ftc__coord_destroy(fx.co);
}

static void restarted_coordinator_drops_a_member_that_never_returns(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(3, 2, &fx);
  int port = ftc__coord_port(fx.co);
  ftc__member_t *m[3];
  for (int s = 0; s < 3; s++) m[s] = join(&fx, s, 3);
  all_saw_epoch_1(m, 3);
  ftc__view_t *v = NULL;
  ftc__coord_destroy(fx.co);
  ftc__member_close(m[1]); /* dies while there is no coordinator */
  fx.co = coord_on_port(3, 2, port, 800);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.connected == 2);
  v = view_after(m[2], 1);
  assert_int_equal(v->epoch, 2);
  assert_int_equal(v->size, 2);
  assert_int_equal(v->members[0].slot, 0);
  assert_int_equal(v->members[1].slot, 2);
  assert_int_equal(v->my_rank, 1);
  ftc__view_free(v);
  ftc__member_close(m[0]);
  ftc__member_close(m[2]);
  ftc__coord_destroy(fx.co);
}

static void failure_report_after_a_restart_forms_the_next_epoch(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(3, 2, &fx);
  int port = ftc__coord_port(fx.co);
  ftc__member_t *m[3];
  for (int s = 0; s < 3; s++) m[s] = join(&fx, s, 3);
  all_saw_epoch_1(m, 3);
  ftc__view_t *v = NULL;
  ftc__coord_destroy(fx.co);
  fx.co = coord_on_port(3, 2, port, 5000);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.connected == 3);
  /* The adopted epoch takes reports like its own: rank 1 heartbeats, so it
   * stays in the epoch formed after the report. */
  int failed[] = {1};
  assert_int_equal(ftc__member_report_failure(m[0], 1, failed, 1, FTC_ERR_PEER_LOST), FTC_OK);
  v = view_after(m[2], 1);
  assert_int_equal(v->epoch, 2);
  assert_int_equal(v->size, 3);
  assert_int_equal(v->members[1].slot, 1);
  ftc__view_free(v);
  for (int s = 0; s < 3; s++) ftc__member_close(m[s]);
  ftc__coord_destroy(fx.co);
}

static void a_coordinator_that_stays_away_fails_the_session_after_the_timeout(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(1, 0, &fx);
  ftc__member_cfg_t c = member_cfg(&fx, 0, 1);
  c.connect_timeout_ms = 600;
  ftc__member_t *m = NULL;
  assert_int_equal(ftc__member_open(&c, &m), FTC_OK);
  ftc__view_t *v = view_after(m, 0);
  ftc__view_free(v);
  int64_t t0 = ftc__now_ns();
  ftc__coord_destroy(fx.co);
  ftc__view_t *none = NULL;
  assert_int_equal(ftc__member_wait_view(m, 1, WAIT_MS, &none), FTC_ERR_COORDINATOR);
  int64_t ms = (ftc__now_ns() - t0) / 1000000;
  assert_true(ms >= 550 && ms < 4000);
  assert_non_null(strstr(ftc_last_error(), "could not reconnect"));
  ftc__member_close(m);
}

/* Fail the Nth allocation of the process (client, coordinator thread or
 * libjansson) while a rank joins, for N = 1, 2, ... until nothing fails: each
 * attempt ends in a clean status (no crash, no leak under ASan), and the
 * coordinator keeps serving. */
static void joining_survives_an_allocation_failure_anywhere(void **state) {
  (void)state;
  fixture_t fx;
  start_coord(1, 0, &fx);
  int failures = 0;
  long n;
  for (n = 1; n < 2000; n++) {
    ftc__member_cfg_t c = member_cfg(&fx, 0, 1);
    c.connect_timeout_ms = 3000;
    ftc__member_t *m = NULL;
    ftc__alloc_fail_at(n);
    ftc_status_t st = ftc__member_open(&c, &m);
    long used = ftc__alloc_count();
    ftc__alloc_fail_at(0);
    if (st != FTC_OK) {
      assert_null(m);
      failures++;
      /* Let the coordinator notice the closed session before the next try. */
      ftc__coord_stats_t s;
      WAIT_STATS(fx.co, s, s.connected == 0);
      continue;
    }
    ftc__view_t *v = NULL;
    st = ftc__member_wait_view(m, 0, WAIT_MS, &v);
    ftc__view_free(v);
    ftc__member_close(m);
    ftc__coord_stats_t s;
    WAIT_STATS(fx.co, s, s.connected == 0);
    if (used < n) break; /* nothing failed this time: every step was covered */
  }
  assert_true(n < 2000);
  assert_true(failures > 3);
  expect_join_works(&fx);
  ftc__coord_destroy(fx.co);
}

typedef struct ev_log {
  pthread_mutex_t lock;
  int n;
  ftc__coord_event_t ev[32];
  char reason[32][96];
} ev_log_t;

static void record_event(void *arg, const ftc__coord_event_t *ev) {
  ev_log_t *l = arg;
  pthread_mutex_lock(&l->lock);
  if (l->n < 32) {
    l->ev[l->n] = *ev;
    snprintf(l->reason[l->n], sizeof(l->reason[0]), "%s", ev->reason ? ev->reason : "");
    l->ev[l->n].reason = NULL;
    l->n++;
  }
  pthread_mutex_unlock(&l->lock);
}

static int events_seen(ev_log_t *l) {
  pthread_mutex_lock(&l->lock);
  int n = l->n;
  pthread_mutex_unlock(&l->lock);
  return n;
}

static void wait_events(ev_log_t *l, int n) {
  int64_t dl = ftc__deadline_ns(WAIT_MS);
  while (events_seen(l) < n) {
    if (ftc__now_ns() > dl) fail_msg("only %d of %d events", events_seen(l), n);
    usleep(5000);
  }
}

/* A standby member's connection that blinks while its process loads: it
 * comes back to its place (same id, still standby), no drop is announced
 * (a host such as ftcomm-run would kill and replace a dropped member's
 * process), and it joins later as usual. */
static void standby_whose_connection_blinks_keeps_its_place(void **state) {
  (void)state;
  static ev_log_t log = {.lock = PTHREAD_MUTEX_INITIALIZER};
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .job = "testjob", .token = TOKEN,
                          .world_size = 2, .min_size = 1, .heartbeat_ms = 100,
                          .on_event = record_event, .event_arg = &log};
  fixture_t fx;
  assert_int_equal(ftc__coord_create(&cfg, &fx.co), FTC_OK);
  snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", ftc__coord_port(fx.co));
  ftc__member_t *a = join(&fx, 0, 2);
  ftc__member_t *b = standby(&fx, 1, 2, 0);
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.standby == 1 && st.connected == 2);
  ftc__member_fault_drop(b); /* it reconnects 50 ms later */
  usleep(400000);
  WAIT_STATS(fx.co, st, st.connected == 2 && st.standby == 1);
  assert_int_equal(events_seen(&log), 0); /* (it was dropped before: an event for slot 1) */
  assert_int_equal(ftc__member_error(b), FTC_OK);
  join_now(&b);
  expect_epoch(b, 0, 1, 2, -1);
  wait_events(&log, 1);
  assert_int_equal(log.ev[0].kind, FTC__COORD_EV_EPOCH);
  ftc__coord_stats(fx.co, &st);
  assert_int_equal(st.lost, 0);
  ftc__member_close(b);
  ftc__member_close(a);
  ftc__coord_destroy(fx.co);
}

/* The host's answer to "is this member's process gone?" (process_gone):
 * the slot whose process it says is exiting, and what it was asked. */
typedef struct gone_host {
  int gone_slot; /* -1: every process lives */
  int asked, asked_slot;
  int64_t asked_pid;
} gone_host_t;

static int host_process_gone(void *arg, int slot, int64_t pid) {
  gone_host_t *h = arg;
  __atomic_store_n(&h->asked_slot, slot, __ATOMIC_RELEASE);
  __atomic_store_n(&h->asked_pid, pid, __ATOMIC_RELEASE);
  __atomic_add_fetch(&h->asked, 1, __ATOMIC_ACQ_REL);
  return slot == h->gone_slot;
}

/* A member's session closes and its host says the process is exiting: it
 * is dropped at once (no report, no evidence time: that is 2.1 s here) and
 * the next epoch leaves it out. The host is asked about that slot and the
 * pid its hello gave. */
static void session_closed_by_a_dying_process_drops_it_at_once(void **state) {
  (void)state;
  static ev_log_t log = {.lock = PTHREAD_MUTEX_INITIALIZER};
  static gone_host_t host = {.gone_slot = 1};
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .job = "testjob", .token = TOKEN,
                          .world_size = 3, .min_size = 2, .heartbeat_ms = 1000,
                          .heartbeat_timeout_ms = 20000, .on_event = record_event,
                          .event_arg = &log, .process_gone = host_process_gone,
                          .process_gone_arg = &host};
  fixture_t fx;
  assert_int_equal(ftc__coord_create(&cfg, &fx.co), FTC_OK);
  snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", ftc__coord_port(fx.co));
  ftc__member_t *m[3];
  for (int s = 0; s < 3; s++) m[s] = join(&fx, s, 3);
  ftc__view_t *v = view_after(m[0], 0);
  assert_int_equal(v->epoch, 1);
  uint64_t id2 = v->members[2].member_id;
  ftc__view_free(v);
  int64_t t0 = ftc__now_ns();
  ftc__member_fault_drop(m[1]); /* as a dying process's socket closes */
  v = view_after(m[0], 1);
  int64_t took_ms = (ftc__now_ns() - t0) / 1000000;
  assert_int_equal(v->epoch, 2);
  assert_int_equal(v->size, 2);
  assert_int_equal(v->members[1].member_id, id2);
  ftc__view_free(v);
  /* well inside the 2100 ms a member keeps its place after its session closes */
  if (took_ms >= 2000) fail_msg("the next epoch came %lld ms after the session closed", (long long)took_ms);
  assert_true(__atomic_load_n(&host.asked, __ATOMIC_ACQUIRE) >= 1);
  assert_int_equal(host.asked_slot, 1);
  assert_int_equal(host.asked_pid, (int64_t)getpid());
  wait_events(&log, 3); /* epoch 1, the drop, epoch 2 */
  assert_int_equal(log.ev[1].kind, FTC__COORD_EV_DROPPED);
  assert_int_equal(log.ev[1].slot, 1);
  assert_int_equal(log.ev[1].left, 0);
  assert_string_equal(log.reason[1], "its process is exiting (its session closed as it died)");
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.lost == 1 && st.epoch == 2);
  for (int s = 0; s < 3; s++) ftc__member_close(m[s]);
  ftc__coord_destroy(fx.co);
}

/* The same blink with a host that says the process lives: the member keeps
 * its place, comes back, and no epoch follows. */
static void session_closed_by_a_live_process_keeps_its_place(void **state) {
  (void)state;
  static gone_host_t host = {.gone_slot = -1};
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .job = "testjob", .token = TOKEN,
                          .world_size = 3, .min_size = 2, .heartbeat_ms = 100,
                          .process_gone = host_process_gone, .process_gone_arg = &host};
  fixture_t fx;
  assert_int_equal(ftc__coord_create(&cfg, &fx.co), FTC_OK);
  snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", ftc__coord_port(fx.co));
  ftc__member_t *m[3];
  for (int s = 0; s < 3; s++) m[s] = join(&fx, s, 3);
  ftc__view_free(view_after(m[0], 0));
  ftc__member_fault_drop(m[1]); /* it reconnects 50 ms later */
  int64_t dl = ftc__deadline_ns(WAIT_MS);
  while (__atomic_load_n(&host.asked, __ATOMIC_ACQUIRE) < 1) {
    if (ftc__now_ns() > dl) fail_msg("the host was never asked");
    usleep(5000);
  }
  assert_int_equal(host.asked_slot, 1);
  usleep(500000); /* past the evidence time (300 ms) */
  ftc__coord_stats_t st;
  WAIT_STATS(fx.co, st, st.connected == 3);
  assert_int_equal(st.epoch, 1);
  assert_int_equal(st.lost, 0);
  assert_int_equal(ftc__member_error(m[1]), FTC_OK);
  for (int s = 0; s < 3; s++) ftc__member_close(m[s]);
  ftc__coord_destroy(fx.co);
}

static void host_sees_events_and_the_current_epoch(void **state) {
  (void)state;
  static ev_log_t log = {.lock = PTHREAD_MUTEX_INITIALIZER};
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .job = "testjob", .token = TOKEN,
                          .world_size = 3, .min_size = 2, .heartbeat_ms = 100,
                          .on_event = record_event, .event_arg = &log};
  fixture_t fx;
  assert_int_equal(ftc__coord_create(&cfg, &fx.co), FTC_OK);
  snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", ftc__coord_port(fx.co));
  ftc__coord_view_t *cv = NULL;
  assert_int_equal(ftc__coord_get_view(fx.co, &cv), FTC_OK);
  assert_int_equal(cv->epoch, 0);
  assert_int_equal(cv->size, 0);
  ftc__coord_view_free(cv);
  ftc__member_t *m[3];
  for (int s = 0; s < 3; s++) m[s] = join(&fx, s, 3);
  wait_events(&log, 1);
  assert_int_equal(log.ev[0].kind, FTC__COORD_EV_EPOCH);
  assert_int_equal(log.ev[0].epoch, 1);
  assert_int_equal(log.ev[0].size, 3);
  assert_int_equal(log.ev[0].joined, 3);
  assert_int_equal(ftc__coord_get_view(fx.co, &cv), FTC_OK);
  assert_int_equal(cv->epoch, 1);
  assert_int_equal(cv->size, 3);
  for (int r = 0; r < 3; r++) {
    assert_int_equal(cv->members[r].rank, r);
    assert_int_equal(cv->members[r].slot, r);
    assert_int_equal(cv->members[r].connected, 1);
    assert_string_equal(cv->members[r].host, "localhost");
  }
  ftc__coord_view_free(cv);
  /* A clean leave, then a lost slot that takes the job below its minimum. */
  ftc__member_close(m[1]);
  wait_events(&log, 3);
  assert_int_equal(log.ev[1].kind, FTC__COORD_EV_DROPPED);
  assert_int_equal(log.ev[1].slot, 1);
  assert_int_equal(log.ev[1].rank, 1);
  assert_int_equal(log.ev[1].left, 1);
  assert_int_equal(log.ev[2].kind, FTC__COORD_EV_EPOCH);
  assert_int_equal(log.ev[2].epoch, 2);
  assert_int_equal(log.ev[2].size, 2);
  assert_int_equal(ftc__coord_slot_lost(fx.co, 2, "node gone"), FTC_OK);
  wait_events(&log, 5);
  assert_int_equal(log.ev[3].kind, FTC__COORD_EV_DROPPED);
  assert_int_equal(log.ev[3].slot, 2);
  assert_int_equal(log.ev[3].rank, 1);
  assert_int_equal(log.ev[3].left, 0);
  assert_string_equal(log.reason[3], "node gone");
  assert_int_equal(log.ev[4].kind, FTC__COORD_EV_BELOW_MIN);
  assert_int_equal(log.ev[4].size, 1);
  ftc__member_close(m[0]);
  ftc__member_close(m[2]);
  ftc__coord_destroy(fx.co);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(join_of_n_forms_epoch_1_with_ranks_in_slot_order),
      cmocka_unit_test(restored_coordinator_numbers_epochs_after_first_epoch),
      cmocka_unit_test(wrong_token_is_refused_with_auth_and_others_are_served),
      cmocka_unit_test(wrong_job_and_bad_slot_are_refused_as_config_errors),
      cmocka_unit_test(duplicate_of_a_live_slot_is_refused),
      cmocka_unit_test(joiner_with_another_dataplane_protocol_is_refused),
      cmocka_unit_test(newer_joiner_among_older_ranks_is_refused),
      cmocka_unit_test(unreachable_coordinator_fails_with_coordinator_error_within_timeout),
      cmocka_unit_test(bad_coordinator_address_is_a_config_error),
      cmocka_unit_test(late_coordinator_is_reached_by_retrying),
      cmocka_unit_test(lost_member_gives_next_epoch_without_it),
      cmocka_unit_test(standby_member_is_admitted_only_after_its_join),
      cmocka_unit_test(join_before_the_welcome_is_sent_after_it),
      cmocka_unit_test(standby_that_leaves_frees_its_slot),
      cmocka_unit_test(standby_closed_before_its_welcome_leaves),
      cmocka_unit_test(running_ranks_hear_the_prospect_and_the_join_forms_it),
      cmocka_unit_test(older_ranks_hear_no_prospect),
      cmocka_unit_test(leave_then_joiner_gives_two_new_epochs_never_reusing_numbers),
      cmocka_unit_test(reported_rank_that_keeps_heartbeating_is_kept_in_a_new_epoch),
      cmocka_unit_test(reported_rank_that_is_silent_is_excluded_at_once),
      cmocka_unit_test(member_cut_from_its_peers_is_dropped_after_the_probe),
      cmocka_unit_test(probe_drops_nobody_when_no_member_reaches_any),
      cmocka_unit_test(below_min_size_waits_for_a_joiner),
      cmocka_unit_test(silent_member_is_dropped_after_the_heartbeat_timeout),
      cmocka_unit_test(dump_request_reaches_every_rank_and_fragmented_uploads_are_stored),
      cmocka_unit_test(many_ranks_joining_at_once_agree_on_epoch_1),
      cmocka_unit_test(calls_from_many_threads_on_one_session_are_safe),
      cmocka_unit_test(ranks_reconnect_to_a_restarted_coordinator_which_adopts_their_epoch),
      cmocka_unit_test(rank_that_missed_the_epoch_learns_it_from_the_adopting_coordinator),
      cmocka_unit_test(standby_member_waits_through_a_coordinator_restart),
      cmocka_unit_test(view_naming_a_standby_members_slot_or_id_is_not_adopted),
      cmocka_unit_test(finish_while_the_session_reconnects_waits_for_it),
      cmocka_unit_test(finish_timeout_counts_from_the_join),
      cmocka_unit_test(standby_whose_connection_blinks_keeps_its_place),
      cmocka_unit_test(session_closed_by_a_dying_process_drops_it_at_once),
      cmocka_unit_test(session_closed_by_a_live_process_keeps_its_place),
      cmocka_unit_test(silent_standby_is_dropped_at_the_heartbeat_timeout),
      cmocka_unit_test(join_from_a_member_not_standby_is_ignored),
      cmocka_unit_test(a_report_about_a_replaced_epoch_is_not_sent_and_ignored_when_it_comes),
      cmocka_unit_test(standby_replacement_drops_a_detached_member_of_its_slot),
      cmocka_unit_test(restarted_coordinator_drops_a_member_that_never_returns),
      cmocka_unit_test(failure_report_after_a_restart_forms_the_next_epoch),
      cmocka_unit_test(a_coordinator_that_stays_away_fails_the_session_after_the_timeout),
      cmocka_unit_test(joining_survives_an_allocation_failure_anywhere),
      cmocka_unit_test(host_sees_events_and_the_current_epoch),
      cmocka_unit_test(members_are_fresh_until_they_report_ready),
      cmocka_unit_test(a_joiners_hello_goes_in_its_upgrade_request),
      cmocka_unit_test(ranks_join_and_rejoin_coordinators_from_before_the_hello_in_the_request),
      cmocka_unit_test(long_names_send_the_hello_as_a_frame),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
