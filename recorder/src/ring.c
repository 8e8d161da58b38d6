/*
 * ring.c - the per-communicator ring of recent collectives and the process
 * registry of live recorders.
 *
 * The hot path (schedule, started, completed, failed) is a few relaxed
 * atomic stores into a preallocated slot: no lock, no allocation, no
 * syscall but the vDSO clock. Each slot carries a generation in the style of
 * a seqlock so readers (dumps, snapshots) on other threads skip a slot that
 * is being rewritten instead of reading a torn entry.
 */
#include <stdio.h>
#include <string.h>

#include "ftc_alloc.h"
#include "ftc_assert.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_param.h"
#include "ftc_time.h"
#include "rec_internal.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
/* The seqlock pairs: a writer's field stores are release stores made after
 * it marked the slot busy, a reader's field loads are acquire loads, so a
 * reader that saw any new field also sees the busy generation when it
 * checks again. Plain moves on x86; no standalone fences (which TSan cannot
 * model). */
#define STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)

pthread_mutex_t ftc__rec_registry_lock = PTHREAD_MUTEX_INITIALIZER;
struct ftc_rec *ftc__rec_registry_head;
/* Serializes the first-create/last-destroy transitions that start and stop
 * the signal thread. Lock order: lifecycle -> registry. */
static pthread_mutex_t lifecycle_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t live_recorders;

static const char *const op_names[FTC_REC_OP_COUNT] = {
    "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
    "alltoall",  "barrier",   "send",   "recv",   "allgatherv",
    "alltoallv", "gather",    "scatter",
};
static const char *const state_names[FTC_REC_STATE_COUNT] = {
    "scheduled", "started", "completed", "failed",
};
static const char *const dtype_names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "u8"};

const char *ftc_rec_op_name(ftc_rec_op_t op) {
  return (unsigned)op < FTC_REC_OP_COUNT ? op_names[op] : "unknown";
}

const char *ftc_rec_state_name(ftc_rec_state_t state) {
  return (unsigned)state < FTC_REC_STATE_COUNT ? state_names[state] : "unknown";
}

int ftc_rec_op_from_name(const char *name) {
  for (int i = 0; name && i < FTC_REC_OP_COUNT; i++)
    if (!strcmp(name, op_names[i])) return i;
  return -1;
}

int ftc_rec_state_from_name(const char *name) {
  for (int i = 0; name && i < FTC_REC_STATE_COUNT; i++)
    if (!strcmp(name, state_names[i])) return i;
  return -1;
}

const char *ftc__rec_dtype_name(int dtype) {
  if (dtype >= 0 && (size_t)dtype < sizeof(dtype_names) / sizeof(dtype_names[0]))
    return dtype_names[dtype];
  return "none";
}

/* The process's interned names: slots 1 .. nnames - 1 are written once
 * (under names_lock) before nnames publishes them. */
static char names[FTC_REC_NAMES][FTC_REC_NAME_MAX];
static int nnames = 1;
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;

static int name_find(const char *name, int n) {
  for (int i = 1; i < n; i++)
    if (!strcmp(names[i], name)) return i;
  return 0;
}

int ftc_rec_name_id(const char *name) {
  if (!name || !*name) return 0;
  if (strlen(name) >= FTC_REC_NAME_MAX) return -1;
  for (const char *c = name; *c; c++) /* kept as they are in a dump's JSON string */
    if ((unsigned char)*c < 0x20 || *c == '"' || *c == '\\') return -1;
  int id = name_find(name, __atomic_load_n(&nnames, __ATOMIC_ACQUIRE));
  if (id) return id;
  pthread_mutex_lock(&names_lock);
  int n = __atomic_load_n(&nnames, __ATOMIC_RELAXED);
  id = name_find(name, n);
  if (!id && n < FTC_REC_NAMES) {
    memcpy(names[n], name, strlen(name) + 1);
    __atomic_store_n(&nnames, n + 1, __ATOMIC_RELEASE);
    id = n;
  }
  pthread_mutex_unlock(&names_lock);
  return id ? id : -1;
}

const char *ftc_rec_name(int id) {
  return id > 0 && id < __atomic_load_n(&nnames, __ATOMIC_ACQUIRE) ? names[id] : "";
}

