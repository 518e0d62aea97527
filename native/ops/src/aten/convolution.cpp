// aten::convolution and aten::_convolution (what nn.Conv1d/2d/3d and
// F.conv* call on infini) through the seam's Convolution: the forward of a
// convolution that is not transposed, in the layout PyTorch predicts for
// infini. What the kernel does not take (a transposed convolution, a dtype
// its provider lacks, mixed dtypes or devices, arguments the CPU rejects)
// runs in the CPU fallback with the refusal as its reason
// (fallback/convolution.cpp), which also raises the CPU's errors. The
// backward, convolution_backward, is the fallback's.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "fallback/convolution.h"
#include "fallback/refusal.h"

namespace torch_infini::ops {
namespace {

constexpr const char* kName = "convolution";

struct ConvolutionArguments {
  at::Tensor input;
  at::Tensor weight;
  std::optional<at::Tensor> bias;
  std::vector<int64_t> stride;
  std::vector<int64_t> padding;
  std::vector<int64_t> dilation;
  bool transposed = false;
  std::vector<int64_t> output_padding;
  int64_t groups = 1;

  // aten::convolution's arguments (aten::_convolution's first nine) from
  // the stack, the input at `first`.
  static ConvolutionArguments from(const torch::jit::Stack& stack, size_t first) {
    ConvolutionArguments a;
    a.input = stack[first].toTensor();
    a.weight = stack[first + 1].toTensor();
    if (!stack[first + 2].isNone()) a.bias = stack[first + 2].toTensor();
    a.stride = stack[first + 3].toIntVector();
    a.padding = stack[first + 4].toIntVector();
    a.dilation = stack[first + 5].toIntVector();
    a.transposed = stack[first + 6].toBool();
    a.output_padding = stack[first + 7].toIntVector();
    a.groups = stack[first + 8].toInt();
    return a;
  }
};

// The result's sizes, or a refusal (NotImplementedError) for anything the
// kernel does not take; the CPU fallback then raises the CPU's error for
// arguments the CPU rejects.
std::vector<int64_t> checkConvolution(const ConvolutionArguments& a) {
  const at::Tensor& input = a.input;
  const at::Tensor& weight = a.weight;
  const bool has_bias = a.bias.has_value() && a.bias->defined();
  TORCH_CHECK_NOT_IMPLEMENTED(
      isInfini(input) && weight.device() == input.device() &&
          (!has_bias || a.bias->device() == input.device()),
      kName, ": the infini kernel takes input, weight and bias on one infini device");
  TORCH_CHECK_NOT_IMPLEMENTED(!a.transposed, kName,
                              ": the infini kernel does not compute transposed convolutions");
  requireKernel(kName, SeamOp::Convolution, input.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(weight.scalar_type() == input.scalar_type() &&
                                  (!has_bias || a.bias->scalar_type() == input.scalar_type()),
                              kName,
                              ": the infini kernel takes input, weight and bias of one dtype, got ",
                              input.scalar_type(), ", ", weight.scalar_type(), " and ",
                              has_bias ? a.bias->scalar_type() : input.scalar_type());
  const int64_t dims = input.dim() - 2;
  const auto perDimension = [dims](const std::vector<int64_t>& v) {
    return static_cast<int64_t>(v.size()) == dims;
  };
  TORCH_CHECK_NOT_IMPLEMENTED(
      dims >= 1 && dims <= 3 && weight.dim() == input.dim() && perDimension(a.stride) &&
          perDimension(a.padding) && perDimension(a.dilation) && perDimension(a.output_padding),
      kName,
      ": the infini kernel takes [N, C, *spatial] inputs with 1 to 3 spatial dimensions "
      "and a weight and arguments to match, got input ",
      input.sizes(), " and weight ", weight.sizes());
  const int64_t channels = input.size(1);
  const int64_t outputs = weight.size(0);
  TORCH_CHECK_NOT_IMPLEMENTED(a.groups > 0 && channels == weight.size(1) * a.groups &&
                                  outputs % a.groups == 0 &&
                                  (!has_bias || (a.bias->dim() == 1 && a.bias->size(0) == outputs)),
                              kName, ": the infini kernel takes ", a.groups, " groups of input ",
                              input.sizes(), ", weight ", weight.sizes(), " only as the CPU does");
  std::vector<int64_t> sizes{input.size(0), outputs};
  for (int64_t d = 0; d < dims; ++d) {
    const int64_t extent = input.size(d + 2) + 2 * a.padding[d];
    const int64_t window = a.dilation[d] * (weight.size(d + 2) - 1) + 1;
    TORCH_CHECK_NOT_IMPLEMENTED(
        a.stride[d] > 0 && a.padding[d] >= 0 && a.dilation[d] > 0 && a.output_padding[d] == 0 &&
            weight.size(d + 2) > 0 && extent >= window,
        kName,
        ": the infini kernel takes positive strides and dilations, no output padding and "
        "kernels that fit the padded input, got stride ",
        a.stride, ", padding ", a.padding, ", dilation ", a.dilation, ", output_padding ",
        a.output_padding, " for input ", input.sizes(), " and weight ", weight.sizes());
    sizes.push_back((extent - window) / a.stride[d] + 1);
  }
  return sizes;
}

at::Tensor convolutionOnDevice(const ConvolutionArguments& a, at::MemoryFormat format) {
  const std::vector<int64_t> sizes = checkConvolution(a);
  // (channels-last formats exist for 4-D and 5-D tensors only)
  const bool applies = (format != at::MemoryFormat::ChannelsLast || sizes.size() == 4) &&
                       (format != at::MemoryFormat::ChannelsLast3d || sizes.size() == 5);
  at::Tensor out = at::empty(
      sizes, a.input.options().memory_format(applies ? format : at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  const bool has_bias = a.bias.has_value() && a.bias->defined();
  const TensorRef bias_ref = has_bias ? toRef(*a.bias) : TensorRef{};
  selectedKernelProvider().convolution(toRef(out), toRef(a.input), toRef(a.weight),
                                       has_bias ? &bias_ref : nullptr, a.stride, a.padding,
                                       a.dilation, a.groups, streamOf(out));
  return out;
}

// Boxed: the refusals take the fallback's convolution path (the predicted
// layout) with their reason.
void convolution(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t arguments = op.schema().arguments().size();
  const size_t first = stack->size() - arguments;
  const at::MemoryFormat format = predictedConvolutionFormat(*stack, first);
  try {
    at::Tensor out = convolutionOnDevice(ConvolutionArguments::from(*stack, first), format);
    torch::jit::drop(*stack, arguments);
    torch::jit::push(*stack, std::move(out));
    return;
  } catch (const c10::NotImplementedError& refusal) {
    setPendingRefusal(refusal.what_without_backtrace());
  }
  refusedConvolutionFallback(op, stack, format);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar convolutions(m, "aten", "convolution", SeamOp::Convolution);
  convolutions.impl("convolution", torch::CppFunction::makeFromBoxedFunction<&convolution>());
  convolutions.impl("_convolution", torch::CppFunction::makeFromBoxedFunction<&convolution>());
}

}  // namespace
}  // namespace torch_infini::ops
