/*
 * backend.h - ftcomm as a c10d::Backend: torch.distributed's collectives on
 * a libftcomm communicator.
 *
 * The backend is thin: a c10d op becomes one or more libftcomm calls on
 * contiguous buffers, and its Work completes when their requests do. What
 * libftcomm has no single call for is built from calls it has, never
 * reimplemented: uneven all-to-all, allgather of unequal tensors, gather and
 * scatter from queued send/recv pairs (which progress together, so they
 * cannot deadlock); coalesced ops from one call on a packed buffer.
 *
 * Threads. libftcomm lets one application thread use a communicator at a
 * time: every call that starts an operation holds Comm::mu. An async op's
 * requests tell their Work they are done through libftcomm's completion
 * callback (ftc_request_on_complete), on libftcomm's progress thread: the
 * callback only counts and wakes (the Work "lands"); nothing waits in
 * ftc_wait. What follows (copying staged results out, finishing the Work,
 * completing its Future, whose callbacks run user code) is settled once, by
 * whichever comes first: a thread in wait()/isCompleted()/exception()/
 * getFuture() on a landed Work, or the backend's completion thread
 * ("ftc-torch-done"), which gets a landed Work only when something must
 * happen without a waiter (results to copy, a Future handed out). The same
 * thread enforces a group timeout shorter than libftcomm's own. A
 * synchronous op (asyncOp false) waits on the calling thread and never
 * reaches either.
 */
#pragma once

#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ftcomm.h"

namespace ftcomm {

/* A libftcomm communicator shared by the process groups built on it (the
 * default group and groups with the same members). Destroyed with the last. */
struct Comm {
  ftc_comm_t *comm = nullptr;
  int slot = -1;
  int timeout_ms = 0; /* FTCOMM_TIMEOUT_MS as resolved: the library's own bound */
  std::string job;
  std::mutex mu;      /* held by every call that starts an operation */
  const char *coll_name = nullptr; /* the recorder's collective name now set (under mu) */
  bool group_named = false;        /* the recorder has the group's name (under mu) */
  /* The last move to a new epoch by a recovery: from which epoch, who was lost
   * (their ranks there) and how many joined; a shrink asked after it (by a
   * group made before it) is checked against it. Under mu. */
  uint64_t moved_from = 0;
  std::vector<std::pair<int, int>> moved_lost; /* (rank, slot) */
  int moved_joined = 0;
  bool child = false; /* made by split_comm (new_group), not the job's own */
  /* On libftcomm's NCCL backend (FTCOMM_BACKEND=nccl) buffers are device
   * memory of `device` (the CUDA device current when the job was joined)
   * and collectives run on torch's current stream of it: `stream` is the
   * one last given to ftc_comm_set_stream (under mu). */
  bool on_device = false;
  c10::Device device{c10::kCPU};
  void *stream = nullptr;
  Comm() = default;
  Comm(const Comm &) = delete;
  Comm &operator=(const Comm &) = delete;
  ~Comm();
  int rank() const;
  int size() const;
  uint64_t epoch() const;
  /* On NCCL: the next calls run on torch's current stream of `device`, which
   * is returned (under mu). */
  c10::Stream use_current_stream();
};

/* A call of the binding's own (the rendezvous, reconfigure) on host buffers,
 * under c.mu: fn gets pointers libftcomm can use on c (the buffers
 * themselves on TCP; device copies on NCCL, copied back after). */
ftc_status_t host_call(Comm &c, const std::vector<std::pair<void *, size_t>> &bufs,
                       const std::function<ftc_status_t(const std::vector<void *> &)> &fn);

/* Create the process's communicator from the FTCOMM_* environment (blocks
 * until the first epoch is connected). Throws FtcError on failure. */
std::shared_ptr<Comm> create_comm();

/* ftc_comm_split_ranks over parent: collective over every rank of the
 * parent. Returns the child, or nullptr on a rank that is not in ranks. */
std::shared_ptr<Comm> split_comm(Comm &parent, const std::vector<int> &ranks, int timeout_ms);

/* The error a failed ftcomm call raises: c10::DistBackendError, so torch
 * treats it as a backend error; crosses into Python as ftcomm.PeerLostError,
 * ftcomm.CollectiveTimeout, ... (module.cpp). */
class FtcError : public c10::DistBackendError {
 public:
  FtcError(ftc_status_t status, std::string msg, int rank, int slot, std::string collective)
      : c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg),
        status(status), rank(rank), slot(slot), collective(std::move(collective)), text(std::move(msg)) {}
  ftc_status_t status;
  int rank, slot;
  std::string collective;
  std::string text; /* the message without c10's backtrace */
};

