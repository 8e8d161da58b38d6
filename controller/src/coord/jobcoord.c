/*
 * jobcoord.c - a table of per-job coordinators behind the router, and the
 * incident pipeline: a coordinator reports a hang (it asked every rank for a
 * dump), the dumps land in the job's folder of the volume, and once they are
 * all in (or dump_wait_ms passed; a stopped rank never sends one) the worker
 * reconciling the job runs ftcomm-trace on the folder, writes the analysis
 * next to the dumps (stamped with the job's uid) and drops the oldest
 * incidents beyond the retention; and the sweep that removes the folders of
 * deleted jobs (retention.c) once they are --dump-ttl-after-deletion old,
 * on the caller's thread or on the sweeper thread ("ftck-sweeper").
 *
 * Lock: cs->mu guards the table, each entry's pending incidents and lost-pod
 * memory; it is never held while calling a coordinator, the analyzer or
 * notify(). Entries are made, remade and freed only by the worker holding
 * their key (or at destroy, after the workers stopped); the router thread
 * reads an entry's immutable fields under cs->mu. ftck_coords_poll reads each
 * coordinator's stats (its own leaf lock) under cs->mu; nothing takes cs->mu
 * under a coordinator's lock. cs->vol_mu serializes making a job's folder
 * (and its coordinator entry) with the sweep deciding about that folder; it
 * is taken before cs->mu and before the caller's lookup (an informer's lock),
 * for the decision and one rename per folder (the removal follows without
 * it). cs->sweep_mu only guards the sweeper's stop flag and wait; nothing
 * else is taken under it.
 */
#include "jobcoord.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_param.h"
#include "ftc_time.h"
#include "retention.h"
#include "router.h"

extern char **environ;

#define ANALYZER_TIMEOUT_NS (120LL * 1000000000LL)

typedef struct pending {
  struct pending *next;
  ftck_incident_t inc;
  int asked;
  uint64_t epoch;
  int64_t start_ns; /* monotonic */
  int64_t wait_ns;  /* how long it waits for the dumps */
  unsigned char *have; /* asked entries: the rank's dump is in (a rank may upload again) */
  int *slot_of_rank; /* rank -> slot in the epoch that hung, when the reconciler
                     * had read that epoch's view by the time it hung; NULL: unknown */
  int nview;
} pending_t;

static void pending_free(pending_t *p) {
  ftc__free(p->have);
  ftc__free(p->slot_of_rank);
  ftc__free(p);
}

typedef struct jc {
  struct jc *next;
  ftck_coords_t *cs;
  char *key, *job, *token, *uid;
  int world_size, min_size, hang_ms;
  ftc__coord_t *co;
  int port;
  char dump_dir[PATH_MAX];
  /* Under cs->mu. */
  pending_t *pending;
  json_t *lost;              /* slot -> the pod last declared lost */
  int *slot_of_rank;         /* the last view the reconciler read: rank -> slot */
  int nview;
  uint64_t view_epoch;
  /* ftck_coords_poll's last look: the published epoch, its size, sessions. */
  uint64_t polled_epoch;
  int polled_size, polled_connected;
} jc_t;

struct ftck_coords {
  char *bind, *dump_volume, *analyzer;
  int retention, dump_wait_ms;
  void (*notify)(void *ud, const char *key);
  void *ud;
  pthread_mutex_t vol_mu; /* before mu */
  pthread_mutex_t mu;
  jc_t *jobs;
  ftck_router_t *router; /* set once by ftck_coords_listen on the main thread */
  int listening;         /* atomic */
  ftck_coords_stats_t stats; /* atomics */
  /* The sweeper thread (ftck_coords_start_sweeper): stop = flag + signal + join. */
  pthread_t sweeper;
  int sweeper_started;           /* owner's thread only */
  pthread_mutex_t sweep_mu;      /* guards sweeper_stop; taken alone */
  pthread_cond_t sweep_cv;
  int sweeper_stop;              /* under sweep_mu; also read atomically between slices */
  ftck_coords_sweep_opts_t sweep_o;
  char sweep_ns[256];
  int64_t sweep_period_ns;
};

static void bump(uint64_t *c) { __atomic_add_fetch(c, 1, __ATOMIC_RELAXED); }

/* ---- events, on a coordinator's service thread ---- */

