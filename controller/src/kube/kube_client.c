/*
 * kube_client.c - REST calls, paginated LIST and streamed WATCH against the
 * API server. Owns the connection pool (CURLSH) and the per-(verb, code)
 * request counters. Lock order: share locks are leaf locks taken only by
 * libcurl; c->mu (token, stats) is never held across a transfer.
 */
#include "kube_client.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_time.h"

#define MAX_STATS 64

typedef struct stat_entry {
  char verb[8];
  long code;
  uint64_t n;
} stat_entry_t;

struct ftck_client {
  char *server;
  ftck_blob_t ca, cert, key;
  char *token_file;
  long timeout_ms;
  CURLSH *share;
  pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
  pthread_mutex_t mu; /* token, stats */
  char *token;
  stat_entry_t stats[MAX_STATS];
  int nstats;
  uint64_t connections; /* new connections opened (the rest were reused) */
};

typedef struct dynbuf {
  char *p;
  size_t len, cap;
} dynbuf_t;

static int dyn_append(dynbuf_t *b, const char *data, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1) cap *= 2;
    char *np = ftc__realloc(b->p, cap);
    if (!np) return -1;
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static void share_lock(CURL *h, curl_lock_data d, curl_lock_access a, void *ud) {
  (void)h;
  (void)a;
  ftck_client_t *c = ud;
  pthread_mutex_lock(&c->share_mu[d]);
}

static void share_unlock(CURL *h, curl_lock_data d, void *ud) {
  (void)h;
  ftck_client_t *c = ud;
  pthread_mutex_unlock(&c->share_mu[d]);
}

static ftc_status_t dup_blob(ftck_blob_t *dst, const ftck_blob_t *src) {
  if (!src->data) return FTC_OK;
  dst->data = ftc__malloc(src->len + 1);
  if (!dst->data) return ftc__error(FTC_ERR_NO_MEMORY, "kube client: no memory");
  memcpy(dst->data, src->data, src->len);
  dst->data[src->len] = '\0';
  dst->len = src->len;
  return FTC_OK;
}

void ftck_client_destroy(ftck_client_t *c) {
  if (!c) return;
  if (c->share) curl_share_cleanup(c->share);
  for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_destroy(&c->share_mu[i]);
  pthread_mutex_destroy(&c->mu);
  ftc__free(c->server);
  ftc__free(c->ca.data);
  ftc__free(c->cert.data);
  ftc__free(c->key.data);
  ftc__free(c->token);
  ftc__free(c->token_file);
  ftc__free(c);
}

ftc_status_t ftck_client_create(const ftck_config_t *cfg, ftck_client_t **out) {
  ftc_status_t st = FTC_OK;
  *out = NULL;
  pthread_once(&curl_once, curl_init_once);
  ftck_client_t *c = ftc__calloc(1, sizeof *c);
  if (!c) return ftc__error(FTC_ERR_NO_MEMORY, "kube client: no memory");
  for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_init(&c->share_mu[i], NULL);
  pthread_mutex_init(&c->mu, NULL);
  c->timeout_ms = 30000;
  c->server = ftc__strdup(cfg->server);
  c->token = cfg->token ? ftc__strdup(cfg->token) : NULL;
  c->token_file = cfg->token_file ? ftc__strdup(cfg->token_file) : NULL;
  if (!c->server || (cfg->token && !c->token) || (cfg->token_file && !c->token_file)) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "kube client: no memory");
    goto out_destroy;
  }
  FTC_CHECK_GOTO(dup_blob(&c->ca, &cfg->ca), st, out_destroy);
  FTC_CHECK_GOTO(dup_blob(&c->cert, &cfg->cert), st, out_destroy);
  FTC_CHECK_GOTO(dup_blob(&c->key, &cfg->key), st, out_destroy);
  c->share = curl_share_init();
  if (!c->share) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "kube client: curl_share_init failed");
    goto out_destroy;
  }
  curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
  curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
  curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
  curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
  curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  *out = c;
  return FTC_OK;
out_destroy:
  ftck_client_destroy(c);
  return st;
}

void ftck_client_set_timeout(ftck_client_t *c, long timeout_ms) { c->timeout_ms = timeout_ms; }
const char *ftck_client_server(const ftck_client_t *c) { return c->server; }

