/*
 * coll.c - the collective entry points of the public API: argument checks
 * (each failure says what to fix), then one ftc__op_t handed to the engine,
 * blocking (ftc__submit_blocking) or asynchronous (ftc__submit_async).
 */
#include <stdint.h>

#include "core/comm.h"
#include "core/reduce.h"
#include "ftc_error.h"

typedef struct check {
  const char *name;
  ftc_comm_t *comm;
  int size, rank;
} check_t;

static ftc_status_t check_comm(check_t *c, const char *name, ftc_comm_t *comm) {
  c->name = name;
  c->comm = comm;
  if (!comm) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: comm is NULL; create one with ftc_comm_create", name);
  c->size = __atomic_load_n(&comm->size, __ATOMIC_ACQUIRE);
  c->rank = __atomic_load_n(&comm->rank, __ATOMIC_ACQUIRE);
  return FTC_OK;
}

static ftc_status_t check_dtype(const check_t *c, ftc_dtype_t dtype) {
  if ((int)dtype < 0 || dtype >= FTC_DTYPE_COUNT)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: dtype %d is not an ftc_dtype_t; use FTC_F32 .. FTC_U8",
                      c->name, (int)dtype);
  return FTC_OK;
}

static ftc_status_t check_op(const check_t *c, ftc_op_t op, ftc_dtype_t dtype) {
  if ((int)op < 0 || op >= FTC_OP_COUNT)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: op %d is not an ftc_op_t; use FTC_SUM .. FTC_BXOR",
                      c->name, (int)op);
  if (ftc__op_is_bitwise(op) && !ftc__dtype_is_integer(dtype))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "%s: op %s is bitwise and takes an integer dtype (i32, i64, u8), not %s",
                      c->name, ftc_op_name(op), ftc_dtype_name(dtype));
  if (ftc__op_is_bitwise(op) && c->comm->be && c->comm->be->no_bitwise)
    return ftc__error(FTC_ERR_NOT_SUPPORTED,
                      "%s: op %s on the %s backend: %s; run this communicator on FTCOMM_BACKEND=tcp, "
                      "or for 0/1 flags use FTC_MIN (and) or FTC_MAX (or)",
                      c->name, ftc_op_name(op), c->comm->be->name, c->comm->be->no_bitwise);
  return FTC_OK;
}

/* count elements of dtype, times `mult` buffers' worth, must fit in size_t. */
static ftc_status_t check_count(const check_t *c, size_t count, ftc_dtype_t dtype, size_t mult) {
  size_t es = ftc_dtype_size(dtype);
  if (count && (count > SIZE_MAX / es / mult))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: count %zu of %s (x%zu) overflows the address space",
                      c->name, count, ftc_dtype_name(dtype), mult);
  return FTC_OK;
}

static ftc_status_t check_buf(const check_t *c, const void *buf, size_t count, const char *what) {
  if (!buf && count)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: %s is NULL with count %zu; pass a buffer (NULL only with count 0)",
                      c->name, what, count);
  return FTC_OK;
}

static ftc_status_t check_rank(const check_t *c, int r, const char *what) {
  if (r < 0 || r >= c->size)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: %s %d is out of range; the communicator has ranks 0 .. %d",
                      c->name, what, r, c->size - 1);
  return FTC_OK;
}

ftc_status_t ftc__check_timeout(const char *fn, int timeout_ms) {
  if (timeout_ms == 0)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "%s: timeout_ms 0 would fail the operation, and the epoch with it, unless it had "
                      "already completed; use milliseconds > 0, FTC_TIMEOUT_DEFAULT or FTC_TIMEOUT_INFINITE "
                      "(ftc_test polls a request)",
                      fn);
  if (timeout_ms < FTC_TIMEOUT_INFINITE)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "%s: timeout_ms %d; use milliseconds > 0, FTC_TIMEOUT_DEFAULT or FTC_TIMEOUT_INFINITE", fn,
                      timeout_ms);
  return FTC_OK;
}

static ftc_status_t check_timeout(const check_t *c, int timeout_ms) { return ftc__check_timeout(c->name, timeout_ms); }

