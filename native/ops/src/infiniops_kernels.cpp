// Kernel seam provider over InfiniOps.
//
// Each seam operator calls the matching InfiniOps operator with a handle
// bound to the given stream and implementation index 0. InfiniOps validates
// with asserts only (compiled out in release builds) and aborts on an
// unsupported dtype, so everything is checked here first: supports() is the
// single source of truth, and the bridge consults it before calling.
#include "infiniops_kernels.h"

#include <c10/util/Exception.h>
#include <infini/ops.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "torch_infini/ops/declared_support.h"

namespace torch_infini::ops {
namespace {

using infini::rt::DataType;
using InfiniDevice = infini::rt::Device;
using DeviceType = InfiniDevice::Type;

std::optional<DataType> toInfini(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Char:
      return DataType::kInt8;
    case c10::ScalarType::Short:
      return DataType::kInt16;
    case c10::ScalarType::Int:
      return DataType::kInt32;
    case c10::ScalarType::Long:
      return DataType::kInt64;
    case c10::ScalarType::Byte:
      return DataType::kUInt8;
    case c10::ScalarType::UInt16:
      return DataType::kUInt16;
    case c10::ScalarType::UInt32:
      return DataType::kUInt32;
    case c10::ScalarType::UInt64:
      return DataType::kUInt64;
    case c10::ScalarType::Half:
      return DataType::kFloat16;
    case c10::ScalarType::BFloat16:
      return DataType::kBFloat16;
    case c10::ScalarType::Float:
      return DataType::kFloat32;
    case c10::ScalarType::Double:
      return DataType::kFloat64;
    default:
      return std::nullopt;  // bool, complex, ...: no InfiniOps dtype
  }
}

// Implementation index 0 (what this provider calls) of `Class` is in the
// installed library for device type `type`. An InfiniOps that exports which
// implementations its build selected (its ops.json, at a38977e-era heads)
// is asked; the pinned one selects whole operators only, so an instantiated
// operator has all of its implementations.
template <class Class>
bool slotZeroActive([[maybe_unused]] DeviceType type) {
#if TORCH_INFINI_OPS_HAS_ACTIVE_IMPLEMENTATIONS
  // The library's instantiation, called through a pointer the optimizer
  // cannot see through: the member is defined in InfiniOps' header, and an
  // inlined copy would answer from this translation unit, which includes
  // none of InfiniOps' device or implementation headers (so: nothing).
  static std::vector<std::size_t> (*volatile const query)(DeviceType) =
      &Class::active_implementation_indices;
  const std::vector<std::size_t> active = query(type);
  return std::find(active.begin(), active.end(), std::size_t{0}) != active.end();
#else
  return true;
#endif
}

// Operators the installed libinfiniops instantiates (its allowlist or
// ops.json) with implementation index 0 for `type`.
bool instantiated(Op op, DeviceType type) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // Swiglu
  switch (op) {
#if TORCH_INFINI_OPS_HAS_ADD
    case Op::Add:
      return slotZeroActive<infini::ops::Add>(type);
#endif
#if TORCH_INFINI_OPS_HAS_MUL
    case Op::Mul:
      return slotZeroActive<infini::ops::Mul>(type);
#endif
#if TORCH_INFINI_OPS_HAS_GEMM
    case Op::Gemm:
      return slotZeroActive<infini::ops::Gemm>(type);
#endif
#if TORCH_INFINI_OPS_HAS_RELU
    case Op::Relu:
      return slotZeroActive<infini::ops::Relu>(type);
#endif
#if TORCH_INFINI_OPS_HAS_SILU
    case Op::Silu:
      return slotZeroActive<infini::ops::Silu>(type);
#endif
#if TORCH_INFINI_OPS_HAS_RMS_NORM
    case Op::RmsNorm:
      return slotZeroActive<infini::ops::RmsNorm>(type);
#endif
#if TORCH_INFINI_OPS_HAS_CAST
    case Op::Copy:
    case Op::Cast:
      return slotZeroActive<infini::ops::Cast>(type);
#endif
#if TORCH_INFINI_OPS_HAS_SILU_AND_MUL
    case Op::SiluAndMul:
      return slotZeroActive<infini::ops::SiluAndMul>(type);
#endif
#if TORCH_INFINI_OPS_HAS_SWIGLU
    case Op::Swiglu:
      return slotZeroActive<infini::ops::Swiglu>(type);
#endif
#if TORCH_INFINI_OPS_HAS_CAUSAL_SOFTMAX
    case Op::CausalSoftmax:
      return slotZeroActive<infini::ops::CausalSoftmax>(type);
#endif
#if TORCH_INFINI_OPS_HAS_CAT
    case Op::Cat:
      return slotZeroActive<infini::ops::Cat>(type);
#endif
    default:
      return false;
  }
#pragma GCC diagnostic pop
}

