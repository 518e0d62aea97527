// Helpers shared by the ATen bridge translation units.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "torch_infini/ops/kernel_provider.h"
#include "torch_infini/runtime/backend.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini::ops {

inline bool isInfini(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

inline TensorRef toRef(const at::Tensor& t) {
  TensorRef ref;
  ref.data = t.data_ptr();
  ref.dtype = t.scalar_type();
  ref.device = isInfini(t) ? t.device().index() : -1;
  ref.sizes.assign(t.sizes().begin(), t.sizes().end());
  ref.strides.assign(t.strides().begin(), t.strides().end());
  return ref;
}

// The current stream of the tensor's device, as a runtime handle.
inline runtime::StreamHandle streamOf(const at::Tensor& t) {
  return nativeStream(currentStream(t.device().index()));
}

// Raises NotImplementedError unless the provider supports (op, dtype).
inline void requireKernel(const char* aten_op, Op op, c10::ScalarType dtype) {
  KernelProvider& k = kernels();
  TORCH_CHECK_NOT_IMPLEMENTED(k.supports(op, dtype), aten_op, ": dtype ", c10::toString(dtype),
                              " is not supported on infini by the '", k.name(),
                              "' kernel provider (", opName(op), " kernel)");
}

}  // namespace torch_infini::ops
