/*
 * dump.c - writes the flight-recorder dump of this process: one JSON file
 * (docs/dump-format.md) covering every live recorder, and the process
 * identity shown at its top.
 *
 * A dump may be requested from any thread while collectives are recorded,
 * so it reads the rings through the per-slot generation, writes through one
 * static buffer under the dump lock (nothing is allocated), and bounds the
 * file by FTCOMM_DUMP_MAX_BYTES by leaving out the oldest entries. The file
 * appears atomically: written under a temporary name, fsynced, then linked
 * to a name that no earlier dump holds (an existing file is never replaced).
 * A capture (ftc_rec_capture) copies what a dump shows into memory at once,
 * to be written later by ftc_rec_capture_write: the recovery path takes one
 * when an epoch fails and writes it off its critical path, with the outcome
 * known by then (the rank's failure, the coordinator's verdict), which the
 * writer checks before it writes anything.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"
#include "ftc_param.h"
#include "ftc_time.h"
#include "rec_internal.h"

/* Upper bound of one entry's text, used to budget entries against the
 * size limit (16 numbers of at most 20 digits, names, separators). */
#define ENTRY_MAX_TEXT 400
/* Room kept for the header and per-communicator fields. */
#define HEADER_RESERVE 16384
#define PER_COMM_RESERVE 1024

static pthread_mutex_t info_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct proc_info {
  char job[FTC_REC_INFO_STR], pod[FTC_REC_INFO_STR], node[FTC_REC_INFO_STR];
  char backend[FTC_REC_INFO_STR], backend_version[FTC_REC_INFO_STR];
  char dump_dir[FTC_REC_INFO_STR];
  int rank, world_size;
  int64_t epoch;
} proc_info_t;
static proc_info_t info = {.rank = -1, .world_size = -1, .epoch = -1};

static void copy_field(char *dst, const char *src) {
  if (src) snprintf(dst, FTC_REC_INFO_STR, "%s", src);
}

void ftc_rec_set_process_info(const ftc_rec_process_info_t *in) {
  if (!in) return;
  pthread_mutex_lock(&info_lock);
  copy_field(info.job, in->job);
  copy_field(info.pod, in->pod);
  copy_field(info.node, in->node);
  copy_field(info.backend, in->backend);
  copy_field(info.backend_version, in->backend_version);
  copy_field(info.dump_dir, in->dump_dir);
  if (in->rank >= 0) info.rank = in->rank;
  if (in->world_size >= 0) info.world_size = in->world_size;
  if (in->epoch >= 0) info.epoch = in->epoch;
  pthread_mutex_unlock(&info_lock);
}

/* Everything below runs under dump_lock, which also guards the buffer. */
static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t dumps_written;

static struct writer {
  int fd;
  int err;          /* errno of the first failed write, 0 if none */
  size_t len;
  uint64_t total;
  char buf[1 << 16];
} w;

static void w_flush(void) {
  size_t off = 0;
  while (off < w.len && !w.err) {
    ssize_t n = write(w.fd, w.buf + off, w.len - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      w.err = errno;
      break;
    }
    off += (size_t)n;
  }
  w.total += w.len;
  w.len = 0;
}

static void w_put(const char *s, size_t n) {
  while (n > 0) {
    if (w.len == sizeof(w.buf)) w_flush();
    size_t k = sizeof(w.buf) - w.len < n ? sizeof(w.buf) - w.len : n;
    memcpy(w.buf + w.len, s, k);
    w.len += k;
    s += k;
    n -= k;
  }
}

__attribute__((format(printf, 1, 2))) static void w_printf(const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n < 0) return;
  w_put(tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A JSON string; control characters escaped, other bytes as they are. */
static void w_str(const char *s) {
  w_put("\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      w_put(e, 2);
    } else if (c < 0x20) {
      w_printf("\\u%04x", c);
    } else {
      w_put(s, 1);
    }
  }
  w_put("\"", 1);
}

#define W_LIT(lit) w_put(lit, sizeof(lit) - 1)

static void w_key_str(const char *key, const char *val) {
  w_printf("\"%s\":", key);
  w_str(val);
  w_put(",", 1);
}

