// Device and pinned host allocators of `infini`, registered with PyTorch
// (c10::SetAllocator for PrivateUse1, at::setHostAllocator for pinned memory).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

namespace torch_infini {

// The allocator behind every `infini` tensor.
c10::DeviceAllocator* deviceAllocator();
// Allocates on `device` (not the current device); throws
// torch.OutOfMemoryError with requested/allocated/reserved/free on failure.
c10::DataPtr allocateOnDevice(int device, size_t bytes);
// The device whose memory holds `ptr`; false when `ptr` is not ours.
bool deviceOfPointer(const void* ptr, int* device);

// Reallocates a storage to `new_bytes`, copying the common prefix in stream
// order on the current stream of its device.
void resizeStorageBytes(const c10::Storage& storage, size_t new_bytes);

// Pinned (page-locked where the runtime can) host memory.
c10::Allocator* pinnedAllocator();
bool isPinnedPointer(const void* ptr);

}  // namespace torch_infini
