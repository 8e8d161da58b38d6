/*
 * mp_coll.c - one rank of a multi-process test under ftcomm-run: joins the
 * job through the real path (ftc_comm_create: coordinator, view, data
 * plane), then runs what its first argument names and exits 0 on success.
 *   all        every collective x dtype (x op for reductions) at a few
 *              counts, against the serial reference, blocking and async
 *   die        rank 1 exits after one allreduce without destroying its
 *              communicator; the others must see the failure (peer lost or
 *              revoked) within seconds and print "survivor saw <status>"
 *   diev       the last rank dies during allgatherv, then alltoallv,
 *              gather and scatter (6 ranks down to 2): each fails on the
 *              survivors, they recover, and the collective is right at the
 *              new size; rank 0 prints "a death during C: STATUS, recovered
 *              to N ranks"
 *   split      sub-communicators through a shrink (4 ranks, slot 3 dies in
 *              a child's collective): the parent recovers, each child is
 *              revoked until re-derived, a split after the shrink works;
 *              rank 0 prints "sub-communicators followed the parent from 4
 *              to 3 ranks"
 *   stall      rank 1 stops itself (SIGSTOP: alive, silent) after one allreduce,
 *              having written its pid to $MP_COLL_PIDFILE; the others' next
 *              allreduce (2 s) must fail (timeout, or revoked or peer lost once
 *              the coordinator dropped it): they print
 *              "survivor saw <status>" and SIGKILL it
 *   absent     slot 1 never joins; slot 0's ftc_comm_create must fail with
 *              FTC_ERR_TIMEOUT within FTCOMM_CONNECT_TIMEOUT_MS (+1 s) and
 *              print "create timed out after N ms"
 *   early      ftc_comm_create_begin, 300 ms of "initialization", then
 *              ftc_comm_create_finish (slot 1 first cancels one begun
 *              communicator and begins again: the slot is free again);
 *              bad arguments to the three calls are refused, naming what
 *              to pass; then an allreduce checks the job; prints
 *              "early join: rank R of N, waited W ms in finish"
 *   mismatch   the last rank broadcasts from root 1, the others from root 0:
 *              the ranks that compared the differing call fail it with
 *              FTC_ERR_MISMATCH, others with FTC_ERR_PEER_LOST where the
 *              failing ranks' shut came first, or complete it (their
 *              neighbours agreed) and fail their next call; each recovers with every
 *              member (nobody crashed) and an allreduce then gives the right
 *              sum; prints "mismatch: <status>, recovered to rank R of N: <error>"
 *   latency    prints the mean 8-byte allreduce latency (rank 0)
 *   sweep [MAX] prints "bytes us" rows of f32 sum allreduce from 8 B to MAX
 *              bytes (default 4 MiB; rank 0), for measuring the cutover
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/op.h"
#include "ftc_error.h"
#include "ftc_time.h"
#include "ftcomm.h"
#include "refdata.h"

#define CHECK(cond, ...)                                                \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "rank %d: ", rank);                               \
      fprintf(stderr, __VA_ARGS__);                                     \
      fprintf(stderr, " (%s)\n", ftc_last_error());                     \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

static int rank, size;

static void run_all(ftc_comm_t *comm) {
  const size_t counts[] = {0, 1, 13, 5000, 70001};
  /* NCCL has no bitwise reductions: there they must be refused, clearly. */
  char be[256] = "";
  ftc_comm_backend(comm, be, sizeof be);
  int nccl = !strncmp(be, "NCCL", 4) || !strncmp(be, "RCCL", 4);
  for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
    size_t count = counts[ci];
    for (int dt = 0; dt < FTC_DTYPE_COUNT; dt++) {
      size_t es = ftc_dtype_size((ftc_dtype_t)dt), nb = count * (size_t)size;
      char *a = malloc(nb * es + 1), *b = malloc(nb * es + 1), *w = malloc(nb * es + 1);
      for (int op = 0; op < FTC_OP_COUNT; op++) {
        if (!op_fits((ftc_dtype_t)dt, (ftc_op_t)op)) continue;
        if (nccl && (op == FTC_BAND || op == FTC_BOR || op == FTC_BXOR)) {
          ftc_status_t st = ftc_allreduce(a, b, count, (ftc_dtype_t)dt, (ftc_op_t)op, comm, FTC_TIMEOUT_DEFAULT);
          CHECK(st == FTC_ERR_NOT_SUPPORTED && strstr(ftc_last_error(), "no bitwise reductions"),
                "allreduce %s %s on NCCL gave %s, not a clear FTC_ERR_NOT_SUPPORTED", ftc_dtype_name(dt),
                ftc_op_name(op), ftc_strerror(st));
          continue;
        }
        int async = (op + dt) & 1;
        gen_fill((ftc_dtype_t)dt, (ftc_op_t)op, rank, a, count, 0);
        ref_fill((ftc_dtype_t)dt, (ftc_op_t)op, size, w, count, 0);
        ftc_status_t st;
        if (async) {
          ftc_request_t *req;
          st = ftc_iallreduce(a, a, count, (ftc_dtype_t)dt, (ftc_op_t)op, comm, &req);
          if (st == FTC_OK) st = ftc_wait(req, FTC_TIMEOUT_DEFAULT), ftc_request_free(req);
        } else {
          st = ftc_allreduce(a, b, count, (ftc_dtype_t)dt, (ftc_op_t)op, comm, FTC_TIMEOUT_DEFAULT);
          memcpy(a, b, count * es);
        }
        CHECK(st == FTC_OK, "allreduce %s %s %zu failed", ftc_dtype_name(dt), ftc_op_name(op), count);
        CHECK(compare("allreduce", rank, (ftc_dtype_t)dt, a, w, count) == 0, "allreduce mismatch");
        int root = (int)(ci + (size_t)op) % size;
        gen_fill((ftc_dtype_t)dt, (ftc_op_t)op, rank, a, count, 0);
        st = ftc_reduce(a, b, count, (ftc_dtype_t)dt, (ftc_op_t)op, root, comm, FTC_TIMEOUT_DEFAULT);
        CHECK(st == FTC_OK, "reduce failed");
        if (rank == root) CHECK(compare("reduce", rank, (ftc_dtype_t)dt, b, w, count) == 0, "reduce mismatch");
        gen_fill((ftc_dtype_t)dt, (ftc_op_t)op, rank, a, nb, 0);
        ref_fill((ftc_dtype_t)dt, (ftc_op_t)op, size, w, count, (size_t)rank * count);
        st = ftc_reduce_scatter(a, b, count, (ftc_dtype_t)dt, (ftc_op_t)op, comm, FTC_TIMEOUT_DEFAULT);
        CHECK(st == FTC_OK && compare("reduce_scatter", rank, (ftc_dtype_t)dt, b, w, count) == 0,
              "reduce_scatter");
      }
      int root = (int)ci % size;
      gen_fill((ftc_dtype_t)dt, FTC_SUM, root, w, count, 0);
      if (rank == root) memcpy(a, w, count * es);
      CHECK(ftc_broadcast(a, count, (ftc_dtype_t)dt, root, comm, FTC_TIMEOUT_DEFAULT) == FTC_OK &&
                compare("broadcast", rank, (ftc_dtype_t)dt, a, w, count) == 0, "broadcast");
      gen_fill((ftc_dtype_t)dt, FTC_SUM, rank, a, count, 0);
      for (int q = 0; q < size; q++) gen_fill((ftc_dtype_t)dt, FTC_SUM, q, w + (size_t)q * count * es, count, 0);
      CHECK(ftc_allgather(a, b, count, (ftc_dtype_t)dt, comm, FTC_TIMEOUT_DEFAULT) == FTC_OK &&
                compare("allgather", rank, (ftc_dtype_t)dt, b, w, nb) == 0, "allgather");
      gen_fill((ftc_dtype_t)dt, FTC_SUM, rank, a, nb, 0);
      for (int q = 0; q < size; q++)
        gen_fill((ftc_dtype_t)dt, FTC_SUM, q, w + (size_t)q * count * es, count, (size_t)rank * count);
      CHECK(ftc_alltoall(a, b, count, (ftc_dtype_t)dt, comm, FTC_TIMEOUT_DEFAULT) == FTC_OK &&
                compare("alltoall", rank, (ftc_dtype_t)dt, b, w, nb) == 0, "alltoall");
      free(a), free(b), free(w);
    }
  }
  if (size > 1) {
    int32_t token = rank, got = -1;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    if (rank % 2 == 0) {
      CHECK(ftc_send(&token, 1, FTC_I32, right, comm, FTC_TIMEOUT_DEFAULT) == FTC_OK, "send");
      CHECK(ftc_recv(&got, 1, FTC_I32, left, comm, FTC_TIMEOUT_DEFAULT) == FTC_OK, "recv");
    } else {
      CHECK(ftc_recv(&got, 1, FTC_I32, left, comm, FTC_TIMEOUT_DEFAULT) == FTC_OK, "recv");
      CHECK(ftc_send(&token, 1, FTC_I32, right, comm, FTC_TIMEOUT_DEFAULT) == FTC_OK, "send");
    }
    CHECK(got == left, "received %d from rank %d", got, left);
  }
  CHECK(ftc_barrier(comm, FTC_TIMEOUT_DEFAULT) == FTC_OK, "barrier");
  if (rank == 0) printf("all collectives matched the reference at %d ranks\n", size);
}

