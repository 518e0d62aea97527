// Every InfiniRT device type torch-infini knows, in InfiniRT's enum order,
// with what each can do as InfiniRT documents it (docs/backends.md) at the
// tested releases (docs/stack_versions.md). This is the one list: the
// runtime's capability policies, the InfiniOps support table's columns,
// backend selection, cmake/FindInfiniRT.cmake (which parses the rows below)
// and Python (torch_infini._C._infinirt_device_types()) all read it.
//
// A row: X(name, InfiniRT enumerator without its k, accelerator,
//          async_memcpy, events, event_timing, pinned_host, async_malloc,
//          host_addressable, untimed event flag, infiniops, cuda_like).
// `name` is InfiniRT's own (Device::StringFromType) and the value users give
// TORCH_INFINI_BACKEND. The untimed event flag is what events created
// without timing pass to InfiniRT (0: none). `infiniops`: InfiniOps has
// sources for the type (src/native/<type>/); `cuda_like`: it is of InfiniOps'
// CUDA-like family (src/native/cuda/<type>/, kernels shared with NVIDIA's);
// the seam's declarations read both (ops/src/seam/declared_support.cpp).
// Keep each row on one line: CMake
// reads the first two fields of every line that starts with "  X(".
#pragma once

// clang-format off
#define TORCH_INFINI_INFINIRT_DEVICE_TYPES(X)                                   \
  X(cpu,       Cpu,       false, false, true,  true,  true,  false, true,  0,   true,  false) \
  X(nvidia,    Nvidia,    true,  true,  true,  true,  true,  true,  false, 0x2, true,  true)  \
  X(cambricon, Cambricon, true,  true,  false, false, false, false, false, 0,   true,  false) \
  X(ascend,    Ascend,    true,  true,  false, false, false, false, false, 0,   true,  false) \
  X(metax,     Metax,     true,  true,  true,  true,  true,  true,  false, 0x2, true,  true)  \
  X(moore,     Moore,     true,  true,  true,  true,  true,  false, false, 0x2, true,  true)  \
  X(iluvatar,  Iluvatar,  true,  true,  true,  true,  true,  true,  false, 0x2, true,  true)  \
  X(hygon,     Hygon,     true,  true,  true,  true,  true,  true,  false, 0x2, true,  false) \
  X(thead,     Thead,     true,  false, false, false, false, false, false, 0,   false, false) \
  X(mars,      Mars,      true,  true,  true,  true,  true,  true,  false, 0x2, false, false)
// clang-format on
// thead and mars are in the InfiniRT heads' enum, not the pinned one's
// (docs/stack_versions.md). thead: T-Head PPU, a CUDA-compatible runtime
// without a row in backends.md, so nothing optional is assumed (synchronous
// copies, no events, no pinned or stream-ordered memory). mars: as MetaX,
// whose hc runtime's DisableTiming flag (0x2) it shares.

#include <array>
#include <string_view>

namespace torch_infini::runtime {

// The names, in InfiniRT's order.
#define TORCH_INFINI_DEVICE_TYPE_NAME(name, ...) std::string_view{#name},
inline constexpr std::array kInfiniDeviceTypeNames{
    TORCH_INFINI_INFINIRT_DEVICE_TYPES(TORCH_INFINI_DEVICE_TYPE_NAME)};
#undef TORCH_INFINI_DEVICE_TYPE_NAME

constexpr bool isInfiniDeviceType(std::string_view name) {
  for (std::string_view known : kInfiniDeviceTypeNames)
    if (known == name) return true;
  return false;
}

}  // namespace torch_infini::runtime
