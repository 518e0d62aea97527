// torch_infini._C is bound by area, one function per file; module.cpp calls
// them in order. Shared here: how a device index from Python is read.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <nanobind/nanobind.h>

#include <cstdint>

namespace torch_infini::bindings {

namespace nb = nanobind;

void bindSelection(nb::module_& m);      // selection_bindings.cpp
void bindFallback(nb::module_& m);       // fallback_bindings.cpp
void bindDistributed(nb::module_& m);    // distributed_bindings.cpp
void bindOperators(nb::module_& m);      // operators_bindings.cpp
void bindMemory(nb::module_& m);         // memory_bindings.cpp
void bindRandom(nb::module_& m);         // random_bindings.cpp
void bindDevices(nb::module_& m);        // device_bindings.cpp
void bindCompiler(nb::module_& m);       // compiler_bindings.cpp
void bindOperatorCalls(nb::module_& m);  // operator_call_bindings.cpp

// A device index from Python, where -1 means the current device: checked as
// the 64-bit integer Python passed, before any narrowing (c10::DeviceIndex
// is 8 bits: 256 would otherwise become device 0). An invalid index raises
// torch.AcceleratorError, as torch.cuda's calls do.
c10::DeviceIndex deviceArg(int64_t device);

// A torch.dtype from Python as its ScalarType; TypeError for anything else
// (compiler_bindings.cpp).
c10::ScalarType dtypeArg(nb::handle dtype);

}  // namespace torch_infini::bindings