static void count(ftck_client_t *c, const char *verb, long code) {
  pthread_mutex_lock(&c->mu);
  int i;
  for (i = 0; i < c->nstats; i++)
    if (c->stats[i].code == code && strcmp(c->stats[i].verb, verb) == 0) break;
  if (i == c->nstats && c->nstats < MAX_STATS) {
    snprintf(c->stats[i].verb, sizeof c->stats[i].verb, "%s", verb);
    c->stats[i].code = code;
    c->nstats++;
  }
  if (i < c->nstats) c->stats[i].n++;
  pthread_mutex_unlock(&c->mu);
}

void ftck_client_each_stat(ftck_client_t *c, void (*fn)(const char *, long, uint64_t, void *), void *ud) {
  stat_entry_t copy[MAX_STATS];
  pthread_mutex_lock(&c->mu);
  int n = c->nstats;
  memcpy(copy, c->stats, sizeof copy);
  pthread_mutex_unlock(&c->mu);
  for (int i = 0; i < n; i++) fn(copy[i].verb, copy[i].code, copy[i].n, ud);
}

static void count_connects(ftck_client_t *c, CURL *e) {
  long n = 0;
  if (curl_easy_getinfo(e, CURLINFO_NUM_CONNECTS, &n) == CURLE_OK && n > 0)
    __atomic_add_fetch(&c->connections, (uint64_t)n, __ATOMIC_RELAXED);
}

uint64_t ftck_client_connections(ftck_client_t *c) { return __atomic_load_n(&c->connections, __ATOMIC_RELAXED); }

static size_t write_buf(char *data, size_t size, size_t nmemb, void *ud) {
  return dyn_append(ud, data, size * nmemb) == 0 ? size * nmemb : 0;
}

/* A configured easy handle plus its header list; the caller adds the rest. */
/* Informers (4), workers (up to 64), the Lease and Events, with room. */
#define FTCK_MAX_CONNECTIONS 128

static CURL *easy_for(ftck_client_t *c, const char *verb, const char *path, const char *content_type,
                      struct curl_slist **headers, char *url_buf, size_t url_len) {
  CURL *e = curl_easy_init();
  if (!e) return NULL;
  snprintf(url_buf, url_len, "%s%s", c->server, path);
  curl_easy_setopt(e, CURLOPT_URL, url_buf);
  curl_easy_setopt(e, CURLOPT_SHARE, c->share);
  /* The shared pool keeps at most this many connections, those in use
   * included (libcurl's default is 5): the informers' watches hold one each
   * for good, so with four of them, the Lease and two workers a default pool
   * closed a connection at nearly every request (3,490 TLS handshakes for
   * 3,700 requests at 100 jobs, twice the CPU). */
  curl_easy_setopt(e, CURLOPT_MAXCONNECTS, (long)FTCK_MAX_CONNECTIONS);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "https");
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "ftcomm-controller/0.1");
  curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, verb);
  if (strcmp(verb, "GET") == 0) curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  if (c->ca.data) {
    struct curl_blob b = {.data = c->ca.data, .len = c->ca.len, .flags = CURL_BLOB_NOCOPY};
    curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &b);
  }
  if (c->cert.data) {
    struct curl_blob b = {.data = c->cert.data, .len = c->cert.len, .flags = CURL_BLOB_NOCOPY};
    curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &b);
    curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
    struct curl_blob k = {.data = c->key.data, .len = c->key.len, .flags = CURL_BLOB_NOCOPY};
    curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &k);
    curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
  }
  struct curl_slist *h = NULL, *t;
  char line[8192];
  pthread_mutex_lock(&c->mu);
  if (c->token) snprintf(line, sizeof line, "Authorization: Bearer %s", c->token);
  else line[0] = '\0';
  pthread_mutex_unlock(&c->mu);
  if (line[0] && !(t = curl_slist_append(h, line))) goto out_fail;
  else if (line[0]) h = t;
  if (!(t = curl_slist_append(h, "Accept: application/json"))) goto out_fail;
  h = t;
  snprintf(line, sizeof line, "Content-Type: %s", content_type ? content_type : "application/json");
  if (!(t = curl_slist_append(h, line))) goto out_fail;
  h = t;
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
  *headers = h;
  return e;
