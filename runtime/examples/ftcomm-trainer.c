/*
 * ftcomm-trainer - a data-parallel SGD example on synthetic data.
 *
 * A two-layer perceptron (inputs -> tanh hidden -> logistic output) learns a
 * binary labelling produced by a fixed random "teacher" network. Every step
 * takes the next global batch of B samples, splits it evenly over the ranks,
 * each rank sums its gradients, an allreduce adds the sums, and every rank
 * applies the same update. Data, teacher and initial weights come from one
 * seed, so N ranks follow the 1-rank run up to floating-point summation order.
 *
 * It survives failures: at every step boundary ftc_comm_step() lets a
 * waiting joiner in; after ftc_comm_recover() and every other membership
 * change the ranks sync the newest model any of them holds (parameters,
 * step, loss) by broadcast, which is also how a joiner gets it; a step that
 * no survivor completed is redone, the fixed global batch re-split over
 * them. It stops only at a step boundary that followed the last update, so
 * no rank keeps an update its peers gave up on (docs/recovery.md).
 *
 * Run it under ftcomm-run:   ftcomm-run -n 4 -- ftcomm-trainer --steps 200
 * Each rank prints the loss every --log-every steps and, at the end, the
 * final loss, a parameter checksum and a hash of the parameter bytes (equal
 * on every rank: the replicas never drift).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ftcomm.h"

struct options {
  int steps;
  int batch;
  int inputs;
  int hidden;
  int samples;
  double lr;
  uint64_t seed;
  int log_every;
  int step_ms;  /* extra time per step, standing in for real compute */
  int start_ms; /* extra time before joining, standing in for loading a model */
};

struct model {
  int in, hid;
  size_t n;     /* number of parameters */
  double *p;    /* w1[hid][in], b1[hid], w2[hid], b2 */
};

/* splitmix64: a small, portable, seedable generator. */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

static double rng_normal(uint64_t *s) {
  double u1 = rng_uniform(s), u2 = rng_uniform(s);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static int model_init(struct model *m, int in, int hid, uint64_t seed, double scale) {
  m->in = in;
  m->hid = hid;
  m->n = (size_t)hid * (size_t)in + (size_t)hid * 2 + 1;
  m->p = calloc(m->n, sizeof(double));
  if (!m->p) return -1;
  uint64_t s = seed;
  for (size_t i = 0; i < m->n; i++) m->p[i] = rng_normal(&s) * scale / sqrt((double)in);
  return 0;
}

/* Forward pass for one sample; returns the logit, fills hidden activations. */
static double forward(const struct model *m, const double *x, double *h) {
  const double *w1 = m->p, *b1 = w1 + (size_t)m->hid * m->in, *w2 = b1 + m->hid;
  double b2 = w2[m->hid];
  double z = b2;
  for (int j = 0; j < m->hid; j++) {
    double a = b1[j];
    for (int i = 0; i < m->in; i++) a += w1[(size_t)j * m->in + i] * x[i];
    h[j] = tanh(a);
    z += w2[j] * h[j];
  }
  return z;
}

/* Add the gradient of the logistic loss of one sample to g; return its loss. */
static double backward(const struct model *m, const double *x, double y, double *h, double *g) {
  double z = forward(m, x, h);
  double p = 1.0 / (1.0 + exp(-z));
  double loss = (y > 0.5) ? -log(p + 1e-12) : -log(1.0 - p + 1e-12);
  double dz = p - y;
  const double *w2 = m->p + (size_t)m->hid * m->in + m->hid;
  double *gw1 = g, *gb1 = g + (size_t)m->hid * m->in, *gw2 = gb1 + m->hid;
  for (int j = 0; j < m->hid; j++) {
    double dh = dz * w2[j] * (1.0 - h[j] * h[j]);
    for (int i = 0; i < m->in; i++) gw1[(size_t)j * m->in + i] += dh * x[i];
    gb1[j] += dh;
    gw2[j] += dz * h[j];
  }
  gw2[m->hid] += dz;
  return loss;
}

static uint64_t fnv1a(const void *data, size_t len) {
  const unsigned char *b = data;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < len; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: ftcomm-trainer [--steps N] [--batch B] [--samples S] [--inputs I]\n"
          "                      [--hidden H] [--lr RATE] [--seed SEED] [--log-every K]\n"
          "                      [--step-ms MS] [--start-ms MS]\n"
          "Data-parallel SGD on synthetic data over ftcomm. Run it under ftcomm-run.\n");
}

