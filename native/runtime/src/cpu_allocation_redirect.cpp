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

#include <mutex>
#include <unordered_map>
#include <utility>

#include "torch_infini/runtime/allocator.h"

namespace torch_infini {
namespace {

struct Target {
  int device = -1;  // -1: no redirect
  c10::StreamId stream = 0;
};
thread_local Target target;

// The device blocks handed out as CPU memory, by address.
class Blocks {
 public:
  void add(c10::DataPtr block) {
    void* address = block.get();
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_.emplace(address, std::move(block));
  }
  // The block at `address`, removed from the table; false if there is none.
  bool take(void* address, c10::DataPtr* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(address);
    if (it == blocks_.end()) return false;
    *block = std::move(it->second);
    blocks_.erase(it);
    return true;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<void*, c10::DataPtr> blocks_;
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
    c10::DataPtr block = allocateOnValidDevice(t.device, n, t.stream);
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
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* original = c10::GetCPUAllocator();
    original_raw_deleter = original->raw_deleter();
    // Leaked on purpose: CPU storages keep a pointer to their allocator.
    c10::SetCPUAllocator(new RedirectingCpuAllocator(original), /*priority=*/0);
  });
}

RedirectCpuAllocations::RedirectCpuAllocations(int device, c10::StreamId stream)
    : previous_device_(target.device), previous_stream_(target.stream) {
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