out_fail:
  curl_slist_free_all(h);
  curl_easy_cleanup(e);
  return NULL;
}

static void reload_token(ftck_client_t *c) {
  if (!c->token_file) return;
  ftck_config_t tmp = {.token_file = c->token_file};
  if (ftck_config_reload_token(&tmp) != FTC_OK) return;
  pthread_mutex_lock(&c->mu);
  ftc__free(c->token);
  c->token = tmp.token;
  pthread_mutex_unlock(&c->mu);
}

/* Turn a non-2xx answer into an error that carries the server's words. */
static ftc_status_t http_error(const char *verb, const char *path, long code, json_t *body) {
  const char *reason = json_string_value(json_object_get(body, "reason"));
  const char *message = json_string_value(json_object_get(body, "message"));
  return ftc__error(FTC_ERR_PROTOCOL, "%s %s -> %ld %s: %s", verb, path, code, reason ? reason : "",
                    message ? message : "(no message)");
}

ftc_status_t ftck_request(ftck_client_t *c, const char *verb, const char *path, const char *content_type,
                          json_t *body, long *code, json_t **out) {
  ftc_status_t st = FTC_OK;
  long http = 0;
  char *payload = NULL;
  if (out) *out = NULL;
  if (body) {
    payload = json_dumps(body, JSON_COMPACT);
    if (!payload) return ftc__error(FTC_ERR_NO_MEMORY, "kube client: cannot encode the request body");
  }
  for (int attempt = 0; attempt < 2; attempt++) {
    dynbuf_t buf = {0};
    struct curl_slist *headers = NULL;
    char url[4096];
    CURL *e = easy_for(c, verb, path, content_type, &headers, url, sizeof url);
    if (!e) {
      st = ftc__error(FTC_ERR_NO_MEMORY, "kube client: no memory for a request");
      goto out_free_payload;
    }
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_buf);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &buf);
    if (payload) {
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, payload);
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
    }
    CURLcode rc = curl_easy_perform(e);
    http = 0;
    if (rc == CURLE_OK) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &http);
    count_connects(c, e);
    curl_easy_cleanup(e);
    curl_slist_free_all(headers);
    count(c, verb, http);
    if (rc != CURLE_OK) {
      ftc__free(buf.p);
      st = ftc__error(rc == CURLE_OPERATION_TIMEDOUT ? FTC_ERR_TIMEOUT : FTC_ERR_SYSTEM, "%s %s%s: %s", verb,
                      c->server, path, errbuf[0] ? errbuf : curl_easy_strerror(rc));
      goto out_free_payload;
    }
    FTC_TRACE(FTC_SUB_K8S, "%s %s -> %ld", verb, path, http);
    if (http == 401 && c->token_file && attempt == 0) {
      ftc__free(buf.p);
      reload_token(c);
      continue;
    }
    json_t *decoded = NULL;
    if (buf.len) {
      json_error_t jerr;
      decoded = json_loadb(buf.p, buf.len, 0, &jerr);
      if (!decoded && http >= 200 && http < 300) {
        ftc__free(buf.p);
        st = ftc__error(FTC_ERR_PROTOCOL, "%s %s -> %ld with a body that is not JSON: %s", verb, path, http,
                        jerr.text);
        goto out_free_payload;
      }
    }
    ftc__free(buf.p);
    if (http < 200 || http >= 300) {
      st = http_error(verb, path, http, decoded);
      json_decref(decoded);
    } else if (out) {
      *out = decoded;
    } else {
      json_decref(decoded);
    }
    break;
  }
out_free_payload:
  if (code) *code = http;
  ftc__free(payload); /* jansson allocates through ftc__malloc (ftck_json_use_ftc_alloc) */
  return st;
}

