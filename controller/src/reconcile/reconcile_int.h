/*
 * reconcile_int.h - what the reconciler's files (trainingjob.c, pass.c,
 * status.c, writes.c) share: the reconciler's state, one pass's state, and
 * the helpers more than one of them calls. Nothing outside them includes it.
 */
#ifndef FTCK_RECONCILE_INT_H
#define FTCK_RECONCILE_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "token.h"
#include "trainingjob.h"

#define MAX_WORKERS 64

struct ftck_reconciler {
  ftck_client_t *c;
  char *ns;
  char *coordinator, *dump_dir, *identity;
  ftck_pod_env_t env;
  int workers;
  ftck_workqueue_t *q;
  ftck_informer_t *jobs, *pods, *nodes;
  unsigned char token_key[FTCK_TOKEN_KEY_BYTES];
  pthread_t threads[MAX_WORKERS];
  int nthreads;
  pthread_mutex_t mu; /* secrets_ok, vanished, fresh, refusals (a leaf) */
  json_t *vanished;    /* "ns/job/pod" -> wall ns a pass first found the slot's pod gone */
  json_t *fresh;       /* "ns/job" -> {inc, since}: restarted (restartAll) at incarnation inc */
  json_t *secrets_ok;  /* job uid -> {job: "ns/name"}: its token Secret was made or found since the start
                        * (one made again then was deleted: an Event says so) */
  json_t *refusals;    /* "ns/job" -> the refusal its last FailedCreate Event told (one Event per cause) */
  ftck_coords_t *coords; /* the embedded coordinators; NULL: none */
  ftck_reconciler_stats_t stats; /* atomics */
};
typedef struct slot_view {
  json_t *cur;      /* newest incarnation's pod (borrowed from pods or created) */
  int inc;          /* its incarnation; -1 none */
  int state_override; /* 1: Replacing, 2: Failed (budget), 3: FailedCreate (the API server refused its pod) */
} slot_view_t;
/* One reconcile pass over one job: what it read, what it changed, and what
 * it will write to status. Lives on the worker's stack. */
typedef struct pass {
  ftck_reconciler_t *r;
  const char *key, *ns, *name;
  json_t *job;           /* a copy from the cache */
  json_t *members;       /* job's status.members (borrowed from job) */
  ftck_job_spec_t spec;
  slot_view_t *slots;    /* spec.replicas entries */
  json_t *created;       /* pods made (or placeholders for vanished ones) in this pass; owned */
  json_t *incidents;     /* to append to status */
  int used;              /* replacements (restarts in restartAll mode) so far, this pass included */
  int used_now;          /* made in this pass: added to status as a delta */
  int max_inc;           /* newest incarnation of any slot, remembered ones included */
  int exhausted, replacing, ever_lost;
  int64_t now, requeue;  /* wall ns; smallest delay after which to look again, -1 none */
  int going;             /* 0 not asked; 1 the server says the job is being deleted; 2 it is not */
  int refused;           /* slots whose pod the API server refused to create in this pass */
  char refusal[1024];    /* the first refusal: "slot S: pod P: <the API server's message>" */
  int secret_sure;       /* the token Secret was made or found in this pass */
} pass_t;

/* writes.c */
int ftck__job_going(ftck_reconciler_t *r, const char *ns, const char *name);
ftc_status_t ftck__ensure_secret(ftck_reconciler_t *r, const json_t *job, int waits, int *sure);
int ftck__waits_for_secret(const json_t *pods, const char *job);
ftc_status_t ftck__create_pod(ftck_reconciler_t *r, const json_t *job, const ftck_job_spec_t *spec,
                              int slot, int inc, int joiner, const char *avoid, json_t **created,
                              int *is_new, long *http, int *secret_sure);
ftc_status_t ftck__delete_pod(ftck_reconciler_t *r, const char *ns, const char *name,
                              const char *uid);

/* status.c */
int ftck__apply_status(json_t *obj, void *ud);
void ftck__add_condition(json_t *conds, const char *type, int status, const char *reason,
                         const char *msg);
void ftck__compute_status(pass_t *p, json_t *computed, json_t *conds);

/* pass.c */
void ftck__report_event(ftck_reconciler_t *r, const json_t *job, const char *type,
                        const char *reason, const char *action, const char *note);
size_t ftck__remembered(ftck_reconciler_t *r);

#endif