static int run_die(ftc_comm_t *comm) {
  float x = 1;
  CHECK(ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 5000) == FTC_OK, "first allreduce");
  if (rank == 1) {
    usleep(100 * 1000);
    _exit(3);
  }
  int64_t t0 = ftc__now_ns();
  ftc_status_t st = FTC_OK;
  for (int i = 0; i < 3 && st == FTC_OK; i++) st = ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 5000);
  CHECK(st == FTC_ERR_PEER_LOST || st == FTC_ERR_REVOKED, "survivor got %s", ftc_strerror(st));
  printf("survivor saw %s after %lld ms: %s\n", ftc_strerror(st),
         (long long)((ftc__now_ns() - t0) / 1000000), ftc_last_error());
  fflush(stdout);
  return 0;
}

/* One of the new collectives (k: 0 allgatherv, 1 alltoallv, 2 gather to
 * rank 0, 3 scatter from rank 0) with uneven counts at the current size:
 * its status, or FTC_ERR_INTERNAL with a message when the data is wrong. */
static const char *const vnames[4] = {"allgatherv", "alltoallv", "gather", "scatter"};
static ftc_status_t vcoll(ftc_comm_t *comm, int k) {
  int n = size, me = rank;
  size_t sc[64] = {0}, rc[64] = {0};
  int32_t in[256] = {0}, out[256];
  ftc_status_t st;
  for (int i = 0; i < 256; i++) out[i] = -1;
  if (k == 0) {
    for (int q = 0; q < n; q++) rc[q] = (size_t)(q % 3); /* rank 0 gives none */
    size_t at = 0;
    for (int i = 0; i < (int)rc[me]; i++) in[i] = me * 10 + i;
    st = ftc_allgatherv(in, out, rc, NULL, FTC_I32, comm, 5000);
    for (int q = 0; st == FTC_OK && q < n; at += rc[q], q++)
      for (size_t i = 0; i < rc[q]; i++)
        if (out[at + i] != q * 10 + (int)i) st = ftc__error(FTC_ERR_INTERNAL, "allgatherv: wrong data");
    return st;
  }
  if (k == 1) {
    size_t so = 0, at = 0;
    for (int q = 0; q < n; q++) {
      sc[q] = (size_t)((me + q) % 3), rc[q] = (size_t)((q + me) % 3);
      for (size_t i = 0; i < sc[q]; i++) in[so + i] = me * 100 + q;
      so += sc[q];
    }
    st = ftc_alltoallv(in, sc, NULL, out, rc, NULL, FTC_I32, comm, 5000);
    for (int q = 0; st == FTC_OK && q < n; at += rc[q], q++)
      for (size_t i = 0; i < rc[q]; i++)
        if (out[at + i] != q * 100 + me) st = ftc__error(FTC_ERR_INTERNAL, "alltoallv: wrong data");
    return st;
  }
  if (k == 2) {
    for (int i = 0; i < 3; i++) in[i] = me * 7 + i;
    st = ftc_gather(in, out, 3, FTC_I32, 0, comm, 5000);
    for (int i = 0; st == FTC_OK && me == 0 && i < 3 * n; i++)
      if (out[i] != (i / 3) * 7 + i % 3) st = ftc__error(FTC_ERR_INTERNAL, "gather: wrong data");
    return st;
  }
  for (int i = 0; i < 3 * n; i++) in[i] = 500 + i;
  st = ftc_scatter(in, out, 3, FTC_I32, 0, comm, 5000);
  for (int i = 0; st == FTC_OK && i < 3; i++)
    if (out[i] != 500 + 3 * me + i) st = ftc__error(FTC_ERR_INTERNAL, "scatter: wrong data");
  return st;
}

