// The InfiniOps kernel provider (implementation index 0), paired with an
// InfiniRT runtime provider. Only built when CMake finds InfiniOps.
#pragma once

#include <memory>

#include "torch_infini/ops/kernel_provider.h"
#include "torch_infini/runtime/infinirt_runtime.h"

namespace torch_infini::ops {

std::unique_ptr<KernelProvider> makeInfiniOpsKernels(runtime::InfiniRtRuntime& runtime);

}  // namespace torch_infini::ops
