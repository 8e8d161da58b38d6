/*
 * test_coord_delta.c - views as deltas (docs/protocol.md, "view_delta"):
 * ranks whose hello says "delta" get each epoch as the change from the one
 * before, ranks that do not (an older ftcomm) get it whole, and the change
 * applied to the previous view gives exactly the whole view. Driven through
 * the offline coordinator (the same code, no network), so every message a
 * session was sent can be read back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ftc_coord.h"
#include "ftc_alloc.h"
#include "proto/proto.h"

#define WORLD 4

typedef struct {
  ftc__coord_t *co;
  ftc__coord_session_t *s[WORLD + 1];
  uint64_t id[WORLD + 1];
} rig_t;

static void say(rig_t *r, int i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(rig_t *r, int i, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  assert_int_equal(ftc__coord_offline_receive(r->co, r->s[i], text, (size_t)n), 0);
}

/* Session i leaves: the coordinator closes it. */
static void leave(rig_t *r, int i) {
  static const char text[] = "{\"v\":1,\"type\":\"leave\",\"reason\":\"done\"}";
  assert_int_equal(ftc__coord_offline_receive(r->co, r->s[i], text, sizeof(text) - 1), -1);
}

static void hello(rig_t *r, int i, int slot, int delta, int joiner) {
  r->s[i] = ftc__coord_offline_open(r->co, "test");
  assert_non_null(r->s[i]);
  say(r, i,
      "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"token\":\"t\",\"slot\":%d,\"world_size\":%d,"
      "\"min_size\":2,\"addr\":\"10.0.0.%d:29400\",\"joiner\":%s%s}",
      slot, WORLD, slot + 1, joiner ? "true" : "false", delta ? ",\"delta\":true" : "");
}

/* The next message session i was sent, decoded into *m (ftc__msg_clear);
 * its type, FTC__MSG_NONE when nothing is queued. */
static ftc__msg_type_t next(rig_t *r, int i, ftc__msg_t *m, size_t *len) {
  static char buf[1 << 16];
  int close_after = 0;
  size_t n = ftc__coord_offline_sent(r->s[i], buf, sizeof(buf), &close_after);
  memset(m, 0, sizeof(*m));
  if (!n) return FTC__MSG_NONE;
  assert_true(n < sizeof(buf));
  if (len) *len = n;
  char why[256];
  assert_int_equal(ftc__proto_decode(buf, n, FTC__PROTO_MAX_COORD_MSG, m, why, sizeof(why)),
                   FTC__PERR_NONE);
  if (m->type == FTC__MSG_WELCOME) r->id[i] = m->member_id;
  return m->type;
}

/* Skip to the next view or delta of session i (welcomes, heartbeats). */
static ftc__msg_type_t next_view(rig_t *r, int i, ftc__msg_t *m, size_t *len) {
  for (;;) {
    ftc__msg_type_t t = next(r, i, m, len);
    if (t == FTC__MSG_VIEW || t == FTC__MSG_VIEW_DELTA || t == FTC__MSG_NONE) return t;
    ftc__msg_clear(m);
  }
}

/* A copy of a view's members whose strings outlive the message. */
typedef struct {
  ftc__wire_member_t m[WORLD + 1];
  char addr[WORLD + 1][128];
  int n;
  uint64_t epoch;
} held_t;

static void hold(held_t *h, const ftc__wire_member_t *w, int n, uint64_t epoch) {
  assert_true(n <= WORLD + 1);
  held_t t; /* (w may point into h's own strings) */
  t.n = n;
  t.epoch = epoch;
  for (int i = 0; i < n; i++) {
    t.m[i] = w[i];
    snprintf(t.addr[i], sizeof(t.addr[i]), "%s", w[i].addr);
  }
  *h = t;
  for (int i = 0; i < n; i++) h->m[i].addr = h->addr[i];
}

