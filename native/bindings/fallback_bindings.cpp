// torch_infini._C: the CPU fallback's policy and statistics
// (torch_infini.cpu_fallback); the policy's state lives in C++.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "torch_infini/ops/cpu_fallback.h"
#include "torch_infini/ops/kernel_provider.h"

namespace torch_infini::bindings {

namespace ops = torch_infini::ops;

void bindFallback(nb::module_& m) {
  // The CPU fallback's policy (state in C++; torch_infini.cpu_fallback).
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
  m.def("_set_fallback_staging_forced", &ops::setFallbackStagingForced);
  m.def("_non_cpu_kernel_launches", &ops::nonCpuKernelLaunches);
  m.def("_fallback_staging_forced", &ops::fallbackStagingForced);
}

}  // namespace torch_infini::bindings
