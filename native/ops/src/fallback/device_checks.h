// CUDA's device check for an ATen operator, as its generated wrapper and
// TensorIterator apply it (table: native/ops/codegen/device_checks.py). The
// CPU fallback applies it before the CPU kernel, which cannot: there every
// argument is a CPU tensor.
#pragma once

#include <cstdint>
#include <string_view>

namespace torch_infini::ops {

enum class DeviceCheck : uint8_t {
  // Operators native_functions.yaml marks `device_check: NoCheck` (their
  // kernels check), custom operators: a 0-dim CPU tensor may be a scalar.
  kNoCheck,
  // The default: every positional tensor on the call's device, 0-dim or not.
  kExactSame,
  // NoCheck over TensorIterator: one 0-dim CPU scalar where the operator has
  // two or more tensor operands, none where it has one.
  kTensorIterator,
};

// By qualified name with overload ("aten::gather", "aten::add.out").
DeviceCheck deviceCheckOf(std::string_view qualified_name);

}  // namespace torch_infini::ops
