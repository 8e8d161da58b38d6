/*
 * pass.c - one reconcile pass over one TrainingJob (ftck_reconcile): group
 * its pods by slot and incarnation, settle a lagging cache, replace a lost
 * member or restart them all (within the budget and the backoff), keep its
 * embedded coordinator, act on hangs, and write the status status.c
 * computes; a job that is gone is forgotten.
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

void ftck__report_event(ftck_reconciler_t *r, const json_t *job, const char *type, const char *reason,
                        const char *action, const char *note) {
  json_t *regarding = json_pack("{s:s, s:s, s:O}", "apiVersion", FTCK_API_VERSION, "kind", FTCK_KIND, "metadata",
                                json_object_get(job, "metadata"));
  if (!regarding) return;
  if (ftck_event(r->c, regarding, type, reason, action, note, FTCK_MANAGER, r->identity) != FTC_OK)
    FTC_WARN(FTC_SUB_CTRL, "event %s: %s", reason, ftc_last_error());
  json_decref(regarding);
}

/* Group a job's pods by slot (the newest incarnation is the slot's pod) and
 * put them all in `mine`. Pods of an older job with the same name (another
 * uid) are deleted, since their names would collide with ours; so are pods
 * of slots beyond replicas, and every pod while the job is suspended. */
static ftc_status_t group_pods(ftck_reconciler_t *r, const json_t *job, const ftck_job_spec_t *spec, json_t *pods,
                               slot_view_t *slots, json_t *mine) {
  const char *ns = ftck_jstr(job, "metadata.namespace"), *name = ftck_jstr(job, "metadata.name");
  const char *uid = ftck_jstr(job, "metadata.uid");
  for (int s = 0; s < spec->replicas; s++) {
    slots[s].cur = NULL;
    slots[s].inc = -1;
    slots[s].state_override = 0;
  }
  json_array_clear(mine);
  size_t i;
  json_t *pod;
  json_array_foreach(pods, i, pod) {
    const char *pj = json_string_value(json_object_get(ftck_jget(pod, "metadata.labels"), FTCK_LABEL_JOB));
    const char *pns = ftck_jstr(pod, "metadata.namespace");
    const char *pname = ftck_jstr(pod, "metadata.name");
    if (!pj || !pns || !pname || strcmp(pj, name) || strcmp(pns, ns)) continue;
    int going = ftck_jstr(pod, "metadata.deletionTimestamp") != NULL;
    const char *owner_uid = ftck_jstr(json_array_get(ftck_jget(pod, "metadata.ownerReferences"), 0), "uid");
    int s = ftck_pod_slot(pod), inc = ftck_pod_incarnation(pod);
    if ((owner_uid && uid && strcmp(owner_uid, uid) != 0) || s < 0 || s >= spec->replicas || spec->suspend) {
      if (!going) {
        ftc_status_t st = ftck__delete_pod(r, ns, pname, ftck_jstr(pod, "metadata.uid"));
        if (st != FTC_OK) return st;
      }
      continue;
    }
    if (json_array_append(mine, pod) != 0) return ftc__error(FTC_ERR_NO_MEMORY, "reconciler: no memory");
    if (inc > slots[s].inc) {
      slots[s].inc = inc;
      slots[s].cur = pod;
    }
  }
  return FTC_OK;
}

/* 1 when a slot has no pod in the cache although status names one (and the
 * job is not resuming): the cache may lag behind the server. */
static int cache_disagrees(const json_t *job, const ftck_job_spec_t *spec, const slot_view_t *slots) {
  const char *name = ftck_jstr(job, "metadata.name");
  json_t *members = ftck_jget(job, "status.members");
  for (int s = 0; s < spec->replicas && !spec->suspend; s++) {
    json_t *m = json_array_get(members, (size_t)s);
    const char *state = ftck_jstr(m, "state");
    if (!slots[s].cur && ftck_incarnation_from_name(name, s, ftck_jstr(m, "pod")) >= 0 &&
        !(state && !strcmp(state, "Suspended")))
      return 1;
  }
  return 0;
}

/* How soon to try again a pod the API server refused: half the time the
 * job has been unable to create pods (from its PodsCreated condition), 2 s
 * at first, at most 30 s, so a cause fixed later (a quota raised, a
 * namespace's Pod Security level lowered) is noticed without a flood of
 * requests meanwhile. */
#define REFUSAL_RETRY_MIN_MS 2000
#define REFUSAL_RETRY_MAX_MS 30000

