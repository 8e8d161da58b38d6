/*
 * parse_pytorch.c - reads PyTorch Flight Recorder dumps (format 2.x), JSON
 * or pickle (pickle.c turns the pickle into the same tree), into
 * ftcomm-trace's model, so a hang in a PyTorch job is analyzed like an
 * ftcomm one.
 *
 * Mapping: a process group (matched across ranks by name, never by pg_id,
 * which each process numbers for itself) is a communicator at epoch 0;
 * collective_seq_id is the sequence; the op comes from profiling_name
 * ("nccl:all_reduce" -> allreduce) and the backend from its prefix; count
 * is the number of input elements; the rank is the file name's suffix and
 * the group rank its index in pg_config's ranks when pg_config lists the
 * group (gloo dumps list one entry keyed "", whatever groups exist). An
 * entry that is retired, or up to pg_status's last_completed_collective,
 * has completed, whatever its state says (gloo never moves an entry past
 * "scheduled", and its last_completed_collective lags). PyTorch
 * records no root, so roots are not compared.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ftc_alloc.h"

#include "pickle.h"
#include "trace.h"
#include "tree.h"

/* The items of a list, the keys and values of a dict (none when it is not one). */
#define LIST_FOREACH(L, I, V) \
  for ((I) = 0; (L) && (L)->type == TV_LIST && (I) < (L)->n && ((V) = (L)->u.items[I]) != NULL; (I)++)
#define DICT_FOREACH(D, K, V, I)                                                    \
  for ((I) = 0; (D) && (D)->type == TV_DICT && (I) < (D)->n &&                      \
                ((K) = (D)->u.kv[I].k) != NULL && ((V) = (D)->u.kv[I].v) != NULL;   \
       (I)++)

static const struct { const char *torch, *ours; } op_map[] = {
    {"all_reduce", "allreduce"},         {"allreduce", "allreduce"},
    {"all_gather", "allgather"},         {"_allgather_base", "allgather"},
    {"all_gather_into_tensor", "allgather"}, {"allgather", "allgather"},
    {"reduce_scatter", "reduce_scatter"}, {"_reduce_scatter_base", "reduce_scatter"},
    {"reduce_scatter_tensor", "reduce_scatter"}, {"broadcast", "broadcast"},
    /* c10d's all-to-alls take per-rank split sizes: counts may differ by
     * rank, as in alltoallv (PyTorch's analyzer does not compare them either). */
    {"reduce", "reduce"},                {"all_to_all", "alltoallv"},
    {"all_to_all_single", "alltoallv"},  {"alltoall", "alltoallv"},
    {"alltoall_base", "alltoallv"},
    {"barrier", "barrier"},              {"send", "send"},
    {"recv", "recv"},
};

static const char *map_op(const char *profiling_name) {
  const char *p = strchr(profiling_name, ':');
  p = p ? p + 1 : profiling_name;
  for (size_t i = 0; i < sizeof(op_map) / sizeof(op_map[0]); i++)
    if (!strcmp(p, op_map[i].torch)) return op_map[i].ours;
  return p;
}

/* d as an int64, or dflt when it is none (NaN, or past the range a
 * conversion is defined on: a damaged file, not one to read as garbage). */
static int64_t int_of_real(double d, int64_t dflt) {
  return d >= -9223372036854775808.0 && d < 9223372036854775808.0 ? (int64_t)d : dflt;
}

static int64_t int_of(const tv_t *j, int64_t dflt) {
  if (!j) return dflt;
  if (j->type == TV_INT) return j->u.i;
  if (j->type == TV_REAL) return int_of_real(j->u.d, dflt);
  if (j->type == TV_STR) return strtoll(j->u.s, NULL, 10);
  return dflt;
}

/* Elements in a list of shapes. */
static uint64_t elements(const tv_t *sizes) {
  uint64_t total = 0;
  size_t i, k;
  tv_t *shape, *dim;
  LIST_FOREACH(sizes, i, shape) {
    uint64_t n = 1;
    LIST_FOREACH(shape, k, dim) n *= (uint64_t)int_of(dim, 1);
    total += n;
  }
  return total;
}

/* Position of `rank` in a ranks string such as "[0, 1, 2, 3]"; sets *size. */
static int index_in(const char *ranks, int rank, int *size) {
  int idx = -1, n = 0;
  for (const char *p = ranks; p && *p;) {
    while (*p && (*p < '0' || *p > '9')) p++;
    if (!*p) break;
    char *end;
    long v = strtol(p, &end, 10);
    if (v == rank) idx = n;
    n++;
    p = end;
  }
  *size = n;
  return idx;
}