ftc_status_t ftck_get(ftck_client_t *c, const char *path, long *code, json_t **out) {
  return ftck_request(c, "GET", path, NULL, NULL, code, out);
}
ftc_status_t ftck_create(ftck_client_t *c, const char *path, json_t *obj, long *code, json_t **out) {
  return ftck_request(c, "POST", path, NULL, obj, code, out);
}
ftc_status_t ftck_replace(ftck_client_t *c, const char *path, json_t *obj, long *code, json_t **out) {
  return ftck_request(c, "PUT", path, NULL, obj, code, out);
}
ftc_status_t ftck_delete(ftck_client_t *c, const char *path, long *code) {
  return ftck_request(c, "DELETE", path, NULL, NULL, code, NULL);
}
ftc_status_t ftck_merge_patch(ftck_client_t *c, const char *path, json_t *patch, long *code, json_t **out) {
  return ftck_request(c, "PATCH", path, "application/merge-patch+json", patch, code, out);
}

ftc_status_t ftck_update_retry(ftck_client_t *c, const char *path, const char *suffix, ftck_mutate_fn mutate,
                               void *ud, int attempts, json_t **out) {
  ftc_status_t st = FTC_OK;
  char put_path[2048];
  snprintf(put_path, sizeof put_path, "%s%s", path, suffix ? suffix : "");
  if (out) *out = NULL;
  for (int i = 0; i < attempts; i++) {
    json_t *obj = NULL;
    long code = 0;
    FTC_CHECK_GOTO(ftck_get(c, path, &code, &obj), st, out_done);
    int m = mutate(obj, ud);
    if (m != 0) {
      if (m > 0 && out) *out = obj;
      else json_decref(obj);
      return m > 0 ? FTC_OK : ftc__error(FTC_ERR_INTERNAL, "update of %s: refused by its mutator", path);
    }
    st = ftck_replace(c, put_path, obj, &code, out);
    json_decref(obj);
    if (st == FTC_OK) return FTC_OK;
    if (code != 409) goto out_done;
    FTC_DEBUG(FTC_SUB_K8S, "conflict on %s (attempt %d of %d); reading it again", put_path, i + 1, attempts);
  }
out_done:
  return st;
}

char *ftck_query_escape(const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = strlen(s);
  char *out = ftc__malloc(n * 3 + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ||
        ch == '.' || ch == '_' || ch == '~') {
      out[o++] = (char)ch;
    } else {
      out[o++] = '%';
      out[o++] = hex[ch >> 4];
      out[o++] = hex[ch & 15];
    }
  }
  out[o] = '\0';
  return out;
}

ftc_status_t ftck_path_add_query(char **path, const char *key, const char *value) {
  if (!value || !*value) return FTC_OK;
  char *esc = ftck_query_escape(value);
  if (!esc) return ftc__error(FTC_ERR_NO_MEMORY, "kube client: no memory");
  size_t n = strlen(*path) + strlen(key) + strlen(esc) + 3;
  char *np = ftc__malloc(n);
  if (!np) {
    ftc__free(esc);
    return ftc__error(FTC_ERR_NO_MEMORY, "kube client: no memory");
  }
  snprintf(np, n, "%s%c%s=%s", *path, strchr(*path, '?') ? '&' : '?', key, esc);
  ftc__free(esc);
  ftc__free(*path);
  *path = np;
  return FTC_OK;
}

char *ftck_path(const char *group, const char *version, const char *ns, const char *plural, const char *name) {
  char buf[1024];
  int n;
  if (!group || !*group) n = snprintf(buf, sizeof buf, "/api/%s", version);
  else n = snprintf(buf, sizeof buf, "/apis/%s/%s", group, version);
  if (ns && *ns) n += snprintf(buf + n, sizeof buf - (size_t)n, "/namespaces/%s", ns);
  n += snprintf(buf + n, sizeof buf - (size_t)n, "/%s", plural);
  if (name && *name) n += snprintf(buf + n, sizeof buf - (size_t)n, "/%s", name);
  if (n >= (int)sizeof buf) return NULL;
  return ftc__strdup(buf);
}

static ftc_status_t build_collection_query(const char *collection, const char *label_selector,
                                           const char *field_selector, char **out) {
  char *p = ftc__strdup(collection);
  if (!p) return ftc__error(FTC_ERR_NO_MEMORY, "kube client: no memory");
  ftc_status_t st = FTC_OK;
  FTC_CHECK_GOTO(ftck_path_add_query(&p, "labelSelector", label_selector), st, out_free);
  FTC_CHECK_GOTO(ftck_path_add_query(&p, "fieldSelector", field_selector), st, out_free);
  *out = p;
  return FTC_OK;
out_free:
  ftc__free(p);
  return st;
}

