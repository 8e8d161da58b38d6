/*
 * informer.c - the list+watch loop and the cache behind ftck_informer_t.
 * The cache (a jansson object keyed by "ns/name") is written only by the
 * informer thread and read by anyone under inf->mu. Handlers are called
 * after mu is released, with references the thread holds.
 */
#include "informer.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backoff.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_time.h"
#include "kube_json.h"

struct ftck_informer {
  ftck_client_t *client;
  char *name, *collection, *label_selector, *field_selector;
  int64_t resync_ms;
  int watch_timeout_s;
  long page_size;
  ftck_handlers_t h;

  pthread_t thread;
  int started;
  volatile int stop;
  pthread_mutex_t mu; /* cache, synced, stats, stop wakeups */
  pthread_cond_t cv;
  json_t *cache;
  int synced;
  ftck_informer_stats_t stats;

  /* informer thread only */
  char *rv;
  int need_list;
  int watch_errored; /* an ERROR event ended the last watch */
  int64_t next_resync_ns;
};

static char *dup_opt(const char *s) { return s && *s ? ftc__strdup(s) : NULL; }

ftc_status_t ftck_informer_create(ftck_client_t *c, const ftck_informer_opts_t *o, const ftck_handlers_t *h,
                                  ftck_informer_t **out) {
  *out = NULL;
  if (!o->collection || !o->name)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "informer: name and collection are required");
  ftck_informer_t *inf = ftc__calloc(1, sizeof *inf);
  if (!inf) return ftc__error(FTC_ERR_NO_MEMORY, "informer: no memory");
  pthread_mutex_init(&inf->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&inf->cv, &ca);
  pthread_condattr_destroy(&ca);
  inf->client = c;
  inf->name = ftc__strdup(o->name);
  inf->collection = ftc__strdup(o->collection);
  inf->label_selector = dup_opt(o->label_selector);
  inf->field_selector = dup_opt(o->field_selector);
  inf->cache = json_object();
  inf->resync_ms = o->resync_ms;
  inf->watch_timeout_s = o->watch_timeout_s > 0 ? o->watch_timeout_s : 300;
  inf->page_size = o->page_size > 0 ? o->page_size : 500;
  if (h) inf->h = *h;
  inf->need_list = 1;
  if (!inf->name || !inf->collection || !inf->cache || (o->label_selector && *o->label_selector && !inf->label_selector) ||
      (o->field_selector && *o->field_selector && !inf->field_selector)) {
    ftck_informer_destroy(inf);
    return ftc__error(FTC_ERR_NO_MEMORY, "informer: no memory");
  }
  *out = inf;
  return FTC_OK;
}

static int stopping(ftck_informer_t *inf) { return __atomic_load_n(&inf->stop, __ATOMIC_ACQUIRE); }

/* Sleep up to ms, or until stop. */
static void nap(ftck_informer_t *inf, int64_t ms) {
  int64_t until = ftc__now_ns() + ms * 1000000LL;
  struct timespec ts = {.tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL};
  pthread_mutex_lock(&inf->mu);
  while (!stopping(inf) && ftc__now_ns() < until)
    if (pthread_cond_timedwait(&inf->cv, &inf->mu, &ts) != 0) break;
  pthread_mutex_unlock(&inf->mu);
}

static void set_rv(ftck_informer_t *inf, const char *rv) {
  if (!rv || !*rv) return;
  char *n = ftc__strdup(rv);
  if (!n) return; /* keep the older one: a later relist recovers */
  ftc__free(inf->rv);
  inf->rv = n;
}

/* Replace the cache with a fresh list and tell handlers what changed. -1
 * (cache untouched, list again later) when memory runs out. */
