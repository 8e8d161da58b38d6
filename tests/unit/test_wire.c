/*
 * test_wire.c - every rank of a job runs the same collective algorithms:
 * ranks whose FTCOMM_ALLREDUCE_ALGO, FTCOMM_RING_THRESHOLD,
 * FTCOMM_HALVING_MAX or FTCOMM_TCP_SOCKETS differ are refused when the
 * communicator is created, on both sides, at once, with FTC_ERR_CONFIG and
 * a message naming the rank, the variable and both values; a member that
 * differs is refused by the acceptor's handshake with an answer carrying its
 * settings. Settings that only change how a rank moves the same bytes
 * (FTCOMM_CHUNK_BYTES, FTCOMM_SPIN_US, FTCOMM_SOCKET_BUFFER) may differ.
 * What FTCOMM_ALLREDUCE_ALGO=auto picks for small allreduces
 * (ftc__tcp_crowded) depends on nothing that differs between the ranks.
 * FTCOMM_TCP_CONGESTION, which may differ, sets the data connections'
 * congestion control (auto: reno within one host).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ftc_param.h"
#include "ftc_time.h"
#include "harness.h"
#include "tcp/tcp.h"
#include "tcp/tcp_int.h"

static int64_t ms_since(int64_t t0) { return (ftc__now_ns() - t0) / 1000000; }

/* What each rank's creation must fail with: FTC_ERR_CONFIG and a message
 * containing says[rank] (one of two, for a rank that may meet either peer
 * first). */
typedef struct refusal {
  const char *says[4][2];
} refusal_t;

static int created_anyway(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)comm, (void)n, (void)arg;
  return RANK_FAIL(rank, "the communicator was created although the ranks' settings differ");
}

static int check_refusal(ftc_status_t st, const char *why, int rank, int n, void *arg) {
  (void)n;
  const refusal_t *r = arg;
  if (st != FTC_ERR_CONFIG)
    return RANK_FAIL(rank, "creation failed with %s, not a configuration error: %s",
                     ftc_strerror(st), why);
  for (int i = 0; i < 2 && r->says[rank][i]; i++)
    if (strstr(why, r->says[rank][i])) return 0;
  return RANK_FAIL(rank, "the error \"%s\" does not say \"%s\"", why, r->says[rank][0]);
}

/* Run n ranks with the per-rank settings in opts; every rank must be
 * refused as `expect` says, well before the connect timeout (20 s). */
static void expect_refused(int n, harness_opts_t *opts, const refusal_t *expect) {
  opts->connect_timeout_ms = 20000;
  opts->time_limit_s = 60;
  opts->create_failed = check_refusal;
  int64_t t0 = ftc__now_ns();
  assert_int_equal(harness_run(n, created_anyway, (void *)expect, opts), 0);
  int64_t took = ms_since(t0);
  if (took >= 10000) fail_msg("the refusal took %lld ms: it waited for a timeout", (long long)took);
}

static void ranks_with_different_allreduce_algorithms_are_refused_at_creation(void **state) {
  (void)state;
  harness_opts_t o = {.rank_env = {[1] = {"FTCOMM_ALLREDUCE_ALGO=ring"}}};
  refusal_t r = {.says = {
      {"rank 1 has FTCOMM_ALLREDUCE_ALGO=ring, this rank (0) auto: set the same value on every rank"},
      {"rank 0 has FTCOMM_ALLREDUCE_ALGO=auto, this rank (1) ring: set the same value on every rank"},
  }};
  expect_refused(2, &o, &r);
}

static void ranks_with_different_ring_thresholds_are_refused_at_creation(void **state) {
  (void)state;
  harness_opts_t o = {.rank_env = {[1] = {"FTCOMM_RING_THRESHOLD=2048"}}};
  refusal_t r = {.says = {
      {"rank 1 has FTCOMM_RING_THRESHOLD=2048, this rank (0) 262144"},
      {"rank 0 has FTCOMM_RING_THRESHOLD=262144, this rank (1) 2048"},
  }};
  expect_refused(2, &o, &r);
}

static void ranks_with_different_halving_limits_are_refused_at_creation(void **state) {
  (void)state;
  harness_opts_t o = {.rank_env = {[0] = {"FTCOMM_HALVING_MAX=0"}}};
  refusal_t r = {.says = {
      {"rank 1 has FTCOMM_HALVING_MAX=16777216, this rank (0) 0"},
      {"rank 0 has FTCOMM_HALVING_MAX=0, this rank (1) 16777216"},
  }};
  expect_refused(2, &o, &r);
}

static void ranks_with_different_socket_counts_are_refused_at_creation(void **state) {
  (void)state;
  harness_opts_t o = {.rank_env = {[1] = {"FTCOMM_TCP_SOCKETS=1"}}};
  refusal_t r = {.says = {
      {"rank 1 has FTCOMM_TCP_SOCKETS=1, this rank (0) 2"},
      {"rank 0 has FTCOMM_TCP_SOCKETS=2, this rank (1) 1"},
  }};
  expect_refused(2, &o, &r);
}

