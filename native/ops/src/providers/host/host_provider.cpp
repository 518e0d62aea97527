// The host kernel provider: each seam operator as ATen's CPU kernel over the
// device memory's kernel view, inside the stream's work. It registers itself
// for the host runtime (seam/provider_registry.h); nothing names it.
#include <ATen/ATen.h>
#include <ATen/CPUFunctions.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/baddbmm_cpu_dispatch.h>
#include <ATen/ops/cat_cpu_dispatch.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/fill_cpu_dispatch.h>
#include <ATen/ops/mul_native.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

#include "common/random_dtypes.h"
#include "philox/fill.h"
#include "providers/host/fused_loops.h"
#include "providers/host/fused_references.h"
#include "seam/provider_registry.h"
#include "torch_infini/ops/declared_support.h"
#include "torch_infini/ops/unary_operators.h"
#include "torch_infini/runtime/host_runtime.h"

namespace torch_infini::ops {
namespace {

// torch.ops.infini.<name> ("infini::<name>"), to call its CPU kernel
// (redispatch(kCpuKernel, ...)).
template <class Signature>
c10::TypedOperatorHandle<Signature> fusedOperator(const char* qualified_name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(qualified_name, "").typed<Signature>();
}
constexpr c10::DispatchKeySet kCpuKernel{c10::DispatchKey::CPU};

// CPU tensors aliasing device views (host device memory is host memory, or
// in discrete mode its kernel view: runtime::hostKernelView);
// they neither own nor free it. Every kernel needs a few, so each thread
// that runs kernels (the caller inline, a stream worker in async mode) keeps
// its own and repoints them per call instead of allocating new tensors.
// Each slot keeps one per geometry, in a small table indexed by a hash of
// the geometry: a model's loop runs its kernels over a few dozen
// geometries, and repointing a tensor of the right geometry is a store,
// while a new geometry recomputes the tensor's contiguity and storage size.
constexpr size_t kAliasSlots = 8;
class Aliases {
 public:
  // The tensor in `slot` (0..7), now viewing `ref`. Valid until the next
  // call for the same slot on this thread.
  const at::Tensor& operator()(const TensorRef& ref, size_t slot) {
    Entry& e = slots_[slot][hashOf(ref) % kEntries];
    if (e.holds(ref)) {
      e.storage.unsafeGetStorageImpl()->set_data_ptr_noswap(
          c10::DataPtr(runtime::hostKernelView(ref.data), c10::Device(c10::DeviceType::CPU)));
    } else {
      e.view(ref);  // a new geometry, or another one with the same index
    }
    return e.tensor;
  }

 private:
  static constexpr size_t kEntries = 32;
  static constexpr size_t kMaxKeyDims = 6;  // more dimensions are not remembered
  static constexpr size_t kNoGeometry = SIZE_MAX;

  struct Entry {
    c10::Storage storage;
    at::Tensor tensor;
    // The geometry `tensor` has, kept here so that a search reads no tensor.
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    size_t dim = kNoGeometry;
    std::array<int64_t, 2 * kMaxKeyDims> dims{};  // sizes, then strides

    bool holds(const TensorRef& ref) const {
      const size_t n = ref.sizes.size();
      if (n != dim || ref.dtype != dtype) return false;
      for (size_t i = 0; i < n; ++i)
        if (dims[i] != ref.sizes[i] || dims[kMaxKeyDims + i] != ref.strides[i]) return false;
      return true;
    }

