/*
 * workqueue.c - the dedup/processing/dirty bookkeeping of client-go's
 * workqueue plus a delay list and per-item failure counts. Sets are jansson
 * objects (hash tables keyed by string); the ready queue is a ring of
 * owned strings; the delay list is an array kept unsorted (small).
 */
#include "workqueue.h"

#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "backoff.h"
#include "ftc_alloc.h"
#include "ftc_assert.h"
#include "ftc_error.h"
#include "ftc_time.h"

typedef struct delayed {
  char *key;
  int64_t due_ns;
} delayed_t;

struct ftck_workqueue {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int shutting_down;
  int64_t base_ms, max_ms;
  json_t *dirty;      /* key -> true: wants processing (queued or to queue at done) */
  json_t *processing; /* key -> true: handed to a worker */
  json_t *failures;   /* key -> integer */
  char **ring;        /* ready keys */
  size_t head, count, cap;
  delayed_t *delayed;
  size_t ndelayed, delayed_cap;
  ftck_backoff_t jitter_src;
};

ftc_status_t ftck_workqueue_create(int64_t base_delay_ms, int64_t max_delay_ms, ftck_workqueue_t **out) {
  *out = NULL;
  ftck_workqueue_t *q = ftc__calloc(1, sizeof *q);
  if (!q) return ftc__error(FTC_ERR_NO_MEMORY, "workqueue: no memory");
  q->base_ms = base_delay_ms;
  q->max_ms = max_delay_ms;
  pthread_mutex_init(&q->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&q->cv, &ca);
  pthread_condattr_destroy(&ca);
  q->dirty = json_object();
  q->processing = json_object();
  q->failures = json_object();
  if (!q->dirty || !q->processing || !q->failures) {
    ftck_workqueue_destroy(q);
    return ftc__error(FTC_ERR_NO_MEMORY, "workqueue: no memory");
  }
  *out = q;
  return FTC_OK;
}

void ftck_workqueue_destroy(ftck_workqueue_t *q) {
  if (!q) return;
  for (size_t i = 0; i < q->count; i++) ftc__free(q->ring[(q->head + i) % q->cap]);
  ftc__free(q->ring);
  pthread_mutex_destroy(&q->mu);
  pthread_cond_destroy(&q->cv);
  for (size_t i = 0; i < q->ndelayed; i++) ftc__free(q->delayed[i].key);
  ftc__free(q->delayed);
  json_decref(q->dirty);
  json_decref(q->processing);
  json_decref(q->failures);
  ftc__free(q);
}

/* Called with mu held. */
static ftc_status_t push_ready(ftck_workqueue_t *q, const char *key) {
  if (q->count == q->cap) {
    size_t cap = q->cap ? q->cap * 2 : 16;
    char **nr = ftc__malloc(cap * sizeof *nr);
    if (!nr) return ftc__error(FTC_ERR_NO_MEMORY, "workqueue: no memory");
    for (size_t i = 0; i < q->count; i++) nr[i] = q->ring[(q->head + i) % q->cap];
    ftc__free(q->ring);
    q->ring = nr;
    q->cap = cap;
    q->head = 0;
  }
  char *k = ftc__strdup(key);
  if (!k) return ftc__error(FTC_ERR_NO_MEMORY, "workqueue: no memory");
  q->ring[(q->head + q->count) % q->cap] = k;
  q->count++;
  return FTC_OK;
}

/* Called with mu held. */
static ftc_status_t add_locked(ftck_workqueue_t *q, const char *key) {
  FTC_ASSERT_HELD(&q->mu);
  if (q->shutting_down || json_object_get(q->dirty, key)) return FTC_OK;
  if (json_object_set_new(q->dirty, key, json_true()) != 0)
    return ftc__error(FTC_ERR_NO_MEMORY, "workqueue: no memory");
  if (json_object_get(q->processing, key)) return FTC_OK; /* queued again at done */
  ftc_status_t st = push_ready(q, key);
  if (st != FTC_OK) {
    json_object_del(q->dirty, key);
    return st;
  }
  pthread_cond_signal(&q->cv);
  return FTC_OK;
}

ftc_status_t ftck_workqueue_add(ftck_workqueue_t *q, const char *key) {
  pthread_mutex_lock(&q->mu);
  ftc_status_t st = add_locked(q, key);
  pthread_mutex_unlock(&q->mu);
  return st;
}

ftc_status_t ftck_workqueue_add_after(ftck_workqueue_t *q, const char *key, int64_t delay_ms) {
  if (delay_ms <= 0) return ftck_workqueue_add(q, key);
  ftc_status_t st = FTC_OK;
  int64_t due = ftc__now_ns() + delay_ms * 1000000LL;
  pthread_mutex_lock(&q->mu);
  if (q->shutting_down) goto out_unlock;
  for (size_t i = 0; i < q->ndelayed; i++) {
    if (strcmp(q->delayed[i].key, key) == 0) {
      if (due < q->delayed[i].due_ns) q->delayed[i].due_ns = due; /* keep the earliest */
      pthread_cond_broadcast(&q->cv);
      goto out_unlock;
    }
  }
  if (q->ndelayed == q->delayed_cap) {
    size_t cap = q->delayed_cap ? q->delayed_cap * 2 : 16;
    delayed_t *nd = ftc__realloc(q->delayed, cap * sizeof *nd);
    if (!nd) {
      st = ftc__error(FTC_ERR_NO_MEMORY, "workqueue: no memory");
      goto out_unlock;
    }
    q->delayed = nd;
    q->delayed_cap = cap;
  }
  char *k = ftc__strdup(key);
  if (!k) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "workqueue: no memory");
    goto out_unlock;
  }
  q->delayed[q->ndelayed].key = k;
  q->delayed[q->ndelayed].due_ns = due;
  q->ndelayed++;
  pthread_cond_broadcast(&q->cv); /* a getter may need a shorter sleep */
