// Backend selection: which DeviceRuntime provider serves `infini`.
//
// The choice is made once, before the first runtime use, from an explicit
// selectBackend() call or else TORCH_INFINI_BACKEND (default "auto"). After
// that it cannot change.
#pragma once

#include <string>
#include <vector>

#include "torch_infini/runtime/device_runtime.h"

namespace torch_infini::runtime {

// Requests a backend ("auto", "host", or an InfiniRT type such as "cpu").
// Throws c10::Error if the runtime is already initialized with another one.
void selectBackend(const std::string& name);
// Selects `backend` ("" keeps the request) and initializes it, names the
// device `infini` and, where device memory is host memory, redirects the CPU
// allocator: the runtime's part of torch_infini::init().
void initialize(const std::string& backend);

// The provider, initialized on first call. Throws if the requested backend
// cannot be served (unknown name, not compiled in, no device).
DeviceRuntime& selectedRuntime();

// Like selectedRuntime(), but never throws: nullptr when initialization failed.
DeviceRuntime* tryGet() noexcept;

bool isInitialized() noexcept;

// True in a process forked after the runtime was initialized: its stream
// worker threads (and a vendor runtime's state) did not survive the fork,
// so selectedRuntime() raises "Cannot re-initialize infini in forked subprocess", as
// CUDA does, instead of waiting forever on a stream.
bool isInBadFork() noexcept;

// In such a child: the parent's device count (torch.infini.device_count()
// and is_available() answer with it, as torch.cuda's do); 0 elsewhere.
int deviceCountAtFork() noexcept;

// Throws torch.AcceleratorError (c10::AcceleratorError), as CUDA does for
// an invalid device ordinal, naming the index, the count and the backend.
[[noreturn]] void throwInvalidDevice(int device, int count, const std::string& backend);
// The backend that was requested (before init) or selected (after init).
std::string requestedBackend();
// Names that may be passed to selectBackend besides "auto".
std::vector<std::string> compiledBackends();

}  // namespace torch_infini::runtime