    void view(const TensorRef& ref) {
      const auto meta = caffe2::TypeMeta::fromScalarType(ref.dtype);
      const size_t nbytes =
          at::detail::computeStorageNbytes(ref.sizes, ref.strides, meta.itemsize());
      if (!tensor.defined()) {
        storage = c10::Storage(c10::Storage::use_byte_size_t(), 0,
                               c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)),
                               /*allocator=*/nullptr, /*resizable=*/false);
        tensor = at::detail::make_tensor<c10::TensorImpl>(
            c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), meta);
      }
      storage.unsafeGetStorageImpl()->set_data_ptr_noswap(
          c10::DataPtr(runtime::hostKernelView(ref.data), c10::Device(c10::DeviceType::CPU)));
      storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
      c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
      if (tensor.dtype() != meta) impl->set_storage_and_dtype(storage, meta);
      impl->set_sizes_and_strides(ref.sizes, ref.strides, /*storage_offset=*/0);
      dtype = ref.dtype;
      dim = ref.sizes.size() <= kMaxKeyDims ? ref.sizes.size() : kNoGeometry;
      if (dim == kNoGeometry) return;  // held, not remembered
      std::copy(ref.sizes.begin(), ref.sizes.end(), dims.begin());
      std::copy(ref.strides.begin(), ref.strides.end(), dims.begin() + kMaxKeyDims);
    }
  };

  static size_t hashOf(const TensorRef& ref) {
    uint64_t h = static_cast<uint64_t>(ref.dtype) * 0x9E3779B97F4A7C15ull + ref.sizes.size();
    for (size_t i = 0; i < ref.sizes.size(); ++i) {
      h = (h ^ static_cast<uint64_t>(ref.sizes[i])) * 0x100000001B3ull;
      h = (h ^ static_cast<uint64_t>(ref.strides[i])) * 0x100000001B3ull;
    }
    return static_cast<size_t>(h ^ (h >> 29));
  }

  using Slot = std::array<Entry, kEntries>;
  std::array<Slot, kAliasSlots> slots_;
};

// This thread's aliases, looked up once per kernel: each access to a
// thread_local of a shared library is a call (__tls_get_addr), two for one
// with a destructor.
[[gnu::noinline]] Aliases& threadAliases() {
  thread_local Aliases aliases;
  return aliases;
}

// A(ref): this thread's alias of `ref` in the next free slot (a generated
// host kernel's operands, seam_operators.h), mutable as an out= operand.
class AliasSlots {
 public:
  at::Tensor& operator()(const TensorRef& ref) {
    TORCH_INTERNAL_ASSERT(next_ < kAliasSlots, "host provider: a kernel with more than ",
                          kAliasSlots, " tensor operands");
    return const_cast<at::Tensor&>(aliases_(ref, next_++));
  }

 private:
  Aliases& aliases_ = threadAliases();
  size_t next_ = 0;
};

// An optional operand's view, kept by value for a queued task.
std::optional<TensorRef> optionalRef(const TensorRef* ref) {
  return ref == nullptr ? std::nullopt : std::optional<TensorRef>(*ref);
}

// `value` as the 0-dim wrapped-number CPU tensor PyTorch makes of a Python
// number operand (double, int64, bool or complex double), one kept per type
// and thread and refilled per call.
const at::Tensor& wrappedNumber(const c10::Scalar& value) {
  thread_local std::array<at::Tensor, 4> kept;
  const size_t slot = value.isFloatingPoint()   ? 0
                      : value.isIntegral(false) ? 1
                      : value.isBoolean()       ? 2
                                                : 3;
  at::Tensor& t = kept[slot];
  if (!t.defined()) {
    t = at::native::wrapped_scalar_tensor(value);
    return t;
  }
  switch (slot) {
    case 0:
      *t.mutable_data_ptr<double>() = value.toDouble();
      break;
    case 1:
      *t.mutable_data_ptr<int64_t>() = value.toLong();
      break;
    case 2:
      *t.mutable_data_ptr<bool>() = value.toBool();
      break;
    default:
      *t.mutable_data_ptr<c10::complex<double>>() = value.toComplexDouble();
  }
  return t;
}

// The kernels with a CPU kernel of their own call it directly
// (at::cpu::*_out, at::native::copy_, structured impls), not through the
// dispatcher: the aliases are internal, so autograd, ADInplaceOrView, CPU
// autocast, Python modes and the profiler have nothing to do with them; the
// infini operator around the kernel is what they see. rms_norm and rotary
// are loops of their own (fused_loops.h); the other composites (the fused
// operators' references, the GradScaler kernels) still dispatch their parts.

