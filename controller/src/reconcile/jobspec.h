/*
 * jobspec.h - a TrainingJob's spec with the CRD's defaults applied, the
 * pods the reconciler builds from it, and the status it computes. Pure
 * functions over jansson values (no API calls), so they are unit-tested
 * without a server; trainingjob.c does the I/O.
 */
#ifndef FTCK_JOBSPEC_H
#define FTCK_JOBSPEC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define FTCK_GROUP "ftcomm.dev"
#define FTCK_VERSION "v1alpha1"
#define FTCK_API_VERSION "ftcomm.dev/v1alpha1"
#define FTCK_KIND "TrainingJob"
#define FTCK_PLURAL "trainingjobs"
#define FTCK_MANAGER "ftcomm-controller"

#define FTCK_LABEL_JOB "ftcomm.dev/job"
#define FTCK_LABEL_SLOT "ftcomm.dev/slot"
#define FTCK_LABEL_INCARNATION "ftcomm.dev/incarnation"
#define FTCK_ANNOT_AVOID "ftcomm.dev/avoid-nodes"
/* Selects every pod the controller manages: by its own labels, which a
 * template cannot set (app.kubernetes.io/managed-by is only a default). */
#define FTCK_POD_SELECTOR "ftcomm.dev/job,ftcomm.dev/slot"
/* The token Secrets this controller made (one per job). */
#define FTCK_SECRET_SELECTOR "app.kubernetes.io/managed-by=ftcomm-controller,ftcomm.dev/job"

typedef enum { FTCK_ON_HANG_REPLACE, FTCK_ON_HANG_DUMP_ONLY, FTCK_ON_HANG_RESTART_ALL } ftck_on_hang_t;
typedef enum { FTCK_MODE_REPLACE, FTCK_MODE_RESTART_ALL } ftck_mode_t;

typedef struct ftck_job_spec {
  int replicas;
  int min_replicas;
  char backend[16];              /* auto, nccl, tcp */
  int collective_timeout_s;
  int hang_timeout_s;
  int max_replacements;
  int backoff_s;
  int avoid_failed_nodes;
  ftck_on_hang_t on_hang;
  ftck_mode_t mode;
  int recorder_enabled;
  int recorder_entries;
  int suspend;
} ftck_job_spec_t;

/* Defaults match the CRD's: replicas 1, minReplicas = replicas, backend
 * auto, collectiveTimeoutSeconds 600, hangTimeoutSeconds 300,
 * maxReplacements 10, backoffSeconds 10, avoidFailedNodes true, onHang
 * replace, mode replace, recorder enabled with 2000 entries. Every field is
 * checked as the CRD's schema checks it (type, bounds, enum). 0 on success;
 * -1 when the spec is unusable (why in err). */
int ftck_job_spec_parse(const json_t *job, ftck_job_spec_t *spec, char *err, size_t err_len);

/* Settings that do not come from the job. */
typedef struct ftck_pod_env {
  const char *coordinator; /* FTCOMM_COORDINATOR */
  const char *dump_dir;    /* FTCOMM_DUMP_DIR */
} ftck_pod_env_t;

/* "<job>-<slot>-<incarnation>" into buf; -1 if it does not fit. */
int ftck_pod_name(const char *job, int slot, int incarnation, char *buf, size_t n);
/* "<job>-ftcomm-token" */
int ftck_secret_name(const char *job, char *buf, size_t n);
/* The owner reference to the job (new object). */
json_t *ftck_owner_ref(const json_t *job);

/* The pod of one slot and incarnation, from spec.template, with labels,
 * owner reference, restartPolicy Never, the runtime environment in every
 * container (FTCOMM_JOINER=1 when joiner: it joins a running job), and
 * (when avoid is non-empty) a required node affinity away from the
 * comma-separated nodes in avoid. New object, NULL on no memory. */
json_t *ftck_build_pod(const json_t *job, const ftck_job_spec_t *spec, int slot, int incarnation, int joiner,
                       const char *avoid, const ftck_pod_env_t *env);

/* Slot and incarnation of a managed pod (labels); -1 when absent. */
int ftck_pod_slot(const json_t *pod);
int ftck_pod_incarnation(const json_t *pod);
/* Incarnation from a pod name of this job ("<job>-<slot>-<inc>"); -1 if not one. */
int ftck_incarnation_from_name(const char *job, int slot, const char *pod_name);
/* 1 when the pod has failed or is going away (phase Failed, or being deleted). */
int ftck_pod_is_lost(const json_t *pod);
/* Wall ns when the pod failed: latest container finishedAt, else when its
 * deletion began (deletionTimestamp - deletionGracePeriodSeconds), else
 * now_ns; never later than now_ns. */
int64_t ftck_pod_failed_at(const json_t *pod, int64_t now_ns);

/* 1 when the Node's Ready condition is True, 0 when False or Unknown, -1
 * when it has none (a node without a kubelet's report: not judged). */
int ftck_node_ready(const json_t *node);

/* Set or update one condition in a conditions array (Kubernetes style):
 * lastTransitionTime changes only when status changes. -1 on no memory. */
int ftck_set_condition(json_t *conditions, const char *type, const char *status, const char *reason,
                       const char *message, int64_t observed_generation, const char *now);

/* Status the reconciler computed, to be merged into the stored object. */
#define FTCK_MAX_INCIDENTS 20
typedef struct ftck_status_update {
  const char *uid;       /* skip (return 1) when the object has another uid */
  json_t *computed;      /* fields to set (phase, alive, worldSize, members), "conditions" to
                          * merge by type, "replacementsDelta" to add to status.replacements */
  json_t *incidents;     /* appended; the oldest dropped beyond FTCK_MAX_INCIDENTS */
  int64_t generation;    /* observedGeneration, also on every condition */
} ftck_status_update_t;

/* Merge u into obj's status in place (epoch, rank and other fields it does not
 * name are kept; lastTransitionTime only moves when a condition's status
 * does). 0: obj changed, write it; 1: nothing to write; -1: no memory. */
int ftck_status_merge(json_t *obj, const ftck_status_update_t *u);

#endif