static ftc_status_t check_req(const check_t *c, ftc_request_t **req) {
  if (!req) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: req is NULL; pass &request", c->name);
  *req = NULL;
  return FTC_OK;
}

static ftc_status_t prep_allreduce(check_t *c, const char *name, const void *sendbuf, void *recvbuf,
                                   size_t count, ftc_dtype_t dtype, ftc_op_t op, ftc_comm_t *comm,
                                   ftc__op_t *o) {
  ftc_status_t st;
  if ((st = check_comm(c, name, comm)) != FTC_OK) return st;
  if ((st = check_dtype(c, dtype)) != FTC_OK) return st;
  if ((st = check_op(c, op, dtype)) != FTC_OK) return st;
  if ((st = check_count(c, count, dtype, 1)) != FTC_OK) return st;
  if ((st = check_buf(c, sendbuf, count, "sendbuf")) != FTC_OK) return st;
  if ((st = check_buf(c, recvbuf, count, "recvbuf")) != FTC_OK) return st;
  *o = (ftc__op_t){FTC__COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, -1,
                   (ftc_algo_t)__atomic_load_n(&comm->allreduce_algo, __ATOMIC_RELAXED)};
  return FTC_OK;
}

static ftc_status_t prep_broadcast(check_t *c, const char *name, void *buf, size_t count,
                                   ftc_dtype_t dtype, int root, ftc_comm_t *comm, ftc__op_t *o) {
  ftc_status_t st;
  if ((st = check_comm(c, name, comm)) != FTC_OK) return st;
  if ((st = check_dtype(c, dtype)) != FTC_OK) return st;
  if ((st = check_count(c, count, dtype, 1)) != FTC_OK) return st;
  if ((st = check_buf(c, buf, count, "buf")) != FTC_OK) return st;
  if ((st = check_rank(c, root, "root")) != FTC_OK) return st;
  *o = (ftc__op_t){FTC__COLL_BROADCAST, buf, buf, count, dtype, FTC_SUM, root};
  return FTC_OK;
}

static ftc_status_t prep_reduce(check_t *c, const char *name, const void *sendbuf, void *recvbuf,
                                size_t count, ftc_dtype_t dtype, ftc_op_t op, int root,
                                ftc_comm_t *comm, ftc__op_t *o) {
  ftc_status_t st;
  if ((st = check_comm(c, name, comm)) != FTC_OK) return st;
  if ((st = check_dtype(c, dtype)) != FTC_OK) return st;
  if ((st = check_op(c, op, dtype)) != FTC_OK) return st;
  if ((st = check_count(c, count, dtype, 1)) != FTC_OK) return st;
  if ((st = check_rank(c, root, "root")) != FTC_OK) return st;
  if ((st = check_buf(c, sendbuf, count, "sendbuf")) != FTC_OK) return st;
  if (c->rank == root && (st = check_buf(c, recvbuf, count, "recvbuf (on the root)")) != FTC_OK)
    return st;
  *o = (ftc__op_t){FTC__COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root};
  return FTC_OK;
}

static ftc_status_t prep_allgather(check_t *c, const char *name, const void *sendbuf, void *recvbuf,
                                   size_t count, ftc_dtype_t dtype, ftc_comm_t *comm, ftc__op_t *o) {
  ftc_status_t st;
  if ((st = check_comm(c, name, comm)) != FTC_OK) return st;
  if ((st = check_dtype(c, dtype)) != FTC_OK) return st;
  if ((st = check_count(c, count, dtype, (size_t)c->size)) != FTC_OK) return st;
  if ((st = check_buf(c, sendbuf, count, "sendbuf")) != FTC_OK) return st;
  if ((st = check_buf(c, recvbuf, count, "recvbuf")) != FTC_OK) return st;
  *o = (ftc__op_t){FTC__COLL_ALLGATHER, sendbuf, recvbuf, count, dtype, FTC_SUM, -1};
  return FTC_OK;
}

