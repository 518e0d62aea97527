// The redirecting CPU allocator (cpu_allocation_redirect.h) the CPU fallback
// runs functional calls under: inside a scope, this thread's CPU allocations
// are device memory (also raw ones, which oneDNN frees through
// raw_deleter()), and every one returns to the device cache through either
// deleter, in any order and from any thread; outside a scope, and on other
// threads meanwhile, CPU memory is CPU memory.
#include <c10/core/CPUAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/cpu_allocation_redirect.h"
#include "torch_infini/torch_infini.h"

namespace {

constexpr size_t kAgg = static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);

int64_t allocatedBytes() {
  return torch_infini::deviceAllocator()->getDeviceStats(0).allocated_bytes[kAgg].current;
}

bool onDevice(const void* ptr) {
  int device = -1;
  return torch_infini::deviceOfPointer(ptr, &device) && device == 0;
}

void allocationsReturnThroughEitherDeleterFromAnyThread() {
  const int64_t base = allocatedBytes();
  c10::Allocator* cpu = c10::GetCPUAllocator();
  std::mt19937 rng(7);
  std::vector<void*> raw;
  std::vector<c10::DataPtr> owned;
  {
    torch_infini::RedirectCpuAllocations scope(/*device=*/0, /*stream=*/0);
    // Enough live blocks that the table grows several times, freed out of
    // order as they come.
    for (int i = 0; i < 3000; ++i) {
      const size_t bytes = 1 + rng() % 4096;
      if (rng() % 2 == 0) {
        raw.push_back(cpu->raw_allocate(bytes));
        CHECK(onDevice(raw.back()));
      } else {
        owned.push_back(cpu->allocate(bytes));
        CHECK(onDevice(owned.back().get()));
        CHECK(torch_infini::isRedirectedAllocation(owned.back()));
      }
      if (rng() % 3 == 0) {
        const size_t k = rng() % raw.size();
        cpu->raw_deleter()(raw[k]);
        raw[k] = raw.back();
        raw.pop_back();
      }
      if (rng() % 3 == 0 && !owned.empty()) {
        const size_t k = rng() % owned.size();
        owned[k] = std::move(owned.back());
        owned.pop_back();
      }
      if (raw.empty()) raw.push_back(cpu->raw_allocate(8));
    }
    CHECK(allocatedBytes() > base);
    // Another thread meanwhile allocates CPU memory.
    std::thread other([cpu] {
      c10::DataPtr elsewhere = cpu->allocate(256);
      CHECK(!onDevice(elsewhere.get()));
      CHECK(!torch_infini::isRedirectedAllocation(elsewhere));
    });
    other.join();
  }
  // Outside the scope: CPU memory again, freed by the original deleters.
  c10::DataPtr after = cpu->allocate(256);
  CHECK(!onDevice(after.get()));
  void* raw_after = cpu->raw_allocate(256);
  CHECK(!onDevice(raw_after));
  cpu->raw_deleter()(raw_after);
  cpu->raw_deleter()(nullptr);  // as free(nullptr): nothing
  // The rest, half on another thread, half here.
  std::thread other([&] {
    for (size_t i = 0; i < raw.size(); i += 2) cpu->raw_deleter()(raw[i]);
  });
  other.join();
  for (size_t i = 1; i < raw.size(); i += 2) cpu->raw_deleter()(raw[i]);
  owned.clear();
  CHECK(allocatedBytes() == base);
}

void aResultTakenOverLeavesTheTable() {
  const int64_t base = allocatedBytes();
  c10::DataPtr device;
  {
    torch_infini::RedirectCpuAllocations scope(0, 0);
    c10::DataPtr cpu = c10::GetCPUAllocator()->allocate(1000);
    void* address = cpu.get();
    device = torch_infini::takeDeviceAllocation(std::move(cpu));
    CHECK(device.get() == address);
    CHECK(device.device().type() == c10::DeviceType::PrivateUse1);
  }
  CHECK(allocatedBytes() > base);
  device.clear();
  CHECK(allocatedBytes() == base);
}

}  // namespace

// Where the host cannot address device memory (the host device's discrete
// mode, as an accelerator), CPU kernels must never get device memory: a
// redirect is refused, naming why.
void aRedirectIsRefusedWhereTheHostCannotAddressDeviceMemory() {
  bool refused = false;
  try {
    torch_infini::RedirectCpuAllocations scope(/*device=*/0, /*stream=*/0);
  } catch (const c10::Error& e) {
    refused = std::string(e.what_without_backtrace()).find("only where the host can address it") !=
              std::string::npos;
  }
  CHECK(refused);
}

int main() {
  torch_infini::init("host");
  if (!torch_infini::runtime::selectedRuntime().capabilities().host_addressable)
    return runTests({{"a redirect is refused where the host cannot address device memory",
                      aRedirectIsRefusedWhereTheHostCannotAddressDeviceMemory}});
  return runTests({
      {"allocations return through either deleter, from any thread",
       allocationsReturnThroughEitherDeleterFromAnyThread},
      {"a result taken over leaves the table", aResultTakenOverLeavesTheTable},
  });
}
