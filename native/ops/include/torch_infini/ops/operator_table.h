// Which operators the bridge registers for infini, and which seam operator
// (hence which provider-declared dtypes) serves each. Registering a kernel
// adds its entry (src/common/bridge_registrar.h); reports and conformance
// tests read the table, and a test checks it against the dispatcher.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <vector>

#include "torch_infini/ops/kernel_provider.h"

namespace torch_infini::ops {

struct OperatorEntry {
  std::string name;          // "aten::add.Tensor"
  const char* family;        // "elementwise", "matmul", ...
  std::optional<SeamOp> op;  // nullopt: no kernel involved (factories, views), every dtype
  // Without a seam operator, the dtypes the bridge takes where not every
  // dtype (random operators: those the CPU's kernel takes); null: every one.
  bool (*accepts)(c10::ScalarType) = nullptr;
};

// Complete once the library has loaded (its registrations ran).
const std::vector<OperatorEntry>& bridgeOperators();

// Dtypes the selected provider accepts for `entry` (every dtype PyTorch has
// for entries without a seam operator; copies and fills work for all).
std::vector<c10::ScalarType> supportedDtypes(const OperatorEntry& entry);

}  // namespace torch_infini::ops
