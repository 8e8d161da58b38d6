/*
 * ftcomm-trace-gen.c - writes a directory of flight-recorder dumps for a
 * made-up job with a known culprit, for ftcomm-trace's tests and benchmarks.
 *
 *   ftcomm-trace-gen [options] SCENARIO DIR
 *     --ranks N        ranks (default 8)
 *     --entries E      collectives per rank (default 100)
 *     --capacity C     ring size; C < E gives wrapped rings (default E)
 *     --culprit R      the rank at fault (default: a random one)
 *     --seed S         random seed (default 1)
 *     --via-recorder   write the dumps with the recorder library itself
 *                      (healthy and never_entered only: its clock is real)
 *   SCENARIO: healthy never_entered stuck op dtype count root straggler
 *             missing corrupt epochs pytorch jitter
 *   (jitter: healthy, but one rank arrives last at every collective by 1.5%
 *   of a 276 ms step, as one always does: no straggler)
 *
 * Prints "KIND CULPRIT" on stdout: the finding kind ftcomm-trace must put
 * first (its --json "kind") and the rank it must name ("-" for none).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftc_param.h"
#include "ftc_recorder.h"

static int ranks = 8, entries = 100, capacity = -1, culprit = -1, via_recorder;
static unsigned seed = 1;
static const char *scenario, *dir;

enum { S_HEALTHY, S_NEVER, S_STUCK, S_OP, S_DTYPE, S_COUNT, S_ROOT, S_STRAGGLER, S_MISSING,
       S_CORRUPT, S_EPOCHS, S_PYTORCH, S_JITTER, S_N };
static const char *const names[S_N] = {"healthy", "never_entered", "stuck", "op", "dtype", "count",
                                       "root", "straggler", "missing", "corrupt", "epochs", "pytorch",
                                       "jitter"};
static const char *const kinds[S_N] = {"-", "never_entered", "stuck", "mismatch", "mismatch",
                                       "mismatch", "mismatch", "straggler", "missing_dump",
                                       "broken_file", "never_entered", "never_entered", "-"};

typedef struct call {
  const char *op, *dtype;
  uint64_t count;
  int root;
} call_t;

/* The program every rank runs: a few kinds of collectives in a cycle. */
static call_t program(uint64_t seq) {
  static const char *const ops[] = {"allreduce", "allreduce", "allgather", "broadcast", "reduce_scatter",
                                    "allreduce", "barrier"};
  call_t c = {ops[seq % 7], seq % 3 ? "f32" : "bf16", 1024ull << (seq % 5), -1};
  if (!strcmp(c.op, "broadcast")) c.root = (int)(seq % 4);
  if (!strcmp(c.op, "barrier")) c.dtype = "none", c.count = 0;
  return c;
}

static int dtype_size(const char *d) { return !strcmp(d, "bf16") ? 2 : !strcmp(d, "none") ? 0 : 4; }

typedef struct ent {
  uint64_t seq;
  call_t c;
  int state; /* 0 scheduled 1 started 2 completed 3 failed */
  int64_t created, started, completed;
  uint32_t epoch;
  int rank, size;
} ent_t;

static const char *const states[] = {"scheduled", "started", "completed", "failed"};

static FILE *open_dump(int rank, char *path, size_t len) {
  snprintf(path, len, "%s/rank-%d-20260101T000000Z-%d-0.json", dir, rank, 1000 + rank);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "ftcomm-trace-gen: %s: %s\n", path, strerror(errno));
    exit(2);
  }
  setvbuf(f, NULL, _IOFBF, 1 << 20);
  return f;
}