void ftc_rec_set_coll_name(ftc_rec_t *rec, int id) {
  if (rec) rec->cur_name = (uint64_t)(uint16_t)(id > 0 ? id : 0) << 16;
}

void ftc_rec_set_group(ftc_rec_t *rec, const char *name, const char *desc) {
  if (!rec) return;
  pthread_mutex_lock(&ftc__rec_registry_lock);
  if (name) snprintf(rec->pg_name, sizeof(rec->pg_name), "%s", name);
  if (desc) snprintf(rec->pg_desc, sizeof(rec->pg_desc), "%s", desc);
  /* one byte each in a dump's JSON string (its room is counted per byte) */
  for (char *c = rec->pg_name; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == '"' || *c == '\\') *c = '?';
  for (char *c = rec->pg_desc; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == '"' || *c == '\\') *c = '?';
  pthread_mutex_unlock(&ftc__rec_registry_lock);
}

static uint64_t pack_ranks(int rank, int size) {
  return (uint64_t)(uint32_t)rank | (uint64_t)(uint32_t)size << 32;
}

ftc_status_t ftc_rec_create(int64_t entries, uint64_t comm_id, const char *name,
                            uint64_t epoch, int rank, int size, ftc_rec_t **out) {
  ftc_status_t st;
  if (!out) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "ftc_rec_create: out is NULL");
  *out = NULL;
  if (entries < 0) {
    st = ftc__param_int(FTC_P_RECORDER_ENTRIES, &entries);
    if (st != FTC_OK) return st;
  }
  if (entries > 1048576)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "flight recorder: %lld entries is over the limit of 1048576",
                      (long long)entries);
  ftc_rec_t *rec = ftc__calloc(1, sizeof(*rec));
  if (!rec) return ftc__error(FTC_ERR_NO_MEMORY, "flight recorder: no memory for a recorder");
  if (entries > 0) {
    rec->ring = ftc__calloc((size_t)entries, sizeof(ftc__rec_slot_t));
    if (!rec->ring) {
      st = ftc__error(FTC_ERR_NO_MEMORY, "flight recorder: no memory for %lld entries",
                      (long long)entries);
      goto out_free_rec;
    }
    rec->cap = (size_t)entries;
  }
  rec->comm_id = comm_id;
  snprintf(rec->name, sizeof(rec->name), "%s", name ? name : "");
  rec->cur_epoch = epoch;
  rec->cur_ranks = pack_ranks(rank, size);

  pthread_mutex_lock(&lifecycle_lock);
  pthread_mutex_lock(&ftc__rec_registry_lock);
  rec->next = ftc__rec_registry_head;
  if (rec->next) rec->next->prev = rec;
  ftc__rec_registry_head = rec;
  pthread_mutex_unlock(&ftc__rec_registry_lock);
  if (live_recorders++ == 0) ftc__rec_sigthread_start();
  size_t live = live_recorders;
  pthread_mutex_unlock(&lifecycle_lock);
  /* this ring's part of a failure's capture, mapped now */
  if (rec->cap && rec->cap * sizeof(ftc_rec_entry_t) <= FTC__REC_POOL_MAX_BYTES)
    ftc__rec_pool_reserve(rec->cap, live);
  *out = rec;
  return FTC_OK;

out_free_rec:
  ftc__free(rec);
  return st;
}

void ftc_rec_destroy(ftc_rec_t *rec) {
  if (!rec) return;
  pthread_mutex_lock(&lifecycle_lock);
  pthread_mutex_lock(&ftc__rec_registry_lock);
  if (rec->prev) rec->prev->next = rec->next;
  else ftc__rec_registry_head = rec->next;
  if (rec->next) rec->next->prev = rec->prev;
  pthread_mutex_unlock(&ftc__rec_registry_lock);
  if (--live_recorders == 0) {
    ftc__rec_sigthread_stop();
    ftc__rec_pool_drain();
  }
  pthread_mutex_unlock(&lifecycle_lock);
  ftc__free(rec->ring);
  ftc__free(rec);
}

void ftc_rec_set_epoch(ftc_rec_t *rec, uint64_t epoch, int rank, int size) {
  if (!rec) return;
  STORE(&rec->cur_ranks, pack_ranks(rank, size));
  STORE(&rec->last_enqueued, 0);
  STORE(&rec->last_started, 0);
  STORE(&rec->last_completed, 0);
  __atomic_store_n(&rec->cur_epoch, epoch, __ATOMIC_RELEASE);
}

