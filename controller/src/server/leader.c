/*
 * leader.c - the Lease candidate and the renew thread. le->mu guards
 * is_leader, stop and the observed record; it is never held across an API
 * call.
 *
 * Renewing is an optimistic update, as client-go's leaderelection does it:
 * the leader PUTs the Lease it got back from its last successful write (so
 * with that write's resourceVersion) without reading it first. Only when
 * that PUT fails (409: someone else wrote it; or any error) does it read the
 * Lease and decide again, in the same attempt. A steady leader sends one
 * request per retry period.
 */
#include "leader.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_time.h"
#include "kube_json.h"

struct ftck_leader {
  ftck_client_t *c;
  char *ns, *name, *identity, *path, *collection;
  int lease_s, renew_deadline_s, retry_s;
  void (*on_lost)(void *);
  void *ud;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  int is_leader;
  int stop;
  int renewing;
  pthread_t thread;
  char observed[512];      /* holder + renewTime last seen */
  int64_t observed_at_ns;  /* local time it was first seen */
  /* The Lease as our last successful create/PUT returned it, NULL when not
   * leading or after a failed write. Used only by the thread that calls
   * ftck_leader_try (acquire, then the renew thread, then release after
   * joining it), so it needs no lock. */
  json_t *mine;
  ftck_leader_stats_t stats; /* atomics */
};

static ftc_status_t lease_get(ftck_leader_t *le, long *code, json_t **out) {
  __atomic_add_fetch(&le->stats.gets, 1, __ATOMIC_RELAXED);
  return ftck_get(le->c, le->path, code, out);
}

static ftc_status_t lease_put(ftck_leader_t *le, json_t *lease, long *code, json_t **out) {
  __atomic_add_fetch(&le->stats.puts, 1, __ATOMIC_RELAXED);
  return ftck_replace(le->c, le->path, lease, code, out);
}

void ftck_leader_get_stats(ftck_leader_t *le, ftck_leader_stats_t *out) {
  out->gets = __atomic_load_n(&le->stats.gets, __ATOMIC_RELAXED);
  out->puts = __atomic_load_n(&le->stats.puts, __ATOMIC_RELAXED);
  out->posts = __atomic_load_n(&le->stats.posts, __ATOMIC_RELAXED);
}

ftc_status_t ftck_leader_create(ftck_client_t *c, const ftck_leader_opts_t *o, ftck_leader_t **out) {
  *out = NULL;
  ftck_leader_t *le = ftc__calloc(1, sizeof *le);
  if (!le) return ftc__error(FTC_ERR_NO_MEMORY, "leader election: no memory");
  pthread_mutex_init(&le->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&le->cv, &ca);
  pthread_condattr_destroy(&ca);
  le->c = c;
  le->ns = ftc__strdup(o->ns);
  le->name = ftc__strdup(o->name);
  le->identity = ftc__strdup(o->identity);
  le->path = ftck_path("coordination.k8s.io", "v1", o->ns, "leases", o->name);
  le->collection = ftck_path("coordination.k8s.io", "v1", o->ns, "leases", NULL);
  le->lease_s = o->lease_duration_s;
  le->renew_deadline_s = o->renew_deadline_s;
  le->retry_s = o->retry_period_s;
  le->on_lost = o->on_lost;
  le->ud = o->ud;
  if (!le->ns || !le->name || !le->identity || !le->path || !le->collection) {
    ftck_leader_destroy(le);
    return ftc__error(FTC_ERR_NO_MEMORY, "leader election: no memory");
  }
  *out = le;
  return FTC_OK;
}

static void set_leader(ftck_leader_t *le, int v) {
  pthread_mutex_lock(&le->mu);
  le->is_leader = v;
  pthread_mutex_unlock(&le->mu);
}

int ftck_leader_is_leader(ftck_leader_t *le) {
  pthread_mutex_lock(&le->mu);
  int v = le->is_leader;
  pthread_mutex_unlock(&le->mu);
  return v;
}

