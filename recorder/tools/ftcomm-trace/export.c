/*
 * export.c - ftcomm-trace --export: writes the dumps of a directory in
 * PyTorch Flight Recorder's layout (format 2.10), one file per rank named
 * rank_<global rank>, so that tools written for PyTorch's dumps read
 * ftcomm's. Two encodings, as PyTorch has them: JSON (what
 * _dump_fr_trace_json returns: compact, keys sorted) and pickle protocol 2
 * (what PyTorch writes on a timeout, and the only form its analyzer,
 * torch.distributed.flight_recorder.fr_trace, loads).
 *
 * Mapping (the reverse of parse_pytorch.c): a communicator at its current
 * epoch is a process group named by the binding's pg_name, or by the
 * communicator's id when no binding named it, with the binding's
 * description or the communicator's name ("world", "split0.1"); entries of
 * earlier epochs are left out (PyTorch has no epochs: a shrunk group is a
 * new group to it) and counted on stderr. pg_config lists each group's
 * global ranks in group order, from the dumps of its members; a member
 * without a dump is placed by its group rank only in a group whose known
 * members all have group rank = global rank (the world). Sizes follow what
 * c10d records per op (all_gather: output is size x input, ...). Times are
 * wall clock, from the dump's trigger time pair; PyTorch has no "failed":
 * a failed entry is "started" (it was entered and never completed).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "ftc_alloc.h"
#include "trace.h"

static const struct { const char *ours, *torch; } op_names[] = {
    {"allreduce", "all_reduce"},   {"broadcast", "broadcast"},   {"reduce", "reduce"},
    {"allgather", "all_gather"},   {"reduce_scatter", "reduce_scatter"},
    {"alltoall", "all_to_all"},    {"barrier", "barrier"},       {"send", "send"},
    {"recv", "recv"},              {"allgatherv", "all_gather_v"},
    {"alltoallv", "all_to_all"},   {"gather", "gather"},         {"scatter", "scatter"},
};

static const struct { const char *ours, *torch; } dtype_names[] = {
    {"f32", "Float"}, {"f64", "Double"}, {"f16", "Half"}, {"bf16", "BFloat16"},
    {"i32", "Int"},   {"i64", "Long"},   {"u8", "Byte"},  {"i8", "Char"},
};

static const char *torch_op(const char *ours) {
  for (size_t i = 0; i < sizeof(op_names) / sizeof(op_names[0]); i++)
    if (!strcmp(ours, op_names[i].ours)) return op_names[i].torch;
  return ours; /* already PyTorch's (a re-export), or a newer op kept as named */
}

static const char *torch_dtype(const char *ours) {
  for (size_t i = 0; i < sizeof(dtype_names) / sizeof(dtype_names[0]); i++)
    if (!strcmp(ours, dtype_names[i].ours)) return dtype_names[i].torch;
  return ours;
}

/* The profiling name, "<lib>:<op>" with the peers of a send or recv as c10d
 * writes them ("send 0->1", "recv 1<-0", group ranks). lib is "nccl" for
 * ftcomm's NCCL backend and "c10d" otherwise: what c10d's own recorder hook
 * writes for a backend it does not know, and a name PyTorch's analyzer takes
 * without a warning per entry. The op is always ours mapped (a binding's
 * own label such as "ftcomm:new_group" is no op PyTorch's analyzer knows). */
static void profiling_name(char *buf, size_t len, const tr_dump_t *d, const tr_comm_t *c,
                           const tr_entry_t *e) {
  const char *op = tr_str(e->op);
  const char *lib = d->backend && (!strcmp(d->backend, "nccl") || !strcmp(d->backend, "gloo"))
                        ? d->backend
                        : "c10d";
  int me = e->rank >= 0 ? e->rank : c->rank;
  if (!strcmp(op, "send")) snprintf(buf, len, "%s:send %d->%d", lib, me, e->peer);
  else if (!strcmp(op, "recv")) snprintf(buf, len, "%s:recv %d<-%d", lib, me, e->peer);
  else snprintf(buf, len, "%s:%s", lib, torch_op(op));
}

static json_t *shape_list(uint64_t numel) {
  return json_pack("[[I]]", (json_int_t)numel);
}

