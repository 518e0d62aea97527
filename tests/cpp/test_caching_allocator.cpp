// Unit tests of the caching device allocator through its c10 interface:
// reuse in stream order, statistics, record_stream, empty_cache.
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "check.h"
#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/host_runtime.h"
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
  {
    c10::DataPtr p = alloc->allocate(3 << 20);
  }
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

constexpr size_t kBusyBlockBytes = 8192;

// With asynchronous host streams (TORCH_INFINI_HOST_ASYNC=1): a block used
// by queued work on a busy side stream, recorded there and freed, is not
// handed out again before that work completed. A recordStream that did
// nothing would give it straight back to the next same-size request of its
// allocation stream while the side stream is still going to write into it.
void recordStreamDefersReuseWhileTheStreamIsBusy() {
  auto& rt = torch_infini::runtime::selectedRuntime();
  if (rt.name() != "host" || !rt.capabilities().async_memcpy) return;  // inline streams
  auto* alloc = torch_infini::deviceAllocator();
  alloc->emptyCache({0, 0});
  c10::Stream side = torch_infini::streamFromPool(0);
  auto& side_stream = torch_infini::runtime::HostRuntime::stream(torch_infini::nativeStream(side));
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::atomic<bool> written{false};
    void* first = nullptr;
    {
      c10::DataPtr p = alloc->allocate(kBusyBlockBytes);  // on the current (default) stream
      first = p.get();
      side_stream.submit([first, &written] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        // The side stream's late write (device work: through the kernel view
        // in discrete mode).
        std::memset(torch_infini::runtime::hostKernelView(first), 0xAB, kBusyBlockBytes);
        written.store(true);
      });
      alloc->recordStream(p, side);
    }  // freed while the side stream has yet to write
    c10::DataPtr again = alloc->allocate(kBusyBlockBytes);  // same size and stream
    const bool done_before = written.load();
    CHECK(again.get() != first || done_before);
    std::memset(torch_infini::runtime::hostKernelView(again.get()), 0x11,
                kBusyBlockBytes);  // the new owner's data
    torch_infini::synchronizeDevice(0);
    CHECK(written.load());
    const auto* bytes =
        static_cast<const unsigned char*>(torch_infini::runtime::hostKernelView(again.get()));
    CHECK(std::all_of(bytes, bytes + kBusyBlockBytes, [](unsigned char b) { return b == 0x11; }));
  }
  // Once the side stream's use completed, the block comes back.
  alloc->emptyCache({0, 0});
  void* first = nullptr;
  {
    c10::DataPtr p = alloc->allocate(kBusyBlockBytes);
    first = p.get();
    side_stream.submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); });
    alloc->recordStream(p, side);
  }
  torch_infini::synchronizeDevice(0);
  c10::DataPtr again = alloc->allocate(kBusyBlockBytes);
  CHECK(again.get() == first);
}

void recordStreamOnAnotherDeviceIsRejected() {
  if (torch_infini::deviceCount() < 2) return;  // needs TORCH_INFINI_HOST_DEVICES=2
  auto* alloc = torch_infini::deviceAllocator();
  c10::DataPtr p = alloc->allocate(512);
  CHECK(throws<c10::Error>([&] { alloc->recordStream(p, torch_infini::defaultStream(1)); }));
}

// Random allocate/free sequences over both pools (blocks split, shrink,
// grow back and merge in every order): live blocks never overlap, the
// statistics match what is live at every step, and once everything is
// freed every segment is whole again (no inactive split blocks).
void randomSequencesKeepBlocksDisjointAndStatisticsExact() {
  auto* alloc = torch_infini::deviceAllocator();
  alloc->emptyCache({0, 0});
  const auto base = stats();
  std::mt19937 rng(1234);
  struct Live {
    c10::DataPtr ptr;
    size_t requested;
    size_t rounded;
  };
  std::vector<Live> live;
  auto rounded = [](size_t n) { return std::max<size_t>(512, (n + 511) / 512 * 512); };
  for (int step = 0; step < 4000; ++step) {
    const bool allocate = live.empty() || (live.size() < 48 && rng() % 100 < 55);
    if (allocate) {
      // Mostly small requests, some medium and large ones.
      const uint32_t pick = rng() % 100;
      const size_t bytes = pick < 70   ? 1 + rng() % (1 << 20)
                           : pick < 95 ? (1 << 20) + rng() % (9 << 20)
                                       : (10 << 20) + rng() % (6 << 20);
      live.push_back({alloc->allocate(bytes), bytes, rounded(bytes)});
    } else {
      live.erase(live.begin() + static_cast<long>(rng() % live.size()));
    }
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    size_t requested = 0;
    size_t allocated = 0;
    size_t large = 0;
    for (const Live& l : live) {
      large += l.rounded > (1 << 20);
      const auto start = reinterpret_cast<uintptr_t>(l.ptr.get());
      ranges.emplace_back(start, start + l.rounded);
      requested += l.requested;
      allocated += l.rounded;
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) CHECK(ranges[i - 1].second <= ranges[i].first);
    const auto s = stats();
    CHECK(s.allocation[kAgg].current == static_cast<int64_t>(live.size()));
    // A large block keeps a remainder too small to split off (< 1 MiB).
    CHECK(s.allocated_bytes[kAgg].current >= static_cast<int64_t>(allocated));
    CHECK(s.allocated_bytes[kAgg].current <= static_cast<int64_t>(allocated + large * (1 << 20)));
    CHECK(s.requested_bytes[kAgg].current == static_cast<int64_t>(requested));
    CHECK(s.inactive_split_bytes[kAgg].current <=
          s.reserved_bytes[kAgg].current - s.active_bytes[kAgg].current);
  }
  live.clear();
  const auto s = stats();
  CHECK(s.allocation[kAgg].current == base.allocation[kAgg].current);
  CHECK(s.active[kAgg].current == base.active[kAgg].current);
  CHECK(s.inactive_split[kAgg].current == 0);
  CHECK(s.inactive_split_bytes[kAgg].current == 0);
  CHECK(s.num_device_alloc > base.num_device_alloc);
  alloc->emptyCache({0, 0});
  CHECK(stats().reserved_bytes[kAgg].current == 0);
}

