/*
 * informer.c - the list+watch loop and the cache behind ftck_informer_t.
 * The cache is a hash table keyed by "ns/name" whose entries hold the
 * transformed object as compact JSON text (one allocation each: key,
 * resourceVersion, labels and text), written only by the informer thread
 * and read by anyone under inf->mu; readers decode what they need. A pod
 * as jansson values costs ~10x its text, so at thousands of pods this is
 * most of the controller's memory. Handlers are called after mu is
 * released, with objects the thread owns.
 */
#include "informer.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backoff.h"
#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_time.h"
#include "kube_json.h"


/* ---- the cache: a chained hash table of one-allocation entries ---- */

typedef struct entry {
  struct entry *next;
  size_t hash;
  const char *rv;     /* "" when the object had none */
  const char *labels; /* "k\0v\0k\0v\0" ... ended by an empty key */
  const char *text;   /* compact JSON */
  size_t len;         /* of text */
  char key_text[];    /* key "\0", then rv, labels, text "\0" */
} entry_t;


typedef struct cache {
  entry_t **b;
  size_t nb, n;
} cache_t;

static size_t hash_key(const char *k) {
  size_t h = 1469598103934665603ULL; /* FNV-1a */
  for (; *k; k++) h = (h ^ (unsigned char)*k) * 1099511628211ULL;
  return h;
}

static entry_t *cache_find(const cache_t *c, const char *key) {
  if (!c->nb) return NULL;
  size_t h = hash_key(key);
  for (entry_t *e = c->b[h & (c->nb - 1)]; e; e = e->next)
    if (e->hash == h && !strcmp(e->key_text, key)) return e;
  return NULL;
}

static int cache_grow(cache_t *c) {
  size_t nb = c->nb ? c->nb * 2 : 64;
  entry_t **b = ftc__calloc(nb, sizeof *b);
  if (!b) return -1;
  for (size_t i = 0; i < c->nb; i++) {
    for (entry_t *e = c->b[i], *next; e; e = next) {
      next = e->next;
      e->next = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
    }
  }
  ftc__free(c->b);
  c->b = b;
  c->nb = nb;
  return 0;
}

/* Put e in place of the entry with its key; returns that entry (now out of
 * the table, the caller frees it) or NULL. *failed on no memory (e is then
 * not in the table). */
static entry_t *cache_put(cache_t *c, entry_t *e, int *failed) {
  *failed = 0;
  if (c->n + 1 > c->nb && cache_grow(c) != 0 && !c->nb) {
    *failed = 1;
    return NULL;
  }
  entry_t **pp = &c->b[e->hash & (c->nb - 1)];
  for (; *pp; pp = &(*pp)->next) {
    if ((*pp)->hash == e->hash && !strcmp((*pp)->key_text, e->key_text)) {
      entry_t *old = *pp;
      e->next = old->next;
      *pp = e;
      return old;
    }
  }
  e->next = NULL;
  *pp = e;
  c->n++;
  return NULL;
}

static entry_t *cache_del(cache_t *c, const char *key) {
  if (!c->nb) return NULL;
  size_t h = hash_key(key);
  for (entry_t **pp = &c->b[h & (c->nb - 1)]; *pp; pp = &(*pp)->next) {
    if ((*pp)->hash == h && !strcmp((*pp)->key_text, key)) {
      entry_t *e = *pp;
      *pp = e->next;
      c->n--;
      return e;
    }
  }
  return NULL;
}

static void cache_clear(cache_t *c) {
  for (size_t i = 0; i < c->nb; i++) {
    for (entry_t *e = c->b[i], *next; e; e = next) {
      next = e->next;
      ftc__free(e);
    }
  }
  ftc__free(c->b);
  c->b = NULL;
  c->nb = c->n = 0;
}

#define CACHE_FOREACH(c, e)                  \
  for (size_t i_ = 0; i_ < (c)->nb; i_++)    \
    for (entry_t *e = (c)->b[i_]; e; e = e->next)

/* An entry for obj (already transformed), or NULL: no key, or no memory
 * (*nomem set). */
