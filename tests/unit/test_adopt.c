/*
 * test_adopt.c - the next epoch's adoption of spare connections
 * (ftc__tcp_connect with prev): a pair whose two ranks move to the same
 * epoch takes its spares with one ADOPT each way, on the shared socket, and
 * every socket of the pair then carries only the new epoch's bytes. A pair
 * whose ranks took their spares for different epochs, or where one rank
 * closed its spares or lacks one of them, uses none of them and connects
 * anew; nothing sent for another epoch is ever read as data. A planned
 * move to the very next epoch keeps the pair's connections instead. Two
 * ranks run as threads of this process, each with its own listener.
 */
#include <errno.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "ftc_param.h"
#include "ftc_time.h"
#include "harness.h"
#include "tcp/tcp_int.h"

/* One rank of the pair, through its epochs. */
typedef struct rank {
  int r;
  int listen_fd;
  ftc__tcp_cfg_t cfg;
  ftc__view_t *view[4]; /* by epoch (1..3), NULL: not used */
  ftc__tcp_t *tp1;      /* epoch 1, with its spares */
  ftc__tcp_t *tp;       /* the epoch it moved to last */
  ftc_status_t st;      /* of that move */
  ftc_status_t st_move[2];
  char why[512];
  /* the moves after epoch 1: epochs to connect in turn, each with tp1 as prev
   * (timeout_ms each, 0: the configured one) unless prev_none */
  uint64_t moves[2];
  int timeout_ms[2];
  int prev_none;        /* close epoch 1 (its spares) and connect without prev */
  int drop_spare_lane;  /* 0: none; 1 + lane: close epoch 1's spare on that lane first */
  int spare_built;
  int live1[2];         /* epoch 1's connection to the peer (fd, sfd) before the moves */
  int shut_during_ms;   /* > 0: another thread shuts epoch 1 this long after the first move
                         * began (an abort or a loud failure meanwhile) */
  int chain;            /* each move after the first goes from the one before (not tp1), as
                         * planned (a step boundary's) */
  int unsettled;        /* no settle after a move: the pair stays as the move left it */
  int run_sum;          /* after the moves, a 2-rank allreduce (sum) on the pair */
  int64_t sum[4];
  int unconfirmed_after_move; /* the pair was unconfirmed when the last move returned */
  int after_peer;       /* start the moves (and prev_none's close) once the peer's first move
                         * returned */
  int run_given_back;   /* chain: when the last move failed, run the sum on the epoch
                         * before it (what the move gave the pair back to) */
  int given_back_unconfirmed; /* the pair was unconfirmed there */
  int moved;            /* atomic: this rank's first move returned */
  struct rank *peer;
  pthread_barrier_t *built; /* both ranks have their spares before either moves */
} rank_t;

/* A 2-rank sum of 4 values (rank + 1 each) on the pair, as a run of the
 * epoch (its first use of the pair). */
static ftc_status_t run_sum(rank_t *k) {
  int64_t in[4];
  for (int i = 0; i < 4; i++) in[i] = k->r + 1 + i;
  ftc__op_t op = {.coll = FTC__COLL_ALLREDUCE, .sendbuf = in, .recvbuf = k->sum, .count = 4,
                  .dtype = FTC_I64, .op = FTC_SUM, .peer = -1, .algo = FTC_ALGO_AUTO};
  return ftc__tcp_run(k->tp, &op, ftc__deadline_ns(10000));
}

static void *shut_later(void *arg) {
  rank_t *k = arg;
  struct timespec ts = {0, (long)k->shut_during_ms * 1000000L};
  nanosleep(&ts, NULL);
  ftc__tcp_shutdown(k->tp1);
  return NULL;
}