/* A create that failed with a 4xx answer (admission, quota, an invalid pod,
 * RBAC; not 409, not 429) is the job's problem to report, not a transient
 * error of this pass: remember it for status and an Event, look again
 * later, and return 1 so the caller goes on with the other slots. 0: some
 * other failure, which fails the pass. */
static int create_refused(pass_t *p, int s, int inc, long code) {
  if (code < 400 || code >= 500 || code == 409 || code == 429) return 0;
  /* ftc_last_error(): "POST <path> -> <code> <Reason>: <message>" */
  const char *e = ftc_last_error();
  const char *arrow = e ? strstr(e, " -> ") : NULL;
  const char *msg = arrow ? strstr(arrow, ": ") : NULL;
  msg = msg ? msg + 2 : e ? e : "refused";
  char pname[300];
  if (ftck_pod_name(p->name, s, inc, pname, sizeof pname) != 0) snprintf(pname, sizeof pname, "?");
  FTC_WARN(FTC_SUB_CTRL, "%s: slot %d: the API server refused pod %s (%ld): %s", p->key, s, pname, code, msg);
  if (p->refused++ == 0) snprintf(p->refusal, sizeof p->refusal, "slot %d: pod %s: %s", s, pname, msg);
  json_t *c = NULL;
  size_t i;
  json_array_foreach(ftck_jget(p->job, "status.conditions"), i, c) {
    if (!strcmp(ftck_jstr(c, "type") ? ftck_jstr(c, "type") : "", "PodsCreated")) break;
  }
  int64_t since = c && !strcmp(ftck_jstr(c, "status") ? ftck_jstr(c, "status") : "", "False")
                      ? ftck_parse_time(ftck_jstr(c, "lastTransitionTime"))
                      : -1;
  int64_t wait_ms = since > 0 ? (p->now - since) / 2000000 : 0;
  if (wait_ms < REFUSAL_RETRY_MIN_MS) wait_ms = REFUSAL_RETRY_MIN_MS;
  if (wait_ms > REFUSAL_RETRY_MAX_MS) wait_ms = REFUSAL_RETRY_MAX_MS;
  if (p->requeue < 0 || wait_ms < p->requeue) p->requeue = wait_ms;
  return 1;
}

/* This job's pods by slot, from the cache; from the server itself when the
 * cache and status disagree, so a lagging cache never makes a pod look lost.
 * *pods receives the array the slots point into. */
static ftc_status_t load_pods(pass_t *p, json_t **pods, json_t *mine) {
  *pods = ftck_informer_select(p->r->pods, p->ns, FTCK_LABEL_JOB, p->name);
  if (!*pods) return ftc__error(FTC_ERR_NO_MEMORY, "reconciler: no memory");
  ftc_status_t st = group_pods(p->r, p->job, &p->spec, *pods, p->slots, mine);
  if (st != FTC_OK || !cache_disagrees(p->job, &p->spec, p->slots)) return st;
  char sel[512], *rv = NULL, *coll = ftck_path("", "v1", p->ns, "pods", NULL);
  json_t *fresh = NULL;
  long code = 0;
  snprintf(sel, sizeof sel, "%s=%s", FTCK_LABEL_JOB, p->name);
  st = coll ? ftck_list(p->r->c, coll, sel, NULL, 0, &fresh, &rv, &code) : ftc__error(FTC_ERR_NO_MEMORY, "no memory");
  ftc__free(coll);
  ftc__free(rv);
  if (st != FTC_OK) return st;
  FTC_DEBUG(FTC_SUB_CTRL, "%s: cache and status disagree; listed %zu pods from the server", p->key,
            json_array_size(fresh));
  json_decref(*pods);
  *pods = fresh;
  return group_pods(p->r, p->job, &p->spec, *pods, p->slots, mine);
}

/* Has slot s lost its pod? A slot without any pod starts one (a new slot, or
 * the job resumes) and is not lost: a new slot of a job whose ranks run
 * (spec.replicas raised) starts as a joiner, admitted at their next epoch;
 * otherwise the slot starts fresh with the others. Otherwise *lost is the lost
 * pod (or a placeholder with the remembered name and node), NULL when all is
 * well. */