class InfiniOpsKernels final : public KernelProvider {
 public:
  explicit InfiniOpsKernels(runtime::InfiniRtRuntime& runtime)
      : runtime_(runtime), type_(runtime.deviceType()) {
    config_.set_implementation_index(0);
  }

  const std::string& name() const override { return name_; }

  // What InfiniOps declares for this device type (declared_support.h), less
  // what torch-infini refuses of it, for the operators the installed library
  // instantiates and the dtypes InfiniOps has.
  bool supports(Op op, c10::ScalarType dtype) const override {
    return toInfini(dtype).has_value() && inMask(native_[static_cast<size_t>(op)], dtype);
  }

  bool supportsPeer() const override { return false; }

  void copy(const TensorRef& dst, const TensorRef& src, runtime::StreamHandle stream) override {
#if TORCH_INFINI_OPS_HAS_CAST
    infini::ops::Cast::Call(handle(dst, stream), config_, view(src), view(dst));
#else
    unavailable("cast");
#endif
  }

  void fill(const TensorRef&, const c10::Scalar&, runtime::StreamHandle) override {
    unavailable("fill");
  }

  void add(const TensorRef& out, const TensorRef& a, const TensorRef& b, double alpha,
           runtime::StreamHandle stream) override {
    countForeignKernelLaunch();
#if TORCH_INFINI_OPS_HAS_ADD
    infini::ops::Add::Call(handle(out, stream), config_, view(a), view(b), alpha, view(out));
#else
    unavailable("add");
#endif
  }

  void mul(const TensorRef& out, const TensorRef& a, const TensorRef& b,
           runtime::StreamHandle stream) override {
    countForeignKernelLaunch();
#if TORCH_INFINI_OPS_HAS_MUL
    // InfiniOps Mul indexes each input with its own shape: inputs arrive
    // already expanded to the output's shape, which it handles.
    infini::ops::Mul::Call(handle(out, stream), config_, view(a), view(b), view(out));
#else
    unavailable("mul");
#endif
  }

  // x * scalar for float16/bfloat16 only, through Add (below); other scalar
  // operands reach the device as tensors.
  bool scalarOperand(Op op, c10::ScalarType dtype) const override {
    return op == Op::Mul &&
           (dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16) &&
           supports(Op::Add, dtype);
  }

  void binaryScalar(Op op, const TensorRef& out, const TensorRef& x, const c10::Scalar& scalar,
                    double /*alpha*/, runtime::StreamHandle stream) override {
    TORCH_INTERNAL_ASSERT(op == Op::Mul, "infiniops: binaryScalar serves mul only");
    countForeignKernelLaunch();
#if TORCH_INFINI_OPS_HAS_ADD
    // InfiniOps has no scalar multiply; Add computes a + alpha * b in float
    // for float16/bfloat16 with alpha unrounded, so a = -0.0 (the additive
    // identity that keeps the sign of a zero product) gives x * scalar.
    TensorRef zero;
    zero.data = negativeZero(out.device);
    zero.dtype = out.dtype;
    zero.device = out.device;
    zero.sizes = out.sizes;
    zero.strides.assign(out.sizes.size(), 0);
    infini::ops::Add::Call(handle(out, stream), config_, view(zero), view(x), scalar.toDouble(),
                           view(out));
#else
    unavailable("add");
#endif
  }

