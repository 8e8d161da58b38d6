/*
 * analyze.c - aligns the ranks of each communicator and epoch by sequence
 * number and finds the first collective where they diverge: ranks that
 * never entered it, ranks stuck in it, mismatched op/dtype/count/root,
 * failures, and stragglers; plus ranks whose dump is missing or broken.
 *
 * The majority of the ranks that reached a collective defines what was
 * expected, never rank 0. Only the newest epoch of each communicator
 * decides the status; older epochs (before a recovery) are reported as
 * history.
 */
#include <stdlib.h>
#include <string.h>

#include "ftc_alloc.h"
#include "trace.h"

static const char *state_word(int st) {
  switch (st) {
    case TR_SCHEDULED: return "scheduled";
    case TR_STARTED: return "started";
    case TR_COMPLETED: return "completed";
    default: return "failed";
  }
}

const char *tr_rank_list(const int *ranks, size_t n, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && off < len;) {
    size_t j = i;
    while (j + 1 < n && ranks[j + 1] == ranks[j] + 1) j++;
    int w;
    if (off > len - 40 && j + 1 < n) {
      snprintf(buf + off, len - off, "... (%zu ranks)", n);
      return buf;
    }
    if (j == i) w = snprintf(buf + off, len - off, "%s%d", i ? "," : "", ranks[i]);
    else w = snprintf(buf + off, len - off, "%s%d-%d", i ? "," : "", ranks[i], ranks[j]);
    off += (size_t)w;
    i = j + 1;
  }
  return buf;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static int cmp_entry(const void *a, const void *b) {
  const tr_entry_t *x = a, *y = b;
  if (x->p2p != y->p2p) return x->p2p - y->p2p;
  if (x->epoch != y->epoch) return x->epoch < y->epoch ? -1 : 1;
  if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
  return (x->t_created > y->t_created) - (x->t_created < y->t_created);
}

/* Collectives first, by epoch and seq; p2p entries after them. */
static void order_entries(tr_comm_t *c) {
  for (size_t i = 1; i < c->n; i++)
    if (cmp_entry(&c->e[i - 1], &c->e[i]) > 0) {
      qsort(c->e, c->n, sizeof(*c->e), cmp_entry);
      return;
    }
}