static void *rank_main(void *arg) {
  rank_t *k = arg;
  k->st = ftc__tcp_connect(&k->cfg, k->view[1], k->listen_fd, NULL, &k->tp1);
  if (k->st != FTC_OK) {
    snprintf(k->why, sizeof(k->why), "epoch 1: %s", ftc_last_error());
    pthread_barrier_wait(k->built);
    return NULL;
  }
  struct pollfd pfd[16];
  for (int i = 0; i < 500 && ftc__tcp_spare_count(k->tp1) < 1; i++) {
    int n = ftc__tcp_spare_poll(k->tp1, k->listen_fd, 1, pfd, 16);
    poll(pfd, (nfds_t)n, 10);
    ftc__tcp_spare_events(k->tp1, k->listen_fd, pfd, n);
  }
  k->spare_built = ftc__tcp_spare_count(k->tp1) == 1;
  pthread_barrier_wait(k->built);
  if (!k->spare_built) return NULL;
  ftc__tcp_peer_t *peer = &k->tp1->peers[1 - k->r];
  k->live1[0] = peer->fd;
  k->live1[1] = peer->sfd;
  if (k->drop_spare_lane) {
    int *slot = k->drop_spare_lane == 1 ? &peer->spare_sfd : &peer->spare_fd;
    close(*slot);
    *slot = -1;
  }
  while (k->after_peer && !__atomic_load_n(&k->peer->moved, __ATOMIC_ACQUIRE)) usleep(1000);
  if (k->prev_none) {
    ftc__tcp_destroy(k->tp1);
    k->tp1 = NULL;
  }
  pthread_t shutter;
  if (k->shut_during_ms > 0) pthread_create(&shutter, NULL, shut_later, k);
  ftc__tcp_t *before = NULL;
  for (int m = 0; m < 2 && k->moves[m]; m++) {
    ftc__tcp_cfg_t cfg = k->cfg;
    if (k->timeout_ms[m]) cfg.connect_timeout_ms = k->timeout_ms[m];
    if (k->chain && m > 0) cfg.planned_move = 1;
    if (k->chain) {
      ftc__tcp_destroy(before);
      before = k->tp;
    } else {
      ftc__tcp_destroy(k->tp);
    }
    k->tp = NULL;
    k->st = k->st_move[m] = ftc__tcp_connect(&cfg, k->view[k->moves[m]], k->listen_fd,
                                             before ? before : k->tp1, &k->tp);
    __atomic_store_n(&k->moved, 1, __ATOMIC_RELEASE);
    if (k->st == FTC_OK) k->unconfirmed_after_move = ftc__tcp_unconfirmed(k->tp, 1 - k->r);
    /* The adoption is lazy: the pair is settled (the peer's ADOPT read, or
     * the pair connected anew) by its first use, as a run would. */
    if (k->st == FTC_OK && !k->unsettled)
      k->st = k->st_move[m] =
          ftc__tcp_settle(k->tp, 1 - k->r, ftc__deadline_ns(cfg.connect_timeout_ms));
    snprintf(k->why, sizeof(k->why), "epoch %llu: %s", (unsigned long long)k->moves[m],
             ftc_last_error());
  }
  if (k->run_given_back && k->st != FTC_OK && before) {
    ftc__tcp_destroy(k->tp);
    k->tp = before;
    before = NULL;
    k->given_back_unconfirmed = ftc__tcp_unconfirmed(k->tp, 1 - k->r);
    k->st = FTC_OK;
  }
  /* Both ranks are done with the failed move before either runs: a run's
   * ADOPT would be answered (and the pair confirmed) by a bootstrap still
   * under way at the other. */
  if (k->run_given_back) pthread_barrier_wait(k->built);
  ftc__tcp_destroy(before);
  if (k->st == FTC_OK && k->run_sum) {
    k->st = run_sum(k);
    snprintf(k->why, sizeof(k->why), "the run after the moves: %s", ftc_last_error());
  }
  if (k->shut_during_ms > 0) pthread_join(shutter, NULL);
  return NULL;
}

