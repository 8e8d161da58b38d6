/*
 * recovery.cpp - libftcomm's step boundary and recovery for Python
 * (ftcomm._C.comm_step, comm_recover, ...), on the communicator of an
 * ftcomm process group: what the training-loop helper (ftcomm/manager.py)
 * drives each step. docs/recovery.md says what the calls do.
 *
 * A membership change renumbers this process (the survivors stay in slot
 * order); the group's backend then reports the new rank and size, so the
 * backend's own checks (a broadcast's root, staging a root's tensor) follow
 * the epoch. torch's ProcessGroup keeps the rank and size it was built with.
 */
#include <torch/extension.h>

#include <climits>

#include "backend.h"

namespace py = pybind11;

namespace ftcomm {
namespace {

int timeout_ms_of(const py::object &timeout_s) {
  if (timeout_s.is_none()) return FTC_TIMEOUT_DEFAULT;
  double s = timeout_s.cast<double>();
  TORCH_CHECK_VALUE(s >= 0, "ftcomm: a timeout must be >= 0 seconds or None (the job's default), not ", s);
  double ms = s * 1000.0;
  return ms >= static_cast<double>(INT_MAX) ? FTC_TIMEOUT_INFINITE : static_cast<int>(ms);
}

py::dict info_dict(const ftc_epoch_info_t &i) {
  py::dict d;
  d["epoch"] = i.epoch;
  d["rank"] = i.rank;
  d["size"] = i.size;
  d["prev_rank"] = i.prev_rank;
  d["prev_size"] = i.prev_size;
  d["changed"] = static_cast<bool>(i.changed);
  d["lost"] = i.lost;
  d["joined"] = i.joined;
  d["sync_root"] = i.sync_root;
  d["joiner"] = static_cast<bool>(i.joiner);
  return d;
}

/* Run a step or recover call under the communicator's lock, without the GIL;
 * on success the backend follows the (possibly new) epoch. */
py::dict run_boundary(Backend &be, const py::object &timeout_s, const char *what,
                      ftc_status_t (*fn)(ftc_comm_t *, int, ftc_epoch_info_t *)) {
  int ms = timeout_ms_of(timeout_s);
  auto c = be.comm();
  ftc_epoch_info_t info{};
  ftc_status_t st;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> l(c->mu);
    st = fn(c->comm, ms, &info);
  }
  if (st != FTC_OK) throw_status(st, *c, what);
  be.follow_epoch(info.rank, info.size);
  return info_dict(info);
}

py::dict comm_step(Backend &be, const py::object &timeout_s) {
  return run_boundary(be, timeout_s, "step boundary (ftc_comm_step)", ftc_comm_step);
}

/* ftc_comm_step_vote: 0, or 1 when this rank has heard of a newer epoch. */
int comm_step_vote(Backend &be) {
  auto c = be.comm();
  int vote = 0;
  ftc_status_t st;
  {
    std::lock_guard<std::mutex> l(c->mu);
    st = ftc_comm_step_vote(c->comm, &vote);
  }
  if (st != FTC_OK) throw_status(st, *c, "ftc_comm_step_vote");
  return vote;
}

py::dict comm_step_voted(Backend &be, bool votes, const py::object &timeout_s) {
  int ms = timeout_ms_of(timeout_s);
  auto c = be.comm();
  ftc_epoch_info_t info{};
  ftc_status_t st;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> l(c->mu);
    st = ftc_comm_step_voted(c->comm, votes ? 1 : 0, ms, &info);
  }
  if (st != FTC_OK) throw_status(st, *c, "step boundary (ftc_comm_step_voted)");
  be.follow_epoch(info.rank, info.size);
  return info_dict(info);
}

/* The backend's recovery, the same as recover() and shrink_group's. */
py::dict comm_recover(Backend &be, const py::object &timeout_s) {
  int ms = timeout_ms_of(timeout_s);
  ftc_epoch_info_t info{};
  {
    py::gil_scoped_release nogil;
    be.recover(&info, "recovery (ftc_comm_recover)", ms);
  }
  be.follow_epoch(info.rank, info.size);
  return info_dict(info);
}

py::dict comm_info(Backend &be) {
  auto c = be.comm();
  ftc_epoch_info_t info{};
  ftc_status_t st = ftc_comm_info(c->comm, &info);
  if (st != FTC_OK) throw_status(st, *c, "ftc_comm_info");
  return info_dict(info);
}

/* [(prev_rank, slot, reason)] of the members the last change left out. */
py::list comm_lost(Backend &be) {
  auto c = be.comm();
  ftc_epoch_info_t info{};
  ftc_status_t st = ftc_comm_info(c->comm, &info);
  if (st != FTC_OK) throw_status(st, *c, "ftc_comm_info");
  py::list out;
  for (int i = 0;; i++) {
    int prev_rank = -1, slot = -1;
    ftc_drop_reason_t why = FTC_DROP_LOST;
    if (ftc_comm_lost(c->comm, i, &prev_rank, &slot, &why) != FTC_OK) break;
    out.append(py::make_tuple(prev_rank, slot, ftc_drop_reason_name(why)));
  }
  return out;
}

/* The ranks of the current epoch that hold no application state. */
py::list comm_new_ranks(Backend &be) {
  auto c = be.comm();
  py::list out;
  int size = c->size();
  for (int r = 0; r < size; r++) {
    int is_new = 0;
    if (ftc_comm_rank_is_new(c->comm, r, &is_new) == FTC_OK && is_new) out.append(r);
  }
  return out;
}

}  // namespace

void register_recovery(py::module_ &m) {
  m.def("comm_step", &comm_step, py::arg("backend"), py::arg("timeout_s") = py::none(),
        "ftc_comm_step: the step boundary; returns the epoch's info (changed: a joiner was admitted).");
  m.def("comm_step_vote", &comm_step_vote, py::arg("backend"),
        "ftc_comm_step_vote: this rank's vote for the step boundary (1: it has heard of a newer epoch), "
        "to carry unscaled in a SUM reduction of the step; pass the reduced vote != 0 to comm_step_voted.");
  m.def("comm_step_voted", &comm_step_voted, py::arg("backend"), py::arg("votes"),
        py::arg("timeout_s") = py::none(),
        "ftc_comm_step_voted: the step boundary agreed by the reduced votes (False: no collective); "
        "returns the epoch's info as comm_step does.");
  m.def("comm_recover", &comm_recover, py::arg("backend"), py::arg("timeout_s") = py::none(),
        "ftc_comm_recover: wait for the survivors' next epoch; returns its info.");
  m.def("comm_info", &comm_info, py::arg("backend"), "ftc_comm_info: the current epoch.");
  m.def("comm_lost", &comm_lost, py::arg("backend"),
        "ftc_comm_lost: [(prev_rank, slot, reason)] of the members the last change left out.");
  m.def("comm_new_ranks", &comm_new_ranks, py::arg("backend"),
        "ftc_comm_rank_is_new: the ranks of the current epoch that hold no state.");
}

}  // namespace ftcomm
