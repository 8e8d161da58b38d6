/*
 * test_collv.c - allgatherv, alltoallv, gather and scatter against what each
 * rank must receive, at world sizes 1, 2, 3, 4 and 8 (forked ranks): uneven
 * counts with zeros among them (whole ranks with nothing to send), counts on
 * both sides of the small/large cutover and the pipeline chunk
 * (FTCOMM_CHUNK_BYTES=4096, FTCOMM_RING_THRESHOLD=2048), packed (NULL),
 * gapped and reversed displacements, every root, in place and not, blocking
 * and asynchronous, element sizes 1, 2, 4 and 8. Bytes outside the blocks a
 * call may write must stay untouched, and send buffers unchanged. Bad
 * arguments are refused before anything is sent, naming what to fix. The
 * names a binding gives (ftc_comm_set_coll_name, _group_name) are in dumps.
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

static const harness_opts_t small_opts = {
    .time_limit_s = 120,
    .env = {"FTCOMM_CHUNK_BYTES=4096", "FTCOMM_RING_THRESHOLD=2048", "FTCOMM_SPIN_US=0"},
};

static const ftc_dtype_t dtypes[] = {FTC_U8, FTC_F16, FTC_I32, FTC_F64};
#define NDT 4
#define FILL 0xa5 /* what a byte no call may write holds */

/* Byte j of the block rank `src` sends to rank `dst` in round `it`. */
static unsigned char pat(int src, int dst, size_t j, int it) {
  return (unsigned char)(src * 31 + dst * 17 + (int)(j * 7) + it * 5 + 1);
}

/* An uneven count for (a, b) in round it: zeros among them, and sizes on
 * both sides of the 2 KiB cutover and the 4 KiB chunk. */
static size_t ucount(int a, int b, int it) {
  static const size_t c[] = {0, 1, 3, 0, 17, 700, 2500, 5};
  return c[(size_t)(a * 3 + b * 5 + it) % 8];
}

/* Displacements for counts[n] in one of three layouts: 0 packed (NULL), 1
 * gaps of 3 elements between blocks, 2 blocks in reverse rank order.
 * Returns the elements the buffer spans. */
static size_t layout(int n, const size_t *counts, int kind, size_t *displs, const size_t **use) {
  size_t at = kind == 1 ? 2 : 0;
  if (kind == 2) {
    for (int q = n - 1; q >= 0; q--) displs[q] = at, at += counts[q];
  } else {
    for (int q = 0; q < n; q++) displs[q] = at, at += counts[q] + (kind == 1 ? 3 : 0);
  }
  *use = kind == 0 ? NULL : displs;
  return at;
}

/* The status of an asynchronous call that set *req, then of its wait. */
static ftc_status_t wait_free(ftc_status_t st, ftc_request_t **req) {
  if (st != FTC_OK) return st;
  st = ftc_wait(*req, FTC_TIMEOUT_DEFAULT);
  ftc_request_free(*req);
  return st;
}

/* ---- allgatherv ---- */

