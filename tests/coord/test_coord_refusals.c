/*
 * test_coord_refusals.c - what the coordinator does with a peer that breaks
 * the protocol, seen from a raw WebSocket client: malformed JSON, an unknown
 * version, an oversized message, a message before hello, a binary frame, a
 * second hello. Each gets an error message with its code and a closed
 * session, and the coordinator keeps serving: a real rank joins afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "coord_test_util.h"
#include "ftc_coord.h"
#include "ftc_error.h"
#include "membership/member.h"
#include "proto/proto.h"

#define TOKEN "tok-123"

static ftc__coord_t *co;
static int port;

static int setup(void **state) {
  (void)state;
  ftc__coord_cfg_t cfg = {.bind_host = "127.0.0.1", .job = "rawjob", .token = TOKEN,
                          .world_size = 1, .heartbeat_ms = 100, .hello_timeout_ms = 1000};
  if (ftc__coord_create(&cfg, &co) != FTC_OK) return -1;
  port = ftc__coord_port(co);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  ftc__coord_destroy(co);
  return 0;
}

static const char *hello_json(int slot) {
  static char buf[512];
  snprintf(buf, sizeof(buf),
           "{\"v\":1,\"type\":\"hello\",\"job\":\"rawjob\",\"token\":\"%s\",\"slot\":%d,"
           "\"world_size\":1,\"min_size\":1,\"addr\":\"127.0.0.1:9\"}",
           TOKEN, slot);
  return buf;
}

/* A new member's first frames: the welcome, then its first view. */
static void expect_welcome_and_view(int fd) {
  char *text = NULL;
  assert_int_equal(raw_ws_recv(fd, &text, 5000), WS_TEXT);
  assert_non_null(strstr(text, "\"welcome\""));
  free(text);
  assert_int_equal(raw_ws_recv(fd, &text, 5000), WS_TEXT);
  assert_non_null(strstr(text, "\"view\""));
  free(text);
}

/* The next frame is an error with `code`; then the session closes. */
static void expect_refusal(int fd, const char *code) {
  char *text = NULL;
  int op = raw_ws_recv(fd, &text, 5000);
  if (op != WS_TEXT) fail_msg("expected an error message with code %s, got opcode %d", code, op);
  json_error_t err;
  json_t *o = json_loads(text, 0, &err);
  assert_non_null(o);
  assert_int_equal(json_integer_value(json_object_get(o, "v")), 1);
  assert_string_equal(json_string_value(json_object_get(o, "type")), "error");
  if (strcmp(json_string_value(json_object_get(o, "code")), code) != 0)
    fail_msg("expected code %s, got %s", code, text);
  assert_true(json_string_length(json_object_get(o, "reason")) > 0);
  json_decref(o);
  free(text);
  assert_true(raw_ws_closed(fd, 5000));
  close(fd);
}

/* The coordinator still serves: a real rank joins and gets epoch 1. */
static void expect_coordinator_serves(void) {
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  ftc__member_cfg_t c = {.coordinator = addr, .job = "rawjob", .token = TOKEN, .slot = 0,
                         .world_size = 1, .min_size = 1, .data_addr = "127.0.0.1:1",
                         .connect_timeout_ms = 5000};
  ftc__member_t *m = NULL;
  ftc_status_t st = ftc__member_open(&c, &m);
  if (st != FTC_OK) fail_msg("%s: %s", ftc_strerror(st), ftc_last_error());
  ftc__view_t *v = NULL;
  assert_int_equal(ftc__member_wait_view(m, 0, 5000, &v), FTC_OK);
  assert_int_equal(v->size, 1);
  ftc__view_free(v);
  ftc__member_close(m);
}

static int connect_raw(void) {
  int fd = raw_ws_connect(port);
  if (fd < 0) fail_msg("cannot open a WebSocket to 127.0.0.1:%d", port);
  return fd;
}

static void malformed_json_is_refused_and_coordinator_stays_up(void **state) {
  (void)state;
  int fd = connect_raw();
  assert_int_equal(raw_ws_send_text(fd, "{\"v\":1,\"type\":\"hello\","), 0);
  expect_refusal(fd, "bad_json");
  fd = connect_raw();
  assert_int_equal(raw_ws_send_text(fd, "[1,2,3]"), 0);
  expect_refusal(fd, "bad_json");
  expect_coordinator_serves();
}