/* The last rank dies while the others run one of the new collectives,
 * once for each (6 ranks down to 2, --min-size 2): the collective (or the
 * barrier after it, for a rank that got its data before the death) fails
 * with the usual status, ftc_comm_recover shrinks, and the same collective
 * is right at the new size. */
static int run_diev(ftc_comm_t *comm) {
  for (int k = 0; k < 4; k++) {
    CHECK(vcoll(comm, k) == FTC_OK, "%s at %d ranks", vnames[k], size);
    CHECK(ftc_barrier(comm, 5000) == FTC_OK, "barrier before the death");
    if (rank == size - 1) {
      usleep(100 * 1000); /* the others are in the collective */
      _exit(4);
    }
    int was = size;
    ftc_status_t st = vcoll(comm, k);
    CHECK(st != FTC_ERR_INTERNAL, "%s", ftc_last_error());
    if (st == FTC_OK) st = ftc_barrier(comm, 5000);
    CHECK(st == FTC_ERR_PEER_LOST || st == FTC_ERR_REVOKED || st == FTC_ERR_TIMEOUT,
          "a death during %s gave %s", vnames[k], ftc_strerror(st));
    ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;
    CHECK(ftc_comm_recover(comm, FTC_TIMEOUT_DEFAULT, &info) == FTC_OK, "recover");
    rank = info.rank, size = info.size;
    CHECK(size == was - 1, "recovered to %d ranks from %d", size, was);
    CHECK(vcoll(comm, k) == FTC_OK, "%s after the recovery", vnames[k]);
    if (rank == 0) printf("a death during %s: %s, recovered to %d ranks\n", vnames[k], ftc_strerror(st), size);
    fflush(stdout);
  }
  return 0;
}

