/*
 * backend.cpp - the c10d ops on libftcomm calls, the Work objects and the
 * completion thread (backend.h says how they fit together).
 */
#include "backend.h"

#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/thread_name.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <strings.h>
#include <set>
#include <sstream>
#include <variant>

namespace ftcomm {

/* ---- the communicator ---- */

Comm::~Comm() {
  if (comm) ftc_comm_destroy(comm);
}

int Comm::rank() const {
  int r = -1;
  ftc_comm_rank(comm, &r);
  return r;
}

int Comm::size() const {
  int s = 0;
  ftc_comm_size(comm, &s);
  return s;
}

uint64_t Comm::epoch() const {
  uint64_t e = 0;
  ftc_comm_epoch(comm, &e);
  return e;
}

std::exception_ptr error_of(ftc_status_t st, const Comm &c, const std::string &what) {
  return error_of(st, c, what, ftc_last_error());
}

std::exception_ptr error_of(ftc_status_t st, const Comm &c, const std::string &what, const char *detail) {
  std::ostringstream m;
  m << "ftcomm: " << what << " failed on rank " << (c.comm ? c.rank() : -1) << " (slot " << c.slot;
  if (!c.job.empty()) m << " of job '" << c.job << "'";
  if (c.comm) m << ", epoch " << c.epoch();
  m << "): " << ftc_strerror(st);
  if (detail && *detail) m << ": " << detail;
  switch (st) {
    case FTC_ERR_PEER_LOST:
    case FTC_ERR_TIMEOUT:
    case FTC_ERR_REVOKED:
    case FTC_ERR_MISMATCH:
      m << " (the process group's epoch has failed: every later collective fails until the job recovers"
           " or restarts this process; docs/pytorch.md, Failures)";
      break;
    default:
      break;
  }
  return std::make_exception_ptr(FtcError(st, m.str(), c.comm ? c.rank() : -1, c.slot, what));
}

void throw_status(ftc_status_t st, const Comm &c, const std::string &what) {
  std::rethrow_exception(error_of(st, c, what));
}

c10::Stream Comm::use_current_stream() {
  c10::Stream s = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device);
  void *h = s.native_handle();
  /* torch's default stream is CUDA's legacy default stream (handle 0), which
   * ftc_comm_set_stream would read as "the communicator's own": name it as
   * cudaStreamLegacy. */
  if (!h) h = reinterpret_cast<void *>(0x1);
  if (h != stream) {
    ftc_status_t st = ftc_comm_set_stream(comm, h);
    if (st != FTC_OK) throw_status(st, *this, "ftc_comm_set_stream (torch's current CUDA stream)");
    stream = h;
  }
  return s;
}

ftc_status_t host_call(Comm &c, const std::vector<std::pair<void *, size_t>> &bufs,
                       const std::function<ftc_status_t(const std::vector<void *> &)> &fn) {
  std::vector<void *> ptrs;
  if (!c.on_device) {
    for (auto &b : bufs) ptrs.push_back(b.first);
    return fn(ptrs);
  }
  std::vector<at::Tensor> dev;
  for (auto &b : bufs) {
    auto host = at::from_blob(b.first, {static_cast<int64_t>(b.second)}, at::kByte);
    dev.push_back(host.to(c.device));
    ptrs.push_back(dev.back().data_ptr());
  }
  c.use_current_stream();
  ftc_status_t st = fn(ptrs);
  for (size_t i = 0; i < bufs.size(); i++)
    at::from_blob(bufs[i].first, {static_cast<int64_t>(bufs[i].second)}, at::kByte).copy_(dev[i]);
  return st;
}

std::shared_ptr<Comm> create_comm() {
  auto c = std::make_shared<Comm>();
  ftc_config_t cfg = FTC_CONFIG_INITIALIZER;
  ftc_status_t st = ftc_config_resolve(&cfg);
  if (st != FTC_OK) throw_status(st, *c, "reading the FTCOMM_* environment");
  c->slot = cfg.slot;
  c->timeout_ms = cfg.timeout_ms;
  c->job = cfg.job ? cfg.job : "";
  /* The job's communicator is one per process (one member of the job): on
   * TCP unless FTCOMM_BACKEND=nccl says NCCL ("auto" would pick NCCL on any
   * GPU host, for CPU tensors too). On TCP, CUDA tensors are staged through
   * host memory; on NCCL, CPU tensors through the device (docs/pytorch.md). */
  const char *be = getenv("FTCOMM_BACKEND");
  if (be && strcasecmp(be, "nccl") == 0) {
    TORCH_CHECK_VALUE(c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA) &&
                          c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->deviceCount() > 0,
                      "ftcomm: FTCOMM_BACKEND=nccl, but torch sees no CUDA device: unset FTCOMM_BACKEND (CUDA"
                      " tensors then go over TCP through host memory) or run where torch.cuda.is_available()");
    c->on_device = true;
    /* libftcomm uses the device current on this thread: torch.cuda.set_device(local_rank) before
     * init_process_group, as for torch's NCCL backend. */
    c->device = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice();
  } else {
    if (!be || !*be || strcmp(be, "auto") == 0) cfg.backend = "tcp";
    TORCH_CHECK_VALUE(strcmp(cfg.backend, "tcp") == 0, "ftcomm: FTCOMM_BACKEND=", cfg.backend,
                      ": the torch backend runs on ftcomm's tcp backend (CUDA tensors staged through host memory) or"
                      " on its nccl backend (FTCOMM_BACKEND=nccl: CUDA tensors on torch's current stream); set tcp,"
                      " auto, nccl or leave it unset");
  }
  st = ftc_comm_create(&cfg, &c->comm);
  if (st != FTC_OK) throw_status(st, *c, "joining the job (ftc_comm_create)");
  return c;
}

std::shared_ptr<Comm> split_comm(Comm &parent, const std::vector<int> &ranks, int timeout_ms) {
  auto c = std::make_shared<Comm>();
  c->slot = parent.slot;
  c->child = true;
  c->on_device = parent.on_device;
  c->device = parent.device;
  c->timeout_ms = parent.timeout_ms;
  c->job = parent.job;
  ftc_status_t st;
  {
    static const char kName[] = "ftcomm:new_group"; /* the split's own collectives, in dumps */
    std::lock_guard<std::mutex> l(parent.mu);
    parent.coll_name = kName;
    ftc_comm_set_coll_name(parent.comm, kName);
    st = ftc_comm_split_ranks(parent.comm, ranks.data(), static_cast<int>(ranks.size()), timeout_ms, &c->comm);
  }
  if (st != FTC_OK) throw_status(st, parent, "new_group (ftc_comm_split_ranks)");
  if (!c->comm) return nullptr;
  return c;
}

/* ---- arguments ---- */

namespace {

const char *dtype_name(at::ScalarType t) { return c10::toString(t); }

bool is_bitwise(c10d::ReduceOp::RedOpType op) {
  return op == c10d::ReduceOp::BAND || op == c10d::ReduceOp::BOR || op == c10d::ReduceOp::BXOR;
}

/* The libftcomm dtype of a reduction over t, or a TypeError. */
ftc_dtype_t reduce_dtype(const at::Tensor &t, c10d::ReduceOp::RedOpType op, const char *what) {
  if (is_bitwise(op)) {
    switch (t.scalar_type()) {
      case at::kInt: return FTC_I32;
      case at::kLong: return FTC_I64;
      case at::kByte:
      case at::kBool: return FTC_U8;
      default: break;
    }
    TORCH_CHECK_TYPE(false, "ftcomm: ", what, " with a bitwise ReduceOp (BAND, BOR, BXOR) takes an integer tensor"
                     " (int32, int64, uint8 or bool), not ", dtype_name(t.scalar_type()));
  }
  if (op == c10d::ReduceOp::PREMUL_SUM)
    TORCH_CHECK_TYPE(t.is_floating_point(), "ftcomm: ", what, " with PREMUL_SUM takes a floating-point tensor, not ",
                     dtype_name(t.scalar_type()), "; use SUM for integers");
  switch (t.scalar_type()) {
    case at::kFloat: return FTC_F32;
    case at::kDouble: return FTC_F64;
    case at::kHalf: return FTC_F16;
    case at::kBFloat16: return FTC_BF16;
    case at::kInt: return FTC_I32;
    case at::kLong: return FTC_I64;
    case at::kByte: return FTC_U8;
    case at::kBool:
      if (op == c10d::ReduceOp::MIN || op == c10d::ReduceOp::MAX) return FTC_U8;
      break;
    default:
      break;
  }
  TORCH_CHECK_TYPE(false, "ftcomm: ", what, " cannot reduce a tensor of dtype ", dtype_name(t.scalar_type()),
                   ": supported are float32, float64, float16, bfloat16, int32, int64 and uint8 (bool with MIN"
                   " or MAX); cast the tensor, or move it as bytes with a non-reducing collective");
}

ftc_op_t reduce_op(const c10d::ReduceOp &op, const char *what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return FTC_SUM;
    case c10d::ReduceOp::AVG: return FTC_AVG;
    case c10d::ReduceOp::PRODUCT: return FTC_PROD;
    case c10d::ReduceOp::MIN: return FTC_MIN;
    case c10d::ReduceOp::MAX: return FTC_MAX;
    case c10d::ReduceOp::BAND: return FTC_BAND;
    case c10d::ReduceOp::BOR: return FTC_BOR;
    case c10d::ReduceOp::BXOR: return FTC_BXOR;
    case c10d::ReduceOp::PREMUL_SUM: return FTC_SUM; /* the inputs scaled first (premul) */
    default:
      break;
  }
  TORCH_CHECK_VALUE(false, "ftcomm: ", what, " with ReduceOp ", static_cast<int>(op.op_),
                    " is not supported: use SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR or PREMUL_SUM");
}