/* Two ranks with views of epochs 1 to 3 (the same members). */
static void pair_init(rank_t k[2], pthread_barrier_t *built) {
  int fds[2];
  memset(k, 0, 2 * sizeof(*k));
  ftc__view_t *v = harness_view(2, 0, 1, fds);
  for (int r = 0; r < 2; r++) {
    k[r].r = r;
    k[r].listen_fd = fds[r];
    k[r].built = built;
    k[r].peer = &k[1 - r];
    assert_int_equal(ftc__tcp_cfg_from_env(&k[r].cfg), FTC_OK);
    k[r].cfg.token = HARNESS_TOKEN;
    k[r].cfg.connect_timeout_ms = 10000;
    for (uint64_t e = 1; e <= 3; e++) {
      k[r].view[e] = harness_view(2, r, e, NULL);
      memcpy(k[r].view[e]->members, v->members, 2 * sizeof(*v->members));
    }
  }
  harness_view_free(v);
  pthread_barrier_init(built, NULL, 2);
}

static void pair_run(rank_t k[2]) {
  pthread_t t[2];
  for (int r = 0; r < 2; r++) pthread_create(&t[r], NULL, rank_main, &k[r]);
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  for (int r = 0; r < 2; r++)
    if (!k[r].spare_built) fail_msg("rank %d made no spare connections in 5 s (%s)", r, k[r].why);
}

static void pair_free(rank_t k[2], pthread_barrier_t *built) {
  for (int r = 0; r < 2; r++) {
    ftc__tcp_destroy(k[r].tp);
    ftc__tcp_destroy(k[r].tp1);
    close(k[r].listen_fd);
    for (int e = 1; e <= 3; e++) harness_view_free(k[r].view[e]);
  }
  pthread_barrier_destroy(built);
}

/* Bytes written on `from`'s socket fd arrive on the peer's socket `to`, and
 * nothing else is waiting there (no ADOPT or byte of another epoch). */
static void expect_clean(int from, int to, const char *what) {
  uint8_t msg[8] = {'e', 'p', 'o', 'c', 'h', 0, 0, 0}, got[8] = {0};
  memcpy(msg + 5, what, 3);
  assert_int_equal(send(from, msg, sizeof(msg), MSG_NOSIGNAL), (ssize_t)sizeof(msg));
  struct pollfd p = {to, POLLIN, 0};
  assert_int_equal(poll(&p, 1, 5000), 1);
  ssize_t n = recv(to, got, sizeof(got), MSG_WAITALL);
  if (n != (ssize_t)sizeof(got) || memcmp(got, msg, sizeof(msg)) != 0)
    fail_msg("%s: read %zd bytes that are not what was sent (a stale message read as data?)",
             what, n);
  char extra;
  if (recv(to, &extra, 1, MSG_DONTWAIT) != -1 || (errno != EAGAIN && errno != EWOULDBLOCK))
    fail_msg("%s: more bytes wait after the data", what);
}

/* Every socket of the pair, both ways: only what the other end sends. */
static void expect_clean_pair(rank_t k[2]) {
  for (int r = 0; r < 2; r++)
    if (k[r].st != FTC_OK) fail_msg("rank %d: %s", r, k[r].why);
  const ftc__tcp_peer_t *p0 = &k[0].tp->peers[1], *p1 = &k[1].tp->peers[0];
  expect_clean(p0->sfd, p1->fd, "dn>");  /* DOWN: rank 0 sends */
  expect_clean(p1->sfd, p0->fd, "up>");  /* UP: rank 1 sends */
  expect_clean(p1->fd, p0->sfd, "dn<");  /* and each the other way (the shared use) */
  expect_clean(p0->fd, p1->sfd, "up<");
}

static void both_sockets_of_a_pair_are_adopted_and_carry_only_the_new_epochs_bytes(void **state) {
  (void)state;
  rank_t k[2];
  pthread_barrier_t built;
  pair_init(k, &built);
  for (int r = 0; r < 2; r++) k[r].moves[0] = 2;
  pair_run(k);
  expect_clean_pair(k);
  for (int r = 0; r < 2; r++)
    if (ftc__tcp_adopted(k[r].tp) != 2)
      fail_msg("rank %d adopted %d of its 2 spare sockets", r, ftc__tcp_adopted(k[r].tp));
  pair_free(k, &built);
}