// A CPU tensor over `ref`'s memory that neither owns nor frees it (for
// kernels with more tensors than the per-thread aliases hold).
at::Tensor unownedCpu(const TensorRef& ref) {
  return at::from_blob(runtime::hostKernelView(ref.data), ref.sizes, ref.strides,
                       at::TensorOptions().dtype(ref.dtype).device(at::kCPU));
}

// A binary CPU structured kernel run over same-dtype views of the output's
// shape. Its impl() is what at::cpu::*_out runs after the structured meta
// step; the meta step's checks (overlap, resizing, type promotion) are the
// bridge's and ran before the call, so only the iteration is built here.
template <typename Structured>
class OnViews final : public Structured {
 public:
  // Same-dtype operands of the output's shape.
  OnViews(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) : out_(out) {
    at::TensorIteratorConfig config;
    config.set_check_mem_overlap(false)
        .resize_outputs(false)
        .add_output(out)
        .add_const_input(a)
        .add_const_input(b);
    this->build(config);
  }
  // `a` and a wrapped number `scalar`, typed as ATen's binary operators type
  // them (the scalar converted as the CPU converts it).
  struct WithScalar {};
  OnViews(WithScalar, const at::Tensor& out, const at::Tensor& a, const at::Tensor& scalar)
      : out_(out) {
    at::TensorIteratorConfig config;
    config.set_check_mem_overlap(false)
        .resize_outputs(false)
        .allow_cpu_scalars(true)
        .promote_inputs_to_common_dtype(true)
        .cast_common_dtype_to_outputs(true)
        .enforce_safe_casting_to_output(true)
        .add_output(out)
        .add_const_input(a)
        .add_const_input(scalar);
    this->build(config);
  }
  const at::Tensor& maybe_get_output(int64_t /*output_idx*/) override { return out_; }

 private:
  const at::Tensor& out_;
};

// Output, first and second operand, weight.

class HostKernels final : public KernelProvider {
 public:
  const std::string& name() const override { return name_; }

  // InfiniOps' CPU build declares the (operator, dtype) pairs
  // (declared_support.h): host runs exactly those, less what torch-infini
  // refuses of them, so passing on host means passing on InfiniRT `cpu`.
  // Copies, fills and draws are the runtime's, not InfiniOps operators: every
  // dtype (a draw's dtypes are narrowed per operator by the bridge).
  bool supports(SeamOp op, c10::ScalarType dtype) const override {
    switch (op) {
      case SeamOp::Copy:
      case SeamOp::Cast:
      case SeamOp::Fill:
        return c10::isIntegralType(dtype, /*includeBool=*/true) || c10::isFloatingType(dtype) ||
               c10::isComplexType(dtype);
      case SeamOp::Random:
        return realBoolOrUnsignedDtype(dtype);
      case SeamOp::AmpUnscale:  // the CPU's kernels (not InfiniOps operators)
        return c10::isFloatingType(dtype);
      case SeamOp::AmpUpdateScale:
        return dtype == c10::ScalarType::Float;
      case SeamOp::Foreach:  // the CPU's loops (InfiniOps has no foreach operators)
        return c10::isFloatingType(dtype);
      default:
        return inMask(native_[static_cast<size_t>(op)], dtype);
    }
  }

  bool supportsPeer() const override { return true; }

  void copy(const TensorRef& dst, const TensorRef& src, runtime::StreamHandle stream) override {
    submit(
        stream,
        [](const TensorRef& d, const TensorRef& s) {
          Aliases& al = threadAliases();
          at::Tensor o = al(d, 0);
          at::native::copy_(o, al(s, 1));
        },
        dst, src);
  }

  void fill(const TensorRef& dst, const c10::Scalar& value, runtime::StreamHandle stream) override {
    submit(
        stream,
        [value](const TensorRef& d) {
          Aliases& al = threadAliases();
          at::Tensor o = al(d, 0);
          at::cpu::fill_(o, value);
        },
        dst);
  }

