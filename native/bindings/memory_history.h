// torch.infini.memory._record_memory_history / _snapshot, in PyTorch's
// pybind11 world (its stack capture and symbolizer).
#pragma once

#include <Python.h>

#include <cstddef>

namespace torch_infini::bindings {

// `trace`: keep allocator events; `context`: a c10 RecordContext (0 never,
// 1 state, 2 alloc, 3 all); `cpp_stacks`: C++ frames besides Python's.
void recordMemoryHistory(bool trace, int context, bool cpp_stacks, size_t max_entries, bool clear);

// The snapshot as torch.cuda.memory._snapshot lays it out. New reference.
PyObject* memorySnapshot();

}  // namespace torch_infini::bindings
