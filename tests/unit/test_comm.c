/*
 * test_comm.c - the communicator's contract outside the happy path: bad
 * arguments are refused with a message saying what to fix; a peer that
 * never arrives is a timeout within the connect timeout; strangers are
 * refused on the data plane; a collective that times out or loses a peer
 * fails and revokes the epoch; abort fails everything promptly from another
 * thread; requests survive destroy; the data plane can be rebuilt for a new
 * epoch; the flight recorder sees every collective.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "ftc_alloc.h"
#include "ftc_param.h"
#include "ftc_time.h"
#include "harness.h"
#include "tcp/tcp.h"
#include "tcp/tcp_int.h"

static int64_t ms_since(int64_t t0) { return (ftc__now_ns() - t0) / 1000000; }

/* A communicator of one rank, in this process. */
static ftc_comm_t *solo_comm(void) {
  int fd;
  ftc__view_t *v = harness_view(1, 0, 1, &fd);
  ftc_config_t cfg;
  harness_config(&cfg, 5000, 2000);
  ftc_comm_t *comm = NULL;
  assert_int_equal(ftc__comm_create_from_view(&cfg, v, fd, &comm), FTC_OK);
  harness_view_free(v);
  return comm;
}

#define ASSERT_INVALID(call, needle)                                  \
  do {                                                                \
    assert_int_equal((call), FTC_ERR_INVALID_ARGUMENT);               \
    if (!strstr(ftc_last_error(), (needle)))                          \
      fail_msg("last error \"%s\" does not mention \"%s\"", ftc_last_error(), (needle)); \
  } while (0)

/* ---- bad input ---- */

static void a_null_comm_is_an_invalid_argument(void **state) {
  (void)state;
  float x = 0;
  ftc_request_t *req;
  ASSERT_INVALID(ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, NULL, 100), "comm is NULL");
  ASSERT_INVALID(ftc_broadcast(&x, 1, FTC_F32, 0, NULL, 100), "comm is NULL");
  ASSERT_INVALID(ftc_barrier(NULL, 100), "comm is NULL");
  ASSERT_INVALID(ftc_iallgather(&x, &x, 1, FTC_F32, NULL, &req), "comm is NULL");
  int r;
  ASSERT_INVALID(ftc_comm_rank(NULL, &r), "NULL");
  ASSERT_INVALID(ftc_comm_abort(NULL), "NULL");
  assert_int_equal(ftc_comm_destroy(NULL), FTC_OK);
  ftc_request_free(NULL);
  ASSERT_INVALID(ftc_wait(NULL, 0), "req is NULL");
}

static void null_buffers_are_refused_unless_count_is_zero(void **state) {
  (void)state;
  ftc_comm_t *comm = solo_comm();
  float x = 1;
  ASSERT_INVALID(ftc_allreduce(NULL, &x, 1, FTC_F32, FTC_SUM, comm, 100), "sendbuf is NULL");
  ASSERT_INVALID(ftc_allreduce(&x, NULL, 1, FTC_F32, FTC_SUM, comm, 100), "recvbuf is NULL");
  ASSERT_INVALID(ftc_allgather(&x, NULL, 4, FTC_F32, comm, 100), "recvbuf is NULL");
  ASSERT_INVALID(ftc_reduce(&x, NULL, 1, FTC_F32, FTC_SUM, 0, comm, 100), "recvbuf (on the root)");
  assert_int_equal(ftc_allreduce(NULL, NULL, 0, FTC_F32, FTC_SUM, comm, 100), FTC_OK);
  assert_int_equal(ftc_broadcast(NULL, 0, FTC_I32, 0, comm, 100), FTC_OK);
  ftc_comm_destroy(comm);
}

static void unknown_dtypes_and_ops_are_refused(void **state) {
  (void)state;
  ftc_comm_t *comm = solo_comm();
  float x = 1;
  ASSERT_INVALID(ftc_allreduce(&x, &x, 1, (ftc_dtype_t)7, FTC_SUM, comm, 100), "dtype 7");
  ASSERT_INVALID(ftc_allreduce(&x, &x, 1, (ftc_dtype_t)-1, FTC_SUM, comm, 100), "dtype -1");
  ASSERT_INVALID(ftc_reduce_scatter(&x, &x, 1, FTC_F32, (ftc_op_t)8, comm, 100), "op 8");
  ASSERT_INVALID(ftc_allreduce(&x, &x, 1, FTC_F32, FTC_BAND, comm, 100), "integer dtype");
  ASSERT_INVALID(ftc_reduce(&x, &x, 1, FTC_F32, FTC_BXOR, 0, comm, 100), "not f32");
  ASSERT_INVALID(ftc_alltoall(&x, &x, 1, (ftc_dtype_t)42, comm, 100), "dtype 42");
  ftc_comm_destroy(comm);
}

static void a_count_that_overflows_size_t_is_refused(void **state) {
  (void)state;
  ftc_comm_t *comm = solo_comm();
  float x = 1;
  ASSERT_INVALID(ftc_allreduce(&x, &x, SIZE_MAX / 2, FTC_F32, FTC_SUM, comm, 100), "overflows");
  ASSERT_INVALID(ftc_allgather(&x, &x, SIZE_MAX / 8 + 1, FTC_F64, comm, 100), "overflows");
  ftc_comm_destroy(comm);
}

static void roots_and_peers_out_of_range_are_refused(void **state) {
  (void)state;
  ftc_comm_t *comm = solo_comm();
  float x = 1;
  ftc_request_t *req;
  ASSERT_INVALID(ftc_broadcast(&x, 1, FTC_F32, 1, comm, 100), "root 1 is out of range");
  ASSERT_INVALID(ftc_reduce(&x, &x, 1, FTC_F32, FTC_SUM, -1, comm, 100), "root -1");
  ASSERT_INVALID(ftc_send(&x, 1, FTC_F32, 3, comm, 100), "peer 3");
  ASSERT_INVALID(ftc_irecv(&x, 1, FTC_F32, 0, comm, &req), "this rank");
  ftc_comm_destroy(comm);
}

static void a_missing_request_pointer_or_bad_timeout_is_refused(void **state) {
  (void)state;
  ftc_comm_t *comm = solo_comm();
  float x = 1;
  ASSERT_INVALID(ftc_iallreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, NULL), "req is NULL");
  ASSERT_INVALID(ftc_ibarrier(comm, NULL), "req is NULL");
  ASSERT_INVALID(ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, -7), "timeout_ms -7");
  /* 0 would fail the operation, and the epoch, unless it were already done: refused, and the
   * communicator goes on. */
  ASSERT_INVALID(ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 0), "timeout_ms 0");
  ASSERT_INVALID(ftc_barrier(comm, 0), "ftc_barrier: timeout_ms 0");
  ASSERT_INVALID(ftc_comm_step(comm, 0, NULL), "ftc_comm_step: timeout_ms 0");
  ftc_comm_t *child = NULL;
  ASSERT_INVALID(ftc_comm_split(comm, 0, 0, 0, &child), "timeout_ms 0");
  ftc_request_t *req = NULL;
  assert_int_equal(ftc_iallreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, &req), FTC_OK);
  ASSERT_INVALID(ftc_wait(req, 0), "ftc_wait: timeout_ms 0");
  assert_non_null(strstr(ftc_last_error(), "ftc_test polls"));
  assert_int_equal(ftc_wait(req, 1000), FTC_OK);
  ftc_request_free(req);
  assert_int_equal(ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 1000), FTC_OK);
  ftc_status_t async = FTC_OK;
  ftc_comm_get_async_error(comm, &async);
  assert_int_equal(async, FTC_OK);
  ftc_comm_destroy(comm);
}

static void the_backend_line_never_truncates_silently(void **state) {
  (void)state;
  ftc_comm_t *comm = solo_comm();
  char full[256], small[2];
  assert_int_equal(ftc_comm_backend(comm, full, sizeof full), FTC_OK);
  assert_string_equal(full, "tcp");
  assert_int_equal(ftc_comm_backend(comm, small, sizeof small), FTC_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(ftc_last_error(), "buf of 2 bytes is too short; the description needs 4"));
  assert_string_equal(small, "t"); /* what fits, terminated */
  char exact[4];
  assert_int_equal(ftc_comm_backend(comm, exact, sizeof exact), FTC_OK);
  assert_string_equal(exact, "tcp");
  ftc_comm_destroy(comm);
}

static void a_failed_step_boundary_says_ftc_comm_step(void **state) {
  (void)state;
  ftc_comm_t *comm = solo_comm();
  assert_int_equal(ftc_comm_abort(comm), FTC_OK);
  assert_int_not_equal(ftc_comm_step(comm, 1000, NULL), FTC_OK);
  const char *e = ftc_last_error();
  assert_true(strncmp(e, "ftc_comm_step: ", 15) == 0);
  assert_null(strstr(e, "ftc_allreduce:"));
  ftc_comm_destroy(comm);
}

static void create_without_a_coordinator_says_how_to_start(void **state) {
  (void)state;
  ftc_config_t cfg;
  harness_config(&cfg, 1000, 1000);
  ftc_comm_t *comm = (ftc_comm_t *)&cfg;
  unsetenv("FTCOMM_COORDINATOR");
  assert_int_equal(ftc_comm_create(&cfg, &comm), FTC_ERR_CONFIG);
  assert_null(comm);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_COORDINATOR"));
  ASSERT_INVALID(ftc_comm_create(&cfg, NULL), "NULL");
}

/* ftc_comm_create_begin / _finish / _cancel outside the happy path: bad
 * arguments, a missing coordinator, a pending handle consumed by a finish
 * that fails (ASan sees a leak or a double free), and finish's connect
 * timeout counted from finish, not from begin. */
