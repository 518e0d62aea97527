// Address ranges of memory an allocator handed out, for pointer -> owner
// queries (getDeviceFromPtr, is_pinned) that must accept interior pointers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>

namespace torch_infini {

class RangeMap {
 public:
  void insert(const void* ptr, size_t bytes, int tag) {
    std::lock_guard<std::mutex> lock(mutex_);
    ranges_[reinterpret_cast<uintptr_t>(ptr)] = {bytes, tag};
  }
  void erase(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    ranges_.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  bool find(const void* ptr, int* tag) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto address = reinterpret_cast<uintptr_t>(ptr);
    auto it = ranges_.upper_bound(address);
    if (it == ranges_.begin()) return false;
    --it;
    // A zero-byte range still owns its (non-null) start address.
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

}  // namespace torch_infini
