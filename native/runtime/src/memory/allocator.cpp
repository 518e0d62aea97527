// Registration of the infini allocators with PyTorch, and the small API the
// rest of the backend uses (allocate on a device, pointer queries, storage
// resize, pinned-memory use by queued copies).
#include "torch_infini/runtime/allocator.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>

#include "memory/caching_allocator.h"
#include "memory/pinned_allocator.h"
#include "pytorch/stream_lookup.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini {
namespace {

// At load time, before any tensor can be created on `infini`.
struct Registration {
  Registration() {
    c10::SetAllocator(c10::DeviceType::PrivateUse1, &cachingDeviceAllocator());
    at::setHostAllocator(c10::DeviceType::PrivateUse1, &pinnedHostAllocator());
  }
} registration;

}  // namespace

void checkByteCount(const char* what, size_t bytes) {
  TORCH_CHECK(bytes <= static_cast<size_t>(std::numeric_limits<int64_t>::max()), "infini: ", what,
              " seems to have been called with negative number: ", static_cast<int64_t>(bytes),
              " bytes (", bytes, " as an unsigned count)");
}

c10::DeviceAllocator* deviceAllocator() { return &cachingDeviceAllocator(); }

c10::DataPtr allocateOnDevice(int device, size_t bytes) {
  return cachingDeviceAllocator().allocateOn(device, bytes);
}

c10::DataPtr allocateOnValidDevice(int device, size_t bytes, c10::StreamId stream) {
  return cachingDeviceAllocator().allocateValid(device, bytes, stream);
}

c10::DataPtr allocateForHostAccess(int device, size_t bytes, c10::StreamId stream) {
  c10::DataPtr block = allocateOnValidDevice(device, bytes, stream);
  if (bytes > 0) {
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    const runtime::StreamHandle native = nativeStreamToWaitOn(device, stream);
    if (!rt.queryStream(native)) rt.synchronizeStream(native);
  }
  return block;
}

void emptyDeviceCache() { cachingDeviceAllocator().emptyCacheAll(); }

void resizeStorageBytes(const c10::Storage& storage, size_t new_bytes) {
  checkByteCount("resizing a storage", new_bytes);
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  TORCH_CHECK(storage.device().type() == c10::DeviceType::PrivateUse1,
              "infini: resizeStorageBytes on a storage of ", storage.device());
  int device = storage.device().index();
  c10::DataPtr fresh = allocateOnDevice(device, new_bytes);
  size_t common = std::min(storage.nbytes(), new_bytes);
  if (common > 0) {
    runtime::selectedRuntime().memcpyAsync(fresh.get(), storage.data(), common,
                                           runtime::MemcpyKind::DeviceToDevice,
                                           nativeStream(currentStream(device)));
  }
  // The old block may belong to another stream's cache: it is reused only
  // after the copy reading it on the current stream has run.
  cachingDeviceAllocator().recordStream(storage.data_ptr(), currentStream(device));
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(new_bytes);
}

bool deviceOfPointer(const void* ptr, int* device) {
  return cachingDeviceAllocator().deviceOf(ptr, device);
}

c10::Allocator* pinnedAllocator() { return &pinnedHostAllocator(); }

bool recordPinnedUse(const void* ptr, c10::Stream stream) { return recordPinnedUseAt(ptr, stream); }

}  // namespace torch_infini