ftc_status_t ftck_list_pages(ftck_client_t *c, const char *collection, const char *label_selector,
                             const char *field_selector, long page_size, ftck_page_fn on_page, void *ud,
                             char **resource_version, long *code) {
  ftc_status_t st = FTC_OK;
  char *base = NULL;
  *resource_version = NULL;
  if (code) *code = 0;
  FTC_CHECK_GOTO(build_collection_query(collection, label_selector, field_selector, &base), st, out);
  char *cont = NULL;
  int restarted = 0, restart = 0;
  for (;;) {
    char *p = ftc__strdup(base);
    char limit[32];
    snprintf(limit, sizeof limit, "%ld", page_size > 0 ? page_size : 500);
    if (!p) {
      st = ftc__error(FTC_ERR_NO_MEMORY, "kube client: no memory");
      goto out_free_cont;
    }
    if ((st = ftck_path_add_query(&p, "limit", limit)) != FTC_OK ||
        (st = ftck_path_add_query(&p, "continue", cont)) != FTC_OK) {
      ftc__free(p);
      goto out_free_cont;
    }
    json_t *page = NULL;
    long http = 0;
    st = ftck_get(c, p, &http, &page);
    ftc__free(p);
    if (code) *code = http;
    if (st != FTC_OK) {
      if (http == 410 && cont && !restarted) {
        /* The continue token expired; start over with a fresh snapshot. */
        FTC_INFO(FTC_SUB_K8S, "list %s: continue token expired, listing again", collection);
        restarted = restart = 1;
        ftc__free(cont);
        cont = NULL;
        continue;
      }
      goto out_free_cont;
    }
    json_t *pitems = json_object_get(page, "items");
    json_t *meta = json_object_get(page, "metadata");
    const char *rv = json_string_value(json_object_get(meta, "resourceVersion"));
    const char *next = json_string_value(json_object_get(meta, "continue"));
    ftc__free(cont);
    cont = next && *next ? ftc__strdup(next) : NULL;
    if (rv) {
      ftc__free(*resource_version);
      *resource_version = ftc__strdup(rv);
    }
    if (on_page(json_is_array(pitems) ? pitems : NULL, restart, ud) != 0)
      st = ftc__error(FTC_ERR_NO_MEMORY, "list %s: no memory for a page", collection);
    restart = 0;
    json_decref(page);
    if (st != FTC_OK || !cont) break;
  }
out_free_cont:
  ftc__free(cont);
  if (st != FTC_OK) {
    ftc__free(*resource_version);
    *resource_version = NULL;
  }
  ftc__free(base);
out:
  return st;
}

static int collect_page(json_t *items, int restart, void *ud) {
  json_t *all = ud;
  if (restart) json_array_clear(all);
  return items ? json_array_extend(all, items) : 0;
}

ftc_status_t ftck_list(ftck_client_t *c, const char *collection, const char *label_selector,
                       const char *field_selector, long page_size, json_t **items, char **resource_version,
                       long *code) {
  *items = NULL;
  json_t *all = json_array();
  if (!all) {
    *resource_version = NULL;
    if (code) *code = 0;
    return ftc__error(FTC_ERR_NO_MEMORY, "kube client: no memory");
  }
  ftc_status_t st =
      ftck_list_pages(c, collection, label_selector, field_selector, page_size, collect_page, all, resource_version, code);
  if (st != FTC_OK) {
    json_decref(all);
    return st;
  }
  *items = all;
  return FTC_OK;
}

typedef struct watch_ctx {
  CURL *easy;
  dynbuf_t line;
  dynbuf_t error_body;
  ftck_watch_fn fn;
  void *ud;
  const volatile int *stop;
  int stopped_by_callback;
  ftc_status_t st;
} watch_ctx_t;

static int watch_line(watch_ctx_t *w, const char *p, size_t n) {
  if (n == 0) return 0;
  json_error_t jerr;
  json_t *ev = json_loadb(p, n, 0, &jerr);
  if (!ev) {
    w->st = ftc__error(FTC_ERR_PROTOCOL, "watch: an event that is not JSON: %s", jerr.text);
    return -1;
  }
  const char *type = json_string_value(json_object_get(ev, "type"));
  json_t *obj = json_object_get(ev, "object");
  int r = 0;
  if (!type || !json_is_object(obj)) {
    w->st = ftc__error(FTC_ERR_PROTOCOL, "watch: an event without type or object");
    r = -1;
  } else if (w->fn(type, obj, w->ud) != 0) {
    w->stopped_by_callback = 1;
    r = -1;
  }
  json_decref(ev);
  return r;
}

