// Every ATen operator without an infini kernel ends here: a clear
// NotImplementedError naming the operator and the backend. torch-infini
// never runs an operator on the CPU behind the user's back.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "torch_infini/runtime/backend.h"

namespace torch_infini::ops {
namespace {

void notImplemented(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  const auto& name = op.schema().operator_name();
  runtime::DeviceRuntime* rt = runtime::tryGet();
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "The operator '", name.name, name.overload_name.empty() ? "" : ".", name.overload_name,
      "' has no infini kernel (backend '",
      rt != nullptr ? rt->name() : std::string("uninitialized"),
      "'). torch-infini does not fall back to the CPU silently; move the tensors to the CPU "
      "explicitly (tensor.cpu()) to run it there.");
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&notImplemented>());
}

}  // namespace
}  // namespace torch_infini::ops