static ftc_status_t find_loss(pass_t *p, int s, json_t **lost, int *lost_inc, int *node_down) {
  slot_view_t *sv = &p->slots[s];
  json_t *member = json_array_get(p->members, (size_t)s);
  *lost = NULL;
  *node_down = 0;
  if (!sv->cur) {
    const char *prev = ftck_jstr(member, "pod");
    const char *prev_state = ftck_jstr(member, "state");
    int prev_inc = ftck_incarnation_from_name(p->name, s, prev);
    if (prev_inc < 0 || (prev_state && !strcmp(prev_state, "Suspended"))) {
      json_t *np = NULL;
      int joiner = prev_inc < 0 && ftck_jint(p->job, "status.worldSize", 0) > 0;
      long code = 0;
      ftc_status_t st = ftck__create_pod(p->r, p->job, &p->spec, s, prev_inc + 1, joiner, "", &np, NULL, &code,
                                         &p->secret_sure);
      if (st != FTC_OK && create_refused(p, s, prev_inc + 1, code)) {
        sv->state_override = 3;
        return FTC_OK;
      }
      if (st != FTC_OK) return st;
      json_array_append_new(p->created, np);
      sv->cur = np;
      sv->inc = prev_inc + 1;
      return FTC_OK;
    }
    /* Gone from the server too (it was listed): deleted behind our back.
     * Its loss dates from when a pass first saw it gone, so its backoff
     * runs out like any other (remembered until it is replaced). */
    char vkey[600], tbuf[64];
    snprintf(vkey, sizeof vkey, "%s/%s", p->key, prev);
    pthread_mutex_lock(&p->r->mu);
    int64_t since = (int64_t)json_integer_value(json_object_get(p->r->vanished, vkey));
    if (!since) json_object_set_new(p->r->vanished, vkey, json_integer(since = p->now));
    pthread_mutex_unlock(&p->r->mu);
    ftck_format_time(since, tbuf, sizeof tbuf);
    json_t *ph = json_pack("{s:{s:s, s:s, s:i}, s:{s:s?}}", "metadata", "name", prev, "deletionTimestamp", tbuf,
                           "deletionGracePeriodSeconds", 0, "spec", "nodeName", ftck_jstr(member, "node"));
    if (!ph || json_array_append_new(p->created, ph) != 0) return ftc__error(FTC_ERR_NO_MEMORY, "reconciler: no memory");
    sv->inc = prev_inc;
    /* The slot's pod until replaced: status keeps its name (and so the
     * incarnation) while the replacement waits for its backoff. */
    sv->cur = ph;
    *lost = ph;
  } else if (ftck_pod_is_lost(sv->cur)) {
    *lost = sv->cur;
  } else if (ftck_jstr(sv->cur, "spec.nodeName")) {
    /* Running on a node that is no longer Ready: lost too. */
    char nkey[300];
    snprintf(nkey, sizeof nkey, "%s", ftck_jstr(sv->cur, "spec.nodeName"));
    json_t *node = p->r->nodes ? ftck_informer_get(p->r->nodes, nkey) : NULL;
    *node_down = node && ftck_node_ready(node) == 0;
    json_decref(node);
    if (*node_down) *lost = sv->cur;
  }
  *lost_inc = sv->inc;
  return FTC_OK;
}

/* Milliseconds still to wait before acting on a loss that began at the
 * pod's failure time: backoffSeconds * 2^earlier, capped at 10 minutes. */
static int64_t backoff_left_ms(const pass_t *p, const json_t *lost, int earlier) {
  int shift = earlier < 6 ? earlier : 6;
  int64_t delay_ms = (int64_t)p->spec.backoff_s * 1000 * (1LL << shift);
  if (delay_ms > 600000) delay_ms = 600000;
  return (ftck_pod_failed_at(lost, p->now) - p->now) / 1000000 + delay_ms;
}

static void wait_then_retry(pass_t *p, int64_t wait_ms) {
  p->replacing = 1;
  if (p->requeue < 0 || wait_ms < p->requeue) p->requeue = wait_ms;
}

/* Count a replacement made in this pass and tell people: log, incident, Event. */
static void record_replacement(pass_t *p, const char *kind, const char *culprit, const char *reason,
                               const char *action, const char *msg) {
  char tbuf[64];
  p->used++;
  p->used_now++;
  __atomic_add_fetch(&p->r->stats.replacements, 1, __ATOMIC_RELAXED);
  ftck_format_time(p->now, tbuf, sizeof tbuf);
  json_array_append_new(p->incidents, json_pack("{s:s, s:s, s:s?, s:s}", "time", tbuf, "kind", kind, "culprit",
                                                 culprit, "message", msg));
  FTC_WARN(FTC_SUB_CTRL, "%s: %s", p->key, msg);
  ftck__report_event(p->r, p->job, "Warning", reason, action, msg);
}

/* replace mode: a new pod for slot s, after backoff and within budget,
 * away from the nodes where the slot failed. */