/* The process info with unset fields filled from the environment. */
static void resolve_info(proc_info_t *out) {
  int64_t v;
  pthread_mutex_lock(&info_lock);
  *out = info;
  pthread_mutex_unlock(&info_lock);
  if (!out->job[0]) copy_field(out->job, ftc__param_str(FTC_P_JOB));
  if (!out->pod[0]) copy_field(out->pod, getenv("POD_NAME") ? getenv("POD_NAME") : getenv("HOSTNAME"));
  if (!out->node[0]) copy_field(out->node, getenv("NODE_NAME"));
  if (!out->dump_dir[0]) copy_field(out->dump_dir, ftc__param_str(FTC_P_DUMP_DIR));
  if (out->rank < 0 && ftc__param_int(FTC_P_SLOT, &v) == FTC_OK) out->rank = (int)v;
  if (out->world_size < 0 && ftc__param_int(FTC_P_WORLD_SIZE, &v) == FTC_OK)
    out->world_size = (int)v;
}

static int mkdir_p(const char *dir) {
  char path[4096];
  if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  for (char *p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0755) < 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(path, 0755) < 0 && errno != EEXIST) return -1;
  return 0;
}

static void write_entry(const ftc_rec_entry_t *e, int first) {
  int64_t dur = e->t_started && e->t_completed ? e->t_completed - e->t_started : -1;
  w_printf("%s\n[%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",\"%s\",\"%s\",%" PRIu64 ",%" PRIu64
           ",%d,%d,%d,\"%s\",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",",
           first ? "" : ",", e->id, e->epoch, e->seq, ftc_rec_op_name(e->op),
           ftc__rec_dtype_name(e->dtype), e->count, e->bytes, e->peer, e->rank, e->size,
           ftc_rec_state_name(e->state), e->t_created, e->t_started, e->t_completed, dur,
           e->timeout_ns);
  w_str(ftc_rec_name(e->name)); /* the last column: a 1.1 reader skips it */
  w_put("]", 1);
}

/* Entries of each recorder that fit: the newest ones, in proportion. */
static uint64_t entry_budget(uint64_t max_bytes, size_t ncomms, uint64_t total) {
  uint64_t reserve = HEADER_RESERVE + (uint64_t)ncomms * PER_COMM_RESERVE;
  uint64_t fit = max_bytes > reserve ? (max_bytes - reserve) / ENTRY_MAX_TEXT : 0;
  return fit < total ? fit : total;
}

static const char entry_fields[] =
    "\"entry_fields\":[\"id\",\"epoch\",\"seq\",\"op\",\"dtype\",\"count\",\"bytes\","
    "\"peer\",\"rank\",\"size\",\"state\",\"created_ns\",\"started_ns\",\"completed_ns\","
    "\"duration_ns\",\"timeout_ns\",\"name\"],\n\"communicators\":[";

/* One recorder as a dump shows it: its header fields, and the entries
 * from the live ring (cap == NULL) or from a capture. */
typedef struct comm_view {
  uint64_t comm_id;
  char name[64];
  char pg_name[FTC_REC_NAME_MAX], pg_desc[FTC_REC_NAME_MAX];
  ftc_rec_progress_t p;
  uint64_t ranks;
  size_t cap;
  uint64_t held, keep;
} comm_view_t;

struct ftc_rec_capture {
  proc_info_t pi;
  int64_t wall, mono;
  int truncated;
  size_t ncomms;
  comm_view_t *comms;
  ftc_rec_entry_t **entries; /* comms[i].keep consistent entries, n_entries[i] of them */
  size_t *entries_cap;       /* entries[i]'s length (at least comms[i].keep) */
  size_t *n_entries;
};

static void comm_view_of(const struct ftc_rec *r, uint64_t budget, uint64_t total,
                         comm_view_t *cv) {
  ftc_rec_progress(r, &cv->p);
  cv->comm_id = r->comm_id;
  snprintf(cv->name, sizeof(cv->name), "%s", r->name);
  memcpy(cv->pg_name, r->pg_name, sizeof(cv->pg_name));
  memcpy(cv->pg_desc, r->pg_desc, sizeof(cv->pg_desc));
  cv->ranks = __atomic_load_n(&r->cur_ranks, __ATOMIC_RELAXED);
  cv->cap = r->cap;
  cv->held = cv->p.recorded < r->cap ? cv->p.recorded : r->cap;
  cv->keep = total ? cv->held * budget / total : 0;
}