/* The middle rank of three differs in two settings: it accepts rank 2 and
 * connects to rank 0, and every rank is refused, naming both settings. */
static void one_rank_of_three_that_differs_fails_every_rank(void **state) {
  (void)state;
  harness_opts_t o = {
      .rank_env = {[1] = {"FTCOMM_RING_THRESHOLD=4096", "FTCOMM_ALLREDUCE_ALGO=Halving"}}};
  refusal_t r = {.says = {
      {"rank 1 has FTCOMM_RING_THRESHOLD=4096 and FTCOMM_ALLREDUCE_ALGO=halving, this rank (0) "
       "262144 and auto: set the same values on every rank"},
      {"rank 0 has FTCOMM_RING_THRESHOLD=262144 and FTCOMM_ALLREDUCE_ALGO=auto, this rank (1) 4096 "
       "and halving",
       "rank 2 has FTCOMM_RING_THRESHOLD=262144 and FTCOMM_ALLREDUCE_ALGO=auto, this rank (1) 4096 "
       "and halving"},
      {"rank 1 has FTCOMM_RING_THRESHOLD=4096 and FTCOMM_ALLREDUCE_ALGO=halving, this rank (2) "
       "262144 and auto"},
  }};
  expect_refused(3, &o, &r);
}

/* The same settings written differently are the same: the case of an
 * algorithm's name, a default written out. */
static int allreduce_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  enum { C = 300000 }; /* 1.2 MB: halving and the ring, several chunks of every size below */
  static float x[C];
  for (size_t count = 1; count <= C; count *= 7) {
    for (size_t i = 0; i < count; i++) x[i] = (float)(rank + 1) * (float)(i % 97);
    ftc_status_t st = ftc_allreduce(x, x, count, FTC_F32, FTC_SUM, comm, 20000);
    if (st != FTC_OK) return RANK_FAIL(rank, "allreduce of %zu: %s", count, ftc_last_error());
    float k = (float)(n * (n + 1) / 2);
    for (size_t i = 0; i < count; i++)
      if (x[i] != k * (float)(i % 97))
        return RANK_FAIL(rank, "allreduce of %zu: element %zu is %g, not %g", count, i, x[i],
                         k * (float)(i % 97));
    float b[64];
    for (int i = 0; i < 64; i++) b[i] = rank == 1 ? (float)i : -1.0f;
    if ((st = ftc_broadcast(b, 64, FTC_F32, 1, comm, 20000)) != FTC_OK)
      return RANK_FAIL(rank, "broadcast: %s", ftc_last_error());
    for (int i = 0; i < 64; i++)
      if (b[i] != (float)i) return RANK_FAIL(rank, "broadcast: element %d is %g", i, b[i]);
  }
  return 0;
}

static void the_same_settings_written_differently_are_accepted(void **state) {
  (void)state;
  harness_opts_t o = {.rank_env = {[0] = {"FTCOMM_ALLREDUCE_ALGO=RING", "FTCOMM_RING_THRESHOLD=262144"},
                                   [1] = {"FTCOMM_ALLREDUCE_ALGO=ring"},
                                   [2] = {"FTCOMM_ALLREDUCE_ALGO=Ring", "FTCOMM_TCP_SOCKETS=2"}}};
  assert_int_equal(harness_run(3, allreduce_body, NULL, &o), 0);
}

/* The chunk size, the spin and the socket buffers change how a rank moves
 * its bytes, not which: ranks that differ in them still agree, whichever
 * algorithm runs. */
static void chunk_spin_and_buffer_sizes_may_differ(void **state) {
  (void)state;
  harness_opts_t o = {.env = {"FTCOMM_RING_THRESHOLD=65536", "FTCOMM_HALVING_MAX=524288"},
                      .rank_env = {[0] = {"FTCOMM_CHUNK_BYTES=4096", "FTCOMM_SPIN_US=0"},
                                   [1] = {"FTCOMM_CHUNK_BYTES=1048576", "FTCOMM_SOCKET_BUFFER=0"},
                                   [2] = {"FTCOMM_CHUNK_BYTES=65536", "FTCOMM_SPIN_US=1000"}}};
  assert_int_equal(harness_run(3, allreduce_body, NULL, &o), 0);
}

/* ---- the acceptor's side, with this test playing the connector ---- */

typedef struct creator {
  ftc__view_t *view;
  int fd;
  ftc_comm_t *comm;
  ftc_status_t st;
  char why[512];
} creator_t;

static void *create_thread(void *arg) {
  creator_t *c = arg;
  ftc_config_t cfg;
  harness_config(&cfg, 2000, 20000);
  c->st = ftc__comm_create_from_view(&cfg, c->view, c->fd, &c->comm);
  snprintf(c->why, sizeof(c->why), "%s", ftc_last_error());
  return NULL;
}

static int dial(const char *addr) {
  int fd = harness_dial(addr, 5);
  assert_true(fd >= 0);
  return fd;
}

