/*
 * router.h - the controller's coordinator port (--coordinator-bind, :7470).
 * Every TrainingJob has its own coordinator (runtime/src/coordinator) on a
 * loopback port; ranks all dial one address, the controller Service. The
 * router answers each rank's WebSocket upgrade itself, reads the first
 * message (the hello, which names the job and carries its token), asks its
 * host which coordinator serves that job, replays the rank's bytes to that
 * coordinator and from then on copies bytes both ways unchanged. A hello for
 * a job that has no coordinator yet (the controller just started) closes the
 * connection, and the rank reconnects as it would to a restarting coordinator.
 *
 * Threads: one thread ("ftck-router") owns every connection; route_fn is
 * called on it and must return quickly.
 */
#ifndef FTCK_ROUTER_H
#define FTCK_ROUTER_H

#include <stdint.h>

#include "ftcomm.h"

/* The loopback port of the coordinator for (job, token), or -1 when there is
 * none. job and token are valid during the call only. */
typedef int (*ftck_route_fn)(void *ud, const char *job, const char *token);

typedef struct ftck_router ftck_router_t;

typedef struct ftck_router_stats {
  uint64_t accepted;  /* connections accepted */
  uint64_t routed;    /* ... handed to a job's coordinator */
  uint64_t unrouted;  /* ... closed: no coordinator for their job, or not a hello */
  uint64_t open;      /* connections open now */
} ftck_router_stats_t;

/* Listen on bind ("host:port", ":port", "[v6]:port"; port 0 picks one) and
 * serve on a new thread. *out is the caller's (ftck_router_stop). */
ftc_status_t ftck_router_start(const char *bind, ftck_route_fn route, void *ud, ftck_router_t **out);
int ftck_router_port(const ftck_router_t *r);
void ftck_router_get_stats(ftck_router_t *r, ftck_router_stats_t *out);
/* Close every connection, join the thread and free. NULL is a no-op. */
void ftck_router_stop(ftck_router_t *r);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 4.2.2) into out
 * (at least 32 bytes). Exposed for the tests. */
void ftck_ws_accept(const char *key, char *out, size_t n);

/* Parse one client frame at buf[0..len): -1 malformed, 0 incomplete, else
 * the frame's total length, with *fin, *opcode and the unmasked payload
 * appended to payload (capacity cap, *plen in/out; -1 if it does not fit).
 * Exposed for the tests. */
long ftck_ws_frame(const unsigned char *buf, size_t len, int *fin, int *opcode, char *payload, size_t cap,
                   size_t *plen);

#endif