  void add(const TensorRef& out, const TensorRef& a, const TensorRef& b, double alpha,
           runtime::StreamHandle stream) override {
    submit(
        stream,
        [alpha](const TensorRef& o_ref, const TensorRef& a_ref, const TensorRef& b_ref) {
          Aliases& al = threadAliases();
          const at::Tensor& o = al(o_ref, 0);
          const at::Tensor& a = al(a_ref, 1);
          const at::Tensor& b = al(b_ref, 2);
          OnViews<at::native::structured_ufunc_add_CPU> kernel(o, a, b);
          kernel.impl(a, b, scalarFor(o_ref.dtype, alpha), o);
        },
        out, a, b);
  }

  void mul(const TensorRef& out, const TensorRef& a, const TensorRef& b,
           runtime::StreamHandle stream) override {
    submit(
        stream,
        [](const TensorRef& o_ref, const TensorRef& a_ref, const TensorRef& b_ref) {
          Aliases& al = threadAliases();
          const at::Tensor& o = al(o_ref, 0);
          const at::Tensor& a = al(a_ref, 1);
          const at::Tensor& b = al(b_ref, 2);
          OnViews<at::native::structured_mul_out> kernel(o, a, b);
          kernel.impl(a, b, o);
        },
        out, a, b);
  }

  // Every dtype the operator takes: the CPU's own kernel with a wrapped
  // number, which is what `x * 0.5` and `x + 1` hand the CPU.
  bool scalarOperand(SeamOp op, c10::ScalarType dtype) const override {
    return (op == SeamOp::Add || op == SeamOp::Mul) && supports(op, dtype);
  }

  void binaryScalar(SeamOp op, const TensorRef& out, const TensorRef& x, const c10::Scalar& scalar,
                    double alpha, runtime::StreamHandle stream) override {
    submit(
        stream,
        [op, scalar, alpha](const TensorRef& o_ref, const TensorRef& x_ref) {
          Aliases& al = threadAliases();
          const at::Tensor& o = al(o_ref, 0);
          const at::Tensor& x = al(x_ref, 1);
          const at::Tensor& wrapped = wrappedNumber(scalar);
          if (op == SeamOp::Mul) {
            using Kernel = OnViews<at::native::structured_mul_out>;
            Kernel kernel(Kernel::WithScalar{}, o, x, wrapped);
            kernel.impl(x, wrapped, o);
          } else {
            using Kernel = OnViews<at::native::structured_ufunc_add_CPU>;
            Kernel kernel(Kernel::WithScalar{}, o, x, wrapped);
            kernel.impl(x, wrapped, scalarFor(o_ref.dtype, alpha), o);
          }
        },
        out, x);
  }

  void gemm(const TensorRef& out, const TensorRef& a, const TensorRef& b, const TensorRef* c,
            float alpha, float beta, runtime::StreamHandle stream) override {
    if (c != nullptr) {
      // The CPU's own addmm: the bias copied into out, then one BLAS call
      // accumulating into it.
      submit(
          stream,
          [alpha, beta](const TensorRef& o_ref, const TensorRef& a_ref, const TensorRef& b_ref,
                        const TensorRef& c_ref) {
            Aliases& al = threadAliases();
            at::Tensor o = al(o_ref, 0);
            at::cpu::addmm_out(o, al(c_ref, 3), al(a_ref, 1), al(b_ref, 2), beta, alpha);
          },
          out, a, b, *c);
      return;
    }
    submit(
        stream,
        [alpha](const TensorRef& o_ref, const TensorRef& a_ref, const TensorRef& b_ref) {
          Aliases& al = threadAliases();
          at::Tensor o = al(o_ref, 0);
          // beta = 0: the output's previous contents are ignored, as in Gemm.
          if (o_ref.dim() == 3) {
            at::cpu::baddbmm_out(o, o, al(a_ref, 1), al(b_ref, 2), /*beta=*/0, alpha);
          } else {
            at::cpu::addmm_out(o, o, al(a_ref, 1), al(b_ref, 2), /*beta=*/0, alpha);
          }
        },
        out, a, b);
  }