/* Entries that fit the budget, over every live recorder (registry lock held). */
static uint64_t live_budget(uint64_t max_bytes, size_t *ncomms_out, uint64_t *total_out) {
  size_t ncomms = 0;
  uint64_t total = 0;
  for (struct ftc_rec *r = ftc__rec_registry_head; r; r = r->next) {
    ftc_rec_progress_t p;
    ftc_rec_progress(r, &p);
    ncomms++;
    total += p.recorded < r->cap ? p.recorded : r->cap;
  }
  *ncomms_out = ncomms;
  *total_out = total;
  return entry_budget(max_bytes, ncomms, total);
}

static const char *const status_names[FTC_STATUS_COUNT] = {
    "ok",          "invalid_argument", "no_memory", "system",         "timeout",
    "peer_lost",   "revoked",          "auth",      "protocol",       "below_min_size",
    "not_supported", "backend",        "library_not_found", "in_progress", "aborted",
    "config",      "coordinator",      "internal",  "mismatch",
};

const char *ftc_rec_status_name(int status) {
  return status >= 0 && status < FTC_STATUS_COUNT ? status_names[status] : "unknown";
}

static const char *const drop_reasons[] = {"crashed", "hung", "left", "lost"};

int ftc_rec_drop_reason_known(const char *reason) {
  for (size_t i = 0; reason && i < sizeof(drop_reasons) / sizeof(drop_reasons[0]); i++)
    if (!strcmp(reason, drop_reasons[i])) return 1;
  return 0;
}

/* An outcome the writer can stand behind, or FTC_ERR_INVALID_ARGUMENT
 * saying what is wrong with it. */
static ftc_status_t check_outcome(const ftc_rec_outcome_t *o) {
  const char *what = "flight recorder: the outcome of the epoch";
  if (o->epoch < 0)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s has epoch %lld; want the epoch the dump describes",
                      what, (long long)o->epoch);
  if (o->failed && (o->status <= FTC_OK || o->status >= FTC_STATUS_COUNT))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                      "%s says this rank failed with status %d; want an error code 1 .. %d", what,
                      o->status, FTC_STATUS_COUNT - 1);
  if (o->failed && o->peer < -1)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s names peer %d; want a rank, or -1 for none",
                      what, o->peer);
  if (o->ndropped < 0 || (o->ndropped > 0 && !o->dropped))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s has %d dropped members%s", what, o->ndropped,
                      o->ndropped > 0 ? " but no list of them" : "");
  if (o->next_epoch < 0) {
    if (o->next_epoch != -1)
      return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s has next epoch %lld; want one after %lld, "
                        "or -1 for no verdict yet", what, (long long)o->next_epoch,
                        (long long)o->epoch);
    if (o->ndropped > 0)
      return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                        "%s drops %d members but names no next epoch that drops them", what,
                        o->ndropped);
    if (!o->pending || !*o->pending)
      return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                        "%s has no verdict (next epoch -1) and does not say why (pending)", what);
    return FTC_OK;
  }
  if (o->next_epoch <= o->epoch)
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: next epoch %lld is not after epoch %lld", what,
                      (long long)o->next_epoch, (long long)o->epoch);
  for (int i = 0; i < o->ndropped; i++) {
    const ftc_rec_dropped_t *d = &o->dropped[i];
    if (d->rank < 0)
      return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: dropped member %d has rank %d", what, i,
                        d->rank);
    if (d->slot < -1)
      return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s: rank %d has slot %d; want a slot or -1",
                        what, d->rank, d->slot);
    if (!ftc_rec_drop_reason_known(d->reason))
      return ftc__error(FTC_ERR_INVALID_ARGUMENT,
                        "%s: rank %d was dropped for \"%s\"; want crashed, hung, left or lost",
                        what, d->rank, d->reason ? d->reason : "(null)");
    for (int k = 0; k < i; k++)
      if (o->dropped[k].rank == d->rank)
        return ftc__error(FTC_ERR_INVALID_ARGUMENT, "%s names rank %d twice among the dropped",
                          what, d->rank);
  }
  return FTC_OK;
}

/* Longest coordinator's detail kept per dropped member. */
#define DETAIL_MAX 240

