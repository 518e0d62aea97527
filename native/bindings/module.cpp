// torch_infini._C: thin bindings over libtorch_infini.so for the Python
// layer (backend selection, devices, streams). Tensors never cross here;
// they go through PyTorch's own dispatcher.
#include <c10/util/Exception.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <tuple>

#include "c10d_backend.h"
#include "memory_history.h"
#include "torch_infini/distributed/backend.h"
#include "torch_infini/ops/cpu_fallback.h"
#include "torch_infini/ops/declared_support.h"
#include "torch_infini/ops/kernel_provider.h"
#include "torch_infini/ops/operator_table.h"
#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/backend.h"
#include "torch_infini/runtime/generator.h"
#include "torch_infini/runtime/stream.h"
#include "torch_infini/torch_infini.h"

namespace nb = nanobind;
namespace rt = torch_infini::runtime;

namespace {

using StreamTuple = std::tuple<int64_t, int, int>;  // (stream_id, device_index, device_type)

StreamTuple toTuple(const c10::Stream& s) {
  return {s.id(), static_cast<int>(s.device_index()), static_cast<int>(s.device_type())};
}

// A device index from Python, where -1 means the current device: checked as
// the 64-bit integer Python passed, before any narrowing (c10::DeviceIndex
// is 8 bits: 256 would otherwise become device 0). An invalid index raises
// torch.AcceleratorError, as torch.cuda's calls do.
c10::DeviceIndex deviceArg(int64_t device) {
  if (device == -1) return static_cast<c10::DeviceIndex>(torch_infini::currentDevice());
  const int count = torch_infini::deviceCount();
  if (device < 0 || device >= count) {
    // (Clamped only for the message's type; the check above used all 64 bits.)
    const int shown = device > std::numeric_limits<int>::max()   ? std::numeric_limits<int>::max()
                      : device < std::numeric_limits<int>::min() ? std::numeric_limits<int>::min()
                                                                 : static_cast<int>(device);
    rt::throwInvalidDevice(shown, count, rt::get().name());
  }
  return static_cast<c10::DeviceIndex>(device);
}

c10::Stream fromIds(int64_t stream_id, int64_t device) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1, deviceArg(device)), stream_id);
}