/* input_sizes and output_sizes as c10d records them for the op. */
static void sizes(const tr_entry_t *e, int size, json_t **in, json_t **out) {
  const char *op = tr_str(e->op);
  uint64_t c = e->count, n = size > 0 ? (uint64_t)size : 1;
  if (!strcmp(op, "barrier")) {
    *in = json_array();
    *out = json_array();
  } else if (!strcmp(op, "allgather") || !strcmp(op, "gather")) {
    *in = shape_list(c);
    *out = shape_list(c * n);
  } else if (!strcmp(op, "reduce_scatter") || !strcmp(op, "scatter")) {
    *in = shape_list(c * n);
    *out = shape_list(c);
  } else if (!strcmp(op, "alltoall")) {
    *in = shape_list(c * n);
    *out = shape_list(c * n);
  } else {
    *in = shape_list(c);
    *out = shape_list(c);
  }
}

/* One exported group: a communicator at its current epoch. */
typedef struct xgroup {
  const char *name, *desc;
  char ranks[4096]; /* "[0, 1, 2]" */
  int known;        /* 0: some member's global rank is not known */
  int size;         /* ranks listed */
} xgroup_t;

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static void group_of(const tr_report_t *rep, const tr_dump_t *d, const tr_comm_t *c, xgroup_t *x) {
  x->name = c->pg_name && *c->pg_name ? c->pg_name : c->id;
  x->desc = c->pg_desc && *c->pg_desc ? c->pg_desc : c->name;
  x->known = 1;
  x->size = 0;
  const tr_group_t *g = NULL;
  for (size_t i = 0; i < rep->ng && !g; i++)
    if (!strcmp(rep->g[i].comm_id, c->id) && rep->g[i].epoch == c->epoch) g = &rep->g[i];
  int size = g && g->size > 0 ? g->size : c->size;
  if (size <= 0 || size > TR_MAX_RANKS) size = 1;
  int *grank = tr_xmalloc((size_t)size * sizeof(int));
  int identity = 1;
  for (int i = 0; i < size; i++) grank[i] = -1;
  int placed = 1; /* every member's group rank known */
  for (size_t i = 0; g && i < g->nm; i++)
    if (g->m[i].comm_rank < 0 || g->m[i].comm_rank >= size) placed = 0;
  if (!placed && g && !strcmp(c->id, "0") && d->format == TR_FMT_PYTORCH) {
    /* PyTorch's default group ("0") is the world, whoever dumped: as many
     * ranks as the analysis counts, or as the highest rank that dumped it
     * (gloo's pg_config names a bogus "[0, 1]" whatever the world). */
    ftc__free(grank);
    size = rep->world_size > 0 ? rep->world_size : 1;
    for (size_t i = 0; i < g->nm; i++)
      if (g->m[i].grank >= size) size = g->m[i].grank + 1;
    grank = tr_xmalloc((size_t)size * sizeof(int));
    for (int i = 0; i < size; i++) grank[i] = i;
  } else if (!placed) {
    /* A PyTorch dump whose pg_config does not list the group (gloo's):
     * its members are the ranks that dumped it, in rank order. */
    ftc__free(grank);
    size = (int)g->nm;
    grank = tr_xmalloc((size_t)(size ? size : 1) * sizeof(int));
    for (int i = 0; i < size; i++) grank[i] = g->m[i].grank;
    qsort(grank, (size_t)size, sizeof(int), cmp_int);
    identity = 0;
  }
  for (size_t i = 0; g && placed && i < g->nm; i++) {
    const tr_member_t *m = &g->m[i];
    grank[m->comm_rank] = m->grank;
    if (m->grank != m->comm_rank) identity = 0;
  }
  if (!g && c->rank >= 0 && c->rank < size) grank[c->rank] = d->rank;
  size_t off = 0;
  off += (size_t)snprintf(x->ranks + off, sizeof(x->ranks) - off, "[");
  int first = 1;
  for (int i = 0; i < size && off < sizeof(x->ranks) - 16; i++) {
    int r = grank[i] >= 0 ? grank[i] : identity ? i : -1;
    if (r < 0) {
      x->known = 0;
      continue;
    }
    off += (size_t)snprintf(x->ranks + off, sizeof(x->ranks) - off, "%s%d", first ? "" : ", ", r);
    first = 0;
    x->size++;
  }
  if (off >= sizeof(x->ranks) - 16) x->known = 0; /* past what one line holds: cut */
  snprintf(x->ranks + off, sizeof(x->ranks) - off, "]");
  ftc__free(grank);
}

