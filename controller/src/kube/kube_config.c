/*
 * kube_config.c - kubeconfig (libyaml document API) and in-cluster
 * configuration. Every error names the file and the field a person has to
 * fix, e.g. "kubeconfig /x: context "dev" has no field context.cluster".
 */
#include "kube_config.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "ftc_alloc.h"
#include "ftc_error.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

static int b64_decode_char(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

ftc_status_t ftck_base64_decode(const char *in, char **out, size_t *out_len) {
  size_t n = strlen(in);
  char *buf = ftc__malloc(n / 4 * 3 + 4);
  if (!buf) return ftc__error(FTC_ERR_NO_MEMORY, "base64: no memory for %zu bytes", n);
  size_t o = 0;
  unsigned int acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)in[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') break;
    int v = b64_decode_char(c);
    if (v < 0) {
      ftc__free(buf);
      return ftc__error(FTC_ERR_INVALID_ARGUMENT, "base64: invalid character 0x%02x at offset %zu", c, i);
    }
    acc = (acc << 6) | (unsigned int)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      buf[o++] = (char)((acc >> bits) & 0xff);
    }
  }
  buf[o] = '\0';
  *out = buf;
  if (out_len) *out_len = o;
  return FTC_OK;
}

char *ftck_base64_encode(const unsigned char *in, size_t len) {
  static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  char *out = ftc__malloc((len + 2) / 3 * 4 + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < len; i += 3) {
    unsigned int v = (unsigned int)in[i] << 16;
    if (i + 1 < len) v |= (unsigned int)in[i + 1] << 8;
    if (i + 2 < len) v |= in[i + 2];
    out[o++] = tbl[(v >> 18) & 63];
    out[o++] = tbl[(v >> 12) & 63];
    out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < len ? tbl[v & 63] : '=';
  }
  out[o] = '\0';
  return out;
}

static ftc_status_t read_file(const char *path, ftck_blob_t *blob, const char *what) {
  FILE *f = fopen(path, "rb");
  if (!f) return ftc__error(FTC_ERR_CONFIG, "%s: cannot open %s: %s", what, path, strerror(errno));
  ftc_status_t st = FTC_OK;
  size_t cap = 4096, len = 0;
  char *buf = ftc__malloc(cap);
  if (!buf) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "%s: no memory reading %s", what, path);
    goto out_close;
  }
  for (;;) {
    if (len + 1 >= cap) {
      char *nb = ftc__realloc(buf, cap * 2);
      if (!nb) {
        ftc__free(buf);
        st = ftc__error(FTC_ERR_NO_MEMORY, "%s: no memory reading %s", what, path);
        goto out_close;
      }
      buf = nb;
      cap *= 2;
    }
    size_t r = fread(buf + len, 1, cap - len - 1, f);
    len += r;
    if (r == 0) break;
  }
  if (ferror(f)) {
    ftc__free(buf);
    st = ftc__error(FTC_ERR_CONFIG, "%s: cannot read %s", what, path);
    goto out_close;
  }
  buf[len] = '\0';
  blob->data = buf;
  blob->len = len;
out_close:
  fclose(f);
  return st;
}

static void trim_trailing_space(char *s) {
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) s[--n] = '\0';
}

void ftck_config_free(ftck_config_t *cfg) {
  if (!cfg) return;
  ftc__free(cfg->server);
  ftc__free(cfg->namespace);
  ftc__free(cfg->context);
  ftc__free(cfg->ca.data);
  ftc__free(cfg->cert.data);
  ftc__free(cfg->key.data);
  ftc__free(cfg->token);
  ftc__free(cfg->token_file);
  ftc__free(cfg);
}

ftc_status_t ftck_config_reload_token(ftck_config_t *cfg) {
  if (!cfg->token_file) return FTC_OK;
  ftck_blob_t b = {0};
  ftc_status_t st = read_file(cfg->token_file, &b, "token");
  if (st != FTC_OK) return st;
  trim_trailing_space(b.data);
  ftc__free(cfg->token);
  cfg->token = b.data;
  return FTC_OK;
}

/* ---- kubeconfig ---- */

typedef struct kc {
  yaml_document_t doc;
  const char *path;
  char *dir;  /* folder of the file, for relative paths */
} kc_t;

