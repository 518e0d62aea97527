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
//   AddRmsNorm      residual_out = input + residual, out = rms_norm(residual_out)
//                   with the weight before the inverse RMS
//                   (torch.ops.infini.add_rms_norm)
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
#include <optional>  // the entries' optional operands

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
  X(AddRmsNorm, add_rms_norm, AddRmsNorm, kFloat32AndReducedTypes, kCudaLike, "float") \
  X(Embedding, embedding, Embedding, kFloat32AndReducedTypes, kCudaLike | on({"ascend", "cambricon"}), nullptr) \
  X(TopkSoftmax, topk_softmax, TopkSoftmax, kFloat32AndReducedTypes, kCudaLike, "float") \
  X(ReshapeAndCacheFlash, reshape_and_cache_flash, ReshapeAndCacheFlash, kFloat32AndReducedTypes, kCudaLike | on({"cambricon"}), nullptr) \
  X(PagedAttention, paged_attention, PagedAttentionInfinilm, kReducedFloatTypes, kCudaLike, "float") \
  X(Convolution, convolution, Convolution, kFloat32AndReducedTypes, kCudaLike, "float") \
  X(Linear, linear, Linear, kAllFloatTypes, on({"cpu", "ascend"}), "float") \
  X(AmpUnscale, amp_unscale, none, {}, {}, {}) \
  X(AmpUpdateScale, amp_update_scale, none, {}, {}, {}) \
  X(Foreach, foreach, none, {}, {}, {})

