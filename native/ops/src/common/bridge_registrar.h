// Registering an infini kernel records it in the operator table
// (torch_infini/ops/operator_table.h): every PrivateUse1 registration of the
// bridge goes through a BridgeRegistrar, so the table is the registrations.
//
//   TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
//     BridgeRegistrar matmul(m, "aten", "matmul", SeamOp::Gemm);
//     TORCH_INFINI_IMPL_OR_FALLBACK(matmul, "mm", mm);
//   }
#pragma once

#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <utility>

#include "torch_infini/ops/operator_table.h"

namespace torch_infini::ops {

// Adds an entry to the table (called while the library loads).
void recordOperator(OperatorEntry entry);

// The table, from now on complete: a later recordOperator() is an internal
// error. The CPU fallback reads it so after the library has loaded
// (registerFallbackRoutes, torch_infini/ops/cpu_fallback.h).
const std::vector<OperatorEntry>& sealedOperatorTable();

class BridgeRegistrar {
 public:
  // `ns`: the library's namespace ("aten", "infini"); `family`: the table's
  // grouping ("elementwise", ...); `op`: the seam operator whose declared
  // dtypes the kernels take (none: no kernel involved, or `accepts` says
  // which dtypes; null `accepts`: every dtype).
  BridgeRegistrar(torch::Library& library, const char* ns, const char* family,
                  std::optional<SeamOp> op = std::nullopt,
                  bool (*accepts)(c10::ScalarType) = nullptr)
      : library_(library), ns_(ns), family_(family), op_(op), accepts_(accepts) {}

  template <class Kernel>
  BridgeRegistrar& impl(const char* name, Kernel&& kernel) {
    library_.impl(name, std::forward<Kernel>(kernel));
    recordOperator({std::string(ns_) + "::" + name, family_, op_, accepts_});
    return *this;
  }

 private:
  torch::Library& library_;
  const char* ns_;
  const char* family_;
  std::optional<SeamOp> op_;
  bool (*accepts_)(c10::ScalarType);
};

}  // namespace torch_infini::ops
