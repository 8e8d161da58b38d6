/*
 * kube_live.c - the Kubernetes client against a real API server ($KUBECONFIG,
 * started by the scripts through tests/cluster/cluster.sh). Not a cmocka
 * suite because it needs the server; prints "ok - ..." / "FAIL - ..." and
 * exits 1 on any failure.
 *   kube_live basic NS          pagination, selectors, pooling, create 409,
 *                               conflict retry, watch, informer add/update/delete
 *   kube_live list-rv NS        print the resourceVersion of a configmap list
 *   kube_live expired NS RV     a watch from RV answers 410 (after a restart)
 *   kube_live stale NS JOB      reconcile JOB with a pod cache that never
 *                               filled (the worst lag): nothing is created,
 *                               replaced or counted twice
 *   kube_live frozen NS JOB POD (no controller running) fail POD, freeze the
 *                               pod cache while it still shows POD failed,
 *                               reconcile twice: one replacement, counted once
 *   kube_live reused NS JOB     (no controller running; JOB has 1 replica) make
 *                               its pod, freeze the pod cache, delete JOB and make
 *                               it again with a pod of the same name: a reconcile
 *                               over the cache that shows the earlier pod leaves
 *                               the new one alone (delete with a uid precondition)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_time.h"
#include "informer.h"
#include "kube_client.h"
#include "kube_config.h"
#include "kube_json.h"
#include "jobspec.h"
#include "token.h"
#include "trainingjob.h"

static int failures;
#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (cond) {                                            \
      printf("ok   - ");                                   \
    } else {                                               \
      printf("FAIL - ");                                   \
      failures++;                                          \
    }                                                      \
    printf(__VA_ARGS__);                                   \
    if (!(cond)) printf(" [last error: %s]", ftc_last_error()); \
    printf("\n");                                          \
    fflush(stdout);                                        \
  } while (0)

static ftck_client_t *c;
static const char *ns;

static json_t *configmap(const char *name, const char *label) {
  return json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:s}}", "apiVersion", "v1", "kind", "ConfigMap", "metadata",
                   "name", name, "namespace", ns, "labels", "ftcomm.dev/test", label, "data", "v", "0");
}

static int bump_calls;
static int bump_and_race(json_t *obj, void *ud) {
  (void)ud;
  bump_calls++;
  if (bump_calls == 1) { /* someone else writes in between: our PUT must conflict */
    json_t *patch = json_pack("{s:{s:s}}", "data", "other", "writer");
    char *p = ftck_path("", "v1", ns, "configmaps", "cm-race");
    ftck_merge_patch(c, p, patch, NULL, NULL);
    ftc__free(p);
    json_decref(patch);
  }
  json_object_set_new(json_object_get(obj, "data"), "v", json_string("mine"));
  return 0;
}

typedef struct seen {
  pthread_mutex_t mu;
  int added, modified, deleted, bookmarks;
  volatile int stop;
} seen_t;

static int on_watch(const char *type, json_t *obj, void *ud) {
  seen_t *s = ud;
  (void)obj;
  pthread_mutex_lock(&s->mu);
  if (!strcmp(type, "ADDED")) s->added++;
  else if (!strcmp(type, "MODIFIED")) s->modified++;
  else if (!strcmp(type, "DELETED")) s->deleted++;
  else if (!strcmp(type, "BOOKMARK")) s->bookmarks++;
  pthread_mutex_unlock(&s->mu);
  return 0;
}

typedef struct watch_arg {
  seen_t *s;
  const char *rv;
  ftc_status_t st;
} watch_arg_t;

static void *watch_thread(void *arg) {
  watch_arg_t *w = arg;
  char *coll = ftck_path("", "v1", ns, "configmaps", NULL);
  w->st = ftck_watch(c, coll, "ftcomm.dev/test=watch", NULL, w->rv, 60, &w->s->stop, on_watch, w->s, NULL);
  ftc__free(coll);
  return NULL;
}

static int wait_for(seen_t *s, int *field, int want, int ms) {
  for (int i = 0; i < ms / 20; i++) {
    pthread_mutex_lock(&s->mu);
    int v = *field;
    pthread_mutex_unlock(&s->mu);
    if (v >= want) return 1;
    usleep(20000);
  }
  return 0;
}

