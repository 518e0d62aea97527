// The caching, stream-ordered device allocator behind every infini tensor
// (caching_allocator.h says how blocks are cached, split and freed).
#include "memory/caching_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "memory/range_map.h"
#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/stream.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define TORCH_INFINI_ASAN 1
#else
#define TORCH_INFINI_ASAN 0
#endif

namespace torch_infini {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatArray;
using c10::CachingDeviceAllocator::StatType;

// Sizes follow CUDA's caching allocator, so memory statistics read the same.
constexpr size_t kMinBlockSize = 512;        // every size rounds up to this
constexpr size_t kSmallSize = 1 << 20;       // largest "small" request
constexpr size_t kSmallBuffer = 2 << 20;     // segment for small requests
constexpr size_t kLargeBuffer = 20 << 20;    // segment for medium requests
constexpr size_t kMinLargeAlloc = 10 << 20;  // above this, segments fit the request
constexpr size_t kRoundLarge = 2 << 20;      // rounding of large segments
// Freed small blocks of up to kHotMaxSize are kept whole, at most
// kHotPerSize of each size (see DeviceCache::hot). Every small size: a
// model's activations (16 KiB to 1 MiB in a small transformer) are reused
// as often as its scalars (a transformers Llama's forward: 92 -> 78 us over
// the CPU's 730 with 8 KiB and 4 per size before).
constexpr size_t kHotMaxSize = kSmallSize;
constexpr size_t kHotPerSize = 8;

size_t roundSize(size_t size) {
  return size < kMinBlockSize ? kMinBlockSize
                              : kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

size_t segmentSize(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

std::string formatBytes(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return buffer;
}

struct Block;

// One runtime allocation, for snapshots: its extent and its first block.
struct SegmentHead {
  char* ptr;
  size_t size;
  c10::StreamId stream;
  bool small;
  Block* head;
  std::shared_ptr<c10::GatheredContext> context;  // where it was allocated
};

struct Block {
  Block(int device, c10::StreamId stream, size_t size, char* ptr, bool small, SegmentHead* segment)
      : device(device), stream(stream), size(size), ptr(ptr), small(small), segment(segment) {}

  int device;
  c10::StreamId stream;  // the stream the block is ordered on
  size_t size;
  size_t requested = 0;
  char* ptr;
  bool small;
  bool allocated = false;
  bool in_pool = false;
  Block* prev = nullptr;  // neighbours inside the same segment
  Block* next = nullptr;
  std::vector<c10::Stream> stream_uses;  // other streams (record_stream)
  int pending_events = 0;
  SegmentHead* segment;
  std::shared_ptr<c10::GatheredContext> context;  // where it was allocated (history)

  bool isSplit() const { return prev != nullptr || next != nullptr; }
};

// Pools order free blocks by stream, then size (best fit), then address.
struct Key {
  c10::StreamId stream;
  size_t size;
  const char* ptr;
};

Key keyOf(const Block* b) { return {b->stream, b->size, b->ptr}; }

inline bool operator<(const Key& a, const Key& b) {
  if (a.stream != b.stream) return a.stream < b.stream;
  if (a.size != b.size) return a.size < b.size;
  return a.ptr < b.ptr;
}

struct BlockOrder {
  using is_transparent = void;  // lookups by Key, without a Block
  bool operator()(const Block* a, const Block* b) const { return keyOf(a) < keyOf(b); }
  bool operator()(const Block* a, const Key& b) const { return keyOf(a) < b; }
  bool operator()(const Key& a, const Block* b) const { return a < keyOf(b); }
};

using Pool = std::set<Block*, BlockOrder>;

struct DeviceCache {
  // Blocks of any size may be split (CUDA reports that as -1, "no limit").
  DeviceCache() { stats.max_split_size = -1; }

  std::mutex mutex;
  Pool small;
  Pool large;
  // Recycled pool nodes and blocks: steady-state allocation touches no heap.
  std::vector<Pool::node_type> spare_nodes;
  std::vector<Block*> spare_blocks;
  // Small blocks freed lately, by size / kMinBlockSize, newest last: not
  // merged into the pool yet. A model's loop frees and allocates the same
  // small sizes over and over; the next allocation of a size takes the
  // block freed last, whose memory the CPU still has in its caches, without
  // a pool search (glibc's per-size caches do the same for the CPU). They
  // join the pool (flushHot) before anything reads it or its statistics,
  // and before a new segment is allocated: memory statistics, snapshots and
  // empty_cache see exactly the merged state.
  std::array<std::vector<Block*>, kHotMaxSize / kMinBlockSize + 1> hot;
  size_t hot_blocks = 0;
  std::deque<std::pair<runtime::EventHandle, Block*>> pending;  // cross-stream frees
  DeviceStats stats;
  std::map<const char*, std::unique_ptr<SegmentHead>> segments;  // by address
  // Memory history: a ring of at most max_entries; `trace_next` is the
  // oldest entry once the ring is full.
  std::vector<MemoryTraceEntry> trace;
  size_t trace_next = 0;
};

using Action = MemoryTraceEntry::Action;

// Under AddressSanitizer, cached memory the CPU addresses is poisoned while
// no tensor owns it: a free block and the rounding slack past a block's
// requested bytes. A kernel that reads or writes past its tensor into a
// neighbouring block of the same segment (one runtime allocation, which
// ASan alone sees as a whole) is then reported. Only where streams are
// synchronous: there no queued work can still touch a block when it is
// freed (on asynchronous streams that work is legal, in stream order).
class Poison {
 public:
  static bool enabled() {
#if TORCH_INFINI_ASAN
    static const bool on = [] {
      const runtime::Capabilities caps = runtime::selectedRuntime().capabilities();
      return caps.host_addressable && !caps.async_memcpy;
    }();
    return on;
#else
    return false;
#endif
  }

  static void poison(const void* ptr, size_t bytes) {
#if TORCH_INFINI_ASAN
    if (enabled()) ASAN_POISON_MEMORY_REGION(ptr, bytes);
#endif
  }

  static void unpoison(const void* ptr, size_t bytes) {
#if TORCH_INFINI_ASAN
    if (enabled()) ASAN_UNPOISON_MEMORY_REGION(ptr, bytes);
#endif
  }
};

int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The trace oldest first, with room for the ring to continue at index 0.
void linearize(DeviceCache& cache) {
  std::rotate(cache.trace.begin(),
              cache.trace.begin() + static_cast<std::ptrdiff_t>(cache.trace_next),
              cache.trace.end());
  cache.trace_next = 0;
}

// The statistics calls reject a bad index the way CUDA's caching allocator
// does: a plain RuntimeError (not the AcceleratorError of runtime calls).
void checkStatsDevice(int device) {
  const int count = deviceCount();
  TORCH_CHECK(device >= 0 && device < count, "Invalid device argument ", device,
              ": did you call init? (infini has ", count, " device(s))");
}

class Allocator final : public CachingDeviceAllocator {
 public:
  // The current device is valid by construction (setCurrentDevice checks).
  c10::DataPtr allocate(size_t bytes) override {
    const int device = currentDevice();
    return allocateValid(device, bytes, currentStreamIdUnchecked(device));
  }

  c10::DataPtr allocateOn(int device, size_t bytes) override {
    checkDeviceIndex(device);
    return allocateValid(device, bytes, currentStreamIdUnchecked(device));
  }

  c10::DataPtr allocateValid(int device, size_t bytes, c10::StreamId stream) override {
    const c10::Device where(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
    checkByteCount("allocating device memory", bytes);
    // Like CUDA's allocator: an empty tensor owns no memory and no statistics.
    if (bytes == 0) return c10::DataPtr(nullptr, where);
    DeviceCache& cache = cacheFor(device);
    const std::shared_ptr<c10::GatheredContext> context = gather(RecordContext::STATE);
    Block* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(cache.mutex);
      processEvents(cache);
      block = mallocLocked(cache, device, stream, bytes, context);
    }
    return {block->ptr, block, &Allocator::deleter, where};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    runtime::selectedRuntime().memcpy(dest, src, count, runtime::MemcpyKind::DeviceToDevice);
  }

  bool initialized() override { return runtime::isInitialized(); }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override { emptyCacheAll(); }

  void emptyCacheAll() override {
    if (!caches_made_.load(std::memory_order_acquire)) return;  // nothing cached yet
    for (size_t d = 0; d < caches_.size(); ++d) {
      if (!caches_[d]) continue;
      std::lock_guard<std::mutex> lock(caches_[d]->mutex);
      releaseCached(*caches_[d], static_cast<int>(d));
    }
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get_deleter() != &Allocator::deleter) return;  // not ours (e.g. from_blob)
    auto* block = static_cast<Block*>(ptr.get_context());
    TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1 &&
                    stream.device_index() == block->device,
                "record_stream: a tensor on infini:", block->device,
                " cannot be recorded on a stream of ", stream.device());
    DeviceCache& cache = cacheFor(block->device);
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (stream.id() == block->stream) return;
    for (const auto& s : block->stream_uses)
      if (s == stream) return;
    block->stream_uses.push_back(stream);
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    checkStatsDevice(device);
    DeviceCache& cache = cacheFor(device);
    std::lock_guard<std::mutex> lock(cache.mutex);
    flushHot(cache);
    return cache.stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    checkStatsDevice(device);
    DeviceCache& cache = cacheFor(device);
    std::lock_guard<std::mutex> lock(cache.mutex);
    flushHot(cache);
    forEachStatArray(cache.stats, [](StatArray& a) {
      for (auto& s : a) s.reset_accumulated();
    });
    DeviceStats& s = cache.stats;
    s.num_alloc_retries = s.num_ooms = s.num_device_alloc = s.num_device_free = 0;
    s.num_sync_all_streams = 0;
    s.oversize_allocations.reset_accumulated();
    s.oversize_segments.reset_accumulated();
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    checkStatsDevice(device);
    DeviceCache& cache = cacheFor(device);
    std::lock_guard<std::mutex> lock(cache.mutex);
    flushHot(cache);
    forEachStatArray(cache.stats, [](StatArray& a) {
      for (auto& s : a) s.reset_peak();
    });
    cache.stats.oversize_allocations.reset_peak();
    cache.stats.oversize_segments.reset_peak();
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    checkDeviceIndex(device);
    return runtime::selectedRuntime().memGetInfo(device);
  }

  bool deviceOf(const void* ptr, int* device) const override { return segments_.find(ptr, device); }

  void recordHistory(bool trace, CreateContextFn context_fn, RecordContext when, size_t max_entries,
                     bool clear) override {
    TORCH_CHECK(max_entries > 0, "_record_memory_history: max_entries must be positive");
    const int devices = deviceCount();
    for (int d = 0; d < devices; ++d) {
      DeviceCache& cache = cacheFor(d);
      std::lock_guard<std::mutex> lock(cache.mutex);
      linearize(cache);
      if (clear) cache.trace.clear();
      if (cache.trace.size() > max_entries)
        cache.trace.erase(cache.trace.begin(),
                          cache.trace.end() - static_cast<std::ptrdiff_t>(max_entries));
    }
    context_fn_.store(context_fn);
    record_when_.store(context_fn != nullptr ? static_cast<int>(when) : 0);
    max_entries_.store(max_entries);
    record_trace_.store(trace);
  }

  MemorySnapshot snapshot() override {
    MemorySnapshot result;
    const int devices = deviceCount();
    result.traces.resize(static_cast<size_t>(devices));
    for (int d = 0; d < devices; ++d) {
      DeviceCache& cache = cacheFor(d);
      std::lock_guard<std::mutex> lock(cache.mutex);
      flushHot(cache);
      for (const auto& [ptr, head] : cache.segments) {
        MemorySegmentSnapshot segment{};
        segment.device = d;
        segment.addr = reinterpret_cast<uintptr_t>(head->ptr);
        segment.total = head->size;
        segment.stream = head->stream;
        segment.small = head->small;
        segment.context = head->context;
        for (Block* b = head->head; b != nullptr; b = b->next) {
          using State = MemoryBlockSnapshot::State;
          const State state = b->allocated ? State::ActiveAllocated
                              : b->in_pool ? State::Inactive
                                           : State::ActivePendingFree;
          if (b->allocated) {
            segment.allocated += b->size;
            segment.requested += b->requested;
          }
          if (state != State::Inactive) segment.active += b->size;
          segment.blocks.push_back({reinterpret_cast<uintptr_t>(b->ptr), b->size,
                                    state == State::Inactive ? 0 : b->requested, state,
                                    b->context});
        }
        result.segments.push_back(std::move(segment));
      }
      const size_t n = cache.trace.size();
      std::vector<MemoryTraceEntry>& trace = result.traces[static_cast<size_t>(d)];
      trace.reserve(n);
      for (size_t i = 0; i < n; ++i) trace.push_back(cache.trace[(cache.trace_next + i) % n]);
    }
    return result;
  }

 private:
  // The stack of an allocator event, when history records contexts for it.
  std::shared_ptr<c10::GatheredContext> gather(RecordContext needed) const {
    if (record_when_.load(std::memory_order_relaxed) < static_cast<int>(needed)) return nullptr;
    CreateContextFn fn = context_fn_.load();
    return fn != nullptr ? fn() : nullptr;
  }

  bool contextFor(RecordContext needed) const {
    return record_when_.load(std::memory_order_relaxed) >= static_cast<int>(needed);
  }

  void recordTrace(DeviceCache& cache, Action action, int device, const void* addr, size_t size,
                   c10::StreamId stream, std::shared_ptr<c10::GatheredContext> context,
                   size_t device_free = 0) {
    if (!record_trace_.load(std::memory_order_relaxed)) return;
    MemoryTraceEntry entry{action,
                           device,
                           reinterpret_cast<uintptr_t>(addr),
                           size,
                           stream,
                           nowUs(),
                           device_free,
                           std::move(context)};
    const size_t max_entries = max_entries_.load();
    if (cache.trace.size() < max_entries) {
      cache.trace.push_back(std::move(entry));
    } else {
      cache.trace[cache.trace_next] = std::move(entry);
      cache.trace_next = (cache.trace_next + 1) % cache.trace.size();
    }
  }

  static void deleter(void* context);

  // Made on first use, when the runtime knows the device count. Checked
  // with an atomic flag: std::call_once costs a thread-local access and a
  // pthread_once call, on every allocation and every free.
  DeviceCache& cacheFor(int device) {
    if (!caches_made_.load(std::memory_order_acquire)) makeCaches();
    return *caches_[device];
  }

  void makeCaches() {
    std::lock_guard<std::mutex> lock(caches_mutex_);
    if (caches_made_.load(std::memory_order_relaxed)) return;
    caches_.resize(static_cast<size_t>(deviceCount()));
    for (auto& c : caches_) c = std::make_unique<DeviceCache>();
    caches_made_.store(true, std::memory_order_release);
  }

  template <typename F>
  static void forEachStatArray(DeviceStats& s, F f) {
    for (StatArray* a :
         {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
          &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes})
      f(*a);
  }

  // Adds `delta` to the aggregate and the block's pool entry of `array`.
  static void update(StatArray& array, bool small, int64_t delta) {
    for (size_t i : {static_cast<size_t>(StatType::AGGREGATE),
                     static_cast<size_t>(small ? StatType::SMALL_POOL : StatType::LARGE_POOL)}) {
      if (delta >= 0) {
        array[i].increase(static_cast<size_t>(delta));
      } else {
        array[i].decrease(static_cast<size_t>(-delta));
      }
    }
  }

  static Pool& poolFor(DeviceCache& cache, bool small) { return small ? cache.small : cache.large; }

  // Free blocks enter and leave pools only here, so the inactive-split
  // statistics (free pieces of split segments) stay exact.
  static Pool::iterator insertFree(DeviceCache& cache, Block* block) {
    Pool& pool = poolFor(cache, block->small);
    Pool::iterator position;
    if (cache.spare_nodes.empty()) {
      position = pool.insert(block).first;
    } else {
      Pool::node_type node = std::move(cache.spare_nodes.back());
      cache.spare_nodes.pop_back();
      node.value() = block;
      position = pool.insert(std::move(node)).position;
    }
    block->in_pool = true;
    if (block->isSplit()) {
      update(cache.stats.inactive_split, block->small, 1);
      update(cache.stats.inactive_split_bytes, block->small, static_cast<int64_t>(block->size));
    }
    return position;
  }

  static void removeFree(DeviceCache& cache, Block* block) {
    cache.spare_nodes.push_back(poolFor(cache, block->small).extract(block));
    block->in_pool = false;
    if (block->isSplit()) {
      update(cache.stats.inactive_split, block->small, -1);
      update(cache.stats.inactive_split_bytes, block->small, -static_cast<int64_t>(block->size));
    }
  }

  static Block* newBlock(DeviceCache& cache, Block value) {
    if (cache.spare_blocks.empty()) return new Block(std::move(value));
    Block* block = cache.spare_blocks.back();
    cache.spare_blocks.pop_back();
    *block = std::move(value);
    return block;
  }

  static void recycle(DeviceCache& cache, Block* block) { cache.spare_blocks.push_back(block); }

  static size_t splitThreshold(bool small) { return small ? kMinBlockSize : kSmallSize + 1; }

  Block* mallocLocked(DeviceCache& cache, int device, c10::StreamId stream, size_t bytes,
                      const std::shared_ptr<c10::GatheredContext>& context) {
    const size_t size = roundSize(bytes);
    const bool small = size <= kSmallSize;
    if (Block* hot = takeHot(cache, stream, size); hot != nullptr) {
      activate(cache, hot, device, stream, bytes, context);
      return hot;
    }
    Pool& pool = poolFor(cache, small);

    auto it = pool.lower_bound(Key{stream, size, nullptr});
    if ((it == pool.end() || (*it)->stream != stream) && cache.hot_blocks > 0) {
      flushHot(cache);  // merged, they may make room
      it = pool.lower_bound(Key{stream, size, nullptr});
    }
    if (it == pool.end() || (*it)->stream != stream) {
      // Nothing cached fits: a new segment enters the pool as one free block.
      it = insertFree(cache, newSegment(cache, device, stream, size, bytes, context));
    }
    Block* block = nullptr;
    Block* found = *it;
    const size_t remaining = found->size - size;
    if (remaining >= splitThreshold(small)) {
      // The allocation takes the front of the free block; the free rest
      // is the same block, shrunk (usually in its pool place).
      block = newBlock(cache, Block(device, stream, size, found->ptr, small, found->segment));
      const bool was_split = found->isSplit();
      block->prev = found->prev;
      block->next = found;
      if (block->prev) {
        block->prev->next = block;
      } else {
        block->segment->head = block;
      }
      found->prev = block;
      reshapeFree(pool, it, found->ptr + size, remaining);
      // Like CUDA: a split block shrinks by `size`; an unsplit one
      // becomes a new inactive split block of `remaining` bytes.
      if (was_split) {
        update(cache.stats.inactive_split_bytes, small, -static_cast<int64_t>(size));
      } else {
        update(cache.stats.inactive_split, small, 1);
        update(cache.stats.inactive_split_bytes, small, static_cast<int64_t>(remaining));
      }
    } else {
      block = found;
      removeFree(cache, block);
    }
    activate(cache, block, device, stream, bytes, context);
    return block;
  }

  // A free block of exactly `size` bytes on `stream` from the hot blocks,
  // the one freed last; or null.
  static Block* takeHot(DeviceCache& cache, c10::StreamId stream, size_t size) {
    if (size > kHotMaxSize || cache.hot_blocks == 0) return nullptr;
    std::vector<Block*>& blocks = cache.hot[size / kMinBlockSize];
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
      if ((*it)->stream != stream) continue;
      Block* block = *it;
      blocks.erase(std::next(it).base());
      --cache.hot_blocks;
      return block;
    }
    return nullptr;
  }