static void on_event(void *arg, const ftc__coord_event_t *ev) {
  jc_t *j = arg;
  ftck_coords_t *cs = j->cs;
  int tell = 1;
  switch (ev->kind) {
    case FTC__COORD_EV_EPOCH: bump(&cs->stats.epochs); break;
    case FTC__COORD_EV_HANG: {
      pending_t *p = ftc__calloc(1, sizeof *p);
      if (!p) {
        FTC_ERROR(FTC_SUB_CTRL, "%s: no memory to record incident %s", j->key, ev->incident);
        break;
      }
      bump(&cs->stats.hangs);
      snprintf(p->inc.name, sizeof p->inc.name, "%s", ev->incident ? ev->incident : "hang");
      snprintf(p->inc.kind, sizeof p->inc.kind, "%s", ev->slot >= 0 ? "Hang" : "CollectiveTimeout");
      snprintf(p->inc.reason, sizeof p->inc.reason, "%s", ev->reason ? ev->reason : "");
      snprintf(p->inc.dump_path, sizeof p->inc.dump_path, "%s/%s", j->dump_dir, p->inc.name);
      p->inc.culprit_slot = ev->slot;
      p->inc.culprit_rank = ev->rank;
      p->inc.time_ns = ftc__wall_ns();
      p->asked = ev->size;
      p->have = p->asked > 0 ? ftc__calloc((size_t)p->asked, 1) : NULL; /* NULL: every upload counts */
      p->epoch = ev->epoch;
      p->start_ns = ftc__now_ns();
      pthread_mutex_lock(&cs->mu);
      /* A rank writes and uploads a requested dump at once (within about
       * 1 s: core/dumpwriter.c); --dump-wait covers a slow disk or link. */
      p->wait_ns = (int64_t)cs->dump_wait_ms * 1000000;
      FTC_WARN(FTC_SUB_CTRL, "%s: %s; collecting the dumps of %d ranks into %s", j->key, p->inc.reason, p->asked,
               p->inc.dump_path);
      /* Which slot had which rank in the epoch that hung, kept with the
       * incident: by the time its dumps are in (they may wait seconds for the
       * coordinator's verdict) the job can be at a later epoch, renumbered
       * or not, and the culprit the analyzer names is a rank of this one. */
      if (j->slot_of_rank && j->view_epoch == ev->epoch &&
          (p->slot_of_rank = ftc__calloc((size_t)j->nview, sizeof *p->slot_of_rank))) {
        memcpy(p->slot_of_rank, j->slot_of_rank, (size_t)j->nview * sizeof *p->slot_of_rank);
        p->nview = j->nview;
      }
      p->next = j->pending;
      j->pending = p;
      pthread_mutex_unlock(&cs->mu);
      break;
    }
    case FTC__COORD_EV_DUMP: {
      bump(&cs->stats.dumps);
      tell = 0;
      pthread_mutex_lock(&cs->mu);
      for (pending_t *p = j->pending; p; p = p->next) {
        if (!ev->incident || strcmp(p->inc.name, ev->incident) != 0) continue;
        /* Another copy of a rank's dump is not another rank's. */
        if (p->have && ev->rank >= 0 && ev->rank < p->asked) {
          if (p->have[ev->rank]) continue;
          p->have[ev->rank] = 1;
        }
        if (++p->inc.dumps >= p->asked) tell = 1;
      }
      pthread_mutex_unlock(&cs->mu);
      break;
    }
    default: break;
  }
  if (tell && cs->notify) cs->notify(cs->ud, j->key);
}

/* ---- the router's question ---- */

static int route(void *ud, const char *job, const char *token) {
  ftck_coords_t *cs = ud;
  int port = -1;
  pthread_mutex_lock(&cs->mu);
  for (jc_t *j = cs->jobs; j; j = j->next) {
    if (strcmp(j->job, job) != 0) continue;
    if (port < 0) port = j->port; /* a wrong token still reaches a coordinator, which says so */
    if (!strcmp(j->token, token)) {
      port = j->port;
      break;
    }
  }
  pthread_mutex_unlock(&cs->mu);
  return port;
}

/* ---- lifecycle ---- */