class Backend;
class Work;

/* What async Works share with their backend's completion thread; outlives
 * both (a Work still in flight holds it after the backend is gone). */
struct Completions {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<c10::intrusive_ptr<Work>> ready; /* landed, to settle off the progress thread */
  std::vector<c10::intrusive_ptr<Work>> timed; /* in flight, with a deadline before libftcomm's timeout */
  int in_flight = 0;                          /* armed, not landed or still held by a request */
  bool stopping = false;
  std::atomic<int> last_error{FTC_OK};        /* the last failed op's status (getError) */
};

/* One c10d op: the requests it started, in order, and what to do once they
 * all succeeded (copy results out of staging buffers). */
class Work : public c10d::Work {
 public:
  Work(int rank, c10d::OpType type, const char *title, std::string collective,
       std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
       const std::optional<std::vector<at::Tensor>> &inputs);
  ~Work() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return seq_; }
  std::chrono::milliseconds getTimeout() const override { return timeout_; }
  void abort() override;

 private:
  friend class Backend;
  friend class Launch;
  c10::intrusive_ptr<c10::ivalue::Future> make_future() const;
  void mark_future(const c10::intrusive_ptr<c10::ivalue::Future> &f);
  /* Run post_, finish, complete the future: once, on the calling thread. */
  void complete(std::exception_ptr err);
  /* After the requests of an async op started: land when they are done
   * (libftcomm's completion callbacks). Untracked: a launch that failed
   * half-way; its requests are only waited out, the Work stays unfinished. */
  void arm(std::shared_ptr<Completions> done, bool tracked, int comm_timeout_ms);
  static void on_request_done(ftc_request_t *req, ftc_status_t st, void *arg);
  void land();
  /* After a Work landed and its requests let it go: the backend may end. */
  static void flight_done(Completions &d);
  /* Once landed: complete() here unless another thread does it (then wait for it). */
  void settle();
  bool landed() {
    std::lock_guard<std::mutex> l(mutex_);
    return landed_;
  }

  std::string collective_;
  std::vector<at::Tensor> outputs_;
  std::vector<ftc_request_t *> reqs_;
  std::vector<at::Tensor> keep_; /* staging buffers the requests point into */
  std::function<void()> post_;   /* after success: copy staged results out */
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds timeout_;
  uint64_t seq_ = 0;
  std::shared_ptr<Comm> comm_;
  int slot_ = -1;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  /* The async path (under mutex_ unless atomic). */
  std::shared_ptr<Completions> done_;
  std::atomic<int> pending_{0}; /* requests not done, + 1 until armed */
  bool tracked_ = true;
  bool landed_ = false;   /* every request done */
  std::atomic<bool> landed_flag_{false}; /* landed_, for wait()'s poll without the lock */
  bool settling_ = false; /* complete() claimed by a thread */
  bool future_out_ = false; /* getFuture() was called: someone may wait on the future alone */
  bool future_final_ = false; /* complete() took future_: a later one is completed where made */
  ftc_status_t first_st_ = FTC_OK;
  std::string first_detail_;
  std::exception_ptr timeout_err_; /* the group's timeout ran out (completion thread) */
};

class Backend : public c10d::Backend {
 public:
  Backend(std::shared_ptr<Comm> comm, int rank, int size, const c10::intrusive_ptr<c10d::Backend::Options> &opts);
  ~Backend() override;

