/*
 * report.c - ftcomm-trace's text report (for people) and JSON report (for
 * machines, e.g. the controller's incident record). Both start with the
 * headline: one line that says who is stuck where.
 */
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "trace.h"

static const char *const kind_names[TR_K_COUNT] = {
    "mismatch", "never_entered", "missing_dump", "failed", "stuck", "all_stuck", "straggler", "broken_file",
    "verdict",
};

static const char *const agreement_names[] = {"none", "agree", "disagree", "dumps_name_nobody"};

static const char *state_word(int st) {
  static const char *const w[] = {"scheduled", "started", "completed", "failed"};
  return st >= 0 && st < 4 ? w[st] : "?";
}

static void when(int64_t wall_ns, char *buf, size_t len) {
  if (!wall_ns) {
    snprintf(buf, len, "unknown time");
    return;
  }
  time_t s = (time_t)(wall_ns / 1000000000LL);
  struct tm tm;
  gmtime_r(&s, &tm);
  strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

/* Where member m stands at seq s, in a few words. */
static void member_at(const tr_set_t *set, const tr_member_t *m, uint64_t s, char *buf, size_t len) {
  const tr_comm_t *c = &set->d[m->dump].comms[m->comm];
  const tr_entry_t *last = NULL;
  for (size_t i = m->a; i < m->b; i++) {
    if (c->e[i].seq == s) {
      const tr_entry_t *e = &c->e[i];
      int64_t from = e->t_started ? e->t_started : e->t_created;
      double ms = e->t_completed && from ? (e->t_completed - from) / 1e6 : -1;
      char nm[80] = ""; /* the binding's name for it, e.g. nccl:all_reduce */
      if (e->name) snprintf(nm, sizeof(nm), " (%s)", tr_str((int)e->name - 1));
      if (ms >= 0)
        snprintf(buf, len, "in seq %llu: %s%s %s x%llu peer %d, %s (%.3f ms)", (unsigned long long)s,
                 tr_str(e->op), nm, tr_str(e->dtype), (unsigned long long)e->count, e->peer,
                 state_word(e->state), ms);
      else
        snprintf(buf, len, "in seq %llu: %s%s %s x%llu peer %d, %s", (unsigned long long)s,
                 tr_str(e->op), nm, tr_str(e->dtype), (unsigned long long)e->count, e->peer,
                 state_word(e->state));
      return;
    }
    if (c->e[i].seq < s) last = &c->e[i];
  }
  if (last)
    snprintf(buf, len, "not in seq %llu; last seq %llu %s, %s", (unsigned long long)s,
             (unsigned long long)last->seq, tr_str(last->op), state_word(last->state));
  else
    snprintf(buf, len, "not in seq %llu; no collective recorded in this epoch", (unsigned long long)s);
}

void tr_print_text(FILE *out, const tr_set_t *set, const tr_report_t *rep, int verbose) {
  fprintf(out, "%s\n\n", rep->headline);
  const tr_dump_t *d0 = NULL;
  for (size_t i = 0; i < set->nd && !d0; i++)
    if (!set->d[i].superseded) d0 = &set->d[i];
  if (d0) {
    char t[64];
    when(d0->trigger_wall_ns, t, sizeof(t));
    /* a dump without the backend's version (older TCP ones) says only its name */
    const char *bv = d0->backend_version ? d0->backend_version : "";
    /* PyTorch dumps name no job and no dump time: say what they carry,
     * the newest collective recorded, instead of a "?". */
    int torch = d0->format == TR_FMT_PYTORCH;
    char job[300] = "";
    if (d0->job) snprintf(job, sizeof(job), "job %s, ", d0->job);
    else if (!torch) snprintf(job, sizeof(job), "job ?, ");
    fprintf(out, "dumps: %d of %d ranks; %sbackend %s%s%s, %s format %s, %s%s%s", rep->ranks_present,
            rep->world_size, job, d0->backend ? d0->backend : "?", bv[0] ? " " : "", bv,
            torch ? "PyTorch Flight Recorder" : "ftcomm", d0->version, torch ? "" : "reason ",
            torch ? "" : d0->reason ? d0->reason : "?",
            torch ? (d0->trigger_wall_ns ? "last collective recorded at " : "no collective recorded")
                  : ", at ");
    if (!torch || d0->trigger_wall_ns) fprintf(out, "%s", t);
    fprintf(out, "\n");
  }
  if (rep->verdict.text[0]) {
    static const char *const how[] = {"", " (the dumps alone name the same ranks)",
                                      " (the dumps alone name others: they disagree)",
                                      " (the dumps alone name nobody)"};
    fprintf(out, "verdict: %s%s\n", rep->verdict.text, how[rep->verdict.agreement]);
  }
  if (rep->incident) tr_incident_print_text(out, rep->incident);
  size_t nfail = 0;
  for (size_t i = 0; i < set->nd; i++) {
    const tr_dump_t *d = &set->d[i];
    if (d->superseded || !d->failure.present) continue;
    if (nfail == 0) fprintf(out, "failures seen:");
    if (nfail < 16 || verbose) {
      fprintf(out, " rank %d %s in epoch %lld", d->rank, d->failure.status, (long long)d->failure.epoch);
      if (d->failure.peer >= 0) fprintf(out, " (its backend blames rank %d)", d->failure.peer);
      fprintf(out, ";");
    }
    nfail++;
  }
  if (nfail > 16 && !verbose) fprintf(out, " ... %zu more (use --verbose)", nfail - 16);
  if (nfail) fprintf(out, "\n");
  for (size_t i = 0; i < set->nbad; i++)
    fprintf(out, "%s: %s: %s\n", set->bad[i].skipped ? "ignored" : "unreadable", set->bad[i].file,
            set->bad[i].why);
  for (size_t i = 0; i < set->nd; i++)
    if (set->d[i].superseded)
      fprintf(out, "superseded: %s (rank %d has a newer dump)\n", set->d[i].file, set->d[i].rank);

  if (rep->nf) {
    fprintf(out, "\nfindings:\n");
    for (size_t i = 0; i < rep->nf; i++) {
      const tr_finding_t *f = &rep->f[i];
      int hist = f->group >= 0 && !rep->g[f->group].latest;
      fprintf(out, "  %s %-13s %s%s\n", (int)i == rep->primary ? "*" : "-", kind_names[f->kind],
              hist ? "(earlier epoch) " : "", f->what);
    }
  }

  fprintf(out, "\ncommunicators:\n");
  for (size_t gi = 0; gi < rep->ng; gi++) {
    const tr_group_t *g = &rep->g[gi];
    char members[64];
    if (g->size >= 0) snprintf(members, sizeof(members), "%zu of %d members", g->nm, g->size);
    else snprintf(members, sizeof(members), "%zu members", g->nm);
    fprintf(out, "  %s [%s] epoch %llu%s: %s, seq %llu..%llu", g->comm_name, g->comm_id,
            (unsigned long long)g->epoch, g->latest ? "" : " (earlier)", members,
            (unsigned long long)g->lo, (unsigned long long)g->hi);
    if (g->pg_name) fprintf(out, ", process group \"%s\"", g->pg_name);
    if (g->pg_desc) fprintf(out, " (%s)", g->pg_desc);
    if (g->diverged) fprintf(out, ", first divergence at seq %llu", (unsigned long long)g->div_seq);
    else fprintf(out, ", aligned");
    if (g->note[0]) fprintf(out, " (%s)", g->note);
    fprintf(out, "\n");
    if (!g->diverged) continue;
    /* Members at the divergence: the odd ones first, then a few others. */
    size_t shown = 0, limit = verbose ? g->nm : 16;
    for (int pass = 0; pass < 2; pass++)
      for (size_t i = 0; i < g->nm && shown < limit; i++) {
        char buf[300];
        member_at(set, &g->m[i], g->div_seq, buf, sizeof(buf));
        int odd = strncmp(buf, "in seq", 6) != 0 || !strstr(buf, ", completed");
        if ((pass == 0) != odd) continue;
        fprintf(out, "    rank %-5d %s\n", g->m[i].grank, buf);
        shown++;
      }
    if (shown < g->nm) fprintf(out, "    ... %zu more (use --verbose)\n", g->nm - shown);
  }
}

static json_t *ranks_json(const int *r, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(r[i]));
  return a;
}