ftc_status_t ftck_coords_create(const ftck_coords_opts_t *o, ftck_coords_t **out) {
  *out = NULL;
  ftck_coords_t *cs = ftc__calloc(1, sizeof *cs);
  if (!cs) return ftc__error(FTC_ERR_NO_MEMORY, "coordinators: no memory");
  cs->bind = ftc__strdup(o->bind ? o->bind : ":7470");
  cs->dump_volume = ftc__strdup(o->dump_volume ? o->dump_volume : "/var/lib/ftcomm/dumps");
  cs->analyzer = o->analyzer && *o->analyzer ? ftc__strdup(o->analyzer) : NULL;
  if (!cs->analyzer) {
    char self[PATH_MAX], cand[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
      self[n] = '\0';
      char *slash = strrchr(self, '/');
      if (slash) *slash = '\0';
      snprintf(cand, sizeof cand, "%s/ftcomm-trace", self);
      if (access(cand, X_OK) == 0) cs->analyzer = ftc__strdup(cand);
    }
    if (!cs->analyzer) cs->analyzer = ftc__strdup("ftcomm-trace");
  }
  cs->retention = o->dump_retention > 0 ? o->dump_retention : 10;
  cs->dump_wait_ms = o->dump_wait_ms > 0 ? o->dump_wait_ms : 10000;
  cs->notify = o->notify;
  cs->ud = o->ud;
  pthread_mutex_init(&cs->mu, NULL);
  pthread_mutex_init(&cs->vol_mu, NULL);
  pthread_mutex_init(&cs->sweep_mu, NULL);
  pthread_condattr_t ca; /* the sweeper's period: not moved by a wall clock step */
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&cs->sweep_cv, &ca);
  pthread_condattr_destroy(&ca);
  if (!cs->bind || !cs->dump_volume || !cs->analyzer) {
    ftck_coords_destroy(cs);
    return ftc__error(FTC_ERR_NO_MEMORY, "coordinators: no memory");
  }
  *out = cs;
  return FTC_OK;
}

ftc_status_t ftck_coords_listen(ftck_coords_t *cs) {
  if (cs->router) return FTC_OK;
  ftc_status_t st = ftck_router_start(cs->bind, route, cs, &cs->router);
  if (st == FTC_OK) __atomic_store_n(&cs->listening, 1, __ATOMIC_RELEASE);
  return st;
}

int ftck_coords_port(ftck_coords_t *cs) {
  return __atomic_load_n(&cs->listening, __ATOMIC_ACQUIRE) ? ftck_router_port(cs->router) : -1;
}

static void jc_free(jc_t *j) {
  if (!j) return;
  ftc__coord_destroy(j->co); /* joins its thread: no event for j after this */
  while (j->pending) {
    pending_t *p = j->pending;
    j->pending = p->next;
    pending_free(p);
  }
  json_decref(j->lost);
  ftc__free(j->slot_of_rank);
  ftc__free(j->key);
  ftc__free(j->job);
  ftc__free(j->token);
  ftc__free(j->uid);
  ftc__free(j);
}

void ftck_coords_destroy(ftck_coords_t *cs) {
  if (!cs) return;
  ftck_coords_stop_sweeper(cs); /* it looks at the table below */
  if (cs->router) ftck_router_stop(cs->router);
  while (cs->jobs) {
    jc_t *j = cs->jobs;
    cs->jobs = j->next;
    jc_free(j);
  }
  pthread_mutex_destroy(&cs->mu);
  pthread_mutex_destroy(&cs->vol_mu);
  pthread_mutex_destroy(&cs->sweep_mu);
  pthread_cond_destroy(&cs->sweep_cv);
  ftc__free(cs->bind);
  ftc__free(cs->dump_volume);
  ftc__free(cs->analyzer);
  ftc__free(cs);
}

static int mkdir_p(const char *path) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Under cs->mu. */
static jc_t *find(ftck_coords_t *cs, const char *key) {
  for (jc_t *j = cs->jobs; j; j = j->next)
    if (!strcmp(j->key, key)) return j;
  return NULL;
}

int ftck_coords_has(ftck_coords_t *cs, const char *key) {
  pthread_mutex_lock(&cs->mu);
  int has = find(cs, key) != NULL;
  pthread_mutex_unlock(&cs->mu);
  return has;
}

/* Take j out of the table; the caller frees it. */
static void unlink_job(ftck_coords_t *cs, jc_t *j) {
  for (jc_t **pp = &cs->jobs; *pp; pp = &(*pp)->next)
    if (*pp == j) {
      *pp = j->next;
      return;
    }
}