static entry_t *entry_new(const json_t *obj, int *nomem) {
  char key[512];
  *nomem = 0;
  if (ftck_object_key(obj, key, sizeof key) != 0) return NULL;
  const char *rv = ftck_jstr(obj, "metadata.resourceVersion");
  if (!rv) rv = "";
  json_t *labels = ftck_jget(obj, "metadata.labels");
  size_t lsize = 1;
  const char *k;
  json_t *v;
  json_object_foreach(labels, k, v) {
    if (json_is_string(v) && *k) lsize += strlen(k) + 1 + json_string_length(v) + 1;
  }
  char *text = json_dumps(obj, JSON_COMPACT);
  if (!text) {
    *nomem = 1;
    return NULL;
  }
  size_t klen = strlen(key) + 1, rlen = strlen(rv) + 1, tlen = strlen(text);
  entry_t *e = ftc__malloc(sizeof *e + klen + rlen + lsize + tlen + 1);
  if (!e) {
    ftc__free(text);
    *nomem = 1;
    return NULL;
  }
  char *p = e->key_text;
  memcpy(p, key, klen);
  p += klen;
  e->rv = p;
  memcpy(p, rv, rlen);
  p += rlen;
  e->labels = p;
  json_object_foreach(labels, k, v) {
    if (!json_is_string(v) || !*k) continue;
    size_t n = strlen(k) + 1;
    memcpy(p, k, n);
    p += n;
    n = json_string_length(v);
    memcpy(p, json_string_value(v), n);
    p[n] = '\0'; /* a value with a NUL inside ends there; label values have none */
    p += n + 1;
  }
  *p++ = '\0';
  e->text = p;
  memcpy(p, text, tlen + 1);
  e->len = tlen;
  e->hash = hash_key(e->key_text);
  e->next = NULL;
  ftc__free(text);
  return e;
}

static json_t *entry_decode(const entry_t *e) { return json_loadb(e->text, e->len, 0, NULL); }

/* The namespace part of the key ("" for a cluster-scoped object) equals ns. */
static int entry_in_ns(const entry_t *e, const char *ns) {
  const char *slash = strchr(e->key_text, '/');
  size_t n = slash ? (size_t)(slash - e->key_text) : 0;
  return strlen(ns) == n && !strncmp(e->key_text, ns, n);
}

static const char *entry_label(const entry_t *e, const char *label) {
  for (const char *p = e->labels; *p;) {
    const char *v = p + strlen(p) + 1;
    if (!strcmp(p, label)) return v;
    p = v + strlen(v) + 1;
  }
  return NULL;
}

/* ---- transforms ---- */

void ftck_transform_none(json_t *obj, void *ud) {
  (void)obj;
  (void)ud;
}

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

void ftck_transform_default(json_t *obj, void *ud) {
  const char *collection = ud;
  json_t *meta = json_object_get(obj, "metadata");
  json_object_del(meta, "managedFields");
  json_t *annots = json_object_get(meta, "annotations");
  json_object_del(annots, "kubectl.kubernetes.io/last-applied-configuration");
  if (json_is_object(annots) && json_object_size(annots) == 0) json_object_del(meta, "annotations");
  if (!collection) return;
  const char *k;
  void *tmp;
  json_t *v;
  if (ends_with(collection, "/pods")) {
    json_t *spec = json_object_get(obj, "spec");
    json_object_foreach_safe(spec, tmp, k, v) {
      if (json_is_object(v) || json_is_array(v)) json_object_del(spec, k);
    }
  } else if (ends_with(collection, "/nodes")) {
    json_t *status = json_object_get(obj, "status");
    json_object_foreach_safe(status, tmp, k, v) {
      if (strcmp(k, "conditions") != 0 && strcmp(k, "addresses") != 0) json_object_del(status, k);
    }
  }
}

struct ftck_informer {
  ftck_client_t *client;
  char *name, *collection, *label_selector, *field_selector;
  int64_t resync_ms;
  int watch_timeout_s;
  long page_size;
  ftck_handlers_t h;
  ftck_transform_fn transform;
  void *transform_ud;

