/*
 * html.c - the picture: a self-contained HTML page (inline CSS and SVG, no
 * script, nothing fetched) with the headline, the findings, and for each
 * communicator a timeline of the last collectives per rank, one column per
 * sequence number, coloured by state. The first divergence is framed by the
 * element id="divergence" (class "divergence"), which tests look for.
 */
#include <string.h>

#include "ftc_alloc.h"
#include "trace.h"

#define COLS 40
#define ROWS 128
#define CW 16
#define CH 12
#define LEFT 70
#define TOP 28

static void esc(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '&': fputs("&amp;", f); break;
      case '"': fputs("&quot;", f); break;
      default: fputc(*s, f);
    }
  }
}

static const char *const state_class[] = {"scheduled", "started", "completed", "failed"};

static int in_list(const int *v, size_t n, int x) {
  for (size_t i = 0; i < n; i++)
    if (v[i] == x) return 1;
  return 0;
}

static void timeline(FILE *f, const tr_set_t *set, const tr_report_t *rep, size_t gi, int marked) {
  const tr_group_t *g = &rep->g[gi];
  const tr_finding_t *p = rep->primary >= 0 ? &rep->f[rep->primary] : NULL;
  uint64_t end = g->diverged ? g->div_seq + 3 : g->hi;
  if (end > g->hi) end = g->hi;
  uint64_t start = end >= g->lo + COLS - 1 ? end - COLS + 1 : g->lo;
  size_t ncols = (size_t)(end - start + 1);
  /* Rows: ranks named by a finding first, then the others, up to ROWS. */
  size_t *rows = tr_xmalloc((g->nm ? g->nm : 1) * sizeof(size_t)), nrows = 0;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < g->nm && nrows < ROWS; i++) {
      int named = p && p->group == (int)gi && in_list(p->ranks, p->nranks, g->m[i].grank);
      if ((pass == 0) == named) rows[nrows++] = i;
    }
  int width = LEFT + (int)ncols * CW + 20, height = TOP + (int)nrows * CH + 30;
  fprintf(f, "<h2>");
  esc(f, g->comm_name);
  fprintf(f, " <small>[%s] epoch %llu, seq %llu..%llu", g->comm_id, (unsigned long long)g->epoch,
          (unsigned long long)start, (unsigned long long)end);
  if (nrows < g->nm) fprintf(f, ", %zu of %zu ranks shown", nrows, g->nm);
  fprintf(f, "</small></h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" width=\"%d\" "
             "height=\"%d\" viewBox=\"0 0 %d %d\">\n",
          width, height, width, height);
  for (size_t c = 0; c < ncols; c += 5)
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"axis\">%llu</text>\n", LEFT + (int)c * CW, TOP - 8,
            (unsigned long long)(start + c));
  for (size_t r = 0; r < nrows; r++) {
    const tr_member_t *m = &g->m[rows[r]];
    const tr_comm_t *c = &set->d[m->dump].comms[m->comm];
    int y = TOP + (int)r * CH;
    fprintf(f, "<text x=\"4\" y=\"%d\" class=\"rank\">rank %d</text>\n", y + CH - 2, m->grank);
    size_t i = m->a;
    /* s == end ends it: end may be the largest seq there is (a damaged dump's). */
    for (uint64_t s = start; s <= end; s++) {
      while (i < m->b && c->e[i].seq < s) i++;
      int x = LEFT + (int)(s - start) * CW;
      if (i < m->b && c->e[i].seq == s) {
        const tr_entry_t *e = &c->e[i];
        int odd = g->diverged && s == g->div_seq &&
                  (e->op != g->exp_op || e->dtype != g->exp_dtype || e->count != g->exp_count);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"%s%s\"><title>rank %d seq %llu %s %s x%llu: %s</title></rect>\n",
                x, y, CW - 2, CH - 2, state_class[e->state & 3], odd ? " mismatch" : "", m->grank,
                (unsigned long long)s, tr_str(e->op), tr_str(e->dtype), (unsigned long long)e->count,
                state_class[e->state & 3]);
      } else {
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"absent\"><title>rank %d never entered seq %llu</title></rect>\n",
                x, y, CW - 2, CH - 2, m->grank, (unsigned long long)s);
      }
      if (s == end) break;
    }
  }
  if (g->diverged) {
    int x = LEFT + (int)(g->div_seq - start) * CW - 2;
    fprintf(f, "<rect %sclass=\"divergence\" data-seq=\"%llu\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n",
            marked ? "id=\"divergence\" " : "", (unsigned long long)g->div_seq, x, TOP - 4, CW + 2,
            (int)nrows * CH + 6);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"divlabel\">first divergence: seq %llu</text>\n", x,
            TOP + (int)nrows * CH + 18, (unsigned long long)g->div_seq);
  }
  fprintf(f, "</svg>\n");
  ftc__free(rows);
}