static void begin_finish_and_cancel_refuse_bad_input_and_time_out_from_finish(void **state) {
  (void)state;
  ftc_config_t cfg;
  harness_config(&cfg, 1000, 500);
  ftc_comm_pending_t *p = (ftc_comm_pending_t *)&cfg;
  ftc_comm_t *comm = (ftc_comm_t *)&cfg;
  unsetenv("FTCOMM_COORDINATOR");
  assert_int_equal(ftc_comm_create_begin(&cfg, &p), FTC_ERR_CONFIG);
  assert_null(p);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_COORDINATOR"));
  ASSERT_INVALID(ftc_comm_create_begin(&cfg, NULL), "pass &pending");
  ASSERT_INVALID(ftc_comm_create_finish(NULL, &comm), "ftc_comm_create_begin");
  assert_null(comm);
  ASSERT_INVALID(ftc_comm_create_finish(NULL, NULL), "ftc_comm_create_begin");
  ftc_comm_create_cancel(NULL);
  /* A port nobody listens on: begin still returns (its session retries). */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof(a);
  assert_true(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &alen) == 0);
  close(fd);
  char coord[64];
  snprintf(coord, sizeof(coord), "127.0.0.1:%d", ntohs(a.sin_port));
  cfg.coordinator = coord;
  assert_int_equal(ftc_comm_create_begin(&cfg, &p), FTC_OK);
  assert_non_null(p);
  ASSERT_INVALID(ftc_comm_create_finish(p, NULL), "&comm"); /* p is freed */
  assert_int_equal(ftc_comm_create_begin(&cfg, &p), FTC_OK);
  usleep(700000); /* past connect_timeout_ms from begin */
  int64_t t0 = ftc__now_ns();
  assert_int_equal(ftc_comm_create_finish(p, &comm), FTC_ERR_COORDINATOR);
  int64_t ms = ms_since(t0);
  assert_null(comm);
  assert_true(ms >= 450);
  assert_true(ms < 3000);
  assert_non_null(strstr(ftc_last_error(), coord));
}

static void a_world_of_one_reports_rank_size_epoch(void **state) {
  (void)state;
  ftc_comm_t *comm = solo_comm();
  int r = -1, s = -1;
  uint64_t e = 0;
  ftc_status_t err = FTC_ERR_INTERNAL;
  assert_int_equal(ftc_comm_rank(comm, &r), FTC_OK);
  assert_int_equal(ftc_comm_size(comm, &s), FTC_OK);
  assert_int_equal(ftc_comm_epoch(comm, &e), FTC_OK);
  assert_int_equal(ftc_comm_get_async_error(comm, &err), FTC_OK);
  assert_int_equal(r, 0);
  assert_int_equal(s, 1);
  assert_int_equal(e, 1);
  assert_int_equal(err, FTC_OK);
  ftc_comm_destroy(comm);
}

/* ---- bootstrap ---- */

static void a_peer_that_never_connects_times_out_within_the_connect_timeout(void **state) {
  (void)state;
  int fds[2];
  ftc__view_t *v = harness_view(2, 0, 1, fds); /* rank 1's listener exists; nobody runs it */
  ftc_config_t cfg;
  harness_config(&cfg, 1000, 300);
  ftc_comm_t *comm = NULL;
  int64_t t0 = ftc__now_ns();
  assert_int_equal(ftc__comm_create_from_view(&cfg, v, fds[0], &comm), FTC_ERR_TIMEOUT);
  int64_t took = ms_since(t0);
  assert_true(took >= 250 && took < 2000);
  assert_null(comm);
  assert_non_null(strstr(ftc_last_error(), "rank(s) 1"));
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_CONNECT_TIMEOUT_MS"));
  close(fds[1]);
  harness_view_free(v);
}

static void a_peer_that_never_answers_times_out_within_the_connect_timeout(void **state) {
  (void)state;
  int fds[2];
  ftc__view_t *v = harness_view(2, 1, 1, fds); /* rank 0 listens but never accepts */
  ftc_config_t cfg;
  harness_config(&cfg, 1000, 300);
  ftc_comm_t *comm = NULL;
  int64_t t0 = ftc__now_ns();
  assert_int_equal(ftc__comm_create_from_view(&cfg, v, fds[1], &comm), FTC_ERR_TIMEOUT);
  assert_true(ms_since(t0) < 2000);
  assert_non_null(strstr(ftc_last_error(), "rank(s) 0"));
  close(fds[0]);
  harness_view_free(v);
}

static void a_peer_address_where_nobody_listens_times_out(void **state) {
  (void)state;
  int fds[2];
  ftc__view_t *v = harness_view(2, 1, 1, fds);
  close(fds[0]); /* connection refused, retried until the deadline */
  ftc_config_t cfg;
  harness_config(&cfg, 1000, 300);
  ftc_comm_t *comm = NULL;
  int64_t t0 = ftc__now_ns();
  assert_int_equal(ftc__comm_create_from_view(&cfg, v, fds[1], &comm), FTC_ERR_TIMEOUT);
  assert_true(ms_since(t0) < 2000);
  assert_non_null(strstr(ftc_last_error(), "refused"));
  harness_view_free(v);
}

typedef struct creator {
  ftc__view_t *view;
  int fd;
  ftc_comm_t *comm;
  ftc_status_t st;
} creator_t;

static void *create_thread(void *arg) {
  creator_t *c = arg;
  ftc_config_t cfg;
  harness_config(&cfg, 2000, 5000);
  c->st = ftc__comm_create_from_view(&cfg, c->view, c->fd, &c->comm);
  return NULL;
}

static int dial(const char *addr) {
  int fd = harness_dial(addr, 2);
  assert_true(fd >= 0);
  return fd;
}

/* Dial rank 0 and say hello as `h` signed with `token`; 1 if it answered
 * with a valid ACK, 0 if it closed the connection. The socket is returned
 * through *keep when accepted. */
static int say_hello(const char *addr, const ftc__tcp_hello_t *h, const char *token, int *keep) {
  int fd = dial(addr);
  uint8_t nonce[FTC__TCP_NONCE_SIZE], msg[FTC__TCP_HELLO_SIZE];
  assert_int_equal(harness_read_full(fd, nonce, sizeof(nonce)), 0);
  ftc__tcp_hello_encode(msg, h, token, nonce);
  assert_int_equal(send(fd, msg, sizeof(msg), 0), (ssize_t)sizeof(msg));
  if (harness_read_full(fd, msg, sizeof(msg)) != 0) {
    close(fd);
    return 0;
  }
  ftc__tcp_hello_t ack;
  assert_int_equal(ftc__tcp_hello_decode(msg, &ack, token, nonce), 0);
  assert_int_equal(ack.kind, FTC__TCP_ACK);
  assert_int_equal(ack.rank, 0);
  assert_int_equal(ack.member_id, 1000);
  *keep = fd;
  return 1;
}

/* Rank 0 of a 40-rank view starts its bootstrap with the other ranks'
 * 78 connections already waiting at its listener (as a joiner's early
 * connections wait, net.c, ftc__net_makes_connection): it answers every one, more
 * than its 64 handshakes at a time, refusing none (a refused early
 * connection is only made again at the caller's step boundary; each
 * refusal was a warning). This test plays the 39 other ranks. */
static void callers_waiting_beyond_the_handshake_slots_are_all_answered(void **state) {
  (void)state;
  enum { N = 40, NCONN = 2 * (N - 1) };
  int fds[N];
  creator_t c = {.view = harness_view(N, 0, 7, fds)};
  c.fd = fds[0];
  for (int r = 1; r < N; r++) close(fds[r]);
  const char *addr = c.view->members[0].addr;
  struct pollfd pfd[NCONN];
  uint8_t nonce[NCONN][FTC__TCP_NONCE_SIZE];
  int stage[NCONN]; /* 0: waits for the nonce, 1: for the answer, 2: accepted, -1: refused */
  for (int i = 0; i < NCONN; i++) {
    pfd[i] = (struct pollfd){dial(addr), POLLIN, 0};
    stage[i] = 0;
  }
  pthread_t t;
  pthread_create(&t, NULL, create_thread, &c);
  int done = 0, refused = 0;
  int64_t until = ftc__now_ns() + 10000 * 1000000LL;
  while (done < NCONN && ftc__now_ns() < until) {
    assert_true(poll(pfd, NCONN, 100) >= 0);
    for (int i = 0; i < NCONN; i++) {
      if (!pfd[i].revents || stage[i] < 0 || stage[i] == 2) continue;
      int r = 1 + i / 2, lane = i % 2;
      uint8_t msg[FTC__TCP_HELLO_SIZE];
      if (stage[i] == 0) {
        if (harness_read_full(pfd[i].fd, nonce[i], FTC__TCP_NONCE_SIZE) != 0) {
          stage[i] = -1, refused++, done++;
          continue;
        }
        ftc__tcp_hello_t h;
        harness_hello(&h, lane ? FTC__TCP_HELLO_DOWN : FTC__TCP_HELLO_UP, 7, 1000 + (uint64_t)r,
                      (uint32_t)r, N);
        ftc__tcp_hello_encode(msg, &h, HARNESS_TOKEN, nonce[i]);
        assert_int_equal(send(pfd[i].fd, msg, sizeof(msg), 0), (ssize_t)sizeof(msg));
        stage[i] = 1;
      } else if (harness_read_full(pfd[i].fd, msg, sizeof(msg)) != 0) {
        stage[i] = -1, refused++, done++;
      } else {
        ftc__tcp_hello_t ack;
        assert_int_equal(ftc__tcp_hello_decode(msg, &ack, HARNESS_TOKEN, nonce[i]), 0);
        assert_int_equal(ack.kind, FTC__TCP_ACK);
        stage[i] = 2, done++;
      }
    }
  }
  pthread_join(t, NULL);
  if (refused || done < NCONN || c.st != FTC_OK)
    fail_msg("%d of %d connections refused, %d unanswered; rank 0's creation: %s", refused, NCONN,
             NCONN - done, ftc_strerror(c.st));
  ftc_comm_destroy(c.comm);
  for (int i = 0; i < NCONN; i++) close(pfd[i].fd);
  harness_view_free(c.view);
}


/* A peer's send/recv message on the wire: the descriptor (message #seq of
 * one i32), then the value. */