static void write_outcome(const ftc_rec_outcome_t *o) {
  if (o->failed)
    w_printf("\"failure\":{\"epoch\":%" PRId64 ",\"status\":\"%s\",\"code\":%d,\"message\":\"%s\","
             "\"peer\":%d},\n",
             o->epoch, ftc_rec_status_name(o->status), o->status,
             ftc_strerror((ftc_status_t)o->status), o->peer);
  w_printf("\"verdict\":{\"epoch\":%" PRId64 ",\"decided\":%s,", o->epoch,
           o->next_epoch >= 0 ? "true" : "false");
  if (o->next_epoch >= 0) {
    w_printf("\"next_epoch\":%" PRId64 ",\"dropped\":[", o->next_epoch);
    for (int i = 0; i < o->ndropped; i++) {
      const ftc_rec_dropped_t *d = &o->dropped[i];
      w_printf("%s{\"rank\":%d,\"slot\":%d,\"member_id\":%" PRIu64 ",\"reason\":\"%s\"",
               i ? "," : "", d->rank, d->slot, d->member_id, d->reason);
      if (d->detail && *d->detail) {
        char detail[DETAIL_MAX + 1];
        size_t len = strlen(d->detail);
        if (len > DETAIL_MAX) { /* cut at a character boundary */
          len = DETAIL_MAX;
          while (len > 0 && ((unsigned char)d->detail[len] & 0xc0) == 0x80) len--;
        }
        memcpy(detail, d->detail, len);
        detail[len] = '\0';
        W_LIT(",\"detail\":");
        w_str(detail);
      }
      w_put("}", 1);
    }
    W_LIT("]},\n");
  } else {
    W_LIT("\"next_epoch\":null,\"dropped\":[],\"pending\":");
    w_str(o->pending);
    W_LIT("},\n");
  }
}