static yaml_node_t *map_get(kc_t *k, yaml_node_t *map, const char *key) {
  if (!map || map->type != YAML_MAPPING_NODE) return NULL;
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *kn = yaml_document_get_node(&k->doc, p->key);
    if (kn && kn->type == YAML_SCALAR_NODE && strcmp((char *)kn->data.scalar.value, key) == 0)
      return yaml_document_get_node(&k->doc, p->value);
  }
  return NULL;
}

static const char *scalar(yaml_node_t *n) {
  if (!n || n->type != YAML_SCALAR_NODE) return NULL;
  return (const char *)n->data.scalar.value;
}

/* Find the element of list `list_name` whose "name" is `name` and return its
 * `inner` mapping (cluster/context/user). */
static yaml_node_t *named_entry(kc_t *k, const char *list_name, const char *inner, const char *name) {
  yaml_node_t *list = map_get(k, yaml_document_get_root_node(&k->doc), list_name);
  if (!list || list->type != YAML_SEQUENCE_NODE) return NULL;
  for (yaml_node_item_t *it = list->data.sequence.items.start; it < list->data.sequence.items.top; it++) {
    yaml_node_t *e = yaml_document_get_node(&k->doc, *it);
    const char *n = scalar(map_get(k, e, "name"));
    if (n && strcmp(n, name) == 0) return map_get(k, e, inner);
  }
  return NULL;
}

static char *resolve_path(kc_t *k, const char *p) {
  if (p[0] == '/') return ftc__strdup(p);
  size_t n = strlen(k->dir) + strlen(p) + 2;
  char *out = ftc__malloc(n);
  if (out) snprintf(out, n, "%s/%s", k->dir, p);
  return out;
}

/* Fill blob from field "<base>-data" (base64) or "<base>" (a file). */
static ftc_status_t load_blob(kc_t *k, yaml_node_t *m, const char *base, const char *owner,
                              ftck_blob_t *blob) {
  char data_key[64];
  snprintf(data_key, sizeof data_key, "%s-data", base);
  const char *data = scalar(map_get(k, m, data_key));
  if (data) {
    ftc_status_t st = ftck_base64_decode(data, &blob->data, &blob->len);
    if (st == FTC_ERR_NO_MEMORY) return st;
    if (st != FTC_OK)
      return ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: %s field %s is not valid base64 (%s)", k->path,
                        owner, data_key, ftc_last_error());
    return FTC_OK;
  }
  const char *file = scalar(map_get(k, m, base));
  if (!file) return FTC_OK;
  char *full = resolve_path(k, file);
  if (!full) return ftc__error(FTC_ERR_NO_MEMORY, "kubeconfig: no memory");
  char what[256];
  snprintf(what, sizeof what, "kubeconfig %s: %s field %s", k->path, owner, base);
  ftc_status_t st = read_file(full, blob, what);
  ftc__free(full);
  return st;
}

#define DUP_OR_FAIL(dst, src)                                                   \
  do {                                                                          \
    if (!((dst) = ftc__strdup(src))) {                                          \
      st = ftc__error(FTC_ERR_NO_MEMORY, "kubeconfig: no memory");              \
      goto out_free_cfg;                                                        \
    }                                                                           \
  } while (0)