static void assert_same_view(const ftc__wire_member_t *a, int na, const ftc__wire_member_t *b,
                             int nb) {
  assert_int_equal(na, nb);
  for (int i = 0; i < na; i++) {
    assert_int_equal(a[i].rank, b[i].rank);
    assert_int_equal(a[i].slot, b[i].slot);
    assert_int_equal(a[i].member_id, b[i].member_id);
    assert_int_equal(a[i].joined_epoch, b[i].joined_epoch);
    assert_int_equal(a[i].state, b[i].state);
    assert_string_equal(a[i].addr, b[i].addr);
  }
  assert_true(ftc__proto_view_hash(a, na) == ftc__proto_view_hash(b, nb));
}

/* Four ranks: slots 0 and 1 take deltas, 2 and 3 do not. Epoch 1 is
 * formed; every session's first view is kept in held[]. */
static void start(rig_t *r, held_t *held) {
  memset(r, 0, sizeof(*r));
  ftc__coord_cfg_t cfg = {.job = "j", .token = "t", .world_size = WORLD, .min_size = 2,
                          .heartbeat_ms = 1000, .heartbeat_timeout_ms = 60000};
  assert_int_equal(ftc__coord_offline_create(&cfg, &r->co), FTC_OK);
  for (int i = 0; i < WORLD; i++) hello(r, i, i, i < 2, 0);
  for (int i = 0; i < WORLD; i++) {
    ftc__msg_t m;
    assert_int_equal(next_view(r, i, &m, NULL), FTC__MSG_VIEW);
    assert_int_equal(m.epoch, 1);
    hold(&held[i], m.members, m.nmembers, m.epoch);
    ftc__msg_clear(&m);
  }
}

static void stop(rig_t *r) {
  ftc__coord_offline_destroy(r->co);
  for (int i = 0; i <= WORLD; i++)
    if (r->s[i]) ftc__coord_offline_close(NULL, r->s[i]);
}

static void ranks_that_say_delta_get_the_change_and_the_others_the_whole_view(void **state) {
  (void)state;
  rig_t r;
  held_t held[WORLD];
  start(&r, held);
  /* Slot 0 holds state from epoch 1 on; slot 3 leaves. */
  say(&r, 0, "{\"v\":1,\"type\":\"heartbeat\",\"epoch\":1,\"ready\":1}");
  leave(&r, 3);
  ftc__msg_t whole, delta;
  size_t whole_len = 0, delta_len = 0;
  assert_int_equal(next_view(&r, 2, &whole, &whole_len), FTC__MSG_VIEW);
  assert_int_equal(whole.epoch, 2);
  assert_int_equal(whole.nmembers, 3);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(next_view(&r, i, &delta, &delta_len), FTC__MSG_VIEW_DELTA);
    assert_int_equal(delta.epoch, 2);
    assert_int_equal(delta.base_epoch, 1);
    /* slot 3 is removed by its verdict ("left" and "dropped") alone */
    assert_int_equal(delta.nremoved, 0);
    assert_int_equal(delta.ndropped, 1);
    assert_int_equal(delta.dropped[0].member_id, r.id[3]);
    assert_int_equal(delta.nready, 1);
    assert_int_equal(delta.ready_ids[0], r.id[0]);
    assert_int_equal(delta.nmembers, 0);
    assert_int_equal(delta.nleft, 1); /* as a whole view says it */
    ftc__wire_member_t *v = NULL;
    int n = ftc__proto_view_apply(held[i].m, held[i].n, &delta, &v);
    assert_int_equal(n, 3);
    assert_same_view(v, n, whole.members, whole.nmembers);
    ftc__free(v);
    ftc__msg_clear(&delta);
  }
  ftc__msg_clear(&whole);
  stop(&r);
}