static void unknown_version_is_refused_and_coordinator_stays_up(void **state) {
  (void)state;
  int fd = connect_raw();
  assert_int_equal(raw_ws_send_text(fd, "{\"v\":2,\"type\":\"hello\"}"), 0);
  expect_refusal(fd, "bad_version");
  fd = connect_raw();
  assert_int_equal(raw_ws_send_text(fd, "{\"type\":\"hello\"}"), 0);
  expect_refusal(fd, "bad_version");
  expect_coordinator_serves();
}

static void oversized_message_is_refused_and_coordinator_stays_up(void **state) {
  (void)state;
  /* One frame declared over the bound: refused from its first bytes. */
  int fd = connect_raw();
  char chunk[4096];
  memset(chunk, ' ', sizeof(chunk));
  assert_int_equal(raw_ws_send_partial(fd, WS_TEXT, 1, chunk, sizeof(chunk),
                                       FTC__PROTO_MAX_RANK_MSG + 1),
                   0);
  expect_refusal(fd, "too_large");
  /* A message over the bound made of small fragments. */
  fd = connect_raw();
  size_t frag = 32 * 1024, sent = 0;
  char *big = malloc(frag);
  memset(big, ' ', frag);
  int first = 1;
  while (sent <= FTC__PROTO_MAX_RANK_MSG) {
    /* opcode 0 = continuation after the first fragment; FIN never set */
    assert_int_equal(raw_ws_send_partial(fd, first ? WS_TEXT : 0, 0, big, frag, frag), 0);
    first = 0;
    sent += frag;
  }
  free(big);
  expect_refusal(fd, "too_large");
  expect_coordinator_serves();
}

static void message_before_hello_is_refused_and_coordinator_stays_up(void **state) {
  (void)state;
  int fd = connect_raw();
  assert_int_equal(raw_ws_send_text(fd, "{\"v\":1,\"type\":\"heartbeat\",\"epoch\":0}"), 0);
  expect_refusal(fd, "not_authenticated");
  fd = connect_raw();
  assert_int_equal(raw_ws_send_text(fd, "{\"v\":1,\"type\":\"failure\",\"epoch\":1,\"ranks\":[0]}"),
                   0);
  expect_refusal(fd, "not_authenticated");
  expect_coordinator_serves();
}

static void invalid_fields_and_unknown_types_are_refused(void **state) {
  (void)state;
  static const char *const bad[] = {
      "{\"v\":1,\"type\":\"launch_missiles\"}",
      "{\"v\":1,\"type\":\"hello\",\"job\":\"rawjob\",\"token\":\"" TOKEN "\",\"slot\":-1,"
      "\"world_size\":1,\"min_size\":1,\"addr\":\"x\"}",
      "{\"v\":1,\"type\":\"hello\",\"job\":\"rawjob\",\"token\":\"" TOKEN "\",\"slot\":\"0\","
      "\"world_size\":1,\"min_size\":1,\"addr\":\"x\"}",
      "{\"v\":1,\"type\":\"hello\",\"job\":\"rawjob\",\"slot\":0,\"world_size\":1,"
      "\"min_size\":1,\"addr\":\"x\"}",
      "{\"v\":1,\"v\":1,\"type\":\"hello\"}",
      "{\"v\":1,\"type\":7}",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    int fd = connect_raw();
    assert_int_equal(raw_ws_send_text(fd, bad[i]), 0);
    expect_refusal(fd, strstr(bad[i], "\"v\":1,\"v\"") ? "bad_json" : "bad_message");
  }
  expect_coordinator_serves();
}

static int connect_raw(void);

/* A hello whose data-plane address is not host:port or [IPv6]:port is
 * refused, the reason saying what is wrong; well-formed IPv6 ones join. */
