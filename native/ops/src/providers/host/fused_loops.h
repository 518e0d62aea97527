// The host device's own loops for rms_norm, add_rms_norm and rotary_embedding over the
// device memory (its kernel view), in place of ATen compositions that cost a
// dozen operator calls each (at decoding sizes 45-50 us a call, where the
// loops take a few). On arguments the operator's infini kernel checked and
// laid out (aten/normalization.cpp, fused/rms_norm.cpp, fused/rotary.cpp).
//
// Both give the bits the CPU gives: every product, sum and quotient is
// rounded in the wide dtype as the ATen kernels round it (this file is
// built without contracting them into fused multiply-adds), and rms_norm's
// one reduction is ATen's own sum kernel, whose order depends on the CPU's
// vector width.
#pragma once

#include <cstdint>

#include "torch_infini/ops/kernel_provider.h"

namespace torch_infini::ops::host_loops {

// out = (x * rsqrt(mean(x^2, -1) + eps)) * weight per row, in float (double
// for float64), rounded once: ATen's rms_norm on the CPU, bit for bit. x
// [..., n] with unit stride in its last dimension, its rows at any strides;
// out of x's shape and dtype; weight contiguous [n] of that dtype.
void rmsNorm(const TensorRef& out, const TensorRef& x, const TensorRef& weight, float eps);

// add_rms_norm's definition (fused/rms_norm.cpp), bit for bit:
// residual_out = input + residual in float (double for float64) rounded to
// the dtype, then out = (residual_out * weight) * rsqrt(mean(residual_out^2,
// -1) + eps), the inverse RMS as rmsNorm's. All five contiguous, of one
// dtype; input, residual, out and residual_out of one shape [..., n].
void addRmsNorm(const TensorRef& out, const TensorRef& residual_out, const TensorRef& input,
                const TensorRef& residual, const TensorRef& weight, float eps);

// Rotates `t` (query or key: [*P, heads * head_size] or [*P, heads,
// head_size], P the positions' shape, unit stride in the last dimension,
// tokens evenly strided) in place by the angles of cos_sin_cache's rows
// (unit column stride) at the contiguous int64 positions. Raises
// c10::IndexError for a position outside the cache.
void rotary(const TensorRef& t, const TensorRef& positions, const TensorRef& cos_sin_cache,
            int64_t head_size, bool is_neox, int64_t offset, bool inverse);

}  // namespace torch_infini::ops::host_loops
