// Builds without InfiniCCL: no device engine; the CPU engine serves all.
#include <c10/util/Exception.h>

#include "torch_infini/distributed/process_group.h"

namespace torch_infini::distributed {

bool hasInfiniCCL() { return false; }

std::unique_ptr<DeviceEngine> makeInfiniCCLEngine(c10::intrusive_ptr<c10d::Store> /*store*/,
                                                  int /*rank*/, int /*size*/,
                                                  std::chrono::milliseconds /*timeout*/) {
  TORCH_CHECK(false,
              "ProcessGroup backend 'infini': this build of torch-infini has no "
              "InfiniCCL (CMake did not find it)");
}

}  // namespace torch_infini::distributed
