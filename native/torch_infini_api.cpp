// The public C++ API (torch_infini/torch_infini.h), what a LibTorch
// application calls (Python's import does the same). It sits above both
// static libraries, so init() may start each one's part: the runtime's (the
// backend, the device's name, the CPU allocator) and then the kernel
// bridge's (the CPU fallback's routes, registered once every infini kernel
// is).
#include "torch_infini/torch_infini.h"

#include "torch_infini/ops/cpu_fallback.h"
#include "torch_infini/runtime/backend_selection.h"

namespace torch_infini {

void init(const std::string& backend) {
  runtime::initialize(backend);
  ops::registerFallbackRoutes();
}

std::string backend() { return runtime::selectedRuntime().name(); }

std::vector<std::string> compiledBackends() { return runtime::compiledBackends(); }

}  // namespace torch_infini
