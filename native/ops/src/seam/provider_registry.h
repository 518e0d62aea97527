// Kernel providers register themselves here (providers/host/,
// providers/infiniops/), as the runtime's providers do on their side: the
// seam chooses among what registered and never names an implementation.
#pragma once

#include <memory>
#include <vector>

#include "torch_infini/ops/kernel_provider.h"
#include "torch_infini/runtime/device_runtime.h"

namespace torch_infini::ops {

struct KernelProviderEntry {
  const char* name;  // for error messages: "host", "infiniops"
  // The provider serving `runtime`, or null where it is not its kind of
  // runtime (each provider pairs with one kind of runtime provider).
  std::unique_ptr<KernelProvider> (*make)(runtime::DeviceRuntime& runtime);
};

// Called while the library loads, by a static KernelProviderRegistrar in
// the provider's source.
void registerKernelProvider(KernelProviderEntry entry);
const std::vector<KernelProviderEntry>& registeredKernelProviders();

struct KernelProviderRegistrar {
  explicit KernelProviderRegistrar(KernelProviderEntry entry) { registerKernelProvider(entry); }
};

}  // namespace torch_infini::ops
