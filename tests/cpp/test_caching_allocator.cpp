// Unit tests of the caching device allocator through its c10 interface:
// reuse in stream order, statistics, record_stream, empty_cache.
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include "check.h"
#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/stream.h"
#include "torch_infini/torch_infini.h"

using c10::CachingDeviceAllocator::StatType;

namespace {

constexpr size_t kAgg = static_cast<size_t>(StatType::AGGREGATE);

c10::CachingDeviceAllocator::DeviceStats stats() {
  return torch_infini::deviceAllocator()->getDeviceStats(0);
}

void freedBlocksAreReusedWithoutNewSegments() {
  auto* alloc = torch_infini::deviceAllocator();
  alloc->emptyCache({0, 0});
  const auto before = stats();
  void* first = nullptr;
  {
    c10::DataPtr p = alloc->allocate(1000);
    first = p.get();
  }
  c10::DataPtr again = alloc->allocate(1000);
  CHECK(again.get() == first);  // same stream, same size: the cached block
  const auto after = stats();
  CHECK(after.num_device_alloc == before.num_device_alloc + 1);
  CHECK(after.allocated_bytes[kAgg].current == before.allocated_bytes[kAgg].current + 1024);
  CHECK(after.reserved_bytes[kAgg].current == before.reserved_bytes[kAgg].current + (2 << 20));
}

void emptyCacheReturnsSegments() {
  auto* alloc = torch_infini::deviceAllocator();
  { c10::DataPtr p = alloc->allocate(3 << 20); }
  CHECK(stats().reserved_bytes[kAgg].current > 0);
  alloc->emptyCache({0, 0});
  CHECK(stats().reserved_bytes[kAgg].current == 0);
  CHECK(stats().allocated_bytes[kAgg].current == 0);
}

void blocksOfAnotherStreamAreNotReused() {
  auto* alloc = torch_infini::deviceAllocator();
  alloc->emptyCache({0, 0});
  void* first = nullptr;
  {
    c10::DataPtr p = alloc->allocate(4096);
    first = p.get();
  }
  c10::Stream side = torch_infini::streamFromPool(0);
  c10::Stream previous = torch_infini::exchangeStream(side);
  c10::DataPtr on_side = alloc->allocate(4096);
  CHECK(on_side.get() != first);
  torch_infini::exchangeStream(previous);
}

void recordStreamDefersReuseUntilTheStreamIsDone() {
  auto* alloc = torch_infini::deviceAllocator();
  alloc->emptyCache({0, 0});
  c10::Stream side = torch_infini::streamFromPool(0);
  void* first = nullptr;
  {
    c10::DataPtr p = alloc->allocate(8192);
    first = p.get();
    alloc->recordStream(p, side);
  }
  // The side stream had no pending work, so its event completes at once:
  // after synchronizing, the block is back and reused.
  torch_infini::synchronizeDevice(0);
  c10::DataPtr again = alloc->allocate(8192);
  CHECK(again.get() == first);
  CHECK(stats().active[kAgg].current >= 1);
}

void recordStreamOnAnotherDeviceIsRejected() {
  if (torch_infini::deviceCount() < 2) return;  // needs TORCH_INFINI_HOST_DEVICES=2
  auto* alloc = torch_infini::deviceAllocator();
  c10::DataPtr p = alloc->allocate(512);
  CHECK(throws<c10::Error>([&] { alloc->recordStream(p, torch_infini::defaultStream(1)); }));
}

}  // namespace

int main() {
  torch_infini::init("host");
  return runTests({
      {"freed blocks are reused without new segments", freedBlocksAreReusedWithoutNewSegments},
      {"empty_cache returns segments", emptyCacheReturnsSegments},
      {"blocks of another stream are not reused", blocksOfAnotherStreamAreNotReused},
      {"record_stream defers reuse until the stream is done",
       recordStreamDefersReuseUntilTheStreamIsDone},
      {"record_stream on another device is rejected", recordStreamOnAnotherDeviceIsRejected},
  });
}