  void gemm(const TensorRef& out, const TensorRef& a, const TensorRef& b, const TensorRef* c,
            float alpha, float /*beta*/, runtime::StreamHandle stream) override {
    countForeignKernelLaunch();
    TORCH_INTERNAL_ASSERT(c == nullptr, "infiniops gemm: the bridge sent a C operand");
#if TORCH_INFINI_OPS_HAS_GEMM
    const std::optional<infini::ops::Tensor> no_c;
    const std::optional<float> alpha_opt{alpha};
    const std::optional<float> no_beta;
    const std::optional<int> no_trans{0};
    infini::ops::Gemm::Call(handle(out, stream), config_, view(a), view(b), no_c, alpha_opt,
                            no_beta, no_trans, no_trans, view(out));
#else
    unavailable("gemm");
#endif
  }

  // InfiniOps' Gemm asserts that it gets no C input (base/gemm.h,
  // EffectiveBeta): addmm's bias is added by Add after the product.
  bool gemmBias() const override { return false; }
  bool gemmStridedOutput() const override { return false; }

  void relu(const TensorRef& out, const TensorRef& x, runtime::StreamHandle stream) override {
    countForeignKernelLaunch();
#if TORCH_INFINI_OPS_HAS_RELU
    infini::ops::Relu::Call(handle(out, stream), config_, view(x), view(out));
#else
    unavailable("relu");
#endif
  }

  void silu(const TensorRef& out, const TensorRef& x, runtime::StreamHandle stream) override {
    countForeignKernelLaunch();
#if TORCH_INFINI_OPS_HAS_SILU
    infini::ops::Silu::Call(handle(out, stream), config_, view(x), view(out));
#else
    unavailable("silu");
#endif
  }

  void rmsNorm(const TensorRef& out, const TensorRef& x, const TensorRef& weight, float eps,
               runtime::StreamHandle stream) override {
    countForeignKernelLaunch();
#if TORCH_INFINI_OPS_HAS_RMS_NORM
    infini::ops::RmsNorm::Call(handle(out, stream), config_, view(x), view(weight), eps, view(out));
#else
    unavailable("rms_norm");
#endif
  }

  void siluAndMul(const TensorRef& out, const TensorRef& x, runtime::StreamHandle stream) override {
    countForeignKernelLaunch();
#if TORCH_INFINI_OPS_HAS_SILU_AND_MUL
    infini::ops::SiluAndMul::Call(handle(out, stream), config_, view(x), view(out));
#else
    unavailable("silu_and_mul");
#endif
  }

  void swiglu(const TensorRef& out, const TensorRef& input, const TensorRef& gate,
              runtime::StreamHandle stream) override {
    countForeignKernelLaunch();
#if TORCH_INFINI_OPS_HAS_SWIGLU
    // Deprecated upstream in favour of SiluAndMul (one input holding both
    // halves); the two-tensor form is what swiglu(input, gate) means.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    infini::ops::Swiglu::Call(handle(out, stream), config_, view(input), view(gate), view(out));
#pragma GCC diagnostic pop
#else
    unavailable("swiglu");
#endif
  }

  void causalSoftmax(const TensorRef& out, const TensorRef& x,
                     runtime::StreamHandle stream) override {
    countForeignKernelLaunch();
#if TORCH_INFINI_OPS_HAS_CAUSAL_SOFTMAX
    // Deprecated at InfiniOps 1f6f9c23 (no open-source-aligned successor yet).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    infini::ops::CausalSoftmax::Call(handle(out, stream), config_, view(x), view(out));
#pragma GCC diagnostic pop
#else
    unavailable("causal_softmax");
#endif
  }

  void cat(const TensorRef& out, const std::vector<TensorRef>& inputs, int64_t dim,
           runtime::StreamHandle stream) override {
#if TORCH_INFINI_OPS_HAS_CAT
    std::vector<infini::ops::Tensor> views;
    views.reserve(inputs.size());
    for (const TensorRef& in : inputs) views.push_back(view(in));
    infini::ops::Cat::Call(handle(out, stream), config_, views, dim, view(out));
#else
    unavailable("cat");
#endif
  }

  void random(const TensorRef& /*out*/, const RandomDraw& /*draw*/,
              runtime::StreamHandle /*stream*/) override {
    unavailable("random (InfiniOps has no generator)");
  }

