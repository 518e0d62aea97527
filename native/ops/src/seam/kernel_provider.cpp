// Chooses the kernel provider for the selected backend behind the kernel
// seam (torch_infini/ops/kernel_provider.h): the first registered provider
// (seam/provider_registry.h) that serves the selected runtime.
#include "torch_infini/ops/kernel_provider.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <memory>
#include <string>

#include "seam/provider_registry.h"
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
    std::string tried;
    for (const KernelProviderEntry& entry : registeredKernelProviders()) {
      if (std::unique_ptr<KernelProvider> made = entry.make(rt)) return made.release();
      tried += tried.empty() ? entry.name : std::string(", ") + entry.name;
    }
    TORCH_CHECK(false, "infini: no kernel provider for backend '", rt.name(),
                "' in this build (registered: ", tried.empty() ? "none" : tried,
                "; InfiniOps serves InfiniRT backends where it was found at build time)");
  }();
  return *provider;
}

}  // namespace torch_infini::ops