static void write_header(const proc_info_t *pi, const char *reason, int64_t wall, int64_t mono,
                         const ftc_rec_outcome_t *o) {
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  time_t secs = (time_t)(wall / 1000000000LL);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char iso[64];
  snprintf(iso, sizeof(iso), "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           (long long)(wall % 1000000000LL));

  w_printf("{\"format\":\"%s\",\"version\":\"%d.%d\",", FTC_REC_FORMAT_NAME,
           FTC_REC_FORMAT_MAJOR, FTC_REC_FORMAT_MINOR);
  w_key_str("job", pi->job);
  w_key_str("pod", pi->pod);
  w_key_str("node", pi->node);
  w_key_str("host", host);
  w_printf("\"pid\":%ld,\"rank\":%d,\"world_size\":%d,\"epoch\":%" PRId64 ",", (long)getpid(),
           pi->rank, pi->world_size, pi->epoch);
  w_key_str("backend", pi->backend[0] ? pi->backend : "unknown");
  w_key_str("backend_version", pi->backend_version);
  w_printf("\"ftcomm_version\":\"%d.%d.%d\",", FTC_VERSION_MAJOR, FTC_VERSION_MINOR,
           FTC_VERSION_PATCH);
  w_key_str("reason", reason);
  w_printf("\"trigger_time_ns\":%" PRId64 ",\"trigger_time\":\"%s\",\"trigger_monotonic_ns\":%" PRId64
           ",",
           wall, iso, mono);
  if (o) write_outcome(o);
  w_put(entry_fields, sizeof(entry_fields) - 1);
}

static void write_comm_head(const comm_view_t *cv, int first_comm) {
  w_printf("%s\n{\"id\":\"%016" PRIx64 "\",", first_comm ? "" : ",", cv->comm_id);
  w_key_str("name", cv->name);
  w_key_str("pg_name", cv->pg_name);
  w_key_str("pg_desc", cv->pg_desc);
  w_printf("\"epoch\":%" PRIu64 ",\"rank\":%d,\"size\":%d,\"capacity\":%zu,\"recorded\":%" PRIu64
           ",\"dropped\":%" PRIu64 ",\"last_enqueued_seq\":%" PRIu64
           ",\"last_started_seq\":%" PRIu64 ",\"last_completed_seq\":%" PRIu64
           ",\"entries\":[",
           cv->p.epoch, (int)(int32_t)(uint32_t)cv->ranks, (int)(int32_t)(uint32_t)(cv->ranks >> 32),
           cv->cap, cv->p.recorded, cv->held - cv->keep, cv->p.last_enqueued, cv->p.last_started,
           cv->p.last_completed);
}

/* The dump's text from the live rings (registry lock held), or from c. */
static void write_body(const proc_info_t *pi, const char *reason, int64_t wall, int64_t mono,
                       uint64_t max_bytes, const struct ftc_rec_capture *c,
                       const ftc_rec_outcome_t *o) {
  write_header(pi, reason, wall, mono, o);
  int truncated;
  if (c) {
    for (size_t i = 0; i < c->ncomms; i++) {
      write_comm_head(&c->comms[i], i == 0);
      for (size_t k = 0; k < c->n_entries[i]; k++) write_entry(&c->entries[i][k], k == 0);
      w_put("]}", 2);
    }
    truncated = c->truncated;
  } else {
    size_t ncomms;
    uint64_t total;
    uint64_t budget = live_budget(max_bytes, &ncomms, &total);
    truncated = budget < total;
    int first_comm = 1;
    for (struct ftc_rec *r = ftc__rec_registry_head; r; r = r->next) {
      comm_view_t cv;
      comm_view_of(r, budget, total, &cv);
      write_comm_head(&cv, first_comm);
      int first = 1;
      for (uint64_t id = cv.p.recorded - cv.keep; id < cv.p.recorded; id++) {
        ftc_rec_entry_t e;
        if (!ftc__rec_read(r, id, &e)) continue;
        write_entry(&e, first);
        first = 0;
      }
      w_put("]}", 2);
      first_comm = 0;
    }
  }
  w_printf("],\n\"truncated\":%s}\n", truncated ? "true" : "false");
}

/* Link tmp to a fresh rank-<r>-<stamp>-<pid>-<n>.json; never replaces. */
static int publish(int dfd, const char *tmp, int rank, int64_t wall, char *name, size_t cap) {
  time_t secs = (time_t)(wall / 1000000000LL);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char stamp[32];
  strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
  for (uint64_t n = dumps_written;; n++) {
    snprintf(name, cap, "rank-%d-%s-%ld-%" PRIu64 ".json", rank, stamp, (long)getpid(), n);
    if (linkat(dfd, tmp, dfd, name, 0) == 0) return 0;
    if (errno == EEXIST) continue;
    if (errno != EPERM && errno != EOPNOTSUPP && errno != ENOSYS) return -1;
    /* No hard links on this file system: rename, still refusing to replace. */
    if (renameat2(dfd, tmp, dfd, name, RENAME_NOREPLACE) == 0) return 1;
    if (errno != EEXIST) return -1;
  }
}

/* Write the dump (write_body; the live rings when c is NULL) to tmp in dfd
 * (the folder dirbuf), fsynced and closed. FTC_ERR_SYSTEM with the error
 * set when it cannot be made or written (tmp may be left: the caller
 * removes it). dump_lock held. */
static ftc_status_t write_tmp(int dfd, const char *dirbuf, const char *tmp, const proc_info_t *pi,
                              const char *reason, int64_t wall, int64_t mono, uint64_t max_bytes,
                              const struct ftc_rec_capture *c, const ftc_rec_outcome_t *o) {
  w.fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w.fd < 0)
    return ftc__error(FTC_ERR_SYSTEM, "flight recorder: cannot create %s/%s: %s", dirbuf, tmp,
                      strerror(errno));
  w.err = 0;
  w.len = 0;
  w.total = 0;
  if (c) {
    write_body(pi, reason, wall, mono, max_bytes, c, o);
  } else {
    pthread_mutex_lock(&ftc__rec_registry_lock);
    write_body(pi, reason, wall, mono, max_bytes, NULL, NULL);
    pthread_mutex_unlock(&ftc__rec_registry_lock);
  }
  w_flush();
  if (!w.err && fsync(w.fd) < 0) w.err = errno;
  close(w.fd);
  if (w.err)
    return ftc__error(FTC_ERR_SYSTEM, "flight recorder: writing %s/%s failed: %s", dirbuf, tmp,
                      strerror(w.err));
  return FTC_OK;
}