/* PREMUL_SUM (dist._make_nccl_premul_sum(factor)): every rank's input times
 * the factor, summed. The multiplication is torch's, on this rank's own
 * data; the sum is libftcomm's. The factor in t's dtype, or undefined for
 * any other op. */
at::Tensor premul_factor(const at::Tensor &t, const c10d::ReduceOp &op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return at::Tensor();
  auto *s = dynamic_cast<c10d::PreMulSumSupplement *>(op.supplement_.get());
  TORCH_CHECK_VALUE(s, "ftcomm: PREMUL_SUM without its factor: make the op with dist._make_nccl_premul_sum(factor)");
  if (s->tensor_factor.defined()) return s->tensor_factor.to(t.device(), t.scalar_type()).reshape({});
  return at::scalar_tensor(s->double_factor, t.options());
}

/* t scaled in place (t is the op's output too), or a scaled copy of t (an
 * input that must stay as it is); t itself for any op but PREMUL_SUM. */
void premul_(at::Tensor &t, const c10d::ReduceOp &op) {
  at::Tensor f = premul_factor(t, op);
  if (f.defined()) t.mul_(f);
}

at::Tensor premul(const at::Tensor &t, const c10d::ReduceOp &op) {
  at::Tensor f = premul_factor(t, op);
  return f.defined() ? t * f : t;
}

void check_tensor(const at::Tensor &t, const char *what) {
  TORCH_CHECK_VALUE(t.defined(), "ftcomm: ", what, ": an undefined tensor");
  TORCH_CHECK_VALUE(t.layout() == at::kStrided, "ftcomm: ", what, ": only dense (strided) tensors are supported, not ",
                    t.layout());
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda(), "ftcomm: ", what,
                    ": only CPU and CUDA tensors are supported, not ", t.device());
}

void check_one(const std::vector<at::Tensor> &ts, const char *what) {
  TORCH_CHECK_VALUE(ts.size() == 1, "ftcomm: ", what, " takes one tensor per call, got ", ts.size());
  check_tensor(ts[0], what);
}

void check_same(const at::Tensor &a, const at::Tensor &b, const char *what) {
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), "ftcomm: ", what, ": input dtype ",
                   dtype_name(b.scalar_type()), " differs from output dtype ", dtype_name(a.scalar_type()));
}

/* At least 1 ms: the library refuses 0, and a deadline already passed must still fail the op as a timeout. */
int to_int_ms(std::chrono::milliseconds ms) {
  return ms.count() > INT_MAX ? INT_MAX : ms.count() < 1 ? 1 : static_cast<int>(ms.count());
}

}  // namespace

/* ---- Work ---- */

Work::Work(int rank, c10d::OpType type, const char *title, std::string collective, std::vector<at::Tensor> outputs,
           std::chrono::milliseconds timeout, const std::optional<std::vector<at::Tensor>> &inputs)
    : c10d::Work(rank, type, title, inputs),
      collective_(std::move(collective)),
      outputs_(std::move(outputs)),
      timeout_(timeout) {
  deadline_ = std::chrono::steady_clock::now() + timeout;
}

/* Made when first asked for (most ops never are: a synchronous one, a
 * wait()ed one), completed by complete() or, when asked for later, here. */
c10::intrusive_ptr<c10::ivalue::Future> Work::make_future() const {
  static const auto kType = c10::ListType::create(c10::TensorType::get());
  /* A future of CUDA tensors names their devices, so that its users' streams
   * wait for it as for torch's own backends' futures. */
  std::vector<c10::Device> devices;
  for (auto &o : outputs_)
    if (o.defined() && o.is_cuda()) devices.push_back(o.device());
  return c10::make_intrusive<c10::ivalue::Future>(kType, devices);
}

void Work::mark_future(const c10::intrusive_ptr<c10::ivalue::Future> &f) {
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> l(mutex_);
    err = exception_;
  }
  if (err)
    f->setError(err);
  else
    f->markCompleted(c10::IValue(outputs_));
}

Work::~Work() {
  /* Only a Work whose requests are all done is destroyed: each running
   * request holds a reference to it (arm), so its buffers (keep_) outlive
   * the requests. */
  for (auto *r : reqs_) ftc_request_free(r);
}

bool Work::isCompleted() {
  if (!landed()) return false;
  settle();
  return true;
}

bool Work::isSuccess() const {
  auto *self = const_cast<Work *>(this);
  if (!self->landed()) return false;
  self->settle();
  std::lock_guard<std::mutex> l(mutex_);
  return !exception_;
}

std::exception_ptr Work::exception() const {
  auto *self = const_cast<Work *>(this);
  if (self->landed()) self->settle();
  std::lock_guard<std::mutex> l(mutex_);
  return exception_;
}

namespace {

/* FTCOMM_SPIN_US (docs/environment.md): how long a waiter polls before it
 * sleeps, as libftcomm's own ftc_wait does. */
int spin_us() {
  static const int us = [] {
    const char *e = getenv("FTCOMM_SPIN_US");
    char *end = nullptr;
    long v = e && *e ? strtol(e, &end, 10) : 50;
    return (e && *e && (*end || v < 0 || v > 100000)) ? 50 : static_cast<int>(v);
  }();
  return us;
}

}  // namespace

bool Work::wait(std::chrono::milliseconds timeout) {
  /* A short op lands within microseconds: poll first (yielding, as the
   * progress thread may need this core), then sleep. */
  if (!landed_flag_.load(std::memory_order_acquire) && spin_us() > 0) {
    auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us());
    while (!landed_flag_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < end)
      std::this_thread::yield();
  }
  std::unique_lock<std::mutex> l(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(l, [&] { return landed_; });
  } else if (!cv_.wait_for(l, timeout, [&] { return landed_; })) {
    std::ostringstream m;
    m << "ftcomm: " << collective_ << " (seq " << seq_ << ") on rank " << rank_ << " (slot " << slot_
      << ") did not complete within the wait's " << timeout.count()
      << " ms; it goes on until it completes or the process group's timeout fails it";
    throw FtcError(FTC_ERR_TIMEOUT, m.str(), rank_, slot_, collective_);
  }
  l.unlock();
  settle();
  l.lock();
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> Work::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> Work::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> f;
  bool mark = false, now;
  {
    std::lock_guard<std::mutex> l(mutex_);
    future_out_ = true;
    if (!future_) {
      future_ = make_future();
      mark = future_final_; /* complete() has passed the point where it would */
    }
    f = future_;
    now = landed_ && !settling_;
  }
  if (mark) mark_future(f);
  /* Landed before anyone asked for the future: nobody else completes it. */
  if (now) settle();
  return f;
}

void Work::abort() {
  if (comm_) ftc_comm_abort(comm_->comm);
}

void Work::complete(std::exception_ptr err) {
  {
    std::lock_guard<std::mutex> l(mutex_);
    landed_ = settling_ = true;
    landed_flag_.store(true, std::memory_order_release);
  }
  if (!err && post_) {
    try {
      post_();
    } catch (...) {
      err = std::current_exception();
    }
  }
  post_ = nullptr;
  finish(err);
  c10::intrusive_ptr<c10::ivalue::Future> f;
  {
    std::lock_guard<std::mutex> l(mutex_);
    future_final_ = true;
    f = future_;
  }
  if (f) mark_future(f);
}

