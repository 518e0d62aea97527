// The built-in `nvidia` compiler plug-in (InfiniRT's NVIDIA device type).
// Toolchain: Triton compiles Inductor's Triton kernels to a cubin for the
// device's architecture (through the Python layer's registered compiler,
// triton_compiler.h). Runtime: the CUDA driver API, found at run time
// (cuda_driver.h): cuModuleLoadData, cuModuleGetFunction, and a launch is
// cuLaunchKernel on the infini stream's native handle (a CUstream; NULL is
// the default stream).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "cuda_driver.h"
#include "plugins/builtin_passes.h"
#include "plugins/nvidia/binary_format.h"
#include "torch_infini/compiler/triton_compiler.h"
#include "torch_infini/compiler_plugin.h"

namespace torch_infini::compiler::nvidia {
namespace {

int fail(char* error, size_t error_size, const std::string& message) {
  if (error != nullptr && error_size > 0) std::snprintf(error, error_size, "%s", message.c_str());
  return 1;
}

struct NvKernel {
  CUfunction function = nullptr;
  std::string kinds;  // each argument's type (binary_format.h)
  uint32_t threads = 0;
  uint32_t shared = 0;
};

// The interface's 8-byte slot of argument `i`, as the kernel's parameter
// of kind `kind` takes it: a double slot becomes a float, an int64 slot an
// int32 (the value checked). `storage` keeps the converted value.
bool parameter(char kind, void* slot, uint64_t& storage, void*& out, std::string& error, size_t i) {
  switch (kind) {
    case 'f': {
      double value;
      std::memcpy(&value, slot, sizeof value);
      const float narrowed = static_cast<float>(value);
      std::memcpy(&storage, &narrowed, sizeof narrowed);
      out = &storage;
      return true;
    }
    case 'i':
    case 'u': {
      int64_t value;
      std::memcpy(&value, slot, sizeof value);
      const bool fits = kind == 'i' ? value >= INT32_MIN && value <= INT32_MAX
                                    : value >= 0 && value <= static_cast<int64_t>(UINT32_MAX);
      if (!fits) {
        error = "argument " + std::to_string(i) + " (" + std::to_string(value) +
                ") does not fit the kernel's 32-bit parameter";
        return false;
      }
      const uint32_t narrowed = static_cast<uint32_t>(value);
      std::memcpy(&storage, &narrowed, sizeof narrowed);
      out = &storage;
      return true;
    }
    default:  // 'p', 'l', 'L', 'd': the slot as it is
      out = slot;
      return true;
  }
}

struct NvModule {
  CUmodule module = nullptr;
  Binary binary;  // name and launch parameters (the cubin view is not kept)
  std::unique_ptr<NvKernel> kernel;
};

int compile(void* /*context*/, const char* source, const char* options, TorchInfiniBinary* binary,
            char* error, size_t error_size) {
  const TritonCompiler compiler = tritonCompiler();
  if (!compiler)
    return fail(error, error_size,
                "Triton kernels are compiled by Python's triton package, and this process "
                "registered none (torch_infini registers it when torch.compile runs)");
  std::string compiled;
  try {
    compiled = compiler(source, options);
  } catch (const std::exception& e) {
    return fail(error, error_size, e.what());
  }
  Binary parsed;
  std::string why;
  if (!parse(compiled.data(), compiled.size(), parsed, why))
    return fail(error, error_size, "the Triton compiler returned " + why);
  binary->data = std::malloc(compiled.size());
  if (binary->data == nullptr) return fail(error, error_size, "out of memory");
  std::memcpy(binary->data, compiled.data(), compiled.size());
  binary->size = compiled.size();
  return 0;
}

void freeBinary(void* /*context*/, TorchInfiniBinary* binary) {
  std::free(binary->data);
  binary->data = nullptr;
  binary->size = 0;
}

const char* runtimeSource(void* /*context*/) { return ""; }  // Triton kernels include nothing

int moduleLoad(void* /*context*/, const void* data, size_t size, void** module, char* error,
               size_t error_size) {
  auto loaded = std::make_unique<NvModule>();
  std::string why;
  if (!parse(data, size, loaded->binary, why)) return fail(error, error_size, why);
  const CudaDriver* driver = cudaDriver(why);
  if (driver == nullptr) return fail(error, error_size, why);
  CUcontext current = nullptr;
  if (const CUresult s = driver->cuCtxGetCurrent(&current); s != kCudaSuccess)
    return fail(error, error_size, driver->describe("cuCtxGetCurrent", s));
  if (current == nullptr)
    return fail(error, error_size,
                "no CUDA context is current on this thread (the infini device sets one)");
  if (const CUresult s = driver->cuModuleLoadData(&loaded->module, loaded->binary.cubin.data());
      s != kCudaSuccess)
    return fail(error, error_size, driver->describe("cuModuleLoadData", s));
  loaded->binary.cubin = {};
  *module = loaded.release();
  return 0;
}

int moduleUnload(void* /*context*/, void* module, char* error, size_t error_size) {
  std::unique_ptr<NvModule> owned(static_cast<NvModule*>(module));
  std::string why;
  const CudaDriver* driver = cudaDriver(why);
  if (driver == nullptr) return fail(error, error_size, why);
  if (const CUresult s = driver->cuModuleUnload(owned->module); s != kCudaSuccess)
    return fail(error, error_size, driver->describe("cuModuleUnload", s));
  return 0;
}

int kernelAddress(void* /*context*/, void* module, const char* name, void** function,
                  size_t* num_args, char* error, size_t error_size) {
  auto* loaded = static_cast<NvModule*>(module);
  const Binary& binary = loaded->binary;
  if (binary.name != name)
    return fail(error, error_size,
                std::string("the module holds kernel '") + binary.name + "', not '" + name + "'");
  if (!loaded->kernel) {
    std::string why;
    const CudaDriver* driver = cudaDriver(why);
    if (driver == nullptr) return fail(error, error_size, why);
    auto kernel = std::make_unique<NvKernel>();
    if (const CUresult s = driver->cuModuleGetFunction(&kernel->function, loaded->module, name);
        s != kCudaSuccess)
      return fail(error, error_size, driver->describe("cuModuleGetFunction", s));
    // Above 48 KiB a kernel must opt in to its dynamic shared memory.
    if (binary.shared > 48 * 1024) {
      if (const CUresult s = driver->cuFuncSetAttribute(
              kernel->function, kMaxDynamicSharedSizeBytes, static_cast<int>(binary.shared));
          s != kCudaSuccess)
        return fail(error, error_size, driver->describe("cuFuncSetAttribute", s));
    }
    kernel->kinds = binary.kinds;
    kernel->threads = binary.threads;
    kernel->shared = binary.shared;
    loaded->kernel = std::move(kernel);
  }
  *function = loaded->kernel.get();
  *num_args = loaded->kernel->kinds.size();
  return 0;
}

int launchKernel(void* /*context*/, void* function, void** args, size_t num_args,
                 const uint32_t grid[3], const uint32_t block[3], size_t shared_memory,
                 void* stream, char* error, size_t error_size) {
  const auto* kernel = static_cast<const NvKernel*>(function);
  if (num_args != kernel->kinds.size())
    return fail(error, error_size,
                "the kernel takes " + std::to_string(kernel->kinds.size()) + " arguments, got " +
                    std::to_string(num_args));
  // A Triton kernel's block is its warps; the caller's block and shared
  // memory (CINN's launch shape) may only restate them.
  const bool default_block = block[0] == 1 && block[1] == 1 && block[2] == 1;
  if (!default_block && (block[0] != kernel->threads || block[1] != 1 || block[2] != 1))
    return fail(error, error_size,
                "the kernel runs " + std::to_string(kernel->threads) +
                    " threads per block (its warps), not the block asked for");
  if (shared_memory > kernel->shared)
    return fail(error, error_size,
                "the kernel was compiled for " + std::to_string(kernel->shared) +
                    " bytes of shared memory, " + std::to_string(shared_memory) + " asked");
  std::string why;
  const CudaDriver* driver = cudaDriver(why);
  if (driver == nullptr) return fail(error, error_size, why);
  // Triton's scratch pointers: NULL (kernels needing scratch are refused
  // when compiled).
  void* scratch[kScratchParams] = {nullptr, nullptr};
  std::vector<uint64_t> converted(num_args);
  std::vector<void*> params(num_args);
  for (size_t i = 0; i < num_args; ++i)
    if (!parameter(kernel->kinds[i], args[i], converted[i], params[i], why, i))
      return fail(error, error_size, why);
  for (void*& pointer : scratch) params.push_back(&pointer);
  if (const CUresult s = driver->cuLaunchKernel(
          kernel->function, grid[0], grid[1], grid[2], kernel->threads, 1, 1, kernel->shared,
          static_cast<CUstream>(stream), params.data(), nullptr);
      s != kCudaSuccess)
    return fail(error, error_size, driver->describe("cuLaunchKernel", s));
  return 0;
}

int passPipeline(void* /*context*/, const char* const** names, size_t* count, char* /*error*/,
                 size_t /*error_size*/) {
  *names = kBuiltinPassPipeline;
  *count = std::size(kBuiltinPassPipeline);
  return 0;
}

void destroy(void* /*context*/) {}

}  // namespace
}  // namespace torch_infini::compiler::nvidia