  const std::string getBackendName() const override { return "ftcomm"; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override { return options_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                                     const c10d::AllreduceCoalescedOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                                     std::vector<at::Tensor> &inputs,
                                                     const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(std::vector<at::Tensor> &outputs,
                                                             std::vector<at::Tensor> &inputs,
                                                             const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::GatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> gather_single(at::Tensor &output, at::Tensor &input,
                                               const c10d::GatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(at::Tensor &output, at::Tensor &input,
                                                       const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(std::vector<at::Tensor> &outputs,
                                                                 std::vector<at::Tensor> &inputs,
                                                                 const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> all_to_all_single(at::Tensor &output, at::Tensor &input,
                                                   std::vector<int64_t> &outputSplits,
                                                   std::vector<int64_t> &inputSplits,
                                                   const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
                                          const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;

  /* shrink: ftcomm's recovery (docs/pytorch.md, "shrink_group"). */
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t> &ranks_to_exclude, int shrink_flags,
                                           const c10::intrusive_ptr<c10d::Backend::Options> &opts_override) override;
  void setGroupUid(const std::string &uid) override;
#ifdef C10D_BACKEND_HAS_RECONFIGURE
  /* reconfigure: the job's next epoch, checked against the handles
   * (docs/pytorch.md, "reconfigure"). A handle is "ftcomm:<job>:<slot>". */
  bool supportsReconfigure() const override { return true; }
  c10d::ReconfigureHandle get_reconfigure_handle() const override;
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions &opts) override;
#endif
  /* ftc_comm_recover: wait for the coordinator's next epoch of this group's
   * survivors; the (rank, slot) of those it lost since this group was made.
   * The one recovery of every entry point: ftcomm.Manager
   * (ftcomm._C.comm_recover), backend_of().recover() with shrink_group, and
   * reconfigure on a failed epoch (through recover_locked). */
  std::vector<std::pair<int, int>> recover(ftc_epoch_info_t *info, const char *what,
                                           int timeout_ms = FTC_TIMEOUT_DEFAULT);

  uint64_t getSequenceNumberForGroup() override { return seq_; }
  void setTimeout(std::chrono::milliseconds timeout) override { options_->timeout = timeout; }
  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;

  const std::shared_ptr<Comm> &comm() const { return comm_; }
  /* After a step boundary or recovery: report the epoch's rank and size, and
   * forget the failed epoch's error (recovery.cpp). */
  void follow_epoch(int rank, int size) {
    rank_ = rank;
    size_ = size;
    last_error_.store(FTC_OK);
  }
  const std::shared_ptr<Completions> &completions() const { return done_; }
  /* recover's ftc_comm_recover and its record of who was lost, under comm()->mu. */
  ftc_status_t recover_locked(int timeout_ms, ftc_epoch_info_t *info);
  std::chrono::milliseconds timeout_of(std::chrono::milliseconds op_timeout) const;
  uint64_t next_seq() { return ++seq_; }
  /* Tell the flight recorder the torch-level names of the next collective
   * (its profiling name) and of the group; with the communicator's lock held. */
  void name_for_recorder(const char *title);

 private:
  void completion_loop();

  std::shared_ptr<Comm> comm_;
  c10::intrusive_ptr<c10d::Backend::Options> options_;
  uint64_t seq_ = 0;
  std::shared_ptr<Completions> done_;
  std::thread done_thread_;
  std::atomic<int> &last_error_; /* done_->last_error */
  uint64_t epoch_ = 0; /* the communicator's epoch when this group was made */
  std::set<int64_t> reconfigure_uuids_; /* used by reconfigure(), never again */
};

/* Raise the FtcError for a failed call on comm (message from ftc_last_error()). */
[[noreturn]] void throw_status(ftc_status_t st, const Comm &comm, const std::string &what);
std::exception_ptr error_of(ftc_status_t st, const Comm &comm, const std::string &what);
/* The same with libftcomm's detail given (from a completion callback). */
std::exception_ptr error_of(ftc_status_t st, const Comm &comm, const std::string &what, const char *detail);

}  // namespace ftcomm
