// What each InfiniRT device type can do, as InfiniRT documents it
// (docs/backends.md) at the tested releases (95c70080, a38977e). Entries are
// in InfiniRT's enum order and hold the type's name, not its enumerator, so
// one source builds against each tested enum: the pinned one ends at kHygon,
// the current one adds kThead and kMars. A static_assert fails the build when
// InfiniRT has more types than this table knows (configure-time checks in
// cmake/FindInfiniRT.cmake say so earlier, by name), and the runtime checks
// the names against InfiniRT's own when it starts.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>

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

// Capabilities{async_memcpy, events, event_timing, pinned_host, async_malloc,
//               host_addressable}
inline constexpr std::array<InfiniTypePolicy, 10> kInfiniPolicies{{
    {"cpu", false, {false, true, true, true, false, true}, 0},
    {"nvidia", true, {true, true, true, true, true, false}, 0x2},
    {"cambricon", true, {true, false, false, false, false, false}, 0},
    {"ascend", true, {true, false, false, false, false, false}, 0},
    {"metax", true, {true, true, true, true, true, false}, 0x2},
    {"moore", true, {true, true, true, true, false, false}, 0x2},
    {"iluvatar", true, {true, true, true, true, true, false}, 0x2},
    {"hygon", true, {true, true, true, true, true, false}, 0x2},
    // a38977e: T-Head PPU (a CUDA-compatible runtime) has no row in
    // backends.md, so nothing optional is assumed: synchronous copies, no
    // events, no pinned or stream-ordered memory.
    {"thead", true, {false, false, false, false, false, false}, 0},
    // a38977e, backends.md: Mars as MetaX (async copies, host and async
    // memory, events; its hc runtime's DisableTiming flag is MetaX's 0x2).
    {"mars", true, {true, true, true, true, true, false}, 0x2},
}};

static_assert(kInfiniTypeCount <= kInfiniPolicies.size(),
              "InfiniRT defines device types torch-infini has no capability policy for: "
              "add them to kInfiniPolicies, in InfiniRT's enum order");

constexpr const InfiniTypePolicy& policyFor(InfiniDeviceType type) {
  return kInfiniPolicies[static_cast<std::size_t>(type)];
}

// Each policy's name is InfiniRT's for the type at its position, so the
// table is in InfiniRT's order (raises naming the first mismatch).
void checkPolicyOrder();

}  // namespace torch_infini::runtime