/* The slots of comm's ranks, gathered in its rank order. */
static void slots_of(ftc_comm_t *c, int32_t *out) {
  int32_t mine = atoi(getenv("FTCOMM_SLOT"));
  CHECK(ftc_allgather(&mine, out, 1, FTC_I32, c, 5000) == FTC_OK, "allgather of slots");
}

/* Sub-communicators through a shrink (4 ranks, --min-size 2): children by
 * parity and a list child of every rank in reverse; slot 3 dies while the
 * odd child waits for it. The survivors recover the parent, the children
 * are revoked until each is re-derived (the odd one to slot 1 alone,
 * naming slot 3 as lost), and a split after the shrink works too. */
static int run_split(ftc_comm_t *comm) {
  ftc_comm_t *par = NULL, *rev = NULL, *again = NULL;
  int list[4] = {3, 2, 1, 0};
  int slot = atoi(getenv("FTCOMM_SLOT"));
  CHECK(ftc_comm_split(comm, rank % 2, rank, 5000, &par) == FTC_OK, "split by parity");
  CHECK(ftc_comm_split_ranks(comm, list, 4, 5000, &rev) == FTC_OK, "split by list");
  CHECK(ftc_barrier(comm, 5000) == FTC_OK, "barrier");
  if (slot == 3) {
    usleep(100 * 1000);
    _exit(5);
  }
  double x[64] = {0};
  ftc_status_t st = ftc_allreduce(x, x, 64, FTC_F64, FTC_SUM, par, 5000);
  /* the odd child sees the end itself (peer lost), or another child or the
   * parent saw it first and revoked it; the even one may complete */
  CHECK(st == FTC_ERR_PEER_LOST || st == FTC_ERR_REVOKED || (slot % 2 == 0 && st == FTC_OK),
        "the %s child with a dead peer gave %s", slot % 2 ? "odd" : "even", ftc_strerror(st));
  for (int i = 0; i < 100 && st != FTC_ERR_PEER_LOST && st != FTC_ERR_REVOKED; i++)
    st = ftc_barrier(comm, 5000);
  CHECK(st == FTC_ERR_PEER_LOST || st == FTC_ERR_REVOKED, "the parent after the death: %s", ftc_strerror(st));
  ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;
  CHECK(ftc_comm_recover(comm, FTC_TIMEOUT_DEFAULT, &info) == FTC_OK && info.size == 3, "recover the parent");
  rank = info.rank, size = info.size;
  CHECK(ftc_allreduce(x, x, 64, FTC_F64, FTC_SUM, rev, 5000) == FTC_ERR_REVOKED, "a child before it is re-derived");
  CHECK(ftc_comm_recover(par, FTC_TIMEOUT_DEFAULT, &info) == FTC_OK, "re-derive the parity child");
  int want = slot % 2 ? 1 : 2;
  CHECK(info.changed == 1 && info.size == want && info.lost == (slot % 2), "parity child: size %d lost %d",
        info.size, info.lost);
  if (slot % 2) {
    int pr = -1, sl = -1;
    ftc_drop_reason_t why;
    CHECK(ftc_comm_lost(par, 0, &pr, &sl, &why) == FTC_OK && pr == 1 && sl == 3 && why == FTC_DROP_CRASHED,
          "lost: rank %d slot %d %s", pr, sl, ftc_drop_reason_name(why));
  }
  int32_t got[4];
  slots_of(par, got);
  for (int i = 0; i < want; i++) CHECK(got[i] == 2 * i + slot % 2, "parity child rank %d is slot %d", i, got[i]);
  CHECK(ftc_comm_recover(rev, FTC_TIMEOUT_DEFAULT, &info) == FTC_OK && info.size == 3 && info.lost == 1,
        "re-derive the list child");
  slots_of(rev, got);
  CHECK(got[0] == 2 && got[1] == 1 && got[2] == 0, "list child holds slots %d %d %d", got[0], got[1], got[2]);
  int pr = -1;
  CHECK(ftc_comm_parent_rank(rev, 0, &pr) == FTC_OK && pr == 2, "the list child's rank 0 is parent rank %d", pr);
  CHECK(ftc_comm_split(comm, 0, -rank, 5000, &again) == FTC_OK, "split after the shrink");
  slots_of(again, got);
  CHECK(got[0] == 2 && got[2] == 0, "the new child holds slots %d %d %d", got[0], got[1], got[2]);
  ftc_comm_destroy(again);
  ftc_comm_destroy(rev);
  ftc_comm_destroy(par);
  CHECK(ftc_barrier(comm, 5000) == FTC_OK, "the parent at the end");
  if (rank == 0) printf("sub-communicators followed the parent from 4 to 3 ranks\n");
  fflush(stdout);
  return 0;
}