static ftc_status_t replace_member(pass_t *p, int s, json_t *lost, int lost_inc, int node_down) {
  slot_view_t *sv = &p->slots[s];
  const char *lost_name = ftck_jstr(lost, "metadata.name");
  const char *lost_node = ftck_jstr(lost, "spec.nodeName");
  if (p->used >= p->spec.max_replacements) {
    p->exhausted = 1;
    sv->state_override = 2;
    return FTC_OK;
  }
  int64_t wait_ms = backoff_left_ms(p, lost, lost_inc);
  if (wait_ms > 0) {
    sv->state_override = 1;
    wait_then_retry(p, wait_ms);
    return FTC_OK;
  }
  char avoid[2048] = "";
  const char *prev_avoid = json_string_value(json_object_get(ftck_jget(lost, "metadata.annotations"), FTCK_ANNOT_AVOID));
  if (p->spec.avoid_failed_nodes) {
    if (prev_avoid && *prev_avoid) snprintf(avoid, sizeof avoid, "%s", prev_avoid);
    if (lost_node && *lost_node && !strstr(avoid, lost_node)) {
      size_t al = strlen(avoid);
      snprintf(avoid + al, sizeof avoid - al, "%s%s", al ? "," : "", lost_node);
    }
  }
  json_t *np = NULL;
  int is_new = 0;
  long code = 0;
  ftc_status_t st = ftck__create_pod(p->r, p->job, &p->spec, s, lost_inc + 1, 1, avoid, &np, &is_new, &code, &p->secret_sure);
  if (st != FTC_OK && create_refused(p, s, lost_inc + 1, code)) {
    sv->state_override = 3;
    return FTC_OK;
  }
  if (st != FTC_OK) return st;
  json_array_append_new(p->created, np);
  sv->cur = np;
  sv->inc = lost_inc + 1;
  p->replacing = 1;
  if (lost_name) {
    char vkey[600];
    snprintf(vkey, sizeof vkey, "%s/%s", p->key, lost_name);
    pthread_mutex_lock(&p->r->mu);
    json_object_del(p->r->vanished, vkey);
    pthread_mutex_unlock(&p->r->mu);
  }
  if (!is_new) return FTC_OK; /* made by an earlier pass whose result the caches did not show yet */
  const char *reason = ftck_jstr(lost, "status.reason");
  char msg[1024];
  snprintf(msg, sizeof msg, "slot %d: pod %s %s%s%s%s%s; replaced by %s (replacement %d of %d)", s, lost_name,
           node_down ? "was lost with its node" : ftck_jstr(lost, "metadata.deletionTimestamp") ? "was deleted"
           : ftck_jstr(lost, "metadata.uid") ? "failed" : "disappeared",
           lost_node ? " on node " : "", lost_node ? lost_node : "", reason ? ": " : "", reason ? reason : "",
           ftck_jstr(np, "metadata.name"), p->used + 1, p->spec.max_replacements);
  record_replacement(p, node_down ? "NodeLost" : "PodFailed", lost_name, "MemberReplaced", "Replace", msg);
  return FTC_OK;
}

/* restartAll mode: every slot starts again at the next incarnation. */
static ftc_status_t restart_all(pass_t *p, const json_t *cause, int skip_backoff) {
  if (p->used >= p->spec.max_replacements) {
    p->exhausted = 1;
    for (int s = 0; s < p->spec.replicas; s++)
      if (p->slots[s].state_override == 1) p->slots[s].state_override = 2;
    return FTC_OK;
  }
  int64_t wait_ms = skip_backoff ? 0 : backoff_left_ms(p, cause, p->used);
  if (wait_ms > 0) {
    wait_then_retry(p, wait_ms);
    return FTC_OK;
  }
  int target = p->max_inc + 1, any_new = 0;
  for (int s = 0; s < p->spec.replicas; s++) {
    json_t *np = NULL;
    int is_new = 0;
    long code = 0;
    ftc_status_t st = ftck__create_pod(p->r, p->job, &p->spec, s, target, 0, "", &np, &is_new, &code, &p->secret_sure);
    if (st != FTC_OK && create_refused(p, s, target, code)) {
      p->slots[s].state_override = 3;
      continue;
    }
    if (st != FTC_OK) return st;
    json_array_append_new(p->created, np);
    p->slots[s].cur = np;
    p->slots[s].inc = target;
    p->slots[s].state_override = 0;
    any_new |= is_new;
  }
  p->replacing = 1;
  if (!any_new) return FTC_OK; /* an earlier pass made this restart; the caches did not show it yet */
  /* Every rank starts afresh: so does the coordinator (its epochs still
   * count on from status.epoch), made again by the next pass. */
  if (p->r->coords) {
    ftck_coords_remove(p->r->coords, p->key);
    pthread_mutex_lock(&p->r->mu);
    json_object_set_new(p->r->fresh, p->key, json_pack("{s:i, s:I}", "inc", target, "since", (json_int_t)p->now));
    pthread_mutex_unlock(&p->r->mu);
    if (p->requeue < 0 || p->requeue > 500) p->requeue = 500;
  }
  const char *cname = ftck_jstr(cause, "metadata.name");
  const char *reason = ftck_jstr(cause, "status.reason");
  char msg[1024];
  snprintf(msg, sizeof msg, "pod %s lost%s%s; failurePolicy.mode restartAll: every pod restarted at incarnation %d "
           "(restart %d of %d)", cname ? cname : "?", reason ? ": " : "", reason ? reason : "", target, p->used + 1,
           p->spec.max_replacements);
  record_replacement(p, "PodFailed", cname, "JobRestarted", "RestartAll", msg);
  return FTC_OK;
}

