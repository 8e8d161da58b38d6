/*
 * module.cpp - the extension module ftcomm._C: creates communicators and
 * backends for ftcomm/torch.py, and turns a failed libftcomm call into the
 * Python exception of its status (ftcomm.PeerLostError, ...).
 *
 * The process's first communicator (the job's, from the FTCOMM_* environment)
 * is made by the rendezvous, before torch creates the default group's
 * backend; it is held here until that backend takes it. Groups with the
 * default group's members share its communicator.
 */
#include <torch/extension.h>

#include <chrono>
#include <mutex>

#include "backend.h"

namespace py = pybind11;

namespace ftcomm {
namespace {

std::mutex g_mu;
std::shared_ptr<Comm> g_pending;  /* made by the rendezvous, not yet in a backend */
std::weak_ptr<Comm> g_world;      /* the job's communicator */
std::vector<c10::weak_intrusive_ptr<Backend>> g_backends;

std::shared_ptr<Comm> world_comm(bool create) {
  std::lock_guard<std::mutex> l(g_mu);
  if (g_pending) return g_pending;
  if (auto w = g_world.lock()) return w;
  if (!create) return nullptr;
  std::shared_ptr<Comm> c;
  {
    py::gil_scoped_release nogil;
    c = create_comm();
  }
  g_pending = c;
  g_world = c;
  return c;
}

py::tuple create_world() {
  auto c = world_comm(true);
  return py::make_tuple(c->rank(), c->size());
}

/* The epoch the job's communicator is in, and whether this process was
 * admitted as a joiner: a replacement admitted to a running job (epoch > 1)
 * must not take part in the rendezvous of the ranks that started it. */
py::tuple world_epoch() {
  auto c = world_comm(false);
  TORCH_CHECK(c, "ftcomm: no communicator yet: call after the rendezvous");
  ftc_epoch_info_t info{};
  ftc_status_t st = ftc_comm_info(c->comm, &info);
  if (st != FTC_OK) throw_status(st, *c, "ftc_comm_info");
  return py::make_tuple(info.epoch, static_cast<bool>(info.joiner));
}

/* Broadcast a short string over the job's communicator (the rendezvous
 * sends the store's address this way). */
std::string world_broadcast(const std::string &s, int root) {
  auto c = world_comm(false);
  TORCH_CHECK(c, "ftcomm: no communicator yet: call after the rendezvous");
  uint64_t len = s.size();
  std::string out;
  {
    py::gil_scoped_release nogil;
    static const char kName[] = "ftcomm:rendezvous";
    std::lock_guard<std::mutex> l(c->mu);
    c->coll_name = kName;
    ftc_comm_set_coll_name(c->comm, kName);
    ftc_status_t st = host_call(*c, {{&len, sizeof(len)}}, [&](const std::vector<void *> &b) {
      return ftc_broadcast(b[0], 1, FTC_I64, root, c->comm, FTC_TIMEOUT_DEFAULT);
    });
    if (st != FTC_OK) throw_status(st, *c, "broadcast of the rendezvous");
    out = s;
    out.resize(len);
    if (len)
      st = host_call(*c, {{&out[0], len}}, [&](const std::vector<void *> &b) {
        return ftc_broadcast(b[0], len, FTC_U8, root, c->comm, FTC_TIMEOUT_DEFAULT);
      });
    if (st != FTC_OK) throw_status(st, *c, "broadcast of the rendezvous");
  }
  return out;
}

int split_timeout_ms(const Comm &world, double timeout_s) {
  double ms = timeout_s * 1000.0;
  if (world.timeout_ms > 0 && ms > world.timeout_ms) ms = world.timeout_ms;
  return ms < 1 ? 1 : static_cast<int>(ms);
}

c10::intrusive_ptr<c10d::Backend> new_backend(int group_rank, int group_size, std::vector<int64_t> global_ranks,
                                              double timeout_s, const std::string &group_name) {
  auto world = world_comm(true);
  std::shared_ptr<Comm> c = world;
  if (!global_ranks.empty()) {
    /* A group of the default group's ranks: a child communicator that follows
     * the job's epochs (every rank of the default group takes part, the
     * others through split_nonmember, called by ftcomm/torch.py). */
    std::vector<int> ranks(global_ranks.begin(), global_ranks.end());
    {
      py::gil_scoped_release nogil;
      c = split_comm(*world, ranks, split_timeout_ms(*world, timeout_s));
    }
    TORCH_CHECK(c, "ftcomm: new_group: this process (rank ", world->rank(), ") is not in the group's ranks");
  }
  int rank = c->rank(), size = c->size();
  TORCH_CHECK_VALUE(group_rank == rank && group_size == size, "ftcomm: torch.distributed says this process is rank ",
                    group_rank, " of ", group_size, " but the ftcomm job (slot ", c->slot, ") made it rank ", rank,
                    " of ", size,
                    ": launch through ftcomm-run or a TrainingJob and leave RANK, WORLD_SIZE and MASTER_ADDR unset"
                    " (docs/pytorch.md)");
  auto opts = c10::make_intrusive<c10d::Backend::Options>("ftcomm");
  opts->timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  opts->group_name = group_name;
  for (auto r : global_ranks) opts->global_ranks_in_group.push_back(r);
  auto be = c10::make_intrusive<Backend>(c, rank, size, opts);
  std::lock_guard<std::mutex> l(g_mu);
  if (g_pending == c) g_pending.reset();
  g_backends.emplace_back(be);
  return be;
}

/* A rank of the default group outside a new group's ranks: its part in the
 * split (collective over the default group). */
void split_nonmember(std::vector<int64_t> global_ranks, double timeout_s) {
  auto world = world_comm(false);
  TORCH_CHECK(world, "ftcomm: new_group before init_process_group");
  std::vector<int> ranks(global_ranks.begin(), global_ranks.end());
  std::shared_ptr<Comm> c;
  {
    py::gil_scoped_release nogil;
    c = split_comm(*world, ranks, split_timeout_ms(*world, timeout_s));
  }
  TORCH_CHECK(!c, "ftcomm: new_group: this process is in the group's ranks but torch did not make it a member");
}

/* At exit: leave the job cleanly (the coordinator then sees "left", not a
 * crash) for every backend the program did not destroy. */
void shutdown_all() {
  std::vector<c10::intrusive_ptr<Backend>> live;
  {
    std::lock_guard<std::mutex> l(g_mu);
    for (auto &w : g_backends)
      if (auto b = w.lock()) live.push_back(b);
    g_backends.clear();
    g_pending.reset();
  }
  py::gil_scoped_release nogil;
  for (auto &b : live) b->shutdown();
  /* Leave now, children before the job's communicator: a backend that Python
   * still holds at exit (a training-loop helper, a cycle) would otherwise keep
   * its communicator until the process is gone, and the peers would see its
   * connections close as a crash ("closed its connection between
   * collectives") instead of a rank that left. */
  for (auto it = live.rbegin(); it != live.rend(); ++it) {
    Comm &c = *(*it)->comm();
    std::lock_guard<std::mutex> l(c.mu);
    if (c.comm) ftc_comm_destroy(c.comm);
    c.comm = nullptr;
  }
}

/* For tests/bench/torch: iters blocking ftc_allreduce calls (f32 sum, in
 * place) of t on the job's communicator, from C++ with nothing of torch in
 * between; seconds per call. The binding's cost is dist.all_reduce's time
 * over this one, on the same communicator and buffer in the same run. With
 * async_op: ftc_iallreduce, ftc_wait and ftc_request_free per call (what
 * dist.all_reduce(async_op=True).wait() is measured against). */
double bench_allreduce(at::Tensor t, int iters, bool async_op) {
  auto c = world_comm(false);
  TORCH_CHECK(c, "ftcomm: _bench_allreduce before init_process_group");
  TORCH_CHECK_VALUE(!c->on_device, "ftcomm: _bench_allreduce runs on the tcp backend (host memory)");
  TORCH_CHECK_VALUE(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == at::kFloat && iters > 0,
                    "ftcomm: _bench_allreduce takes a contiguous float32 CPU tensor and iters > 0");
  void *p = t.data_ptr();
  size_t n = static_cast<size_t>(t.numel());
  py::gil_scoped_release nogil;
  static const char kName[] = "ftcomm:bench_allreduce";
  std::lock_guard<std::mutex> l(c->mu);
  c->coll_name = kName;
  ftc_comm_set_coll_name(c->comm, kName);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; i++) {
    ftc_status_t st;
    if (async_op) {
      ftc_request_t *req = nullptr;
      st = ftc_iallreduce(p, p, n, FTC_F32, FTC_SUM, c->comm, &req);
      if (st == FTC_OK) st = ftc_wait(req, FTC_TIMEOUT_DEFAULT);
      ftc_request_free(req);
    } else {
      st = ftc_allreduce(p, p, n, FTC_F32, FTC_SUM, c->comm, FTC_TIMEOUT_DEFAULT);
    }
    if (st != FTC_OK) throw_status(st, *c, "_bench_allreduce (ftc_allreduce)");
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

/* The Python exception class for a status, from ftcomm.errors. */
py::object error_class(ftc_status_t st) {
  auto errors = py::module_::import("ftcomm.errors");
  return errors.attr("error_class")(static_cast<int>(st));
}

}  // namespace

/* ftcomm._C.comm_step, comm_recover, ...: the step boundary and recovery
 * for the training-loop helper (recovery.cpp). */
void register_recovery(py::module_ &m);

}  // namespace ftcomm

PYBIND11_MODULE(_C, m) {
  using namespace ftcomm;
  m.doc() = "ftcomm's c10d backend (see ftcomm.torch)";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const FtcError &e) {
      py::object cls = error_class(e.status);
      py::object exc = cls(e.text);
      exc.attr("status") = ftc_strerror(e.status);
      exc.attr("code") = static_cast<int>(e.status);
      exc.attr("rank") = e.rank;
      exc.attr("slot") = e.slot;
      exc.attr("collective") = e.collective;
      PyErr_SetObject(cls.ptr(), exc.ptr());
    }
  });

  py::class_<Backend, c10d::Backend, c10::intrusive_ptr<Backend>>(m, "FtcommBackend")
      .def_property_readonly("slot", [](const Backend &b) { return b.comm()->slot; })
      .def_property_readonly("epoch", [](const Backend &b) { return b.comm()->epoch(); })
      .def_property_readonly("transport", [](const Backend &b) {
        char buf[256] = "";
        ftc_comm_backend(b.comm()->comm, buf, sizeof(buf));
        return std::string(buf);
      })
      .def(
          "recover",
          [](Backend &b) {
            ftc_epoch_info_t info{};
            std::vector<std::pair<int, int>> lost;
            {
              py::gil_scoped_release nogil;
              lost = b.recover(&info, "recover (ftc_comm_recover)");
            }
            py::list ranks;
            for (auto &l : lost) ranks.append(l.first);
            return ranks;
          },
          "Wait for the job's next epoch of the survivors (ftc_comm_recover); the ranks of this group it "
          "lost, for dist.shrink_group.")
      .def("dump", [](const Backend &b, const std::string &reason) {
        char path[4096] = "";
        ftc_status_t st = ftc_comm_dump(b.comm()->comm, reason.c_str(), path, sizeof(path));
        if (st != FTC_OK) throw_status(st, *b.comm(), "dump");
        return std::string(path);
      });

  m.def("create_world", &create_world,
        "Join the job from the FTCOMM_* environment; returns (rank, world_size).");
  m.def("world_broadcast", &world_broadcast, py::arg("data"), py::arg("root"));
  m.def("world_epoch", &world_epoch, "(epoch, joiner) of the job's communicator.");
  m.def("new_backend", &new_backend, py::arg("group_rank"), py::arg("group_size"), py::arg("global_ranks"),
        py::arg("timeout_s"), py::arg("group_name"));
  m.def("split_nonmember", &split_nonmember, py::arg("global_ranks"), py::arg("timeout_s"));
  m.def("shutdown_all", &shutdown_all);
  m.def("_bench_allreduce", &bench_allreduce, py::arg("tensor"), py::arg("iters"), py::arg("async_op") = false,
        "tests/bench/torch: seconds per blocking ftc_allreduce of tensor, called from C++.");
  register_recovery(m);
  m.def("status_names", []() {
    py::dict d;
    for (int s = 0; s < FTC_STATUS_COUNT; s++) d[py::int_(s)] = ftc_strerror(static_cast<ftc_status_t>(s));
    return d;
  });
}
