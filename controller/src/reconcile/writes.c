/*
 * writes.c - the reconciler's writes to the API server: a job's token
 * Secret (token.c derives the token), made before the first pod a pass
 * creates and when a pod waits for it; its pods, made with deterministic
 * names so a repeated attempt meets 409, and deleted by uid; and whether
 * the server says the job is going away.
 */
#include "trainingjob.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_time.h"
#include "kube_json.h"
#include "reconcile_int.h"
#include "token.h"

/* Create the token Secret of job with token (hex). *code gets the HTTP status. */
static ftc_status_t create_secret(ftck_reconciler_t *r, const json_t *job, const char *sname, const char *token,
                                  long *code) {
  const char *name = ftck_jstr(job, "metadata.name");
  const char *ns = ftck_jstr(job, "metadata.namespace");
  char *b64 = ftck_base64_encode((const unsigned char *)token, strlen(token));
  json_t *owner = ftck_owner_ref(job);
  json_t *secret = b64 && owner ? json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s, s:s}, s:[O]}, s:s, s:{s:s}}",
                                            "apiVersion", "v1", "kind", "Secret", "metadata", "name", sname,
                                            "namespace", ns, "labels", "app.kubernetes.io/managed-by", FTCK_MANAGER,
                                            "app.kubernetes.io/instance", name, FTCK_LABEL_JOB, name,
                                            "ownerReferences", owner, "type", "Opaque", "data", "token", b64)
                                : NULL;
  ftc__free(b64);
  json_decref(owner);
  if (!secret) return ftc__error(FTC_ERR_NO_MEMORY, "reconciler: no memory");
  char *path = ftck_path("", "v1", ns, "secrets", NULL);
  ftc_status_t st = path ? ftck_create(r->c, path, secret, code, NULL) : ftc__error(FTC_ERR_NO_MEMORY, "no memory");
  ftc__free(path);
  json_decref(secret);
  return st;
}

/* Whether the job is being deleted (or gone) on the server itself: asked
 * before making again a pod that was deleted, because the garbage collector
 * deletes them when the job is deleted, and the job's watch can show its
 * deletionTimestamp after the pods' watch showed their deletion. 1 going, 0 not (or the GET failed: carry on). */
int ftck__job_going(ftck_reconciler_t *r, const char *ns, const char *name) {
  char *path = ftck_path(FTCK_GROUP, FTCK_VERSION, ns, FTCK_PLURAL, name);
  json_t *job = NULL;
  long code = 0;
  ftc_status_t st = path ? ftck_get(r->c, path, &code, &job) : FTC_ERR_NO_MEMORY;
  ftc__free(path);
  int going = (st != FTC_OK && code == 404) || (st == FTC_OK && ftck_jstr(job, "metadata.deletionTimestamp"));
  json_decref(job);
  return going;
}

/* Make the job's token Secret (token.h), or find it there (409): before
 * the first pod a pass makes, which mounts it, and when a pod waits for it
 * (waits = 1). Nothing else sends it, so a restarted controller whose jobs
 * run sends nothing, and the pods of a ramp or of several replacements in
 * one pass share one request. The controller may create Secrets but never
 * read one in a user's namespace: a Secret someone deleted is made again
 * before the next pod that needs it (running pods read their token at
 * start), with an Event; one that someone changed is not seen here, and the
 * coordinator refuses the pods made from it (the token does not match). */
ftc_status_t ftck__ensure_secret(ftck_reconciler_t *r, const json_t *job, int waits, int *sure) {
  const char *uid = ftck_jstr(job, "metadata.uid");
  const char *name = ftck_jstr(job, "metadata.name");
  const char *ns = ftck_jstr(job, "metadata.namespace");
  char sname[300], token[FTCK_TOKEN_HEX];
  if (!uid || !name || !ns) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "a TrainingJob without uid, name or namespace");
  if (ftck_secret_name(name, sname, sizeof sname) != 0) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "job name too long");
  pthread_mutex_lock(&r->mu);
  int known = json_object_get(r->secrets_ok, uid) != NULL;
  pthread_mutex_unlock(&r->mu);
  ftck_job_token(r->token_key, uid, token);
  long code = 0;
  ftc_status_t st = create_secret(r, job, sname, token, &code);
  memset(token, 0, sizeof token);
  if (st == FTC_OK && (known || waits)) {
    FTC_WARN(FTC_SUB_CTRL, "%s/%s: token Secret %s was deleted; made it again with the job's token", ns, name, sname);
    json_t *regarding = json_pack("{s:s, s:s, s:O}", "apiVersion", FTCK_API_VERSION, "kind", FTCK_KIND, "metadata",
                                  json_object_get(job, "metadata"));
    char note[512];
    snprintf(note, sizeof note, "token Secret %s was deleted; recreated with the job's token", sname);
    if (regarding)
      ftck_event(r->c, regarding, "Warning", "TokenSecretRecreated", "Recreate", note, FTCK_MANAGER, r->identity);
    json_decref(regarding);
  } else if (st == FTC_OK) {
    FTC_INFO(FTC_SUB_CTRL, "%s/%s: created token Secret %s", ns, name, sname);
  } else if (code == 409) {
    st = FTC_OK;
  } else if (code == 403) {
    st = ftc__error(FTC_ERR_CONFIG, "%s/%s: may not create the token Secret %s (HTTP 403): the controller needs create "
                    "on secrets in %s (charts/ftcomm/templates/rbac.yaml)", ns, name, sname, ns);
  }
  if (st == FTC_OK) {
    pthread_mutex_lock(&r->mu);
    json_object_set_new(r->secrets_ok, uid, json_pack("{s:s++}", "job", ns, "/", name));
    pthread_mutex_unlock(&r->mu);
    *sure = 1; /* asked the server in this pass */
  }
  return st;
}

