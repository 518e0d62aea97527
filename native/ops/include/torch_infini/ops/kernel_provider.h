// Seam 2: kernels.
//
// The ATen bridge validates arguments, computes output geometry, allocates,
// and then hands strided views of device memory to a KernelProvider shaped
// like InfiniOps operators, together with the stream to run on. Providers:
// `host` (ATen CPU kernels over the same memory, inside the stream's work)
// and `infiniops` (InfiniOps operators, implementation index 0).
#pragma once

#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <string>
#include <vector>

#include "torch_infini/ops/seam_operators.h"
#include "torch_infini/runtime/device_runtime.h"

namespace c10 {
class OperatorHandle;
struct IValue;
}  // namespace c10

namespace torch_infini::ops {

struct RandomDraw;

// A strided view of device memory. Sizes and strides count elements.
struct TensorRef {
  void* data = nullptr;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  int device = -1;
  c10::SmallVector<int64_t, 6> sizes;
  c10::SmallVector<int64_t, 6> strides;

  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
};

// The seam's operators (SeamOp, opName): seam_operators.h.

class KernelProvider {
 public:
  virtual ~KernelProvider() = default;
  virtual const std::string& name() const = 0;
  virtual bool supports(SeamOp op, c10::ScalarType dtype) const = 0;

  // dst[i] = src[i] for every index of the (equal) shape. Copy when dtypes
  // match, Cast otherwise. src and dst may live on different devices of the
  // same backend only if the provider says so through supportsPeer().
  virtual void copy(const TensorRef& dst, const TensorRef& src, runtime::StreamHandle stream) = 0;
  virtual bool supportsPeer() const = 0;

