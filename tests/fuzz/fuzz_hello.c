/*
 * fuzz_hello.c - the data-plane handshake (runtime/src/tcp/net_handshake.c, auth.c):
 * the bytes a rank reads from a stranger on its listener, or from the
 * acceptor it connected to.
 *
 * Input: one flags byte, then up to FTC__TCP_HELLO_SIZE bytes of hello
 * (zero-padded), then this rank's own wire settings (zero-padded), then
 * the job token (the rest). Flag bit 0: sign the hello with that token
 * first, so the fuzzer reaches what comes after the MAC check, as a peer
 * that knows the token would; bit 1: the two ranks are on one host (their
 * CPU counts are compared under auto).
 *
 * Checks: a hello that decodes encodes back to the same bytes (nothing
 * the receiver ignores, nothing it misreads); one with a flipped MAC bit
 * never decodes; a settings difference is always reported, in words that
 * name the FTCOMM_* variable to change.
 */
#include <string.h>

#include "fuzz.h"
#include "tcp/tcp.h"

static const uint8_t nonce[FTC__TCP_NONCE_SIZE] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static void take(uint8_t *dst, size_t n, const uint8_t **p, size_t *left) {
  size_t k = *left < n ? *left : n;
  memset(dst, 0, n);
  memcpy(dst, *p, k);
  *p += k, *left -= k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t flags = data[0];
  const uint8_t *p = data + 1;
  size_t left = size - 1;
  uint8_t in[FTC__TCP_HELLO_SIZE];
  take(in, sizeof(in), &p, &left);
  uint8_t raw[28];
  take(raw, sizeof(raw), &p, &left);
  ftc__tcp_wire_t ours;
  memcpy(&ours.ring_threshold, raw, 8);
  memcpy(&ours.halving_max, raw + 8, 8);
  memcpy(&ours.algo, raw + 16, 4);
  memcpy(&ours.sockets, raw + 20, 4);
  memcpy(&ours.ncpu, raw + 24, 4);
  char token[1100];
  size_t tl = left < sizeof(token) - 1 ? left : sizeof(token) - 1;
  memcpy(token, p, tl);
  token[tl] = '\0'; /* a token is a C string: it ends at its first NUL */

  if (flags & 1) {
    /* Sign the header as a peer with the token would. */
    uint8_t msg[FTC__TCP_NONCE_SIZE + FTC__TCP_HELLO_SIZE - 32];
    memcpy(msg, nonce, FTC__TCP_NONCE_SIZE);
    memcpy(msg + FTC__TCP_NONCE_SIZE, in, FTC__TCP_HELLO_SIZE - 32);
    ftc__hmac_sha256(token, strlen(token), msg, sizeof(msg), in + FTC__TCP_HELLO_SIZE - 32);
  }

  int v = ftc__tcp_hello_version(in);
  FUZZ_CHECK(v >= -1 && v <= 0xffff);
  ftc__tcp_hello_t h;
  int d = ftc__tcp_hello_decode(in, &h, token, nonce);
  FUZZ_CHECK(d == 0 || d == -1 || d == -2);
  if (d == -1) FUZZ_CHECK(v != FTC__TCP_PROTO);
  if (d != 0) return 0;
  FUZZ_CHECK(v == FTC__TCP_PROTO);

  uint8_t again[FTC__TCP_HELLO_SIZE];
  ftc__tcp_hello_encode(again, &h, token, nonce);
  FUZZ_CHECK(memcmp(again, in, sizeof(in)) == 0);
  again[FTC__TCP_HELLO_SIZE - 1 - (flags >> 1) % 32] ^= (uint8_t)(1u << (flags % 8));
  ftc__tcp_hello_t h2;
  FUZZ_CHECK(ftc__tcp_hello_decode(again, &h2, token, nonce) == -2);

  char why[400];
  memset(why, 'x', sizeof(why));
  int same_host = (flags >> 1) & 1; /* the two ranks' addresses name one host */
  int differ = ftc__tcp_wire_diff(&h.wire, (int)(h.rank & 0xfffff), &ours, 0, same_host, why, sizeof(why));
  int same = h.wire.ring_threshold == ours.ring_threshold && h.wire.halving_max == ours.halving_max &&
             h.wire.algo == ours.algo && h.wire.sockets == ours.sockets &&
             (!same_host || ours.algo != FTC_ALGO_AUTO || h.wire.ncpu == ours.ncpu);
  FUZZ_CHECK(differ == !same);
  if (differ) {
    FUZZ_CHECK(memchr(why, '\0', sizeof(why)) != NULL);
    FUZZ_CHECK(strstr(why, "FTCOMM_") != NULL);
  }
  /* A short buffer is cut, never overrun. */
  char small[24];
  memset(small, 'x', sizeof(small));
  ftc__tcp_wire_diff(&h.wire, 1, &ours, 0, same_host, small, 16);
  if (differ) FUZZ_CHECK(small[15] == '\0' && small[16] == 'x');
  return 0;
}
