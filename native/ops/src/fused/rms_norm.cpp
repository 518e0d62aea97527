// The RMSNorm family of InfiniOps as torch.ops.infini operators
// (docs/fused_operators.md; schemas: library.cpp):
//
//   rms_norm -> out
//     out = (input * weight) * rsqrt(mean(input^2, -1) + eps), computed in
//     float (double for float64), rounded once; weight [hidden] of the
//     input's dtype. InfiniOps' rms_norm kernel (as aten::rms_norm on
//     infini, through the seam). Differentiable. The compiler plug-in's
//     graph pass rewrites RMSNorm modules into it.
//   add_rms_norm -> (out, residual_out)
//     residual_out = input + residual, rounded to the input's dtype; out =
//     (residual_out * weight) * rsqrt(mean(residual_out^2, -1) + eps),
//     computed in float (double for float64), rounded once. Differentiable.
//   fused_add_rms_norm, in place on input and residual
//     vLLM's in-place form: residual <- input + residual (rounded), input <-
//     (residual * rsqrt(...)) * weight. No derivative (it overwrites its
//     inputs): with a gradient required it raises, naming add_rms_norm.
//
// fused_add_rms_norm and add_rms_norm are seam operators (InfiniOps'
// FusedAddRmsNorm, on CUDA-like device types and Cambricon, and AddRmsNorm,
// on CUDA-like device types, each multiplying by the weight where its
// definition does; `host` runs the CPU references on the device memory):
// layouts the kernels do not take are refused to the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/grad_mode.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "common/bridge.h"
#include "common/fused_helpers.h"
#include "fused/registration.h"

