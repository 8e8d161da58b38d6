/*
 * informer.h - a cache of one kind of object kept current by list+watch,
 * like client-go's shared informer.
 *
 * One named thread lists the collection (paginated), then watches from the
 * list's resourceVersion with bookmarks. A 410 Gone (HTTP or an ERROR event
 * with code 410) relists; other failures retry with jittered backoff. After
 * a relist the cache is diffed against the new list, so handlers see adds,
 * updates and deletes that happened while the watch was down. Every resync
 * period each cached object is passed to on_update(obj, obj).
 *
 * Handlers run on the informer thread, without the cache lock held; they
 * should only enqueue keys. Objects passed to them are borrowed, and have
 * been through the transform (see ftck_transform_default).
 */
#ifndef FTCK_INFORMER_H
#define FTCK_INFORMER_H

#include <jansson.h>
#include <stdint.h>

#include "kube_client.h"

typedef struct ftck_handlers {
  void (*on_add)(json_t *obj, void *ud);
  void (*on_update)(json_t *old_obj, json_t *new_obj, void *ud);
  void (*on_delete)(json_t *obj, void *ud);
  void *ud;
} ftck_handlers_t;

/* Trims an object in place before it is cached and handed to handlers, like
 * client-go's TransformFunc: what the cache holds is what readers get. */
typedef void (*ftck_transform_fn)(json_t *obj, void *ud);

/* The default (transform NULL), chosen by the collection's resource:
 *   - every object: metadata.managedFields and the annotation
 *     kubectl.kubernetes.io/last-applied-configuration are dropped;
 *   - pods: spec keeps only its scalar fields (nodeName, restartPolicy,
 *     schedulerName, priority, ...): containers, volumes, affinity,
 *     tolerations and the like are dropped; metadata and status stay whole;
 *   - nodes: status keeps only conditions and addresses.
 * ud is the collection path. Pass ftck_transform_none to cache whole objects. */
void ftck_transform_default(json_t *obj, void *ud);
void ftck_transform_none(json_t *obj, void *ud);

typedef struct ftck_informer_opts {
  const char *name;            /* short, for the thread name and logs ("pods") */
  const char *collection;      /* "/api/v1/pods", "/apis/G/V/namespaces/NS/R", ... */
  const char *label_selector;  /* may be NULL */
  const char *field_selector;  /* may be NULL */
  int64_t resync_ms;           /* 0: never */
  int watch_timeout_s;         /* server-side timeout of one watch; 0: 300 */
  long page_size;              /* LIST page size; 0: 25 (one page is held decoded, whole) */
  ftck_transform_fn transform; /* NULL: ftck_transform_default */
  void *transform_ud;          /* for transform (the default gets the collection) */
} ftck_informer_opts_t;

typedef struct ftck_informer ftck_informer_t;

/* Strings in opts are copied. The client must outlive the informer. */
ftc_status_t ftck_informer_create(ftck_client_t *c, const ftck_informer_opts_t *opts,
                                  const ftck_handlers_t *handlers, ftck_informer_t **out);
ftc_status_t ftck_informer_start(ftck_informer_t *inf);
/* Flag, wake (the watch notices within a second), join. Idempotent. */
void ftck_informer_stop(ftck_informer_t *inf);
void ftck_informer_destroy(ftck_informer_t *inf); /* stops first */

/* 1 once the first list has been stored. */
int ftck_informer_synced(ftck_informer_t *inf);
/* Wait for the first list; FTC_ERR_TIMEOUT if it has not come in time. */
ftc_status_t ftck_informer_wait_synced(ftck_informer_t *inf, int64_t timeout_ms);

/* The cache holds each object as its compact JSON text (after the
 * transform), one allocation per object, indexed by "ns/name"; readers get
 * freshly decoded objects, owned by the caller (jansson's reference counts
 * are not safe to share between threads anyway). */

/* A copy of the cached object "ns/name", or NULL. */
json_t *ftck_informer_get(ftck_informer_t *inf, const char *key);
/* A new array with copies of every cached object, or NULL (no memory). */
json_t *ftck_informer_list(ftck_informer_t *inf);
/* Copies of the objects in namespace ns (NULL: any) whose label `label`
 * equals value (label NULL: every object); NULL on no memory. */
json_t *ftck_informer_select(ftck_informer_t *inf, const char *ns, const char *label, const char *value);
size_t ftck_informer_size(ftck_informer_t *inf);
/* Call fn on every cached object (decoded for the call), under the cache
 * lock: fn only reads (no references kept, no calls back into this informer). */
void ftck_informer_each(ftck_informer_t *inf, void (*fn)(const json_t *obj, void *ud), void *ud);

/* Counters for metrics: lists done, and watches restarted because of 410
 * (expired), an error, or a normal end of the stream (closed). */
typedef struct ftck_informer_stats {
  uint64_t lists;
  uint64_t restarts_expired;
  uint64_t restarts_error;
  uint64_t restarts_closed;
} ftck_informer_stats_t;
void ftck_informer_get_stats(ftck_informer_t *inf, ftck_informer_stats_t *out);
const char *ftck_informer_name(const ftck_informer_t *inf);

#endif
