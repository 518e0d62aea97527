// Helpers shared by the ATen bridge translation units.
#pragma once

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "torch_infini/ops/kernel_provider.h"
#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/backend.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini::ops {

inline bool isInfini(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

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
  return currentNativeStreamUnchecked(t.device().index());
}

// Raises NotImplementedError unless the provider supports (op, dtype).
inline void requireKernel(const char* aten_op, Op op, c10::ScalarType dtype) {
  KernelProvider& k = kernels();
  TORCH_CHECK_NOT_IMPLEMENTED(k.supports(op, dtype), aten_op, ": dtype ", c10::toString(dtype),
                              " is not supported on infini by the '", k.name(),
                              "' kernel provider (", opName(op), " kernel)");
}

// A new tensor with t's sizes, strides, dtype and device, allocated straight
// from the infini allocator (no dispatcher round trip).
inline at::Tensor emptyLike(const at::Tensor& t) {
  const int device = t.device().index();
  if (device == currentDevice()) {
    return at::detail::empty_strided_generic(t.sizes(), t.strides(), deviceAllocator(),
                                             c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                             t.scalar_type());
  }
  c10::DeviceGuard guard(t.device());
  return at::detail::empty_strided_generic(t.sizes(), t.strides(), deviceAllocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           t.scalar_type());
}

// PyTorch's own wording for tensors on different devices.
inline void checkSameDevice(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              a.device(), " and ", b.device(), "!");
}

inline void checkInfiniTensor(const char* aten_op, const char* arg, const at::Tensor& t) {
  TORCH_CHECK(isInfini(t), aten_op, ": expected ", arg, " to be an infini tensor, got a tensor on ",
              t.device());
}

// Raises NotImplementedError unless `dtype` is the only dtype involved.
inline void requireSameDtype(const char* aten_op, c10::ScalarType expected, c10::ScalarType got,
                             const char* what) {
  TORCH_CHECK_NOT_IMPLEMENTED(expected == got, aten_op, ": ", what, " has dtype ",
                              c10::toString(got), " but the result dtype is ",
                              c10::toString(expected),
                              "; type promotion is not supported on infini "
                              "(backend '",
                              runtime::get().name(), "') yet");
}

}  // namespace torch_infini::ops
