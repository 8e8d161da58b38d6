/*
 * retention.c - the dump volume's retention: the newest incidents per job,
 * and the folders of deleted (or re-created) TrainingJobs after
 * --dump-ttl-after-deletion. Every path below the volume is walked with
 * *at() calls on descriptors opened with O_NOFOLLOW, so a link planted in
 * the volume can neither be followed nor make a removal leave it.
 *
 * The sweep decides about a job's folder under the caller's hold, and what
 * it removes leaves its name there at once: it is renamed to a hidden
 * TRASH_PREFIX name beside it (one rename). The trash is emptied after the
 * hold is let go, in slices of at most slice_entries entries with the
 * caller's yield between them (which may stop the sweep: what is left is
 * trash, which the next sweep empties first).
 */
#include "retention.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftc_alloc.h"
#include "ftc_error.h"
#include "ftc_log.h"

#define MAX_DEPTH 32
/* An incident without .job-uid last written this long before the current
 * job was created is the earlier job's (room for clock skew between the
 * controller and the API server). */
#define UNSTAMPED_MARGIN_S 60
/* What a sweep is removing: renamed out of the way, emptied after. */
#define TRASH_PREFIX ".ftcomm-removing-"
#define SLICE_ENTRIES 256

void ftck_format_duration(int64_t s, char *buf, size_t n) {
  if (s < 0) s = 0;
  int64_t d = s / 86400, h = s % 86400 / 3600, m = s % 3600 / 60, sec = s % 60;
  int k = 0;
  buf[0] = '\0';
#define PART(v, u)                                                                    \
  if ((v) && k >= 0 && (size_t)k < n) k += snprintf(buf + k, n - (size_t)k, "%" PRId64 u, (v));
  PART(d, "d")
  PART(h, "h")
  PART(m, "m")
  PART(sec, "s")
#undef PART
  if (!buf[0]) snprintf(buf, n, "0s");
}

/* A name for a log line: at most 80 bytes, anything unprintable as '?'. */
static const char *printable(const char *s, char *buf, size_t n) {
  size_t i = 0;
  for (; s[i] && i + 4 < n && i < 80; i++) buf[i] = (s[i] < 0x20 || s[i] == 0x7f || s[i] == '"') ? '?' : s[i];
  if (s[i]) {
    memcpy(buf + i, "...", 3);
    i += 3;
  }
  buf[i] = '\0';
  return buf;
}

static int is_dns_label(const char *s, size_t len) {
  if (len == 0 || len > 63) return 0;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (c != '-' || i == 0 || i == len - 1)) return 0;
  }
  return 1;
}

static int is_dns_subdomain(const char *s) {
  size_t len = strlen(s);
  if (len == 0 || len > 253) return 0;
  for (const char *p = s;;) {
    const char *dot = strchr(p, '.');
    size_t l = dot ? (size_t)(dot - p) : strlen(p);
    if (!is_dns_label(p, l)) return 0;
    if (!dot) return 1;
    p = dot + 1;
  }
}

/* The names in directory dfd but "." and ".."; *out (free_names) gets *n. */
static int list_names(int dfd, char ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  int fd = dup(dfd);
  if (fd < 0) return -1;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -1;
  }
  rewinddir(d);
  char **v = NULL;
  size_t cap = 0;
  int rc = 0;
  struct dirent *de;
  errno = 0;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (*n == cap) {
      size_t nc = cap ? cap * 2 : 16;
      char **nv = ftc__realloc(v, nc * sizeof *nv);
      if (!nv) {
        rc = -1;
        errno = ENOMEM;
        break;
      }
      v = nv;
      cap = nc;
    }
    if (!(v[*n] = ftc__strdup(de->d_name))) {
      rc = -1;
      errno = ENOMEM;
      break;
    }
    (*n)++;
  }
  int err = errno;
  closedir(d);
  *out = v;
  errno = err;
  return rc;
}

static void free_names(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) ftc__free(v[i]);
  ftc__free(v);
}

/* A sweep of the folders of deleted jobs (below); its removals go in slices. */
typedef struct sweep {
  const ftck_retention_opts_t *o;
  ftck_retention_result_t *r;
  char ttl[32];
  int budget;  /* entries left in this slice */
  int stopped; /* the yield said stop */
  char **trash; /* names renamed out of the way under the hold, to empty after it */
  size_t ntrash;
} sweep_t;

/* One entry removed: the slice's budget; at its end the caller's yield.
 * sw NULL: no slices. */
