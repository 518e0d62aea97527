// InfiniOps' fused LLM kernels as PyTorch operators in the `infini`
// namespace (torch.ops.infini.*). Each has a schema, a CPU reference (the
// oracle; it also serves CPU tensors), a Meta kernel (shapes only, so
// torch.compile can trace it), an infini kernel through the kernel seam
// (InfiniOps' own kernel, or the reference on `host`), and an autograd
// formula. A dtype the provider does not declare runs in the CPU fallback,
// under its policy.
//
// Semantics (docs/fused_operators.md): computed in float (double for
// float64 inputs), rounded once to the input's dtype.
//   silu_and_mul(Tensor input) -> Tensor
//       input [..., 2h] -> silu(input[..., :h]) * input[..., h:], [..., h]
//   swiglu(Tensor input, Tensor gate) -> Tensor
//       input * silu(gate), one shape
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "bridge.h"
#include "fallback.h"
#include "fused_reference.h"

namespace torch_infini::ops {

void checkSiluAndMul(const at::Tensor& x) {
  TORCH_CHECK(at::isFloatingType(x.scalar_type()),
              "infini::silu_and_mul: expected a floating-point input, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0,
              "infini::silu_and_mul: the last dimension holds the gate and the up halves and "
              "must be even, got input of shape ",
              x.sizes());
}

void checkSwiglu(const at::Tensor& input, const at::Tensor& gate) {
  TORCH_CHECK(at::isFloatingType(input.scalar_type()),
              "infini::swiglu: expected floating-point tensors, got ", input.scalar_type());
  TORCH_CHECK(input.scalar_type() == gate.scalar_type(),
              "infini::swiglu: input and gate must have one dtype, got ", input.scalar_type(),
              " and ", gate.scalar_type());
  TORCH_CHECK(input.sizes() == gate.sizes(),
              "infini::swiglu: input and gate must have one shape, got ", input.sizes(), " and ",
              gate.sizes());
  TORCH_CHECK(input.device() == gate.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              input.device(), " and ", gate.device(), "!");
}

namespace {

c10::ScalarType wide(c10::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

}  // namespace

at::Tensor siluAndMulReference(const at::Tensor& x) {
  checkSiluAndMul(x);
  const int64_t h = x.size(-1) / 2;
  const at::Tensor gate = x.narrow(-1, 0, h).to(wide(x.scalar_type()));
  const at::Tensor up = x.narrow(-1, h, h).to(wide(x.scalar_type()));
  return (at::silu(gate) * up).to(x.scalar_type());
}

at::Tensor swigluReference(const at::Tensor& input, const at::Tensor& gate) {
  checkSwiglu(input, gate);
  const c10::ScalarType w = wide(input.scalar_type());
  return (input.to(w) * at::silu(gate.to(w))).to(input.scalar_type());
}

namespace {

// ---- CPU and Meta ------------------------------------------------------------

at::Tensor silu_and_mul_cpu(const at::Tensor& x) { return siluAndMulReference(x); }
at::Tensor swiglu_cpu(const at::Tensor& input, const at::Tensor& gate) {
  return swigluReference(input, gate);
}

std::vector<int64_t> halvedLast(const at::Tensor& x) {
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() /= 2;
  return sizes;
}

at::Tensor silu_and_mul_meta(const at::Tensor& x) {
  checkSiluAndMul(x);
  return at::empty(halvedLast(x), x.options());
}
at::Tensor swiglu_meta(const at::Tensor& input, const at::Tensor& gate) {
  checkSwiglu(input, gate);
  return at::empty(input.sizes(), input.options());
}

// ---- infini, through the kernel seam ------------------------------------------------

// Operator descriptors for the CPU-fallback helper (as ATen's at::_ops).
struct silu_and_mul_op {
  using schema = at::Tensor(const at::Tensor&);
  static constexpr const char* name = "infini::silu_and_mul";
  static constexpr const char* overload_name = "";
};
struct swiglu_op {
  using schema = at::Tensor(const at::Tensor&, const at::Tensor&);
  static constexpr const char* name = "infini::swiglu";
  static constexpr const char* overload_name = "";
};

at::Tensor silu_and_mul_infini(const at::Tensor& x) {
  checkSiluAndMul(x);
  requireKernel("infini::silu_and_mul", Op::SiluAndMul, x.scalar_type());
  at::Tensor out = at::empty(halvedLast(x), x.options());
  if (out.numel() > 0) kernels().siluAndMul(toRef(out), toRef(x), streamOf(out));
  return out;
}

at::Tensor swiglu_infini(const at::Tensor& input, const at::Tensor& gate) {
  checkSwiglu(input, gate);
  requireKernel("infini::swiglu", Op::Swiglu, input.scalar_type());
  at::Tensor out = at::empty(input.sizes(), input.options());
  if (out.numel() > 0) kernels().swiglu(toRef(out), toRef(input), toRef(gate), streamOf(out));
  return out;
}

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
    at::AutoDispatchBelowADInplaceOrView guard;
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("infini::silu_and_mul", "")
                               .typed<silu_and_mul_op::schema>();
    return op.call(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const int64_t h = x.size(-1) / 2;
    auto [d_gate, d_up] = siluProductGrads(grads[0], x.narrow(-1, 0, h), x.narrow(-1, h, h));
    return {at::cat({d_gate, d_up}, -1)};
  }
};

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& gate) {
    ctx->save_for_backward({input, gate});
    at::AutoDispatchBelowADInplaceOrView guard;
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("infini::swiglu", "")
                               .typed<swiglu_op::schema>();
    return op.call(input, gate);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [d_gate, d_input] = siluProductGrads(grads[0], saved[1], saved[0]);
    return {d_input, d_gate};
  }
};

at::Tensor silu_and_mul_autograd(const at::Tensor& x) { return SiluAndMulFunction::apply(x); }
at::Tensor swiglu_autograd(const at::Tensor& input, const at::Tensor& gate) {
  return SwigluFunction::apply(input, gate);
}

}  // namespace

TORCH_LIBRARY(infini, m) {
  m.def("silu_and_mul(Tensor input) -> Tensor");
  m.def("swiglu(Tensor input, Tensor gate) -> Tensor");
}

TORCH_LIBRARY_IMPL(infini, CPU, m) {
  m.impl("silu_and_mul", TORCH_FN(silu_and_mul_cpu));
  m.impl("swiglu", TORCH_FN(swiglu_cpu));
}

TORCH_LIBRARY_IMPL(infini, Meta, m) {
  m.impl("silu_and_mul", TORCH_FN(silu_and_mul_meta));
  m.impl("swiglu", TORCH_FN(swiglu_meta));
}

TORCH_LIBRARY_IMPL(infini, PrivateUse1, m) {
  m.impl("silu_and_mul", TORCH_FN((OrCpuFallback<silu_and_mul_op, &silu_and_mul_infini>::call)));
  m.impl("swiglu", TORCH_FN((OrCpuFallback<swiglu_op, &swiglu_infini>::call)));
}

TORCH_LIBRARY_IMPL(infini, Autograd, m) {
  m.impl("silu_and_mul", TORCH_FN(silu_and_mul_autograd));
  m.impl("swiglu", TORCH_FN(swiglu_autograd));
}

}  // namespace torch_infini::ops