/* A group's name for people: its description, or "pg N" when it has none
 * (new_group() without a description says "undefined"). */
static char *group_label(const char *name, const char *desc) {
  if (desc && *desc && strcmp(desc, "undefined")) return tr_xstrndup(desc, strlen(desc));
  char buf[300];
  snprintf(buf, sizeof(buf), "pg %s", name);
  return tr_xstrndup(buf, strlen(buf));
}

static tr_comm_t *comm_for(tr_dump_t *d, size_t *cap, const char *name, const char *desc,
                           const tv_t *pg_config) {
  for (size_t i = 0; i < d->ncomms; i++)
    if (!strcmp(d->comms[i].id, name)) return &d->comms[i];
  if (d->ncomms == *cap) {
    *cap = *cap ? 2 * *cap : 4;
    d->comms = tr_xrealloc(d->comms, *cap * sizeof(*d->comms));
  }
  tr_comm_t *c = &d->comms[d->ncomms++];
  memset(c, 0, sizeof(*c));
  c->id = tr_xstrndup(name, strlen(name));
  const tv_t *cfg = tv_get(pg_config, name);
  if (!desc) desc = tv_str(TV_GET(cfg, "desc"));
  c->name = group_label(name, desc);
  c->rank = c->size = -1;
  c->last_enqueued = c->last_started = c->last_completed = -1;
  const char *ranks = tv_str(TV_GET(cfg, "ranks"));
  if (ranks && d->rank >= 0) c->rank = index_in(ranks, d->rank, &c->size);
  return c;
}

/* The largest rank a pg_config "ranks" string names, or -1. */
static int max_rank_in(const char *ranks) {
  int best = -1;
  for (const char *p = ranks; p && *p;) {
    while (*p && (*p < '0' || *p > '9')) p++;
    if (!*p) break;
    char *end;
    long v = strtol(p, &end, 10);
    if (v > best && v < TR_MAX_RANKS) best = (int)v;
    p = end;
  }
  return best;
}

/* The members of an entry this reader uses, found in one pass over its
 * keys (a key given twice: the last counts, as in tv_get). An entry has
 * some 20 keys: a lookup per member would compare hundreds of them. */
typedef struct ent_fields {
  tv_t *process_group, *profiling_name, *is_p2p, *p2p_seq_id, *collective_seq_id, *input_dtypes,
      *input_sizes, *time_created_ns, *time_discovered_started_ns, *time_discovered_completed_ns,
      *duration_ms, *timeout_ms, *state, *retired;
} ent_fields_t;

#define FIELD(lit, member)                                            \
  if (kn == sizeof(lit) - 1 && !memcmp(k, lit, sizeof(lit) - 1)) { \
    f->member = v;                                                    \
    continue;                                                         \
  }

static void ent_fields(const tv_t *e, ent_fields_t *f) {
  memset(f, 0, sizeof(*f));
  if (!e || e->type != TV_DICT) return;
  for (uint32_t i = 0; i < e->n; i++) {
    const char *k = e->u.kv[i].k;
    size_t kn = e->u.kv[i].kn;
    tv_t *v = e->u.kv[i].v;
    switch (k[0]) {
      case 'c': FIELD("collective_seq_id", collective_seq_id); break;
      case 'd': FIELD("duration_ms", duration_ms); break;
      case 'i':
        FIELD("input_sizes", input_sizes);
        FIELD("input_dtypes", input_dtypes);
        FIELD("is_p2p", is_p2p);
        break;
      case 'p':
        FIELD("process_group", process_group);
        FIELD("profiling_name", profiling_name);
        FIELD("p2p_seq_id", p2p_seq_id);
        break;
      case 'r': FIELD("retired", retired); break;
      case 's': FIELD("state", state); break;
      case 't':
        FIELD("time_created_ns", time_created_ns);
        FIELD("time_discovered_started_ns", time_discovered_started_ns);
        FIELD("time_discovered_completed_ns", time_discovered_completed_ns);
        FIELD("timeout_ms", timeout_ms);
        break;
      default: break;
    }
  }
}
#undef FIELD

/* Reads a dump's tree (root: a borrowed reference; 1 when it is no Flight
 * Recorder dump). */