static int apply_list(ftck_informer_t *inf, json_t *items) {
  int rc = -1;
  json_t *fresh = json_object();
  json_t *added = json_array(), *updated_old = json_array(), *updated_new = json_array();
  json_t *removed = json_array();
  if (!fresh || !added || !updated_old || !updated_new || !removed) goto out_free;
  size_t i;
  json_t *obj;
  char key[512];
  json_array_foreach(items, i, obj) {
    if (ftck_object_key(obj, key, sizeof key) == 0 && json_object_set(fresh, key, obj) != 0) goto out_free;
  }
  int bad = 0;
  pthread_mutex_lock(&inf->mu);
  const char *k;
  json_t *v;
  json_object_foreach(fresh, k, v) {
    json_t *old = json_object_get(inf->cache, k);
    if (!old) {
      bad |= json_array_append(added, v);
    } else if (!ftck_jstr(old, "metadata.resourceVersion") || !ftck_jstr(v, "metadata.resourceVersion") ||
               strcmp(ftck_jstr(old, "metadata.resourceVersion"), ftck_jstr(v, "metadata.resourceVersion")) != 0) {
      bad |= json_array_append(updated_old, old);
      bad |= json_array_append(updated_new, v);
    }
  }
  json_object_foreach(inf->cache, k, v) {
    if (!json_object_get(fresh, k)) bad |= json_array_append(removed, v);
  }
  if (bad) {
    pthread_mutex_unlock(&inf->mu);
    goto out_free;
  }
  json_decref(inf->cache);
  inf->cache = fresh;
  fresh = NULL;
  inf->stats.lists++;
  pthread_mutex_unlock(&inf->mu);
  if (inf->h.on_add) json_array_foreach(added, i, obj) inf->h.on_add(obj, inf->h.ud);
  if (inf->h.on_update)
    json_array_foreach(updated_new, i, obj) inf->h.on_update(json_array_get(updated_old, i), obj, inf->h.ud);
  if (inf->h.on_delete) json_array_foreach(removed, i, obj) inf->h.on_delete(obj, inf->h.ud);
  /* Synced only once the handlers have seen the first list (client-go's HasSynced). */
  pthread_mutex_lock(&inf->mu);
  inf->synced = 1;
  pthread_cond_broadcast(&inf->cv);
  pthread_mutex_unlock(&inf->mu);
  rc = 0;
out_free:
  if (rc != 0) FTC_WARN(FTC_SUB_K8S, "informer %s: no memory to apply a list; will list again", inf->name);
  json_decref(fresh);
  json_decref(added);
  json_decref(updated_old);
  json_decref(updated_new);
  json_decref(removed);
  return rc;
}

static int on_event(const char *type, json_t *obj, void *ud) {
  ftck_informer_t *inf = ud;
  char key[512];
  if (strcmp(type, "BOOKMARK") == 0) {
    set_rv(inf, ftck_jstr(obj, "metadata.resourceVersion"));
    return 0;
  }
  if (strcmp(type, "ERROR") == 0) {
    int64_t code = ftck_jint(obj, "code", 0);
    const char *msg = ftck_jstr(obj, "message");
    pthread_mutex_lock(&inf->mu);
    if (code == 410) inf->stats.restarts_expired++;
    else inf->stats.restarts_error++;
    pthread_mutex_unlock(&inf->mu);
    if (code == 410) {
      FTC_INFO(FTC_SUB_K8S, "informer %s: watch expired (%s); listing again", inf->name, msg ? msg : "410");
      inf->need_list = 1;
    } else {
      inf->watch_errored = 1;
      FTC_WARN(FTC_SUB_K8S, "informer %s: watch error %lld: %s", inf->name, (long long)code, msg ? msg : "");
    }
    return 1;
  }
  if (ftck_object_key(obj, key, sizeof key) != 0) return 0;
  set_rv(inf, ftck_jstr(obj, "metadata.resourceVersion"));
  json_t *old = NULL;
  pthread_mutex_lock(&inf->mu);
  old = json_incref(json_object_get(inf->cache, key));
  int ok = 0;
  if (strcmp(type, "DELETED") == 0) ok = json_object_del(inf->cache, key) == 0 || !old;
  else ok = json_object_set(inf->cache, key, obj) == 0;
  pthread_mutex_unlock(&inf->mu);
  if (!ok) {
    FTC_WARN(FTC_SUB_K8S, "informer %s: no memory to cache %s; will list again", inf->name, key);
    inf->need_list = 1;
    json_decref(old);
    return 1;
  }
  if (strcmp(type, "DELETED") == 0) {
    if (inf->h.on_delete) inf->h.on_delete(obj, inf->h.ud);
  } else if (old) {
    if (inf->h.on_update) inf->h.on_update(old, obj, inf->h.ud);
  } else if (inf->h.on_add) {
    inf->h.on_add(obj, inf->h.ud);
  }
  json_decref(old);
  return 0;
}