ftc_status_t ftck_coords_ensure(ftck_coords_t *cs, const char *key, const ftck_coord_params_t *p, int *created) {
  if (created) *created = 0;
  pthread_mutex_lock(&cs->mu);
  jc_t *old = find(cs, key);
  int same = old && old->world_size == p->world_size && old->min_size == p->min_size &&
             old->hang_ms == p->hang_timeout_ms && !strcmp(old->token, p->token) && !strcmp(old->job, p->job) &&
             !strcmp(old->uid, p->uid ? p->uid : "");
  pthread_mutex_unlock(&cs->mu);
  if (same) return FTC_OK;
  ftc_status_t st = FTC_OK;
  jc_t *j = ftc__calloc(1, sizeof *j);
  if (!j) return ftc__error(FTC_ERR_NO_MEMORY, "coordinators: no memory");
  j->cs = cs;
  j->key = ftc__strdup(key);
  j->job = ftc__strdup(p->job);
  j->token = ftc__strdup(p->token);
  j->uid = ftc__strdup(p->uid ? p->uid : "");
  j->lost = json_object();
  j->world_size = p->world_size;
  j->min_size = p->min_size;
  j->hang_ms = p->hang_timeout_ms;
  if (!j->key || !j->job || !j->token || !j->uid || !j->lost) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "coordinators: no memory");
    goto out_free_job;
  }
  snprintf(j->dump_dir, sizeof j->dump_dir, "%s/%s", cs->dump_volume, key); /* key is ns/name */
  /* Under vol_mu until the entry is in the table: a sweep sees either no
   * folder or a job with a coordinator. A job that has one is not gone. */
  pthread_mutex_lock(&cs->vol_mu);
  if (mkdir_p(j->dump_dir) != 0)
    FTC_WARN(FTC_SUB_CTRL, "%s: cannot make the dump folder %s: %s; dumps of this job will be refused", key,
             j->dump_dir, strerror(errno));
  char mark[PATH_MAX + 32];
  snprintf(mark, sizeof mark, "%s/%s", j->dump_dir, FTCK_MARK_DELETED);
  unlink(mark);
  uint64_t first = p->first_epoch;
  if (old) {
    ftc__coord_stats_t s;
    ftc__coord_stats(old->co, &s);
    if (s.epoch > first) first = s.epoch;
  }
  int64_t hb_default = 1000;
  ftc__param_int(FTC_P_HEARTBEAT_MS, &hb_default);
  int hb = p->hang_timeout_ms > 0 && p->hang_timeout_ms < 4 * hb_default ? p->hang_timeout_ms / 4 : 0;
  ftc__coord_cfg_t cc = {.bind_host = "127.0.0.1",
                         .port = 0,
                         .job = p->job,
                         .token = p->token,
                         .world_size = p->world_size,
                         .min_size = p->min_size,
                         .heartbeat_ms = hb > 0 && hb < 10 ? 10 : hb,
                         .heartbeat_timeout_ms = p->hang_timeout_ms,
                         .first_epoch = first,
                         .dump_dir = j->dump_dir,
                         .on_event = on_event,
                         .event_arg = j};
  FTC_CHECK_GOTO(ftc__coord_create(&cc, &j->co), st, out_unlock_volume);
  j->port = ftc__coord_port(j->co);
  pthread_mutex_lock(&cs->mu);
  if (old) {
    unlink_job(cs, old);
    /* Incidents still collecting carry over. */
    j->pending = old->pending;
    old->pending = NULL;
  }
  j->next = cs->jobs;
  cs->jobs = j;
  pthread_mutex_unlock(&cs->mu);
  pthread_mutex_unlock(&cs->vol_mu);
  /* The old coordinator's ranks lose their sessions, reconnect through the
   * router and meet the new one, which adopts their epoch. */
  jc_free(old);
  bump(&cs->stats.coordinators);
  if (created) *created = 1;
  FTC_INFO(FTC_SUB_CTRL, "%s: %s coordinator for %d ranks (minimum %d), hang timeout %d ms, epochs above %llu, "
           "dumps in %s",
           key, old ? "remade the" : "started the", p->world_size, p->min_size, p->hang_timeout_ms,
           (unsigned long long)first, j->dump_dir);
  return FTC_OK;
out_unlock_volume:
  pthread_mutex_unlock(&cs->vol_mu);
out_free_job:
  jc_free(j);
  return st;
}

