/*
 * op.h - one collective as the core hands it to a backend: which collective,
 * its buffers and arguments, already validated.
 */
#ifndef FTC_CORE_OP_H
#define FTC_CORE_OP_H

#include <stddef.h>

#include "ftcomm.h"

/* Same order as ftc_rec_op_t, so the recorder's op is a cast. */
typedef enum ftc__coll {
  FTC__ALLREDUCE = 0,
  FTC__BROADCAST = 1,
  FTC__REDUCE = 2,
  FTC__ALLGATHER = 3,
  FTC__REDUCE_SCATTER = 4,
  FTC__ALLTOALL = 5,
  FTC__BARRIER = 6,
  FTC__SEND = 7,
  FTC__RECV = 8,
  FTC__COLL_COUNT
} ftc__coll_t;

typedef struct ftc__op {
  ftc__coll_t coll;
  const void *sendbuf; /* broadcast: the buffer; send: the data */
  void *recvbuf;       /* broadcast: same as sendbuf; recv: the destination */
  size_t count;        /* as passed by the caller (per rank where the API says so) */
  ftc_dtype_t dtype;   /* barrier: FTC_U8 */
  ftc_op_t op;
  int peer;            /* root of broadcast/reduce, peer of send/recv, -1 otherwise */
} ftc__op_t;

const char *ftc__coll_name(ftc__coll_t coll);

#endif