static int allgatherv_case(ftc_comm_t *comm, int rank, int n, ftc_dtype_t dt, int it) {
  size_t es = ftc_dtype_size(dt), counts[8], displs[8];
  const size_t *dp;
  int kind = it % 3, in_place = (it / 3) & 1, async = (it / 2) & 1;
  for (int q = 0; q < n; q++) counts[q] = ucount(q, 0, it);
  if (it % 7 == 6) counts[(it / 7) % n] = 0; /* a rank with nothing to give */
  size_t span = layout(n, counts, kind, displs, &dp);
  size_t mine = counts[rank] * es;
  unsigned char *recv = malloc(span * es + 1), *send = malloc(mine + 1), *want = malloc(span * es + 1);
  memset(recv, FILL, span * es), memset(want, FILL, span * es);
  for (int q = 0; q < n; q++)
    for (size_t j = 0; j < counts[q] * es; j++) want[displs[q] * es + j] = pat(q, 0, j, it);
  for (size_t j = 0; j < mine; j++) send[j] = pat(rank, 0, j, it);
  const void *s = send;
  if (in_place) memcpy(recv + displs[rank] * es, send, mine), s = recv + displs[rank] * es;
  ftc_request_t *req = NULL;
  ftc_status_t st = async ? wait_free(ftc_iallgatherv(s, recv, counts, dp, dt, comm, &req), &req)
                          : ftc_allgatherv(s, recv, counts, dp, dt, comm, FTC_TIMEOUT_DEFAULT);
  int bad = 0;
  if (st != FTC_OK)
    bad = RANK_FAIL(rank, "allgatherv %s round %d: %s", ftc_dtype_name(dt), it, ftc_last_error());
  for (size_t j = 0; !bad && j < span * es; j++)
    if (recv[j] != want[j])
      bad = RANK_FAIL(rank, "allgatherv %s round %d (layout %d%s%s): byte %zu is %u, want %u",
                      ftc_dtype_name(dt), it, kind, in_place ? ", in place" : "",
                      async ? ", async" : "", j, recv[j], want[j]);
  for (size_t j = 0; !bad && !in_place && j < mine; j++)
    if (send[j] != pat(rank, 0, j, it)) bad = RANK_FAIL(rank, "allgatherv changed its send buffer");
  free(recv), free(send), free(want);
  return bad;
}

static int allgatherv_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  for (int it = 0; it < 14; it++)
    if (allgatherv_case(comm, rank, n, dtypes[it % NDT], it)) return 1;
  return 0;
}

/* ---- alltoallv ---- */

static int alltoallv_case(ftc_comm_t *comm, int rank, int n, ftc_dtype_t dt, int it) {
  size_t es = ftc_dtype_size(dt), sc[8], rc[8], sd[8], rd[8];
  const size_t *sdp, *rdp;
  int async = it & 1;
  /* rank r sends ucount(r, q) to q; a rank that sends nothing at all in
   * some rounds, and one that receives nothing. */
  for (int q = 0; q < n; q++) {
    sc[q] = it % 5 == 4 && rank == it % n ? 0 : ucount(rank, q, it);
    rc[q] = it % 5 == 4 && q == it % n ? 0 : ucount(q, rank, it);
  }
  size_t sspan = layout(n, sc, it % 3, sd, &sdp), rspan = layout(n, rc, (it + 1) % 3, rd, &rdp);
  unsigned char *send = malloc(sspan * es + 1), *recv = malloc(rspan * es + 1),
                *want = malloc(rspan * es + 1);
  memset(send, FILL, sspan * es), memset(recv, FILL, rspan * es), memset(want, FILL, rspan * es);
  for (int q = 0; q < n; q++) {
    for (size_t j = 0; j < sc[q] * es; j++) send[sd[q] * es + j] = pat(rank, q, j, it);
    for (size_t j = 0; j < rc[q] * es; j++) want[rd[q] * es + j] = pat(q, rank, j, it);
  }
  ftc_request_t *req = NULL;
  ftc_status_t st = async ? wait_free(ftc_ialltoallv(send, sc, sdp, recv, rc, rdp, dt, comm, &req), &req)
                          : ftc_alltoallv(send, sc, sdp, recv, rc, rdp, dt, comm, FTC_TIMEOUT_DEFAULT);
  int bad = 0;
  if (st != FTC_OK)
    bad = RANK_FAIL(rank, "alltoallv %s round %d: %s", ftc_dtype_name(dt), it, ftc_last_error());
  for (size_t j = 0; !bad && j < rspan * es; j++)
    if (recv[j] != want[j])
      bad = RANK_FAIL(rank, "alltoallv %s round %d%s: byte %zu is %u, want %u", ftc_dtype_name(dt),
                      it, async ? " async" : "", j, recv[j], want[j]);
  for (int q = 0; !bad && q < n; q++)
    for (size_t j = 0; j < sc[q] * es; j++)
      if (send[sd[q] * es + j] != pat(rank, q, j, it)) {
        bad = RANK_FAIL(rank, "alltoallv changed its send buffer");
        break;
      }
  free(send), free(recv), free(want);
  return bad;
}

