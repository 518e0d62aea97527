// CPU allocations in device memory, for the CPU fallback where device memory
// is host memory (capability host_addressable).
//
// A CPU kernel run by the fallback allocates its results through PyTorch's
// CPU allocator. While a RedirectCpuAllocations scope is alive, the
// allocations this thread makes there come from the device's caching
// allocator instead (on the given stream), handed out as plain CPU data
// pointers; a result so allocated becomes a device tensor's memory without a
// copy (takeDeviceAllocation). Other threads, and this thread outside a
// scope, allocate as before.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

namespace torch_infini {

class RedirectCpuAllocations {
 public:
  // Installs the redirecting CPU allocator on first use; outside a scope it
  // forwards every call to the allocator it replaced.
  RedirectCpuAllocations(int device, c10::StreamId stream);
  ~RedirectCpuAllocations();
  RedirectCpuAllocations(const RedirectCpuAllocations&) = delete;
  RedirectCpuAllocations& operator=(const RedirectCpuAllocations&) = delete;

 private:
  int previous_device_;
  c10::StreamId previous_stream_;
};

// Installs the redirecting CPU allocator now (idempotent): at initialization,
// before other threads allocate, rather than at the first fallback call.
void installCpuAllocationRedirect();

// Whether `data` (a CPU data pointer) was allocated in device memory inside
// a RedirectCpuAllocations scope and is still its owner.
bool isRedirectedAllocation(const c10::DataPtr& data);

// The device allocation behind `data` (isRedirectedAllocation), as the
// device allocator made it: `data` gives it up and must not be used again.
c10::DataPtr takeDeviceAllocation(c10::DataPtr&& data);

}  // namespace torch_infini
