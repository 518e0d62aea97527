// The InfiniRT provider's policy per device type, derived from the device
// type table (torch_infini/runtime/device_types.h). Entries hold the type's
// name, not its enumerator, so one source builds against each tested enum:
// the pinned one ends at kHygon, the current one adds kThead and kMars. A
// static_assert fails the build when InfiniRT has more types than the table
// knows (cmake/FindInfiniRT.cmake says so earlier, by name), and the runtime
// checks the names against InfiniRT's own when it starts.
#pragma once

#include <array>
#include <cstddef>

#include "torch_infini/runtime/device_types.h"
#include "torch_infini/runtime/infinirt_runtime.h"

namespace torch_infini::runtime {

struct InfiniTypePolicy {
  const char* name;  // InfiniRT's own name for the type (Device::StringFromType)
  bool accelerator;
  Capabilities caps;
  // Events created without timing take this InfiniRT flag (0: none).
  unsigned int disable_timing_flag;
};

inline constexpr std::size_t kInfiniTypeCount = static_cast<std::size_t>(InfiniDeviceType::kCount);

#define TORCH_INFINI_DEVICE_TYPE_POLICY(name, enumerator, accelerator, async_memcpy, events,       \
                                        event_timing, pinned_host, async_malloc, host_addressable, \
                                        untimed_flag, ...)                                         \
  InfiniTypePolicy{                                                                                \
      #name,                                                                                       \
      accelerator,                                                                                 \
      {async_memcpy, events, event_timing, pinned_host, async_malloc, host_addressable},           \
      untimed_flag},
inline constexpr std::array kInfiniPolicies{
    TORCH_INFINI_INFINIRT_DEVICE_TYPES(TORCH_INFINI_DEVICE_TYPE_POLICY)};
#undef TORCH_INFINI_DEVICE_TYPE_POLICY

static_assert(kInfiniTypeCount <= kInfiniPolicies.size(),
              "InfiniRT defines device types torch-infini does not know: add them to "
              "torch_infini/runtime/device_types.h, in InfiniRT's enum order");

constexpr const InfiniTypePolicy& policyFor(InfiniDeviceType type) {
  return kInfiniPolicies[static_cast<std::size_t>(type)];
}

// Each policy's name is InfiniRT's for the type at its position, so the
// table is in InfiniRT's order (raises naming the first mismatch).
void checkPolicyOrder();

}  // namespace torch_infini::runtime
