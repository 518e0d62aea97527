// What runs natively per (seam operator, dtype, device type): InfiniOps'
// declarations less torch-infini's refusals, in one place (declared_support.h).
#include "torch_infini/ops/declared_support.h"

namespace torch_infini::ops {
namespace {

using c10::ScalarType;

// InfiniOps' dtype lists (src/data_type.h), as ATen dtypes.
constexpr DtypeMask kFloatTypes = dtypeBit(ScalarType::Float) | dtypeBit(ScalarType::Double);
constexpr DtypeMask kReducedFloatTypes =
    dtypeBit(ScalarType::Half) | dtypeBit(ScalarType::BFloat16);
constexpr DtypeMask kAllFloatTypes = kFloatTypes | kReducedFloatTypes;
constexpr DtypeMask kIntTypes = dtypeBit(ScalarType::Char) | dtypeBit(ScalarType::Short) |
                                dtypeBit(ScalarType::Int) | dtypeBit(ScalarType::Long);
constexpr DtypeMask kUIntTypes = dtypeBit(ScalarType::Byte) | dtypeBit(ScalarType::UInt16) |
                                 dtypeBit(ScalarType::UInt32) | dtypeBit(ScalarType::UInt64);
constexpr DtypeMask kAllTypes = kAllFloatTypes | kIntTypes | kUIntTypes;
// src/base/relu.h: ReluDataTypes.
constexpr DtypeMask kReluTypes = kAllFloatTypes | kIntTypes | dtypeBit(ScalarType::Byte);
// float32 and the reduced float types, the list of six InfiniOps operators:
// RotaryEmbedding (src/native/cuda/ops/rotary_embedding/kernel.h; for the
// query and, independently, the cos/sin cache), FusedAddRmsNorm
// (src/native/cuda/ops/fused_add_rms_norm/kernel.h), Embedding
// (src/base/embedding.h: the weight's dtype; indices int32 or int64),
// TopkSoftmax (src/base/topk_softmax.h: gating_output), ReshapeAndCacheFlash
// (src/base/reshape_and_cache_flash.h) and Convolution
// (src/native/cuda/ops/convolution/kernel.h, accumulated in float).
// PagedAttentionInfinilm (src/base/paged_attention_infinilm.h) takes the
// reduced float types only.
constexpr DtypeMask kFloat32AndReducedTypes = dtypeBit(ScalarType::Float) | kReducedFloatTypes;

// The device types named, as a mask over device_types.h's rows; a name not
// in the table does not compile (consteval: the throw is a compile error).
consteval uint32_t on(std::initializer_list<std::string_view> names) {
  uint32_t mask = 0;
  for (std::string_view name : names) {
    const uint32_t before = mask;
    for (uint32_t i = 0; i < std::size(runtime::kInfiniDeviceTypeNames); ++i)
      if (runtime::kInfiniDeviceTypeNames[i] == name) mask |= 1u << i;
    if (mask == before) throw "on(): not a device type of torch_infini/runtime/device_types.h";
  }
  return mask;
}

// The rows of device_types.h whose `infiniops` (kAll: InfiniOps has sources
// for the type) or `cuda_like` column (kCudaLike) is true. A new device
// type is native nowhere until its row says so.
#define TORCH_INFINI_INFINIOPS_COLUMNS(name, enumerator, accelerator, async_memcpy, events,       \
                                       event_timing, pinned_host, async_malloc, host_addressable, \
                                       untimed_flag, infiniops, cuda_like)                        \
  {infiniops, cuda_like},
struct InfiniOpsColumns {
  bool infiniops;
  bool cuda_like;
};
inline constexpr InfiniOpsColumns kColumns[] = {
    TORCH_INFINI_INFINIRT_DEVICE_TYPES(TORCH_INFINI_INFINIOPS_COLUMNS)};
#undef TORCH_INFINI_INFINIOPS_COLUMNS

constexpr uint32_t maskOf(bool InfiniOpsColumns::* column) {
  uint32_t mask = 0;
  for (uint32_t i = 0; i < std::size(kColumns); ++i)
    if (kColumns[i].*column) mask |= 1u << i;
  return mask;
}

constexpr uint32_t kAll = maskOf(&InfiniOpsColumns::infiniops);
constexpr uint32_t kCudaLike = maskOf(&InfiniOpsColumns::cuda_like);
constexpr uint32_t kCpuAndCudaLike = on({"cpu"}) | kCudaLike;

}  // namespace