/* Remember what the server stored after our write (takes *stored), and that
 * we saw ourselves renew just now. */
static void keep_mine(ftck_leader_t *le, json_t *stored, const char *now) {
  json_decref(le->mine);
  le->mine = stored;
  int64_t t = ftc__now_ns();
  pthread_mutex_lock(&le->mu);
  snprintf(le->observed, sizeof le->observed, "%s|%s", le->identity, now);
  le->observed_at_ns = t;
  pthread_mutex_unlock(&le->mu);
}

static void forget_mine(ftck_leader_t *le) {
  json_decref(le->mine);
  le->mine = NULL;
}

/* The fast path: renew by PUTting the Lease of our last write with a new
 * renewTime. 1 renewed; 0 not tried (not leading, nothing kept, or our own
 * record is older than the lease duration); -1 the PUT failed (the caller
 * reads the Lease and decides again). */
static int renew_optimistically(ftck_leader_t *le, const char *now) {
  if (!le->mine || !ftck_leader_is_leader(le)) return 0;
  pthread_mutex_lock(&le->mu);
  int valid = ftc__now_ns() < le->observed_at_ns + (int64_t)le->lease_s * 1000000000LL;
  pthread_mutex_unlock(&le->mu);
  if (!valid) return 0;
  json_t *lease = json_deep_copy(le->mine);
  json_t *spec = lease ? json_object_get(lease, "spec") : NULL;
  if (!json_is_object(spec) || json_object_set_new(spec, "renewTime", json_string(now)) != 0 ||
      json_object_set_new(spec, "holderIdentity", json_string(le->identity)) != 0 ||
      json_object_set_new(spec, "leaseDurationSeconds", json_integer(le->lease_s)) != 0) {
    json_decref(lease);
    forget_mine(le);
    return 0;
  }
  json_t *stored = NULL;
  long code = 0;
  ftc_status_t st = lease_put(le, lease, &code, &stored);
  json_decref(lease);
  forget_mine(le);
  if (st != FTC_OK || !json_is_object(stored)) {
    json_decref(stored);
    FTC_WARN(FTC_SUB_CTRL, "leader election: renewing Lease %s/%s without reading it failed (%s); reading it",
             le->ns, le->name, st != FTC_OK ? ftc_last_error() : "no object in the reply");
    return -1;
  }
  keep_mine(le, stored, now);
  return 1;
}