static void malformed_data_addresses_are_refused(void **state) {
  (void)state;
  static const char *const bad[][2] = {
      {"fd00::1:7470", "brackets"},
      {"[fd00::1:7470", "does not close"},
      {"10.0.0.1", "has no port"},
      {"[10.0.0.1]:80", "is not an IPv6 address"},
      {"host:99999", "no valid port"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char msg[512];
    snprintf(msg, sizeof(msg),
             "{\"v\":1,\"type\":\"hello\",\"job\":\"rawjob\",\"token\":\"" TOKEN "\",\"slot\":0,"
             "\"world_size\":1,\"min_size\":1,\"addr\":\"%s\"}",
             bad[i][0]);
    int fd = connect_raw();
    assert_int_equal(raw_ws_send_text(fd, msg), 0);
    char *text = NULL;
    assert_int_equal(raw_ws_recv(fd, &text, 5000), WS_TEXT);
    if (!strstr(text, "\"bad_message\"") || !strstr(text, bad[i][1]))
      fail_msg("addr %s: expected bad_message saying \"%s\", got %s", bad[i][0], bad[i][1], text);
    free(text);
    assert_true(raw_ws_closed(fd, 5000));
    close(fd);
  }
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  ftc__member_cfg_t c = {.coordinator = addr, .job = "rawjob", .token = TOKEN, .slot = 0,
                         .world_size = 1, .min_size = 1, .data_addr = "[fd00::1:2]:7470",
                         .connect_timeout_ms = 5000};
  ftc__member_t *m = NULL;
  assert_int_equal(ftc__member_open(&c, &m), FTC_OK);
  ftc__view_t *v = NULL;
  assert_int_equal(ftc__member_wait_view(m, 0, 5000, &v), FTC_OK);
  assert_string_equal(v->members[0].addr, "[fd00::1:2]:7470");
  ftc__view_free(v);
  ftc__member_close(m);
}

static void binary_frame_is_refused(void **state) {
  (void)state;
  int fd = connect_raw();
  assert_int_equal(raw_ws_send(fd, WS_BINARY, "\x01\x02", 2), 0);
  expect_refusal(fd, "bad_json");
  expect_coordinator_serves();
}

static void wrong_token_over_raw_session_gets_auth_failed(void **state) {
  (void)state;
  int fd = connect_raw();
  assert_int_equal(raw_ws_send_text(fd, "{\"v\":1,\"type\":\"hello\",\"job\":\"rawjob\","
                                        "\"token\":\"nope\",\"slot\":0,\"world_size\":1,"
                                        "\"min_size\":1,\"addr\":\"x\"}"),
                   0);
  expect_refusal(fd, "auth_failed");
  expect_coordinator_serves();
}

static void second_hello_is_refused(void **state) {
  (void)state;
  int fd = connect_raw();
  assert_int_equal(raw_ws_send_text(fd, hello_json(0)), 0);
  expect_welcome_and_view(fd);
  assert_int_equal(raw_ws_send_text(fd, hello_json(0)), 0);
  expect_refusal(fd, "unexpected");
  expect_coordinator_serves();
}

/* ---- the hello in the upgrade request (docs/protocol.md) ---- */

#define BOTH FTC__PROTO_WS_NAME_HELLO ", " FTC__PROTO_WS_NAME

/* base64url of text (the header's value); the caller frees. */
static char *b64(const char *text) {
  size_t n = strlen(text);
  char *out = malloc(ftc__b64url_len(n) + 1);
  assert_non_null(out);
  ftc__b64url_encode(text, n, out);
  return out;
}

/* A session whose request carries `hdr` (NULL: none) and offers both names:
 * the coordinator selects the hello-in-request one. */
static int connect_with_header(const char *hdr) {
  char sel[64];
  int fd = raw_ws_connect_ex(port, BOTH, hdr, sel, sizeof(sel));
  if (fd < 0) fail_msg("no 101 for a request with a hello header (%d)", fd);
  assert_string_equal(sel, FTC__PROTO_WS_NAME_HELLO);
  return fd;
}

/* The refusal's code and reason (the caller frees *reason); the session closes. */
static void read_refusal(int fd, char *code, size_t code_len, char **reason) {
  char *text = NULL;
  int op = raw_ws_recv(fd, &text, 5000);
  if (op != WS_TEXT) fail_msg("expected an error message, got opcode %d", op);
  json_t *o = json_loads(text, 0, NULL);
  assert_non_null(o);
  assert_string_equal(json_string_value(json_object_get(o, "type")), "error");
  snprintf(code, code_len, "%s", json_string_value(json_object_get(o, "code")));
  *reason = strdup(json_string_value(json_object_get(o, "reason")));
  json_decref(o);
  free(text);
  assert_true(raw_ws_closed(fd, 5000));
  close(fd);
}

static void hello_in_the_request_is_admitted_without_a_hello_frame(void **state) {
  (void)state;
  ftc__coord_stats_t before, after;
  ftc__coord_stats(co, &before);
  char *hdr = b64(hello_json(0));
  int fd = connect_with_header(hdr);
  free(hdr);
  /* Nothing sent after the request: welcome and the first view come. */
  expect_welcome_and_view(fd);
  ftc__coord_stats(co, &after);
  assert_int_equal(after.hello_in_request, before.hello_in_request + 1);
  assert_int_equal(after.refused, before.refused);
  /* A hello frame after it is a second hello. */
  assert_int_equal(raw_ws_send_text(fd, hello_json(0)), 0);
  expect_refusal(fd, "unexpected");
  expect_coordinator_serves();
}

static void old_style_client_sends_its_hello_as_a_frame(void **state) {
  (void)state;
  ftc__coord_stats_t before, after;
  ftc__coord_stats(co, &before);
  /* Offering only the old name (even with a header, which is then ignored). */
  char sel[64];
  char *hdr = b64("{\"v\":1,\"type\":\"hello\",\"token\":\"nope\"}");
  int fd = raw_ws_connect_ex(port, FTC__PROTO_WS_NAME, hdr, sel, sizeof(sel));
  free(hdr);
  assert_true(fd >= 0);
  assert_string_equal(sel, FTC__PROTO_WS_NAME);
  char *text = NULL;
  assert_int_equal(raw_ws_recv(fd, &text, 300), -1); /* waits for the frame */
  assert_int_equal(raw_ws_send_text(fd, hello_json(0)), 0);
  assert_int_equal(raw_ws_recv(fd, &text, 5000), WS_TEXT);
  assert_non_null(strstr(text, "\"welcome\""));
  free(text);
  ftc__coord_stats(co, &after);
  assert_int_equal(after.hello_in_request, before.hello_in_request);
  close(fd);
  expect_coordinator_serves();
}

/* The same hello text as a frame and in the header: the same code and reason. */
static void refusal_by_both_paths(const char *hello, const char *want_code) {
  char code_frame[64], code_hdr[64];
  char *reason_frame = NULL, *reason_hdr = NULL;
  int fd = connect_raw();
  assert_int_equal(raw_ws_send_text(fd, hello), 0);
  read_refusal(fd, code_frame, sizeof(code_frame), &reason_frame);
  char *hdr = b64(hello);
  fd = connect_with_header(hdr);
  free(hdr);
  read_refusal(fd, code_hdr, sizeof(code_hdr), &reason_hdr);
  if (strcmp(code_frame, want_code) || strcmp(code_hdr, want_code) ||
      strcmp(reason_frame, reason_hdr))
    fail_msg("frame: %s (%s); header: %s (%s); want %s", code_frame, reason_frame, code_hdr,
             reason_hdr, want_code);
  free(reason_frame);
  free(reason_hdr);
}

static void refusals_through_the_header_match_the_frames(void **state) {
  (void)state;
  refusal_by_both_paths("{\"v\":1,\"type\":\"hello\",\"job\":\"rawjob\",\"token\":\"nope\","
                        "\"slot\":0,\"world_size\":1,\"min_size\":1,\"addr\":\"x\"}",
                        "auth_failed");
  refusal_by_both_paths("{\"v\":1,\"type\":\"hello\",\"job\":\"other\",\"token\":\"" TOKEN
                        "\",\"slot\":0,\"world_size\":1,\"min_size\":1,\"addr\":\"x\"}",
                        "wrong_job");
  refusal_by_both_paths("{\"v\":1,\"type\":\"hello\",\"job\":\"rawjob\",\"token\":\"" TOKEN
                        "\",\"slot\":5,\"world_size\":1,\"min_size\":1,\"addr\":\"x\"}",
                        "bad_slot");
  refusal_by_both_paths("{\"v\":1,\"type\":\"hello\",", "bad_json");
  refusal_by_both_paths("{\"v\":2,\"type\":\"hello\"}", "bad_version");
  refusal_by_both_paths("{\"v\":1,\"type\":\"hello\",\"job\":\"rawjob\"}", "bad_message");
  refusal_by_both_paths("{\"v\":1,\"type\":\"heartbeat\",\"epoch\":0}", "not_authenticated");
  expect_coordinator_serves();
}

static void malformed_and_oversized_headers_are_refused(void **state) {
  (void)state;
  char code[64];
  char *reason = NULL;
  /* Not base64url. */
  int fd = connect_with_header("eyJ2Ijox+/==!");
  read_refusal(fd, code, sizeof(code), &reason);
  assert_string_equal(code, "bad_json");
  assert_non_null(strstr(reason, "base64url"));
  free(reason);
  /* The subprotocol without the header. */
  fd = connect_with_header(NULL);
  read_refusal(fd, code, sizeof(code), &reason);
  assert_string_equal(code, "bad_message");
  assert_non_null(strstr(reason, "X-Ftcomm-Hello"));
  free(reason);
  /* Over FTC__PROTO_MAX_HELLO_HEADER, within lws's request space. */
  char *big = malloc(FTC__PROTO_MAX_HELLO_HEADER + 2);
  assert_non_null(big);
  memset(big, 'A', FTC__PROTO_MAX_HELLO_HEADER + 1);
  big[FTC__PROTO_MAX_HELLO_HEADER + 1] = '\0';
  fd = connect_with_header(big);
  read_refusal(fd, code, sizeof(code), &reason);
  assert_string_equal(code, "too_large");
  free(reason);
  free(big);
  /* Over lws's request space: no 101 at all, the coordinator stays up. */
  big = malloc(FTC__PROTO_COORD_HEADER_SPACE + 16);
  assert_non_null(big);
  memset(big, 'A', FTC__PROTO_COORD_HEADER_SPACE + 15);
  big[FTC__PROTO_COORD_HEADER_SPACE + 15] = '\0';
  assert_int_equal(raw_ws_connect_ex(port, BOTH, big, NULL, 0), -2);
  free(big);
  expect_coordinator_serves();
}

static void silent_connection_is_closed_after_the_hello_timeout(void **state) {
  (void)state;
  int fd = connect_raw();
  int64_t t0 = ftc__now_ns();
  assert_true(raw_ws_closed(fd, 5000));
  int64_t ms = (ftc__now_ns() - t0) / 1000000;
  assert_true(ms >= 500);
  close(fd);
  expect_coordinator_serves();
}

static void heartbeat_is_answered_with_the_current_epoch(void **state) {
  (void)state;
  int fd = connect_raw();
  assert_int_equal(raw_ws_send_text(fd, hello_json(0)), 0);
  char *text = NULL;
  assert_int_equal(raw_ws_recv(fd, &text, 5000), WS_TEXT); /* welcome */
  free(text);
  assert_int_equal(raw_ws_recv(fd, &text, 5000), WS_TEXT); /* view */
  json_t *v = json_loads(text, 0, NULL);
  json_int_t epoch = json_integer_value(json_object_get(v, "epoch"));
  json_decref(v);
  free(text);
  assert_int_equal(raw_ws_send_text(fd, "{\"v\":1,\"type\":\"heartbeat\",\"epoch\":0}"), 0);
  assert_int_equal(raw_ws_recv(fd, &text, 5000), WS_TEXT);
  json_t *hb = json_loads(text, 0, NULL);
  assert_string_equal(json_string_value(json_object_get(hb, "type")), "heartbeat");
  assert_int_equal(json_integer_value(json_object_get(hb, "epoch")), epoch);
  json_decref(hb);
  free(text);
  assert_int_equal(raw_ws_send_text(fd, "{\"v\":1,\"type\":\"leave\",\"reason\":\"done\"}"), 0);
  assert_true(raw_ws_closed(fd, 5000));
  close(fd);
  expect_coordinator_serves();
}

static void peer_that_never_reads_is_disconnected(void **state) {
  (void)state;
  int fd = connect_raw();
  assert_int_equal(raw_ws_send_text(fd, hello_json(0)), 0);
  /* Heartbeats are answered; never reading the answers fills the socket,
   * then the coordinator's queue for this session, which it bounds. */
  const char *hb = "{\"v\":1,\"type\":\"heartbeat\",\"epoch\":0}";
  int closed = 0;
  for (int i = 0; i < 2000000 && !closed; i++) closed = raw_ws_send_text(fd, hb) != 0;
  assert_true(closed);
  close(fd);
  expect_coordinator_serves();
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state % n);
}

