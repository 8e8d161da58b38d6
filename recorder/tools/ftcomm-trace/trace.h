/*
 * trace.h - what ftcomm-trace's parts share: the dumps as loaded (ftcomm
 * and PyTorch Flight Recorder formats, one model), the findings of the
 * analysis, and the entry points of the loader, analyzer and reports.
 */
#ifndef FTC_TRACE_H
#define FTC_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ftc_recorder.h"

/* Exit statuses of the tool. */
enum { TR_EXIT_HEALTHY = 0, TR_EXIT_FINDING = 1, TR_EXIT_UNUSABLE = 2 };

/* The most ranks a job has (the membership protocol's world_size bound):
 * a dump naming a rank or world size past it is damaged. */
#define TR_MAX_RANKS 1048576

enum tr_state { TR_SCHEDULED = 0, TR_STARTED = 1, TR_COMPLETED = 2, TR_FAILED = 3 };

/* One recorded collective, 64 bytes; strings are interned (tr_intern). */
typedef struct tr_entry {
  uint64_t seq;
  uint64_t count;
  int64_t t_created, t_started, t_completed;
  int64_t timeout_ns; /* -1: none */
  uint32_t epoch;
  int32_t peer;  /* root or peer, -1 none */
  int32_t rank;  /* rank in the communicator at that epoch, -1 unknown */
  int32_t size;  /* communicator size at that epoch, -1 unknown */
  uint8_t op;    /* interned op name */
  uint8_t dtype; /* interned dtype name */
  uint8_t state;
  uint8_t p2p;
  uint32_t name; /* interned collective name (a binding's, "nccl:all_reduce") + 1; 0 none */
} tr_entry_t;

/* One process's view of one communicator. */
typedef struct tr_comm {
  char *id;   /* matches the same communicator across ranks */
  char *name;
  char *pg_name, *pg_desc; /* a binding's process group (format 1.2), NULL none */
  uint64_t epoch;
  int rank, size;
  uint64_t capacity, recorded, dropped;
  int64_t last_enqueued, last_started, last_completed; /* -1 unknown */
  tr_entry_t *e;
  size_t n, cap_e;
} tr_comm_t;

enum tr_format { TR_FMT_FTCOMM = 1, TR_FMT_PYTORCH = 2 };

/* The coordinator's verdict a dump carries (format 1.1, "verdict"). */
typedef struct tr_dropped {
  int rank;      /* in the verdict's epoch */
  int slot;
  char *reason;  /* crashed, hung, left, lost (a newer word is kept as it is) */
  char *detail;  /* may be NULL */
} tr_dropped_t;

typedef struct tr_verdict {
  int present;         /* the dump has one */
  int64_t epoch;       /* the epoch it judges */
  int decided;
  int64_t next_epoch;  /* -1 when not decided */
  tr_dropped_t *dropped;
  size_t ndropped;
  char *pending;       /* why not decided; may be NULL */
} tr_verdict_t;

/* This rank's own failure (format 1.1, "failure"). */
typedef struct tr_failure {
  int present;
  int64_t epoch;
  char *status;  /* "timeout", "peer_lost", ... */
  int peer;      /* the rank its backend saw fail, -1 none */
} tr_failure_t;

typedef struct tr_dump {
  char *path;    /* as found in the directory */
  const char *file; /* basename, into path */
  int format;
  char version[32];
  char *job, *pod, *node, *host, *backend, *backend_version, *reason;
  int rank, world_size;
  int64_t epoch;
  int64_t trigger_wall_ns, trigger_mono_ns; /* 0 unknown */
  int truncated;
  tr_comm_t *comms;
  size_t ncomms;
  int superseded; /* an older dump of a rank that has a newer one */
  tr_failure_t failure;
  tr_verdict_t verdict;
} tr_dump_t;

/* A file that could not be used, and why. */
typedef struct tr_bad {
  char *path;
  const char *file;
  int rank_guess; /* from the name, -1 if none */
  int skipped;    /* 1: not a dump at all (ignored), 0: a broken dump */
  char why[512];
} tr_bad_t;

typedef struct tr_set {
  tr_dump_t *d;
  size_t nd;
  tr_bad_t *bad;
  size_t nbad;
} tr_set_t;

/* Interned short strings (op and dtype names); index < 256. */
int tr_intern(const char *s, size_t n);
const char *tr_str(int idx);

/* Load every dump in dir. Returns 0, or -1 with a message on stderr when the
 * directory itself cannot be read. Files that fail go to set->bad. */
int tr_load_dir(const char *dir, tr_set_t *set);
void tr_set_free(tr_set_t *set);

/* Parse one file held in buf (len bytes; buf[len] must be writable).
 * Returns 0 and fills *d, or -1 with *bad filled. */
int tr_parse_ftcomm(char *buf, size_t len, tr_dump_t *d, char *why, size_t whylen);
int tr_parse_pytorch(const char *buf, size_t len, int rank, tr_dump_t *d, char *why,
                     size_t whylen);
/* A PyTorch dump written as a pickle (what PyTorch writes on a timeout). */
int tr_parse_pytorch_pickle(const unsigned char *buf, size_t len, int rank, tr_dump_t *d,
                            char *why, size_t whylen);