static int alltoallv_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  for (int it = 0; it < 15; it++)
    if (alltoallv_case(comm, rank, n, dtypes[it % NDT], it)) return 1;
  return 0;
}

/* ---- gather and scatter, at every root ---- */

static int rooted_case(ftc_comm_t *comm, int rank, int n, int scatter, int root, size_t count,
                       ftc_dtype_t dt, int it) {
  size_t es = ftc_dtype_size(dt), blk = count * es, all = (size_t)n * blk;
  int in_place = rank == root && (it & 1), async = (it >> 1) & 1;
  unsigned char *big = malloc(all + 1), *one = malloc(blk + 1), *want = malloc(all + 1);
  const char *what = scatter ? "scatter" : "gather";
  memset(big, FILL, all), memset(one, FILL, blk);
  const void *s;
  void *r;
  size_t wn;
  if (scatter) {
    if (rank == root)
      for (int q = 0; q < n; q++)
        for (size_t j = 0; j < blk; j++) big[(size_t)q * blk + j] = pat(root, q, j, it);
    for (size_t j = 0; j < blk; j++) want[j] = pat(root, rank, j, it);
    s = rank == root ? big : (it & 2 ? NULL : big);
    r = in_place ? big + (size_t)root * blk : one;
    wn = blk;
  } else {
    for (size_t j = 0; j < blk; j++) one[j] = pat(rank, root, j, it);
    for (int q = 0; q < n; q++)
      for (size_t j = 0; j < blk; j++) want[(size_t)q * blk + j] = pat(q, root, j, it);
    if (in_place) memcpy(big + (size_t)root * blk, one, blk);
    s = in_place ? big + (size_t)root * blk : one;
    r = rank == root ? big : (it & 2 ? NULL : big);
    wn = rank == root ? all : 0;
  }
  ftc_request_t *req = NULL;
  ftc_status_t st;
  if (scatter)
    st = async ? wait_free(ftc_iscatter(s, r, count, dt, root, comm, &req), &req)
               : ftc_scatter(s, r, count, dt, root, comm, FTC_TIMEOUT_DEFAULT);
  else
    st = async ? wait_free(ftc_igather(s, r, count, dt, root, comm, &req), &req)
               : ftc_gather(s, r, count, dt, root, comm, FTC_TIMEOUT_DEFAULT);
  int bad = 0;
  const unsigned char *got = scatter ? (const unsigned char *)r : big;
  if (st != FTC_OK)
    bad = RANK_FAIL(rank, "%s root %d count %zu: %s", what, root, count, ftc_last_error());
  for (size_t j = 0; !bad && j < wn; j++)
    if (got[j] != want[j])
      bad = RANK_FAIL(rank, "%s root %d count %zu %s%s%s: byte %zu is %u, want %u", what, root,
                      count, ftc_dtype_name(dt), in_place ? " in place" : "", async ? " async" : "",
                      j, got[j], want[j]);
  /* Off the root a gather writes nothing; a scatter's root buffer stays. */
  for (size_t j = 0; !bad && !scatter && rank != root && j < all; j++)
    if (big[j] != FILL) bad = RANK_FAIL(rank, "gather wrote a receive buffer off the root");
  for (size_t j = 0; !bad && scatter && rank == root && !in_place && j < all; j++)
    if (big[j] != pat(root, (int)(j / blk), j % blk, it)) bad = RANK_FAIL(rank, "scatter changed the root's send buffer");
  free(big), free(one), free(want);
  return bad;
}

static int rooted_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  int scatter = (int)(intptr_t)arg;
  static const size_t counts[] = {0, 1, 7, 300, 2 * 1024 + 5};
  int it = 0;
  for (int root = 0; root < n; root++)
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++, it++)
      if (rooted_case(comm, rank, n, scatter, root, counts[c], dtypes[it % NDT], it)) return 1;
  return 0;
}

