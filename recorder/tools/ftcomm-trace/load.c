/*
 * load.c - finds and reads the dumps of a directory for ftcomm-trace.
 *
 * Every regular file that is not hidden is tried, on a few threads: a
 * pickle (PyTorch's own dumps) goes to the pickle reader; JSON whose first
 * key only PyTorch writes to the PyTorch Flight Recorder JSON reader; other
 * JSON to the fast ftcomm reader first, then the PyTorch reader. A file that is
 * broken (not JSON, truncated, a newer format) is kept in the list of bad
 * files with the reason, by name, and the others are still analyzed. When
 * a rank left several dumps, the newest one counts and the others are
 * marked superseded.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ftc_alloc.h"
#include "trace.h"

void *tr_xmalloc(size_t n) {
  void *p = ftc__malloc(n);
  if (!p) {
    fprintf(stderr, "ftcomm-trace: out of memory (%zu bytes)\n", n);
    exit(TR_EXIT_UNUSABLE);
  }
  return p;
}

void *tr_xcalloc(size_t n, size_t k) {
  void *p = ftc__calloc(n, k);
  if (!p) {
    fprintf(stderr, "ftcomm-trace: out of memory\n");
    exit(TR_EXIT_UNUSABLE);
  }
  return p;
}

void *tr_xrealloc(void *p, size_t n) {
  void *q = ftc__realloc(p, n);
  if (!q) {
    fprintf(stderr, "ftcomm-trace: out of memory (%zu bytes)\n", n);
    exit(TR_EXIT_UNUSABLE);
  }
  return q;
}

char *tr_xstrndup(const char *s, size_t n) {
  char *d = tr_xmalloc(n + 1);
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

/* Interned names, shared by the loader threads. Readers cache the index
 * they got, so the lock is taken a few times per file. */
static char *interned[256];
static size_t interned_len[256];
static int ninterned;
static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;

int tr_intern(const char *s, size_t n) {
  pthread_mutex_lock(&intern_lock);
  int i;
  for (i = 0; i < ninterned; i++)
    if (interned_len[i] == n && !memcmp(interned[i], s, n)) break;
  if (i == ninterned && ninterned < 255) {
    interned[i] = tr_xstrndup(s, n);
    interned_len[i] = n;
    __atomic_store_n(&ninterned, i + 1, __ATOMIC_RELEASE);
  }
  /* At 255 names, index 255 stands for "other". */
  pthread_mutex_unlock(&intern_lock);
  return i;
}

const char *tr_str(int idx) {
  int n = __atomic_load_n(&ninterned, __ATOMIC_ACQUIRE);
  if (idx == 255 && n == 255) return "other";
  return idx >= 0 && idx < n ? interned[idx] : "?";
}

static void dump_free(tr_dump_t *d) {
  for (size_t i = 0; i < d->ncomms; i++) {
    ftc__free(d->comms[i].id);
    ftc__free(d->comms[i].name);
    ftc__free(d->comms[i].pg_name);
    ftc__free(d->comms[i].pg_desc);
    ftc__free(d->comms[i].e);
  }
  ftc__free(d->comms);
  for (size_t i = 0; i < d->verdict.ndropped; i++) {
    ftc__free(d->verdict.dropped[i].reason);
    ftc__free(d->verdict.dropped[i].detail);
  }
  ftc__free(d->verdict.dropped);
  ftc__free(d->verdict.pending);
  ftc__free(d->failure.status);
  ftc__free(d->job);
  ftc__free(d->pod);
  ftc__free(d->node);
  ftc__free(d->host);
  ftc__free(d->backend);
  ftc__free(d->backend_version);
  ftc__free(d->reason);
  ftc__free(d->path);
  memset(d, 0, sizeof(*d));
}

void tr_set_free(tr_set_t *set) {
  for (size_t i = 0; i < set->nd; i++) dump_free(&set->d[i]);
  ftc__free(set->d);
  for (size_t i = 0; i < set->nbad; i++) ftc__free(set->bad[i].path);
  ftc__free(set->bad);
  memset(set, 0, sizeof(*set));
}

/* The rank a file name suggests: rank-<r>-..., or the digits that end
 * PyTorch's <prefix><rank>[.json]. */
static int digits_rank(const char *p) {
  long v = 0;
  for (; *p >= '0' && *p <= '9'; p++)
    if ((v = v * 10 + (*p - '0')) >= TR_MAX_RANKS) return -1; /* no rank of a job */
  return (int)v;
}

static int rank_from_name(const char *name) {
  if (!strncmp(name, "rank-", 5) && name[5] >= '0' && name[5] <= '9') return digits_rank(name + 5);
  const char *end = name + strlen(name);
  if (end - name > 5 && !strcmp(end - 5, ".json")) end -= 5;
  const char *p = end;
  while (p > name && p[-1] >= '0' && p[-1] <= '9') p--;
  return p < end ? digits_rank(p) : -1;
}

