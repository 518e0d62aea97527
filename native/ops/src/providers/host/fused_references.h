// The fused operators' CPU references written into given results
// (fused_references.cpp): the operators' CPU kernels (fused/activations.cpp)
// allocate them, the host provider passes the device tensors' own memory.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_infini::ops {

void siluAndMulInto(const at::Tensor& out, const at::Tensor& x);
void causalSoftmaxInto(const at::Tensor& out, const at::Tensor& x);
void swigluInto(const at::Tensor& out, const at::Tensor& input, const at::Tensor& gate);
// add_rms_norm's definition (fused/rms_norm.cpp, add_rms_norm_cpu), its
// operations in the same order: the same bits.
void addRmsNormInto(const at::Tensor& out, const at::Tensor& residual_out, const at::Tensor& input,
                    const at::Tensor& residual, const at::Tensor& weight, float eps);

}  // namespace torch_infini::ops
