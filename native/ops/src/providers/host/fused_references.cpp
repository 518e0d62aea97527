// The CPU references of the fused activations (silu_and_mul, swiglu,
// causal_softmax), written into a given result: the operators' CPU kernels
// (fused/activations.cpp) allocate it, the host kernel provider passes the
// device tensor's own memory (its kernel view). They live with the host
// provider, the lower layer, so that it includes nothing above it.
#include "providers/host/fused_references.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include <algorithm>

#include "common/fused_helpers.h"

namespace torch_infini::ops {
namespace {

// `value` in the causally masked entries (column j > t - s + i of row i) of
// the contiguous float or double tensor `scores` [..., s, t].
void fillCausallyMasked(const at::Tensor& scores, int64_t s, int64_t t, double value) {
  if (scores.numel() == 0) return;
  const int64_t matrices = scores.numel() / (s * t);
  AT_DISPATCH_FLOATING_TYPES(scores.scalar_type(), "causal_softmax", [&] {
    scalar_t* data = scores.mutable_data_ptr<scalar_t>();
    const auto fill = static_cast<scalar_t>(value);
    for (int64_t m = 0; m < matrices; ++m) {
      for (int64_t i = 0; i < s; ++i) {
        scalar_t* row = data + (m * s + i) * t;
        for (int64_t j = std::max<int64_t>(t - s + i + 1, 0); j < t; ++j) row[j] = fill;
      }
    }
  });
}

}  // namespace

// The references, written into `out` (the result's shape, any dtype the
// caller allocated: the input's), on arguments the caller checked (each
// operator's CPU and infini kernels below). In a wide dtype (float32,
// float64) the last operation writes `out` itself; otherwise the wide
// result is rounded into it once, as .to() would. The CPU kernels allocate
// `out`; the host provider passes the device tensor's own memory (no result
// to copy).
void siluAndMulInto(const at::Tensor& out, const at::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  const c10::ScalarType w = wide(x.scalar_type());
  const at::Tensor gate = x.narrow(-1, 0, h).to(w);
  const at::Tensor up = x.narrow(-1, h, h).to(w);
  if (out.scalar_type() == w) {
    at::mul_out(const_cast<at::Tensor&>(out), at::silu(gate), up);
  } else {
    out.copy_(at::silu(gate) * up);
  }
}

void causalSoftmaxInto(const at::Tensor& out, const at::Tensor& x) {
  const int64_t s = x.size(-2);
  const int64_t t = x.size(-1);
  const c10::ScalarType w = wide(x.scalar_type());
  if (s == 1) {
    // One query after t - 1 cached keys (a decoding step): it sees every
    // key, nothing is masked, and the result is the row's softmax: no mask
    // to build and apply (four operators less per call).
    if (out.scalar_type() == w) {
      at::_softmax_out(const_cast<at::Tensor&>(out), x.to(w), -1, /*half_to_float=*/false);
    } else {
      out.copy_(at::softmax(x.to(w), -1));
    }
    return;
  }
  // The scores with the masked entries at -inf, the softmax of each row,
  // then 0 in the masked entries whatever the row holds (softmax alone gives
  // NaN there in a row with NaN or +inf allowed), as InfiniOps' kernel
  // writes them: the composition's values (masked_fill, softmax,
  // masked_fill), with the mask written by a loop instead of built as a
  // tensor and applied by two masked_fill calls (five operators a call).
  at::Tensor scores = x.to(x.options().dtype(w), /*non_blocking=*/false, /*copy=*/true,
                           at::MemoryFormat::Contiguous);
  fillCausallyMasked(scores, s, t, -INFINITY);
  at::Tensor probs = at::_softmax(scores, -1, /*half_to_float=*/false);
  fillCausallyMasked(probs, s, t, 0);
  out.copy_(probs);
}

void swigluInto(const at::Tensor& out, const at::Tensor& input, const at::Tensor& gate) {
  const c10::ScalarType w = wide(input.scalar_type());
  if (out.scalar_type() == w) {
    at::mul_out(const_cast<at::Tensor&>(out), input.to(w), at::silu(gate.to(w)));
  } else {
    out.copy_(input.to(w) * at::silu(gate.to(w)));
  }
}

}  // namespace torch_infini::ops
