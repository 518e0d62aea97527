// The CPU fallback in place, where device memory is host memory (see
// fallback/aliased_memory.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <c10/util/ArrayRef.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <optional>

namespace torch_infini::ops {

// Runs `op` on CPU tensors aliasing the infini arguments' memory and leaves
// infini results on the stack; adds the bytes it copied to *bytes_copied.
// False, with the stack as it was, when the call must copy instead (an out=
// argument the CPU kernel needs to resize).
bool runOnCpuAliases(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                     int64_t* bytes_copied);

// A functional call without a stack, for the typed entries of the
// structured forms (cpu_fallback.cpp): `kernel` runs the CPU kernel on CPU
// aliases of `args`, and its result comes back an infini tensor, as
// runOnCpuAliases would make it. Nothing, before any effect, unless every
// argument is an infini tensor whose alias is a plain CPU tensor (no
// conjugate or negative bit) and no profiler records operators: the calls
// runOnCpuAliases would send through the full dispatch. Then the caller
// takes the boxed route. Tensors on two infini devices raise CUDA's error,
// as there.
std::optional<at::Tensor> runFunctionalOnCpuAliases(
    const c10::OperatorHandle& op, c10::ArrayRef<const at::Tensor*> args,
    c10::function_ref<at::Tensor(c10::ArrayRef<at::Tensor>)> kernel, int64_t* bytes_copied);

}  // namespace torch_infini::ops
