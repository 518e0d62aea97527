// torch_infini._C: what the bridge registers and what InfiniOps declares
// (torch_infini.operators(), reports), and InfiniRT's device types.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "torch_infini/ops/declared_support.h"
#include "torch_infini/ops/kernel_provider.h"
#include "torch_infini/ops/operator_table.h"
#include "torch_infini/runtime/device_types.h"

namespace torch_infini::bindings {

namespace rt = torch_infini::runtime;

namespace ops = torch_infini::ops;

void bindOperators(nb::module_& m) {
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
    nb::list rows;
    for (const ops::Declaration& d : ops::infiniOpsDeclarations()) {
      for (std::string_view device_type : runtime::kInfiniDeviceTypeNames) {
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

  // What the selected provider's gemm computes below PyTorch's precision for
  // a dtype ("computes float32 matrix products in TF32"), or None: the one
  // place that knows (the provider), read by the tests' tolerances.
  m.def("_gemm_reduced_precision", [](nb::handle dtype) -> std::optional<std::string> {
    const char* reduced = ops::selectedKernelProvider().gemmReducedPrecision(dtypeArg(dtype));
    return reduced == nullptr ? std::nullopt : std::optional<std::string>(reduced);
  });

  // InfiniRT's device types, in its enum order.
  m.def("_infinirt_device_types", [] {
    nb::list names;
    for (std::string_view name : rt::kInfiniDeviceTypeNames) names.append(std::string(name));
    return names;
  });
}

}  // namespace torch_infini::bindings
