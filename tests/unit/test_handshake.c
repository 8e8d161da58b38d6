/*
 * test_handshake.c - the data-plane handshake's building blocks: SHA-256
 * and HMAC-SHA256 against the published test vectors (FIPS 180-4 examples,
 * RFC 4231), and the hello message: it round-trips, and a wrong token, a
 * different nonce, a flipped bit or a foreign magic are all rejected.
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
  ftc__tcp_hello_t h = {FTC__TCP_HELLO, 42, 0x1122334455667788ULL, 3, 8}, got;
  uint8_t msg[FTC__TCP_HELLO_SIZE];
  ftc__tcp_hello_encode(msg, &h, "secret", nonce);
  assert_int_equal(ftc__tcp_hello_decode(msg, &got, "secret", nonce), 0);
  assert_int_equal(got.kind, FTC__TCP_HELLO);
  assert_true(got.epoch == 42 && got.member_id == 0x1122334455667788ULL);
  assert_int_equal(got.rank, 3);
  assert_int_equal(got.size, 8);
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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
