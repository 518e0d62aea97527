// at::PrivateUse1HooksInterface: what PyTorch's generic code (autograd,
// pin_memory, torch.accelerator, serialization) asks of the backend.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/generator.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini {
namespace {

struct InfiniHooks final : public at::PrivateUse1HooksInterface {
  void init() const override { runtime::selectedRuntime(); }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return torch_infini::deviceCount() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return runtime::isInitialized() && device_index >= 0 &&
           device_index < torch_infini::deviceCount();
  }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(torch_infini::deviceCount());
  }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    torch_infini::setCurrentDevice(device);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(currentDevice());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = getCurrentDevice();
    if (device >= 0) torch_infini::setCurrentDevice(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  bool isPinnedPtr(const void* data) const override { return isPinnedPointer(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinnedAllocator(); }
  at::Device getDeviceFromPtr(void* data) const override {
    int device = -1;
    TORCH_CHECK(deviceOfPointer(data, &device), "infini: pointer ", data,
                " was not allocated by the infini device allocator");
    return {c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)};
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return defaultGenerator(device_index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return newGenerator(device_index);
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resizeStorageBytes(storage, newsize);
  }
};

struct Registration {
  Registration() {
    static InfiniHooks hooks;
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
} registration;
}  // namespace

}  // namespace torch_infini
