// InfiniOps' fused LLM kernels as PyTorch operators in the `infini`
// namespace (torch.ops.infini.*). Each has a schema, a CPU reference (the
// oracle; it also serves CPU tensors), a Meta kernel (shapes only, so
// torch.compile can trace it), an infini kernel through the kernel seam
// (InfiniOps' own kernel, or the reference on `host`), and an autograd
// formula. A dtype the provider does not declare runs in the CPU fallback,
// under its policy.
//
// Semantics (docs/fused_operators.md; schemas: library.cpp): computed in
// float (double for float64 inputs), rounded once to the input's dtype.
//   silu_and_mul: input [..., 2h] -> silu(input[..., :h]) * input[..., h:], [..., h]
//   swiglu: input * silu(gate), one shape
//   causal_softmax: input [..., s, t], s <= t: softmax of row i over columns
//       j <= t - s + i, 0 elsewhere
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "common/bridge.h"
#include "common/fused_helpers.h"
#include "fused/registration.h"
#include "providers/host/fused_references.h"

namespace torch_infini::ops {
namespace {

void checkSiluAndMul(const at::Tensor& x) {
  TORCH_CHECK(at::isFloatingType(x.scalar_type()),
              "infini::silu_and_mul: expected a floating-point input, got ", x.scalar_type());
  // Sizes as SymInts: a Meta call under torch.compile(dynamic=True) then
  // guards on a relation instead of specializing the shape.
  TORCH_CHECK(x.dim() >= 1,
              "infini::silu_and_mul: the last dimension holds the gate and the up halves and "
              "must be even, got input of shape ",
              x.sym_sizes());
  TORCH_SYM_CHECK((x.sym_size(-1) % 2).sym_eq(0),
                  "infini::silu_and_mul: the last dimension holds the gate and the up halves and "
                  "must be even, got input of shape ",
                  x.sym_sizes());
}

void checkSwiglu(const at::Tensor& input, const at::Tensor& gate) {
  TORCH_CHECK(at::isFloatingType(input.scalar_type()),
              "infini::swiglu: expected floating-point tensors, got ", input.scalar_type());
  TORCH_CHECK(input.scalar_type() == gate.scalar_type(),
              "infini::swiglu: input and gate must have one dtype, got ", input.scalar_type(),
              " and ", gate.scalar_type());
  TORCH_CHECK(input.dim() == gate.dim(), "infini::swiglu: input and gate must have one shape, got ",
              input.sym_sizes(), " and ", gate.sym_sizes());
  for (int64_t d = 0; d < input.dim(); ++d)
    TORCH_SYM_CHECK(input.sym_size(d).sym_eq(gate.sym_size(d)),
                    "infini::swiglu: input and gate must have one shape, got ", input.sym_sizes(),
                    " and ", gate.sym_sizes());
  checkSameDevice(input, gate);
}

void checkCausalSoftmax(const at::Tensor& x) {
  TORCH_CHECK(at::isFloatingType(x.scalar_type()),
              "infini::causal_softmax: expected a floating-point input, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 2,
              "infini::causal_softmax: expected input [..., s, t] with s <= t (queries after "
              "t - s cached keys), got shape ",
              x.sym_sizes());
  TORCH_SYM_CHECK(x.sym_size(-2).sym_le(x.sym_size(-1)),
                  "infini::causal_softmax: expected input [..., s, t] with s <= t (queries after "
                  "t - s cached keys), got shape ",
                  x.sym_sizes());
}

std::vector<int64_t> halvedLast(const at::Tensor& x) {
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() /= 2;
  return sizes;
}

// ---- CPU and Meta ------------------------------------------------------------

at::Tensor silu_and_mul_cpu(const at::Tensor& x) {
  checkSiluAndMul(x);
  at::Tensor out = at::empty(halvedLast(x), x.options());
  siluAndMulInto(out, x);
  return out;
}

at::Tensor causal_softmax_cpu(const at::Tensor& x) {
  checkCausalSoftmax(x);
  at::Tensor out = at::empty(x.sizes(), x.options());
  causalSoftmaxInto(out, x);
  return out;
}

at::Tensor swiglu_cpu(const at::Tensor& input, const at::Tensor& gate) {
  checkSwiglu(input, gate);
  at::Tensor out = at::empty(input.sizes(), input.options());
  swigluInto(out, input, gate);
  return out;
}

// Meta kernels keep sizes symbolic (torch.compile(dynamic=True)).
at::Tensor silu_and_mul_meta(const at::Tensor& x) {
  checkSiluAndMul(x);
  std::vector<c10::SymInt> sizes(x.sym_sizes().begin(), x.sym_sizes().end());
  sizes.back() = sizes.back() / 2;
  return at::empty_symint(sizes, x.options());
}
at::Tensor causal_softmax_meta(const at::Tensor& x) {
  checkCausalSoftmax(x);
  return at::empty_symint(x.sym_sizes(), x.options());
}
at::Tensor swiglu_meta(const at::Tensor& input, const at::Tensor& gate) {
  checkSwiglu(input, gate);
  return at::empty_symint(input.sym_sizes(), input.options());
}

// ---- infini, through the kernel seam ------------------------------------------------

at::Tensor silu_and_mul_infini(const at::Tensor& x) {
  checkSiluAndMul(x);
  requireKernel("infini::silu_and_mul", SeamOp::SiluAndMul, x.scalar_type());
  at::Tensor out = emptyOnDevice(x, halvedLast(x));
  if (out.numel() > 0) selectedKernelProvider().siluAndMul(toRef(out), toRef(x), streamOf(out));
  return out;
}

at::Tensor causal_softmax_infini(const at::Tensor& x) {
  checkCausalSoftmax(x);
  requireKernel("infini::causal_softmax", SeamOp::CausalSoftmax, x.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(x.dim() == 2 || x.dim() == 3,
                              "infini::causal_softmax: the kernel takes 2-D and 3-D inputs, got ",
                              x.dim(), "-D input of shape ", x.sizes());
  at::Tensor out = emptyOnDevice(x, x.sizes());
  if (out.numel() > 0) selectedKernelProvider().causalSoftmax(toRef(out), toRef(x), streamOf(out));
  return out;
}

at::Tensor swiglu_infini(const at::Tensor& input, const at::Tensor& gate) {
  checkSwiglu(input, gate);
  requireKernel("infini::swiglu", SeamOp::Swiglu, input.scalar_type());
  at::Tensor out = emptyOnDevice(input, input.sizes());
  if (out.numel() > 0)
    selectedKernelProvider().swiglu(toRef(out), toRef(input), toRef(gate), streamOf(out));
  return out;
}

// ---- the operators (schemas: library.cpp) ----------------------------------------------

at::Tensor silu_and_mul_autograd(const at::Tensor& x);
at::Tensor causal_softmax_autograd(const at::Tensor& x);
at::Tensor swiglu_autograd(const at::Tensor& input, const at::Tensor& gate);

struct SiluAndMul {
  static constexpr const char* name = "infini::silu_and_mul";
  static constexpr auto cpu = &silu_and_mul_cpu;
  static constexpr auto meta = &silu_and_mul_meta;
  static constexpr auto infini = &silu_and_mul_infini;
  static constexpr SeamOp seam = SeamOp::SiluAndMul;
  static constexpr auto autograd = &silu_and_mul_autograd;
};
struct CausalSoftmax {
  static constexpr const char* name = "infini::causal_softmax";
  static constexpr auto cpu = &causal_softmax_cpu;
  static constexpr auto meta = &causal_softmax_meta;
  static constexpr auto infini = &causal_softmax_infini;
  static constexpr SeamOp seam = SeamOp::CausalSoftmax;
  static constexpr auto autograd = &causal_softmax_autograd;
};
struct Swiglu {
  static constexpr const char* name = "infini::swiglu";
  static constexpr auto cpu = &swiglu_cpu;
  static constexpr auto meta = &swiglu_meta;
  static constexpr auto infini = &swiglu_infini;
  static constexpr SeamOp seam = SeamOp::Swiglu;
  static constexpr auto autograd = &swiglu_autograd;
};

// ---- autograd (every device) ----------------------------------------------------------

// d/dx of silu(g) * u: (grad * u * silu'(g), grad * silu(g)), computed as
// the reference does, in float (double for float64), rounded once.
std::pair<at::Tensor, at::Tensor> siluProductGrads(const at::Tensor& grad, const at::Tensor& g,
                                                   const at::Tensor& u) {
  const c10::ScalarType dtype = g.scalar_type();
  const c10::ScalarType w = wide(dtype);
  const at::Tensor gw = g.to(w);
  const at::Tensor grad_w = grad.to(w);
  const at::Tensor d_gate = at::silu_backward(grad_w * u.to(w), gw).to(dtype);
  const at::Tensor d_up = (grad_w * at::silu(gw)).to(dtype);
  return {d_gate, d_up};
}

class SiluAndMulFunction : public torch::autograd::Function<SiluAndMulFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return callBelowAutograd<SiluAndMul>(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    // Symbolic sizes: under torch.compile(dynamic=True) an int would
    // specialize the traced backward to this call's width.
    const c10::SymInt h = x.sym_size(-1) / 2;
    auto [d_gate, d_up] =
        siluProductGrads(grads[0], x.narrow_symint(-1, 0, h), x.narrow_symint(-1, h, h));
    return {at::cat({d_gate, d_up}, -1)};
  }
};

class CausalSoftmaxFunction : public torch::autograd::Function<CausalSoftmaxFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    at::Tensor y = callBelowAutograd<CausalSoftmax>(x);
    ctx->save_for_backward({y});
    return y;
  }
  // softmax's: y * (grad - sum(grad * y)), in float; masked entries get
  // none (+0).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor y = ctx->get_saved_variables()[0];
    const c10::ScalarType w = wide(y.scalar_type());
    at::Tensor grad = at::_softmax_backward_data(grads[0].to(w), y.to(w), -1, w);
    // A masked entry does not reach the output: its gradient is +0, as
    // through masked_fill (y * (...) would give -0 or NaN there). Entry
    // (i, j) is masked where j > i + t - s; built from symbolic sizes (an
    // int, as triu's diagonal is, would specialize a compiled backward to
    // this call's lengths).
    const c10::SymInt s = y.sym_size(-2), t = y.sym_size(-1);
    const auto positions = at::TensorOptions().dtype(at::kLong).device(y.device());
    const at::Tensor columns = at::arange(c10::Scalar(t), positions);
    const at::Tensor last_visible = at::arange(c10::Scalar(s), positions).add(c10::Scalar(t - s));
    const at::Tensor masked = columns.unsqueeze(0).gt(last_visible.unsqueeze(1));
    return {grad.masked_fill_(masked, 0).to(y.scalar_type())};
  }
};

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& gate) {
    ctx->save_for_backward({input, gate});
    return callBelowAutograd<Swiglu>(input, gate);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [d_gate, d_input] = siluProductGrads(grads[0], saved[1], saved[0]);
    return {d_input, d_gate};
  }
};

at::Tensor silu_and_mul_autograd(const at::Tensor& x) { return SiluAndMulFunction::apply(x); }
at::Tensor causal_softmax_autograd(const at::Tensor& x) { return CausalSoftmaxFunction::apply(x); }
at::Tensor swiglu_autograd(const at::Tensor& input, const at::Tensor& gate) {
  return SwigluFunction::apply(input, gate);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(infini, m) {
  registerFused<SiluAndMul>(m);
  registerFused<Swiglu>(m);
  registerFused<CausalSoftmax>(m);
}

}  // namespace torch_infini::ops
