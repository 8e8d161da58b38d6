/*
 * kube_json.c - dotted-path lookups and object keys for Kubernetes JSON.
 */
#include "kube_json.h"

#include <stdio.h>
#include <string.h>

#include "ftc_alloc.h"

void ftck_json_use_ftc_alloc(void) { json_set_alloc_funcs(ftc__malloc, ftc__free); }

json_t *ftck_jget(const json_t *obj, const char *dotted) {
  const json_t *cur = obj;
  const char *p = dotted;
  char seg[256];
  while (cur && *p) {
    const char *dot = strchr(p, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    if (n >= sizeof seg) return NULL;
    memcpy(seg, p, n);
    seg[n] = '\0';
    cur = json_object_get(cur, seg);
    p = dot ? dot + 1 : p + n;
  }
  return (json_t *)cur;
}

const char *ftck_jstr(const json_t *obj, const char *dotted) { return json_string_value(ftck_jget(obj, dotted)); }

int64_t ftck_jint(const json_t *obj, const char *dotted, int64_t def) {
  json_t *v = ftck_jget(obj, dotted);
  return json_is_integer(v) ? (int64_t)json_integer_value(v) : def;
}

int ftck_jbool(const json_t *obj, const char *dotted, int def) {
  json_t *v = ftck_jget(obj, dotted);
  return json_is_boolean(v) ? json_is_true(v) : def;
}

int ftck_object_key(const json_t *obj, char *buf, size_t n) {
  const char *name = ftck_jstr(obj, "metadata.name");
  const char *ns = ftck_jstr(obj, "metadata.namespace");
  if (!name) return -1;
  int w = ns && *ns ? snprintf(buf, n, "%s/%s", ns, name) : snprintf(buf, n, "%s", name);
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

int ftck_split_key(const char *key, char *ns, size_t ns_len, char *name, size_t name_len) {
  const char *slash = strchr(key, '/');
  if (!slash) {
    if (ns_len < 1 || (size_t)snprintf(name, name_len, "%s", key) >= name_len) return -1;
    ns[0] = '\0';
    return 0;
  }
  size_t nl = (size_t)(slash - key);
  if (nl >= ns_len) return -1;
  memcpy(ns, key, nl);
  ns[nl] = '\0';
  return (size_t)snprintf(name, name_len, "%s", slash + 1) >= name_len ? -1 : 0;
}