static void the_one_socket_of_a_pair_is_adopted_with_ftcomm_tcp_sockets_1(void **state) {
  (void)state;
  setenv("FTCOMM_TCP_SOCKETS", "1", 1);
  ftc__param_reset();
  rank_t k[2];
  pthread_barrier_t built;
  pair_init(k, &built);
  for (int r = 0; r < 2; r++) k[r].moves[0] = 2;
  pair_run(k);
  unsetenv("FTCOMM_TCP_SOCKETS");
  ftc__param_reset();
  expect_clean_pair(k);
  for (int r = 0; r < 2; r++) assert_int_equal(ftc__tcp_adopted(k[r].tp), 1);
  pair_free(k, &built);
}

/* Rank 0 takes the spares for epoch 2, which rank 1 skips (it learned of
 * epoch 3 first): epoch 2 cannot connect (rank 1 refuses it), and in epoch
 * 3 the pair connects anew: rank 0's spares went with its epoch 2. */
static void spares_taken_for_different_epochs_are_not_used(void **state) {
  (void)state;
  rank_t k[2];
  pthread_barrier_t built;
  pair_init(k, &built);
  k[0].moves[0] = 2;
  k[0].timeout_ms[0] = 500;
  k[0].moves[1] = 3;
  k[1].moves[0] = 3;
  pair_run(k);
  if (k[0].st_move[0] != FTC_ERR_TIMEOUT)
    fail_msg("rank 0's epoch 2, which rank 1 never joins, ended with %s, not a timeout",
             ftc_strerror(k[0].st_move[0]));
  expect_clean_pair(k);
  for (int r = 0; r < 2; r++) assert_int_equal(ftc__tcp_adopted(k[r].tp), 0);
  pair_free(k, &built);
}

/* One rank closed its spares (it connects without them): the other, which
 * adopts them, sees the end instead of an ADOPT and connects anew. */
static void expect_fresh_when_closed_by(int closer) {
  rank_t k[2];
  pthread_barrier_t built;
  pair_init(k, &built);
  for (int r = 0; r < 2; r++) k[r].moves[0] = 2;
  k[closer].prev_none = 1;
  pair_run(k);
  expect_clean_pair(k);
  for (int r = 0; r < 2; r++) assert_int_equal(ftc__tcp_adopted(k[r].tp), 0);
  pair_free(k, &built);
}

static void a_peer_that_closed_its_spares_is_connected_anew(void **state) {
  (void)state;
  expect_fresh_when_closed_by(0); /* the lower rank, which accepts */
  expect_fresh_when_closed_by(1); /* the higher, which connects */
}

/* A rank that lacks one of a pair's spares (its handshake was abandoned
 * when the epoch ended) adopts neither: the pair connects anew, both
 * sockets. */
static void expect_fresh_when_missing(int r, int lane) {
  rank_t k[2];
  pthread_barrier_t built;
  pair_init(k, &built);
  for (int q = 0; q < 2; q++) k[q].moves[0] = 2;
  k[r].drop_spare_lane = 1 + lane;
  pair_run(k);
  expect_clean_pair(k);
  for (int q = 0; q < 2; q++)
    if (ftc__tcp_adopted(k[q].tp) != 0)
      fail_msg("rank %d missing its spare on lane %d: rank %d adopted %d sockets", r, lane, q,
               ftc__tcp_adopted(k[q].tp));
  pair_free(k, &built);
}

static void a_rank_missing_one_spare_of_a_pair_adopts_neither(void **state) {
  (void)state;
  for (int r = 0; r < 2; r++)
    for (int lane = 0; lane < 2; lane++) expect_fresh_when_missing(r, lane);
}

/* A planned move (a step boundary's) to the very next epoch, dropping no
 * member: each end keeps the pair's connections of epoch 1 (no ADOPT, no
 * connect), and the kept sockets carry only what the other end sends in
 * epoch 2. The spares stay with epoch 1's transport (closed with it, or by
 * ftc__tcp_close_spares before a move after a failure). */