void Work::arm(std::shared_ptr<Completions> done, bool tracked, int comm_timeout_ms) {
  done_ = std::move(done);
  tracked_ = tracked;
  bool timed = tracked && (comm_timeout_ms <= 0 || timeout_.count() < comm_timeout_ms);
  {
    std::lock_guard<std::mutex> l(done_->mu);
    done_->in_flight++;
    /* A group timeout shorter than libftcomm's own is the completion
     * thread's to enforce (libftcomm fails what runs past its own). */
    if (timed) done_->timed.push_back(c10::intrusive_ptr<Work>::reclaim_copy(this));
  }
  if (timed) done_->cv.notify_all();
  pending_.store(static_cast<int>(reqs_.size()) + 1);
  for (auto *r : reqs_) {
    c10::raw::intrusive_ptr::incref(this); /* the request's: released by its callback */
    ftc_status_t st = ftc_request_on_complete(r, &Work::on_request_done, this);
    TORCH_INTERNAL_ASSERT(st == FTC_OK, "ftcomm: ftc_request_on_complete: ", ftc_last_error());
  }
  if (pending_.fetch_sub(1) == 1) {
    land();
    flight_done(*done_);
  }
}

void Work::flight_done(Completions &d) {
  bool wake;
  {
    std::lock_guard<std::mutex> l(d.mu);
    d.in_flight--;
    wake = d.stopping && d.in_flight == 0;
  }
  if (wake) d.cv.notify_all();
}

void Work::on_request_done(ftc_request_t *, ftc_status_t st, void *arg) {
  /* On libftcomm's progress thread (or the one aborting): count and wake,
   * nothing that blocks or runs user code (ftcomm.h's contract). */
  auto *w = static_cast<Work *>(arg);
  if (st != FTC_OK) {
    std::lock_guard<std::mutex> l(w->mutex_);
    if (w->first_st_ == FTC_OK) {
      w->first_st_ = st;
      w->first_detail_ = ftc_last_error();
    }
  }
  std::shared_ptr<Completions> d;
  if (w->pending_.fetch_sub(1) == 1) {
    w->land();
    d = w->done_;
  }
  /* The requests' reference goes before the flight ends: while one is in
   * flight the backend (and the communicator it holds) stays, so this is
   * never the Work's last reference to the communicator, whose destroy
   * would join this very thread. */
  c10::raw::intrusive_ptr::decref(w);
  if (d) flight_done(*d);
}

void Work::land() {
  bool hop;
  {
    std::lock_guard<std::mutex> l(mutex_);
    landed_ = true;
    landed_flag_.store(true, std::memory_order_release);
    if (first_st_ != FTC_OK) done_->last_error.store(first_st_);
    /* Without a waiter, results staged elsewhere must still reach their
     * tensors, and a future handed out must still complete. */
    hop = tracked_ && !settling_ && (post_ || future_out_);
  }
  cv_.notify_all();
  if (!hop) return;
  {
    std::lock_guard<std::mutex> l(done_->mu);
    done_->ready.push_back(c10::intrusive_ptr<Work>::reclaim_copy(this));
  }
  done_->cv.notify_all();
}

void Work::settle() {
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> l(mutex_);
    if (!tracked_) return;
    if (settling_) {
      cv_.wait(l, [&] { return completed_; });
      return;
    }
    settling_ = true;
    if (timeout_err_)
      err = timeout_err_;
    else if (first_st_ != FTC_OK)
      err = error_of(first_st_, *comm_, collective_, first_detail_.c_str());
  }
  complete(err);
}

/* ---- launching an op ---- */

/* Builds one op: stages tensors into contiguous buffers where libftcomm
 * reads them (host memory on TCP, the communicator's device on NCCL), starts
 * its requests under the communicator's lock, and either waits for them here
 * (asyncOp false) or hands the Work to the completion thread. On NCCL the
 * op runs on torch's current stream, which also orders the staging copies
 * before it; results are copied out on that stream, synchronized before the
 * Work completes (a completed Work's tensors are ready on any stream). */
class Launch {
 public:
  Launch(Backend &be, c10d::OpType type, const char *title, const char *name, bool async,
         std::chrono::milliseconds op_timeout, std::vector<at::Tensor> outputs,
         const std::optional<std::vector<at::Tensor>> &inputs)
      : be_(be), comm_(*be.comm()), async_(async), lock_(be.comm()->mu), dev_(be.comm()->device) {
    auto t = be.timeout_of(op_timeout);
    be.name_for_recorder(title);
    if (comm_.on_device) stream_ = comm_.use_current_stream();
    work_ = c10::make_intrusive<Work>(be.getRank(), type, title, name, std::move(outputs), t, inputs);
    work_->comm_ = be.comm();
    work_->slot_ = comm_.slot;
    work_->seq_ = be.next_seq();
    name_ = name;
    timeout_ms_ = to_int_ms(t);
    /* Waits bound by the library's own timeout when the group's is not shorter
     * (the library counts from when the op starts, not when it was queued). */
    wait_ms_ = (comm_.timeout_ms > 0 && t.count() >= comm_.timeout_ms) ? FTC_TIMEOUT_INFINITE : timeout_ms_;
  }

  /* Where libftcomm reads and writes this op's buffers. */
  at::Device device() const { return dev_; }

  /* A contiguous tensor with t's data where libftcomm reads it, kept alive
   * until the op ends. */
  at::Tensor in(const at::Tensor &t) {
    at::Tensor c = t.device() == dev_ ? t.contiguous() : t.to(dev_).contiguous();
    work_->keep_.push_back(c);
    return c;
  }

  /* A contiguous buffer to receive into t; copied into t after success
   * unless it is t itself. With preload, it starts with t's data (in place). */
  at::Tensor out(const at::Tensor &t, bool preload) {
    if (t.device() == dev_ && t.is_contiguous()) return t;
    at::Tensor c = preload ? (t.device() == dev_ ? t.contiguous().clone() : t.to(dev_).contiguous())
                           : at::empty(t.sizes(), t.options().device(dev_));
    work_->keep_.push_back(c);
    copies_.emplace_back(t, c);
    return c;
  }

  /* A scratch buffer of n elements like t, where libftcomm writes. */
  at::Tensor scratch(const at::Tensor &like, int64_t n) {
    at::Tensor c = at::empty({n}, like.options().device(dev_));
    work_->keep_.push_back(c);
    return c;
  }

  void then(std::function<void()> f) { posts_.push_back(std::move(f)); }

  /* Start one request; on failure the op ends here with the error. */
  void start(const std::function<ftc_status_t(ftc_request_t **)> &fn) {
    ftc_request_t *req = nullptr;
    ftc_status_t st = fn(&req);
    if (st != FTC_OK) fail(st);
    work_->reqs_.push_back(req);
  }

  /* A blocking call for a synchronous op of one call (the library runs it on
   * this thread when nothing is queued: no handoff); else start(). */
  void run(const std::function<ftc_status_t(int)> &blocking, const std::function<ftc_status_t(ftc_request_t **)> &fn) {
    if (!async_ && work_->reqs_.empty() && !ran_blocking_) {
      ran_blocking_ = true;
      ftc_status_t st = blocking(timeout_ms_);
      if (st != FTC_OK) fail(st);
      return;
    }
    start(fn);
  }

  c10::intrusive_ptr<c10d::Work> finish() {
    auto copies = std::move(copies_);
    auto posts = std::move(posts_);
    std::optional<c10::Stream> stream = stream_;
    /* (none when there is nothing to do: a Work without one needs no thread
     * after it lands) */
    if (!copies.empty() || !posts.empty()) work_->post_ = [copies, posts, stream]() {
      std::optional<c10::StreamGuard> on;
      if (stream) on.emplace(*stream);
      for (auto &p : posts) p();
      for (auto &c : copies) const_cast<at::Tensor &>(c.first).copy_(c.second);
      if (stream) stream->synchronize();
    };
    if (async_) {
      lock_.unlock();
      work_->arm(be_.completions(), true, comm_.timeout_ms);
      return work_;
    }
    std::exception_ptr err;
    for (auto *r : work_->reqs_) {
      ftc_status_t st = ftc_wait(r, wait_ms_);
      if (st != FTC_OK && !err) err = error_of(st, comm_, name_);
    }
    lock_.unlock();
    work_->complete(err);
    if (err) std::rethrow_exception(err);
    return work_;
  }

  int wait_ms() const { return wait_ms_; }
  const std::string &name() const { return name_; }
  ftc_comm_t *comm() const { return comm_.comm; }
  int rank() const { return be_.getRank(); }
  int size() const { return be_.getSize(); }

 private:
  [[noreturn]] void fail(ftc_status_t st) {
    auto err = error_of(st, comm_, name_);
    if (!work_->reqs_.empty()) {
      /* Requests already started point into this op's buffers: let the
       * completion thread wait them out before the buffers go. */
      work_->post_ = nullptr;
      lock_.unlock();
      work_->arm(be_.completions(), false, comm_.timeout_ms);
    }
    std::rethrow_exception(err);
  }

  Backend &be_;
  Comm &comm_;
  bool async_;
  bool ran_blocking_ = false;
  std::unique_lock<std::mutex> lock_;
  at::Device dev_;
  std::optional<c10::Stream> stream_;
  c10::intrusive_ptr<Work> work_;
  std::string name_;
  int timeout_ms_ = 0, wait_ms_ = 0;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies_;
  std::vector<std::function<void()>> posts_;
};

