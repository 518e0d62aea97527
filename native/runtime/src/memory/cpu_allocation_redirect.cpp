// The redirecting CPU allocator (cpu_allocation_redirect.h).
//
// Outside a RedirectCpuAllocations scope every call forwards to the
// allocator it replaced, so CPU tensors are unchanged. Inside one, an
// allocation is a device block, kept in a table by address, and handed out
// as a CPU data pointer whose context is the address: what raw_allocate()
// requires, since some CPU kernels (oneDNN's scratch memory) take raw
// memory from the CPU allocator and free it with raw_deleter(). Both that
// deleter and the data pointer's own return the block to the device cache;
// the raw deleter passes any other address to the original allocator's.
#include "torch_infini/runtime/cpu_allocation_redirect.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/backend_selection.h"

namespace torch_infini {
namespace {

struct Target {
  int device = -1;  // -1: no redirect
  c10::StreamId stream = 0;
};
thread_local Target target;

// A spin lock: the table's critical sections are a few loads and stores,
// less than a mutex's own lock and unlock cost.
class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// The device blocks handed out as CPU memory, by address: open addressing
// with linear probing, at most half full, so that an add and a take (once
// per fallback result) cost no heap allocation.
class Blocks {
 public:
  void add(c10::DataPtr block) {
    void* address = block.get();
    std::lock_guard<SpinLock> lock(lock_);
    if ((size_ + 1) * 2 > slots_.size()) grow();
    size_t i = home(address);
    while (slots_[i].address != nullptr) i = (i + 1) & mask_;
    slots_[i] = {address, std::move(block)};
    ++size_;
  }

  // The block at `address`, removed from the table; false if there is none.
  // The caller drops it (back to the device cache) outside the lock.
  bool take(void* address, c10::DataPtr* block) {
    if (address == nullptr) return false;  // (an empty slot's key: never an entry)
    std::lock_guard<SpinLock> lock(lock_);
    if (size_ == 0) return false;
    size_t i = home(address);
    while (slots_[i].address != address) {
      if (slots_[i].address == nullptr) return false;
      i = (i + 1) & mask_;
    }
    *block = std::move(slots_[i].block);
    erase(i);
    --size_;
    return true;
  }

 private:
  struct Slot {
    void* address = nullptr;
    c10::DataPtr block;
  };

  size_t home(const void* address) const {
    // Fibonacci hashing: the top bits of the product spread aligned addresses.
    return static_cast<size_t>((reinterpret_cast<uint64_t>(address) * 0x9E3779B97F4A7C15ull) >>
                               shift_);
  }

  // Backward-shift deletion: later entries of the probe run move into the
  // hole when their home slot lies at or before it, so no tombstones.
  void erase(size_t hole) {
    for (size_t i = (hole + 1) & mask_; slots_[i].address != nullptr; i = (i + 1) & mask_) {
      const size_t from_home = (i - home(slots_[i].address)) & mask_;
      if (from_home >= ((i - hole) & mask_)) {
        slots_[hole] = std::move(slots_[i]);
        hole = i;
      }
    }
    slots_[hole] = Slot();
  }

  void grow() {
    const size_t capacity = slots_.empty() ? kInitialSlots : slots_.size() * 2;
    std::vector<Slot> previous = std::exchange(slots_, std::vector<Slot>(capacity));
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(capacity));
    for (Slot& slot : previous) {
      if (slot.address == nullptr) continue;
      size_t i = home(slot.address);
      while (slots_[i].address != nullptr) i = (i + 1) & mask_;
      slots_[i] = std::move(slot);
    }
  }

  static constexpr size_t kInitialSlots = 64;  // a power of two

  SpinLock lock_;
  std::vector<Slot> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
  unsigned shift_ = 64;
};

Blocks& blocks() {
  static auto* table = new Blocks();  // outlives static destructors, as CPU tensors may
  return *table;
}

// The deleter of a redirected CPU data pointer (context == address). The
// block returns to the device cache when `block` goes out of scope.
void freeRedirected(void* address) {
  c10::DataPtr block;
  const bool found = blocks().take(address, &block);
  TORCH_INTERNAL_ASSERT(found, "infini: a redirected CPU allocation was freed twice");
}

c10::DeleterFnPtr original_raw_deleter = nullptr;

void rawFree(void* address) {
  c10::DataPtr block;
  if (!blocks().take(address, &block) && original_raw_deleter != nullptr)
    original_raw_deleter(address);
}

class RedirectingCpuAllocator final : public c10::Allocator {
 public:
  explicit RedirectingCpuAllocator(c10::Allocator* original) : original_(original) {}

  c10::DataPtr allocate(size_t n) override {
    const Target t = target;
    if (t.device < 0 || n == 0) return original_->allocate(n);
    // Written by the CPU kernel now, on this thread: no queued work may
    // still touch the block.
    c10::DataPtr block = allocateForHostAccess(t.device, n, t.stream);
    void* address = block.get();
    blocks().add(std::move(block));
    return {address, address, &freeRedirected, c10::Device(c10::kCPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &rawFree; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    original_->copy_data(dest, src, count);
  }

  bool is_simple_data_ptr(const c10::DataPtr& data) const override {
    return isRedirectedAllocation(data) || original_->is_simple_data_ptr(data);
  }

 private:
  c10::Allocator* original_;
};

}  // namespace

void installCpuAllocationRedirect() {
  // Checked on every fallback call: one load once installed.
  static std::atomic<bool> installed{false};
  if (installed.load(std::memory_order_acquire)) return;
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* original = c10::GetCPUAllocator();
    original_raw_deleter = original->raw_deleter();
    // Leaked on purpose: CPU storages keep a pointer to their allocator.
    c10::SetCPUAllocator(new RedirectingCpuAllocator(original), /*priority=*/0);
  });
  installed.store(true, std::memory_order_release);
}

RedirectCpuAllocations::RedirectCpuAllocations(int device, c10::StreamId stream)
    : previous_device_(target.device), previous_stream_(target.stream) {
  // Device memory handed to CPU kernels must be memory the CPU can address
  // (a discrete device's would fault in the kernel).
  TORCH_CHECK(runtime::selectedRuntime().capabilities().host_addressable,
              "infini: CPU allocations can be redirected to device memory only where the host "
              "can address it (backend '",
              runtime::selectedRuntime().name(), "' cannot)");
  installCpuAllocationRedirect();
  target = {device, stream};
}

RedirectCpuAllocations::~RedirectCpuAllocations() { target = {previous_device_, previous_stream_}; }

bool isRedirectedAllocation(const c10::DataPtr& data) {
  return data.get_deleter() == &freeRedirected;
}

c10::DataPtr takeDeviceAllocation(c10::DataPtr&& data) {
  TORCH_INTERNAL_ASSERT(isRedirectedAllocation(data));
  void* address = data.get();
  data.release_context();  // the table's block is the owner now
  c10::DataPtr block;
  const bool found = blocks().take(address, &block);
  TORCH_INTERNAL_ASSERT(found, "infini: a redirected CPU allocation is not in the table");
  return block;
}

}  // namespace torch_infini
