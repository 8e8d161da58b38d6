/*
 * retention.h - what stays in the dump volume
 * (<volume>/<namespace>/<job>/<incident>/). Two rules:
 *
 *  - per job, the newest --dump-retention incident folders
 *    (ftck_prune_incidents, after each analyzed incident);
 *  - across jobs, --dump-ttl-after-deletion: the folder <namespace>/<job> of
 *    a TrainingJob that no longer exists is removed once it has been gone
 *    that long, and in the folder of a job re-created under the same name
 *    the incidents of the earlier job go once the new one is that old (the
 *    earlier one was deleted before it was created). ftck_retention_sweep,
 *    run by the leader at start-up and periodically.
 *
 * What the controller writes there besides dumps and analyses (dot names,
 * which the analyzer and the per-job count skip):
 *   <namespace>/<job>/<incident>/.job-uid  the uid of the job it belongs to
 *   <namespace>/<job>/.deleted-at          unix seconds when the controller
 *                                          first found the job gone
 * An incident without .job-uid (its collection was cut short by a restart,
 * or an older controller wrote it) belongs to the earlier job when its
 * folder was last written more than a minute before the current job was
 * created.
 *
 * What goes is renamed out of the way under the hold (one rename, to a
 * hidden ".ftcomm-removing-..." name beside it) and emptied after it, in
 * slices of slice_entries entries with yield() between them; a sweep that
 * was stopped leaves such trash, which the next one empties.
 *
 * Nothing outside the volume is touched: everything below it is opened
 * relative to its parent's descriptor with O_NOFOLLOW; a symbolic link is
 * never followed (one inside a folder being removed is removed itself, not
 * its target); a name that is not a namespace (DNS-1123 label) or a job
 * name (DNS-1123 subdomain), a file where a folder belongs, and a link are
 * logged and left alone; names starting with '.' (.snapshot, ...) are left
 * alone silently.
 */
#ifndef FTCK_RETENTION_H
#define FTCK_RETENTION_H

#include <stddef.h>
#include <stdint.h>

#include "ftcomm.h"

#define FTCK_MARK_JOB_UID ".job-uid"
#define FTCK_MARK_DELETED ".deleted-at"

typedef struct ftck_job_ref {
  char uid[128];     /* metadata.uid; "" unknown */
  int64_t created_s; /* metadata.creationTimestamp, unix seconds; -1 unknown */
} ftck_job_ref_t;

/* Does TrainingJob ns/name exist? 1: yes (*ref filled), 0: no, -1: cannot
 * tell now (its folder is left alone this time). */
typedef int (*ftck_job_lookup_fn)(void *ud, const char *ns, const char *name, ftck_job_ref_t *ref);

typedef struct ftck_retention_opts {
  const char *volume;
  const char *ns;     /* NULL or "": every namespace folder; else only this one */
  int64_t ttl_s;      /* > 0 */
  int64_t now_s;      /* wall clock, unix seconds */
  ftck_job_lookup_fn lookup;
  /* hold(ud, 1) before a job's folder is looked up and hold(ud, 0) after
   * what was decided is done, up to renaming what goes out of the way (also
   * around removing an emptied namespace folder); NULL: none. The controller serializes this with making a job's
   * folder and coordinator, so a job created meanwhile keeps its folder. */
  void (*hold)(void *ud, int on);
  void *ud;
  int quiet; /* 1: what is skipped is logged at debug level (the first sweep warns) */
  /* Removal goes in slices of slice_entries entries (0: 256), no hold
   * held; yield(ud) between them (NULL: none): nonzero stops the sweep. */
  int slice_entries;
  int (*yield)(void *ud);
} ftck_retention_opts_t;

typedef struct ftck_retention_result {
  uint64_t deleted;  /* folders of deleted jobs removed */
  uint64_t stale;    /* incidents of an earlier job of the same name removed */
  uint64_t waiting;  /* folders of deleted jobs waiting out the ttl */
  uint64_t skipped;  /* names, links and files left alone */
  uint64_t errors;   /* removals or markers that failed (tried again next time) */
  uint64_t slices;   /* yields between slices of removal */
  int stopped;       /* 1: yield stopped it; the rest is trash for the next sweep */
} ftck_retention_result_t;

/* One pass over the volume (see above). FTC_ERR_SYSTEM when the volume
 * cannot be opened (a missing one is not an error: nothing to do). */
ftc_status_t ftck_retention_sweep(const ftck_retention_opts_t *o, ftck_retention_result_t *r);

/* Keep the newest `keep` incident folders under dir (by modification time);
 * returns how many were removed. Links and files are left alone. */
int ftck_prune_incidents(const char *dir, int keep);

/* Write incident_dir/.job-uid (making the folder if needed). 0 or -1 (errno). */
int ftck_stamp_incident(const char *incident_dir, const char *uid);

/* "3d", "2h30m" or "45s" for a log line. */
void ftck_format_duration(int64_t s, char *buf, size_t n);

#endif
