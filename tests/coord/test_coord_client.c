/*
 * test_coord_client.c - the rank's membership client against a scripted
 * peer: a small libwebsockets server (a test double of the coordinator) that
 * answers the client's hello with a fixed list of frames, 200 ms apart. A client handed
 * garbage, a message of an unknown version, a view before its welcome or an
 * unknown error code fails with FTC_ERR_PROTOCOL and says why; one handed
 * refusals gets the status that goes with each code.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>
#include <libwebsockets.h>
#include <pthread.h>
#include <zlib.h>

#include "ftc_error.h"
#include "ftc_time.h"
#include "membership/member.h"

#define WAIT_MS 5000

/* The scripted peer: after the first message from a client (its hello) it
 * sends script[0], script[1], ... one frame each, then keeps the session. */
typedef struct fake {
  struct lws_context *ctx;
  struct lws_protocols protocols[2];
  pthread_t thread;
  int stop;
  int port;
  const char *const *script;
  int next;
  int got_hello;
} fake_t;

static int fake_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                         void *in, size_t len) {
  fake_t *f = lws_context_user(lws_get_context(wsi));
  switch (reason) {
    case LWS_CALLBACK_RECEIVE:
      if (!f->got_hello && in && memmem(in, len, "\"hello\"", 7)) {
        f->got_hello = 1;
        lws_callback_on_writable(wsi);
      }
      return 0;
    case LWS_CALLBACK_SERVER_WRITEABLE: {
      const char *msg = f->script[f->next];
      if (!msg) return 0;
      f->next++;
      size_t n = strlen(msg);
      unsigned char *buf = malloc(LWS_PRE + n + 64);
      enum lws_write_protocol kind = LWS_WRITE_TEXT;
      if (!strncmp(msg, "Z:", 2) || !strncmp(msg, "B:", 2)) {
        /* Z: the rest deflated, in a binary message, as the coordinator
         * sends a big whole view; B: the rest as it is, binary. */
        kind = LWS_WRITE_BINARY;
        uLongf zn = (uLongf)(n + 64);
        if (msg[0] == 'B') memcpy(buf + LWS_PRE, msg + 2, zn = n - 2);
        else assert_int_equal(compress(buf + LWS_PRE, &zn, (const Bytef *)msg + 2, (uLong)(n - 2)), Z_OK);
        n = zn;
      } else {
        memcpy(buf + LWS_PRE, msg, n);
      }
      int w = lws_write(wsi, buf + LWS_PRE, n, kind);
      free(buf);
      if (w < (int)n) return -1;
      /* Later frames come 200 ms apart: open() has returned by then. */
      if (f->script[f->next]) lws_set_timer_usecs(wsi, 200000);
      return 0;
    }
    case LWS_CALLBACK_TIMER: lws_callback_on_writable(wsi); return 0;
    default: return lws_callback_http_dummy(wsi, reason, user, in, len);
  }
}

static void *fake_main(void *p) {
  fake_t *f = p;
  while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) lws_service(f->ctx, 0);
  return NULL;
}

static fake_t *fake_start(const char *const *script) {
  fake_t *f = calloc(1, sizeof(*f));
  f->script = script;
  f->protocols[0] = (struct lws_protocols){.name = "ftcomm.membership.v1",
                                           .callback = fake_callback};
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof(info));
  info.port = 0;
  info.iface = "127.0.0.1";
  info.protocols = f->protocols;
  info.user = f;
  info.vhost_name = "fake";
  info.options = LWS_SERVER_OPTION_DISABLE_IPV6;
  f->ctx = lws_create_context(&info);
  assert_non_null(f->ctx);
  f->port = lws_get_vhost_listen_port(lws_get_vhost_by_name(f->ctx, "fake"));
  assert_true(f->port > 0);
  assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
  return f;
}

static void fake_stop(fake_t *f) {
  __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
  lws_cancel_service(f->ctx);
  pthread_join(f->thread, NULL);
  lws_context_destroy(f->ctx);
  free(f);
}

static ftc_status_t open_against(fake_t *f, ftc__member_t **m) {
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", f->port);
  ftc__member_cfg_t c = {.coordinator = addr, .job = "j", .token = "t", .slot = 0,
                         .world_size = 1, .min_size = 1, .data_addr = "127.0.0.1:1",
                         .connect_timeout_ms = WAIT_MS};
  *m = NULL;
  return ftc__member_open(&c, m);
}

#define WELCOME "{\"v\":1,\"type\":\"welcome\",\"member_id\":77,\"epoch\":0,\"heartbeat_ms\":1000}"