extern "C" int torch_infini_nvidia_compiler_plugin_init(TorchInfiniCompilerPlugin* table,
                                                        size_t table_size, char* error,
                                                        size_t error_size) {
  namespace nv = torch_infini::compiler::nvidia;
  if (table_size < sizeof(TorchInfiniCompilerPlugin))
    return nv::fail(error, error_size,
                    "the table storage (" + std::to_string(table_size) +
                        " bytes) is smaller than " +
                        std::to_string(sizeof(TorchInfiniCompilerPlugin)));
  TorchInfiniCompilerPlugin t;
  std::memset(&t, 0, sizeof t);
  t.size = sizeof(TorchInfiniCompilerPlugin);
  t.abi_version = TORCH_INFINI_COMPILER_PLUGIN_ABI_VERSION;
  t.name = "nvidia";
  t.device_type = "nvidia";
  t.source_language = TORCH_INFINI_SOURCE_TRITON;
  t.context = nullptr;
  t.compile = &nv::compile;
  t.free_binary = &nv::freeBinary;
  t.get_runtime_source = &nv::runtimeSource;
  t.module_load = &nv::moduleLoad;
  t.module_unload = &nv::moduleUnload;
  t.get_kernel_address = &nv::kernelAddress;
  t.launch_kernel = &nv::launchKernel;
  t.query_pass_pipeline = &nv::passPipeline;
  t.destroy = &nv::destroy;
  *table = t;
  return 0;
}
