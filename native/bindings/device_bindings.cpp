// torch_infini._C: devices, synchronization, events and streams
// (torch.infini, torch.infini.streams).
#include <c10/util/Exception.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <limits>
#include <tuple>

#include "bindings.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/host_runtime.h"
#include "torch_infini/runtime/stream.h"
#include "torch_infini/torch_infini.h"

namespace torch_infini::bindings {

namespace rt = torch_infini::runtime;
namespace {

using StreamTuple = std::tuple<int64_t, int, int>;  // (stream_id, device_index, device_type)

StreamTuple toTuple(const c10::Stream& s) {
  return {s.id(), static_cast<int>(s.device_index()), static_cast<int>(s.device_type())};
}

}  // namespace

c10::DeviceIndex deviceArg(int64_t device) {
  if (device == -1) return static_cast<c10::DeviceIndex>(torch_infini::currentDevice());
  const int count = torch_infini::deviceCount();
  if (device < 0 || device >= count) {
    // (Clamped only for the message's type; the check above used all 64 bits.)
    const int shown = device > std::numeric_limits<int>::max()   ? std::numeric_limits<int>::max()
                      : device < std::numeric_limits<int>::min() ? std::numeric_limits<int>::min()
                                                                 : static_cast<int>(device);
    rt::throwInvalidDevice(shown, count, rt::selectedRuntime().name());
  }
  return static_cast<c10::DeviceIndex>(device);
}

namespace {

c10::Stream fromIds(int64_t stream_id, int64_t device) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(c10::DeviceType::PrivateUse1, deviceArg(device)), stream_id);
}

}  // namespace

void bindDevices(nb::module_& m) {
  // Devices.
  m.def("_device_count", &torch_infini::deviceCount);
  // The host device's count of waits for queued work (tests).
  m.def("_host_synchronizations", [] {
    auto* host = dynamic_cast<torch_infini::runtime::HostRuntime*>(
        &torch_infini::runtime::selectedRuntime());
    TORCH_CHECK(host != nullptr, "_host_synchronizations: the selected backend is not host");
    return host->synchronizations();
  });
  // The host device's bytes copied (host to device, device to host): what
  // crossed the host boundary (benchmarks).
  m.def("_host_transfer_bytes", [] {
    auto* host = dynamic_cast<torch_infini::runtime::HostRuntime*>(
        &torch_infini::runtime::selectedRuntime());
    TORCH_CHECK(host != nullptr, "_host_transfer_bytes: the selected backend is not host");
    return std::make_pair(host->hostToDeviceBytes(), host->deviceToHostBytes());
  });
  m.def("_current_device", &torch_infini::currentDevice);
  // Raises torch.AcceleratorError for an index no device has (-1: current).
  m.def("_check_device", [](int64_t device) { return deviceArg(device); }, nb::arg("device"));
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
  m.def("_get_device_name",
        [](int64_t device) { return rt::selectedRuntime().deviceName(deviceArg(device)); });
  m.def("_mem_get_info", [](int64_t device) {
    const c10::DeviceIndex index = deviceArg(device);
    nb::gil_scoped_release release;  // a device's memory query may synchronize
    return rt::selectedRuntime().memGetInfo(index);
  });

  // torch.Event.elapsed_time only accepts exact torch.Event objects, so the
  // torch.infini.Event subclass measures through here (event ids are the
  // runtime's event handles).
  m.def("_event_elapsed_time", [](uintptr_t start, uintptr_t end) {
    TORCH_CHECK(start != 0 && end != 0,
                "Both events must be recorded before calculating elapsed time.");
    return rt::selectedRuntime().elapsedTime(reinterpret_cast<rt::EventHandle>(start),
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

}  // namespace torch_infini::bindings
