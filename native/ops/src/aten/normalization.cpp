// rms_norm (torch.nn.functional.rms_norm, nn.RMSNorm) over one normalized
// dimension, 2-D and 3-D inputs, through the kernel seam's RmsNorm; and
// softmax (aten::_softmax and its out=, what torch.softmax and
// F.softmax call) through the seam's Softmax.
//
// aten::rms_norm is CompositeImplicitAutograd: it has no derivative formula
// of its own, so a PrivateUse1 kernel alone would leave autograd with no
// graph at all (inputs silently without gradients). Its AutogradPrivateUse1
// kernel therefore runs the native kernel only when no gradient (nor a
// forward-mode tangent) is needed, and otherwise PyTorch's own
// differentiable decomposition, whose operators each carry their derivative
// (or raise NotImplementedError naming an operator infini lacks): a
// gradient is right or refused, never missing.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/rms_norm_compositeimplicitautograd_dispatch.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <limits>
#include <utility>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "fallback/refusal.h"

namespace torch_infini::ops {
namespace {

at::Tensor rms_norm(const at::Tensor& input, c10::IntArrayRef normalized_shape,
                    const std::optional<at::Tensor>& weight_opt, std::optional<double> eps) {
  const char* name = "rms_norm";
  checkInfiniTensor(name, "input", input);
  requireKernel(name, SeamOp::RmsNorm, input.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(normalized_shape.size() == 1, name,
                              ": only one normalized dimension is supported on infini, got "
                              "normalized_shape=",
                              normalized_shape);
  TORCH_CHECK_NOT_IMPLEMENTED(input.dim() == 2 || input.dim() == 3, name,
                              ": only 2-D and 3-D inputs are supported on infini, got ",
                              input.dim(), "-D input of shape ", input.sizes());
  const int64_t n = normalized_shape[0];
  TORCH_CHECK(input.size(-1) == n, "Given normalized_shape=", normalized_shape,
              ", expected input with shape [*, ", n, "], but got input of size", input.sizes());

  // Tensors are borrowed where they can be: a copy of a tensor Python holds
  // takes the GIL to incref its Python object.
  c10::MaybeOwned<at::Tensor> weight;
  if (weight_opt.has_value() && weight_opt->defined()) {
    const at::Tensor& given = *weight_opt;
    checkInfiniTensor(name, "weight", given);
    checkSameDevice(input, given);
    requireSameDtype(name, input.scalar_type(), given.scalar_type(), "weight");
    TORCH_CHECK(given.dim() == 1 && given.size(0) == n, name, ": expected weight of shape [", n,
                "], got ", given.sizes());
    weight = given.expect_contiguous();
  } else {
    at::Tensor ones = at::empty({n}, input.options());  // no affine weight
    ones.fill_(1);
    weight = c10::MaybeOwned<at::Tensor>::owned(std::move(ones));
  }
  const double eps_value =
      eps.has_value() ? *eps : static_cast<double>(std::numeric_limits<float>::epsilon());

  // The kernel reads rows with unit stride in the normalized dimension.
  const c10::MaybeOwned<at::Tensor> x =
      input.stride(-1) == 1 ? c10::MaybeOwned<at::Tensor>::borrowed(input)
                            : c10::MaybeOwned<at::Tensor>::owned(input.contiguous());
  at::Tensor out = emptyOnDevice(input, input.sizes());
  if (out.numel() > 0) {
    selectedKernelProvider().rmsNorm(toRef(out), toRef(*x), toRef(*weight),
                                     static_cast<float>(eps_value), streamOf(out));
  }
  return out;
}

at::Tensor rms_norm_autograd(c10::DispatchKeySet keys, const at::Tensor& input,
                             c10::SymIntArrayRef normalized_shape,
                             const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  if (needsAutograd(input) || needsAutograd(weight)) {
    // PyTorch's decomposition, dispatched with autograd still active.
    try {
      return at::compositeimplicitautograd::rms_norm_symint(input, normalized_shape, weight, eps);
    } catch (const c10::NotImplementedError& e) {
      TORCH_CHECK_NOT_IMPLEMENTED(false,
                                  "rms_norm: with requires_grad=True, infini runs PyTorch's "
                                  "differentiable decomposition of rms_norm, which needs an "
                                  "operator infini does not have yet: ",
                                  e.what_without_backtrace());
    }
  }
  // On to the infini kernel below autograd: a redispatch, not a second call.
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  return at::_ops::rms_norm::redispatch(keys & c10::after_autograd_keyset, input, normalized_shape,
                                        weight, eps);
}

// ---- softmax --------------------------------------------------------------------------

// The checks of _softmax(self, dim, half_to_float) and its out=, before
// anything is allocated; returns dim wrapped into [0, self.dim()).
int64_t checkSoftmax(const char* name, const at::Tensor& self, int64_t dim, bool half_to_float) {
  checkInfiniTensor(name, "input", self);
  // As a softmax of a 1-element 1-D tensor on the CPU; the kernel takes
  // tensors of at least one dimension.
  TORCH_CHECK_NOT_IMPLEMENTED(self.dim() > 0, name,
                              ": 0-dim inputs are not supported on infini (the softmax kernel "
                              "takes tensors of at least one dimension)");
  // What softmax(x, dtype=float32) of a half x becomes on CUDA only; never
  // from torch.softmax on infini. The CPU's kernel raises for it.
  TORCH_CHECK_NOT_IMPLEMENTED(!half_to_float, name,
                              ": half_to_float is not supported on infini (dtype ",
                              self.scalar_type(), ")");
  const int64_t wrapped = at::maybe_wrap_dim(dim, self.dim());
  requireKernel(name, SeamOp::Softmax, self.scalar_type());
  return wrapped;
}

void softmaxInto(const at::Tensor& out, const at::Tensor& self, int64_t dim) {
  if (out.numel() > 0)
    selectedKernelProvider().softmax(toRef(out), toRef(self), dim, streamOf(out));
}

// Contiguous, as the CPU's and CUDA's kernels allocate it.
at::Tensor softmaxNew(const at::Tensor& self, int64_t dim) {
  at::Tensor out = emptyOnDevice(self, self.sizes());
  softmaxInto(out, self, dim);
  return out;
}

at::Tensor _softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  return softmaxNew(self, checkSoftmax("_softmax", self, dim, half_to_float));
}

at::Tensor& _softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) {
  const int64_t wrapped = checkSoftmax("_softmax.out", self, dim, half_to_float);
  checkInfiniTensor("_softmax.out", "out", out);
  checkSameDevice(self, out);
  requireSameDtype("_softmax.out", self.scalar_type(), out.scalar_type(), "out");
  at::native::resize_output(out, self.sizes());
  // The kernel reads all of self before it writes out only where they are
  // distinct memory; an out sharing self's goes through a temporary.
  if (out.storage().is_alias_of(self.storage())) {
    out.copy_(softmaxNew(self, wrapped));
    return out;
  }
  softmaxInto(out, self, wrapped);
  return out;
}

// A call the kernel refuses (shape, dtype) runs in the CPU fallback.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar normalization(m, "aten", "normalization", SeamOp::RmsNorm);
  TORCH_INFINI_IMPL_OR_FALLBACK(normalization, "rms_norm", rms_norm);
  BridgeRegistrar softmax(m, "aten", "softmax", SeamOp::Softmax);
  TORCH_INFINI_IMPL_OR_FALLBACK(softmax, "_softmax", _softmax);
  TORCH_INFINI_IMPL_OR_FALLBACK(softmax, "_softmax.out", _softmax_out);
}
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("rms_norm", TORCH_FN(rms_norm_autograd));
}

}  // namespace
}  // namespace torch_infini::ops
