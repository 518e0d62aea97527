// The CPU fallback in place, where device memory is host memory (see
// fallback/aliased_memory.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>

namespace torch_infini::ops {

// Runs `op` on CPU tensors aliasing the infini arguments' memory and leaves
// infini results on the stack; adds the bytes it copied to *bytes_copied.
// False, with the stack as it was, when the call must copy instead (an out=
// argument the CPU kernel needs to resize).
bool runOnCpuAliases(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                     int64_t* bytes_copied);

}  // namespace torch_infini::ops