/* The client's open() fails with `want` and a message containing `says`. */
static void expect_open_fails(const char *const *script, ftc_status_t want, const char *says) {
  fake_t *f = fake_start(script);
  ftc__member_t *m;
  int64_t t0 = ftc__now_ns();
  ftc_status_t st = ftc__member_open(NULL, &m); /* a NULL config is refused, not a crash */
  assert_int_equal(st, FTC_ERR_CONFIG);
  st = open_against(f, &m);
  if (st != want)
    fail_msg("expected %s, got %s: %s", ftc_strerror(want), ftc_strerror(st), ftc_last_error());
  if (!strstr(ftc_last_error(), says)) fail_msg("\"%s\" does not say \"%s\"", ftc_last_error(), says);
  assert_null(m);
  assert_true(ftc__now_ns() - t0 < (int64_t)WAIT_MS * 1000000 / 2); /* at once, not at the timeout */
  fake_stop(f);
}

/* open() succeeds; the next wait_view fails with `want` saying `says`. */
static void expect_session_fails(const char *const *script, ftc_status_t want, const char *says) {
  fake_t *f = fake_start(script);
  ftc__member_t *m;
  ftc_status_t st = open_against(f, &m);
  if (st != FTC_OK) fail_msg("open: %s: %s", ftc_strerror(st), ftc_last_error());
  ftc__view_t *v = NULL;
  st = ftc__member_wait_view(m, 0, WAIT_MS, &v);
  if (st != want)
    fail_msg("expected %s, got %s: %s", ftc_strerror(want), ftc_strerror(st), ftc_last_error());
  if (!strstr(ftc_last_error(), says)) fail_msg("\"%s\" does not say \"%s\"", ftc_last_error(), says);
  assert_null(v);
  assert_int_equal(ftc__member_error(m), want);
  ftc__member_close(m);
  fake_stop(f);
}

static void garbage_instead_of_welcome_is_a_protocol_error(void **state) {
  (void)state;
  static const char *const script[] = {"this is not json", NULL};
  expect_open_fails(script, FTC_ERR_PROTOCOL, "malformed");
}

static void unknown_version_from_the_coordinator_is_a_protocol_error(void **state) {
  (void)state;
  static const char *const script[] = {
      "{\"v\":9,\"type\":\"welcome\",\"member_id\":1,\"epoch\":0}", NULL};
  expect_open_fails(script, FTC_ERR_PROTOCOL, "version 9");
}

static void view_before_welcome_is_a_protocol_error(void **state) {
  (void)state;
  static const char *const script[] = {"{\"v\":1,\"type\":\"view\",\"epoch\":1,\"members\":[]}",
                                       NULL};
  expect_open_fails(script, FTC_ERR_PROTOCOL, "before welcome");
}

static void unknown_error_code_is_a_protocol_error(void **state) {
  (void)state;
  static const char *const script[] = {
      "{\"v\":1,\"type\":\"error\",\"code\":\"flux_capacitor\",\"reason\":\"no\"}", NULL};
  expect_open_fails(script, FTC_ERR_PROTOCOL, "flux_capacitor");
}

static void refusal_codes_map_to_statuses(void **state) {
  (void)state;
  static const char *const auth[] = {
      "{\"v\":1,\"type\":\"error\",\"code\":\"auth_failed\",\"reason\":\"bad token\"}", NULL};
  expect_open_fails(auth, FTC_ERR_AUTH, "bad token");
  static const char *const dup[] = {
      "{\"v\":1,\"type\":\"error\",\"code\":\"duplicate_slot\",\"reason\":\"taken\"}", NULL};
  expect_open_fails(dup, FTC_ERR_CONFIG, "taken");
  static const char *const dp[] = {
      "{\"v\":1,\"type\":\"error\",\"code\":\"dataplane_mismatch\",\"reason\":\"speaks 4\"}",
      NULL};
  expect_open_fails(dp, FTC_ERR_PROTOCOL, "speaks 4 (dataplane_mismatch)");
  static const char *const down[] = {
      "{\"v\":1,\"type\":\"error\",\"code\":\"shutting_down\",\"reason\":\"bye\"}", NULL};
  expect_open_fails(down, FTC_ERR_COORDINATOR, "bye");
}

static void malformed_view_after_welcome_fails_the_session(void **state) {
  (void)state;
  static const char *const script[] = {
      WELCOME,
      "{\"v\":1,\"type\":\"view\",\"epoch\":1,\"members\":[{\"rank\":3,\"slot\":0,"
      "\"member_id\":77,\"joined_epoch\":1,\"addr\":\"a\"}]}",
      NULL};
  expect_session_fails(script, FTC_ERR_PROTOCOL, "ordered by rank");
}

static void second_welcome_fails_the_session(void **state) {
  (void)state;
  static const char *const script[] = {WELCOME, WELCOME, NULL};
  expect_session_fails(script, FTC_ERR_PROTOCOL, "second welcome");
}

