/*
 * token.c - the controller's token key and the per-job tokens derived from
 * it (see token.h for why a derived token and not a stored one).
 */
#include "token.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_log.h"
#include "jobspec.h"
#include "kube_config.h"
#include "kube_json.h"

#define TOKEN_CONTEXT "ftcomm.dev/job-token/v1"

void ftck_job_token(const unsigned char key[FTCK_TOKEN_KEY_BYTES], const char *uid, char out[FTCK_TOKEN_HEX]) {
  unsigned char msg[sizeof TOKEN_CONTEXT + 256], mac[EVP_MAX_MD_SIZE];
  size_t ul = strnlen(uid, 256);
  memcpy(msg, TOKEN_CONTEXT, sizeof TOKEN_CONTEXT); /* with its NUL: context and uid cannot run together */
  memcpy(msg + sizeof TOKEN_CONTEXT, uid, ul);
  unsigned int ml = 0;
  HMAC(EVP_sha256(), key, FTCK_TOKEN_KEY_BYTES, msg, sizeof TOKEN_CONTEXT + ul, mac, &ml);
  for (unsigned int i = 0; i < 32 && i < ml; i++) snprintf(out + 2 * i, 3, "%02x", mac[i]);
  out[64] = '\0';
}

/* data.key of a key Secret into key; an error saying how to repair it. */
static ftc_status_t key_of(const json_t *secret, const char *ns, const char *name,
                           unsigned char key[FTCK_TOKEN_KEY_BYTES]) {
  char *raw = NULL;
  size_t len = 0;
  const char *b64 = ftck_jstr(secret, "data.key");
  if (!b64 || ftck_base64_decode(b64, &raw, &len) != FTC_OK || len != FTCK_TOKEN_KEY_BYTES) {
    ftc__free(raw);
    return ftc__error(FTC_ERR_CONFIG,
                      "Secret %s/%s must hold data.key of %d bytes (base64); delete it and the controller makes a new "
                      "key (the tokens of running jobs change with it: restart them)",
                      ns, name, FTCK_TOKEN_KEY_BYTES);
  }
  memcpy(key, raw, FTCK_TOKEN_KEY_BYTES);
  ftc__free(raw);
  return FTC_OK;
}

static ftc_status_t read_key(ftck_client_t *c, const char *path, const char *ns, const char *name,
                             unsigned char key[FTCK_TOKEN_KEY_BYTES], long *code) {
  json_t *obj = NULL;
  ftc_status_t st = ftck_get(c, path, code, &obj);
  if (st == FTC_OK) st = key_of(obj, ns, name, key);
  json_decref(obj);
  return st;
}

ftc_status_t ftck_token_key_load(ftck_client_t *c, const char *ns, const char *name,
                                 unsigned char key[FTCK_TOKEN_KEY_BYTES]) {
  if (!ns || !*ns || !name || !*name)
    return ftc__error(FTC_ERR_CONFIG, "the token key Secret needs a namespace and a name (--token-key-secret, "
                                      "--lease-namespace or $POD_NAMESPACE)");
  char *path = ftck_path("", "v1", ns, "secrets", name);
  char *collection = ftck_path("", "v1", ns, "secrets", NULL);
  ftc_status_t st = path && collection ? FTC_OK : ftc__error(FTC_ERR_NO_MEMORY, "token key: no memory");
  long code = 0;
  if (st == FTC_OK) st = read_key(c, path, ns, name, key, &code);
  if (st != FTC_OK && code == 404) {
    unsigned char fresh[FTCK_TOKEN_KEY_BYTES];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, fresh, sizeof fresh) : -1;
    if (fd >= 0) close(fd);
    char *b64 = got == (ssize_t)sizeof fresh ? ftck_base64_encode(fresh, sizeof fresh) : NULL;
    json_t *secret = b64 ? json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}}, s:s, s:{s:s}}", "apiVersion", "v1",
                                     "kind", "Secret", "metadata", "name", name, "namespace", ns, "labels",
                                     "app.kubernetes.io/managed-by", FTCK_MANAGER, "app.kubernetes.io/component",
                                     "token-key", "type", "Opaque", "data", "key", b64)
                         : NULL;
    ftc__free(b64);
    if (got != (ssize_t)sizeof fresh) {
      st = ftc__error(FTC_ERR_SYSTEM, "cannot read /dev/urandom for the token key");
    } else if (!secret) {
      st = ftc__error(FTC_ERR_NO_MEMORY, "token key: no memory");
    } else {
      st = ftck_create(c, collection, secret, &code, NULL);
      if (st == FTC_OK) {
        memcpy(key, fresh, sizeof fresh);
        FTC_INFO(FTC_SUB_CTRL, "made the token key Secret %s/%s", ns, name);
      } else if (code == 409) {
        st = read_key(c, path, ns, name, key, &code); /* another replica made it first */
      }
    }
    json_decref(secret);
    memset(fresh, 0, sizeof fresh);
  }
  if (st != FTC_OK && (code == 401 || code == 403))
    st = ftc__error(FTC_ERR_CONFIG,
                    "cannot read or make the token key Secret %s/%s (HTTP %ld): the controller's Role in %s needs "
                    "get on it and create on secrets (charts/ftcomm/templates/rbac.yaml)",
                    ns, name, code, ns);
  ftc__free(path);
  ftc__free(collection);
  return st;
}
