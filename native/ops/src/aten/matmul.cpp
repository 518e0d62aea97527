// Matrix products: mm, bmm, addmm (and their out= variants) through the
// kernel seam's Gemm. Transposed operands go to the kernel as strided views
// (no copy) as long as one of their last two dimensions has unit stride.
// addmm is one Gemm with the bias as C where the provider has gemmBias()
// (host: the CPU's addmm), else Gemm (alpha) then Add (beta * bias).
//
// linear (nn.Linear, F.linear) through the seam's Linear where no gradient
// is needed. aten::linear is CompositeImplicitAutograd, as rms_norm is
// (normalization.cpp): its AutogradPrivateUse1 kernel runs PyTorch's own
// differentiable decomposition (onto mm/addmm above) whenever a gradient,
// or a forward-mode tangent, is needed, and so does the PrivateUse1 kernel
// for a call the Linear kernel does not take: a gradient is never missing,
// and nothing goes to the CPU fallback that the decomposition serves.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/linear_compositeimplicitautograd_dispatch.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/MaybeOwned.h>
#include <torch/library.h>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "fallback/refusal.h"

namespace torch_infini::ops {
namespace {

// A view Gemm can read: row-major or column-major in the last two dims.
bool gemmReadable(const at::Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t rs = t.stride(-2), cs = t.stride(-1);
  return (cs == 1 && rs >= std::max<int64_t>(1, cols)) ||
         (rs == 1 && cs >= std::max<int64_t>(1, rows));
}

// `t` itself (borrowed: a copy of a tensor Python holds takes the GIL to
// incref its Python object) or a contiguous copy.
c10::MaybeOwned<at::Tensor> gemmOperand(const at::Tensor& t) {
  return gemmReadable(t) ? c10::MaybeOwned<at::Tensor>::borrowed(t)
                         : c10::MaybeOwned<at::Tensor>::owned(t.contiguous());
}

// Refuses a gemm the provider would compute below PyTorch's precision for
// `dtype` (float32 through TF32 is allowed where the float32 matmul precision
// is "high" or "medium", as on CUDA).
void requireFullPrecision(const char* name, c10::ScalarType dtype) {
  KernelProvider& k = selectedKernelProvider();
  const char* reduced = k.gemmReducedPrecision(dtype);
  if (reduced == nullptr) return;
  const bool tf32_allowed =
      dtype == c10::ScalarType::Float &&
      at::globalContext().float32MatmulPrecision() != at::Float32MatmulPrecision::HIGHEST;
  TORCH_CHECK_NOT_IMPLEMENTED(
      tf32_allowed, name, ": dtype ", c10::toString(dtype), " is not supported on infini by the '",
      k.name(), "' kernel provider (gemm kernel): it ", reduced,
      " on this device type, below PyTorch's default precision",
      dtype == c10::ScalarType::Float ? " (torch.set_float32_matmul_precision('high') allows TF32)"
                                      : "");
}

void checkOperands(const char* name, const at::Tensor& a, const at::Tensor& b, int64_t dim) {
  checkInfiniTensor(name, "the first operand", a);
  checkInfiniTensor(name, "the second operand", b);
  checkSameDevice(a, b);
  TORCH_CHECK(a.dim() == dim, name, ": expected a ", dim, "-D tensor for the first operand, got ",
              a.dim(), "-D");
  TORCH_CHECK(b.dim() == dim, name, ": expected a ", dim, "-D tensor for the second operand, got ",
              b.dim(), "-D");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(),
              "expected m1 and m2 to have the same dtype, but got: ", a.scalar_type(),
              " != ", b.scalar_type());
  if (dim == 3) {
    TORCH_CHECK(a.size(0) == b.size(0), name,
                ": batch1 and batch2 must have the same number of "
                "batches, got ",
                a.size(0), " and ", b.size(0));
  }
  TORCH_CHECK(a.size(-1) == b.size(-2), name, ": mat1 and mat2 shapes cannot be multiplied (",
              a.size(-2), "x", a.size(-1), " and ", b.size(-2), "x", b.size(-1), ")");
  requireFullPrecision(name, a.scalar_type());
  requireKernel(name, SeamOp::Gemm, a.scalar_type());
}

// result = alpha * a @ b + beta * c (shape checked by callers); c, where
// given, only to a provider with gemmBias().
void gemmInto(const at::Tensor& result, const at::Tensor& a, const at::Tensor& b, float alpha,
              const TensorRef* c = nullptr, float beta = 0.0f) {
  if (result.numel() == 0) return;
  if (a.size(-1) == 0 && c == nullptr) {  // empty inner dimension: the product is all zeros
    result.zero_();
    return;
  }
  // Unless the provider writes any layout, the kernel writes a dense
  // row-major output; anything else goes via a temporary.
  const bool direct = result.is_contiguous() || selectedKernelProvider().gemmStridedOutput();
  const c10::MaybeOwned<at::Tensor> target_holder =
      direct ? c10::MaybeOwned<at::Tensor>::borrowed(result)
             : c10::MaybeOwned<at::Tensor>::owned(at::empty(result.sizes(), result.options()));
  const at::Tensor& target = *target_holder;
  selectedKernelProvider().gemm(toRef(target), toRef(*gemmOperand(a)), toRef(*gemmOperand(b)), c,
                                alpha, beta, streamOf(target));
  if (!direct) result.copy_(target);
}

// The result's shape, held inline (no heap allocation per product).
c10::SmallVector<int64_t, 3> productShape(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() == 3) return {a.size(0), a.size(1), b.size(2)};
  return {a.size(0), b.size(1)};
}

