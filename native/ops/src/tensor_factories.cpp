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
#include <torch/library.h>

#include "bridge.h"
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

// Grows the storage when the new geometry needs more bytes than it has.
void ensureStorageBytes(const at::Tensor& self, size_t needed) {
  const c10::Storage& storage = self.storage();
  if (storage.nbytes() >= needed) return;
  resizeStorageBytes(storage, needed);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  for (int64_t s : size)
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
  TORCH_CHECK(memory_format != c10::MemoryFormat::Preserve, "Unsupported memory format",
              c10::MemoryFormat::Preserve);
  // Same shape and no layout request: the tensor stays exactly as it is.
  if (self.sizes() == size && !memory_format.has_value()) return self;
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  const size_t needed = at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(),
                                                                   self.storage_offset());
  ensureStorageBytes(self, needed);
  if (memory_format.has_value()) impl->empty_tensor_restride(*memory_format);
  return self;
}

at::Tensor& setStorage(at::Tensor& self, const c10::Storage& source, int64_t storage_offset,
                       c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device() == self.device(),
              "Attempted to set the storage of a tensor on device \"", self.device(),
              "\" to a storage on different device \"", source.device(), "\"");
  TORCH_CHECK(storage_offset >= 0, "Tensor: invalid storage offset ", storage_offset);
  TORCH_CHECK(stride.empty() || stride.size() == size.size(), "set_: got ", size.size(),
              " sizes but ", stride.size(), " strides");
  for (int64_t s : size)
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
  auto* impl = self.unsafeGetTensorImpl();
  if (impl->storage().unsafeGetStorageImpl() != source.unsafeGetStorageImpl()) {
    impl->set_storage_keep_dtype(source);
  }
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
    impl->set_storage_offset(storage_offset);
  } else {
    impl->set_sizes_and_strides(size, stride, storage_offset);
  }
  const size_t itemsize = self.dtype().itemsize();
  const size_t needed =
      stride.empty() ? at::detail::computeStorageNbytesContiguous(size, itemsize, storage_offset)
                     : at::detail::computeStorageNbytes(size, stride, itemsize, storage_offset);
  ensureStorageBytes(self, needed);
  return self;
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

// Tensor.record_stream: the block is not reused before work queued on
// `stream` so far has run (the caching allocator defers its reuse).
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected an infini stream, got a stream of ", stream.device());
  deviceAllocator()->recordStream(self.storage().data_ptr(), stream);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", record_stream);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  // The view operators whose ATen kernels are registered per backend rather
  // than composite: PyTorch's own device-independent implementations (they
  // only restride), so views stay aliases and never reach the CPU fallback.
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_source_Storage_storage_offset);
  m.impl("set_.source_Storage", set_source_Storage);
  m.impl("set_.source_Tensor", set_source_Tensor);
}

}  // namespace
}  // namespace torch_infini::ops
