// torch_infini_launch_host_function: plug-ins whose kernels run on the
// host's processors queue them on an infini stream through the runtime;
// torch_infini_host_kernel_address: where such kernels reach device memory.
#include <c10/util/Exception.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "torch_infini/compiler_plugin.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/host_runtime.h"

namespace {

void writeError(char* error, size_t error_size, const char* message) {
  if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", message);
}

}  // namespace

extern "C" int torch_infini_launch_host_function(void* stream, TorchInfiniHostFunction fn,
                                                 void* data, void (*release)(void* data),
                                                 char* error, size_t error_size) {
  // `data` is released once, when the queued call is done with it (or now,
  // if it is never queued).
  std::shared_ptr<void> owned(data, [release](void* p) {
    if (release != nullptr) release(p);
  });
  try {
    // A null stream is a runtime's default stream (InfiniRT's, as CUDA's 0).
    TORCH_CHECK(fn != nullptr, "torch_infini_launch_host_function: needs a function");
    torch_infini::runtime::selectedRuntime().launchHostFunction(stream, [fn, owned] {
      char message[4096];
      message[0] = '\0';  // (not all 4 KiB: this runs once per launch)
      if (fn(owned.get(), message, sizeof message) != 0)
        TORCH_CHECK(false, *message != '\0' ? message : "a host function failed (no message)");
    });
    return 0;
  } catch (const c10::Error& e) {
    writeError(error, error_size, e.what_without_backtrace());
  } catch (const std::exception& e) {
    writeError(error, error_size, e.what());
  } catch (...) {
    writeError(error, error_size, "a host function threw a non-standard exception");
  }
  return 1;
}

extern "C" void* torch_infini_host_kernel_address(const void* device_address) {
  return torch_infini::runtime::hostKernelView(device_address);
}