  bool gemmBias() const override { return true; }
  // The CPU's addmm takes any out= layout (a transposed out is computed
  // transposed, not through a row-major temporary): so does host.
  bool gemmStridedOutput() const override { return true; }

  // The row's CPU expression (unary_operators.h) on aliases `out` and `x`.
  void unary(SeamOp op, const TensorRef& out, const TensorRef& x,
             runtime::StreamHandle stream) override {
    switch (op) {
#define TORCH_INFINI_HOST_UNARY(name, seam, resize, ...)       \
  case SeamOp::seam:                                           \
    submit(                                                    \
        stream,                                                \
        [](const TensorRef& out_ref, const TensorRef& x_ref) { \
          Aliases& al = threadAliases();                       \
          at::Tensor out = al(out_ref, 0);                     \
          const at::Tensor& x = al(x_ref, 1);                  \
          __VA_ARGS__;                                         \
        },                                                     \
        out, x);                                               \
    return;
      TORCH_INFINI_UNARY_OPERATORS(TORCH_INFINI_HOST_UNARY)
#undef TORCH_INFINI_HOST_UNARY
      default:
        break;
    }
    TORCH_CHECK(false, "host provider: ", opName(op), " is not a unary seam operator");
  }

  // The seam operators declared in TORCH_INFINI_SEAM_KERNELS
  // (seam_operators.h): the entry's host kernel, in stream order, with A(t)
  // aliasing t's memory (an alias slot per use, in the order the compiler
  // evaluates them: the same for every call of one kernel).
#define TORCH_INFINI_HOST_METHOD(enumerator, method, launch, parameters, arguments, call, \
                                 host_kernel)                                             \
  void method(TORCH_INFINI_UNPAREN parameters, runtime::StreamHandle stream) override {   \
    submit(                                                                               \
        stream,                                                                           \
        [](TORCH_INFINI_UNPAREN parameters) {                                             \
          [[maybe_unused]] AliasSlots A;                                                  \
          host_kernel;                                                                    \
        },                                                                                \
        TORCH_INFINI_UNPAREN arguments);                                                  \
  }
  TORCH_INFINI_SEAM_KERNELS(TORCH_INFINI_HOST_METHOD)
