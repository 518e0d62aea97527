// What both ways of running a fallback call on the CPU (fallback/aliased_memory.cpp:
// in place; fallback/staged.cpp: through pinned copies) do with its
// arguments and returns: only strided tensors, one device, every tensor
// argument made a CPU tensor, every return made the call's.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty.h>
#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <unordered_map>

#include "fallback/device_checks.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini::ops {

// infini tensors are strided: sparse and other layouts are refused clearly.
inline void requireStrided(const at::Tensor& t) {
  TORCH_CHECK_NOT_IMPLEMENTED(t.layout() == c10::kStrided,
                              "infini supports strided (dense) tensors only, not the ", t.layout(),
                              " layout");
}

// The one infini device a call's arguments are on.
class CallDevice {
 public:
  void note(c10::Device device) {
    // "infini" without an index is the current device, as for CUDA.
    if (!device.has_index()) device = c10::Device(device.type(), currentDevice());
    if (!device_) {
      device_ = device;
      return;
    }
    TORCH_CHECK(*device_ == device,
                "Expected all tensors to be on the same device, but found at least two devices, ",
                *device_, " and ", device, "!");
  }
  const std::optional<c10::Device>& get() const { return device_; }

 private:
  std::optional<c10::Device> device_;
};

// A result the CPU kernel allocated (no argument's memory), copied to
// `device` with the CPU's geometry. A dense result at offset 0 over its
// whole storage copies as `to()` copies it (same strides); any other (a
// view with gaps, such as lstsq's solution, or an expanded result) brings
// its whole storage, so sizes, strides and storage offset stay the CPU's
// (`to()` would make it contiguous). Adds the bytes copied to *bytes_copied.
inline at::Tensor resultToDevice(const at::Tensor& t, c10::Device device, int64_t* bytes_copied) {
  const size_t nbytes = t.storage().nbytes();
  if (t.is_non_overlapping_and_dense() && t.storage_offset() == 0 &&
      nbytes == static_cast<size_t>(t.numel()) * t.element_size()) {
    *bytes_copied += static_cast<int64_t>(nbytes);
    return t.to(device);
  }
  const int64_t n = static_cast<int64_t>(nbytes);
  const at::Tensor cpu_bytes =
      at::empty({0}, t.options().dtype(at::kByte)).set_(t.storage(), 0, {n}, {1});
  const at::Tensor bytes = cpu_bytes.to(device);
  *bytes_copied += n;
  return at::empty({0}, t.options().device(device))
      .set_(bytes.storage(), t.storage_offset(), t.sizes(), t.strides());
}

// For each return of `schema`: the argument it aliases and writes (in-place
// self, out=), or -1. Computed once per schema: comparing alias sets costs
// more than the rest of a small call.
inline const c10::SmallVector<int, 2>& mutatedArguments(const c10::FunctionSchema& schema) {
  thread_local std::unordered_map<const c10::FunctionSchema*, c10::SmallVector<int, 2>> known;
  auto [it, fresh] = known.try_emplace(&schema);
  if (fresh) {
    for (const c10::Argument& ret : schema.returns()) {
      int mutated = -1;
      const c10::AliasInfo* info = ret.alias_info();
      for (size_t i = 0; info != nullptr && info->isWrite() && i < schema.arguments().size(); ++i) {
        const c10::AliasInfo* arg = schema.arguments()[i].alias_info();
        if (arg != nullptr && arg->isWrite() && arg->beforeSets() == info->beforeSets()) {
          mutated = static_cast<int>(i);
          break;
        }
      }
      it->second.push_back(mutated);
    }
  }
  return it->second;
}

// The arguments of a boxed call, as they were before it ran.
using Arguments = c10::SmallVector<c10::IValue, 8>;

inline Arguments argumentsOf(const torch::jit::Stack& stack, size_t begin) {
  return Arguments(stack.begin() + static_cast<std::ptrdiff_t>(begin), stack.end());
}