static void message_a_coordinator_never_sends_fails_the_session(void **state) {
  (void)state;
  static const char *const script[] = {WELCOME, "{\"v\":1,\"type\":\"leave\"}", NULL};
  expect_session_fails(script, FTC_ERR_PROTOCOL, "unexpected");
}

static void a_view_finds_this_rank_by_member_id(void **state) {
  (void)state;
  static const char *const script[] = {
      WELCOME,
      "{\"v\":1,\"type\":\"view\",\"epoch\":5,\"members\":["
      "{\"rank\":0,\"slot\":2,\"member_id\":70,\"joined_epoch\":1,\"addr\":\"h:1\"},"
      "{\"rank\":1,\"slot\":0,\"member_id\":77,\"joined_epoch\":4,\"addr\":\"h:2\"}],"
      "\"backend\":\"blob\"}",
      "{\"v\":1,\"type\":\"view\",\"epoch\":4,\"members\":[]}", /* older: ignored */
      "{\"v\":1,\"type\":\"dump_request\",\"incident\":\"inc-9\",\"epoch\":5}",
      NULL};
  fake_t *f = fake_start(script);
  ftc__member_t *m;
  assert_int_equal(open_against(f, &m), FTC_OK);
  ftc__view_t *v = NULL;
  assert_int_equal(ftc__member_wait_view(m, 0, WAIT_MS, &v), FTC_OK);
  assert_int_equal(v->epoch, 5);
  assert_int_equal(v->my_rank, 1);
  assert_int_equal(v->my_member_id, 77);
  assert_int_equal(v->members[0].slot, 2);
  assert_string_equal(v->members[1].addr, "h:2");
  assert_string_equal(v->backend_blob, "blob");
  ftc__view_free(v);
  char inc[32];
  int64_t dl = ftc__deadline_ns(WAIT_MS);
  while (!ftc__member_take_dump_request(m, inc, sizeof(inc)) && ftc__now_ns() < dl) usleep(5000);
  assert_string_equal(inc, "inc-9");
  assert_int_equal(ftc__member_wait_view(m, 5, 100, &v), FTC_ERR_TIMEOUT);
  assert_int_equal(ftc__member_error(m), FTC_OK);
  ftc__member_close(m);
  fake_stop(f);
}

/* A whole view deflated in a binary message (the hello said "deflate") is
 * read as its text; a binary message that does not inflate fails the
 * session, saying so. */
static void a_deflated_view_is_read_and_a_broken_one_refused(void **state) {
  (void)state;
  static const char *const script[] = {
      WELCOME,
      "Z:{\"v\":1,\"type\":\"view\",\"epoch\":3,\"members\":["
      "{\"rank\":0,\"slot\":0,\"member_id\":77,\"joined_epoch\":1,\"addr\":\"h:1\"}],"
      "\"backend\":null}",
      NULL};
  fake_t *f = fake_start(script);
  ftc__member_t *m;
  assert_int_equal(open_against(f, &m), FTC_OK);
  ftc__view_t *v = NULL;
  assert_int_equal(ftc__member_wait_view(m, 0, WAIT_MS, &v), FTC_OK);
  assert_int_equal(v->epoch, 3);
  assert_int_equal(v->my_rank, 0);
  assert_string_equal(v->members[0].addr, "h:1");
  ftc__view_free(v);
  ftc__member_close(m);
  fake_stop(f);
  static const char *const broken[] = {WELCOME, "B:{\"v\":1,\"type\":\"view\"}", NULL};
  expect_session_fails(broken, FTC_ERR_PROTOCOL, "does not inflate");
}

/* FDSize of /proc/self/status: the descriptor table's size. */
static int table_size(void) {
  char line[256];
  int size = -1;
  FILE *f = fopen("/proc/self/status", "r");
  assert_non_null(f);
  while (fgets(line, sizeof(line), f))
    if (!strncmp(line, "FDSize:", 7)) size = atoi(line + 7);
  fclose(f);
  assert_true(size > 0);
  return size;
}

/* The session's duplicate goes in the highest free slot above the data
 * plane, however far below the table's top it is (it probed the top 16
 * slots only), and never past the table's end (that would grow it). */
static int slot_free(int k) { return fcntl(k, F_GETFD) < 0; }