static int64_t select_kth(int64_t *v, size_t n, size_t k) {
  size_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int64_t pivot = v[lo + (hi - lo) / 2];
    size_t i = lo, j = hi;
    while (i <= j) {
      while (v[i] < pivot) i++;
      while (v[j] > pivot) j--;
      if (i <= j) {
        int64_t t = v[i];
        v[i] = v[j];
        v[j] = t;
        i++;
        if (j == 0) break;
        j--;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return v[k];
  }
  return v[k];
}

static int64_t median(int64_t *v, size_t n) { return n ? select_kth(v, n, n / 2) : -1; }

static void add_finding(tr_report_t *rep, size_t *cap, int kind, int group, uint64_t seq,
                        const int *ranks, size_t nranks, const char *what) {
  if (rep->nf == *cap) {
    *cap = *cap ? 2 * *cap : 16;
    rep->f = tr_xrealloc(rep->f, *cap * sizeof(*rep->f));
  }
  tr_finding_t *f = &rep->f[rep->nf++];
  f->kind = kind;
  f->group = group;
  f->seq = seq;
  f->nranks = nranks;
  f->ranks = tr_xmalloc((nranks ? nranks : 1) * sizeof(int));
  if (nranks) memcpy(f->ranks, ranks, nranks * sizeof(int));
  qsort(f->ranks, nranks, sizeof(int), cmp_int);
  snprintf(f->what, sizeof(f->what), "%s", what);
  f->t_first = 0;
  f->consequence = 0;
}

/* Per interned op: 1 rooted (broadcast, reduce, gather, scatter), 0 not,
 * -1 not known yet; and whether its count is the same on every rank (not
 * alltoallv's: each rank records what it sends). */
static signed char rooted[256], uneven[256];
static int rooted_ready;

static void op_kind(int op) {
  if (!rooted_ready) {
    memset(rooted, -1, sizeof(rooted));
    rooted_ready = 1;
  }
  if (rooted[op & 255] < 0) {
    const char *s = tr_str(op);
    rooted[op & 255] = !strcmp(s, "broadcast") || !strcmp(s, "reduce") || !strcmp(s, "gather") ||
                       !strcmp(s, "scatter");
    uneven[op & 255] = !strcmp(s, "alltoallv");
  }
}

static int is_rooted(int op) {
  op_kind(op);
  return rooted[op & 255];
}

static int count_differs(const tr_entry_t *e, int op, uint64_t count) {
  op_kind(e->op);
  return e->count != count && !(e->op == op && uneven[e->op & 255]);
}

typedef struct sig {
  int op, dtype, peer;
  uint64_t count;
  size_t votes;
} sig_t;

static int same_sig(const tr_entry_t *e, const sig_t *s) {
  return e->op == s->op && e->dtype == s->dtype && !count_differs(e, s->op, s->count) &&
         (!is_rooted(e->op) || e->peer == s->peer);
}

static void describe_call(char *buf, size_t len, int op, int dtype, uint64_t count, int peer) {
  if (is_rooted(op) && peer >= 0) /* PyTorch records no root: -1 */
    snprintf(buf, len, "%s %s x%llu root %d", tr_str(op), tr_str(dtype), (unsigned long long)count, peer);
  else
    snprintf(buf, len, "%s %s x%llu", tr_str(op), tr_str(dtype), (unsigned long long)count);
}

/* Group construction --------------------------------------------------- */

static int find_group(const tr_report_t *rep, const char *id, uint64_t epoch) {
  for (size_t i = 0; i < rep->ng; i++)
    if (rep->g[i].epoch == epoch && !strcmp(rep->g[i].comm_id, id)) return (int)i;
  return -1;
}

static int add_group(tr_report_t *rep, size_t *cap, const tr_comm_t *c, uint64_t epoch) {
  int gi = find_group(rep, c->id, epoch);
  if (gi >= 0) return gi;
  if (rep->ng == *cap) {
    *cap = *cap ? 2 * *cap : 8;
    rep->g = tr_xrealloc(rep->g, *cap * sizeof(*rep->g));
  }
  tr_group_t *g = &rep->g[rep->ng];
  memset(g, 0, sizeof(*g));
  g->comm_id = c->id;
  g->comm_name = c->name;
  g->pg_name = c->pg_name && *c->pg_name ? c->pg_name : NULL;
  g->pg_desc = c->pg_desc && *c->pg_desc ? c->pg_desc : NULL;
  g->epoch = epoch;
  g->size = -1;
  return (int)rep->ng++;
}

static void add_member(tr_group_t *g, size_t *cap, const tr_member_t *m) {
  if (g->nm == *cap) {
    *cap = *cap ? 2 * *cap : 16;
    g->m = tr_xrealloc(g->m, *cap * sizeof(*g->m));
  }
  g->m[g->nm++] = *m;
}

static int cmp_member(const void *a, const void *b) {
  const tr_member_t *x = a, *y = b;
  return (x->comm_rank > y->comm_rank) - (x->comm_rank < y->comm_rank);
}

static void build_groups(tr_set_t *set, tr_report_t *rep) {
  size_t capg = 0;
  for (size_t di = 0; di < set->nd; di++) {
    tr_dump_t *d = &set->d[di];
    if (d->superseded) continue;
    for (size_t ci = 0; ci < d->ncomms; ci++) {
      tr_comm_t *c = &d->comms[ci];
      order_entries(c);
      add_group(rep, &capg, c, c->epoch);
      for (size_t i = 0; i < c->n && !c->e[i].p2p; i++)
        if (i == 0 || c->e[i].epoch != c->e[i - 1].epoch) add_group(rep, &capg, c, c->e[i].epoch);
    }
  }
  size_t *capm = tr_xcalloc(rep->ng ? rep->ng : 1, sizeof(size_t));
  for (size_t di = 0; di < set->nd; di++) {
    tr_dump_t *d = &set->d[di];
    if (d->superseded) continue;
    for (size_t ci = 0; ci < d->ncomms; ci++) {
      tr_comm_t *c = &d->comms[ci];
      size_t i = 0;
      int cur_done = 0;
      while (i < c->n && !c->e[i].p2p) {
        size_t j = i;
        while (j < c->n && !c->e[j].p2p && c->e[j].epoch == c->e[i].epoch) j++;
        int gi = find_group(rep, c->id, c->e[i].epoch);
        tr_member_t m = {.dump = (int)di, .comm = (int)ci, .grank = d->rank, .a = i, .b = j};
        m.comm_rank = c->e[i].rank >= 0 ? c->e[i].rank : (c->e[i].epoch == c->epoch ? c->rank : -1);
        if (c->e[i].epoch == c->epoch) cur_done = 1;
        add_member(&rep->g[gi], &capm[gi], &m);
        i = j;
      }
      if (!cur_done) {
        int gi = find_group(rep, c->id, c->epoch);
        tr_member_t m = {.dump = (int)di, .comm = (int)ci, .grank = d->rank, .a = 0, .b = 0,
                         .comm_rank = c->rank};
        add_member(&rep->g[gi], &capm[gi], &m);
      }
    }
  }
  ftc__free(capm);
  for (size_t gi = 0; gi < rep->ng; gi++) {
    tr_group_t *g = &rep->g[gi];
    qsort(g->m, g->nm, sizeof(*g->m), cmp_member);
    /* Size: the majority of what members say (entries, else the comm). */
    int best = -1;
    size_t bestv = 0;
    for (size_t i = 0; i < g->nm && i < 64; i++) {
      const tr_member_t *m = &g->m[i];
      const tr_comm_t *c = &set->d[m->dump].comms[m->comm];
      int s = m->b > m->a ? c->e[m->a].size : c->size;
      size_t v = 0;
      for (size_t k = 0; k < g->nm; k++) {
        const tr_member_t *o = &g->m[k];
        const tr_comm_t *oc = &set->d[o->dump].comms[o->comm];
        if ((o->b > o->a ? oc->e[o->a].size : oc->size) == s) v++;
      }
      if (v > bestv) bestv = v, best = s;
    }
    g->size = best;
    uint64_t newest = g->epoch;
    for (size_t k = 0; k < rep->ng; k++)
      if (!strcmp(rep->g[k].comm_id, g->comm_id) && rep->g[k].epoch > newest) newest = rep->g[k].epoch;
    g->latest = newest == g->epoch;
  }
}

/* Analysis of one group ------------------------------------------------- */

typedef struct ctx {
  tr_set_t *set;
  tr_report_t *rep;
  size_t capf;
  int64_t *tmp; /* scratch for medians */
  size_t tmpcap;
} ctx_t;

static const tr_entry_t *ent(const ctx_t *x, const tr_member_t *m, size_t i) {
  return &x->set->d[m->dump].comms[m->comm].e[i];
}

/* A member whose own failure in this epoch is "revoked" learned of the
 * failure from the coordinator before it reached the next collective: it
 * did not enter it because the epoch was already over, not because it
 * stalled (the others' failure names who broke the epoch). */
static int revoked_first(const ctx_t *x, const tr_member_t *m, const tr_group_t *g) {
  const tr_dump_t *d = &x->set->d[m->dump];
  return d->failure.present && d->failure.epoch == (int64_t)g->epoch && d->failure.status &&
         !strcmp(d->failure.status, "revoked");
}

static const char *who(char *buf, size_t len, const int *ranks, size_t n) {
  char list[400];
  snprintf(buf, len, "%s %s", n == 1 ? "rank" : "ranks", tr_rank_list(ranks, n, list, sizeof(list)));
  return buf;
}

/* A straggler arrives late by at least this share of the typical step
 * (time between collectives plus time inside one) and at least this long,
 * as a median over at least TR_STRAGGLER_MIN_SEQS aligned collectives
 * (docs/ftcomm-trace.md, "Stragglers"). */
#define TR_STRAGGLER_SHARE 0.20
#define TR_STRAGGLER_MIN_NS 2000000
#define TR_STRAGGLER_MIN_SEQS 5

static void stragglers(ctx_t *x, int gi, uint64_t lo, uint64_t end) {
  tr_group_t *g = &x->rep->g[gi];
  if (g->nm < 3 || end < lo + TR_STRAGGLER_MIN_SEQS) return;
  int64_t *gap = tr_xmalloc(g->nm * sizeof(int64_t)), *dur = tr_xmalloc(g->nm * sizeof(int64_t));
  for (size_t mi = 0; mi < g->nm; mi++) {
    const tr_member_t *m = &g->m[mi];
    size_t ng = 0, nd = 0;
    if (x->tmpcap < 2 * (m->b - m->a) + 2) {
      x->tmpcap = 2 * (m->b - m->a) + 2;
      x->tmp = tr_xrealloc(x->tmp, x->tmpcap * sizeof(int64_t));
    }
    int64_t *tg = x->tmp, *td = x->tmp + (m->b - m->a) + 1;
    for (size_t i = m->a; i < m->b; i++) {
      const tr_entry_t *e = ent(x, m, i);
      if (e->seq < lo || e->seq >= end || e->state != TR_COMPLETED) continue;
      int64_t from = e->t_started ? e->t_started : e->t_created;
      if (from && e->t_completed >= from) td[nd++] = e->t_completed - from;
      if (i > m->a) {
        const tr_entry_t *p = ent(x, m, i - 1);
        if (p->seq + 1 == e->seq && p->t_completed && e->t_created >= p->t_completed)
          tg[ng++] = e->t_created - p->t_completed;
      }
    }
    gap[mi] = median(tg, ng);
    dur[mi] = median(td, nd);
  }
  int64_t *s = tr_xmalloc(g->nm * sizeof(int64_t));
  memcpy(s, gap, g->nm * sizeof(int64_t));
  int64_t G = median(s, g->nm);
  memcpy(s, dur, g->nm * sizeof(int64_t));
  int64_t D = median(s, g->nm);
  ftc__free(s);
  int *late = tr_xmalloc(g->nm * sizeof(int));
  size_t nlate = 0;
  int64_t worst_gap = 0, worst_dur = 0;
  /* A rank that arrives late shows it twice, on its own clock: more time
   * between collectives than the others (gap) and less time inside them,
   * since the others wait there for it (dur). Its lateness is the smaller
   * of the two excesses; it is a straggler only when that is a real share
   * of the step and a real time (TR_STRAGGLER_SHARE, TR_STRAGGLER_MIN_NS),
   * not the jitter that puts some rank last at every collective. */
  int64_t step_ns = (G > 0 ? G : 0) + (D > 0 ? D : 0);
  int64_t bar = (int64_t)(TR_STRAGGLER_SHARE * (double)step_ns);
  if (bar < TR_STRAGGLER_MIN_NS) bar = TR_STRAGGLER_MIN_NS;
  for (size_t mi = 0; mi < g->nm; mi++) {
    int have_gap = G >= 0 && gap[mi] >= 0, have_dur = D >= 0 && dur[mi] >= 0;
    if (!have_gap && !have_dur) continue;
    int64_t by_gap = have_gap ? gap[mi] - G : INT64_MAX, by_dur = have_dur ? D - dur[mi] : INT64_MAX;
    int64_t lateness = by_gap < by_dur ? by_gap : by_dur;
    if (lateness >= bar) {
      late[nlate++] = g->m[mi].grank >= 0 ? g->m[mi].grank : g->m[mi].comm_rank;
      if (gap[mi] > worst_gap) worst_gap = gap[mi];
      if (!worst_dur || dur[mi] < worst_dur) worst_dur = dur[mi];
    }
  }
  if (nlate && nlate * 2 < g->nm) {
    char w[512], r[450];
    snprintf(w, sizeof(w),
             "straggler in %s epoch %llu: %s %s late to collectives seq %llu-%llu: %.1f ms "
             "between collectives (typical %.1f ms), %.1f ms inside one (the others wait %.1f ms)",
             g->comm_name, (unsigned long long)g->epoch, who(r, sizeof(r), late, nlate),
             nlate == 1 ? "arrives" : "arrive", (unsigned long long)lo,
             (unsigned long long)(end - 1), worst_gap / 1e6, G / 1e6, worst_dur / 1e6, D / 1e6);
    add_finding(x->rep, &x->capf, TR_K_STRAGGLER, gi, lo, late, nlate, w);
  }
  ftc__free(late);
  ftc__free(gap);
  ftc__free(dur);
}

/* The smallest seq after s that some member recorded (cur[i]: each
 * member's first entry at or after s); 0 in *more when none is. The walk
 * visits recorded seqs only, so seqs far apart in a damaged dump (1 and
 * 2^63) cost two steps, not 2^63. */
static uint64_t next_seq(const ctx_t *x, const tr_group_t *g, const size_t *cur, uint64_t s,
                         int *more) {
  uint64_t best = 0;
  *more = 0;
  for (size_t i = 0; i < g->nm; i++) {
    const tr_member_t *m = &g->m[i];
    size_t j = cur[i];
    while (j < m->b && ent(x, m, j)->seq <= s) j++;
    if (j < m->b && (!*more || ent(x, m, j)->seq < best)) best = ent(x, m, j)->seq, *more = 1;
  }
  return best;
}

static void analyze_group(ctx_t *x, int gi) {
  tr_group_t *g = &x->rep->g[gi];
  tr_report_t *rep = x->rep;
  size_t n = g->nm;
  int have = 0;
  uint64_t lo = 0, hi = 0;
  for (size_t i = 0; i < n; i++) {
    const tr_member_t *m = &g->m[i];
    if (m->b == m->a) continue;
    uint64_t first = ent(x, m, m->a)->seq, last = ent(x, m, m->b - 1)->seq;
    if (!have || first > lo) lo = first;
    if (!have || last > hi) hi = last;
    have = 1;
  }
  g->lo = lo;
  g->hi = hi;
  if (!have) {
    snprintf(g->note, sizeof(g->note), "no collectives recorded");
    return;
  }
  size_t *cur = tr_xmalloc(n * sizeof(size_t));
  for (size_t i = 0; i < n; i++) cur[i] = g->m[i].a;
  int *absent = tr_xmalloc(n * sizeof(int)), *stuck = tr_xmalloc(n * sizeof(int)),
      *failed = tr_xmalloc(n * sizeof(int)), *bad = tr_xmalloc(n * sizeof(int));
  const tr_entry_t **at = tr_xmalloc(n * sizeof(*at));
  sig_t sigs[16];
  uint64_t s;
  int more = 1;
  for (s = lo; more && s <= hi; s = next_seq(x, g, cur, s, &more)) {
    size_t nsig = 0, npresent = 0, ncompleted = 0, nabsent = 0;
    for (size_t i = 0; i < n; i++) {
      const tr_member_t *m = &g->m[i];
      while (cur[i] < m->b && ent(x, m, cur[i])->seq < s) cur[i]++;
      at[i] = NULL;
      if (cur[i] < m->b && ent(x, m, cur[i])->seq == s) {
        const tr_entry_t *e = at[i] = ent(x, m, cur[i]);
        npresent++;
        if (e->state == TR_COMPLETED) ncompleted++;
        size_t k;
        for (k = 0; k < nsig && !same_sig(e, &sigs[k]); k++) {
        }
        if (k == nsig && nsig < 16) {
          sigs[nsig] = (sig_t){e->op, e->dtype, e->peer, e->count, 0};
          nsig++;
        }
        if (k < 16) sigs[k].votes++;
      } else if (cur[i] >= m->b) {
        nabsent++; /* a gap in the middle of a ring is not counted */
      }
    }
    if (nsig <= 1 && nabsent == 0 && ncompleted == npresent) continue;
    size_t best = 0;
    for (size_t k = 1; k < nsig; k++)
      if (sigs[k].votes > sigs[best].votes) best = k;
    const sig_t *exp = &sigs[best];
    /* Everyone in it, nobody done, nobody odd: running, or hung past its timeout. */
    if (nsig == 1 && nabsent == 0 && ncompleted == 0) {
      int64_t worst = -1, timeout = -1;
      for (size_t i = 0; i < n; i++) {
        const tr_entry_t *e = at[i];
        const tr_dump_t *d = &x->set->d[g->m[i].dump];
        if (!e) continue;
        int64_t since = e->t_started ? e->t_started : e->t_created;
        if (!d->trigger_mono_ns || !since) continue;
        if (d->trigger_mono_ns - since > worst) worst = d->trigger_mono_ns - since, timeout = e->timeout_ns;
      }
      /* With a member's dump missing, it is the suspect: not "in flight". */
      int complete = g->size < 0 || (int)n >= g->size;
      if (complete && (worst < 0 || timeout <= 0 || worst <= timeout)) {
        if (s == hi) {
          snprintf(g->note, sizeof(g->note), "seq %llu in flight on every rank at dump time",
                   (unsigned long long)s);
          break;
        }
        continue;
      }
    }
    g->diverged = 1;
    g->div_seq = s;
    g->exp_op = exp->op;
    g->exp_dtype = exp->dtype;
    g->exp_peer = exp->peer;
    g->exp_count = exp->count;
    char call[160], where[400], w[1024], r[450];
    describe_call(call, sizeof(call), exp->op, exp->dtype, exp->count, exp->peer);
    snprintf(where, sizeof(where), "%s epoch %llu seq %llu (%s)", g->comm_name,
             (unsigned long long)g->epoch, (unsigned long long)s, call);
    size_t na = 0, ns = 0, nf = 0;
    /* Mismatches, one finding per distinct wrong call. */
    for (size_t k = 0; k < nsig; k++) {
      if (k == best) continue;
      size_t nb = 0;
      const tr_entry_t *one = NULL;
      for (size_t i = 0; i < n; i++)
        if (at[i] && same_sig(at[i], &sigs[k])) {
          bad[nb++] = g->m[i].grank;
          one = at[i];
        }
      if (!nb) continue;
      char fields[200] = "", mine[160];
      int off = 0;
      if (one->op != exp->op)
        off += snprintf(fields + off, sizeof(fields) - off, "%sop", off ? ", " : "");
      if (one->dtype != exp->dtype)
        off += snprintf(fields + off, sizeof(fields) - off, "%sdtype", off ? ", " : "");
      if (count_differs(one, exp->op, exp->count))
        off += snprintf(fields + off, sizeof(fields) - off, "%scount", off ? ", " : "");
      if (is_rooted(one->op) && one->op == exp->op && one->peer != exp->peer)
        off += snprintf(fields + off, sizeof(fields) - off, "%sroot", off ? ", " : "");
      describe_call(mine, sizeof(mine), one->op, one->dtype, one->count, one->peer);
      snprintf(w, sizeof(w), "mismatched %s at %s: %s called %s; the majority (%zu of %zu ranks) called %s",
               fields, where, who(r, sizeof(r), bad, nb), mine, exp->votes, npresent, call);
      add_finding(rep, &x->capf, TR_K_MISMATCH, gi, s, bad, nb, w);
    }
    for (size_t i = 0; i < n; i++) {
      const tr_member_t *m = &g->m[i];
      if (!at[i] && cur[i] >= m->b && revoked_first(x, m, g)) continue;
      if (!at[i] && cur[i] >= m->b) absent[na++] = m->grank;
      else if (at[i] && same_sig(at[i], exp) && at[i]->state == TR_FAILED) failed[nf++] = m->grank;
      else if (at[i] && same_sig(at[i], exp) && at[i]->state != TR_COMPLETED) stuck[ns++] = m->grank;
    }
    if (na) {
      /* Where the absent ranks are: their last collective. */
      const tr_member_t *m0 = NULL;
      for (size_t i = 0; i < n && !m0; i++)
        if (!at[i] && cur[i] >= g->m[i].b) m0 = &g->m[i];
      char last[200] = "no collective recorded in this epoch";
      if (m0->b > m0->a) {
        const tr_entry_t *e = ent(x, m0, m0->b - 1);
        snprintf(last, sizeof(last), "last entered seq %llu %s, %s", (unsigned long long)e->seq,
                 tr_str(e->op), state_word(e->state));
      }
      snprintf(w, sizeof(w), "%s never entered %s (%s%s); %zu of %zu ranks entered it", who(r, sizeof(r), absent, na),
               where, na > 1 ? "e.g. " : "", last, npresent, n);
      add_finding(rep, &x->capf, TR_K_NEVER_ENTERED, gi, s, absent, na, w);
      int64_t first = 0;
      for (size_t i = 0; i < n; i++)
        if (at[i] && at[i]->t_created && (!first || at[i]->t_created < first)) first = at[i]->t_created;
      rep->f[rep->nf - 1].t_first = first;
    }
    if (nf) {
      snprintf(w, sizeof(w), "%s failed in %s", who(r, sizeof(r), failed, nf), where);
      add_finding(rep, &x->capf, TR_K_FAILED, gi, s, failed, nf, w);
    }
    if (ns) {
      int started = 0;
      for (size_t i = 0; i < n; i++)
        if (at[i] && at[i]->state == TR_STARTED) started = 1;
      if (na || nf || nsig > 1) {
        snprintf(w, sizeof(w), "%s waiting in %s (%s, not completed)", who(r, sizeof(r), stuck, ns),
                 where, started ? "started" : "scheduled");
        add_finding(rep, &x->capf, TR_K_STUCK, gi, s, stuck, ns, w);
      } else if (ncompleted) {
        snprintf(w, sizeof(w), "%s stuck in %s (%s, not completed); %zu ranks completed it",
                 who(r, sizeof(r), stuck, ns), where, started ? "started" : "scheduled", ncompleted);
        add_finding(rep, &x->capf, TR_K_STUCK, gi, s, stuck, ns, w);
      } else {
        int64_t worst = 0, timeout = 0;
        for (size_t i = 0; i < n; i++) {
          const tr_dump_t *d = &x->set->d[g->m[i].dump];
          if (!at[i]) continue;
          int64_t since = at[i]->t_started ? at[i]->t_started : at[i]->t_created;
          if (d->trigger_mono_ns && since && d->trigger_mono_ns - since > worst)
            worst = d->trigger_mono_ns - since, timeout = at[i]->timeout_ns;
        }
        if (timeout > 0)
          snprintf(w, sizeof(w), "all %zu ranks present are stuck in %s for %.1f s (timeout %.1f s)",
                   ns, where, worst / 1e9, timeout / 1e9);
        else
          snprintf(w, sizeof(w), "all %zu ranks present are stuck in %s", ns, where);
        add_finding(rep, &x->capf, TR_K_ALL_STUCK, gi, s, stuck, ns, w);
      }
    }
    break;
  }
  if (g->latest) stragglers(x, gi, lo, g->diverged ? g->div_seq : hi + 1);
  ftc__free(cur);
  ftc__free(absent);
  ftc__free(stuck);
  ftc__free(failed);
  ftc__free(bad);
  ftc__free(at);
}

/* Across groups -------------------------------------------------------- */

/* Where rank `dump` waits outside group gi: its newest collective in
 * another group's newest epoch that has not completed. NULL when none. */
static const tr_entry_t *waits_elsewhere(const tr_set_t *set, const tr_report_t *rep, int dump, int gi,
                                         const char **gname) {
  const tr_dump_t *d = &set->d[dump];
  const tr_entry_t *best = NULL;
  for (size_t ci = 0; ci < d->ncomms; ci++) {
    const tr_comm_t *c = &d->comms[ci];
    if (!strcmp(c->id, rep->g[gi].comm_id)) continue;
    size_t k = c->n;
    while (k > 0 && c->e[k - 1].p2p) k--;
    if (!k) continue;
    const tr_entry_t *e = &c->e[k - 1];
    int og = find_group(rep, c->id, e->epoch);
    if (og < 0 || !rep->g[og].latest || e->state == TR_COMPLETED || e->state == TR_FAILED) continue;
    if (!best || e->t_created > best->t_created) best = e, *gname = c->name;
  }
  return best;
}

/* A rank that never entered one group's collective because it is blocked
 * in another group's is no culprit there: mark such findings as
 * consequences, and say where their ranks wait. */
static void across_groups(tr_set_t *set, tr_report_t *rep) {
  for (size_t i = 0; i < rep->nf; i++) {
    tr_finding_t *f = &rep->f[i];
    if (f->kind != TR_K_NEVER_ENTERED || f->group < 0) continue;
    const tr_group_t *g = &rep->g[f->group];
    size_t blocked = 0;
    char where[200] = "";
    for (size_t r = 0; r < f->nranks; r++) {
      int dump = -1;
      for (size_t mi = 0; mi < g->nm && dump < 0; mi++)
        if (g->m[mi].grank == f->ranks[r]) dump = g->m[mi].dump;
      const char *gname = NULL;
      const tr_entry_t *e = dump >= 0 ? waits_elsewhere(set, rep, dump, f->group, &gname) : NULL;
      if (!e) continue;
      if (!blocked++)
        snprintf(where, sizeof(where), "rank %d waits in %s seq %llu", f->ranks[r], gname,
                 (unsigned long long)e->seq);
    }
    if (!blocked) continue;
    f->consequence = blocked == f->nranks;
    size_t off = strlen(f->what);
    if (off < sizeof(f->what))
      snprintf(f->what + off, sizeof(f->what) - off, " (%s%s)",
               f->consequence ? "a consequence: " : "", where);
  }
}

/* Whole set ---------------------------------------------------------------- */

static void analyze_dumps(tr_set_t *set, tr_report_t *rep) {
  ctx_t x = {.set = set, .rep = rep};
  size_t nactive = 0;
  int maxrank = -1;
  for (size_t i = 0; i < set->nd; i++) {
    if (set->d[i].superseded) continue;
    nactive++;
    if (set->d[i].rank > maxrank) maxrank = set->d[i].rank;
  }
  rep->ranks_present = (int)nactive;
  /* World size: the majority of what the dumps say. */
  int ws = -1;
  size_t wv = 0;
  for (size_t i = 0; i < set->nd; i++) {
    if (set->d[i].superseded || set->d[i].world_size <= 0) continue;
    size_t v = 0;
    for (size_t k = 0; k < set->nd; k++)
      if (!set->d[k].superseded && set->d[k].world_size == set->d[i].world_size) v++;
    if (v > wv) wv = v, ws = set->d[i].world_size;
    if (wv * 2 > nactive) break;
  }
  if (ws < maxrank + 1) ws = maxrank + 1;
  rep->world_size = ws;

  if (nactive == 0) {
    rep->exit_status = TR_EXIT_UNUSABLE;
    size_t broken = 0;
    for (size_t i = 0; i < set->nbad; i++) broken += !set->bad[i].skipped;
    snprintf(rep->headline, sizeof(rep->headline),
             "unusable: no readable flight-recorder dump (%zu broken, %zu other file%s ignored)", broken,
             set->nbad - broken, set->nbad - broken == 1 ? "" : "s");
    return;
  }
  /* Missing and broken dumps. */
  char *have = tr_xcalloc((size_t)ws + 1, 1);
  for (size_t i = 0; i < set->nd; i++)
    if (!set->d[i].superseded && set->d[i].rank >= 0 && set->d[i].rank < ws) have[set->d[i].rank] = 1;
  rep->missing = tr_xmalloc(((size_t)ws + 1) * sizeof(int));
  for (size_t i = 0; i < set->nbad; i++)
    if (!set->bad[i].skipped && set->bad[i].rank_guess >= 0 && set->bad[i].rank_guess < ws)
      have[set->bad[i].rank_guess] = 2; /* reported as broken, not as missing */
  for (int r = 0; r < ws; r++)
    if (!have[r]) rep->missing[rep->nmissing++] = r;
  ftc__free(have);
  char w[1024], list[450];
  for (size_t i = 0; i < set->nbad; i++) {
    const tr_bad_t *b = &set->bad[i];
    if (b->skipped) continue;
    if (b->rank_guess >= 0)
      snprintf(w, sizeof(w), "unreadable dump %s (rank %d): %s", b->file, b->rank_guess, b->why);
    else
      snprintf(w, sizeof(w), "unreadable dump %s: %s", b->file, b->why);
    add_finding(rep, &x.capf, TR_K_BROKEN_FILE, -1, 0, b->rank_guess >= 0 ? &b->rank_guess : NULL,
                b->rank_guess >= 0 ? 1 : 0, w);
  }
  if (rep->nmissing) {
    snprintf(w, sizeof(w), "no dump from %s (%d of %d ranks dumped)",
             who(list, sizeof(list), rep->missing, rep->nmissing), rep->ranks_present, ws);
    add_finding(rep, &x.capf, TR_K_MISSING_DUMP, -1, 0, rep->missing, rep->nmissing, w);
  }

  build_groups(set, rep);
  for (size_t gi = 0; gi < rep->ng; gi++) analyze_group(&x, (int)gi);
  ftc__free(x.tmp);
  across_groups(set, rep);

  /* The headline: the most telling finding of a newest epoch. A wrong
   * call or a rank that never came explains the rest; a missing or broken
   * dump explains everyone else waiting. */
  static const int priority[] = {TR_K_MISMATCH, TR_K_NEVER_ENTERED, TR_K_MISSING_DUMP, TR_K_BROKEN_FILE,
                                 TR_K_FAILED, TR_K_STUCK, TR_K_ALL_STUCK, TR_K_STRAGGLER};
  for (size_t k = 0; k < sizeof(priority) / sizeof(priority[0]) && rep->primary < 0; k++)
    for (size_t i = 0; i < rep->nf; i++) {
      const tr_finding_t *f = &rep->f[i];
      if (f->kind != priority[k] || (f->group >= 0 && !rep->g[f->group].latest)) continue;
      if (rep->primary < 0) {
        rep->primary = (int)i;
        continue;
      }
      /* Ranks that never entered collectives of several groups: the root
       * cause is where a culprit is not itself waiting elsewhere, and of
       * those the collective the others entered first. */
      const tr_finding_t *p = &rep->f[rep->primary];
      if (f->kind == TR_K_NEVER_ENTERED &&
          (p->consequence > f->consequence ||
           (p->consequence == f->consequence && f->t_first &&
            (!p->t_first || f->t_first < p->t_first))))
        rep->primary = (int)i;
    }
  if (rep->primary < 0) {
    uint64_t last = 0;
    for (size_t gi = 0; gi < rep->ng; gi++)
      if (rep->g[gi].latest && rep->g[gi].hi > last) last = rep->g[gi].hi;
    size_t ncomm = 0;
    for (size_t gi = 0; gi < rep->ng; gi++) ncomm += rep->g[gi].latest;
    snprintf(rep->headline, sizeof(rep->headline),
             "healthy: %d ranks, %zu communicator%s, no divergence (up to seq %llu)", rep->ranks_present,
             ncomm, ncomm == 1 ? "" : "s", (unsigned long long)last);
    rep->exit_status = TR_EXIT_HEALTHY;
    return;
  }
  const tr_finding_t *p = &rep->f[rep->primary];
  static const char *const label[TR_K_COUNT] = {
      "DIVERGENCE", "DIVERGENCE", "MISSING", "DIVERGENCE", "DIVERGENCE", "HANG", "STRAGGLER", "BROKEN",
  };
  /* A missing or broken dump explains a hang of everyone else: say both. */
  const char *ctxt = "";
  char extra[600] = "";
  if (p->kind == TR_K_MISSING_DUMP || p->kind == TR_K_BROKEN_FILE) {
    for (size_t gi = 0; gi < rep->ng; gi++) {
      const tr_group_t *g = &rep->g[gi];
      if (!g->latest || !g->diverged) continue;
      char call[160];
      describe_call(call, sizeof(call), g->exp_op, g->exp_dtype, g->exp_count, g->exp_peer);
      snprintf(extra, sizeof(extra), "; the others stopped at %s epoch %llu seq %llu (%s)",
               g->comm_name, (unsigned long long)g->epoch, (unsigned long long)g->div_seq, call);
      ctxt = extra;
      break;
    }
  }
  /* Other groups that stalled behind it: named as its consequences. */
  if (p->kind == TR_K_NEVER_ENTERED) {
    size_t off = strlen(extra);
    for (size_t i = 0; i < rep->nf && off < sizeof(extra); i++) {
      const tr_finding_t *f = &rep->f[i];
      if ((int)i == rep->primary || f->kind != TR_K_NEVER_ENTERED || f->group == p->group ||
          !rep->g[f->group].latest)
        continue;
      int k = snprintf(extra + off, sizeof(extra) - off, "%s %s seq %llu", off ? "," : "; then stalled:",
                       rep->g[f->group].comm_name, (unsigned long long)f->seq);
      if (k > 0) off += (size_t)k;
    }
    ctxt = extra;
  }
  snprintf(rep->headline, sizeof(rep->headline), "%s: %s%s", label[p->kind], p->what, ctxt);
  rep->exit_status = TR_EXIT_FINDING;
}

/* The coordinator's verdict ------------------------------------------------ */

static int same_verdict(const tr_verdict_t *a, const tr_verdict_t *b) {
  if (a->epoch != b->epoch || a->next_epoch != b->next_epoch || a->ndropped != b->ndropped) return 0;
  for (size_t i = 0; i < a->ndropped; i++) {
    size_t k = 0;
    while (k < b->ndropped && b->dropped[k].rank != a->dropped[i].rank) k++;
    if (k == b->ndropped || strcmp(a->dropped[i].reason, b->dropped[k].reason)) return 0;
  }
  return 1;
}

/* Ranks the primary finding blames (never the ranks that wait for it). */
static size_t culprits_of(const tr_report_t *rep, int *out, size_t max) {
  if (rep->primary < 0) return 0;
  const tr_finding_t *f = &rep->f[rep->primary];
  if (f->kind != TR_K_MISMATCH && f->kind != TR_K_NEVER_ENTERED && f->kind != TR_K_MISSING_DUMP &&
      f->kind != TR_K_BROKEN_FILE && f->kind != TR_K_STRAGGLER &&
      !(f->kind == TR_K_STUCK && !strstr(f->what, " waiting in ")))
    return 0;
  size_t n = f->nranks < max ? f->nranks : max;
  memcpy(out, f->ranks, n * sizeof(int));
  return n;
}

/* "rank 2 hung (was silent for 1568 ms (heartbeat timeout))" for each
 * member the verdict drops (those that left on purpose are no culprits). */
static void describe_dropped(const tr_verdict_t *v, char *buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < v->ndropped && off < len; i++) {
    const tr_dropped_t *d = &v->dropped[i];
    const char *verb = !strcmp(d->reason, "crashed") ? "crashed"
                       : !strcmp(d->reason, "hung")  ? "hung"
                       : !strcmp(d->reason, "left")  ? "left"
                                                     : "was lost";
    int w = snprintf(buf + off, len - off, "%srank %d %s", off ? ", " : "", d->rank, verb);
    if (w > 0) off += (size_t)w;
    if (d->detail && *d->detail && off < len) {
      w = snprintf(buf + off, len - off, " (%s)", d->detail);
      if (w > 0) off += (size_t)w;
    }
  }
}