// Calls fn(tensor) for each tensor an argument holds.
template <typename F>
void forEachTensor(const c10::IValue& value, F fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList().vec()) fn(t);
  } else if (value.isOptionalTensorList()) {
    for (const auto& t : value.toOptionalTensorList().vec())
      if (t.has_value()) fn(*t);
  }
}

// TensorIterator's operands of a call of `schema`: its Tensor and Tensor?
// arguments but out= ones (an in-place self is one).
inline int tensorOperands(const c10::FunctionSchema& schema) {
  int operands = 0;
  for (const c10::Argument& argument : schema.arguments()) {
    const bool out = argument.kwarg_only() && argument.alias_info() != nullptr &&
                     argument.alias_info()->isWrite();
    const c10::TypePtr& type = argument.type();
    const bool tensor =
        type->kind() == c10::TypeKind::TensorType ||
        (type->kind() == c10::TypeKind::OptionalType &&
         type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType);
    if (!out && tensor) ++operands;
  }
  return operands;
}

// CUDA's device rules for a call with infini tensors, which the CPU kernel
// cannot apply once every argument is a CPU tensor (`check`: the operator's,
// device_checks.h). A written argument (out=, in-place self) on the CPU is
// refused: the result would land there. Otherwise a CPU tensor is taken
// only where CUDA takes one: a 0-dim tensor read as a scalar (TensorIterator
// operators with two or more tensor operands: at most one; operators
// without a check of their own: any), and CPU `indices` of an index operator
// (which CUDA's index kernels move to the device). ExactSame operators take
// none among their positional arguments, as CUDA's generated wrappers check.
// Tensors on two infini devices are CallDevice's to refuse.
//
// `operands`: tensorOperands(schema), computed once per operator.
inline void checkArgumentDevices(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                                 size_t begin, DeviceCheck check, int operands) {
  std::optional<c10::Device> infini;
  for (size_t i = begin; i < stack.size() && !infini; ++i) {
    forEachTensor(stack[i], [&](const at::Tensor& t) {
      if (!infini && t.defined() && t.device().type() == c10::DeviceType::PrivateUse1)
        infini = t.device();
    });
  }
  if (!infini) return;  // a factory, or CPU tensors only
  int cpu_scalars = 0;
  for (size_t i = begin; i < stack.size(); ++i) {
    const c10::Argument& argument = schema.arguments()[i - begin];
    const c10::AliasInfo* alias = argument.alias_info();
    const bool written = alias != nullptr && alias->isWrite();
    const bool exact = check == DeviceCheck::kExactSame && !argument.kwarg_only();
    const bool indices = stack[i].isOptionalTensorList() && argument.name() == "indices";
    forEachTensor(stack[i], [&](const at::Tensor& t) {
      if (!t.defined() || t.device().type() == c10::DeviceType::PrivateUse1) return;
      const bool cpu = t.device().is_cpu();
      if (!written && !exact && cpu && indices) return;
      if (!written && !exact && cpu && t.dim() == 0) {
        if (check != DeviceCheck::kTensorIterator) return;
        if (operands > 1) {
          TORCH_CHECK(++cpu_scalars <= 1,
                      "Trying to pass too many CPU scalars to non-CPU kernel! (",
                      schema.operator_name(), " on ", *infini, ")");
          return;
        }
      }
      TORCH_CHECK(false,
                  "Expected all tensors to be on the same device, but found at least two devices, ",
                  *infini, " and ", t.device(), "! (", written ? "output" : "argument", " '",
                  argument.name(), "' of ", schema.operator_name(), ")");
    });
  }
}

// `value` with fn(tensor) in place of each tensor it holds (alone, in a
// list, optional in a list); any other value as it is.
template <typename F>
c10::IValue mapTensors(c10::IValue value, F fn) {
  if (value.isTensor()) {
    // Moved out: the reference passes to fn (no count change).
    return fn(std::move(value).toTensor());
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : value.toTensorList().vec()) list.push_back(fn(t));
    return list;
  }
  if (value.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const auto& t : value.toOptionalTensorList().vec())
      list.push_back(t.has_value() ? std::optional<at::Tensor>(fn(*t)) : t);
    return list;
  }
  return value;
}