/* ---- the backend ---- */

Backend::Backend(std::shared_ptr<Comm> comm, int rank, int size, const c10::intrusive_ptr<c10d::Backend::Options> &opts)
    : c10d::Backend(rank, size),
      comm_(std::move(comm)),
      options_(opts),
      done_(std::make_shared<Completions>()),
      last_error_(done_->last_error) {
  epoch_ = comm_->epoch();
  done_thread_ = std::thread([this] { completion_loop(); });
  init();
}

Backend::~Backend() { shutdown(); }

void Backend::shutdown() {
  {
    std::lock_guard<std::mutex> l(done_->mu);
    if (done_->stopping && !done_thread_.joinable()) return;
    done_->stopping = true;
  }
  done_->cv.notify_all();
  if (done_thread_.joinable()) done_thread_.join();
}

void Backend::name_for_recorder(const char *title) {
  /* Names are only labels in dumps: a refused one costs the label, not the op. */
  if (!comm_->group_named) {
    comm_->group_named = true;
    ftc_comm_set_group_name(comm_->comm, getGroupUid().c_str(), getGroupDesc().c_str());
  }
  if (comm_->coll_name != title) {
    comm_->coll_name = title;
    ftc_comm_set_coll_name(comm_->comm, title);
  }
}

void Backend::setGroupUid(const std::string &uid) {
  c10d::Backend::setGroupUid(uid);
  std::lock_guard<std::mutex> l(comm_->mu);
  comm_->group_named = false; /* named again before the next op */
}

ftc_status_t Backend::recover_locked(int timeout_ms, ftc_epoch_info_t *info) {
  ftc_status_t st = ftc_comm_recover(comm_->comm, timeout_ms, info);
  if (st == FTC_OK && info->changed) {
    comm_->moved_from = epoch_;
    comm_->moved_lost.clear();
    comm_->moved_joined = info->joined;
    for (int i = 0; i < info->lost; i++) {
      int prev = -1, slot = -1;
      if (ftc_comm_lost(comm_->comm, i, &prev, &slot, nullptr) == FTC_OK) comm_->moved_lost.emplace_back(prev, slot);
    }
  }
  return st;
}

std::vector<std::pair<int, int>> Backend::recover(ftc_epoch_info_t *info, const char *what, int timeout_ms) {
  ftc_status_t st;
  std::vector<std::pair<int, int>> out;
  {
    std::lock_guard<std::mutex> l(comm_->mu);
    st = recover_locked(timeout_ms, info);
    /* Unchanged now, but moved since this group was made (an earlier call
     * recovered): that move is the one this group sees. */
    if (st == FTC_OK && (info->changed || (info->epoch != epoch_ && comm_->moved_from == epoch_))) {
      info->joined = comm_->moved_joined;
      out = comm_->moved_lost;
    }
  }
  if (st != FTC_OK) throw_status(st, *comm_, what);
  return out;
}

c10::intrusive_ptr<c10d::Backend> Backend::shrink(const std::vector<int64_t> &ranks_to_exclude, int shrink_flags,
                                                  const c10::intrusive_ptr<c10d::Backend::Options> &opts_override) {
  /* The coordinator, not the caller, decides who is out: recover to the
   * epoch it announces (the survivors of a failure) and check it excludes
   * exactly the ranks torch was told to. */
  ftc_epoch_info_t info{};
  std::vector<std::pair<int, int>> moved = recover(&info, "shrink (ftc_comm_recover)");
  std::set<int64_t> lost;
  std::ostringstream lost_s;
  for (size_t i = 0; i < moved.size(); i++) {
    lost.insert(moved[i].first);
    lost_s << (i ? ", " : "") << moved[i].first << " (slot " << moved[i].second << ")";
  }
  std::set<int64_t> want(ranks_to_exclude.begin(), ranks_to_exclude.end());
  if (lost != want || info.joined) {
    std::ostringstream m;
    m << "ftcomm: shrink_group excluding ranks [";
    size_t k = 0;
    for (auto r : want) m << (k++ ? ", " : "") << r;
    m << "] but the job's new epoch " << info.epoch << " lost [" << lost_s.str() << "]";
    if (info.joined) m << " and admitted " << info.joined << " joiner(s)";
    m << ": ftcomm's coordinator decides membership; exclude the ranks it lost, which"
         " ftcomm.torch.backend_of(group).recover() returns";
    throw FtcError(FTC_ERR_INVALID_ARGUMENT, m.str(), info.rank, comm_->slot, "shrink");
  }
  auto opts = opts_override ? opts_override : options_->clone();
  {
    std::lock_guard<std::mutex> l(comm_->mu);
    comm_->group_named = false;
  }
  return c10::make_intrusive<Backend>(comm_, info.rank, info.size, opts);
}

#ifdef C10D_BACKEND_HAS_RECONFIGURE
namespace {

/* The slot of an ftcomm handle ("ftcomm:<job>:<slot>") of job; throws
 * ValueError naming what is wrong with it. */
int handle_slot(const std::string &h, const std::string &job) {
  static const std::string kPrefix = "ftcomm:";
  size_t colon = h.rfind(':');
  bool ok = h.compare(0, kPrefix.size(), kPrefix) == 0 && colon != std::string::npos &&
            colon >= kPrefix.size() && colon + 1 < h.size() && colon + 1 + 9 >= h.size() &&
            std::all_of(h.begin() + colon + 1, h.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  TORCH_CHECK_VALUE(ok, "ftcomm: reconfigure: '", h,
                    "' is not an ftcomm handle (\"ftcomm:<job>:<slot>\", from get_reconfigure_handle())");
  std::string hjob = h.substr(kPrefix.size(), colon - kPrefix.size());
  TORCH_CHECK_VALUE(hjob == job, "ftcomm: reconfigure: handle '", h, "' is of job '", hjob,
                    "', this process is in job '", job, "'");
  return std::stoi(h.substr(colon + 1));
}

std::string slot_list(const std::vector<int> &slots) {
  std::ostringstream m;
  m << "[";
  for (size_t i = 0; i < slots.size(); i++) m << (i ? ", " : "") << slots[i];
  m << "]";
  return m.str();
}

}  // namespace

c10d::ReconfigureHandle Backend::get_reconfigure_handle() const {
  return "ftcomm:" + comm_->job + ":" + std::to_string(comm_->slot);
}

c10::intrusive_ptr<c10d::Work> Backend::reconfigure(const c10d::ReconfigureOptions &opts) {
  TORCH_CHECK_VALUE(!comm_->child, "ftcomm: reconfigure of a group made by new_group: reconfigure the default group;"
                    " a group follows the job's epochs itself (make it again to include joiners)");
  std::vector<c10d::ReconfigureHandle> handles;
  std::visit([&](const auto &hs) { handles.assign(hs.begin(), hs.end()); }, opts.handles);
  const bool ordered = std::holds_alternative<std::vector<c10d::ReconfigureHandle>>(opts.handles);
  TORCH_CHECK_VALUE(!handles.empty(), "ftcomm: reconfigure needs the handles of the members (get_reconfigure_handle())");
  std::vector<int> want;
  std::set<int> want_set;
  for (const auto &h : handles) {
    int slot = handle_slot(h, comm_->job);
    TORCH_CHECK_VALUE(want_set.insert(slot).second, "ftcomm: reconfigure: slot ", slot, " is in the handles twice");
    want.push_back(slot);
  }
  TORCH_CHECK_VALUE(want_set.count(comm_->slot), "ftcomm: reconfigure: this process's handle '",
                    get_reconfigure_handle(), "' is not among the handles: a process that the new configuration"
                    " leaves out ends (destroy_process_group, exit), and the coordinator drops it");
  {
    std::lock_guard<std::mutex> l(comm_->mu);
    TORCH_CHECK_VALUE(reconfigure_uuids_.insert(opts.uuid).second, "ftcomm: reconfigure uuid ", opts.uuid,
                      " was already used on this group; pass a fresh one every time");
  }
  const auto timeout = opts.timeout.value_or(std::chrono::duration_cast<std::chrono::milliseconds>(options_->timeout));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left_ms = [&]() {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return std::max(1, to_int_ms(left));
  };
  /* Each round is a step boundary of the job's communicator (a failed epoch
   * recovers first), then an allgather of the members' slots and of whether
   * each one's time is up: every member decides from the same data, so all
   * go round again, succeed or fail together. */
  for (;;) {
    ftc_epoch_info_t info{};
    ftc_status_t st;
    std::vector<int32_t> got;
    {
      std::lock_guard<std::mutex> l(comm_->mu);
      name_for_recorder("ftcomm:reconfigure");
      st = ftc_comm_step(comm_->comm, left_ms(), &info);
      if (st == FTC_ERR_PEER_LOST || st == FTC_ERR_TIMEOUT || st == FTC_ERR_REVOKED || st == FTC_ERR_MISMATCH)
        st = recover_locked(left_ms(), &info);
      if (st == FTC_OK) {
        int32_t mine[2] = {comm_->slot, std::chrono::steady_clock::now() >= deadline};
        got.resize(2 * static_cast<size_t>(info.size));
        st = host_call(*comm_, {{mine, sizeof(mine)}, {got.data(), got.size() * sizeof(int32_t)}},
                       [&](const std::vector<void *> &b) {
                         return ftc_allgather(b[0], b[1], 2, FTC_I32, comm_->comm, left_ms());
                       });
      }
    }
    if (st != FTC_OK) {
      last_error_.store(st);
      throw_status(st, *comm_, "reconfigure");
    }
    follow_epoch(info.rank, info.size);
    epoch_ = info.epoch;
    seq_ = 0;
    std::vector<int> have, extra, missing;
    bool expired = false;
    for (int r = 0; r < info.size; r++) {
      have.push_back(got[2 * r]);
      expired = expired || got[2 * r + 1];
      if (!want_set.count(got[2 * r])) extra.push_back(got[2 * r]);
    }
    std::set<int> have_set(have.begin(), have.end());
    for (int s : want)
      if (!have_set.count(s)) missing.push_back(s);
    std::ostringstream m;
    m << "ftcomm: reconfigure: the job's epoch " << info.epoch << " has the slots " << slot_list(have)
      << " (ranks 0.." << info.size - 1 << ")";
    if (!extra.empty()) {
      m << ", also " << slot_list(extra) << " that the handles leave out: ftcomm's coordinator decides membership;"
        << " a healthy process leaves by ending (destroy_process_group, exit)";
      throw FtcError(FTC_ERR_INVALID_ARGUMENT, m.str(), info.rank, comm_->slot, "reconfigure");
    }
    if (missing.empty()) {
      if (ordered && have != want) {
        m << "; the handles ask for the order " << slot_list(want) << ": ftcomm numbers the ranks itself (survivors"
          << " in their old order, joiners after them); pass the handles as a set, or in that order";
        throw FtcError(FTC_ERR_INVALID_ARGUMENT, m.str(), info.rank, comm_->slot, "reconfigure");
      }
      break;
    }
    if (expired) {
      m << "; the slots " << slot_list(missing) << " in the handles did not join within " << timeout.count()
        << " ms (a process joins when the coordinator admits it: ftcomm-run --replace, a TrainingJob's replacement)";
      throw FtcError(FTC_ERR_TIMEOUT, m.str(), info.rank, comm_->slot, "reconfigure");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10)); /* a joiner on its way: ask again */
  }
  {
    std::lock_guard<std::mutex> l(comm_->mu);
    comm_->group_named = false;
  }
  auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  fut->markCompleted(c10::IValue(std::vector<at::Tensor>()));
  return c10d::Work::create_from_future(fut);
}
#endif

