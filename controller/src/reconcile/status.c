/*
 * status.c - a TrainingJob's status as one reconcile pass computed it: the
 * members' states, the conditions, the counters, merged into the object
 * the server holds.
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

/* ftck_update_retry's mutator: merge the computed status into the fresh object. */
int ftck__apply_status(json_t *obj, void *ud) { return ftck_status_merge(obj, ud); }

void ftck__add_condition(json_t *conds, const char *type, int status, const char *reason, const char *msg) {
  json_array_append_new(conds, json_pack("{s:s, s:s, s:s, s:s}", "type", type, "status", status ? "True" : "False",
                                         "reason", reason, "message", msg));
}

static const char *member_state(const json_t *pod) {
  if (!pod) return "Missing";
  if (ftck_jstr(pod, "metadata.deletionTimestamp")) return "Terminating";
  const char *phase = ftck_jstr(pod, "status.phase");
  return phase ? phase : "Pending";
}

/* Phase, members, counts and conditions, from the slots as this pass left them. */
void ftck__compute_status(pass_t *p, json_t *computed, json_t *conds) {
  const ftck_job_spec_t *spec = &p->spec;
  int alive = 0, succeeded = 0;
  json_t *mlist = json_array();
  /* The coordinator's epoch: who has which rank. */
  ftc__coord_view_t *view = p->r->coords && !spec->suspend ? ftck_coords_view(p->r->coords, p->key) : NULL;
  if (view && view->epoch == 0) {
    ftc__coord_view_free(view);
    view = NULL;
  }
  /* Each slot's rank in that epoch (-1: none), looked up once: a walk of
   * the view per slot is replicas x size per pass (16M at 4,096). */
  int *rank_of = view ? ftc__malloc((size_t)spec->replicas * sizeof(*rank_of) + 1) : NULL;
  for (int s = 0; rank_of && s < spec->replicas; s++) rank_of[s] = -1;
  for (int k = 0; rank_of && k < view->size; k++)
    if (view->members[k].slot >= 0 && view->members[k].slot < spec->replicas)
      rank_of[view->members[k].slot] = view->members[k].rank;
  for (int s = 0; s < spec->replicas; s++) {
    json_t *old = json_array_get(p->members, (size_t)s);
    if (spec->suspend) {
      /* Remember each slot's last pod, so resuming continues its incarnations. */
      json_array_append_new(mlist, json_pack("{s:i, s:s?, s:s}", "slot", s, "pod", ftck_jstr(old, "pod"), "state",
                                             "Suspended"));
      continue;
    }
    json_t *pod = p->slots[s].cur;
    int ov = p->slots[s].state_override;
    const char *state = ov == 1 ? "Replacing" : ov == 2 ? "Failed" : ov == 3 ? "FailedCreate" : member_state(pod);
    if (!strcmp(state, "Running")) alive++;
    if (!strcmp(state, "Succeeded")) succeeded++;
    const char *pname = ftck_jstr(pod, "metadata.name");
    json_t *m = json_pack("{s:i, s:s?, s:s?, s:s}", "slot", s, "pod", pname, "node", ftck_jstr(pod, "spec.nodeName"),
                          "state", state);
    /* The rank is the coordinator's to set: from its epoch when there is
     * one, else kept while the pod stays. */
    if (view && rank_of) {
      if (m && rank_of[s] >= 0 && !strcmp(state, "Running"))
        json_object_set_new(m, "rank", json_integer(rank_of[s]));
    } else if (view) {
      for (int k = 0; m && k < view->size; k++) /* (out of memory for the index) */
        if (view->members[k].slot == s && !strcmp(state, "Running"))
          json_object_set_new(m, "rank", json_integer(view->members[k].rank));
    } else if (m && json_is_integer(json_object_get(old, "rank")) && pname && ftck_jstr(old, "pod") &&
               !strcmp(ftck_jstr(old, "pod"), pname)) {
      json_object_set(m, "rank", json_object_get(old, "rank"));
    }
    json_array_append_new(mlist, m);
  }
  const char *phase = spec->suspend                                  ? "Suspended"
                      : p->exhausted                                 ? "Failed"
                      : succeeded == spec->replicas                  ? "Succeeded"
                      : alive == spec->replicas                      ? "Running"
                      : p->ever_lost && alive >= spec->min_replicas  ? "Degraded"
                      : p->refused                                   ? "Blocked"
                                                                     : "Pending";
  char msg[256];
  snprintf(msg, sizeof msg, "%d of %d members running (minimum %d)", alive, spec->replicas, spec->min_replicas);
  int ended = !strcmp(phase, "Succeeded") || !strcmp(phase, "Failed");
  json_object_set_new(computed, "phase", json_string(phase));
  json_object_set_new(computed, "alive", json_integer(alive));
  json_object_set_new(computed, "worldSize", json_integer(view ? view->size : alive));
  if (view) json_object_set_new(computed, "epoch", json_integer((json_int_t)view->epoch));
  ftc__coord_view_free(view);
  ftc__free(rank_of);
  json_object_set_new(computed, "replacementsDelta", json_integer(p->used_now));
  json_object_set_new(computed, "members", mlist);
  int all = alive == spec->replicas;
  if (ended)
    ftck__add_condition(conds, "Ready", 0, !strcmp(phase, "Succeeded") ? "JobSucceeded" : "JobFailed",
                        !strcmp(phase, "Succeeded") ? "the job succeeded: no member runs any more"
                                              : "the job failed: see condition Failed");
  else
    ftck__add_condition(conds, "Ready", all,
                        all ? "AllMembersRunning" : p->refused ? "FailedCreate" : p->replacing ? "MemberReplacing"
                                                                                           : "MembersNotRunning",
                        msg);
  ftck__add_condition(conds, "Degraded", !strcmp(phase, "Degraded"),
                      p->replacing ? "MemberReplacing" : p->ever_lost ? "MemberLost" : "NoLoss", msg);
  /* Running: training goes on (every member, or at least minReplicas while
   * lost ones are replaced); Succeeded: every member completed. Both follow
   * the names of Kubeflow's and JobSet's conditions, for kubectl wait. */
  int training = !strcmp(phase, "Running") || !strcmp(phase, "Degraded");
  ftck__add_condition(conds, "Running", training, training ? "Training" : ended ? "JobEnded" : "NotTraining", msg);
  char smsg[128];
  snprintf(smsg, sizeof smsg, "%d of %d members succeeded", succeeded, spec->replicas);
  ftck__add_condition(conds, "Succeeded", !strcmp(phase, "Succeeded"),
                      !strcmp(phase, "Succeeded") ? "AllMembersSucceeded" : "NotAllSucceeded", smsg);
  /* PodsCreated: False while the API server refuses a pod (admission, quota,
   * an invalid template), with its words; one Warning Event FailedCreate per
   * distinct refusal (a message that differs from the condition's). */
  if (p->refused) {
    char rmsg[1200];
    if (p->refused > 1)
      snprintf(rmsg, sizeof rmsg, "%s (%d slots refused; retried)", p->refusal, p->refused);
    else
      snprintf(rmsg, sizeof rmsg, "%s (retried)", p->refusal);
    /* Told in memory, not read back from status: the next pass may come
     * before the job's cache shows the status this one writes. */
    pthread_mutex_lock(&p->r->mu);
    const char *told = json_string_value(json_object_get(p->r->refusals, p->key));
    int news = !told || strcmp(told, rmsg) != 0;
    if (news) json_object_set_new(p->r->refusals, p->key, json_string(rmsg));
    pthread_mutex_unlock(&p->r->mu);
    if (news) {
      char note[1000]; /* an Event's note holds 1 kB */
      memcpy(note, rmsg, sizeof note - 1);
      note[sizeof note - 1] = '\0';
      ftck__report_event(p->r, p->job, "Warning", "FailedCreate", "Create", note);
    }
    ftck__add_condition(conds, "PodsCreated", 0, "FailedCreate", rmsg);
  } else {
    pthread_mutex_lock(&p->r->mu);
    json_object_del(p->r->refusals, p->key);
    pthread_mutex_unlock(&p->r->mu);
    ftck__add_condition(conds, "PodsCreated", 1, "PodsCreated", "the API server accepted every pod the job needs");
  }
  if (p->exhausted) {
    snprintf(msg, sizeof msg,
             "all %d replacements of spec.failurePolicy.maxReplacements are used; raise it to replace more pods",
             spec->max_replacements);
    ftck__add_condition(conds, "Failed", 1, "ReplacementBudgetExhausted", msg);
    const char *was = ftck_jstr(p->job, "status.phase");
    if (!was || strcmp(was, "Failed") != 0) ftck__report_event(p->r, p->job, "Warning", "ReplacementBudgetExhausted", "Fail", msg);
  } else {
    ftck__add_condition(conds, "Failed", 0, "WithinBudget", "replacements left");
  }
  ftck__add_condition(conds, "Suspended", spec->suspend, spec->suspend ? "SpecSuspend" : "NotSuspended",
                      spec->suspend ? "spec.suspend is true: the job's pods are deleted" : "running");
}
