// Finds the CUDA driver API functions the `nvidia` plug-in calls in
// libcuda.so.1 at run time, so nothing links the driver (cuda_driver.h).
#include "cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

namespace torch_infini::compiler::nvidia {
namespace {

template <class F>
bool resolve(void* library, const char* name, F& function, std::string& error) {
  function = reinterpret_cast<F>(dlsym(library, name));
  if (function == nullptr) error = std::string("libcuda.so.1 has no ") + name;
  return function != nullptr;
}

struct Loaded {
  CudaDriver driver{};
  std::string error;
};

Loaded load() {
  Loaded loaded;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    loaded.error = std::string("the CUDA driver (libcuda.so.1) cannot be loaded: ") +
                   (why != nullptr ? why : "unknown error");
    return loaded;
  }
  CudaDriver& d = loaded.driver;
  std::string& e = loaded.error;
  // Never closed: launched kernels may still run.
  if (!resolve(library, "cuInit", d.cuInit, e) ||
      !resolve(library, "cuGetErrorString", d.cuGetErrorString, e) ||
      !resolve(library, "cuCtxGetCurrent", d.cuCtxGetCurrent, e) ||
      !resolve(library, "cuModuleLoadData", d.cuModuleLoadData, e) ||
      !resolve(library, "cuModuleUnload", d.cuModuleUnload, e) ||
      !resolve(library, "cuModuleGetFunction", d.cuModuleGetFunction, e) ||
      !resolve(library, "cuFuncSetAttribute", d.cuFuncSetAttribute, e) ||
      !resolve(library, "cuLaunchKernel", d.cuLaunchKernel, e))
    return loaded;
  if (const CUresult status = d.cuInit(0); status != kCudaSuccess) e = d.describe("cuInit", status);
  return loaded;
}

}  // namespace

std::string CudaDriver::describe(const char* call, CUresult status) const {
  const char* text = nullptr;
  if (cuGetErrorString == nullptr || cuGetErrorString(status, &text) != kCudaSuccess ||
      text == nullptr)
    text = "unknown error";
  return std::string(call) + " failed: " + text + " (error " + std::to_string(status) + ")";
}

const CudaDriver* cudaDriver(std::string& error) {
  static const Loaded loaded = load();
  if (!loaded.error.empty()) {
    error = loaded.error;
    return nullptr;
  }
  return &loaded.driver;
}

}  // namespace torch_infini::compiler::nvidia