void Backend::abort() {
  if (comm_ && comm_->comm) ftc_comm_abort(comm_->comm);
}

c10d::ErrorType Backend::getError() {
  ftc_status_t st = FTC_OK;
  if (comm_ && comm_->comm) ftc_comm_get_async_error(comm_->comm, &st);
  if (st == FTC_OK) st = static_cast<ftc_status_t>(last_error_.load());
  switch (st) {
    case FTC_OK: return c10d::ErrorType::SUCCESS;
    case FTC_ERR_TIMEOUT: return c10d::ErrorType::TIMEOUT;
    case FTC_ERR_PEER_LOST:
    case FTC_ERR_REVOKED: return c10d::ErrorType::REMOTE_ERROR;
    default: return c10d::ErrorType::COMM_ERROR;
  }
}

std::chrono::milliseconds Backend::timeout_of(std::chrono::milliseconds op) const {
  auto t = op == c10d::kUnsetTimeout ? options_->timeout : op;
  if (comm_->timeout_ms > 0 && t.count() > comm_->timeout_ms) t = std::chrono::milliseconds(comm_->timeout_ms);
  return t;
}

void Backend::completion_loop() {
  c10::setThreadName("ftc-torch-done");
  auto &d = *done_;
  std::unique_lock<std::mutex> l(d.mu);
  for (;;) {
    if (!d.ready.empty()) {
      auto w = std::move(d.ready.front());
      d.ready.pop_front();
      l.unlock();
      w->settle();
      w.reset();
      l.lock();
      continue;
    }
    /* Works past the group's timeout: fail them as libftcomm fails a wait
     * that runs out (the epoch too); their requests then complete. */
    auto now = std::chrono::steady_clock::now();
    auto next = std::chrono::steady_clock::time_point::max();
    std::vector<c10::intrusive_ptr<Work>> expired;
    for (size_t i = 0; i < d.timed.size();) {
      auto &w = d.timed[i];
      if (w->landed()) {
        d.timed[i] = std::move(d.timed.back());
        d.timed.pop_back();
      } else if (w->deadline_ <= now) {
        expired.push_back(std::move(w));
        d.timed[i] = std::move(d.timed.back());
        d.timed.pop_back();
      } else {
        next = std::min(next, w->deadline_);
        i++;
      }
    }
    if (!expired.empty()) {
      l.unlock();
      for (auto &w : expired) {
        for (auto *r : w->reqs_) {
          ftc_status_t st = ftc_wait(r, 0);
          if (st == FTC_ERR_TIMEOUT) {
            d.last_error.store(st);
            std::lock_guard<std::mutex> wl(w->mutex_);
            if (!w->timeout_err_) w->timeout_err_ = error_of(st, *comm_, w->collective_);
          }
        }
      }
      expired.clear();
      l.lock();
      continue;
    }
    if (d.stopping && d.in_flight == 0) return; /* every started op is done */
    if (next == std::chrono::steady_clock::time_point::max())
      d.cv.wait(l);
    else
      d.cv.wait_until(l, next);
  }
}

/* ---- collectives ---- */