void prepareOut(const char* name, at::Tensor& out, const at::Tensor& a, at::IntArrayRef shape) {
  checkInfiniTensor(name, "out", out);
  checkSameDevice(a, out);
  requireSameDtype(name, a.scalar_type(), out.scalar_type(), "out");
  at::native::resize_output(out, shape);
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  checkOperands("mm", self, mat2, 2);
  at::Tensor result = emptyOnDevice(self, productShape(self, mat2));
  gemmInto(result, self, mat2, 1.0f);
  return result;
}

at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  checkOperands("mm.out", self, mat2, 2);
  prepareOut("mm.out", out, self, productShape(self, mat2));
  gemmInto(out, self, mat2, 1.0f);
  return out;
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
  checkOperands("bmm", self, mat2, 3);
  at::Tensor result = emptyOnDevice(self, productShape(self, mat2));
  gemmInto(result, self, mat2, 1.0f);
  return result;
}

at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  checkOperands("bmm.out", self, mat2, 3);
  prepareOut("bmm.out", out, self, productShape(self, mat2));
  gemmInto(out, self, mat2, 1.0f);
  return out;
}

// out = beta * bias + alpha * (mat1 @ mat2)
void addmmInto(const char* name, at::Tensor& out, const at::Tensor& bias, const at::Tensor& mat1,
               const at::Tensor& mat2, const at::Scalar& beta, const at::Scalar& alpha) {
  checkInfiniTensor(name, "self", bias);
  checkSameDevice(bias, mat1);
  requireSameDtype(name, mat1.scalar_type(), bias.scalar_type(), "self");
  const double beta_value = beta.toDouble();
  if (beta_value != 0.0) requireKernel(name, SeamOp::Add, mat1.scalar_type());
  const c10::SmallVector<int64_t, 3> shape = productShape(mat1, mat2);
  TORCH_CHECK(at::is_expandable_to(bias.sizes(), shape), name, ": self of shape ", bias.sizes(),
              " cannot be broadcast to the product shape ", at::IntArrayRef(shape));
  // beta == 0 ignores self entirely (even NaN), as PyTorch does.
  if (beta_value != 0.0 && selectedKernelProvider().gemmBias()) {
    // As the CPU's addmm: one kernel adds the bias (host: the CPU's addmm).
    const TensorRef c = expandedRef(bias, shape);
    gemmInto(out, mat1, mat2, alpha.toFloat(), &c, beta.toFloat());
    return;
  }
  gemmInto(out, mat1, mat2, alpha.toFloat());
  if (beta_value != 0.0 && out.numel() > 0) {
    selectedKernelProvider().add(toRef(out), toRef(out), expandedRef(bias, shape), beta_value,
                                 streamOf(out));
  }
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                 const at::Scalar& beta, const at::Scalar& alpha) {
  checkOperands("addmm", mat1, mat2, 2);
  at::Tensor result = emptyOnDevice(mat1, productShape(mat1, mat2));
  addmmInto("addmm", result, self, mat1, mat2, beta, alpha);
  return result;
}

