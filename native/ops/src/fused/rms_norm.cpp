// The residual-add RMSNorm family of InfiniOps as torch.ops.infini
// operators (docs/fused_operators.md; schemas: library.cpp):
//
//   add_rms_norm -> (out, residual_out)
//     residual_out = input + residual, rounded to the input's dtype; out =
//     (residual_out * weight) * rsqrt(mean(residual_out^2, -1) + eps),
//     computed in float (double for float64), rounded once. Differentiable.
//   fused_add_rms_norm, in place on input and residual
//     vLLM's in-place form: residual <- input + residual (rounded), input <-
//     (residual * rsqrt(...)) * weight. No derivative (it overwrites its
//     inputs): with a gradient required it raises, naming add_rms_norm.
//
// InfiniOps implements both for CUDA-like device types only (none on its CPU
// build, so none on `host`): on infini they run in the CPU fallback, under
// its policy, until those device types are wired to the seam.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "aten/bridge.h"
#include "fused/common.h"
#include "fused/registration.h"

namespace torch_infini::ops {
namespace {

void checkAddRmsNorm(const char* name, const at::Tensor& input, const at::Tensor& residual,
                     const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(at::isFloatingType(input.scalar_type()), name,
              ": expected a floating-point input, got ", input.scalar_type());
  TORCH_CHECK(input.dim() >= 1, name, ": expected an input with a normalized last dimension, got ",
              input.dim(), "-D");
  TORCH_CHECK(residual.scalar_type() == input.scalar_type() && residual.sizes() == input.sizes(),
              name, ": residual must have the input's shape and dtype, got ", residual.sizes(), " ",
              residual.scalar_type(), " for input ", input.sizes(), " ", input.scalar_type());
  checkSameDevice(input, residual);
  if (weight.has_value() && weight->defined()) {
    TORCH_CHECK(weight->dim() == 1 && weight->size(0) == input.size(-1), name,
                ": expected weight of shape [", input.size(-1), "], got ", weight->sizes());
    TORCH_CHECK(at::isFloatingType(weight->scalar_type()), name,
                ": expected a floating-point weight, got ", weight->scalar_type());
    checkSameDevice(input, *weight);
  }
}

// 1 / sqrt(mean(x^2, -1) + eps) of the wide rounded sum x, [..., 1].
at::Tensor inverseRms(const at::Tensor& x, double eps) {
  return at::rsqrt(x.square().mean(-1, /*keepdim=*/true) + eps);
}

// ---- add_rms_norm --------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> add_rms_norm_cpu(const at::Tensor& input,
                                                    const at::Tensor& residual,
                                                    const at::Tensor& weight, double eps) {
  checkAddRmsNorm("infini::add_rms_norm", input, residual, weight);
  const c10::ScalarType dtype = input.scalar_type();
  const c10::ScalarType w = wide(dtype);
  at::Tensor residual_out = (input.to(w) + residual.to(w)).to(dtype);
  const at::Tensor x = residual_out.to(w);  // the rounded sum, as the kernel reads it back
  at::Tensor out = ((x * weight.to(w)) * inverseRms(x, eps)).to(dtype);
  return {out, residual_out};
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_meta(const at::Tensor& input,
                                                     const at::Tensor& residual,
                                                     const at::Tensor& weight, double /*eps*/) {
  checkAddRmsNorm("infini::add_rms_norm", input, residual, weight);
  return {at::empty(input.sizes(), input.options()), at::empty(input.sizes(), input.options())};
}

// ---- the operators (schemas: library.cpp) ----------------------------------------------

void fused_add_rms_norm_cpu(at::Tensor& input, at::Tensor& residual,
                            const std::optional<at::Tensor>& weight, double eps);
void fused_add_rms_norm_meta(at::Tensor& input, at::Tensor& residual,
                             const std::optional<at::Tensor>& weight, double eps);
std::tuple<at::Tensor, at::Tensor> add_rms_norm_autograd(const at::Tensor& input,
                                                         const at::Tensor& residual,
                                                         const at::Tensor& weight, double eps);
void fused_add_rms_norm_autograd(at::Tensor& input, at::Tensor& residual,
                                 const std::optional<at::Tensor>& weight, double eps);

// ---- the operators (schemas: library.cpp) ----------------------------------------------

struct AddRmsNorm {
  static constexpr const char* name = "infini::add_rms_norm";
  static constexpr auto cpu = &add_rms_norm_cpu;
  static constexpr auto meta = &add_rms_norm_meta;
  static constexpr auto autograd = &add_rms_norm_autograd;
};
struct FusedAddRmsNorm {
  static constexpr const char* name = "infini::fused_add_rms_norm";
  static constexpr auto cpu = &fused_add_rms_norm_cpu;
  static constexpr auto meta = &fused_add_rms_norm_meta;
  static constexpr auto autograd = &fused_add_rms_norm_autograd;
};

// d/dx of y = w * x * r, r = (mean(x^2) + eps)^-1/2 over the last dimension:
// r * (g * w) - x * r^3 * mean(g * w * x); d/dw = sum over rows of g * x * r.
class AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& input, const at::Tensor& residual,
                                                const at::Tensor& weight, double eps) {
    auto [out, residual_out] = callBelowAutograd<AddRmsNorm>(input, residual, weight, eps);
    ctx->save_for_backward({residual_out, weight});
    ctx->saved_data["eps"] = eps;
    return {out, residual_out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& residual_out = saved[0];
    const at::Tensor& weight = saved[1];
    const double eps = ctx->saved_data["eps"].toDouble();
    const c10::ScalarType dtype = residual_out.scalar_type();
    const c10::ScalarType w = wide(dtype);
    const at::Tensor x = residual_out.to(w);
    const at::Tensor r = inverseRms(x, eps);
    at::Tensor d_sum = at::zeros_like(x);
    at::Tensor d_weight;
    if (grads[0].defined()) {
      const at::Tensor g = grads[0].to(w);
      const at::Tensor gw = g * weight.to(w);
      d_sum = d_sum + r * gw - x * r.pow(3) * (gw * x).mean(-1, /*keepdim=*/true);
      d_weight = (g * x * r).reshape({-1, x.size(-1)}).sum(0).to(weight.scalar_type());
    }
    if (grads[1].defined()) d_sum = d_sum + grads[1].to(w);
    at::Tensor d_input = d_sum.to(dtype);
    return {d_input, d_input.clone(), d_weight, at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor> add_rms_norm_autograd(const at::Tensor& input,
                                                         const at::Tensor& residual,
                                                         const at::Tensor& weight, double eps) {
  auto outputs = AddRmsNormFunction::apply(input, residual, weight, eps);
  return {outputs[0], outputs[1]};
}

// ---- fused_add_rms_norm ------------------------------------------------------------

void fused_add_rms_norm_cpu(at::Tensor& input, at::Tensor& residual,
                            const std::optional<at::Tensor>& weight, double eps) {
  checkAddRmsNorm("infini::fused_add_rms_norm", input, residual, weight);
  const c10::ScalarType dtype = input.scalar_type();
  const c10::ScalarType w = wide(dtype);
  residual.copy_((input.to(w) + residual.to(w)).to(dtype));
  const at::Tensor x = residual.to(w);
  at::Tensor y = x * inverseRms(x, eps);
  if (weight.has_value() && weight->defined()) y = y * weight->to(w);
  input.copy_(y.to(dtype));
}

void fused_add_rms_norm_meta(at::Tensor& input, at::Tensor& residual,
                             const std::optional<at::Tensor>& weight, double /*eps*/) {
  checkAddRmsNorm("infini::fused_add_rms_norm", input, residual, weight);
}

void fused_add_rms_norm_autograd(at::Tensor& input, at::Tensor& residual,
                                 const std::optional<at::Tensor>& weight, double eps) {
  const bool weight_grad = weight.has_value() && weight->defined() && weight->requires_grad();
  TORCH_CHECK(!at::GradMode::is_enabled() ||
                  !(input.requires_grad() || residual.requires_grad() || weight_grad),
              "infini::fused_add_rms_norm overwrites input and residual in place and has no "
              "derivative; for training use infini::add_rms_norm "
              "(torch_infini.ops.add_rms_norm), which returns both results and differentiates");
  callBelowAutograd<FusedAddRmsNorm>(input, residual, weight, eps);
  bumpVersion(input);
  bumpVersion(residual);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(infini, m) {
  registerFused<AddRmsNorm>(m);
  registerFused<FusedAddRmsNorm>(m);
}

}  // namespace torch_infini::ops
