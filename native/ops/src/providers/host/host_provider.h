// The host kernel provider: ATen's CPU kernels run over device memory
// (host memory on the host device) inside the stream's work.
#pragma once

#include <memory>

#include "torch_infini/ops/kernel_provider.h"
#include "torch_infini/runtime/host_runtime.h"

namespace torch_infini::ops {

// Only valid with the host runtime: it submits work to HostStream queues.
std::unique_ptr<KernelProvider> makeHostKernels();

}  // namespace torch_infini::ops