static int read_file(const char *path, char **buf, size_t *cap, size_t *len, char *why,
                     size_t whylen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(why, whylen, "cannot open: %s", strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) < 0) {
    snprintf(why, whylen, "cannot stat: %s", strerror(errno));
    goto out_close;
  }
  size_t want = (size_t)st.st_size + 1;
  if (want > *cap) {
    ftc__free(*buf);
    *cap = want + want / 4;
    *buf = tr_xmalloc(*cap);
  }
  *len = 0;
  for (;;) {
    if (*len + 1 >= *cap) {
      *cap *= 2;
      *buf = tr_xrealloc(*buf, *cap);
    }
    ssize_t n = read(fd, *buf + *len, *cap - *len - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      snprintf(why, whylen, "cannot read: %s", strerror(errno));
      goto out_close;
    }
    if (n == 0) break;
    *len += (size_t)n;
  }
  (*buf)[*len] = '\0';
  close(fd);
  return 0;
out_close:
  close(fd);
  return -1;
}

static void add_bad(tr_set_t *set, size_t *cap, const char *path, int skipped, const char *why) {
  if (set->nbad == *cap) {
    *cap = *cap ? 2 * *cap : 8;
    set->bad = tr_xrealloc(set->bad, *cap * sizeof(*set->bad));
  }
  tr_bad_t *b = &set->bad[set->nbad++];
  b->path = tr_xstrndup(path, strlen(path));
  b->file = strrchr(b->path, '/') ? strrchr(b->path, '/') + 1 : b->path;
  b->rank_guess = rank_from_name(b->file);
  b->skipped = skipped;
  snprintf(b->why, sizeof(b->why), "%s", why);
}

/* Why a buffer is not valid JSON, in jansson's words. */
static void json_why(const char *buf, size_t len, char *why, size_t whylen) {
  if (len == 0) {
    snprintf(why, whylen, "empty file");
    return;
  }
  json_error_t err;
  json_t *j = json_loadb(buf, len, JSON_DECODE_ANY, &err);
  if (j) {
    json_decref(j);
    return;
  }
  snprintf(why, whylen, "not valid JSON: %s (line %d, column %d)%s", err.text, err.line,
           err.column, err.position >= (int)len - 1 ? "; the file looks truncated" : "");
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int by_rank_then_time(const void *a, const void *b) {
  const tr_dump_t *x = a, *y = b;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  if (x->trigger_wall_ns != y->trigger_wall_ns) return x->trigger_wall_ns < y->trigger_wall_ns ? -1 : 1;
  return strcmp(x->file, y->file);
}

/* What became of one file. */
enum { F_SKIP = 0, F_DUMP, F_BAD, F_IGNORED };
typedef struct job {
  const char *dir;
  char **names;
  size_t nn;
  size_t next; /* next file to take, atomically */
  tr_dump_t *d;
  int *status;
  char (*why)[512];
} job_t;

/* Whether buf is JSON whose first key is one only PyTorch's dumps have
 * (nlohmann writes keys sorted: "comm_lib_version" comes first), read
 * without changing buf: such a file goes to the PyTorch reader at once,
 * not through the ftcomm reader, which changes the text it reads. */
static int pytorch_json_first(const char *buf, size_t len) {
  static const char *const keys[] = {"comm_lib_version", "entries", "nccl_comm_state", "pg_config",
                                     "pg_status"};
  const char *p = buf, *end = buf + len;
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  if (p == end || *p++ != '{') return 0;
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  if (p == end || *p++ != '"') return 0;
  const char *k = p;
  while (p < end && *p != '"' && *p != '\\') p++;
  if (p == end || *p != '"') return 0;
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
    if ((size_t)(p - k) == strlen(keys[i]) && !memcmp(k, keys[i], (size_t)(p - k))) return 1;
  return 0;
}

static int load_one(const char *dir, const char *name, tr_dump_t *d, char *why, size_t whylen,
                    char **buf, size_t *bufcap) {
  char path[4096];
  size_t len;
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  struct stat st;
  if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) return F_SKIP;
  const char *ext = strrchr(name, '.');
  if (ext && (!strcmp(ext, ".html") || !strcmp(ext, ".txt") || !strcmp(ext, ".md") ||
              !strcmp(ext, ".tmp")))
    return F_SKIP;
  memset(d, 0, sizeof(*d));
  why[0] = '\0';
  if (read_file(path, buf, bufcap, &len, why, whylen) < 0) return F_BAD;
  int rc, pytorch = 0;
  if (len && (unsigned char)(*buf)[0] == 0x80) /* PROTO: a pickle, as PyTorch writes on a timeout */
    rc = tr_parse_pytorch_pickle((const unsigned char *)*buf, len, rank_from_name(name), d, why, whylen);
  else if ((pytorch = pytorch_json_first(*buf, len)))
    rc = tr_parse_pytorch(*buf, len, rank_from_name(name), d, why, whylen);
  else rc = tr_parse_ftcomm(*buf, len, d, why, whylen);
  if (rc == 1 && pytorch) {
    dump_free(d);
    snprintf(why, whylen, "not a flight-recorder dump (ignored)");
    return F_IGNORED;
  } else if (rc == 1) {
    /* Not ours. The fast reader may have unescaped strings in place: read
     * the file again for jansson. */
    dump_free(d);
    if (read_file(path, buf, bufcap, &len, why, whylen) < 0) return F_BAD;
    rc = tr_parse_pytorch(*buf, len, rank_from_name(name), d, why, whylen);
    if (rc == 1) {
      dump_free(d);
      snprintf(why, whylen, "not a flight-recorder dump (ignored)");
      return F_IGNORED;
    }
  } else if (rc < 0 && strstr(why, " at byte ")) {
    /* A syntax error: let jansson say where, in its words. */
    char mine[512];
    snprintf(mine, sizeof(mine), "%s", why);
    why[0] = '\0';
    if (read_file(path, buf, bufcap, &len, why, whylen) == 0) json_why(*buf, len, why, whylen);
    if (!why[0]) snprintf(why, whylen, "%s", mine);
  }
  if (rc < 0) {
    dump_free(d);
    return F_BAD;
  }
  if (d->rank < 0) {
    dump_free(d);
    snprintf(why, whylen, "the dump does not say which rank wrote it");
    return F_BAD;
  }
  d->path = tr_xstrndup(path, strlen(path));
  d->file = strrchr(d->path, '/') + 1;
  return F_DUMP;
}

