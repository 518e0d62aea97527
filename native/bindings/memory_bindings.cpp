// torch_infini._C: the caching allocator's statistics and history
// (torch.infini.memory).
#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Exception.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "memory_history.h"
#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/stream.h"
#include "torch_infini/torch_infini.h"

namespace torch_infini::bindings {
namespace {

// A statistic as torch.cuda's memory statistics nest it.
nb::dict stat(const c10::CachingAllocator::Stat& s) {
  nb::dict d;
  d["current"] = s.current;
  d["peak"] = s.peak;
  d["allocated"] = s.allocated;
  d["freed"] = s.freed;
  return d;
}

}  // namespace

void bindMemory(nb::module_& m) {
  // Memory statistics, as torch.cuda.memory_stats_as_nested_dict lays them out.
  // The allocator checks the index of a statistics call itself (as CUDA's
  // does); only "current device" (-1) is resolved here.
  // An invalid index raises RuntimeError, as CUDA's statistics calls do.
  const auto statsDevice = [](int64_t device) {
    if (device == -1) return static_cast<c10::DeviceIndex>(torch_infini::currentDevice());
    const int count = torch_infini::deviceCount();
    TORCH_CHECK(device >= 0 && device < count, "Invalid device argument ", device,
                ": did you call init? (infini has ", count, " device(s))");
    return static_cast<c10::DeviceIndex>(device);
  };
  m.def("_memory_stats", [statsDevice](int64_t device) {
    using c10::CachingDeviceAllocator::StatType;
    auto stats = torch_infini::deviceAllocator()->getDeviceStats(statsDevice(device));
    auto array = [&](const c10::CachingDeviceAllocator::StatArray& a) {
      nb::dict d;
      d["all"] = stat(a[static_cast<size_t>(StatType::AGGREGATE)]);
      d["small_pool"] = stat(a[static_cast<size_t>(StatType::SMALL_POOL)]);
      d["large_pool"] = stat(a[static_cast<size_t>(StatType::LARGE_POOL)]);
      return d;
    };
    nb::dict result;
    result["num_alloc_retries"] = stats.num_alloc_retries;
    result["num_ooms"] = stats.num_ooms;
    result["num_sync_all_streams"] = stats.num_sync_all_streams;
    result["num_device_alloc"] = stats.num_device_alloc;
    result["num_device_free"] = stats.num_device_free;
    result["allocation"] = array(stats.allocation);
    result["segment"] = array(stats.segment);
    result["active"] = array(stats.active);
    result["inactive_split"] = array(stats.inactive_split);
    result["allocated_bytes"] = array(stats.allocated_bytes);
    result["reserved_bytes"] = array(stats.reserved_bytes);
    result["active_bytes"] = array(stats.active_bytes);
    result["inactive_split_bytes"] = array(stats.inactive_split_bytes);
    result["requested_bytes"] = array(stats.requested_bytes);
    result["max_split_size"] = stats.max_split_size;
    result["oversize_allocations"] = stat(stats.oversize_allocations);
    result["oversize_segments"] = stat(stats.oversize_segments);
    return result;
  });
  m.def("_reset_peak_memory_stats", [statsDevice](int64_t device) {
    torch_infini::deviceAllocator()->resetPeakStats(statsDevice(device));
  });
  m.def("_reset_accumulated_memory_stats", [statsDevice](int64_t device) {
    torch_infini::deviceAllocator()->resetAccumulatedStats(statsDevice(device));
  });
  // The pinned host allocator's statistics, as
  // torch.cuda.host_memory_stats_as_nested_dict lays them out.
  m.def("_host_memory_stats", [] {
    const at::HostStats stats = at::getHostAllocator(c10::DeviceType::PrivateUse1)->get_stats();
    auto duration = [](const c10::CachingAllocator::DurationStat& s) {
      nb::dict d;
      d["total"] = s.total;
      d["max"] = s.max;
      d["min"] = s.min;
      d["count"] = s.count;
      d["avg"] = s.count == 0 ? 0 : s.total / s.count;
      return d;
    };
    nb::dict result;
    result["allocations"] = stat(stats.allocations);
    result["allocated_bytes"] = stat(stats.allocated_bytes);
    result["active_requests"] = stat(stats.active_requests);
    result["active_bytes"] = stat(stats.active_bytes);
    result["num_host_alloc"] = stats.num_host_alloc;
    result["num_host_free"] = stats.num_host_free;
    result["host_alloc_time"] = duration(stats.host_alloc_time);
    result["host_free_time"] = duration(stats.host_free_time);
    return result;
  });
  m.def("_reset_peak_host_memory_stats",
        [] { at::getHostAllocator(c10::DeviceType::PrivateUse1)->reset_peak_stats(); });
  m.def("_reset_accumulated_host_memory_stats",
        [] { at::getHostAllocator(c10::DeviceType::PrivateUse1)->reset_accumulated_stats(); });
  m.def("_empty_cache", [] { torch_infini::emptyDeviceCache(); });
  m.def("_record_memory_history", &torch_infini::bindings::recordMemoryHistory, nb::arg("trace"),
        nb::arg("context"), nb::arg("cpp_stacks"), nb::arg("max_entries"), nb::arg("clear"));
  m.def("_memory_snapshot", [] { return nb::steal(torch_infini::bindings::memorySnapshot()); });
}

}  // namespace torch_infini::bindings
