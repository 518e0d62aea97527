// rms_norm (torch.nn.functional.rms_norm, nn.RMSNorm) over one normalized
// dimension, 2-D and 3-D inputs, through the kernel seam's RmsNorm.
//
// Registered as aten::rms_norm for PrivateUse1, so the CPU-style
// decomposition never runs on infini. Backward is not provided: autograd
// reports rms_norm as not differentiable on infini when asked for gradients.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <limits>

#include "bridge.h"

namespace torch_infini::ops {
namespace {

at::Tensor rms_norm(const at::Tensor& input, c10::IntArrayRef normalized_shape,
                    const std::optional<at::Tensor>& weight_opt, std::optional<double> eps) {
  const char* name = "rms_norm";
  checkInfiniTensor(name, "input", input);
  requireKernel(name, Op::RmsNorm, input.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(normalized_shape.size() == 1, name,
                              ": only one normalized dimension is supported on infini, got "
                              "normalized_shape=",
                              normalized_shape);
  TORCH_CHECK_NOT_IMPLEMENTED(input.dim() == 2 || input.dim() == 3, name,
                              ": only 2-D and 3-D inputs are supported on infini, got ",
                              input.dim(), "-D input of shape ", input.sizes());
  const int64_t n = normalized_shape[0];
  TORCH_CHECK(input.size(-1) == n, "Given normalized_shape=", normalized_shape,
              ", expected input with shape [*, ", n, "], but got input of size", input.sizes());

  at::Tensor weight;
  if (weight_opt.has_value() && weight_opt->defined()) {
    weight = *weight_opt;
    checkInfiniTensor(name, "weight", weight);
    checkSameDevice(input, weight);
    requireSameDtype(name, input.scalar_type(), weight.scalar_type(), "weight");
    TORCH_CHECK(weight.dim() == 1 && weight.size(0) == n, name, ": expected weight of shape [", n,
                "], got ", weight.sizes());
    weight = weight.contiguous();
  } else {
    weight = at::empty({n}, input.options()).fill_(1);  // no affine weight
  }
  const double eps_value =
      eps.has_value() ? *eps : static_cast<double>(std::numeric_limits<float>::epsilon());

  // The kernel reads rows with unit stride in the normalized dimension.
  const at::Tensor x = input.stride(-1) == 1 ? input : input.contiguous();
  at::Tensor out = at::empty(input.sizes(), input.options());
  if (out.numel() > 0) {
    kernels().rmsNorm(toRef(out), toRef(x), toRef(weight), static_cast<float>(eps_value),
                      streamOf(out));
  }
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("rms_norm", rms_norm); }

}  // namespace
}  // namespace torch_infini::ops
