#include "torch_infini/runtime/allocator.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "torch_infini/runtime/backend.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatType;

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

// Address ranges of live allocations, for pointer -> device / pinned queries.
class RangeMap {
 public:
  void insert(const void* ptr, size_t bytes, int tag) {
    std::lock_guard<std::mutex> lock(mutex_);
    ranges_[reinterpret_cast<uintptr_t>(ptr)] = {bytes, tag};
  }
  // Returns the size of the erased range.
  size_t erase(const void* ptr, int* tag) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = ranges_.find(reinterpret_cast<uintptr_t>(ptr));
    TORCH_INTERNAL_ASSERT(it != ranges_.end(), "infini: freeing an unknown pointer");
    size_t bytes = it->second.bytes;
    if (tag) *tag = it->second.tag;
    ranges_.erase(it);
    return bytes;
  }
  bool find(const void* ptr, int* tag) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto address = reinterpret_cast<uintptr_t>(ptr);
    auto it = ranges_.upper_bound(address);
    if (it == ranges_.begin()) return false;
    --it;
    // A zero-byte allocation still owns its (aligned, non-null) start address.
    if (address >= it->first + std::max<size_t>(it->second.bytes, 1)) return false;
    if (tag) *tag = it->second.tag;
    return true;
  }

 private:
  struct Entry {
    size_t bytes;
    int tag;
  };
  mutable std::mutex mutex_;
  std::map<uintptr_t, Entry> ranges_;
};

// Device allocator: every block comes from the runtime and goes back to it.
// Statistics follow torch.cuda.memory_stats names for what is tracked.
class InfiniDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t bytes) override { return allocateOn(currentDevice(), bytes); }

  c10::DataPtr allocateOn(int device, size_t bytes) {
    checkDeviceIndex(device);
    runtime::DeviceRuntime& rt = runtime::get();
    void* ptr = rt.malloc(device, bytes);
    if (ptr == nullptr) {
      auto [free_bytes, total] = rt.memGetInfo(device);
      DeviceStats snapshot = getDeviceStats(device);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_[device].num_ooms;
      }
      TORCH_CHECK_WITH(OutOfMemoryError, false, "infini: out of memory on device ", device,
                       " (backend '", rt.name(), "'). Tried to allocate ", formatBytes(bytes), "; ",
                       formatBytes(snapshot.allocated_bytes[0].current), " allocated by PyTorch, ",
                       formatBytes(snapshot.reserved_bytes[0].current), " reserved, ",
                       formatBytes(free_bytes), " free of ", formatBytes(total), " total.");
    }
    ranges_.insert(ptr, bytes, device);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      DeviceStats& s = statsFor(device);
      for (auto* stat : {&s.allocation, &s.segment, &s.active})
        (*stat)[static_cast<size_t>(StatType::AGGREGATE)].increase(1);
      for (auto* stat :
           {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.requested_bytes})
        (*stat)[static_cast<size_t>(StatType::AGGREGATE)].increase(bytes);
      ++s.num_device_alloc;
    }
    return {ptr, ptr, &InfiniDeviceAllocator::deleter,
            c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device))};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &InfiniDeviceAllocator::deleter; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    runtime::get().memcpy(dest, src, count, runtime::MemcpyKind::DeviceToDevice);
  }

  bool initialized() override { return runtime::isInitialized(); }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    // Nothing is cached: every free goes straight back to the runtime.
  }

  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {
    // Frees go straight to the runtime, whose free waits for the device's
    // queued work, so a block is never reused while another stream uses it.
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceStats copy = statsFor(device);
    return copy;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceStats& s = statsFor(device);
    for (auto* array :
         {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
          &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes})
      for (auto& stat : *array) stat.reset_accumulated();
    s.num_alloc_retries = s.num_ooms = s.num_device_alloc = s.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceStats& s = statsFor(device);
    for (auto* array :
         {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
          &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes})
      for (auto& stat : *array) stat.reset_peak();
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    checkDeviceIndex(device);
    return runtime::get().memGetInfo(device);
  }

  bool deviceOf(const void* ptr, int* device) const { return ranges_.find(ptr, device); }

 private:
  static void deleter(void* ptr);

  DeviceStats& statsFor(int device) {
    if (stats_.size() <= static_cast<size_t>(device)) stats_.resize(device + 1);
    return stats_[device];
  }

  void release(void* ptr) {
    int device = 0;
    size_t bytes = ranges_.erase(ptr, &device);
    runtime::get().free(device, ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceStats& s = statsFor(device);
    for (auto* stat : {&s.allocation, &s.segment, &s.active})
      (*stat)[static_cast<size_t>(StatType::AGGREGATE)].decrease(1);
    for (auto* stat : {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.requested_bytes})
      (*stat)[static_cast<size_t>(StatType::AGGREGATE)].decrease(bytes);
    ++s.num_device_free;
  }

  RangeMap ranges_;
  std::mutex mutex_;
  std::vector<DeviceStats> stats_;
};

