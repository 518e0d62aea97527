// Helpers shared by the sources that register operators for infini (aten/,
// fused/, random/, amp/) and the CPU fallback: the seam's tensor views,
// streams, the device's allocations.
#pragma once

#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/MemoryFormat.h>
#include <c10/util/Exception.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <optional>

#include "common/dims.h"
#include "torch_infini/ops/kernel_provider.h"
#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini::ops {

inline bool isInfini(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

// Elements fill one gap-free span of memory exactly once.
inline bool isDense(const at::Tensor& t) { return t.is_non_overlapping_and_dense(); }

inline TensorRef toRef(const at::Tensor& t) {
  TensorRef ref;
  ref.data = t.data_ptr();
  ref.dtype = t.scalar_type();
  ref.device = isInfini(t) ? t.device().index() : -1;
  ref.sizes.assign(t.sizes().begin(), t.sizes().end());
  ref.strides.assign(t.strides().begin(), t.strides().end());
  return ref;
}

// `t` broadcast to `sizes`: `t` itself, borrowed, when it has that shape
// already (a view would be one more allocation, and a copy of a tensor
// Python holds increfs its Python object under the GIL), an expanded view
// otherwise.
inline c10::MaybeOwned<at::Tensor> expandTo(const at::Tensor& t, c10::IntArrayRef sizes) {
  return sameDims(t.sizes(), sizes) ? c10::MaybeOwned<at::Tensor>::borrowed(t)
                                    : c10::MaybeOwned<at::Tensor>::owned(t.expand(sizes));
}

// toRef(t.expand(sizes)) without making the view (one allocation less).
inline TensorRef expandedRef(const at::Tensor& t, c10::IntArrayRef sizes) {
  TensorRef ref;
  ref.data = t.data_ptr();
  ref.dtype = t.scalar_type();
  const c10::Device device = t.device();
  ref.device = device.type() == c10::DeviceType::PrivateUse1 ? device.index() : -1;
  const c10::IntArrayRef own_sizes = t.sizes();
  const c10::IntArrayRef own_strides = t.strides();
  const int64_t lead = static_cast<int64_t>(sizes.size()) - static_cast<int64_t>(own_sizes.size());
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    const int64_t own = d - lead;  // t's dimension, where it has one
    const bool broadcast = own < 0 || (own_sizes[own] == 1 && sizes[d] != 1);
    ref.sizes.push_back(sizes[d]);
    ref.strides.push_back(broadcast ? 0 : own_strides[own]);
  }
  return ref;
}

// Whether `t` carries a forward-mode tangent (a dual tensor of
// torch.autograd.forward_ad). Forward mode works with grad mode off too: a
// kernel that skips autograd because no gradient is needed must still
// leave a dual operand to autograd, or its tangent silently goes missing.
inline bool hasTangent(const at::Tensor& t) {
  return t.defined() && t._fw_grad(/*level=*/0).defined();
}
inline bool hasTangent(const std::optional<at::Tensor>& t) {
  return t.has_value() && hasTangent(*t);
}

// Whether autograd must see an operation on `t`: a gradient to record for it
// (grad mode on) or its forward-mode tangent. The autograd kernels of
// CompositeImplicitAutograd operators with an infini kernel (rms_norm,
// linear) run PyTorch's decomposition when any operand needs it.
inline bool needsAutograd(const at::Tensor& t) {
  return t.defined() && ((at::GradMode::is_enabled() && t.requires_grad()) || hasTangent(t));
}
inline bool needsAutograd(const std::optional<at::Tensor>& t) {
  return t.has_value() && needsAutograd(*t);
}

// The current stream of the tensor's device, as a runtime handle.
inline runtime::StreamHandle streamOf(const at::Tensor& t) {
  return currentNativeStreamUnchecked(t.device().index());
}

// `t`'s integers (indices, slots, lengths) as contiguous int64 on the host,
// for the checks before a kernel that indexes memory with them unchecked:
// a copy, and a wait for t's stream.
inline at::Tensor integersOnHost(const at::Tensor& t) {
  return t.to(at::kCPU).to(at::kLong).contiguous();
}

// Raises NotImplementedError unless the provider supports (op, dtype).
inline void requireKernel(const char* aten_op, SeamOp op, c10::ScalarType dtype) {
  KernelProvider& k = selectedKernelProvider();
  TORCH_CHECK_NOT_IMPLEMENTED(k.supports(op, dtype), aten_op, ": dtype ", c10::toString(dtype),
                              " is not supported on infini by the '", k.name(),
                              "' kernel provider (", opName(op), " kernel)");
}