static void every_member_holding_state_since_the_base_is_said_in_one_word(void **state) {
  (void)state;
  rig_t r;
  held_t held[WORLD];
  start(&r, held);
  for (int i = 0; i < 3; i++) say(&r, i, "{\"v\":1,\"type\":\"heartbeat\",\"epoch\":1,\"ready\":1}");
  leave(&r, 3);
  ftc__msg_t whole, delta;
  assert_int_equal(next_view(&r, 2, &whole, NULL), FTC__MSG_VIEW);
  assert_int_equal(next_view(&r, 0, &delta, NULL), FTC__MSG_VIEW_DELTA);
  assert_true(delta.ready_all);
  assert_int_equal(delta.nready, 0);
  ftc__wire_member_t *v = NULL;
  int n = ftc__proto_view_apply(held[0].m, held[0].n, &delta, &v);
  assert_int_equal(n, 3);
  for (int i = 0; i < n; i++) assert_int_equal(v[i].state, 2);
  assert_same_view(v, n, whole.members, whole.nmembers);
  ftc__free(v);
  ftc__msg_clear(&delta);
  ftc__msg_clear(&whole);
  stop(&r);
}

static void a_joiner_comes_whole_and_the_others_get_it_in_the_change(void **state) {
  (void)state;
  rig_t r;
  held_t held[WORLD];
  start(&r, held);
  leave(&r, 3);
  ftc__msg_t m;
  /* Epoch 2 (without slot 3): slot 0 takes it as a change. */
  assert_int_equal(next_view(&r, 0, &m, NULL), FTC__MSG_VIEW_DELTA);
  ftc__wire_member_t *v2 = NULL;
  int n2 = ftc__proto_view_apply(held[0].m, held[0].n, &m, &v2);
  assert_int_equal(n2, 3);
  hold(&held[0], v2, n2, 2);
  ftc__free(v2);
  ftc__msg_clear(&m);
  for (int i = 1; i < 3; i++) {
    assert_int_not_equal(next_view(&r, i, &m, NULL), FTC__MSG_NONE);
    ftc__msg_clear(&m);
  }
  /* A replacement for slot 3 (it takes deltas) joins: its first view is
   * whole, slot 0's is the change naming it, at its rank. */
  hello(&r, WORLD, 3, 1, 1);
  ftc__msg_t joiner;
  assert_int_equal(next_view(&r, WORLD, &joiner, NULL), FTC__MSG_VIEW);
  assert_int_equal(joiner.epoch, 3);
  assert_int_equal(next_view(&r, 0, &m, NULL), FTC__MSG_VIEW_DELTA);
  assert_int_equal(m.base_epoch, 2);
  assert_int_equal(m.nmembers, 1);
  assert_int_equal(m.members[0].slot, 3);
  assert_int_equal(m.members[0].rank, 3);
  assert_int_equal(m.members[0].joined_epoch, 3);
  ftc__wire_member_t *v3 = NULL;
  int n3 = ftc__proto_view_apply(held[0].m, held[0].n, &m, &v3);
  assert_int_equal(n3, 4);
  assert_same_view(v3, n3, joiner.members, joiner.nmembers);
  ftc__free(v3);
  ftc__msg_clear(&m);
  ftc__msg_clear(&joiner);
  stop(&r);
}

/* A replacement takes the slot of the member it replaces in the same epoch
 * (a job below its minimum waits for it): the change removes the old member
 * and places the joiner at its rank, between the survivors around it. */
static void a_joiner_in_the_slot_of_the_member_it_replaces_applies_in_one_change(void **state) {
  (void)state;
  ftc__wire_member_t base[3] = {{0, 0, 10, 1, "10.0.0.1:1", 2},
                                {1, 1, 11, 1, "10.0.0.2:1", 2},
                                {2, 2, 12, 1, "10.0.0.3:1", 2}};
  ftc__wire_member_t want[3] = {{0, 0, 10, 1, "10.0.0.1:1", 2},
                                {1, 1, 21, 2, "10.0.0.9:1", 1},
                                {2, 2, 12, 1, "10.0.0.3:1", 2}};
  uint64_t removed[1] = {11};
  ftc__msg_t d = {.type = FTC__MSG_VIEW_DELTA, .epoch = 2, .base_epoch = 1, .view_size = 3,
                  .view_hash = ftc__proto_view_hash(want, 3), .removed = removed, .nremoved = 1,
                  .members = &want[1], .nmembers = 1};
  ftc__wire_member_t *v = NULL;
  int n = ftc__proto_view_apply(base, 3, &d, &v);
  assert_int_equal(n, 3);
  assert_same_view(v, n, want, 3);
  ftc__free(v);
  /* The same with the joiner in the last slot, and the first. */
  for (int at = 0; at < 3; at += 2) {
    ftc__wire_member_t w[3];
    memcpy(w, base, sizeof(w));
    w[at] = (ftc__wire_member_t){at, at, 30 + (uint64_t)at, 2, "10.0.0.8:1", 1};
    uint64_t rm[1] = {base[at].member_id};
    ftc__msg_t d2 = {.type = FTC__MSG_VIEW_DELTA, .epoch = 2, .base_epoch = 1, .view_size = 3,
                     .view_hash = ftc__proto_view_hash(w, 3), .removed = rm, .nremoved = 1,
                     .members = &w[at], .nmembers = 1};
    n = ftc__proto_view_apply(base, 3, &d2, &v);
    assert_int_equal(n, 3);
    assert_same_view(v, n, w, 3);
    ftc__free(v);
  }
}

