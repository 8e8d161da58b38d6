/*
 * gloo_bench.cc - the Gloo peer of ftcomm-bench: the same options, sizes,
 * data, correctness check and rows (tests/bench/common), with allreduce done
 * by Gloo over its TCP transport on loopback. It starts its own ranks (-N):
 * one forked process per rank, meeting through a gloo::rendezvous::FileStore
 * in a fresh temporary directory. -A picks the algorithm: ring (the
 * gloo::allreduce ring that PyTorch's ProcessGroupGloo uses), bcube, or hd
 * (the legacy AllreduceHalvingDoubling class, in place).
 *
 * GLOO_BENCH_NETNS and GLOO_BENCH_HOSTS (comma-separated lists, one entry
 * per rank) place rank r in network namespace r of the list (a name under
 * /var/run/netns, `ip netns`) and bind its transport to host r instead of
 * loopback: tests/net/bandwidth.sh runs each rank behind its own
 * rate-limited link that way.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gloo/allreduce.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/barrier.h"
#include "gloo/config.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"

#include "bench_util.h"

namespace {

using ReduceFn = void (*)(void *, const void *, const void *, size_t);

template <typename T>
ReduceFn reduce_fn(ftc_op_t op) {
  switch (op) {
  case FTC_SUM: return static_cast<ReduceFn>(&gloo::sum<T>);
  case FTC_PROD: return static_cast<ReduceFn>(&gloo::product<T>);
  case FTC_MIN: return static_cast<ReduceFn>(&gloo::min<T>);
  case FTC_MAX: return static_cast<ReduceFn>(&gloo::max<T>);
  default: return nullptr;
  }
}

template <typename T>
const gloo::ReductionFunction<T> *legacy_fn(ftc_op_t op) {
  switch (op) {
  case FTC_SUM: return gloo::ReductionFunction<T>::sum;
  case FTC_PROD: return gloo::ReductionFunction<T>::product;
  case FTC_MIN: return gloo::ReductionFunction<T>::min;
  case FTC_MAX: return gloo::ReductionFunction<T>::max;
  default: return nullptr;
  }
}

enum class Algo { Ring, Bcube, HalvingDoubling };

/* One allreduce of n elements of T from sbuf into rbuf. */
template <typename T>
class Runner {
 public:
  Runner(std::shared_ptr<gloo::Context> ctx, Algo algo, ftc_op_t op, T *sbuf, T *rbuf, size_t n)
      : ctx_(std::move(ctx)), algo_(algo), op_(op), sbuf_(sbuf), rbuf_(rbuf), n_(n) {
    if (algo_ == Algo::HalvingDoubling)
      hd_.reset(new gloo::AllreduceHalvingDoubling<T>(ctx_, std::vector<T *>{rbuf_}, (int)n_,
                                                     legacy_fn<T>(op_)));
  }
  /* The first, checked run: the in-place algorithm starts from the input. */
  void run_first() {
    if (hd_) memcpy(rbuf_, sbuf_, n_ * sizeof(T));
    run();
  }
  void run() {
    if (hd_) {
      hd_->run();
      return;
    }
    gloo::AllreduceOptions opts(ctx_);
    opts.setAlgorithm(algo_ == Algo::Ring ? gloo::AllreduceOptions::Algorithm::RING
                                          : gloo::AllreduceOptions::Algorithm::BCUBE);
    opts.setInput(sbuf_, n_);
    opts.setOutput(rbuf_, n_);
    opts.setReduceFunction(reduce_fn<T>(op_));
    gloo::allreduce(opts);
  }

 private:
  std::shared_ptr<gloo::Context> ctx_;
  Algo algo_;
  ftc_op_t op_;
  T *sbuf_, *rbuf_;
  size_t n_;
  std::unique_ptr<gloo::AllreduceHalvingDoubling<T>> hd_;
};

double reduce_scalar(const std::shared_ptr<gloo::Context> &ctx, double v, ReduceFn fn) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(&v, 1);
  opts.setReduceFunction(fn);
  gloo::allreduce(opts);
  return v;
}

void barrier(const std::shared_ptr<gloo::Context> &ctx) {
  gloo::BarrierOptions opts(ctx);
  gloo::barrier(opts);
}

template <typename T>
int sweep(const bench_opts_t &o, Algo algo, const std::shared_ptr<gloo::Context> &ctx) {
  int rank = ctx->rank, size = ctx->size;
  size_t sizes[256];
  int nsizes = bench_sizes(&o, sizes, 256);
  size_t total_wrong = 0;
  double busbw_sum = 0;
  int rows = 0;
  for (int si = 0; si < nsizes; si++) {
    bench_geom_t g;
    if (bench_geometry(o.coll, sizes[si], size, o.dtype, &g) != 0) continue;
    T *sbuf = static_cast<T *>(bench_alloc(g.send_elems * sizeof(T)));
    T *rbuf = static_cast<T *>(bench_alloc(g.recv_elems * sizeof(T)));
    if (!sbuf || !rbuf) {
      fprintf(stderr, "gloo_bench: out of memory at %zu bytes\n", g.bytes);
      return 3;
    }
    int warmup, iters;
    bench_iterations(&o, g.bytes, &warmup, &iters);
    bench_fill(&o, &g, rank, size, sbuf, rbuf);
    Runner<T> runner(ctx, algo, o.op, sbuf, rbuf, g.per_rank);
    runner.run_first();
    double wrong = o.check ? (double)bench_check(&o, &g, rank, size, rbuf) : 0;
    wrong = reduce_scalar(ctx, wrong, static_cast<ReduceFn>(&gloo::sum<double>));
    for (int i = 0; i < warmup; i++) runner.run();
    barrier(ctx);
    double t0 = bench_now();
    for (int i = 0; i < iters; i++) runner.run();
    double us = (bench_now() - t0) * 1e6 / iters;
    us = reduce_scalar(ctx, us, static_cast<ReduceFn>(&gloo::max<double>));
    if (rank == 0) {
      bench_print_row(stdout, &o, size, &g, us, (size_t)wrong);
      total_wrong += (size_t)wrong;
      busbw_sum += us > 0 ? (double)g.bytes / (us * 1e3) * bench_busbw_factor(o.coll, size) : 0;
      rows++;
    }
    bench_free(sbuf);
    bench_free(rbuf);
  }
  if (rank == 0) bench_print_footer(stdout, &o, total_wrong, busbw_sum, rows);
  return total_wrong ? 1 : 0;
}

