/*
 * op.h - one collective as the core hands it to a backend: which collective,
 * its buffers and arguments, already validated.
 */
#ifndef FTC_CORE_OP_H
#define FTC_CORE_OP_H

#include <stddef.h>

#include "ftc_recorder.h"
#include "ftcomm.h"

typedef struct ftc__op {
  ftc_rec_op_t coll;   /* the collective, as the flight recorder names it */
  const void *sendbuf; /* broadcast: the buffer; send: the data */
  void *recvbuf;       /* broadcast: same as sendbuf; recv: the destination */
  size_t count;        /* as passed by the caller (per rank where the API says so) */
  ftc_dtype_t dtype;   /* barrier: FTC_U8 */
  ftc_op_t op;
  int peer;            /* root of broadcast/reduce, peer of send/recv, -1 otherwise */
  ftc_algo_t algo;     /* allreduce: the communicator's algorithm when it was issued */
} ftc__op_t;

/* Parse an algorithm name (case-insensitive) for `what` (the variable's
 * name, in the error); FTC_ERR_CONFIG listing the valid names otherwise. */
ftc_status_t ftc__algo_parse(const char *what, const char *name, ftc_algo_t *out);

#endif