static void a_planned_move_to_the_next_epoch_keeps_the_pairs_connections(void **state) {
  (void)state;
  for (int sockets = 2; sockets >= 1; sockets--) {
    if (sockets == 1) setenv("FTCOMM_TCP_SOCKETS", "1", 1);
    ftc__param_reset();
    rank_t k[2];
    pthread_barrier_t built;
    pair_init(k, &built);
    for (int r = 0; r < 2; r++) {
      k[r].moves[0] = 2;
      k[r].cfg.planned_move = 1;
    }
    pair_run(k);
    unsetenv("FTCOMM_TCP_SOCKETS");
    ftc__param_reset();
    for (int r = 0; r < 2; r++) {
      if (k[r].st != FTC_OK) fail_msg("rank %d: %s", r, k[r].why);
      /* what epoch 1 connected is what epoch 2 uses (moved, not closed: the
       * same descriptors) */
      const ftc__tcp_peer_t *now = &k[r].tp->peers[1 - r];
      if (now->fd != k[r].live1[0] || now->sfd != k[r].live1[1] || now->fd < 0 || now->sfd < 0)
        fail_msg("rank %d: epoch 2 uses sockets %d/%d, not epoch 1's %d/%d", r, now->fd, now->sfd,
                 k[r].live1[0], k[r].live1[1]);
      if ((sockets == 1) != (now->fd == now->sfd))
        fail_msg("rank %d: %d socket(s) per pair, but fd %d and sfd %d", r, sockets, now->fd,
                 now->sfd);
      ftc__tcp_peer_t *old = &k[r].tp1->peers[1 - r];
      if (old->fd != -1 || old->sfd != -1)
        fail_msg("rank %d: epoch 1 still holds its connections %d/%d after the move", r, old->fd,
                 old->sfd);
      if (old->spare_fd < 0 || old->spare_sfd < 0)
        fail_msg("rank %d: epoch 1's spares %d/%d were closed at the move", r, old->spare_fd,
                 old->spare_sfd);
      ftc__tcp_close_spares(k[r].tp1);
      assert_int_equal(old->spare_fd, -1);
      assert_int_equal(old->spare_sfd, -1);
      assert_int_equal(ftc__tcp_kept(k[r].tp), sockets);
      assert_int_equal(ftc__tcp_adopted(k[r].tp), 0);
    }
    expect_clean_pair(k);
    pair_free(k, &built);
  }
}

/* The rule is the next epoch only: a rank that moves from epoch 1 straight
 * to 3 (it learned of 3 before its step boundary), planned or not, takes
 * the spares with an ADOPT as before; so does a move that is not planned. */
static void a_move_past_the_next_epoch_or_after_a_failure_adopts_the_spares(void **state) {
  (void)state;
  for (int planned = 0; planned < 2; planned++) {
    rank_t k[2];
    pthread_barrier_t built;
    pair_init(k, &built);
    for (int r = 0; r < 2; r++) {
      k[r].moves[0] = planned ? 3 : 2;
      k[r].cfg.planned_move = planned;
    }
    pair_run(k);
    expect_clean_pair(k);
    for (int r = 0; r < 2; r++) {
      assert_int_equal(ftc__tcp_kept(k[r].tp), 0);
      assert_int_equal(ftc__tcp_adopted(k[r].tp), 2);
    }
    pair_free(k, &built);
  }
}

/* One end moves as planned and keeps the connections, the other saw a
 * failure first (not planned) and adopts the spares: it waits for an ADOPT
 * the keeper never sends, until its connect timeout, where a job's
 * coordinator would have superseded the epoch (the failure the other saw).
 * Nothing of either is read as the other's data: the kept sockets hold no
 * byte. */
static void an_end_that_keeps_while_the_other_adopts_fails_the_others_move(void **state) {
  (void)state;
  for (int keeper = 0; keeper < 2; keeper++) {
    rank_t k[2];
    pthread_barrier_t built;
    pair_init(k, &built);
    for (int r = 0; r < 2; r++) k[r].moves[0] = 2;
    k[keeper].cfg.planned_move = 1;
    k[1 - keeper].timeout_ms[0] = 500;
    pair_run(k);
    if (k[keeper].st != FTC_OK) fail_msg("the keeper (rank %d): %s", keeper, k[keeper].why);
    assert_int_equal(ftc__tcp_kept(k[keeper].tp), 2);
    if (k[1 - keeper].st != FTC_ERR_TIMEOUT)
      fail_msg("rank %d, which adopts while rank %d keeps, ended its move with %s, not its "
               "connect timeout", 1 - keeper, keeper, ftc_strerror(k[1 - keeper].st));
    const ftc__tcp_peer_t *p = &k[keeper].tp->peers[1 - keeper];
    char c;
    for (int i = 0; i < 2; i++) {
      int fd = i ? p->sfd : p->fd;
      ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
      if (n > 0) fail_msg("the keeper's kept socket %d holds a byte (an ADOPT read as data?)", i);
    }
    pair_free(k, &built);
  }
}