static int parse_int(const char *name, const char *v, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < lo || x > hi) {
    fprintf(stderr, "ftcomm-trainer: --%s must be an integer in [%d, %d], not '%s'\n", name, lo,
            hi, v);
    return -1;
  }
  *out = (int)x;
  return 0;
}

static int parse_options(int argc, char **argv, struct options *o) {
  static const struct option longopts[] = {
      {"steps", required_argument, 0, 's'},   {"batch", required_argument, 0, 'b'},
      {"samples", required_argument, 0, 'N'}, {"inputs", required_argument, 0, 'i'},
      {"hidden", required_argument, 0, 'H'},  {"lr", required_argument, 0, 'l'},
      {"seed", required_argument, 0, 'S'},    {"log-every", required_argument, 0, 'k'},
      {"step-ms", required_argument, 0, 'T'}, {"start-ms", required_argument, 0, 'A'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  *o = (struct options){.steps = 200, .batch = 256, .inputs = 16, .hidden = 32,
                        .samples = 8192, .lr = 0.5, .seed = 1, .log_every = 20};
  int c;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    int bad = 0;
    switch (c) {
      case 's': bad = parse_int("steps", optarg, 0, 100000000, &o->steps); break;
      case 'b': bad = parse_int("batch", optarg, 1, 1 << 24, &o->batch); break;
      case 'N': bad = parse_int("samples", optarg, 1, 1 << 26, &o->samples); break;
      case 'i': bad = parse_int("inputs", optarg, 1, 4096, &o->inputs); break;
      case 'H': bad = parse_int("hidden", optarg, 1, 4096, &o->hidden); break;
      case 'k': bad = parse_int("log-every", optarg, 1, 100000000, &o->log_every); break;
      case 'T': bad = parse_int("step-ms", optarg, 0, 100000, &o->step_ms); break;
      case 'A': bad = parse_int("start-ms", optarg, 0, 600000, &o->start_ms); break;
      case 'l': {
        char *end;
        o->lr = strtod(optarg, &end);
        if (*end || !(o->lr > 0) || o->lr > 100) {
          fprintf(stderr, "ftcomm-trainer: --lr must be a number in (0, 100], not '%s'\n", optarg);
          bad = -1;
        }
        break;
      }
      case 'S': {
        char *end;
        errno = 0;
        o->seed = strtoull(optarg, &end, 10);
        if (errno || *end) {
          fprintf(stderr, "ftcomm-trainer: --seed must be an unsigned integer, not '%s'\n", optarg);
          bad = -1;
        }
        break;
      }
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); return -1;
    }
    if (bad) return -1;
  }
  if (optind != argc) {
    fprintf(stderr, "ftcomm-trainer: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  return 0;
}

/* Make every rank hold the same state after a membership change: the
 * newest state wins (a rank that finished the step the failure interrupted
 * is ahead; a joiner has none, step -1), from the lowest rank holding it,
 * sent by broadcast to every rank (not only to joiners: survivors may be a
 * step apart after a recovery). state[] is the parameters followed by the
 * last loss. */
/* Print which ranks of the current epoch this rank takes for new (holding
 * no state; ftc_comm_rank_is_new), one line per membership change: every rank
 * of an epoch must print the same set (tests/recovery two-joiners compares). */
static void print_new_ranks(ftc_comm_t *comm, const ftc_epoch_info_t *info) {
  char fresh[512] = "";
  size_t fl = 0;
  for (int r = 0, is_new = 0; r < info->size && fl < sizeof(fresh) - 12; r++)
    if (ftc_comm_rank_is_new(comm, r, &is_new) == FTC_OK && is_new)
      fl += (size_t)snprintf(fresh + fl, sizeof(fresh) - fl, " %d", r);
  fprintf(stderr, "ftcomm-trainer: epoch %llu: rank %d of %d%s: new ranks:%s\n",
          (unsigned long long)info->epoch, info->rank, info->size,
          info->joiner ? " (joiner)" : "", fresh);
}

/* Who the recovery left out, and the coordinator's reason (ftc_comm_lost). */
static void print_lost(ftc_comm_t *comm, const ftc_epoch_info_t *info) {
  for (int i = 0; i < info->lost; i++) {
    int prev_rank, slot;
    ftc_drop_reason_t why;
    if (ftc_comm_lost(comm, i, &prev_rank, &slot, &why) == FTC_OK)
      fprintf(stderr, "ftcomm-trainer: epoch %llu left out rank %d (slot %d) of the epoch before: %s\n",
              (unsigned long long)info->epoch, prev_rank, slot, ftc_drop_reason_name(why));
  }
}

/* Every rank takes the newest model (and its step) from the lowest rank
 * holding it: after a recovery, survivors may be a step apart; a joiner
 * holds none (step -1). */
static ftc_status_t sync_state(ftc_comm_t *comm, double *state, size_t n, int *step) {
  int64_t v = *step;
  int root = -1, rank = -1;
  ftc_comm_rank(comm, &rank);
  ftc_status_t st = ftc_comm_sync_state(comm, state, sizeof(double) * n, &v, FTC_TIMEOUT_DEFAULT, &root);
  if (st != FTC_OK) return st;
  if (*step != v)
    fprintf(stderr, "ftcomm-trainer: rank %d: took the model at step %lld from rank %d\n", rank,
            (long long)v, root);
  *step = (int)v;
  return FTC_OK;
}

int main(int argc, char **argv) {
  struct options o;
  if (parse_options(argc, argv, &o)) return 2;
  /* One line at a time, so a launcher's per-rank prefixes interleave in order. */
  setvbuf(stdout, NULL, _IOLBF, 0);

  /* Join in two halves: the connection to the coordinator, the data-plane
   * listener and the flight recorder are set up while this process builds
   * its data set and model, and it is admitted only once it is ready
   * (docs/recovery.md, "Joining early"). */
  ftc_comm_t *comm = NULL;
  ftc_comm_pending_t *pending = NULL;
  ftc_status_t st = ftc_comm_create_begin(NULL, &pending);
  if (st != FTC_OK) {
    fprintf(stderr, "ftcomm-trainer: cannot join the job: %s: %s\n", ftc_strerror(st),
            ftc_last_error());
    return 1;
  }
  int rank = 0, size = 1, rc = 1;
  ftc_epoch_info_t info = FTC_EPOCH_INFO_INIT;

  /* The data set: inputs ~ N(0,1), labels from the teacher network. */
  struct model teacher = {0}, model = {0};
  double *grad = NULL; /* gradients, then the loss sum */
  double *x = malloc(sizeof(double) * (size_t)o.samples * o.inputs);
  double *y = malloc(sizeof(double) * (size_t)o.samples);
  double *h = malloc(sizeof(double) * (size_t)o.hidden * 2);
  if (!x || !y || !h || model_init(&teacher, o.inputs, o.hidden, o.seed * 7919 + 1, 3.0) ||
      model_init(&model, o.inputs, o.hidden, o.seed * 104729 + 2, 1.0)) {
    fprintf(stderr, "ftcomm-trainer: out of memory\n");
    goto out_free;
  }
  /* The loss travels with the parameters when state is synced. */
  double *grown = realloc(model.p, sizeof(double) * (model.n + 1));
  if (!grown) goto out_free;
  model.p = grown;
  model.p[model.n] = 0;
  grad = calloc(model.n + 1, sizeof(double));
  if (!grad) goto out_free;
  uint64_t s = o.seed;
  for (size_t i = 0; i < (size_t)o.samples * o.inputs; i++) x[i] = rng_normal(&s);
  for (int n = 0; n < o.samples; n++) {
    y[n] = forward(&teacher, x + (size_t)n * o.inputs, h) > 0 ? 1.0 : 0.0;
  }
  if (o.start_ms > 0) {
    struct timespec ts = {o.start_ms / 1000, (long)(o.start_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  st = ftc_comm_create_finish(pending, &comm);
  pending = NULL;
  if (st != FTC_OK) {
    fprintf(stderr, "ftcomm-trainer: cannot join the job: %s: %s\n", ftc_strerror(st),
            ftc_last_error());
    goto out_free;
  }
  ftc_comm_rank(comm, &rank);
  ftc_comm_size(comm, &size);
  ftc_comm_info(comm, &info);

  if (rank == 0 && !info.joiner)
    printf("training: %d ranks, %zu parameters, batch %d, %d steps, seed %llu\n", size, model.n,
           o.batch, o.steps, (unsigned long long)o.seed);
  if (info.joiner)
    fprintf(stderr, "ftcomm-trainer: joined at epoch %llu as rank %d of %d\n",
            (unsigned long long)info.epoch, info.rank, info.size);
  /* The global batch is fixed and re-split over the current ranks, so the
   * math is the same at any size; a step that failed is redone. */
  int step = info.joiner ? -1 : 0, recovered = 0, recoveries = 0;
  for (;;) {
    /* A recovery is the step boundary of the step it redoes: no
     * ftc_comm_step() after it, so every rank (and a joiner admitted with
     * it, whose first ftc_comm_step() stands for that boundary) runs the
     * same collectives in the same order. */
    int synced = 0;
    if (recovered) {
      recovered = 0;
      st = sync_state(comm, model.p, model.n + 1, &step);
      synced = 1;
      info.changed = 0;
    } else {
      st = ftc_comm_step(comm, FTC_TIMEOUT_DEFAULT, &info);
    }
    if (st == FTC_OK && info.changed) {
      /* A joiner was admitted at this step boundary (a joiner's own first
       * step boundary reports the same): send it the model. */
      print_new_ranks(comm, &info);
      if (!info.joiner) {
        char fresh[128] = "";
        size_t fl = 0;
        for (int r = 0, is_new = 0; r < info.size && fl < sizeof(fresh) - 12; r++)
          if (ftc_comm_rank_is_new(comm, r, &is_new) == FTC_OK && is_new)
            fl += (size_t)snprintf(fresh + fl, sizeof(fresh) - fl, " %d", r);
        fprintf(stderr,
                "ftcomm-trainer: step %d: epoch %llu: %d joined (new ranks:%s), now rank %d of %d\n",
                step, (unsigned long long)info.epoch, info.joined, fresh, info.rank, info.size);
      }
      st = sync_state(comm, model.p, model.n + 1, &step);
      synced = 1;
    }
    /* The end. A collective that returned FTC_OK here may have failed on a
     * peer (a late rank finishes a collective its peers gave up on), so the
     * last step's update is final only once a later collective completes on
     * every rank: a step boundary (ftc_comm_step's allreduce) with no state
     * change since. A rank that stopped right after its last allreduce
     * could keep an update the others redo without it, at another size,
     * i.e. with other bits. After a sync (recovery or grow), confirm the
     * synced state at one more boundary. */
    if (st == FTC_OK && step >= o.steps) {
      if (!synced) break;
      continue;
    }
    if (st == FTC_OK) {
      ftc_comm_rank(comm, &rank);
      ftc_comm_size(comm, &size);
      memset(grad, 0, sizeof(double) * (model.n + 1));
      /* This rank's contiguous share of the global batch. */
      int lo = (int)((long long)o.batch * rank / size), hi = (int)((long long)o.batch * (rank + 1) / size);
      for (int b = lo; b < hi; b++) {
        int n = (int)(((long long)step * o.batch + b) % o.samples);
        grad[model.n] += backward(&model, x + (size_t)n * o.inputs, y[n], h, grad);
      }
      if (o.step_ms > 0) {
        struct timespec ts = {o.step_ms / 1000, (long)(o.step_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
      }
      st = ftc_allreduce(grad, grad, model.n + 1, FTC_F64, FTC_SUM, comm, FTC_TIMEOUT_DEFAULT);
    }
    if (st == FTC_OK) {
      for (size_t i = 0; i < model.n; i++) model.p[i] -= o.lr * grad[i] / o.batch;
      model.p[model.n] = grad[model.n] / o.batch;
      if (rank == 0 && (step % o.log_every == 0 || step == o.steps - 1))
        printf("step %5d  loss %.6f\n", step, model.p[model.n]);
      step++;
      continue;
    }
    fprintf(stderr, "ftcomm-trainer: rank %d: step %d failed: %s: %s; recovering\n", rank, step,
            ftc_strerror(st), ftc_last_error());
    st = ftc_comm_recover(comm, FTC_TIMEOUT_DEFAULT, &info);
    if (st != FTC_OK) {
      fprintf(stderr, "ftcomm-trainer: rank %d: cannot recover: %s: %s\n", rank, ftc_strerror(st),
              ftc_last_error());
      goto out_free;
    }
    recoveries++;
    fprintf(stderr, "ftcomm-trainer: recovered at step %d: epoch %llu, rank %d of %d (was %d of %d), "
            "%d lost, %d joined\n", step, (unsigned long long)info.epoch, info.rank, info.size,
            info.prev_rank, info.prev_size, info.lost, info.joined);
    print_lost(comm, &info);
    print_new_ranks(comm, &info);
    recovered = 1;
  }
  ftc_comm_rank(comm, &rank);
  ftc_comm_size(comm, &size);
  double checksum = 0;
  for (size_t i = 0; i < model.n; i++) checksum += model.p[i];
  printf("final: rank %d/%d loss %.9f checksum %.12e params_hash %016llx recoveries %d\n", rank,
         size, model.p[model.n], checksum,
         (unsigned long long)fnv1a(model.p, sizeof(double) * model.n), recoveries);
  rc = 0;
out_free:
  free(grad);
  free(teacher.p);
  free(model.p);
  free(x);
  free(y);
  free(h);
  ftc_comm_create_cancel(pending); /* (out of memory before it finished) */
  ftc_comm_destroy(comm);
  return rc;
}
