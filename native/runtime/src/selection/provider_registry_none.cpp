// Built without InfiniRT: the host device is the only provider.
#include "selection/provider_registry.h"

namespace torch_infini::runtime {

const std::vector<ProviderEntry>& externalProviders() {
  static const std::vector<ProviderEntry> none;
  return none;
}

}  // namespace torch_infini::runtime
