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
  explicit HostKernels(runtime::HostRuntime& runtime) : runtime_(runtime) {}

  const std::string& name() const override { return name_; }

  bool supports(Op op, c10::ScalarType dtype) const override {
    switch (op) {
      case Op::Copy:
      case Op::Cast:
        return c10::isIntegralType(dtype, /*includeBool=*/true) || c10::isFloatingType(dtype) ||
               c10::isComplexType(dtype);
      case Op::kCount:
        break;
    }
    return false;
  }

  bool supportsPeer() const override { return true; }

  void copy(const TensorRef& dst, const TensorRef& src, runtime::StreamHandle stream) override {
    runtime::HostRuntime::stream(stream).submit([dst, src] { alias(dst).copy_(alias(src)); });
  }

 private:
  const std::string name_ = "host";
  runtime::HostRuntime& runtime_;
};

}  // namespace

std::unique_ptr<KernelProvider> makeHostKernels(runtime::HostRuntime& runtime) {
  return std::make_unique<HostKernels>(runtime);
}

}  // namespace torch_infini::ops