static void a_change_that_does_not_apply_is_refused_and_the_whole_view_follows_a_request(
    void **state) {
  (void)state;
  rig_t r;
  held_t held[WORLD];
  start(&r, held);
  leave(&r, 3);
  ftc__msg_t m;
  assert_int_equal(next_view(&r, 0, &m, NULL), FTC__MSG_VIEW_DELTA);
  ftc__wire_member_t *v = NULL;
  /* Another base than the one it changes (a member that missed an epoch,
   * here one member short), or a hash that does not match: refused. */
  assert_int_equal(ftc__proto_view_apply(held[0].m + 1, held[0].n - 1, &m, &v), -1);
  assert_null(v);
  m.view_hash ^= 1;
  assert_int_equal(ftc__proto_view_apply(held[0].m, held[0].n, &m, &v), -1);
  assert_null(v);
  ftc__msg_clear(&m);
  /* The rank asks: the current epoch comes whole, with its verdict and
   * its "left", as the change said them. */
  say(&r, 0, "{\"v\":1,\"type\":\"view_request\"}");
  assert_int_equal(next_view(&r, 0, &m, NULL), FTC__MSG_VIEW);
  assert_int_equal(m.epoch, 2);
  assert_int_equal(m.nmembers, 3);
  assert_int_equal(m.ndropped, 1);
  assert_int_equal(m.dropped[0].member_id, r.id[3]);
  assert_string_equal(m.dropped[0].reason, "left");
  assert_int_equal(m.nleft, 1);
  assert_int_equal(m.left[0], r.id[3]);
  ftc__msg_clear(&m);
  stop(&r);
}

/* A crash in a job at its minimum: the epoch waits for the replacement,
 * and the change that admits it also carries the verdict on the crashed
 * member (the survivors' failure dumps say it). */
