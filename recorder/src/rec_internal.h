/*
 * rec_internal.h - what the recorder's own files share: the ring layout,
 * the process registry and the hooks between the ring, the dump writer and
 * the signal thread. Not for use outside recorder/src.
 */
#ifndef FTC_REC_INTERNAL_H
#define FTC_REC_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "ftc_recorder.h"

/* One ring slot. Every field is accessed with __atomic builtins so a dump
 * may read while the owner writes. gen is 2*id+1 while entry `id` is being
 * written, 2*id+2 once it is stable, 0 if never written. */
typedef struct ftc__rec_slot {
  uint64_t gen;
  uint64_t epoch;
  uint64_t seq;
  uint64_t count;
  uint64_t bytes;
  uint64_t meta;   /* op | dtype << 8 | name id << 16 | (uint32_t)peer << 32 */
  uint64_t ranks;  /* (uint32_t)rank | (uint64_t)(uint32_t)size << 32 */
  uint64_t state;  /* id << 2 | ftc_rec_state_t */
  int64_t t_created;
  int64_t t_started;
  int64_t t_completed;
  int64_t timeout_ns;
} ftc__rec_slot_t;

struct ftc_rec {
  /* Written on the hot path. */
  uint64_t next_id;      /* ids handed out; written by the scheduling thread */
  size_t next_slot;      /* next_id % cap, kept by the scheduling thread only */
  uint64_t last_enqueued;
  uint64_t last_started;
  uint64_t last_completed;
  uint64_t cur_epoch;
  uint64_t cur_ranks;  /* packed like ftc__rec_slot_t.ranks */
  size_t cap;
  ftc__rec_slot_t *ring; /* NULL when disabled */
  uint64_t cur_name;     /* name id << 16, for meta; the scheduling thread's */
  /* Fixed at creation. */
  uint64_t comm_id;
  char name[64];
  /* Set by ftc_rec_set_group, under the registry lock. */
  char pg_name[FTC_REC_NAME_MAX], pg_desc[FTC_REC_NAME_MAX];
  /* Registry links, under the registry lock. */
  struct ftc_rec *prev, *next;
};

/* Registry: every live recorder. Held while a dump walks the list. */
extern pthread_mutex_t ftc__rec_registry_lock;
extern struct ftc_rec *ftc__rec_registry_head;

/* Consistent read of the entry with record id `id`; 0 if the slot holds
 * another entry or is being written. */
int ftc__rec_read(const struct ftc_rec *rec, uint64_t id, ftc_rec_entry_t *out);

/* Capture buffers (dump.c): a few entry arrays kept from one failure's
 * capture to the next, so a capture at a failure copies into memory already
 * mapped instead of fresh pages (about 50 page faults for 2000 entries,
 * most of a capture's cost: one capture takes an array for each live
 * recorder). ftc__rec_pool_reserve(n, want) puts one zeroed array of n
 * entries there unless want arrays that large wait already or every slot
 * is taken (ftc_rec_create, for rings of at most FTC__REC_POOL_MAX_BYTES,
 * with want the number of live recorders); larger arrays are not kept;
 * ftc__rec_pool_drain frees them (the last recorder's destroy). */
#define FTC__REC_POOL_MAX_BYTES (4u << 20)
void ftc__rec_pool_reserve(size_t n, size_t want);
void ftc__rec_pool_drain(void);

/* dtype names shared by the writer and its tests. */
const char *ftc__rec_dtype_name(int dtype);

/* Signal thread (signal.c), started with the first recorder and stopped
 * with the last one. Called with the registry lock NOT held. */
void ftc__rec_sigthread_start(void);
void ftc__rec_sigthread_stop(void);

#endif