size_t ftc_rec_capacity(const ftc_rec_t *rec) { return rec ? rec->cap : 0; }

static inline int is_p2p(ftc_rec_op_t op) { return op == FTC_REC_SEND || op == FTC_REC_RECV; }

uint64_t ftc_rec_schedule(ftc_rec_t *rec, uint64_t epoch, uint64_t seq, ftc_rec_op_t op,
                          int dtype, uint64_t count, uint64_t bytes, int peer,
                          int64_t timeout_ns) {
  if (!rec || !rec->ring) return FTC_REC_NO_ID;
  return ftc_rec_schedule_at(rec, ftc__now_ns(), epoch, seq, op, dtype, count, bytes, peer,
                             timeout_ns);
}

uint64_t ftc_rec_schedule_at(ftc_rec_t *rec, int64_t now, uint64_t epoch, uint64_t seq,
                             ftc_rec_op_t op, int dtype, uint64_t count, uint64_t bytes, int peer,
                             int64_t timeout_ns) {
  if (!rec || !rec->ring) return FTC_REC_NO_ID;
  /* One scheduling thread at a time (see the header): no locked add, no
   * division, just the next slot. */
  uint64_t id = LOAD(&rec->next_id);
  size_t slot = rec->next_slot;
  rec->next_slot = slot + 1 == rec->cap ? 0 : slot + 1;
  ftc__rec_slot_t *s = &rec->ring[slot];
  /* The seqlock's writer side: one scheduling thread at a time, so the slot
   * is never mid-write here (an odd generation), and a reused slot only
   * moves forward. */
  FTC_ASSERT(!(LOAD(&s->gen) & 1) && LOAD(&s->gen) < 2 * id + 1);
  STORE(&s->gen, 2 * id + 1);
  STORE_REL(&s->epoch, epoch);
  STORE_REL(&s->seq, seq);
  STORE_REL(&s->count, count);
  STORE_REL(&s->bytes, bytes);
  STORE_REL(&s->meta, (uint64_t)(uint8_t)op | (uint64_t)(uint8_t)dtype << 8 | rec->cur_name |
                      (uint64_t)(uint32_t)peer << 32);
  STORE_REL(&s->ranks, LOAD(&rec->cur_ranks));
  STORE_REL(&s->state, id << 2 | FTC_REC_SCHEDULED);
  STORE_REL(&s->t_created, now);
  STORE_REL(&s->t_started, 0);
  STORE_REL(&s->t_completed, 0);
  STORE_REL(&s->timeout_ns, timeout_ns);
  __atomic_store_n(&s->gen, 2 * id + 2, __ATOMIC_RELEASE);
  __atomic_store_n(&rec->next_id, id + 1, __ATOMIC_RELEASE);
  if (!is_p2p(op) && epoch == LOAD(&rec->cur_epoch)) STORE(&rec->last_enqueued, seq);
  return id;
}

/* Move entry `id` forward to `to`, stamping its time. Never backwards, and
 * never out of a final state (completed, failed). The state word holds the
 * id too, so a call racing with the reuse of its slot changes nothing but,
 * at worst, a time of the new entry that its own calls overwrite. */