static int from_tree(tv_t *root, int rank, tr_dump_t *d, char *why, size_t whylen) {
  tv_t *version = TV_GET(root, "version"), *cfg0 = TV_GET(root, "pg_config"),
       *ent0 = TV_GET(root, "entries");
  if (!tv_str(version) || (!(cfg0 && cfg0->type == TV_DICT) && !(ent0 && ent0->type == TV_LIST))) {
    return 1;
  }
  snprintf(d->version, sizeof(d->version), "%s", tv_str(version));
  d->format = TR_FMT_PYTORCH;
  if (atoi(d->version) != 2) {
    snprintf(why, whylen,
             "PyTorch Flight Recorder version %s is not supported (this reader knows 2.x)",
             d->version);
    return -1;
  }
  d->rank = rank;
  d->epoch = 0;
  const char *lib = tv_str(TV_GET(root, "comm_lib_version"));
  tv_t *pg_config = TV_GET(root, "pg_config");
  tv_t *pg_status = TV_GET(root, "pg_status");
  tv_t *entries = TV_GET(root, "entries");
  /* The backend: the prefix of the profiling names ("gloo:all_reduce"). */
  const char *pn0 = tv_str(tv_get(tv_at(entries, 0), "profiling_name"));
  const char *colon = pn0 ? strchr(pn0, ':') : NULL;
  if (colon && colon > pn0) d->backend = tr_xstrndup(pn0, (size_t)(colon - pn0));
  else if (lib && *lib) d->backend = tr_xstrndup("nccl", 4); /* only NCCL's recorder sets it */
  d->backend_version = tr_xstrndup(lib ? lib : "", lib ? strlen(lib) : 0);
  d->reason = tr_xstrndup("pytorch", 7);
  size_t cap = 0, i;
  /* World size: the default group's ranks; without it (gloo dumps), the
   * largest rank pg_config names, a lower bound the analysis raises to the
   * largest rank that dumped. */
  tv_t *def = tv_get(pg_config, "0");
  const char *wranks = tv_str(TV_GET(def, "ranks"));
  d->world_size = -1;
  if (wranks) {
    index_in(wranks, -1, &d->world_size);
  } else {
    const char *gname;
    tv_t *gv;
    size_t gi;
    DICT_FOREACH(pg_config, gname, gv, gi) {
      int m = max_rank_in(tv_str(TV_GET(gv, "ranks")));
      if (m + 1 > d->world_size) d->world_size = m + 1;
    }
    if (d->world_size == 0) d->world_size = -1;
  }
  tv_t *e;
  /* Every group this rank is in, even without entries ("" is no group:
   * gloo dumps' placeholder). */
  const char *gname;
  tv_t *gv;
  size_t gi;
  DICT_FOREACH(pg_config, gname, gv, gi) if (*gname) comm_for(d, &cap, gname, NULL, pg_config);
  /* The last names seen and their interned indices: a pickle's memo shares
   * one string among entries, JSON repeats it; either way few are distinct. */
  const char *last_pname = NULL, *last_dt = NULL;
  int pname_op = 0, pname_idx = 0, dt_idx = 0, pname_p2p = 0;
  LIST_FOREACH(entries, i, e) {
    ent_fields_t f;
    ent_fields(e, &f);
    const char *name = tv_str(tv_at(f.process_group, 0));
    if (!name) {
      snprintf(why, whylen, "entry %zu has no process_group", i);
      return -1;
    }
    tr_comm_t *c = comm_for(d, &cap, name, tv_str(tv_at(f.process_group, 1)), pg_config);
    if (c->n == c->cap_e) {
      c->cap_e = c->cap_e ? 2 * c->cap_e : 64;
      c->e = tr_xrealloc(c->e, c->cap_e * sizeof(*c->e));
    }
    tr_entry_t *t = &c->e[c->n++];
    memset(t, 0, sizeof(*t));
    const char *pname = tv_str(f.profiling_name);
    if (!last_pname || !pname || (pname != last_pname && strcmp(pname, last_pname))) {
      const char *op = map_op(pname ? pname : "unknown");
      pname_op = tr_intern(op, strlen(op));
      pname_idx = pname && *pname ? tr_intern(pname, strlen(pname)) + 1 : 0; /* shown beside op */
      pname_p2p = !strcmp(op, "send") || !strcmp(op, "recv");
      last_pname = pname;
    }
    t->op = (uint8_t)pname_op;
    t->name = (uint32_t)pname_idx;
    t->p2p = tv_is_true(f.is_p2p) || pname_p2p;
    t->seq = (uint64_t)int_of(t->p2p ? f.p2p_seq_id : f.collective_seq_id, 0);
    const char *dt = tv_str(tv_at(f.input_dtypes, 0));
    if (!dt) dt = "none";
    if (!last_dt || (dt != last_dt && strcmp(dt, last_dt))) {
      dt_idx = tr_intern(dt, strlen(dt));
      last_dt = dt;
    }
    t->dtype = (uint8_t)dt_idx;
    t->count = elements(f.input_sizes);
    t->peer = -1;
    t->rank = c->rank;
    t->size = c->size;
    t->t_created = int_of(f.time_created_ns, 0);
    if (t->t_created > d->trigger_wall_ns) d->trigger_wall_ns = t->t_created;
    t->t_started = int_of(f.time_discovered_started_ns, 0);
    t->t_completed = int_of(f.time_discovered_completed_ns, 0);
    /* With timing on, duration_ms measures the kernel: prefer it. */
    int64_t dur_ns = tv_is_number(f.duration_ms) ? int_of_real(tv_number(f.duration_ms) * 1e6, -1) : -1;
    if (dur_ns >= 0 && t->t_started && dur_ns <= INT64_MAX - t->t_started) t->t_completed = t->t_started + dur_ns;
    t->timeout_ns = tv_is_number(f.timeout_ms) ? int_of_real(tv_number(f.timeout_ms) * 1e6, -1) : -1;
    const char *state = tv_str(f.state);
    t->state = !state ? TR_SCHEDULED
               : !strcmp(state, "completed") ? TR_COMPLETED
               : !strcmp(state, "started") ? TR_STARTED
               : TR_SCHEDULED;
    /* A retired entry has completed: the recorder retires an entry when
     * its work ends; gloo never moves "state" past "scheduled". */
    if (tv_is_true(f.retired)) t->state = TR_COMPLETED;
  }
  /* pg_status is keyed by the rank-local pg_id: find each id's group name
   * through the entries. */
  const char *pgid;
  tv_t *sv;
  size_t si;
  DICT_FOREACH(pg_status, pgid, sv, si) {
    const char *name = NULL;
    LIST_FOREACH(entries, i, e) {
      if (int_of(TV_GET(e, "pg_id"), -1) == strtoll(pgid, NULL, 10)) {
        name = tv_str(tv_at(TV_GET(e, "process_group"), 0));
        break;
      }
    }
    if (!name && !strcmp(pgid, "0")) name = "0";
    if (!name) continue;
    tr_comm_t *c = comm_for(d, &cap, name, NULL, pg_config);
    c->last_enqueued = int_of(TV_GET(sv, "last_enqueued_collective"), -1);
    c->last_started = int_of(TV_GET(sv, "last_started_collective"), -1);
    c->last_completed = int_of(TV_GET(sv, "last_completed_collective"), -1);
    for (size_t k = 0; k < c->n; k++)
      if (!c->e[k].p2p && c->last_completed >= 0 && c->e[k].seq <= (uint64_t)c->last_completed &&
          c->e[k].state != TR_FAILED)
        c->e[k].state = TR_COMPLETED;
  }
  return 0;
}