static void inf_add(json_t *o, void *ud) { (void)o; seen_t *s = ud; pthread_mutex_lock(&s->mu); s->added++; pthread_mutex_unlock(&s->mu); }
static void inf_update(json_t *a, json_t *b, void *ud) { (void)a; (void)b; seen_t *s = ud; pthread_mutex_lock(&s->mu); s->modified++; pthread_mutex_unlock(&s->mu); }
static void inf_delete(json_t *o, void *ud) { (void)o; seen_t *s = ud; pthread_mutex_lock(&s->mu); s->deleted++; pthread_mutex_unlock(&s->mu); }

#define FIXED_TOKEN "10f686d2b0be3a15d081c8e5b8c31c7593c2954a232f24116329f4d41486bdda"

static void basic(void) {
  char *coll = ftck_path("", "v1", ns, "configmaps", NULL);
  long code = 0;
  json_t *nsobj = json_pack("{s:s, s:s, s:{s:s}}", "apiVersion", "v1", "kind", "Namespace", "metadata", "name", ns);
  ftc_status_t st = ftck_create(c, "/api/v1/namespaces", nsobj, &code, NULL);
  json_decref(nsobj);
  CHECK(st == FTC_OK || code == 409, "namespace %s exists", ns);

  for (int i = 0; i < 7; i++) {
    char name[32];
    snprintf(name, sizeof name, "cm-page-%d", i);
    json_t *cm = configmap(name, i < 5 ? "page" : "other");
    st = ftck_create(c, coll, cm, &code, NULL);
    json_decref(cm);
    if (st != FTC_OK && code != 409) break;
  }
  CHECK(st == FTC_OK || code == 409, "created 7 configmaps");

  uint64_t conns_before = ftck_client_connections(c);
  json_t *items = NULL;
  char *rv = NULL;
  st = ftck_list(c, coll, "ftcomm.dev/test=page", NULL, 2, &items, &rv, &code);
  CHECK(st == FTC_OK && json_array_size(items) == 5 && rv, "paginated list (limit 2) returns all 5 labelled objects, rv %s",
        rv ? rv : "-");
  json_decref(items);
  ftc__free(rv);
  st = ftck_list(c, coll, "ftcomm.dev/test in (page,other)", NULL, 3, &items, &rv, &code);
  CHECK(st == FTC_OK && json_array_size(items) == 7, "set-based selector \"in (page,other)\" is encoded and matches 7");
  json_decref(items);
  ftc__free(rv);
  st = ftck_list(c, coll, NULL, "metadata.name=cm-page-3", 0, &items, &rv, &code);
  CHECK(st == FTC_OK && json_array_size(items) == 1, "field selector metadata.name=cm-page-3 matches 1");
  json_decref(items);
  ftc__free(rv);
  for (int i = 0; i < 20; i++) {
    json_t *o = NULL;
    char *p = ftck_path("", "v1", ns, "configmaps", "cm-page-0");
    ftck_get(c, p, &code, &o);
    ftc__free(p);
    json_decref(o);
  }
  uint64_t opened = ftck_client_connections(c) - conns_before;
  CHECK(opened <= 1, "23 requests opened %llu new connection(s): the pool reuses them", (unsigned long long)opened);

  json_t *cm = configmap("cm-page-0", "page");
  st = ftck_create(c, coll, cm, &code, NULL);
  json_decref(cm);
  CHECK(st == FTC_ERR_PROTOCOL && code == 409 && strstr(ftc_last_error(), "AlreadyExists"),
        "creating an existing object gives 409 AlreadyExists");
  json_t *missing = NULL;
  char *mp = ftck_path("", "v1", ns, "configmaps", "no-such");
  st = ftck_get(c, mp, &code, &missing);
  ftc__free(mp);
  CHECK(st == FTC_ERR_PROTOCOL && code == 404 && !missing, "a missing object gives 404");

  cm = configmap("cm-race", "race");
  ftck_create(c, coll, cm, &code, NULL);
  json_decref(cm);
  char *rp = ftck_path("", "v1", ns, "configmaps", "cm-race");
  json_t *stored = NULL;
  st = ftck_update_retry(c, rp, NULL, bump_and_race, NULL, 5, &stored);
  CHECK(st == FTC_OK && bump_calls == 2 && !strcmp(ftck_jstr(stored, "data.v"), "mine") &&
            !strcmp(ftck_jstr(stored, "data.other"), "writer"),
        "update with a racing writer: 409, read again, second write keeps both changes (%d attempts)", bump_calls);
  json_decref(stored);
  json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "labels", "patched", "yes");
  st = ftck_merge_patch(c, rp, patch, &code, &stored);
  CHECK(st == FTC_OK && !strcmp(json_string_value(json_object_get(ftck_jget(stored, "metadata.labels"), "patched")), "yes"),
        "merge patch adds a label");
  json_decref(patch);
  json_decref(stored);
  ftc__free(rp);

  /* Watch: events arrive as they happen; the stop flag ends it quickly. */
  st = ftck_list(c, coll, "ftcomm.dev/test=watch", NULL, 0, &items, &rv, &code);
  json_decref(items);
  seen_t s = {.mu = PTHREAD_MUTEX_INITIALIZER};
  watch_arg_t wa = {.s = &s, .rv = rv};
  pthread_t t;
  pthread_create(&t, NULL, watch_thread, &wa);
  usleep(300000);
  cm = configmap("cm-watch", "watch");
  ftck_create(c, coll, cm, &code, NULL);
  json_decref(cm);
  CHECK(wait_for(&s, &s.added, 1, 5000), "watch sees ADDED");
  char *wp = ftck_path("", "v1", ns, "configmaps", "cm-watch");
  patch = json_pack("{s:{s:s}}", "data", "v", "1");
  ftck_merge_patch(c, wp, patch, &code, NULL);
  json_decref(patch);
  CHECK(wait_for(&s, &s.modified, 1, 5000), "watch sees MODIFIED");
  ftck_delete(c, wp, &code);
  ftc__free(wp);
  CHECK(wait_for(&s, &s.deleted, 1, 5000), "watch sees DELETED");
  int64_t t0 = ftc__now_ns();
  __atomic_store_n(&s.stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  int64_t stop_ms = (ftc__now_ns() - t0) / 1000000;
  CHECK(wa.st == FTC_OK && stop_ms < 2500, "watch ends %lld ms after the stop flag", (long long)stop_ms);
  ftc__free(rv);

  /* Informer: list, then add/update/delete through the watch. */
  seen_t is = {.mu = PTHREAD_MUTEX_INITIALIZER};
  ftck_informer_opts_t io = {.name = "cms", .collection = coll, .label_selector = "ftcomm.dev/test=page", .page_size = 2,
                             .resync_ms = 1000};
  ftck_handlers_t h = {inf_add, inf_update, inf_delete, &is};
  ftck_informer_t *inf = NULL;
  st = ftck_informer_create(c, &io, &h, &inf);
  if (st == FTC_OK) st = ftck_informer_start(inf);
  if (st == FTC_OK) st = ftck_informer_wait_synced(inf, 10000);
  CHECK(st == FTC_OK && ftck_informer_size(inf) == 5 && is.added == 5, "informer lists 5 objects and reports 5 adds");
  char key[128];
  snprintf(key, sizeof key, "%s/cm-page-2", ns);
  json_t *cached = ftck_informer_get(inf, key);
  CHECK(cached && !strcmp(ftck_jstr(cached, "metadata.name"), "cm-page-2"), "informer get by namespace/name");
  json_decref(cached);
  cm = configmap("cm-page-9", "page");
  ftck_create(c, coll, cm, &code, NULL);
  json_decref(cm);
  CHECK(wait_for(&is, &is.added, 6, 5000) && ftck_informer_size(inf) == 6, "informer adds a new object from the watch");
  CHECK(wait_for(&is, &is.modified, 6, 5000), "informer resync passes every cached object to on_update (%d)", is.modified);
  char *dp = ftck_path("", "v1", ns, "configmaps", "cm-page-9");
  ftck_delete(c, dp, &code);
  ftc__free(dp);
  CHECK(wait_for(&is, &is.deleted, 1, 5000) && ftck_informer_size(inf) == 5, "informer removes a deleted object");
  t0 = ftc__now_ns();
  ftck_informer_destroy(inf);
  CHECK((ftc__now_ns() - t0) / 1000000 < 2500, "informer stops promptly");

  json_t *ev_obj = NULL;
  char *ep = ftck_path("", "v1", ns, "configmaps", "cm-page-1");
  ftck_get(c, ep, &code, &ev_obj);
  ftc__free(ep);
  json_object_set_new(ev_obj, "apiVersion", json_string("v1"));
  json_object_set_new(ev_obj, "kind", json_string("ConfigMap"));
  st = ftck_event(c, ev_obj, "Normal", "LiveTest", "Test", "kube_live wrote this event", "ftcomm-controller", "kube-live");
  CHECK(st == FTC_OK, "an events.k8s.io/v1 Event is created");
  json_decref(ev_obj);
  ftc__free(coll);

  /* The token key: made once, then read back the same by every later load. */
  unsigned char k1[FTCK_TOKEN_KEY_BYTES], k2[FTCK_TOKEN_KEY_BYTES], zero[FTCK_TOKEN_KEY_BYTES] = {0};
  CHECK(ftck_token_key_load(c, ns, "live-token-key", k1) == FTC_OK && memcmp(k1, zero, sizeof zero) != 0,
        "the token key Secret is made at the first load");
  CHECK(ftck_token_key_load(c, ns, "live-token-key", k2) == FTC_OK && memcmp(k1, k2, sizeof k1) == 0,
        "a later load reads the same key");
  char t1[FTCK_TOKEN_HEX], t2[FTCK_TOKEN_HEX], t3[FTCK_TOKEN_HEX];
  ftck_job_token(k1, "uid-a", t1);
  ftck_job_token(k2, "uid-a", t2);
  ftck_job_token(k1, "uid-b", t3);
  CHECK(strlen(t1) == 64 && !strcmp(t1, t2) && strcmp(t1, t3) != 0, "a job's token follows the key and the uid");
  /* Pinned to another implementation's answer (Python: hmac.new(bytes(range(32)),
   * b"ftcomm.dev/job-token/v1\0" + uid, "sha256")): a change to the derivation would
   * refuse every running job's ranks after an upgrade. */
  unsigned char fixed[FTCK_TOKEN_KEY_BYTES];
  for (int i = 0; i < FTCK_TOKEN_KEY_BYTES; i++) fixed[i] = (unsigned char)i;
  ftck_job_token(fixed, "0b9c4a4e-5d4c-4f3e-9d57-1a2b3c4d5e6f", t1);
  CHECK(!strcmp(t1, FIXED_TOKEN), "the derivation is pinned (%s)", t1);
  json_t *bad = json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "apiVersion", "v1", "kind", "Secret", "metadata", "name",
                          "live-bad-key", "data", "key", "c2hvcnQ=");
  char *sp = ftck_path("", "v1", ns, "secrets", NULL);
  ftck_create(c, sp, bad, &code, NULL);
  ftc__free(sp);
  json_decref(bad);
  st = ftck_token_key_load(c, ns, "live-bad-key", k2);
  CHECK(st == FTC_ERR_CONFIG && strstr(ftc_last_error(), "must hold data.key of 32 bytes") &&
            strstr(ftc_last_error(), "delete it"),
        "a key Secret of the wrong size is refused saying how to repair it (%s)", ftc_last_error());
}

