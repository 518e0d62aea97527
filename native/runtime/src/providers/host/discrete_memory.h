// Device memory the host cannot touch: the `host` device's discrete mode
// (TORCH_INFINI_HOST_MEMORY=discrete), which makes on any machine the
// memory an accelerator has.
//
// One address range is reserved, in two halves of equal size. A device
// allocation takes addresses from the lower half, which stay without access
// rights: that is the address PyTorch sees (data_ptr()), and any host read
// or write there faults at once, in every thread, with no state to toggle
// (OpenReg's mprotect around each kernel is process-wide and races between
// threads and streams). Its bytes live at the same offset in the upper half,
// mapped read-write: the kernel view, which only the runtime's copy engine
// (memcpy, memset) and the host kernel provider use. A fault at a device
// address is reported as such before the process dies.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "torch_infini/runtime/host_runtime.h"

namespace torch_infini::runtime {

class DiscreteMemory {
 public:
  // Reserves room for `capacity` bytes of device memory (address space
  // only; pages are mapped as allocations need them).
  explicit DiscreteMemory(size_t capacity);
  ~DiscreteMemory();
  DiscreteMemory(const DiscreteMemory&) = delete;
  DiscreteMemory& operator=(const DiscreteMemory&) = delete;

  // A device address of `bytes` bytes (zeroed), or nullptr when the range
  // is full. Page-aligned.
  void* allocate(size_t bytes);
  void release(void* device_address);

 private:
  uintptr_t base_ = 0;  // lower half: device addresses
  size_t half_ = 0;
  std::mutex mutex_;
  std::map<uintptr_t, size_t> free_;  // offset -> length, coalesced
  std::map<uintptr_t, size_t> used_;  // offset -> length
};

}  // namespace torch_infini::runtime