int ftck_leader_try(ftck_leader_t *le) {
  char now[64];
  ftck_format_microtime(ftc__wall_ns(), now, sizeof now);
  if (renew_optimistically(le, now) == 1) return 1;
  json_t *lease = NULL, *stored = NULL;
  long code = 0;
  ftc_status_t st = lease_get(le, &code, &lease);
  if (st != FTC_OK && code == 404) {
    json_t *obj = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:i, s:s, s:s, s:i}}", "apiVersion",
                            "coordination.k8s.io/v1", "kind", "Lease", "metadata", "name", le->name, "namespace",
                            le->ns, "spec", "holderIdentity", le->identity, "leaseDurationSeconds", le->lease_s,
                            "acquireTime", now, "renewTime", now, "leaseTransitions", 0);
    if (!obj) {
      ftc__error(FTC_ERR_NO_MEMORY, "leader election: no memory");
      return -1;
    }
    __atomic_add_fetch(&le->stats.posts, 1, __ATOMIC_RELAXED);
    st = ftck_create(le->c, le->collection, obj, &code, &stored);
    json_decref(obj);
    if (st == FTC_OK) {
      if (json_is_object(stored)) keep_mine(le, stored, now);
      else json_decref(stored);
      FTC_INFO(FTC_SUB_CTRL, "leader election: %s created Lease %s/%s and leads", le->identity, le->ns, le->name);
      set_leader(le, 1);
      return 1;
    }
    return code == 409 ? 0 : -1;
  }
  if (st != FTC_OK) return -1;
  const char *holder = ftck_jstr(lease, "spec.holderIdentity");
  const char *renew = ftck_jstr(lease, "spec.renewTime");
  int64_t dur = ftck_jint(lease, "spec.leaseDurationSeconds", le->lease_s);
  char seen[512];
  snprintf(seen, sizeof seen, "%s|%s", holder ? holder : "", renew ? renew : "");
  int64_t t = ftc__now_ns();
  pthread_mutex_lock(&le->mu);
  if (strcmp(seen, le->observed) != 0) {
    snprintf(le->observed, sizeof le->observed, "%s", seen);
    le->observed_at_ns = t;
  }
  int64_t observed_at = le->observed_at_ns;
  pthread_mutex_unlock(&le->mu);
  int mine = holder && strcmp(holder, le->identity) == 0;
  int held = holder && *holder;
  if (held && !mine && t < observed_at + dur * 1000000000LL) {
    json_decref(lease);
    forget_mine(le);
    set_leader(le, 0);
    return 0;
  }
  json_t *spec = json_object_get(lease, "spec");
  int bad = 0;
  if (!json_is_object(spec)) {
    spec = json_object();
    if (!spec || json_object_set_new(lease, "spec", spec) != 0) bad = 1;
  }
  if (!bad && !mine) {
    bad |= json_object_set_new(spec, "acquireTime", json_string(now));
    bad |= json_object_set_new(spec, "leaseTransitions",
                               json_integer(ftck_jint(lease, "spec.leaseTransitions", 0) + (held ? 1 : 0)));
  }
  if (!bad) {
    bad |= json_object_set_new(spec, "holderIdentity", json_string(le->identity));
    bad |= json_object_set_new(spec, "renewTime", json_string(now));
    bad |= json_object_set_new(spec, "leaseDurationSeconds", json_integer(le->lease_s));
  }
  if (bad) {
    json_decref(lease);
    ftc__error(FTC_ERR_NO_MEMORY, "leader election: no memory");
    return -1;
  }
  st = lease_put(le, lease, &code, &stored);
  json_decref(lease);
  if (st == FTC_OK) {
    if (json_is_object(stored)) keep_mine(le, stored, now);
    else json_decref(stored);
    if (!mine) FTC_INFO(FTC_SUB_CTRL, "leader election: %s took Lease %s/%s", le->identity, le->ns, le->name);
    set_leader(le, 1);
    return 1;
  }
  forget_mine(le);
  return code == 409 ? 0 : -1;
}

static int wait_or_stop(ftck_leader_t *le, int64_t ms, const volatile int *ext_stop) {
  int64_t until = ftc__now_ns() + ms * 1000000LL;
  struct timespec ts = {.tv_sec = until / 1000000000LL, .tv_nsec = until % 1000000000LL};
  pthread_mutex_lock(&le->mu);
  while (!le->stop && !(ext_stop && __atomic_load_n(ext_stop, __ATOMIC_ACQUIRE)) && ftc__now_ns() < until) {
    /* ext_stop is set from a signal handler: wake at least every 200 ms to see it */
    int64_t w = ftc__now_ns() + 200000000LL;
    if (w > until) w = until;
    struct timespec ws = {.tv_sec = w / 1000000000LL, .tv_nsec = w % 1000000000LL};
    pthread_cond_timedwait(&le->cv, &le->mu, ext_stop ? &ws : &ts);
  }
  int s = le->stop || (ext_stop && __atomic_load_n(ext_stop, __ATOMIC_ACQUIRE));
  pthread_mutex_unlock(&le->mu);
  return s;
}

