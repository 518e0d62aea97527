// The caching allocator's memory history and snapshot, behind
// torch.infini.memory._record_memory_history / _snapshot (as torch.cuda's).
// Stack contexts are opaque here (c10::GatheredContext): the Python layer
// supplies the function that gathers them and symbolizes them.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace torch_infini {

using c10::CachingDeviceAllocator::CreateContextFn;
using c10::CachingDeviceAllocator::RecordContext;

struct MemoryTraceEntry {
  enum class Action { Alloc, FreeRequested, FreeCompleted, SegmentAlloc, SegmentFree, Oom };
  Action action;
  int device;
  uintptr_t addr;  // 0 for Oom
  size_t size;     // bytes requested (Alloc, Free*, Oom) or segment bytes
  c10::StreamId stream;
  int64_t time_us;     // host time (microseconds since the epoch)
  size_t device_free;  // Oom only: what the device reported free
  std::shared_ptr<c10::GatheredContext> context;
};

struct MemoryBlockSnapshot {
  enum class State { ActiveAllocated, ActivePendingFree, Inactive };
  uintptr_t addr;
  size_t size;
  size_t requested;
  State state;
  std::shared_ptr<c10::GatheredContext> context;  // where it was allocated
};

struct MemorySegmentSnapshot {
  int device;
  uintptr_t addr;
  size_t total;
  size_t allocated;
  size_t active;
  size_t requested;
  c10::StreamId stream;
  bool small;
  std::shared_ptr<c10::GatheredContext> context;  // where it was allocated
  std::vector<MemoryBlockSnapshot> blocks;
};

struct MemorySnapshot {
  std::vector<MemorySegmentSnapshot> segments;        // every device, by address
  std::vector<std::vector<MemoryTraceEntry>> traces;  // per device, oldest first
};

// Sets what is recorded: `trace` keeps each device's allocator events (at
// most `max_entries`; the oldest drop out); `context_fn` (or nullptr: none)
// gathers the stack of blocks and events as `when` says; `clear` empties
// the traces.
void recordMemoryHistory(bool trace, CreateContextFn context_fn, RecordContext when,
                         size_t max_entries, bool clear);
MemorySnapshot memorySnapshot();

}  // namespace torch_infini
