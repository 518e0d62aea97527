// scaled_dot_product_attention picks its implementation through a dispatch
// stub keyed by device type; without an entry for infini it always takes the
// math decomposition, while the CPU runs its fused flash kernel: other
// roundings (float16 most of all) and other gradient layouts. infini makes
// the CPU's choice, so the fused CPU kernel (and its backward) runs whole in
// the CPU fallback and results are the CPU's. With dropout the math path
// stays: its random draws are refused until infini has a generator, where
// the fused kernel would draw from the CPU's.
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>

namespace torch_infini::ops {
namespace {

int64_t fusedSdpChoice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                       const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                       std::optional<double> scale, bool enable_gqa) {
  if (dropout_p > 0.0) return static_cast<int64_t>(at::SDPBackend::math);
  // The CPU's kernel of the choice operator decides from the arguments'
  // shapes, dtypes and flags, not their memory.
  return at::_ops::_fused_sdp_choice::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), query,
                                                 key, value, attn_mask, dropout_p, is_causal, scale,
                                                 enable_gqa);
}

}  // namespace
}  // namespace torch_infini::ops

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_infini::ops::fusedSdpChoice)
}  // namespace at::native
