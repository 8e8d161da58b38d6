/*
 * record.c - the communicator's seam to the flight recorder: every
 * collective is recorded when it is scheduled (by the calling thread), when
 * it starts, and when it completes or fails (by whichever thread ran it).
 * The names a binding gives them (ftc_comm_set_coll_name, _group_name) go
 * to the recorder too.
 */
#include "core/comm.h"
#include "ftc_error.h"
#include "ftc_time.h"

/* The recorder's name of each collective of the core. */
static const ftc_rec_op_t rec_op[FTC__COLL_COUNT] = {
    [FTC__COLL_ALLREDUCE] = FTC_REC_ALLREDUCE,   [FTC__COLL_BROADCAST] = FTC_REC_BROADCAST,
    [FTC__COLL_REDUCE] = FTC_REC_REDUCE,         [FTC__COLL_ALLGATHER] = FTC_REC_ALLGATHER,
    [FTC__COLL_REDUCE_SCATTER] = FTC_REC_REDUCE_SCATTER,
    [FTC__COLL_ALLTOALL] = FTC_REC_ALLTOALL,     [FTC__COLL_BARRIER] = FTC_REC_BARRIER,
    [FTC__COLL_SEND] = FTC_REC_SEND,             [FTC__COLL_RECV] = FTC_REC_RECV,
    [FTC__COLL_ALLGATHERV] = FTC_REC_ALLGATHERV, [FTC__COLL_ALLTOALLV] = FTC_REC_ALLTOALLV,
    [FTC__COLL_GATHER] = FTC_REC_GATHER,         [FTC__COLL_SCATTER] = FTC_REC_SCATTER,
};

const char *ftc__coll_name(ftc__coll_t c) {
  return (unsigned)c < FTC__COLL_COUNT ? ftc_rec_op_name(rec_op[c]) : "unknown";
}

uint64_t ftc__record_schedule(ftc_comm_t *comm, const ftc__op_t *op, uint64_t seq,
                              int64_t timeout_ns, int64_t now) {
  size_t es = ftc_dtype_size(op->dtype);
  uint64_t bytes = (uint64_t)op->count * es;
  int size = __atomic_load_n(&comm->size, __ATOMIC_ACQUIRE);
  if (op->coll == FTC__COLL_ALLTOALL || op->coll == FTC__COLL_REDUCE_SCATTER) bytes *= (uint64_t)size;
  if (op->coll == FTC__COLL_RECV) bytes = 0;
  if (op->coll == FTC__COLL_ALLGATHERV) {
    int rank = __atomic_load_n(&comm->rank, __ATOMIC_ACQUIRE);
    bytes = rank >= 0 && rank < op->nranks ? (uint64_t)op->rcounts[rank] * es : 0;
  }
  if (op->coll == FTC__COLL_SCATTER || op->coll == FTC__COLL_GATHER) {
    int root = op->peer == __atomic_load_n(&comm->rank, __ATOMIC_ACQUIRE);
    if (op->coll == FTC__COLL_SCATTER) bytes = root ? bytes * (uint64_t)(size - 1) : 0;
    else if (root) bytes = 0;
  }
  if (!now) now = ftc__now_ns();
  return ftc_rec_schedule_at(comm->rec, now, __atomic_load_n(&comm->epoch, __ATOMIC_ACQUIRE), seq,
                          rec_op[op->coll], op->coll == FTC__COLL_BARRIER ? FTC_DTYPE_COUNT : (int)op->dtype,
                          op->count, bytes, op->peer, timeout_ns);
}

void ftc__record_start(ftc_comm_t *comm, uint64_t id, int64_t now) {
  if (id != FTC_REC_NO_ID) ftc_rec_started(comm->rec, id, now);
}

void ftc__record_end(ftc_comm_t *comm, uint64_t id, ftc_status_t st) {
  if (id == FTC_REC_NO_ID) return;
  if (st == FTC_OK)
    ftc_rec_completed(comm->rec, id, 0);
  else
    ftc_rec_failed(comm->rec, id, 0);
}

ftc_status_t ftc_comm_set_coll_name(ftc_comm_t *comm, const char *name) {
  if (!comm) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_set_coll_name: comm is NULL");
  int id = ftc_rec_name_id(name);
  if (id < 0)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "ftc_comm_set_coll_name: \"%.80s\" is not a name the recorder keeps: at most "
                      "%d bytes without control characters, '\"' or '\\', and at most %d "
                      "distinct names in a process",
                      name, FTC_REC_NAME_MAX - 1, FTC_REC_NAMES - 1);
  ftc_rec_set_coll_name(comm->rec, id);
  return FTC_OK;
}

ftc_status_t ftc_comm_set_group_name(ftc_comm_t *comm, const char *name, const char *desc) {
  if (!comm) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_set_group_name: comm is NULL");
  ftc_rec_set_group(comm->rec, name, desc);
  return FTC_OK;
}
