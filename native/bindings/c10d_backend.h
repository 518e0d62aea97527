// Bridges between nanobind (this module) and PyTorch's pybind11 c10d types.
#pragma once

#include <Python.h>

namespace torch_infini::bindings {

// A torch.distributed.Backend for infini tensors: `engine` (a CPU backend of
// the same group) through host memory, and where `infiniccl_store` is a
// torch.distributed.Store (not None), InfiniCCL on device memory first, its
// unique id exchanged through that store. New reference.
PyObject* makeBackend(PyObject* engine, int rank, int size, PyObject* infiniccl_store);

}  // namespace torch_infini::bindings
