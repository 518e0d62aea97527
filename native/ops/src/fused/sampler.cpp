// InfiniOps' top-k / top-p sampler as torch.ops.infini
// top_k_top_p_sample (docs/fused_operators.md; schema: library.cpp).
//
// logits [B, V], any floating dtype, read in float (as InfiniOps does); top_k
// integer [1] or [B] (<= 0 or > V: all V), top_p floating [1] or [B] (<= 0
// or >= 1: no top-p). Per row, InfiniOps' algorithm: the V logits in
// descending order (ties: the lower index first); keep the top k; then the
// shortest prefix of those whose probabilities, renormalized over the k,
// add up to top_p (the crossing one kept); draw from the softmax over the
// kept prefix. No temperature (callers divide the logits). Returns int64 [B]
// token ids.
//
// Random numbers: one uniform double per row from the logits' device
// generator (or `generator`), drawn first, so results follow
// torch.manual_seed and the device's RNG state like every random operator;
// the row's draw u picks the first kept token whose cumulative probability
// reaches u. (InfiniOps' own CPU sampler draws from std::mt19937_64 and is
// not used: its stream is not the device generator's.) The selection runs
// on the host on every backend, as InfiniOps' CPU sampler does: on infini
// the logits are copied to the host after the draw, and the ids back.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "common/bridge.h"
#include "common/random_dtypes.h"
#include "fused/registration.h"

namespace torch_infini::ops {
namespace {

constexpr const char* kName = "infini::top_k_top_p_sample";

// One value per row from a [1] or [B] tensor, as int64 or double on the CPU.
at::Tensor perRow(const char* what, const std::optional<at::Tensor>& t, int64_t rows,
                  c10::ScalarType dtype, bool integral) {
  if (!t.has_value() || !t->defined()) return at::Tensor();
  TORCH_CHECK(t->dim() == 1 && (t->size(0) == 1 || t->size(0) == rows), kName, ": expected ", what,
              " of shape [1] or [", rows, "], got ", t->sizes());
  TORCH_CHECK(integral ? at::isIntegralType(t->scalar_type(), /*includeBool=*/false)
                       : at::isFloatingType(t->scalar_type()),
              kName, ": expected ", integral ? "an integer " : "a floating-point ", what, ", got ",
              t->scalar_type());
  return t->to(at::kCPU).to(dtype).expand({rows}).contiguous();
}

void checkLogits(const at::Tensor& logits) {
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) > 0, kName,
              ": expected logits [batch, vocabulary] with a vocabulary, got ", logits.sizes());
  TORCH_CHECK(at::isFloatingType(logits.scalar_type()), kName,
              ": expected floating-point logits, got ", logits.scalar_type());
}

// The selection, on CPU tensors: logits [B, V], u [B] double in [0, 1).
at::Tensor selectTokens(const at::Tensor& logits, const at::Tensor& top_k, const at::Tensor& top_p,
                        const at::Tensor& u) {
  const int64_t rows = logits.size(0);
  const int64_t vocabulary = logits.size(1);
  const at::Tensor v = logits.to(at::kFloat);
  TORCH_CHECK(!v.isnan().any().item<bool>(), kName, ": the logits contain NaN");
  auto [sorted, order] = v.sort(/*stable=*/true, -1, /*descending=*/true);
  const at::Tensor position = at::arange(vocabulary, at::kLong).unsqueeze(0);  // [1, V]
  at::Tensor keep = at::full({rows, 1}, vocabulary, at::kLong);
  if (top_k.defined()) {
    const at::Tensor k = top_k.unsqueeze(1);
    keep = at::where((k <= 0) | (k > vocabulary), keep, k);
  }
  // exp(v - max) in float, kept entries only, summed in double.
  const at::Tensor weights = at::exp(sorted - sorted.narrow(1, 0, 1)).to(at::kDouble);
  auto kept = [&](const at::Tensor& w) {
    return at::where(position < keep, w, at::zeros({}, w.options()));
  };
  if (top_p.defined()) {
    const at::Tensor p = top_p.unsqueeze(1);
    const at::Tensor w = kept(weights);
    const at::Tensor cumulative = (w / w.sum(-1, /*keepdim=*/true)).cumsum(-1);
    // The shortest prefix reaching p: entries before it fall short of p.
    const at::Tensor reach = ((cumulative < p) & (position < keep)).sum(-1, /*keepdim=*/true) + 1;
    keep = at::where((p > 0) & (p < 1), at::minimum(reach, keep), keep);
  }
  const at::Tensor w = kept(weights);
  at::Tensor cumulative = (w / w.sum(-1, /*keepdim=*/true)).cumsum(-1);
  cumulative = at::where(position >= keep - 1, at::ones({}, cumulative.options()), cumulative);
  const at::Tensor pick = (cumulative < u.unsqueeze(1)).sum(-1, /*keepdim=*/true);
  return order.gather(1, pick).squeeze(1);
}

at::Tensor sample(const at::Tensor& logits, const std::optional<at::Tensor>& top_k,
                  const std::optional<at::Tensor>& top_p,
                  const std::optional<at::Generator>& generator) {
  checkLogits(logits);
  const int64_t rows = logits.size(0);
  const at::Tensor k = perRow("top_k", top_k, rows, at::kLong, true);
  const at::Tensor p = perRow("top_p", top_p, rows, at::kDouble, false);
  // The draw first, on the logits' device and generator, in stream order.
  const at::Tensor u =
      at::empty({rows}, logits.options().dtype(at::kDouble)).uniform_(0, 1, generator);
  if (rows == 0) return at::empty({0}, logits.options().dtype(at::kLong));
  const at::Tensor ids = selectTokens(logits.to(at::kCPU), k, p, u.to(at::kCPU));
  return ids.to(logits.device());
}

at::Tensor sample_meta(const at::Tensor& logits, const std::optional<at::Tensor>& /*top_k*/,
                       const std::optional<at::Tensor>& /*top_p*/,
                       const std::optional<at::Generator>& /*generator*/) {
  checkLogits(logits);
  return at::empty({logits.size(0)}, logits.options().dtype(at::kLong));
}

// ---- the operator (schema: library.cpp) ------------------------------------------------

// The same kernel for CPU and infini tensors: the draw on the tensors' own
// device and generator, the selection on the host; every floating dtype of
// logits. Token ids have no gradient.
struct TopKTopPSample {
  static constexpr const char* name = "infini::top_k_top_p_sample";
  static constexpr auto cpu = &sample;
  static constexpr auto meta = &sample_meta;
  static constexpr auto infini = &sample;
  static constexpr const char* family = "random";
  static constexpr auto accepts = &floatingDtype;
  static constexpr bool no_gradient = true;
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(infini, m) { registerFused<TopKTopPSample>(m); }

}  // namespace torch_infini::ops