static ftc_status_t prep_reduce_scatter(check_t *c, const char *name, const void *sendbuf,
                                        void *recvbuf, size_t count, ftc_dtype_t dtype, ftc_op_t op,
                                        ftc_comm_t *comm, ftc__op_t *o) {
  ftc_status_t st;
  if ((st = check_comm(c, name, comm)) != FTC_OK) return st;
  if ((st = check_dtype(c, dtype)) != FTC_OK) return st;
  if ((st = check_op(c, op, dtype)) != FTC_OK) return st;
  if ((st = check_count(c, count, dtype, (size_t)c->size)) != FTC_OK) return st;
  if ((st = check_buf(c, sendbuf, count, "sendbuf")) != FTC_OK) return st;
  if ((st = check_buf(c, recvbuf, count, "recvbuf")) != FTC_OK) return st;
  *o = (ftc__op_t){FTC__COLL_REDUCE_SCATTER, sendbuf, recvbuf, count, dtype, op, -1};
  return FTC_OK;
}

static ftc_status_t prep_alltoall(check_t *c, const char *name, const void *sendbuf, void *recvbuf,
                                  size_t count, ftc_dtype_t dtype, ftc_comm_t *comm, ftc__op_t *o) {
  ftc_status_t st;
  if ((st = check_comm(c, name, comm)) != FTC_OK) return st;
  if ((st = check_dtype(c, dtype)) != FTC_OK) return st;
  if ((st = check_count(c, count, dtype, (size_t)c->size)) != FTC_OK) return st;
  if ((st = check_buf(c, sendbuf, count, "sendbuf")) != FTC_OK) return st;
  if ((st = check_buf(c, recvbuf, count, "recvbuf")) != FTC_OK) return st;
  *o = (ftc__op_t){FTC__COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, FTC_SUM, -1};
  return FTC_OK;
}

/* counts[0 .. size-1] (and displs, when not NULL: a packed layout
 * otherwise) of `what`, each block's end in bytes within the address
 * space; *total: the sum of the counts. */
static ftc_status_t check_vector(const check_t *c, const size_t *counts, const size_t *displs,
                                 ftc_dtype_t dtype, const char *what, const char *dwhat,
                                 size_t *total) {
  size_t es = ftc_dtype_size(dtype), sum = 0, lim = SIZE_MAX / es;
  if (!counts)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: %s is NULL; pass one count per rank (%d)",
                      c->name, what, c->size);
  for (int q = 0; q < c->size; q++) {
    size_t d = displs ? displs[q] : sum;
    if (counts[q] > lim - sum || (displs && (d > lim || counts[q] > lim - d)))
      return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                        "%s: %s[%d] = %zu at %s %zu overflows the address space", c->name, what,
                        q, counts[q], dwhat, d);
    sum += counts[q];
  }
  *total = sum;
  return FTC_OK;
}

static ftc_status_t prep_allgatherv(check_t *c, const char *name, const void *sendbuf,
                                    void *recvbuf, const size_t *recvcounts, const size_t *displs,
                                    ftc_dtype_t dtype, ftc_comm_t *comm, ftc__op_t *o) {
  ftc_status_t st;
  size_t total;
  if ((st = check_comm(c, name, comm)) != FTC_OK) return st;
  if ((st = check_dtype(c, dtype)) != FTC_OK) return st;
  if ((st = check_vector(c, recvcounts, displs, dtype, "recvcounts", "displs", &total)) != FTC_OK)
    return st;
  if ((st = check_buf(c, sendbuf, recvcounts[c->rank], "sendbuf")) != FTC_OK) return st;
  if ((st = check_buf(c, recvbuf, total, "recvbuf")) != FTC_OK) return st;
  *o = (ftc__op_t){FTC__COLL_ALLGATHERV, sendbuf, recvbuf, total, dtype, FTC_SUM, -1};
  o->rcounts = recvcounts, o->rdispls = displs, o->nranks = c->size;
  return FTC_OK;
}