/* Rank 0 of a 2-rank view runs in a thread, creating its communicator;
 * this test says rank 1's hello with a smaller FTCOMM_RING_THRESHOLD. Rank
 * 0 answers MISMATCH with its own settings, closes, and its creation fails
 * at once with FTC_ERR_CONFIG saying what to set. */
static void the_acceptor_answers_a_member_that_differs_with_its_settings_and_fails(void **state) {
  (void)state;
  int fds[2];
  creator_t c = {.view = harness_view(2, 0, 7, fds)};
  c.fd = fds[0];
  close(fds[1]);
  pthread_t t;
  int64_t t0 = ftc__now_ns();
  pthread_create(&t, NULL, create_thread, &c);
  ftc__tcp_hello_t h, ours;
  harness_hello(&h, FTC__TCP_HELLO_UP, 7, 1001, 1, 2);
  ours = h;
  h.wire.ring_threshold = 2048;
  int fd = dial(c.view->members[0].addr);
  uint8_t nonce[FTC__TCP_NONCE_SIZE], msg[FTC__TCP_HELLO_SIZE];
  assert_int_equal(harness_read_full(fd, nonce, sizeof(nonce)), 0);
  ftc__tcp_hello_encode(msg, &h, HARNESS_TOKEN, nonce);
  assert_int_equal(send(fd, msg, sizeof(msg), 0), (ssize_t)sizeof(msg));
  assert_int_equal(harness_read_full(fd, msg, sizeof(msg)), 0);
  ftc__tcp_hello_t ans;
  assert_int_equal(ftc__tcp_hello_decode(msg, &ans, HARNESS_TOKEN, nonce), 0);
  assert_int_equal(ans.kind, FTC__TCP_MISMATCH);
  assert_int_equal(ans.rank, 0);
  assert_true(ans.member_id == 1000 && ans.epoch == 7);
  /* field by field: the struct has padding */
  assert_true(ans.wire.ring_threshold == ours.wire.ring_threshold && ans.wire.halving_max == ours.wire.halving_max);
  assert_true(ans.wire.algo == ours.wire.algo && ans.wire.sockets == ours.wire.sockets && ans.wire.ncpu == ours.wire.ncpu);
  char b;
  assert_int_equal(recv(fd, &b, 1, 0), 0); /* then closed */
  close(fd);
  pthread_join(t, NULL);
  assert_int_equal(c.st, FTC_ERR_CONFIG);
  assert_null(c.comm);
  if (!strstr(c.why, "rank 1 has FTCOMM_RING_THRESHOLD=2048, this rank (0) 262144: set the same "
                     "value on every rank"))
    fail_msg("the error says \"%s\"", c.why);
  assert_true(ms_since(t0) < 10000);
  harness_view_free(c.view);
}

/* A rank that is already running (it had an epoch before) does not fail
 * for a new member that differs: it refuses it, which fails the newcomer's
 * creation, and keeps waiting for the member the view names; the reason is
 * in its timeout message. */
typedef struct connector {
  ftc__tcp_cfg_t cfg;
  ftc__view_t *view;
  int fd;
  ftc__tcp_t *prev, *tp;
  ftc_status_t st;
  char why[512];
} connector_t;

static void *connect_thread(void *arg) {
  connector_t *c = arg;
  c->st = ftc__tcp_connect(&c->cfg, c->view, c->fd, c->prev, &c->tp);
  snprintf(c->why, sizeof(c->why), "%s", ftc_last_error());
  return NULL;
}

static void a_running_rank_refuses_a_new_member_that_differs_and_keeps_waiting(void **state) {
  (void)state;
  int fds[2], solo_fd;
  connector_t c = {0};
  assert_int_equal(ftc__tcp_cfg_from_env(&c.cfg), FTC_OK);
  c.cfg.token = HARNESS_TOKEN;
  c.cfg.connect_timeout_ms = 1500;
  ftc__view_t *solo = harness_view(1, 0, 1, &solo_fd);
  assert_int_equal(ftc__tcp_connect(&c.cfg, solo, solo_fd, NULL, &c.prev), FTC_OK); /* epoch 1 */
  c.view = harness_view(2, 0, 2, fds);
  c.fd = fds[0];
  close(fds[1]);
  pthread_t t;
  pthread_create(&t, NULL, connect_thread, &c);
  ftc__tcp_hello_t h;
  harness_hello(&h, FTC__TCP_HELLO_UP, 2, 1001, 1, 2);
  h.wire.algo = FTC_ALGO_DOUBLING;
  int fd = dial(c.view->members[0].addr);
  uint8_t nonce[FTC__TCP_NONCE_SIZE], msg[FTC__TCP_HELLO_SIZE];
  assert_int_equal(harness_read_full(fd, nonce, sizeof(nonce)), 0);
  ftc__tcp_hello_encode(msg, &h, HARNESS_TOKEN, nonce);
  assert_int_equal(send(fd, msg, sizeof(msg), 0), (ssize_t)sizeof(msg));
  assert_int_equal(harness_read_full(fd, msg, sizeof(msg)), 0);
  ftc__tcp_hello_t ans;
  assert_int_equal(ftc__tcp_hello_decode(msg, &ans, HARNESS_TOKEN, nonce), 0);
  assert_int_equal(ans.kind, FTC__TCP_MISMATCH);
  close(fd);
  pthread_join(t, NULL);
  assert_int_equal(c.st, FTC_ERR_TIMEOUT);
  if (!strstr(c.why, "rank 1 has FTCOMM_ALLREDUCE_ALGO=doubling, this rank (0) auto"))
    fail_msg("the timeout does not say why rank 1 was refused: \"%s\"", c.why);
  ftc__tcp_destroy(c.prev);
  close(fds[0]);
  close(solo_fd);
  harness_view_free(c.view);
  harness_view_free(solo);
}