static size_t watch_write(char *data, size_t size, size_t nmemb, void *ud) {
  watch_ctx_t *w = ud;
  size_t n = size * nmemb;
  long http = 0;
  curl_easy_getinfo(w->easy, CURLINFO_RESPONSE_CODE, &http);
  if (http != 200) return dyn_append(&w->error_body, data, n) == 0 ? n : 0;
  if (dyn_append(&w->line, data, n) != 0) {
    w->st = ftc__error(FTC_ERR_NO_MEMORY, "watch: no memory for an event");
    return 0;
  }
  size_t start = 0;
  for (size_t i = w->line.len - n; i < w->line.len; i++) {
    if (w->line.p[i] != '\n') continue;
    if (watch_line(w, w->line.p + start, i - start) != 0) return 0;
    start = i + 1;
  }
  if (start) {
    memmove(w->line.p, w->line.p + start, w->line.len - start);
    w->line.len -= start;
    w->line.p[w->line.len] = '\0';
  }
  return n;
}

static int watch_progress(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
  (void)dt;
  (void)dn;
  (void)ut;
  (void)un;
  watch_ctx_t *w = ud;
  return w->stop && __atomic_load_n(w->stop, __ATOMIC_ACQUIRE) ? 1 : 0;
}

ftc_status_t ftck_watch(ftck_client_t *c, const char *collection, const char *label_selector,
                        const char *field_selector, const char *resource_version, int timeout_s,
                        const volatile int *stop, ftck_watch_fn on_event, void *ud, long *code) {
  ftc_status_t st = FTC_OK;
  char *p = NULL;
  char tbuf[32];
  if (code) *code = 0;
  FTC_CHECK_GOTO(build_collection_query(collection, label_selector, field_selector, &p), st, out);
  snprintf(tbuf, sizeof tbuf, "%d", timeout_s > 0 ? timeout_s : 300);
  if ((st = ftck_path_add_query(&p, "watch", "1")) != FTC_OK ||
      (st = ftck_path_add_query(&p, "allowWatchBookmarks", "true")) != FTC_OK ||
      (st = ftck_path_add_query(&p, "timeoutSeconds", tbuf)) != FTC_OK ||
      (st = ftck_path_add_query(&p, "resourceVersion", resource_version)) != FTC_OK)
    goto out_free_path;
  watch_ctx_t w = {.fn = on_event, .ud = ud, .stop = stop};
  struct curl_slist *headers = NULL;
  char url[4096];
  w.easy = easy_for(c, "GET", p, NULL, &headers, url, sizeof url);
  if (!w.easy) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "watch: no memory for a request");
    goto out_free_path;
  }
  char errbuf[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(w.easy, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(w.easy, CURLOPT_TIMEOUT_MS, (long)(timeout_s > 0 ? timeout_s : 300) * 1000L + 30000L);
  curl_easy_setopt(w.easy, CURLOPT_WRITEFUNCTION, watch_write);
  curl_easy_setopt(w.easy, CURLOPT_WRITEDATA, &w);
  curl_easy_setopt(w.easy, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(w.easy, CURLOPT_XFERINFOFUNCTION, watch_progress);
  curl_easy_setopt(w.easy, CURLOPT_XFERINFODATA, &w);
  CURLcode rc = curl_easy_perform(w.easy);
  long http = 0;
  curl_easy_getinfo(w.easy, CURLINFO_RESPONSE_CODE, &http);
  if (code) *code = http;
  count_connects(c, w.easy);
  count(c, "WATCH", rc == CURLE_OK || http ? http : 0);
  if (w.st != FTC_OK) {
    st = w.st;
  } else if (w.stopped_by_callback || rc == CURLE_ABORTED_BY_CALLBACK) {
    st = FTC_OK;
  } else if (rc != CURLE_OK && !(rc == CURLE_OPERATION_TIMEDOUT && http == 200)) {
    st = ftc__error(rc == CURLE_OPERATION_TIMEDOUT ? FTC_ERR_TIMEOUT : FTC_ERR_SYSTEM, "watch %s: %s", p,
                    errbuf[0] ? errbuf : curl_easy_strerror(rc));
  } else if (http != 200) {
    json_t *body = w.error_body.len ? json_loadb(w.error_body.p, w.error_body.len, 0, NULL) : NULL;
    if (http == 401) reload_token(c);
    st = http_error("WATCH", p, http, body);
    json_decref(body);
  } else if (w.line.len && watch_line(&w, w.line.p, w.line.len) != 0 && !w.stopped_by_callback) {
    st = w.st;
  }
  curl_easy_cleanup(w.easy);
  curl_slist_free_all(headers);
  ftc__free(w.line.p);
  ftc__free(w.error_body.p);
out_free_path:
  ftc__free(p);
out:
  return st;
}

ftc_status_t ftck_event(ftck_client_t *c, const json_t *regarding, const char *type, const char *reason,
                        const char *action, const char *note, const char *reporting_controller,
                        const char *reporting_instance) {
  json_t *meta = json_object_get(regarding, "metadata");
  const char *ns = json_string_value(json_object_get(meta, "namespace"));
  const char *name = json_string_value(json_object_get(meta, "name"));
  if (!ns || !name) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "event: the object has no namespace or name");
  char now[64], evname[300];
  int64_t wall = ftc__wall_ns();
  ftck_format_microtime(wall, now, sizeof now);
  snprintf(evname, sizeof evname, "%s.%llx", name, (unsigned long long)wall); /* client-go's naming */
  json_t *ev = json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:{s:s?, s:s?, s:s, s:s, s:s?, s:s?}}",
                         "apiVersion", "events.k8s.io/v1", "kind", "Event", "metadata", "name", evname,
                         "namespace", ns, "eventTime", now, "reportingController", reporting_controller,
                         "reportingInstance", reporting_instance, "action", action, "reason", reason, "note",
                         note, "type", type, "regarding", "apiVersion",
                         json_string_value(json_object_get(regarding, "apiVersion")), "kind",
                         json_string_value(json_object_get(regarding, "kind")), "namespace", ns, "name", name,
                         "uid", json_string_value(json_object_get(meta, "uid")), "resourceVersion",
                         json_string_value(json_object_get(meta, "resourceVersion")));
  if (!ev) return ftc__error(FTC_ERR_NO_MEMORY, "event: cannot build it");
  char *p = ftck_path("events.k8s.io", "v1", ns, "events", NULL);
  ftc_status_t st = p ? ftck_create(c, p, ev, NULL, NULL) : ftc__error(FTC_ERR_NO_MEMORY, "event: no memory");
  ftc__free(p);
  json_decref(ev);
  return st;
}