// The seam operators whose kernels are plumbing, each declared once here:
// the KernelProvider virtual (kernel_provider.h), the InfiniOps provider's
// call (providers/infiniops) and the host provider's kernel
// (providers/host) are generated from the entry. The other operators'
// methods are written out in kernel_provider.h and the providers.
//
// K(enumerator, method, launch, parameters, argument names, InfiniOps call, host kernel)
//   launch      kCounted: an arithmetic kernel (nonCpuKernelLaunches counts
//               InfiniOps' launches); kByteMover: it moves bytes, the CPU's
//               bits whatever runs it
//   parameters  the method's, before the stream; argument names: theirs, in
//               order (the first is a tensor: the InfiniOps handle's device)
//   InfiniOps call  the row's class's Call arguments after handle and
//               config, in InfiniOps' order (view(t): a tensor's view)
//   host kernel an expression on the parameters run in stream order, where
//               A(t) is a CPU tensor aliasing t's memory (its kernel view)
//
// What each computes (every view of the output's dtype, on one device):
//   gelu        out = gelu(x), exact (erf) or, with `tanh`, PyTorch's tanh
//               approximation; out and x of one shape, any strides.
//               InfiniOps' Gelu takes PyTorch's argument ("none", "tanh")
//   softmax     out = softmax(x) over `dim` (0 <= dim < x.dim()); out and x
//               of one shape and dtype, at least 1-D, any strides. No dtype
//               argument to InfiniOps: out has x's dtype (the bridge
//               refuses half_to_float)
//   rmsNorm     over the last dimension; x and out 2-D or 3-D, contiguous
//   siluAndMul, swiglu  (fused/activations.cpp has their definitions):
//               computed in float (double for float64), rounded once to the
//               output's dtype. x is [..., 2h] and out [..., h]; for swiglu
//               all three share one shape. InfiniOps' Swiglu is deprecated
//               for SiluAndMul (one input holding both halves); the
//               two-tensor form is what swiglu(input, gate) means
//   causalSoftmax  x and out [s, t] or [b, s, t], s <= t: row i keeps
//               columns j <= t - s + i. Deprecated at the InfiniOps heads
//               (docs/stack_versions.md), with no successor yet
//   embedding   aten::embedding's forward: out [N, D] = the rows of weight
//               [V, D] (any strides) that indices [N] (int32 or int64,
//               contiguous) name, each in [0, V) (the bridge checked:
//               InfiniOps' kernels skip other rows silently). out is
//               contiguous, of weight's dtype. A gather: padding_idx,
//               max_norm, scale_grad_by_freq and sparse matter to the
//               backward (and embedding_renorm_) only, so InfiniOps gets its
//               defaults (its kernel would act on max_norm, renormalizing
//               weight in place). The host runs the CPU's forward
//               (index_select along the rows)
//   addRmsNorm  torch.ops.infini.add_rms_norm (fused/rms_norm.cpp has the
//               definition): residual_out = input + residual rounded to the
//               dtype, out = (residual_out * weight) * rsqrt(mean(
//               residual_out^2, -1) + eps) in float, rounded once; all five
//               2-D or 3-D of one shape (weight [hidden]) and dtype,
//               contiguous. InfiniOps' AddRmsNorm is deprecated for
//               FusedAddRmsNorm, which multiplies in the other order. The
//               host runs a loop of its own with the definition's bits
//               (providers/host/fused_loops.h)
//   linear      aten::linear's forward: out [M, N] = input [M, K] @ weight
//               [N, K]^T (+ bias [N] where given), all of one dtype; input
//               and out contiguous (the bridge flattens the leading
//               dimensions), weight any strides. The host runs what the
//               CPU's linear runs for a contiguous input: addmm with the
//               bias, else mm, on weight's transposed view (an alias of its
//               own: a .t() would allocate a tensor per call)
#define TORCH_INFINI_SEAM_KERNELS(K) \
  K(Gelu, gelu, kCounted, (const TensorRef& out, const TensorRef& x, bool tanh), (out, x, tanh), \
    (view(x), std::string(tanh ? "tanh" : "none"), view(out)), \
    at::cpu::gelu_out(A(out), A(x), tanh ? "tanh" : "none")) \
  K(Softmax, softmax, kCounted, (const TensorRef& out, const TensorRef& x, int64_t dim), \
    (out, x, dim), (view(x), int64_t{dim}, std::optional<infini::ops::DataType>(), view(out)), \
    at::cpu::_softmax_out(A(out), A(x), dim, /*half_to_float=*/false)) \
  K(RmsNorm, rmsNorm, kCounted, \
    (const TensorRef& out, const TensorRef& x, const TensorRef& weight, float eps), \
    (out, x, weight, eps), (view(x), view(weight), eps, view(out)), \
    host_loops::rmsNorm(out, x, weight, eps)) \
  K(SiluAndMul, siluAndMul, kCounted, (const TensorRef& out, const TensorRef& x), (out, x), \
    (view(x), view(out)), siluAndMulInto(A(out), A(x))) \
  K(Swiglu, swiglu, kCounted, \
    (const TensorRef& out, const TensorRef& input, const TensorRef& gate), (out, input, gate), \
    (view(input), view(gate), view(out)), swigluInto(A(out), A(input), A(gate))) \
  K(CausalSoftmax, causalSoftmax, kCounted, (const TensorRef& out, const TensorRef& x), (out, x), \
    (view(x), view(out)), causalSoftmaxInto(A(out), A(x))) \
  K(Embedding, embedding, kByteMover, \
    (const TensorRef& out, const TensorRef& weight, const TensorRef& indices), \
    (out, weight, indices), \
    (view(indices), view(weight), std::optional<int64_t>(), std::optional<double>(), 2.0, \
     false, false, view(out)), \
    at::cpu::index_select_out(A(out), A(weight), 0, A(indices))) \
  K(AddRmsNorm, addRmsNorm, kCounted, \
    (const TensorRef& out, const TensorRef& residual_out, const TensorRef& input, \
     const TensorRef& residual, const TensorRef& weight, float eps), \
    (out, residual_out, input, residual, weight, eps), \
    (view(input), view(residual), view(weight), std::optional<float>(eps), view(out), \
     view(residual_out)), \
    host_loops::addRmsNorm(out, residual_out, input, residual, weight, eps)) \
  K(Linear, linear, kCounted, \
    (const TensorRef& out, const TensorRef& input, const TensorRef& weight, \
     const std::optional<TensorRef>& bias), \
    (out, input, weight, bias), \
    (view(input), view(weight), optionalView(bias ? &*bias : nullptr), view(out)), \
    [&](const TensorRef& weight_t) { \
      bias ? (void)at::cpu::addmm_out(A(out), A(*bias), A(input), A(weight_t)) \
           : (void)at::cpu::mm_out(A(out), A(input), A(weight_t)); \
    }(TensorRef{weight.data, weight.dtype, weight.device, {weight.sizes[1], weight.sizes[0]}, \
                {weight.strides[1], weight.strides[0]}}))
// clang-format on

// Expanding the entries: a parenthesized list's elements, and its first.
#define TORCH_INFINI_UNPAREN(...) __VA_ARGS__
#define TORCH_INFINI_FIRST(first, ...) first

namespace torch_infini::ops {

// What an InfiniOps launch of a generated seam kernel is (the entries' launch).
enum class SeamLaunch : uint8_t { kCounted, kByteMover };

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