out_unlock:
  pthread_mutex_unlock(&q->mu);
  return st;
}

ftc_status_t ftck_workqueue_add_rate_limited(ftck_workqueue_t *q, const char *key) {
  pthread_mutex_lock(&q->mu);
  int n = (int)json_integer_value(json_object_get(q->failures, key));
  json_object_set_new(q->failures, key, json_integer(n + 1));
  pthread_mutex_unlock(&q->mu);
  return ftck_workqueue_add_after(q, key, ftck_backoff_raw(q->base_ms, q->max_ms, n));
}

void ftck_workqueue_forget(ftck_workqueue_t *q, const char *key) {
  pthread_mutex_lock(&q->mu);
  json_object_del(q->failures, key);
  pthread_mutex_unlock(&q->mu);
}

int ftck_workqueue_requeues(ftck_workqueue_t *q, const char *key) {
  pthread_mutex_lock(&q->mu);
  int n = (int)json_integer_value(json_object_get(q->failures, key));
  pthread_mutex_unlock(&q->mu);
  return n;
}

/* Move due delayed items to the ready queue; return the earliest remaining
 * due time (INT64_MAX if none). Called with mu held. */
static int64_t promote_due(ftck_workqueue_t *q) {
  int64_t now = ftc__now_ns(), next = INT64_MAX;
  for (size_t i = 0; i < q->ndelayed;) {
    if (q->delayed[i].due_ns <= now) {
      if (add_locked(q, q->delayed[i].key) != FTC_OK) { /* no memory: try again shortly */
        if (now + 10000000LL < next) next = now + 10000000LL;
        i++;
        continue;
      }
      ftc__free(q->delayed[i].key);
      q->delayed[i] = q->delayed[--q->ndelayed];
    } else {
      if (q->delayed[i].due_ns < next) next = q->delayed[i].due_ns;
      i++;
    }
  }
  return next;
}

ftc_status_t ftck_workqueue_get(ftck_workqueue_t *q, int64_t timeout_ms, char **key) {
  ftc_status_t st = FTC_OK;
  int64_t deadline = ftc__deadline_ns(timeout_ms);
  *key = NULL;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    if (q->shutting_down) {
      st = FTC_ERR_ABORTED;
      break;
    }
    int64_t next = promote_due(q);
    if (q->count) break;
    int64_t wake = next < deadline ? next : deadline;
    if (ftc__now_ns() >= deadline) {
      st = FTC_ERR_TIMEOUT;
      break;
    }
    if (wake == INT64_MAX) {
      pthread_cond_wait(&q->cv, &q->mu);
    } else {
      struct timespec ts = {.tv_sec = wake / 1000000000LL, .tv_nsec = wake % 1000000000LL};
      pthread_cond_timedwait(&q->cv, &q->mu, &ts);
    }
  }
  if (st == FTC_OK) {
    char *k = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    if (json_object_set_new(q->processing, k, json_true()) != 0) {
      /* Cannot track it: put it back and report, rather than lose it. */
      q->head = (q->head + q->cap - 1) % q->cap;
      q->ring[q->head] = k;
      q->count++;
      st = ftc__error(FTC_ERR_NO_MEMORY, "workqueue: no memory");
    } else {
      json_object_del(q->dirty, k);
      *key = k;
    }
  }
  pthread_mutex_unlock(&q->mu);
  return st;
}

void ftck_workqueue_done(ftck_workqueue_t *q, const char *key) {
  pthread_mutex_lock(&q->mu);
  json_object_del(q->processing, key);
  if (json_object_get(q->dirty, key) && !q->shutting_down) {
    if (push_ready(q, key) == FTC_OK) pthread_cond_signal(&q->cv);
    else json_object_del(q->dirty, key);
  }
  pthread_mutex_unlock(&q->mu);
}

size_t ftck_workqueue_len(ftck_workqueue_t *q) {
  pthread_mutex_lock(&q->mu);
  size_t n = q->count;
  pthread_mutex_unlock(&q->mu);
  return n;
}

size_t ftck_workqueue_waiting(ftck_workqueue_t *q) {
  pthread_mutex_lock(&q->mu);
  size_t n = q->ndelayed;
  pthread_mutex_unlock(&q->mu);
  return n;
}

void ftck_workqueue_shutdown(ftck_workqueue_t *q) {
  pthread_mutex_lock(&q->mu);
  q->shutting_down = 1;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}