/* Findings. */
enum tr_kind {
  TR_K_MISMATCH = 0, /* op, dtype, count or root differ from the majority */
  TR_K_NEVER_ENTERED,
  TR_K_MISSING_DUMP, /* a member of the communicator has no usable dump */
  TR_K_FAILED,
  TR_K_STUCK,        /* entered, not completed, while others completed */
  TR_K_ALL_STUCK,    /* every member in it past its timeout */
  TR_K_STRAGGLER,
  TR_K_BROKEN_FILE,
  TR_K_VERDICT,      /* the coordinator dropped ranks the dumps alone do not name */
  TR_K_COUNT
};

typedef struct tr_finding {
  int kind;
  int group; /* index into groups, -1 if not about one */
  uint64_t seq;
  int *ranks; /* global ranks (or comm ranks for members without a dump) */
  size_t nranks;
  char what[512];  /* one-line description */
  int64_t t_first; /* never_entered: when the first rank entered it (ns, 0 unknown) */
  int consequence; /* never_entered: each absent rank waits in another group's collective */
} tr_finding_t;

/* One communicator at one epoch, as seen by its members. */
typedef struct tr_member {
  int dump;      /* index into set->d, -1 if no dump */
  int comm;      /* index into that dump's comms */
  int comm_rank;
  int grank;     /* global rank of the dump, or -1 */
  size_t a, b;   /* collective entries of this epoch: e[a..b) sorted by seq */
} tr_member_t;

typedef struct tr_group {
  const char *comm_id, *comm_name;
  const char *pg_name, *pg_desc; /* NULL: none */
  uint64_t epoch;
  int latest;   /* the newest epoch of this communicator: decides the status */
  int size;
  tr_member_t *m;
  size_t nm;
  uint64_t lo, hi;  /* aligned window of sequence numbers */
  int diverged;
  uint64_t div_seq; /* first divergent seq when diverged */
  /* Expected (majority) call at div_seq. */
  int exp_op, exp_dtype, exp_peer;
  uint64_t exp_count;
  char note[256];
} tr_group_t;

/* What the dumps' verdicts say, and whether the dumps alone agree. */
enum tr_agreement {
  TR_AGREE_NONE = 0,   /* no dump carries a decided verdict */
  TR_AGREE_YES,        /* the dumps name the same ranks the coordinator dropped */
  TR_AGREE_NO,         /* they name others */
  TR_AGREE_SILENT,     /* the dumps alone name no culprit: the verdict does */
};

typedef struct tr_verdict_sum {
  int dump;            /* the dump whose verdict stands for the majority, -1: none decided */
  size_t with_verdict; /* dumps with a decided verdict */
  size_t agreeing;     /* of those, carrying the same one */
  size_t pending;      /* dumps whose verdict says it is not decided yet */
  int pending_dump;    /* one of them, -1 */
  int agreement;       /* enum tr_agreement */
  int *culprits;       /* the ranks the dumps alone name (primary finding), sorted */
  size_t nculprits;
  char text[1024];     /* one line for people: the verdict and how it compares */
} tr_verdict_sum_t;

typedef struct tr_incident tr_incident_t;

typedef struct tr_report {
  tr_group_t *g;
  size_t ng;
  tr_finding_t *f;
  size_t nf;
  int primary;       /* finding that makes the headline, -1 if healthy */
  int world_size;    /* majority over dumps */
  int ranks_present;
  int *missing;      /* global ranks without a usable dump */
  size_t nmissing;
  int exit_status;
  char headline[FTC_TRACE_HEADLINE_MAX];
  tr_verdict_sum_t verdict;
  const tr_incident_t *incident; /* the folder's incident.json, NULL: none (not owned) */
} tr_report_t;

void tr_analyze(tr_set_t *set, tr_report_t *rep);
void tr_report_free(tr_report_t *rep);

void tr_print_text(FILE *out, const tr_set_t *set, const tr_report_t *rep, int verbose);
int tr_print_json(FILE *out, const tr_set_t *set, const tr_report_t *rep);
int tr_write_html(const char *path, const tr_set_t *set, const tr_report_t *rep);

/* The coordinator's incident record in dir (incident.c): NULL when there is
 * none (or it is unreadable: said on stderr); its entry in set->bad (the
 * loader took it for a file that is no dump) is removed. */
tr_incident_t *tr_incident_load(const char *dir, tr_set_t *set);
/* The same from a buffer (len bytes): NULL with why filled when it is none. */
tr_incident_t *tr_incident_parse(const char *buf, size_t len, char *why, size_t whylen);
void tr_incident_free(tr_incident_t *inc);
/* After tr_analyze: the headline says why each missing rank has no dump,
 * and whom the coordinator dropped when no dump carries its verdict. */
void tr_incident_explain(const tr_incident_t *inc, tr_report_t *rep);
void tr_incident_print_text(FILE *out, const tr_incident_t *inc);
void *tr_incident_json(const tr_incident_t *inc); /* a new json_t */

/* Writes the set in PyTorch Flight Recorder's layout (format 2.10) into
 * outdir, one rank_<N> file per rank, as JSON or as a pickle (export.c).
 * 0, or -1 with a message on stderr. */
int tr_export_pytorch(const char *outdir, int pickle, const tr_set_t *set, const tr_report_t *rep);

/* "3", "0-4,6" ... into buf; long lists end with "... (N ranks)". */
const char *tr_rank_list(const int *ranks, size_t n, char *buf, size_t len);

void *tr_xmalloc(size_t n);
void *tr_xcalloc(size_t n, size_t k);
void *tr_xrealloc(void *p, size_t n);
char *tr_xstrndup(const char *s, size_t n);

#endif
