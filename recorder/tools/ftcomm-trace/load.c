/*
 * load.c - finds and reads the dumps of a directory for ftcomm-trace.
 *
 * Every regular file that is not hidden is tried: the fast ftcomm reader
 * first, then the PyTorch Flight Recorder reader (jansson). A file that is
 * broken (not JSON, truncated, a newer format) is kept in the list of bad
 * files with the reason, by name, and the others are still analyzed. When
 * a rank left several dumps, the newest one counts and the others are
 * marked superseded.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

static char *interned[256];
static int ninterned;

int tr_intern(const char *s, size_t n) {
  for (int i = 0; i < ninterned; i++)
    if (strlen(interned[i]) == n && !memcmp(interned[i], s, n)) return i;
  if (ninterned == 255) return 255; /* "other": more distinct names than any dump has */
  interned[ninterned] = tr_xstrndup(s, n);
  return ninterned++;
}

const char *tr_str(int idx) {
  if (idx == 255 && ninterned == 255) return "other";
  return idx >= 0 && idx < ninterned ? interned[idx] : "?";
}

static void dump_free(tr_dump_t *d) {
  for (size_t i = 0; i < d->ncomms; i++) {
    ftc__free(d->comms[i].id);
    ftc__free(d->comms[i].name);
    ftc__free(d->comms[i].e);
  }
  ftc__free(d->comms);
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
static int rank_from_name(const char *name) {
  if (!strncmp(name, "rank-", 5) && name[5] >= '0' && name[5] <= '9') return atoi(name + 5);
  const char *end = name + strlen(name);
  if (end - name > 5 && !strcmp(end - 5, ".json")) end -= 5;
  const char *p = end;
  while (p > name && p[-1] >= '0' && p[-1] <= '9') p--;
  return p < end ? atoi(p) : -1;
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
  if ((unsigned char)buf[0] == 0x80) {
    snprintf(why, whylen,
             "a Python pickle, not JSON (write PyTorch dumps with _dump_nccl_trace_json)");
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

int tr_load_dir(const char *dir, tr_set_t *set) {
  memset(set, 0, sizeof(*set));
  DIR *dh = opendir(dir);
  if (!dh) {
    fprintf(stderr, "ftcomm-trace: cannot read directory %s: %s\n", dir, strerror(errno));
    return -1;
  }
  char **names = NULL;
  size_t nn = 0, capn = 0, capd = 0, capb = 0;
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

  char *buf = NULL;
  size_t bufcap = 0, len;
  char path[4096], why[512];
  for (size_t i = 0; i < nn; i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) continue;
    const char *ext = strrchr(names[i], '.');
    if (ext && (!strcmp(ext, ".html") || !strcmp(ext, ".txt") || !strcmp(ext, ".md") ||
                !strcmp(ext, ".tmp")))
      continue;
    if (set->nd == capd) {
      capd = capd ? 2 * capd : 64;
      set->d = tr_xrealloc(set->d, capd * sizeof(*set->d));
    }
    tr_dump_t *d = &set->d[set->nd];
    memset(d, 0, sizeof(*d));
    why[0] = '\0';
    if (read_file(path, &buf, &bufcap, &len, why, sizeof(why)) < 0) {
      add_bad(set, &capb, path, 0, why);
      continue;
    }
    int rc = tr_parse_ftcomm(buf, len, d, why, sizeof(why));
    if (rc == 1) {
      /* Not ours: the buffer is unchanged outside skipped strings, so a
       * fresh read is not needed for jansson, but the dump is reset. */
      dump_free(d);
      if (read_file(path, &buf, &bufcap, &len, why, sizeof(why)) < 0) {
        add_bad(set, &capb, path, 0, why);
        continue;
      }
      rc = tr_parse_pytorch(buf, len, rank_from_name(names[i]), d, why, sizeof(why));
      if (rc == 1) {
        dump_free(d);
        add_bad(set, &capb, path, 1, "not a flight-recorder dump (ignored)");
        continue;
      }
    } else if (rc < 0 && strstr(why, " at byte ")) {
      /* A syntax error: let jansson say where, in its words. */
      char mine[512];
      snprintf(mine, sizeof(mine), "%s", why);
      if (read_file(path, &buf, &bufcap, &len, why, sizeof(why)) == 0) json_why(buf, len, why, sizeof(why));
      if (!why[0]) snprintf(why, sizeof(why), "%s", mine);
    }
    if (rc < 0) {
      dump_free(d);
      add_bad(set, &capb, path, 0, why);
      continue;
    }
    d->path = tr_xstrndup(path, strlen(path));
    d->file = strrchr(d->path, '/') + 1;
    if (d->rank < 0) {
      dump_free(d);
      add_bad(set, &capb, path, 0, "the dump does not say which rank wrote it");
      continue;
    }
    set->nd++;
  }
  ftc__free(buf);
  for (size_t i = 0; i < nn; i++) ftc__free(names[i]);
  ftc__free(names);

  qsort(set->d, set->nd, sizeof(*set->d), by_rank_then_time);
  for (size_t i = 0; i + 1 < set->nd; i++)
    if (set->d[i].rank == set->d[i + 1].rank) set->d[i].superseded = 1;
  return 0;
}
