/*
 * kube_json.h - small helpers for Kubernetes objects held as jansson
 * values: dotted-path lookups, the "namespace/name" key, and routing
 * jansson's allocations through ftc__malloc so tests can fail them.
 */
#ifndef FTCK_KUBE_JSON_H
#define FTCK_KUBE_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Make jansson allocate with ftc__malloc/ftc__free. Call once at start. */
void ftck_json_use_ftc_alloc(void);

/* Value at a dotted path ("metadata.labels"), borrowed; NULL if absent. A
 * segment never contains a dot, so labels with dots are read with
 * json_object_get on the parent. */
json_t *ftck_jget(const json_t *obj, const char *dotted);
const char *ftck_jstr(const json_t *obj, const char *dotted); /* NULL unless a string */
/* Integer at a path, or def when absent or not an integer. */
int64_t ftck_jint(const json_t *obj, const char *dotted, int64_t def);
/* Boolean at a path, or def. */
int ftck_jbool(const json_t *obj, const char *dotted, int def);

/* "namespace/name" (or "name" when cluster-scoped) into buf; 0 on success,
 * -1 when the object has no name or buf is too small. */
int ftck_object_key(const json_t *obj, char *buf, size_t n);
/* Split a key; ns gets "" for a cluster-scoped key. -1 when too long. */
int ftck_split_key(const char *key, char *ns, size_t ns_len, char *name, size_t name_len);

#endif