static void send_message(int fd, uint64_t seq, const int32_t *v) {
  ftc__op_t op = {.coll = FTC__COLL_SEND, .count = 1, .dtype = FTC_I32, .peer = -1};
  uint8_t m[FTC__DESC_SIZE + sizeof(int32_t)];
  ftc__desc_of(NULL, &op, seq, 0, 1, m);
  memcpy(m + FTC__DESC_SIZE, v, sizeof(*v));
  assert_int_equal(send(fd, m, sizeof(m), 0), (ssize_t)sizeof(m));
}

/* Read message #seq of one i32 (its descriptor checked), return the value. */
static int32_t read_message(int fd, uint64_t seq) {
  ftc__op_t op = {.coll = FTC__COLL_SEND, .count = 1, .dtype = FTC_I32, .peer = -1};
  uint8_t want[FTC__DESC_SIZE], m[FTC__DESC_SIZE + sizeof(int32_t)];
  ftc__desc_of(NULL, &op, seq, 0, 1, want);
  assert_int_equal(harness_read_full(fd, m, sizeof(m)), 0);
  assert_memory_equal(m, want, FTC__DESC_SIZE);
  int32_t v;
  memcpy(&v, m + FTC__DESC_SIZE, sizeof(v));
  return v;
}

/* Rank 0 of a 2-rank view runs in a thread; this test plays rank 1 and
 * tries every wrong handshake before the right one(s). */
static void strangers_are_refused_and_the_real_peer_is_accepted(void **state) {
  (void)state;
  int fds[2];
  creator_t c = {.view = harness_view(2, 0, 7, fds)};
  c.fd = fds[0];
  close(fds[1]);
  pthread_t t;
  pthread_create(&t, NULL, create_thread, &c);
  const char *addr = c.view->members[0].addr;
  int up = -1, down = -1;
  ftc__tcp_hello_t good;
  harness_hello(&good, FTC__TCP_HELLO_UP, 7, 1001, 1, 2);
  ftc__tcp_hello_t h = good;
  assert_int_equal(say_hello(addr, &h, "wrong-token", &up), 0);
  h.epoch = 6;
  assert_int_equal(say_hello(addr, &h, HARNESS_TOKEN, &up), 0);
  h = good;
  h.member_id = 4242; /* not the member the view has at rank 1 */
  assert_int_equal(say_hello(addr, &h, HARNESS_TOKEN, &up), 0);
  h = good;
  h.rank = 0; /* rank 0 cannot be connected to by rank 0 */
  h.member_id = 1000;
  assert_int_equal(say_hello(addr, &h, HARNESS_TOKEN, &up), 0);
  h = good;
  h.kind = FTC__TCP_HELLO; /* one socket for both directions: FTCOMM_TCP_SOCKETS differs */
  assert_int_equal(say_hello(addr, &h, HARNESS_TOKEN, &up), 0);
  h.kind = FTC__TCP_ACK; /* not a hello */
  assert_int_equal(say_hello(addr, &h, HARNESS_TOKEN, &up), 0);
  h.kind = 99;
  assert_int_equal(say_hello(addr, &h, HARNESS_TOKEN, &up), 0);
  int raw = dial(addr); /* not even a handshake */
  uint8_t junk[FTC__TCP_HELLO_SIZE + FTC__TCP_NONCE_SIZE];
  memset(junk, 'x', sizeof(junk));
  assert_int_equal(send(raw, junk, FTC__TCP_HELLO_SIZE, 0), FTC__TCP_HELLO_SIZE);
  assert_true(recv(raw, junk, sizeof(junk), 0) == FTC__TCP_NONCE_SIZE || 1);
  close(raw);
  assert_int_equal(say_hello(addr, &good, HARNESS_TOKEN, &up), 1);
  int again = -1; /* the same direction twice */
  assert_int_equal(say_hello(addr, &good, HARNESS_TOKEN, &again), 0);
  h = good;
  h.kind = FTC__TCP_HELLO_DOWN;
  assert_int_equal(say_hello(addr, &h, HARNESS_TOKEN, &down), 1);
  pthread_join(t, NULL);
  assert_int_equal(c.st, FTC_OK);
  /* Rank 0 sends on DOWN and receives on UP, each message led by its
   * descriptor. */
  int32_t x = 5;
  send_message(up, 1, &x);
  int32_t in = 1;
  assert_int_equal(ftc_recv(&in, 1, FTC_I32, 1, c.comm, 2000), FTC_OK);
  assert_int_equal(in, 5);
  x = 9;
  assert_int_equal(ftc_send(&x, 1, FTC_I32, 1, c.comm, 2000), FTC_OK);
  assert_int_equal(read_message(down, 1), 9);
  ftc_comm_destroy(c.comm);
  close(up);
  close(down);
  harness_view_free(c.view);
}

/* With FTCOMM_TCP_SOCKETS=1 one connection carries both directions: a
 * rank that offers one of two sockets is refused, one socket is enough. */
static void one_socket_per_pair_when_configured(void **state) {
  (void)state;
  setenv("FTCOMM_TCP_SOCKETS", "1", 1);
  ftc__param_reset();
  int fds[2];
  creator_t c = {.view = harness_view(2, 0, 7, fds)};
  c.fd = fds[0];
  close(fds[1]);
  pthread_t t;
  pthread_create(&t, NULL, create_thread, &c);
  const char *addr = c.view->members[0].addr;
  int keep = -1;
  ftc__tcp_hello_t h;
  harness_hello(&h, FTC__TCP_HELLO_UP, 7, 1001, 1, 2);
  assert_int_equal(say_hello(addr, &h, HARNESS_TOKEN, &keep), 0);
  h.kind = FTC__TCP_HELLO_DOWN;
  assert_int_equal(say_hello(addr, &h, HARNESS_TOKEN, &keep), 0);
  h.kind = FTC__TCP_HELLO;
  assert_int_equal(say_hello(addr, &h, HARNESS_TOKEN, &keep), 1);
  pthread_join(t, NULL);
  unsetenv("FTCOMM_TCP_SOCKETS");
  ftc__param_reset();
  assert_int_equal(c.st, FTC_OK);
  int32_t x = 9;
  assert_int_equal(ftc_send(&x, 1, FTC_I32, 1, c.comm, 2000), FTC_OK);
  assert_int_equal(read_message(keep, 1), 9);
  ftc_comm_destroy(c.comm);
  close(keep);
  harness_view_free(c.view);
}

/* A value out of bounds is a configuration error naming the variable. */
static void a_bad_socket_count_is_refused(void **state) {
  (void)state;
  setenv("FTCOMM_TCP_SOCKETS", "3", 1);
  ftc__param_reset();
  int fd;
  ftc__view_t *v = harness_view(1, 0, 1, &fd);
  ftc_config_t cfg;
  harness_config(&cfg, 5000, 2000);
  ftc_comm_t *comm = NULL;
  ftc_status_t st = ftc__comm_create_from_view(&cfg, v, fd, &comm);
  unsetenv("FTCOMM_TCP_SOCKETS");
  ftc__param_reset();
  assert_int_equal(st, FTC_ERR_CONFIG);
  assert_non_null(strstr(ftc_last_error(), "FTCOMM_TCP_SOCKETS"));
  assert_null(comm);
  harness_view_free(v);
}

/* Between collectives the listener takes only spare connections of this
 * epoch: a stranger gets a nonce, but its hello (wrong token, or a plain
 * hello for this epoch) closes the connection. */
static int stranger_after_bootstrap_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  if (rank == 1) {
    ftc__tcp_hello_t h;
    harness_hello(&h, FTC__TCP_SPARE, comm->view->epoch, comm->view->members[1].member_id, 1, 2);
    int keep = -1;
    if (say_hello(comm->view->members[0].addr, &h, "wrong-token", &keep) != 0)
      return RANK_FAIL(rank, "a spare hello with the wrong token was accepted");
    h.kind = FTC__TCP_HELLO;
    h.member_id = 4242;
    if (say_hello(comm->view->members[0].addr, &h, HARNESS_TOKEN, &keep) != 0)
      return RANK_FAIL(rank, "a stranger's hello was accepted between epochs");
  }
  int32_t x = rank + 1;
  if (ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, 5000) != FTC_OK || x != 3)
    return RANK_FAIL(rank, "allreduce after the stranger: %s", ftc_last_error());
  return 0;
}

static void a_stranger_after_bootstrap_is_refused_and_training_goes_on(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, stranger_after_bootstrap_body, NULL, NULL), 0);
}

/* A rank that arrives after its peer gave up must not hang: its collective
 * may still complete from data the peer sent before failing, but by the
 * next one at the latest it sees the failure (or the mismatch with the
 * peer's failed call, when that call's arguments differ from its own). */
static int late_rank_sees_the_failure(ftc_comm_t *comm, int rank) {
  float x = 1;
  for (int i = 0; i < 2; i++) {
    ftc_status_t st = ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 2000);
    if (st == FTC_ERR_PEER_LOST || st == FTC_ERR_REVOKED || st == FTC_ERR_MISMATCH) return 0;
    if (st != FTC_OK) return RANK_FAIL(rank, "late rank got %s", ftc_strerror(st));
  }
  return RANK_FAIL(rank, "two collectives with a failed peer succeeded");
}

/* ---- failures ---- */

static int timeout_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  float x = 1;
  if (rank == 1) {
    usleep(800 * 1000);
    return late_rank_sees_the_failure(comm, rank);
  }
  int64_t t0 = ftc__now_ns();
  ftc_status_t st = ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 200);
  int64_t took = ms_since(t0);
  if (st != FTC_ERR_TIMEOUT) return RANK_FAIL(rank, "got %s, expected a timeout", ftc_strerror(st));
  if (took < 150 || took > 700) return RANK_FAIL(rank, "timed out after %lld ms, not ~200", (long long)took);
  if (!strstr(ftc_last_error(), "rank 1") || !strstr(ftc_last_error(), "allreduce"))
    return RANK_FAIL(rank, "the error does not name the collective and the peer: %s", ftc_last_error());
  ftc_status_t async;
  ftc_comm_get_async_error(comm, &async);
  if (async != FTC_ERR_TIMEOUT) return RANK_FAIL(rank, "async error %s", ftc_strerror(async));
  if (ftc_barrier(comm, 100) != FTC_ERR_REVOKED)
    return RANK_FAIL(rank, "a collective after the failure was not revoked");
  ftc_request_t *req;
  if (ftc_ibarrier(comm, &req) != FTC_ERR_REVOKED) return RANK_FAIL(rank, "ibarrier not revoked");
  /* A step boundary whose votes came through (no collective of its own)
   * still reports the failed epoch, as its allreduce would. */
  if (ftc_comm_step_voted(comm, 0, 100, NULL) != FTC_ERR_REVOKED)
    return RANK_FAIL(rank, "a voted step boundary on a failed epoch: %s", ftc_last_error());
  ftc_rec_entry_t e[8];
  size_t ne = ftc_rec_snapshot(comm->rec, e, 8);
  if (ne < 1 || e[ne - 1].state != FTC_REC_FAILED || e[ne - 1].op != FTC_REC_ALLREDUCE)
    return RANK_FAIL(rank, "the recorder does not show the failed allreduce");
  return 0;
}

