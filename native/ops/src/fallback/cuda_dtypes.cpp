// Dtypes CUDA's kernels serve and the CPU's refuse, answered in the CPU
// fallback as CUDA answers them (issue 30, item 8).
//
// infini is a device: where the CPU kernel the fallback runs refuses a dtype
// that CUDA serves, the caller is owed CUDA's answer, not the CPU's refusal
// (transformers' Mixtral and Qwen3-MoE experts call torch.histc on int32
// ids on every device but the CPU). The table below is the declaration:
// for each operator, the dtypes, and how CUDA computes them:
//
// * kWiden: CUDA computes a narrow dtype in a wider one (at::opmath_type:
//   float for half and bfloat16, complex<float> for complex32; bool abs is
//   the integer kernel) and rounds once. The call runs again with those
//   arguments widened (through the dispatcher: an infini kernel or the CPU
//   one) and its results are rounded to the dtype CUDA returns (the narrow
//   one, or its real or complex counterpart: angle of complex32 is half, an
//   FFT of half complex32; trace of bool returns int64 on every device, so
//   `narrow_results` is false there).
// * kIntegerHistc: CUDA's integer histogram (SummaryOps.cu): integer bounds,
//   int64 bin arithmetic, counts in the input dtype.
// * kComplexNanSum: CUDA's nansum of complex numbers: an element with a NaN
//   part adds zero (the CPU refuses complex nansum).
//
// Found by tests/python/ops/fallback/test_fallback_cuda_dtypes.py: every (OpInfo, dtype)
// of op_db that CUDA declares and the CPU does not.
#include <ATen/Dispatch.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/div.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <c10/core/ScalarType.h>

#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "fallback/arguments.h"
#include "fallback/refusal.h"