/* A planned move whose epoch cannot be connected (it admits a member that
 * never answers: its epoch would be superseded in a job) gives the kept
 * connections back to epoch 1: a peer still there must not read their end
 * as a crash, and they still carry epoch 1's bytes. */
static void move_to_an_epoch_that_fails(rank_t k[2], pthread_barrier_t *built, int shut_rank0_ms);

static void a_planned_move_that_fails_gives_the_kept_connections_back(void **state) {
  (void)state;
  rank_t k[2];
  pthread_barrier_t built;
  move_to_an_epoch_that_fails(k, &built, 0);
  const ftc__tcp_peer_t *p0 = &k[0].tp1->peers[1], *p1 = &k[1].tp1->peers[0];
  expect_clean(p0->sfd, p1->fd, "e1>");
  expect_clean(p1->sfd, p0->fd, "e1<");
  pair_free(k, &built);
}

/* The same, with epoch 1 shut (an abort, a loud failure) while its
 * connections were away: what is given back is shut too, so the peer reads
 * the end as it would have at the shutdown. */
static void connections_given_back_to_a_shut_epoch_are_shut(void **state) {
  (void)state;
  rank_t k[2];
  pthread_barrier_t built;
  move_to_an_epoch_that_fails(k, &built, 150);
  int fd = k[1].tp1->peers[0].fd;
  struct pollfd p = {fd, POLLIN, 0};
  assert_int_equal(poll(&p, 1, 5000), 1);
  char c;
  if (recv(fd, &c, 1, MSG_DONTWAIT) != 0)
    fail_msg("rank 1 does not read the end of rank 0's connection, whose epoch was shut while "
             "it was kept for the next one");
  pair_free(k, &built);
}

/* Both ranks' view of `epoch` admits a third member that never answers (its
 * address refuses: a joiner that never comes), so that epoch cannot be
 * connected. */
static void add_a_joiner_that_never_comes(rank_t k[2], uint64_t epoch) {
  int gone_fd;
  char gone[128];
  assert_int_equal(ftc__tcp_listen("127.0.0.1", NULL, AF_UNSPEC, NULL, 0, &gone_fd, gone, sizeof(gone)),
                   FTC_OK);
  close(gone_fd);
  for (int r = 0; r < 2; r++) {
    ftc__view_t *v = harness_view(3, r, epoch, NULL);
    memcpy(v->members, k[r].view[epoch]->members, 2 * sizeof(*v->members));
    v->members[2].member_id = 4242;
    v->members[2].joined_epoch = epoch;
    snprintf(v->members[2].addr, sizeof(v->members[2].addr), "%s", gone);
    harness_view_free(k[r].view[epoch]);
    k[r].view[epoch] = v;
  }
}

static void move_to_an_epoch_that_fails(rank_t k[2], pthread_barrier_t *built, int shut_rank0_ms) {
  pair_init(k, built);
  k[0].shut_during_ms = shut_rank0_ms;
  add_a_joiner_that_never_comes(k, 2);
  for (int r = 0; r < 2; r++) {
    k[r].moves[0] = 2;
    k[r].timeout_ms[0] = 400;
    k[r].cfg.planned_move = 1;
  }
  pair_run(k);
  for (int r = 0; r < 2; r++) {
    if (k[r].st != FTC_ERR_TIMEOUT)
      fail_msg("rank %d's move to an epoch whose joiner never answers ended with %s (%s)", r,
               ftc_strerror(k[r].st), k[r].why);
    const ftc__tcp_peer_t *old = &k[r].tp1->peers[1 - r];
    if (old->fd < 0 || old->sfd < 0)
      fail_msg("rank %d: epoch 1's connections %d/%d were not given back", r, old->fd, old->sfd);
  }
}