static void a_replacement_after_a_crash_comes_with_the_verdict(void **state) {
  (void)state;
  rig_t r;
  memset(&r, 0, sizeof(r));
  ftc__coord_cfg_t cfg = {.job = "j", .token = "t", .world_size = 3, .min_size = 3,
                          .heartbeat_ms = 20, .heartbeat_timeout_ms = 60000};
  assert_int_equal(ftc__coord_offline_create(&cfg, &r.co), FTC_OK);
  held_t held[3];
  for (int i = 0; i < 3; i++) {
    r.s[i] = ftc__coord_offline_open(r.co, "test");
    say(&r, i,
        "{\"v\":1,\"type\":\"hello\",\"job\":\"j\",\"token\":\"t\",\"slot\":%d,"
        "\"world_size\":3,\"min_size\":3,\"addr\":\"10.0.0.%d:29400\",\"delta\":true}", i, i + 1);
  }
  for (int i = 0; i < 3; i++) {
    ftc__msg_t m;
    assert_int_equal(next_view(&r, i, &m, NULL), FTC__MSG_VIEW);
    hold(&held[i], m.members, m.nmembers, m.epoch);
    ftc__msg_clear(&m);
    say(&r, i, "{\"v\":1,\"type\":\"heartbeat\",\"epoch\":1,\"ready\":1}");
  }
  /* Slot 1 crashes: its session closes; its place is kept for the
   * evidence time (2 x 20 + 100 ms), then it is dropped. */
  ftc__coord_offline_close(r.co, r.s[1]);
  r.s[1] = NULL;
  struct timespec ts = {0, 200 * 1000000L};
  nanosleep(&ts, NULL);
  for (int i = 0; i < 3; i += 2) say(&r, i, "{\"v\":1,\"type\":\"heartbeat\",\"epoch\":1,\"ready\":1}");
  ftc__coord_offline_tick(r.co);
  hello(&r, 1, 1, 1, 1); /* the replacement (its hello's world size differs: only logged) */
  ftc__msg_t joiner;
  assert_int_equal(next_view(&r, 1, &joiner, NULL), FTC__MSG_VIEW);
  assert_int_equal(joiner.nmembers, 3);
  for (int i = 0; i < 3; i += 2) {
    ftc__msg_t m;
    assert_int_equal(next_view(&r, i, &m, NULL), FTC__MSG_VIEW_DELTA);
    assert_int_equal(m.ndropped, 1);
    assert_string_equal(m.dropped[0].reason, "crashed");
    ftc__wire_member_t *v = NULL;
    int n = ftc__proto_view_apply(held[i].m, held[i].n, &m, &v);
    assert_int_equal(n, 3);
    assert_same_view(v, n, joiner.members, joiner.nmembers);
    ftc__free(v);
    ftc__msg_clear(&m);
  }
  ftc__msg_clear(&joiner);
  stop(&r);
}

static void a_change_that_is_malformed_is_refused_by_the_decoder(void **state) {
  (void)state;
  static const char *const bad[] = {
      /* hash not 16 hex digits */
      "{\"v\":1,\"type\":\"view_delta\",\"epoch\":2,\"base\":1,\"size\":1,\"hash\":\"xyz\"}",
      /* an epoch not above its base */
      "{\"v\":1,\"type\":\"view_delta\",\"epoch\":1,\"base\":1,\"size\":1,"
      "\"hash\":\"0123456789abcdef\"}",
      /* removed ids that are not member ids */
      "{\"v\":1,\"type\":\"view_delta\",\"epoch\":2,\"base\":1,\"size\":1,"
      "\"hash\":\"0123456789abcdef\",\"removed\":[0]}",
      /* joined members out of rank order */
      "{\"v\":1,\"type\":\"view_delta\",\"epoch\":2,\"base\":1,\"size\":3,"
      "\"hash\":\"0123456789abcdef\",\"joined\":["
      "{\"rank\":2,\"slot\":2,\"member_id\":5,\"joined_epoch\":2,\"addr\":\"a:1\"},"
      "{\"rank\":1,\"slot\":1,\"member_id\":6,\"joined_epoch\":2,\"addr\":\"a:2\"}]}",
      /* no size */
      "{\"v\":1,\"type\":\"view_delta\",\"epoch\":2,\"base\":1,\"hash\":\"0123456789abcdef\"}",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ftc__msg_t m;
    char why[256];
    assert_int_equal(ftc__proto_decode(bad[i], strlen(bad[i]), FTC__PROTO_MAX_COORD_MSG, &m, why,
                                       sizeof(why)),
                     FTC__PERR_BAD_MESSAGE);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ranks_that_say_delta_get_the_change_and_the_others_the_whole_view),
      cmocka_unit_test(every_member_holding_state_since_the_base_is_said_in_one_word),
      cmocka_unit_test(a_joiner_comes_whole_and_the_others_get_it_in_the_change),
      cmocka_unit_test(a_joiner_in_the_slot_of_the_member_it_replaces_applies_in_one_change),
      cmocka_unit_test(
          a_change_that_does_not_apply_is_refused_and_the_whole_view_follows_a_request),
      cmocka_unit_test(a_replacement_after_a_crash_comes_with_the_verdict),
      cmocka_unit_test(a_change_that_is_malformed_is_refused_by_the_decoder),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
