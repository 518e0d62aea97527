// Convolutions in the CPU fallback (cpu_fallback.cpp, "routed" operators:
// the backward; the forward where the seam's kernel refuses it,
// aten/convolution.cpp), with their results in the layout PyTorch predicts
// for infini.
//
// The CPU's kernel (oneDNN) gives a channels-last result when the input OR
// the weight is channels-last; PyTorch's fake tensors, which torch.compile
// plans with, ask ATen's own rule for the infini device
// (select_conv_backend, then _determine_backend_memory_format: contiguous
// for a backend outside its list). Inductor makes weights channels-last, so
// a compiled convolutional model saw strides it did not plan for. Results
// whose layout differs are made contiguous in the predicted format (one
// copy, on the current stream).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/ConvUtils.h>
#include <c10/util/ArrayRef.h>
#include <torch/library.h>

#include <optional>

#include "fallback/convolution.h"
#include "fallback/refusal.h"

namespace torch_infini::ops {
namespace {

// What the fake tensor of a convolution on infini predicts: the memory
// format ATen picks for the backend it selects for these arguments.
// `first`: the stack index of `input` (weight, bias or bias_sizes, stride,
// padding, dilation, transposed, output_padding and groups follow).
at::MemoryFormat predictedFormat(const torch::jit::Stack& stack, size_t first, bool backward) {
  const at::Tensor& input = stack[first].toTensor();
  const at::Tensor& weight = stack[first + 1].toTensor();
  std::optional<at::Tensor> bias;
  std::optional<std::vector<int64_t>> bias_sizes;
  if (backward) {
    if (!stack[first + 2].isNone()) bias_sizes = stack[first + 2].toIntVector();
  } else if (!stack[first + 2].isNone()) {
    bias = stack[first + 2].toTensor();
  }
  const std::vector<int64_t> stride = stack[first + 3].toIntVector();
  const std::vector<int64_t> padding = stack[first + 4].toIntVector();
  const std::vector<int64_t> dilation = stack[first + 5].toIntVector();
  const bool transposed = stack[first + 6].toBool();
  const std::vector<int64_t> output_padding = stack[first + 7].toIntVector();
  const int64_t groups = stack[first + 8].toInt();
  std::optional<c10::SymIntArrayRef> sym_bias_sizes;
  if (bias_sizes) sym_bias_sizes = c10::fromIntArrayRefSlow(*bias_sizes);
  const at::native::ConvBackend backend = at::native::select_conv_backend(
      input, weight, bias, c10::fromIntArrayRefSlow(stride), c10::fromIntArrayRefSlow(padding),
      c10::fromIntArrayRefSlow(dilation), transposed, c10::fromIntArrayRefSlow(output_padding),
      c10::SymInt(groups), sym_bias_sizes);
  return at::native::_determine_backend_memory_format(input, weight, backend);
}

void toFormat(c10::IValue& value, at::MemoryFormat format) {
  if (!value.isTensor()) return;
  const at::Tensor& t = value.toTensor();
  if (!t.defined() || t.is_contiguous(format)) return;
  // channels_last applies to 4-D tensors only (a 1-D convolution's 3-D
  // result is planned contiguous as well).
  if ((format == at::MemoryFormat::ChannelsLast && t.dim() != 4) ||
      (format == at::MemoryFormat::ChannelsLast3d && t.dim() != 5)) {
    return;
  }
  value = t.contiguous(format);
}

// aten::convolution_backward: grad_output at 0, input at 1; grad_input and
// grad_weight take the predicted format, grad_bias none.
void convolutionBackward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t begin = stack->size() - op.schema().arguments().size();
  const at::MemoryFormat format = predictedFormat(*stack, begin + 1, /*backward=*/true);
  runInCpuFallback(op, stack);
  const size_t returns = stack->size() - 3;
  toFormat((*stack)[returns], format);
  toFormat((*stack)[returns + 1], format);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_backward", torch::CppFunction::makeFromBoxedFunction<&convolutionBackward>());
}

}  // namespace

at::MemoryFormat predictedConvolutionFormat(const torch::jit::Stack& stack, size_t first) {
  return predictedFormat(stack, first, /*backward=*/false);
}

void refusedConvolutionFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                                at::MemoryFormat format) {
  refusedKernelFallback(op, stack);
  toFormat(stack->back(), format);
}

}  // namespace torch_infini::ops