int tr_parse_pytorch(const char *buf, size_t len, int rank, tr_dump_t *d, char *why,
                     size_t whylen) {
  /* The fast reader unescapes in place: it reads a copy, so that jansson
   * can still say where the original is wrong when it is. */
  tv_arena_t a = {0};
  char *copy = tr_xmalloc(len + 1);
  memcpy(copy, buf, len);
  copy[len] = '\0';
  tv_t *root = tv_parse_json(&a, copy, len);
  json_t *j = NULL;
  if (!root) {
    json_error_t err;
    j = json_loadb(buf, len, 0, &err);
    if (!j) {
      snprintf(why, whylen, "not valid JSON: %s (line %d, column %d)", err.text, err.line, err.column);
      ftc__free(copy);
      tv_arena_free(&a);
      return -1;
    }
    root = tv_from_json(&a, j); /* valid, but past the fast reader's limits */
  }
  int rc = from_tree(root, rank, d, why, whylen);
  json_decref(j);
  ftc__free(copy);
  tv_arena_free(&a);
  return rc;
}

int tr_parse_pytorch_pickle(const unsigned char *buf, size_t len, int rank, tr_dump_t *d,
                            char *why, size_t whylen) {
  tv_arena_t a = {0};
  tv_t *root = tr_pickle_load(&a, buf, len, why, whylen);
  int rc = root ? from_tree(root, rank, d, why, whylen) : -1;
  tv_arena_free(&a);
  if (rc == 1) {
    snprintf(why, whylen, "a Python pickle, but not of a PyTorch Flight Recorder dump (no version "
             "with pg_config or entries)");
    return -1;
  }
  return rc;
}