ftc_status_t ftck_config_from_kubeconfig(const char *path, const char *context, ftck_config_t **out) {
  ftc_status_t st = FTC_OK;
  *out = NULL;
  kc_t k = {.path = path};
  FILE *f = fopen(path, "rb");
  if (!f) return ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: cannot open: %s", path, strerror(errno));
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "kubeconfig: cannot initialize the YAML parser");
    goto out_close_file;
  }
  yaml_parser_set_input_file(&parser, f);
  if (!yaml_parser_load(&parser, &k.doc)) {
    st = ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: YAML error at line %zu: %s", path,
                    parser.problem_mark.line + 1, parser.problem ? parser.problem : "unknown");
    goto out_delete_parser;
  }
  char *pathcopy = ftc__strdup(path);
  if (!pathcopy) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "kubeconfig: no memory");
    goto out_delete_doc;
  }
  k.dir = ftc__strdup(dirname(pathcopy));
  ftc__free(pathcopy);
  if (!k.dir) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "kubeconfig: no memory");
    goto out_delete_doc;
  }
  yaml_node_t *root = yaml_document_get_root_node(&k.doc);
  if (!root || root->type != YAML_MAPPING_NODE) {
    st = ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: not a YAML mapping (is it a kubeconfig?)", path);
    goto out_free_dir;
  }
  ftck_config_t *cfg = ftc__calloc(1, sizeof *cfg);
  if (!cfg) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "kubeconfig: no memory");
    goto out_free_dir;
  }
  const char *ctx_name = context;
  if (!ctx_name) ctx_name = scalar(map_get(&k, root, "current-context"));
  if (!ctx_name || !*ctx_name) {
    st = ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: no current-context; set it or pass a context name", path);
    goto out_free_cfg;
  }
  DUP_OR_FAIL(cfg->context, ctx_name);
  yaml_node_t *ctx = named_entry(&k, "contexts", "context", ctx_name);
  if (!ctx) {
    st = ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: no entry named \"%s\" under contexts", path, ctx_name);
    goto out_free_cfg;
  }
  const char *cluster_name = scalar(map_get(&k, ctx, "cluster"));
  if (!cluster_name) {
    st = ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: context \"%s\" has no field context.cluster", path, ctx_name);
    goto out_free_cfg;
  }
  const char *ns = scalar(map_get(&k, ctx, "namespace"));
  DUP_OR_FAIL(cfg->namespace, ns && *ns ? ns : "default");
  yaml_node_t *cluster = named_entry(&k, "clusters", "cluster", cluster_name);
  if (!cluster) {
    st = ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: context \"%s\" names cluster \"%s\", which is not under clusters",
                    path, ctx_name, cluster_name);
    goto out_free_cfg;
  }
  const char *server = scalar(map_get(&k, cluster, "server"));
  if (!server || !*server) {
    st = ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: cluster \"%s\" has no field cluster.server", path, cluster_name);
    goto out_free_cfg;
  }
  if (strncmp(server, "https://", 8) != 0) {
    st = ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: cluster \"%s\" server %s is not https://; TLS is required",
                    path, cluster_name, server);
    goto out_free_cfg;
  }
  const char *insecure = scalar(map_get(&k, cluster, "insecure-skip-tls-verify"));
  if (insecure && strcmp(insecure, "true") == 0) {
    st = ftc__error(FTC_ERR_CONFIG,
                    "kubeconfig %s: cluster \"%s\" sets insecure-skip-tls-verify; the controller always verifies "
                    "TLS, give it certificate-authority(-data) instead", path, cluster_name);
    goto out_free_cfg;
  }
  DUP_OR_FAIL(cfg->server, server);
  size_t sl = strlen(cfg->server);
  while (sl > 8 && cfg->server[sl - 1] == '/') cfg->server[--sl] = '\0';
  char owner[300];
  snprintf(owner, sizeof owner, "cluster \"%s\"", cluster_name);
  FTC_CHECK_GOTO(load_blob(&k, cluster, "certificate-authority", owner, &cfg->ca), st, out_free_cfg);

  const char *user_name = scalar(map_get(&k, ctx, "user"));
  if (user_name && *user_name) {
    yaml_node_t *user = named_entry(&k, "users", "user", user_name);
    if (!user) {
      st = ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: context \"%s\" names user \"%s\", which is not under users",
                      path, ctx_name, user_name);
      goto out_free_cfg;
    }
    snprintf(owner, sizeof owner, "user \"%s\"", user_name);
    const char *token = scalar(map_get(&k, user, "token"));
    const char *token_file = scalar(map_get(&k, user, "tokenFile"));
    if (token) {
      DUP_OR_FAIL(cfg->token, token);
    } else if (token_file) {
      cfg->token_file = resolve_path(&k, token_file);
      if (!cfg->token_file) {
        st = ftc__error(FTC_ERR_NO_MEMORY, "kubeconfig: no memory");
        goto out_free_cfg;
      }
      FTC_CHECK_GOTO(ftck_config_reload_token(cfg), st, out_free_cfg);
    }
    FTC_CHECK_GOTO(load_blob(&k, user, "client-certificate", owner, &cfg->cert), st, out_free_cfg);
    FTC_CHECK_GOTO(load_blob(&k, user, "client-key", owner, &cfg->key), st, out_free_cfg);
    if (!!cfg->cert.data != !!cfg->key.data) {
      st = ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: %s has %s but no %s", path, owner,
                      cfg->cert.data ? "client-certificate(-data)" : "client-key(-data)",
                      cfg->cert.data ? "client-key(-data)" : "client-certificate(-data)");
      goto out_free_cfg;
    }
    if (map_get(&k, user, "exec") && !cfg->token && !cfg->cert.data) {
      st = ftc__error(FTC_ERR_CONFIG, "kubeconfig %s: %s uses an exec plugin, which the controller does not "
                      "run; give it a token or a client certificate", path, owner);
      goto out_free_cfg;
    }
  }
  *out = cfg;
  cfg = NULL;
