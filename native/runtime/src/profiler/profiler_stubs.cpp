// torch.profiler on infini: the device-side stubs PyTorch's profiler calls
// for PrivateUse1 (its "KINETO_PRIVATEUSE1_FALLBACK" state: device time from
// the backend's own events, with no Kineto plugin). Each recorded point is a
// timing event on the current stream; the time between two is theirs.
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

struct InfiniProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const int d = currentDevice();
    if (device) *device = static_cast<c10::DeviceIndex>(d);
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    runtime::EventHandle e = rt.createEvent(d, /*enable_timing=*/true);
    *event = std::shared_ptr<void>(e, [](void* p) {
      if (runtime::isInitialized()) runtime::selectedRuntime().destroyEvent(p);
    });
    if (cpu_ns) *cpu_ns = c10::getTime();
    rt.recordEvent(e, currentNativeStreamUnchecked(d));
  }

  // Microseconds, as the CUDA stubs report.
  float elapsed(const ProfilerVoidEventStub* start,
                const ProfilerVoidEventStub* end) const override {
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    rt.synchronizeEvent(start->get());
    rt.synchronizeEvent(end->get());
    return rt.elapsedTime(start->get(), end->get()) * 1000.0f;
  }

  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    runtime::DeviceRuntime* rt = runtime::tryGet();
    return rt != nullptr && rt->capabilities().event_timing;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    const int old = currentDevice();
    for (int d = 0; d < deviceCount(); ++d) {
      setCurrentDevice(d);
      op(d);
    }
    setCurrentDevice(old);
  }

  void synchronize() const override { synchronizeDevice(); }
};

const bool registered = [] {
  static InfiniProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

}  // namespace
}  // namespace torch_infini