/* Write the dump of the live rings (c NULL) or of a capture. */
static ftc_status_t dump_file(const struct ftc_rec_capture *c, const char *dir, const char *reason,
                              const ftc_rec_outcome_t *o, char *path, size_t path_len) {
  ftc_status_t st = FTC_OK;
  int64_t max_bytes = 0;
  char tmp[128], name[256], dirbuf[FTC_REC_INFO_STR];
  int64_t wall = c ? c->wall : ftc__wall_ns(), mono = c ? c->mono : ftc__now_ns();
  if (!reason || !*reason) reason = "api";
  ftc__param_int(FTC_P_DUMP_MAX_BYTES, &max_bytes);

  proc_info_t pi;
  if (c)
    pi = c->pi;
  else
    resolve_info(&pi);
  pthread_mutex_lock(&dump_lock);
  snprintf(dirbuf, sizeof(dirbuf), "%s", dir ? dir : pi.dump_dir);
  int rank = pi.rank;
  if (mkdir_p(dirbuf) < 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "flight recorder: cannot create dump directory %s: %s",
                    dirbuf, strerror(errno));
    goto out_unlock_dump;
  }
  int dfd = open(dirbuf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "flight recorder: cannot open dump directory %s: %s",
                    dirbuf, strerror(errno));
    goto out_unlock_dump;
  }
  snprintf(tmp, sizeof(tmp), ".rank-%d-%ld-%" PRIu64 ".json.tmp", rank, (long)getpid(),
           dumps_written);
  if ((st = write_tmp(dfd, dirbuf, tmp, &pi, reason, wall, mono, (uint64_t)max_bytes, c, o)) != FTC_OK)
    goto out_remove_tmp;
  int how = publish(dfd, tmp, rank, wall, name, sizeof(name));
  if (how < 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "flight recorder: cannot publish dump in %s: %s", dirbuf,
                    strerror(errno));
    goto out_remove_tmp;
  }
  if (how == 0) unlinkat(dfd, tmp, 0);
  fsync(dfd);
  dumps_written++;
  if (path && path_len) snprintf(path, path_len, "%s/%s", dirbuf, name);
  FTC_INFO(FTC_SUB_RECORDER, "flight recorder: wrote %s/%s (%s, %llu bytes)", dirbuf, name,
           reason, (unsigned long long)w.total);
  close(dfd);
  pthread_mutex_unlock(&dump_lock);
  return FTC_OK;

out_remove_tmp:
  unlinkat(dfd, tmp, 0);
  close(dfd);
out_unlock_dump:
  FTC_WARN(FTC_SUB_RECORDER, "%s", ftc_last_error());
  pthread_mutex_unlock(&dump_lock);
  return st;
}

ftc_status_t ftc_rec_dump(const char *dir, const char *reason, char *path, size_t path_len) {
  return dump_file(NULL, dir, reason, NULL, path, path_len);
}

/* ---- capture buffers kept between captures (rec_internal.h) ---- */

#define POOL_SLOTS 4
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  ftc_rec_entry_t *buf;
  size_t n;
} pool[POOL_SLOTS];

/* An array of at least n entries: the smallest kept one that is large
 * enough (a small communicator's capture does not take a large ring's),
 * else a new one. */
static ftc_rec_entry_t *pool_take(size_t n, size_t *got) {
  pthread_mutex_lock(&pool_lock);
  int best = -1;
  for (int i = 0; i < POOL_SLOTS; i++)
    if (pool[i].buf && pool[i].n >= n && (best < 0 || pool[i].n < pool[best].n)) best = i;
  if (best >= 0) {
    ftc_rec_entry_t *b = pool[best].buf;
    *got = pool[best].n;
    pool[best].buf = NULL;
    pool[best].n = 0;
    pthread_mutex_unlock(&pool_lock);
    return b;
  }
  pthread_mutex_unlock(&pool_lock);
  *got = n;
  return ftc__malloc(n * sizeof(ftc_rec_entry_t));
}

/* Keep b (n entries) for a later capture, or free it: when every slot is
 * taken, or when it is larger than a kept array may be (a capture of a
 * ring over FTC__REC_POOL_MAX_BYTES, up to FTCOMM_DUMP_MAX_BYTES). */