/* Mutate a valid message in place (len bytes, cap capacity); returns the new length. */
static size_t mutate(char *b, size_t len, size_t cap) {
  static const char *const tokens[] = {"{", "}", "[", "]", "\"", ":", ",", "null", "-1",
                                       "99999999999999999999", "1e308", "\\u0000", "\xff",
                                       "\"v\":2", "true", "\"\"", "\\"};
  int rounds = 1 + (int)rnd(3);
  for (int r = 0; r < rounds && len > 0; r++) {
    size_t at = rnd((uint32_t)len);
    switch (rnd(5)) {
      case 0: b[at] = (char)rnd(256); break;             /* flip a byte */
      case 1: len = at; break;                            /* truncate */
      case 2: {                                           /* delete a span */
        size_t n = 1 + rnd(8);
        if (at + n > len) n = len - at;
        memmove(b + at, b + at + n, len - at - n);
        len -= n;
        break;
      }
      default: {                                          /* insert a token */
        const char *t = tokens[rnd(sizeof(tokens) / sizeof(tokens[0]))];
        size_t n = strlen(t);
        if (len + n >= cap) break;
        memmove(b + at + n, b + at, len - at);
        memcpy(b + at, t, n);
        len += n;
        break;
      }
    }
  }
  return len;
}

/* Mutated messages, before and after a valid hello: the coordinator answers
 * each (or not) and keeps serving; a real rank joins afterwards. */
