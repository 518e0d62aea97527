// InfiniRT provider of the device runtime seam.
//
// InfiniRT selects its device type per thread, and CUDA-like backends keep
// the current device per thread: every call binds both first. Statuses other
// than kSuccess become RuntimeErrors naming the call and the status.
#include "torch_infini/runtime/infinirt_runtime.h"
#include "torch_infini/runtime/backend_selection.h"

#include <c10/util/Exception.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "providers/infinirt/infinirt_capabilities.h"
#include "selection/provider_registry.h"

namespace torch_infini::runtime {
namespace rt = infini::rt::runtime;

void checkPolicyOrder() {
  for (std::size_t i = 0; i < kInfiniTypeCount; ++i) {
    const std::string_view infinirt =
        infini::rt::Device::StringFromType(static_cast<InfiniDeviceType>(i));
    TORCH_CHECK(infinirt == kInfiniPolicies[i].name, "torch-infini: InfiniRT device type ", i,
                " is '", infinirt, "', but torch-infini's capability table has '",
                kInfiniPolicies[i].name,
                "' there: this InfiniRT orders its device types differently from the tested "
                "releases (torch-infini's docs/stack_versions.md)");
  }
}

namespace {

#define TI_INFINIRT_CHECK(call)                                               \
  do {                                                                        \
    const auto ti_status = (call);                                            \
    TORCH_CHECK(ti_status == rt::kSuccess, "InfiniRT (", name_, "): ", #call, \
                " failed with status ", static_cast<long>(ti_status));        \
  } while (0)

constexpr int kNoDevice = -1;

template <InfiniDeviceType Type>
class InfiniRtProvider final : public InfiniRtRuntime {
 public:
  InfiniRtProvider() : name_(policyFor(Type).name) {
    bindType();
    int count = 0;
    TI_INFINIRT_CHECK(rt::GetDeviceCount(&count));
    count_ = count;
  }

  static int probe() noexcept {
    infini::rt::set_runtime_device_type(Type);
    if (infini::rt::runtime_device_type() != Type) return 0;  // not compiled in
    int count = 0;
    return rt::GetDeviceCount(&count) == rt::kSuccess ? count : 0;
  }

  InfiniDeviceType deviceType() const override { return Type; }
  const std::string& name() const override { return name_; }
  Capabilities capabilities() const override { return policyFor(Type).caps; }
  int deviceCount() const noexcept override { return count_; }

  std::string deviceName(int device) const override {
    checkDevice(device);
    return "InfiniRT " + name_ + " device " + std::to_string(device);
  }

  void bind(int device) override {
    bindType();
    // CUDA-like runtimes keep a current device per thread; cache it.
    thread_local int bound = kNoDevice;
    thread_local const void* bound_owner = nullptr;
    if (bound == device && bound_owner == this) return;
    TI_INFINIRT_CHECK(rt::SetDevice(device));
    bound = device;
    bound_owner = this;
  }

  void setDevice(int device) override {
    checkDevice(device);
    bind(device);
  }

  void synchronizeDevice(int device) override {
    checkDevice(device);
    bind(device);
    TI_INFINIRT_CHECK(rt::DeviceSynchronize());
  }

  std::pair<size_t, size_t> memGetInfo(int device) override {
    checkDevice(device);
    bind(device);
    size_t free_bytes = 0, total = 0;
    TI_INFINIRT_CHECK(rt::MemGetInfo(&free_bytes, &total));
    return {free_bytes, total};
  }

  void* malloc(int device, size_t bytes) override {
    checkDevice(device);
    bind(device);
    void* ptr = nullptr;
    // Allocation failure is reported as nullptr; the allocator turns it
    // into torch.OutOfMemoryError with the numbers.
    if (rt::Malloc(&ptr, bytes == 0 ? 1 : bytes) != rt::kSuccess) return nullptr;
    return ptr;
  }

  void free(int device, void* ptr) override {
    if (ptr == nullptr) return;
    bind(device);
    TI_INFINIRT_CHECK(rt::Free(ptr));
  }

