// Pinned host allocator: page-locked memory from the runtime, cached.
//
// Freed blocks are kept by size class and reused; a block that a
// non_blocking copy used (record_event) is reused only after the event
// recorded behind that copy has completed. is_pinned is true for every
// pointer inside a block this allocator handed out, cached or not.
#include "memory/pinned_allocator.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "memory/range_map.h"
#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini {
namespace {

// Power-of-two size classes from 512 bytes keep reuse simple and bounded.
size_t sizeClass(size_t bytes) {
  size_t size = 512;
  while (size < bytes) size <<= 1;
  return size;
}

// Whole microseconds since `start` (the unit of HostStats' times).
int64_t microsecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               start)
      .count();
}

struct HostBlock {
  void* ptr;
  size_t size;
  bool allocated = false;
  std::vector<runtime::EventHandle> events;  // uses by queued copies
};

class PinnedAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    // (Also bounds sizeClass's doubling, which would never end past 2^63.)
    checkByteCount("allocating pinned host memory", bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    processEvents();
    const size_t size = sizeClass(bytes);
    HostBlock* block = nullptr;
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      block = it->second.back();
      it->second.pop_back();
    } else {
      const auto start = std::chrono::steady_clock::now();
      void* ptr = runtime::selectedRuntime().mallocHost(size);
      if (ptr == nullptr) {
        releaseCached();
        ptr = runtime::selectedRuntime().mallocHost(size);
      }
      stats_.host_alloc_time.increase(microsecondsSince(start));
      TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "infini: failed to allocate ", size,
                       " bytes of pinned host memory");
      block = new HostBlock{ptr, size, false, {}};
      all_.insert(block);
      by_address_.emplace(reinterpret_cast<uintptr_t>(ptr), block);
      ranges_.insert(ptr, size, 0);
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(size);
      ++stats_.num_host_alloc;
    }
    block->allocated = true;
    stats_.active_requests.increase(1);
    stats_.active_bytes.increase(size);
    return {block->ptr, block, &PinnedAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // ctx is the DataPtr context this allocator set (the block) for its own
  // tensors; an alias of pinned memory (from_dlpack, set_, a storage made
  // from a raw pointer) carries another context, so the block is then found
  // by address, as CUDA's caching host allocator does.
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* block = static_cast<HostBlock*>(ctx);
    if (all_.count(block) == 0) block = blockAt(ptr);
    if (block == nullptr) return false;  // not memory from this allocator
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    if (!rt.capabilities().events) {
      rt.synchronizeStream(nativeStream(stream));
      return true;
    }
    // Drop uses that have completed, so a long-lived staging buffer used by
    // many copies holds only the events of copies still in flight.
    dropCompleted(rt, block->events);
    runtime::EventHandle event = rt.createEvent(stream.device_index(), false);
    rt.recordEvent(event, nativeStream(stream));
    block->events.push_back(event);
    return true;
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    releaseCached();
  }

  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* s : {&stats_.allocations, &stats_.allocated_bytes, &stats_.active_requests,
                    &stats_.active_bytes})
      s->reset_accumulated();
    stats_.host_alloc_time.reset_accumulated();
    stats_.host_free_time.reset_accumulated();
    stats_.num_host_alloc = stats_.num_host_free = 0;
  }

  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* s : {&stats_.allocations, &stats_.allocated_bytes, &stats_.active_requests,
                    &stats_.active_bytes})
      s->reset_peak();
    stats_.host_alloc_time.reset_peak();
    stats_.host_free_time.reset_peak();
  }

  bool owns(const void* ptr) const { return ranges_.find(ptr, nullptr); }

 private:
  // The block whose memory holds `ptr` (interior pointers too), or null.
  HostBlock* blockAt(const void* ptr) const {
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    auto it = by_address_.upper_bound(address);
    if (it == by_address_.begin()) return nullptr;
    --it;
    return address < it->first + it->second->size ? it->second : nullptr;
  }

  static void deleter(void* ctx);

  static void dropCompleted(runtime::DeviceRuntime& rt, std::vector<runtime::EventHandle>& events) {
    for (auto e = events.begin(); e != events.end();) {
      if (rt.queryEvent(*e)) {
        rt.destroyEvent(*e);
        e = events.erase(e);
      } else {
        ++e;
      }
    }
  }

  void free(HostBlock* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    block->allocated = false;
    stats_.active_requests.decrease(1);
    stats_.active_bytes.decrease(block->size);
    if (block->events.empty()) {
      free_[block->size].push_back(block);
    } else {
      pending_.push_back(block);
    }
  }

  // Pending blocks whose copies have completed become reusable.
  void processEvents() {
    if (pending_.empty()) return;
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    for (auto it = pending_.begin(); it != pending_.end();) {
      HostBlock* block = *it;
      dropCompleted(rt, block->events);
      if (block->events.empty()) {
        free_[block->size].push_back(block);
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void releaseCached() {
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    for (HostBlock* block : pending_) {
      for (runtime::EventHandle e : block->events) {
        rt.synchronizeEvent(e);
        rt.destroyEvent(e);
      }
      block->events.clear();
      free_[block->size].push_back(block);
    }
    pending_.clear();
    for (auto& [size, blocks] : free_) {
      // Released one by one, the runtime's free first: should it throw, the
      // blocks not yet released stay cached and fully registered.
      while (!blocks.empty()) {
        HostBlock* block = blocks.back();
        const auto start = std::chrono::steady_clock::now();
        rt.freeHost(block->ptr);
        stats_.host_free_time.increase(microsecondsSince(start));
        blocks.pop_back();
        ranges_.erase(block->ptr);
        by_address_.erase(reinterpret_cast<uintptr_t>(block->ptr));
        all_.erase(block);
        stats_.allocations.decrease(1);
        stats_.allocated_bytes.decrease(block->size);
        ++stats_.num_host_free;
        delete block;
      }
    }
  }

  std::mutex mutex_;
  std::unordered_set<HostBlock*> all_;          // every block, handed out or cached
  std::map<uintptr_t, HostBlock*> by_address_;  // the same blocks by start address
  std::map<size_t, std::vector<HostBlock*>> free_;
  std::vector<HostBlock*> pending_;
  RangeMap ranges_;
  at::HostStats stats_;
};

PinnedAllocator& instance() {
  static auto* allocator = new PinnedAllocator();  // outlives static destructors
  return *allocator;
}

void PinnedAllocator::deleter(void* ctx) { instance().free(static_cast<HostBlock*>(ctx)); }

}  // namespace

at::HostAllocator& pinnedHostAllocator() { return instance(); }

bool recordPinnedUseAt(const void* ptr, c10::Stream stream) {
  return ptr != nullptr && instance().record_event(const_cast<void*>(ptr), nullptr, stream);
}

bool isPinnedPointer(const void* ptr) { return ptr != nullptr && instance().owns(ptr); }

}  // namespace torch_infini
