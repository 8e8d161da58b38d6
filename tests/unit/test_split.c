/*
 * test_split.c - sub-communicators without a coordinator (forked ranks):
 * ftc_comm_split by color and key and ftc_comm_split_ranks at 1, 2, 3, 4
 * and 8 ranks (ranks, sizes, the mapping to the parent, collectives in the
 * children at once), a rank in no child, lists that differ between ranks,
 * bad arguments; and how a child follows its parent: a rank that dies
 * during a child's collective fails that child with peer lost (or revoked,
 * when the parent saw it first) and the parent's epoch too, and every
 * other child of the parent is revoked; a hang that only a child sees
 * (its timeout) fails the parent with it.
 * Recovery through the coordinator is tested in tests/mp (split mode).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

static const harness_opts_t opts = {
    .time_limit_s = 60,
    .env = {"FTCOMM_SPIN_US=0"},
};

/* Sum over the child of the parent's ranks, and the parent ranks gathered
 * in child order, against the expected members. */
static int check_child(ftc_comm_t *child, int rank, const int *want, int n) {
  int cr, cs;
  ftc_comm_rank(child, &cr);
  ftc_comm_size(child, &cs);
  if (cs != n) return RANK_FAIL(rank, "child size %d, want %d", cs, n);
  if (want[cr] != rank) return RANK_FAIL(rank, "child rank %d holds parent rank %d", cr, want[cr]);
  int32_t mine = rank, got[8] = {0};
  if (ftc_allgather(&mine, got, 1, FTC_I32, child, FTC_TIMEOUT_DEFAULT) != FTC_OK)
    return RANK_FAIL(rank, "allgather in the child: %s", ftc_last_error());
  for (int i = 0; i < n; i++) {
    int pr = -2;
    if (got[i] != want[i]) return RANK_FAIL(rank, "child rank %d is parent rank %d, want %d", i, got[i], want[i]);
    if (ftc_comm_parent_rank(child, i, &pr) != FTC_OK || pr != want[i])
      return RANK_FAIL(rank, "ftc_comm_parent_rank(%d) = %d, want %d", i, pr, want[i]);
  }
  /* uneven counts in the child too: child rank i gives i elements */
  size_t counts[8];
  int32_t in[8], out[64];
  for (int i = 0; i < n; i++) counts[i] = (size_t)i;
  for (int i = 0; i < cr; i++) in[i] = rank * 10 + i;
  if (ftc_allgatherv(in, out, counts, NULL, FTC_I32, child, FTC_TIMEOUT_DEFAULT) != FTC_OK)
    return RANK_FAIL(rank, "allgatherv in the child: %s", ftc_last_error());
  for (int i = 0, at = 0; i < n; at += i, i++)
    for (int j = 0; j < i; j++)
      if (out[at + j] != want[i] * 10 + j) return RANK_FAIL(rank, "allgatherv in the child: wrong data");
  return 0;
}

/* Parity children, the odd one in reverse rank order (keys), then a list
 * child of every third rank from the top, then the parent still works. */
static int split_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  ftc_comm_t *par = NULL, *lst = NULL;
  int color = rank % 2, key = color ? -rank : rank;
  if (ftc_comm_split(comm, color, key, FTC_TIMEOUT_DEFAULT, &par) != FTC_OK || !par)
    return RANK_FAIL(rank, "split: %s", ftc_last_error());
  int want[8] = {0}, m = 0;
  for (int q = 0; q < n; q++)
    if (q % 2 == color) want[m++] = q;
  if (color)
    for (int i = 0; i < m / 2; i++) {
      int t = want[i];
      want[i] = want[m - 1 - i], want[m - 1 - i] = t;
    }
  if (check_child(par, rank, want, m)) return 1;
  int list[8] = {0}, k = 0;
  for (int q = n - 1; q >= 0; q -= 3) list[k++] = q;
  if (ftc_comm_split_ranks(comm, list, k, FTC_TIMEOUT_DEFAULT, &lst) != FTC_OK)
    return RANK_FAIL(rank, "split_ranks: %s", ftc_last_error());
  int in_list = (n - 1 - rank) % 3 == 0;
  if (!in_list != !lst) return RANK_FAIL(rank, "in the list: %d, child: %p", in_list, (void *)lst);
  if (lst && check_child(lst, rank, list, k)) return 1;
  /* the two children and the parent at once, asynchronously */
  ftc_request_t *a, *b;
  int32_t x = 1, y = 1;
  if (ftc_iallreduce(&x, &x, 1, FTC_I32, FTC_SUM, par, &a) != FTC_OK ||
      ftc_iallreduce(&y, &y, 1, FTC_I32, FTC_SUM, comm, &b) != FTC_OK ||
      ftc_wait(a, FTC_TIMEOUT_DEFAULT) != FTC_OK || ftc_wait(b, FTC_TIMEOUT_DEFAULT) != FTC_OK)
    return RANK_FAIL(rank, "child and parent together: %s", ftc_last_error());
  ftc_request_free(a), ftc_request_free(b);
  if (x != m || y != n) return RANK_FAIL(rank, "sums %d %d, want %d %d", x, y, m, n);
  /* nobody in a child */
  ftc_comm_t *none = (ftc_comm_t *)&x;
  if (ftc_comm_split(comm, FTC_SPLIT_NONE, 0, FTC_TIMEOUT_DEFAULT, &none) != FTC_OK || none)
    return RANK_FAIL(rank, "split with no color: %s", ftc_last_error());
  ftc_comm_destroy(lst);
  ftc_comm_destroy(par);
  return ftc_barrier(comm, FTC_TIMEOUT_DEFAULT) == FTC_OK ? 0 : RANK_FAIL(rank, "barrier: %s", ftc_last_error());
}