  void* mallocHost(size_t bytes) override {
    if (!policyFor(Type).caps.pinned_host) return std::malloc(bytes == 0 ? 1 : bytes);
    bindType();
    void* ptr = nullptr;
    if (rt::MallocHost(&ptr, bytes == 0 ? 1 : bytes) != rt::kSuccess) return nullptr;
    return ptr;
  }

  void freeHost(void* ptr) override {
    if (ptr == nullptr) return;
    if (!policyFor(Type).caps.pinned_host) {
      std::free(ptr);
      return;
    }
    bindType();
    TI_INFINIRT_CHECK(rt::FreeHost(ptr));
  }

  void memcpy(void* dst, const void* src, size_t bytes, MemcpyKind kind) override {
    if (bytes == 0) return;
    bindType();
    TI_INFINIRT_CHECK(rt::Memcpy(dst, src, bytes, toKind(kind)));
  }

  void memcpyAsync(void* dst, const void* src, size_t bytes, MemcpyKind kind,
                   StreamHandle stream) override {
    if (bytes == 0) return;
    bindType();
    if (policyFor(Type).caps.async_memcpy) {
      TI_INFINIRT_CHECK(rt::MemcpyAsync(dst, src, bytes, toKind(kind), toStream(stream)));
      return;
    }
    // No async copies on this device type: order after the stream's work,
    // then copy synchronously.
    TI_INFINIRT_CHECK(rt::StreamSynchronize(toStream(stream)));
    TI_INFINIRT_CHECK(rt::Memcpy(dst, src, bytes, toKind(kind)));
  }

  void memsetAsync(void* dst, int value, size_t bytes, StreamHandle stream) override {
    if (bytes == 0) return;
    bindType();
    if (policyFor(Type).caps.async_memcpy && Type != InfiniDeviceType::kCpu) {
      TI_INFINIRT_CHECK(rt::MemsetAsync(dst, value, bytes, toStream(stream)));
      return;
    }
    TI_INFINIRT_CHECK(rt::StreamSynchronize(toStream(stream)));
    TI_INFINIRT_CHECK(rt::Memset(dst, value, bytes));
  }

  StreamHandle createStream(int device) override {
    checkDevice(device);
    bind(device);
    rt::Stream stream{};
    TI_INFINIRT_CHECK(rt::StreamCreate(&stream));
    return fromStream(stream);
  }

  void destroyStream(StreamHandle stream) override {
    bindType();
    TI_INFINIRT_CHECK(rt::StreamDestroy(toStream(stream)));
  }

  void synchronizeStream(StreamHandle stream) override {
    bindType();
    TI_INFINIRT_CHECK(rt::StreamSynchronize(toStream(stream)));
  }

  bool queryStream(StreamHandle stream) override {
    // InfiniRT has no StreamQuery: record an event and ask it, where the
    // type has events; otherwise wait, which answers truthfully.
    if (!policyFor(Type).caps.events) {
      synchronizeStream(stream);
      return true;
    }
    bindType();
    rt::Event event{};
    TI_INFINIRT_CHECK(rt::EventCreateWithFlags(&event, policyFor(Type).disable_timing_flag));
    const auto record = rt::EventRecord(event, toStream(stream));
    const bool done = record == rt::kSuccess && rt::EventQuery(event) == rt::kSuccess;
    rt::EventDestroy(event);
    TORCH_CHECK(record == rt::kSuccess, "InfiniRT (", name_,
                "): EventRecord for a stream query failed with status ", static_cast<long>(record));
    return done;
  }

  void streamWaitEvent(StreamHandle stream, EventHandle event) override {
    requireEvents("Stream.wait_event");
    bindType();
    TI_INFINIRT_CHECK(rt::StreamWaitEvent(toStream(stream), event, 0));
  }

  EventHandle createEvent(int device, bool enable_timing) override {
    requireEvents("Event");
    checkDevice(device);
    bind(device);
    rt::Event event{};
    unsigned int flags = enable_timing ? 0 : policyFor(Type).disable_timing_flag;
    TI_INFINIRT_CHECK(rt::EventCreateWithFlags(&event, flags));
    if (!enable_timing) {
      // Some types (CPU) time every event; timing stays opt-in as in PyTorch.
      std::lock_guard<std::mutex> lock(untimed_mutex_);
      untimed_.insert(event);
    }
    return event;
  }

