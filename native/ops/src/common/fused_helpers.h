// What the fused operators (torch.ops.infini.*, fused/) and ATen kernels
// computing the same way share: the type they compute in, and the version
// bump of the in-place ones.
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

}  // namespace torch_infini::ops