static void a_collective_past_its_timeout_fails_and_revokes_the_epoch(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, timeout_body, NULL, NULL), 0);
}

static int peer_lost_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  if (rank == 2) {
    usleep(200 * 1000);
    _exit(0); /* dies without a word */
  }
  double x[1000] = {0};
  int64_t t0 = ftc__now_ns();
  ftc_status_t st = ftc_allreduce(x, x, 1000, FTC_F64, FTC_SUM, comm, 10000);
  if (st != FTC_ERR_PEER_LOST) return RANK_FAIL(rank, "got %s, expected peer lost", ftc_strerror(st));
  if (ms_since(t0) > 3000) return RANK_FAIL(rank, "took %lld ms to notice", (long long)ms_since(t0));
  return 0;
}

static void a_dead_peer_fails_the_collective_with_peer_lost(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, peer_lost_body, NULL, NULL), 0);
}

static int idle_peer_lost_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  if (rank == 1) _exit(0);
  /* Between collectives: the progress thread notices the closed connection by itself.
   * Poll for it with a bound instead of sleeping a fixed time (a sanitizer's exit can
   * hold the peer's sockets open for a second). */
  ftc_status_t async = FTC_OK;
  for (int i = 0; i < 1000 && async == FTC_OK; i++) {
    usleep(10 * 1000);
    ftc_comm_get_async_error(comm, &async);
  }
  if (async != FTC_ERR_PEER_LOST) return RANK_FAIL(rank, "async error %s", ftc_strerror(async));
  if (ftc_barrier(comm, 1000) != FTC_ERR_REVOKED) return RANK_FAIL(rank, "barrier not revoked");
  return 0;
}

static void a_peer_dying_between_collectives_sets_the_async_error(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, idle_peer_lost_body, NULL, NULL), 0);
}

/* 1 when a file in dir holds `needle`. */
static int dir_has_dump_with(const char *dir, const char *needle) {
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "grep -lq '%s' %s/*.json 2>/dev/null", needle, dir);
  return system(cmd) == 0;
}

static int dumps_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n;
  const char *dir = arg;
  if (rank == 1) {
    /* The API trigger: a dump now, its path returned. */
    char path[512] = "";
    if (ftc_comm_dump(comm, "checkpoint", path, sizeof(path)) != FTC_OK)
      return RANK_FAIL(rank, "ftc_comm_dump: %s", ftc_last_error());
    if (strncmp(path, dir, strlen(dir)) != 0 || access(path, R_OK) != 0)
      return RANK_FAIL(rank, "the dump is not at %s (in %s)", path, dir);
    _exit(0); /* then die: rank 0's epoch fails */
  }
  int32_t x = 1;
  ftc_status_t st = ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, 5000);
  if (st != FTC_ERR_PEER_LOST && st != FTC_ERR_REVOKED)
    return RANK_FAIL(rank, "allreduce with a dead peer gave %s", ftc_strerror(st));
  /* The failure trigger: the watchdog writes the dump, not this thread. */
  for (int i = 0; i < 100 && !dir_has_dump_with(dir, "\"reason\": *\"error\""); i++) usleep(50000);
  if (!dir_has_dump_with(dir, "\"reason\": *\"error\""))
    return RANK_FAIL(rank, "no dump with reason \"error\" in %s", dir);
  if (!dir_has_dump_with(dir, "\"reason\": *\"checkpoint\""))
    return RANK_FAIL(rank, "no dump with reason \"checkpoint\" in %s", dir);
  /* The TCP backend is part of the library: its version is the library's. */
  char want[96];
  snprintf(want, sizeof(want), "\"backend\": *\"tcp\", *\"backend_version\": *\"%d.%d.%d\"",
           FTC_VERSION_MAJOR, FTC_VERSION_MINOR, FTC_VERSION_PATCH);
  if (!dir_has_dump_with(dir, want)) return RANK_FAIL(rank, "no dump in %s says %s", dir, want);
  return 0;
}

static void the_api_and_a_failed_epoch_write_dumps_into_the_dump_dir(void **state) {
  (void)state;
  char dir[] = "/tmp/ftc-unit-dumps-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char env[64];
  snprintf(env, sizeof(env), "FTCOMM_DUMP_DIR=%s", dir);
  harness_opts_t o = {.env = {env}};
  assert_int_equal(harness_run(2, dumps_body, dir, &o), 0);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* Rank 1 dies; rank 0's epoch fails and rank 0 destroys its communicator at
 * once, while the dump writer still sleeps (dumpwrite:1500) before the
 * failure dump: destroy lets it land before the writer thread is joined. */
static int slow_dump_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n;
  (void)arg;
  if (rank == 1) _exit(0);
  int32_t x = 1;
  ftc_status_t st = ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, 5000);
  if (st != FTC_ERR_PEER_LOST && st != FTC_ERR_REVOKED)
    return RANK_FAIL(rank, "allreduce with a dead peer gave %s", ftc_strerror(st));
  return 0;
}

static void destroy_lets_a_slow_failure_dump_land(void **state) {
  (void)state;
  char dir[] = "/tmp/ftc-unit-dumps-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char env[64];
  snprintf(env, sizeof(env), "FTCOMM_DUMP_DIR=%s", dir);
  harness_opts_t o = {.env = {env, "FTCOMM_FAULT=dumpwrite:1500", "FTCOMM_DUMP_DRAIN_MS=20000"}};
  assert_int_equal(harness_run(2, slow_dump_body, NULL, &o), 0);
  assert_true(dir_has_dump_with(dir, "\"reason\": *\"error\""));
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

static int no_coordinator_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;
  /* The step boundary works without a coordinator: nothing newer to agree on. */
  if (ftc_comm_step(comm, 5000, &info) != FTC_OK || info.changed || info.size != n ||
      info.rank != rank)
    return RANK_FAIL(rank, "step: %s, changed %d size %d", ftc_last_error(), info.changed,
                     info.size);
  if (ftc_comm_info(comm, &info) != FTC_OK || info.epoch != 1 || info.joiner)
    return RANK_FAIL(rank, "info: epoch %llu joiner %d", (unsigned long long)info.epoch,
                     info.joiner);
  /* The vote: nothing newer known. The boundary it agreed runs no collective
   * (rank 0 alone would time out waiting for the others), a nonzero one
   * runs the allreduce on every rank. */
  int vote = -1;
  if (ftc_comm_step_vote(comm, &vote) != FTC_OK || vote != 0)
    return RANK_FAIL(rank, "vote %d: %s", vote, ftc_last_error());
  if (rank == 0 && (ftc_comm_step_voted(comm, 0, 100, &info) != FTC_OK || info.changed ||
                    info.size != n || info.rank != rank || info.epoch != 1))
    return RANK_FAIL(rank, "voted 0 alone: %s, changed %d", ftc_last_error(), info.changed);
  if (ftc_comm_step_voted(comm, 1, 5000, &info) != FTC_OK || info.changed || info.size != n)
    return RANK_FAIL(rank, "voted 1: %s, changed %d", ftc_last_error(), info.changed);
  if (ftc_comm_step_vote(NULL, &vote) != FTC_ERR_INVALID_ARGUMENT ||
      ftc_comm_step_vote(comm, NULL) != FTC_ERR_INVALID_ARGUMENT ||
      ftc_comm_step_voted(NULL, 0, 100, &info) != FTC_ERR_INVALID_ARGUMENT)
    return RANK_FAIL(rank, "vote: bad arguments accepted");
  /* Recovery needs the coordinator that decides the next epoch. */
  if (ftc_comm_recover(comm, 100, &info) != FTC_ERR_NOT_SUPPORTED)
    return RANK_FAIL(rank, "recover without a coordinator: %s", ftc_last_error());
  if (ftc_comm_recover(NULL, 100, &info) != FTC_ERR_INVALID_ARGUMENT ||
      ftc_comm_recover(comm, -7, &info) != FTC_ERR_INVALID_ARGUMENT)
    return RANK_FAIL(rank, "bad arguments accepted");
  /* A first epoch lost nobody: any index is out of range, and says so. */
  int prev_rank = -5;
  if (ftc_comm_lost(comm, 0, &prev_rank, NULL, NULL) != FTC_ERR_INVALID_ARGUMENT || prev_rank != -5 ||
      !strstr(ftc_last_error(), "index 0 is out of range; the epoch before epoch 1 lost 0 members"))
    return RANK_FAIL(rank, "ftc_comm_lost on a first epoch: %s", ftc_last_error());
  if (ftc_comm_lost(NULL, 0, NULL, NULL, NULL) != FTC_ERR_INVALID_ARGUMENT)
    return RANK_FAIL(rank, "ftc_comm_lost(NULL) accepted");
  if (strcmp(ftc_drop_reason_name(FTC_DROP_HUNG), "hung") || strcmp(ftc_drop_reason_name((ftc_drop_reason_t)9), "?"))
    return RANK_FAIL(rank, "ftc_drop_reason_name");
  return 0;
}

static void step_and_recover_without_a_coordinator(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, no_coordinator_body, NULL, NULL), 0);
}

static int64_t cpu_ms(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru); /* every thread of the process */
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000LL +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