  pthread_t thread;
  int started;
  volatile int stop;
  pthread_mutex_t mu; /* cache, synced, stats, stop wakeups */
  pthread_cond_t cv;
  cache_t cache;
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
  inf->resync_ms = o->resync_ms;
  inf->watch_timeout_s = o->watch_timeout_s > 0 ? o->watch_timeout_s : 300;
  inf->page_size = o->page_size > 0 ? o->page_size : 25;
  inf->transform = o->transform ? o->transform : ftck_transform_default;
  inf->transform_ud = o->transform ? o->transform_ud : inf->collection;
  if (h) inf->h = *h;
  inf->need_list = 1;
  if (!inf->name || !inf->collection || (o->label_selector && *o->label_selector && !inf->label_selector) ||
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

/* A relist, one page at a time: each item is transformed and stored as an
 * entry of a fresh table, so only one page is ever held decoded. */
typedef struct list_acc {
  ftck_informer_t *inf;
  cache_t fresh;
} list_acc_t;

static int list_page(json_t *items, int restart, void *ud) {
  list_acc_t *acc = ud;
  if (restart) cache_clear(&acc->fresh);
  size_t i;
  json_t *obj;
  json_array_foreach(items, i, obj) {
    int nomem = 0, failed = 0;
    acc->inf->transform(obj, acc->inf->transform_ud);
    entry_t *e = entry_new(obj, &nomem);
    if (nomem) return -1;
    if (!e) continue;
    entry_t *dup = cache_put(&acc->fresh, e, &failed);
    ftc__free(dup);
    if (failed) {
      ftc__free(e);
      return -1;
    }
  }
  return 0;
}

/* Entries whose handlers are still to run: pointers only, so a relist of
 * thousands of objects never holds more than one of them decoded. */
typedef struct plist {
  const entry_t **p;
  size_t n, cap;
} plist_t;

static int plist_add(plist_t *l, const entry_t *e) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    const entry_t **np = ftc__realloc(l->p, cap * sizeof *np);
    if (!np) return -1;
    l->p = np;
    l->cap = cap;
  }
  l->p[l->n++] = e;
  return 0;
}

/* Swap in a freshly listed table and tell handlers what changed, decoding
 * one object at a time. -1 (cache untouched, list again later) when memory
 * runs out. */
static int apply_list(ftck_informer_t *inf, cache_t *fresh) {
  int rc = -1;
  plist_t added = {0}, updated_old = {0}, updated_new = {0}, removed = {0};
  cache_t old = {0};
  int bad = 0;
  /* Only this thread writes the cache, so reading it without the lock is safe
   * here; after the swap the fresh entries stay put until this thread changes
   * them, and the old ones are ours alone. */
  CACHE_FOREACH(fresh, e) {
    const entry_t *was = cache_find(&inf->cache, e->key_text);
    if (!was) {
      bad |= plist_add(&added, e);
    } else if (!*was->rv || !*e->rv || strcmp(was->rv, e->rv) != 0) {
      bad |= plist_add(&updated_old, was);
      bad |= plist_add(&updated_new, e);
    }
  }
  CACHE_FOREACH(&inf->cache, e) {
    if (!cache_find(fresh, e->key_text)) bad |= plist_add(&removed, e);
  }
  if (bad) goto out_free;
  pthread_mutex_lock(&inf->mu);
  old = inf->cache;
  inf->cache = *fresh;
  *fresh = (cache_t){0};
  inf->stats.lists++;
  pthread_mutex_unlock(&inf->mu);
  for (size_t i = 0; i < added.n && inf->h.on_add; i++) {
    json_t *o = entry_decode(added.p[i]);
    if (o) inf->h.on_add(o, inf->h.ud);
    json_decref(o);
  }
  for (size_t i = 0; i < updated_new.n && inf->h.on_update; i++) {
    json_t *o = entry_decode(updated_old.p[i]), *n = entry_decode(updated_new.p[i]);
    if (o && n) inf->h.on_update(o, n, inf->h.ud);
    json_decref(o);
    json_decref(n);
  }
  for (size_t i = 0; i < removed.n && inf->h.on_delete; i++) {
    json_t *o = entry_decode(removed.p[i]);
    if (o) inf->h.on_delete(o, inf->h.ud);
    json_decref(o);
  }
  /* Synced only once the handlers have seen the first list (client-go's HasSynced). */
  pthread_mutex_lock(&inf->mu);
  inf->synced = 1;
  pthread_cond_broadcast(&inf->cv);
  pthread_mutex_unlock(&inf->mu);
  rc = 0;
out_free:
  if (rc != 0) FTC_WARN(FTC_SUB_K8S, "informer %s: no memory to apply a list; will list again", inf->name);
  cache_clear(&old);
  ftc__free(added.p);
  ftc__free(updated_old.p);
  ftc__free(updated_new.p);
  ftc__free(removed.p);
#ifdef __GLIBC__
  /* The pages decoded for this list were freed between entries that stay:
   * hand those holes back to the system (glibc keeps them otherwise). */
  malloc_trim(0);
#endif
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
  int deleted = strcmp(type, "DELETED") == 0;
  /* The event's object is ours (the watch frees it after this call). */
  inf->transform(obj, inf->transform_ud);
  entry_t *e = NULL, *was = NULL;
  int nomem = 0, failed = 0;
  if (!deleted) {
    e = entry_new(obj, &nomem);
    if (!e) nomem = 1;
  }
  if (!nomem) {
    pthread_mutex_lock(&inf->mu);
    if (deleted) was = cache_del(&inf->cache, key);
    else was = cache_put(&inf->cache, e, &failed);
    pthread_mutex_unlock(&inf->mu);
  }
  if (nomem || failed) {
    FTC_WARN(FTC_SUB_K8S, "informer %s: no memory to cache %s; will list again", inf->name, key);
    inf->need_list = 1;
    ftc__free(e);
    return 1;
  }
  /* was is out of the table: only this thread sees it now. */
  json_t *old = was && !deleted && inf->h.on_update ? entry_decode(was) : NULL;
  if (deleted) {
    if (inf->h.on_delete) inf->h.on_delete(obj, inf->h.ud);
  } else if (was) {
    if (inf->h.on_update) inf->h.on_update(old ? old : obj, obj, inf->h.ud);
  } else if (inf->h.on_add) {
    inf->h.on_add(obj, inf->h.ud);
  }
  json_decref(old);
  ftc__free(was);
  return 0;
}