#define AT(n)                                                                    \
  static void children_by_color_key_and_list_at_##n(void **s) {                  \
    (void)s;                                                                     \
    assert_int_equal(harness_run(n, split_body, NULL, &opts), 0);                \
  }
AT(1)
AT(2)
AT(3)
AT(4)
AT(8)

static int bad_split_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  ftc_comm_t *c = NULL;
  int two[2] = {0, 0}, out[1] = {n};
#define REFUSED(call, text)                                                              \
  do {                                                                                   \
    if ((call) != FTC_ERR_INVALID_ARGUMENT || !strstr(ftc_last_error(), text))           \
      return RANK_FAIL(rank, "%s: want a refusal saying \"%s\", got \"%s\"", #call, text, \
                       ftc_last_error());                                                \
  } while (0)
  REFUSED(ftc_comm_split(comm, 0, 0, 1000, NULL), "child is NULL");
  REFUSED(ftc_comm_split(NULL, 0, 0, 1000, &c), "parent is NULL");
  REFUSED(ftc_comm_split(comm, -5, 0, 1000, &c), "color -5");
  REFUSED(ftc_comm_split_ranks(comm, two, 2, 1000, &c), "listed twice");
  REFUSED(ftc_comm_split_ranks(comm, out, 1, 1000, &c), "out of range");
  REFUSED(ftc_comm_split_ranks(comm, NULL, 1, 1000, &c), "at NULL");
  REFUSED(ftc_comm_parent_rank(comm, 0, &two[0]), "not a sub-communicator");
  /* lists that differ between ranks: refused on every rank, after the exchange */
  int mine[2] = {0, 1}, other[2] = {1, 0};
  REFUSED(ftc_comm_split_ranks(comm, rank == 0 ? mine : other, 2, 5000, &c), "another list of ranks");
#undef REFUSED
  if (c) return RANK_FAIL(rank, "a refused split made a child");
  /* the parent is fine */
  return ftc_barrier(comm, FTC_TIMEOUT_DEFAULT) == FTC_OK ? 0 : RANK_FAIL(rank, "barrier: %s", ftc_last_error());
}

static void bad_splits_are_refused_naming_what_to_fix(void **s) {
  (void)s;
  assert_int_equal(harness_run(2, bad_split_body, NULL, &opts), 0);
}

/* 4 ranks; children lo = {0,1}, hi = {2,3} and all = {0..3}. Rank 3 dies
 * while rank 2 waits for it in hi: rank 2's hi fails with peer lost, and
 * its parent's epoch with it; every rank's other children are revoked
 * (ranks 0 and 1 through their parent, which sees rank 3's end itself). */