int tr_write_html(const char *path, const tr_set_t *set, const tr_report_t *rep) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
             "<title>ftcomm-trace</title>\n<style>\n"
             "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\n"
             "h1{font-size:1.15em;padding:.5em;border-radius:4px}\n"
             "h1.healthy{background:#e3f5e1}h1.finding{background:#fde2e1}h1.unusable{background:#eee}\n"
             "h2{font-size:1em;margin-top:1.5em}small{color:#666;font-weight:normal}\n"
             "li.primary{font-weight:bold}\n"
             ".completed{fill:#4caf50}.started{fill:#ff9800}.scheduled{fill:#ffeb3b}"
             ".failed{fill:#e53935}.absent{fill:#e0e0e0}.mismatch{fill:#8e24aa}\n"
             ".divergence{fill:none;stroke:#d50000;stroke-width:2}.divlabel{fill:#d50000;font-size:11px}\n"
             ".axis,.rank{font-size:10px;fill:#555}.legend span{display:inline-block;padding:0 .5em;margin-right:.4em}\n"
             "</style></head><body>\n");
  const char *cls = rep->exit_status == TR_EXIT_HEALTHY ? "healthy"
                    : rep->exit_status == TR_EXIT_FINDING ? "finding" : "unusable";
  fprintf(f, "<h1 id=\"headline\" class=\"%s\">", cls);
  esc(f, rep->headline);
  fprintf(f, "</h1>\n<p>%d of %d ranks dumped.</p>\n", rep->ranks_present, rep->world_size);
  if (rep->verdict.text[0]) {
    static const char *const how[] = {"", " The dumps alone name the same ranks.",
                                      " The dumps alone name others: they disagree.",
                                      " The dumps alone name nobody."};
    fprintf(f, "<p id=\"verdict\">Verdict: ");
    esc(f, rep->verdict.text);
    fprintf(f, ".%s</p>\n", how[rep->verdict.agreement]);
  }
  if (rep->nf || set->nbad) {
    fprintf(f, "<h2>Findings</h2>\n<ul id=\"findings\">\n");
    for (size_t i = 0; i < rep->nf; i++) {
      fprintf(f, "<li%s>", (int)i == rep->primary ? " class=\"primary\"" : "");
      esc(f, rep->f[i].what);
      fprintf(f, "</li>\n");
    }
    for (size_t i = 0; i < set->nbad; i++)
      if (set->bad[i].skipped) {
        fprintf(f, "<li>ignored ");
        esc(f, set->bad[i].file);
        fprintf(f, "</li>\n");
      }
    fprintf(f, "</ul>\n");
  }
  fprintf(f, "<p class=\"legend\"><span class=\"lc\" style=\"background:#4caf50\">completed</span>"
             "<span style=\"background:#ff9800\">started</span><span style=\"background:#ffeb3b\">scheduled</span>"
             "<span style=\"background:#e53935\">failed</span><span style=\"background:#e0e0e0\">never entered</span>"
             "<span style=\"background:#8e24aa;color:#fff\">mismatch</span></p>\n");
  /* The primary finding's communicator first; it carries id="divergence". */
  int first = rep->primary >= 0 ? rep->f[rep->primary].group : -1;
  if (first < 0)
    for (size_t gi = 0; gi < rep->ng && first < 0; gi++)
      if (rep->g[gi].latest && rep->g[gi].diverged) first = (int)gi;
  if (first >= 0) timeline(f, set, rep, (size_t)first, 1);
  for (size_t gi = 0; gi < rep->ng; gi++)
    if ((int)gi != first && rep->g[gi].hi > 0) timeline(f, set, rep, gi, 0);
  fprintf(f, "</body></html>\n");
  int rc = ferror(f) ? -1 : 0;
  if (fclose(f) != 0) rc = -1;
  return rc;
}