void ftck_coords_remove(ftck_coords_t *cs, const char *key) {
  pthread_mutex_lock(&cs->mu);
  jc_t *j = find(cs, key);
  if (j) unlink_job(cs, j);
  pthread_mutex_unlock(&cs->mu);
  if (!j) return;
  FTC_INFO(FTC_SUB_CTRL, "%s: stopped its coordinator", key);
  jc_free(j);
}

ftc_status_t ftck_coords_slot_lost(ftck_coords_t *cs, const char *key, int slot, const char *pod, const char *reason) {
  char sk[16];
  snprintf(sk, sizeof sk, "%d", slot);
  pthread_mutex_lock(&cs->mu);
  jc_t *j = find(cs, key);
  const char *was = j ? json_string_value(json_object_get(j->lost, sk)) : NULL;
  int fresh = j && pod && (!was || strcmp(was, pod) != 0);
  if (fresh) json_object_set_new(j->lost, sk, json_string(pod));
  ftc__coord_t *co = fresh ? j->co : NULL;
  pthread_mutex_unlock(&cs->mu);
  if (!co) return FTC_OK;
  bump(&cs->stats.slots_declared_lost);
  FTC_INFO(FTC_SUB_CTRL, "%s: slot %d: %s; told the coordinator", key, slot, reason);
  return ftc__coord_slot_lost(co, slot, reason);
}

ftc__coord_view_t *ftck_coords_view(ftck_coords_t *cs, const char *key) {
  pthread_mutex_lock(&cs->mu);
  jc_t *j = find(cs, key);
  ftc__coord_t *co = j ? j->co : NULL;
  pthread_mutex_unlock(&cs->mu);
  ftc__coord_view_t *v = NULL;
  if (!co || ftc__coord_get_view(co, &v) != FTC_OK) return NULL;
  /* Remember which slot had which rank, to name a culprit the analyzer finds. */
  int *map = v->size ? ftc__calloc((size_t)v->size, sizeof *map) : NULL;
  if (map) {
    for (int i = 0; i < v->size; i++) map[i] = -1;
    for (int i = 0; i < v->size; i++)
      if (v->members[i].rank >= 0 && v->members[i].rank < v->size) map[v->members[i].rank] = v->members[i].slot;
    pthread_mutex_lock(&cs->mu);
    ftc__free(j->slot_of_rank);
    j->slot_of_rank = map;
    j->nview = v->size;
    j->view_epoch = v->epoch;
    pthread_mutex_unlock(&cs->mu);
  }
  return v;
}

/* ---- the analyzer ---- */

