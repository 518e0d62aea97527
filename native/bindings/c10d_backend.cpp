// One of two translation units that speak pybind11 (with memory_history.cpp):
// c10d backends are pybind11 objects in PyTorch (torch.distributed.Backend),
// so handing ours to ProcessGroup._register_backend needs PyTorch's own type
// casters. The rest of the module is nanobind and passes plain PyObject* here.
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "c10d_backend.h"
#include "torch_infini/distributed/process_group.h"

namespace torch_infini::bindings {

PyObject* makeBackend(PyObject* engine, int rank, int size, PyObject* infiniccl_store,
                      int64_t timeout_ms) {
  namespace py = pybind11;
  // The engine is any torch.distributed.Backend (a ProcessGroupGloo): take
  // a new reference on the C++ object behind it (the count is intrusive).
  auto engine_ptr =
      c10::intrusive_ptr<c10d::Backend>::reclaim_copy(py::handle(engine).cast<c10d::Backend*>());
  std::unique_ptr<distributed::DeviceEngine> device_engine;
  if (infiniccl_store != Py_None) {
    auto store = c10::intrusive_ptr<c10d::Store>::reclaim_copy(
        py::handle(infiniccl_store).cast<c10d::Store*>());
    device_engine = distributed::makeInfiniCCLEngine(std::move(store), rank, size,
                                                     std::chrono::milliseconds(timeout_ms));
  }
  c10::intrusive_ptr<c10d::Backend> backend = c10::make_intrusive<distributed::InfiniBackend>(
      std::move(engine_ptr), rank, size, std::move(device_engine));
  return py::cast(backend).release().ptr();
}

}  // namespace torch_infini::bindings