static int idle_cpu_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  float x = 1;
  if (rank == 1) {
    usleep(1000 * 1000);
    ftc_status_t a = ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 5000);
    usleep(1000 * 1000);
    ftc_status_t b = ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 5000);
    return a == FTC_OK && b == FTC_OK ? 0 : RANK_FAIL(rank, "allreduce: %s", ftc_last_error());
  }
  int64_t c0 = cpu_ms();
  if (ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 5000) != FTC_OK)
    return RANK_FAIL(rank, "blocking allreduce: %s", ftc_last_error());
  int64_t c1 = cpu_ms();
  ftc_request_t *req;
  if (ftc_iallreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, &req) != FTC_OK || ftc_wait(req, 5000) != FTC_OK)
    return RANK_FAIL(rank, "iallreduce: %s", ftc_last_error());
  ftc_request_free(req);
  int64_t c2 = cpu_ms();
  /* About a second of waiting each; a spinning rank would use about as much CPU. */
  if (c1 - c0 > 150 || c2 - c1 > 150)
    return RANK_FAIL(rank, "waiting burned %lld ms and %lld ms of CPU", (long long)(c1 - c0),
                     (long long)(c2 - c1));
  return 0;
}

static void a_rank_waiting_for_a_late_peer_does_not_burn_a_core(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, idle_cpu_body, NULL, NULL), 0);
}

static int goodbye_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  if (rank == 1) return 0; /* destroys its communicator at once: says goodbye */
  usleep(300 * 1000);
  ftc_status_t async;
  ftc_comm_get_async_error(comm, &async);
  if (async != FTC_OK) return RANK_FAIL(rank, "a clean leave counted as a failure: %s", ftc_strerror(async));
  uint8_t b = 0;
  ftc_status_t st = ftc_recv(&b, 1, FTC_U8, 1, comm, 1000);
  if (st != FTC_ERR_PEER_LOST || !strstr(ftc_last_error(), "left"))
    return RANK_FAIL(rank, "receiving from a rank that left gave %s (byte %u): %s", ftc_strerror(st), b,
                     ftc_last_error());
  return 0;
}

static void a_rank_that_left_is_not_a_failure_until_someone_needs_it(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, goodbye_body, NULL, NULL), 0);
}

/* Rank 0 broadcasts a small message (sent on the pair's shared socket) and,
 * with arg, a large one (on the socket of its direction), then leaves: its goodbye
 * comes on both sockets, after the data, and rank 1, idle meanwhile, still
 * gets both broadcasts (its idle watch must not take the goodbye on one
 * socket for the end while data waits on the other); only what comes after
 * them fails. */
static int goodbye_after_data_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n;
  const int with_large = arg != NULL;
  enum { BIG = 1 << 18 }; /* 1 MiB of i32: at least FTCOMM_RING_THRESHOLD */
  int32_t small = rank == 0 ? 42 : 0;
  int32_t *big = malloc(BIG * sizeof(int32_t));
  if (!big) return RANK_FAIL(rank, "malloc");
  for (int i = 0; i < BIG; i++) big[i] = rank == 0 ? i : -1;
  int rc = 0;
  if (rank == 1) usleep(300 * 1000); /* rank 0 is gone by now */
  if (ftc_broadcast(&small, 1, FTC_I32, 0, comm, 5000) != FTC_OK || small != 42)
    rc = RANK_FAIL(rank, "small broadcast: %s (got %d)", ftc_last_error(), small);
  else if (with_large && ftc_broadcast(big, BIG, FTC_I32, 0, comm, 5000) != FTC_OK)
    rc = RANK_FAIL(rank, "large broadcast: %s", ftc_last_error());
  for (int i = 0; with_large && !rc && i < BIG; i++)
    if (big[i] != i) rc = RANK_FAIL(rank, "large broadcast: element %d is %d", i, big[i]);
  free(big);
  if (rc || rank == 0) return rc;
  ftc_status_t async;
  ftc_comm_get_async_error(comm, &async);
  if (async != FTC_OK) return RANK_FAIL(rank, "a clean leave counted as a failure: %s", ftc_strerror(async));
  int32_t x = 1;
  ftc_status_t st = ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, 1000);
  if (st != FTC_ERR_PEER_LOST) /* "left", or its goodbye read as the end of the data */
    return RANK_FAIL(rank, "an allreduce with a rank that left gave %s: %s", ftc_strerror(st),
                     ftc_last_error());
  return 0;
}

static void a_rank_that_left_after_sending_is_still_heard(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, goodbye_after_data_body, NULL, NULL), 0);
  int large = 1;
  assert_int_equal(harness_run(2, goodbye_after_data_body, &large, NULL), 0);
}

typedef struct aborter {
  ftc_comm_t *comm;
  int delay_ms;
} aborter_t;

static void *abort_thread(void *arg) {
  aborter_t *a = arg;
  usleep((useconds_t)a->delay_ms * 1000);
  ftc_comm_abort(a->comm);
  return NULL;
}

static int abort_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  float x[4] = {0};
  if (rank == 1) {
    usleep(1200 * 1000);
    return late_rank_sees_the_failure(comm, rank);
  }
  ftc_request_t *queued[3];
  for (int i = 0; i < 3; i++)
    if (ftc_iallreduce(x, x, 4, FTC_F32, FTC_SUM, comm, &queued[i]) != FTC_OK)
      return RANK_FAIL(rank, "iallreduce: %s", ftc_last_error());
  aborter_t a = {comm, 200};
  pthread_t t;
  pthread_create(&t, NULL, abort_thread, &a);
  int64_t t0 = ftc__now_ns();
  ftc_status_t st = ftc_allreduce(x, x, 4, FTC_F32, FTC_SUM, comm, FTC_TIMEOUT_INFINITE);
  int64_t took = ms_since(t0);
  pthread_join(t, NULL);
  if (st != FTC_ERR_ABORTED) return RANK_FAIL(rank, "blocking call got %s", ftc_strerror(st));
  if (took > 1000) return RANK_FAIL(rank, "abort took %lld ms to land", (long long)took);
  for (int i = 0; i < 3; i++) {
    if (ftc_wait(queued[i], 1000) != FTC_ERR_ABORTED)
      return RANK_FAIL(rank, "queued request %d: %s", i, ftc_last_error());
    ftc_request_free(queued[i]);
  }
  if (ftc_barrier(comm, 100) != FTC_ERR_ABORTED) return RANK_FAIL(rank, "later barrier not aborted");
  ftc_request_t *req;
  if (ftc_ibarrier(comm, &req) != FTC_ERR_ABORTED) return RANK_FAIL(rank, "later ibarrier not aborted");
  ftc_status_t async;
  ftc_comm_get_async_error(comm, &async);
  if (async != FTC_ERR_ABORTED) return RANK_FAIL(rank, "async error %s", ftc_strerror(async));
  return 0;
}

static void abort_from_another_thread_fails_everything_promptly(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, abort_body, NULL, NULL), 0);
}

static int wait_timeout_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  int32_t x = 1;
  if (rank == 1) {
    usleep(800 * 1000);
    return late_rank_sees_the_failure(comm, rank);
  }
  ftc_request_t *req;
  if (ftc_iallreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, &req) != FTC_OK)
    return RANK_FAIL(rank, "iallreduce: %s", ftc_last_error());
  int done = 1;
  if (ftc_test(req, &done) != FTC_OK || done) return RANK_FAIL(rank, "test says done too early");
  int64_t t0 = ftc__now_ns();
  if (ftc_wait(req, 200) != FTC_ERR_TIMEOUT) return RANK_FAIL(rank, "wait did not time out");
  if (ms_since(t0) > 700) return RANK_FAIL(rank, "wait took %lld ms", (long long)ms_since(t0));
  if (ftc_wait(req, 2000) != FTC_ERR_TIMEOUT) return RANK_FAIL(rank, "the request did not fail with the timeout");
  if (ftc_test(req, &done) != FTC_ERR_TIMEOUT || !done) return RANK_FAIL(rank, "test after failure");
  ftc_request_free(req);
  if (ftc_barrier(comm, 100) != FTC_ERR_REVOKED) return RANK_FAIL(rank, "epoch not revoked");
  return 0;
}

static void a_timed_out_wait_fails_the_request_and_the_epoch(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, wait_timeout_body, NULL, NULL), 0);
}

static int detached_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  int64_t *x = malloc(sizeof(int64_t) * 3000);
  for (int i = 0; i < 3000; i++) x[i] = rank + i;
  ftc_request_t *req;
  if (ftc_iallreduce(x, x, 3000, FTC_I64, FTC_SUM, comm, &req) != FTC_OK)
    return RANK_FAIL(rank, "iallreduce: %s", ftc_last_error());
  ftc_request_free(req); /* detached: goes on in the background */
  int64_t y = 1;
  if (ftc_allreduce(&y, &y, 1, FTC_I64, FTC_SUM, comm, 5000) != FTC_OK || y != n)
    return RANK_FAIL(rank, "blocking allreduce: %s", ftc_last_error());
  for (int i = 0; i < 3000; i++)
    if (x[i] != (int64_t)n * (n - 1) / 2 + (int64_t)n * i)
      return RANK_FAIL(rank, "detached result %d is %lld", i, (long long)x[i]);
  free(x);
  return 0;
}

static void a_freed_request_still_completes_in_order(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, detached_body, NULL, NULL), 0);
}

static int destroy_pending_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  if (rank == 1) {
    usleep(300 * 1000);
    return 0;
  }
  float x = 1;
  ftc_request_t *req;
  if (ftc_iallreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, &req) != FTC_OK)
    return RANK_FAIL(rank, "iallreduce: %s", ftc_last_error());
  usleep(50 * 1000);
  int64_t t0 = ftc__now_ns();
  ftc_comm_destroy(comm);
  if (ms_since(t0) > 1000) return RANK_FAIL(rank, "destroy took %lld ms", (long long)ms_since(t0));
  ftc_status_t st = ftc_wait(req, 100);
  ftc_request_free(req);
  if (st != FTC_ERR_ABORTED) return RANK_FAIL(rank, "pending request got %s", ftc_strerror(st));
  _exit(0); /* the harness would destroy the communicator again */
}

