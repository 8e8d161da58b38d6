/*
 * test_coord_backend.c - an epoch's backend blob (the NCCL unique id a rank
 * made for it) through the coordinator: a member publishes it, every member
 * of the epoch receives it; the first one wins; a blob for another epoch is
 * ignored; a joiner of the next epoch gets that epoch's blob; a later epoch
 * ends a wait for an older one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ftc_coord.h"
#include "ftc_error.h"
#include "ftc_time.h"
#include "membership/member.h"

#define TOKEN "blob-token"
#define WAIT_MS 10000

static char g_addr[64];

static ftc__coord_t *start_coord(int world, int min) {
  ftc__coord_cfg_t cfg = {
      .bind_host = "127.0.0.1", .port = 0, .job = "blobjob", .token = TOKEN,
      .world_size = world, .min_size = min, .heartbeat_ms = 100,
      .heartbeat_timeout_ms = 5000,
  };
  ftc__coord_t *co = NULL;
  assert_int_equal(ftc__coord_create(&cfg, &co), FTC_OK);
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", ftc__coord_port(co));
  return co;
}

static ftc__member_t *join(int slot, int world, int joiner) {
  char data[32];
  snprintf(data, sizeof data, "127.0.0.1:%d", 41000 + slot);
  ftc__member_cfg_t c = {
      .coordinator = g_addr, .job = "blobjob", .token = TOKEN, .slot = slot,
      .world_size = world, .min_size = 1, .joiner = joiner, .data_addr = data,
      .host = "localhost", .connect_timeout_ms = WAIT_MS,
  };
  ftc__member_t *m = NULL;
  ftc_status_t st = ftc__member_open(&c, &m);
  if (st != FTC_OK) fail_msg("slot %d: %s: %s", slot, ftc_strerror(st), ftc_last_error());
  return m;
}

static uint64_t epoch_after(ftc__member_t *m, uint64_t after) {
  ftc__view_t *v = NULL;
  ftc_status_t st = ftc__member_wait_view(m, after, WAIT_MS, &v);
  if (st != FTC_OK) fail_msg("wait_view: %s: %s", ftc_strerror(st), ftc_last_error());
  uint64_t e = v->epoch;
  ftc__view_free(v);
  return e;
}

static void published_blob_reaches_every_member_and_the_first_wins(void **state) {
  (void)state;
  ftc__coord_t *co = start_coord(3, 1);
  ftc__member_t *m[3];
  for (int i = 0; i < 3; i++) m[i] = join(i, 3, 0);
  for (int i = 0; i < 3; i++) assert_int_equal(epoch_after(m[i], 0), 1);

  /* a blob for an epoch that is not the current one is ignored */
  assert_int_equal(ftc__member_publish_backend(m[2], 7, "nccl-init:WRONG"), FTC_OK);
  assert_int_equal(ftc__member_publish_backend(m[0], 1, "nccl-init:FIRST"), FTC_OK);
  char blob[64];
  for (int i = 0; i < 3; i++) {
    ftc_status_t st = ftc__member_wait_backend(m[i], 1, WAIT_MS, blob, sizeof blob);
    if (st != FTC_OK) fail_msg("slot %d: %s: %s", i, ftc_strerror(st), ftc_last_error());
    assert_string_equal(blob, "nccl-init:FIRST");
  }
  /* the view copied now carries it too */
  ftc__view_t *v = NULL;
  assert_int_equal(ftc__member_wait_view(m[1], 0, WAIT_MS, &v), FTC_OK);
  assert_non_null(v->backend_blob);
  assert_string_equal(v->backend_blob, "nccl-init:FIRST");
  ftc__view_free(v);

  /* a second publication for the same epoch changes nothing */
  assert_int_equal(ftc__member_publish_backend(m[1], 1, "nccl-init:SECOND"), FTC_OK);
  assert_int_equal(ftc__member_wait_backend(m[2], 2, 300, blob, sizeof blob), FTC_ERR_TIMEOUT);
  assert_int_equal(ftc__member_wait_backend(m[2], 1, WAIT_MS, blob, sizeof blob), FTC_OK);
  assert_string_equal(blob, "nccl-init:FIRST");
  /* too small a buffer is refused, not cut */
  char tiny[8];
  assert_int_equal(ftc__member_wait_backend(m[0], 1, WAIT_MS, tiny, sizeof tiny),
                   FTC_ERR_INVALID_ARGUMENT);

  for (int i = 0; i < 3; i++) ftc__member_close(m[i]);
  ftc__coord_destroy(co);
}

static void next_epoch_blob_reaches_its_joiner_and_ends_older_waits(void **state) {
  (void)state;
  ftc__coord_t *co = start_coord(2, 1);
  ftc__member_t *a = join(0, 2, 0), *b = join(1, 2, 0);
  assert_int_equal(epoch_after(a, 0), 1);
  assert_int_equal(epoch_after(b, 0), 1);
  /* slot 1 leaves; epoch 2 has slot 0 alone; a joiner for slot 1 makes epoch 3 */
  ftc__member_close(b);
  assert_int_equal(epoch_after(a, 1), 2);
  char blob[64];
  /* nobody published for epoch 1: a wait for it ends once epoch 2 is here */
  assert_int_equal(ftc__member_wait_backend(a, 1, WAIT_MS, blob, sizeof blob), FTC_ERR_REVOKED);
  ftc__member_t *j = join(1, 2, 1);
  assert_int_equal(epoch_after(a, 2), 3);
  assert_int_equal(epoch_after(j, 0), 3);
  /* the survivor makes the grow id; the joiner receives it */
  assert_int_equal(ftc__member_publish_backend(a, 3, "nccl-grow:ID3"), FTC_OK);
  ftc_status_t st = ftc__member_wait_backend(j, 3, WAIT_MS, blob, sizeof blob);
  if (st != FTC_OK) fail_msg("joiner: %s: %s", ftc_strerror(st), ftc_last_error());
  assert_string_equal(blob, "nccl-grow:ID3");
  assert_int_equal(ftc__member_wait_backend(a, 3, WAIT_MS, blob, sizeof blob), FTC_OK);
  assert_string_equal(blob, "nccl-grow:ID3");
  ftc__member_close(j);
  ftc__member_close(a);
  ftc__coord_destroy(co);
}

static void oversized_blob_is_refused_locally(void **state) {
  (void)state;
  ftc__coord_t *co = start_coord(1, 1);
  ftc__member_t *m = join(0, 1, 0);
  assert_int_equal(epoch_after(m, 0), 1);
  char *big = malloc(5000);
  memset(big, 'x', 4999);
  big[4999] = '\0';
  assert_int_equal(ftc__member_publish_backend(m, 1, big), FTC_ERR_INVALID_ARGUMENT);
  free(big);
  ftc__member_close(m);
  ftc__coord_destroy(co);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(published_blob_reaches_every_member_and_the_first_wins),
      cmocka_unit_test(next_epoch_blob_reaches_its_joiner_and_ends_older_waits),
      cmocka_unit_test(oversized_blob_is_refused_locally),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
