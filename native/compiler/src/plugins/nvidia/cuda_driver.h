// The few CUDA driver API functions the `nvidia` plug-in calls, found at run
// time in libcuda.so.1 (dlopen): nothing links the driver, so torch-infini
// builds and loads on machines without one. The declarations follow the
// driver API's documented signatures (cuda.h); only opaque handles cross.
#pragma once

#include <string>

namespace torch_infini::compiler::nvidia {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;

constexpr CUresult kCudaSuccess = 0;
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
constexpr int kMaxDynamicSharedSizeBytes = 8;

struct CudaDriver {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuGetErrorString)(CUresult error, const char** text);
  CUresult (*cuCtxGetCurrent)(CUcontext* context);
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuModuleGetFunction)(CUfunction* function, CUmodule module, const char* name);
  CUresult (*cuFuncSetAttribute)(CUfunction function, int attribute, int value);
  CUresult (*cuLaunchKernel)(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                             unsigned block_x, unsigned block_y, unsigned block_z,
                             unsigned shared_bytes, CUstream stream, void** params, void** extra);

  // "cuX failed: <the driver's message> (error N)".
  std::string describe(const char* call, CUresult status) const;
};

// The driver, loaded and initialized once; nullptr with `error` set where
// it cannot be (no libcuda.so.1, a missing symbol, cuInit failing).
const CudaDriver* cudaDriver(std::string& error);

}  // namespace torch_infini::compiler::nvidia