static void destroy_fails_pending_requests_with_aborted(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, destroy_pending_body, NULL, NULL), 0);
}

/* ---- completion callbacks ---- */

typedef struct cb_log {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n;
  int order[8];         /* which request, in the order their callbacks ran */
  ftc_status_t st[8];
  pthread_t thread[8];
  char detail[8][64];
  ftc_request_t *req[8];
  int free_it;          /* the callback frees its request */
} cb_log_t;

typedef struct cb_arg {
  cb_log_t *log;
  int id;
} cb_arg_t;

static void on_done(ftc_request_t *req, ftc_status_t st, void *arg) {
  cb_arg_t *a = arg;
  cb_log_t *l = a->log;
  pthread_mutex_lock(&l->mu);
  int k = l->n++;
  l->order[k] = a->id;
  l->st[k] = st;
  l->thread[k] = pthread_self();
  l->req[k] = req;
  snprintf(l->detail[k], sizeof(l->detail[k]), "%s", ftc_last_error());
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  if (l->free_it) ftc_request_free(req);
}

static int cb_wait(cb_log_t *l, int n, int ms) {
  int64_t end = ftc__now_ns() + (int64_t)ms * 1000000;
  pthread_mutex_lock(&l->mu);
  while (l->n < n && ftc__now_ns() < end) {
    pthread_mutex_unlock(&l->mu);
    usleep(1000);
    pthread_mutex_lock(&l->mu);
  }
  int got = l->n;
  pthread_mutex_unlock(&l->mu);
  return got;
}

static int callbacks_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  static cb_log_t l = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
  cb_arg_t args[4];
  ftc_request_t *reqs[3];
  int64_t x[3][512];
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 512; j++) x[i][j] = rank + i + j;
    args[i] = (cb_arg_t){&l, i};
    if (ftc_iallreduce(x[i], x[i], 512, FTC_I64, FTC_SUM, comm, &reqs[i]) != FTC_OK)
      return RANK_FAIL(rank, "iallreduce: %s", ftc_last_error());
    if (ftc_request_on_complete(reqs[i], on_done, &args[i]) != FTC_OK)
      return RANK_FAIL(rank, "on_complete: %s", ftc_last_error());
  }
  /* Nobody waits: the callbacks alone say the requests are done. */
  if (cb_wait(&l, 3, 5000) != 3) return RANK_FAIL(rank, "%d of 3 callbacks ran", l.n);
  for (int k = 0; k < 3; k++) {
    if (l.order[k] != k) return RANK_FAIL(rank, "callback %d ran for request %d", k, l.order[k]);
    if (l.st[k] != FTC_OK || l.req[k] != reqs[k]) return RANK_FAIL(rank, "callback %d: %s", k, ftc_strerror(l.st[k]));
    if (pthread_equal(l.thread[k], pthread_self())) return RANK_FAIL(rank, "callback %d ran on the caller", k);
    for (int j = 0; j < 512; j++)
      if (x[k][j] != (int64_t)n * (n - 1) / 2 + (int64_t)n * (k + j))
        return RANK_FAIL(rank, "request %d's result %d is %lld when its callback ran", k, j, (long long)x[k][j]);
    int done = 0;
    if (ftc_test(reqs[k], &done) != FTC_OK || !done) return RANK_FAIL(rank, "test after the callback");
  }
  /* One registered on a completed request runs here, before the call returns. */
  args[3] = (cb_arg_t){&l, 3};
  if (ftc_request_on_complete(reqs[0], on_done, &args[3]) != FTC_ERR_INVALID_ARGUMENT ||
      !strstr(ftc_last_error(), "one per request"))
    return RANK_FAIL(rank, "a second callback on one request was not refused");
  ftc_request_t *late;
  float y = 1;
  if (ftc_iallreduce(&y, &y, 1, FTC_F32, FTC_SUM, comm, &late) != FTC_OK || ftc_wait(late, 5000) != FTC_OK)
    return RANK_FAIL(rank, "iallreduce: %s", ftc_last_error());
  if (ftc_request_on_complete(late, on_done, &args[3]) != FTC_OK || l.n != 4 ||
      !pthread_equal(l.thread[3], pthread_self()) || l.order[3] != 3)
    return RANK_FAIL(rank, "the callback of a completed request did not run on the caller before returning");
  if (ftc_request_on_complete(late, NULL, NULL) != FTC_ERR_INVALID_ARGUMENT ||
      ftc_request_on_complete(NULL, on_done, NULL) != FTC_ERR_INVALID_ARGUMENT)
    return RANK_FAIL(rank, "a NULL request or function was not refused");
  for (int i = 0; i < 3; i++) ftc_request_free(reqs[i]);
  ftc_request_free(late);
  return 0;
}

static void completion_callbacks_run_once_in_order_on_the_progress_thread(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, callbacks_body, NULL, NULL), 0);
}

static int callback_abort_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  if (rank == 1) {
    usleep(400 * 1000);
    return late_rank_sees_the_failure(comm, rank);
  }
  static cb_log_t l = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
  l.free_it = 1; /* the callback frees the request: nothing else holds it */
  cb_arg_t a[2] = {{&l, 0}, {&l, 1}};
  float x[2] = {1, 1};
  for (int i = 0; i < 2; i++) {
    ftc_request_t *req;
    if (ftc_iallreduce(&x[i], &x[i], 1, FTC_F32, FTC_SUM, comm, &req) != FTC_OK ||
        ftc_request_on_complete(req, on_done, &a[i]) != FTC_OK)
      return RANK_FAIL(rank, "iallreduce: %s", ftc_last_error());
  }
  usleep(50 * 1000);
  if (l.n != 0) return RANK_FAIL(rank, "a callback ran before the abort");
  ftc_comm_abort(comm);
  if (cb_wait(&l, 2, 2000) != 2) return RANK_FAIL(rank, "%d of 2 callbacks ran after the abort", l.n);
  /* (the queued one may fail before the one the abort interrupts) */
  if (l.order[0] + l.order[1] != 1) return RANK_FAIL(rank, "a callback ran twice");
  for (int k = 0; k < 2; k++)
    if (l.st[k] != FTC_ERR_ABORTED || !l.detail[k][0])
      return RANK_FAIL(rank, "callback %d: %s, detail \"%s\"", k, ftc_strerror(l.st[k]), l.detail[k]);
  return 0;
}

static void an_abort_runs_the_callbacks_of_pending_requests_with_its_status(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, callback_abort_body, NULL, NULL), 0);
}

static int rebuild_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  int32_t x = 1;
  /* Break epoch 1: rank 1 arrives after rank 0's timeout. */
  if (rank == 1) {
    usleep(500 * 1000);
    if (late_rank_sees_the_failure(comm, rank)) return 1;
  } else if (ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, 200) != FTC_ERR_TIMEOUT) {
    return RANK_FAIL(rank, "epoch 1 did not time out");
  }
  ftc__view_t v2 = *comm->view;
  ftc__view_member_t members[2];
  memcpy(members, comm->view->members, sizeof(members));
  v2.members = members;
  v2.epoch = 2;
  if (ftc__comm_rebuild(comm, &v2) != FTC_OK) return RANK_FAIL(rank, "rebuild: %s", ftc_last_error());
  uint64_t e;
  ftc_status_t async;
  ftc_comm_epoch(comm, &e);
  ftc_comm_get_async_error(comm, &async);
  if (e != 2 || async != FTC_OK) return RANK_FAIL(rank, "epoch %llu, async %d", (unsigned long long)e, async);
  x = rank + 1;
  if (ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, 5000) != FTC_OK || x != n * (n + 1) / 2)
    return RANK_FAIL(rank, "allreduce in epoch 2: %s (x=%d)", ftc_last_error(), x);
  return 0;
}

/* Wait up to 5 s for this rank's spare connections to every peer. */
static int wait_spares(ftc_comm_t *comm, int want) {
  for (int i = 0; i < 500; i++) {
    pthread_mutex_lock(&comm->lock);
    int have = ftc__tcp_spare_count(comm->bh);
    pthread_mutex_unlock(&comm->lock);
    if (have == want) return 0;
    usleep(10000);
  }
  return -1;
}

/* Epoch 1 fails (rank 0 breaks it, as a crash of a peer would); epoch 2
 * with the same members reconnects through the spare connections made
 * once epoch 1 completed two collectives: no connection goes through the
 * listener, and the data plane works. Epoch 3 follows after one collective
 * of epoch 2 (too early for spares): it connects anew. */
static int spare_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  int32_t x = rank + 1;
  for (int i = 0; i < 2; i++) /* spares are made once an epoch completed two collectives */
    if (ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, 5000) != FTC_OK)
      return RANK_FAIL(rank, "allreduce in epoch 1: %s", ftc_last_error());
  if (wait_spares(comm, n - 1) != 0) return RANK_FAIL(rank, "no spare connections to every peer");
  /* Everyone has them (breaking the epoch earlier would stop a peer's). */
  if (ftc_barrier(comm, 5000) != FTC_OK) return RANK_FAIL(rank, "barrier: %s", ftc_last_error());
  if (rank == 0) ftc__comm_fail(comm, FTC_ERR_PEER_LOST, "the test breaks epoch 1");
  x = 1;
  if (rank != 0 && ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, 5000) == FTC_OK)
    return RANK_FAIL(rank, "epoch 1 did not fail");
  for (uint64_t epoch = 2; epoch <= 3; epoch++) {
    ftc__view_t v = *comm->view;
    ftc__view_member_t members[4];
    memcpy(members, comm->view->members, (size_t)n * sizeof(*members));
    v.members = members;
    v.epoch = epoch;
    if (epoch == 3) ftc__comm_fail(comm, FTC_ERR_REVOKED, "the test moves on");
    if (ftc__comm_rebuild(comm, &v) != FTC_OK)
      return RANK_FAIL(rank, "rebuild for epoch %llu: %s", (unsigned long long)epoch, ftc_last_error());
    int adopted = ftc__tcp_adopted(comm->bh);
    ftc__tcp_cfg_t tcfg; /* the backend's tunables, from the same FTCOMM_* */
    if (ftc__tcp_cfg_from_env(&tcfg) != FTC_OK) return RANK_FAIL(rank, "%s", ftc_last_error());
    if (adopted != (epoch == 2 ? (n - 1) * tcfg.sockets : 0))
      return RANK_FAIL(rank, "epoch %llu adopted %d spare connections", (unsigned long long)epoch, adopted);
    x = rank + 1;
    if (ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, 5000) != FTC_OK || x != n * (n + 1) / 2)
      return RANK_FAIL(rank, "allreduce in epoch %llu: %s (x=%d)", (unsigned long long)epoch,
                       ftc_last_error(), x);
  }
  return 0;
}