/* Both ranks ran the sum on the pair: 1+2, 2+3, 3+4, 4+5. */
static void expect_sums(rank_t k[2]) {
  for (int r = 0; r < 2; r++) {
    if (k[r].st != FTC_OK) fail_msg("rank %d: %s", r, k[r].why);
    for (int i = 0; i < 4; i++)
      if (k[r].sum[i] != 3 + 2 * i)
        fail_msg("rank %d: element %d of the sum is %lld, not %d", r, i, (long long)k[r].sum[i],
                 3 + 2 * i);
    if (ftc__tcp_unconfirmed(k[r].tp, 1 - r)) fail_msg("rank %d: the pair is still unconfirmed", r);
  }
}

/* The adoption is lazy: a move returns with the pair unconfirmed, before
 * the peer has even begun its move (rank 1 starts only once rank 0's move
 * returned: a move that waited for the peer's ADOPT would run into its
 * connect timeout), and the pair's first run reads the ADOPT before its
 * data. */
static void a_move_returns_before_the_peers_adopt_and_the_first_run_reads_it(void **state) {
  (void)state;
  rank_t k[2];
  pthread_barrier_t built;
  pair_init(k, &built);
  for (int r = 0; r < 2; r++) {
    k[r].moves[0] = 2;
    k[r].unsettled = 1;
    k[r].run_sum = 1;
  }
  k[1].after_peer = 1;
  pair_run(k);
  if (!k[0].unconfirmed_after_move)
    fail_msg("rank 0's move returned with the pair confirmed, though rank 1 had not moved yet");
  expect_sums(k);
  for (int r = 0; r < 2; r++) assert_int_equal(ftc__tcp_adopted(k[r].tp), 2);
  pair_free(k, &built);
}

/* A peer that did not adopt the pair (it closed its spares and connects
 * anew, or waits for this rank to): the run that finds the end instead of
 * its ADOPT connects the pair anew for the epoch, then runs on it. */
static void a_run_connects_anew_a_pair_its_peer_did_not_adopt(void **state) {
  (void)state;
  for (int closer = 0; closer < 2; closer++) {
    rank_t k[2];
    pthread_barrier_t built;
    pair_init(k, &built);
    for (int r = 0; r < 2; r++) {
      k[r].moves[0] = 2;
      k[r].unsettled = 1;
      k[r].run_sum = 1;
    }
    k[closer].prev_none = 1;
    pair_run(k);
    expect_sums(k);
    for (int r = 0; r < 2; r++)
      if (ftc__tcp_adopted(k[r].tp) != 0)
        fail_msg("rank %d counts %d adopted sockets after its pair was connected anew", r,
                 ftc__tcp_adopted(k[r].tp));
    pair_free(k, &built);
  }
}

/* A pair whose connection anew timed out (its peer closed its spares after
 * this rank adopted them, and gave up connecting before this rank's run
 * came) stays to be connected: settling it again tries again and times out
 * again, rather than calling a pair without sockets settled. */
static void a_pair_whose_repair_timed_out_stays_to_be_connected(void **state) {
  (void)state;
  rank_t k[2];
  pthread_barrier_t built;
  pair_init(k, &built);
  for (int r = 0; r < 2; r++) k[r].moves[0] = 2;
  k[0].unsettled = 1;
  k[1].after_peer = 1;
  k[1].prev_none = 1;
  k[1].timeout_ms[0] = 300;
  pair_run(k);
  if (k[0].st_move[0] != FTC_OK) fail_msg("rank 0's move: %s", k[0].why);
  if (k[1].st_move[0] != FTC_ERR_TIMEOUT)
    fail_msg("rank 1's move connected (%s), with nobody accepting it", k[1].why);
  for (int round = 0; round < 2; round++) {
    ftc_status_t st = ftc__tcp_settle(k[0].tp, 1, ftc__deadline_ns(200));
    if (st != FTC_ERR_TIMEOUT)
      fail_msg("settle #%d of the pair with rank 1, which nobody connects: %s, not a timeout (%s)",
               round + 1, ftc_strerror(st), ftc_last_error());
  }
  pair_free(k, &built);
}