#undef TORCH_INFINI_HOST_METHOD

  void rotaryEmbedding(const TensorRef& query, const TensorRef* key, const TensorRef& positions,
                       const TensorRef& cos_sin_cache, int64_t head_size, bool is_neox,
                       int64_t offset, bool inverse, runtime::StreamHandle stream) override {
    const std::optional<TensorRef> key_ref = optionalRef(key);
    submit(
        stream,
        [key_ref, head_size, is_neox, offset, inverse](
            const TensorRef& q_ref, const TensorRef& p_ref, const TensorRef& c_ref) {
          host_loops::rotary(q_ref, p_ref, c_ref, head_size, is_neox, offset, inverse);
          if (key_ref)
            host_loops::rotary(*key_ref, p_ref, c_ref, head_size, is_neox, offset, inverse);
        },
        query, positions, cos_sin_cache);
  }

  void fusedAddRmsNorm(const TensorRef& input, const TensorRef& residual, const TensorRef* weight,
                       float eps, runtime::StreamHandle stream) override {
    const std::optional<TensorRef> weight_ref = optionalRef(weight);
    submit(
        stream,
        [weight_ref, eps](const TensorRef& x_ref, const TensorRef& r_ref) {
          Aliases& al = threadAliases();
          at::Tensor x = al(x_ref, 0);
          at::Tensor r = al(r_ref, 1);
          std::optional<at::Tensor> w;
          if (weight_ref) w = al(*weight_ref, 2);
          static const auto op =
              fusedOperator<void(at::Tensor&, at::Tensor&, const std::optional<at::Tensor>&,
                                 double)>("infini::fused_add_rms_norm");
          // eps as the float InfiniOps takes, widened back: the same value.
          op.redispatch(kCpuKernel, x, r, w, static_cast<double>(eps));
        },
        input, residual);
  }

  void topkSoftmax(const TensorRef& weights, const TensorRef& indices,
                   const TensorRef& token_expert, const TensorRef& gating, const TensorRef* bias,
                   const TensorRef* is_padding, bool renormalize,
                   runtime::StreamHandle stream) override {
    const std::optional<TensorRef> bias_ref = optionalRef(bias);
    const std::optional<TensorRef> padding_ref = optionalRef(is_padding);
    submit(
        stream,
        [bias_ref, padding_ref, renormalize](const TensorRef& w_ref, const TensorRef& i_ref,
                                             const TensorRef& t_ref, const TensorRef& g_ref) {
          Aliases& al = threadAliases();
          std::optional<at::Tensor> b;
          if (bias_ref) b = al(*bias_ref, 4);
          std::optional<at::Tensor> p;
          if (padding_ref) p = al(*padding_ref, 5);
          static const auto op = fusedOperator<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, int64_t, bool, const std::optional<at::Tensor>&,
              const std::optional<at::Tensor>&)>("infini::topk_softmax");
          // The reference allocates its results (three [T, k] rows of
          // numbers, small next to the gating it reads); copied in.
          auto [weights, indices, token_expert] =
              op.redispatch(kCpuKernel, al(g_ref, 3), w_ref.sizes[1], renormalize, b, p);
          at::Tensor w = al(w_ref, 0);
          at::native::copy_(w, weights);
          at::Tensor i = al(i_ref, 1);
          at::native::copy_(i, indices);
          at::Tensor t = al(t_ref, 2);
          at::native::copy_(t, token_expert);
        },
        weights, indices, token_expert, gating);
  }

  void reshapeAndCacheFlash(const TensorRef& key, const TensorRef& value,
                            const TensorRef& key_cache, const TensorRef& value_cache,
                            const TensorRef& slot_mapping, runtime::StreamHandle stream) override {
    submit(
        stream,
        [](const TensorRef& k_ref, const TensorRef& v_ref, const TensorRef& kc_ref,
           const TensorRef& vc_ref, const TensorRef& s_ref) {
          Aliases& al = threadAliases();
          at::Tensor key_cache = al(kc_ref, 2);
          at::Tensor value_cache = al(vc_ref, 3);
          static const auto op =
              fusedOperator<void(const at::Tensor&, const at::Tensor&, at::Tensor&, at::Tensor&,
                                 const at::Tensor&)>("infini::reshape_and_cache_flash");
          op.redispatch(kCpuKernel, al(k_ref, 0), al(v_ref, 1), key_cache, value_cache,
                        al(s_ref, 4));
        },
        key, value, key_cache, value_cache, slot_mapping);
  }

  void pagedAttention(const TensorRef& out, const TensorRef& query, const TensorRef& key_cache,
                      const TensorRef& value_cache, const TensorRef& block_tables,
                      const TensorRef& seq_lens, const TensorRef* alibi_slopes, float scale,
                      runtime::StreamHandle stream) override {
    const std::optional<TensorRef> alibi_ref = optionalRef(alibi_slopes);
    submit(
        stream,
        [alibi_ref, scale](const TensorRef& o_ref, const TensorRef& q_ref, const TensorRef& kc_ref,
                           const TensorRef& vc_ref, const TensorRef& bt_ref,
                           const TensorRef& sl_ref) {
          Aliases& al = threadAliases();
          std::optional<at::Tensor> alibi;
          if (alibi_ref) alibi = al(*alibi_ref, 6);
          static const auto op = fusedOperator<at::Tensor(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, double, const std::optional<at::Tensor>&)>(
              "infini::paged_attention");
          // The reference allocates its result; copied in, as the seam's
          // contract says InfiniOps' kernel writes it: the rows of sequences
          // with tokens only (the bridge zeroes the others first). The float
          // scale InfiniOps takes, widened back: the same value.
          const at::Tensor lengths = al(sl_ref, 5);
          const at::Tensor result =
              op.redispatch(kCpuKernel, al(q_ref, 1), al(kc_ref, 2), al(vc_ref, 3), al(bt_ref, 4),
                            lengths, static_cast<double>(scale), alibi);
          const at::Tensor written = (lengths > 0).nonzero().squeeze(1);
          at::Tensor o = al(o_ref, 0);
          o.index_copy_(0, written, result.index_select(0, written));
        },
        out, query, key_cache, value_cache, block_tables, seq_lens);
  }

  // The CPU's convolution (oneDNN or its own kernels, as the CPU picks for
  // these layouts), its result copied into out's layout.
  void convolution(const TensorRef& out, const TensorRef& input, const TensorRef& weight,
                   const TensorRef* bias, const std::vector<int64_t>& stride,
                   const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                   int64_t groups, runtime::StreamHandle stream) override {
    const std::optional<TensorRef> bias_ref = optionalRef(bias);
    submit(
        stream,
        [bias_ref, stride, padding, dilation, groups](
            const TensorRef& o_ref, const TensorRef& i_ref, const TensorRef& w_ref) {
          Aliases& al = threadAliases();
          std::optional<at::Tensor> b;
          if (bias_ref) b = al(*bias_ref, 3);
          const std::vector<int64_t> no_output_padding(stride.size(), 0);
          const at::Tensor result =
              at::convolution(al(i_ref, 1), al(w_ref, 2), b, stride, padding, dilation,
                              /*transposed=*/false, no_output_padding, groups);
          at::Tensor o = al(o_ref, 0);
          at::native::copy_(o, result);
        },
        out, input, weight);
  }

  void cat(const TensorRef& out, const std::vector<TensorRef>& inputs, int64_t dim,
           runtime::StreamHandle stream) override {
    submit(
        stream,
        [dim](const TensorRef& o_ref, const std::vector<TensorRef>& in_refs) {
          Aliases& al = threadAliases();
          at::Tensor o = al(o_ref, 0);
          if (in_refs.size() <= 3) {
            // The common case (a KV cache, rotate_half): the CPU's own cat,
            // one pass, on the aliases this thread keeps.
            c10::SmallVector<at::Tensor, 3> inputs;
            for (size_t i = 0; i < in_refs.size(); ++i) inputs.push_back(al(in_refs[i], i + 1));
            at::cpu::cat_out(o, inputs, dim);
            return;
          }
          // Each input copied into its slice of out: the bytes the CPU's cat writes.
          int64_t offset = 0;
          for (const TensorRef& in_ref : in_refs) {
            const int64_t size = in_ref.sizes[dim];
            at::Tensor slice = o.narrow(dim, offset, size);
            at::native::copy_(slice, al(in_ref, 1));
            offset += size;
          }
        },
        out, inputs);
  }

  void random(const TensorRef& out, const RandomDraw& draw, runtime::StreamHandle stream) override {
    submit(
        stream,
        [draw](const TensorRef& o_ref) {
          // The kernel views of the output and of bernoulli's p (discrete mode).
          TensorRef o = o_ref;
          o.data = runtime::hostKernelView(o.data);
          RandomDraw d = draw;
          d.p.data = runtime::hostKernelView(d.p.data);
          fillRandom(o, d);
        },
        out);
  }

  // The CPU's own GradScaler kernels over the device memory, in stream order.
  void ampUnscale(const std::vector<TensorRef>& grads, const TensorRef& found_inf,
                  const TensorRef& inv_scale, runtime::StreamHandle stream) override {
    submit(
        stream,
        [](const std::vector<TensorRef>& grad_refs, const TensorRef& f_ref,
           const TensorRef& i_ref) {
          std::vector<at::Tensor> cpu_grads;
          cpu_grads.reserve(grad_refs.size());
          for (const TensorRef& g : grad_refs) cpu_grads.push_back(unownedCpu(g));
          Aliases& al = threadAliases();
          at::Tensor found = al(f_ref, 0);
          at::_amp_foreach_non_finite_check_and_unscale_(cpu_grads, found, al(i_ref, 1));
        },
        grads, found_inf, inv_scale);
  }

  void ampUpdateScale(const TensorRef& scale, const TensorRef& growth_tracker,
                      const TensorRef& found_inf, double growth_factor, double backoff_factor,
                      int64_t growth_interval, runtime::StreamHandle stream) override {
    submit(
        stream,
        [growth_factor, backoff_factor, growth_interval](
            const TensorRef& s_ref, const TensorRef& g_ref, const TensorRef& f_ref) {
          Aliases& al = threadAliases();
          at::Tensor s = al(s_ref, 0);
          at::Tensor g = al(g_ref, 1);
          at::_amp_update_scale_(s, g, al(f_ref, 2), growth_factor, backoff_factor,
                                 growth_interval);
        },
        scale, growth_tracker, found_inf);
  }

  // The foreach operator's CPU kernel (a loop of per-tensor operators) over
  // the device memory, in stream order: the call as the CPU makes it, on
  // CPU tensors aliasing the lists' kernel views.
  void foreachInPlace(const c10::OperatorHandle& op, const std::vector<c10::IValue>& arguments,
                      const std::vector<std::vector<TensorRef>>& lists,
                      runtime::StreamHandle stream) override {
    submit(
        stream,
        [op, arguments](const std::vector<std::vector<TensorRef>>& list_refs) {
          torch::jit::Stack stack;
          stack.reserve(arguments.size());
          size_t next = 0;
          for (const c10::IValue& argument : arguments) {
            if (!argument.isTensorList() || !argument.toTensorList().empty()) {
              stack.push_back(argument);
              continue;
            }
            c10::List<at::Tensor> aliases;
            aliases.reserve(list_refs[next].size());
            for (const TensorRef& ref : list_refs[next]) aliases.push_back(unownedCpu(ref));
            ++next;
            stack.emplace_back(std::move(aliases));
          }
          op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
        },
        lists);
  }

 private:
  // Runs work(refs...) in stream order. Inline streams call it right away
  // with the caller's views; only asynchronous streams copy them into the
  // queued task.
  template <typename F, typename... Refs>
  static void submit(runtime::StreamHandle stream, F work, const Refs&... refs) {
    runtime::HostStream& s = runtime::HostRuntime::stream(stream);
    if (!s.async()) {
      work(refs...);
      return;
    }
    s.submit([work, refs...] { work(refs...); });
  }

  // alpha as the output dtype's kind of scalar (integral outputs need one).
  static c10::Scalar scalarFor(c10::ScalarType dtype, double alpha) {
    if (c10::isIntegralType(dtype, /*includeBool=*/true)) return static_cast<int64_t>(alpha);
    return alpha;
  }

  const std::string name_ = "host";
  // InfiniOps' cpu column; an operator InfiniOps implements on accelerators
  // only (no cpu kernel: rotary_embedding) with the dtypes it declares there,
  // run by the CPU's kernels, so that every seam entry is exercised in CI.
  static NativeMasks hostMasks() {
    NativeMasks masks = nativeMasks("cpu", /*infinirt_conversions=*/false);
    for (std::string_view type : runtime::kInfiniDeviceTypeNames) {
      const NativeMasks there = nativeMasks(type, /*infinirt_conversions=*/false);
      for (const Declaration& d : infiniOpsDeclarations())
        if (!declaredOn(d.op, "cpu"))
          masks[static_cast<size_t>(d.op)] |= there[static_cast<size_t>(d.op)];
    }
    return masks;
  }

  const NativeMasks native_ = hostMasks();
};

// Serves the host runtime (TORCH_INFINI_BACKEND=host).
std::unique_ptr<KernelProvider> forHostRuntime(runtime::DeviceRuntime& rt) {
  if (dynamic_cast<runtime::HostRuntime*>(&rt) == nullptr) return nullptr;
  return std::make_unique<HostKernels>();
}
const KernelProviderRegistrar registrar({"host", &forHostRuntime});
}  // namespace

}  // namespace torch_infini::ops