// A new tensor of `sizes` and `strides` with t's dtype, on t's device,
// straight from the infini allocator (no dispatcher round trip, no device
// switch). `stream` is the (current) stream of t's device the memory is
// ordered on.
inline at::Tensor emptyStridedLike(const at::Tensor& t, c10::IntArrayRef sizes,
                                   c10::IntArrayRef strides, c10::StreamId stream) {
  const size_t nbytes = at::detail::computeStorageNbytes(sizes, strides, t.dtype().itemsize());
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes,
                       allocateOnValidDevice(t.device().index(), nbytes, stream), deviceAllocator(),
                       /*resizable=*/true);
  at::Tensor out = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  return out;
}

// A new tensor for the result of operands all laid out as dense `t` (one
// sizes and strides): the strides TensorIterator's fast setup gives it --
// contiguous or channels-last when `t` is (whatever its strides in size-1
// dimensions: a (1, 4) slice with strides (11, 1) gives (4, 1), as on the
// CPU and CUDA), else t's own.
inline at::Tensor emptyLike(const at::Tensor& t, c10::StreamId stream) {
  const c10::IntArrayRef sizes = t.sizes();
  if (t.is_contiguous()) return emptyStridedLike(t, sizes, c10::contiguous_strides(sizes), stream);
  if (t.is_contiguous(at::MemoryFormat::ChannelsLast))
    return emptyStridedLike(t, sizes, c10::get_channels_last_strides_2d(sizes), stream);
  if (t.is_contiguous(at::MemoryFormat::ChannelsLast3d))
    return emptyStridedLike(t, sizes, c10::get_channels_last_strides_3d(sizes), stream);
  return emptyStridedLike(t, sizes, t.strides(), stream);
}

// A new tensor for the result of dense `t` and a CPU scalar: TensorIterator's
// general path (a 0-dim operand takes it off the fast setup), which orders
// dimensions by t's strides and recomputes them dense.
inline at::Tensor emptyLikeBesideScalar(const at::Tensor& t, c10::StreamId stream) {
  const c10::IntArrayRef sizes = t.sizes();
  if (std::all_of(sizes.begin(), sizes.end(), [](int64_t s) { return s > 1; }))
    return emptyStridedLike(t, sizes, t.strides(), stream);
  return emptyStridedLike(t, sizes, at::infer_dense_strides(sizes, t.strides()), stream);
}

// A new contiguous tensor of `sizes` like infini tensor `like` (dtype,
// device), on its device's current stream: at::empty without the dispatcher.
inline at::Tensor emptyOnDevice(const at::Tensor& like, c10::IntArrayRef sizes) {
  return emptyStridedLike(like, sizes, c10::contiguous_strides(sizes),
                          currentStreamIdUnchecked(like.device().index()));
}

// Gives out= tensor `dst` the geometry of `src` (a CPU kernel's result) as
// _copy_from_and_resize does before it copies: nothing when the sizes agree,
// else src's sizes and strides (aten/copy.cpp, fallback/staged.cpp).
inline void resizeForCopyFrom(const at::Tensor& dst, const at::Tensor& src) {
  // A destination resized here takes the source's layout, as the CPU kernel
  // gave its own out= (a column-major lstsq solution stays column-major).
  // A source that is not dense (lstsq's solution is the top rows of a
  // column-major buffer) is mirrored with a storage as large as its own.
  if (dst.sizes().equals(src.sizes())) return;
  if (src.is_non_overlapping_and_dense()) {
    dst.resize_(src.sizes());
    if (!dst.strides().equals(src.strides())) dst.as_strided_(src.sizes(), src.strides());
    return;
  }
  int64_t extent = src.storage_offset() + 1;
  for (int64_t d = 0; d < src.dim(); ++d) extent += (src.size(d) - 1) * src.stride(d);
  const int64_t whole = static_cast<int64_t>(src.storage().nbytes()) / src.element_size();
  dst.resize_({src.numel() == 0 ? 0 : std::max(extent, whole)});
  dst.as_strided_(src.sizes(), src.strides(), src.storage_offset());
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
                              c10::toString(got), " but the kernel computes in ",
                              c10::toString(expected),
                              "; the infini kernel takes no mixed dtypes here (backend '",
                              runtime::selectedRuntime().name(), "')");
}

}  // namespace torch_infini::ops
