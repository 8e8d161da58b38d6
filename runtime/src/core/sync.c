/*
 * sync.c - ftc_comm_sync_state: the state hand-off every fault-tolerant
 * loop needs after a recovery or a grow, built on the public collectives.
 *
 * Survivors can come out of a recovery one step apart (a late rank may
 * have completed a collective its peers gave up on), and a joiner holds
 * nothing, so every rank must take one state: the newest, from the lowest
 * rank that holds it. One allreduce MAX of a key that packs the step above
 * the complement of the rank finds both at once; one broadcast sends the
 * state and its step. The broadcast lands in a copy, so a failure half way
 * leaves the caller's state and step as they were.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftcomm.h"

/* Ranks fit 21 bits (a job has at most 2^20 ranks: the membership bound). */
#define SYNC_RANK_BITS 21
#define SYNC_RANK_MASK ((INT64_C(1) << SYNC_RANK_BITS) - 1)
#define SYNC_STEP_MAX ((INT64_C(1) << (62 - SYNC_RANK_BITS)) - 1)

/* The failed collective's message, said as this call's. */
static ftc_status_t failed(ftc_status_t st) {
  char why[512];
  snprintf(why, sizeof why, "%s", ftc_last_error());
  return ftc__error(st, "ftc_comm_sync_state: %s", why);
}

ftc_status_t ftc_comm_sync_state(ftc_comm_t *comm, void *state, size_t bytes, int64_t *step,
                                 int timeout_ms, int *root) {
  if (!comm || !step || (bytes && !state))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_comm_sync_state: %s is NULL",
                      !comm ? "comm" : !step ? "step" : "state (with bytes > 0)");
  if (*step > SYNC_STEP_MAX)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "ftc_comm_sync_state: step %lld is past the largest it carries (%lld)",
                      (long long)*step, (long long)SYNC_STEP_MAX);
  int rank = -1;
  ftc_status_t st = ftc_comm_rank(comm, &rank);
  if (st != FTC_OK) return st;
  /* step + 1 so that "none" (-1) packs to 0: no rank holds a state. */
  int64_t mine = *step < 0 ? 0 : *step + 1;
  int64_t key = (mine << SYNC_RANK_BITS) | (SYNC_RANK_MASK - rank);
  if ((st = ftc_allreduce(&key, &key, 1, FTC_I64, FTC_MAX, comm, timeout_ms)) != FTC_OK)
    return failed(st);
  int64_t newest = (key >> SYNC_RANK_BITS) - 1;
  int from = (int)(SYNC_RANK_MASK - (key & SYNC_RANK_MASK));
  if (newest < 0)
    return ftc__error(FTC_ERR_BELOW_MIN_SIZE,
                      "ftc_comm_sync_state: no rank holds a state (every rank passed step -1): "
                      "the job lost every rank that had one");
  void *in = state;
  if (rank != from && bytes && !(in = ftc__malloc(bytes)))
    return ftc__error(FTC_ERR_NO_MEMORY, "ftc_comm_sync_state: no memory for %zu bytes", bytes);
  st = bytes ? ftc_broadcast(in, bytes, FTC_U8, from, comm, timeout_ms) : FTC_OK;
  if (st == FTC_OK && in != state) memcpy(state, in, bytes);
  if (in != state) ftc__free(in);
  if (st != FTC_OK) return failed(st);
  *step = newest;
  if (root) *root = from;
  return FTC_OK;
}