static void the_exit_slot_is_the_highest_free_one_however_far_down(void **state) {
  (void)state;
  int table = table_size(), size = table, base = open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct rlimit rl; /* the slots a process may use (valgrind keeps its own above) */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)size) size = (int)rl.rlim_cur;
  assert_true(base >= 0 && size >= 64);
  int top = size - 1; /* the highest free one as found (a caller may hold some) */
  while (top > base && !slot_free(top)) top--;
  int free_slot = size - 21; /* then every one above it taken, as by other descriptors */
  while (free_slot > base && !slot_free(free_slot)) free_slot--;
  assert_true(free_slot > base + 1 && top > free_slot);
  char *mine = calloc((size_t)size, 1); /* the slots this test takes */
  assert_non_null(mine);
  for (int k = free_slot + 1; k < size; k++)
    if (slot_free(k)) assert_int_equal(dup2(base, k), k), mine[k] = 1;
  assert_int_equal(ftc__member_exit_slot(base), free_slot);
  assert_int_equal(ftc__member_exit_slot(free_slot - 1), free_slot);
  assert_int_equal(ftc__member_exit_slot(free_slot), -1); /* every one above is taken */
  if (slot_free(free_slot - 1)) {
    assert_int_equal(dup2(base, free_slot), free_slot);
    mine[free_slot] = 1;
    assert_int_equal(ftc__member_exit_slot(base), free_slot - 1);
  }
  assert_int_equal(table_size(), table); /* not grown */
  for (int k = 0; k < size; k++)
    if (mine[k]) close(k);
  assert_int_equal(ftc__member_exit_slot(base), top);
  free(mine);
  close(base);
}

/* Sessions of one process (a communicator each) place their duplicates
 * from their own service threads, maybe at once: each gets a free slot of
 * its own up there, and the table is never grown for it. The table is
 * filled but for a few low slots (ordinary opens take those) and the top
 * NPLACE; NPLACE threads place at once, round after round. */
enum { NPLACE = 4, PLACE_ROUNDS = 300 };

typedef struct placer {
  pthread_barrier_t *go;
  int fd, above, got;
} placer_t;

static void *place_one(void *arg) {
  placer_t *p = arg;
  pthread_barrier_wait(p->go);
  p->got = ftc__member_dup_high(p->fd, p->above);
  return NULL;
}

static void sessions_placing_at_once_never_grow_the_table(void **state) {
  (void)state;
  int table = table_size(), size = table, base = open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)size) size = (int)rl.rlim_cur;
  assert_true(base >= 0 && size >= 64);
  int top[NPLACE], ntop = 0;
  for (int k = size - 1; k > base + 16 && ntop < NPLACE; k--)
    if (slot_free(k)) top[ntop++] = k;
  assert_int_equal(ntop, NPLACE);
  char *mine = calloc((size_t)size, 1);
  assert_non_null(mine);
  for (int k = base + 16; k < top[NPLACE - 1]; k++)
    if (slot_free(k)) assert_int_equal(dup2(base, k), k), mine[k] = 1;
  pthread_barrier_t go;
  assert_int_equal(pthread_barrier_init(&go, NULL, NPLACE), 0);
  for (int round = 0; round < PLACE_ROUNDS; round++) {
    placer_t p[NPLACE];
    pthread_t t[NPLACE];
    for (int i = 0; i < NPLACE; i++) {
      p[i] = (placer_t){.go = &go, .fd = base, .above = base + 15, .got = -1};
      assert_int_equal(pthread_create(&t[i], NULL, place_one, &p[i]), 0);
    }
    for (int i = 0; i < NPLACE; i++) pthread_join(t[i], NULL);
    int ours = 0;
    for (int i = 0; i < NPLACE; i++)
      for (int j = 0; j < NPLACE; j++) ours += p[i].got == top[j];
    for (int i = 0; i < NPLACE; i++)
      for (int j = 0; j < i; j++) ours -= p[i].got == p[j].got;
    if (ours != NPLACE || table_size() != table)
      fail_msg("round %d: the placements got descriptors %d %d %d %d, the %d free at the top were "
               "%d..%d; the table has %d slots, had %d",
               round, p[0].got, p[1].got, p[2].got, p[3].got, NPLACE, top[NPLACE - 1], top[0],
               table_size(), table);
    for (int i = 0; i < NPLACE; i++) close(p[i].got);
  }
  pthread_barrier_destroy(&go);
  for (int k = 0; k < size; k++)
    if (mine[k]) close(k);
  free(mine);
  close(base);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(garbage_instead_of_welcome_is_a_protocol_error),
      cmocka_unit_test(unknown_version_from_the_coordinator_is_a_protocol_error),
      cmocka_unit_test(view_before_welcome_is_a_protocol_error),
      cmocka_unit_test(unknown_error_code_is_a_protocol_error),
      cmocka_unit_test(refusal_codes_map_to_statuses),
      cmocka_unit_test(malformed_view_after_welcome_fails_the_session),
      cmocka_unit_test(second_welcome_fails_the_session),
      cmocka_unit_test(message_a_coordinator_never_sends_fails_the_session),
      cmocka_unit_test(a_view_finds_this_rank_by_member_id),
      cmocka_unit_test(a_deflated_view_is_read_and_a_broken_one_refused),
      cmocka_unit_test(the_exit_slot_is_the_highest_free_one_however_far_down),
      cmocka_unit_test(sessions_placing_at_once_never_grow_the_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