// c10 errors become the Python exception types PyTorch itself raises.
void translateErrors(const std::exception_ptr& p, void* /*payload*/) {
  try {
    std::rethrow_exception(p);
  } catch (const c10::IndexError& e) {
    PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
  } catch (const c10::ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
  } catch (const c10::NotImplementedError& e) {
    PyErr_SetString(PyExc_NotImplementedError, e.what_without_backtrace());
  } catch (const c10::AcceleratorError& e) {
    nb::object error = nb::module_::import_("torch").attr("AcceleratorError");
    PyErr_SetString(error.ptr(), e.what_without_backtrace());
  } catch (const c10::OutOfMemoryError& e) {
    nb::object oom = nb::module_::import_("torch").attr("OutOfMemoryError");
    PyErr_SetString(oom.ptr(), e.what_without_backtrace());
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  }
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "torch_infini native bindings";
  nb::register_exception_translator(translateErrors);

  // Backend selection.
  m.def("_select_backend", &rt::selectBackend, nb::arg("name"));
  m.def("_requested_backend", &rt::requestedBackend);
  m.def("_is_initialized", &rt::isInitialized);
  m.def("_is_in_bad_fork", &rt::isInBadFork);

  // The CPU fallback's policy (state in C++; torch_infini.cpu_fallback).
  namespace ops = torch_infini::ops;
  m.def("_fallback_mode", [] { return std::string(ops::fallbackModeName(ops::fallbackMode())); });
  m.def("_set_fallback_mode",
        [](const std::string& mode) { ops::setFallbackMode(ops::parseFallbackMode(mode)); });
  m.def("_fallback_allowed", &ops::fallbackAllowed);
  m.def("_set_fallback_allowed", &ops::setFallbackAllowed);
  m.def("_fallback_denied", &ops::fallbackDenied);
  m.def("_set_fallback_denied", &ops::setFallbackDenied);
  m.def("_fallback_stats", [] {
    nb::dict result;
    for (const auto& [name, s] : ops::fallbackStats())
      result[nb::str(name.c_str())] = nb::make_tuple(s.calls, s.seconds, s.bytes_copied);
    return result;
  });
  m.def("_reset_fallback_stats", &ops::resetFallbackStats);
  m.def("_fallback_routed_operators", &ops::fallbackRoutedOperators);
  m.def("_fallback_force_staging", &ops::setFallbackForceStaging);
  m.def("_foreign_kernel_launches", &ops::foreignKernelLaunches);
  m.def("_fallback_forces_staging", &ops::fallbackForceStaging);

  // torch.distributed: the c10d backend "infini" (torch_infini.distributed).
  m.def(
      "_dist_backend",
      [](nb::handle engine, int rank, int size, nb::handle infiniccl_store, int64_t timeout_ms) {
        return nb::steal(torch_infini::bindings::makeBackend(engine.ptr(), rank, size,
                                                             infiniccl_store.ptr(), timeout_ms));
      },
      nb::arg("engine"), nb::arg("rank"), nb::arg("size"), nb::arg("infiniccl_store").none(),
      nb::arg("timeout_ms"));
  m.def("_dist_has_infiniccl", &torch_infini::distributed::hasInfiniCCL);
  m.def("_dist_force_staging", &torch_infini::distributed::setForceStaging);
  m.def("_dist_drain_completions", &torch_infini::distributed::drainCompletions,
        nb::arg("timeout_ms"), nb::call_guard<nb::gil_scoped_release>());
  m.def("_compiled_backends", &rt::compiledBackends);
  m.def("_init", [] { torch_infini::init(); });
  m.def("_backend", &torch_infini::backend);
  m.def("_capabilities", [] {
    rt::Capabilities c = rt::get().capabilities();
    nb::dict d;
    d["async_memcpy"] = c.async_memcpy;
    d["events"] = c.events;
    d["event_timing"] = c.event_timing;
    d["pinned_host"] = c.pinned_host;
    d["async_malloc"] = c.async_malloc;
    d["host_addressable"] = c.host_addressable;
    return d;
  });

  // The bridge's operators with the dtypes the selected provider declares
  // for each: [(aten name, family, seam operator or None, [dtype names])].
  m.def("_operator_table", [] {
    nb::list rows;
    for (const auto& entry : torch_infini::ops::bridgeOperators()) {
      nb::list dtypes;
      for (c10::ScalarType t : torch_infini::ops::supportedDtypes(entry))
        dtypes.append(c10::toString(t));
      nb::object op = entry.op.has_value()
                          ? nb::cast(std::string(torch_infini::ops::opName(*entry.op)))
                          : nb::none();
      rows.append(nb::make_tuple(entry.name, entry.family, op, dtypes));
    }
    return rows;
  });

  // What InfiniOps declares, per (seam operator, device type, dtype), and
  // what torch-infini refuses of it: [(op, InfiniOps operator, device type,
  // dtype, refusal through InfiniRT's conversions or None, refusal on host
  // or None)]. Independent of the selected backend.
  m.def("_declarations", [] {
    namespace ops = torch_infini::ops;
    nb::list rows;
    for (const ops::Declaration& d : ops::infiniOpsDeclarations()) {
      for (std::string_view device_type : ops::kDeviceTypeNames) {
        for (int i = 0; i < 64; ++i) {
          if ((d.dtypes >> i & 1u) == 0) continue;
          const auto dtype = static_cast<c10::ScalarType>(i);
          if (!ops::declared(d.op, device_type, dtype)) continue;
          auto why = [](const char* reason) {
            return reason == nullptr ? nb::none() : nb::cast(std::string(reason));
          };
          rows.append(nb::make_tuple(ops::opName(d.op), d.infiniops, std::string(device_type),
                                     c10::toString(dtype),
                                     why(ops::refusal(d.op, device_type, dtype, true)),
                                     why(ops::refusal(d.op, device_type, dtype, false))));
        }
      }
    }
    return rows;
  });

  // InfiniRT's device types, in its enum order.
  m.def("_infinirt_device_types", [] {
    nb::list names;
    for (std::string_view name : torch_infini::ops::kDeviceTypeNames)
      names.append(std::string(name));
    return names;
  });

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
    auto stat = [](const c10::CachingAllocator::Stat& s) {
      nb::dict d;
      d["current"] = s.current;
      d["peak"] = s.peak;
      d["allocated"] = s.allocated;
      d["freed"] = s.freed;
      return d;
    };
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
  m.def("_empty_cache", [] { torch_infini::emptyDeviceCache(); });
  m.def("_record_memory_history", &torch_infini::bindings::recordMemoryHistory, nb::arg("trace"),
        nb::arg("context"), nb::arg("cpp_stacks"), nb::arg("max_entries"), nb::arg("clear"));
  m.def("_memory_snapshot", [] { return nb::steal(torch_infini::bindings::memorySnapshot()); });

  // The default generator of a device (-1: current), under its mutex.
  auto withGenerator = [](int64_t device, auto fn) {
    at::Generator gen = torch_infini::defaultGenerator(deviceArg(device));
    std::lock_guard<std::mutex> lock(gen.mutex());
    return fn(*gen.get<torch_infini::InfiniGenerator>());
  };
  m.def("_rng_manual_seed", [withGenerator](int64_t device, uint64_t seed) {
    withGenerator(device, [seed](torch_infini::InfiniGenerator& g) {
      g.set_current_seed(seed);
      return 0;
    });
  });
  m.def("_rng_seed", [withGenerator](int64_t device) {
    return withGenerator(device, [](torch_infini::InfiniGenerator& g) { return g.seed(); });
  });
  m.def("_rng_initial_seed", [withGenerator](int64_t device) {
    return withGenerator(device, [](torch_infini::InfiniGenerator& g) { return g.current_seed(); });
  });
  m.def("_rng_get_state", [withGenerator](int64_t device) {
    return withGenerator(device, [](torch_infini::InfiniGenerator& g) {
      return std::make_pair(g.current_seed(), g.get_offset());
    });
  });
  m.def("_rng_set_state", [withGenerator](int64_t device, uint64_t seed, uint64_t offset) {
    withGenerator(device, [seed, offset](torch_infini::InfiniGenerator& g) {
      g.set_current_seed(seed);
      g.set_offset(offset);
      return 0;
    });
  });

  // Devices.
  m.def("_device_count", &torch_infini::deviceCount);
  m.def("_current_device", &torch_infini::currentDevice);
  m.def(
      "_set_device", [](int64_t device) { torch_infini::setCurrentDevice(deviceArg(device)); },
      nb::arg("device"));
  // Waits without the GIL: other Python threads run meanwhile (and one of
  // them may be what the wait is for).
  m.def(
      "_synchronize",
      [](int64_t device) {
        const c10::DeviceIndex index = deviceArg(device);
        nb::gil_scoped_release release;
        torch_infini::synchronizeDevice(index);
      },
      nb::arg("device") = -1);
  m.def("_get_device_name", [](int64_t device) { return rt::get().deviceName(deviceArg(device)); });
  m.def("_mem_get_info", [](int64_t device) {
    const c10::DeviceIndex index = deviceArg(device);
    nb::gil_scoped_release release;  // a device's memory query may synchronize
    return rt::get().memGetInfo(index);
  });

  // torch.Event.elapsed_time only accepts exact torch.Event objects, so the
  // torch.infini.Event subclass measures through here (event ids are the
  // runtime's event handles).
  m.def("_event_elapsed_time", [](uintptr_t start, uintptr_t end) {
    TORCH_CHECK(start != 0 && end != 0,
                "Both events must be recorded before calculating elapsed time.");
    return rt::get().elapsedTime(reinterpret_cast<rt::EventHandle>(start),
                                 reinterpret_cast<rt::EventHandle>(end));
  });

  // Streams, as (stream_id, device_index, device_type) triples that the
  // Python layer turns into torch.Stream objects.
  m.def("_current_stream",
        [](int64_t device) { return toTuple(torch_infini::currentStream(deviceArg(device))); });
  m.def("_default_stream",
        [](int64_t device) { return toTuple(torch_infini::defaultStream(deviceArg(device))); });
  m.def("_exchange_stream", [](int64_t stream_id, int64_t device) {
    return toTuple(torch_infini::exchangeStream(fromIds(stream_id, device)));
  });
  m.def("_stream_native_handle", [](int64_t stream_id, int64_t device) {
    return reinterpret_cast<uintptr_t>(torch_infini::nativeStream(fromIds(stream_id, device)));
  });
}
