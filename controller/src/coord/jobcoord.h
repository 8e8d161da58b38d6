/*
 * jobcoord.h - the controller's embedded coordinators: one membership
 * coordinator (runtime/src/coordinator) per TrainingJob, on a loopback port,
 * reached by the ranks through the router on the controller's coordinator
 * port. It turns what the coordinators decide into things the reconciler
 * can act on: the current epoch (status.epoch, worldSize, each member's
 * rank), and hang incidents, whose dumps it collects into the dump volume as
 * <volume>/<namespace>/<job>/<incident>/rank-<r>.json, analyzes with
 * ftcomm-trace (analysis.json, analysis.txt, analysis.html next to them) and
 * prunes to the newest --dump-retention incidents per job; the folders of
 * deleted jobs go after --dump-ttl-after-deletion (ftck_coords_sweep,
 * retention.h).
 *
 * Threads: coordinator events arrive on each coordinator's service thread
 * and are only recorded here (under cs->mu) before notify() queues the job;
 * everything else runs on the reconcile worker that holds the job's key
 * (the work queue never gives one key to two workers). cs->mu is a leaf.
 */
#ifndef FTCK_JOBCOORD_H
#define FTCK_JOBCOORD_H

#include <stddef.h>
#include <stdint.h>

#include "ftc_coord.h"
#include "ftc_recorder.h"
#include "ftcomm.h"
#include "retention.h"

typedef struct ftck_coords ftck_coords_t;

typedef struct ftck_coords_opts {
  const char *bind;        /* the coordinator port, e.g. ":7470" */
  const char *dump_volume; /* where incidents go */
  int dump_retention;      /* incidents kept per job (newest first) */
  const char *analyzer;    /* ftcomm-trace; NULL: next to this binary, else $PATH */
  int dump_wait_ms;        /* how long an incident waits for the ranks' dumps; 0: 10000 */
  void (*notify)(void *ud, const char *key); /* "ns/name" has news: reconcile it */
  void *ud;
} ftck_coords_opts_t;

ftc_status_t ftck_coords_create(const ftck_coords_opts_t *o, ftck_coords_t **out);
/* Open the coordinator port (call when leading). Safe to call again after a
 * failure (e.g. the port was still taken). */
ftc_status_t ftck_coords_listen(ftck_coords_t *cs);
/* The coordinator port, -1 while not listening. */
int ftck_coords_port(ftck_coords_t *cs);
/* Stop the port and every coordinator. NULL is a no-op. */
void ftck_coords_destroy(ftck_coords_t *cs);

typedef struct ftck_coord_params {
  const char *job;          /* the job's name: what its ranks say in their hello */
  const char *token;        /* its Secret's token */
  const char *uid;          /* the job's metadata.uid, stamped on its incidents; NULL: none */
  int world_size, min_size;
  int hang_timeout_ms;      /* a member silent this long is hung (coordinator heartbeat timeout) */
  uint64_t first_epoch;     /* status.epoch: a new coordinator numbers its epochs above it */
} ftck_coord_params_t;

/* The coordinator of job key ("ns/name") runs with these parameters: made
 * when missing, remade (ranks reconnect, it adopts their epoch) when they
 * changed.
 * *created (may be NULL) says whether one was made. */
ftc_status_t ftck_coords_ensure(ftck_coords_t *cs, const char *key, const ftck_coord_params_t *p, int *created);
/* Stop and forget the coordinator of key (job finished, suspended or gone). */
void ftck_coords_remove(ftck_coords_t *cs, const char *key);
int ftck_coords_has(ftck_coords_t *cs, const char *key);

/* Queue (notify) every job whose coordinator published a change since the
 * last poll: another epoch, its size, or sessions that came or went. Events
 * are emitted before the coordinator publishes what they announce, and a
 * coordinator that adopts a running epoch, or sees its ranks reconnect,
 * emits none; the controller's main loop calls this every 100 ms so status
 * follows anyway. Cheap: one lock per coordinator, no API call. */
void ftck_coords_poll(ftck_coords_t *cs);

/* The process holding `slot` (pod `pod`) is gone: drop it now, so survivors
 * shrink without waiting for heartbeats. Once per pod. */