// Every argument from stack[begin] on, made ready for the CPU kernel: each
// tensor (alone, in a list, optional in a list) becomes to_cpu(tensor), and
// an infini device argument (a factory's) becomes the CPU after
// note_device(device).
template <typename ToCpu, typename NoteDevice>
void argumentsToCpu(torch::jit::Stack* stack, size_t begin, ToCpu to_cpu, NoteDevice note_device) {
  for (size_t i = begin; i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isDevice() && value.toDevice().type() == c10::DeviceType::PrivateUse1) {
      note_device(value.toDevice());  // compute on the CPU
      value = c10::Device(c10::kCPU);
    } else {
      value = mapTensors(std::move(value), to_cpu);
    }
  }
}

// Whether argument `index` of `schema` is written by the call.
inline bool writes(const c10::FunctionSchema& schema, size_t index) {
  const c10::AliasInfo* info = schema.arguments()[index].alias_info();
  return info != nullptr && info->isWrite();
}

// Whether the call writes any argument (in-place, out=): not functional.
inline bool writesAny(const c10::FunctionSchema& schema) {
  for (size_t i = 0; i < schema.arguments().size(); ++i)
    if (writes(schema, i)) return true;
  return false;
}

// A quantized result (quantize_per_tensor, ...) has no infini form: infini
// tensors are strided and dense (see the QuantizedPrivateUse1 refusal in
// cpu_fallback.cpp). Refused, never returned as an infini tensor of a
// quantized dtype that nothing can read back.
inline void refuseQuantizedResult(const c10::FunctionSchema& schema, const at::Tensor& t) {
  TORCH_CHECK_NOT_IMPLEMENTED(!t.defined() || !t.is_quantized(), "'", schema.operator_name(),
                              "' returns a quantized tensor (", t.scalar_type(),
                              "); infini supports strided (dense) tensors only, not quantized "
                              "tensors (backend '",
                              runtime::selectedRuntime().name(), "'). Quantize on the CPU.");
}

// The CPU kernel's returns, made the call's: an in-place or out= return is
// the argument it was given; any other tensor (alone or in a list) becomes
// to_infini(tensor). A quantized one is refused.
template <typename ToInfini>
void returnsToInfini(const c10::FunctionSchema& schema, torch::jit::Stack* stack,
                     const Arguments& original, ToInfini to_infini) {
  // A call that writes no argument returns none (and skips the lookup).
  const c10::SmallVector<int, 2>* mutated_arguments =
      writesAny(schema) ? &mutatedArguments(schema) : nullptr;
  const size_t num_returns = schema.returns().size();
  const size_t ret_begin = stack->size() - num_returns;
  for (size_t r = 0; r < num_returns; ++r) {
    c10::IValue& value = (*stack)[ret_begin + r];
    if (mutated_arguments != nullptr && (*mutated_arguments)[r] >= 0) {
      value = original[static_cast<size_t>((*mutated_arguments)[r])];
    } else if (value.isTensor()) {
      refuseQuantizedResult(schema, value.toTensor());
      // Moved out, so the CPU result is held only where the kernel left it.
      value = to_infini(std::move(value).toTensor());
    } else if (value.isTensorList()) {
      c10::List<at::Tensor> cpu = std::move(value).toTensorList();
      c10::List<at::Tensor> list;
      list.reserve(cpu.size());
      for (size_t i = 0; i < cpu.size(); ++i) {
        at::Tensor t = cpu.extract(i);
        refuseQuantizedResult(schema, t);
        list.push_back(to_infini(std::move(t)));
      }
      value = list;
    }
  }
}

}  // namespace torch_infini::ops