/* The automatic choice of flat for small allreduces depends only on the
 * view, which every rank shares, and the host's CPUs, which are the same
 * for every rank when the view says they share one host. */
static void ftc__tcp_crowded_needs_one_host_and_2_ranks_per_cpu(void **state) {
  (void)state;
  ftc__view_t *v = harness_view(8, 0, 1, NULL);
  for (int r = 0; r < 8; r++) snprintf(v->members[r].addr, sizeof(v->members[r].addr), "10.0.0.7:%d", 4000 + r);
  assert_true(ftc__tcp_crowded(v, 1));
  assert_true(ftc__tcp_crowded(v, 2));
  assert_true(ftc__tcp_crowded(v, 4)); /* 2 ranks per CPU */
  assert_false(ftc__tcp_crowded(v, 5)); /* fewer: some ranks have a core of their own */
  assert_false(ftc__tcp_crowded(v, 8));
  assert_false(ftc__tcp_crowded(v, 64));
  assert_false(ftc__tcp_crowded(v, 0)); /* unknown CPU count: recursive doubling */
  snprintf(v->members[5].addr, sizeof(v->members[5].addr), "10.0.0.70:4005"); /* two hosts */
  assert_false(ftc__tcp_crowded(v, 2));
  snprintf(v->members[5].addr, sizeof(v->members[5].addr), "10.0.0.7:9"); /* a short port */
  assert_true(ftc__tcp_crowded(v, 2));
  for (int r = 0; r < 8; r++) snprintf(v->members[r].addr, sizeof(v->members[r].addr), "[fd00::1]:%d", 5000 + r);
  assert_true(ftc__tcp_crowded(v, 4));
  snprintf(v->members[3].addr, sizeof(v->members[3].addr), "[fd00::12]:5003");
  assert_false(ftc__tcp_crowded(v, 4));
  v->size = 2; /* 2 ranks on one CPU: [fd00::1] both */
  assert_true(ftc__tcp_crowded(v, 1));
  assert_false(ftc__tcp_crowded(v, 2));
  v->size = 1; /* a world of one has nothing to reduce */
  assert_false(ftc__tcp_crowded(v, 0));
  harness_view_free(v);
}

static void ranks_with_flat_and_auto_are_refused_at_creation(void **state) {
  (void)state;
  harness_opts_t o = {.rank_env = {[0] = {"FTCOMM_ALLREDUCE_ALGO=FLAT"}}};
  refusal_t r = {.says = {
      {"rank 1 has FTCOMM_ALLREDUCE_ALGO=auto, this rank (0) flat: set the same value on every rank"},
      {"rank 0 has FTCOMM_ALLREDUCE_ALGO=flat, this rank (1) auto: set the same value on every rank"},
  }};
  expect_refused(2, &o, &r);
}

/* Same settings, but the two ranks of one host count different CPUs (as
 * containers with their own view of /sys can): under auto one would reduce
 * an 8-byte allreduce flat and the other by recursive doubling (here: 2
 * ranks, 1 CPU crowded, 64 not), with wrong sums or a hang; they are
 * refused, naming both counts. */
static void ranks_counting_different_cpus_are_refused_at_creation(void **state) {
  (void)state;
  harness_opts_t o = {.rank_env = {[0] = {"FTCOMM_HOST_CPUS=1"}, [1] = {"FTCOMM_HOST_CPUS=64"}}};
  refusal_t r = {.says = {
      {"rank 1 counts 64 CPUs on this host, this rank (0) 1: under "
       "FTCOMM_ALLREDUCE_ALGO=auto the ranks of one host must count the same CPUs"},
      {"rank 0 counts 1 CPUs on this host, this rank (1) 64: under "
       "FTCOMM_ALLREDUCE_ALGO=auto the ranks of one host must count the same CPUs"},
  }};
  expect_refused(2, &o, &r);
}