  void ampUnscale(const std::vector<TensorRef>& /*grads*/, const TensorRef& /*found_inf*/,
                  const TensorRef& /*inv_scale*/, runtime::StreamHandle /*stream*/) override {
    unavailable("amp_unscale (InfiniOps has no GradScaler kernels)");
  }

  void ampUpdateScale(const TensorRef& /*scale*/, const TensorRef& /*growth_tracker*/,
                      const TensorRef& /*found_inf*/, double /*growth_factor*/,
                      double /*backoff_factor*/, int64_t /*growth_interval*/,
                      runtime::StreamHandle /*stream*/) override {
    unavailable("amp_update_scale (InfiniOps has no GradScaler kernels)");
  }

 private:
  // Binds the runtime to the output's device and wraps the stream.
  infini::ops::Handle handle(const TensorRef& out, runtime::StreamHandle stream) {
    runtime_.bind(out.device);
    infini::ops::Handle h;
    h.set_stream(stream);
    return h;
  }

  infini::ops::Tensor view(const TensorRef& ref) const {
    // The view copies shape and strides into vectors of its own; these
    // per-thread staging vectors keep their capacity, so building them
    // allocates nothing after the first call.
    thread_local std::vector<std::size_t> shape;
    thread_local std::vector<std::ptrdiff_t> strides;
    shape.assign(ref.sizes.begin(), ref.sizes.end());
    strides.assign(ref.strides.begin(), ref.strides.end());
    // A size-1 dimension's stride never matters to PyTorch but InfiniOps'
    // contiguity test reads it: normalize so dense views take the fast path.
    std::ptrdiff_t expected = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      if (shape[d] == 1) strides[d] = expected;
      expected *= static_cast<std::ptrdiff_t>(shape[d] == 0 ? 1 : shape[d]);
    }
    auto dtype = toInfini(ref.dtype);
    TORCH_INTERNAL_ASSERT(dtype.has_value(), "infiniops: unsupported dtype reached a kernel");
    return infini::ops::Tensor(ref.data, shape, *dtype,
                               InfiniDevice(type_, ref.device < 0 ? 0 : ref.device), strides);
  }

  // One element of -0.0 in float16 and bfloat16 alike (bit pattern 0x8000)
  // on `device`, written once and kept for the process's lifetime.
  void* negativeZero(int device) {
    std::lock_guard<std::mutex> lock(zeros_mutex_);
    void*& ptr = negative_zeros_[device];
    if (ptr == nullptr) {
      runtime_.bind(device);
      void* p = runtime_.malloc(device, sizeof(std::uint16_t));
      TORCH_CHECK_WITH(OutOfMemoryError, p != nullptr,
                       "infiniops: out of memory for a 2-byte constant on device ", device);
      const std::uint16_t bits = 0x8000;
      runtime_.memcpy(p, &bits, sizeof(bits), runtime::MemcpyKind::HostToDevice);
      ptr = p;
    }
    return ptr;
  }

  [[noreturn]] void unavailable(const char* op) const {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "infiniops: operator ", op,
                                " is not available for InfiniRT device type '", runtime_.name(),
                                "'");
  }

  const std::string name_ = "infiniops";
  runtime::InfiniRtRuntime& runtime_;
  const DeviceType type_;
  const NativeMasks native_ = instantiatedMasks();

  // What declared_support.h says is native here, for the operators the
  // installed library instantiates with implementation index 0.
  NativeMasks instantiatedMasks() const {
    NativeMasks masks = nativeMasks(runtime_.name(), /*infinirt_conversions=*/true);
    for (size_t op = 0; op < masks.size(); ++op)
      if (!instantiated(static_cast<Op>(op), type_)) masks[op] = 0;
    return masks;
  }
  infini::ops::Config config_;
  std::mutex zeros_mutex_;
  std::unordered_map<int, void*> negative_zeros_;
};

}  // namespace

std::unique_ptr<KernelProvider> makeInfiniOpsKernels(runtime::InfiniRtRuntime& runtime) {
  return std::make_unique<InfiniOpsKernels>(runtime);
}

}  // namespace torch_infini::ops
