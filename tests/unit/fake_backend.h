/*
 * fake_backend.h - a data-plane backend made for tests, built against
 * core/backend.h alone: it proves that the seam is all the core needs of a
 * backend. The ranks of a job are threads of one process, each with its own
 * communicator (a real coordinator session each); a collective meets its
 * peers' calls of the same epoch and sequence number in shared memory, and
 * the last rank to arrive computes every rank's result. A peer that crashed
 * (fake_kill_slot) or closed its handle without a goodbye fails the others'
 * runs with FTC_ERR_PEER_LOST and is named by failed_peer, as a closed
 * socket would be; an interrupt or a deadline ends a run as on TCP.
 * Allreduce (i32, i64, f32, f64; sum, prod, min, max), broadcast, barrier
 * and allgather; anything else fails with FTC_ERR_NOT_SUPPORTED.
 */
#ifndef FTC_TEST_FAKE_BACKEND_H
#define FTC_TEST_FAKE_BACKEND_H

#include "core/backend.h"

/* FTCOMM_BACKEND=fake once registered (ftc__backend_register). */
extern const ftc__backend_ops_t fake_backend;

/* The process at slot crashes, as its peers see it: every member that has
 * held the slot so far is gone (a joiner later given the slot is not). */
void fake_kill_slot(int slot);

/* Collectives completed by all their ranks, epochs made, runs failed with
 * FTC_ERR_PEER_LOST, and with an interrupt's status, so far; runs waiting
 * for their peers now. */
typedef struct fake_stats {
  int completed, epochs, peer_lost, interrupted, waiting;
} fake_stats_t;
void fake_stats(fake_stats_t *out);

#endif
