// Keeps the operator table the bridge's registrations fill, sealed once the
// CPU fallback reads it (torch_infini/ops/operator_table.h says what it holds).
#include "torch_infini/ops/operator_table.h"

#include <c10/util/Exception.h>

#include "common/bridge_registrar.h"

namespace torch_infini::ops {
namespace {
std::vector<OperatorEntry>& table() {
  static auto* entries = new std::vector<OperatorEntry>();  // never destroyed: read until exit
  return *entries;
}
}  // namespace

namespace {
bool sealed = false;
}  // namespace

void recordOperator(OperatorEntry entry) {
  // Registrations run while the library loads, on one thread; the CPU
  // fallback seals the table when its routes are registered, afterwards.
  TORCH_INTERNAL_ASSERT(!sealed, "infini: '", entry.name,
                        "' was registered after the CPU fallback read the operator table: "
                        "infini kernels are registered by static initializers only");
  table().push_back(std::move(entry));
}

const std::vector<OperatorEntry>& sealedOperatorTable() {
  sealed = true;
  return table();
}

const std::vector<OperatorEntry>& bridgeOperators() { return table(); }

std::vector<c10::ScalarType> supportedDtypes(const OperatorEntry& entry) {
  using c10::ScalarType;
  // The dtypes tensors are commonly made of (quantized and float8 excluded).
  static constexpr ScalarType kDtypes[] = {
      ScalarType::Bool,   ScalarType::Byte,         ScalarType::Char,         ScalarType::Short,
      ScalarType::Int,    ScalarType::Long,         ScalarType::UInt16,       ScalarType::UInt32,
      ScalarType::UInt64, ScalarType::Half,         ScalarType::BFloat16,     ScalarType::Float,
      ScalarType::Double, ScalarType::ComplexFloat, ScalarType::ComplexDouble};
  std::vector<ScalarType> out;
  for (ScalarType dtype : kDtypes)
    if (entry.op.has_value() ? selectedKernelProvider().supports(*entry.op, dtype)
                             : entry.accepts == nullptr || entry.accepts(dtype))
      out.push_back(dtype);
  return out;
}

}  // namespace torch_infini::ops
