// Bridges between nanobind (this module) and PyTorch's pybind11 c10d types.
#pragma once

#include <Python.h>

#include <cstdint>

namespace torch_infini::bindings {

// A torch.distributed.Backend for infini tensors: `engine` (a CPU backend of
// the same group) through host memory, and where `infiniccl_store` is a
// torch.distributed.Store (not None), InfiniCCL on device memory first, its
// unique id exchanged through that store, its calls bounded by the group's
// timeout (`timeout_ms`). New reference.
PyObject* makeBackend(PyObject* engine, int rank, int size, PyObject* infiniccl_store,
                      int64_t timeout_ms);

}  // namespace torch_infini::bindings