InfiniDeviceAllocator& theDeviceAllocator() {
  static auto* allocator = new InfiniDeviceAllocator();
  return *allocator;
}

void InfiniDeviceAllocator::deleter(void* ptr) { theDeviceAllocator().release(ptr); }

// Pinned host allocator: page-locked memory from the runtime.
class InfiniPinnedAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    void* ptr = runtime::get().mallocHost(bytes);
    TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr || bytes == 0, "infini: failed to allocate ",
                     formatBytes(bytes), " of pinned host memory");
    ranges_.insert(ptr, bytes, 0);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(bytes);
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(bytes);
      ++stats_.num_host_alloc;
    }
    return {ptr, ptr, &InfiniPinnedAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &InfiniPinnedAllocator::deleter; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override {
    // freeHost waits for queued copies, so there is nothing to track here.
    return true;
  }

  void empty_cache() override {}

  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocations.reset_accumulated();
    stats_.allocated_bytes.reset_accumulated();
    stats_.active_requests.reset_accumulated();
    stats_.active_bytes.reset_accumulated();
    stats_.num_host_alloc = stats_.num_host_free = 0;
  }

  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocations.reset_peak();
    stats_.allocated_bytes.reset_peak();
    stats_.active_requests.reset_peak();
    stats_.active_bytes.reset_peak();
  }

  bool owns(const void* ptr) const { return ranges_.find(ptr, nullptr); }

 private:
  static void deleter(void* ptr);

  void release(void* ptr) {
    size_t bytes = ranges_.erase(ptr, nullptr);
    runtime::get().freeHost(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.active_requests.decrease(1);
    stats_.active_bytes.decrease(bytes);
    stats_.allocations.decrease(1);
    stats_.allocated_bytes.decrease(bytes);
    ++stats_.num_host_free;
  }

  RangeMap ranges_;
  std::mutex mutex_;
  at::HostStats stats_;
};

InfiniPinnedAllocator& thePinnedAllocator() {
  static auto* allocator = new InfiniPinnedAllocator();
  return *allocator;
}

void InfiniPinnedAllocator::deleter(void* ptr) { thePinnedAllocator().release(ptr); }

// Registration at load time, before any tensor can be created on `infini`.
struct Registration {
  Registration() {
    c10::SetAllocator(c10::DeviceType::PrivateUse1, &theDeviceAllocator());
    at::setHostAllocator(c10::DeviceType::PrivateUse1, &thePinnedAllocator());
  }
} registration;

}  // namespace

c10::DeviceAllocator* deviceAllocator() { return &theDeviceAllocator(); }

c10::DataPtr allocateOnDevice(int device, size_t bytes) {
  return theDeviceAllocator().allocateOn(device, bytes);
}

void resizeStorageBytes(const c10::Storage& storage, size_t new_bytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  TORCH_CHECK(storage.device().type() == c10::DeviceType::PrivateUse1,
              "infini: resizeStorageBytes on a storage of ", storage.device());
  int device = storage.device().index();
  c10::DataPtr fresh = allocateOnDevice(device, new_bytes);
  size_t common = std::min(storage.nbytes(), new_bytes);
  if (common > 0) {
    runtime::get().memcpyAsync(fresh.get(), storage.data(), common,
                               runtime::MemcpyKind::DeviceToDevice,
                               nativeStream(currentStream(device)));
  }
  // The old block is freed here; the runtime's free waits for the copy.
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(new_bytes);
}

bool deviceOfPointer(const void* ptr, int* device) {
  return theDeviceAllocator().deviceOf(ptr, device);
}

c10::Allocator* pinnedAllocator() { return &thePinnedAllocator(); }

bool isPinnedPointer(const void* ptr) { return ptr != nullptr && thePinnedAllocator().owns(ptr); }

}  // namespace torch_infini