// The InfiniOps columns of the seam's rows (seam_operators.h).
const std::vector<Declaration>& infiniOpsDeclarations() {
  static const std::vector<Declaration> table = [] {
    std::vector<Declaration> rows;
#define TORCH_INFINI_DECLARATION(seam, name, infiniops, dtypes, device_types, computes_in) \
  if (std::string_view(#infiniops) != "none")                                              \
    rows.push_back(Declaration{SeamOp::seam, #infiniops, dtypes, device_types, computes_in});
    TORCH_INFINI_SEAM_OPERATORS(TORCH_INFINI_DECLARATION)
#undef TORCH_INFINI_DECLARATION
    return rows;
  }();
  return table;
}

const Declaration* declarationOf(SeamOp op) {
  for (const Declaration& d : infiniOpsDeclarations())
    if (d.op == op) return &d;
  return nullptr;
}

bool declaredOn(SeamOp op, std::string_view device_type) {
  const Declaration* d = declarationOf(op);
  if (d == nullptr) return false;
  for (uint32_t i = 0; i < std::size(runtime::kInfiniDeviceTypeNames); ++i)
    if (runtime::kInfiniDeviceTypeNames[i] == device_type) return (d->device_types >> i) & 1u;
  return false;
}

bool declared(SeamOp op, std::string_view device_type, c10::ScalarType dtype) {
  const Declaration* d = declarationOf(op);
  return d != nullptr && (d->dtypes & dtypeBit(dtype)) != 0 && declaredOn(op, device_type);
}

const char* refusal(SeamOp op, std::string_view device_type, c10::ScalarType dtype,
                    bool infinirt_conversions) {
  const Declaration* d = declarationOf(op);
  if (d == nullptr) return nullptr;
  if (dtype == ScalarType::Double && d->computes_in != nullptr)
    return "InfiniOps computes it in float: float64 results would lose their precision";
  const bool moves_bytes = op == SeamOp::Copy || op == SeamOp::Cast || op == SeamOp::Cat;
  if (!moves_bytes &&
      (dtype == ScalarType::UInt16 || dtype == ScalarType::UInt32 || dtype == ScalarType::UInt64))
    return "PyTorch has no CPU kernel for it: neither an oracle nor a fallback";
  // InfiniRT's cpu float -> float16 conversion (Float16::FromFloat) truncates
  // the mantissa instead of rounding to nearest even: 1.00146484 becomes
  // 0x3c01 (PyTorch: 0x3c02), 65520 becomes 65504 (PyTorch: inf). Kernels
  // whose float16 result is an input value unchanged stay exact.
  const bool passes_values = moves_bytes && op != SeamOp::Cast;
  if (infinirt_conversions && device_type == "cpu" && dtype == ScalarType::Half &&
      op != SeamOp::Relu && !passes_values)
    return "InfiniRT's cpu float16 conversion truncates instead of rounding to nearest even";
  return nullptr;
}

NativeMasks nativeMasks(std::string_view device_type, bool infinirt_conversions) {
  NativeMasks masks{};
  for (size_t op = 0; op < masks.size(); ++op)
    for (unsigned i = 0; i < 64 && i < static_cast<unsigned>(ScalarType::NumOptions); ++i)
      if (nativeOn(static_cast<SeamOp>(op), device_type, static_cast<ScalarType>(i),
                   infinirt_conversions))
        masks[op] |= DtypeMask{1} << i;
  return masks;
}

}  // namespace torch_infini::ops