static void pool_give(ftc_rec_entry_t *b, size_t n) {
  if (!b) return;
  if (!n || n > FTC__REC_POOL_MAX_BYTES / sizeof(ftc_rec_entry_t)) {
    ftc__free(b);
    return;
  }
  pthread_mutex_lock(&pool_lock);
  for (int i = 0; i < POOL_SLOTS; i++) {
    if (!pool[i].buf) {
      pool[i].buf = b;
      pool[i].n = n;
      pthread_mutex_unlock(&pool_lock);
      return;
    }
  }
  pthread_mutex_unlock(&pool_lock);
  ftc__free(b);
}

void ftc__rec_pool_reserve(size_t n, size_t want) {
  if (want > POOL_SLOTS) want = POOL_SLOTS;
  pthread_mutex_lock(&pool_lock);
  size_t have = 0;
  int free_slot = 0;
  for (int i = 0; i < POOL_SLOTS; i++) {
    if (pool[i].buf && pool[i].n >= n) have++;
    if (!pool[i].buf) free_slot = 1;
  }
  pthread_mutex_unlock(&pool_lock);
  if (have >= want || !free_slot) return;
  /* calloc may hand out pages the kernel has not mapped yet: touch them */
  ftc_rec_entry_t *b = ftc__malloc(n * sizeof(*b));
  if (!b) return; /* the capture allocates then */
  memset(b, 0, n * sizeof(*b));
  pool_give(b, n);
}

void ftc__rec_pool_drain(void) {
  pthread_mutex_lock(&pool_lock);
  for (int i = 0; i < POOL_SLOTS; i++) {
    ftc__free(pool[i].buf);
    pool[i].buf = NULL;
    pool[i].n = 0;
  }
  pthread_mutex_unlock(&pool_lock);
}

void ftc_rec_capture_free(ftc_rec_capture_t *c) {
  if (!c) return;
  for (size_t i = 0; c->entries && i < c->ncomms; i++)
    pool_give(c->entries[i], c->entries_cap ? c->entries_cap[i] : 0);
  ftc__free(c->entries_cap);
  ftc__free(c->entries);
  ftc__free(c->n_entries);
  ftc__free(c->comms);
  ftc__free(c);
}

ftc_rec_capture_t *ftc_rec_capture(void) {
  int64_t max_bytes = 0;
  ftc__param_int(FTC_P_DUMP_MAX_BYTES, &max_bytes);
  ftc_rec_capture_t *c = ftc__calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->wall = ftc__wall_ns();
  c->mono = ftc__now_ns();
  resolve_info(&c->pi);
  pthread_mutex_lock(&ftc__rec_registry_lock);
  size_t ncomms;
  uint64_t total;
  uint64_t budget = live_budget((uint64_t)max_bytes, &ncomms, &total);
  c->truncated = budget < total;
  c->ncomms = ncomms;
  size_t n = ncomms ? ncomms : 1;
  c->comms = ftc__calloc(n, sizeof(*c->comms));
  c->entries = ftc__calloc(n, sizeof(*c->entries));
  c->n_entries = ftc__calloc(n, sizeof(*c->n_entries));
  c->entries_cap = ftc__calloc(n, sizeof(*c->entries_cap));
  int ok = c->comms && c->entries && c->n_entries && c->entries_cap;
  size_t i = 0;
  for (struct ftc_rec *r = ftc__rec_registry_head; ok && r; r = r->next, i++) {
    comm_view_t *cv = &c->comms[i];
    comm_view_of(r, budget, total, cv);
    if (!cv->keep) continue;
    if (!(c->entries[i] = pool_take((size_t)cv->keep, &c->entries_cap[i]))) {
      ok = 0;
      break;
    }
    for (uint64_t id = cv->p.recorded - cv->keep; id < cv->p.recorded; id++)
      if (ftc__rec_read(r, id, &c->entries[i][c->n_entries[i]])) c->n_entries[i]++;
  }
  pthread_mutex_unlock(&ftc__rec_registry_lock);
  if (!ok) {
    ftc_rec_capture_free(c);
    return NULL;
  }
  return c;
}

int64_t ftc_rec_capture_time_ns(const ftc_rec_capture_t *c) { return c ? c->mono : 0; }

ftc_status_t ftc_rec_capture_write(const ftc_rec_capture_t *c, const char *dir, const char *reason,
                                   char *path, size_t path_len) {
  if (!c) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "flight recorder: no capture to write");
  return dump_file(c, dir, reason, NULL, path, path_len);
}