/* ---- the job's coordinator ---- */

/* A running job has its coordinator, with the token its pods have and
 * epochs numbered above the status's (a restarted controller's coordinator
 * adopts the running epoch from the ranks when they reconnect). */
/* After a restart of every pod, the processes of the older incarnations
 * must not meet the new coordinator (it would adopt their epoch, and the
 * fresh ranks would join a running job): it waits until their pods are gone
 * (at most FRESH_WAIT_NS, e.g. for pods stuck on a lost node). The fresh
 * ranks retry meanwhile (FTCOMM_CONNECT_TIMEOUT_MS). */
#define FRESH_WAIT_NS (120LL * 1000000000LL)
/* The incarnation the job's last restart of every pod started (while its
 * older pods remain), and since when; -1 when none is in progress. */
static int restarted_at(pass_t *p, int64_t *since) {
  pthread_mutex_lock(&p->r->mu);
  json_t *f = json_object_get(p->r->fresh, p->key);
  int inc = f ? (int)json_integer_value(json_object_get(f, "inc")) : -1;
  if (since) *since = f ? (int64_t)json_integer_value(json_object_get(f, "since")) : 0;
  pthread_mutex_unlock(&p->r->mu);
  return inc;
}

static int older_pods_remain(pass_t *p, const json_t *mine) {
  int64_t since;
  int inc = restarted_at(p, &since);
  if (inc < 0) return 0;
  size_t i;
  json_t *pod;
  json_array_foreach(mine, i, pod) {
    if (ftck_pod_incarnation(pod) < inc && p->now - since < FRESH_WAIT_NS) return 1;
  }
  pthread_mutex_lock(&p->r->mu);
  json_object_del(p->r->fresh, p->key);
  pthread_mutex_unlock(&p->r->mu);
  return 0;
}

static ftc_status_t ensure_coordinator(pass_t *p, const char *token, const json_t *mine) {
  if (!p->r->coords) return FTC_OK;
  const char *was = ftck_jstr(p->job, "status.phase");
  if (p->spec.suspend || (was && (!strcmp(was, "Succeeded") || !strcmp(was, "Failed")))) {
    ftck_coords_remove(p->r->coords, p->key);
    return FTC_OK;
  }
  if (!ftck_coords_has(p->r->coords, p->key) && older_pods_remain(p, mine)) {
    FTC_DEBUG(FTC_SUB_CTRL, "%s: restarted: the coordinator waits until the older pods are gone", p->key);
    if (p->requeue < 0 || p->requeue > 500) p->requeue = 500;
    return FTC_OK;
  }
  int64_t hang_ms = (int64_t)p->spec.hang_timeout_s * 1000;
  ftck_coord_params_t cp = {.job = p->name,
                            .token = token,
                            .uid = ftck_jstr(p->job, "metadata.uid"),
                            .world_size = p->spec.replicas,
                            .min_size = p->spec.min_replicas,
                            .hang_timeout_ms = hang_ms > 3600000 ? 3600000 : hang_ms < 50 ? 50 : (int)hang_ms,
                            .first_epoch = (uint64_t)ftck_jint(p->job, "status.epoch", 0)};
  return ftck_coords_ensure(p->r->coords, p->key, &cp, NULL);
}

/* Tell the coordinator at once that slot s lost its process, so the
 * survivors shrink now instead of after the heartbeat timeout. */