static void write_ftcomm(int rank, int world, uint64_t epoch, int comm_rank, int comm_size,
                         const ent_t *e, size_t n, uint64_t recorded, int64_t trigger_mono) {
  char path[4096];
  FILE *f = open_dump(rank, path, sizeof(path));
  size_t keep = n < (size_t)capacity ? n : (size_t)capacity;
  const ent_t *first = e + (n - keep);
  int64_t last_enq = 0, last_start = 0, last_comp = 0;
  for (size_t i = 0; i < n; i++) {
    if (e[i].epoch != epoch) continue;
    last_enq = (int64_t)e[i].seq;
    if (e[i].state >= 1 && e[i].state != 3) last_start = (int64_t)e[i].seq;
    if (e[i].state == 2) last_comp = (int64_t)e[i].seq;
  }
  fprintf(f,
          "{\"format\":\"ftcomm-flight-recorder\",\"version\":\"1.0\",\"job\":\"gen\",\"pod\":\"gen-%d\","
          "\"node\":\"node-%d\",\"host\":\"host-%d\",\"pid\":%d,\"rank\":%d,\"world_size\":%d,"
          "\"epoch\":%llu,\"backend\":\"tcp\",\"backend_version\":\"0.1.0\",\"ftcomm_version\":\"0.1.0\","
          "\"reason\":\"coordinator\",\"trigger_time_ns\":1767225600000000000,"
          "\"trigger_time\":\"2026-01-01T00:00:00.000000000Z\",\"trigger_monotonic_ns\":%lld,"
          "\"entry_fields\":[\"id\",\"epoch\",\"seq\",\"op\",\"dtype\",\"count\",\"bytes\",\"peer\","
          "\"rank\",\"size\",\"state\",\"created_ns\",\"started_ns\",\"completed_ns\",\"duration_ns\","
          "\"timeout_ns\"],\n\"communicators\":[\n{\"id\":\"00000000000000a1\",\"name\":\"world\","
          "\"epoch\":%llu,\"rank\":%d,\"size\":%d,\"capacity\":%d,\"recorded\":%llu,\"dropped\":0,"
          "\"last_enqueued_seq\":%lld,\"last_started_seq\":%lld,\"last_completed_seq\":%lld,\"entries\":[",
          rank, rank / 8, rank, 1000 + rank, rank, world, (unsigned long long)epoch, (long long)trigger_mono,
          (unsigned long long)epoch, comm_rank, comm_size, capacity, (unsigned long long)recorded,
          (long long)last_enq, (long long)last_start, (long long)last_comp);
  for (size_t i = 0; i < keep; i++) {
    const ent_t *x = &first[i];
    uint64_t id = recorded - keep + i;
    long long dur = x->started && x->completed ? x->completed - x->started : -1;
    fprintf(f, "%s\n[%llu,%u,%llu,\"%s\",\"%s\",%llu,%llu,%d,%d,%d,\"%s\",%lld,%lld,%lld,%lld,600000000000]",
            i ? "," : "", (unsigned long long)id, x->epoch, (unsigned long long)x->seq, x->c.op, x->c.dtype,
            (unsigned long long)x->c.count, (unsigned long long)x->c.count * dtype_size(x->c.dtype),
            x->c.root, x->rank, x->size, states[x->state], (long long)x->created, (long long)x->started,
            (long long)x->completed, dur);
  }
  fprintf(f, "]}],\n\"truncated\":false}\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "ftcomm-trace-gen: writing %s failed\n", path);
    exit(2);
  }
}

static const char *torch_op(const char *op) {
  if (!strcmp(op, "allreduce")) return "nccl:all_reduce";
  if (!strcmp(op, "allgather")) return "nccl:all_gather";
  if (!strcmp(op, "reduce_scatter")) return "nccl:reduce_scatter";
  if (!strcmp(op, "broadcast")) return "nccl:broadcast";
  return "nccl:barrier";
}

static void write_pytorch(int rank, const ent_t *e, size_t n) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/nccl_trace_rank_%d", dir, rank);
  FILE *f = fopen(path, "w");
  if (!f) exit(2);
  fprintf(f, "{\"comm_lib_version\":\"2.21.5\",\"entries\":[");
  for (size_t i = 0; i < n; i++) {
    const ent_t *x = &e[i];
    const char *dt = !strcmp(x->c.dtype, "bf16") ? "BFloat16" : "Float";
    fprintf(f,
            "%s{\"collective_seq_id\":%llu,\"input_dtypes\":[\"%s\"],\"input_sizes\":[[%llu]],"
            "\"is_p2p\":false,\"op_id\":%llu,\"output_dtypes\":[\"%s\"],\"output_sizes\":[[%llu]],"
            "\"p2p_seq_id\":0,\"pg_id\":0,\"process_group\":[\"0\",\"default_pg\"],"
            "\"profiling_name\":\"%s\",\"record_id\":%zu,\"retired\":%s,\"state\":\"%s\","
            "\"thread_id\":\"140\",\"thread_name\":\"pt_main_thread\",\"time_created_ns\":%lld,"
            "\"time_discovered_completed_ns\":%lld,\"time_discovered_started_ns\":0,\"timeout_ms\":600000}",
            i ? "," : "", (unsigned long long)x->seq, dt, (unsigned long long)(x->c.count ? x->c.count : 1),
            (unsigned long long)x->seq, dt, (unsigned long long)(x->c.count ? x->c.count : 1),
            torch_op(x->c.op), i, x->state == 2 ? "true" : "false", x->state == 2 ? "completed" : "scheduled",
            (long long)x->created, (long long)(x->state == 2 ? x->completed : 0));
  }
  fprintf(f, "],\"nccl_comm_state\":{},\"pg_config\":{\"0\":{\"desc\":\"default_pg\",\"name\":\"0\",\"ranks\":\"[");
  for (int r = 0; r < ranks; r++) fprintf(f, "%s%d", r ? ", " : "", r);
  fprintf(f, "]\"}},\"pg_status\":{\"0\":{\"last_completed_collective\":\"%llu\",\"last_enqueued_collective\":\"%llu\","
             "\"last_started_collective\":\"-1\"}},\"version\":\"2.10\"}",
          (unsigned long long)(n ? e[n - 1].seq - (e[n - 1].state != 2) : 0),
          (unsigned long long)(n ? e[n - 1].seq : 0));
  fclose(f);
}

