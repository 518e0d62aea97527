// InfiniOps' (vLLM's) mixture-of-experts routing as torch.ops.infini
// topk_softmax (docs/fused_operators.md; schema: library.cpp), returning
// (weights, indices, token_expert_indices).
//
// gating_output [T, E] (float16, bfloat16, float32): per token, the softmax
// of the expert logits in float; the topk experts by softmax + bias (bias
// [E] float32 moves the choice only), ties to the lower expert index;
// weights [T, topk] float32 their softmax values (times 1 / their sum with
// renormalize); indices [T, topk] int32 (-1 on padding tokens, whose
// weights are still written); token_expert_indices [T, topk] int32,
// k * T + t. Non-finite probabilities count as 0.
//
// Differentiable in gating_output through the weights (softmax's backward,
// or the backward of the softmax over the chosen experts with renormalize);
// the choice itself has no gradient. On infini it is the seam's TopkSoftmax
// (InfiniOps' kernel on its CUDA-like device types; host: this reference on
// the device memory).
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cstdint>
#include <limits>
#include <tuple>

#include "common/bridge.h"
#include "fused/registration.h"

namespace torch_infini::ops {
namespace {

constexpr const char* kName = "infini::topk_softmax";

void checkTopkSoftmax(const at::Tensor& gating, int64_t topk, const std::optional<at::Tensor>& bias,
                      const std::optional<at::Tensor>& is_padding) {
  TORCH_CHECK(gating.dim() == 2, kName, ": expected gating_output [tokens, experts], got ",
              gating.sizes());
  TORCH_CHECK(gating.scalar_type() == at::kFloat || gating.scalar_type() == at::kHalf ||
                  gating.scalar_type() == at::kBFloat16,
              kName, ": expected float32, float16 or bfloat16 gating_output, got ",
              gating.scalar_type());
  TORCH_CHECK(topk >= 1 && topk <= gating.size(1), kName, ": topk must be in [1, ", gating.size(1),
              "], got ", topk);
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(
        bias->scalar_type() == at::kFloat && bias->dim() == 1 && bias->size(0) == gating.size(1),
        kName, ": expected a float32 bias [", gating.size(1), "], got ", bias->scalar_type(), " ",
        bias->sizes());
    checkSameDevice(gating, *bias);
  }
  if (is_padding.has_value() && is_padding->defined()) {
    TORCH_CHECK(
        is_padding->dim() == 1 && is_padding->size(0) == gating.size(0) &&
            (is_padding->scalar_type() == at::kBool || is_padding->scalar_type() == at::kByte),
        kName, ": expected a bool or uint8 is_padding [", gating.size(0), "], got ",
        is_padding->scalar_type(), " ", is_padding->sizes());
    checkSameDevice(gating, *is_padding);
  }
}

// Softmax over experts in float, non-finite values as 0.
at::Tensor probabilities(const at::Tensor& gating) {
  const at::Tensor p = at::softmax(gating.to(at::kFloat), -1);
  return at::where(at::isfinite(p), p, at::zeros({}, p.options()));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> topk_softmax_cpu(
    const at::Tensor& gating, int64_t topk, bool renormalize, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& is_padding) {
  checkTopkSoftmax(gating, topk, bias, is_padding);
  const int64_t tokens = gating.size(0);
  const at::Tensor p = probabilities(gating);
  const at::Tensor score = bias.has_value() && bias->defined() ? p + *bias : p;
  // A stable descending sort: equal scores keep the lower expert first.
  const at::Tensor chosen =
      std::get<1>(score.sort(/*stable=*/true, -1, /*descending=*/true)).narrow(-1, 0, topk);
  at::Tensor weights = p.gather(-1, chosen);
  if (renormalize) {
    const at::Tensor sum = weights.sum(-1, /*keepdim=*/true);
    weights = at::where(sum > 0, weights * sum.reciprocal(), weights);
  }
  at::Tensor indices = chosen.to(at::kInt);
  if (is_padding.has_value() && is_padding->defined())
    indices.masked_fill_(is_padding->to(at::kBool).unsqueeze(-1), -1);
  const at::Tensor token_expert =
      (at::arange(topk, gating.options().dtype(at::kInt)).unsqueeze(0) * tokens +
       at::arange(tokens, gating.options().dtype(at::kInt)).unsqueeze(1))
          .contiguous();
  return {weights, indices, token_expert};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> topk_softmax_meta(
    const at::Tensor& gating, int64_t topk, bool /*renormalize*/,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& is_padding) {
  checkTopkSoftmax(gating, topk, bias, is_padding);
  const auto options = gating.options();
  return {at::empty({gating.size(0), topk}, options.dtype(at::kFloat)),
          at::empty({gating.size(0), topk}, options.dtype(at::kInt)),
          at::empty({gating.size(0), topk}, options.dtype(at::kInt))};
}

// The seam's TopkSoftmax: what the kernel does not take (a dtype its
// provider lacks, sizes past int32 indexing) runs in the CPU fallback.
std::tuple<at::Tensor, at::Tensor, at::Tensor> topk_softmax_infini(
    const at::Tensor& gating, int64_t topk, bool renormalize, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& is_padding) {
  checkTopkSoftmax(gating, topk, bias, is_padding);
  requireKernel(kName, SeamOp::TopkSoftmax, gating.scalar_type());
  const int64_t tokens = gating.size(0);
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  TORCH_CHECK_NOT_IMPLEMENTED(gating.size(1) <= kInt32Max && tokens <= kInt32Max / topk, kName,
                              ": the kernel indexes in int32, got gating_output ", gating.sizes(),
                              " and topk ", topk);
  const auto options = gating.options();
  at::Tensor weights = at::empty({tokens, topk}, options.dtype(at::kFloat));
  at::Tensor indices = at::empty({tokens, topk}, options.dtype(at::kInt));
  at::Tensor token_expert = at::empty({tokens, topk}, options.dtype(at::kInt));
  if (tokens == 0) return {weights, indices, token_expert};
  const at::Tensor g = gating.contiguous();
  const bool has_bias = bias.has_value() && bias->defined();
  const at::Tensor b = has_bias ? bias->contiguous() : at::Tensor();
  const bool has_padding = is_padding.has_value() && is_padding->defined();
  // The kernel reads one byte per token, nonzero for padding: a bool
  // tensor's bytes as they are.
  const at::Tensor p = has_padding ? is_padding->contiguous().view(at::kByte) : at::Tensor();
  const TensorRef bias_ref = has_bias ? toRef(b) : TensorRef{};
  const TensorRef padding_ref = has_padding ? toRef(p) : TensorRef{};
  selectedKernelProvider().topkSoftmax(
      toRef(weights), toRef(indices), toRef(token_expert), toRef(g), has_bias ? &bias_ref : nullptr,
      has_padding ? &padding_ref : nullptr, renormalize, streamOf(weights));
  return {weights, indices, token_expert};
}

// ---- declared here, defined below: the kernels the structs name ------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor> topk_softmax_autograd(
    const at::Tensor& gating, int64_t topk, bool renormalize, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& is_padding);

// ---- the operators (schemas: library.cpp) ----------------------------------------------

struct TopkSoftmax {
  static constexpr const char* name = "infini::topk_softmax";
  static constexpr auto cpu = &topk_softmax_cpu;
  static constexpr auto meta = &topk_softmax_meta;
  static constexpr auto autograd = &topk_softmax_autograd;
  static constexpr auto infini = &topk_softmax_infini;
  static constexpr SeamOp seam = SeamOp::TopkSoftmax;
};

// ---- autograd --------------------------------------------------------------------------

class TopkSoftmaxFunction : public torch::autograd::Function<TopkSoftmaxFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& gating, int64_t topk,
                                                bool renormalize,
                                                const std::optional<at::Tensor>& bias,
                                                const std::optional<at::Tensor>& is_padding) {
    auto [weights, indices, token_expert] =
        callBelowAutograd<TopkSoftmax>(gating, topk, renormalize, bias, is_padding);
    ctx->save_for_backward({gating, weights, indices, bias.has_value() ? *bias : at::Tensor()});
    ctx->saved_data["renormalize"] = renormalize;
    ctx->mark_non_differentiable({indices, token_expert});
    return {weights, indices, token_expert};
  }