typedef struct xent {
  const tr_comm_t *c;
  const tr_entry_t *e;
  int pg_id;
} xent_t;

static int cmp_xent(const void *a, const void *b) {
  const xent_t *x = a, *y = b;
  if (x->e->t_created != y->e->t_created) return x->e->t_created < y->e->t_created ? -1 : 1;
  if (x->pg_id != y->pg_id) return x->pg_id - y->pg_id;
  return (x->e->seq > y->e->seq) - (x->e->seq < y->e->seq);
}

static json_int_t ms_of(int64_t ns) { return ns > 0 ? (json_int_t)(ns / 1000000) : 0; }

/* The dump in PyTorch's layout; *skipped counts entries of earlier epochs,
 * *unplaced groups whose members are not all known. pickle: pg_status as
 * ints and every entry with its (empty) frames, as PyTorch pickles it. */
static json_t *dump_json(const tr_report_t *rep, const tr_dump_t *d, int pickle, size_t *skipped,
                         size_t *unplaced) {
  json_t *root = json_object(), *cfg = json_object(), *status = json_object(),
         *entries = json_array();
  int64_t to_wall = d->format != TR_FMT_PYTORCH && d->trigger_wall_ns && d->trigger_mono_ns
                        ? d->trigger_wall_ns - d->trigger_mono_ns
                        : 0;
  size_t n = 0;
  for (size_t ci = 0; ci < d->ncomms; ci++) n += d->comms[ci].n;
  xent_t *xs = tr_xmalloc((n ? n : 1) * sizeof(*xs));
  size_t nx = 0;
  xgroup_t *xg = tr_xmalloc((d->ncomms ? d->ncomms : 1) * sizeof(*xg));
  for (size_t ci = 0; ci < d->ncomms; ci++) {
    const tr_comm_t *c = &d->comms[ci];
    xgroup_t *x = &xg[ci];
    group_of(rep, d, c, x);
    if (!x->known) (*unplaced)++;
    json_object_set_new(cfg, x->name, json_pack("{s:s,s:s,s:s}", "desc", x->desc, "name", x->name,
                                                "ranks", x->ranks));
    char id[32];
    snprintf(id, sizeof(id), "%zu", ci);
    /* ftcomm's "0: none" is PyTorch's -1. */
    int64_t last[3] = {c->last_enqueued, c->last_started, c->last_completed};
    json_t *st = json_object();
    static const char *const keys[3] = {"last_enqueued_collective", "last_started_collective",
                                        "last_completed_collective"};
    for (int k = 0; k < 3; k++) {
      int64_t v = last[k] > 0 ? last[k] : -1;
      if (pickle) {
        json_object_set_new(st, keys[k], json_integer(v));
      } else {
        char s[32];
        snprintf(s, sizeof(s), "%lld", (long long)v);
        json_object_set_new(st, keys[k], json_string(s));
      }
    }
    json_object_set_new(status, id, st);
    for (size_t i = 0; i < c->n; i++) {
      if (c->e[i].epoch != c->epoch && d->format != TR_FMT_PYTORCH) {
        (*skipped)++;
        continue;
      }
      xs[nx++] = (xent_t){.c = c, .e = &c->e[i], .pg_id = (int)ci};
    }
  }
  qsort(xs, nx, sizeof(*xs), cmp_xent);
  for (size_t i = 0; i < nx; i++) {
    const tr_comm_t *c = xs[i].c;
    const tr_entry_t *e = xs[i].e;
    const xgroup_t *x = &xg[xs[i].pg_id];
    char pn[256];
    profiling_name(pn, sizeof(pn), d, c, e);
    json_t *in, *out;
    sizes(e, e->size > 0 ? e->size : x->size, &in, &out);
    const char *dt = torch_dtype(tr_str(e->dtype));
    int barrier = !strcmp(tr_str(e->op), "barrier");
    int64_t created = e->t_created ? e->t_created + to_wall : 0;
    int64_t started = e->t_started ? e->t_started + to_wall : 0;
    int64_t completed = e->state == TR_COMPLETED && e->t_completed ? e->t_completed + to_wall : 0;
    const char *state = e->state == TR_COMPLETED ? "completed"
                        : e->state == TR_SCHEDULED && !e->t_started ? "scheduled"
                                                                    : "started";
    json_t *ent = json_pack(
        "{s:I,s:i,s:[s,s],s:I,s:I,s:I,s:s,s:o,s:o,s:o,s:o,s:I,s:I,s:I,s:I,s:b,s:b,s:s,s:s,s:s}",
        "record_id", (json_int_t)i, "pg_id", xs[i].pg_id, "process_group", x->name, x->desc,
        "collective_seq_id", (json_int_t)(e->p2p ? 0 : e->seq), "p2p_seq_id",
        (json_int_t)(e->p2p ? e->seq : 0), "op_id", (json_int_t)e->seq, "profiling_name", pn,
        "input_sizes", in, "output_sizes", out, "input_dtypes",
        barrier ? json_array() : json_pack("[s]", dt), "output_dtypes",
        barrier ? json_array() : json_pack("[s]", dt), "time_created_ns", (json_int_t)created,
        "time_discovered_started_ns", (json_int_t)started, "time_discovered_completed_ns",
        (json_int_t)completed, "timeout_ms", e->timeout_ns > 0 ? ms_of(e->timeout_ns) : 0,
        "is_p2p", e->p2p, "retired", e->state == TR_COMPLETED, "state", state, "thread_id", "",
        "thread_name", "");
    if (started && completed >= started)
      json_object_set_new(ent, "duration_ms", json_real((double)(completed - started) / 1e6));
    if (pickle) json_object_set_new(ent, "frames", json_array());
    json_array_append_new(entries, ent);
  }
  ftc__free(xs);
  ftc__free(xg);
  json_object_set_new(root, "version", json_string("2.10"));
  json_object_set_new(root, "comm_lib_version",
                      json_string(d->backend_version ? d->backend_version : ""));
  json_object_set_new(root, "pg_config", cfg);
  json_object_set_new(root, "pg_status", status);
  if (json_array_size(entries)) json_object_set_new(root, "entries", entries);
  else json_decref(entries);
  json_object_set_new(root, "nccl_comm_state", json_object());
  return root;
}