static ftc_status_t prep_alltoallv(check_t *c, const char *name, const void *sendbuf,
                                   const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                   const size_t *recvcounts, const size_t *rdispls,
                                   ftc_dtype_t dtype, ftc_comm_t *comm, ftc__op_t *o) {
  ftc_status_t st;
  size_t stotal, rtotal;
  if ((st = check_comm(c, name, comm)) != FTC_OK) return st;
  if ((st = check_dtype(c, dtype)) != FTC_OK) return st;
  if ((st = check_vector(c, sendcounts, sdispls, dtype, "sendcounts", "sdispls", &stotal)) != FTC_OK)
    return st;
  if ((st = check_vector(c, recvcounts, rdispls, dtype, "recvcounts", "rdispls", &rtotal)) != FTC_OK)
    return st;
  if ((st = check_buf(c, sendbuf, stotal, "sendbuf")) != FTC_OK) return st;
  if ((st = check_buf(c, recvbuf, rtotal, "recvbuf")) != FTC_OK) return st;
  if (sendcounts[c->rank] != recvcounts[c->rank])
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "%s: sendcounts[%d] = %zu but recvcounts[%d] = %zu; what this rank sends "
                      "itself is what it receives from itself",
                      name, c->rank, sendcounts[c->rank], c->rank, recvcounts[c->rank]);
  if (sendbuf && sendbuf == (const void *)recvbuf && stotal && rtotal)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "%s: sendbuf is recvbuf; alltoallv is not in place: pass separate buffers",
                      name);
  *o = (ftc__op_t){FTC__COLL_ALLTOALLV, sendbuf, recvbuf, stotal, dtype, FTC_SUM, -1};
  o->scounts = sendcounts, o->sdispls = sdispls, o->rcounts = recvcounts, o->rdispls = rdispls;
  o->nranks = c->size;
  return FTC_OK;
}

/* gather (coll FTC__COLL_GATHER) or scatter: root's buffer holds size * count. */
static ftc_status_t prep_rooted(check_t *c, const char *name, ftc__coll_t coll,
                                const void *sendbuf, void *recvbuf, size_t count,
                                ftc_dtype_t dtype, int root, ftc_comm_t *comm, ftc__op_t *o) {
  ftc_status_t st;
  int gather = coll == FTC__COLL_GATHER;
  if ((st = check_comm(c, name, comm)) != FTC_OK) return st;
  if ((st = check_dtype(c, dtype)) != FTC_OK) return st;
  if ((st = check_count(c, count, dtype, (size_t)c->size)) != FTC_OK) return st;
  if ((st = check_rank(c, root, "root")) != FTC_OK) return st;
  if (gather || c->rank == root)
    if ((st = check_buf(c, sendbuf, count, gather ? "sendbuf" : "sendbuf (on the root)")) != FTC_OK)
      return st;
  if (!gather || c->rank == root)
    if ((st = check_buf(c, recvbuf, count, gather ? "recvbuf (on the root)" : "recvbuf")) != FTC_OK)
      return st;
  *o = (ftc__op_t){coll, sendbuf, recvbuf, count, dtype, FTC_SUM, root};
  return FTC_OK;
}

static ftc_status_t prep_p2p(check_t *c, const char *name, ftc__coll_t kind, const void *buf,
                             size_t count, ftc_dtype_t dtype, int peer, ftc_comm_t *comm,
                             ftc__op_t *o) {
  ftc_status_t st;
  if ((st = check_comm(c, name, comm)) != FTC_OK) return st;
  if ((st = check_dtype(c, dtype)) != FTC_OK) return st;
  if ((st = check_count(c, count, dtype, 1)) != FTC_OK) return st;
  if ((st = check_buf(c, buf, count, "buf")) != FTC_OK) return st;
  if ((st = check_rank(c, peer, "peer")) != FTC_OK) return st;
  if (peer == c->rank)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: peer %d is this rank; send and receive need another rank",
                      name, peer);
  *o = (ftc__op_t){kind, buf, (void *)buf, count, dtype, FTC_SUM, peer};
  return FTC_OK;
}