/* Does one of the pods wait for the job's token Secret (the kubelet's
 * CreateContainerConfigError naming it)? Someone deleted it after the pod
 * was made. */
int ftck__waits_for_secret(const json_t *pods, const char *job) {
  char sname[300];
  if (ftck_secret_name(job, sname, sizeof sname) != 0) return 0;
  size_t i, j;
  json_t *pod, *cs;
  static const char *const lists[] = {"status.initContainerStatuses", "status.containerStatuses"};
  json_array_foreach(pods, i, pod) {
    for (size_t l = 0; l < 2; l++) {
      json_array_foreach(ftck_jget(pod, lists[l]), j, cs) {
        const char *reason = ftck_jstr(cs, "state.waiting.reason");
        const char *msg = ftck_jstr(cs, "state.waiting.message");
        if (reason && !strcmp(reason, "CreateContainerConfigError") && msg && strstr(msg, sname)) return 1;
      }
    }
  }
  return 0;
}

/* Create the pod of (slot, inc). FTC_OK also when it exists already (409):
 * *is_new (may be NULL) says which, so only real creations are counted.
 * The token Secret the pod mounts is made sure of first, unless
 * *secret_sure says this pass did. */
ftc_status_t ftck__create_pod(ftck_reconciler_t *r, const json_t *job, const ftck_job_spec_t *spec, int slot,
                              int inc, int joiner, const char *avoid, json_t **created, int *is_new, long *http,
                              int *secret_sure) {
  if (is_new) *is_new = 0;
  const char *ns = ftck_jstr(job, "metadata.namespace");
  if (!*secret_sure) {
    ftc_status_t sst = ftck__ensure_secret(r, job, 0, secret_sure);
    if (sst != FTC_OK) return sst;
  }
  json_t *pod = ftck_build_pod(job, spec, slot, inc, joiner, avoid, &r->env);
  if (!pod) return ftc__error(FTC_ERR_NO_MEMORY, "reconciler: cannot build the pod of slot %d", slot);
  char *path = ftck_path("", "v1", ns, "pods", NULL);
  long code = 0;
  ftc_status_t st = path ? ftck_create(r->c, path, pod, &code, NULL) : ftc__error(FTC_ERR_NO_MEMORY, "no memory");
  if (http) *http = code;
  ftc__free(path);
  if (st == FTC_OK) {
    if (is_new) *is_new = 1;
    __atomic_add_fetch(&r->stats.pods_created, 1, __ATOMIC_RELAXED);
    FTC_INFO(FTC_SUB_CTRL, "%s/%s: created pod %s", ns, ftck_jstr(job, "metadata.name"),
             ftck_jstr(pod, "metadata.name"));
  } else if (code == 409) {
    FTC_DEBUG(FTC_SUB_CTRL, "%s/%s: pod %s already exists", ns, ftck_jstr(job, "metadata.name"),
              ftck_jstr(pod, "metadata.name"));
    st = FTC_OK;
  }
  if (st == FTC_OK && created) {
    json_object_set_new(pod, "status", json_pack("{s:s}", "phase", "Pending"));
    *created = pod;
  } else {
    json_decref(pod);
  }
  return st;
}

/* Delete the pod `name` only if it is still the object with `uid` (a
 * precondition, when uid is known): names are reused (a job deleted and
 * made again under its name makes pods of the same names), so a cache that
 * still shows an earlier pod must not get the new one deleted. A pod gone
 * (404) or already another object (409) is no failure. */
ftc_status_t ftck__delete_pod(ftck_reconciler_t *r, const char *ns, const char *name, const char *uid) {
  char *path = ftck_path("", "v1", ns, "pods", name);
  json_t *opts = uid ? json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "DeleteOptions", "preconditions",
                                 "uid", uid)
                     : NULL;
  long code = 0;
  ftc_status_t st = path && (opts || !uid) ? ftck_request(r->c, "DELETE", path, NULL, opts, &code, NULL)
                                           : ftc__error(FTC_ERR_NO_MEMORY, "no memory");
  ftc__free(path);
  json_decref(opts);
  if (st == FTC_OK) {
    __atomic_add_fetch(&r->stats.pods_deleted, 1, __ATOMIC_RELAXED);
    FTC_INFO(FTC_SUB_CTRL, "%s: deleted pod %s", ns, name);
  } else if (code == 409) {
    FTC_DEBUG(FTC_SUB_CTRL, "%s: pod %s is another object now (uid precondition); not deleted", ns, name);
  }
  return st == FTC_OK || code == 404 || code == 409 ? FTC_OK : st;
}
