/*
 * kube_config.h - where the API server is and how to authenticate to it:
 * a kubeconfig file (current-context or a named one) or the in-cluster
 * service-account files. TLS is always verified: a kubeconfig that asks for
 * insecure-skip-tls-verify is refused, and a server without a CA uses the
 * system trust store. Certificates and keys are kept as PEM in memory,
 * whether they came inline (*-data, base64) or from a file.
 */
#ifndef FTCK_KUBE_CONFIG_H
#define FTCK_KUBE_CONFIG_H

#include <stddef.h>

#include "ftcomm.h"

typedef struct ftck_blob {
  char *data; /* owned; NUL-terminated for convenience */
  size_t len;
} ftck_blob_t;

typedef struct ftck_config {
  char *server;       /* "https://host:port", no trailing slash */
  char *namespace;    /* context's namespace, in-cluster namespace, or "default" */
  char *context;      /* name of the context used; NULL in-cluster */
  ftck_blob_t ca;     /* PEM CA bundle; empty: system trust store */
  ftck_blob_t cert;   /* PEM client certificate; empty: none */
  ftck_blob_t key;    /* PEM client key; empty: none */
  char *token;        /* bearer token; NULL: none */
  char *token_file;   /* re-read when the server answers 401 (rotated tokens) */
} ftck_config_t;

/* Parse a kubeconfig file. context NULL means current-context. Relative
 * file paths inside are resolved against the file's folder. On failure,
 * ftc_last_error() names the file and the missing or bad field; *out is
 * NULL. The caller frees *out with ftck_config_free. */
ftc_status_t ftck_config_from_kubeconfig(const char *path, const char *context,
                                         ftck_config_t **out);

/* In-cluster configuration: KUBERNETES_SERVICE_HOST/PORT and the files in
 * sa_dir (NULL: /var/run/secrets/kubernetes.io/serviceaccount). */
ftc_status_t ftck_config_in_cluster(const char *sa_dir, ftck_config_t **out);

/* The usual order: explicit kubeconfig path, else $KUBECONFIG (first entry),
 * else in-cluster (service-account files in sa_dir, NULL: the standard
 * folder) when KUBERNETES_SERVICE_HOST is set, else ~/.kube/config. */
ftc_status_t ftck_config_load(const char *kubeconfig, const char *context, const char *sa_dir,
                              ftck_config_t **out);

/* Re-read token_file into token; FTC_OK and no change when there is none. */
ftc_status_t ftck_config_reload_token(ftck_config_t *cfg);

void ftck_config_free(ftck_config_t *cfg);

/* Decode standard base64 (whitespace ignored). *out is owned by the caller
 * and NUL-terminated. FTC_ERR_INVALID_ARGUMENT on a bad character. */
ftc_status_t ftck_base64_decode(const char *in, char **out, size_t *out_len);
/* Encode; the result is NUL-terminated and owned by the caller (NULL: no memory). */
char *ftck_base64_encode(const unsigned char *in, size_t len);

#endif
