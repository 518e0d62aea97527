// The operators of the kernel seam: the one list. The SeamOp enum, opName(),
// what InfiniOps declares for each (seam/declared_support.cpp), the InfiniOps
// provider's "is it instantiated" query and CMake's
// TORCH_INFINI_OPS_HAS_<CLASS> definitions (cmake/TorchInfiniStack.cmake
// parses the rows) are all derived from it.
//
// A row, on one line starting with "  X(":
//   X(enumerator, name, InfiniOps class or none, dtypes, device types, computes in)
// The last three are what the InfiniOps snapshot (docs/stack_versions.md)
// declares for the class, written where the row is expanded
// (seam/declared_support.cpp): the dtype list its CPU implementation's
// DispatchFunc takes (the other device types are assumed to take the same
// until a device run says otherwise), the device types with implementation
// index 0 (src/native/<device>/ops/<op>/), and "float" where it computes in
// float (float64 would lose precision) or nullptr where in the dtype itself.
// Rows without an InfiniOps class leave them {}.
//   Copy            same-dtype strided copy, dst and src of equal shape (where
//                   InfiniOps has no Copy for the type, the provider copies
//                   through its Cast)
//   Cast            strided copy converting between dtypes (both supported)
//   Fill            dst[...] = value
//   Add             out = a + alpha * b; also out = x + alpha * scalar
//   Mul             out = a * b; also out = x * scalar
//   Gemm            out = alpha * a @ b, 2-D or batched 3-D
//   Relu, Silu,     unary elementwise (unary_operators.h): out = f(x)
//   Sigmoid
//   Gelu            out = gelu(x), exact (erf) or tanh-approximated
//   RmsNorm         out = x / sqrt(mean(x^2, -1) + eps) * weight
//   Softmax         out = softmax(x) over one dimension (aten::_softmax)
//   Random          a draw from the device generator's Philox stream (philox/fill.h)
//   SiluAndMul      out = silu(x[..., :h]) * x[..., h:] (torch.ops.infini.silu_and_mul)
//   Swiglu          out = input * silu(gate) (torch.ops.infini.swiglu)
//   CausalSoftmax   softmax over the causal prefix of each row (torch.ops.infini)
//   RotaryEmbedding query and key rotated in place by position (torch.ops.infini)
//   FusedAddRmsNorm residual += input, then input = rms_norm(residual) in place
//                   (torch.ops.infini.fused_add_rms_norm)
//   Cat             the inputs one after another along a dimension (a byte copy
//                   per element: every dtype of InfiniOps' size table)
//   Embedding       out[i, :] = weight[indices[i], :] (aten::embedding), indices
//                   in range (the bridge checks them first)
//   TopkSoftmax     MoE routing: the topk experts of softmax(gating) per token
//                   (torch.ops.infini.topk_softmax)
//   ReshapeAndCacheFlash  keys and values written into a paged KV cache by slot
//                   (torch.ops.infini.reshape_and_cache_flash)
//   PagedAttention  one decode step of attention over a paged KV cache
//                   (torch.ops.infini.paged_attention)
//   Convolution     a 1-D, 2-D or 3-D convolution's forward, not transposed
//                   (aten::convolution)
//   AmpUnscale      GradScaler: grads *= inv_scale, found_inf = 1 on inf/nan
//   AmpUpdateScale  GradScaler: the scale backed off or grown from found_inf
//   Foreach         an in-place foreach operator (aten::_foreach_<name>_, what
//                   the optimizers step with) over tensor lists of one dtype
//                   on one device, called whole (aten/foreach.cpp)
#pragma once

#include <cstdint>

