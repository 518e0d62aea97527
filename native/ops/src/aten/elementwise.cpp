// Elementwise operators: add, sub, mul (Tensor, in-place, out=), the unary
// operators declared in unary_operators.h (relu, silu, sigmoid: out-of-place,
// in-place, out=), gelu (the same, with its `approximate`), fill_ and zero_.
//
// Output geometry, broadcasting, memory overlap and out= resizing follow
// TensorIterator exactly (it is built for its checks and output allocation
// only); the work itself goes to the kernel seam on the current stream.
#include <ATen/ATen.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Gelu.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/result_type_native.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <functional>
#include <optional>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "fallback/refusal.h"
#include "torch_infini/ops/unary_operators.h"

namespace torch_infini::ops {
namespace {

// A 0-dim device tensor holding `value` converted to `dtype` the way PyTorch
// converts a scalar operand, filled by a stream-ordered kernel where the
// provider has one: no synchronization.
at::Tensor deviceScalar(const at::Scalar& value, c10::ScalarType dtype, const at::Tensor& like) {
  // The scalar starts in its own type (int64, double, complex double, bool),
  // never the default float dtype, which would round 16777217 or 0.1. The
  // tensor conversion then wraps integers like PyTorch's kernels do (int8
  // tensor * 300 multiplies by 44), unlike checked Scalar casts.
  at::Scalar converted =
      at::scalar_tensor(value, at::TensorOptions().dtype(value.type())).to(dtype).item();
  at::Tensor t = at::empty({}, like.options().dtype(dtype));
  KernelProvider& k = selectedKernelProvider();
  if (k.supports(SeamOp::Fill, dtype) && k.fillTakes(converted, dtype)) {
    k.fill(toRef(t), converted, streamOf(t));
  } else {
    t.copy_(at::scalar_tensor(converted, at::TensorOptions().dtype(dtype)));
  }
  return t;
}

// Raises, on the calling thread and with the CPU's message, when `value`
// does not fit `dtype` (fill_ values, add's alpha): the kernel converts it
// on the stream's worker, where an error would surface at some later call.
void checkScalarFits(const at::Scalar& value, c10::ScalarType dtype) {
  AT_DISPATCH_V2(dtype, "infini_check_scalar", AT_WRAP([&] { (void)value.to<scalar_t>(); }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kBool, at::kHalf, at::kBFloat16,
                 at::kComplexHalf, AT_EXPAND(AT_FLOAT8_TYPES),
                 AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
}

bool isCpuScalar(const at::Tensor& t) { return t.is_cpu() && t.dim() == 0; }

// An operand or result: the caller's tensor, borrowed, or one made here.
// The caller's tensors are never copied: the first C++ copy of a tensor
// Python holds increfs its Python object, which takes the GIL (that the
// operator released), and dropping the copy takes it again.
using Operand = c10::MaybeOwned<at::Tensor>;
// The inputs of an elementwise operator, by reference.
using Inputs = std::initializer_list<std::reference_wrapper<const at::Tensor>>;

bool isReducedFloat(c10::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// `t` in the result dtype `dtype`, cast on the device where it differs:
// what TensorIterator does element by element. Not where PyTorch's CPU
// kernels read a one-element operand unrounded in the math type (float16
// and bfloat16 results: x * torch.tensor(2049) multiplies by 2049, not by
// its float16 2048): the call goes to the fallback.
Operand promoted(const char* name, Operand t, c10::ScalarType dtype, const char* what) {
  if (t->scalar_type() == dtype) return t;
  TORCH_CHECK_NOT_IMPLEMENTED(
      !(isReducedFloat(dtype) && t->numel() == 1), name, ": ", what, " (", t->scalar_type(),
      ", one element) of a ", dtype,
      " result is read unrounded by PyTorch's kernels, which casting it first would not do");
  KernelProvider& k = selectedKernelProvider();
  TORCH_CHECK_NOT_IMPLEMENTED(
      k.supports(SeamOp::Cast, t->scalar_type()) && k.supports(SeamOp::Cast, dtype), name, ": ",
      what, " is ", t->scalar_type(), " and the result ", dtype, ", which the '", k.name(),
      "' kernel provider cannot cast between");
  return Operand::owned(t->to(dtype));  // on the device, in stream order
}

// Brings both operands of a binary operator to the same infini device and
// the dtype PyTorch computes it in (type promotion), or raises naming what
// does not fit.
std::pair<Operand, Operand> binaryOperands(const char* name, SeamOp op, const at::Tensor& self,
                                           const at::Tensor& other) {
  const c10::ScalarType dtype = at::native::result_type(self, other);
  Operand a = Operand::borrowed(self);
  Operand b = Operand::borrowed(other);
  if (isInfini(self) && isCpuScalar(other))
    b = Operand::owned(deviceScalar(other.item(), dtype, self));
  if (isInfini(other) && isCpuScalar(self))
    a = Operand::owned(deviceScalar(self.item(), dtype, other));
  TORCH_CHECK(isInfini(*a) && isInfini(*b),
              "Expected all tensors to be on the same device, but found at least two devices, ",
              a->device(), " and ", b->device(), "!");
  checkSameDevice(*a, *b);
  requireKernel(name, op, dtype);
  return {promoted(name, std::move(a), dtype, "the first operand"),
          promoted(name, std::move(b), dtype, "the second operand")};
}

// The output geometry TensorIterator chose for inputs of given sizes and
// strides, remembered per thread: a new output's geometry is a function of
// those alone (the inputs are infini tensors of one dtype, the output fresh,
// so there is nothing to check on overlap or types), and a model's loop
// repeats a handful of them. A few entries, replaced round robin.
class OutputGeometryCache {
 public:
  // The remembered output for `inputs`, allocated like `inputs[0]`; or
  // undefined when unknown.
  at::Tensor find(Inputs inputs) {
    makeKey(inputs);
    for (const Entry& e : entries_) {
      if (e.key == key_) {
        const at::Tensor& like = inputs.begin()->get();
        const int device = like.device().index();
        return emptyStridedLike(like, e.sizes, e.strides, currentStreamIdUnchecked(device));
      }
    }
    return at::Tensor();
  }

  // Remembers `result`'s geometry for the inputs find() was last given.
  void remember(const at::Tensor& result) {
    Entry& e = entries_[next_];
    next_ = (next_ + 1) % kEntries;
    e.key = key_;
    e.sizes.assign(result.sizes().begin(), result.sizes().end());
    e.strides.assign(result.strides().begin(), result.strides().end());
  }

 private:
  static constexpr size_t kEntries = 8;
  using Dims = c10::SmallVector<int64_t, 20>;
  struct Entry {
    Dims key;
    c10::DimVector sizes;
    c10::DimVector strides;
  };

  void makeKey(Inputs inputs) {
    key_.clear();
    for (const at::Tensor& t : inputs) {
      key_.push_back(t.dim());
      key_.append(t.sizes().begin(), t.sizes().end());
      key_.append(t.strides().begin(), t.strides().end());
    }
  }

  std::array<Entry, kEntries> entries_;
  size_t next_ = 0;
  Dims key_;
};

// This thread's cache, looked up once per call: inlined, each access to a
// thread_local of a shared library would be a call (__tls_get_addr).
[[gnu::noinline]] OutputGeometryCache& geometryCache() {
  thread_local OutputGeometryCache cache;
  return cache;
}

// Output geometry and checks from TensorIterator; `out` undefined allocates
// (the geometry TensorIterator gave the same input layouts before, if any).
// `out` itself (resized where TensorIterator resizes it) when defined.
Operand elementwiseOutput(const at::Tensor& out, Inputs inputs) {
  OutputGeometryCache& cache = geometryCache();
  if (!out.defined()) {
    if (at::Tensor known = cache.find(inputs); known.defined())
      return Operand::owned(std::move(known));
  } else if (std::all_of(inputs.begin(), inputs.end(), [&](const at::Tensor& in) {
               return in.scalar_type() == out.scalar_type() && sameDims(in.sizes(), out.sizes());
             })) {
    // An in-place or out= call whose inputs have out's shape and dtype (a
    // gate's add_ on a slice): nothing to broadcast, promote or resize, so
    // only the iterator's memory checks remain, the same functions it calls.
    at::assert_no_internal_overlap(out);
    for (const at::Tensor& in : inputs) at::assert_no_partial_overlap(out, in);
    return Operand::borrowed(out);
  }
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(true).check_all_same_dtype(true).add_output(out);
  for (const at::Tensor& in : inputs) config.add_const_input(in);
  at::TensorIterator iter = config.build();
  if (out.defined()) return Operand::borrowed(out);
  cache.remember(iter.output());
  return Operand::owned(at::Tensor(iter.output()));  // a new tensor: no Python object
}

void checkOutDtype(const char* name, const at::Tensor& out, c10::ScalarType dtype) {
  requireSameDtype(name, dtype, out.scalar_type(), "out");
}

// ---------------------------------------------------------------- add, mul

// Both infini, same device and dtype, same sizes and strides, dense.
bool sameLayoutOperands(const at::Tensor& a, const at::Tensor& b) {
  return isInfini(a) && isInfini(b) && a.device() == b.device() &&
         a.scalar_type() == b.scalar_type() && sameDims(a.sizes(), b.sizes()) &&
         sameDims(a.strides(), b.strides()) && a.is_non_overlapping_and_dense();
}

// Both infini on one device, with equal sizes and dtype (strides free).
bool sameShapeAndDtype(const at::Tensor& a, const at::Tensor& b) {
  return isInfini(a) && isInfini(b) && a.device() == b.device() &&
         a.scalar_type() == b.scalar_type() && sameDims(a.sizes(), b.sizes());
}

// The value of a 0-dim CPU tensor without a dispatch for the common
// wrapped-number types.
at::Scalar scalarValue(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kDouble:
      return *t.const_data_ptr<double>();
    case at::kLong:
      return *t.const_data_ptr<int64_t>();
    case at::kBool:
      return *t.const_data_ptr<bool>();
    default:
      return t.item();
  }
}

// A CPU scalar operand on the right (a Python number: `x * 0.5`, `x + 1`)
// that does not promote. PyTorch's CPU mul reads it unrounded in float for
// float16/bfloat16 (x * 1e5 with x = 1e-3 is 100, not inf), which the seam's
// binaryScalar does. A scalar on the left takes the generic path on the CPU
// too (rounded to the tensor's dtype first).
bool scalarOperandCall(const at::Tensor& self, const at::Tensor& other) {
  return isInfini(self) && isCpuScalar(other) &&
         at::native::result_type(self, other) == self.scalar_type();
}

// out = self (op) scalar where the provider takes the scalar as it is
// (scalarOperand): no device tensor is made for it. Float16/bfloat16 mul
// must get it unrounded: a provider that cannot refuses (to the fallback).
// nullopt: the generic path (the scalar taken to the device first).
std::optional<Operand> scalarOperandKernel(const char* name, SeamOp op, const at::Tensor& out,
                                           const at::Tensor& self, const at::Tensor& other,
                                           const at::Scalar& alpha) {
  const c10::ScalarType dtype = self.scalar_type();
  requireKernel(name, op, dtype);
  KernelProvider& k = selectedKernelProvider();
  if (!k.scalarOperand(op, dtype)) {
    TORCH_CHECK_NOT_IMPLEMENTED(op != SeamOp::Mul || !isReducedFloat(dtype), name, ": ", dtype,
                                " times a Python number takes the number unrounded on the CPU, "
                                "which the '",
                                k.name(), "' kernel provider cannot do");
    return std::nullopt;
  }
  if (out.defined()) {
    checkInfiniTensor(name, "out", out);
    checkSameDevice(self, out);
    checkOutDtype(name, out, dtype);
  }
  const at::Scalar scalar = scalarValue(other);  // in its own type, unrounded
  if (self.is_non_overlapping_and_dense() && (!out.defined() || sameLayoutOperands(out, self))) {
    // One dense operand: the result takes the geometry TensorIterator
    // computes for it beside a scalar (emptyLikeBesideScalar).
    if (out.defined() && !out.is_same(self) && out.storage().is_alias_of(self.storage()))
      at::assert_no_partial_overlap(out, self);
    Operand result = out.defined() ? Operand::borrowed(out)
                                   : Operand::owned(emptyLikeBesideScalar(
                                         self, currentStreamIdUnchecked(self.device().index())));
    if (result->numel() == 0) return result;
    k.binaryScalar(op, toRef(*result), toRef(self), scalar, alpha.toDouble(), streamOf(*result));
    return result;
  }
  Operand result = elementwiseOutput(out, {self});
  if (result->numel() == 0) return result;
  k.binaryScalar(op, toRef(*result), expandedRef(self, result->sizes()), scalar, alpha.toDouble(),
                 streamOf(*result));
  return result;
}

// The seam's add (with alpha) or mul.
void launchBinary(SeamOp op, const TensorRef& out, const TensorRef& a, const TensorRef& b,
                  const at::Scalar& alpha, runtime::StreamHandle stream) {
  if (op == SeamOp::Add) {
    selectedKernelProvider().add(out, a, b, alpha.toDouble(), stream);
  } else {
    selectedKernelProvider().mul(out, a, b, stream);
  }
}

// Computes into `out` (undefined: a new tensor) and returns the result.
Operand binaryKernel(const char* name, SeamOp op, const at::Tensor& out, const at::Tensor& self,
                     const at::Tensor& other, const at::Scalar& alpha) {
  if (scalarOperandCall(self, other)) {
    if (auto result = scalarOperandKernel(name, op, out, self, other, alpha))
      return std::move(*result);
  }
  if (sameLayoutOperands(self, other) && (!out.defined() || sameLayoutOperands(out, self))) {
    // Fast path (most model code): same-shape dense operands and out= in
    // one layout, one dtype, one device. The result takes their geometry,
    // which is what TensorIterator would compute; no broadcast views are
    // needed. out= may be an operand, but never overlap one partially.
    requireKernel(name, op, self.scalar_type());
    if (out.defined()) {
      for (const at::Tensor* operand : {&self, &other}) {
        if (!out.is_same(*operand) && out.storage().is_alias_of(operand->storage())) {
          at::assert_no_partial_overlap(out, *operand);
        }
      }
    }
    // One lookup of the current stream serves the allocation and the launch.
    const int device = self.device().index();
    const c10::StreamId stream_id = currentStreamIdUnchecked(device);
    Operand result =
        out.defined() ? Operand::borrowed(out) : Operand::owned(emptyLike(self, stream_id));
    if (result->numel() == 0) return result;
    launchBinary(op, toRef(*result), toRef(self), toRef(other), alpha,
                 nativeStreamUnchecked(device, stream_id));
    return result;
  }
  if (out.defined() && sameShapeAndDtype(out, self) && sameShapeAndDtype(out, other)) {
    // In place or out= over operands of out's shape and dtype, any strides
    // (the gates of a recurrent cell are slices): nothing to promote or
    // broadcast; elementwiseOutput's memory checks only.
    requireKernel(name, op, out.scalar_type());
    Operand result = elementwiseOutput(out, {self, other});
    if (out.numel() > 0)
      launchBinary(op, toRef(out), toRef(self), toRef(other), alpha, streamOf(out));
    return result;
  }
  auto [a, b] = binaryOperands(name, op, self, other);
  if (out.defined()) {
    checkInfiniTensor(name, "out", out);
    checkSameDevice(*a, out);
    checkOutDtype(name, out, a->scalar_type());
  }
  Operand result = elementwiseOutput(out, {*a, *b});
  if (result->numel() == 0) return result;
  launchBinary(op, toRef(*result), expandedRef(*a, result->sizes()),
               expandedRef(*b, result->sizes()), alpha, streamOf(*result));
  return result;
}

at::Tensor& binaryInto(const char* name, SeamOp op, at::Tensor& out, const at::Tensor& self,
                       const at::Tensor& other, const at::Scalar& alpha) {
  binaryKernel(name, op, out, self, other, alpha);
  return out;
}

at::Tensor binary(const char* name, SeamOp op, const at::Tensor& self, const at::Tensor& other,
                  const at::Scalar& alpha) {
  return *binaryKernel(name, op, at::Tensor(), self, other, alpha);  // a new tensor: owned
}

void checkAlpha(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  // PyTorch's rule: an integral result needs an integral alpha, a non-bool
  // result a non-bool alpha. (Operands of one dtype need no promotion.)
  const auto dtype = self.scalar_type() == other.scalar_type()
                         ? self.scalar_type()
                         : at::native::result_type(self, other);
  TORCH_CHECK(!alpha.isBoolean() || dtype == at::kBool,
              "Boolean alpha only supported for Boolean results.");
  TORCH_CHECK(at::isFloatingType(dtype) || at::isComplexType(dtype) || alpha.isIntegral(true),
              "For integral input tensors, argument alpha must not be a floating point number.");
  // The kernel converts alpha to the result dtype; an alpha that does not
  // fit raises here, as on the CPU, not later on a stream's worker.
  checkScalarFits(alpha, dtype);
  // The kernel seam (like InfiniOps Add) carries alpha as a double.
  TORCH_CHECK_NOT_IMPLEMENTED(!alpha.isIntegral(false) || static_cast<int64_t>(static_cast<double>(
                                                              alpha.toLong())) == alpha.toLong(),
                              "add: alpha=", alpha.toLong(),
                              " is not exactly representable as a double, which the "
                              "infini add kernel takes (backend '",
                              runtime::selectedRuntime().name(), "')");
}

at::Tensor add_Tensor(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  checkAlpha(self, other, alpha);
  return binary("add", SeamOp::Add, self, other, alpha);
}

at::Tensor& add__Tensor(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  checkAlpha(self, other, alpha);
  return binaryInto("add_", SeamOp::Add, self, self, other, alpha);
}

at::Tensor& add_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out) {
  checkAlpha(self, other, alpha);
  return binaryInto("add.out", SeamOp::Add, out, self, other, alpha);
}

// sub is add with -alpha, as in ATen itself (its sub kernel is the add
// kernel with alpha negated): the same bits. Bool operands are refused in
// PyTorch's words.
at::Tensor sub_Tensor(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  at::native::sub_check(self, other);
  checkAlpha(self, other, alpha);
  return binary("sub", SeamOp::Add, self, other, -alpha);
}

at::Tensor& sub__Tensor(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  at::native::sub_check(self, other);
  checkAlpha(self, other, alpha);
  return binaryInto("sub_", SeamOp::Add, self, self, other, -alpha);
}

at::Tensor& sub_out(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha,
                    at::Tensor& out) {
  at::native::sub_check(self, other);
  checkAlpha(self, other, alpha);
  return binaryInto("sub.out", SeamOp::Add, out, self, other, -alpha);
}

at::Tensor mul_Tensor(const at::Tensor& self, const at::Tensor& other) {
  return binary("mul", SeamOp::Mul, self, other, 1);
}

at::Tensor& mul__Tensor(at::Tensor& self, const at::Tensor& other) {
  return binaryInto("mul_", SeamOp::Mul, self, self, other, 1);
}

at::Tensor& mul_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  return binaryInto("mul.out", SeamOp::Mul, out, self, other, 1);
}

// ------------------------------------------ unary operators (unary_operators.h)

enum class OutResize { kIteratorOut, kContiguousOut };

// Computes into `out` (undefined: a new tensor) with `launch(result)` and
// returns the result.
template <class Launch>
Operand unaryInto(const char* name, SeamOp op, const at::Tensor& self, const at::Tensor& out,
                  OutResize resize, Launch launch) {
  checkInfiniTensor(name, "input", self);
  if (out.defined()) {
    checkInfiniTensor(name, "out", out);
    checkSameDevice(self, out);
    checkOutDtype(name, out, self.scalar_type());
  }
  requireKernel(name, op, self.scalar_type());
  // Kernels that are not TensorIterator ops on the CPU (relu.out) resize an
  // empty out contiguously, not to the input's layout.
  if (resize == OutResize::kContiguousOut && out.defined() && out.numel() == 0) {
    at::native::resize_output(out, self.sizes());
  }
  Operand result = elementwiseOutput(out, {self});
  if (result->numel() > 0) launch(*result);
  return result;
}

Operand unaryKernel(const char* name, SeamOp op, const at::Tensor& self, const at::Tensor& out,
                    OutResize resize) {
  return unaryInto(name, op, self, out, resize, [&](const at::Tensor& result) {
    selectedKernelProvider().unary(op, toRef(result), toRef(self), streamOf(result));
  });
}

// name, name_ and name.out of each declared unary operator.
#define TORCH_INFINI_DEFINE_UNARY(name, seam, resize, ...)                             \
  struct name##_unary {                                                                \
    static at::Tensor functional(const at::Tensor& self) {                             \
      return *unaryKernel(#name, SeamOp::seam, self, at::Tensor(), OutResize::resize); \
    }                                                                                  \
    static at::Tensor& inplace(at::Tensor& self) {                                     \
      unaryKernel(#name "_", SeamOp::seam, self, self, OutResize::kIteratorOut);       \
      return self;                                                                     \
    }                                                                                  \
    static at::Tensor& out(const at::Tensor& self, at::Tensor& out) {                  \
      unaryKernel(#name ".out", SeamOp::seam, self, out, OutResize::resize);           \
      return out;                                                                      \
    }                                                                                  \
  };
TORCH_INFINI_UNARY_OPERATORS(TORCH_INFINI_DEFINE_UNARY)
#undef TORCH_INFINI_DEFINE_UNARY

// gelu, gelu_ and gelu.out: a unary operator with PyTorch's `approximate`
// ("none": erf; "tanh"), which InfiniOps' Gelu takes as it is.
Operand geluKernel(const char* name, const at::Tensor& self, const at::Tensor& out,
                   c10::string_view approximate) {
  // ATen's own parse: any other string raises its error.
  const bool tanh = at::native::get_gelutype_enum(approximate) == at::native::GeluType::Tanh;
  return unaryInto(
      name, SeamOp::Gelu, self, out, OutResize::kIteratorOut, [&](const at::Tensor& result) {
        selectedKernelProvider().gelu(toRef(result), toRef(self), tanh, streamOf(result));
      });
}

at::Tensor gelu(const at::Tensor& self, c10::string_view approximate) {
  return *geluKernel("gelu", self, at::Tensor(), approximate);
}

at::Tensor& gelu_(at::Tensor& self, c10::string_view approximate) {
  geluKernel("gelu_", self, self, approximate);
  return self;
}

at::Tensor& gelu_out(const at::Tensor& self, c10::string_view approximate, at::Tensor& out) {
  geluKernel("gelu.out", self, out, approximate);
  return out;
}

// ------------------------------------------------------------ fill, zero

// Stride-0 dimensions collapsed to size 1: the same memory, written once.
// `t` itself when it has none (a new view is an allocation).
at::Tensor withoutBroadcastDims(const at::Tensor& t) {
  const c10::IntArrayRef strides = t.strides();
  if (std::find(strides.begin(), strides.end(), 0) == strides.end()) return t;
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0) sizes[d] = std::min<int64_t>(sizes[d], 1);
  return t.as_strided(sizes, t.strides(), t.storage_offset());
}

at::Tensor& fill_Scalar(at::Tensor& self, const at::Scalar& value) {
  checkInfiniTensor("fill_", "self", self);
  checkScalarFits(value, self.scalar_type());
  if (self.numel() == 0) return self;
  // Filling writes one value, so elements sharing memory are fine (as in
  // PyTorch); broadcast dimensions are filled once.
  at::Tensor target = withoutBroadcastDims(self);
  KernelProvider& k = selectedKernelProvider();
  if (k.supports(SeamOp::Fill, self.scalar_type()) && k.fillTakes(value, self.scalar_type())) {
    k.fill(toRef(target), value, streamOf(target));
    return self;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(at::has_internal_overlap(target) != at::MemOverlap::Yes,
                              "fill_: a tensor whose elements "
                              "overlap in memory (other than broadcast dimensions) needs a fill "
                              "kernel, which the '",
                              k.name(), "' kernel provider lacks");
  // No fill kernel: the pattern is uploaded once, in the target's own layout
  // when it is dense; copy_ scatters it into a strided view on the device.
  at::Tensor pattern =
      isDense(target)
          ? at::empty_strided(target.sizes(), target.strides(), target.options().device(at::kCPU))
          : at::empty(target.sizes(), target.options().device(at::kCPU));
  pattern.fill_(value);
  target.copy_(pattern);
  return self;
}

at::Tensor& fill_Tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  if (isInfini(value)) {
    checkSameDevice(self, value);
    self.copy_(value.expand(self.sizes()));  // stays on the device
    return self;
  }
  return fill_Scalar(self, value.item());
}

at::Tensor& zero_(at::Tensor& self) {
  checkInfiniTensor("zero_", "self", self);
  if (self.numel() == 0) return self;
  if (isDense(self)) {
    // Zero bytes are zero in every dtype: the runtime's memset does it.
    runtime::selectedRuntime().memsetAsync(self.data_ptr(), 0, self.numel() * self.element_size(),
                                           streamOf(self));
    return self;
  }
  return fill_Scalar(self, 0);
}

// Calls a kernel refuses (a dtype, shape or argument it does not serve) run
// in the CPU fallback, under its policy.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar add(m, "aten", "elementwise", SeamOp::Add);
  TORCH_INFINI_IMPL_OR_FALLBACK(add, "add.Tensor", add_Tensor);
  TORCH_INFINI_IMPL_OR_FALLBACK(add, "add_.Tensor", add__Tensor);
  TORCH_INFINI_IMPL_OR_FALLBACK(add, "add.out", add_out);
  // sub is add with -alpha, as ATen's own.
  TORCH_INFINI_IMPL_OR_FALLBACK(add, "sub.Tensor", sub_Tensor);
  TORCH_INFINI_IMPL_OR_FALLBACK(add, "sub_.Tensor", sub__Tensor);
  TORCH_INFINI_IMPL_OR_FALLBACK(add, "sub.out", sub_out);
  BridgeRegistrar mul(m, "aten", "elementwise", SeamOp::Mul);
  TORCH_INFINI_IMPL_OR_FALLBACK(mul, "mul.Tensor", mul_Tensor);
  TORCH_INFINI_IMPL_OR_FALLBACK(mul, "mul_.Tensor", mul__Tensor);
  TORCH_INFINI_IMPL_OR_FALLBACK(mul, "mul.out", mul_out);
#define TORCH_INFINI_REGISTER_UNARY(name, seam, ...)                                               \
  BridgeRegistrar(m, "aten", "activation", SeamOp::seam)                                           \
      .impl(#name, TORCH_FN((OrCpuFallback<at::_ops::name, &name##_unary::functional>::call)))     \
      .impl(#name "_", TORCH_FN((OrCpuFallback<at::_ops::name##_, &name##_unary::inplace>::call))) \
      .impl(#name ".out",                                                                          \
            TORCH_FN((OrCpuFallback<at::_ops::name##_out, &name##_unary::out>::call)));
  TORCH_INFINI_UNARY_OPERATORS(TORCH_INFINI_REGISTER_UNARY)
#undef TORCH_INFINI_REGISTER_UNARY
  BridgeRegistrar gelu_ops(m, "aten", "activation", SeamOp::Gelu);
  TORCH_INFINI_IMPL_OR_FALLBACK(gelu_ops, "gelu", gelu);
  TORCH_INFINI_IMPL_OR_FALLBACK(gelu_ops, "gelu_", gelu_);
  TORCH_INFINI_IMPL_OR_FALLBACK(gelu_ops, "gelu.out", gelu_out);
  // A fill kernel or a one-time pattern upload: every dtype.
  BridgeRegistrar fill(m, "aten", "fill");
  fill.impl("fill_.Scalar", fill_Scalar);
  fill.impl("fill_.Tensor", fill_Tensor);
  fill.impl("zero_", zero_);
}

}  // namespace
}  // namespace torch_infini::ops