/* Run argv with stdout into out_path; its exit status, or -1. */
static int run_to_file(char *const argv[], const char *out_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err) {
    errno = err;
    return -1;
  }
  int64_t until = ftc__now_ns() + ANALYZER_TIMEOUT_NS;
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return -1;
    if (ftc__now_ns() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      errno = ETIMEDOUT;
      return -1;
    }
    usleep(5000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int ftck_analyze_dir(const char *analyzer, const char *dir, char *headline, size_t n, int *rank) {
  char txt[PATH_MAX + 32], json[PATH_MAX + 32], html[PATH_MAX + 32], ftxt[PATH_MAX + 32], fjson[PATH_MAX + 32],
      fhtml[PATH_MAX + 32];
  *rank = -1;
  snprintf(txt, sizeof txt, "%s/.analysis.txt.tmp", dir);
  snprintf(json, sizeof json, "%s/.analysis.json.tmp", dir);
  snprintf(html, sizeof html, "%s/.analysis.html.tmp", dir);
  snprintf(ftxt, sizeof ftxt, "%s/analysis.txt", dir);
  snprintf(fjson, sizeof fjson, "%s/analysis.json", dir);
  snprintf(fhtml, sizeof fhtml, "%s/analysis.html", dir);
  char *targv[] = {(char *)analyzer, (char *)dir, NULL};
  char *jargv[] = {(char *)analyzer, "--json", "--html", html, (char *)dir, NULL};
  int rc = run_to_file(targv, txt);
  int jrc = rc == 0 || rc == 1 ? run_to_file(jargv, json) : rc;
  if (rc != 0 && rc != 1) {
    snprintf(headline, n, "the analyzer %s could not read the dumps (%s)", analyzer,
             rc < 0 ? strerror(errno) : "exit status 2: no usable dump");
    unlink(json);
    unlink(html);
    /* Keep its words, if any, for people. */
    rename(txt, ftxt);
    return -1;
  }
  rename(txt, ftxt);
  if (jrc == 0 || jrc == 1) {
    rename(json, fjson);
    rename(html, fhtml);
  } else {
    unlink(json);
    unlink(html);
  }
  headline[0] = '\0';
  FILE *f = fopen(ftxt, "r");
  if (f) {
    if (fgets(headline, (int)n, f)) headline[strcspn(headline, "\n")] = '\0';
    fclose(f);
  }
  json_t *rep = json_load_file(fjson, 0, NULL);
  size_t i;
  json_t *fnd;
  json_array_foreach(json_object_get(rep, "findings"), i, fnd) {
    if (json_is_true(json_object_get(fnd, "primary")) && json_array_size(json_object_get(fnd, "ranks")))
      *rank = (int)json_integer_value(json_array_get(json_object_get(fnd, "ranks"), 0));
  }
  if (*rank < 0 && json_array_size(json_object_get(rep, "missing_ranks")))
    *rank = (int)json_integer_value(json_array_get(json_object_get(rep, "missing_ranks"), 0));
  json_decref(rep);
  return 0;
}

ftc_status_t ftck_coords_take_incidents(ftck_coords_t *cs, const char *key, ftck_incident_t **out, size_t *n,
                                        int64_t *wait_ms) {
  *out = NULL;
  *n = 0;
  *wait_ms = -1;
  int64_t now = ftc__now_ns();
  pending_t *ready = NULL;
  char dir[PATH_MAX] = "", uid[128] = "";
  pthread_mutex_lock(&cs->mu);
  jc_t *j = find(cs, key);
  if (j) {
    snprintf(dir, sizeof dir, "%s", j->dump_dir);
    snprintf(uid, sizeof uid, "%s", j->uid);
    for (pending_t **pp = &j->pending; *pp;) {
      pending_t *p = *pp;
      if (p->inc.dumps >= p->asked || now - p->start_ns >= p->wait_ns) {
        *pp = p->next;
        p->next = ready;
        ready = p;
        continue;
      }
      int64_t left = (p->start_ns + p->wait_ns - now) / 1000000 + 1;
      if (*wait_ms < 0 || left < *wait_ms) *wait_ms = left;
      pp = &p->next;
    }
  }
  pthread_mutex_unlock(&cs->mu);
  size_t count = 0;
  for (pending_t *p = ready; p; p = p->next) count++;
  if (!count) return FTC_OK;
  ftck_incident_t *v = ftc__calloc(count, sizeof *v);
  if (!v) {
    while (ready) {
      pending_t *p = ready;
      ready = p->next;
      pending_free(p);
    }
    return ftc__error(FTC_ERR_NO_MEMORY, "coordinators: no memory");
  }
  while (ready) {
    pending_t *p = ready;
    ready = p->next;
    ftck_incident_t *inc = &v[(*n)++];
    *inc = p->inc;
    /* Whose incident this is, for the sweep when a job of the same name
     * comes later (retention.h). */
    if (uid[0] && ftck_stamp_incident(inc->dump_path, uid) != 0)
      FTC_WARN(FTC_SUB_CTRL, "%s: cannot write %s/%s: %s", key, inc->dump_path, FTCK_MARK_JOB_UID, strerror(errno));
    int rank = -1;
    if (ftck_analyze_dir(cs->analyzer, inc->dump_path, inc->headline, sizeof inc->headline, &rank) != 0)
      FTC_WARN(FTC_SUB_CTRL, "%s: incident %s: %s", key, inc->name, inc->headline);
    if (inc->culprit_rank < 0 && rank >= 0) {
      inc->culprit_rank = rank;
      if (p->slot_of_rank && rank < p->nview) {
        inc->culprit_slot = p->slot_of_rank[rank];
      } else {
        pthread_mutex_lock(&cs->mu);
        j = find(cs, key);
        if (j && j->slot_of_rank && j->view_epoch == p->epoch && rank < j->nview)
          inc->culprit_slot = j->slot_of_rank[rank];
        pthread_mutex_unlock(&cs->mu);
      }
    }
    FTC_WARN(FTC_SUB_CTRL, "%s: incident %s: %d dump%s of %d; %s", key, inc->name, inc->dumps,
             inc->dumps == 1 ? "" : "s", p->asked, inc->headline);
    pending_free(p);
  }
  if (dir[0]) {
    int removed = ftck_prune_incidents(dir, cs->retention);
    __atomic_add_fetch(&cs->stats.dirs_removed_retention, (uint64_t)removed, __ATOMIC_RELAXED);
  }
  *out = v;
  return FTC_OK;
}

void ftck_coords_poll(ftck_coords_t *cs) {
  if (!cs) return;
  char *keys[64];
  size_t n = 0;
  int more = 1;
  while (more) {
    more = 0;
    n = 0;
    pthread_mutex_lock(&cs->mu);
    for (jc_t *j = cs->jobs; j; j = j->next) {
      ftc__coord_stats_t st;
      ftc__coord_stats(j->co, &st);
      if (st.epoch == j->polled_epoch && st.epoch_size == j->polled_size && st.connected == j->polled_connected)
        continue;
      if (n == sizeof keys / sizeof keys[0]) {
        more = 1; /* the rest on the next round, after these are told */
        break;
      }
      if (!(keys[n] = ftc__strdup(j->key))) break; /* no memory: the next poll tries again */
      n++;
      j->polled_epoch = st.epoch;
      j->polled_size = st.epoch_size;
      j->polled_connected = st.connected;
    }
    pthread_mutex_unlock(&cs->mu);
    for (size_t i = 0; i < n; i++) {
      if (cs->notify) cs->notify(cs->ud, keys[i]);
      ftc__free(keys[i]);
    }
  }
}

void ftck_coords_get_stats(ftck_coords_t *cs, ftck_coords_stats_t *out) {
  out->coordinators = __atomic_load_n(&cs->stats.coordinators, __ATOMIC_RELAXED);
  out->epochs = __atomic_load_n(&cs->stats.epochs, __ATOMIC_RELAXED);
  out->hangs = __atomic_load_n(&cs->stats.hangs, __ATOMIC_RELAXED);
  out->dumps = __atomic_load_n(&cs->stats.dumps, __ATOMIC_RELAXED);
  out->slots_declared_lost = __atomic_load_n(&cs->stats.slots_declared_lost, __ATOMIC_RELAXED);
  out->dirs_removed_deleted = __atomic_load_n(&cs->stats.dirs_removed_deleted, __ATOMIC_RELAXED);
  out->dirs_removed_stale = __atomic_load_n(&cs->stats.dirs_removed_stale, __ATOMIC_RELAXED);
  out->dirs_removed_retention = __atomic_load_n(&cs->stats.dirs_removed_retention, __ATOMIC_RELAXED);
  out->dirs_waiting = __atomic_load_n(&cs->stats.dirs_waiting, __ATOMIC_RELAXED);
  out->sweeps = __atomic_load_n(&cs->stats.sweeps, __ATOMIC_RELAXED);
  out->listening = __atomic_load_n(&cs->listening, __ATOMIC_ACQUIRE);
  ftck_router_stats_t rs = {0};
  if (out->listening) ftck_router_get_stats(cs->router, &rs);
  out->router_accepted = rs.accepted;
  out->router_routed = rs.routed;
  out->router_unrouted = rs.unrouted;
  out->router_open = rs.open;
}

/* ---- the folders of deleted jobs ---- */

typedef struct sweep_ctx {
  ftck_coords_t *cs;
  ftck_job_lookup_fn lookup;
  int (*yield)(void *ud);
  void *ud;
} sweep_ctx_t;

/* Between two slices of removal: stop if the sweeper is being stopped. */
static int sweep_yield(void *ud) {
  sweep_ctx_t *x = ud;
  if (__atomic_load_n(&x->cs->sweeper_stop, __ATOMIC_ACQUIRE)) return 1;
  return x->yield ? x->yield(x->ud) : 0;
}

static void sweep_hold(void *ud, int on) {
  sweep_ctx_t *x = ud;
  if (on) pthread_mutex_lock(&x->cs->vol_mu);
  else pthread_mutex_unlock(&x->cs->vol_mu);
}

/* The caller's answer (its cache); a job missing there that still has a
 * coordinator (its deletion not reconciled yet) is left for later. */
static int sweep_lookup(void *ud, const char *ns, const char *name, ftck_job_ref_t *ref) {
  sweep_ctx_t *x = ud;
  int live = x->lookup(x->ud, ns, name, ref);
  if (live != 0) return live;
  char key[512];
  snprintf(key, sizeof key, "%s/%s", ns, name);
  return ftck_coords_has(x->cs, key) ? -1 : 0;
}

ftc_status_t ftck_coords_sweep(ftck_coords_t *cs, const ftck_coords_sweep_opts_t *o) {
  sweep_ctx_t x = {.cs = cs, .lookup = o->lookup, .yield = o->yield, .ud = o->ud};
  uint64_t n = __atomic_add_fetch(&cs->stats.sweeps, 1, __ATOMIC_RELAXED);
  ftck_retention_opts_t ro = {.volume = cs->dump_volume,
                              .ns = o->ns,
                              .ttl_s = o->ttl_s,
                              .now_s = o->now_s,
                              .lookup = sweep_lookup,
                              .hold = sweep_hold,
                              .ud = &x,
                              .quiet = n > 1,
                              .slice_entries = o->slice_entries,
                              .yield = sweep_yield};
  ftck_retention_result_t r;
  ftc_status_t st = ftck_retention_sweep(&ro, &r);
  __atomic_add_fetch(&cs->stats.dirs_removed_deleted, r.deleted, __ATOMIC_RELAXED);
  __atomic_add_fetch(&cs->stats.dirs_removed_stale, r.stale, __ATOMIC_RELAXED);
  __atomic_store_n(&cs->stats.dirs_waiting, r.waiting, __ATOMIC_RELAXED);
  FTC_DEBUG(FTC_SUB_CTRL, "dump volume swept: %llu folders of deleted jobs removed, %llu waiting, %llu incidents of "
            "earlier jobs removed, %llu entries left alone, %llu errors", (unsigned long long)r.deleted,
            (unsigned long long)r.waiting, (unsigned long long)r.stale, (unsigned long long)r.skipped,
            (unsigned long long)r.errors);
  if (r.stopped)
    FTC_INFO(FTC_SUB_CTRL, "dump volume sweep stopped between two slices; the next one finishes the removal");
  return st;
}

static void *sweeper_main(void *arg) {
  ftck_coords_t *cs = arg;
  pthread_mutex_lock(&cs->sweep_mu);
  while (!cs->sweeper_stop) {
    pthread_mutex_unlock(&cs->sweep_mu);
    ftck_coords_sweep_opts_t o = cs->sweep_o;
    o.now_s = ftc__wall_ns() / 1000000000LL;
    if (ftck_coords_sweep(cs, &o) != FTC_OK)
      FTC_WARN(FTC_SUB_CTRL, "%s; trying again at the next sweep", ftc_last_error());
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t at = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + cs->sweep_period_ns;
    ts.tv_sec = (time_t)(at / 1000000000LL);
    ts.tv_nsec = (long)(at % 1000000000LL);
    pthread_mutex_lock(&cs->sweep_mu);
    while (!cs->sweeper_stop && pthread_cond_timedwait(&cs->sweep_cv, &cs->sweep_mu, &ts) != ETIMEDOUT) {
    }
  }
  pthread_mutex_unlock(&cs->sweep_mu);
  return NULL;
}

ftc_status_t ftck_coords_start_sweeper(ftck_coords_t *cs, const ftck_coords_sweep_opts_t *o, int64_t period_ns) {
  if (cs->sweeper_started) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "the dump volume sweeper runs already");
  cs->sweep_o = *o;
  snprintf(cs->sweep_ns, sizeof cs->sweep_ns, "%s", o->ns ? o->ns : "");
  cs->sweep_o.ns = cs->sweep_ns;
  cs->sweep_period_ns = period_ns > 0 ? period_ns : 1000000000LL;
  cs->sweeper_stop = 0;
  int rc = pthread_create(&cs->sweeper, NULL, sweeper_main, cs);
  if (rc != 0) return ftc__error(FTC_ERR_SYSTEM, "starting the dump volume sweeper thread: %s", strerror(rc));
  pthread_setname_np(cs->sweeper, "ftck-sweeper");
  cs->sweeper_started = 1;
  return FTC_OK;
}

void ftck_coords_stop_sweeper(ftck_coords_t *cs) {
  if (!cs->sweeper_started) return;
  pthread_mutex_lock(&cs->sweep_mu);
  __atomic_store_n(&cs->sweeper_stop, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&cs->sweep_cv);
  pthread_mutex_unlock(&cs->sweep_mu);
  pthread_join(cs->sweeper, NULL);
  cs->sweeper_started = 0;
}
