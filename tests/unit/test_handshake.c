/*
 * test_handshake.c - the data-plane handshake's building blocks: SHA-256
 * and HMAC-SHA256 against the published test vectors (FIPS 180-4 examples,
 * RFC 4231), and the hello message: it round-trips with the wire settings,
 * a wrong token, a different nonce, a flipped bit, a changed setting or a
 * foreign magic are all rejected, another protocol version is told from
 * its first bytes, and a difference in the settings is described with both
 * values and the variable to set.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tcp/tcp.h"

static void hex(const uint8_t *d, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void sha256_matches_the_fips_examples(void **state) {
  (void)state;
  uint8_t d[32];
  char h[65];
  ftc__sha256("abc", 3, d);
  hex(d, 32, h);
  assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  ftc__sha256("", 0, d);
  hex(d, 32, h);
  assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 448 bits */
  ftc__sha256(two, strlen(two), d);
  hex(d, 32, h);
  assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void hmac_sha256_matches_rfc_4231(void **state) {
  (void)state;
  uint8_t d[32], key[131];
  char h[65];
  ftc__hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d); /* test case 2 */
  hex(d, 32, h);
  assert_string_equal(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  memset(key, 0xaa, sizeof(key)); /* test case 6: a key longer than the block */
  const char *msg = "Test Using Larger Than Block-Size Key - Hash Key First";
  ftc__hmac_sha256(key, sizeof(key), msg, strlen(msg), d);
  hex(d, 32, h);
  assert_string_equal(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static const uint8_t nonce[FTC__TCP_NONCE_SIZE] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static void a_hello_round_trips_with_the_right_token_and_nonce(void **state) {
  (void)state;
  ftc__tcp_hello_t h = {FTC__TCP_HELLO, 42, 0x1122334455667788ULL, 3, 8,
                        {0x0102030405060708ULL, 0x1112131415161718ULL, FTC_ALGO_HALVING, 1}};
  ftc__tcp_hello_t got;
  uint8_t msg[FTC__TCP_HELLO_SIZE];
  ftc__tcp_hello_encode(msg, &h, "secret", nonce);
  assert_int_equal(ftc__tcp_hello_decode(msg, &got, "secret", nonce), 0);
  assert_int_equal(got.kind, FTC__TCP_HELLO);
  assert_true(got.epoch == 42 && got.member_id == 0x1122334455667788ULL);
  assert_int_equal(got.rank, 3);
  assert_int_equal(got.size, 8);
  assert_true(got.wire.ring_threshold == 0x0102030405060708ULL);
  assert_true(got.wire.halving_max == 0x1112131415161718ULL);
  assert_int_equal(got.wire.algo, FTC_ALGO_HALVING);
  assert_int_equal(got.wire.sockets, 1);
}

/* The answer to a member whose settings differ is a hello too. */
static void a_mismatch_answer_round_trips(void **state) {
  (void)state;
  ftc__tcp_hello_t h = {FTC__TCP_MISMATCH, 7, 1000, 0, 2, {262144, 16777216, FTC_ALGO_AUTO, 2, 96}};
  ftc__tcp_hello_t got;
  uint8_t msg[FTC__TCP_HELLO_SIZE];
  ftc__tcp_hello_encode(msg, &h, "secret", nonce);
  assert_int_equal(ftc__tcp_hello_decode(msg, &got, "secret", nonce), 0);
  assert_int_equal(got.kind, FTC__TCP_MISMATCH);
  /* field by field: the struct has padding */
  assert_true(got.wire.ring_threshold == h.wire.ring_threshold && got.wire.halving_max == h.wire.halving_max);
  assert_true(got.wire.algo == h.wire.algo && got.wire.sockets == h.wire.sockets);
  assert_int_equal(got.wire.ncpu, 96);
}

/* A peer that lowers a setting in flight cannot pass it for its own: each
 * setting is under the MAC. */
static void a_changed_wire_setting_fails_the_mac(void **state) {
  (void)state;
  ftc__tcp_hello_t h = {FTC__TCP_HELLO_UP, 42, 7, 3, 8, {262144, 16777216, FTC_ALGO_AUTO, 2}};
  ftc__tcp_hello_t got;
  uint8_t msg[FTC__TCP_HELLO_SIZE], bad[FTC__TCP_HELLO_SIZE];
  ftc__tcp_hello_encode(msg, &h, "secret", nonce);
  ftc__tcp_hello_t other[] = {
      {FTC__TCP_HELLO_UP, 42, 7, 3, 8, {2048, 16777216, FTC_ALGO_AUTO, 2}},
      {FTC__TCP_HELLO_UP, 42, 7, 3, 8, {262144, 0, FTC_ALGO_AUTO, 2}},
      {FTC__TCP_HELLO_UP, 42, 7, 3, 8, {262144, 16777216, FTC_ALGO_RING, 2}},
      {FTC__TCP_HELLO_UP, 42, 7, 3, 8, {262144, 16777216, FTC_ALGO_AUTO, 1}},
  };
  for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
    /* The other settings' bytes with the original MAC. */
    ftc__tcp_hello_encode(bad, &other[i], "secret", nonce);
    memcpy(bad + FTC__TCP_HELLO_SIZE - 32, msg + FTC__TCP_HELLO_SIZE - 32, 32);
    assert_memory_not_equal(bad, msg, FTC__TCP_HELLO_SIZE - 32);
    assert_int_equal(ftc__tcp_hello_decode(bad, &got, "secret", nonce), -2);
  }
}

/* A peer of another protocol version is told from the first 8 bytes,
 * whatever the size of the rest of its hello. */
static void another_protocol_version_is_told_from_the_first_bytes(void **state) {
  (void)state;
  ftc__tcp_hello_t h = {FTC__TCP_HELLO, 42, 7, 3, 8, {0}}, got;
  uint8_t msg[FTC__TCP_HELLO_SIZE];
  ftc__tcp_hello_encode(msg, &h, "secret", nonce);
  assert_int_equal(ftc__tcp_hello_version(msg), FTC__TCP_PROTO);
  assert_int_equal(FTC__TCP_PROTO, 8);
  const uint8_t v2[FTC__TCP_PREFIX_SIZE] = {'D', 'C', 'T', 'F', 2, 0, 3, 0}; /* an 88-byte hello's start */
  assert_int_equal(ftc__tcp_hello_version(v2), 2);
  memcpy(msg, v2, sizeof(v2));
  assert_int_equal(ftc__tcp_hello_decode(msg, &got, "secret", nonce), -1);
  const uint8_t v1[FTC__TCP_PREFIX_SIZE] = {'D', 'C', 'T', 'F', 1, 0, 1, 0}; /* a 64-byte hello's start */
  assert_int_equal(ftc__tcp_hello_version(v1), 1);
  memcpy(msg, v1, sizeof(v1));
  assert_int_equal(ftc__tcp_hello_decode(msg, &got, "secret", nonce), -1);
  const uint8_t http[FTC__TCP_PREFIX_SIZE] = {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T'};
  assert_int_equal(ftc__tcp_hello_version(http), -1);
}

/* What the refusal says, for each setting and for several at once. */
static void a_difference_in_the_settings_names_the_variables_and_both_values(void **state) {
  (void)state;
  const ftc__tcp_wire_t ours = {262144, 16777216, FTC_ALGO_AUTO, 2};
  struct {
    ftc__tcp_wire_t theirs;
    const char *says;
  } cases[] = {
      {{2048, 16777216, FTC_ALGO_AUTO, 2},
       "rank 3 has FTCOMM_RING_THRESHOLD=2048, this rank (0) 262144: set the same value on every "
       "rank of the job"},
      {{262144, 0, FTC_ALGO_AUTO, 2}, "rank 3 has FTCOMM_HALVING_MAX=0, this rank (0) 16777216: "},
      {{262144, 16777216, FTC_ALGO_RING, 2}, "rank 3 has FTCOMM_ALLREDUCE_ALGO=ring, this rank (0) auto: "},
      {{262144, 16777216, FTC_ALGO_AUTO, 1}, "rank 3 has FTCOMM_TCP_SOCKETS=1, this rank (0) 2: "},
      {{2048, 16777216, FTC_ALGO_DOUBLING, 2},
       "rank 3 has FTCOMM_RING_THRESHOLD=2048 and FTCOMM_ALLREDUCE_ALGO=doubling, this rank (0) "
       "262144 and auto: set the same values on every rank of the job"},
      {{1, 2, FTC_ALGO_HALVING, 1},
       "rank 3 has FTCOMM_RING_THRESHOLD=1, FTCOMM_HALVING_MAX=2, FTCOMM_ALLREDUCE_ALGO=halving "
       "and FTCOMM_TCP_SOCKETS=1, this rank (0) 262144, 16777216, auto and 2: set the same values"},
      {{262144, 16777216, 77, 2}, "rank 3 has FTCOMM_ALLREDUCE_ALGO=?, this rank (0) auto"},
  };
  char why[400];
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    memset(why, 0, sizeof(why));
    assert_int_equal(ftc__tcp_wire_diff(&cases[i].theirs, 3, &ours, 0, 1, why, sizeof(why)), 1);
    if (strncmp(why, cases[i].says, strlen(cases[i].says)) != 0)
      fail_msg("case %zu says \"%s\", expected it to begin \"%s\"", i, why, cases[i].says);
  }
  why[0] = 'x';
  assert_int_equal(ftc__tcp_wire_diff(&ours, 3, &ours, 0, 1, why, sizeof(why)), 0);

  /* The same settings, one host counted two ways: under auto a refusal
   * naming both counts; ranks of different hosts, or that force an
   * algorithm, may count differently. */
  ftc__tcp_wire_t few = ours, many = ours;
  few.ncpu = 1, many.ncpu = 64;
  memset(why, 0, sizeof(why));
  assert_int_equal(ftc__tcp_wire_diff(&few, 3, &many, 0, 1, why, sizeof(why)), 1);
  const char *says = "rank 3 counts 1 CPUs on this host, this rank (0) 64: under "
                     "FTCOMM_ALLREDUCE_ALGO=auto the ranks of one host must count the same CPUs";
  if (strncmp(why, says, strlen(says)) != 0) fail_msg("says \"%s\"", why);
  if (!strstr(why, "set FTCOMM_HOST_CPUS")) fail_msg("does not name FTCOMM_HOST_CPUS: \"%s\"", why);
  assert_int_equal(ftc__tcp_wire_diff(&few, 3, &many, 0, 0, why, sizeof(why)), 0);
  few.algo = many.algo = FTC_ALGO_DOUBLING;
  assert_int_equal(ftc__tcp_wire_diff(&few, 3, &many, 0, 1, why, sizeof(why)), 0);
}

static void a_hello_is_rejected_with_another_token_nonce_or_any_flipped_bit(void **state) {
  (void)state;
  ftc__tcp_hello_t h = {FTC__TCP_HELLO, 42, 7, 3, 8}, got;
  uint8_t msg[FTC__TCP_HELLO_SIZE], other[FTC__TCP_NONCE_SIZE];
  ftc__tcp_hello_encode(msg, &h, "secret", nonce);
  assert_int_equal(ftc__tcp_hello_decode(msg, &got, "Secret", nonce), -2);
  assert_int_equal(ftc__tcp_hello_decode(msg, &got, NULL, nonce), -2);
  memcpy(other, nonce, sizeof(other));
  other[15] ^= 1; /* a replay under another acceptor's nonce */
  assert_int_equal(ftc__tcp_hello_decode(msg, &got, "secret", other), -2);
  for (int bit = 8 * 8; bit < 8 * FTC__TCP_HELLO_SIZE; bit++) {
    uint8_t bad[FTC__TCP_HELLO_SIZE];
    memcpy(bad, msg, sizeof(bad));
    bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    assert_int_equal(ftc__tcp_hello_decode(bad, &got, "secret", nonce), -2);
  }
  msg[0] ^= 0xff;
  assert_int_equal(ftc__tcp_hello_decode(msg, &got, "secret", nonce), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sha256_matches_the_fips_examples),
      cmocka_unit_test(hmac_sha256_matches_rfc_4231),
      cmocka_unit_test(a_hello_round_trips_with_the_right_token_and_nonce),
      cmocka_unit_test(a_hello_is_rejected_with_another_token_nonce_or_any_flipped_bit),
      cmocka_unit_test(a_mismatch_answer_round_trips),
      cmocka_unit_test(a_changed_wire_setting_fails_the_mac),
      cmocka_unit_test(another_protocol_version_is_told_from_the_first_bytes),
      cmocka_unit_test(a_difference_in_the_settings_names_the_variables_and_both_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