static void a_failed_epoch_reconnects_through_spare_connections(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, spare_body, NULL, NULL), 0);
}

/* Epoch 1 with spares, broken by rank 0; epoch 2 (the same members) takes
 * every pair's spares lazily: each pair unconfirmed, no run has used it. */
static int lazy_epoch_2(ftc_comm_t *comm, int rank, int n) {
  int32_t x = rank + 1;
  for (int i = 0; i < 2; i++)
    if (ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, 5000) != FTC_OK)
      return RANK_FAIL(rank, "allreduce in epoch 1: %s", ftc_last_error());
  if (wait_spares(comm, n - 1) != 0) return RANK_FAIL(rank, "no spare connections to every peer");
  if (ftc_barrier(comm, 5000) != FTC_OK) return RANK_FAIL(rank, "barrier: %s", ftc_last_error());
  if (rank == 0) ftc__comm_fail(comm, FTC_ERR_PEER_LOST, "the test breaks epoch 1");
  if (rank != 0 && ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, comm, 5000) == FTC_OK)
    return RANK_FAIL(rank, "epoch 1 did not fail");
  ftc__view_t v = *comm->view;
  ftc__view_member_t members[4];
  memcpy(members, comm->view->members, (size_t)n * sizeof(*members));
  v.members = members;
  v.epoch = 2;
  if (ftc__comm_rebuild(comm, &v) != FTC_OK)
    return RANK_FAIL(rank, "rebuild for epoch 2: %s", ftc_last_error());
  for (int q = 0; q < n; q++)
    if (q != rank && !ftc__tcp_unconfirmed(comm->bh, q))
      return RANK_FAIL(rank, "the pair with rank %d is confirmed before any run", q);
  return 0;
}

/* Lazy adoption: epoch 2 takes the spares of every pair without a word.
 * Rank 2 then leaves the data plane (its epoch stopped loudly: every
 * socket shut) before any run used its pairs, while ranks 0 and 1
 * exchange: their run sees the end of an unconfirmed pair it does not use
 * (a peer that did not adopt it, as far as it can tell; its process is
 * alive) and completes all the same: the pair is only marked broken (no
 * coordinator here says epoch 2 is over). A run that waited for the pair
 * would run into its 3 s timeout (FTCOMM_CONNECT_TIMEOUT_MS is 10 s). */
static int unused_pair_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  if (lazy_epoch_2(comm, rank, n) != 0) return 1;
  if (rank == 2) {
    ftc__comm_fail(comm, FTC_ERR_REVOKED, "the test stops rank 2's epoch");
    usleep(300 * 1000); /* alive meanwhile: its listener answers */
    return 0;
  }
  usleep(50 * 1000); /* rank 2's sockets are shut by now */
  int32_t out = -1, in = rank + 10;
  ftc_request_t *sreq = NULL, *rreq = NULL;
  ftc_status_t st = ftc_isend(&in, 1, FTC_I32, 1 - rank, comm, &sreq);
  if (st == FTC_OK) st = ftc_irecv(&out, 1, FTC_I32, 1 - rank, comm, &rreq);
  if (st == FTC_OK) st = ftc_wait(sreq, 3000);
  if (st == FTC_OK) st = ftc_wait(rreq, 3000);
  ftc_request_free(sreq);
  ftc_request_free(rreq);
  if (st != FTC_OK || out != 11 - rank)
    return RANK_FAIL(rank, "the exchange with rank %d: %s (got %d)", 1 - rank, ftc_last_error(), out);
  return 0;
}

static void a_run_does_not_wait_on_a_pair_it_does_not_use(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, unused_pair_body, NULL, NULL), 0);
}

/* Lazy adoption keeps the send's promise (docs/api.md): a blocking
 * ftc_send smaller than the socket buffers returns without its receiver.
 * Epoch 2 takes the spares of every pair unconfirmed; each rank then sends
 * to the next one around a ring, blocking, before it receives from the one
 * before. Each send's run pays its ADOPT and waits for the peer's, while
 * that peer runs its own send on another pair: a run must answer an ADOPT
 * that comes on a pair it does not use, or the ring waits for itself. */
static int ring_send_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  if (lazy_epoch_2(comm, rank, n) != 0) return 1;
  int32_t out = -1, in = rank + 10;
  ftc_status_t st = ftc_send(&in, 1, FTC_I32, (rank + 1) % n, comm, 3000);
  if (st != FTC_OK) return RANK_FAIL(rank, "send to rank %d: %s", (rank + 1) % n, ftc_last_error());
  st = ftc_recv(&out, 1, FTC_I32, (rank + n - 1) % n, comm, 3000);
  if (st != FTC_OK || out != (rank + n - 1) % n + 10)
    return RANK_FAIL(rank, "recv from rank %d: %s (got %d)", (rank + n - 1) % n, ftc_last_error(), out);
  return 0;
}

static void a_run_answers_an_adopt_on_a_pair_it_does_not_use(void **state) {
  (void)state;
  assert_int_equal(harness_run(3, ring_send_body, NULL, NULL), 0);
}

static void the_data_plane_can_be_rebuilt_for_a_new_epoch(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, rebuild_body, NULL, NULL), 0);
}

static void the_recorder_sees_every_collective(void **state) {
  (void)state;
  ftc_comm_t *comm = solo_comm();
  float x = 1;
  ftc_request_t *req;
  assert_int_equal(ftc_allreduce(&x, &x, 1, FTC_F32, FTC_MAX, comm, 100), FTC_OK);
  assert_int_equal(ftc_broadcast(&x, 1, FTC_F32, 0, comm, 100), FTC_OK);
  assert_int_equal(ftc_ibarrier(comm, &req), FTC_OK);
  assert_int_equal(ftc_wait(req, 1000), FTC_OK);
  ftc_request_free(req);
  ftc_rec_entry_t e[8];
  assert_int_equal(ftc_rec_snapshot(comm->rec, e, 8), 3);
  assert_int_equal(e[0].op, FTC_REC_ALLREDUCE);
  assert_int_equal(e[1].op, FTC_REC_BROADCAST);
  assert_int_equal(e[2].op, FTC_REC_BARRIER);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(e[i].seq, (uint64_t)i + 1);
    assert_int_equal(e[i].state, FTC_REC_COMPLETED);
    assert_true(e[i].t_started >= e[i].t_created && e[i].t_completed >= e[i].t_started);
  }
  ftc_comm_destroy(comm);
}

static void creation_fails_cleanly_at_every_allocation_then_succeeds(void **state) {
  (void)state;
  ftc_config_t cfg;
  harness_config(&cfg, 5000, 2000);
  ftc_status_t st = FTC_ERR_NO_MEMORY;
  int failures = 0;
  for (long n = 1; st != FTC_OK && n < 1000; n++) {
    int fd;
    ftc__view_t *v = harness_view(1, 0, 1, &fd);
    ftc_comm_t *comm = NULL;
    ftc__alloc_fail_at(n);
    st = ftc__comm_create_from_view(&cfg, v, fd, &comm);
    ftc__alloc_fail_at(0);
    harness_view_free(v);
    if (st == FTC_OK) {
      float x = 2;
      assert_int_equal(ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 100), FTC_OK);
      ftc_comm_destroy(comm);
    } else {
      assert_int_equal(st, FTC_ERR_NO_MEMORY);
      assert_null(comm);
      failures++;
    }
  }
  assert_int_equal(st, FTC_OK);
  assert_true(failures > 5); /* the loop really went through the allocations */
}

static void a_request_that_cannot_be_allocated_leaves_the_communicator_usable(void **state) {
  (void)state;
  ftc_comm_t *comm = solo_comm();
  float x = 3;
  int refused = 0;
  ftc_status_t st = FTC_ERR_NO_MEMORY;
  for (long n = 1; st != FTC_OK && n < 50; n++) {
    ftc_request_t *req = (ftc_request_t *)&x;
    ftc__alloc_fail_at_thread(n); /* this thread's: the comm's threads allocate meanwhile */
    st = ftc_iallreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, &req);
    ftc__alloc_fail_at_thread(0);
    if (st == FTC_ERR_NO_MEMORY) {
      assert_null(req);
      refused++;
      continue;
    }
    assert_int_equal(st, FTC_OK);
    assert_int_equal(ftc_wait(req, 1000), FTC_OK);
    ftc_request_free(req);
  }
  assert_true(refused >= 1);
  assert_true(x == 3);
  assert_int_equal(ftc_barrier(comm, 100), FTC_OK);
  ftc_comm_destroy(comm);
}

/* A data plane of many sockets, as far as ftc__comm_top_peer_fd sees it:
 * descriptor 1000 + i for the i-th it lists, 2 * size - 1 in all (every
 * peer's socket, then the lower ranks' shared ones). */
static int many_peer_fds(const void *h, int *fds, int *ranks, int max) {
  int size = *(const int *)h, n = 0;
  /* as many as a rank can have: 2 * size - 2 (one for a world of one) */
  for (int i = 0; i < (size > 1 ? 2 * size - 2 : 1) && n < max; i++, n++)
    fds[n] = 1000 + i, ranks[n] = i % size;
  return n;
}

/* The session's duplicate goes above the highest data-plane socket of any
 * world (the first 256 only were looked at: 300 ranks have 598). */