  // d weights / d gating: the softmax's backward of the gradient scattered to
  // the chosen experts; with renormalize, first the backward of w / sum(w).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& gating = saved[0];
    const at::Tensor& weights = saved[1];
    // Padding rows hold -1: their experts are recovered from the probabilities.
    const at::Tensor p = probabilities(gating);
    at::Tensor g = grads[0].defined() ? grads[0].to(at::kFloat) : at::zeros_like(weights);
    const at::Tensor chosen = chosenExperts(p, saved[3], weights.size(-1), saved[2]);
    if (ctx->saved_data["renormalize"].toBool()) {
      const at::Tensor selected = p.gather(-1, chosen);
      const at::Tensor sum = selected.sum(-1, /*keepdim=*/true);
      g = at::where(sum > 0, (g - (g * weights).sum(-1, /*keepdim=*/true)) / sum, g);
    }
    const at::Tensor d_p = at::zeros_like(p).scatter_add(-1, chosen, g);
    const at::Tensor d_gating =
        at::_softmax_backward_data(d_p, at::softmax(gating.to(at::kFloat), -1), -1, at::kFloat);
    return {d_gating.to(gating.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }

 private:
  // The experts of each row: the indices output, except on padding rows
  // (-1), where the forward's choice is made again (probabilities + bias,
  // stable order).
  static at::Tensor chosenExperts(const at::Tensor& p, const at::Tensor& bias, int64_t topk,
                                  const at::Tensor& indices) {
    const at::Tensor idx = indices.to(at::kLong);
    const at::Tensor padded = (idx < 0).any(-1, /*keepdim=*/true);
    if (!padded.any().item<bool>()) return idx;
    const at::Tensor score = bias.defined() ? p + bias : p;
    const at::Tensor again =
        std::get<1>(score.sort(/*stable=*/true, -1, /*descending=*/true)).narrow(-1, 0, topk);
    return at::where(padded, again, idx);
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> topk_softmax_autograd(
    const at::Tensor& gating, int64_t topk, bool renormalize, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& is_padding) {
  auto out = TopkSoftmaxFunction::apply(gating, topk, renormalize, bias, is_padding);
  return {out[0], out[1], out[2]};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(infini, m) { registerFused<TopkSoftmax>(m); }

}  // namespace torch_infini::ops