ftc_status_t ftck_leader_acquire(ftck_leader_t *le, const volatile int *stop) {
  FTC_INFO(FTC_SUB_CTRL, "leader election: %s waiting for Lease %s/%s", le->identity, le->ns, le->name);
  for (;;) {
    int r = ftck_leader_try(le);
    if (r == 1) return FTC_OK;
    if (r < 0) FTC_WARN(FTC_SUB_CTRL, "leader election: %s", ftc_last_error());
    if (wait_or_stop(le, (int64_t)le->retry_s * 1000, stop))
      return ftc__error(FTC_ERR_ABORTED, "leader election: stopped before acquiring the Lease");
  }
}

static void *renew_main(void *arg) {
  ftck_leader_t *le = arg;
  int64_t last_ok = ftc__now_ns();
  while (!wait_or_stop(le, (int64_t)le->retry_s * 1000, NULL)) {
    int r = ftck_leader_try(le);
    if (r == 1) {
      last_ok = ftc__now_ns();
      continue;
    }
    if (r < 0) FTC_WARN(FTC_SUB_CTRL, "leader election: renew failed: %s", ftc_last_error());
    if (r == 0 || ftc__now_ns() - last_ok > (int64_t)le->renew_deadline_s * 1000000000LL) {
      FTC_ERROR(FTC_SUB_CTRL, "leader election: %s lost Lease %s/%s", le->identity, le->ns, le->name);
      set_leader(le, 0);
      if (le->on_lost) le->on_lost(le->ud);
      break;
    }
  }
  return NULL;
}

ftc_status_t ftck_leader_start_renewing(ftck_leader_t *le) {
  int rc = pthread_create(&le->thread, NULL, renew_main, le);
  if (rc != 0) return ftc__error(FTC_ERR_SYSTEM, "leader election: cannot start the renew thread: %s", strerror(rc));
  pthread_setname_np(le->thread, "ftck-lease");
  le->renewing = 1;
  return FTC_OK;
}

void ftck_leader_release(ftck_leader_t *le) {
  if (!le) return;
  pthread_mutex_lock(&le->mu);
  le->stop = 1;
  pthread_cond_broadcast(&le->cv);
  pthread_mutex_unlock(&le->mu);
  if (le->renewing) {
    pthread_join(le->thread, NULL);
    le->renewing = 0;
  }
  if (!ftck_leader_is_leader(le)) return;
  json_t *lease = NULL;
  long code = 0;
  if (lease_get(le, &code, &lease) == FTC_OK &&
      strcmp(ftck_jstr(lease, "spec.holderIdentity") ? ftck_jstr(lease, "spec.holderIdentity") : "", le->identity) == 0) {
    char now[64];
    ftck_format_microtime(ftc__wall_ns(), now, sizeof now);
    json_t *spec = json_object_get(lease, "spec");
    json_object_set_new(spec, "holderIdentity", json_string(""));
    json_object_set_new(spec, "leaseDurationSeconds", json_integer(1));
    json_object_set_new(spec, "renewTime", json_string(now));
    json_object_set_new(spec, "acquireTime", json_string(now));
    if (lease_put(le, lease, &code, NULL) == FTC_OK)
      FTC_INFO(FTC_SUB_CTRL, "leader election: %s released Lease %s/%s", le->identity, le->ns, le->name);
    else
      FTC_WARN(FTC_SUB_CTRL, "leader election: release failed: %s", ftc_last_error());
  }
  json_decref(lease);
  set_leader(le, 0);
}

void ftck_leader_destroy(ftck_leader_t *le) {
  if (!le) return;
  pthread_mutex_lock(&le->mu);
  le->stop = 1;
  pthread_cond_broadcast(&le->cv);
  pthread_mutex_unlock(&le->mu);
  if (le->renewing) pthread_join(le->thread, NULL);
  pthread_mutex_destroy(&le->mu);
  pthread_cond_destroy(&le->cv);
  ftc__free(le->ns);
  ftc__free(le->name);
  ftc__free(le->identity);
  ftc__free(le->path);
  ftc__free(le->collection);
  json_decref(le->mine);
  ftc__free(le);
}