static void mutated_messages_never_bring_the_coordinator_down(void **state) {
  (void)state;
  const char *seeds[] = {
      hello_json(0),
      "{\"v\":1,\"type\":\"heartbeat\",\"epoch\":3}",
      "{\"v\":1,\"type\":\"failure\",\"epoch\":1,\"ranks\":[0,1],\"member_ids\":[5,6],\"status\":5}",
      "{\"v\":1,\"type\":\"dump\",\"incident\":\"i-1\",\"rank\":0,\"offset\":0,\"total\":3,"
      "\"last\":true,\"data\":\"abc\"}",
      "{\"v\":1,\"type\":\"leave\",\"reason\":\"x\"}",
      "{\"v\":1,\"type\":\"view\",\"epoch\":1,\"members\":[{\"rank\":0,\"slot\":0,"
      "\"member_id\":1,\"joined_epoch\":1,\"addr\":\"a\"}],\"backend\":null}",
  };
  char hello0[512];
  snprintf(hello0, sizeof(hello0), "%s", hello_json(0));
  seeds[0] = hello0;
  enum { ITER = 600 };
  for (int i = 0; i < ITER; i++) {
    int fd = connect_raw();
    if (rnd(2)) assert_int_equal(raw_ws_send_text(fd, hello0), 0);
    char buf[1024];
    const char *seed = seeds[rnd(sizeof(seeds) / sizeof(seeds[0]))];
    size_t len = strlen(seed);
    memcpy(buf, seed, len);
    len = mutate(buf, len, sizeof(buf));
    raw_ws_send(fd, rnd(10) ? WS_TEXT : WS_BINARY, buf, len); /* may fail: refused already */
    close(fd);
  }
  /* Let the coordinator see the last close before slot 0 joins again. */
  ftc__coord_stats_t st;
  int64_t dl = ftc__deadline_ns(5000);
  do {
    usleep(10000);
    ftc__coord_stats(co, &st);
  } while (st.connected > 0 && ftc__now_ns() < dl);
  expect_coordinator_serves();
  ftc__coord_stats(co, &st);
  assert_true(st.refused > ITER / 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(malformed_json_is_refused_and_coordinator_stays_up),
      cmocka_unit_test(unknown_version_is_refused_and_coordinator_stays_up),
      cmocka_unit_test(oversized_message_is_refused_and_coordinator_stays_up),
      cmocka_unit_test(message_before_hello_is_refused_and_coordinator_stays_up),
      cmocka_unit_test(invalid_fields_and_unknown_types_are_refused),
      cmocka_unit_test(malformed_data_addresses_are_refused),
      cmocka_unit_test(binary_frame_is_refused),
      cmocka_unit_test(wrong_token_over_raw_session_gets_auth_failed),
      cmocka_unit_test(second_hello_is_refused),
      cmocka_unit_test(hello_in_the_request_is_admitted_without_a_hello_frame),
      cmocka_unit_test(old_style_client_sends_its_hello_as_a_frame),
      cmocka_unit_test(refusals_through_the_header_match_the_frames),
      cmocka_unit_test(malformed_and_oversized_headers_are_refused),
      cmocka_unit_test(silent_connection_is_closed_after_the_hello_timeout),
      cmocka_unit_test(heartbeat_is_answered_with_the_current_epoch),
      cmocka_unit_test(peer_that_never_reads_is_disconnected),
      cmocka_unit_test(mutated_messages_never_bring_the_coordinator_down),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