static int death_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg, (void)n;
  ftc_comm_t *half = NULL, *all = NULL;
  if (ftc_comm_split(comm, rank / 2, rank, FTC_TIMEOUT_DEFAULT, &half) != FTC_OK ||
      ftc_comm_split(comm, 0, rank, FTC_TIMEOUT_DEFAULT, &all) != FTC_OK)
    return RANK_FAIL(rank, "split: %s", ftc_last_error());
  if (ftc_barrier(comm, FTC_TIMEOUT_DEFAULT) != FTC_OK) return RANK_FAIL(rank, "barrier");
  if (rank == 3) {
    usleep(200 * 1000);
    _exit(0);
  }
  double x[256] = {0};
  if (rank == 2) {
    ftc_status_t st = ftc_allreduce(x, x, 256, FTC_F64, FTC_SUM, half, 10000);
    /* its own end, or revoked first by the parent or the other child,
     * which see the same end */
    if (st != FTC_ERR_PEER_LOST && st != FTC_ERR_REVOKED)
      return RANK_FAIL(rank, "hi with a dead peer gave %s", ftc_strerror(st));
  }
  /* the parent's epoch fails (rank 2: from its child; 0, 1: by itself) */
  ftc_status_t pe = FTC_OK;
  for (int i = 0; i < 500 && pe == FTC_OK; i++) {
    usleep(10 * 1000);
    ftc_comm_get_async_error(comm, &pe);
  }
  if (pe != FTC_ERR_PEER_LOST) return RANK_FAIL(rank, "the parent's error is %s", ftc_strerror(pe));
  ftc_status_t st = ftc_allreduce(x, x, 256, FTC_F64, FTC_SUM, all, 10000);
  if (st != FTC_ERR_REVOKED) return RANK_FAIL(rank, "all after the death gave %s", ftc_strerror(st));
  if (rank < 2 && (st = ftc_allreduce(x, x, 256, FTC_F64, FTC_SUM, half, 10000)) != FTC_ERR_REVOKED)
    return RANK_FAIL(rank, "lo after the death gave %s", ftc_strerror(st));
  /* without a coordinator nothing is re-derived: the parent has not moved */
  ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;
  if ((st = ftc_comm_recover(all, 1000, &info)) != FTC_ERR_REVOKED || !strstr(ftc_last_error(), "recover the parent first"))
    return RANK_FAIL(rank, "recovering a child of a failed parent gave %s: %s", ftc_strerror(st), ftc_last_error());
  ftc_comm_destroy(all);
  ftc_comm_destroy(half);
  return 0;
}

static void a_death_in_a_child_fails_the_parent_and_revokes_the_other_children(void **s) {
  (void)s;
  assert_int_equal(harness_run(4, death_body, NULL, &opts), 0);
}

/* A hang only the child sees: rank 3 is alive but does not enter hi's
 * allreduce, which times out on rank 2. The timeout fails rank 2's parent
 * too (its own connections are fine), which revokes its other child; the
 * other ranks' parents fail as rank 2's shuts its sockets. */
static int hang_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg, (void)n;
  ftc_comm_t *half = NULL, *all = NULL;
  if (ftc_comm_split(comm, rank / 2, rank, FTC_TIMEOUT_DEFAULT, &half) != FTC_OK ||
      ftc_comm_split(comm, 0, rank, FTC_TIMEOUT_DEFAULT, &all) != FTC_OK)
    return RANK_FAIL(rank, "split: %s", ftc_last_error());
  if (ftc_barrier(comm, FTC_TIMEOUT_DEFAULT) != FTC_OK) return RANK_FAIL(rank, "barrier");
  double x[16] = {0};
  if (rank == 2) {
    ftc_status_t st = ftc_allreduce(x, x, 16, FTC_F64, FTC_SUM, half, 300);
    if (st != FTC_ERR_TIMEOUT) return RANK_FAIL(rank, "hi with a silent peer gave %s", ftc_strerror(st));
  }
  ftc_status_t pe = FTC_OK;
  for (int i = 0; i < 500 && pe == FTC_OK; i++) {
    usleep(10 * 1000);
    ftc_comm_get_async_error(comm, &pe);
  }
  if (rank == 2 && pe != FTC_ERR_TIMEOUT) return RANK_FAIL(rank, "the parent's error is %s", ftc_strerror(pe));
  if (rank != 2 && pe != FTC_ERR_PEER_LOST) return RANK_FAIL(rank, "the parent's error is %s", ftc_strerror(pe));
  ftc_status_t st = ftc_allreduce(x, x, 16, FTC_F64, FTC_SUM, all, 10000);
  if (st != FTC_ERR_REVOKED) return RANK_FAIL(rank, "all after the hang gave %s", ftc_strerror(st));
  ftc_comm_destroy(all);
  ftc_comm_destroy(half);
  return 0;
}

