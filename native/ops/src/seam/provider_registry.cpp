// The kernel providers that registered (seam/provider_registry.h). No ATen
// here: the InfiniOps mapping test (tests/cpp) links this with its provider.
#include "seam/provider_registry.h"

namespace torch_infini::ops {
namespace {

// Constructed on first use: providers register from static initializers,
// whose order across sources is unspecified.
std::vector<KernelProviderEntry>& entries() {
  static std::vector<KernelProviderEntry> all;
  return all;
}

}  // namespace

void registerKernelProvider(KernelProviderEntry entry) { entries().push_back(entry); }

const std::vector<KernelProviderEntry>& registeredKernelProviders() { return entries(); }

}  // namespace torch_infini::ops
