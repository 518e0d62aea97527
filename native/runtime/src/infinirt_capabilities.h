// What each InfiniRT device type can do, as InfiniRT documents it for the
// pinned release (docs/backends.md). Every type InfiniRT defines has an
// entry; a static_assert fails the build when InfiniRT adds one.
#pragma once

#include <array>
#include <cstddef>

#include "torch_infini/runtime/infinirt_runtime.h"

namespace torch_infini::runtime {

struct InfiniTypePolicy {
  InfiniDeviceType type;
  const char* name;
  bool accelerator;
  Capabilities caps;
  // Events created without timing take this InfiniRT flag (0: none).
  unsigned int disable_timing_flag;
};

inline constexpr std::size_t kInfiniTypeCount = static_cast<std::size_t>(InfiniDeviceType::kCount);

// Capabilities{async_memcpy, events, event_timing, pinned_host, async_malloc,
//               host_addressable}
inline constexpr std::array<InfiniTypePolicy, kInfiniTypeCount> kInfiniPolicies{{
    {InfiniDeviceType::kCpu, "cpu", false, {false, true, true, true, false, true}, 0},
    {InfiniDeviceType::kNvidia, "nvidia", true, {true, true, true, true, true, false}, 0x2},
    {InfiniDeviceType::kCambricon, "cambricon", true, {true, false, false, false, false, false}, 0},
    {InfiniDeviceType::kAscend, "ascend", true, {true, false, false, false, false, false}, 0},
    {InfiniDeviceType::kMetax, "metax", true, {true, true, true, true, true, false}, 0x2},
    {InfiniDeviceType::kMoore, "moore", true, {true, true, true, true, false, false}, 0x2},
    {InfiniDeviceType::kIluvatar, "iluvatar", true, {true, true, true, true, true, false}, 0x2},
    {InfiniDeviceType::kHygon, "hygon", true, {true, true, true, true, true, false}, 0x2},
}};

constexpr bool policiesCoverEveryType() {
  for (std::size_t i = 0; i < kInfiniPolicies.size(); ++i)
    if (static_cast<std::size_t>(kInfiniPolicies[i].type) != i) return false;
  return true;
}
static_assert(kInfiniPolicies.size() == kInfiniTypeCount && policiesCoverEveryType(),
              "every InfiniRT device type needs an explicit capability policy, in enum order");

constexpr const InfiniTypePolicy& policyFor(InfiniDeviceType type) {
  return kInfiniPolicies[static_cast<std::size_t>(type)];
}

}  // namespace torch_infini::runtime