c10::intrusive_ptr<c10d::Work> Backend::allreduce(std::vector<at::Tensor> &tensors, const c10d::AllreduceOptions &opts) {
  check_one(tensors, "all_reduce");
  at::Tensor &t = tensors[0];
  ftc_dtype_t dt = reduce_dtype(t, opts.reduceOp.op_, "all_reduce");
  ftc_op_t op = reduce_op(opts.reduceOp, "all_reduce");
  premul_(t, opts.reduceOp);
  Launch L(*this, c10d::OpType::ALLREDUCE, "ftcomm:all_reduce", "all_reduce", opts.asyncOp, opts.timeout, tensors,
           tensors);
  at::Tensor b = L.out(t, true);
  void *p = b.data_ptr();
  size_t n = b.numel();
  ftc_comm_t *c = L.comm();
  L.run([&](int ms) { return ftc_allreduce(p, p, n, dt, op, c, ms); },
        [&](ftc_request_t **r) { return ftc_iallreduce(p, p, n, dt, op, c, r); });
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                                            const c10d::AllreduceCoalescedOptions &opts) {
  TORCH_CHECK_VALUE(!tensors.empty(), "ftcomm: all_reduce_coalesced of no tensors");
  for (auto &t : tensors) {
    check_tensor(t, "all_reduce_coalesced");
    check_same(tensors[0], t, "all_reduce_coalesced");
  }
  ftc_dtype_t dt = reduce_dtype(tensors[0], opts.reduceOp.op_, "all_reduce_coalesced");
  ftc_op_t op = reduce_op(opts.reduceOp, "all_reduce_coalesced");
  Launch L(*this, c10d::OpType::ALLREDUCE_COALESCED, "ftcomm:all_reduce_coalesced", "all_reduce_coalesced",
           opts.asyncOp, opts.timeout, tensors, tensors);
  /* One allreduce of the tensors packed end to end. */
  std::vector<at::Tensor> flat;
  for (auto &t : tensors) flat.push_back(t.reshape({-1}).to(L.device()));
  at::Tensor packed = at::cat(flat);
  premul_(packed, opts.reduceOp);
  L.in(packed);
  void *p = packed.data_ptr();
  size_t n = packed.numel();
  ftc_comm_t *c = L.comm();
  L.run([&](int ms) { return ftc_allreduce(p, p, n, dt, op, c, ms); },
        [&](ftc_request_t **r) { return ftc_iallreduce(p, p, n, dt, op, c, r); });
  std::vector<at::Tensor> outs = tensors;
  L.then([outs, packed]() {
    int64_t off = 0;
    for (auto &t : outs) {
      const_cast<at::Tensor &>(t).copy_(packed.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  });
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::broadcast(std::vector<at::Tensor> &tensors, const c10d::BroadcastOptions &opts) {
  check_one(tensors, "broadcast");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < getSize(), "ftcomm: broadcast root ", opts.rootRank,
                    " is not a rank of this group of ", getSize());
  Launch L(*this, c10d::OpType::BROADCAST, "ftcomm:broadcast", "broadcast", opts.asyncOp, opts.timeout, tensors,
           tensors);
  at::Tensor b = L.out(tensors[0], getRank() == opts.rootRank);
  void *p = b.data_ptr();
  size_t n = b.nbytes();
  int root = static_cast<int>(opts.rootRank);
  ftc_comm_t *c = L.comm();
  L.run([&](int ms) { return ftc_broadcast(p, n, FTC_U8, root, c, ms); },
        [&](ftc_request_t **r) { return ftc_ibroadcast(p, n, FTC_U8, root, c, r); });
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::reduce(std::vector<at::Tensor> &tensors, const c10d::ReduceOptions &opts) {
  check_one(tensors, "reduce");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < getSize(), "ftcomm: reduce root ", opts.rootRank,
                    " is not a rank of this group of ", getSize());
  ftc_dtype_t dt = reduce_dtype(tensors[0], opts.reduceOp.op_, "reduce");
  ftc_op_t op = reduce_op(opts.reduceOp, "reduce");
  Launch L(*this, c10d::OpType::REDUCE, "ftcomm:reduce", "reduce", opts.asyncOp, opts.timeout, tensors, tensors);
  int root = static_cast<int>(opts.rootRank);
  bool is_root = getRank() == root;
  if (is_root) premul_(tensors[0], opts.reduceOp);
  at::Tensor b = is_root ? L.out(tensors[0], true) : L.in(premul(tensors[0], opts.reduceOp));
  void *p = b.data_ptr();
  void *rp = is_root ? p : nullptr;
  size_t n = b.numel();
  ftc_comm_t *c = L.comm();
  L.run([&](int ms) { return ftc_reduce(p, rp, n, dt, op, root, c, ms); },
        [&](ftc_request_t **r) { return ftc_ireduce(p, rp, n, dt, op, root, c, r); });
  return L.finish();
}

namespace {

at::Tensor bytes_of(const at::Tensor &t) { return t.reshape({-1}).view(at::kByte); }

}  // namespace

c10::intrusive_ptr<c10d::Work> Backend::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                                  std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &opts) {
  check_one(inputs, "all_gather");
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(), "ftcomm: all_gather needs ",
                    getSize(), " output tensors (one per rank), got ", outputs.empty() ? 0 : outputs[0].size());
  const at::Tensor &in = inputs[0];
  auto &outs = outputs[0];
  bool even = true;
  for (auto &o : outs) {
    check_tensor(o, "all_gather");
    check_same(o, in, "all_gather");
    if (o.numel() != in.numel()) even = false;
  }
  TORCH_CHECK_VALUE(outs[getRank()].numel() == in.numel(), "ftcomm: all_gather: this rank's output tensor has ",
                    outs[getRank()].numel(), " elements, its input ", in.numel());
  Launch L(*this, c10d::OpType::ALLGATHER, "ftcomm:all_gather", "all_gather", opts.asyncOp, opts.timeout, outs, inputs);
  if (even) {
    at::Tensor src = L.in(in);
    at::Tensor all = L.scratch(in, in.numel() * getSize());
    const void *sp = src.data_ptr();
    void *rp = all.data_ptr();
    size_t n = src.nbytes();
    ftc_comm_t *c = L.comm();
    L.run([&](int ms) { return ftc_allgather(sp, rp, n, FTC_U8, c, ms); },
          [&](ftc_request_t **r) { return ftc_iallgather(sp, rp, n, FTC_U8, c, r); });
    std::vector<at::Tensor> os = outs;
    L.then([os, all]() {
      int64_t off = 0;
      for (auto &o : os) {
        const_cast<at::Tensor &>(o).copy_(all.narrow(0, off, o.numel()).view(o.sizes()));
        off += o.numel();
      }
    });
  } else {
    /* Unequal tensors: ftc_allgatherv of their bytes into one buffer. */
    at::Tensor src = bytes_of(L.in(in));
    std::vector<size_t> counts;
    int64_t total = 0;
    for (auto &o : outs) {
      counts.push_back(o.nbytes());
      total += o.nbytes();
    }
    at::Tensor all = L.scratch(src, total);
    const void *sp = src.data_ptr();
    void *rp = all.data_ptr();
    const size_t *cp = counts.data();
    ftc_comm_t *c = L.comm();
    L.run([&](int ms) { return ftc_allgatherv(sp, rp, cp, nullptr, FTC_U8, c, ms); },
          [&](ftc_request_t **r) { return ftc_iallgatherv(sp, rp, cp, nullptr, FTC_U8, c, r); });
    std::vector<at::Tensor> os = outs;
    L.then([os, all]() {
      int64_t off = 0;
      for (auto &o : os) {
        const_cast<at::Tensor &>(o).copy_(all.narrow(0, off, o.nbytes()).view(o.scalar_type()).view(o.sizes()));
        off += o.nbytes();
      }
    });
  }
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::all_gather_single(at::Tensor &output, at::Tensor &input,
                                                          const c10d::AllgatherOptions &opts) {
  check_tensor(output, "all_gather_into_tensor");
  check_tensor(input, "all_gather_into_tensor");
  check_same(output, input, "all_gather_into_tensor");
  TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(), "ftcomm: all_gather_into_tensor: the output has ",
                    output.numel(), " elements; it needs the input's ", input.numel(), " times the group size ",
                    getSize());
  std::vector<at::Tensor> outs{output}, ins{input};
  Launch L(*this, c10d::OpType::_ALLGATHER_BASE, "ftcomm:all_gather_into_tensor", "all_gather_into_tensor",
           opts.asyncOp, opts.timeout, outs, ins);
  at::Tensor o = L.out(output, false);
  at::Tensor i = L.in(input);
  const void *sp = i.data_ptr();
  void *rp = o.data_ptr();
  size_t n = i.nbytes();
  ftc_comm_t *c = L.comm();
  L.run([&](int ms) { return ftc_allgather(sp, rp, n, FTC_U8, c, ms); },
        [&](ftc_request_t **r) { return ftc_iallgather(sp, rp, n, FTC_U8, c, r); });
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::allgather_coalesced(std::vector<std::vector<at::Tensor>> &outputs,
                                                            std::vector<at::Tensor> &inputs,
                                                            const c10d::AllgatherOptions &opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "ftcomm: all_gather_coalesced: ", outputs.size(),
                    " output lists for ", inputs.size(), " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (size_t k = 0; k < inputs.size(); k++) {
    std::vector<std::vector<at::Tensor>> o{outputs[k]};
    std::vector<at::Tensor> i{inputs[k]};
    works.push_back(allgather(o, i, opts));
  }
  /* Works complete in order: the last one's completion is the whole op's.
   * An earlier failure fails the epoch, hence the last one too. */
  return works.empty() ? barrier(c10d::BarrierOptions()) : works.back();
}

c10::intrusive_ptr<c10d::Work> Backend::all_gather_single_coalesced(std::vector<at::Tensor> &outputs,
                                                                    std::vector<at::Tensor> &inputs,
                                                                    const c10d::AllgatherOptions &opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size() && !inputs.empty(), "ftcomm: all_gather_into_tensor_coalesced: ",
                    outputs.size(), " outputs for ", inputs.size(), " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t k = 0; k < inputs.size(); k++) last = all_gather_single(outputs[k], inputs[k], opts);
  return last;
}

