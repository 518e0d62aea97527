// The host device's rms_norm, add_rms_norm and rotary loops over the kernel
// view, bit for bit the compositions they stand for and a few us a call
// (fused_loops.h says why).
#include "providers/host/fused_loops.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum_cpu_dispatch.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <vector>

#include "torch_infini/runtime/host_runtime.h"

namespace torch_infini::ops::host_loops {
namespace {

template <typename T>
T* viewOf(const TensorRef& ref) {
  return static_cast<T*>(runtime::hostKernelView(ref.data));
}

// Offsets (in elements) of the rows of `t` [..., n]: its leading dimensions
// in row-major order, each at its own stride.
std::vector<int64_t> rowOffsets(const TensorRef& t) {
  const int64_t lead = t.dim() - 1;
  int64_t rows = 1;
  for (int64_t d = 0; d < lead; ++d) rows *= t.sizes[d];
  std::vector<int64_t> offsets(static_cast<size_t>(rows));
  std::vector<int64_t> index(static_cast<size_t>(lead), 0);
  int64_t offset = 0;
  for (int64_t r = 0; r < rows; ++r) {
    offsets[static_cast<size_t>(r)] = offset;
    for (int64_t d = lead - 1; d >= 0; --d) {  // the next index, last dimension fastest
      offset += t.strides[d];
      if (++index[d] < t.sizes[d]) break;
      offset -= t.strides[d] * t.sizes[d];
      index[d] = 0;
    }
  }
  return offsets;
}

// Where the weight multiplies: after the inverse RMS, (x * r) * weight, as
// ATen's rms_norm; or before it, (x * weight) * r, as add_rms_norm's
// definition (and InfiniOps' AddRmsNorm).
enum class WeightOrder { kLast, kFirst };

// ATen's rms_norm on the CPU (its composite, whose results the host
// matches bit for bit): squares in W, their mean over the row as ATen sums
// them (ATen's own sum kernel: its order depends on the CPU's vector
// width), then rsqrt(mean + eps) and the two products in `order`, each
// rounded in W. add_rms_norm's definition computes its inverse RMS the
// same way (square, mean, + eps, rsqrt).
template <typename T, WeightOrder order = WeightOrder::kLast>
void rmsNormRows(const TensorRef& out_ref, const TensorRef& x_ref, const T* weight, float eps) {
  using W = at::opmath_type<T>;  // float, double for double
  const int64_t n = x_ref.sizes.back();
  const std::vector<int64_t> x_rows = rowOffsets(x_ref);
  const std::vector<int64_t> out_rows = rowOffsets(out_ref);
  const auto rows = static_cast<int64_t>(x_rows.size());
  const T* x = viewOf<const T>(x_ref);
  T* out = viewOf<T>(out_ref);
  at::Tensor squares =
      at::empty({rows, n}, at::TensorOptions().dtype(c10::CppTypeToScalarType<W>::value));
  W* sq = squares.mutable_data_ptr<W>();
  for (int64_t row = 0; row < rows; ++row) {
    const T* in = x + x_rows[row];
    for (int64_t i = 0; i < n; ++i) {
      const W v = static_cast<W>(in[i]);
      sq[row * n + i] = v * v;
    }
  }
  at::Tensor sums = at::empty({rows}, squares.options());
  at::cpu::sum_out(sums, squares, {1}, /*keepdim=*/false, /*dtype=*/std::nullopt);
  const W* sum = sums.const_data_ptr<W>();
  for (int64_t row = 0; row < rows; ++row) {
    const W mean = sum[row] / static_cast<W>(n);
    const W inverse_rms = W(1) / std::sqrt(mean + static_cast<W>(eps));
    const T* in = x + x_rows[row];
    T* o = out + out_rows[row];
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (order == WeightOrder::kLast) {
        o[i] = static_cast<T>((static_cast<W>(in[i]) * inverse_rms) * static_cast<W>(weight[i]));
      } else {
        o[i] = static_cast<T>((static_cast<W>(in[i]) * static_cast<W>(weight[i])) * inverse_rms);
      }
    }
  }
}

// Rotates every head of each token of `t` by the angles of its position's
// cache row: cosines and sines in W (the definition's cache.to(wide)), the
// sines negated for the inverse rotation.
template <typename T, typename C>
void rotaryTokens(const TensorRef& t, int64_t positions_dim, const int64_t* positions,
                  int64_t tokens, const C* cache, int64_t cache_rows, int64_t cache_row_stride,
                  int64_t rot, int64_t head_size, bool is_neox, int64_t offset, bool inverse) {
  using W = at::opmath_type<T>;  // float, double for double
  const int64_t p = positions_dim;
  const bool split = t.dim() == p + 2;
  const int64_t heads = split ? t.sizes[p] : t.sizes[p] / head_size;
  const int64_t head_stride = split ? t.strides[p] : head_size;
  // Evenly strided tokens (the caller checked): token i at i * token_stride.
  const int64_t token_stride = t.strides[p - 1];
  const int64_t half = rot / 2;
  T* base = viewOf<T>(t);
  for (int64_t i = 0; i < tokens; ++i) {
    const int64_t pos = positions[i];
    TORCH_CHECK_INDEX(pos >= 0 && pos < cache_rows, "infini::rotary_embedding: position ", pos,
                      " is out of range for a cos_sin_cache of ", cache_rows, " rows");
    const C* row = cache + pos * cache_row_stride;
    for (int64_t h = 0; h < heads; ++h) {
      T* head = base + i * token_stride + h * head_stride + offset;
      for (int64_t j = 0; j < half; ++j) {
        const W cos = static_cast<W>(row[j]);
        const W sin = inverse ? -static_cast<W>(row[half + j]) : static_cast<W>(row[half + j]);
        T& a = head[is_neox ? j : 2 * j];
        T& b = head[is_neox ? half + j : 2 * j + 1];
        const W x = static_cast<W>(a);
        const W y = static_cast<W>(b);
        // Each product rounded, then the sum: the definition's tensors.
        const W x_cos = x * cos;
        const W y_sin = y * sin;
        const W y_cos = y * cos;
        const W x_sin = x * sin;
        a = static_cast<T>(x_cos - y_sin);
        b = static_cast<T>(y_cos + x_sin);
      }
    }
  }
}

}  // namespace

