// infini's devices and streams as PyTorch sees them, mapped onto the selected
// DeviceRuntime (torch_infini/runtime/stream.h).
#include "torch_infini/runtime/stream.h"

#include "pytorch/stream_lookup.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "profiler/device_activity.h"
#include "torch_infini/runtime/backend_selection.h"

namespace torch_infini {
namespace {

struct DeviceStreams {
  std::mutex mutex;
  std::array<runtime::StreamHandle, kStreamPoolSize + 1> handles{};
  // Set once a handle exists: a runtime may use nullptr as a real stream
  // (InfiniRT's CPU backend does), so the handle cannot mark creation.
  std::array<std::atomic<bool>, kStreamPoolSize + 1> created{};
  std::atomic<uint32_t> next{0};
};

// One table per device, created on first use and never freed: streams live
// as long as the process, as CUDA's pool streams do.
std::vector<std::unique_ptr<DeviceStreams>>& tables() {
  static auto* t = [] {
    auto* v = new std::vector<std::unique_ptr<DeviceStreams>>();
    int n = deviceCount();
    for (int i = 0; i < n; ++i) v->push_back(std::make_unique<DeviceStreams>());
    return v;
  }();
  return *t;
}

runtime::StreamHandle createdHandle(int device, c10::StreamId id) {
  DeviceStreams& t = *tables()[device];
  if (t.created[id].load(std::memory_order_acquire)) return t.handles[id];
  std::lock_guard<std::mutex> lock(t.mutex);
  if (!t.created[id].load(std::memory_order_relaxed)) {
    t.handles[id] = runtime::selectedRuntime().createStream(device);
    t.created[id].store(true, std::memory_order_release);
  }
  return t.handles[id];
}

// Every handle handed out is about to carry work: the profiler hears of it.
runtime::StreamHandle handleFor(int device, c10::StreamId id) {
  runtime::StreamHandle handle = createdHandle(device, id);
  device_activity::onStreamUse(device, id, handle);
  return handle;
}

thread_local int tls_device = 0;
thread_local std::vector<c10::StreamId> tls_streams;  // current id per device

c10::Stream makeStream(int device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}

}  // namespace

int deviceCount() noexcept {
  runtime::DeviceRuntime* rt = runtime::tryGet();
  if (rt != nullptr) return rt->deviceCount();
  return runtime::isInBadFork() ? runtime::deviceCountAtFork() : 0;
}

void checkDeviceIndex(int device) {
  int count = runtime::selectedRuntime().deviceCount();
  if (device < 0 || device >= count)
    runtime::throwInvalidDevice(device, count, runtime::selectedRuntime().name());
}

// -1 is "the current device"; any other negative index is refused. PyTorch
// keeps a device index in an int8, so "infini:128" ... "infini:254" arrive
// as -128 ... -2: taking those for the current device would put a tensor
// meant for device 200 on device 0, silently (CUDA's guard raises).
int resolveDevice(int device) {
  if (device == -1) return currentDevice();
  checkDeviceIndex(device);
  return device;
}

int currentDevice() {
  runtime::selectedRuntime();  // surfaces a backend initialization error here
  return tls_device;
}

void setCurrentDevice(int device) {
  checkDeviceIndex(device);
  if (device == tls_device) return;
  runtime::selectedRuntime().setDevice(device);
  tls_device = device;
}

c10::Stream currentStream(int device) {
  device = resolveDevice(device);
  return makeStream(device, currentStreamIdUnchecked(device));
}

c10::Stream defaultStream(int device) { return makeStream(resolveDevice(device), 0); }

c10::Stream streamFromPool(int device) {
  device = resolveDevice(device);
  uint32_t slot = tables()[device]->next.fetch_add(1) % kStreamPoolSize;
  return makeStream(device, static_cast<c10::StreamId>(slot) + 1);
}

c10::Stream exchangeStream(const c10::Stream& stream) {
  nativeStream(stream);  // validates
  int device = stream.device_index();
  c10::Stream previous = currentStream(device);
  if (tls_streams.size() <= static_cast<size_t>(device)) tls_streams.resize(device + 1, 0);
  tls_streams[device] = stream.id();
  return previous;
}

runtime::StreamHandle nativeStream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "infini: expected an infini stream, got a stream of ", stream.device());
  int device = stream.device_index();
  checkDeviceIndex(device);
  TORCH_CHECK(stream.id() >= 0 && stream.id() <= kStreamPoolSize, "infini: invalid stream id ",
              stream.id(), " on device ", device);
  return handleFor(device, stream.id());
}

c10::StreamId currentStreamIdUnchecked(int device) noexcept {
  return static_cast<size_t>(device) < tls_streams.size() ? tls_streams[device] : 0;
}

runtime::StreamHandle currentNativeStreamUnchecked(int device) {
  return handleFor(device, currentStreamIdUnchecked(device));
}

runtime::StreamHandle nativeStreamUnchecked(int device, c10::StreamId id) {
  return handleFor(device, id);
}

runtime::StreamHandle nativeStreamToWaitOn(int device, c10::StreamId id) {
  return createdHandle(device, id);
}

void synchronizeDevice(int device) {
  runtime::selectedRuntime().synchronizeDevice(resolveDevice(device));
}

}  // namespace torch_infini
