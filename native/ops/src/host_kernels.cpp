#include "host_kernels.h"

#include <ATen/ATen.h>

#include <utility>

namespace torch_infini::ops {
namespace {

// A CPU tensor aliasing the view's memory; it neither owns nor frees it.
at::Tensor alias(const TensorRef& ref) {
  return at::from_blob(ref.data, ref.sizes, ref.strides,
                       at::TensorOptions().dtype(ref.dtype).device(at::kCPU));
}

class HostKernels final : public KernelProvider {
 public:
  const std::string& name() const override { return name_; }

  // The (operator, dtype) pairs mirror what InfiniOps offers for the same
  // operator (README, "Operators"), so passing on host means passing on the
  // Infini stack. Copies and fills work for every dtype on both.
  bool supports(Op op, c10::ScalarType dtype) const override {
    using c10::ScalarType;
    const bool floating = dtype == ScalarType::Float || dtype == ScalarType::Half ||
                          dtype == ScalarType::BFloat16 || dtype == ScalarType::Double;
    const bool signed_or_byte = dtype == ScalarType::Char || dtype == ScalarType::Short ||
                                dtype == ScalarType::Int || dtype == ScalarType::Long ||
                                dtype == ScalarType::Byte;
    const bool wide_unsigned =
        dtype == ScalarType::UInt16 || dtype == ScalarType::UInt32 || dtype == ScalarType::UInt64;
    switch (op) {
      case Op::Copy:
      case Op::Cast:
      case Op::Fill:
        return c10::isIntegralType(dtype, /*includeBool=*/true) || c10::isFloatingType(dtype) ||
               c10::isComplexType(dtype);
      case Op::Add:
      case Op::Mul:
        return floating || signed_or_byte || wide_unsigned;
      case Op::Relu:
        return floating || signed_or_byte;
      case Op::Silu:
        return floating;
      case Op::Gemm:
      case Op::RmsNorm:
        return dtype == ScalarType::Float;
      case Op::kCount:
        break;
    }
    return false;
  }

  bool supportsPeer() const override { return true; }

  void copy(const TensorRef& dst, const TensorRef& src, runtime::StreamHandle stream) override {
    submit(stream, [dst, src] { alias(dst).copy_(alias(src)); });
  }

  void fill(const TensorRef& dst, const c10::Scalar& value, runtime::StreamHandle stream) override {
    submit(stream, [dst, value] { alias(dst).fill_(value); });
  }

  void add(const TensorRef& out, const TensorRef& a, const TensorRef& b, double alpha,
           runtime::StreamHandle stream) override {
    submit(stream, [out, a, b, alpha] {
      at::Tensor o = alias(out);
      if (out.dtype == c10::ScalarType::Half || out.dtype == c10::ScalarType::BFloat16) {
        // Like InfiniOps: reduced precision computes in float with alpha
        // unrounded (alpha may exceed the dtype's range, e.g. x * 1e5).
        o.copy_(alias(a).to(at::kFloat).add(alias(b).to(at::kFloat), alpha));
        return;
      }
      at::add_out(o, alias(a), alias(b), scalarFor(out.dtype, alpha));
    });
  }

  void mul(const TensorRef& out, const TensorRef& a, const TensorRef& b,
           runtime::StreamHandle stream) override {
    submit(stream, [out, a, b] {
      at::Tensor o = alias(out);
      at::mul_out(o, alias(a), alias(b));
    });
  }

  void gemm(const TensorRef& out, const TensorRef& a, const TensorRef& b, float alpha,
            runtime::StreamHandle stream) override {
    submit(stream, [out, a, b, alpha] {
      at::Tensor o = alias(out);
      // beta = 0: the output's previous contents are ignored, as in Gemm.
      if (out.dim() == 3) {
        at::baddbmm_out(o, o, alias(a), alias(b), /*beta=*/0, alpha);
      } else {
        at::addmm_out(o, o, alias(a), alias(b), /*beta=*/0, alpha);
      }
    });
  }

  void relu(const TensorRef& out, const TensorRef& x, runtime::StreamHandle stream) override {
    submit(stream, [out, x] {
      at::Tensor o = alias(out);
      at::clamp_min_out(o, alias(x), 0);
    });
  }

  void silu(const TensorRef& out, const TensorRef& x, runtime::StreamHandle stream) override {
    submit(stream, [out, x] {
      at::Tensor o = alias(out);
      at::silu_out(o, alias(x));
    });
  }

  void rmsNorm(const TensorRef& out, const TensorRef& x, const TensorRef& weight, float eps,
               runtime::StreamHandle stream) override {
    submit(stream, [out, x, weight, eps] {
      const int64_t n = x.sizes.back();
      alias(out).copy_(at::rms_norm(alias(x), {n}, alias(weight), eps));
    });
  }

 private:
  template <typename F>
  static void submit(runtime::StreamHandle stream, F&& work) {
    runtime::HostRuntime::stream(stream).submit(std::forward<F>(work));
  }

  // alpha as the output dtype's kind of scalar (integral outputs need one).
  static c10::Scalar scalarFor(c10::ScalarType dtype, double alpha) {
    if (c10::isIntegralType(dtype, /*includeBool=*/true)) return static_cast<int64_t>(alpha);
    return alpha;
  }

  const std::string name_ = "host";
};

}  // namespace

std::unique_ptr<KernelProvider> makeHostKernels() { return std::make_unique<HostKernels>(); }

}  // namespace torch_infini::ops
