// The CPU fallback through pinned copies, where device memory is not host
// memory (see fallback/staged.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>

namespace torch_infini::ops {

// Runs `op` on the CPU with its infini arguments staged through pinned
// memory on the current stream and leaves infini results on the stack; adds
// the bytes it copied (both ways) to *bytes_copied.
void runStaged(const c10::OperatorHandle& op, torch::jit::Stack* stack, int64_t* bytes_copied);

}  // namespace torch_infini::ops
