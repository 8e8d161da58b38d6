/*
 * op.h - one collective as the core hands it to a backend: which collective,
 * its buffers and arguments, already validated.
 */
#ifndef FTC_CORE_OP_H
#define FTC_CORE_OP_H

#include <stddef.h>

#include "ftcomm.h"

/* The collectives, as the core hands them to a backend. The values are on
 * the TCP wire (a descriptor's first byte, tcp/tcp_int.h): append only. The
 * flight recorder has its own enum; record.c maps one onto the other. */
typedef enum ftc__coll {
  FTC__COLL_ALLREDUCE = 0,
  FTC__COLL_BROADCAST = 1,
  FTC__COLL_REDUCE = 2,
  FTC__COLL_ALLGATHER = 3,
  FTC__COLL_REDUCE_SCATTER = 4,
  FTC__COLL_ALLTOALL = 5,
  FTC__COLL_BARRIER = 6,
  FTC__COLL_SEND = 7, /* p2p */
  FTC__COLL_RECV = 8,
  FTC__COLL_ALLGATHERV = 9,
  FTC__COLL_ALLTOALLV = 10,
  FTC__COLL_GATHER = 11,
  FTC__COLL_SCATTER = 12,
  FTC__COLL_COUNT
} ftc__coll_t;

/* "allreduce", "broadcast", ...; "unknown" outside the enum. */
const char *ftc__coll_name(ftc__coll_t c);

typedef struct ftc__op {
  ftc__coll_t coll;    /* the collective */
  const void *sendbuf; /* broadcast: the buffer; send: the data */
  void *recvbuf;       /* broadcast: same as sendbuf; recv: the destination */
  size_t count;        /* as passed by the caller (per rank where the API says so) */
  ftc_dtype_t dtype;   /* barrier: FTC_U8 */
  ftc_op_t op;
  int peer;            /* root of broadcast/reduce, peer of send/recv, -1 otherwise */
  ftc_algo_t algo;     /* allreduce: the communicator's algorithm when it was issued */
  /* allgatherv: rcounts, rdispls; alltoallv: all four; NULL otherwise (a
   * NULL displacement array: packed, ftc__op_displ). nranks entries each,
   * in elements: the caller's during a blocking call that runs at once,
   * else the request's copies (engine.c). allgatherv's count is the sum of
   * rcounts, alltoallv's the sum of scounts. */
  const size_t *scounts, *sdispls, *rcounts, *rdispls;
  int nranks;          /* the size the arrays were given for */
} ftc__op_t;

/* The displacement of rank q's block: displs[q], or the sum of counts[0 ..
 * q-1] when displs is NULL. */
static inline size_t ftc__op_displ(const size_t *counts, const size_t *displs, int q) {
  if (displs) return displs[q];
  size_t d = 0;
  for (int i = 0; i < q; i++) d += counts[i];
  return d;
}

/* A caller's config into *out, whose size and version are this library's:
 * the fields that lie within in->size are copied, the rest keep
 * FTC_CONFIG_INITIALIZER's (a config from an older, smaller header, as NCCL
 * takes its config). FTC_ERR_INVALID_ARGUMENT for a version this library
 * does not know or a size without the header. */
ftc_status_t ftc__config_import(const ftc_config_t *in, ftc_config_t *out);

/* Parse an algorithm name (case-insensitive) for `what` (the variable's
 * name, in the error); FTC_ERR_CONFIG listing the valid names otherwise. */
ftc_status_t ftc__algo_parse(const char *what, const char *name, ftc_algo_t *out);

#endif
