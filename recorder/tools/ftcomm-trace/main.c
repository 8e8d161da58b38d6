/*
 * main.c - ftcomm-trace DIR: reads every flight-recorder dump in DIR
 * (ftcomm or PyTorch Flight Recorder JSON), names the first collective where
 * the ranks diverge and who is stuck where, and reports it as text, JSON or
 * an HTML timeline. Exit status: 0 healthy, 1 a finding, 2 unusable input.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trace.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ftcomm-trace [--json] [--html FILE] [--verbose] DIR\n"
          "\n"
          "Analyze the flight-recorder dumps in DIR (one per rank; ftcomm dumps and\n"
          "PyTorch Flight Recorder JSON dumps are recognized per file) and report the\n"
          "first collective where the ranks diverge: ranks that never entered it, ranks\n"
          "stuck in it, mismatched op/dtype/count/root, failures, stragglers, and ranks\n"
          "whose dump is missing or unreadable. The majority of the ranks decides what\n"
          "was expected. The first line of the report says it in one line.\n"
          "\n"
          "  --json         print the report as JSON instead of text\n"
          "  --html FILE    also write a self-contained HTML page with a timeline\n"
          "  -v, --verbose  list every rank at the divergence, not the first 16\n"
          "  -h, --help     show this help\n"
          "\n"
          "Exit status: 0 healthy, 1 a finding, 2 unusable input (no readable dump,\n"
          "bad arguments, unreadable directory).\n"
          "Format: docs/dump-format.md; manual: docs/ftcomm-trace.md.\n");
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, 'j'},   {"html", required_argument, NULL, 'H'},
      {"verbose", no_argument, NULL, 'v'}, {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int json = 0, verbose = 0, c;
  const char *html = NULL;
  while ((c = getopt_long(argc, argv, "vh", opts, NULL)) != -1) {
    switch (c) {
      case 'j': json = 1; break;
      case 'H': html = optarg; break;
      case 'v': verbose = 1; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return TR_EXIT_UNUSABLE;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "ftcomm-trace: %s\n", optind >= argc ? "missing DIR" : "only one DIR, please");
    usage(stderr);
    return TR_EXIT_UNUSABLE;
  }
  const char *dir = argv[optind];
  struct stat st;
  if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "ftcomm-trace: %s is not a directory\n", dir);
    return TR_EXIT_UNUSABLE;
  }
  tr_set_t set;
  if (tr_load_dir(dir, &set) < 0) return TR_EXIT_UNUSABLE;
  tr_incident_t *incident = tr_incident_load(dir, &set);
  if (set.nd == 0 && set.nbad == 0) {
    fprintf(stderr, "ftcomm-trace: no dumps in %s\n", dir);
    /* The record still says who was asked and why nothing came. */
    if (incident) tr_incident_print_text(stderr, incident);
    tr_incident_free(incident);
    tr_set_free(&set);
    return TR_EXIT_UNUSABLE;
  }
  for (size_t i = 0; i < set.nbad; i++)
    if (!set.bad[i].skipped)
      fprintf(stderr, "ftcomm-trace: %s: %s\n", set.bad[i].path, set.bad[i].why);
  tr_report_t rep;
  tr_analyze(&set, &rep);
  if (incident) {
    rep.incident = incident;
    tr_incident_explain(incident, &rep);
  }
  if (json) tr_print_json(stdout, &set, &rep);
  else tr_print_text(stdout, &set, &rep, verbose);
  int status = rep.exit_status;
  if (html && tr_write_html(html, &set, &rep) < 0) {
    fprintf(stderr, "ftcomm-trace: cannot write %s\n", html);
    status = TR_EXIT_UNUSABLE;
  }
  tr_report_free(&rep);
  tr_incident_free(incident);
  tr_set_free(&set);
  return status;
}