// Eight threads, each on streams of its own (both devices when there are
// two), allocate, fill on their stream, check and free concurrently, some
// blocks recorded on a second stream first: no block ever has two owners
// (each thread's byte pattern survives until it frees the block), and the
// statistics return to where they were. Under TSan this is the allocator's
// and the async streams' race check.
void concurrentThreadsOnTheirOwnStreams() {
  auto* alloc = torch_infini::deviceAllocator();
  const int devices = torch_infini::deviceCount();
  std::vector<int64_t> base;
  for (int d = 0; d < devices; ++d)
    base.push_back(alloc->getDeviceStats(d).allocation[kAgg].current);
  std::atomic<int> corrupted{0};
  auto body = [&](int index) {
    std::mt19937 rng(static_cast<uint32_t>(index));
    const int device = index % devices;
    torch_infini::setCurrentDevice(device);
    const c10::Stream mine = torch_infini::streamFromPool(device);
    const c10::Stream other = torch_infini::streamFromPool(device);
    torch_infini::exchangeStream(mine);
    torch_infini::runtime::DeviceRuntime& rt = torch_infini::runtime::selectedRuntime();
    struct Held {
      c10::DataPtr ptr;
      size_t bytes;
      int pattern;
    };
    std::vector<Held> held;
    for (int step = 0; step < 1500; ++step) {
      if (held.empty() || (held.size() < 16 && rng() % 100 < 55)) {
        const size_t bytes = 1 + rng() % (rng() % 8 == 0 ? (3u << 20) : 4096u);
        c10::DataPtr ptr = alloc->allocate(bytes);
        const int pattern = static_cast<int>(rng() % 256);
        rt.memsetAsync(ptr.get(), pattern, bytes, torch_infini::nativeStream(mine));
        held.push_back({std::move(ptr), bytes, pattern});
        continue;
      }
      const size_t i = rng() % held.size();
      Held h = std::move(held[i]);
      held.erase(held.begin() + static_cast<long>(i));
      rt.synchronizeStream(torch_infini::nativeStream(mine));
      // (Read as a device kernel would: the kernel view in discrete mode.)
      const auto* data =
          static_cast<const unsigned char*>(torch_infini::runtime::hostKernelView(h.ptr.get()));
      for (size_t k = 0; k < h.bytes; k += 61)
        if (data[k] != h.pattern) corrupted.fetch_add(1);
      if (rng() % 4 == 0) alloc->recordStream(h.ptr, other);
    }
    held.clear();
    torch_infini::synchronizeDevice(device);
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) threads.emplace_back(body, i);
  for (auto& t : threads) t.join();
  CHECK(corrupted.load() == 0);
  for (int d = 0; d < devices; ++d)
    CHECK(alloc->getDeviceStats(d).allocation[kAgg].current == base[static_cast<size_t>(d)]);
}

// A byte count above INT64_MAX (a negative size from Python, as size_t) is
// refused before any rounding, which would wrap it to a small block; the
// pinned allocator's size classes would otherwise double forever.
void byteCountsAboveInt64MaxAreRefused() {
  const auto before = stats();
  for (size_t bytes : {SIZE_MAX, SIZE_MAX - 4095, size_t{1} << 63}) {
    CHECK(throws<c10::Error>([&] { torch_infini::deviceAllocator()->allocate(bytes); }));
    CHECK(throws<c10::Error>([&] { torch_infini::pinnedAllocator()->allocate(bytes); }));
  }
  const auto after = stats();
  CHECK(after.num_device_alloc == before.num_device_alloc);
  CHECK(after.allocated_bytes[kAgg].current == before.allocated_bytes[kAgg].current);
  // A storage cannot be resized to one either; it keeps its bytes.
  c10::Storage storage(c10::Storage::use_byte_size_t(), 64,
                       torch_infini::deviceAllocator()->allocate(64),
                       torch_infini::deviceAllocator(), /*resizable=*/true);
  CHECK(throws<c10::Error>([&] { torch_infini::resizeStorageBytes(storage, SIZE_MAX); }));
  CHECK(storage.nbytes() == 64 && storage.data() != nullptr);
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
      {"record_stream defers reuse while the stream is busy",
       recordStreamDefersReuseWhileTheStreamIsBusy},
      {"record_stream on another device is rejected", recordStreamOnAnotherDeviceIsRejected},
      {"random sequences keep blocks disjoint and statistics exact",
       randomSequencesKeepBlocksDisjointAndStatisticsExact},
      {"concurrent threads on their own streams", concurrentThreadsOnTheirOwnStreams},
      {"byte counts above INT64_MAX are refused", byteCountsAboveInt64MaxAreRefused},
  });
}
