// Operators run in the CPU fallback whose results PyTorch predicts for
// infini in another layout (or shape) than the CPU kernel gives; what
// torch.compile plans with is the prediction (issue 30, items 5 and 9), so
// the result is made to match it after the CPU kernel ran. Convolutions
// have their own file (fallback/convolution.cpp).
//
// * pixel_shuffle, channel_shuffle, native_channel_shuffle, max_unpool2d:
//   the CPU kernel keeps a channels-last input's layout, the prediction
//   (their decomposition off the CPU) is contiguous.
// * the batch_norm family: the prediction's output is elementwise over the
//   input (its layout; the CPU kernel's is contiguous), and in evaluation
//   the saved mean and inverse deviation are the running statistics (the
//   CPU returns empty tensors there: "Very annoying inconsistency where CPU
//   and CUDA give different shapes", torch/_decomp); their backward gets
//   them back in the CPU's form.
#include <ATen/ExpandUtils.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorOperators.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/reciprocal.h>
#include <ATen/ops/sqrt.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fallback/refusal.h"

namespace torch_infini::ops {
namespace {

void contiguousResults(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  runInCpuFallback(op, stack);
  const size_t returns = op.schema().returns().size();
  for (size_t r = stack->size() - returns; r < stack->size(); ++r) {
    c10::IValue& value = (*stack)[r];
    if (value.isTensor() && value.toTensor().defined()) value = value.toTensor().contiguous();
  }
}

// The input's layout (its strides' order, made dense), as an elementwise
// TensorIterator over it lays out its result.
at::Tensor inInputLayout(const at::Tensor& result, const at::Tensor& input) {
  if (result.sizes() != input.sizes() || result.strides() == input.strides()) return result;
  const std::vector<int64_t> strides = at::infer_dense_strides(input.sizes(), input.strides());
  if (result.strides() == c10::IntArrayRef(strides)) return result;
  at::Tensor laid_out = at::empty_strided(input.sizes(), strides, result.options());
  laid_out.copy_(result);
  return laid_out;
}

// Batch norm forms: kRunning is the argument index of running_mean (-1:
// the form has none), kTraining that of the training flag (-1: the form's
// mode is fixed, kAlwaysTraining), kEps that of eps.
template <int kRunning, int kTraining, bool kAlwaysTraining, int kEps>
void batchNorm(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t begin = stack->size() - op.schema().arguments().size();
  const at::Tensor input = (*stack)[begin].toTensor();
  at::Tensor running_mean, running_var;
  if (kRunning >= 0) {
    if (!(*stack)[begin + kRunning].isNone()) running_mean = (*stack)[begin + kRunning].toTensor();
    if (!(*stack)[begin + kRunning + 1].isNone())
      running_var = (*stack)[begin + kRunning + 1].toTensor();
  }
  const bool training = kTraining >= 0 ? (*stack)[begin + kTraining].toBool() : kAlwaysTraining;
  const double eps = (*stack)[begin + kEps].toDouble();
  runInCpuFallback(op, stack);
  const size_t ret = stack->size() - op.schema().returns().size();
  (*stack)[ret] = inInputLayout((*stack)[ret].toTensor(), input);
  if (!training && running_mean.defined() && running_var.defined()) {
    // What the prediction returns off the CPU: the statistics used, in the
    // computation's dtype (float for half-precision inputs).
    const c10::ScalarType compute = at::toOpMathType(input.scalar_type());
    (*stack)[ret + 1] = running_mean.to(compute, /*non_blocking=*/false, /*copy=*/true);
    (*stack)[ret + 2] = at::reciprocal(at::sqrt(running_var.to(compute).add(eps)));
  }
}

// native_batch_norm_backward(grad_out, input, weight, running_mean,
// running_var, save_mean, save_invstd, train, eps, output_mask): in
// evaluation the CPU kernel reads the running statistics only, and takes
// the saved ones in the form its forward gave them (empty, the input's
// dtype): the statistics infini's forward returned (batchNorm) are given
// to it that way.
void batchNormBackward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t begin = stack->size() - op.schema().arguments().size();
  if (!(*stack)[begin + 7].toBool()) {
    const at::Tensor& input = (*stack)[begin + 1].toTensor();
    for (size_t saved : {begin + 5, begin + 6}) {
      if (!(*stack)[saved].isNone()) (*stack)[saved] = at::empty({0}, input.options());
    }
  }
  runInCpuFallback(op, stack);
}

using Wrapper = void (*)(const c10::OperatorHandle&, torch::jit::Stack*);

struct Wrapped {
  const char* name;  // without "aten::"
  Wrapper wrapper;
};

constexpr Wrapped kWrapped[] = {
    {"pixel_shuffle", &contiguousResults},
    {"channel_shuffle", &contiguousResults},
    {"native_channel_shuffle", &contiguousResults},
    {"max_unpool2d", &contiguousResults},
    // (input, weight, bias, running_mean, running_var, training, momentum, eps)
    {"native_batch_norm", &batchNorm<3, 5, true, 7>},
    {"_native_batch_norm_legit", &batchNorm<3, 5, true, 7>},
    // (input, weight, bias, training, momentum, eps)
    {"_native_batch_norm_legit.no_stats", &batchNorm<-1, 3, true, 5>},
    // (input, weight, bias, running_mean, running_var, momentum, eps)
    {"_native_batch_norm_legit_no_training", &batchNorm<3, -1, false, 6>},
    {"_batch_norm_with_update", &batchNorm<3, -1, true, 6>},
    {"native_batch_norm_backward", &batchNormBackward},
};

// A wrapper as a boxed kernel (makeFromBoxedFunction takes compile-time functions only).
struct Boxed final : c10::OperatorKernel {
  explicit Boxed(Wrapper w) : wrapper(w) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    wrapper(op, stack);
  }
  Wrapper wrapper;
};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const Wrapped& w : kWrapped)
    m.impl(w.name, torch::CppFunction::makeFromBoxedKernel(
                       c10::BoxedKernel::makeFromFunctor(std::make_unique<Boxed>(w.wrapper))));
}

}  // namespace

const std::vector<std::string>& layoutWrappedOperators() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> found;
    for (const Wrapped& w : kWrapped) found.push_back(std::string("aten::") + w.name);
    std::sort(found.begin(), found.end());
    return found;
  }();
  return names;
}

bool isLayoutWrapped(const std::string& qualified_name) {
  const std::vector<std::string>& names = layoutWrappedOperators();
  return std::binary_search(names.begin(), names.end(), qualified_name);
}

}  // namespace torch_infini::ops