at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  checkOperands("addmm.out", mat1, mat2, 2);
  at::assert_no_internal_overlap(out);
  // The product is written before self is read: keep a copy when they share memory.
  const bool shares = out.defined() && self.defined() && isInfini(self) &&
                      out.storage().is_alias_of(self.storage());
  const c10::MaybeOwned<at::Tensor> bias = shares ? c10::MaybeOwned<at::Tensor>::owned(self.clone())
                                                  : c10::MaybeOwned<at::Tensor>::borrowed(self);
  prepareOut("addmm.out", out, mat1, productShape(mat1, mat2));
  addmmInto("addmm.out", out, *bias, mat1, mat2, beta, alpha);
  return out;
}

// ---- linear ---------------------------------------------------------------------------

// Whether the seam's Linear takes the call; anything else is the
// decomposition's (its checks and errors are PyTorch's own). A contiguous
// input only: for any other the CPU's linear adds the bias after the
// product (matmul then add_), which the decomposition reproduces and one
// kernel would not.
bool linearTakes(const at::Tensor& input, const at::Tensor& weight, const at::Tensor* bias) {
  if (!isInfini(input) || !isInfini(weight) || input.device() != weight.device()) return false;
  if (input.dim() < 1 || weight.dim() != 2 || input.size(-1) != weight.size(1)) return false;
  if (weight.scalar_type() != input.scalar_type() || !input.is_contiguous()) return false;
  if (bias != nullptr &&
      (!isInfini(*bias) || bias->device() != input.device() || bias->dim() != 1 ||
       bias->size(0) != weight.size(0) || bias->scalar_type() != input.scalar_type()))
    return false;
  return selectedKernelProvider().supports(SeamOp::Linear, input.scalar_type());
}

at::Tensor linear(const at::Tensor& input, const at::Tensor& weight,
                  const std::optional<at::Tensor>& bias_opt) {
  const at::Tensor* bias = bias_opt.has_value() && bias_opt->defined() ? &*bias_opt : nullptr;
  if (!linearTakes(input, weight, bias))
    return at::compositeimplicitautograd::linear(input, weight, bias_opt);
  // out [*, N]; the kernel sees input [M, K] and out [M, N].
  c10::SmallVector<int64_t, 4> shape(input.sizes().begin(), input.sizes().end());
  shape.back() = weight.size(0);
  at::Tensor out = emptyOnDevice(input, shape);
  if (out.numel() == 0) return out;
  const int64_t k = input.size(-1), n = weight.size(0), m = out.numel() / n;
  TensorRef in_ref = toRef(input), out_ref = toRef(out);
  in_ref.sizes = {m, k};
  in_ref.strides = {k, 1};
  out_ref.sizes = {m, n};
  out_ref.strides = {n, 1};
  const std::optional<TensorRef> bias_ref =
      bias == nullptr ? std::nullopt : std::optional<TensorRef>(toRef(*bias));
  selectedKernelProvider().linear(out_ref, in_ref, toRef(weight), bias_ref, streamOf(out));
  return out;
}

at::Tensor linear_autograd(c10::DispatchKeySet keys, const at::Tensor& input,
                           const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  if (needsAutograd(input) || needsAutograd(weight) || needsAutograd(bias))
    return at::compositeimplicitautograd::linear(input, weight, bias);
  // On to the infini kernel below autograd: a redispatch, not a second call.
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  return at::_ops::linear::redispatch(keys & c10::after_autograd_keyset, input, weight, bias);
}

// Calls a kernel refuses (a dtype, shape or argument it does not serve) run
// in the CPU fallback, under its policy.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar matmul(m, "aten", "matmul", SeamOp::Gemm);
  TORCH_INFINI_IMPL_OR_FALLBACK(matmul, "mm", mm);
  TORCH_INFINI_IMPL_OR_FALLBACK(matmul, "mm.out", mm_out);
  TORCH_INFINI_IMPL_OR_FALLBACK(matmul, "bmm", bmm);
  TORCH_INFINI_IMPL_OR_FALLBACK(matmul, "bmm.out", bmm_out);
  TORCH_INFINI_IMPL_OR_FALLBACK(matmul, "addmm", addmm);
  TORCH_INFINI_IMPL_OR_FALLBACK(matmul, "addmm.out", addmm_out);
  // What the Linear kernel does not take is the decomposition's, above.
  BridgeRegistrar(m, "aten", "matmul", SeamOp::Linear).impl("linear", TORCH_FN(linear));
}
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) { m.impl("linear", TORCH_FN(linear_autograd)); }

}  // namespace
}  // namespace torch_infini::ops