  // Keeps a freed small block whole for the next allocation of its size,
  // when there is room; else false.
  static bool keepHot(DeviceCache& cache, Block* block) {
    if (!block->small || block->size > kHotMaxSize) return false;
    std::vector<Block*>& blocks = cache.hot[block->size / kMinBlockSize];
    if (blocks.size() >= kHotPerSize) return false;
    blocks.push_back(block);
    ++cache.hot_blocks;
    return true;
  }

  // Every hot block into the pool, merged with its free neighbours.
  static void flushHot(DeviceCache& cache) {
    size_t left = cache.hot_blocks;
    for (auto it = cache.hot.begin(); left > 0 && it != cache.hot.end(); ++it) {
      for (Block* block : *it) returnToPool(cache, block);
      left -= it->size();
      it->clear();
    }
    cache.hot_blocks = 0;
  }

  // A free block becomes the allocation of `bytes`.
  void activate(DeviceCache& cache, Block* block, int device, c10::StreamId stream, size_t bytes,
                const std::shared_ptr<c10::GatheredContext>& context) {
    const bool small = block->small;
    block->allocated = true;
    block->requested = bytes;
    DeviceStats& s = cache.stats;
    update(s.allocation, small, 1);
    update(s.active, small, 1);
    update(s.allocated_bytes, small, static_cast<int64_t>(block->size));
    update(s.active_bytes, small, static_cast<int64_t>(block->size));
    update(s.requested_bytes, small, static_cast<int64_t>(bytes));
    reportToProfiler(cache, block, static_cast<int64_t>(block->size));
    block->context = context;
    Poison::unpoison(block->ptr, bytes);
    Poison::poison(block->ptr + bytes, block->size - bytes);
    recordTrace(cache, Action::Alloc, device, block->ptr, bytes, stream,
                contextFor(RecordContext::ALLOC) ? context : nullptr);
  }

