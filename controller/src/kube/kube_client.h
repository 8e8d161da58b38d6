/*
 * kube_client.h - a Kubernetes REST client over libcurl and jansson.
 *
 * One client holds one connection pool (a CURLSH sharing connections, TLS
 * sessions and DNS between every request of every thread), so requests
 * reuse keep-alive connections instead of opening one each. TLS is always
 * verified. Calls are safe from any thread.
 *
 * Result convention: FTC_OK when the server answered 2xx. When it answered
 * anything else the call returns FTC_ERR_PROTOCOL, *code holds the HTTP
 * status (404, 409, 410, 422, ...) and ftc_last_error() the server's
 * reason and message. Transport failures return FTC_ERR_SYSTEM or
 * FTC_ERR_TIMEOUT with *code 0. Returned json_t are new references.
 */
#ifndef FTCK_KUBE_CLIENT_H
#define FTCK_KUBE_CLIENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ftcomm.h"
#include "kube_config.h"

typedef struct ftck_client ftck_client_t;

/* Copies what it needs from cfg. */
ftc_status_t ftck_client_create(const ftck_config_t *cfg, ftck_client_t **out);
void ftck_client_destroy(ftck_client_t *c);
/* Per-request timeout for non-watch calls, ms (default 30000). */
void ftck_client_set_timeout(ftck_client_t *c, long timeout_ms);
const char *ftck_client_server(const ftck_client_t *c);

/* Generic request: verb GET/POST/PUT/PATCH/DELETE; path starts with '/'
 * and may carry a query. body may be NULL (borrowed). content_type NULL
 * means application/json. *out (may be NULL) receives the decoded body. */
ftc_status_t ftck_request(ftck_client_t *c, const char *verb, const char *path, const char *content_type,
                          json_t *body, long *code, json_t **out);

ftc_status_t ftck_get(ftck_client_t *c, const char *path, long *code, json_t **out);
ftc_status_t ftck_create(ftck_client_t *c, const char *collection_path, json_t *obj, long *code, json_t **out);
ftc_status_t ftck_replace(ftck_client_t *c, const char *path, json_t *obj, long *code, json_t **out);
ftc_status_t ftck_delete(ftck_client_t *c, const char *path, long *code);
/* application/merge-patch+json */
ftc_status_t ftck_merge_patch(ftck_client_t *c, const char *path, json_t *patch, long *code, json_t **out);

/* Read-modify-write with conflict retry: GET path, call mutate(obj) (which
 * edits obj in place and returns 0 to write, 1 to skip, -1 to fail), PUT it
 * back (path + suffix, e.g. "/status"); on 409 start again, up to
 * `attempts` times. *out (may be NULL) receives the stored object. */
typedef int (*ftck_mutate_fn)(json_t *obj, void *ud);
ftc_status_t ftck_update_retry(ftck_client_t *c, const char *path, const char *suffix, ftck_mutate_fn mutate,
                               void *ud, int attempts, json_t **out);

/* LIST every page (limit/continue) of a collection. *items receives a new
 * array of the objects and *resource_version (owned, ftc__free) the list's
 * resourceVersion. A 410 while paging (continue token expired) restarts
 * the list once from the beginning. */
ftc_status_t ftck_list(ftck_client_t *c, const char *collection_path, const char *label_selector,
                       const char *field_selector, long page_size, json_t **items, char **resource_version,
                       long *code);

/* The same LIST, a page at a time: on_page gets each page's items array
 * (borrowed, NULL for a page without items; it may take references or
 * modify them) and restart = 1 when the list started over after a 410, so
 * what the earlier pages gave is to be dropped. on_page returns 0, or
 * nonzero (no memory) to end the list with an error. Keeps only one page
 * decoded at a time. */
typedef int (*ftck_page_fn)(json_t *items, int restart, void *ud);
ftc_status_t ftck_list_pages(ftck_client_t *c, const char *collection_path, const char *label_selector,
                             const char *field_selector, long page_size, ftck_page_fn on_page, void *ud,
                             char **resource_version, long *code);

/* WATCH a collection from resource_version with allowWatchBookmarks. Each
 * event is decoded as soon as its line arrives and passed to on_event
 * (type "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"; object
 * borrowed). on_event returns 0 to go on, nonzero to end the watch. The
 * call returns when the server closes the stream (timeout_s elapses),
 * on_event stops it, *stop becomes nonzero (checked at least every
 * second), or the connection fails. FTC_OK for a normal end. */
typedef int (*ftck_watch_fn)(const char *type, json_t *object, void *ud);
ftc_status_t ftck_watch(ftck_client_t *c, const char *collection_path, const char *label_selector,
                        const char *field_selector, const char *resource_version, int timeout_s,
                        const volatile int *stop, ftck_watch_fn on_event, void *ud, long *code);

/* Event (events.k8s.io/v1) about `regarding` (an object with apiVersion,
 * kind, metadata). type "Normal" or "Warning". */
ftc_status_t ftck_event(ftck_client_t *c, const json_t *regarding, const char *type, const char *reason,
                        const char *action, const char *note, const char *reporting_controller,
                        const char *reporting_instance);

/* Requests by verb and HTTP code since creation (code 0: transport error).
 * Calls fn once per (verb, code) pair seen. */
void ftck_client_each_stat(ftck_client_t *c, void (*fn)(const char *verb, long code, uint64_t n, void *ud),
                           void *ud);

/* Connections opened so far; every other request reused a pooled one. */
uint64_t ftck_client_connections(ftck_client_t *c);

/* ---- paths, selectors, times ---- */

/* Percent-encode for a query value (RFC 3986 unreserved kept). Owned. */
char *ftck_query_escape(const char *s);
/* Append "?k=v" or "&k=v" (v escaped) to a dynamic path; frees and replaces
 * *path. v NULL or empty: no change. FTC_ERR_NO_MEMORY on failure. */
ftc_status_t ftck_path_add_query(char **path, const char *key, const char *value);
/* "/api/v1/namespaces/NS/pods" style paths. group "" for the core group;
 * ns NULL for cluster-scoped or all namespaces; name NULL for the
 * collection. Owned by the caller. */
char *ftck_path(const char *group, const char *version, const char *ns, const char *plural, const char *name);
/* RFC 3339 with microseconds ("MicroTime"), UTC, from wall ns. buf >= 32. */
void ftck_format_microtime(int64_t wall_ns, char *buf, size_t n);
/* RFC 3339 seconds ("Time"), UTC. buf >= 24. */
void ftck_format_time(int64_t wall_ns, char *buf, size_t n);
/* Parse either form; -1 when it is not one. */
int64_t ftck_parse_time(const char *s);

#endif