  void destroyEvent(EventHandle event) override {
    {
      std::lock_guard<std::mutex> lock(untimed_mutex_);
      untimed_.erase(event);
    }
    bindType();
    TI_INFINIRT_CHECK(rt::EventDestroy(event));
  }

  void recordEvent(EventHandle event, StreamHandle stream) override {
    bindType();
    TI_INFINIRT_CHECK(rt::EventRecord(event, toStream(stream)));
  }

  bool queryEvent(EventHandle event) override {
    bindType();
    // kSuccess: complete; anything else: still pending (CUDA-like runtimes
    // report "not ready" as a status).
    return rt::EventQuery(event) == rt::kSuccess;
  }

  void synchronizeEvent(EventHandle event) override {
    bindType();
    TI_INFINIRT_CHECK(rt::EventSynchronize(event));
  }

  float elapsedTime(EventHandle start, EventHandle end) override {
    TORCH_CHECK_NOT_IMPLEMENTED(policyFor(Type).caps.event_timing, "InfiniRT (", name_,
                                "): events cannot measure time on this device type");
    {
      std::lock_guard<std::mutex> lock(untimed_mutex_);
      TORCH_CHECK(!untimed_.count(start) && !untimed_.count(end),
                  "Both events must be created with argument 'enable_timing=True'.");
    }
    bindType();
    float ms = 0.0f;
    TI_INFINIRT_CHECK(rt::EventElapsedTime(&ms, start, end));
    return ms;
  }

 private:
  static void bindType() { infini::rt::set_runtime_device_type(Type); }

  static rt::MemcpyKind toKind(MemcpyKind kind) {
    switch (kind) {
      case MemcpyKind::HostToHost:
        return rt::kMemcpyHostToHost;
      case MemcpyKind::HostToDevice:
        return rt::kMemcpyHostToDevice;
      case MemcpyKind::DeviceToHost:
        return rt::kMemcpyDeviceToHost;
      case MemcpyKind::DeviceToDevice:
        break;
    }
    return rt::kMemcpyDeviceToDevice;
  }

  static rt::Stream toStream(StreamHandle handle) { return reinterpret_cast<rt::Stream>(handle); }
  static StreamHandle fromStream(rt::Stream stream) {
    return reinterpret_cast<StreamHandle>(stream);
  }

  void checkDevice(int device) const {
    if (device < 0 || device >= count_) throwInvalidDevice(device, count_, name_);
  }

  void requireEvents(const char* what) const {
    TORCH_CHECK_NOT_IMPLEMENTED(policyFor(Type).caps.events, what, ": InfiniRT device type '",
                                name_, "' has no events");
  }

  const std::string name_;
  int count_ = 0;
  std::mutex untimed_mutex_;
  std::unordered_set<EventHandle> untimed_;
};

template <InfiniDeviceType Type>
void addIfCompiled(std::vector<ProviderEntry>& out) {
  if constexpr (infini::rt::DeviceEnabled<Type>::value) {
    out.push_back({policyFor(Type).name, policyFor(Type).accelerator,
                   &InfiniRtProvider<Type>::probe,
                   [] { return std::unique_ptr<DeviceRuntime>(new InfiniRtProvider<Type>()); }});
  }
}

template <size_t... I>
std::vector<ProviderEntry> compiledProviders(std::index_sequence<I...>) {
  std::vector<ProviderEntry> out;
  (addIfCompiled<static_cast<InfiniDeviceType>(I)>(out), ...);
  return out;
}

}  // namespace

const std::vector<ProviderEntry>& externalProviders() {
  static const std::vector<ProviderEntry> providers = [] {
    checkPolicyOrder();
    return compiledProviders(std::make_index_sequence<kInfiniTypeCount>());
  }();
  return providers;
}

}  // namespace torch_infini::runtime
