// Runtime providers other than the built-in host device (the InfiniRT
// device types compiled into this build). Empty when InfiniRT is absent.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "torch_infini/runtime/device_runtime.h"

namespace torch_infini::runtime {

struct ProviderEntry {
  std::string name;            // as in TORCH_INFINI_BACKEND
  bool accelerator;            // false for a CPU backend
  std::function<int()> probe;  // device count, 0 on error
  std::function<std::unique_ptr<DeviceRuntime>()> make;
};

const std::vector<ProviderEntry>& externalProviders();

}  // namespace torch_infini::runtime
