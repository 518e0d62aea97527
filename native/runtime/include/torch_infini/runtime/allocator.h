// Device and pinned host allocators of `infini`, registered with PyTorch
// (c10::SetAllocator for PrivateUse1, at::setHostAllocator for pinned memory).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>
#include <c10/core/Stream.h>

namespace torch_infini {

// Refuses a byte count above INT64_MAX: a negative size from Python (a
// storage of -1 bytes) arrives as a huge size_t, whose rounding to a block
// size would wrap to a small block. As the CPU's allocator does, with its
// error type (RuntimeError); `what` names the allocation.
void checkByteCount(const char* what, size_t bytes);

// A block of `stream`'s pool that the calling thread may read and write now,
// outside stream order (the CPU fallback's results and temporaries, where
// device memory is host memory). A block freed on the stream is reused at
// once in stream order, so it may still have queued work to run, freed by
// another thread after this one synchronized: the stream's queued work is
// waited for when there is any.
c10::DataPtr allocateForHostAccess(int device, size_t bytes, c10::StreamId stream);

// The allocator behind every `infini` tensor.
c10::DeviceAllocator* deviceAllocator();
// Allocates on `device` (not the current device); throws
// torch.OutOfMemoryError with requested/allocated/reserved/free on failure.
c10::DataPtr allocateOnDevice(int device, size_t bytes);
// The same for a device index known to be valid (that of an existing tensor)
// and a stream of it the memory is ordered on.
c10::DataPtr allocateOnValidDevice(int device, size_t bytes, c10::StreamId stream);
// The device whose memory holds `ptr`; false when `ptr` is not ours.
bool deviceOfPointer(const void* ptr, int* device);

// Reallocates a storage to `new_bytes`, copying the common prefix in stream
// order on the current stream of its device.
void resizeStorageBytes(const c10::Storage& storage, size_t new_bytes);

// Releases every cached device block back to the runtime.
void emptyDeviceCache();

// Pinned (page-locked where the runtime can) host memory.
c10::Allocator* pinnedAllocator();
bool isPinnedPointer(const void* ptr);
// A queued copy uses the pinned memory at `ptr` (any address inside a block,
// so aliases and views count) on `stream`: the block is not reused before
// that work completes. False when `ptr` is not pinned memory of ours (the
// caller must then not leave the copy in flight).
bool recordPinnedUse(const void* ptr, c10::Stream stream);

}  // namespace torch_infini
