// The CPU reference of infini's fused operators (torch.ops.infini.*): what
// they compute on CPU tensors, the tests' oracle, and the host provider's
// kernel. Argument checks included. Also what every fused*.cpp shares.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_infini::ops {

// The type the fused operators compute in: double for float64, else float.
inline c10::ScalarType wide(c10::ScalarType t) {
  return t == c10::ScalarType::Double ? c10::ScalarType::Double : c10::ScalarType::Float;
}

// What ADInplaceOrView does for ATen's in-place operators, for the in-place
// fused ones: autograd sees the tensor changed (saved for a backward, it
// raises there).
inline void bumpVersion(const at::Tensor& t) {
  if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
}

// silu(x[..., :h]) * x[..., h:] for x of shape [..., 2h].
at::Tensor siluAndMulReference(const at::Tensor& x);
// input * silu(gate), input and gate of one shape.
at::Tensor swigluReference(const at::Tensor& input, const at::Tensor& gate);

// softmax over the last dimension of x [..., s, t] (s <= t), row i over
// columns j <= t - s + i only (the others 0): a causal attention mask for s
// new queries after t - s cached keys.
at::Tensor causalSoftmaxReference(const at::Tensor& x);

void checkSiluAndMul(const at::Tensor& x);
void checkCausalSoftmax(const at::Tensor& x);
void checkSwiglu(const at::Tensor& input, const at::Tensor& gate);

}  // namespace torch_infini::ops