static int slice_tick(sweep_t *sw) {
  if (!sw) return 0;
  if (sw->stopped) return -1;
  if (--sw->budget > 0) return 0;
  sw->budget = sw->o->slice_entries > 0 ? sw->o->slice_entries : SLICE_ENTRIES;
  sw->r->slices++;
  if (sw->o->yield && sw->o->yield(sw->o->ud)) sw->stopped = 1;
  return sw->stopped ? -1 : 0;
}

/* Remove entry `name` of directory dfd and everything below it, following
 * no link (a link is removed itself). 0, or -1 with errno of the first
 * failure (what could be removed is gone). With a sweep, in its slices
 * (slice_tick before each entry): -1 with errno EINTR when it was stopped,
 * the rest left. */
static int rm_tree_at(sweep_t *sw, int dfd, const char *name, int depth) {
  struct stat sb;
  if (slice_tick(sw) != 0) {
    errno = EINTR;
    return -1;
  }
  if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(sb.st_mode)) return unlinkat(dfd, name, 0) == 0 || errno == ENOENT ? 0 : -1;
  if (depth >= MAX_DEPTH) {
    errno = ELOOP;
    return -1;
  }
  int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  char **names;
  size_t n;
  int rc = 0, err = 0;
  if (list_names(fd, &names, &n) != 0) {
    rc = -1;
    err = errno;
  }
  for (size_t i = 0; i < n && !(sw && sw->stopped); i++)
    if (rm_tree_at(sw, fd, names[i], depth + 1) != 0 && !rc) {
      rc = -1;
      err = errno;
    }
  free_names(names, n);
  close(fd);
  if (sw && sw->stopped) {
    errno = EINTR;
    return -1;
  }
  if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && !rc) {
    rc = -1;
    err = errno;
  }
  errno = err;
  return rc;
}

/* A small regular file's text (trailing whitespace cut); its length, or -1
 * (errno; ENOENT: there is none). */
static ssize_t read_small(int dfd, const char *name, char *buf, size_t n) {
  int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat sb;
  ssize_t len = -1;
  if (fstat(fd, &sb) != 0) goto out_close;
  if (!S_ISREG(sb.st_mode)) {
    errno = EINVAL;
    goto out_close;
  }
  len = read(fd, buf, n - 1);
  if (len < 0) goto out_close;
  while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' ' || buf[len - 1] == '\r')) len--;
  buf[len] = '\0';
out_close:
  close(fd);
  return len;
}

/* Replace dfd/name with text, atomically, without following a link. */
static int write_small(int dfd, const char *name, const char *text) {
  char tmp[128];
  snprintf(tmp, sizeof tmp, "%s.tmp", name);
  unlinkat(dfd, tmp, 0);
  int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  size_t len = strlen(text);
  ssize_t w = write(fd, text, len);
  int err = errno;
  if (close(fd) != 0 && w == (ssize_t)len) {
    err = errno;
    w = -1;
  }
  if (w != (ssize_t)len || renameat(dfd, tmp, dfd, name) != 0) {
    if (w == (ssize_t)len) err = errno;
    unlinkat(dfd, tmp, 0);
    errno = err ? err : EIO;
    return -1;
  }
  return 0;
}