  // torch.profiler's profile_memory: each allocation and free, with the
  // device's totals afterwards (a no-op unless a profiler records memory).
  static void reportToProfiler(const DeviceCache& cache, const Block* block, int64_t delta) {
    if (!c10::memoryProfilingEnabled()) return;
    const auto agg = static_cast<size_t>(StatType::AGGREGATE);
    c10::reportMemoryUsageToProfiler(
        block->ptr, delta, static_cast<size_t>(cache.stats.allocated_bytes[agg].current),
        static_cast<size_t>(cache.stats.reserved_bytes[agg].current),
        c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(block->device)));
  }

  // Gives the free block at `it` the extent [ptr, ptr + size). When its new
  // key still sorts between its pool neighbours (a block shrinking or
  // growing at one end usually does), it keeps its node: no rebalancing.
  static void reshapeFree(Pool& pool, Pool::iterator it, char* ptr, size_t size) {
    Block* block = *it;
    const Key key{block->stream, size, ptr};
    const bool after_prev = it == pool.begin() || keyOf(*std::prev(it)) < key;
    const bool before_next = std::next(it) == pool.end() || key < keyOf(*std::next(it));
    if (after_prev && before_next) {
      block->ptr = ptr;  // the pool's order is unchanged
      block->size = size;
      return;
    }
    Pool::node_type node = pool.extract(it);
    block->ptr = ptr;
    block->size = size;
    pool.insert(std::move(node));
  }

  Block* newSegment(DeviceCache& cache, int device, c10::StreamId stream, size_t size,
                    size_t requested, const std::shared_ptr<c10::GatheredContext>& context) {
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    const size_t bytes = segmentSize(size);
    void* ptr = rt.malloc(device, bytes);
    if (ptr == nullptr) {
      // Give the cache back to the runtime and try once more.
      ++cache.stats.num_alloc_retries;
      releaseCached(cache, device);
      ptr = rt.malloc(device, bytes);
    }
    if (ptr == nullptr) {
      ++cache.stats.num_ooms;
      auto [free_bytes, total] = rt.memGetInfo(device);
      recordTrace(cache, Action::Oom, device, nullptr, requested, stream,
                  contextFor(RecordContext::ALLOC) ? context : nullptr, free_bytes);
      const auto agg = static_cast<size_t>(StatType::AGGREGATE);
      TORCH_CHECK_WITH(
          OutOfMemoryError, false, "infini: out of memory on device ", device, " (backend '",
          rt.name(), "'). Tried to allocate ", formatBytes(requested), " (a ", formatBytes(bytes),
          " segment); ", formatBytes(cache.stats.allocated_bytes[agg].current),
          " allocated by PyTorch, ", formatBytes(cache.stats.reserved_bytes[agg].current),
          " reserved, ", formatBytes(free_bytes), " free of ", formatBytes(total),
          " total. torch.infini.empty_cache() returns cached blocks to the device.");
    }
    segments_.insert(ptr, bytes, device);
    const bool small = size <= kSmallSize;
    update(cache.stats.segment, small, 1);
    update(cache.stats.reserved_bytes, small, static_cast<int64_t>(bytes));
    ++cache.stats.num_device_alloc;
    auto& head = cache.segments[static_cast<char*>(ptr)];
    head = std::make_unique<SegmentHead>(
        SegmentHead{static_cast<char*>(ptr), bytes, stream, small, nullptr, context});
    Block* block =
        newBlock(cache, Block(device, stream, bytes, static_cast<char*>(ptr), small, head.get()));
    head->head = block;
    Poison::poison(ptr, bytes);
    recordTrace(cache, Action::SegmentAlloc, device, ptr, bytes, stream,
                contextFor(RecordContext::ALLOC) ? context : nullptr);
    return block;
  }

  void freeLocked(DeviceCache& cache, Block* block,
                  const std::shared_ptr<c10::GatheredContext>& context) {
    recordTrace(cache, Action::FreeRequested, block->device, block->ptr, block->requested,
                block->stream, context);
    DeviceStats& s = cache.stats;
    update(s.allocation, block->small, -1);
    update(s.allocated_bytes, block->small, -static_cast<int64_t>(block->size));
    update(s.requested_bytes, block->small, -static_cast<int64_t>(block->requested));
    reportToProfiler(cache, block, -static_cast<int64_t>(block->size));
    block->allocated = false;
    if (!block->stream_uses.empty()) {
      // Other streams may still read or write it: reuse after their work.
      runtime::DeviceRuntime& rt = runtime::selectedRuntime();
      std::vector<c10::Stream> uses;
      uses.swap(block->stream_uses);
      for (const c10::Stream& use : uses) {
        if (rt.capabilities().events) {
          runtime::EventHandle event = rt.createEvent(block->device, false);
          rt.recordEvent(event, nativeStream(use));
          cache.pending.emplace_back(event, block);
          ++block->pending_events;
        } else {
          rt.synchronizeStream(nativeStream(use));  // no events: wait now
        }
      }
      if (block->pending_events > 0) return;  // still active until the events complete
    }
    release(cache, block, context);
  }

  // A no-longer-active block: kept hot, or back to its pool.
  void release(DeviceCache& cache, Block* block,
               const std::shared_ptr<c10::GatheredContext>& context = nullptr) {
    recordTrace(cache, Action::FreeCompleted, block->device, block->ptr, block->requested,
                block->stream, context);
    block->context.reset();
    Poison::poison(block->ptr, block->size);
    update(cache.stats.active, block->small, -1);
    update(cache.stats.active_bytes, block->small, -static_cast<int64_t>(block->size));
    if (!keepHot(cache, block)) returnToPool(cache, block);
  }

  // A free block into its pool, merged with free neighbours.
  static void returnToPool(DeviceCache& cache, Block* block) {
    Block* free_prev = block->prev != nullptr && block->prev->in_pool ? block->prev : nullptr;
    Block* free_next = block->next != nullptr && block->next->in_pool ? block->next : nullptr;
    if ((free_prev == nullptr) != (free_next == nullptr)) {
      absorbIntoNeighbour(cache, block, free_prev != nullptr ? free_prev : free_next);
      return;
    }
    for (Block* neighbour : {block->prev, block->next}) {
      if (neighbour == nullptr || !neighbour->in_pool) continue;
      removeFree(cache, neighbour);
      if (neighbour == block->prev) {
        block->ptr = neighbour->ptr;
        block->prev = neighbour->prev;
        if (block->prev) {
          block->prev->next = block;
        } else {
          block->segment->head = block;
        }
      } else {
        block->next = neighbour->next;
        if (block->next) block->next->prev = block;
      }
      block->size += neighbour->size;
      recycle(cache, neighbour);
    }
    insertFree(cache, block);
  }

  // The usual free: one neighbour is free and grows over the block, which
  // leaves the segment (CUDA's net accounting of inactive split blocks).
  static void absorbIntoNeighbour(DeviceCache& cache, Block* block, Block* neighbour) {
    char* ptr = neighbour == block->prev ? neighbour->ptr : block->ptr;
    if (neighbour == block->prev) {
      neighbour->next = block->next;
      if (block->next) block->next->prev = neighbour;
    } else {
      neighbour->prev = block->prev;
      if (block->prev) {
        block->prev->next = neighbour;
      } else {
        neighbour->segment->head = neighbour;
      }
    }
    const size_t old_size = neighbour->size;
    Pool& pool = poolFor(cache, neighbour->small);
    reshapeFree(pool, pool.find(neighbour), ptr, old_size + block->size);
    if (neighbour->isSplit()) {
      update(cache.stats.inactive_split_bytes, block->small, static_cast<int64_t>(block->size));
    } else {  // the whole segment is free again
      update(cache.stats.inactive_split, block->small, -1);
      update(cache.stats.inactive_split_bytes, block->small, -static_cast<int64_t>(old_size));
    }
    recycle(cache, block);
  }

  void processEvents(DeviceCache& cache) {
    runtime::DeviceRuntime* rt = nullptr;
    while (!cache.pending.empty()) {
      auto [event, block] = cache.pending.front();
      if (rt == nullptr) rt = &runtime::selectedRuntime();
      if (!rt->queryEvent(event)) break;
      cache.pending.pop_front();
      rt->destroyEvent(event);
      if (--block->pending_events == 0) release(cache, block);
    }
  }

  // Waits for pending cross-stream frees, then hands every free, whole
  // segment back to the runtime.
  void releaseCached(DeviceCache& cache, int device) {
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    while (!cache.pending.empty()) {
      auto [event, block] = cache.pending.front();
      rt.synchronizeEvent(event);  // may throw: the use stays pending
      cache.pending.pop_front();
      rt.destroyEvent(event);
      if (--block->pending_events == 0) release(cache, block);
    }
    flushHot(cache);
    ++cache.stats.num_sync_all_streams;
    for (Pool* pool : {&cache.small, &cache.large}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* block = *it;
        if (block->isSplit()) {
          ++it;
          continue;
        }
        // The runtime's free first: should it throw, the segment stays in
        // the pool, still counted and still reusable.
        Poison::unpoison(block->ptr, block->size);
        rt.free(device, block->ptr);
        it = pool->erase(it);
        block->in_pool = false;
        segments_.erase(block->ptr);
        cache.segments.erase(block->ptr);
        recordTrace(cache, Action::SegmentFree, device, block->ptr, block->size, block->stream,
                    nullptr);
        update(cache.stats.segment, block->small, -1);
        update(cache.stats.reserved_bytes, block->small, -static_cast<int64_t>(block->size));
        ++cache.stats.num_device_free;
        recycle(cache, block);
      }
    }
  }

  std::mutex caches_mutex_;
  std::atomic<bool> caches_made_{false};
  std::vector<std::unique_ptr<DeviceCache>> caches_;
  RangeMap segments_;
  // Memory history settings (recordHistory).
  std::atomic<int> record_when_{0};  // a RecordContext
  std::atomic<bool> record_trace_{false};
  std::atomic<CreateContextFn> context_fn_{nullptr};
  std::atomic<size_t> max_entries_{SIZE_MAX};
};

Allocator& instance() {
  static auto* allocator = new Allocator();  // outlives static destructors
  return *allocator;
}

void Allocator::deleter(void* context) {
  auto* block = static_cast<Block*>(context);
  Allocator& self = instance();
  DeviceCache& cache = self.cacheFor(block->device);
  const std::shared_ptr<c10::GatheredContext> stack = self.gather(RecordContext::ALL);
  std::lock_guard<std::mutex> lock(cache.mutex);
  self.freeLocked(cache, block, stack);
}

}  // namespace

CachingDeviceAllocator& cachingDeviceAllocator() { return instance(); }

void recordMemoryHistory(bool trace, CreateContextFn context_fn, RecordContext when,
                         size_t max_entries, bool clear) {
  instance().recordHistory(trace, context_fn, when, max_entries, clear);
}

MemorySnapshot memorySnapshot() { return instance().snapshot(); }

}  // namespace torch_infini