  // Every view below has the output's dtype and lives on one device. Inputs
  // of elementwise operators arrive broadcast to the output's shape (stride
  // 0 on broadcast dimensions); outputs never overlap themselves.
  virtual void fill(const TensorRef& dst, const c10::Scalar& value,
                    runtime::StreamHandle stream) = 0;
  // Whether fill() writes `value` into a `dtype` tensor exactly as PyTorch
  // converts it (where supports(Fill, dtype)); else the bridge uploads it.
  virtual bool fillTakes(const c10::Scalar& /*value*/, c10::ScalarType /*dtype*/) const {
    return true;
  }
  virtual void add(const TensorRef& out, const TensorRef& a, const TensorRef& b, double alpha,
                   runtime::StreamHandle stream) = 0;
  virtual void mul(const TensorRef& out, const TensorRef& a, const TensorRef& b,
                   runtime::StreamHandle stream) = 0;
  // out = x * scalar (SeamOp::Mul) or x + alpha * scalar (SeamOp::Add) where
  // scalarOperand(op, x.dtype): the scalar applied as PyTorch's CPU kernels
  // apply a Python number operand, in the operator's math type (float16 and
  // bfloat16: unrounded, in float: 1e-3 * 1e5 is 100, not inf; -0.0 * 0.5 is
  // -0.0). The bridge takes other scalar operands to the device first.
  virtual bool scalarOperand(SeamOp op, c10::ScalarType dtype) const = 0;
  virtual void binaryScalar(SeamOp op, const TensorRef& out, const TensorRef& x,
                            const c10::Scalar& scalar, double alpha,
                            runtime::StreamHandle stream) = 0;
  // a: [.., m, k], b: [.., k, n], out: [.., m, n]; any strides with a unit
  // stride in one of the last two dimensions.
  // out = alpha * a @ b + beta * c, c (2-D only) broadcast to out's shape.
  // Unless the provider says more, c is null (beta ignored) and out dense
  // row-major:
  virtual void gemm(const TensorRef& out, const TensorRef& a, const TensorRef& b,
                    const TensorRef* c, float alpha, float beta, runtime::StreamHandle stream) = 0;
  virtual bool gemmBias() const = 0;           // c accepted
  virtual bool gemmStridedOutput() const = 0;  // out of any strides accepted
  // Where the gemm computes `dtype` below PyTorch's default precision (float32
  // through TF32, float16 accumulated in float16), how; else nullptr. The
  // bridge then refuses it (float32 unless torch.set_float32_matmul_precision
  // allows TF32), so nothing is computed less precisely than asked.
  virtual const char* gemmReducedPrecision(c10::ScalarType /*dtype*/) const { return nullptr; }
  // The operators declared by an entry of TORCH_INFINI_SEAM_KERNELS
  // (seam_operators.h, which says what each computes): gelu, softmax, ...
#define TORCH_INFINI_SEAM_VIRTUAL(enumerator, method, launch, parameters, ...) \
  virtual void method(TORCH_INFINI_UNPAREN parameters, runtime::StreamHandle stream) = 0;
  TORCH_INFINI_SEAM_KERNELS(TORCH_INFINI_SEAM_VIRTUAL)
#undef TORCH_INFINI_SEAM_VIRTUAL
  // out = f(x) for a unary seam operator `op` (isUnary(op), unary_operators.h);
  // out and x of one shape, any strides.
  virtual void unary(SeamOp op, const TensorRef& out, const TensorRef& x,
                     runtime::StreamHandle stream) = 0;
  // out = the inputs concatenated along `dim` (0 <= dim < out.dim()): each
  // input has out's rank and sizes except in `dim`, and elements (none is
  // empty; their sizes in `dim` add up to out's). Any strides.
  virtual void cat(const TensorRef& out, const std::vector<TensorRef>& inputs, int64_t dim,
                   runtime::StreamHandle stream) = 0;
  // Writes `draw` (whose seed and offset the bridge took from the generator
  // when it enqueued the call) into out, in stream order; draws with tensor
  // inputs (Bernoulli with a p tensor) never come here. Providers whose
  // library has no generator do not support SeamOp::Random: the bridge then
  // generates on the host (random/operators.cpp).
  virtual void random(const TensorRef& out, const RandomDraw& draw,
                      runtime::StreamHandle stream) = 0;
  // vLLM's rotary position embedding (fused/rotary.cpp has the definition),
  // in place on query and key (key may be null): positions int64 [T] or [B,
  // S], contiguous; query and key [*P, heads, head_size] or [*P, heads *
  // head_size] (P the positions' shape) with a unit stride in the last
  // dimension and tokens evenly strided (stride(0) = S * stride(1) for [B,
  // S]); cos_sin_cache [max_position, rot_dim], unit column stride, rows of
  // rot_dim / 2 cosines then sines, in any supported dtype. Dimensions
  // [offset, offset + rot_dim) of each head turn (the opposite angle with
  // `inverse`), computed in float and rounded once.
  virtual void rotaryEmbedding(const TensorRef& query, const TensorRef* key,
                               const TensorRef& positions, const TensorRef& cos_sin_cache,
                               int64_t head_size, bool is_neox, int64_t offset, bool inverse,
                               runtime::StreamHandle stream) = 0;
  // vLLM's fused_add_rms_norm, in place: residual = input + residual
  // (rounded to the dtype), then input = residual * rsqrt(mean(residual^2,
  // -1) + eps), times weight where one is given (null: none), computed in
  // float and rounded once. input and residual [rows, hidden] of one dtype,
  // unit column stride, any row stride, not overlapping; weight [hidden] of
  // their dtype, contiguous.
  virtual void fusedAddRmsNorm(const TensorRef& input, const TensorRef& residual,
                               const TensorRef* weight, float eps,
                               runtime::StreamHandle stream) = 0;
  // torch.ops.infini.topk_softmax (fused/moe.cpp has the definition):
  // gating [T, E] contiguous; bias [E] float32 contiguous and is_padding [T]
  // uint8 contiguous, each optional (null: none); weights [T, k] float32,
  // indices [T, k] int32 and token_expert [T, k] int32, contiguous.
  virtual void topkSoftmax(const TensorRef& weights, const TensorRef& indices,
                           const TensorRef& token_expert, const TensorRef& gating,
                           const TensorRef* bias, const TensorRef* is_padding, bool renormalize,
                           runtime::StreamHandle stream) = 0;
  // torch.ops.infini.reshape_and_cache_flash (fused/paged_attention.cpp has
  // the definition), in place on the caches: key and value [T, heads,
  // head_size], unit last stride; slot_mapping [T] int64 contiguous, each
  // slot negative (skipped) or below num_blocks * block_size (the bridge
  // checked); caches [num_blocks, block_size, heads, head_size], unit last
  // stride, one dtype throughout.
  virtual void reshapeAndCacheFlash(const TensorRef& key, const TensorRef& value,
                                    const TensorRef& key_cache, const TensorRef& value_cache,
                                    const TensorRef& slot_mapping,
                                    runtime::StreamHandle stream) = 0;
  // torch.ops.infini.paged_attention (the same file): out and query
  // [num_seqs, heads, head_size], unit last stride, head_size 64 or 128;
  // caches [num_blocks, kv_heads, block_size, head_size], unit last stride;
  // block_tables [num_seqs, max_blocks] and seq_lens [num_seqs] of one
  // integer dtype, contiguous, every length at most max_blocks * block_size
  // and every block it uses in [0, num_blocks) (the bridge checked); a
  // sequence of length <= 0 leaves its rows of out as they are (the bridge
  // zeroes them first); alibi_slopes [heads] float32 contiguous or null.
  virtual void pagedAttention(const TensorRef& out, const TensorRef& query,
                              const TensorRef& key_cache, const TensorRef& value_cache,
                              const TensorRef& block_tables, const TensorRef& seq_lens,
                              const TensorRef* alibi_slopes, float scale,
                              runtime::StreamHandle stream) = 0;
  // aten::convolution's forward, not transposed: input [N, C, *spatial]
  // (1 to 3 spatial dimensions), weight [O, C / groups, *kernel], bias [O]
  // or null, all of one dtype, any strides; out [N, O, *out_spatial] in
  // the layout PyTorch predicts for infini. stride, padding (both sides)
  // and dilation have one entry per spatial dimension.
  virtual void convolution(const TensorRef& out, const TensorRef& input, const TensorRef& weight,
                           const TensorRef* bias, const std::vector<int64_t>& stride,
                           const std::vector<int64_t>& padding,
                           const std::vector<int64_t>& dilation, int64_t groups,
                           runtime::StreamHandle stream) = 0;
  // GradScaler's steps, as PyTorch's _amp_foreach_non_finite_check_and_unscale_
  // and _amp_update_scale_ define them: each gradient (a floating dtype the
  // provider supports for AmpUnscale) multiplied by inv_scale in place, and
  // found_inf set to 1 if any element is inf or nan; then scale multiplied
  // by backoff_factor and growth_tracker reset where found_inf is nonzero,
  // else growth_tracker incremented and, at growth_interval, scale grown
  // (if that stays finite) and growth_tracker reset. found_inf, inv_scale
  // and scale are one-element float32, growth_tracker one-element int32.
  virtual void ampUnscale(const std::vector<TensorRef>& grads, const TensorRef& found_inf,
                          const TensorRef& inv_scale, runtime::StreamHandle stream) = 0;
  virtual void ampUpdateScale(const TensorRef& scale, const TensorRef& growth_tracker,
                              const TensorRef& found_inf, double growth_factor,
                              double backoff_factor, int64_t growth_interval,
                              runtime::StreamHandle stream) = 0;
  // An in-place foreach operator (aten::_foreach_<name>_, SeamOp::Foreach)
  // called whole: `arguments` are the call's, except that each tensor list
  // is an empty list standing for the next entry of `lists`, the views of
  // its tensors. The bridge (aten/foreach.cpp) passes lists of one dtype the
  // provider supports for Foreach, on one device, of dense tensors, the
  // lists' tensors at each index of one shape and overlapping the written
  // one wholly or not at all. Providers without foreach kernels keep this
  // default, which refuses (supports() says so first).
  virtual void foreachInPlace(const c10::OperatorHandle& /*op*/,
                              const std::vector<c10::IValue>& /*arguments*/,
                              const std::vector<std::vector<TensorRef>>& /*lists*/,
                              runtime::StreamHandle /*stream*/) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "infini: the ", name(),
                                " kernel provider has no foreach kernels");
  }
};

// Launches of arithmetic kernels (not copies or fills) whose results need not
// be the CPU's bit for bit: InfiniOps' add, mul, gemm, ... The host provider
// runs the CPU's own kernels and counts none. Tools read the count before and
// after a call to tell how to compare its results with the CPU's.
int64_t nonCpuKernelLaunches();
void countNonCpuKernelLaunch();

// The provider paired with the selected runtime (host runtime: host kernels;
// an InfiniRT runtime: InfiniOps kernels). Initialized on first use.
KernelProvider& selectedKernelProvider();

}  // namespace torch_infini::ops
