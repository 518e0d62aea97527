// The fused activations' CPU references written into a given result
// (fused_references.cpp): the operators' CPU kernels (fused/activations.cpp)
// allocate it, the host provider passes the device tensor's own memory.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_infini::ops {

void siluAndMulInto(const at::Tensor& out, const at::Tensor& x);
void causalSoftmaxInto(const at::Tensor& out, const at::Tensor& x);
void swigluInto(const at::Tensor& out, const at::Tensor& input, const at::Tensor& gate);

}  // namespace torch_infini::ops
