// Tensor creation, views and storage manipulation for `infini`: the minimum
// set PyTorch's accelerator-integration guide lists besides copies.
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/safe_numerics.h>
#include <c10/util/strides.h>
#include <torch/library.h>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "torch_infini/runtime/allocator.h"

namespace torch_infini::ops {
namespace {

constexpr c10::DispatchKeySet kInfiniKeys{c10::DispatchKey::PrivateUse1};

c10::Device targetDevice(std::optional<c10::Device> device) {
  c10::Device d = device.value_or(c10::Device(c10::DeviceType::PrivateUse1));
  TORCH_CHECK(d.type() == c10::DeviceType::PrivateUse1, "infini: cannot create a tensor on ", d);
  return c10::Device(c10::DeviceType::PrivateUse1,
                     static_cast<c10::DeviceIndex>(resolveDevice(d.index())));
}

void checkFactoryOptions(const char* op, std::optional<c10::Layout> layout,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK_NOT_IMPLEMENTED(layout.value_or(c10::kStrided) == c10::kStrided, op,
                              ": only strided tensors are supported on infini, got layout ",
                              *layout);
  TORCH_CHECK(!pin_memory.value_or(false), op,
              ": only dense CPU tensors can be pinned; infini tensors cannot");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  checkFactoryOptions("empty", layout, pin_memory);
  // The allocator serves the current device; switch only when needed.
  const c10::Device target = targetDevice(device);
  std::optional<c10::DeviceGuard> guard;
  if (target.index() != currentDevice()) guard.emplace(target);
  return at::detail::empty_generic(size, deviceAllocator(), kInfiniKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  checkFactoryOptions("empty_strided", layout, pin_memory);
  const c10::Device target = targetDevice(device);
  std::optional<c10::DeviceGuard> guard;
  if (target.index() != currentDevice()) guard.emplace(target);
  return at::detail::empty_strided_generic(size, stride, deviceAllocator(), kInfiniKeys,
                                           c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

// Grows the storage when the new geometry needs more bytes than it has
// (resize_ only: no other operator grows a storage).
void ensureStorageBytes(const at::Tensor& self, size_t needed) {
  const c10::Storage& storage = self.storage();
  if (storage.nbytes() >= needed) return;
  resizeStorageBytes(storage, needed);
}

// As ATen's checkInBoundsForStorage: a geometry set on a storage must lie
// inside it. Growing the storage instead would hand out bytes nobody wrote
// (a checkpoint whose storage is shorter than its tensor would read freed
// memory) and let a tiny file force a huge allocation. The byte counts come
// from ATen's computeStorageNbytes, which refuses a count that overflows
// (offset, sizes and strides included) as the CPU does: a product wrapped
// negative would pass a plain comparison (a crafted checkpoint's offset of
// 2^61 then reads and writes outside the storage).
void checkInBoundsForStorage(c10::IntArrayRef size, c10::IntArrayRef stride, int64_t storage_offset,
                             size_t itemsize, const c10::Storage& storage) {
  TORCH_CHECK(storage_offset >= 0, "Tensor: invalid storage offset ", storage_offset);
  const size_t bytes = at::detail::computeStorageNbytes(size, stride, itemsize);
  if (bytes == 0) return;  // a tensor with a 0-size dimension fits any storage
  const size_t needed =
      at::detail::computeStorageNbytes(size, stride, itemsize, static_cast<size_t>(storage_offset));
  TORCH_CHECK(needed <= storage.nbytes(), "setStorage: sizes ", size, ", strides ", stride,
              ", storage offset ", storage_offset, ", and itemsize ", itemsize,
              " requiring a storage size of ", needed, " are out of bounds for storage of size ",
              storage.nbytes());
}

// The strides resize_ gives `size` in `memory_format` (contiguous if none),
// computed before the tensor changes: a stride past int64 is refused here
// ("Stride calculation overflowed", as PyTorch's restride says), even where
// the tensor has no elements and needs no bytes.
c10::DimVector resizedStrides(c10::IntArrayRef size,
                              std::optional<c10::MemoryFormat> memory_format) {
  if (memory_format.value_or(c10::MemoryFormat::Contiguous) != c10::MemoryFormat::Contiguous) {
    // PyTorch's own restride, on a tensor without memory.
    const at::TensorBase shaped = at::detail::empty_meta(size, c10::kByte, memory_format);
    return c10::DimVector(shaped.strides());
  }
  c10::DimVector strides(size.size(), 1);
  for (size_t d = size.size(); d > 1; --d) {
    TORCH_CHECK(
        !c10::mul_overflows(strides[d - 1], std::max<int64_t>(size[d - 1], 1), &strides[d - 2]),
        "Stride calculation overflowed");
  }
  return strides;
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  for (int64_t s : size)
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
  TORCH_CHECK(memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format",
              c10::MemoryFormat::Preserve);
  // Same shape and no layout request: the tensor stays exactly as it is.
  if (self.sizes() == size && !memory_format.has_value()) return self;
  // Everything that can fail comes before the tensor changes: a size whose
  // byte count overflows, or an allocation that fails (torch.OutOfMemoryError),
  // leaves sizes, strides and storage as they were. (The CPU and CUDA set the
  // sizes first, leaving a tensor larger than its storage behind.)
  const c10::DimVector strides = resizedStrides(size, memory_format);
  const size_t needed = at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(),
                                                                   self.storage_offset());
  ensureStorageBytes(self, needed);
  self.unsafeGetTensorImpl()->set_sizes_and_strides(size, strides);
  return self;
}

at::Tensor& setStorage(at::Tensor& self, const c10::Storage& source, int64_t storage_offset,
                       c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device() == self.device(),
              "Attempted to set the storage of a tensor on device \"", self.device(),
              "\" to a storage on different device \"", source.device(), "\"");
  TORCH_CHECK(stride.empty() || stride.size() == size.size(), "set_: got ", size.size(),
              " sizes but ", stride.size(), " strides");
  for (int64_t s : size)
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
  const c10::DimVector strides =
      stride.empty() ? c10::contiguous_strides(size) : c10::DimVector(stride.begin(), stride.end());
  // Checked before anything changes: a refused call leaves `self` as it was.
  checkInBoundsForStorage(size, strides, storage_offset, self.dtype().itemsize(), source);
  auto* impl = self.unsafeGetTensorImpl();
  if (impl->storage().unsafeGetStorageImpl() != source.unsafeGetStorageImpl()) {
    impl->set_storage_keep_dtype(source);
  }
  impl->set_sizes_and_strides(size, strides, storage_offset);
  return self;
}

// Tensor.set_(): detaches the tensor from its storage, giving it a new empty
// one on its device (as the CPU's set_cpu_ does).
at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       allocateOnDevice(self.device().index(), 0), deviceAllocator(),
                       /*resizable=*/true);
  return setStorage(self, storage, 0, {0}, {});
}

at::Tensor& set_source_Storage_storage_offset(at::Tensor& self, c10::Storage source,
                                              int64_t storage_offset, c10::IntArrayRef size,
                                              c10::IntArrayRef stride) {
  return setStorage(self, source, storage_offset, size, stride);
}

at::Tensor& set_source_Storage(at::Tensor& self, c10::Storage source) {
  const int64_t itemsize = static_cast<int64_t>(self.dtype().itemsize());
  TORCH_CHECK(source.nbytes() % itemsize == 0, "Expected storage of ", source.nbytes(),
              " bytes to hold a whole number of elements of size ", itemsize);
  const int64_t numel = static_cast<int64_t>(source.nbytes()) / itemsize;
  return setStorage(self, source, 0, {numel}, {1});
}

at::Tensor& set_source_Tensor(at::Tensor& self, const at::Tensor& source) {
  TORCH_CHECK(self.dtype() == source.dtype(), "Could not set tensor of type ", source.dtype(),
              " as a tensor of type ", self.dtype());
  if (self.is_same(source)) return self;
  return setStorage(self, source.storage(), source.storage_offset(), source.sizes(),
                    source.strides());
}

// Whether `self.data = from` (and nn.Module.to(), which moves parameters
// that way, keeping tied ones tied) may swap `from`'s storage and geometry
// into `self`. PyTorch's own rule (TensorImpl::has_compatible_shallow_copy_type)
// lists the dense backends it knows, not PrivateUse1; as CUDA's are, infini's
// dense strided tensors are interchangeable with every dense backend's.
// The operator is dispatched on both arguments, so this serves a CPU `self`
// with an infini `from` too.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](c10::DispatchKeySet keys) {
    constexpr auto backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit,
         c10::BackendComponent::MPSBit, c10::BackendComponent::HIPBit,
         c10::BackendComponent::XPUBit, c10::BackendComponent::HPUBit,
         c10::BackendComponent::MTIABit, c10::BackendComponent::PrivateUse1Bit});
    return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && keys.has_any(backends);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense(self.key_set()) && dense(from.key_set()));
}

