// cat (torch.cat, concat, concatenate, and stack through it) and cat.out
// through the kernel seam's Cat.
//
// Output geometry, dtype checks, the legacy skipping of 1-D empty inputs,
// the memory format and out='s resizing and overlap checks are ATen's own
// meta function (structured_cat); the copy is the seam's. Mixed dtypes (cat
// promotes) and dtypes the provider lacks go to the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/cat_meta.h>
#include <torch/library.h>

#include <vector>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "fallback/refusal.h"

namespace torch_infini::ops {
namespace {

// The meta step writing into `out`: an undefined tensor (allocated here, as
// the functional form does) or the caller's out= (resized as ATen's out=
// kernels resize).
class CatGeometry final : public at::meta::structured_cat {
 public:
  // `like`: an input (the output's dtype and device); null for no inputs,
  // which the meta step refuses.
  CatGeometry(at::Tensor& out, const at::Tensor* like) : out_(out), like_(like) {}

  // The meta step's output. A PyTorch with named tensors (2.11) passes the
  // outputs' names too; 2.13 has none.
#if __has_include(<ATen/core/Dimname.h>)
  void set_output_raw_strided(int64_t /*output_idx*/, at::IntArrayRef sizes,
                              at::IntArrayRef strides, at::TensorOptions options,
                              at::DimnameList /*names*/) override {
    setOutput(sizes, strides, options);
  }
#else
  void set_output_raw_strided(int64_t /*output_idx*/, at::IntArrayRef sizes,
                              at::IntArrayRef strides, at::TensorOptions options) override {
    setOutput(sizes, strides, options);
  }
#endif

  const at::Tensor& maybe_get_output(int64_t /*output_idx*/) override { return out_; }

 private:
  void setOutput(at::IntArrayRef sizes, at::IntArrayRef strides, at::TensorOptions options) {
    if (!out_.defined()) {
      const auto format = options.memory_format_opt();
      if (like_ != nullptr && strides.empty() &&
          (!format.has_value() || *format == at::MemoryFormat::Contiguous)) {
        out_ = emptyOnDevice(*like_, sizes);  // the common case, without the dispatcher
      } else {
        out_ = strides.empty() ? at::empty(sizes, options)
                               : at::empty_strided(sizes, strides, options);
      }
      return;
    }
    if (at::native::resize_output(out_, sizes)) {
      if (!strides.empty()) {
        out_.as_strided_(sizes, strides);
      } else if (options.memory_format_opt().has_value()) {
        out_.unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
      }
    }
  }

  at::Tensor& out_;
  const at::Tensor* like_;
};

// Refuses, before anything is allocated or resized, what the kernel does not
// take; raises, as PyTorch does, for tensors on different devices.
void checkCatOperands(const char* name, const at::MaterializedITensorListRef& inputs,
                      const at::Tensor& out) {
  if (inputs.empty()) return;  // the meta step raises PyTorch's error
  const at::Tensor& first = inputs[0];
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(t.device() == first.device(),
                "Expected all tensors to be on the same device, but found at least two devices, ",
                first.device(), " and ", t.device(), "!");
    TORCH_CHECK_NOT_IMPLEMENTED(t.scalar_type() == first.scalar_type(), name,
                                ": inputs of different dtypes (", first.scalar_type(), " and ",
                                t.scalar_type(), ") are promoted by the CPU's cat, not on infini");
  }
  checkInfiniTensor(name, "tensors", first);
  if (out.defined()) {
    checkInfiniTensor(name, "out", out);
    checkSameDevice(first, out);
    requireSameDtype(name, first.scalar_type(), out.scalar_type(), "out");
  }
  requireKernel(name, SeamOp::Cat, first.scalar_type());
}

void catInto(const char* name, const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  const at::MaterializedITensorListRef inputs = tensors.materialize();
  checkCatOperands(name, inputs, out);
  CatGeometry geometry(out, inputs.empty() ? nullptr : &inputs[0].get());
  const auto precomputed = geometry.meta(tensors, dim);
  if (out.numel() == 0) return;
  std::vector<TensorRef> refs;
  refs.reserve(inputs.size());
  for (const at::Tensor& t : inputs)
    if (t.numel() > 0) refs.push_back(toRef(t));  // skipped legacy and empty inputs add nothing
  selectedKernelProvider().cat(toRef(out), refs, precomputed.dim, streamOf(out));
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  at::Tensor out;
  catInto("cat", tensors, dim, out);
  return out;
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  catInto("cat.out", tensors, dim, out);
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar shape(m, "aten", "shape", SeamOp::Cat);
  TORCH_INFINI_IMPL_OR_FALLBACK(shape, "cat", cat);
  TORCH_INFINI_IMPL_OR_FALLBACK(shape, "cat.out", cat_out);
}

}  // namespace
}  // namespace torch_infini::ops
