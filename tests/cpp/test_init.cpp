// torch_infini::init() in a LibTorch application: besides the backend, it
// registers the CPU fallback's routes (operators PyTorch would otherwise
// decompose or serve per form, sent to the fallback whole), which a static
// initializer could not (they read every infini kernel's registration).
// Before init() the routes are absent; after it they are there, once.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKey.h>

#include <string>

#include "check.h"
#include "torch_infini/ops/cpu_fallback.h"
#include "torch_infini/torch_infini.h"

namespace {

bool hasInfiniKernel(const char* name, const char* overload) {
  auto op = c10::Dispatcher::singleton().findSchema({name, overload});
  CHECK(op.has_value());
  return op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1);
}

void initRegistersTheFallbackRoutes() {
  const auto& routed = torch_infini::ops::fallbackRoutedOperators();
  CHECK(!routed.empty());
  // atan2's forms and native_layer_norm are routed; mm has an infini
  // kernel of its own.
  CHECK(!hasInfiniKernel("aten::atan2", ""));
  CHECK(!hasInfiniKernel("aten::native_layer_norm", ""));
  CHECK(hasInfiniKernel("aten::mm", ""));
  torch_infini::init("host");
  CHECK(hasInfiniKernel("aten::atan2", ""));
  CHECK(hasInfiniKernel("aten::native_layer_norm", ""));
  torch_infini::init(
      "host");  // again: registered once (a second registration would override with a warning)
  CHECK(hasInfiniKernel("aten::atan2", ""));
}

}  // namespace

int main() {
  return runTests({
      {"init() registers the CPU fallback's routes, once", initRegistersTheFallbackRoutes},
  });
}
