// The runtime's part of torch_infini::init() (native/torch_infini_api.cpp):
// the backend chosen, the device named `infini`, the CPU allocator
// redirected where device memory is host memory.
#include <c10/core/DeviceType.h>

#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/cpu_allocation_redirect.h"

namespace torch_infini::runtime {

void initialize(const std::string& backend) {
  if (!backend.empty()) selectBackend(backend);
  // Python renames through torch.utils.rename_privateuse1_backend; C++ apps
  // get the same name here. Renaming again to the same name is allowed.
  if (c10::get_privateuse1_backend() != "infini") c10::register_privateuse1_backend("infini");
  // The CPU fallback's results are allocated in device memory where the CPU
  // can address it: the CPU allocator is replaced now, while one thread runs.
  if (selectedRuntime().capabilities().host_addressable) installCpuAllocationRedirect();
}

}  // namespace torch_infini::runtime