#define AT_SIZES(name, body, arg)                                                             \
  static void name##_1(void **s) { (void)s; assert_int_equal(harness_run(1, body, arg, &small_opts), 0); } \
  static void name##_2(void **s) { (void)s; assert_int_equal(harness_run(2, body, arg, &small_opts), 0); } \
  static void name##_3(void **s) { (void)s; assert_int_equal(harness_run(3, body, arg, &small_opts), 0); } \
  static void name##_4(void **s) { (void)s; assert_int_equal(harness_run(4, body, arg, &small_opts), 0); } \
  static void name##_8(void **s) { (void)s; assert_int_equal(harness_run(8, body, arg, &small_opts), 0); }
#define AT_SIZES_TESTS(name)                                                                  \
  cmocka_unit_test(name##_1), cmocka_unit_test(name##_2), cmocka_unit_test(name##_3),        \
      cmocka_unit_test(name##_4), cmocka_unit_test(name##_8)

AT_SIZES(allgatherv_places_uneven_blocks_at_their_displacements_at_size, allgatherv_body, NULL)
AT_SIZES(alltoallv_delivers_every_uneven_block_at_size, alltoallv_body, NULL)
AT_SIZES(gather_collects_every_block_at_every_root_at_size, rooted_body, (void *)0)
AT_SIZES(scatter_hands_out_every_block_from_every_root_at_size, rooted_body, (void *)1)

/* ---- bad arguments ---- */

static int bad_args_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg;
  size_t c[2] = {1, 1}, big[2] = {SIZE_MAX / 2, 1}, other[2] = {2, 2};
  int32_t a[4] = {0}, b[4] = {0};
  ftc_request_t *req = NULL;
#define REFUSED(call, text)                                                                   \
  do {                                                                                        \
    if ((call) != FTC_ERR_INVALID_ARGUMENT || !strstr(ftc_last_error(), text))                \
      return RANK_FAIL(rank, "%s: want a refusal saying \"%s\", got \"%s\"", #call, text,      \
                       ftc_last_error());                                                     \
  } while (0)
  REFUSED(ftc_allgatherv(a, b, NULL, NULL, FTC_I32, comm, 1000), "recvcounts is NULL");
  REFUSED(ftc_allgatherv(a, NULL, c, NULL, FTC_I32, comm, 1000), "recvbuf is NULL");
  REFUSED(ftc_allgatherv(a, b, big, NULL, FTC_I64, comm, 1000), "overflows the address space");
  REFUSED(ftc_iallgatherv(a, b, c, NULL, FTC_I32, comm, NULL), "req is NULL");
  REFUSED(ftc_alltoallv(a, c, NULL, a, c, NULL, FTC_I32, comm, 1000), "not in place");
  REFUSED(ftc_alltoallv(a, NULL, NULL, b, c, NULL, FTC_I32, comm, 1000), "sendcounts is NULL");
  REFUSED(ftc_alltoallv(a, c, NULL, b, other, NULL, FTC_I32, comm, 1000),
          "but recvcounts[");
  REFUSED(ftc_ialltoallv(a, c, NULL, b, c, NULL, (ftc_dtype_t)42, comm, &req), "dtype 42");
  REFUSED(ftc_gather(a, b, 1, FTC_I32, n, comm, 1000), "root 2 is out of range");
  REFUSED(ftc_gather(a, NULL, 1, FTC_I32, rank, comm, 1000), "recvbuf (on the root) is NULL");
  REFUSED(ftc_scatter(NULL, b, 1, FTC_I32, rank, comm, 1000), "sendbuf (on the root) is NULL");
  REFUSED(ftc_iscatter(a, NULL, 1, FTC_I32, 0, comm, &req), "recvbuf is NULL");
  REFUSED(ftc_igather(a, b, 1, FTC_I32, 0, NULL, &req), "comm is NULL");
#undef REFUSED
  /* Nothing was sent: the communicator still works. */
  size_t one[2] = {1, 1};
  int32_t mine = rank + 40, all[2] = {0};
  if (ftc_allgatherv(&mine, all, one, NULL, FTC_I32, comm, FTC_TIMEOUT_DEFAULT) != FTC_OK ||
      all[0] != 40 || all[1] != 41)
    return RANK_FAIL(rank, "allgatherv after the refusals: %s", ftc_last_error());
  return 0;
}

static void bad_arguments_are_refused_naming_what_to_fix(void **state) {
  (void)state;
  assert_int_equal(harness_run(2, bad_args_body, NULL, &small_opts), 0);
}

/* ---- names for the flight recorder ---- */

static char g_dump_dir[128];

/* How many times the file at path holds needle. */
static int file_has(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  int k = 0;
  for (const char *p = buf; (p = strstr(p, needle)) != NULL; p++) k++;
  return k;
}

static int names_body(ftc_comm_t *comm, int rank, int n, void *arg) {
  (void)arg, (void)n;
  size_t one[2] = {1, 1};
  int32_t mine = rank, all[2];
  char longname[80];
  memset(longname, 'x', 70), longname[70] = 0;
  if (ftc_comm_set_group_name(comm, "0", "default_pg") != FTC_OK ||
      ftc_comm_set_coll_name(comm, "nccl:all_gather") != FTC_OK)
    return RANK_FAIL(rank, "setting names: %s", ftc_last_error());
  if (ftc_allgatherv(&mine, all, one, NULL, FTC_I32, comm, FTC_TIMEOUT_DEFAULT) != FTC_OK)
    return RANK_FAIL(rank, "allgatherv: %s", ftc_last_error());
  if (ftc_comm_set_coll_name(comm, "a\"b") != FTC_ERR_INVALID_ARGUMENT ||
      !strstr(ftc_last_error(), "without control characters") ||
      ftc_comm_set_coll_name(comm, longname) != FTC_ERR_INVALID_ARGUMENT ||
      ftc_comm_set_coll_name(NULL, "x") != FTC_ERR_INVALID_ARGUMENT)
    return RANK_FAIL(rank, "a bad name was taken: %s", ftc_last_error());
  /* the name stays until changed; NULL clears it */
  if (ftc_barrier(comm, FTC_TIMEOUT_DEFAULT) != FTC_OK || ftc_comm_set_coll_name(comm, NULL) != FTC_OK ||
      ftc_barrier(comm, FTC_TIMEOUT_DEFAULT) != FTC_OK)
    return RANK_FAIL(rank, "barriers: %s", ftc_last_error());
  char path[512];
  if (ftc_comm_dump(comm, "names", path, sizeof(path)) != FTC_OK)
    return RANK_FAIL(rank, "dump: %s", ftc_last_error());
  static const char *const want[] = {
      "\"timeout_ns\",\"name\"]", "\"pg_name\":\"0\",\"pg_desc\":\"default_pg\"",
      "\"allgatherv\",\"i32\",2,4,", "\"nccl:all_gather\"]", "\"barrier\",\"none\"",
      ",\"\"]]"};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
    if (!file_has(path, want[i])) return RANK_FAIL(rank, "%s lacks %s", path, want[i]);
  /* the first barrier carries the name too; the second none */
  if (file_has(path, "\"nccl:all_gather\"]") != 2 || file_has(path, "\"barrier\",\"none\"") != 2)
    return RANK_FAIL(rank, "want the allgatherv and the first barrier named, the second not");
  return 0;
}

static void names_given_by_a_binding_are_in_the_dump(void **state) {
  (void)state;
  snprintf(g_dump_dir, sizeof(g_dump_dir), "/tmp/ftc-collv-names-%d", (int)getpid());
  setenv("FTCOMM_DUMP_DIR", g_dump_dir, 1);
  int failed = harness_run(2, names_body, NULL, &small_opts);
  unsetenv("FTCOMM_DUMP_DIR");
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dump_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dump_dir);
  assert_int_equal(failed, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      AT_SIZES_TESTS(allgatherv_places_uneven_blocks_at_their_displacements_at_size),
      AT_SIZES_TESTS(alltoallv_delivers_every_uneven_block_at_size),
      AT_SIZES_TESTS(gather_collects_every_block_at_every_root_at_size),
      AT_SIZES_TESTS(scatter_hands_out_every_block_from_every_root_at_size),
      cmocka_unit_test(bad_arguments_are_refused_naming_what_to_fix),
      cmocka_unit_test(names_given_by_a_binding_are_in_the_dump),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