static void a_hang_seen_by_a_child_alone_fails_the_parent(void **s) {
  (void)s;
  char dir[128], cmd[512];
  snprintf(dir, sizeof(dir), "/tmp/ftc-split-hang-%d", (int)getpid());
  setenv("FTCOMM_DUMP_DIR", dir, 1);
  int failed = harness_run(4, hang_body, NULL, &opts);
  unsetenv("FTCOMM_DUMP_DIR");
  /* One failure dump per process, the parent's, holding the children's
   * rings (a child writes none of its own); rank 2's shows the timeout. */
  snprintf(cmd, sizeof(cmd),
           "test $(ls %s | wc -l) = 4 && grep -l '\"reason\": *\"timeout\"' %s/rank-2-*.json >/dev/null && "
           "grep -q '\"name\":\"split1.1\"' %s/rank-2-*.json",
           dir, dir, dir);
  int dumps_ok = system(cmd) == 0;
  if (!dumps_ok) {
    snprintf(cmd, sizeof(cmd), "ls -l %s >&2", dir);
    if (system(cmd) != 0) fprintf(stderr, "no %s\n", dir);
  }
  if (getenv("KEEPDUMPS")) { assert_int_equal(failed, 0); return; }
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  assert_int_equal(failed, 0);
  assert_true(dumps_ok);
}

/* The parent's view moved to epoch e with the members keep[0 .. k-1] (its
 * ranks there), as a recovery or a grow does it (no coordinator here). */
static int parent_moves(ftc_comm_t *comm, int rank, uint64_t e, const int *keep, int k) {
  ftc__view_t v = *comm->view;
  ftc__view_member_t members[8];
  v.my_rank = -1;
  for (int i = 0; i < k; i++) {
    members[i] = comm->view->members[keep[i]];
    members[i].rank = i;
    if (keep[i] == comm->view->my_rank) v.my_rank = i;
  }
  v.members = members, v.size = k, v.epoch = e;
  if (ftc__comm_rebuild(comm, &v) != FTC_OK) return RANK_FAIL(rank, "the parent's move: %s", ftc_last_error());
  return 0;
}

/* 3 ranks; children even = {0, 2} and high = {1, 2}. The parent moves to
 * epoch 2 with every member (a grow's planned move): the children are
 * revoked until re-derived, which loses nobody. Then rank 1 leaves and the
 * parent moves to epoch 3 without it: even keeps both members, high is
 * re-derived to rank 2 alone and names rank 1 as lost. */
