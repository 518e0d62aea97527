// GradScaler's kernels (torch.amp.GradScaler("infini")):
// _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_.
//
// They run in stream order on the device, like CUDA's: found_inf and the
// scale stay on the device, and only GradScaler's own found_inf.item() in
// step() synchronizes. Arguments are checked here, on the calling thread,
// with the messages CUDA's kernels give (device names aside). A provider
// without the kernels (InfiniOps has none) refuses, and the call runs in the
// CPU fallback under its policy.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <vector>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "fallback/refusal.h"

namespace torch_infini::ops {
namespace {

void checkOneElement(const at::Tensor& t, const char* name, c10::ScalarType dtype,
                     const char* dtype_name) {
  TORCH_CHECK(isInfini(t), name, " must be an infini tensor.");
  TORCH_CHECK(t.numel() == 1, name, " must be a 1-element tensor.");
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype_name, " tensor.");
}

void _amp_foreach_non_finite_check_and_unscale_(at::TensorList self, at::Tensor& found_inf,
                                                const at::Tensor& inv_scale) {
  if (self.empty()) return;
  checkOneElement(inv_scale, "inv_scale", at::kFloat, "a float");
  checkOneElement(found_inf, "found_inf", at::kFloat, "a float");
  checkSameDevice(found_inf, inv_scale);
  std::vector<TensorRef> grads;
  grads.reserve(self.size());
  for (const at::Tensor& t : self) {
    TORCH_CHECK(isInfini(t), "one of scaled_grads was not an infini tensor.");
    TORCH_CHECK(t.layout() == at::kStrided, "one of scaled_grads was not a strided tensor.");
    checkSameDevice(t, found_inf);
    requireKernel("_amp_foreach_non_finite_check_and_unscale_", SeamOp::AmpUnscale,
                  t.scalar_type());
    if (t.numel() > 0) grads.push_back(toRef(t));
  }
  if (grads.empty()) return;
  selectedKernelProvider().ampUnscale(grads, toRef(found_inf), toRef(inv_scale),
                                      streamOf(found_inf));
}

at::Tensor& _amp_update_scale_(at::Tensor& self, at::Tensor& growth_tracker,
                               const at::Tensor& found_inf, double scale_growth_factor,
                               double scale_backoff_factor, int64_t growth_interval) {
  checkOneElement(growth_tracker, "growth_tracker", at::kInt, "an int");
  checkOneElement(self, "current_scale", at::kFloat, "a float");
  checkOneElement(found_inf, "found_inf", at::kFloat, "a float");
  checkSameDevice(self, growth_tracker);
  checkSameDevice(self, found_inf);
  requireKernel("_amp_update_scale_", SeamOp::AmpUpdateScale, at::kFloat);
  selectedKernelProvider().ampUpdateScale(toRef(self), toRef(growth_tracker), toRef(found_inf),
                                          scale_growth_factor, scale_backoff_factor,
                                          growth_interval, streamOf(self));
  return self;
}

// In stream order: the gradients' floating dtypes; the scale is float32.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar unscale(m, "aten", "amp", SeamOp::AmpUnscale);
  TORCH_INFINI_IMPL_OR_FALLBACK(unscale, "_amp_foreach_non_finite_check_and_unscale_",
                                _amp_foreach_non_finite_check_and_unscale_);
  BridgeRegistrar update(m, "aten", "amp", SeamOp::AmpUpdateScale);
  TORCH_INFINI_IMPL_OR_FALLBACK(update, "_amp_update_scale_", _amp_update_scale_);
}

}  // namespace
}  // namespace torch_infini::ops
