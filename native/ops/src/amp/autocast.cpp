// Autocast on infini (the AutocastPrivateUse1 dispatch key): CUDA's policy.
//
// The operator lists are ATen's own (AT_FORALL_* in ATen/autocast_mode.h),
// which ATen registers for CUDA, XPU, MTIA and MAIA: operators that run in
// the autocast dtype (matmuls, convolutions, linear, attention), operators
// that run in float32 (pointwise transcendental functions, norms, losses,
// softmax and reductions with an output dtype), and operators that promote
// their inputs to the widest dtype. A new PyTorch brings its own lists.
//
// torch.ops.infini's fused kernels follow the same policy where their ATen
// counterpart has one: causal_softmax and topk_softmax (softmax), rms_norm
// and add_rms_norm (rms_norm) run in float32. The in-place ones
// (fused_add_rms_norm, rotary_embedding) are not cast: a cast copy would take
// their writes. The others (silu_and_mul, swiglu, the sampler) are in no
// list and run in their inputs' dtype.
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace torch_infini::ops {
namespace {

// Names ATen's registration macros use unqualified.
using namespace at::autocast;  // NOLINT(google-build-using-namespace)
#if __has_include(<ATen/core/Dimname.h>)
using at::DimnameList;  // a PyTorch with named tensors (2.11): its lists name it unqualified
#endif
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// As on CUDA: binary_cross_entropy is unsafe under autocast (its inputs are
// probabilities, which float16 cannot hold accurately near 0 and 1).
at::Tensor binaryCrossEntropyBanned(const at::Tensor& /*self*/, const at::Tensor& /*target*/,
                                    const std::optional<at::Tensor>& /*weight*/,
                                    int64_t /*reduction*/) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and "
              "BCEWithLogits are\n"
              "safe to autocast.");
}

// CUDA's fp32 policy for a custom operator: its floating infini tensor
// arguments (and those in tensor lists) cast to float32 (cached_cast: a leaf
// that requires grad is cast once per autocast region), then the operator
// runs below autocast.
void fp32Autocast(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
  const size_t num_args = op.schema().arguments().size();
  const size_t begin = stack->size() - num_args;
  for (size_t i = begin; i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      value = cached_cast(at::kFloat, value.toTensor(), c10::DeviceType::PrivateUse1);
    } else if (value.isTensorList()) {
      std::vector<at::Tensor> list = value.toTensorVector();
      value = cached_cast(at::kFloat, list, c10::DeviceType::PrivateUse1);
    }
  }
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER,
                                                c10::DispatchKey::AutocastPrivateUse1),
                     stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(infini, AutocastPrivateUse1, m) {
  for (const char* name : {"causal_softmax", "topk_softmax", "rms_norm", "add_rms_norm"})
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&fp32Autocast>());
}

// Operators outside the lists run as they are.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TORCH_INFINI_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TORCH_INFINI_LOWER_PRECISION_FP)
#undef TORCH_INFINI_LOWER_PRECISION_FP

#define TORCH_INFINI_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TORCH_INFINI_FP32)
#undef TORCH_INFINI_FP32

#define TORCH_INFINI_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TORCH_INFINI_FP32_SET_OPT_DTYPE)
#undef TORCH_INFINI_FP32_SET_OPT_DTYPE

  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

#define TORCH_INFINI_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TORCH_INFINI_PROMOTE)
#undef TORCH_INFINI_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binaryCrossEntropyBanned));
}

}  // namespace torch_infini::ops