void ftck_format_microtime(int64_t wall_ns, char *buf, size_t n) {
  time_t s = (time_t)(wall_ns / 1000000000LL);
  struct tm tm;
  gmtime_r(&s, &tm);
  size_t w = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
  if (w) snprintf(buf + w, n - w, ".%06dZ", (int)((wall_ns % 1000000000LL) / 1000));
}

void ftck_format_time(int64_t wall_ns, char *buf, size_t n) {
  time_t s = (time_t)(wall_ns / 1000000000LL);
  struct tm tm;
  gmtime_r(&s, &tm);
  strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int64_t ftck_parse_time(const char *s) {
  if (!s) return -1;
  struct tm tm = {0};
  const char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
  if (!rest) return -1;
  int64_t frac_ns = 0;
  if (*rest == '.') {
    rest++;
    int64_t scale = 100000000;
    while (*rest >= '0' && *rest <= '9') {
      frac_ns += (*rest - '0') * scale;
      scale /= 10;
      rest++;
    }
  }
  if (*rest != 'Z') return -1;
  /* Nanoseconds since 1970 fit an int64 until 2262; a later (or earlier
   * than 1970) time is none the controller can use. */
  time_t t = timegm(&tm);
  if (t < 0 || (int64_t)t > INT64_MAX / 1000000000LL - 1) return -1;
  return (int64_t)t * 1000000000LL + frac_ns;
}