/* The same counts, or a forced algorithm, connect. */
static void ranks_counting_the_same_cpus_or_forcing_the_algorithm_connect(void **state) {
  (void)state;
  harness_opts_t same = {.rank_env = {[0] = {"FTCOMM_HOST_CPUS=1"}, [1] = {"FTCOMM_HOST_CPUS=1"}}};
  assert_int_equal(harness_run(2, allreduce_body, NULL, &same), 0);
  harness_opts_t forced = {.rank_env = {[0] = {"FTCOMM_HOST_CPUS=1", "FTCOMM_ALLREDUCE_ALGO=doubling"},
                                        [1] = {"FTCOMM_HOST_CPUS=64", "FTCOMM_ALLREDUCE_ALGO=doubling"}}};
  assert_int_equal(harness_run(2, allreduce_body, NULL, &forced), 0);
}

/* The ranks that share a rank's host, by advertised address. */
static void ftc__tcp_host_ranks_counts_the_ranks_of_one_host(void **state) {
  (void)state;
  ftc__view_t *v = harness_view(6, 0, 1, NULL);
  const char *hosts[6] = {"10.0.0.7:4000", "10.0.0.7:4001", "10.0.0.8:4002", "10.0.0.70:4003",
                          "[fd00::7]:4004", "10.0.0.7:9"};
  for (int r = 0; r < 6; r++) snprintf(v->members[r].addr, sizeof(v->members[r].addr), "%s", hosts[r]);
  assert_int_equal(ftc__tcp_host_ranks(v, 0), 3);
  assert_int_equal(ftc__tcp_host_ranks(v, 5), 3);
  assert_int_equal(ftc__tcp_host_ranks(v, 2), 1);
  assert_int_equal(ftc__tcp_host_ranks(v, 3), 1); /* 10.0.0.70 is not 10.0.0.7 */
  assert_int_equal(ftc__tcp_host_ranks(v, 4), 1);
  harness_view_free(v);
}

/* FTCOMM_TCP_CONGESTION on the data connections of two ranks of one host
 * (127.0.0.1): auto sets reno while the host has a CPU per 2 ranks
 * (FTCOMM_HOST_CPUS; fewer: the host's default, in the grow case below),
 * system keeps the default always, a name is set as given; every socket
 * of both ranks. */
static void *congestion_rank(void *arg) {
  connector_t *c = arg;
  c->st = ftc__tcp_connect(&c->cfg, c->view, c->fd, NULL, &c->tp);
  snprintf(c->why, sizeof(c->why), "%s", ftc_last_error());
  return NULL;
}

