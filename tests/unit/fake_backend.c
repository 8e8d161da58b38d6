/*
 * fake_backend.c - the test backend of fake_backend.h. One process-wide
 * lock guards every epoch's meeting table; each rank's run waits on one
 * condition variable, in slices of a few milliseconds so that a crash, an
 * interrupt or a deadline is seen even when nobody signals it. Epoch
 * tables live until the process exits: a rank that reaches an epoch late
 * still finds its peers' closes there.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_backend.h"

#define FAKE_MAX_RANKS 16
#define FAKE_MAX_DEAD 64

typedef struct fepoch {
  uint64_t epoch;
  int size;
  uint64_t ids[FAKE_MAX_RANKS]; /* member ids by rank */
  int slots[FAKE_MAX_RANKS];
  const ftc__op_t *posted[FAKE_MAX_RANKS]; /* the op each rank waits with, NULL none */
  uint64_t posted_seq[FAKE_MAX_RANKS];
  uint64_t done_seq;          /* the last sequence number every rank completed */
  ftc_status_t done_status;   /* ... and how */
  int closed[FAKE_MAX_RANKS]; /* its handle was closed without a goodbye */
  struct fepoch *next;
} fepoch_t;

typedef struct fhandle {
  fepoch_t *e;
  int rank;
  uint64_t seq;
  int failed; /* the peer the last failed run blames, -1 none */
  const ftc__backend_host_t *host;
} fhandle_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static fepoch_t *epochs;
static uint64_t dead[FAKE_MAX_DEAD];
static int ndead;
static fake_stats_t stats;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int is_dead(uint64_t id) {
  for (int i = 0; i < ndead; i++)
    if (dead[i] == id) return 1;
  return 0;
}