static void advance(ftc_rec_t *rec, uint64_t id, int64_t t, ftc_rec_state_t to) {
  if (!rec || !rec->ring || id == FTC_REC_NO_ID) return;
  ftc__rec_slot_t *s = &rec->ring[id % rec->cap];
  if (__atomic_load_n(&s->gen, __ATOMIC_ACQUIRE) != 2 * id + 2) return;
  FTC_ASSERT(to == FTC_REC_STARTED || to == FTC_REC_COMPLETED || to == FTC_REC_FAILED);
  if (t == 0) t = ftc__now_ns();
  uint64_t old = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
  if (old >> 2 != id || (old & 3) >= (uint64_t)to || (old & 3) >= FTC_REC_COMPLETED) return;
  STORE(to == FTC_REC_STARTED ? &s->t_started : &s->t_completed, t);
  while (!__atomic_compare_exchange_n(&s->state, &old, id << 2 | to, 1, __ATOMIC_RELEASE,
                                      __ATOMIC_RELAXED))
    if (old >> 2 != id || (old & 3) >= (uint64_t)to || (old & 3) >= FTC_REC_COMPLETED) return;
  uint64_t meta = LOAD(&s->meta);
  if (to == FTC_REC_FAILED || is_p2p((ftc_rec_op_t)(meta & 0xff)) ||
      LOAD(&s->epoch) != LOAD(&rec->cur_epoch))
    return;
  uint64_t seq = LOAD(&s->seq);
  uint64_t *last = to == FTC_REC_STARTED ? &rec->last_started : &rec->last_completed;
  if (LOAD(last) < seq) STORE(last, seq);
  /* A collective that completes has started, even if no one said so. */
  if (to == FTC_REC_COMPLETED && LOAD(&rec->last_started) < seq) STORE(&rec->last_started, seq);
}

void ftc_rec_started(ftc_rec_t *rec, uint64_t id, int64_t t_ns) {
  advance(rec, id, t_ns, FTC_REC_STARTED);
}

void ftc_rec_completed(ftc_rec_t *rec, uint64_t id, int64_t t_ns) {
  advance(rec, id, t_ns, FTC_REC_COMPLETED);
}

void ftc_rec_failed(ftc_rec_t *rec, uint64_t id, int64_t t_ns) {
  advance(rec, id, t_ns, FTC_REC_FAILED);
}

void ftc_rec_progress(const ftc_rec_t *rec, ftc_rec_progress_t *out) {
  if (!out) return;
  memset(out, 0, sizeof(*out));
  if (!rec) return;
  out->epoch = __atomic_load_n(&rec->cur_epoch, __ATOMIC_ACQUIRE);
  out->last_enqueued = LOAD(&rec->last_enqueued);
  out->last_started = LOAD(&rec->last_started);
  out->last_completed = LOAD(&rec->last_completed);
  out->recorded = LOAD(&rec->next_id);
}

int ftc__rec_read(const struct ftc_rec *rec, uint64_t id, ftc_rec_entry_t *e) {
  const ftc__rec_slot_t *s = &rec->ring[id % rec->cap];
  uint64_t g1 = __atomic_load_n(&s->gen, __ATOMIC_ACQUIRE);
  if (g1 != 2 * id + 2) return 0; /* (odd: a write in progress; other: another entry) */
  uint64_t st = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
  if (st >> 2 != id) return 0;
  e->state = (ftc_rec_state_t)(st & 3);
  e->id = id;
  e->epoch = LOAD_ACQ(&s->epoch);
  e->seq = LOAD_ACQ(&s->seq);
  e->count = LOAD_ACQ(&s->count);
  e->bytes = LOAD_ACQ(&s->bytes);
  uint64_t meta = LOAD_ACQ(&s->meta);
  e->op = (ftc_rec_op_t)(meta & 0xff);
  e->dtype = (int)(int8_t)((meta >> 8) & 0xff);
  e->name = (int)((meta >> 16) & 0xffff);
  e->peer = (int)(int32_t)(uint32_t)(meta >> 32);
  uint64_t ranks = LOAD_ACQ(&s->ranks);
  e->rank = (int)(int32_t)(uint32_t)ranks;
  e->size = (int)(int32_t)(uint32_t)(ranks >> 32);
  e->t_created = LOAD_ACQ(&s->t_created);
  e->t_started = LOAD_ACQ(&s->t_started);
  e->t_completed = LOAD_ACQ(&s->t_completed);
  e->timeout_ns = LOAD_ACQ(&s->timeout_ns);
  return LOAD(&s->gen) == g1;
}

size_t ftc_rec_snapshot(const ftc_rec_t *rec, ftc_rec_entry_t *out, size_t max) {
  if (!rec || !rec->ring || !out) return 0;
  uint64_t end = __atomic_load_n(&rec->next_id, __ATOMIC_ACQUIRE);
  uint64_t begin = end > rec->cap ? end - rec->cap : 0;
  if (end - begin > max) begin = end - max;
  size_t n = 0;
  for (uint64_t id = begin; id < end; id++)
    if (ftc__rec_read(rec, id, &out[n])) n++;
  return n;
}
