// The InfiniRT runtime provider: one instance per InfiniRT device type
// compiled into the installed InfiniRT. Only built when CMake finds InfiniRT.
#pragma once

#include <infini/rt.h>

#include "torch_infini/runtime/device_runtime.h"

namespace torch_infini::runtime {

using InfiniDeviceType = infini::rt::Device::Type;

class InfiniRtRuntime : public DeviceRuntime {
 public:
  virtual InfiniDeviceType deviceType() const = 0;
  // Binds the calling thread to this provider's device type and `device`
  // (InfiniRT keeps both per thread).
  virtual void bind(int device) = 0;
};

}  // namespace torch_infini::runtime
