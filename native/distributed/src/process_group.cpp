// The c10d backend "infini": the device engine where it serves a call, else
// the CPU engine through host memory (see backend.h for the rules).
#include "torch_infini/distributed/process_group.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

#include "completion_thread.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini::distributed {
namespace {

std::atomic<bool> g_force_staging{false};

// What one call hands the CPU engine and what it owes device memory
// afterwards. Shared by the Work and the completion thread's task: whichever
// sees the collective finish first copies staged outputs back, once.
struct Completion {
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;  // (infini, host)
  std::vector<at::Tensor> result;  // what Work::result() and the future give
  std::vector<at::Tensor> keep;    // infini and host tensors held until done
  std::once_flag once;

  void finish() {
    std::call_once(once, [this] {
      for (auto& [device, host] : copy_back) device.copy_(host);
      copy_back.clear();
      keep.clear();
    });
  }
};

// Builds the CPU-side tensors of one call on one infini device.
class HostSide {
 public:
  HostSide(const char* op, std::shared_ptr<Completion> done)
      : op_(op), done_(std::move(done)), staged_(g_force_staging.load()) {}

  // Checks a tensor and fixes the call's device from the first one.
  void check(const at::Tensor& t) {
    TORCH_CHECK_VALUE(t.defined(), "ProcessGroup backend 'infini': ", op_,
                      " got an undefined tensor");
    TORCH_CHECK_VALUE(t.device().type() == c10::DeviceType::PrivateUse1,
                      "ProcessGroup backend 'infini': ", op_,
                      " expects infini tensors, got a tensor on ", t.device(),
                      ". CPU tensors need a CPU backend in the group, e.g. "
                      "init_process_group(backend=\"cpu:gloo,infini:infini\")");
    TORCH_CHECK_VALUE(t.layout() == c10::kStrided, "ProcessGroup backend 'infini': ", op_,
                      " supports strided tensors, got layout ", t.layout());
    if (!device_) {
      device_ = t.device();
      // Inputs are read by the engine from the CPU: wait for the producers
      // enqueued on the current stream of this device.
      runtime::selectedRuntime().synchronizeStream(currentNativeStreamUnchecked(device_->index()));
      if (!runtime::selectedRuntime().capabilities().host_addressable) staged_ = true;
    } else {
      TORCH_CHECK_VALUE(t.device() == *device_, "ProcessGroup backend 'infini': ", op_,
                        " got tensors on ", *device_, " and ", t.device(),
                        "; one process drives one device per call");
    }
  }

  // Read by the engine.
  at::Tensor in(const at::Tensor& t) { return map(t, /*read=*/true, /*write=*/false); }
  // Written by the engine (every element).
  at::Tensor out(const at::Tensor& t) { return map(t, /*read=*/false, /*write=*/true); }
  // Read and written.
  at::Tensor inout(const at::Tensor& t) { return map(t, /*read=*/true, /*write=*/true); }

  std::vector<at::Tensor> in(const std::vector<at::Tensor>& ts) { return mapAll(ts, true, false); }
  std::vector<at::Tensor> out(const std::vector<at::Tensor>& ts) { return mapAll(ts, false, true); }
  std::vector<at::Tensor> inout(const std::vector<at::Tensor>& ts) {
    return mapAll(ts, true, true);
  }
  std::vector<std::vector<at::Tensor>> in(const std::vector<std::vector<at::Tensor>>& ls) {
    return mapLists(ls, true, false);
  }
  std::vector<std::vector<at::Tensor>> out(const std::vector<std::vector<at::Tensor>>& ls) {
    return mapLists(ls, false, true);
  }

  std::optional<c10::Device> device() const { return device_; }

 private:
  std::vector<at::Tensor> mapAll(const std::vector<at::Tensor>& ts, bool read, bool write) {
    std::vector<at::Tensor> r;
    r.reserve(ts.size());
    for (const auto& t : ts) r.push_back(map(t, read, write));
    return r;
  }

  std::vector<std::vector<at::Tensor>> mapLists(const std::vector<std::vector<at::Tensor>>& ls,
                                                bool read, bool write) {
    std::vector<std::vector<at::Tensor>> r;
    r.reserve(ls.size());
    for (const auto& l : ls) r.push_back(mapAll(l, read, write));
    return r;
  }