/* A planned move from an epoch whose pair is still unconfirmed keeps the
 * pair with its ADOPT unread: the next epoch's first run reads the ADOPT of
 * the epoch that adopted it, then its own data. */
static void a_kept_pair_takes_its_unread_adopt_along(void **state) {
  (void)state;
  rank_t k[2];
  pthread_barrier_t built;
  pair_init(k, &built);
  for (int r = 0; r < 2; r++) {
    k[r].moves[0] = 2;
    k[r].moves[1] = 3;
    k[r].chain = 1;
    k[r].unsettled = 1;
    k[r].run_sum = 1;
  }
  pair_run(k);
  expect_sums(k);
  for (int r = 0; r < 2; r++) {
    if (!k[r].unconfirmed_after_move)
      fail_msg("rank %d: the pair was confirmed when the move to epoch 3 returned (the test "
               "needs it unconfirmed)", r);
    assert_int_equal(ftc__tcp_kept(k[r].tp), 2);
  }
  pair_free(k, &built);
}

/* The same kept pair, by a planned move whose epoch fails (a joiner that
 * never answers): it goes back to the epoch before with its ADOPT still
 * unread, and that epoch's first run reads it. */
static void a_kept_pair_given_back_takes_its_unread_adopt_back(void **state) {
  (void)state;
  rank_t k[2];
  pthread_barrier_t built;
  pair_init(k, &built);
  add_a_joiner_that_never_comes(k, 3);
  for (int r = 0; r < 2; r++) {
    k[r].moves[0] = 2;
    k[r].moves[1] = 3;
    k[r].timeout_ms[1] = 400;
    k[r].chain = 1;
    k[r].unsettled = 1;
    k[r].run_sum = 1;
    k[r].run_given_back = 1;
  }
  pair_run(k);
  for (int r = 0; r < 2; r++) {
    if (k[r].st_move[1] != FTC_ERR_TIMEOUT)
      fail_msg("rank %d's move to an epoch whose joiner never answers ended with %s", r,
               ftc_strerror(k[r].st_move[1]));
    if (!k[r].given_back_unconfirmed)
      fail_msg("rank %d: epoch 2 got its pair back confirmed (its ADOPT was not taken back)", r);
  }
  expect_sums(k);
  pair_free(k, &built);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(both_sockets_of_a_pair_are_adopted_and_carry_only_the_new_epochs_bytes),
      cmocka_unit_test(the_one_socket_of_a_pair_is_adopted_with_ftcomm_tcp_sockets_1),
      cmocka_unit_test(spares_taken_for_different_epochs_are_not_used),
      cmocka_unit_test(a_peer_that_closed_its_spares_is_connected_anew),
      cmocka_unit_test(a_rank_missing_one_spare_of_a_pair_adopts_neither),
      cmocka_unit_test(a_planned_move_to_the_next_epoch_keeps_the_pairs_connections),
      cmocka_unit_test(a_move_past_the_next_epoch_or_after_a_failure_adopts_the_spares),
      cmocka_unit_test(an_end_that_keeps_while_the_other_adopts_fails_the_others_move),
      cmocka_unit_test(a_planned_move_that_fails_gives_the_kept_connections_back),
      cmocka_unit_test(connections_given_back_to_a_shut_epoch_are_shut),
      cmocka_unit_test(a_move_returns_before_the_peers_adopt_and_the_first_run_reads_it),
      cmocka_unit_test(a_run_connects_anew_a_pair_its_peer_did_not_adopt),
      cmocka_unit_test(a_pair_whose_repair_timed_out_stays_to_be_connected),
      cmocka_unit_test(a_kept_pair_takes_its_unread_adopt_along),
      cmocka_unit_test(a_kept_pair_given_back_takes_its_unread_adopt_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
