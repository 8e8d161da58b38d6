/*
 * net_int.h - what the files of the TCP backend's connection management
 * (net*.c, see net.c) share: the bootstrap's state (a pend per connection
 * being made, a boot per bootstrap), the little-endian field codec of the
 * handshake and ADOPT messages, and the helpers more than one of them
 * calls. Nothing outside net*.c includes it.
 */
#ifndef FTC_TCP_NET_INT_H
#define FTC_TCP_NET_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "tcp/tcp_int.h"

#define MAX_PENDING_ACCEPTS 64
#define RETRY_NS (5 * 1000000LL)

enum pend_state {
  P_IDLE, P_RETRY, P_CONNECTING, P_WAIT_NONCE, P_WAIT_ACK, P_WAIT_HELLO, P_DONE,
  P_HELD, /* a spare acceptor's: a valid hello for a later epoch, kept for its bootstrap */
};

typedef struct pend {
  int fd;
  enum pend_state state;
  int rank; /* connectors and adoptions: the peer; accepted: -1 until its hello */
  int lane; /* connectors: 0 the socket we send on (or the one socket), 1 the one we receive
             * on; a connector's lane 0 is UP, lane 1 DOWN */
  uint8_t nonce[FTC__TCP_NONCE_SIZE];
  uint8_t buf[FTC__TCP_HELLO_SIZE];
  size_t have;
  int64_t retry_at; /* P_RETRY: when; accepted by a spare acceptor: when it is given up */
} pend_t;

/* One bootstrap: an epoch's connections (spare 0), or the spare
 * connections of an epoch made in the background (spare 1). */
typedef struct ftc__boot {
  ftc__tcp_t *tp;
  const ftc__view_t *view;
  int spare;
  int early;                            /* an epoch's bootstrap run early (ftc__tcp_early_start):
                                         * polled by the idle thread like a spare one */
  int started;                          /* spare: this rank's connectors were started */
  pend_t *conn;                         /* 2 * size: conn[2 * rank + lane], connectors */
  pend_t acc[MAX_PENDING_ACCEPTS];
  int nacc;
  int connected;
  pend_t **owner;                       /* spare: what each polled entry belongs to */
  int nowner;
  int strict;                           /* this process is creating its communicator: a
                                         * member whose wire settings differ fails it */
  ftc_status_t fatal;                   /* strict: the bootstrap must end with this (FTC_OK: go
                                         * on) and fatal_why, once every pair is settled */
  int64_t fatal_until;                  /* ... or at this time, whichever comes first */
  unsigned char *differs;               /* size: that member's wire settings differ */
  char fatal_why[400];
  char last_problem[400];
  int reno_here;                        /* FTCOMM_TCP_CONGESTION=auto: reno to the ranks of
                                         * this host (at most 2 of them per CPU) */
  int listens;                          /* some peer connects to this rank: poll the listener */
  int repair;                           /* one pair of a running epoch connected anew
                                         * (ftc__tcp_reconnect): cfg.intr_fd wakes it */
  unsigned char *waited;                /* a repair: the pairs it waits for (this one, and
                                         * others that came to it: acc_event, unadopt) */
  int said_epoch;                       /* a member's hello for another epoch was logged once
                                         * (at info; the retries every 5 ms at debug) */
  int64_t hold_until;                   /* a repair: a handshake under way at its deadline
                                         * (repair_engaged) is finished until then */
} boot_t;

#define SPARE_HELLO_NS (5000 * 1000000LL)
/* A process whose peer's settings differ settles its other pairs for at
 * most this long before it fails. */
#define SETTLE_NS (3000 * 1000000LL)

static inline void put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static inline void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static inline uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* net_config.c */
void ftc__net_read_sysctl(const char *path, char *out, size_t len);

/* net_socket.c */
void ftc__net_set_sockopts(int fd, int64_t bufsize);
void ftc__net_describe_peer(int fd, char *buf, size_t len);

/* net.c: the bootstrap and the connection set */
int ftc__net_parse_addr(const char *addr, int family, struct sockaddr_storage *ss, socklen_t *sl,
                        char *why, size_t whylen);
void ftc__net_pend_close(pend_t *p);
void ftc__net_conn_start(boot_t *b, pend_t *p);
void ftc__net_refuse(boot_t *b, pend_t *p, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int *ftc__net_lane_slot(ftc__tcp_t *tp, int rank, int lane, int spare);
int ftc__net_makes_connection(const boot_t *b, int me, int peer);
int ftc__net_lanes_of(const ftc__tcp_t *tp, int rank);
void ftc__net_set_broken(ftc__tcp_t *tp, int rank, int on);
int ftc__net_break_pair(ftc__tcp_t *tp, int rank);
pend_t *ftc__net_acc_slot(boot_t *b);
int ftc__net_send_nonce(int fd, int64_t socket_buffer, uint8_t nonce[FTC__TCP_NONCE_SIZE]);
void ftc__net_dispatch(boot_t *b, int listen_fd, pend_t *owner, short revents);
int ftc__net_pend_waits(const pend_t *p);
void ftc__net_peer_shutdown(const ftc__tcp_peer_t *p);
void ftc__net_take_held(boot_t *b, boot_t *from);
ftc_status_t ftc__net_boot_loop(boot_t *b, int listen_fd, int64_t deadline);
boot_t *ftc__net_boot_new(ftc__tcp_t *tp, const ftc__view_t *view, int spare, int early);
void ftc__net_boot_free(boot_t *b);
ftc__tcp_t *ftc__net_tp_new(const ftc__tcp_cfg_t *cfg, const ftc__view_t *view);
int ftc__net_same_epoch_view(const ftc__tcp_t *t, const ftc__view_t *v);

/* net_adopt.c */
int ftc__net_peer_gone(const ftc__tcp_t *tp, int rank);

/* net_standby.c */
void ftc__net_preacc_seed(boot_t *b, ftc__tcp_preacc_t *pa);

#endif