static void declare_lost(pass_t *p, int s, const json_t *lost, int node_down) {
  if (!p->r->coords) return;
  const char *name = ftck_jstr(lost, "metadata.name");
  char why[512];
  snprintf(why, sizeof why, "pod %s %s", name ? name : "?",
           node_down                                          ? "was lost with its node"
           : ftck_jstr(lost, "metadata.deletionTimestamp")    ? "is being deleted"
           : ftck_jstr(lost, "metadata.uid")                  ? "failed"
                                                              : "disappeared");
  if (ftck_coords_slot_lost(p->r->coords, p->key, s, name, why) != FTC_OK)
    FTC_WARN(FTC_SUB_CTRL, "%s: cannot declare slot %d lost: %s", p->key, s, ftc_last_error());
}

/* Hangs whose dumps are in: an incident in status and an Event each, then
 * spec.failurePolicy.onHang: replace the culprit's pod (deleted now,
 * replaced by the next pass like any lost pod), dumpOnly, or restartAll. */
static ftc_status_t handle_hangs(pass_t *p) {
  if (!p->r->coords) return FTC_OK;
  ftck_incident_t *v = NULL;
  size_t n = 0;
  int64_t wait_ms = -1;
  ftc_status_t st = ftck_coords_take_incidents(p->r->coords, p->key, &v, &n, &wait_ms);
  if (st != FTC_OK) return st;
  if (wait_ms >= 0 && (p->requeue < 0 || wait_ms < p->requeue)) p->requeue = wait_ms;
  const json_t *restart_cause = NULL;
  for (size_t i = 0; i < n && st == FTC_OK; i++) {
    ftck_incident_t *inc = &v[i];
    int s = inc->culprit_slot;
    json_t *pod = s >= 0 && s < p->spec.replicas ? p->slots[s].cur : NULL;
    const char *pname = ftck_jstr(pod, "metadata.name");
    char culprit[300] = "", tbuf[64], note[8192];
    if (pname) snprintf(culprit, sizeof culprit, "%s", pname);
    else if (inc->culprit_rank >= 0) snprintf(culprit, sizeof culprit, "rank %d", inc->culprit_rank);
    const char *act = p->spec.on_hang == FTCK_ON_HANG_DUMP_ONLY ? "dumpOnly: nothing else done"
                      : p->spec.on_hang == FTCK_ON_HANG_RESTART_ALL ? "restartAll: every pod restarts"
                      : pname ? "replace: its pod is replaced" : "replace: no pod to replace";
    ftck_format_time(inc->time_ns, tbuf, sizeof tbuf);
    json_array_append_new(p->incidents, json_pack("{s:s, s:s, s:s?, s:s, s:s}", "time", tbuf, "kind", inc->kind,
                                                   "culprit", culprit[0] ? culprit : NULL, "dumpPath",
                                                   inc->dump_path, "message", inc->headline));
    snprintf(note, sizeof note, "%s%s%s (rank %d): %s; %d dump%s in %s; onHang %s", inc->reason,
             culprit[0] ? "; culprit " : "", culprit, inc->culprit_rank, inc->headline, inc->dumps,
             inc->dumps == 1 ? "" : "s", inc->dump_path, act);
    FTC_WARN(FTC_SUB_CTRL, "%s: %s", p->key, note);
    note[1000] = '\0'; /* an Event's note holds 1 kB */
    ftck__report_event(p->r, p->job, "Warning", !strcmp(inc->kind, "Hang") ? "HangDetected" : "CollectiveTimeout", "Dump",
                       note);
    if (p->spec.on_hang == FTCK_ON_HANG_RESTART_ALL) {
      if (!restart_cause) restart_cause = pod ? pod : p->slots[0].cur;
    } else if (p->spec.on_hang == FTCK_ON_HANG_REPLACE && pod && !ftck_pod_is_lost(pod)) {
      declare_lost(p, s, pod, 0);
      st = ftck__delete_pod(p->r, p->ns, pname, ftck_jstr(pod, "metadata.uid"));
    }
  }
  if (st == FTC_OK && restart_cause) st = restart_all(p, restart_cause, 1);
  ftc__free(v);
  return st;
}

/* A job that is gone (or going): forget what was remembered about its pods
 * and token Secret, so a deleted job leaves nothing behind in memory (a pod
 * found missing is remembered until replaced, which a deleted job never is;
 * its Secret's deletion by the garbage collector queues this job again). */
static void forget_job(ftck_reconciler_t *r, const char *key, const char *ns, const char *name) {
  size_t n = strlen(key);
  const char *k;
  json_t *v;
  void *tmp;
  (void)ns;
  (void)name;
  pthread_mutex_lock(&r->mu);
  json_object_del(r->fresh, key); /* a restart in progress: a job re-created under the name starts clean */
  json_object_del(r->refusals, key);
  json_object_foreach_safe(r->vanished, tmp, k, v) {
    if (!strncmp(k, key, n) && k[n] == '/') json_object_del(r->vanished, k);
  }
  json_object_foreach_safe(r->secrets_ok, tmp, k, v) {
    const char *jk = ftck_jstr(v, "job");
    if (jk && !strcmp(jk, key)) json_object_del(r->secrets_ok, k);
  }
  pthread_mutex_unlock(&r->mu);
}