/* Through the real recorder: one recorder, one dump per simulated rank. */
static void write_via_recorder(int rank, int sc, int div) {
  ftc_rec_t *rec;
  if (ftc_rec_create(capacity, 0xa1, "world", 0, rank, ranks, &rec) != FTC_OK) exit(2);
  ftc_rec_process_info_t info = FTC_REC_PROCESS_INFO_INIT;
  info.rank = rank;
  info.world_size = ranks;
  info.epoch = 0;
  info.backend = "tcp";
  info.job = "gen";
  ftc_rec_set_process_info(&info);
  int last = sc == S_NEVER ? (rank == culprit ? div - 1 : div) : entries;
  for (int s = 1; s <= last; s++) {
    call_t c = program((uint64_t)s);
    int dt = !strcmp(c.dtype, "f32") ? FTC_F32 : !strcmp(c.dtype, "bf16") ? FTC_BF16 : FTC_DTYPE_COUNT;
    uint64_t id = ftc_rec_schedule(rec, 0, (uint64_t)s, (ftc_rec_op_t)ftc_rec_op_from_name(c.op), dt,
                                   c.count, c.count * (uint64_t)dtype_size(c.dtype), c.root, 600000000000LL);
    ftc_rec_started(rec, id, 0);
    if (s < div || sc == S_HEALTHY) ftc_rec_completed(rec, id, 0);
  }
  if (ftc_rec_dump(dir, sc == S_HEALTHY ? "api" : "timeout", NULL, 0) != FTC_OK) {
    fprintf(stderr, "ftcomm-trace-gen: %s\n", ftc_last_error());
    exit(2);
  }
  ftc_rec_destroy(rec);
}