static void the_top_peer_socket_is_found_in_a_world_of_any_size(void **state) {
  (void)state;
  ftc__backend_ops_t be = {.name = "fake", .peer_fds = many_peer_fds};
  for (int size = 1; size <= 300; size += 299) {
    assert_int_equal(ftc__comm_top_peer_fd(&be, &size, size),
                     1000 + (size > 1 ? 2 * size - 3 : 0));
  }
  int size = 2;
  ftc__backend_ops_t none = {.name = "none"};
  assert_int_equal(ftc__comm_top_peer_fd(&none, &size, size), -1); /* no sockets of its own */
}

/* Rank `me` of a world of `size`, as the TCP backend lists its sockets:
 * every peer's receiving socket, then the lower ranks' shared ones (two
 * per lower rank, 2 * size - 2 at the top rank). Each is one end of a
 * socketpair whose other end plays the peer. */
typedef struct two_socket_plane {
  int size, me;
  int own[8][2], shared[8][2];
} two_socket_plane_t;

static int two_socket_peer_fds(const void *h, int *fds, int *ranks, int max) {
  const two_socket_plane_t *p = h;
  int n = 0;
  for (int r = 0; r < p->size && n < max; r++)
    if (r != p->me) fds[n] = p->own[r][0], ranks[n++] = r;
  for (int r = 0; r < p->me && n < max; r++) fds[n] = p->shared[r][0], ranks[n++] = r;
  return n;
}

/* A peer that closed any of its sockets closed its connection, the shared
 * socket of a lower rank (listed past the first size entries) included. */
static void a_peer_closed_on_any_of_its_sockets_is_seen(void **state) {
  (void)state;
  two_socket_plane_t p = {.size = 4, .me = 3};
  for (int r = 0; r < 3; r++) {
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p.own[r]), 0);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p.shared[r]), 0);
  }
  ftc__backend_ops_t be = {.name = "fake", .peer_fds = two_socket_peer_fds};
  for (int r = 0; r < 3; r++) assert_false(ftc__comm_peer_closed(&be, &p, p.size, r));
  close(p.shared[2][1]); /* rank 2's shared socket: the 6th listed */
  close(p.own[0][1]);    /* rank 0's own socket; its shared one stays open */
  assert_true(ftc__comm_peer_closed(&be, &p, p.size, 2));
  assert_true(ftc__comm_peer_closed(&be, &p, p.size, 0));
  assert_false(ftc__comm_peer_closed(&be, &p, p.size, 1));
  ftc__backend_ops_t none = {.name = "none"};
  assert_false(ftc__comm_peer_closed(&none, &p, p.size, 2)); /* no sockets of its own */
  for (int r = 0; r < 3; r++) {
    close(p.own[r][0]);
    close(p.shared[r][0]);
    if (r != 0) close(p.own[r][1]);
    if (r != 2) close(p.shared[r][1]);
  }
}

/* Rank 299 of 300, as the TCP backend lists its sockets: every peer's
 * (299), then the lower ranks' shared ones (298), 597 in all. All are one
 * open socket, but for rank `closed_rank`'s shared one, whose peer end is
 * closed. */
typedef struct wide_plane {
  int size, open_fd, closed_fd, closed_rank;
} wide_plane_t;

static int wide_peer_fds(const void *h, int *fds, int *ranks, int max) {
  const wide_plane_t *p = h;
  int n = 0, me = p->size - 1;
  for (int r = 0; r < me && n < max; r++) fds[n] = p->open_fd, ranks[n++] = r;
  for (int r = 0; r < me && n < max; r++)
    fds[n] = r == p->closed_rank ? p->closed_fd : p->open_fd, ranks[n++] = r;
  return n;
}

/* The idle watch polls every socket of a world of more than 129 ranks: a
 * lower rank's shared socket listed past the 256th, closed by its peer, is
 * seen (the first 256 only were watched). */
static void the_idle_watch_sees_a_close_on_any_socket_of_a_wide_world(void **state) {
  (void)state;
  int open_pair[2], closed_pair[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, open_pair), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, closed_pair), 0);
  close(closed_pair[1]);
  wide_plane_t p = {.size = 300, .open_fd = open_pair[0], .closed_fd = closed_pair[0], .closed_rank = 200};
  ftc__backend_ops_t be = {.name = "fake", .peer_fds = wide_peer_fds};
  ftc__peer_watch_t w = {0};
  assert_int_equal(ftc__peer_watch_init(&w, p.size), 0);
  assert_true(w.cap >= 2 * p.size - 2);
  struct pollfd *pfd = calloc((size_t)w.cap, sizeof(*pfd));
  unsigned char *ignore = calloc((size_t)p.size, 1);
  assert_non_null(pfd);
  assert_non_null(ignore);

  int n = ftc__peer_watch_fill(&w, &be, &p, ignore, p.size, pfd);
  assert_int_equal(w.n, 2 * p.size - 2);
  assert_int_equal(n, 2 * p.size - 2);
  assert_int_equal(poll(pfd, (nfds_t)n, 0), 1);
  int seen = -1;
  for (int i = 0; i < n; i++)
    if (pfd[i].revents) seen = i;
  assert_int_equal(seen, p.size - 1 + p.closed_rank); /* the 500th listed */
  assert_true(pfd[seen].revents & (POLLRDHUP | POLLHUP));
  assert_int_equal(w.ranks[seen], p.closed_rank);

  /* A peer already dealt with is no longer watched, on either socket. */
  ignore[p.closed_rank] = 1;
  n = ftc__peer_watch_fill(&w, &be, &p, ignore, p.size, pfd);
  assert_int_equal(n, 2 * p.size - 4);
  assert_int_equal(poll(pfd, (nfds_t)n, 0), 0);

  ftc__backend_ops_t none = {.name = "none"};
  assert_int_equal(ftc__peer_watch_fill(&w, &none, &p, ignore, p.size, pfd), 0); /* no sockets */
  ftc__peer_watch_free(&w);
  ftc__peer_watch_free(&w); /* freed twice: a no-op */
  assert_int_equal(ftc__peer_watch_init(&w, 1), 0); /* a world of one */
  assert_int_equal(ftc__peer_watch_fill(&w, &be, &(wide_plane_t){.size = 1}, ignore, 1, pfd), 0);
  ftc__peer_watch_free(&w);
  free(pfd);
  free(ignore);
  close(open_pair[0]);
  close(open_pair[1]);
  close(closed_pair[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_null_comm_is_an_invalid_argument),
      cmocka_unit_test(the_top_peer_socket_is_found_in_a_world_of_any_size),
      cmocka_unit_test(a_peer_closed_on_any_of_its_sockets_is_seen),
      cmocka_unit_test(the_idle_watch_sees_a_close_on_any_socket_of_a_wide_world),
      cmocka_unit_test(null_buffers_are_refused_unless_count_is_zero),
      cmocka_unit_test(unknown_dtypes_and_ops_are_refused),
      cmocka_unit_test(a_count_that_overflows_size_t_is_refused),
      cmocka_unit_test(roots_and_peers_out_of_range_are_refused),
      cmocka_unit_test(a_missing_request_pointer_or_bad_timeout_is_refused),
      cmocka_unit_test(the_backend_line_never_truncates_silently),
      cmocka_unit_test(a_failed_step_boundary_says_ftc_comm_step),
      cmocka_unit_test(create_without_a_coordinator_says_how_to_start),
      cmocka_unit_test(begin_finish_and_cancel_refuse_bad_input_and_time_out_from_finish),
      cmocka_unit_test(a_world_of_one_reports_rank_size_epoch),
      cmocka_unit_test(a_peer_that_never_connects_times_out_within_the_connect_timeout),
      cmocka_unit_test(a_peer_that_never_answers_times_out_within_the_connect_timeout),
      cmocka_unit_test(a_peer_address_where_nobody_listens_times_out),
      cmocka_unit_test(strangers_are_refused_and_the_real_peer_is_accepted),
      cmocka_unit_test(callers_waiting_beyond_the_handshake_slots_are_all_answered),
      cmocka_unit_test(one_socket_per_pair_when_configured),
      cmocka_unit_test(a_bad_socket_count_is_refused),
      cmocka_unit_test(a_stranger_after_bootstrap_is_refused_and_training_goes_on),
      cmocka_unit_test(a_failed_epoch_reconnects_through_spare_connections),
      cmocka_unit_test(a_run_does_not_wait_on_a_pair_it_does_not_use),
      cmocka_unit_test(a_run_answers_an_adopt_on_a_pair_it_does_not_use),
      cmocka_unit_test(the_api_and_a_failed_epoch_write_dumps_into_the_dump_dir),
      cmocka_unit_test(destroy_lets_a_slow_failure_dump_land),
      cmocka_unit_test(step_and_recover_without_a_coordinator),
      cmocka_unit_test(a_collective_past_its_timeout_fails_and_revokes_the_epoch),
      cmocka_unit_test(a_dead_peer_fails_the_collective_with_peer_lost),
      cmocka_unit_test(a_peer_dying_between_collectives_sets_the_async_error),
      cmocka_unit_test(a_rank_that_left_is_not_a_failure_until_someone_needs_it),
      cmocka_unit_test(a_rank_that_left_after_sending_is_still_heard),
      cmocka_unit_test(a_rank_waiting_for_a_late_peer_does_not_burn_a_core),
      cmocka_unit_test(abort_from_another_thread_fails_everything_promptly),
      cmocka_unit_test(a_timed_out_wait_fails_the_request_and_the_epoch),
      cmocka_unit_test(a_freed_request_still_completes_in_order),
      cmocka_unit_test(destroy_fails_pending_requests_with_aborted),
      cmocka_unit_test(completion_callbacks_run_once_in_order_on_the_progress_thread),
      cmocka_unit_test(an_abort_runs_the_callbacks_of_pending_requests_with_its_status),
      cmocka_unit_test(the_data_plane_can_be_rebuilt_for_a_new_epoch),
      cmocka_unit_test(the_recorder_sees_every_collective),
      cmocka_unit_test(creation_fails_cleanly_at_every_allocation_then_succeeds),
      cmocka_unit_test(a_request_that_cannot_be_allocated_leaves_the_communicator_usable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