size_t ftck__remembered(ftck_reconciler_t *r) {
  pthread_mutex_lock(&r->mu);
  size_t n = json_object_size(r->vanished) + json_object_size(r->secrets_ok) +
             json_object_size(r->fresh) + json_object_size(r->refusals);
  pthread_mutex_unlock(&r->mu);
  return n;
}

ftc_status_t ftck_reconcile(ftck_reconciler_t *r, const char *key, int64_t *requeue_ms) {
  ftc_status_t st = FTC_OK;
  char ns[256], name[256], err[256];
  if (requeue_ms) *requeue_ms = -1;
  if (ftck_split_key(key, ns, sizeof ns, name, sizeof name) != 0)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "bad key %s", key);
  pass_t p = {.r = r, .key = key, .ns = ns, .name = name, .requeue = -1, .now = ftc__wall_ns()};
  p.job = ftck_informer_get(r->jobs, key);
  if (!p.job) {
    FTC_DEBUG(FTC_SUB_CTRL, "%s: gone; its pods go with it (owner references)", key);
    if (r->coords) ftck_coords_remove(r->coords, key);
    forget_job(r, key, ns, name);
    return FTC_OK;
  }
  if (ftck_jstr(p.job, "metadata.deletionTimestamp")) {
    if (r->coords) ftck_coords_remove(r->coords, key);
    forget_job(r, key, ns, name);
    goto out_free_job;
  }
  json_t *pods = NULL, *mine = NULL, *conds = NULL;
  json_t *computed = json_object();
  char *job_path = ftck_path(FTCK_GROUP, FTCK_VERSION, ns, FTCK_PLURAL, name);
  p.created = json_array();
  p.incidents = json_array();
  if (computed) json_object_set_new(computed, "conditions", conds = json_array());
  if (!computed || !conds || !job_path || !p.created || !p.incidents) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "reconciler: no memory");
    goto out_free_pass;
  }
  if (ftck_job_spec_parse(p.job, &p.spec, err, sizeof err) != 0) {
    json_object_set_new(computed, "phase", json_string("Failed"));
    ftck__add_condition(conds, "Failed", 1, "InvalidSpec", err);
    ftck__add_condition(conds, "Ready", 0, "InvalidSpec", err);
    goto out_write_status;
  }
  char token[FTCK_TOKEN_HEX];
  ftck_job_token(r->token_key, ftck_jstr(p.job, "metadata.uid") ? ftck_jstr(p.job, "metadata.uid") : "", token);
  p.slots = ftc__calloc((size_t)p.spec.replicas, sizeof *p.slots);
  mine = json_array();
  if (!p.slots || !mine) {
    st = ftc__error(FTC_ERR_NO_MEMORY, "reconciler: no memory");
    goto out_free_pass;
  }
  FTC_CHECK_GOTO(load_pods(&p, &pods, mine), st, out_free_pass);
  if (ftck__waits_for_secret(pods, name)) FTC_CHECK_GOTO(ftck__ensure_secret(r, p.job, 1, &p.secret_sure), st, out_free_pass);
  FTC_CHECK_GOTO(ensure_coordinator(&p, token, mine), st, out_free_pass);

  /* Replacements used so far come from status; those made now are added to
   * the stored count when status is written (a delta, so a stale cache
   * cannot undo them). The newest incarnation of each slot comes from its
   * pods or, when they are gone, from the pod name status remembers. */
  p.members = ftck_jget(p.job, "status.members");
  p.used = (int)ftck_jint(p.job, "status.replacements", 0);
  p.ever_lost = p.used > 0;
  for (int s = 0; s < p.spec.replicas; s++) {
    int remembered = ftck_incarnation_from_name(name, s, ftck_jstr(json_array_get(p.members, (size_t)s), "pod"));
    int newest = p.slots[s].inc > remembered ? p.slots[s].inc : remembered;
    if (newest > p.max_inc) p.max_inc = newest;
  }
  /* spec.replicas changed since status last listed one member per slot. */
  size_t had = json_array_size(p.members);
  if (had > 0 && had != (size_t)p.spec.replicas && !p.spec.suspend) {
    int lo = (int)had < p.spec.replicas ? (int)had : p.spec.replicas;
    int hi = (int)had < p.spec.replicas ? p.spec.replicas - 1 : (int)had - 1;
    char slots[64], note[256];
    if (lo == hi)
      snprintf(slots, sizeof slots, "slot %d", lo);
    else
      snprintf(slots, sizeof slots, "slots %d..%d", lo, hi);
    snprintf(note, sizeof note, "spec.replicas %zu -> %d: %s %s", had, p.spec.replicas, slots,
             (int)had >= p.spec.replicas                     ? (lo == hi ? "removed (its pod deleted)" : "removed (their pods deleted)")
             : ftck_jint(p.job, "status.worldSize", 0) > 0 ? "added (joining the running job)"
                                                           : "added");
    FTC_INFO(FTC_SUB_CTRL, "%s: %s", key, note);
    ftck__report_event(r, p.job, "Normal", "Scaled", "Scale", note);
  }
  json_t *restart_cause = NULL; /* restartAll: the first lost pod (borrowed) */
  for (int s = 0; s < p.spec.replicas && !p.spec.suspend; s++) {
    json_t *lost = NULL;
    int lost_inc = -1, node_down = 0;
    FTC_CHECK_GOTO(find_loss(&p, s, &lost, &lost_inc, &node_down), st, out_free_pass);
    if (!lost) continue;
    if (!p.going && ftck_jstr(lost, "metadata.deletionTimestamp")) p.going = ftck__job_going(r, ns, name) ? 1 : 2;
    if (p.going == 1) goto out_going;
    p.ever_lost = 1;
    declare_lost(&p, s, lost, node_down);
    if (p.spec.mode == FTCK_MODE_RESTART_ALL) {
      /* A pod lost before the restart in progress is no cause for another:
       * its slot's new pod is made, though the pod cache may not show it
       * yet (while it shows another slot's). */
      if (!restart_cause && lost_inc >= restarted_at(&p, NULL)) restart_cause = lost;
      p.slots[s].state_override = 1;
      continue;
    }
    FTC_CHECK_GOTO(replace_member(&p, s, lost, lost_inc, node_down), st, out_free_pass);
  }
  if (restart_cause) FTC_CHECK_GOTO(restart_all(&p, restart_cause, 0), st, out_free_pass);
  FTC_CHECK_GOTO(handle_hangs(&p), st, out_free_pass);

  /* Older incarnations of a slot (the lost pods among them) are no longer needed. */
  size_t i;
  json_t *pod;
  json_array_foreach(mine, i, pod) {
    int s = ftck_pod_slot(pod);
    if (s < 0 || s >= p.spec.replicas || p.spec.suspend) continue;
    if (ftck_pod_incarnation(pod) < p.slots[s].inc && !ftck_jstr(pod, "metadata.deletionTimestamp"))
      FTC_CHECK_GOTO(ftck__delete_pod(r, ns, ftck_jstr(pod, "metadata.name"), ftck_jstr(pod, "metadata.uid")), st,
                     out_free_pass);
  }
  ftck__compute_status(&p, computed, conds);
  /* A job that ended (or is suspended) needs no coordinator. */
  const char *phase = json_string_value(json_object_get(computed, "phase"));
  if (r->coords && phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed") || !strcmp(phase, "Suspended")))
    ftck_coords_remove(r->coords, key);

out_write_status:;
  ftck_status_update_t u = {.uid = ftck_jstr(p.job, "metadata.uid"), .computed = computed, .incidents = p.incidents,
                            .generation = ftck_jint(p.job, "metadata.generation", 0)};
  /* Skip the API round trip when the cached status already says it. */
  json_t *probe = json_deep_copy(p.job);
  int unchanged = probe && ftck_status_merge(probe, &u) == 1;
  json_decref(probe);
  if (!unchanged) {
    st = ftck_update_retry(r->c, job_path, "/status", ftck__apply_status, &u, 5, NULL);
    if (st != FTC_OK) FTC_WARN(FTC_SUB_CTRL, "%s: status update failed: %s", key, ftc_last_error());
  }
  if (requeue_ms) *requeue_ms = p.requeue;
  goto out_free_pass;
out_going:
  /* Its watch event follows; meanwhile nothing is made again for it. */
  FTC_INFO(FTC_SUB_CTRL, "%s: being deleted (the server says so before the cache does); nothing made again", key);
  if (r->coords) ftck_coords_remove(r->coords, key);
  forget_job(r, key, ns, name);
out_free_pass:
  json_decref(mine);
  json_decref(pods);
  json_decref(computed);
  json_decref(p.created);
  json_decref(p.incidents);
  ftc__free(p.slots);
  ftc__free(job_path);
out_free_job:
  json_decref(p.job);
  return st;
}