/* Entry `index` of the comma-separated list in environment variable `name`,
 * or "" when it is unset or shorter. */
static std::string list_entry(const char *name, int index) {
  const char *v = getenv(name);
  std::string s = v ? v : "";
  size_t start = 0;
  for (int i = 0; i < index; i++) {
    start = s.find(',', start);
    if (start == std::string::npos) return "";
    start++;
  }
  size_t end = s.find(',', start);
  return s.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

int rank_main(const bench_opts_t &o, Algo algo, const std::string &dir, int rank) {
  std::string ns = list_entry("GLOO_BENCH_NETNS", rank);
  if (!ns.empty()) {
    std::string path = "/var/run/netns/" + ns;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      fprintf(stderr, "gloo_bench: rank %d: cannot enter network namespace %s: %s\n", rank,
              path.c_str(), strerror(errno));
      return 1;
    }
    close(fd);
  }
  try {
    gloo::transport::tcp::attr attr;
    std::string host = list_entry("GLOO_BENCH_HOSTS", rank);
    attr.hostname = host.empty() ? "127.0.0.1" : host;
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, o.nranks);
    ctx->setTimeout(std::chrono::milliseconds(o.timeout_ms));
    ctx->connectFullMesh(store, dev);
    std::shared_ptr<gloo::Context> base = ctx;
    if (rank == 0) {
      char detail[64];
      snprintf(detail, sizeof(detail), "gloo %d.%d.%d, %s", GLOO_VERSION_MAJOR,
               GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, o.algo ? o.algo : "ring");
      bench_print_header(stdout, &o, o.nranks, detail);
    }
    switch (o.dtype) {
    case FTC_F32: return sweep<float>(o, algo, base);
    case FTC_F64: return sweep<double>(o, algo, base);
    case FTC_I32: return sweep<int32_t>(o, algo, base);
    case FTC_I64: return sweep<int64_t>(o, algo, base);
    case FTC_U8: return sweep<uint8_t>(o, algo, base);
    default: return 2;
    }
  } catch (const std::exception &e) {
    fprintf(stderr, "gloo_bench: rank %d: %s\n", rank, e.what());
    return 1;
  }
}

int remove_entry(const char *path, const struct stat *, int, struct FTW *) {
  return remove(path);
}

volatile sig_atomic_t timed_out = 0;
void on_alarm(int) { timed_out = 1; }

} // namespace

int main(int argc, char **argv) {
  bench_opts_t o;
  char err[256];
  const char *extra = "  -N, --nranks N          ranks to start (forked, default 2)\n"
                      "  -A, --algorithm A       ring|bcube|hd, default ring\n";
  int rc = bench_parse_args(argc, argv, &o, "gloo", extra, err, sizeof(err));
  if (rc > 0) return 0;
  if (rc == 0 && o.nranks == 0) o.nranks = 2;
  Algo algo = Algo::Ring;
  if (rc == 0) {
    std::string a = o.algo ? o.algo : "ring";
    if (a == "ring") algo = Algo::Ring;
    else if (a == "bcube") algo = Algo::Bcube;
    else if (a == "hd") algo = Algo::HalvingDoubling;
    else { snprintf(err, sizeof(err), "unknown algorithm '%s'", a.c_str()); rc = -1; }
  }
  if (rc == 0 && (o.coll != BENCH_ALLREDUCE || o.async || o.op > FTC_MAX ||
                  o.dtype == FTC_F16 || o.dtype == FTC_BF16)) {
    snprintf(err, sizeof(err), "this harness does synchronous allreduce of f32/f64/i32/i64/u8 "
                               "with sum/prod/min/max only");
    rc = -1;
  }
  if (rc != 0) {
    fprintf(stderr, "gloo_bench: %s\n", err);
    return 2;
  }
  char dir[] = "/tmp/gloo-bench-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("gloo_bench: mkdtemp");
    return 1;
  }
  fflush(stdout);
  std::vector<pid_t> pids;
  for (int r = 0; r < o.nranks; r++) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("gloo_bench: fork");
      break;
    }
    if (pid == 0) {
      int code = rank_main(o, algo, dir, r);
      fflush(stdout);
      _exit(code);
    }
    pids.push_back(pid);
  }
  /* Bounded: the whole sweep gets the per-collective timeout times the sizes. */
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm; /* no SA_RESTART: the alarm must interrupt waitpid */
  sigaction(SIGALRM, &sa, nullptr);
  alarm((unsigned)(o.timeout_ms / 1000 + 1) * 4);
  int failed = (int)pids.size() != o.nranks;
  size_t left = pids.size();
  while (left > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (timed_out) {
        fprintf(stderr, "gloo_bench: timed out, killing the ranks\n");
        for (pid_t p : pids) kill(p, SIGKILL);
        failed = 1;
        timed_out = 0;
        continue;
      }
      break;
    }
    left--;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      failed = 1;
      for (pid_t p : pids) if (p != pid) kill(p, SIGTERM);
    }
  }
  nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return failed;
}