  at::Tensor map(const at::Tensor& t, bool read, bool write) {
    check(t);
    done_->keep.push_back(t);
    at::Tensor host;
    if (t.numel() == 0) {
      host = at::empty_like(t, t.options().device(c10::kCPU));
    } else if (!staged_) {
      // A CPU tensor over the same bytes; its deleter holds the storage.
      host = at::from_blob(
          t.data_ptr(), t.sizes(), t.strides(), [storage = t.storage()](void*) {},
          t.options().device(c10::kCPU));
    } else {
      const bool pinned = runtime::selectedRuntime().capabilities().pinned_host;
      host = at::empty_like(t, t.options().device(c10::kCPU).pinned_memory(pinned));
      if (read) host.copy_(t);
      if (write) done_->copy_back.emplace_back(t, host);
    }
    done_->keep.push_back(host);
    return host;
  }

  const char* op_;
  std::shared_ptr<Completion> done_;
  bool staged_;
  std::optional<c10::Device> device_;
};

// The Work of one call: the engine's Work plus the copy back of staged
// outputs, and a future on the infini device whose value is the infini
// tensors the call wrote.
class HostMemoryWork final : public c10d::Work {
 public:
  HostMemoryWork(c10::intrusive_ptr<c10d::Work> engine, std::shared_ptr<Completion> done,
                 std::optional<c10::Device> device)
      : engine_(std::move(engine)), done_(std::move(done)) {
    // Not every engine Work has a future (gloo's send/recv and reduce_scatter
    // do not); then neither has this one, as on the CPU.
    try {
      engine_->getFuture();
    } catch (const c10::Error&) {
      return;
    }
    std::vector<c10::Device> devices;
    if (device) devices.push_back(*device);
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), devices);
    // Completed on the completion thread, not in a callback on the engine's
    // future: see completion_thread.h.
    CompletionThread::get().post([engine = engine_, done = done_, future = future_] {
      try {
        engine->wait();
        done->finish();
        future->markCompleted(c10::IValue(done->result));
      } catch (...) {
        future->setError(std::current_exception());
      }
    });
  }

  bool wait(std::chrono::milliseconds timeout) override {
    engine_->wait(timeout);
    done_->finish();
    return true;
  }
  bool isCompleted() override {
    if (!engine_->isCompleted()) return false;
    if (!engine_->exception()) done_->finish();
    return true;
  }
  bool isSuccess() const override { return engine_->isSuccess(); }
  std::exception_ptr exception() const override { return engine_->exception(); }
  int sourceRank() const override { return engine_->sourceRank(); }
  std::vector<at::Tensor> result() override { return done_->result; }
  void abort() override { engine_->abort(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    TORCH_CHECK(future_,
                "ProcessGroup backend 'infini': its engine (gloo) gives this "
                "collective no future; call wait()");
    return future_;
  }

 private:
  c10::intrusive_ptr<c10d::Work> engine_;
  std::shared_ptr<Completion> done_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// Waits for every Work of a coalesced block.
class CoalescedWork final : public c10d::Work {
 public:
  explicit CoalescedWork(std::vector<c10::intrusive_ptr<c10d::Work>> works)
      : works_(std::move(works)) {}
  bool wait(std::chrono::milliseconds timeout) override {
    for (auto& w : works_) w->wait(timeout);
    return true;
  }
  bool isCompleted() override {
    for (auto& w : works_)
      if (!w->isCompleted()) return false;
    return true;
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

// The Work of a call the device engine enqueued on the current stream: done
// as far as the host is concerned. Its future is complete at once and, being
// on the device, makes whoever waits on it wait for that stream (as NCCL's).
class EnqueuedWork final : public c10d::Work {
 public:
  explicit EnqueuedWork(std::vector<at::Tensor> tensors) : tensors_(std::move(tensors)) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()),
        std::vector<c10::Device>{tensors_.front().device()});
    future_->markCompleted(c10::IValue(tensors_));
  }
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    future_->wait();  // the current stream waits for the collective's stream
    return true;
  }
  bool isCompleted() override { return true; }
  std::vector<at::Tensor> result() override { return tensors_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> tensors_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

bool isInfini(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// Runs one engine call with the backend's name in any error it raises.
template <typename F>
c10::intrusive_ptr<c10d::Work> onEngine(const char* op, F&& call) {
  try {
    return call();
  } catch (c10::Error& e) {
    e.add_context(c10::str("in ", op, " of ProcessGroup backend 'infini' (engine: gloo, ",
                           "through host memory)"));
    throw;
  }
}

// The infini tensors a call wrote, as Work::result() and the future give them.
std::vector<at::Tensor> flat(const at::Tensor& t) { return {t}; }
std::vector<at::Tensor> flat(const std::vector<at::Tensor>& ts) { return ts; }
std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& ls) {
  std::vector<at::Tensor> r;
  for (const auto& l : ls) r.insert(r.end(), l.begin(), l.end());
  return r;
}

// One CPU-engine call: `outputs` written from `inputs` (either may be a
// tensor, a list or a list of lists); `call(host_outputs, host_inputs)`
// runs the engine's collective.
template <typename Out, typename In, typename Call>
c10::intrusive_ptr<c10d::Work> outOfIn(const char* op, Out& outputs, In& inputs, Call&& call) {
  auto done = std::make_shared<Completion>();
  HostSide side(op, done);
  auto host_in = side.in(inputs);
  auto host_out = side.out(outputs);
  done->result = flat(outputs);
  auto work = onEngine(op, [&] { return call(host_out, host_in); });
  return c10::make_intrusive<HostMemoryWork>(std::move(work), done, side.device());
}

// One CPU-engine call that reads and writes `tensors` in place (or only
// reads them: `writes` false).
template <typename Call>
c10::intrusive_ptr<c10d::Work> inPlace(const char* op, std::vector<at::Tensor>& tensors,
                                       Call&& call, bool writes = true) {
  auto done = std::make_shared<Completion>();
  HostSide side(op, done);
  auto host = writes ? side.inout(tensors) : side.in(tensors);
  if (writes) done->result = tensors;
  auto work = onEngine(op, [&] { return call(host); });
  return c10::make_intrusive<HostMemoryWork>(std::move(work), done, side.device());
}

}  // namespace