static void expect_congestion(const char *setting, const char *cpus, const char *expect) {
  setenv("FTCOMM_TCP_CONGESTION", setting, 1);
  setenv("FTCOMM_HOST_CPUS", cpus, 1);
  ftc__param_reset();
  int fds[2];
  connector_t c[2] = {0};
  c[0].view = harness_view(2, 0, 1, fds);
  c[1].view = harness_view(2, 1, 1, NULL);
  memcpy(c[1].view->members, c[0].view->members, 2 * sizeof(*c[0].view->members));
  pthread_t t[2];
  for (int r = 0; r < 2; r++) {
    assert_int_equal(ftc__tcp_cfg_from_env(&c[r].cfg), FTC_OK);
    c[r].cfg.token = HARNESS_TOKEN;
    c[r].cfg.connect_timeout_ms = 10000;
    c[r].fd = fds[r];
    pthread_create(&t[r], NULL, congestion_rank, &c[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  for (int r = 0; r < 2; r++) {
    if (c[r].st != FTC_OK) fail_msg("rank %d: %s", r, c[r].why);
    int pfds[4], ranks[4], n = ftc__tcp_peer_fds(c[r].tp, pfds, ranks, 4);
    assert_true(n >= 1);
    for (int i = 0; i < n; i++) {
      char got[32] = {0};
      socklen_t len = sizeof(got) - 1;
      assert_int_equal(getsockopt(pfds[i], IPPROTO_TCP, TCP_CONGESTION, got, &len), 0);
      if (strcmp(got, expect) != 0)
        fail_msg("FTCOMM_TCP_CONGESTION=%s, FTCOMM_HOST_CPUS=%s: rank %d's socket %d to rank %d "
                 "has %s, not %s", setting, cpus, r, i, ranks[i], got, expect);
    }
    ftc__tcp_destroy(c[r].tp);
    close(fds[r]);
    harness_view_free(c[r].view);
  }
  unsetenv("FTCOMM_TCP_CONGESTION");
  unsetenv("FTCOMM_HOST_CPUS");
  ftc__param_reset();
}

static void data_connections_within_one_host_get_ftcomm_tcp_congestion(void **state) {
  (void)state;
  char sys[32] = "?";
  FILE *f = fopen("/proc/sys/net/ipv4/tcp_congestion_control", "r");
  assert_non_null(f);
  assert_non_null(fgets(sys, sizeof(sys), f));
  fclose(f);
  sys[strcspn(sys, "\n")] = 0;
  expect_congestion("auto", "2", "reno");
  expect_congestion("auto", "64", "reno");
  expect_congestion("auto", "1", "reno"); /* 2 ranks, 1 CPU */
  expect_congestion("system", "2", sys);
  expect_congestion("AUTO", "2", "reno"); /* keywords in any case */
  expect_congestion("System", "2", sys);
  expect_congestion("reno", "1", "reno");
  expect_congestion(sys, "2", sys);
}

/* A value that is no congestion control, or one the kernel lacks, fails
 * the configuration with what to set. */
static void a_congestion_control_the_kernel_refuses_is_a_config_error(void **state) {
  (void)state;
  const struct {
    const char *value, *says;
  } bad[] = {
      {"x y", "FTCOMM_TCP_CONGESTION=\"x y\" is not a congestion control; use auto, system or one "
              "of this host's: "},
      {"averyveryverylongname", "is not a congestion control"},
      {"nosuchcc", "FTCOMM_TCP_CONGESTION=nosuchcc: the kernel refused it (not available on this "
                   "host); available: "},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    setenv("FTCOMM_TCP_CONGESTION", bad[i].value, 1);
    ftc__param_reset();
    ftc__tcp_cfg_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    assert_int_equal(ftc__tcp_cfg_from_env(&cfg), FTC_ERR_CONFIG);
    if (!strstr(ftc_last_error(), bad[i].says))
      fail_msg("FTCOMM_TCP_CONGESTION=\"%s\": the error \"%s\" does not say \"%s\"", bad[i].value,
               ftc_last_error(), bad[i].says);
  }
  unsetenv("FTCOMM_TCP_CONGESTION");
  ftc__param_reset();
}

/* FTCOMM_TCP_CONGESTION=auto counts a container's CPU limit, not the
 * node's CPUs: the quota of the process's cgroup and of every parent up to
 * the mount, cgroup v2 (cpu.max) and v1 (cpu.cfs_quota_us / _period_us),
 * rounded up; none ("max", -1, no file) is 0. */
static void put_file(const char *dir, const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", dir, rel);
  for (char *p = path + strlen(dir) + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      mkdir(path, 0755);
      *p = '/';
    }
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void the_cgroup_cpu_quota_bounds_the_cpus_auto_counts(void **state) {
  (void)state;
  char root[] = "/tmp/ftc-cgroup-XXXXXX", proc[600];
  assert_non_null(mkdtemp(root));
  snprintf(proc, sizeof(proc), "%s/proc-cgroup", root);
  /* v2: the pod's 2.5 CPUs above the container's unlimited cgroup: 3 */
  put_file(root, "proc-cgroup", "0::/kubepods/pod1/ctr\n");
  put_file(root, "kubepods/pod1/cpu.max", "250000 100000\n");
  put_file(root, "kubepods/pod1/ctr/cpu.max", "max 100000\n");
  assert_int_equal(ftc__tcp_cgroup_cpus(root, proc), 3);
  /* the smaller of two: the container's 1 */
  put_file(root, "kubepods/pod1/ctr/cpu.max", "100000 100000\n");
  assert_int_equal(ftc__tcp_cgroup_cpus(root, proc), 1);
  /* in a container the mount's root is its own cgroup; the path names the host's */
  put_file(root, "proc-cgroup", "0::/docker/abc\n");
  put_file(root, "cpu.max", "200000 100000\n");
  assert_int_equal(ftc__tcp_cgroup_cpus(root, proc), 2);
  /* v1 with cpu,cpuacct mounted together; no quota (-1) in the leaf */
  put_file(root, "proc-cgroup", "4:memory:/x\n3:cpu,cpuacct:/job/r0\n1:name=systemd:/\n");
  put_file(root, "cpu,cpuacct/job/cpu.cfs_quota_us", "400000\n");
  put_file(root, "cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
  put_file(root, "cpu,cpuacct/job/r0/cpu.cfs_quota_us", "-1\n");
  put_file(root, "cpu,cpuacct/job/r0/cpu.cfs_period_us", "100000\n");
  assert_int_equal(ftc__tcp_cgroup_cpus(root, proc), 4);
  /* no limit anywhere, or no file to read */
  put_file(root, "cpu,cpuacct/job/cpu.cfs_quota_us", "-1\n");
  assert_int_equal(ftc__tcp_cgroup_cpus(root, proc), 0);
  put_file(root, "proc-cgroup", "0::/\n");
  put_file(root, "cpu.max", "max 100000\n");
  assert_int_equal(ftc__tcp_cgroup_cpus(root, proc), 0);
  assert_int_equal(ftc__tcp_cgroup_cpus(root, "/nonexistent/cgroup"), 0);
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  assert_int_equal(system(cmd), 0);
  /* FTCOMM_HOST_CPUS, when set, is what auto counts */
  ftc__tcp_cfg_t cfg = {.host_cpus = 5};
  assert_int_equal(ftc__tcp_usable_cpus(&cfg), 5);
  cfg.host_cpus = 0;
  assert_true(ftc__tcp_usable_cpus(&cfg) >= 1 && ftc__tcp_usable_cpus(&cfg) <= ftc__tcp_ncpu(&cfg));
}

/* The flat allreduce's crowded decision counts the CPUs as
 * FTCOMM_TCP_CONGESTION=auto does, within the cgroup's CPU quota: 2 ranks
 * of one host in a container limited to 1 CPU of a bigger host crowd it,
 * on both ranks, and their hellos carry that count (ranks of one host
 * compare it). */
static void the_cpu_quota_bounds_the_cpus_the_crowded_decision_counts(void **state) {
  (void)state;
  ftc__tcp_cfg_t cfg = {.os_cpus = 64, .cpu_quota = 2};
  ftc__tcp_wire_t w;
  ftc__tcp_wire_of(&cfg, &w);
  assert_int_equal(w.ncpu, 2);
  cfg.host_cpus = 8; /* FTCOMM_HOST_CPUS still decides alone */
  ftc__tcp_wire_of(&cfg, &w);
  assert_int_equal(w.ncpu, 8);
  cfg.host_cpus = 0, cfg.cpu_quota = 0; /* no quota: the online CPUs */
  ftc__tcp_wire_of(&cfg, &w);
  assert_int_equal(w.ncpu, 64);

  unsetenv("FTCOMM_HOST_CPUS");
  unsetenv("FTCOMM_ALLREDUCE_ALGO");
  ftc__param_reset();
  int fds[2];
  connector_t c[2];
  memset(c, 0, sizeof(c));
  c[0].view = harness_view(2, 0, 1, fds);
  c[1].view = harness_view(2, 1, 1, NULL);
  memcpy(c[1].view->members, c[0].view->members, 2 * sizeof(*c[0].view->members));
  pthread_t t[2];
  for (int r = 0; r < 2; r++) {
    assert_int_equal(ftc__tcp_cfg_from_env(&c[r].cfg), FTC_OK);
    c[r].cfg.token = HARNESS_TOKEN;
    c[r].cfg.connect_timeout_ms = 10000;
    c[r].cfg.cpu_quota = 1;
    c[r].fd = fds[r];
    pthread_create(&t[r], NULL, connect_thread, &c[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  for (int r = 0; r < 2; r++) {
    if (c[r].st != FTC_OK) fail_msg("rank %d: %s", r, c[r].why);
    if (!c[r].tp->crowded)
      fail_msg("rank %d: 2 ranks within a quota of 1 CPU (%ld online) are not crowded", r,
               ftc__tcp_ncpu(&c[r].tp->cfg));
    ftc__tcp_destroy(c[r].tp);
    close(fds[r]);
    harness_view_free(c[r].view);
  }
}

/* A spare connection adopted by a later epoch gets that epoch's choice:
 * two ranks of one host with 1 CPU (reno), then a third joins (3 ranks,
 * 1 CPU: the system's default); the survivors' adopted connection goes
 * back to the default, as the joiner's new ones have it. */
typedef struct grow_rank {
  connector_t c;
  int listen_fd;
  ftc__view_t *next;
  ftc__tcp_t *tp2;
  ftc_status_t st2;
} grow_rank_t;

static void *grow_rank_main(void *arg) {
  grow_rank_t *g = arg;
  g->c.st = ftc__tcp_connect(&g->c.cfg, g->c.view, g->listen_fd, NULL, &g->c.tp);
  if (g->c.st != FTC_OK) return NULL;
  struct pollfd pfd[16];
  for (int i = 0; i < 500 && ftc__tcp_spare_count(g->c.tp) < 1; i++) {
    int n = ftc__tcp_spare_poll(g->c.tp, g->listen_fd, 1, pfd, 16);
    poll(pfd, (nfds_t)n, 10);
    ftc__tcp_spare_events(g->c.tp, g->listen_fd, pfd, n);
  }
  g->st2 = ftc__tcp_connect(&g->c.cfg, g->next, g->listen_fd, g->c.tp, &g->tp2);
  snprintf(g->c.why, sizeof(g->c.why), "%s", ftc_last_error());
  return NULL;
}

static void *joiner_main(void *arg) {
  grow_rank_t *g = arg;
  g->st2 = ftc__tcp_connect(&g->c.cfg, g->next, g->listen_fd, NULL, &g->tp2);
  snprintf(g->c.why, sizeof(g->c.why), "%s", ftc_last_error());
  return NULL;
}

static void an_adopted_connection_gets_the_new_epochs_congestion_control(void **state) {
  (void)state;
  char sys[32] = "?";
  FILE *f = fopen("/proc/sys/net/ipv4/tcp_congestion_control", "r");
  assert_non_null(f);
  assert_non_null(fgets(sys, sizeof(sys), f));
  fclose(f);
  sys[strcspn(sys, "\n")] = 0;
  if (!strcmp(sys, "reno")) skip(); /* nothing to tell apart */
  setenv("FTCOMM_HOST_CPUS", "1", 1);
  ftc__param_reset();
  int fds[3];
  grow_rank_t g[3];
  memset(g, 0, sizeof(g));
  ftc__view_t *v3 = harness_view(3, 0, 2, fds);
  for (int r = 0; r < 3; r++) {
    assert_int_equal(ftc__tcp_cfg_from_env(&g[r].c.cfg), FTC_OK);
    g[r].c.cfg.token = HARNESS_TOKEN;
    g[r].c.cfg.connect_timeout_ms = 10000;
    g[r].listen_fd = fds[r];
    g[r].next = harness_view(3, r, 2, NULL);
    memcpy(g[r].next->members, v3->members, 3 * sizeof(*v3->members));
    g[r].next->members[2].joined_epoch = 2;
    if (r < 2) {
      g[r].c.view = harness_view(2, r, 1, NULL);
      memcpy(g[r].c.view->members, v3->members, 2 * sizeof(*v3->members));
    }
  }
  pthread_t t[3];
  for (int r = 0; r < 2; r++) pthread_create(&t[r], NULL, grow_rank_main, &g[r]);
  pthread_create(&t[2], NULL, joiner_main, &g[2]);
  for (int r = 0; r < 3; r++) pthread_join(t[r], NULL);
  for (int r = 0; r < 3; r++) {
    if (r < 2 && g[r].c.st != FTC_OK) fail_msg("rank %d, epoch 1: %s", r, g[r].c.why);
    if (g[r].st2 != FTC_OK) fail_msg("rank %d, epoch 2: %s", r, g[r].c.why);
  }
  assert_true(ftc__tcp_adopted(g[0].tp2) + ftc__tcp_adopted(g[1].tp2) >= 1);
  /* The adopted pair is settled by its first use (lazy adoption): here, as
   * a run would, by each end in turn (the first try sends rank 0's ADOPT
   * and finds rank 1's not there yet). */
  for (int i = 0; i < 3; i++)
    for (int r = 0; r < 2; r++) {
      ftc_status_t st = ftc__tcp_settle(g[r].tp2, 1 - r, i < 2 ? 0 : ftc__deadline_ns(5000));
      if (i == 2 && st != FTC_OK) fail_msg("rank %d: settling its pair: %s", r, ftc_last_error());
    }
  for (int r = 0; r < 3; r++) {
    int pfds[8], ranks[8], n = ftc__tcp_peer_fds(g[r].tp2, pfds, ranks, 8);
    assert_true(n >= 2);
    for (int i = 0; i < n; i++) {
      char got[32] = {0};
      socklen_t len = sizeof(got) - 1;
      assert_int_equal(getsockopt(pfds[i], IPPROTO_TCP, TCP_CONGESTION, got, &len), 0);
      if (strcmp(got, sys) != 0)
        fail_msg("3 ranks on 2 CPUs: rank %d's socket %d to rank %d has %s, not %s", r, i,
                 ranks[i], got, sys);
    }
  }
  for (int r = 0; r < 3; r++) {
    ftc__tcp_destroy(g[r].tp2);
    ftc__tcp_destroy(g[r].c.tp);
    close(fds[r]);
    harness_view_free(g[r].c.view);
    harness_view_free(g[r].next);
  }
  harness_view_free(v3);
  unsetenv("FTCOMM_HOST_CPUS");
  ftc__param_reset();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ranks_counting_different_cpus_are_refused_at_creation),
      cmocka_unit_test(ranks_counting_the_same_cpus_or_forcing_the_algorithm_connect),
      cmocka_unit_test(ranks_with_different_allreduce_algorithms_are_refused_at_creation),
      cmocka_unit_test(ranks_with_flat_and_auto_are_refused_at_creation),
      cmocka_unit_test(ftc__tcp_crowded_needs_one_host_and_2_ranks_per_cpu),
      cmocka_unit_test(ranks_with_different_ring_thresholds_are_refused_at_creation),
      cmocka_unit_test(ranks_with_different_halving_limits_are_refused_at_creation),
      cmocka_unit_test(ranks_with_different_socket_counts_are_refused_at_creation),
      cmocka_unit_test(one_rank_of_three_that_differs_fails_every_rank),
      cmocka_unit_test(the_same_settings_written_differently_are_accepted),
      cmocka_unit_test(chunk_spin_and_buffer_sizes_may_differ),
      cmocka_unit_test(the_acceptor_answers_a_member_that_differs_with_its_settings_and_fails),
      cmocka_unit_test(a_running_rank_refuses_a_new_member_that_differs_and_keeps_waiting),
      cmocka_unit_test(ftc__tcp_host_ranks_counts_the_ranks_of_one_host),
      cmocka_unit_test(data_connections_within_one_host_get_ftcomm_tcp_congestion),
      cmocka_unit_test(a_congestion_control_the_kernel_refuses_is_a_config_error),
      cmocka_unit_test(the_cgroup_cpu_quota_bounds_the_cpus_auto_counts),
      cmocka_unit_test(the_cpu_quota_bounds_the_cpus_the_crowded_decision_counts),
      cmocka_unit_test(an_adopted_connection_gets_the_new_epochs_congestion_control),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