int ftck_stamp_incident(const char *incident_dir, const char *uid) {
  if (mkdir(incident_dir, 0755) != 0 && errno != EEXIST) return -1;
  int fd = open(incident_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[160];
  snprintf(text, sizeof text, "%s\n", uid);
  int rc = write_small(fd, FTCK_MARK_JOB_UID, text);
  int err = errno;
  close(fd);
  errno = err;
  return rc;
}

/* ---- the newest incidents per job ---- */

typedef struct aged {
  char *name;
  struct timespec mtime;
} aged_t;

static int newest_first(const void *a, const void *b) {
  const aged_t *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : -1;
  return strcmp(y->name, x->name);
}

int ftck_prune_incidents(const char *dir, int keep) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return 0;
  char **names;
  size_t nn, n = 0;
  int removed = 0;
  if (list_names(dfd, &names, &nn) != 0) FTC_WARN(FTC_SUB_CTRL, "cannot read %s: %s", dir, strerror(errno));
  aged_t *v = nn ? ftc__calloc(nn, sizeof *v) : NULL;
  for (size_t i = 0; v && i < nn; i++) {
    struct stat sb;
    if (names[i][0] == '.' || fstatat(dfd, names[i], &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(sb.st_mode)) continue;
    v[n].name = names[i];
    v[n++].mtime = sb.st_mtim;
  }
  if (n > (size_t)keep) qsort(v, n, sizeof *v, newest_first);
  for (size_t i = (size_t)keep; i < n; i++) {
    if (rm_tree_at(NULL, dfd, v[i].name, 0) == 0) {
      removed++;
      FTC_INFO(FTC_SUB_CTRL, "removed incident %s/%s (keeping the newest %d)", dir, v[i].name, keep);
    } else {
      FTC_WARN(FTC_SUB_CTRL, "cannot remove incident %s/%s: %s", dir, v[i].name, strerror(errno));
    }
  }
  ftc__free(v);
  free_names(names, nn);
  close(dfd);
  return removed;
}

/* ---- the folders of deleted jobs ---- */


/* Rename entry `name` of dfd to a fresh trash name (into trash[n]) beside
 * it. 0, or -1 (errno). */
static int to_trash(int dfd, const char *name, char *trash, size_t n) {
  static unsigned counter;
  for (int tries = 0; tries < 1000; tries++) {
    snprintf(trash, n, TRASH_PREFIX "%ld-%u", (long)getpid(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    if (renameat2(dfd, name, dfd, trash, RENAME_NOREPLACE) == 0) return 0;
    if (errno == EINVAL || errno == ENOSYS) { /* no RENAME_NOREPLACE here */
      struct stat sb;
      if (fstatat(dfd, trash, &sb, AT_SYMLINK_NOFOLLOW) == 0) continue;
      if (renameat(dfd, name, dfd, trash) == 0) return 0;
    }
    if (errno != EEXIST) return -1;
  }
  errno = EEXIST;
  return -1;
}

/* Remember trash name t of the folder being swept, to empty after the hold. */
static void trash_later(sweep_t *sw, const char *t) {
  char **v = ftc__realloc(sw->trash, (sw->ntrash + 1) * sizeof *v);
  if (!v) return; /* the next sweep finds it */
  sw->trash = v;
  if ((v[sw->ntrash] = ftc__strdup(t))) sw->ntrash++;
}

/* Empty and remove what trash_later kept, in dfd (no hold). */
static void empty_trash(sweep_t *sw, int dfd, const char *where) {
  for (size_t i = 0; i < sw->ntrash; i++) {
    if (!sw->stopped && rm_tree_at(sw, dfd, sw->trash[i], 0) != 0 && errno != EINTR) {
      sw->r->errors++;
      FTC_WARN(FTC_SUB_CTRL, "cannot remove %s/%s: %s; trying again at the next sweep", where, sw->trash[i],
               strerror(errno));
    }
    ftc__free(sw->trash[i]);
  }
  ftc__free(sw->trash);
  sw->trash = NULL;
  sw->ntrash = 0;
}

#define SKIP(sw, ...)                                                                  \
  do {                                                                                 \
    (sw)->r->skipped++;                                                                \
    FTC_LOG((sw)->o->quiet ? FTC_LOG_DEBUG : FTC_LOG_WARN, FTC_SUB_CTRL, __VA_ARGS__); \
  } while (0)

/* Why entry `name` of dfd is not a folder we may enter, or NULL; "" when
 * it went away meanwhile (nothing to say). */
static const char *not_a_folder(int dfd, const char *name) {
  struct stat sb;
  if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? "" : strerror(errno);
  if (S_ISLNK(sb.st_mode)) return "a symbolic link (never followed)";
  if (!S_ISDIR(sb.st_mode)) return "not a folder";
  return NULL;
}

/* Job ns/job is gone: mark when that was first seen; once the ttl has
 * passed since, remove its folder. */
static void job_gone(sweep_t *sw, int nfd, int jfd, const char *ns, const char *job) {
  const ftck_retention_opts_t *o = sw->o;
  char buf[64], *end;
  int64_t since = -1;
  ssize_t n = read_small(jfd, FTCK_MARK_DELETED, buf, sizeof buf);
  if (n > 0) {
    errno = 0;
    long long t = strtoll(buf, &end, 10);
    if (!errno && !*end && t > 0) since = t;
  }
  if (since < 0) {
    if (n >= 0 || errno != ENOENT)
      FTC_WARN(FTC_SUB_CTRL, "%s/%s/%s/%s is not a unix time; counting the job's absence from now", o->volume, ns,
               job, FTCK_MARK_DELETED);
    snprintf(buf, sizeof buf, "%lld\n", (long long)o->now_s);
    if (write_small(jfd, FTCK_MARK_DELETED, buf) != 0) {
      sw->r->errors++;
      FTC_WARN(FTC_SUB_CTRL, "cannot write %s/%s/%s/%s: %s; the folder of the deleted TrainingJob %s/%s stays",
               o->volume, ns, job, FTCK_MARK_DELETED, strerror(errno), ns, job);
      return;
    }
    sw->r->waiting++;
    FTC_INFO(FTC_SUB_CTRL, "TrainingJob %s/%s is gone; its dump folder %s/%s/%s will be removed in %s "
             "(--dump-ttl-after-deletion)", ns, job, o->volume, ns, job, sw->ttl);
    return;
  }
  if (o->now_s - since < o->ttl_s) {
    sw->r->waiting++;
    return;
  }
  char ago[32], trash[64];
  ftck_format_duration(o->now_s - since, ago, sizeof ago);
  if (to_trash(nfd, job, trash, sizeof trash) != 0) {
    sw->r->errors++;
    FTC_WARN(FTC_SUB_CTRL, "cannot remove %s/%s/%s, the dump folder of the deleted TrainingJob %s/%s: %s; trying "
             "again at the next sweep", o->volume, ns, job, ns, job, strerror(errno));
    return;
  }
  trash_later(sw, trash); /* emptied once the hold is let go */
  sw->r->deleted++;
  FTC_INFO(FTC_SUB_CTRL, "removed %s/%s/%s, the dump folder of TrainingJob %s/%s, gone for %s "
           "(--dump-ttl-after-deletion=%s)", o->volume, ns, job, ns, job, ago, sw->ttl);
}

/* Job ns/job exists: its folder stays; incidents of an earlier job of that
 * name go once the current one is ttl old, an interrupted sweep's trash at
 * once. */
static void job_present(sweep_t *sw, int jfd, const char *ns, const char *job, const ftck_job_ref_t *ref) {
  const ftck_retention_opts_t *o = sw->o;
  char pb[96];
  if (unlinkat(jfd, FTCK_MARK_DELETED, 0) == 0)
    FTC_INFO(FTC_SUB_CTRL, "TrainingJob %s/%s exists again; its dump folder stays", ns, job);
  /* Incidents of an earlier job go once this one is ttl old; an interrupted
   * sweep's trash goes whatever its age (the job may be new since). */
  int old_enough = ref->created_s >= 0 && o->now_s - ref->created_s >= o->ttl_s;
  char **names;
  size_t n;
  if (list_names(jfd, &names, &n) != 0) {
    sw->r->errors++;
    FTC_WARN(FTC_SUB_CTRL, "cannot read %s/%s/%s: %s", o->volume, ns, job, strerror(errno));
  }
  for (size_t i = 0; i < n; i++) {
    const char *inc = names[i], *why;
    if (!strncmp(inc, TRASH_PREFIX, strlen(TRASH_PREFIX))) {
      trash_later(sw, inc); /* an interrupted sweep's */
      continue;
    }
    if (!old_enough || inc[0] == '.') continue;
    if ((why = not_a_folder(jfd, inc))) {
      if (*why) SKIP(sw, "%s/%s/%s/%s: %s; left alone", o->volume, ns, job, printable(inc, pb, sizeof pb), why);
      continue;
    }
    int ifd = openat(jfd, inc, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (ifd < 0) continue;
    char uid[sizeof ref->uid];
    struct stat sb;
    int stamped = read_small(ifd, FTCK_MARK_JOB_UID, uid, sizeof uid) > 0 && ref->uid[0];
    int stale = stamped ? strcmp(uid, ref->uid) != 0
                        : fstat(ifd, &sb) == 0 && sb.st_mtim.tv_sec < ref->created_s - UNSTAMPED_MARGIN_S;
    close(ifd);
    if (!stale) continue;
    char trash[64];
    if (to_trash(jfd, inc, trash, sizeof trash) != 0) {
      sw->r->errors++;
      FTC_WARN(FTC_SUB_CTRL, "cannot remove %s/%s/%s/%s, an incident of an earlier TrainingJob %s/%s: %s", o->volume,
               ns, job, printable(inc, pb, sizeof pb), ns, job, strerror(errno));
      continue;
    }
    trash_later(sw, trash);
    sw->r->stale++;
    char whose[sizeof uid + 64];
    if (stamped) snprintf(whose, sizeof whose, "its %s says uid %s", FTCK_MARK_JOB_UID, uid);
    else snprintf(whose, sizeof whose, "no %s; last written before the current job was created", FTCK_MARK_JOB_UID);
    FTC_INFO(FTC_SUB_CTRL, "removed %s/%s/%s/%s, an incident of an earlier TrainingJob %s/%s (%s; the current "
             "one, uid %s, is older than --dump-ttl-after-deletion=%s)", o->volume, ns, job,
             printable(inc, pb, sizeof pb), ns, job, whose, ref->uid[0] ? ref->uid : "?", sw->ttl);
  }
  free_names(names, n);
}

static void sweep_job(sweep_t *sw, int nfd, const char *ns, const char *job) {
  const ftck_retention_opts_t *o = sw->o;
  if (o->hold) o->hold(o->ud, 1);
  const char *why = not_a_folder(nfd, job);
  int jfd = why ? -1 : openat(nfd, job, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (jfd < 0) {
    char pb[96];
    if (!why) why = strerror(errno);
    if (*why) SKIP(sw, "%s/%s/%s: %s; left alone", o->volume, ns, printable(job, pb, sizeof pb), why);
    goto out_release;
  }
  ftck_job_ref_t ref = {.uid = "", .created_s = -1};
  int live = o->lookup(o->ud, ns, job, &ref);
  if (live == 0) job_gone(sw, nfd, jfd, ns, job);
  else if (live > 0) job_present(sw, jfd, ns, job, &ref);
  if (o->hold) o->hold(o->ud, 0);
  char where[PATH_MAX];
  if (live == 0) { /* its folder, renamed beside it */
    snprintf(where, sizeof where, "%s/%s", o->volume, ns);
    empty_trash(sw, nfd, where);
  } else { /* incidents of an earlier job, renamed inside it */
    snprintf(where, sizeof where, "%s/%s/%s", o->volume, ns, job);
    empty_trash(sw, jfd, where);
  }
  close(jfd);
  return;
out_release:
  if (o->hold) o->hold(o->ud, 0);
}

ftc_status_t ftck_retention_sweep(const ftck_retention_opts_t *o, ftck_retention_result_t *r) {
  memset(r, 0, sizeof *r);
  sweep_t sw = {.o = o, .r = r, .budget = o->slice_entries > 0 ? o->slice_entries : SLICE_ENTRIES};
  ftck_format_duration(o->ttl_s, sw.ttl, sizeof sw.ttl);
  int vfd = open(o->volume, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* the volume itself may be a link */
  if (vfd < 0) {
    if (errno == ENOENT) return FTC_OK;
    return ftc__error(FTC_ERR_SYSTEM, "dump volume %s: %s", o->volume, strerror(errno));
  }
  char **nss;
  size_t nn;
  ftc_status_t st = FTC_OK;
  if (list_names(vfd, &nss, &nn) != 0)
    st = ftc__error(FTC_ERR_SYSTEM, "dump volume %s: %s", o->volume, strerror(errno));
  for (size_t i = 0; i < nn && !sw.stopped; i++) {
    const char *ns = nss[i], *why;
    char pb[96];
    if (ns[0] == '.' || (o->ns && o->ns[0] && strcmp(ns, o->ns) != 0)) continue;
    if (!is_dns_label(ns, strlen(ns))) {
      SKIP(&sw, "%s/%s: not a namespace name; left alone", o->volume, printable(ns, pb, sizeof pb));
      continue;
    }
    if ((why = not_a_folder(vfd, ns))) {
      if (*why) SKIP(&sw, "%s/%s: %s; left alone", o->volume, ns, why);
      continue;
    }
    int nfd = openat(vfd, ns, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nfd < 0) {
      SKIP(&sw, "%s/%s: %s; left alone", o->volume, ns, strerror(errno));
      continue;
    }
    char **jobs;
    size_t nj;
    if (list_names(nfd, &jobs, &nj) != 0) {
      r->errors++;
      FTC_WARN(FTC_SUB_CTRL, "cannot read %s/%s: %s", o->volume, ns, strerror(errno));
    }
    uint64_t before = r->deleted;
    for (size_t k = 0; k < nj && !sw.stopped; k++) {
      if (!strncmp(jobs[k], TRASH_PREFIX, strlen(TRASH_PREFIX))) { /* an interrupted sweep's */
        char where[PATH_MAX];
        snprintf(where, sizeof where, "%s/%s", o->volume, ns);
        trash_later(&sw, jobs[k]);
        empty_trash(&sw, nfd, where);
        before = (uint64_t)-1; /* the namespace may be empty now */
        continue;
      }
      if (jobs[k][0] == '.') continue;
      if (!is_dns_subdomain(jobs[k])) {
        SKIP(&sw, "%s/%s/%s: not a TrainingJob name; left alone", o->volume, ns, printable(jobs[k], pb, sizeof pb));
        continue;
      }
      sweep_job(&sw, nfd, ns, jobs[k]);
    }
    free_names(jobs, nj);
    close(nfd);
    if (r->deleted != before) { /* the namespace's last job folder may have gone */
      if (o->hold) o->hold(o->ud, 1);
      unlinkat(vfd, ns, AT_REMOVEDIR);
      if (o->hold) o->hold(o->ud, 0);
    }
  }
  free_names(nss, nn);
  close(vfd);
  r->stopped = sw.stopped;
  return st;
}