ftc_status_t ftck_coords_slot_lost(ftck_coords_t *cs, const char *key, int slot, const char *pod, const char *reason);

/* A copy of the job's current epoch, or NULL (no coordinator, or no memory).
 * Free with ftc__coord_view_free. */
ftc__coord_view_t *ftck_coords_view(ftck_coords_t *cs, const char *key);

/* A hang whose dumps are in (or waited for long enough), analyzed. */
typedef struct ftck_incident {
  char name[128];         /* the incident (its folder) */
  char kind[32];          /* Hang or CollectiveTimeout */
  char reason[256];       /* the coordinator's words */
  char dump_path[4352];   /* the folder in the volume */
  char headline[FTC_TRACE_HEADLINE_MAX]; /* the analyzer's first line, or why there is none */
  int culprit_slot;       /* -1: unknown */
  int culprit_rank;       /* -1: unknown */
  int dumps;              /* ranks whose dump is stored (a rank's later copies aside) */
  int64_t time_ns;        /* when the hang was detected (wall) */
} ftck_incident_t;

/* Incidents of key that are ready; each is analyzed now (on the caller's
 * thread) and pruned to the retention. *out (ftc__free) gets *n of them;
 * *wait_ms gets when to ask again for one still collecting, -1 none. */
ftc_status_t ftck_coords_take_incidents(ftck_coords_t *cs, const char *key, ftck_incident_t **out, size_t *n,
                                        int64_t *wait_ms);

typedef struct ftck_coords_stats {
  uint64_t coordinators, epochs, hangs, dumps, slots_declared_lost;
  uint64_t router_accepted, router_routed, router_unrouted, router_open;
  /* Folders removed from the dump volume: of deleted jobs, incidents of an
   * earlier job of the same name, beyond --dump-retention; folders of
   * deleted jobs waiting out the ttl (at the last sweep); sweeps done. */
  uint64_t dirs_removed_deleted, dirs_removed_stale, dirs_removed_retention, dirs_waiting, sweeps;
  int listening;
} ftck_coords_stats_t;
void ftck_coords_get_stats(ftck_coords_t *cs, ftck_coords_stats_t *out);

/* Run the analyzer on dir: dir/analysis.{json,txt,html}; the headline and,
 * when one finding names ranks, the first of them into *rank (-1 if none).
 * 0 when the analyzer ran (healthy or a finding), -1 otherwise (why in
 * headline). Exposed for the tests. */
int ftck_analyze_dir(const char *analyzer, const char *dir, char *headline, size_t n, int *rank);

typedef struct ftck_coords_sweep_opts {
  const char *ns;            /* NULL or "": every namespace; else only this one (--namespace) */
  int64_t ttl_s;             /* --dump-ttl-after-deletion, > 0 */
  int64_t now_s;             /* wall clock, unix seconds (the sweeper takes its own) */
  ftck_job_lookup_fn lookup; /* the jobs that exist: the TrainingJob cache, synced; called
                              * on the sweeping thread */
  void *ud;
  int slice_entries;         /* entries removed per slice (0: 256) */
  int (*yield)(void *ud);    /* NULL, or called with ud between two slices, no lock held
                              * (nonzero stops the sweep; the tests watch it there) */
} ftck_coords_sweep_opts_t;

/* Remove what deleted (or re-created) jobs left in the dump volume once
 * they are ttl old (retention.h), on the caller's thread; a job with a
 * coordinator is never gone. Counts go to the stats. */
ftc_status_t ftck_coords_sweep(ftck_coords_t *cs, const ftck_coords_sweep_opts_t *o);

/* The same on a thread of its own ("ftck-sweeper"), so neither the
 * leader's main loop nor a reconcile waits for a removal: a sweep at once,
 * then one every period_ns. A reconcile that makes a job's folder waits at
 * most for the sweep's decision about that one folder (a rename); the
 * removal follows with no lock held, in slices. o is copied. Stopped
 * between two slices by ftck_coords_stop_sweeper (or destroy); what is left
 * goes at the next sweep. Call both from one thread. */
ftc_status_t ftck_coords_start_sweeper(ftck_coords_t *cs, const ftck_coords_sweep_opts_t *o, int64_t period_ns);
void ftck_coords_stop_sweeper(ftck_coords_t *cs);

#endif