static int run_stall(ftc_comm_t *comm) {
  float x = 1;
  const char *pidfile = getenv("MP_COLL_PIDFILE");
  CHECK(pidfile && *pidfile, "MP_COLL_PIDFILE is not set");
  CHECK(ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 5000) == FTC_OK, "first allreduce");
  if (rank == 1) {
    FILE *f = fopen(pidfile, "w");
    CHECK(f != NULL, "cannot write %s", pidfile);
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    raise(SIGSTOP);
    _exit(3); /* never: the survivors kill it */
  }
  int64_t t0 = ftc__now_ns();
  ftc_status_t st = ftc_allreduce(&x, &x, 1, FTC_F32, FTC_SUM, comm, 2000);
  /* the first to time out reports; once the coordinator drops rank 1,
   * ftcomm-run kills it and a survivor still waiting may see its sockets close */
  CHECK(st == FTC_ERR_TIMEOUT || st == FTC_ERR_REVOKED || st == FTC_ERR_PEER_LOST, "survivor got %s",
        ftc_strerror(st));
  printf("survivor saw %s after %lld ms: %s\n", ftc_strerror(st),
         (long long)((ftc__now_ns() - t0) / 1000000), ftc_last_error());
  fflush(stdout);
  FILE *f = fopen(pidfile, "r");
  int pid = 0;
  if (f && fscanf(f, "%d", &pid) == 1 && pid > 0) kill(pid, SIGKILL);
  if (f) fclose(f);
  return 0;
}

