/*
 * incident.h - the coordinator's record of one incident: which ranks it
 * asked for a dump, which answered, which could not and why, and its own
 * verdict on the epoch. Kept as DIR/<incident>/incident.json beside the
 * dumps, rewritten (whole, by one rename) each time it learns more, so the
 * folder says what is missing even when the job stops at once
 * (docs/dump-format.md, "The incident record").
 *
 * Owned by the coordinator's service thread; no locking.
 */
#ifndef FTC_COORD_INCIDENT_H
#define FTC_COORD_INCIDENT_H

#include <stdint.h>

/* How long an asked rank may take to answer before the record says "no
 * answer" (a later answer still turns it into "answered"). */
#define FTC__INCIDENT_ANSWER_MS 10000

typedef struct ftc__incident ftc__incident_t;

/* A new record of incident `name` (a plain name) about `epoch`, raised for
 * `reason`; silent_rank/slot: the member whose silence raised it, -1 none.
 * Strings are copied. NULL when out of memory. */
ftc__incident_t *ftc__incident_new(const char *dump_dir, const char *job, const char *name,
                                   uint64_t epoch, const char *reason, int silent_rank,
                                   int silent_slot);
void ftc__incident_free(ftc__incident_t *inc);
const char *ftc__incident_name(const ftc__incident_t *inc);
uint64_t ftc__incident_epoch(const ftc__incident_t *inc);

/* A member of the epoch: asked (a request was sent to its session) or not
 * (why_not, e.g. its session had closed). */
void ftc__incident_add(ftc__incident_t *inc, int rank, int slot, uint64_t member_id,
                       const char *host, int asked, const char *why_not);
/* Its dump of rank `rank` is stored as `file` (a name in the folder). */
void ftc__incident_answered(ftc__incident_t *inc, int rank, uint64_t member_id, const char *file);
/* The coordinator dropped member_id: `word` (crashed, hung, lost, left) and
 * its own words. in_epoch: from the incident's epoch (the verdict lists it);
 * else from a later one (only a rank still asked is marked: its dump will
 * not come now). Returns whether the record changed. */
int ftc__incident_dropped(ftc__incident_t *inc, uint64_t member_id, const char *word,
                           const char *detail, int in_epoch);
/* The coordinator announced `next` after the incident's epoch. */
void ftc__incident_next_epoch(ftc__incident_t *inc, uint64_t next);
/* Asked ranks without an answer after FTC__INCIDENT_ANSWER_MS are marked;
 * returns whether the record changed. */
int ftc__incident_check(ftc__incident_t *inc, int64_t now_ns);
/* Asked ranks that have neither answered nor been settled otherwise. */
int ftc__incident_waiting(const ftc__incident_t *inc);
/* The record changed but need not be written yet: ftc__incident_flush
 * writes it if it was marked since its last write (0, or -1 as write). A
 * job of thousands of ranks answers thousands of times within a second;
 * each write is the whole record. */
void ftc__incident_mark(ftc__incident_t *inc);
int ftc__incident_flush(ftc__incident_t *inc);
/* The coordinator stops: asked ranks without an answer are marked. */
void ftc__incident_close(ftc__incident_t *inc);
/* Write DIR/<incident>/incident.json (logged on failure). 0 or -1. */
int ftc__incident_write(ftc__incident_t *inc);

#endif