/* Pickle protocol 2, with only the opcodes PyTorch's own dumps use (and
 * BINFLOAT for duration_ms): nothing that imports or calls. */
typedef struct pbuf {
  unsigned char *p;
  size_t n, cap;
} pbuf_t;

static void put(pbuf_t *b, const void *s, size_t n) {
  if (b->n + n > b->cap) {
    while (b->n + n > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
    b->p = tr_xrealloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}

static void put1(pbuf_t *b, unsigned char c) { put(b, &c, 1); }

static void put_str(pbuf_t *b, const char *s, size_t n) {
  unsigned char h[5] = {'X', (unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16),
                        (unsigned char)(n >> 24)};
  put(b, h, 5);
  put(b, s, n);
}

static void put_int(pbuf_t *b, int64_t v) {
  if (v >= 0 && v < 256) {
    unsigned char h[2] = {'K', (unsigned char)v};
    put(b, h, 2);
  } else if (v >= 0 && v < 65536) {
    unsigned char h[3] = {'M', (unsigned char)v, (unsigned char)(v >> 8)};
    put(b, h, 3);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    uint32_t u = (uint32_t)(int32_t)v;
    unsigned char h[5] = {'J', (unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                          (unsigned char)(u >> 24)};
    put(b, h, 5);
  } else { /* LONG1: 8 bytes of two's complement, little-endian */
    uint64_t u = (uint64_t)v;
    unsigned char h[10] = {0x8a, 8};
    for (int i = 0; i < 8; i++) h[2 + i] = (unsigned char)(u >> (8 * i));
    put(b, h, 10);
  }
}

static void put_value(pbuf_t *b, const json_t *j, int as_tuple);

static void put_value(pbuf_t *b, const json_t *j, int as_tuple) {
  switch (json_typeof(j)) {
    case JSON_OBJECT: {
      put1(b, '}');
      if (!json_object_size(j)) break;
      put1(b, '(');
      const char *k;
      json_t *v;
      json_object_foreach((json_t *)j, k, v) {
        put_str(b, k, strlen(k));
        /* PyTorch pickles process_group as a (name, desc) tuple. */
        put_value(b, v, !strcmp(k, "process_group") && json_array_size(v) == 2);
      }
      put1(b, 'u');
      break;
    }
    case JSON_ARRAY: {
      size_t i;
      json_t *v;
      if (as_tuple) {
        json_array_foreach(j, i, v) put_value(b, v, 0);
        put1(b, 0x86); /* TUPLE2 */
        break;
      }
      put1(b, ']');
      if (!json_array_size(j)) break;
      put1(b, '(');
      json_array_foreach(j, i, v) put_value(b, v, 0);
      put1(b, 'e');
      break;
    }
    case JSON_STRING: put_str(b, json_string_value(j), json_string_length(j)); break;
    case JSON_INTEGER: put_int(b, json_integer_value(j)); break;
    case JSON_REAL: {
      double d = json_real_value(j);
      uint64_t u;
      memcpy(&u, &d, 8);
      unsigned char h[9] = {'G'};
      for (int i = 0; i < 8; i++) h[1 + i] = (unsigned char)(u >> (56 - 8 * i));
      put(b, h, 9);
      break;
    }
    case JSON_TRUE: put1(b, 0x88); break;
    case JSON_FALSE: put1(b, 0x89); break;
    case JSON_NULL: put1(b, 'N'); break;
  }
}

static int write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(p, 1, n, f) == n;
  if (fclose(f) != 0) ok = 0;
  return ok ? 0 : -1;
}

int tr_export_pytorch(const char *outdir, int pickle, const tr_set_t *set, const tr_report_t *rep) {
  if (mkdir(outdir, 0755) < 0 && errno != EEXIST) {
    fprintf(stderr, "ftcomm-trace: cannot make %s: %s\n", outdir, strerror(errno));
    return -1;
  }
  size_t written = 0, skipped = 0, unplaced = 0;
  char *seen = tr_xcalloc((size_t)TR_MAX_RANKS / 8 + 1, 1);
  int rc = 0;
  for (size_t di = 0; di < set->nd && rc == 0; di++) {
    const tr_dump_t *d = &set->d[di];
    if (d->superseded) continue;
    if (d->rank < 0 || d->rank >= TR_MAX_RANKS) {
      fprintf(stderr, "ftcomm-trace: %s names no rank: not exported\n", d->path);
      continue;
    }
    if (seen[d->rank / 8] & (1 << (d->rank % 8))) {
      fprintf(stderr, "ftcomm-trace: %s: rank %d was exported from another dump already\n",
              d->path, d->rank);
      continue;
    }
    seen[d->rank / 8] |= (char)(1 << (d->rank % 8));
    json_t *root = dump_json(rep, d, pickle, &skipped, &unplaced);
    char path[4096];
    snprintf(path, sizeof(path), "%s/rank_%d", outdir, d->rank);
    if (pickle) {
      pbuf_t b = {0};
      put(&b, "\x80\x02", 2);
      put_value(&b, root, 0);
      put1(&b, '.');
      if (write_file(path, b.p, b.n) < 0) rc = -1;
      ftc__free(b.p);
    } else {
      /* As PyTorch's nlohmann writer: compact, keys sorted, no newline. */
      char *s = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
      if (!s || write_file(path, s, strlen(s)) < 0) rc = -1;
      free(s);
    }
    json_decref(root);
    if (rc < 0) fprintf(stderr, "ftcomm-trace: cannot write %s: %s\n", path, strerror(errno));
    else written++;
  }
  ftc__free(seen);
  if (rc < 0) return -1;
  if (skipped)
    fprintf(stderr,
            "ftcomm-trace: left out %zu entries of earlier epochs (PyTorch's format has no "
            "epochs: only each communicator's current one is exported)\n",
            skipped);
  if (unplaced)
    fprintf(stderr,
            "ftcomm-trace: %zu group(s) list only the members whose dumps are here (a member "
            "without a dump has no known global rank)\n",
            unplaced);
  printf("ftcomm-trace: wrote %zu PyTorch Flight Recorder dump(s) (format 2.10, %s) to %s\n",
         written, pickle ? "pickle" : "JSON", outdir);
  return 0;
}