static void resync(ftck_informer_t *inf) {
  /* On the informer thread, which alone holds references to cached objects. */
  json_t *all = json_array();
  if (all) {
    pthread_mutex_lock(&inf->mu);
    const char *k;
    json_t *v;
    json_object_foreach(inf->cache, k, v) json_array_append(all, v);
    pthread_mutex_unlock(&inf->mu);
  }
  size_t i;
  json_t *obj;
  if (inf->h.on_update && all) json_array_foreach(all, i, obj) inf->h.on_update(obj, obj, inf->h.ud);
  json_decref(all);
}

static void *informer_main(void *arg) {
  ftck_informer_t *inf = arg;
  ftck_backoff_t bo = FTCK_BACKOFF_INIT(500, 30000);
  if (inf->resync_ms > 0) inf->next_resync_ns = ftc__now_ns() + inf->resync_ms * 1000000LL;
  while (!stopping(inf)) {
    long code = 0;
    if (inf->need_list) {
      json_t *items = NULL;
      char *rv = NULL;
      ftc_status_t st = ftck_list(inf->client, inf->collection, inf->label_selector, inf->field_selector,
                                  inf->page_size, &items, &rv, &code);
      if (st != FTC_OK) {
        int64_t d = ftck_backoff_next(&bo);
        FTC_WARN(FTC_SUB_K8S, "informer %s: list failed (%s); retrying in %lld ms", inf->name, ftc_last_error(),
                 (long long)d);
        nap(inf, d);
        continue;
      }
      ftc__free(inf->rv);
      inf->rv = rv;
      int applied = apply_list(inf, items);
      json_decref(items);
      if (applied != 0) {
        nap(inf, ftck_backoff_next(&bo));
        continue;
      }
      inf->need_list = 0;
      FTC_DEBUG(FTC_SUB_K8S, "informer %s: listed %zu objects at resourceVersion %s", inf->name,
                ftck_informer_size(inf), inf->rv ? inf->rv : "?");
      continue;
    }
    int timeout = inf->watch_timeout_s;
    if (inf->resync_ms > 0) {
      int64_t left_s = (inf->next_resync_ns - ftc__now_ns()) / 1000000000LL;
      if (left_s < 1) left_s = 1;
      if (left_s < timeout) timeout = (int)left_s;
    }
    ftc_status_t st = ftck_watch(inf->client, inf->collection, inf->label_selector, inf->field_selector, inf->rv,
                                 timeout, &inf->stop, on_event, inf, &code);
    if (stopping(inf)) break;
    if (code == 410) {
      pthread_mutex_lock(&inf->mu);
      inf->stats.restarts_expired++;
      pthread_mutex_unlock(&inf->mu);
      FTC_INFO(FTC_SUB_K8S, "informer %s: resourceVersion too old (410); listing again", inf->name);
      inf->need_list = 1;
    } else if (st != FTC_OK) {
      pthread_mutex_lock(&inf->mu);
      inf->stats.restarts_error++;
      pthread_mutex_unlock(&inf->mu);
      int64_t d = ftck_backoff_next(&bo);
      FTC_WARN(FTC_SUB_K8S, "informer %s: watch failed (%s); retrying in %lld ms", inf->name, ftc_last_error(),
               (long long)d);
      nap(inf, d);
    } else if (inf->watch_errored) {
      inf->watch_errored = 0;
      nap(inf, ftck_backoff_next(&bo));
    } else if (!inf->need_list) {
      pthread_mutex_lock(&inf->mu);
      inf->stats.restarts_closed++;
      pthread_mutex_unlock(&inf->mu);
      ftck_backoff_reset(&bo);
    }
    if (inf->resync_ms > 0 && ftc__now_ns() >= inf->next_resync_ns) {
      resync(inf);
      inf->next_resync_ns = ftc__now_ns() + inf->resync_ms * 1000000LL;
    }
  }
  return NULL;
}

ftc_status_t ftck_informer_start(ftck_informer_t *inf) {
  if (inf->started) return FTC_OK;
  int rc = pthread_create(&inf->thread, NULL, informer_main, inf);
  if (rc != 0) return ftc__error(FTC_ERR_SYSTEM, "informer %s: cannot start its thread: %s", inf->name, strerror(rc));
  char tname[16];
  snprintf(tname, sizeof tname, "ftck-inf-%s", inf->name);
  pthread_setname_np(inf->thread, tname);
  inf->started = 1;
  return FTC_OK;
}