static void *loader(void *arg) {
  job_t *j = arg;
  char *buf = NULL;
  size_t bufcap = 0;
  for (;;) {
    size_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
    if (i >= j->nn) break;
    j->status[i] = load_one(j->dir, j->names[i], &j->d[i], j->why[i], sizeof(j->why[i]), &buf, &bufcap);
  }
  ftc__free(buf);
  return NULL;
}

int tr_load_dir(const char *dir, tr_set_t *set) {
  memset(set, 0, sizeof(*set));
  DIR *dh = opendir(dir);
  if (!dh) {
    fprintf(stderr, "ftcomm-trace: cannot read directory %s: %s\n", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t nn = 0, capn = 0, capb = 0;
  struct dirent *de;
  while ((de = readdir(dh))) {
    if (de->d_name[0] == '.') continue; /* ., .., and temporary dump files */
    if (nn == capn) {
      capn = capn ? 2 * capn : 64;
      names = tr_xrealloc(names, capn * sizeof(*names));
    }
    names[nn++] = tr_xstrndup(de->d_name, strlen(de->d_name));
  }
  closedir(dh);
  qsort(names, nn, sizeof(*names), by_name);

  /* Files are independent: read them on a few threads, then keep the
   * results in name order. */
  job_t j = {.dir = dir, .names = names, .nn = nn};
  j.d = tr_xcalloc(nn ? nn : 1, sizeof(*j.d));
  j.status = tr_xcalloc(nn ? nn : 1, sizeof(int));
  j.why = tr_xcalloc(nn ? nn : 1, sizeof(*j.why));
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  size_t nthreads = cpus < 1 ? 1 : cpus > 8 ? 8 : (size_t)cpus;
  if (nthreads > nn / 16 + 1) nthreads = nn / 16 + 1;
  json_object_seed(0); /* before threads: jansson seeds its hash once */
  pthread_t tids[8];
  size_t started = 0;
  for (size_t t = 1; t < nthreads; t++)
    if (pthread_create(&tids[started], NULL, loader, &j) == 0) started++;
  loader(&j);
  for (size_t t = 0; t < started; t++) pthread_join(tids[t], NULL);

  set->d = j.d;
  for (size_t i = 0; i < nn; i++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    if (j.status[i] == F_DUMP) set->d[set->nd++] = j.d[i];
    else if (j.status[i] == F_BAD || j.status[i] == F_IGNORED)
      add_bad(set, &capb, path, j.status[i] == F_IGNORED, j.why[i]);
  }
  ftc__free(j.status);
  ftc__free(j.why);
  for (size_t i = 0; i < nn; i++) ftc__free(names[i]);
  ftc__free(names);

  qsort(set->d, set->nd, sizeof(*set->d), by_rank_then_time);
  for (size_t i = 0; i + 1 < set->nd; i++)
    if (set->d[i].rank == set->d[i + 1].rank) set->d[i].superseded = 1;
  return 0;
}
