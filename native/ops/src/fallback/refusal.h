// Native kernels that refuse a call (a dtype, shape or argument they do not
// serve) hand it to the CPU fallback, under its policy, with the refusal as
// the reason. Registrations wrap such kernels, named like at::_ops' structs:
//   TORCH_INFINI_IMPL_OR_FALLBACK(m, "add.Tensor", add_Tensor);
// A kernel refuses with NotImplementedError before it allocates an output
// or enqueues work, so the fallback sees the arguments untouched.
#pragma once

#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

namespace torch_infini::ops {

// The boxed fallback for a call a native kernel refused: `refusal` (its
// message) is the reason given in warnings and, with the fallback off, the
// NotImplementedError raised.
void refusedKernelFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The boxed fallback for an operator without an infini kernel (what
// operators routed to it run; fallback/convolution.cpp wraps it).
void runInCpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The refusal the next refusedKernelFallback call on this thread reports.
void setPendingRefusal(std::string refusal);
// The boxed route of a foreach operator the device does not run (category 5
// of cpu_fallback.cpp): whole in the fallback where every tensor is on one
// infini device (a pending refusal is its reason), else the per-tensor loop
// as on CUDA.
void foreachFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// The operators fallback/layouts.cpp registers with its own wrapper around
// the fallback ("aten::pixel_shuffle", sorted): the routed lists skip them.
const std::vector<std::string>& layoutWrappedOperators();
bool isLayoutWrapped(const std::string& qualified_name);

// Dtypes CUDA serves and the CPU kernel refuses, for one operator
// (cuda_dtypes.cpp): its rule by base name ("aten::histc"), or nullptr.
struct CudaDtypes;
const CudaDtypes* cudaDtypesOf(const std::string& base_name);
// Runs the call as CUDA computes it where its dtype is one `rule` covers:
// false (the stack untouched) where it is not.
bool runInCudaDtype(const CudaDtypes& rule, const c10::OperatorHandle& op,
                    torch::jit::Stack* stack);

template <class SeamOp, auto Kernel>
struct OrCpuFallback;

template <class SeamOp, class R, class... Args, R (*Kernel)(Args...)>
struct OrCpuFallback<SeamOp, Kernel> {
  static R call(Args... args) {
    try {
      return Kernel(args...);
    } catch (const c10::NotImplementedError& refusal) {
      setPendingRefusal(refusal.what_without_backtrace());
    }
    return at::native::call_fallback_fn<&refusedKernelFallback, SeamOp>::call(args...);
  }
};

}  // namespace torch_infini::ops

// Registers `kernel` (a function named like its at::_ops struct) for
// `schema`, its refusals running in the CPU fallback.
#define TORCH_INFINI_IMPL_OR_FALLBACK(m, schema, kernel) \
  (m).impl(schema, TORCH_FN((::torch_infini::ops::OrCpuFallback<at::_ops::kernel, &kernel>::call)))