// Tensor.record_stream: the block is not reused before work queued on
// `stream` so far has run (the caching allocator defers its reuse).
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected an infini stream, got a stream of ", stream.device());
  deviceAllocator()->recordStream(self.storage().data_ptr(), stream);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar factory(m, "aten", "factory");
  BridgeRegistrar view_op(m, "aten", "view");
  BridgeRegistrar storage(m, "aten", "storage");
  storage.impl("record_stream", record_stream);
  // `param.data = t` and nn.Module.to().
  storage.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  factory.impl("empty.memory_format", empty_memory_format);
  factory.impl("empty_strided", empty_strided);
  view_op.impl("as_strided", as_strided);
  view_op.impl("view", view);
  view_op.impl("_reshape_alias", reshape_alias);
  // The view operators whose ATen kernels are registered per backend rather
  // than composite: PyTorch's own device-independent implementations (they
  // only restride), so views stay aliases and never reach the CPU fallback.
  view_op.impl("unfold", TORCH_FN(at::native::unfold));
  view_op.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  view_op.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  storage.impl("resize_", resize_);
  storage.impl("set_.source_Storage_storage_offset", set_source_Storage_storage_offset);
  storage.impl("set_.source_Storage", set_source_Storage);
  storage.impl("set_.source_Tensor", set_source_Tensor);
  storage.impl("set_", set_empty);
}

}  // namespace
}  // namespace torch_infini::ops