/* Compare the verdicts the dumps carry with what the dumps alone say, and
 * let the verdict name the culprit when the dumps do not. */
static void judge_verdict(tr_set_t *set, tr_report_t *rep) {
  tr_verdict_sum_t *vs = &rep->verdict;
  vs->dump = vs->pending_dump = -1;
  /* The verdict on the newest epoch judged; of those, the one most dumps carry. */
  int64_t newest = -1;
  for (size_t i = 0; i < set->nd; i++) {
    const tr_dump_t *d = &set->d[i];
    if (d->superseded || !d->verdict.present) continue;
    if (!d->verdict.decided) {
      vs->pending++;
      if (vs->pending_dump < 0) vs->pending_dump = (int)i;
      continue;
    }
    if (d->verdict.epoch > newest) newest = d->verdict.epoch;
  }
  size_t best_votes = 0;
  for (size_t i = 0; i < set->nd; i++) {
    const tr_dump_t *d = &set->d[i];
    if (d->superseded || !d->verdict.present || !d->verdict.decided || d->verdict.epoch != newest)
      continue;
    vs->with_verdict++;
    size_t votes = 0;
    for (size_t k = 0; k < set->nd; k++) {
      const tr_dump_t *o = &set->d[k];
      if (!o->superseded && o->verdict.present && o->verdict.decided &&
          same_verdict(&d->verdict, &o->verdict))
        votes++;
    }
    if (votes > best_votes) best_votes = votes, vs->dump = (int)i;
  }
  vs->agreeing = best_votes;
  int cul[64];
  vs->nculprits = culprits_of(rep, cul, 64);
  if (vs->nculprits) {
    vs->culprits = tr_xmalloc(vs->nculprits * sizeof(int));
    memcpy(vs->culprits, cul, vs->nculprits * sizeof(int));
  }
  if (vs->dump < 0) {
    if (vs->pending)
      snprintf(vs->text, sizeof(vs->text), "no verdict yet in %zu dump%s (rank %d: %s)", vs->pending,
               vs->pending == 1 ? "" : "s", set->d[vs->pending_dump].rank,
               set->d[vs->pending_dump].verdict.pending);
    return;
  }
  const tr_verdict_t *v = &set->d[vs->dump].verdict;
  /* The ranks the coordinator blames: dropped, not for leaving. */
  int blamed[64];
  size_t nb = 0;
  for (size_t i = 0; i < v->ndropped && nb < 64; i++)
    if (strcmp(v->dropped[i].reason, "left")) blamed[nb++] = v->dropped[i].rank;
  qsort(blamed, nb, sizeof(int), cmp_int);
  char who_[1024];
  describe_dropped(v, who_, sizeof(who_));
  char votes[96];
  snprintf(votes, sizeof(votes), "%zu of %zu dumps with a verdict", vs->agreeing, vs->with_verdict);
  if (!vs->nculprits) {
    vs->agreement = TR_AGREE_SILENT;
  } else {
    int same = vs->nculprits == nb;
    for (size_t i = 0; same && i < nb; i++) same = vs->culprits[i] == blamed[i];
    vs->agreement = same ? TR_AGREE_YES : TR_AGREE_NO;
  }
  if (!v->ndropped)
    snprintf(vs->text, sizeof(vs->text),
             "the coordinator's epoch %lld keeps every member of epoch %lld (%s)",
             (long long)v->next_epoch, (long long)v->epoch, votes);
  else
    snprintf(vs->text, sizeof(vs->text), "the coordinator's epoch %lld drops from epoch %lld: %s (%s)",
             (long long)v->next_epoch, (long long)v->epoch, who_, votes);
  char *h = rep->headline;
  size_t hl = sizeof(rep->headline), off = strlen(h);
  if (vs->agreement == TR_AGREE_YES) {
    snprintf(h + off, hl - off, "; the coordinator agrees: %s, dropped in epoch %lld", who_,
             (long long)v->next_epoch);
  } else if (vs->agreement == TR_AGREE_NO) {
    if (nb)
      snprintf(h + off, hl - off, "; the coordinator disagrees: its epoch %lld dropped %s",
               (long long)v->next_epoch, who_);
    else
      snprintf(h + off, hl - off, "; the coordinator disagrees: its epoch %lld keeps every member",
               (long long)v->next_epoch);
  } else if (nb) {
    /* The dumps alone name nobody: the verdict does. */
    char rest[1024];
    snprintf(rest, sizeof(rest), "%s", h);
    snprintf(h, hl, "VERDICT: %s, dropped from epoch %lld in epoch %lld by the coordinator; "
             "from the dumps alone: %s", who_, (long long)v->epoch, (long long)v->next_epoch, rest);
    char w[1024];
    snprintf(w, sizeof(w), "%s", vs->text);
    size_t cap = rep->nf;
    add_finding(rep, &cap, TR_K_VERDICT, -1, 0, blamed, nb, w);
    rep->primary = (int)rep->nf - 1;
    rep->exit_status = TR_EXIT_FINDING;
  }
}

void tr_analyze(tr_set_t *set, tr_report_t *rep) {
  memset(rep, 0, sizeof(*rep));
  rep->primary = -1;
  analyze_dumps(set, rep);
  if (rep->exit_status != TR_EXIT_UNUSABLE) judge_verdict(set, rep);
}

void tr_report_free(tr_report_t *rep) {
  ftc__free(rep->verdict.culprits);
  for (size_t i = 0; i < rep->nf; i++) ftc__free(rep->f[i].ranks);
  ftc__free(rep->f);
  for (size_t i = 0; i < rep->ng; i++) ftc__free(rep->g[i].m);
  ftc__free(rep->g);
  ftc__free(rep->missing);
  memset(rep, 0, sizeof(*rep));
}
