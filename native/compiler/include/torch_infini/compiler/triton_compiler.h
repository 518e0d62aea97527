// The Triton compiler the built-in `nvidia` plug-in compiles with: Triton
// is a Python package, so the Python layer registers it (torch_infini/
// _triton.py, through _C) and the plug-in calls it for each kernel. A
// process without Python (a LibTorch application) has none: the plug-in's
// compile then fails, saying so.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace torch_infini::compiler {

// (Triton source, options) -> the binary (plugins/nvidia/binary_format.h);
// throws with the compiler's message.
using TritonCompiler = std::function<std::string(std::string_view, std::string_view)>;

void setTritonCompiler(TritonCompiler compiler);
// A copy (empty where none is registered), safe against a concurrent set.
TritonCompiler tritonCompiler();

}  // namespace torch_infini::compiler