static void resync(ftck_informer_t *inf) {
  json_t *all = json_array();
  if (all) {
    pthread_mutex_lock(&inf->mu);
    CACHE_FOREACH(&inf->cache, e) json_array_append_new(all, entry_decode(e));
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
      list_acc_t acc = {.inf = inf};
      char *rv = NULL;
      ftc_status_t st = ftck_list_pages(inf->client, inf->collection, inf->label_selector, inf->field_selector,
                                        inf->page_size, list_page, &acc, &rv, &code);
      if (st != FTC_OK) {
        cache_clear(&acc.fresh);
        int64_t d = ftck_backoff_next(&bo);
        FTC_WARN(FTC_SUB_K8S, "informer %s: list failed (%s); retrying in %lld ms", inf->name, ftc_last_error(),
                 (long long)d);
        nap(inf, d);
        continue;
      }
      ftc__free(inf->rv);
      inf->rv = rv;
      int applied = apply_list(inf, &acc.fresh);
      cache_clear(&acc.fresh);
      if (applied != 0) {
        nap(inf, ftck_backoff_next(&bo));
        continue;
      }
      inf->need_list = 0;
      /* The server answered: a watch that fails next starts from the
       * first delay, not from where an outage left the count. */
      ftck_backoff_reset(&bo);
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
  cache_clear(&inf->cache);
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
  const entry_t *e = cache_find(&inf->cache, key);
  json_t *o = e ? entry_decode(e) : NULL;
  pthread_mutex_unlock(&inf->mu);
  return o;
}

json_t *ftck_informer_select(ftck_informer_t *inf, const char *ns, const char *label, const char *value) {
  json_t *arr = json_array();
  if (!arr) return NULL;
  pthread_mutex_lock(&inf->mu);
  CACHE_FOREACH(&inf->cache, e) {
    if (ns && !entry_in_ns(e, ns)) continue;
    if (label) {
      const char *lv = entry_label(e, label);
      if (!lv || !value || strcmp(lv, value) != 0) continue;
    }
    json_t *o = entry_decode(e);
    if (!o || json_array_append_new(arr, o) != 0) {
      json_decref(arr);
      arr = NULL;
      goto out;
    }
  }
out:
  pthread_mutex_unlock(&inf->mu);
  return arr;
}

json_t *ftck_informer_list(ftck_informer_t *inf) { return ftck_informer_select(inf, NULL, NULL, NULL); }

void ftck_informer_each(ftck_informer_t *inf, void (*fn)(const json_t *obj, void *ud), void *ud) {
  pthread_mutex_lock(&inf->mu);
  CACHE_FOREACH(&inf->cache, e) {
    json_t *o = entry_decode(e);
    if (o) fn(o, ud);
    json_decref(o);
  }
  pthread_mutex_unlock(&inf->mu);
}

size_t ftck_informer_size(ftck_informer_t *inf) {
  pthread_mutex_lock(&inf->mu);
  size_t n = inf->cache.n;
  pthread_mutex_unlock(&inf->mu);
  return n;
}

void ftck_informer_get_stats(ftck_informer_t *inf, ftck_informer_stats_t *out) {
  pthread_mutex_lock(&inf->mu);
  *out = inf->stats;
  pthread_mutex_unlock(&inf->mu);
}

const char *ftck_informer_name(const ftck_informer_t *inf) { return inf->name; }