int main(int argc, char **argv) {
  int i;
  for (i = 1; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "--via-recorder")) via_recorder = 1;
    else if (i + 1 < argc && !strcmp(argv[i], "--ranks")) ranks = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--entries")) entries = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--capacity")) capacity = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--culprit")) culprit = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--seed")) seed = (unsigned)atoi(argv[++i]);
    else {
      fprintf(stderr, "ftcomm-trace-gen: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  if (argc - i != 2 || ranks < 3 || entries < 12) {
    fprintf(stderr, "usage: ftcomm-trace-gen [--ranks N>=3] [--entries E>=12] [--capacity C] "
                    "[--culprit R] [--seed S] [--via-recorder] SCENARIO DIR\n");
    return 2;
  }
  scenario = argv[i];
  dir = argv[i + 1];
  int sc;
  for (sc = 0; sc < S_N && strcmp(names[sc], scenario); sc++) {
  }
  if (sc == S_N) {
    fprintf(stderr, "ftcomm-trace-gen: unknown scenario %s\n", scenario);
    return 2;
  }
  if (capacity < 0) capacity = entries;
  srand(seed);
  if (culprit < 0) culprit = 1 + rand() % (ranks - 1);
  if (sc == S_EPOCHS && culprit == ranks - 1) culprit = ranks - 2;
  if (sc == S_EPOCHS && entries < 40) {
    fprintf(stderr, "ftcomm-trace-gen: epochs needs --entries 40 or more\n");
    return 2;
  }
  if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
    fprintf(stderr, "ftcomm-trace-gen: %s: %s\n", dir, strerror(errno));
    return 2;
  }
  /* The collective where things go wrong: an allreduce near the end. */
  int div = entries - 3;
  while (strcmp(program((uint64_t)div).op, "allreduce")) div--;

  if (via_recorder) {
    if (sc != S_HEALTHY && sc != S_NEVER) {
      fprintf(stderr, "ftcomm-trace-gen: --via-recorder writes healthy or never_entered only\n");
      return 2;
    }
    setenv("FTCOMM_DUMP_SIGNAL", "0", 1);
    for (int r = 0; r < ranks; r++) write_via_recorder(r, sc, div);
    if (sc == S_HEALTHY) printf("- -\n");
    else printf("%s %d\n", kinds[sc], culprit);
    return 0;
  }

  ent_t *e = calloc((size_t)entries + 8, sizeof(*e));
  const int64_t gap = sc == S_JITTER ? 275600000 : 1000000, work = sc == S_JITTER ? 1000000 : 200000,
                late = sc == S_JITTER ? 279700000 : 10000000;
  for (int r = 0; r < ranks; r++) {
    int64_t t = 1000000000000LL * (r + 1) + (int64_t)(rand() % 1000);
    size_t n = 0;
    int world = ranks, epoch_of_dump = 0, comm_rank = r, comm_size = ranks;
    int e0 = entries / 2; /* epochs: the failure ends epoch 0 here */
    if (sc == S_EPOCHS && r == ranks - 1) continue; /* the lost rank: no dump */
    if ((sc == S_MISSING) && r == culprit) continue;
    for (int s = 1; s <= entries; s++) {
      ent_t *x = &e[n];
      memset(x, 0, sizeof(*x));
      x->seq = (uint64_t)s;
      x->rank = r;
      x->size = ranks;
      if (sc == S_EPOCHS && s > e0 + 1) {
        x->epoch = 1;
        x->seq = (uint64_t)(s - e0 - 1);
        x->size = ranks - 1;
        world = ranks - 1;
        epoch_of_dump = 1;
        comm_size = ranks - 1;
      }
      x->c = program(x->seq);
      int slow = (sc == S_STRAGGLER || sc == S_JITTER) && r == culprit;
      x->created = t + (slow ? late : gap);
      x->started = x->created + 1000;
      int64_t wait = (sc == S_STRAGGLER || sc == S_JITTER) && !slow ? late - gap : 0;
      x->completed = x->started + work + wait;
      x->state = 2;
      t = x->completed;
      /* What goes wrong, by scenario. */
      int at = (int)x->seq == div && (sc != S_EPOCHS || x->epoch == 1);
      if (sc == S_EPOCHS && x->epoch == 0 && s == e0 + 1) { x->state = 3; }
      if (sc == S_EPOCHS && x->epoch == 1 && (int)x->seq == div - e0 - 1 && r == culprit) break;
      if (sc == S_EPOCHS && x->epoch == 1 && (int)x->seq == div - e0 - 1) { x->state = 1; x->completed = 0; n++; break; }
      if ((sc == S_NEVER || sc == S_PYTORCH) && at && r == culprit) break;
      if ((sc == S_NEVER || sc == S_PYTORCH || sc == S_MISSING || sc == S_CORRUPT) && at) {
        x->state = sc == S_PYTORCH ? 0 : 1;
        x->completed = 0;
        n++;
        break;
      }
      if (sc == S_STUCK && at) {
        if (r == culprit) { x->state = 1; x->completed = 0; n++; break; }
      }
      if (sc == S_STUCK && (int)x->seq == div + 1) { x->state = 1; x->completed = 0; n++; break; }
      if ((sc == S_OP || sc == S_DTYPE || sc == S_COUNT || sc == S_ROOT) && at) {
        if (r == culprit) {
          if (sc == S_OP) x->c.op = strcmp(x->c.op, "allgather") ? "allgather" : "allreduce";
          if (sc == S_DTYPE) x->c.dtype = strcmp(x->c.dtype, "f64") ? "f64" : "f32";
          if (sc == S_COUNT) x->c.count += 16;
          if (sc == S_ROOT) { x->c.op = "broadcast"; x->c.root = 1; }
        } else if (sc == S_ROOT) {
          x->c.op = "broadcast";
          x->c.root = 0;
        }
        x->state = 1;
        x->completed = 0;
        n++;
        break;
      }
      n++;
    }
    int64_t trig = t + (sc == S_HEALTHY || sc == S_STRAGGLER || sc == S_JITTER ? 1000000 : 700000000000LL);
    if (sc == S_PYTORCH) write_pytorch(r, e, n);
    else write_ftcomm(r, world, (uint64_t)epoch_of_dump, comm_rank, comm_size, e, n, n, trig);
    if (sc == S_CORRUPT && r == culprit) {
      char path[4096];
      snprintf(path, sizeof(path), "%s/rank-%d-20260101T000000Z-%d-0.json", dir, r, 1000 + r);
      struct stat st;
      if (stat(path, &st) == 0 && truncate(path, st.st_size / 2) < 0) return 2;
    }
  }
  free(e);
  if (sc == S_HEALTHY || sc == S_JITTER) printf("- -\n");
  else printf("%s %d\n", kinds[sc], culprit);
  return 0;
}