ftc_status_t ftc_rec_capture_write_outcome(const ftc_rec_capture_t *c, const char *dir,
                                           const char *reason, const ftc_rec_outcome_t *o,
                                           char *path, size_t path_len) {
  if (!c) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "flight recorder: no capture to write");
  if (o) {
    ftc_status_t st = check_outcome(o);
    if (st != FTC_OK) return st;
  }
  return dump_file(c, dir, reason, o, path, path_len);
}

ftc_status_t ftc_rec_capture_rewrite_outcome(const ftc_rec_capture_t *c, const char *path,
                                             const char *reason, const ftc_rec_outcome_t *o) {
  if (!c || !path || !o) return ftc__error(FTC_ERR_INVALID_ARGUMENT, "flight recorder: no capture, path or outcome to rewrite");
  ftc_status_t st = check_outcome(o);
  if (st != FTC_OK) return st;
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  char dirbuf[FTC_REC_INFO_STR], tmp[320];
  if (!*name || name[0] == '.' || strlen(name) > 255 ||
      (slash && (size_t)(slash - path) >= sizeof(dirbuf)))
    return ftc__error(FTC_ERR_INVALID_ARGUMENT, "flight recorder: %s is not the path of a dump", path);
  if (slash)
    snprintf(dirbuf, sizeof(dirbuf), "%.*s", (int)(slash - path) ? (int)(slash - path) : 1, path);
  else
    snprintf(dirbuf, sizeof(dirbuf), ".");
  if (!reason || !*reason) reason = "api";
  int64_t max_bytes = 0;
  ftc__param_int(FTC_P_DUMP_MAX_BYTES, &max_bytes);
  pthread_mutex_lock(&dump_lock);
  int dfd = open(dirbuf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    st = ftc__error(FTC_ERR_SYSTEM, "flight recorder: cannot open dump directory %s: %s", dirbuf,
                    strerror(errno));
    goto out_unlock_dump;
  }
  snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
  if ((st = write_tmp(dfd, dirbuf, tmp, &c->pi, reason, c->wall, c->mono, (uint64_t)max_bytes, c, o)) !=
      FTC_OK)
    goto out_remove_tmp;
  /* Swapped in whole, and only over the dump itself: a dump that was
   * removed meanwhile (collected, cleaned up) is not written again, and
   * what is not a file is not replaced. */
  struct stat sb;
  int err = fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ? errno : !S_ISREG(sb.st_mode) ? EISDIR : 0;
  if (!err && renameat2(dfd, tmp, dfd, name, RENAME_EXCHANGE) != 0) {
    err = errno;
    if (err == EINVAL || err == ENOSYS || err == EOPNOTSUPP) /* no exchange on this file system */
      err = renameat(dfd, tmp, dfd, name) == 0 ? 0 : errno;
  } else if (!err && (fstatat(dfd, tmp, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))) {
    renameat2(dfd, tmp, dfd, name, RENAME_EXCHANGE); /* it changed under us: put it back */
    err = EISDIR;
  }
  if (err) {
    st = ftc__error(FTC_ERR_SYSTEM, "flight recorder: cannot replace %s: %s", path,
                    err == ENOENT ? "it is gone (removed after it was written)"
                    : err == EISDIR ? "it is not a regular file" : strerror(err));
    goto out_remove_tmp;
  }
  unlinkat(dfd, tmp, 0); /* the earlier text, after an exchange */
  fsync(dfd);
  FTC_INFO(FTC_SUB_RECORDER, "flight recorder: rewrote %s (%s, %llu bytes)", path, reason,
           (unsigned long long)w.total);
  close(dfd);
  pthread_mutex_unlock(&dump_lock);
  return FTC_OK;

out_remove_tmp:
  unlinkat(dfd, tmp, 0);
  close(dfd);
out_unlock_dump:
  FTC_WARN(FTC_SUB_RECORDER, "%s", ftc_last_error());
  pthread_mutex_unlock(&dump_lock);
  return st;
}

uint64_t ftc_rec_dump_count(void) {
  pthread_mutex_lock(&dump_lock);
  uint64_t n = dumps_written;
  pthread_mutex_unlock(&dump_lock);
  return n;
}