int tr_print_json(FILE *out, const tr_set_t *set, const tr_report_t *rep) {
  json_t *root = json_object();
  json_object_set_new(root, "tool", json_string("ftcomm-trace"));
  json_object_set_new(root, "status", json_string(rep->exit_status == TR_EXIT_HEALTHY   ? "healthy"
                                                  : rep->exit_status == TR_EXIT_FINDING ? "finding"
                                                                                        : "unusable"));
  json_object_set_new(root, "exit_status", json_integer(rep->exit_status));
  json_object_set_new(root, "headline", json_string(rep->headline));
  json_object_set_new(root, "world_size", json_integer(rep->world_size));
  json_object_set_new(root, "ranks_present", json_integer(rep->ranks_present));
  json_object_set_new(root, "missing_ranks", ranks_json(rep->missing, rep->nmissing));
  json_t *files = json_array();
  for (size_t i = 0; i < set->nd; i++) {
    const tr_dump_t *d = &set->d[i];
    json_t *f = json_pack("{s:s, s:i, s:s, s:s, s:b}", "file", d->file, "rank", d->rank, "format",
                          d->format == TR_FMT_PYTORCH ? "pytorch" : "ftcomm", "version", d->version,
                          "superseded", d->superseded);
    if (d->failure.present)
      json_object_set_new(f, "failure", json_pack("{s:I, s:s, s:i}", "epoch", (json_int_t)d->failure.epoch,
                                                  "status", d->failure.status, "peer", d->failure.peer));
    json_array_append_new(files, f);
  }
  json_object_set_new(root, "dumps", files);
  const tr_verdict_sum_t *vs = &rep->verdict;
  if (vs->dump >= 0 || vs->pending) {
    json_t *v = json_object();
    json_object_set_new(v, "agreement", json_string(agreement_names[vs->agreement]));
    json_object_set_new(v, "dumps_with_verdict", json_integer((json_int_t)vs->with_verdict));
    json_object_set_new(v, "dumps_agreeing", json_integer((json_int_t)vs->agreeing));
    json_object_set_new(v, "dumps_pending", json_integer((json_int_t)vs->pending));
    json_object_set_new(v, "culprits_from_dumps", ranks_json(vs->culprits, vs->nculprits));
    json_object_set_new(v, "text", json_string(vs->text));
    if (vs->dump >= 0) {
      const tr_verdict_t *t = &set->d[vs->dump].verdict;
      json_object_set_new(v, "epoch", json_integer((json_int_t)t->epoch));
      json_object_set_new(v, "next_epoch", json_integer((json_int_t)t->next_epoch));
      json_t *dr = json_array();
      for (size_t i = 0; i < t->ndropped; i++) {
        json_t *o = json_pack("{s:i, s:i, s:s}", "rank", t->dropped[i].rank, "slot",
                              t->dropped[i].slot, "reason", t->dropped[i].reason);
        if (t->dropped[i].detail) json_object_set_new(o, "detail", json_string(t->dropped[i].detail));
        json_array_append_new(dr, o);
      }
      json_object_set_new(v, "dropped", dr);
    } else {
      json_object_set_new(v, "pending", json_string(set->d[vs->pending_dump].verdict.pending));
    }
    json_object_set_new(root, "verdict", v);
  }
  json_t *bad = json_array();
  for (size_t i = 0; i < set->nbad; i++)
    json_array_append_new(bad, json_pack("{s:s, s:i, s:b, s:s}", "file", set->bad[i].file, "rank",
                                         set->bad[i].rank_guess, "ignored", set->bad[i].skipped,
                                         "error", set->bad[i].why));
  json_object_set_new(root, "unreadable", bad);
  if (rep->incident) json_object_set_new(root, "incident", tr_incident_json(rep->incident));
  json_t *fs = json_array();
  for (size_t i = 0; i < rep->nf; i++) {
    const tr_finding_t *f = &rep->f[i];
    json_t *o = json_pack("{s:s, s:s, s:b, s:o}", "kind", kind_names[f->kind], "what", f->what,
                          "primary", (int)i == rep->primary, "ranks", ranks_json(f->ranks, f->nranks));
    /* never_entered: each of its ranks waits in another group's collective */
    if (f->kind == TR_K_NEVER_ENTERED) json_object_set_new(o, "consequence", json_boolean(f->consequence));
    if (f->group >= 0) {
      const tr_group_t *g = &rep->g[f->group];
      json_object_set_new(o, "communicator", json_string(g->comm_id));
      json_object_set_new(o, "communicator_name", json_string(g->comm_name));
      json_object_set_new(o, "epoch", json_integer((json_int_t)g->epoch));
      json_object_set_new(o, "seq", json_integer((json_int_t)f->seq));
      json_object_set_new(o, "earlier_epoch", json_boolean(!g->latest));
    }
    json_array_append_new(fs, o);
  }
  json_object_set_new(root, "findings", fs);
  json_t *gs = json_array();
  for (size_t gi = 0; gi < rep->ng; gi++) {
    const tr_group_t *g = &rep->g[gi];
    json_t *o = json_pack("{s:s, s:s, s:I, s:b, s:i, s:I, s:I, s:I, s:b}", "id", g->comm_id, "name",
                          g->comm_name, "epoch", (json_int_t)g->epoch, "latest", g->latest, "size",
                          g->size, "members", (json_int_t)g->nm, "first_seq", (json_int_t)g->lo,
                          "last_seq", (json_int_t)g->hi, "diverged", g->diverged);
    if (g->diverged) {
      json_object_set_new(o, "divergence_seq", json_integer((json_int_t)g->div_seq));
      json_object_set_new(o, "expected", json_pack("{s:s, s:s, s:I, s:i}", "op", tr_str(g->exp_op),
                                                   "dtype", tr_str(g->exp_dtype), "count",
                                                   (json_int_t)g->exp_count, "root", g->exp_peer));
    }
    if (g->note[0]) json_object_set_new(o, "note", json_string(g->note));
    json_array_append_new(gs, o);
  }
  json_object_set_new(root, "communicators", gs);
  int rc = json_dumpf(root, out, JSON_INDENT(2));
  fputc('\n', out);
  json_decref(root);
  return rc;
}
