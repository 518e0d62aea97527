// The host kernel provider: ATen's CPU kernels run over device memory
// (host memory on the host device) inside the stream's work.
#pragma once

#include <memory>

#include "torch_infini/ops/kernel_provider.h"
#include "torch_infini/runtime/host_runtime.h"

namespace torch_infini::ops {

std::unique_ptr<KernelProvider> makeHostKernels(runtime::HostRuntime& runtime);

}  // namespace torch_infini::ops
