// Holds the Triton compiler the Python layer registers for the built-in
// `nvidia` plug-in, and says clearly where none is (triton_compiler.h).
#include "torch_infini/compiler/triton_compiler.h"

#include <mutex>
#include <utility>

namespace torch_infini::compiler {
namespace {

std::mutex& lock() {
  static std::mutex m;
  return m;
}

TritonCompiler& registered() {
  static TritonCompiler compiler;
  return compiler;
}

}  // namespace

void setTritonCompiler(TritonCompiler compiler) {
  std::lock_guard<std::mutex> guard(lock());
  registered() = std::move(compiler);
}

TritonCompiler tritonCompiler() {
  std::lock_guard<std::mutex> guard(lock());
  return registered();
}

}  // namespace torch_infini::compiler