ftc_status_t ftc_allreduce(const void *sendbuf, void *recvbuf, size_t count, ftc_dtype_t dtype,
                           ftc_op_t op, ftc_comm_t *comm, int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_allreduce(&c, "ftc_allreduce", sendbuf, recvbuf, count, dtype, op, comm, &o)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_broadcast(void *buf, size_t count, ftc_dtype_t dtype, int root, ftc_comm_t *comm,
                           int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_broadcast(&c, "ftc_broadcast", buf, count, dtype, root, comm, &o)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_reduce(const void *sendbuf, void *recvbuf, size_t count, ftc_dtype_t dtype,
                        ftc_op_t op, int root, ftc_comm_t *comm, int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_reduce(&c, "ftc_reduce", sendbuf, recvbuf, count, dtype, op, root, comm, &o)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_allgather(const void *sendbuf, void *recvbuf, size_t sendcount, ftc_dtype_t dtype,
                           ftc_comm_t *comm, int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_allgather(&c, "ftc_allgather", sendbuf, recvbuf, sendcount, dtype, comm, &o)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                ftc_dtype_t dtype, ftc_op_t op, ftc_comm_t *comm, int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_reduce_scatter(&c, "ftc_reduce_scatter", sendbuf, recvbuf, recvcount, dtype, op, comm, &o)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_alltoall(const void *sendbuf, void *recvbuf, size_t count, ftc_dtype_t dtype,
                          ftc_comm_t *comm, int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_alltoall(&c, "ftc_alltoall", sendbuf, recvbuf, count, dtype, comm, &o)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_allgatherv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                            const size_t *displs, ftc_dtype_t dtype, ftc_comm_t *comm,
                            int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_allgatherv(&c, "ftc_allgatherv", sendbuf, recvbuf, recvcounts, displs, dtype, comm, &o)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_alltoallv(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
                           void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
                           ftc_dtype_t dtype, ftc_comm_t *comm, int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_alltoallv(&c, "ftc_alltoallv", sendbuf, sendcounts, sdispls, recvbuf, recvcounts,
                           rdispls, dtype, comm, &o)) != FTC_OK)
    return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_gather(const void *sendbuf, void *recvbuf, size_t count, ftc_dtype_t dtype,
                        int root, ftc_comm_t *comm, int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_rooted(&c, "ftc_gather", FTC__COLL_GATHER, sendbuf, recvbuf, count, dtype, root, comm, &o)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_scatter(const void *sendbuf, void *recvbuf, size_t count, ftc_dtype_t dtype,
                         int root, ftc_comm_t *comm, int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_rooted(&c, "ftc_scatter", FTC__COLL_SCATTER, sendbuf, recvbuf, count, dtype, root, comm, &o)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_barrier(ftc_comm_t *comm, int timeout_ms) {
  ftc_status_t st;
  check_t c;
  if ((st = check_comm(&c, "ftc_barrier", comm)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  ftc__op_t o = {FTC__COLL_BARRIER, NULL, NULL, 0, FTC_U8, FTC_SUM, -1};
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_send(const void *buf, size_t count, ftc_dtype_t dtype, int peer, ftc_comm_t *comm,
                      int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_p2p(&c, "ftc_send", FTC__COLL_SEND, buf, count, dtype, peer, comm, &o)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_recv(void *buf, size_t count, ftc_dtype_t dtype, int peer, ftc_comm_t *comm,
                      int timeout_ms) {
  ftc_status_t st;
  check_t c;
  ftc__op_t o;
  if ((st = prep_p2p(&c, "ftc_recv", FTC__COLL_RECV, buf, count, dtype, peer, comm, &o)) != FTC_OK) return st;
  if ((st = check_timeout(&c, timeout_ms)) != FTC_OK) return st;
  return ftc__submit_blocking(comm, &o, timeout_ms);
}

ftc_status_t ftc_iallreduce(const void *sendbuf, void *recvbuf, size_t count, ftc_dtype_t dtype,
                            ftc_op_t op, ftc_comm_t *comm, ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_iallreduce", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_allreduce(&c, "ftc_iallreduce", sendbuf, recvbuf, count, dtype, op, comm, &o)) != FTC_OK) return st;
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_ibroadcast(void *buf, size_t count, ftc_dtype_t dtype, int root, ftc_comm_t *comm,
                            ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_ibroadcast", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_broadcast(&c, "ftc_ibroadcast", buf, count, dtype, root, comm, &o)) != FTC_OK) return st;
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_ireduce(const void *sendbuf, void *recvbuf, size_t count, ftc_dtype_t dtype,
                         ftc_op_t op, int root, ftc_comm_t *comm, ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_ireduce", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_reduce(&c, "ftc_ireduce", sendbuf, recvbuf, count, dtype, op, root, comm, &o)) != FTC_OK) return st;
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount, ftc_dtype_t dtype,
                            ftc_comm_t *comm, ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_iallgather", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_allgather(&c, "ftc_iallgather", sendbuf, recvbuf, sendcount, dtype, comm, &o)) != FTC_OK) return st;
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                 ftc_dtype_t dtype, ftc_op_t op, ftc_comm_t *comm,
                                 ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_ireduce_scatter", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_reduce_scatter(&c, "ftc_ireduce_scatter", sendbuf, recvbuf, recvcount, dtype, op, comm, &o)) != FTC_OK) return st;
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_ialltoall(const void *sendbuf, void *recvbuf, size_t count, ftc_dtype_t dtype,
                           ftc_comm_t *comm, ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_ialltoall", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_alltoall(&c, "ftc_ialltoall", sendbuf, recvbuf, count, dtype, comm, &o)) != FTC_OK) return st;
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_iallgatherv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                             const size_t *displs, ftc_dtype_t dtype, ftc_comm_t *comm,
                             ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_iallgatherv", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_allgatherv(&c, "ftc_iallgatherv", sendbuf, recvbuf, recvcounts, displs, dtype, comm, &o)) != FTC_OK) return st;
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_ialltoallv(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
                            void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
                            ftc_dtype_t dtype, ftc_comm_t *comm, ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_ialltoallv", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_alltoallv(&c, "ftc_ialltoallv", sendbuf, sendcounts, sdispls, recvbuf, recvcounts,
                           rdispls, dtype, comm, &o)) != FTC_OK)
    return st;
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_igather(const void *sendbuf, void *recvbuf, size_t count, ftc_dtype_t dtype,
                         int root, ftc_comm_t *comm, ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_igather", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_rooted(&c, "ftc_igather", FTC__COLL_GATHER, sendbuf, recvbuf, count, dtype, root, comm, &o)) != FTC_OK) return st;
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_iscatter(const void *sendbuf, void *recvbuf, size_t count, ftc_dtype_t dtype,
                          int root, ftc_comm_t *comm, ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_iscatter", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_rooted(&c, "ftc_iscatter", FTC__COLL_SCATTER, sendbuf, recvbuf, count, dtype, root, comm, &o)) != FTC_OK) return st;
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_ibarrier(ftc_comm_t *comm, ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_ibarrier", NULL, 0, 0};
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = check_comm(&c, "ftc_ibarrier", comm)) != FTC_OK) return st;
  ftc__op_t o = {FTC__COLL_BARRIER, NULL, NULL, 0, FTC_U8, FTC_SUM, -1};
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_isend(const void *buf, size_t count, ftc_dtype_t dtype, int peer, ftc_comm_t *comm,
                       ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_isend", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_p2p(&c, "ftc_isend", FTC__COLL_SEND, buf, count, dtype, peer, comm, &o)) != FTC_OK) return st;
  return ftc__submit_async(comm, &o, req);
}

ftc_status_t ftc_irecv(void *buf, size_t count, ftc_dtype_t dtype, int peer, ftc_comm_t *comm,
                       ftc_request_t **req) {
  ftc_status_t st;
  check_t c = {"ftc_irecv", NULL, 0, 0};
  ftc__op_t o;
  if ((st = check_req(&c, req)) != FTC_OK) return st;
  if ((st = prep_p2p(&c, "ftc_irecv", FTC__COLL_RECV, buf, count, dtype, peer, comm, &o)) != FTC_OK) return st;
  return ftc__submit_async(comm, &o, req);
}
