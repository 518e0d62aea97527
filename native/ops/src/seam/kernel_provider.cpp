// Chooses the kernel provider for the selected backend (host or InfiniOps)
// behind the kernel seam (torch_infini/ops/kernel_provider.h).
#include "torch_infini/ops/kernel_provider.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "providers/host/host_provider.h"
#if TORCH_INFINI_WITH_INFINIOPS
#include "providers/infiniops/infiniops_provider.h"
#endif
#include "torch_infini/runtime/backend_selection.h"

namespace torch_infini::ops {

namespace {
std::atomic<int64_t> foreign_launches{0};
}  // namespace

int64_t nonCpuKernelLaunches() { return foreign_launches.load(std::memory_order_relaxed); }

void countNonCpuKernelLaunch() { foreign_launches.fetch_add(1, std::memory_order_relaxed); }

KernelProvider& selectedKernelProvider() {
  static KernelProvider* provider = [] {
    runtime::DeviceRuntime& rt = runtime::selectedRuntime();
    if (dynamic_cast<runtime::HostRuntime*>(&rt) != nullptr) return makeHostKernels().release();
#if TORCH_INFINI_WITH_INFINIOPS
    if (auto* infinirt = dynamic_cast<runtime::InfiniRtRuntime*>(&rt))
      return makeInfiniOpsKernels(*infinirt).release();
#endif
    TORCH_CHECK(false, "infini: no kernel provider for backend '", rt.name(),
                "' in this build (InfiniOps was not found at build time)");
  }();
  return *provider;
}

}  // namespace torch_infini::ops
