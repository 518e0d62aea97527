// A fused operator's kernels, registered from one struct. Its schema is
// written once, in fused/library.cpp; the struct names the operator and
// gives a kernel per dispatch key, and registerFused() registers each under
// its key (the C++ signature is the CPU kernel's):
//
//   struct SiluAndMul {
//     static constexpr const char* name = "infini::silu_and_mul";
//     static constexpr auto cpu = &silu_and_mul_cpu;    // the reference
//     static constexpr auto meta = &silu_and_mul_meta;  // shapes only
//     static constexpr auto autograd = &silu_and_mul_autograd;
//     // optional: the infini kernel through the kernel seam (its refusals run
//     // in the CPU fallback); without it, infini tensors take the fallback.
//     static constexpr auto infini = &silu_and_mul_infini;
//     static constexpr SeamOp seam = SeamOp::SiluAndMul;
//   };
//   TORCH_LIBRARY_FRAGMENT(infini, m) { registerFused<SiluAndMul>(m); }
//
// An operator without a gradient says so (`no_gradient = true`: autograd
// falls through) rather than leaving out `autograd`, which does not compile:
// a gradient cannot go missing by omission. An infini kernel that is not a
// seam operator's names its `family` and which dtypes it `accepts` instead.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <string_view>
#include <type_traits>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "fallback/refusal.h"

namespace torch_infini::ops {

// The fused operator's C++ signature: its CPU kernel's.
template <class Op>
using FusedSignature = std::remove_pointer_t<std::remove_cv_t<decltype(Op::cpu)>>;

// What ATen's at::_ops structs give the CPU-fallback helper.
template <class Op>
struct FusedDescriptor {
  using schema = FusedSignature<Op>;
  static constexpr const char* name = Op::name;
  static constexpr const char* overload_name = "";
};

// The operator called below autograd (from its autograd Function's forward).
template <class Op, class... Args>
decltype(auto) callBelowAutograd(Args&&... args) {
  at::AutoDispatchBelowADInplaceOrView guard;
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow(Op::name, "")
                                 .template typed<FusedSignature<Op>>();
  return handle.call(std::forward<Args>(args)...);
}

// Whether the schema of `name` writes one of its arguments (Tensor(a!)).
inline bool writesAnArgument(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").schema().is_mutable();
}

// A fused operator's argument that is not a tensor has no tangent (the
// tensors' overloads are common/bridge.h's).
template <class T>
bool hasTangent(const T& /*not a tensor*/) {
  return false;
}

// The Autograd kernel: the operator's autograd Function where grad mode is
// on; with it off (inference, and compiled graphs, whose forward AOTAutograd
// runs without grad), straight below autograd, without building the
// Function's context. Only for operators whose schema writes none of their
// arguments: an in-place operator's autograd kernel also bumps the version
// of what it wrote, with grad mode off too.
template <class Op, class Signature = FusedSignature<Op>>
struct AutogradEntry;
template <class Op, class R, class... Args>
struct AutogradEntry<Op, R(Args...)> {
  static R call(Args... args) {
    // No forward derivatives: a dual operand is refused, never passed
    // through without its tangent (grad mode says nothing about forward mode).
    TORCH_CHECK_NOT_IMPLEMENTED(!(hasTangent(args) || ...), Op::name,
                                ": forward-mode AD (an operand with a tangent, "
                                "torch.autograd.forward_ad) is not supported: the operator has "
                                "no forward derivative");
    static const bool writes = writesAnArgument(Op::name);
    if (!writes && !at::GradMode::is_enabled())
      return callBelowAutograd<Op>(std::forward<Args>(args)...);
    return Op::autograd(std::forward<Args>(args)...);
  }
};

template <class Op>
void registerFused(torch::Library& m) {
  constexpr std::string_view kPrefix = "infini::";
  static_assert(std::string_view(Op::name).starts_with(kPrefix),
                "a fused operator's name is infini::<name>");
  m.impl(Op::name, torch::dispatch(c10::DispatchKey::CPU, TORCH_FN(Op::cpu)));
  m.impl(Op::name, torch::dispatch(c10::DispatchKey::Meta, TORCH_FN(Op::meta)));
  if constexpr (requires { Op::no_gradient; }) {
    static_assert(Op::no_gradient && !requires { Op::autograd; });
    m.impl(Op::name,
           torch::dispatch(c10::DispatchKey::Autograd, torch::CppFunction::makeFallthrough()));
  } else {
    m.impl(Op::name,
           torch::dispatch(c10::DispatchKey::Autograd, TORCH_FN(AutogradEntry<Op>::call)));
  }
  if constexpr (requires { Op::infini; }) {
    const char* unqualified = Op::name + kPrefix.size();
    if constexpr (requires { Op::seam; }) {
      BridgeRegistrar(m, "infini", "fused", Op::seam)
          .impl(unqualified,
                torch::dispatch(c10::DispatchKey::PrivateUse1,
                                TORCH_FN((OrCpuFallback<FusedDescriptor<Op>, Op::infini>::call))));
    } else {
      BridgeRegistrar(m, "infini", Op::family, std::nullopt, Op::accepts)
          .impl(unqualified, torch::dispatch(c10::DispatchKey::PrivateUse1, TORCH_FN(Op::infini)));
    }
  }
}

}  // namespace torch_infini::ops