static void run_mismatch(ftc_comm_t *comm) {
  float b[64] = {0};
  int root = rank == size - 1 ? 1 : 0;
  if (rank == root) b[0] = 42;
  ftc_status_t st = ftc_broadcast(b, 64, FTC_F32, root, comm, 10000);
  char why[512];
  snprintf(why, sizeof(why), "%s", ftc_last_error());
  if (st == FTC_OK) { /* its neighbours' calls equal its own: its next call fails */
    CHECK(size > 2 && rank != size - 1 && b[0] == 42, "broadcast with another root got OK (%g)", b[0]);
    int64_t v = 1;
    st = ftc_allreduce(&v, &v, 1, FTC_I64, FTC_SUM, comm, 10000);
    snprintf(why, sizeof(why), "%s", ftc_last_error());
  }
  CHECK(st == FTC_ERR_MISMATCH || st == FTC_ERR_PEER_LOST || st == FTC_ERR_REVOKED,
        "broadcast with another root got %s: %s", ftc_strerror(st), why);
  ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;
  ftc_status_t rs = ftc_comm_recover(comm, 30000, &info);
  CHECK(rs == FTC_OK, "recover: %s: %s", ftc_strerror(rs), ftc_last_error());
  CHECK(info.size == size, "recovered to %d ranks of %d: a mismatch must drop nobody", info.size, size);
  int64_t v = info.rank + 1;
  rs = ftc_allreduce(&v, &v, 1, FTC_I64, FTC_SUM, comm, 10000);
  CHECK(rs == FTC_OK && v == (int64_t)size * (size + 1) / 2, "allreduce after recovery: %s, sum %lld",
        ftc_strerror(rs), (long long)v);
  printf("mismatch: %s, recovered to rank %d of %d: %s\n", ftc_strerror(st), info.rank, info.size, why);
  fflush(stdout);
}

static void run_latency(ftc_comm_t *comm) {
  double x = 1;
  for (int i = 0; i < 200; i++) ftc_allreduce(&x, &x, 1, FTC_F64, FTC_SUM, comm, 5000);
  const int iters = 2000;
  int64_t t0 = ftc__now_ns();
  for (int i = 0; i < iters; i++)
    CHECK(ftc_allreduce(&x, &x, 1, FTC_F64, FTC_SUM, comm, 5000) == FTC_OK, "allreduce");
  double us = (double)(ftc__now_ns() - t0) / iters / 1000.0;
  if (rank == 0) printf("8-byte allreduce: %.2f us mean over %d iterations at %d ranks\n", us, iters, size);
}

static void run_sweep(ftc_comm_t *comm, size_t max) {
  float *buf = calloc(max / sizeof(float), sizeof(float));
  for (size_t bytes = 8; bytes <= max; bytes *= 2) {
    size_t count = bytes / sizeof(float);
    int iters = bytes <= 65536 ? 300 : (int)(20u * 1048576u / bytes) + 5;
    for (int i = 0; i < 10; i++) ftc_allreduce(buf, buf, count, FTC_F32, FTC_SUM, comm, 30000);
    CHECK(ftc_barrier(comm, 30000) == FTC_OK, "barrier");
    int64_t t0 = ftc__now_ns();
    for (int i = 0; i < iters; i++)
      CHECK(ftc_allreduce(buf, buf, count, FTC_F32, FTC_SUM, comm, 30000) == FTC_OK, "allreduce");
    double us = (double)(ftc__now_ns() - t0) / iters / 1000.0;
    if (rank == 0) printf("%zu %.2f\n", bytes, us);
  }
  free(buf);
}