void fake_kill_slot(int slot) {
  pthread_mutex_lock(&mu);
  for (fepoch_t *e = epochs; e; e = e->next)
    for (int r = 0; r < e->size; r++)
      if (e->slots[r] == slot && !is_dead(e->ids[r]) && ndead < FAKE_MAX_DEAD)
        dead[ndead++] = e->ids[r];
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

void fake_stats(fake_stats_t *out) {
  pthread_mutex_lock(&mu);
  *out = stats;
  pthread_mutex_unlock(&mu);
}

/* ---- the results, computed by the last rank to arrive (mu held) ---- */

static void reduce_into(void *acc, const void *in, size_t count, ftc_dtype_t dt, ftc_op_t op) {
#define FAKE_REDUCE(T)                                                                             \
  for (size_t i = 0; i < count; i++) {                                                             \
    T a = ((T *)acc)[i], b = ((const T *)in)[i];                                                   \
    ((T *)acc)[i] = op == FTC_SUM || op == FTC_AVG ? a + b                                         \
                    : op == FTC_PROD               ? a * b                                         \
                    : op == FTC_MIN                ? (b < a ? b : a)                               \
                                                   : (b > a ? b : a);                                             \
  }
  switch (dt) {
    case FTC_I32: FAKE_REDUCE(int32_t) break;
    case FTC_I64: FAKE_REDUCE(int64_t) break;
    case FTC_F32: FAKE_REDUCE(float) break;
    case FTC_F64: FAKE_REDUCE(double) break;
    default: break;
  }
#undef FAKE_REDUCE
}

static ftc_status_t complete(fepoch_t *e) {
  const ftc__op_t *o = e->posted[0];
  size_t es = ftc_dtype_size(o->dtype), n = o->count;
  unsigned char *tmp = NULL;
  switch (o->coll) {
    case FTC__COLL_BARRIER: return FTC_OK;
    case FTC__COLL_BROADCAST:
      for (int r = 0; r < e->size; r++)
        if (r != o->peer) memcpy(e->posted[r]->recvbuf, e->posted[o->peer]->recvbuf, n * es);
      return FTC_OK;
    case FTC__COLL_ALLREDUCE:
      if (o->dtype != FTC_I32 && o->dtype != FTC_I64 && o->dtype != FTC_F32 && o->dtype != FTC_F64)
        return FTC_ERR_NOT_SUPPORTED;
      if (!(tmp = malloc(n * es + 1))) return FTC_ERR_NO_MEMORY;
      memcpy(tmp, e->posted[0]->sendbuf, n * es);
      for (int r = 1; r < e->size; r++) reduce_into(tmp, e->posted[r]->sendbuf, n, o->dtype, o->op);
      if (o->op == FTC_AVG)
        for (size_t i = 0; i < n; i++) {
          if (o->dtype == FTC_F32) ((float *)tmp)[i] /= (float)e->size;
          if (o->dtype == FTC_F64) ((double *)tmp)[i] /= e->size;
        }
      for (int r = 0; r < e->size; r++) memcpy(e->posted[r]->recvbuf, tmp, n * es);
      break;
    case FTC__COLL_ALLGATHER:
      if (!(tmp = malloc(n * es * (size_t)e->size + 1))) return FTC_ERR_NO_MEMORY;
      for (int r = 0; r < e->size; r++)
        memcpy(tmp + (size_t)r * n * es, e->posted[r]->sendbuf, n * es);
      for (int r = 0; r < e->size; r++)
        memcpy(e->posted[r]->recvbuf, tmp, n * es * (size_t)e->size);
      break;
    default: return FTC_ERR_NOT_SUPPORTED;
  }
  free(tmp);
  return FTC_OK;
}

/* ---- the seam ---- */

static ftc_status_t fake_connect(void *state, const ftc__backend_host_t *host,
                                 const ftc__view_t *view, int listen_fd, void *prev,
                                 ftc_status_t prev_error, void **out) {
  (void)state, (void)listen_fd, (void)prev, (void)prev_error;
  *out = NULL;
  if (view->size > FAKE_MAX_RANKS) return FTC_ERR_NOT_SUPPORTED;
  fhandle_t *h = calloc(1, sizeof(*h));
  if (!h) return FTC_ERR_NO_MEMORY;
  pthread_mutex_lock(&mu);
  /* (Epoch numbers restart with a coordinator; member ids do not.) */
  fepoch_t *e = epochs;
  for (; e; e = e->next) {
    int same = e->epoch == view->epoch && e->size == view->size;
    for (int r = 0; r < view->size && same; r++) same = e->ids[r] == view->members[r].member_id;
    if (same) break;
  }
  if (!e) {
    if (!(e = calloc(1, sizeof(*e)))) {
      pthread_mutex_unlock(&mu);
      free(h);
      return FTC_ERR_NO_MEMORY;
    }
    e->epoch = view->epoch;
    e->size = view->size;
    for (int r = 0; r < view->size; r++)
      e->ids[r] = view->members[r].member_id, e->slots[r] = view->members[r].slot;
    e->next = epochs;
    epochs = e;
    stats.epochs++;
  }
  pthread_mutex_unlock(&mu);
  h->e = e;
  h->rank = view->my_rank;
  h->failed = -1;
  h->host = host;
  *out = h;
  return FTC_OK;
}

static ftc_status_t fake_run(void *hv, const ftc__op_t *op, int64_t deadline_ns) {
  fhandle_t *h = hv;
  fepoch_t *e = h->e;
  ftc_status_t st = FTC_OK;
  pthread_mutex_lock(&mu);
  uint64_t seq = ++h->seq;
  e->posted[h->rank] = op;
  e->posted_seq[h->rank] = seq;
  int all = 1;
  for (int r = 0; r < e->size && all; r++) all = e->posted[r] && e->posted_seq[r] == seq;
  if (all) {
    e->done_status = complete(e);
    for (int r = 0; r < e->size; r++) e->posted[r] = NULL;
    e->done_seq = seq;
    stats.completed++;
    pthread_cond_broadcast(&cv);
  }
  stats.waiting++;
  while (e->done_seq < seq) {
    int intr = __atomic_load_n(h->host->interrupt, __ATOMIC_ACQUIRE);
    int gone = -1;
    for (int r = 0; r < e->size && gone < 0; r++)
      if (r != h->rank && (is_dead(e->ids[r]) || e->closed[r])) gone = r;
    if (intr || gone >= 0 || (deadline_ns != INT64_MAX && now_ns() >= deadline_ns)) {
      e->posted[h->rank] = NULL; /* withdrawn: nobody writes into its buffers now */
      if (intr) {
        st = (ftc_status_t)intr;
        stats.interrupted++;
      } else if (gone >= 0) {
        st = FTC_ERR_PEER_LOST;
        h->failed = gone;
        stats.peer_lost++;
      } else {
        st = FTC_ERR_TIMEOUT;
      }
      break;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 5 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&cv, &mu, &ts);
  }
  stats.waiting--;
  if (e->done_seq >= seq) st = e->done_status;
  pthread_mutex_unlock(&mu);
  return st;
}

static void fake_interrupt(void *hv) {
  (void)hv;
  pthread_mutex_lock(&mu);
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static void fake_close(void *hv, int planned) {
  fhandle_t *h = hv;
  pthread_mutex_lock(&mu);
  if (!planned) h->e->closed[h->rank] = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  free(h);
}

static int fake_failed_peer(const void *hv) {
  const fhandle_t *h = hv;
  pthread_mutex_lock(&mu);
  int r = h->failed;
  pthread_mutex_unlock(&mu);
  return r;
}

const ftc__backend_ops_t fake_backend = {
    .name = "fake",
    .connect = fake_connect,
    .run = fake_run,
    .interrupt = fake_interrupt,
    .close = fake_close,
    .failed_peer = fake_failed_peer,
    .blames_at_once = 1,
    .rebuild_inline = 1,
};