out_free_cfg:
  ftck_config_free(cfg);
out_free_dir:
  ftc__free(k.dir);
out_delete_doc:
  yaml_document_delete(&k.doc);
out_delete_parser:
  yaml_parser_delete(&parser);
out_close_file:
  fclose(f);
  return st;
}

ftc_status_t ftck_config_in_cluster(const char *sa_dir, ftck_config_t **out) {
  ftc_status_t st = FTC_OK;
  *out = NULL;
  if (!sa_dir) sa_dir = SA_DIR;
  const char *host = getenv("KUBERNETES_SERVICE_HOST");
  const char *port = getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port)
    return ftc__error(FTC_ERR_CONFIG, "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                      "must be set (is this running in a pod?); or pass --kubeconfig");
  ftck_config_t *cfg = ftc__calloc(1, sizeof *cfg);
  if (!cfg) return ftc__error(FTC_ERR_NO_MEMORY, "in-cluster config: no memory");
  size_t n = strlen(host) + strlen(port) + 16;
  cfg->server = ftc__malloc(n);
  if (!cfg->server) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "in-cluster config: no memory");
    goto out_free_cfg;
  }
  if (strchr(host, ':'))
    snprintf(cfg->server, n, "https://[%s]:%s", host, port);
  else
    snprintf(cfg->server, n, "https://%s:%s", host, port);
  char path[4096];
  snprintf(path, sizeof path, "%s/token", sa_dir);
  DUP_OR_FAIL(cfg->token_file, path);
  FTC_CHECK_GOTO(ftck_config_reload_token(cfg), st, out_free_cfg);
  snprintf(path, sizeof path, "%s/ca.crt", sa_dir);
  FTC_CHECK_GOTO(read_file(path, &cfg->ca, "in-cluster CA"), st, out_free_cfg);
  snprintf(path, sizeof path, "%s/namespace", sa_dir);
  ftck_blob_t nsb = {0};
  if (read_file(path, &nsb, "in-cluster namespace") == FTC_OK) {
    trim_trailing_space(nsb.data);
    cfg->namespace = nsb.data;
  } else {
    ftc__error_clear();
    DUP_OR_FAIL(cfg->namespace, "default");
  }
  *out = cfg;
  return FTC_OK;
out_free_cfg:
  ftck_config_free(cfg);
  return st;
}

ftc_status_t ftck_config_load(const char *kubeconfig, const char *context, const char *sa_dir,
                              ftck_config_t **out) {
  if (kubeconfig && *kubeconfig) return ftck_config_from_kubeconfig(kubeconfig, context, out);
  const char *env = getenv("KUBECONFIG");
  if (env && *env) {
    char first[4096];
    snprintf(first, sizeof first, "%s", env);
    char *colon = strchr(first, ':');
    if (colon) *colon = '\0';
    return ftck_config_from_kubeconfig(first, context, out);
  }
  if (getenv("KUBERNETES_SERVICE_HOST")) return ftck_config_in_cluster(sa_dir, out);
  const char *home = getenv("HOME");
  if (!home)
    return ftc__error(FTC_ERR_CONFIG, "no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a pod");
  char path[4096];
  snprintf(path, sizeof path, "%s/.kube/config", home);
  return ftck_config_from_kubeconfig(path, context, out);
}
