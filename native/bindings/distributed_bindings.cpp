// torch_infini._C: the c10d backend "infini" (torch_infini.distributed).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "c10d_backend.h"
#include "torch_infini/distributed/process_group.h"

namespace torch_infini::bindings {

void bindDistributed(nb::module_& m) {
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
}

}  // namespace torch_infini::bindings