namespace torch_infini::ops {

using c10::ScalarType;

enum class How : uint8_t { kWiden, kIntegerHistc, kComplexNanSum };

struct DtypeRule {
  ScalarType dtype;
  bool narrow_results = true;  // results in the wider dtype are rounded back
};

struct CudaDtypes {
  How how;
  std::vector<DtypeRule> dtypes;
};

namespace {

constexpr ScalarType kComplexHalf = ScalarType::ComplexHalf;

std::vector<DtypeRule> halves() { return {{ScalarType::Half}, {ScalarType::BFloat16}}; }

// By base name (every overload and the in-place variant: functional, out=, `_`).
const std::unordered_map<std::string, CudaDtypes>& table() {
  static const auto* rules = [] {
    auto* t = new std::unordered_map<std::string, CudaDtypes>();
    const CudaDtypes complex_half{How::kWiden, {{kComplexHalf}}};
    for (const char* name : {"acos", "acosh",         "angle",    "asin",      "asinh",
                             "atan", "atanh",         "cos",      "cosh",      "div",
                             "exp",  "lerp",          "log",      "logaddexp", "pow",
                             "prod", "rsqrt",         "sgn",      "sigmoid",   "sigmoid_backward",
                             "sin",  "sinh",          "sqrt",     "sum",       "tan",
                             "tanh", "tanh_backward", "_fft_c2c", "_fft_c2r"}) {
      t->emplace(std::string("aten::") + name, complex_half);
    }
    for (const char* name :
         {"avg_pool3d", "avg_pool3d_backward", "_upsample_bilinear2d_aa",
          "_upsample_bilinear2d_aa_backward", "multi_margin_loss", "multi_margin_loss_backward",
          "multilabel_margin_loss_forward", "multilabel_margin_loss_backward"}) {
      t->emplace(std::string("aten::") + name, CudaDtypes{How::kWiden, halves()});
    }
    // cuFFT's half precision (complex32 above): the real-to-complex half.
    t->emplace("aten::_fft_r2c", CudaDtypes{How::kWiden, {{ScalarType::Half}}});
    t->emplace("aten::abs", CudaDtypes{How::kWiden, {{ScalarType::Bool}}});
    t->emplace(
        "aten::trace",
        CudaDtypes{How::kWiden, {{ScalarType::Bool, /*narrow_results=*/false}, {kComplexHalf}}});
    t->emplace("aten::histc", CudaDtypes{How::kIntegerHistc,
                                         {{ScalarType::Byte},
                                          {ScalarType::Char},
                                          {ScalarType::Short},
                                          {ScalarType::Int},
                                          {ScalarType::Long}}});
    t->emplace(
        "aten::nansum",
        CudaDtypes{How::kComplexNanSum,
                   {{kComplexHalf}, {ScalarType::ComplexFloat}, {ScalarType::ComplexDouble}}});
    return t;
  }();
  return *rules;
}

// The dtype CUDA's kernels compute `dtype` in.
ScalarType wider(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::Half:
    case ScalarType::BFloat16:
      return ScalarType::Float;
    case ScalarType::ComplexHalf:
      return ScalarType::ComplexFloat;
    case ScalarType::Bool:
      return ScalarType::Long;
    default:
      return dtype;
  }
}

// CUDA's torch.histc of integers (SummaryOps.cu, _histc_cuda_template): the
// bounds are integers (Scalar::to<int64_t>, then the input's dtype); equal
// bounds take the data's range and still equal ones widen by one; an
// element v with lo <= v <= hi goes to bin (v - lo) * bins / (hi - lo) in
// int64 (bins - 1 for v == hi); counts are kept in the input's dtype.
at::Tensor integerHistc(const at::Tensor& self, int64_t bins, const c10::Scalar& min,
                        const c10::Scalar& max) {
  TORCH_CHECK(bins > 0, "bins must be > 0");
  const ScalarType dtype = self.scalar_type();
  auto asInput = [&](int64_t v) {
    int64_t narrowed = 0;
    AT_DISPATCH_INTEGRAL_TYPES(dtype, "histc",
                               [&] { narrowed = static_cast<int64_t>(static_cast<scalar_t>(v)); });
    return narrowed;
  };
  const at::Tensor values = self.reshape(-1).to(c10::Device(c10::kCPU), ScalarType::Long);
  int64_t lo = asInput(min.to<int64_t>());
  int64_t hi = asInput(max.to<int64_t>());
  if (min.to<int64_t>() == max.to<int64_t>() && values.numel() > 0) {
    lo = values.min().item<int64_t>();
    hi = values.max().item<int64_t>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(lo < hi, "max must be larger than min");
  const at::Tensor inside = values.masked_select((values >= lo).logical_and(values <= hi));
  at::Tensor which = at::div((inside - lo) * bins, hi - lo, "floor");
  which = at::where(which == bins, bins - 1, which);
  return at::bincount(which, {}, bins).to(self.device(), dtype);
}

// The call's dtype the rule covers: the first tensor argument's of those listed.
const DtypeRule* callDtype(const CudaDtypes& rule, const torch::jit::Stack& stack, size_t begin) {
  const DtypeRule* found = nullptr;
  for (size_t i = begin; i < stack.size() && found == nullptr; ++i) {
    forEachTensor(stack[i], [&](const at::Tensor& t) {
      if (found != nullptr || !t.defined()) return;
      for (const DtypeRule& d : rule.dtypes)
        if (d.dtype == t.scalar_type()) found = &d;
    });
  }
  return found;
}

void callSpecial(How how, const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t begin) {
  const c10::FunctionSchema& schema = op.schema();
  const bool out = schema.overload_name() == "out";
  if (how == How::kIntegerHistc) {
    // histc(self, bins, min, max) and histc.out(..., *, out)
    at::Tensor result =
        integerHistc((*stack)[begin].toTensor(), (*stack)[begin + 1].toInt(),
                     (*stack)[begin + 2].toScalar(), (*stack)[begin + 3].toScalar());
    if (out) {
      at::Tensor target = (*stack)[begin + 4].toTensor();
      target.resize_(result.sizes()).copy_(result);
      result = target;
    }
    stack->resize(begin);
    stack->emplace_back(std::move(result));
    return;
  }
  // nansum(self, dim, keepdim, *, dtype[, out]) is sum.dim_IntList /
  // sum.IntList_out of self with the NaN elements made zero.
  const at::Tensor self = (*stack)[begin].toTensor();
  (*stack)[begin] = at::where(at::isnan(self), at::zeros({}, self.options()), self);
  c10::Dispatcher::singleton()
      .findSchemaOrThrow("aten::sum", out ? "IntList_out" : "dim_IntList")
      .callBoxed(stack);
}

}  // namespace

const CudaDtypes* cudaDtypesOf(const std::string& base_name) {
  const auto& rules = table();
  // An in-place variant ("aten::exp_") follows its operator's rule.
  const bool in_place = base_name.size() > 1 && base_name.back() == '_';
  auto it = rules.find(in_place ? base_name.substr(0, base_name.size() - 1) : base_name);
  return it == rules.end() ? nullptr : &it->second;
}

bool runInCudaDtype(const CudaDtypes& rule, const c10::OperatorHandle& op,
                    torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t begin = stack->size() - schema.arguments().size();
  const DtypeRule* call = callDtype(rule, *stack, begin);
  if (call == nullptr) return false;
  const ScalarType narrow = call->dtype;
  const ScalarType wide = rule.how == How::kIntegerHistc ? narrow : wider(narrow);
  const Arguments original = argumentsOf(*stack, begin);
  if (wide != narrow) {
    for (size_t i = begin; i < stack->size(); ++i)
      (*stack)[i] = mapTensors(std::move((*stack)[i]), [&](const at::Tensor& t) {
        return t.defined() && t.scalar_type() == narrow ? t.to(wide) : t;
      });
  }
  if (rule.how == How::kWiden) {
    op.callBoxed(stack);
  } else {
    callSpecial(rule.how, op, stack, begin);
  }
  // Results: a written argument gets the widened result back in its dtype;
  // any other result in the wider dtype (or its real counterpart) is rounded.
  const c10::SmallVector<int, 2>& mutated = mutatedArguments(schema);
  const size_t ret_begin = stack->size() - schema.returns().size();
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    c10::IValue& value = (*stack)[ret_begin + r];
    if (!value.isTensor()) continue;
    const at::Tensor result = value.toTensor();
    if (mutated[r] >= 0) {
      at::Tensor target = original[mutated[r]].toTensor();
      if (!target.is_same(result)) {
        if (target.sizes() != result.sizes()) target.resize_(result.sizes());
        target.copy_(result);
      }
      value = target;
    } else if (call->narrow_results && wide != narrow && result.scalar_type() == wide) {
      value = result.to(narrow);
    } else if (call->narrow_results && c10::isComplexType(narrow) &&
               result.scalar_type() == c10::toRealValueType(wide)) {
      value = result.to(c10::toRealValueType(narrow));  // angle of complex32: half
    } else if (call->narrow_results && c10::isFloatingType(narrow) &&
               result.scalar_type() == c10::toComplexType(wide)) {
      value = result.to(c10::toComplexType(narrow));  // r2c of half: complex32
    }
  }
  return true;
}

}  // namespace torch_infini::ops
