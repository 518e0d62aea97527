// The in-place foreach operators (aten::_foreach_<name>_: what PyTorch's
// optimizers step with, foreach=True being their default on infini as on
// CUDA) as infini kernels: the provider's Foreach kernel runs the call whole,
// on the device, in stream order (on `host`, the CPU's own loop over the
// device memory; in discrete mode nothing crosses the host boundary, where
// the fallback would stage every list both ways).
//
// A call the kernel does not take as it is goes to the fallback's foreach
// route (fallback/refusal.h) with the reason: a provider without foreach
// kernels (InfiniOps has none), lists of several dtypes, devices or shapes
// (the CPU's loop promotes and broadcasts per tensor), a written tensor
// whose elements share memory or that partly overlaps another argument, a
// tensor argument besides the lists, a complex scalar, an empty list. Those are the
// calls whose errors, broadcasting or type promotion the CPU's loop decides:
// the fallback runs it on the calling thread, so they raise or behave there
// as on the CPU, never later on a stream.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "fallback/refusal.h"

namespace torch_infini::ops {
namespace {

// aten::_foreach_<name>_: in place on its first list, returning nothing,
// with a kernel for every backend (the CPU's loop).
bool isInPlaceForeach(const c10::OperatorHandle& op) {
  if (!op.hasSchema()) return false;
  const c10::FunctionSchema& schema = op.schema();
  const std::string& name = schema.name();
  return name.rfind("aten::_foreach_", 0) == 0 && name.back() == '_' && schema.returns().empty() &&
         !schema.arguments().empty() &&
         schema.arguments()[0].type()->kind() == c10::TypeKind::ListType &&
         op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
}

// Why a value among the arguments (a scalar, scalars, a flag) keeps the call
// from the device's kernel; null where it does not.
const char* valueRefusal(const c10::IValue& v) {
  if (v.isTensor()) return "a tensor argument besides the lists";
  if (v.isComplexDouble()) return "a complex scalar";
  if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) return "a tensor argument besides the lists";
      if (e.isComplexDouble()) return "a complex scalar";
    }
  }
  return nullptr;
}

// The call as the provider's kernel takes it: the arguments with each
// tensor list replaced by an empty one, and the lists' views.
struct DeviceCall {
  std::vector<c10::IValue> arguments;
  std::vector<std::vector<TensorRef>> lists;
  std::vector<std::vector<at::Tensor>> tensors;  // the lists, for the shape and overlap checks
  std::optional<c10::Device> device;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
};

// Why the provider's kernel cannot run the call as the CPU's loop would;
// empty where it can (`call` then holds the call).
std::string refusal(const c10::OperatorHandle& op, const torch::jit::Stack& stack,
                    DeviceCall& call) {
  const size_t count = op.schema().arguments().size();
  const std::string& name = op.schema().name();
  for (size_t i = stack.size() - count; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (!v.isTensorList()) {
      if (const char* why = valueRefusal(v)) return name + ": " + why;
      call.arguments.push_back(v);
      continue;
    }
    const c10::List<at::Tensor> list = v.toTensorList();
    if (list.empty()) return name + ": an empty tensor list";
    std::vector<TensorRef> refs;
    std::vector<at::Tensor> tensors;
    refs.reserve(list.size());
    tensors.reserve(list.size());
    for (const at::Tensor& t : list) {
      if (!t.defined() || !isInfini(t) || t.layout() != at::kStrided)
        return name + ": a list with a tensor that is not a strided infini tensor";
      if (!call.device) {
        call.device = t.device();
        call.dtype = t.scalar_type();
        // First: where the provider has no foreach kernels (InfiniOps),
        // every call goes to the fallback without the checks below.
        if (!selectedKernelProvider().supports(SeamOp::Foreach, call.dtype))
          return name + ": the " + selectedKernelProvider().name() +
                 " kernel provider has no foreach kernel for " + c10::toString(call.dtype);
      }
      if (t.device() != *call.device) return name + ": lists on several devices";
      if (t.scalar_type() != call.dtype) return name + ": lists of several dtypes";
      if (call.tensors.empty() && at::has_internal_overlap(t) != at::MemOverlap::No)
        return name + ": a written tensor whose elements share memory";
      refs.push_back(toRef(t));
      tensors.push_back(t);
    }
    call.arguments.emplace_back(c10::List<at::Tensor>());
    call.lists.push_back(std::move(refs));
    call.tensors.push_back(std::move(tensors));
  }
  const std::vector<at::Tensor>& written = call.tensors.front();
  for (const std::vector<at::Tensor>& other : call.tensors) {
    if (other.size() != written.size()) return name + ": lists of different lengths";
    for (size_t j = 0; j < written.size(); ++j) {
      if (other[j].sizes() != written[j].sizes())
        return name + ": tensors of different shapes at one index";
      if (&other != &written &&
          at::get_overlap_status(written[j], other[j]) == at::MemOverlapStatus::Partial)
        return name + ": a written tensor partly overlapping another argument";
    }
  }
  return std::string();
}

void foreachInPlace(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  DeviceCall call;
  std::string why = refusal(op, *stack, call);
  if (!why.empty()) {
    setPendingRefusal(std::move(why));
    foreachFallback(op, stack);
    return;
  }
  selectedKernelProvider().foreachInPlace(op, call.arguments, call.lists,
                                          streamOf(call.tensors.front().front()));
  torch::jit::drop(*stack, op.schema().arguments().size());
}

// "_foreach_add_.Scalar": what torch::Library::impl takes.
std::string unqualifiedName(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  std::string unqualified = name.name.substr(std::strlen("aten::"));
  return name.overload_name.empty() ? unqualified : unqualified + "." + name.overload_name;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar registrar(m, "aten", "foreach", SeamOp::Foreach);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& op_name : dispatcher.getAllOpNames()) {
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(op_name);
    if (!op.has_value() || !isInPlaceForeach(*op)) continue;
    registrar.impl(unqualifiedName(*op).c_str(),
                   torch::CppFunction::makeFromBoxedFunction<&foreachInPlace>());
  }
}

}  // namespace
}  // namespace torch_infini::ops