void ftck_informer_stop(ftck_informer_t *inf) {
  if (!inf || !inf->started) return;
  pthread_mutex_lock(&inf->mu);
  __atomic_store_n(&inf->stop, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&inf->cv);
  pthread_mutex_unlock(&inf->mu);
  pthread_join(inf->thread, NULL);
  inf->started = 0;
}

void ftck_informer_destroy(ftck_informer_t *inf) {
  if (!inf) return;
  ftck_informer_stop(inf);
  json_decref(inf->cache);
  pthread_mutex_destroy(&inf->mu);
  pthread_cond_destroy(&inf->cv);
  ftc__free(inf->name);
  ftc__free(inf->collection);
  ftc__free(inf->label_selector);
  ftc__free(inf->field_selector);
  ftc__free(inf->rv);
  ftc__free(inf);
}

int ftck_informer_synced(ftck_informer_t *inf) {
  pthread_mutex_lock(&inf->mu);
  int s = inf->synced;
  pthread_mutex_unlock(&inf->mu);
  return s;
}

ftc_status_t ftck_informer_wait_synced(ftck_informer_t *inf, int64_t timeout_ms) {
  int64_t until = ftc__deadline_ns(timeout_ms);
  struct timespec ts = {.tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL};
  pthread_mutex_lock(&inf->mu);
  while (!inf->synced && !stopping(inf) && ftc__now_ns() < until) {
    if (until == INT64_MAX) pthread_cond_wait(&inf->cv, &inf->mu);
    else pthread_cond_timedwait(&inf->cv, &inf->mu, &ts);
  }
  int s = inf->synced;
  pthread_mutex_unlock(&inf->mu);
  return s ? FTC_OK : ftc__error(FTC_ERR_TIMEOUT, "informer %s: not synced after %lld ms", inf->name,
                                 (long long)timeout_ms);
}

json_t *ftck_informer_get(ftck_informer_t *inf, const char *key) {
  pthread_mutex_lock(&inf->mu);
  json_t *v = json_object_get(inf->cache, key);
  json_t *o = v ? json_deep_copy(v) : NULL;
  pthread_mutex_unlock(&inf->mu);
  return o;
}

json_t *ftck_informer_select(ftck_informer_t *inf, const char *ns, const char *label, const char *value) {
  json_t *arr = json_array();
  if (!arr) return NULL;
  pthread_mutex_lock(&inf->mu);
  const char *k;
  json_t *v;
  json_object_foreach(inf->cache, k, v) {
    if (ns && strcmp(ftck_jstr(v, "metadata.namespace") ? ftck_jstr(v, "metadata.namespace") : "", ns) != 0) continue;
    if (label) {
      const char *lv = json_string_value(json_object_get(ftck_jget(v, "metadata.labels"), label));
      if (!lv || !value || strcmp(lv, value) != 0) continue;
    }
    if (json_array_append_new(arr, json_deep_copy(v)) != 0) {
      json_decref(arr);
      arr = NULL;
      break;
    }
  }
  pthread_mutex_unlock(&inf->mu);
  return arr;
}

json_t *ftck_informer_list(ftck_informer_t *inf) { return ftck_informer_select(inf, NULL, NULL, NULL); }

void ftck_informer_each(ftck_informer_t *inf, void (*fn)(const json_t *obj, void *ud), void *ud) {
  pthread_mutex_lock(&inf->mu);
  const char *k;
  json_t *v;
  json_object_foreach(inf->cache, k, v) fn(v, ud);
  pthread_mutex_unlock(&inf->mu);
}

size_t ftck_informer_size(ftck_informer_t *inf) {
  pthread_mutex_lock(&inf->mu);
  size_t n = json_object_size(inf->cache);
  pthread_mutex_unlock(&inf->mu);
  return n;
}

void ftck_informer_get_stats(ftck_informer_t *inf, ftck_informer_stats_t *out) {
  pthread_mutex_lock(&inf->mu);
  *out = inf->stats;
  pthread_mutex_unlock(&inf->mu);
}

const char *ftck_informer_name(const ftck_informer_t *inf) { return inf->name; }
