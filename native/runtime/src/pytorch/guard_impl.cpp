// c10::impl::DeviceGuardImplInterface for PrivateUse1: what DeviceGuard,
// StreamGuard, torch.Stream, torch.Event and torch.accelerator call.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini {
namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::Stream;

void checkInfini(const Device& d) {
  TORCH_CHECK(d.type() == DeviceType::PrivateUse1, "infini: expected an infini device, got ", d);
}

struct InfiniGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::PrivateUse1; }

  Device exchangeDevice(Device d) const override {
    checkInfini(d);
    Device old = getDevice();
    if (old.index() != d.index()) setCurrentDevice(d.index());
    return old;
  }

  Device getDevice() const override {
    return Device(DeviceType::PrivateUse1, static_cast<DeviceIndex>(currentDevice()));
  }

  void setDevice(Device d) const override {
    checkInfini(d);
    setCurrentDevice(d.index() == -1 ? currentDevice() : d.index());  // -2 ...: refused
  }

  void uncheckedSetDevice(Device d) const noexcept override {
    try {
      if (d.index() >= 0) setCurrentDevice(d.index());
    } catch (...) {
    }
  }

  Stream getStream(Device d) const override { return currentStream(d.index()); }
  Stream getDefaultStream(Device d) const override { return defaultStream(d.index()); }
  Stream getStreamFromGlobalPool(Device d, bool /*high_priority*/) const override {
    return streamFromPool(d.index());
  }
  Stream getNewStream(Device d, int /*priority*/) const override {
    return streamFromPool(d.index());
  }
  Stream exchangeStream(Stream s) const override { return torch_infini::exchangeStream(s); }
  void* getStreamNativeHandle(const Stream s) const override { return nativeStream(s); }

  DeviceIndex deviceCount() const noexcept override {
    return static_cast<DeviceIndex>(torch_infini::deviceCount());
  }

  bool queryStream(const Stream& s) const override {
    return runtime::selectedRuntime().queryStream(nativeStream(s));
  }
  void synchronizeStream(const Stream& s) const override {
    runtime::selectedRuntime().synchronizeStream(nativeStream(s));
  }
  void synchronizeDevice(const DeviceIndex device_index) const override {
    torch_infini::synchronizeDevice(device_index);
  }

  void record(void** event, const Stream& s, const DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == s.device_index(), "infini: event of device ",
                static_cast<int>(device_index), " cannot be recorded on a stream of device ",
                static_cast<int>(s.device_index()));
    runtime::StreamHandle handle = nativeStream(s);
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    if (*event == nullptr) {
      // torch.Event(enable_timing=True) asks for BACKEND_DEFAULT.
      *event = rt.createEvent(s.device_index(), flag == c10::EventFlag::BACKEND_DEFAULT);
    }
    rt.recordEvent(*event, handle);
  }

  void block(void* event, const Stream& s) const override {
    if (event == nullptr) return;  // never recorded: nothing to wait for
    runtime::selectedRuntime().streamWaitEvent(nativeStream(s), event);
  }

  bool queryEvent(void* event) const override {
    return event == nullptr || runtime::selectedRuntime().queryEvent(event);
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) runtime::selectedRuntime().synchronizeEvent(event);
  }

  void destroyEvent(void* event, const DeviceIndex /*device_index*/) const noexcept override {
    if (event == nullptr) return;
    try {
      runtime::selectedRuntime().destroyEvent(event);
    } catch (...) {
    }
  }

  double elapsedTime(void* start, void* end, const DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    return runtime::selectedRuntime().elapsedTime(start, end);
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const Stream& s) const override {
    deviceAllocator()->recordStream(data_ptr, s);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, InfiniGuardImpl);

}  // namespace
}  // namespace torch_infini
