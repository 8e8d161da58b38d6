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

#include "pickle.h"
#include "trace.h"

static const struct { const char *torch, *ours; } op_map[] = {
    {"all_reduce", "allreduce"},         {"allreduce", "allreduce"},
    {"all_gather", "allgather"},         {"_allgather_base", "allgather"},
    {"all_gather_into_tensor", "allgather"}, {"allgather", "allgather"},
    {"reduce_scatter", "reduce_scatter"}, {"_reduce_scatter_base", "reduce_scatter"},
    {"reduce_scatter_tensor", "reduce_scatter"}, {"broadcast", "broadcast"},
    {"reduce", "reduce"},                {"all_to_all", "alltoall"},
    {"alltoall", "alltoall"},            {"alltoall_base", "alltoall"},
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

static int64_t int_of(json_t *j, int64_t dflt) {
  if (json_is_integer(j)) return json_integer_value(j);
  if (json_is_real(j)) return int_of_real(json_real_value(j), dflt);
  if (json_is_string(j)) return strtoll(json_string_value(j), NULL, 10);
  return dflt;
}

/* Elements in a list of shapes. */
static uint64_t elements(json_t *sizes) {
  uint64_t total = 0;
  size_t i, k;
  json_t *shape, *dim;
  json_array_foreach(sizes, i, shape) {
    uint64_t n = 1;
    json_array_foreach(shape, k, dim) n *= (uint64_t)int_of(dim, 1);
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
                           json_t *pg_config) {
  for (size_t i = 0; i < d->ncomms; i++)
    if (!strcmp(d->comms[i].id, name)) return &d->comms[i];
  if (d->ncomms == *cap) {
    *cap = *cap ? 2 * *cap : 4;
    d->comms = tr_xrealloc(d->comms, *cap * sizeof(*d->comms));
  }
  tr_comm_t *c = &d->comms[d->ncomms++];
  memset(c, 0, sizeof(*c));
  c->id = tr_xstrndup(name, strlen(name));
  json_t *cfg = json_object_get(pg_config, name);
  if (!desc) desc = json_string_value(json_object_get(cfg, "desc"));
  c->name = group_label(name, desc);
  c->rank = c->size = -1;
  c->last_enqueued = c->last_started = c->last_completed = -1;
  const char *ranks = json_string_value(json_object_get(cfg, "ranks"));
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

/* Reads a dump's tree (root: a borrowed reference; 1 when it is no Flight
 * Recorder dump). */
static int from_tree(json_t *root, int rank, tr_dump_t *d, char *why, size_t whylen) {
  json_t *version = json_object_get(root, "version");
  if (!json_is_string(version) || (!json_is_object(json_object_get(root, "pg_config")) &&
                                   !json_is_array(json_object_get(root, "entries")))) {
    return 1;
  }
  snprintf(d->version, sizeof(d->version), "%s", json_string_value(version));
  d->format = TR_FMT_PYTORCH;
  if (atoi(d->version) != 2) {
    snprintf(why, whylen,
             "PyTorch Flight Recorder version %s is not supported (this reader knows 2.x)",
             d->version);
    return -1;
  }
  d->rank = rank;
  d->epoch = 0;
  const char *lib = json_string_value(json_object_get(root, "comm_lib_version"));
  json_t *pg_config = json_object_get(root, "pg_config");
  json_t *pg_status = json_object_get(root, "pg_status");
  json_t *entries = json_object_get(root, "entries");
  /* The backend: the prefix of the profiling names ("gloo:all_reduce"). */
  const char *pn0 = json_string_value(json_object_get(json_array_get(entries, 0), "profiling_name"));
  const char *colon = pn0 ? strchr(pn0, ':') : NULL;
  if (colon && colon > pn0) d->backend = tr_xstrndup(pn0, (size_t)(colon - pn0));
  else if (lib && *lib) d->backend = tr_xstrndup("nccl", 4); /* only NCCL's recorder sets it */
  d->backend_version = tr_xstrndup(lib ? lib : "", lib ? strlen(lib) : 0);
  d->reason = tr_xstrndup("pytorch", 7);
  size_t cap = 0, i;
  /* World size: the default group's ranks; without it (gloo dumps), the
   * largest rank pg_config names, a lower bound the analysis raises to the
   * largest rank that dumped. */
  json_t *def = json_object_get(pg_config, "0");
  const char *wranks = json_string_value(json_object_get(def, "ranks"));
  d->world_size = -1;
  if (wranks) {
    index_in(wranks, -1, &d->world_size);
  } else {
    const char *gname;
    json_t *gv;
    json_object_foreach(pg_config, gname, gv) {
      int m = max_rank_in(json_string_value(json_object_get(gv, "ranks")));
      if (m + 1 > d->world_size) d->world_size = m + 1;
    }
    if (d->world_size == 0) d->world_size = -1;
  }
  json_t *e;
  /* Every group this rank is in, even without entries ("" is no group:
   * gloo dumps' placeholder). */
  const char *gname;
  json_t *gv;
  json_object_foreach(pg_config, gname, gv) if (*gname) comm_for(d, &cap, gname, NULL, pg_config);
  json_array_foreach(entries, i, e) {
    json_t *pg = json_object_get(e, "process_group");
    const char *name = json_string_value(json_array_get(pg, 0));
    if (!name) {
      snprintf(why, whylen, "entry %zu has no process_group", i);
      return -1;
    }
    tr_comm_t *c = comm_for(d, &cap, name, json_string_value(json_array_get(pg, 1)), pg_config);
    if (c->n == c->cap_e) {
      c->cap_e = c->cap_e ? 2 * c->cap_e : 64;
      c->e = tr_xrealloc(c->e, c->cap_e * sizeof(*c->e));
    }
    tr_entry_t *t = &c->e[c->n++];
    memset(t, 0, sizeof(*t));
    const char *pname = json_string_value(json_object_get(e, "profiling_name"));
    const char *op = map_op(pname ? pname : "unknown");
    t->op = (uint8_t)tr_intern(op, strlen(op));
    if (pname && *pname) t->name = (uint32_t)tr_intern(pname, strlen(pname)) + 1; /* shown beside op */
    t->p2p = json_is_true(json_object_get(e, "is_p2p")) || !strcmp(op, "send") || !strcmp(op, "recv");
    t->seq = (uint64_t)int_of(json_object_get(e, t->p2p ? "p2p_seq_id" : "collective_seq_id"), 0);
    const char *dt = json_string_value(json_array_get(json_object_get(e, "input_dtypes"), 0));
    t->dtype = (uint8_t)tr_intern(dt ? dt : "none", strlen(dt ? dt : "none"));
    t->count = elements(json_object_get(e, "input_sizes"));
    t->peer = -1;
    t->rank = c->rank;
    t->size = c->size;
    t->t_created = int_of(json_object_get(e, "time_created_ns"), 0);
    if (t->t_created > d->trigger_wall_ns) d->trigger_wall_ns = t->t_created;
    t->t_started = int_of(json_object_get(e, "time_discovered_started_ns"), 0);
    t->t_completed = int_of(json_object_get(e, "time_discovered_completed_ns"), 0);
    /* With timing on, duration_ms measures the kernel: prefer it. */
    json_t *dur = json_object_get(e, "duration_ms");
    int64_t dur_ns = json_is_number(dur) ? int_of_real(json_number_value(dur) * 1e6, -1) : -1;
    if (dur_ns >= 0 && t->t_started && dur_ns <= INT64_MAX - t->t_started) t->t_completed = t->t_started + dur_ns;
    json_t *tmo = json_object_get(e, "timeout_ms");
    t->timeout_ns = json_is_number(tmo) ? int_of_real(json_number_value(tmo) * 1e6, -1) : -1;
    const char *state = json_string_value(json_object_get(e, "state"));
    t->state = !state ? TR_SCHEDULED
               : !strcmp(state, "completed") ? TR_COMPLETED
               : !strcmp(state, "started") ? TR_STARTED
               : TR_SCHEDULED;
    /* A retired entry has completed: the recorder retires an entry when
     * its work ends; gloo never moves "state" past "scheduled". */
    if (json_is_true(json_object_get(e, "retired"))) t->state = TR_COMPLETED;
  }
  /* pg_status is keyed by the rank-local pg_id: find each id's group name
   * through the entries. */
  const char *pgid;
  json_t *sv;
  json_object_foreach(pg_status, pgid, sv) {
    const char *name = NULL;
    json_array_foreach(entries, i, e) {
      if (int_of(json_object_get(e, "pg_id"), -1) == strtoll(pgid, NULL, 10)) {
        name = json_string_value(json_array_get(json_object_get(e, "process_group"), 0));
        break;
      }
    }
    if (!name && !strcmp(pgid, "0")) name = "0";
    if (!name) continue;
    tr_comm_t *c = comm_for(d, &cap, name, NULL, pg_config);
    c->last_enqueued = int_of(json_object_get(sv, "last_enqueued_collective"), -1);
    c->last_started = int_of(json_object_get(sv, "last_started_collective"), -1);
    c->last_completed = int_of(json_object_get(sv, "last_completed_collective"), -1);
    for (size_t k = 0; k < c->n; k++)
      if (!c->e[k].p2p && c->last_completed >= 0 && c->e[k].seq <= (uint64_t)c->last_completed &&
          c->e[k].state != TR_FAILED)
        c->e[k].state = TR_COMPLETED;
  }
  return 0;
}

int tr_parse_pytorch(const char *buf, size_t len, int rank, tr_dump_t *d, char *why,
                     size_t whylen) {
  json_error_t err;
  json_t *root = json_loadb(buf, len, 0, &err);
  if (!root) {
    snprintf(why, whylen, "not valid JSON: %s (line %d, column %d)", err.text, err.line, err.column);
    return -1;
  }
  int rc = from_tree(root, rank, d, why, whylen);
  json_decref(root);
  return rc;
}

int tr_parse_pytorch_pickle(const unsigned char *buf, size_t len, int rank, tr_dump_t *d,
                            char *why, size_t whylen) {
  json_t *root = tr_pickle_load(buf, len, why, whylen);
  if (!root) return -1;
  int rc = from_tree(root, rank, d, why, whylen);
  json_decref(root);
  if (rc == 1) {
    snprintf(why, whylen, "a Python pickle, but not of a PyTorch Flight Recorder dump (no version "
             "with pg_config or entries)");
    return -1;
  }
  return rc;
}