c10::intrusive_ptr<c10d::Work> Backend::gather(std::vector<std::vector<at::Tensor>> &outputs,
                                               std::vector<at::Tensor> &inputs, const c10d::GatherOptions &opts) {
  check_one(inputs, "gather");
  int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK_VALUE(root >= 0 && root < getSize(), "ftcomm: gather root ", root, " is not a rank of this group of ",
                    getSize());
  bool is_root = getRank() == root;
  const at::Tensor &in = inputs[0];
  if (is_root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                      "ftcomm: gather needs ", getSize(), " output tensors on the root");
    for (auto &o : outputs[0]) {
      check_tensor(o, "gather");
      check_same(o, in, "gather");
      TORCH_CHECK_VALUE(o.numel() == in.numel(), "ftcomm: gather: an output tensor of ", o.numel(),
                        " elements for inputs of ", in.numel(), " (every rank sends as many)");
    }
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), "ftcomm: gather takes output tensors only on the root");
  }
  std::vector<at::Tensor> outs = is_root ? outputs[0] : std::vector<at::Tensor>{};
  Launch L(*this, c10d::OpType::GATHER, "ftcomm:gather", "gather", opts.asyncOp, opts.timeout, outs, inputs);
  at::Tensor src = bytes_of(L.in(in));
  at::Tensor all = is_root ? L.scratch(src, src.numel() * getSize()) : at::Tensor();
  const void *sp = src.data_ptr();
  void *rp = is_root ? all.data_ptr() : nullptr;
  size_t n = src.numel();
  ftc_comm_t *c = L.comm();
  L.run([&](int ms) { return ftc_gather(sp, rp, n, FTC_U8, root, c, ms); },
        [&](ftc_request_t **r) { return ftc_igather(sp, rp, n, FTC_U8, root, c, r); });
  if (is_root) {
    L.then([outs, all, n]() {
      for (size_t j = 0; j < outs.size(); j++)
        const_cast<at::Tensor &>(outs[j]).copy_(
            all.narrow(0, j * n, n).view(outs[j].scalar_type()).view(outs[j].sizes()));
    });
  }
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::gather_single(at::Tensor &output, at::Tensor &input,
                                                      const c10d::GatherOptions &opts) {
  check_tensor(input, "gather_into_tensor");
  int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK_VALUE(root >= 0 && root < getSize(), "ftcomm: gather_into_tensor root ", root,
                    " is not a rank of this group of ", getSize());
  bool is_root = getRank() == root;
  if (is_root) {
    check_tensor(output, "gather_into_tensor");
    check_same(output, input, "gather_into_tensor");
    TORCH_CHECK_VALUE(output.numel() == input.numel() * getSize(), "ftcomm: gather_into_tensor: the output has ",
                      output.numel(), " elements; it needs the input's ", input.numel(), " times the group size ",
                      getSize());
  }
  std::vector<at::Tensor> outs = is_root ? std::vector<at::Tensor>{output} : std::vector<at::Tensor>{};
  std::vector<at::Tensor> ins{input};
  Launch L(*this, c10d::OpType::GATHER, "ftcomm:gather_into_tensor", "gather_into_tensor", opts.asyncOp,
           opts.timeout, outs, ins);
  at::Tensor src = L.in(input);
  at::Tensor o = is_root ? L.out(output, false) : at::Tensor();
  const void *sp = src.data_ptr();
  void *rp = is_root ? o.data_ptr() : nullptr;
  size_t n = src.nbytes();
  ftc_comm_t *c = L.comm();
  L.run([&](int ms) { return ftc_gather(sp, rp, n, FTC_U8, root, c, ms); },
        [&](ftc_request_t **r) { return ftc_igather(sp, rp, n, FTC_U8, root, c, r); });
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ScatterOptions &opts) {
  check_one(outputs, "scatter");
  int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK_VALUE(root >= 0 && root < getSize(), "ftcomm: scatter root ", root, " is not a rank of this group of ",
                    getSize());
  bool is_root = getRank() == root;
  at::Tensor &out = outputs[0];
  if (is_root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                      "ftcomm: scatter needs ", getSize(), " input tensors on the root");
    for (auto &i : inputs[0]) {
      check_tensor(i, "scatter");
      check_same(out, i, "scatter");
      TORCH_CHECK_VALUE(i.numel() == out.numel(), "ftcomm: scatter: an input tensor of ", i.numel(),
                        " elements for outputs of ", out.numel(), " (every rank receives as many)");
    }
  }
  std::vector<at::Tensor> ins = is_root ? inputs[0] : std::vector<at::Tensor>{};
  Launch L(*this, c10d::OpType::SCATTER, "ftcomm:scatter", "scatter", opts.asyncOp, opts.timeout, outputs, ins);
  at::Tensor packed;
  if (is_root) {
    std::vector<at::Tensor> flat;
    for (auto &i : ins) flat.push_back(i.reshape({-1}).to(L.device()).view(at::kByte));
    packed = at::cat(flat);
    L.in(packed);
  }
  at::Tensor o = L.out(out, false);
  const void *sp = is_root ? packed.data_ptr() : nullptr;
  void *rp = o.data_ptr();
  size_t n = o.nbytes();
  ftc_comm_t *c = L.comm();
  L.run([&](int ms) { return ftc_scatter(sp, rp, n, FTC_U8, root, c, ms); },
        [&](ftc_request_t **r) { return ftc_iscatter(sp, rp, n, FTC_U8, root, c, r); });
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter(std::vector<at::Tensor> &outputs,
                                                       std::vector<std::vector<at::Tensor>> &inputs,
                                                       const c10d::ReduceScatterOptions &opts) {
  check_one(outputs, "reduce_scatter");
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), "ftcomm: reduce_scatter needs ",
                    getSize(), " input tensors (one per rank)");
  at::Tensor &out = outputs[0];
  auto &ins = inputs[0];
  bool even = true;
  for (auto &i : ins) {
    check_tensor(i, "reduce_scatter");
    check_same(out, i, "reduce_scatter");
    if (i.numel() != out.numel()) even = false;
  }
  TORCH_CHECK_VALUE(ins[getRank()].numel() == out.numel(), "ftcomm: reduce_scatter: the output has ", out.numel(),
                    " elements, this rank's input block ", ins[getRank()].numel());
  ftc_dtype_t dt = reduce_dtype(out, opts.reduceOp.op_, "reduce_scatter");
  ftc_op_t op = reduce_op(opts.reduceOp, "reduce_scatter");
  Launch L(*this, c10d::OpType::REDUCE_SCATTER, "ftcomm:reduce_scatter", "reduce_scatter", opts.asyncOp, opts.timeout,
           outputs, ins);
  ftc_comm_t *c = L.comm();
  if (even) {
    std::vector<at::Tensor> flat;
    for (auto &i : ins) flat.push_back(i.reshape({-1}).to(L.device()));
    at::Tensor packed = at::cat(flat);
    premul_(packed, opts.reduceOp);
    L.in(packed);
    at::Tensor o = L.out(out, false);
    const void *sp = packed.data_ptr();
    void *rp = o.data_ptr();
    size_t n = o.numel();
    L.run([&](int ms) { return ftc_reduce_scatter(sp, rp, n, dt, op, c, ms); },
          [&](ftc_request_t **r) { return ftc_ireduce_scatter(sp, rp, n, dt, op, c, r); });
  } else {
    /* Unequal blocks: one reduce per block, to its rank. */
    for (int j = 0; j < getSize(); j++) {
      at::Tensor src = L.in(premul(ins[j], opts.reduceOp));
      if (j == getRank()) {
        at::Tensor o = L.out(out, false);
        const void *sp = src.data_ptr();
        void *rp = o.data_ptr();
        size_t n = o.numel();
        L.start([&](ftc_request_t **r) { return ftc_ireduce(sp, rp, n, dt, op, j, c, r); });
      } else {
        const void *sp = src.data_ptr();
        size_t n = src.numel();
        L.start([&](ftc_request_t **r) { return ftc_ireduce(sp, nullptr, n, dt, op, j, c, r); });
      }
    }
  }
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_single(at::Tensor &output, at::Tensor &input,
                                                              const c10d::ReduceScatterOptions &opts) {
  check_tensor(output, "reduce_scatter_tensor");
  check_tensor(input, "reduce_scatter_tensor");
  check_same(output, input, "reduce_scatter_tensor");
  TORCH_CHECK_VALUE(input.numel() == output.numel() * getSize(), "ftcomm: reduce_scatter_tensor: the input has ",
                    input.numel(), " elements; it needs the output's ", output.numel(), " times the group size ",
                    getSize());
  ftc_dtype_t dt = reduce_dtype(output, opts.reduceOp.op_, "reduce_scatter_tensor");
  ftc_op_t op = reduce_op(opts.reduceOp, "reduce_scatter_tensor");
  std::vector<at::Tensor> outs{output}, ins{input};
  Launch L(*this, c10d::OpType::_REDUCE_SCATTER_BASE, "ftcomm:reduce_scatter_tensor", "reduce_scatter_tensor",
           opts.asyncOp, opts.timeout, outs, ins);
  at::Tensor i = L.in(premul(input, opts.reduceOp));
  at::Tensor o = L.out(output, false);
  const void *sp = i.data_ptr();
  void *rp = o.data_ptr();
  size_t n = o.numel();
  ftc_comm_t *c = L.comm();
  L.run([&](int ms) { return ftc_reduce_scatter(sp, rp, n, dt, op, c, ms); },
        [&](ftc_request_t **r) { return ftc_ireduce_scatter(sp, rp, n, dt, op, c, r); });
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::reduce_scatter_single_coalesced(std::vector<at::Tensor> &outputs,
                                                                        std::vector<at::Tensor> &inputs,
                                                                        const c10d::ReduceScatterOptions &opts) {
  TORCH_CHECK_VALUE(outputs.size() == inputs.size() && !inputs.empty(),
                    "ftcomm: reduce_scatter_tensor_coalesced: ", outputs.size(), " outputs for ", inputs.size(),
                    " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t k = 0; k < inputs.size(); k++) last = reduce_scatter_single(outputs[k], inputs[k], opts);
  return last;
}

c10::intrusive_ptr<c10d::Work> Backend::all_to_all_single(at::Tensor &output, at::Tensor &input,
                                                          std::vector<int64_t> &outputSplits,
                                                          std::vector<int64_t> &inputSplits,
                                                          const c10d::AllToAllOptions &opts) {
  check_tensor(output, "all_to_all_single");
  check_tensor(input, "all_to_all_single");
  check_same(output, input, "all_to_all_single");
  int size = getSize();
  auto splits = [&](std::vector<int64_t> &s, const at::Tensor &t, const char *which) {
    std::vector<int64_t> rows;
    int64_t dim0 = t.dim() ? t.size(0) : 1;
    if (s.empty()) {
      TORCH_CHECK_VALUE(dim0 % size == 0, "ftcomm: all_to_all_single: the ", which, " has ", dim0,
                        " rows, not a multiple of the group size ", size, "; pass split sizes");
      rows.assign(size, dim0 / size);
    } else {
      TORCH_CHECK_VALUE(static_cast<int>(s.size()) == size, "ftcomm: all_to_all_single: ", s.size(), " ", which,
                        " split sizes for a group of ", size);
      int64_t sum = 0;
      for (auto v : s) {
        TORCH_CHECK_VALUE(v >= 0, "ftcomm: all_to_all_single: a negative ", which, " split size ", v);
        sum += v;
      }
      TORCH_CHECK_VALUE(sum == dim0, "ftcomm: all_to_all_single: the ", which, " split sizes add up to ", sum,
                        " rows, the ", which, " has ", dim0);
      rows = s;
    }
    return rows;
  };
  std::vector<int64_t> orows = splits(outputSplits, output, "output"), irows = splits(inputSplits, input, "input");
  int64_t orow = output.dim() && output.size(0) ? output.numel() / output.size(0) : output.numel();
  int64_t irow = input.dim() && input.size(0) ? input.numel() / input.size(0) : input.numel();
  std::vector<at::Tensor> outs{output}, ins{input};
  Launch L(*this, c10d::OpType::ALLTOALL_BASE, "ftcomm:all_to_all_single", "all_to_all_single", opts.asyncOp,
           opts.timeout, outs, ins);
  at::Tensor i = L.in(input).reshape({-1});
  at::Tensor o = L.out(output, false).reshape({-1});
  ftc_comm_t *c = L.comm();
  bool even = std::all_of(irows.begin(), irows.end(), [&](int64_t v) { return v == irows[0]; }) &&
              std::all_of(orows.begin(), orows.end(), [&](int64_t v) { return v * orow == irows[0] * irow; });
  if (even) {
    const void *sp = i.data_ptr();
    void *rp = o.data_ptr();
    size_t n = static_cast<size_t>(irows[0] * irow) * i.element_size();
    L.run([&](int ms) { return ftc_alltoall(sp, rp, n, FTC_U8, c, ms); },
          [&](ftc_request_t **r) { return ftc_ialltoall(sp, rp, n, FTC_U8, c, r); });
  } else {
    /* Uneven splits: ftc_alltoallv, in bytes. */
    TORCH_CHECK_VALUE(irows[getRank()] * irow == orows[getRank()] * orow, "ftcomm: all_to_all_single: this rank sends ",
                      irows[getRank()], " rows to itself but expects ", orows[getRank()]);
    std::vector<size_t> sc, sd, rc, rd;
    size_t ioff = 0, ooff = 0, es = i.element_size();
    for (int j = 0; j < size; j++) {
      sc.push_back(irows[j] * irow * es);
      sd.push_back(ioff);
      rc.push_back(orows[j] * orow * es);
      rd.push_back(ooff);
      ioff += sc.back();
      ooff += rc.back();
    }
    const void *sp = i.data_ptr();
    void *rp = o.data_ptr();
    L.run([&](int ms) { return ftc_alltoallv(sp, sc.data(), sd.data(), rp, rc.data(), rd.data(), FTC_U8, c, ms); },
          [&](ftc_request_t **r) {
            return ftc_ialltoallv(sp, sc.data(), sd.data(), rp, rc.data(), rd.data(), FTC_U8, c, r);
          });
  }
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::alltoall(std::vector<at::Tensor> &outputs, std::vector<at::Tensor> &inputs,
                                                 const c10d::AllToAllOptions &opts) {
  int size = getSize();
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == size && static_cast<int>(inputs.size()) == size,
                    "ftcomm: all_to_all needs ", size, " input and output tensors, got ", inputs.size(), " and ",
                    outputs.size());
  for (int j = 0; j < size; j++) {
    check_tensor(outputs[j], "all_to_all");
    check_tensor(inputs[j], "all_to_all");
    check_same(outputs[j], inputs[j], "all_to_all");
  }
  TORCH_CHECK_VALUE(outputs[getRank()].numel() == inputs[getRank()].numel(), "ftcomm: all_to_all: this rank sends ",
                    inputs[getRank()].numel(), " elements to itself but expects ", outputs[getRank()].numel());
  Launch L(*this, c10d::OpType::ALLTOALL, "ftcomm:all_to_all", "all_to_all", opts.asyncOp, opts.timeout, outputs,
           inputs);
  /* The tensors packed end to end, one ftc_alltoallv of their bytes. */
  std::vector<at::Tensor> flat;
  std::vector<size_t> sc, rc;
  int64_t rtotal = 0;
  for (int j = 0; j < size; j++) {
    flat.push_back(inputs[j].reshape({-1}).to(L.device()).view(at::kByte));
    sc.push_back(inputs[j].nbytes());
    rc.push_back(outputs[j].nbytes());
    rtotal += outputs[j].nbytes();
  }
  at::Tensor packed = at::cat(flat);
  L.in(packed);
  at::Tensor all = L.scratch(packed, rtotal);
  const void *sp = packed.data_ptr();
  void *rp = all.data_ptr();
  ftc_comm_t *c = L.comm();
  L.run([&](int ms) { return ftc_alltoallv(sp, sc.data(), nullptr, rp, rc.data(), nullptr, FTC_U8, c, ms); },
        [&](ftc_request_t **r) { return ftc_ialltoallv(sp, sc.data(), nullptr, rp, rc.data(), nullptr, FTC_U8, c, r); });
  std::vector<at::Tensor> os = outputs;
  L.then([os, all]() {
    int64_t off = 0;
    for (auto &o : os) {
      const_cast<at::Tensor &>(o).copy_(all.narrow(0, off, o.nbytes()).view(o.scalar_type()).view(o.sizes()));
      off += o.nbytes();
    }
  });
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::send(std::vector<at::Tensor> &tensors, int dst, int tag) {
  check_one(tensors, "send");
  (void)tag; /* one in-order channel per peer and direction (docs/pytorch.md) */
  TORCH_CHECK_VALUE(dst >= 0 && dst < getSize() && dst != getRank(), "ftcomm: send to rank ", dst,
                    ": the peer must be another rank of this group of ", getSize());
  Launch L(*this, c10d::OpType::SEND, "ftcomm:send", "send", true, c10d::kUnsetTimeout, {}, tensors);
  at::Tensor b = L.in(tensors[0]);
  const void *p = b.data_ptr();
  size_t n = b.nbytes();
  ftc_comm_t *c = L.comm();
  L.start([&](ftc_request_t **r) { return ftc_isend(p, n, FTC_U8, dst, c, r); });
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::recv(std::vector<at::Tensor> &tensors, int src, int tag) {
  check_one(tensors, "recv");
  (void)tag;
  TORCH_CHECK_VALUE(src >= 0 && src < getSize() && src != getRank(), "ftcomm: recv from rank ", src,
                    ": the peer must be another rank of this group of ", getSize(),
                    " (receiving from any source is not supported)");
  Launch L(*this, c10d::OpType::RECV, "ftcomm:recv", "recv", true, c10d::kUnsetTimeout, tensors, std::nullopt);
  at::Tensor b = L.out(tensors[0], false);
  void *p = b.data_ptr();
  size_t n = b.nbytes();
  ftc_comm_t *c = L.comm();
  L.start([&](ftc_request_t **r) { return ftc_irecv(p, n, FTC_U8, src, c, r); });
  return L.finish();
}

c10::intrusive_ptr<c10d::Work> Backend::barrier(const c10d::BarrierOptions &opts) {
  Launch L(*this, c10d::OpType::BARRIER, "ftcomm:barrier", "barrier", opts.asyncOp, opts.timeout, {}, std::nullopt);
  ftc_comm_t *c = L.comm();
  L.run([&](int ms) { return ftc_barrier(c, ms); }, [&](ftc_request_t **r) { return ftc_ibarrier(c, r); });
  return L.finish();
}

}  // namespace ftcomm
