// What both ways of running a fallback call on the CPU (host_fallback.cpp:
// in place; staged_fallback.cpp: through pinned copies) need of its
// arguments: only strided tensors, one device, and which argument each
// mutable return is.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <unordered_map>

#include "torch_infini/runtime/stream.h"

namespace torch_infini::ops {

// infini tensors are strided: sparse and other layouts are refused clearly.
inline void requireStrided(const at::Tensor& t) {
  TORCH_CHECK_NOT_IMPLEMENTED(t.layout() == c10::kStrided,
                              "infini supports strided (dense) tensors only, not the ", t.layout(),
                              " layout");
}

// The one infini device a call's arguments are on.
class CallDevice {
 public:
  void note(c10::Device device) {
    // "infini" without an index is the current device, as for CUDA.
    if (!device.has_index()) device = c10::Device(device.type(), currentDevice());
    if (!device_) {
      device_ = device;
      return;
    }
    TORCH_CHECK(*device_ == device,
                "Expected all tensors to be on the same device, but found at least two devices, ",
                *device_, " and ", device, "!");
  }
  const std::optional<c10::Device>& get() const { return device_; }

 private:
  std::optional<c10::Device> device_;
};

// For each return of `schema`: the argument it aliases and writes (in-place
// self, out=), or -1. Computed once per schema: comparing alias sets costs
// more than the rest of a small call.
inline const c10::SmallVector<int, 2>& mutatedArguments(const c10::FunctionSchema& schema) {
  thread_local std::unordered_map<const c10::FunctionSchema*, c10::SmallVector<int, 2>> known;
  auto [it, fresh] = known.try_emplace(&schema);
  if (fresh) {
    for (const c10::Argument& ret : schema.returns()) {
      int mutated = -1;
      const c10::AliasInfo* info = ret.alias_info();
      for (size_t i = 0; info != nullptr && info->isWrite() && i < schema.arguments().size(); ++i) {
        const c10::AliasInfo* arg = schema.arguments()[i].alias_info();
        if (arg != nullptr && arg->isWrite() && arg->beforeSets() == info->beforeSets()) {
          mutated = static_cast<int>(i);
          break;
        }
      }
      it->second.push_back(mutated);
    }
  }
  return it->second;
}

// Whether argument `index` of `schema` is written by the call.
inline bool writes(const c10::FunctionSchema& schema, size_t index) {
  const c10::AliasInfo* info = schema.arguments()[index].alias_info();
  return info != nullptr && info->isWrite();
}

}  // namespace torch_infini::ops