static int run_early(void) {
  ftc_comm_pending_t *p = NULL;
  ftc_comm_t *comm = NULL;
  const char *slot = getenv("FTCOMM_SLOT");
  CHECK(ftc_comm_create_begin(NULL, NULL) == FTC_ERR_INVALID_ARGUMENT &&
            strstr(ftc_last_error(), "pass &pending"),
        "begin with a NULL output");
  CHECK(ftc_comm_create_finish(NULL, &comm) == FTC_ERR_INVALID_ARGUMENT && !comm &&
            strstr(ftc_last_error(), "ftc_comm_create_begin"),
        "finish with a NULL pending handle");
  ftc_comm_create_cancel(NULL);
  if (slot && atoi(slot) == 1) {
    /* Begun and cancelled: the coordinator frees the slot for the next. */
    ftc_status_t st = ftc_comm_create_begin(NULL, &p);
    CHECK(st == FTC_OK, "begin: %s", ftc_strerror(st));
    usleep(100000);
    ftc_comm_create_cancel(p); /* leaves: the slot is free at once */
  }
  ftc_status_t st = ftc_comm_create_begin(NULL, &p);
  CHECK(st == FTC_OK, "begin: %s", ftc_strerror(st));
  usleep(300000); /* the application's own start; the session heartbeats */
  int64_t t0 = ftc__now_ns();
  st = ftc_comm_create_finish(p, &comm);
  CHECK(st == FTC_OK, "finish: %s", ftc_strerror(st));
  long long ms = (long long)((ftc__now_ns() - t0) / 1000000);
  ftc_comm_rank(comm, &rank);
  ftc_comm_size(comm, &size);
  int64_t v = rank + 1;
  st = ftc_allreduce(&v, &v, 1, FTC_I64, FTC_SUM, comm, 10000);
  CHECK(st == FTC_OK && v == (int64_t)size * (size + 1) / 2, "allreduce: %s, sum %lld",
        ftc_strerror(st), (long long)v);
  printf("early join: rank %d of %d, waited %lld ms in finish\n", rank, size, ms);
  ftc_comm_destroy(comm);
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "all";
  ftc_comm_t *comm;
  rank = -1;
  if (strcmp(mode, "absent") == 0) {
    const char *slot = getenv("FTCOMM_SLOT"), *ct = getenv("FTCOMM_CONNECT_TIMEOUT_MS");
    if (slot && atoi(slot) == 1) {
      sleep(4);
      return 0;
    }
    int64_t t0 = ftc__now_ns();
    ftc_status_t st = ftc_comm_create(NULL, &comm);
    long long ms = (long long)((ftc__now_ns() - t0) / 1000000);
    if (st != FTC_ERR_TIMEOUT || !ct || ms > atoll(ct) + 1000) {
      fprintf(stderr, "create gave %s after %lld ms: %s\n", ftc_strerror(st), ms, ftc_last_error());
      return 1;
    }
    printf("create timed out after %lld ms: %s\n", ms, ftc_last_error());
    return 0;
  }
  if (strcmp(mode, "early") == 0) return run_early();
  ftc_status_t st = ftc_comm_create(NULL, &comm);
  if (st != FTC_OK) {
    fprintf(stderr, "ftc_comm_create: %s: %s\n", ftc_strerror(st), ftc_last_error());
    return 1;
  }
  ftc_comm_rank(comm, &rank);
  ftc_comm_size(comm, &size);
  const char *ws = getenv("FTCOMM_WORLD_SIZE");
  CHECK(ws && atoi(ws) == size, "size %d, FTCOMM_WORLD_SIZE %s", size, ws ? ws : "unset");
  if (strcmp(mode, "all") == 0)
    run_all(comm);
  else if (strcmp(mode, "die") == 0)
    run_die(comm);
  else if (strcmp(mode, "stall") == 0)
    run_stall(comm);
  else if (strcmp(mode, "diev") == 0)
    run_diev(comm);
  else if (strcmp(mode, "split") == 0)
    run_split(comm);
  else if (strcmp(mode, "mismatch") == 0)
    run_mismatch(comm);
  else if (strcmp(mode, "latency") == 0)
    run_latency(comm);
  else if (strcmp(mode, "sweep") == 0)
    run_sweep(comm, argc > 2 ? (size_t)strtoull(argv[2], NULL, 0) : (4u << 20));
  else
    CHECK(0, "unknown mode %s", mode);
  ftc_comm_destroy(comm);
  return 0;
}