// clang-format off
#define TORCH_INFINI_SEAM_OPERATORS(X) \
  X(Copy, copy, Copy, kAllTypes, kCudaLike, nullptr) \
  X(Cast, cast, Cast, kAllTypes, on({"cpu", "ascend"}), nullptr) \
  X(Fill, fill, Fill, kAllTypes, kCudaLike, nullptr) \
  X(Add, add, Add, kAllTypes, kCpuAndCudaLike | on({"ascend"}), nullptr) \
  X(Mul, mul, Mul, kAllTypes, kCpuAndCudaLike | on({"ascend"}), nullptr) \
  X(Gemm, gemm, Gemm, kAllFloatTypes, kAll & ~on({"hygon"}), "float") \
  X(Relu, relu, Relu, kReluTypes, kCpuAndCudaLike, nullptr) \
  X(Silu, silu, Silu, kAllFloatTypes, kCpuAndCudaLike, nullptr) \
  X(Sigmoid, sigmoid, Sigmoid, kAllFloatTypes, kCudaLike, nullptr) \
  X(Gelu, gelu, Gelu, kAllFloatTypes, kCudaLike, nullptr) \
  X(RmsNorm, rms_norm, RmsNorm, kAllFloatTypes, kAll & ~on({"ascend", "hygon"}), "float") \
  X(Softmax, softmax, Softmax, kAllFloatTypes, kCudaLike, "float") \
  X(Random, random, none, {}, {}, {}) \
  X(SiluAndMul, silu_and_mul, SiluAndMul, kAllFloatTypes, kCpuAndCudaLike, nullptr) \
  X(Swiglu, swiglu, Swiglu, kAllFloatTypes, kCpuAndCudaLike, nullptr) \
  X(CausalSoftmax, causal_softmax, CausalSoftmax, kAllFloatTypes, kCpuAndCudaLike, "float") \
  X(Cat, cat, Cat, kAllTypes, on({"cpu", "ascend"}), nullptr) \
  X(RotaryEmbedding, rotary_embedding, RotaryEmbedding, kFloat32AndReducedTypes, kCudaLike, "float") \
  X(FusedAddRmsNorm, fused_add_rms_norm, FusedAddRmsNorm, kFloat32AndReducedTypes, kCudaLike | on({"cambricon"}), "float") \
  X(Embedding, embedding, Embedding, kFloat32AndReducedTypes, kCudaLike | on({"ascend", "cambricon"}), nullptr) \
  X(TopkSoftmax, topk_softmax, TopkSoftmax, kFloat32AndReducedTypes, kCudaLike, "float") \
  X(ReshapeAndCacheFlash, reshape_and_cache_flash, ReshapeAndCacheFlash, kFloat32AndReducedTypes, kCudaLike | on({"cambricon"}), nullptr) \
  X(PagedAttention, paged_attention, PagedAttentionInfinilm, kReducedFloatTypes, kCudaLike, "float") \
  X(Convolution, convolution, Convolution, kFloat32AndReducedTypes, kCudaLike, "float") \
  X(AmpUnscale, amp_unscale, none, {}, {}, {}) \
  X(AmpUpdateScale, amp_update_scale, none, {}, {}, {}) \
  X(Foreach, foreach, none, {}, {}, {})
// clang-format on

namespace torch_infini::ops {

// An operator of the seam. A provider declares which (operator, dtype) pairs
// it supports; the bridge checks before it allocates or enqueues anything.
enum class SeamOp : uint8_t {
#define TORCH_INFINI_SEAM_ENUMERATOR(enumerator, name, ...) enumerator,
  TORCH_INFINI_SEAM_OPERATORS(TORCH_INFINI_SEAM_ENUMERATOR)
#undef TORCH_INFINI_SEAM_ENUMERATOR
      kCount
};

// "add", "rms_norm", ...: the row's name.
constexpr const char* opName(SeamOp op) {
  switch (op) {
#define TORCH_INFINI_SEAM_NAME(enumerator, name, ...) \
  case SeamOp::enumerator:                            \
    return #name;
    TORCH_INFINI_SEAM_OPERATORS(TORCH_INFINI_SEAM_NAME)
#undef TORCH_INFINI_SEAM_NAME
    case SeamOp::kCount:
      break;
  }
  return "unknown";
}

}  // namespace torch_infini::ops
