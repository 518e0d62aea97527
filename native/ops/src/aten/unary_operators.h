// Unary elementwise ATen operators on InfiniOps natives: one declaration
// each. elementwise.cpp registers the functional, in-place and out= schemas
// of every line (ATen's name, name_ and name.out), the registrations list (bridge_registrar.h)
// them; the work goes to the seam operator through the provider method.
//
//   X(aten name, seam operator, KernelProvider method, out= resizing)
//
// out= resizing: kIteratorOut as a TensorIterator output (the input's
// layout where out is resized), kContiguousOut contiguously (ATen kernels
// that are not TensorIterator ops, like relu.out). Adding one that InfiniOps
// has: a line here, a row in declared_support.cpp, the provider methods
// (docs/adding_an_operator.md).
#pragma once

#define TORCH_INFINI_UNARY_OPERATORS(X) \
  X(relu, Relu, relu, kContiguousOut)   \
  X(silu, Silu, silu, kIteratorOut)
