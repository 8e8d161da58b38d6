/*
 * net_handshake.c - the data plane's handshake messages (net.c's top
 * comment has the exchange): the hello's codec and its MAC, and the wire
 * settings both ends of a pair must share, compared field by field so
 * that a mismatch says which differ.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ftc_addr.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_param.h"
#include "ftc_time.h"
#include "tcp/net_int.h"
#include "tcp/tcp_int.h"

/* A hello is its header, then HMAC-SHA256(token, nonce || header). */
#define HELLO_HEADER (FTC__TCP_HELLO_SIZE - 32)

static void hello_mac(const uint8_t header[HELLO_HEADER], const char *token,
                      const uint8_t nonce[FTC__TCP_NONCE_SIZE], uint8_t mac[32]) {
  uint8_t msg[FTC__TCP_NONCE_SIZE + HELLO_HEADER];
  memcpy(msg, nonce, FTC__TCP_NONCE_SIZE);
  memcpy(msg + FTC__TCP_NONCE_SIZE, header, HELLO_HEADER);
  ftc__hmac_sha256(token ? token : "", token ? strlen(token) : 0, msg, sizeof(msg), mac);
}

void ftc__tcp_hello_encode(uint8_t out[FTC__TCP_HELLO_SIZE], const ftc__tcp_hello_t *h,
                           const char *token, const uint8_t nonce[FTC__TCP_NONCE_SIZE]) {
  put_u32(out, FTC__TCP_MAGIC);
  put_u16(out + 4, FTC__TCP_PROTO);
  put_u16(out + 6, h->kind);
  put_u64(out + 8, h->epoch);
  put_u64(out + 16, h->member_id);
  put_u32(out + 24, h->rank);
  put_u32(out + 28, h->size);
  put_u64(out + 32, h->wire.ring_threshold);
  put_u64(out + 40, h->wire.halving_max);
  put_u32(out + 48, h->wire.algo);
  put_u32(out + 52, h->wire.sockets);
  put_u32(out + 56, h->wire.ncpu);
  hello_mac(out, token, nonce, out + HELLO_HEADER);
}

int ftc__tcp_hello_version(const uint8_t in[FTC__TCP_PREFIX_SIZE]) {
  return get_u32(in) == FTC__TCP_MAGIC ? get_u16(in + 4) : -1;
}

int ftc__tcp_hello_decode(const uint8_t in[FTC__TCP_HELLO_SIZE], ftc__tcp_hello_t *h,
                          const char *token, const uint8_t nonce[FTC__TCP_NONCE_SIZE]) {
  if (ftc__tcp_hello_version(in) != FTC__TCP_PROTO) return -1;
  uint8_t mac[32], diff = 0;
  hello_mac(in, token, nonce, mac);
  for (int i = 0; i < 32; i++) diff |= (uint8_t)(mac[i] ^ in[HELLO_HEADER + i]);
  if (diff) return -2;
  h->kind = get_u16(in + 6);
  h->epoch = get_u64(in + 8);
  h->member_id = get_u64(in + 16);
  h->rank = get_u32(in + 24);
  h->size = get_u32(in + 28);
  h->wire.ring_threshold = get_u64(in + 32);
  h->wire.halving_max = get_u64(in + 40);
  h->wire.algo = get_u32(in + 48);
  h->wire.sockets = get_u32(in + 52);
  h->wire.ncpu = get_u32(in + 56);
  return 0;
}

void ftc__tcp_wire_of(const ftc__tcp_cfg_t *cfg, ftc__tcp_wire_t *w) {
  long ncpu = ftc__tcp_usable_cpus(cfg);
  *w = (ftc__tcp_wire_t){.ring_threshold = cfg->ring_threshold,
                         .halving_max = cfg->halving_max,
                         .algo = (uint32_t)cfg->allreduce_algo,
                         .sockets = cfg->sockets == 1 ? 1 : 2,
                         .ncpu = ncpu > UINT32_MAX ? UINT32_MAX : (uint32_t)ncpu};
}

static void wire_value(char *out, size_t len, int which, const ftc__tcp_wire_t *w) {
  switch (which) {
    case 0: snprintf(out, len, "%llu", (unsigned long long)w->ring_threshold); break;
    case 1: snprintf(out, len, "%llu", (unsigned long long)w->halving_max); break;
    case 2: snprintf(out, len, "%s", w->algo < FTC_ALGO_COUNT ? ftc_algo_name((ftc_algo_t)w->algo) : "?"); break;
    default: snprintf(out, len, "%u", (unsigned)w->sockets); break;
  }
}

int ftc__tcp_wire_diff(const ftc__tcp_wire_t *theirs, int peer, const ftc__tcp_wire_t *ours,
                       int me, int same_host, char *out, size_t len) {
  static const char *const names[] = {"FTCOMM_RING_THRESHOLD", "FTCOMM_HALVING_MAX",
                                      "FTCOMM_ALLREDUCE_ALGO", "FTCOMM_TCP_SOCKETS"};
  int differ[4] = {theirs->ring_threshold != ours->ring_threshold,
                   theirs->halving_max != ours->halving_max, theirs->algo != ours->algo,
                   theirs->sockets != ours->sockets};
  int n = differ[0] + differ[1] + differ[2] + differ[3];
  if (!n && same_host && ours->algo == FTC_ALGO_AUTO && theirs->ncpu != ours->ncpu) {
    /* Same settings, one host counted two ways: in a view where the
     * ranks crowd one count and not the other, auto would run flat on
     * one and recursive doubling on the other for the same small call. */
    snprintf(out, len,
             "rank %d counts %u CPUs on this host, this rank (%d) %u: under "
             "FTCOMM_ALLREDUCE_ALGO=auto the ranks of one host must count the same CPUs (they "
             "decide from it whether small allreduces go flat: the online ones, within the "
             "cgroup's CPU quota); set FTCOMM_HOST_CPUS (or "
             "FTCOMM_ALLREDUCE_ALGO=flat or doubling) to the same value on every rank of the job",
             peer, (unsigned)theirs->ncpu, me, (unsigned)ours->ncpu);
    return 1;
  }
  if (!n) return 0;
  /* "rank 1 has A=x and B=y, this rank (0) x' and y'" */
  char there[160] = "", here[96] = "", v[32];
  size_t lt = 0, lh = 0;
  for (int i = 0, k = 0; i < 4; i++) {
    if (!differ[i]) continue;
    const char *sep = k == 0 ? "" : k == n - 1 ? " and " : ", ";
    k++;
    wire_value(v, sizeof(v), i, theirs);
    lt += (size_t)snprintf(there + lt, sizeof(there) - lt, "%s%s=%s", sep, names[i], v);
    wire_value(v, sizeof(v), i, ours);
    lh += (size_t)snprintf(here + lh, sizeof(here) - lh, "%s%s", sep, v);
    if (lt >= sizeof(there)) lt = sizeof(there) - 1;
    if (lh >= sizeof(here)) lh = sizeof(here) - 1;
  }
  snprintf(out, len,
           "rank %d has %s, this rank (%d) %s: set the same value%s on every rank of the job "
           "(ranks with different settings run different collective algorithms)",
           peer, there, me, here, n > 1 ? "s" : "");
  return 1;
}