namespace torch_infini::ops {
namespace {

void checkAddRmsNorm(const char* name, const at::Tensor& input, const at::Tensor& residual,
                     const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(at::isFloatingType(input.scalar_type()), name,
              ": expected a floating-point input, got ", input.scalar_type());
  TORCH_CHECK(input.dim() >= 1, name, ": expected an input with a normalized last dimension, got ",
              input.dim(), "-D");
  // Sizes compared symbolically: the Meta kernel serves torch.compile(dynamic=True).
  TORCH_CHECK(residual.scalar_type() == input.scalar_type() && residual.dim() == input.dim(), name,
              ": residual must have the input's shape and dtype, got ", residual.sym_sizes(), " ",
              residual.scalar_type(), " for input ", input.sym_sizes(), " ", input.scalar_type());
  for (int64_t d = 0; d < input.dim(); ++d) {
    TORCH_SYM_CHECK(residual.sym_size(d).sym_eq(input.sym_size(d)), name,
                    ": residual must have the input's shape and dtype, got ", residual.sym_sizes(),
                    " for input ", input.sym_sizes());
  }
  checkSameDevice(input, residual);
  if (weight.has_value() && weight->defined()) {
    TORCH_CHECK(weight->dim() == 1, name, ": expected a 1-D weight, got ", weight->dim(), "-D");
    TORCH_SYM_CHECK(weight->sym_size(0).sym_eq(input.sym_size(-1)), name,
                    ": expected weight of shape [", input.sym_size(-1), "], got ",
                    weight->sym_sizes());
    TORCH_CHECK(at::isFloatingType(weight->scalar_type()), name,
                ": expected a floating-point weight, got ", weight->scalar_type());
    checkSameDevice(input, *weight);
  }
}

// 1 / sqrt(mean(x^2, -1) + eps) of the wide rounded sum x, [..., 1].
at::Tensor inverseRms(const at::Tensor& x, double eps) {
  return at::rsqrt(x.square().mean(-1, /*keepdim=*/true) + eps);
}

// ---- rms_norm ------------------------------------------------------------------------

void checkRmsNorm(const at::Tensor& input, const at::Tensor& weight) {
  constexpr const char* name = "infini::rms_norm";
  TORCH_CHECK(at::isFloatingType(input.scalar_type()), name,
              ": expected a floating-point input, got ", input.scalar_type());
  TORCH_CHECK(input.dim() >= 1, name, ": expected an input with a normalized last dimension, got ",
              input.dim(), "-D");
  TORCH_CHECK(weight.scalar_type() == input.scalar_type(), name,
              ": weight must have the input's dtype, got ", weight.scalar_type(), " for input ",
              input.scalar_type());
  TORCH_CHECK(weight.dim() == 1, name, ": expected a 1-D weight, got ", weight.dim(), "-D");
  TORCH_SYM_CHECK(weight.sym_size(0).sym_eq(input.sym_size(-1)), name,
                  ": expected weight of shape [", input.sym_size(-1), "], got ",
                  weight.sym_sizes());
  checkSameDevice(input, weight);
}

at::Tensor rms_norm_cpu(const at::Tensor& input, const at::Tensor& weight, double eps) {
  checkRmsNorm(input, weight);
  const c10::ScalarType w = wide(input.scalar_type());
  const at::Tensor x = input.to(w);
  return ((x * weight.to(w)) * inverseRms(x, eps)).to(input.scalar_type());
}

at::Tensor rms_norm_meta(const at::Tensor& input, const at::Tensor& weight, double /*eps*/) {
  checkRmsNorm(input, weight);
  return at::empty_symint(input.sym_sizes(), input.options());
}

at::Tensor rms_norm_infini(const at::Tensor& input, const at::Tensor& weight, double eps) {
  checkRmsNorm(input, weight);
  requireKernel("infini::rms_norm", SeamOp::RmsNorm, input.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(input.dim() == 2 || input.dim() == 3,
                              "infini::rms_norm: the infini kernel takes 2-D and 3-D inputs, got ",
                              input.dim(), "-D input of shape ", input.sizes());
  const at::Tensor x = input.contiguous();
  const at::Tensor w = weight.contiguous();
  at::Tensor out = emptyOnDevice(x, x.sizes());
  if (out.numel() > 0) {
    selectedKernelProvider().rmsNorm(toRef(out), toRef(x), toRef(w), static_cast<float>(eps),
                                     streamOf(out));
  }
  return out;
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
  return {at::empty_symint(input.sym_sizes(), input.options()),
          at::empty_symint(input.sym_sizes(), input.options())};
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_infini(const at::Tensor& input,
                                                       const at::Tensor& residual,
                                                       const at::Tensor& weight, double eps) {
  constexpr const char* name = "infini::add_rms_norm";
  checkAddRmsNorm(name, input, residual, weight);
  requireKernel(name, SeamOp::AddRmsNorm, input.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(input.dim() == 2 || input.dim() == 3, name,
                              ": the infini kernel takes 2-D and 3-D inputs, got ", input.dim(),
                              "-D input of shape ", input.sizes());
  TORCH_CHECK_NOT_IMPLEMENTED(weight.scalar_type() == input.scalar_type(), name,
                              ": the infini kernel takes a weight of the input's dtype, got ",
                              weight.scalar_type(), " for input ", input.scalar_type());
  // The CPU's results take strided inputs' layout; the kernel writes dense ones.
  TORCH_CHECK_NOT_IMPLEMENTED(input.is_contiguous() && residual.is_contiguous(), name,
                              ": the infini kernel takes contiguous input and residual, got "
                              "strides ",
                              input.strides(), " and ", residual.strides());
  const at::Tensor w = weight.contiguous();
  at::Tensor out = emptyOnDevice(input, input.sizes());
  at::Tensor residual_out = emptyOnDevice(input, input.sizes());
  if (out.numel() > 0) {
    selectedKernelProvider().addRmsNorm(toRef(out), toRef(residual_out), toRef(input),
                                        toRef(residual), toRef(w), static_cast<float>(eps),
                                        streamOf(out));
  }
  return {out, residual_out};
}

// ---- declared here, defined below: the kernels the structs name ------------------------

at::Tensor rms_norm_autograd(const at::Tensor& input, const at::Tensor& weight, double eps);
void fused_add_rms_norm_cpu(at::Tensor& input, at::Tensor& residual,
                            const std::optional<at::Tensor>& weight, double eps);
void fused_add_rms_norm_meta(at::Tensor& input, at::Tensor& residual,
                             const std::optional<at::Tensor>& weight, double eps);
std::tuple<at::Tensor, at::Tensor> add_rms_norm_autograd(const at::Tensor& input,
                                                         const at::Tensor& residual,
                                                         const at::Tensor& weight, double eps);
void fused_add_rms_norm_autograd(at::Tensor& input, at::Tensor& residual,
                                 const std::optional<at::Tensor>& weight, double eps);
void fused_add_rms_norm_infini(at::Tensor& input, at::Tensor& residual,
                               const std::optional<at::Tensor>& weight, double eps);

// ---- the operators (schemas: library.cpp) ----------------------------------------------

struct RmsNorm {
  static constexpr const char* name = "infini::rms_norm";
  static constexpr auto cpu = &rms_norm_cpu;
  static constexpr auto meta = &rms_norm_meta;
  static constexpr auto infini = &rms_norm_infini;
  static constexpr SeamOp seam = SeamOp::RmsNorm;
  static constexpr auto autograd = &rms_norm_autograd;
};
struct AddRmsNorm {
  static constexpr const char* name = "infini::add_rms_norm";
  static constexpr auto cpu = &add_rms_norm_cpu;
  static constexpr auto meta = &add_rms_norm_meta;
  static constexpr auto infini = &add_rms_norm_infini;
  static constexpr SeamOp seam = SeamOp::AddRmsNorm;
  static constexpr auto autograd = &add_rms_norm_autograd;
};
struct FusedAddRmsNorm {
  static constexpr const char* name = "infini::fused_add_rms_norm";
  static constexpr auto cpu = &fused_add_rms_norm_cpu;
  static constexpr auto meta = &fused_add_rms_norm_meta;
  static constexpr auto autograd = &fused_add_rms_norm_autograd;
  static constexpr auto infini = &fused_add_rms_norm_infini;
  static constexpr SeamOp seam = SeamOp::FusedAddRmsNorm;
};

// d/dx of y = w * x * r, r = (mean(x^2) + eps)^-1/2 over the last dimension:
// r * (g * w) - x * r^3 * mean(g * w * x); d/dw = sum over rows of g * x * r.
// In float (double for float64) from the rounded x; (d/dx wide, d/dw).
std::pair<at::Tensor, at::Tensor> rmsNormGrads(const at::Tensor& grad, const at::Tensor& x_rounded,
                                               const at::Tensor& weight, double eps) {
  const c10::ScalarType w = wide(x_rounded.scalar_type());
  const at::Tensor x = x_rounded.to(w);
  const at::Tensor r = inverseRms(x, eps);
  const at::Tensor g = grad.to(w);
  const at::Tensor gw = g * weight.to(w);
  at::Tensor d_x = r * gw - x * r.pow(3) * (gw * x).mean(-1, /*keepdim=*/true);
  // Symbolic sizes: an int would specialize a compiled backward.
  at::Tensor d_weight =
      (g * x * r).reshape_symint({-1, x.sym_size(-1)}).sum(0).to(weight.scalar_type());
  return {d_x, d_weight};
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& weight, double eps) {
    at::Tensor out = callBelowAutograd<RmsNorm>(input, weight, eps);
    ctx->save_for_backward({input, weight});
    ctx->saved_data["eps"] = eps;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [d_x, d_weight] =
        rmsNormGrads(grads[0], saved[0], saved[1], ctx->saved_data["eps"].toDouble());
    return {d_x.to(saved[0].scalar_type()), d_weight, at::Tensor()};
  }
};

at::Tensor rms_norm_autograd(const at::Tensor& input, const at::Tensor& weight, double eps) {
  return RmsNormFunction::apply(input, weight, eps);
}

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
    at::Tensor d_sum = at::zeros_like(residual_out, residual_out.options().dtype(w));
    at::Tensor d_weight;
    if (grads[0].defined()) {
      auto [d_x, d_w] = rmsNormGrads(grads[0], residual_out, weight, eps);
      d_sum = d_sum + d_x;
      d_weight = d_w;
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

// input viewed as [rows, hidden], if its leading dimensions collapse into
// one evenly strided dimension (no copy: the kernel writes through it).
std::optional<at::Tensor> asRows(const at::Tensor& t) {
  const int64_t hidden = t.dim() == 0 ? 1 : t.size(-1);
  const int64_t rows = hidden == 0 ? 0 : t.numel() / hidden;
  const std::vector<int64_t> shape{rows, hidden};
  if (!at::detail::computeStride(t.sizes(), t.strides(), shape).has_value()) return std::nullopt;
  return t.view(shape);
}

void fused_add_rms_norm_infini(at::Tensor& input, at::Tensor& residual,
                               const std::optional<at::Tensor>& weight, double eps) {
  constexpr const char* kName = "infini::fused_add_rms_norm";
  checkAddRmsNorm(kName, input, residual, weight);
  requireKernel(kName, SeamOp::FusedAddRmsNorm, input.scalar_type());
  const bool has_weight = weight.has_value() && weight->defined();
  TORCH_CHECK_NOT_IMPLEMENTED(!has_weight || weight->scalar_type() == input.scalar_type(), kName,
                              ": the kernel takes a weight of the input's dtype, got ",
                              has_weight ? weight->scalar_type() : input.scalar_type(),
                              " for input ", input.scalar_type());
  // Written in place: overlapping arguments would make the result depend on
  // the order the kernel writes in (the CPU kernel decides it, or raises).
  // (Views of one storage whose overlap ATen cannot decide count as overlapping.)
  const bool apart = !input.storage().is_alias_of(residual.storage()) ||
                     at::get_overlap_status(input, residual) == at::MemOverlapStatus::No;
  TORCH_CHECK_NOT_IMPLEMENTED(at::has_internal_overlap(input) != at::MemOverlap::Yes &&
                                  at::has_internal_overlap(residual) != at::MemOverlap::Yes &&
                                  apart,
                              kName,
                              ": the kernel writes input and residual in place: they must "
                              "not overlap themselves or each other");
  const std::optional<at::Tensor> x = asRows(input);
  const std::optional<at::Tensor> r = asRows(residual);
  // Rows at least a row apart: no two rows share an element.
  const auto unitColumns = [](const std::optional<at::Tensor>& t) {
    return t.has_value() && (t->size(1) <= 1 || t->stride(1) == 1) &&
           (t->size(0) <= 1 || t->stride(0) >= t->size(1));
  };
  TORCH_CHECK_NOT_IMPLEMENTED(
      unitColumns(x) && unitColumns(r), kName,
      ": the kernel takes input and residual with a unit stride in the last dimension and evenly "
      "strided rows, got strides ",
      input.strides(), " and ", residual.strides());
  if (input.numel() == 0) return;
  const at::Tensor w = has_weight ? weight->contiguous() : at::Tensor();
  const TensorRef weight_ref = has_weight ? toRef(w) : TensorRef{};
  selectedKernelProvider().fusedAddRmsNorm(toRef(*x), toRef(*r), has_weight ? &weight_ref : nullptr,
                                           static_cast<float>(eps), streamOf(input));
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
  registerFused<RmsNorm>(m);
  registerFused<AddRmsNorm>(m);
  registerFused<FusedAddRmsNorm>(m);
}

}  // namespace torch_infini::ops