/* Keep the first ERROR event and end the watch. */
static int on_err(const char *type, json_t *obj, void *ud) {
  if (strcmp(type, "ERROR") != 0) return 0;
  json_t **out = ud;
  *out = json_incref(obj);
  return 1;
}

/* A reconciler without coordinators whose first `informers` caches (jobs,
 * pods, nodes) have listed; *st gets the first failure. */
static ftck_reconciler_t *synced_reconciler(int informers, ftc_status_t *st) {
  ftck_reconciler_opts_t ro = {.env = {.coordinator = "coord.test:7470", .dump_dir = "/dumps"}, .identity = "kube-live"};
  ftck_reconciler_t *r = NULL;
  *st = ftck_reconciler_create(c, &ro, &r);
  for (int w = 0; w < informers && *st == FTC_OK; w++) *st = ftck_informer_start(ftck_reconciler_informer(r, w));
  for (int w = 0; w < informers && *st == FTC_OK; w++)
    *st = ftck_informer_wait_synced(ftck_reconciler_informer(r, w), 10000);
  return r;
}

/* Reconcile job `name` of ns `times` times on this thread; *before and
 * *after (the caller's) get the job as the server has it around them, *rs
 * the reconciler's counts after. FTC_OK or the first failure. */
static ftc_status_t reconcile_job(ftck_reconciler_t *r, const char *name, int times, json_t **before, json_t **after,
                                  ftck_reconciler_stats_t *rs) {
  char key[300], *jp = ftck_path(FTCK_GROUP, FTCK_VERSION, ns, FTCK_PLURAL, name);
  snprintf(key, sizeof key, "%s/%s", ns, name);
  long code = 0;
  ftc_status_t st = FTC_OK;
  ftck_get(c, jp, &code, before);
  for (int i = 0; i < times && st == FTC_OK; i++) {
    int64_t requeue = -1;
    st = ftck_reconcile(r, key, &requeue);
  }
  ftck_get(c, jp, &code, after);
  *rs = (ftck_reconciler_stats_t){0};
  if (r) ftck_reconciler_get_stats(r, rs);
  ftc__free(jp);
  return st;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: kube_live basic NS | list-rv NS | expired NS RV | stale NS JOB | frozen NS JOB POD | reused NS JOB\n");
    return 2;
  }
  ftck_json_use_ftc_alloc();
  ns = argv[2];
  ftck_config_t *cfg = NULL;
  if (ftck_config_load(NULL, NULL, NULL, &cfg) != FTC_OK || ftck_client_create(cfg, &c) != FTC_OK) {
    fprintf(stderr, "kube_live: %s\n", ftc_last_error());
    return 1;
  }
  char *coll = ftck_path("", "v1", ns, "configmaps", NULL);
  if (!strcmp(argv[1], "basic")) {
    basic();
  } else if (!strcmp(argv[1], "list-rv")) {
    json_t *items = NULL;
    char *rv = NULL;
    long code = 0;
    if (ftck_list(c, coll, NULL, NULL, 0, &items, &rv, &code) != FTC_OK) {
      fprintf(stderr, "kube_live: %s\n", ftc_last_error());
      failures++;
    } else {
      printf("%s\n", rv);
    }
    json_decref(items);
    ftc__free(rv);
  } else if (!strcmp(argv[1], "expired") && argc > 3) {
    long code = 0;
    /* The 410 comes as an HTTP status or as an ERROR event with code 410. */
    json_t *err_obj = NULL;
    int got_error_event = 0;
    ftc_status_t st = ftck_watch(c, coll, NULL, NULL, argv[3], 5, NULL, on_err, &err_obj, &code);
    got_error_event = err_obj && ftck_jint(err_obj, "code", 0) == 410;
    CHECK(code == 410 || got_error_event, "watch from resourceVersion %s after compaction and restart: %s", argv[3],
          got_error_event ? "ERROR event with code 410" : code == 410 ? "HTTP 410" : "no 410");
    (void)st;
    json_decref(err_obj);
  } else if (!strcmp(argv[1], "frozen") && argc > 4) {
    ftc_status_t st;
    ftck_reconciler_t *r = synced_reconciler(3, &st);
    char pkey[300], *pp = ftck_path("", "v1", ns, "pods", argv[4]);
    snprintf(pkey, sizeof pkey, "%s/%s", ns, argv[4]);
    char sp[512];
    snprintf(sp, sizeof sp, "%s/status", pp);
    json_t *patch = json_pack("{s:{s:s, s:s}}", "status", "phase", "Failed", "reason", "Frozen");
    long code = 0;
    if (st == FTC_OK) st = ftck_merge_patch(c, sp, patch, &code, NULL);
    json_decref(patch);
    int seen = 0;
    for (int i = 0; i < 250 && st == FTC_OK && !seen; i++) {
      json_t *cached = ftck_informer_get(ftck_reconciler_informer(r, 1), pkey);
      seen = cached && ftck_pod_is_lost(cached);
      json_decref(cached);
      if (!seen) usleep(20000);
    }
    ftck_informer_stop(ftck_reconciler_informer(r, 1)); /* the pod cache now shows the failed pod for good */
    CHECK(st == FTC_OK && seen, "the pod cache saw %s fail and is frozen", argv[4]);
    json_t *before = NULL, *after = NULL;
    ftck_reconciler_stats_t rs = {0};
    /* The second pass still sees the failed pod as the slot's. */
    if (st == FTC_OK) st = reconcile_job(r, argv[3], 2, &before, &after, &rs);
    CHECK(st == FTC_OK && rs.pods_created == 1 && rs.replacements == 1,
          "two reconciles over the frozen cache: one pod created, one replacement (created %llu, replaced %llu)",
          (unsigned long long)rs.pods_created, (unsigned long long)rs.replacements);
    CHECK(ftck_jint(after, "status.replacements", -1) == ftck_jint(before, "status.replacements", -1) + 1,
          "status counts it once (%lld -> %lld)", (long long)ftck_jint(before, "status.replacements", -1),
          (long long)ftck_jint(after, "status.replacements", -1));
    json_decref(before);
    json_decref(after);
    ftc__free(pp);
    ftck_reconciler_destroy(r);
  } else if (!strcmp(argv[1], "reused") && argc > 3) {
    ftc_status_t st;
    ftck_reconciler_t *r = synced_reconciler(3, &st);
    json_t *before = NULL, *after = NULL, *job = NULL, *fresh = NULL, *pod = NULL;
    ftck_reconciler_stats_t rs = {0};
    char pname[300], pkey[600], jkey[300];
    snprintf(pname, sizeof pname, "%s-0-0", argv[3]);
    snprintf(pkey, sizeof pkey, "%s/%s", ns, pname);
    snprintf(jkey, sizeof jkey, "%s/%s", ns, argv[3]);
    char *jp = ftck_path(FTCK_GROUP, FTCK_VERSION, ns, FTCK_PLURAL, argv[3]);
    char *jc = ftck_path(FTCK_GROUP, FTCK_VERSION, ns, FTCK_PLURAL, NULL);
    char *pp = ftck_path("", "v1", ns, "pods", pname), *pc = ftck_path("", "v1", ns, "pods", NULL);
    long code = 0;
    if (st == FTC_OK) st = reconcile_job(r, argv[3], 1, &before, &after, &rs);
    json_t *cached = NULL;
    for (int i = 0; i < 250 && st == FTC_OK && !cached; i++)
      if (!(cached = ftck_informer_get(ftck_reconciler_informer(r, 1), pkey))) usleep(20000);
    ftck_informer_stop(ftck_reconciler_informer(r, 1)); /* the pod cache shows the first job's pod for good */
    CHECK(st == FTC_OK && cached, "the first job's pod %s is made and cached", pname);
    const char *old_uid = ftck_jstr(after, "metadata.uid");
    /* The job is deleted (no garbage collector here: its pod too) and made again under its name. */
    if (st == FTC_OK) st = ftck_delete(c, jp, &code);
    if (st == FTC_OK) st = ftck_delete(c, pp, &code);
    for (int i = 0; i < 250 && st == FTC_OK; i++) {
      json_t *gone = NULL;
      if (ftck_get(c, pp, &code, &gone) != FTC_OK && code == 404) break;
      json_decref(gone);
      usleep(20000);
    }
    job = st == FTC_OK ? json_pack("{s:s, s:s, s:{s:s, s:s}, s:O}", "apiVersion", FTCK_API_VERSION, "kind", FTCK_KIND,
                                   "metadata", "name", argv[3], "namespace", ns, "spec", ftck_jget(after, "spec"))
                       : NULL;
    if (job) st = ftck_create(c, jc, job, &code, &fresh);
    const char *new_uid = ftck_jstr(fresh, "metadata.uid");
    CHECK(st == FTC_OK && new_uid && old_uid && strcmp(new_uid, old_uid) != 0, "%s made again under its name (another uid)",
          argv[3]);
    ftck_job_spec_t spec;
    char err[256];
    ftck_pod_env_t env = {.coordinator = "coord.test:7470", .dump_dir = "/dumps"};
    json_t *np = st == FTC_OK && ftck_job_spec_parse(fresh, &spec, err, sizeof err) == 0
                     ? ftck_build_pod(fresh, &spec, 0, 0, 0, "", &env)
                     : NULL;
    if (np) st = ftck_create(c, pc, np, &code, NULL);
    json_decref(np);
    CHECK(np && st == FTC_OK, "the new job's pod %s is made (as a controller would)", pname);
    int seen = 0; /* the job cache shows the new job before the reconcile */
    for (int i = 0; i < 250 && st == FTC_OK && !seen; i++) {
      json_t *cj = ftck_informer_get(ftck_reconciler_informer(r, 0), jkey);
      seen = cj && new_uid && !strcmp(ftck_jstr(cj, "metadata.uid") ? ftck_jstr(cj, "metadata.uid") : "", new_uid);
      json_decref(cj);
      if (!seen) usleep(20000);
    }
    json_decref(before);
    json_decref(after);
    before = after = NULL;
    ftck_reconciler_stats_t rs0 = rs;
    if (st == FTC_OK && seen) st = reconcile_job(r, argv[3], 1, &before, &after, &rs);
    if (st == FTC_OK) ftck_get(c, pp, &code, &pod);
    const char *owner = ftck_jstr(json_array_get(ftck_jget(pod, "metadata.ownerReferences"), 0), "uid");
    CHECK(st == FTC_OK && pod && !ftck_jstr(pod, "metadata.deletionTimestamp") && owner && new_uid &&
              !strcmp(owner, new_uid) && rs.pods_deleted == rs0.pods_deleted,
          "a reconcile over the cache that still shows the first job's %s leaves the new job's pod alone "
          "(it %s, deleted %llu)", pname, !pod ? "is gone" : ftck_jstr(pod, "metadata.deletionTimestamp") ? "is being deleted" : "stays",
          (unsigned long long)(rs.pods_deleted - rs0.pods_deleted));
    json_decref(cached);
    json_decref(before);
    json_decref(after);
    json_decref(job);
    json_decref(fresh);
    json_decref(pod);
    ftc__free(jp);
    ftc__free(jc);
    ftc__free(pp);
    ftc__free(pc);
    ftck_reconciler_destroy(r);
  } else if (!strcmp(argv[1], "stale") && argc > 3) {
    ftc_status_t st;
    ftck_reconciler_t *r = synced_reconciler(1, &st); /* jobs only; pods never listed */
    json_t *before = NULL, *after = NULL;
    ftck_reconciler_stats_t rs = {0};
    if (st == FTC_OK) st = reconcile_job(r, argv[3], 1, &before, &after, &rs);
    CHECK(st == FTC_OK, "reconcile of %s/%s with an empty pod cache succeeds", ns, argv[3]);
    CHECK(rs.pods_created == 0 && rs.replacements == 0 && rs.pods_deleted == 0,
          "... and creates, replaces and deletes nothing (created %llu, replaced %llu, deleted %llu)",
          (unsigned long long)rs.pods_created, (unsigned long long)rs.replacements, (unsigned long long)rs.pods_deleted);
    CHECK(ftck_jint(before, "status.replacements", -1) == ftck_jint(after, "status.replacements", -2),
          "... and counts no replacement (%lld before, %lld after)", (long long)ftck_jint(before, "status.replacements", -1),
          (long long)ftck_jint(after, "status.replacements", -2));
    json_decref(before);
    json_decref(after);
    ftck_reconciler_destroy(r);
  } else {
    fprintf(stderr, "kube_live: unknown mode %s\n", argv[1]);
    failures++;
  }
  ftc__free(coll);
  ftck_client_destroy(c);
  ftck_config_free(cfg);
  return failures ? 1 : 0;
}