void rmsNorm(const TensorRef& out, const TensorRef& x, const TensorRef& weight, float eps) {
  if (x.sizes.back() == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.dtype, "infini::rms_norm", [&] {
    rmsNormRows<scalar_t>(out, x, viewOf<const scalar_t>(weight), eps);
  });
}

void addRmsNorm(const TensorRef& out, const TensorRef& residual_out, const TensorRef& input,
                const TensorRef& residual, const TensorRef& weight, float eps) {
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, input.dtype, "infini::add_rms_norm", [&] {
        using W = at::opmath_type<scalar_t>;
        // The sum in W, rounded to the dtype: every operand is contiguous.
        const scalar_t* a = viewOf<const scalar_t>(input);
        const scalar_t* b = viewOf<const scalar_t>(residual);
        scalar_t* sum = viewOf<scalar_t>(residual_out);
        const int64_t numel = input.numel();
        for (int64_t i = 0; i < numel; ++i)
          sum[i] = static_cast<scalar_t>(static_cast<W>(a[i]) + static_cast<W>(b[i]));
        if (input.sizes.back() == 0) return;
        rmsNormRows<scalar_t, WeightOrder::kFirst>(out, residual_out,
                                                   viewOf<const scalar_t>(weight), eps);
      });
}

void rotary(const TensorRef& t, const TensorRef& positions, const TensorRef& cos_sin_cache,
            int64_t head_size, bool is_neox, int64_t offset, bool inverse) {
  TORCH_CHECK(positions.dtype == c10::ScalarType::Long,
              "infini::rotary_embedding: the host kernel takes int64 positions, got ",
              positions.dtype);
  const int64_t tokens = positions.numel();
  const int64_t rot = cos_sin_cache.sizes[1];
  if (tokens == 0 || rot == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, t.dtype, "infini::rotary_embedding", [&] {
        using T = scalar_t;
        AT_DISPATCH_FLOATING_TYPES_AND2(
            at::kHalf, at::kBFloat16, cos_sin_cache.dtype, "infini::rotary_embedding", [&] {
              rotaryTokens<T, scalar_t>(t, positions.dim(), viewOf<const int64_t>(positions),
                                        tokens, viewOf<const scalar_t>(cos_sin_cache),
                                        cos_sin_cache.sizes[0], cos_sin_cache.strides[0], rot,
                                        head_size, is_neox, offset, inverse);
            });
      });
}

}  // namespace torch_infini::ops::host_loops
