// The CPU fallback's side of convolutions (convolution.cpp), for the
// seam's convolution kernel (aten/convolution.cpp) and its refusals.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/MemoryFormat.h>

namespace torch_infini::ops {

// The memory format PyTorch's fake tensors predict for the result of the
// aten::convolution or aten::_convolution call on the stack (its input at
// index `first`): the one ATen picks for the backend it selects for infini.
at::MemoryFormat predictedConvolutionFormat(const torch::jit::Stack& stack, size_t first);

// Runs that call in the CPU fallback, the native kernel's refusal (pending:
// setPendingRefusal) as the reason, its result made `format`.
void refusedConvolutionFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                                at::MemoryFormat format);

}  // namespace torch_infini::ops