static int follow_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg, (void)n;
  ftc_comm_t *even = NULL, *high = NULL;
  ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;
  int32_t x = 1;
  if (ftc_comm_split(comm, rank % 2 ? FTC_SPLIT_NONE : 0, rank, FTC_TIMEOUT_DEFAULT, &even) != FTC_OK ||
      ftc_comm_split(comm, rank >= 1 ? 0 : FTC_SPLIT_NONE, rank, FTC_TIMEOUT_DEFAULT, &high) != FTC_OK)
    return RANK_FAIL(rank, "split: %s", ftc_last_error());
  if (ftc_barrier(comm, FTC_TIMEOUT_DEFAULT) != FTC_OK) return RANK_FAIL(rank, "barrier");
  /* a healthy child whose parent has not moved: nothing to do */
  if (even && (ftc_comm_recover(even, 1000, &info) != FTC_OK || info.changed))
    return RANK_FAIL(rank, "recovering a healthy child: %s", ftc_last_error());
  int all[3] = {0, 1, 2};
  if (parent_moves(comm, rank, 2, all, 3)) return 1;
  ftc_comm_t *kids[2] = {even, high};
  for (int i = 0; i < 2; i++) {
    if (!kids[i]) continue;
    ftc_status_t st = ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, kids[i], 5000);
    if (st != FTC_ERR_REVOKED || !strstr(ftc_last_error(), "call ftc_comm_recover on it"))
      return RANK_FAIL(rank, "a child after the parent's move gave %s: %s", ftc_strerror(st), ftc_last_error());
    if (ftc_comm_recover(kids[i], 5000, &info) != FTC_OK)
      return RANK_FAIL(rank, "re-deriving a child: %s", ftc_last_error());
    if (info.epoch != 2 || !info.changed || info.lost || info.size != 2)
      return RANK_FAIL(rank, "re-derived: epoch %llu changed %d lost %d size %d",
                       (unsigned long long)info.epoch, info.changed, info.lost, info.size);
    x = 1;
    if (ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, kids[i], 5000) != FTC_OK || x != 2)
      return RANK_FAIL(rank, "a re-derived child's allreduce: %s", ftc_last_error());
  }
  if (ftc_barrier(comm, FTC_TIMEOUT_DEFAULT) != FTC_OK) return RANK_FAIL(rank, "barrier in epoch 2");
  if (rank == 1) {
    ftc_comm_destroy(high);
    return 0; /* leaves (the harness destroys its parent) */
  }
  int two[2] = {0, 2};
  if (parent_moves(comm, rank, 3, two, 2)) return 1;
  if (ftc_comm_recover(even, 5000, &info) != FTC_OK || info.size != 2 || info.lost)
    return RANK_FAIL(rank, "even after rank 1 left: %s", ftc_last_error());
  if (rank == 2) {
    int pr = -1, slot = -1;
    ftc_drop_reason_t why;
    if (ftc_comm_recover(high, 5000, &info) != FTC_OK || info.size != 1 || info.lost != 1 ||
        info.prev_rank != 1 || info.rank != 0)
      return RANK_FAIL(rank, "high after rank 1 left: size %d lost %d: %s", info.size, info.lost, ftc_last_error());
    if (ftc_comm_lost(high, 0, &pr, &slot, &why) != FTC_OK || pr != 0 || slot != 1 || why != FTC_DROP_LOST)
      return RANK_FAIL(rank, "high's lost member: rank %d slot %d", pr, slot);
    if (ftc_comm_parent_rank(high, 0, &pr) != FTC_OK || pr != 1)
      return RANK_FAIL(rank, "high's rank 0 is parent rank %d", pr);
    x = 5;
    if (ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, high, 5000) != FTC_OK || x != 5)
      return RANK_FAIL(rank, "high alone: %s", ftc_last_error());
  }
  x = 1;
  if (ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, even, 5000) != FTC_OK || x != 2)
    return RANK_FAIL(rank, "even in epoch 3: %s", ftc_last_error());
  ftc_comm_destroy(high);
  ftc_comm_destroy(even);
  return 0;
}

static void children_follow_their_parents_moves_and_are_re_derived(void **s) {
  (void)s;
  assert_int_equal(harness_run(3, follow_body, NULL, &opts), 0);
}

/* The parent destroyed first: its child keeps working, and says it cannot
 * be recovered. */
static int orphan_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  ftc_comm_t *c = NULL;
  if (ftc_comm_split(comm, 0, rank, FTC_TIMEOUT_DEFAULT, &c) != FTC_OK) return RANK_FAIL(rank, "split");
  if (ftc_barrier(comm, FTC_TIMEOUT_DEFAULT) != FTC_OK) return RANK_FAIL(rank, "barrier");
  ftc_comm_destroy(comm);
  int32_t x = 1;
  if (ftc_allreduce(&x, &x, 1, FTC_I32, FTC_SUM, c, FTC_TIMEOUT_DEFAULT) != FTC_OK || x != n)
    return RANK_FAIL(rank, "the orphan's allreduce: %s", ftc_last_error());
  ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;
  if (ftc_comm_recover(c, 1000, &info) != FTC_ERR_NOT_SUPPORTED || !strstr(ftc_last_error(), "parent was destroyed"))
    return RANK_FAIL(rank, "recovering an orphan: %s", ftc_last_error());
  ftc_comm_destroy(c);
  _exit(0); /* the harness would destroy the parent again */
}

static void a_child_outlives_its_parent(void **s) {
  (void)s;
  assert_int_equal(harness_run(3, orphan_body, NULL, &opts), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(children_by_color_key_and_list_at_1),
      cmocka_unit_test(children_by_color_key_and_list_at_2),
      cmocka_unit_test(children_by_color_key_and_list_at_3),
      cmocka_unit_test(children_by_color_key_and_list_at_4),
      cmocka_unit_test(children_by_color_key_and_list_at_8),
      cmocka_unit_test(bad_splits_are_refused_naming_what_to_fix),
      cmocka_unit_test(a_death_in_a_child_fails_the_parent_and_revokes_the_other_children),
      cmocka_unit_test(a_hang_seen_by_a_child_alone_fails_the_parent),
      cmocka_unit_test(children_follow_their_parents_moves_and_are_re_derived),
      cmocka_unit_test(a_child_outlives_its_parent),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
