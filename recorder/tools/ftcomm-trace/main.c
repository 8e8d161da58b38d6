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
          "       ftcomm-trace --export pytorch-json|pytorch-pickle OUT DIR\n"
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
          "  --export FORMAT OUT\n"
          "                 instead of a report, write the dumps in PyTorch Flight\n"
          "                 Recorder's layout (2.10) into the directory OUT, one\n"
          "                 rank_<N> per rank: pytorch-json (as _dump_fr_trace_json\n"
          "                 writes) or pytorch-pickle (as PyTorch's timeout dumps, the\n"
          "                 form its fr_trace analyzer reads)\n"
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
  int json = 0, verbose = 0, c, export_pickle = -1;
  const char *html = NULL, *export_dir = NULL;
  /* --export takes two values (FORMAT OUT): taken out before getopt. */
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--export")) continue;
    if (i + 2 >= argc) {
      fprintf(stderr, "ftcomm-trace: --export needs a format and a directory (--export "
                      "pytorch-json OUT DIR)\n");
      return TR_EXIT_UNUSABLE;
    }
    if (!strcmp(argv[i + 1], "pytorch-json")) export_pickle = 0;
    else if (!strcmp(argv[i + 1], "pytorch-pickle")) export_pickle = 1;
    else {
      fprintf(stderr, "ftcomm-trace: --export %s: the formats are pytorch-json and "
                      "pytorch-pickle\n", argv[i + 1]);
      return TR_EXIT_UNUSABLE;
    }
    export_dir = argv[i + 2];
    memmove(&argv[i], &argv[i + 3], (size_t)(argc - i - 3 + 1) * sizeof(*argv));
    argc -= 3;
    break;
  }
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
  if (export_dir) {
    int rc = tr_export_pytorch(export_dir, export_pickle, &set, &rep);
    tr_report_free(&rep);
    tr_incident_free(incident);
    tr_set_free(&set);
    return rc < 0 ? TR_EXIT_UNUSABLE : 0;
  }
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