void setForceStaging(bool on) { g_force_staging.store(on); }

bool drainCompletions(int64_t timeout_ms) {
  if (!CompletionThread::started()) return true;
  return CompletionThread::get().drain(std::chrono::milliseconds(timeout_ms));
}

InfiniBackend::InfiniBackend(c10::intrusive_ptr<c10d::Backend> engine, int rank, int size,
                             std::unique_ptr<DeviceEngine> device_engine)
    : c10d::Backend(rank, size),
      engine_(std::move(engine)),
      device_engine_(std::move(device_engine)) {
  TORCH_CHECK(engine_, "ProcessGroup backend 'infini': no engine");
}

const std::string InfiniBackend::getBackendName() const { return "infini"; }

void InfiniBackend::setTimeout(std::chrono::milliseconds timeout) {
  engine_->setTimeout(timeout);
  if (device_engine_) device_engine_->setTimeout(timeout);
}
void InfiniBackend::abort() {
  if (device_engine_) device_engine_->abort();
  engine_->abort();
}
void InfiniBackend::shutdown() {
  if (device_engine_) device_engine_->shutdown();
  engine_->shutdown();
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::track(c10::intrusive_ptr<c10d::Work> work) {
  if (coalescing_) coalesced_.push_back(work);
  return work;
}

using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

c10::intrusive_ptr<c10d::Work> InfiniBackend::broadcast(Tensors& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  return track(
      inPlace("broadcast", tensors, [&](Tensors& t) { return engine_->broadcast(t, opts); }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::allreduce(Tensors& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  if (device_engine_ && tensors.size() == 1 && isInfini(tensors[0]) &&
      device_engine_->allreduce(tensors[0], opts.reduceOp)) {
    return track(c10::make_intrusive<EnqueuedWork>(tensors));
  }
  return track(
      inPlace("all_reduce", tensors, [&](Tensors& t) { return engine_->allreduce(t, opts); }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::allreduce_coalesced(
    Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return track(inPlace("all_reduce_coalesced", tensors,
                       [&](Tensors& t) { return engine_->allreduce_coalesced(t, opts); }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::reduce(Tensors& tensors,
                                                     const c10d::ReduceOptions& opts) {
  return track(inPlace("reduce", tensors, [&](Tensors& t) { return engine_->reduce(t, opts); }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::allgather(TensorLists& outputs, Tensors& inputs,
                                                        const c10d::AllgatherOptions& opts) {
  return track(outOfIn("all_gather", outputs, inputs,
                       [&](TensorLists& o, Tensors& i) { return engine_->allgather(o, i, opts); }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  return track(outOfIn("all_gather_into_tensor", output, input, [&](at::Tensor& o, at::Tensor& i) {
    return engine_->_allgather_base(o, i, opts);
  }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::allgather_coalesced(
    TensorLists& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) {
  return track(outOfIn("all_gather_coalesced", outputs, inputs, [&](TensorLists& o, Tensors& i) {
    return engine_->allgather_coalesced(o, i, opts);
  }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) {
  return track(
      outOfIn("all_gather_into_tensor_coalesced", outputs, inputs, [&](Tensors& o, Tensors& i) {
        return engine_->allgather_into_tensor_coalesced(o, i, opts);
      }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::gather(TensorLists& outputs, Tensors& inputs,
                                                     const c10d::GatherOptions& opts) {
  return track(outOfIn("gather", outputs, inputs,
                       [&](TensorLists& o, Tensors& i) { return engine_->gather(o, i, opts); }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::scatter(Tensors& outputs, TensorLists& inputs,
                                                      const c10d::ScatterOptions& opts) {
  return track(outOfIn("scatter", outputs, inputs,
                       [&](Tensors& o, TensorLists& i) { return engine_->scatter(o, i, opts); }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::reduce_scatter(
    Tensors& outputs, TensorLists& inputs, const c10d::ReduceScatterOptions& opts) {
  return track(outOfIn("reduce_scatter", outputs, inputs, [&](Tensors& o, TensorLists& i) {
    return engine_->reduce_scatter(o, i, opts);
  }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  return track(outOfIn("reduce_scatter_tensor", output, input, [&](at::Tensor& o, at::Tensor& i) {
    return engine_->_reduce_scatter_base(o, i, opts);
  }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  return track(
      outOfIn("reduce_scatter_tensor_coalesced", outputs, inputs, [&](Tensors& o, Tensors& i) {
        return engine_->reduce_scatter_tensor_coalesced(o, i, opts);
      }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& output_splits,
                                                            std::vector<int64_t>& input_splits,
                                                            const c10d::AllToAllOptions& opts) {
  return track(outOfIn("all_to_all_single", output, input, [&](at::Tensor& o, at::Tensor& i) {
    return engine_->alltoall_base(o, i, output_splits, input_splits, opts);
  }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::alltoall(Tensors& outputs, Tensors& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  return track(outOfIn("all_to_all", outputs, inputs,
                       [&](Tensors& o, Tensors& i) { return engine_->alltoall(o, i, opts); }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::send(Tensors& tensors, int dst_rank, int tag) {
  return track(inPlace(
      "send", tensors, [&](Tensors& t) { return engine_->send(t, dst_rank, tag); },
      /*writes=*/false));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::recv(Tensors& tensors, int src_rank, int tag) {
  Tensors none;
  return track(outOfIn("recv", tensors, none,
                       [&](Tensors& o, Tensors&) { return engine_->recv(o, src_rank, tag); }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::recvAnysource(Tensors& tensors, int tag) {
  Tensors none;
  return track(outOfIn("recv (any source)", tensors, none,
                       [&](Tensors& o, Tensors&) { return engine_->recvAnysource(o, tag); }));
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::barrier(const c10d::BarrierOptions& opts) {
  // The engine's barrier; work already enqueued on this process's streams is
  // not part of it (as with NCCL, synchronize first if that matters).
  return track(onEngine("barrier", [&] { return engine_->barrier(opts); }));
}

void InfiniBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_,
              "ProcessGroup backend 'infini': startCoalescing called twice "
              "without endCoalescing");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> InfiniBackend::endCoalescing() {
  TORCH_CHECK(coalescing_,
              "ProcessGroup backend 'infini': endCoalescing without "
              "startCoalescing");
  coalescing_ = false;
  return c10::make_intrusive<CoalescedWork>(std::move(coalesced_));
}

}  // namespace torch_infini::distributed
