// Unary elementwise seam operators: one row each, plus the operator's row in
// seam_operators.h (its InfiniOps class and what InfiniOps declares). From
// the row: the ATen registrations (aten/elementwise.cpp: ATen's name, name_
// and name.out), the host provider's kernel (providers/host/host_provider.cpp
// runs the CPU expression on aliases `out` and `x` of the device views) and
// the InfiniOps provider's call (Class::Call(handle, config, x, out)).
//
//   X(aten name, seam operator, out= resizing, host kernel on CPU tensors out, x)
//
// out= resizing: kIteratorOut as a TensorIterator output (the input's
// layout where out is resized), kContiguousOut contiguously (ATen kernels
// that are not TensorIterator ops, like relu.out).
#pragma once

#include "torch_infini/ops/seam_operators.h"

// clang-format off
#define TORCH_INFINI_UNARY_OPERATORS(X) \
  X(relu, Relu, kContiguousOut, at::cpu::clamp_min_out(out, x, 0)) \
  X(silu, Silu, kIteratorOut, at::cpu::silu_out(out, x)) \
  X(sigmoid, Sigmoid, kIteratorOut, at::cpu::sigmoid_out(out, x))
// clang-format on

namespace torch_infini::ops {

// `op` is a row of TORCH_INFINI_UNARY_OPERATORS: KernelProvider::unary
// serves it.
constexpr bool isUnary(SeamOp op) {
  switch (op) {
#define TORCH_INFINI_UNARY_CASE(name, seam, ...) \
  case SeamOp::seam:                             \
    return true;
    TORCH_INFINI_UNARY_OPERATORS(TORCH_INFINI_UNARY_CASE)
#undef TORCH_INFINI_UNARY_CASE
    default:
      return false;
  }
}

}  // namespace torch_infini::ops
