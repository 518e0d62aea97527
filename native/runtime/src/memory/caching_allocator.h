// The caching, stream-ordered device allocator behind every infini tensor.
//
// Freed blocks stay cached per device and per stream and are reused by later
// allocations on the same stream (stream order makes that safe); blocks are
// split and merged within runtime allocations ("segments"), with a small
// pool (<= 1 MiB requests, 2 MiB segments) and a large pool. A block used on
// another stream (record_stream) returns to the cache only once events
// recorded on those streams have completed. In steady state no runtime
// malloc/free happens. Statistics use torch.cuda.memory_stats' names.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include "torch_infini/runtime/memory_history.h"

namespace torch_infini {

class CachingDeviceAllocator : public c10::DeviceAllocator {
 public:
  // Allocates on `device` on its current stream.
  virtual c10::DataPtr allocateOn(int device, size_t bytes) = 0;
  // allocateOn without validating `device`, for the stream `stream` of it.
  virtual c10::DataPtr allocateValid(int device, size_t bytes, c10::StreamId stream) = 0;
  // The device whose memory holds `ptr` (interior pointers too).
  virtual bool deviceOf(const void* ptr, int* device) const = 0;
  // Releases cached blocks of every device back to the runtime.
  virtual void emptyCacheAll() = 0;
  // Memory history (memory_history.h).
  virtual void recordHistory(bool trace, CreateContextFn context_fn, RecordContext when,
                             size_t max_entries, bool clear) = 0;
  virtual MemorySnapshot snapshot() = 0;
};

CachingDeviceAllocator& cachingDeviceAllocator();

}  // namespace torch_infini
