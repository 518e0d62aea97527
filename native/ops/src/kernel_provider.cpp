#include "torch_infini/ops/kernel_provider.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "host_kernels.h"
#if TORCH_INFINI_WITH_INFINIOPS
#include "infiniops_kernels.h"
#endif
#include "torch_infini/runtime/backend.h"

namespace torch_infini::ops {

const char* opName(Op op) {
  switch (op) {
    case Op::Copy:
      return "copy";
    case Op::Cast:
      return "cast";
    case Op::Fill:
      return "fill";
    case Op::Add:
      return "add";
    case Op::Mul:
      return "mul";
    case Op::Gemm:
      return "gemm";
    case Op::Relu:
      return "relu";
    case Op::Silu:
      return "silu";
    case Op::RmsNorm:
      return "rms_norm";
    case Op::Random:
      return "random";
    case Op::SiluAndMul:
      return "silu_and_mul";
    case Op::Swiglu:
      return "swiglu";
    case Op::CausalSoftmax:
      return "causal_softmax";
    case Op::Cat:
      return "cat";
    case Op::AmpUnscale:
      return "amp_unscale";
    case Op::AmpUpdateScale:
      return "amp_update_scale";
    case Op::kCount:
      break;
  }
  return "unknown";
}

namespace {
std::atomic<int64_t> foreign_launches{0};
}  // namespace

int64_t foreignKernelLaunches() { return foreign_launches.load(std::memory_order_relaxed); }

void countForeignKernelLaunch() { foreign_launches.fetch_add(1, std::memory_order_relaxed); }

KernelProvider& kernels() {
  static KernelProvider* provider = [] {
    runtime::DeviceRuntime& rt = runtime::get();
    if (dynamic_cast<runtime::HostRuntime*>(&rt) != nullptr) return makeHostKernels().release();
#if TORCH_INFINI_WITH_INFINIOPS
    if (auto* infinirt = dynamic_cast<runtime::InfiniRtRuntime*>(&rt))
      return makeInfiniOpsKernels(*infinirt).release();
#endif
    TORCH_CHECK(false, "infini: no kernel provider for backend '", rt.name(),
                "' in this build (InfiniOps was not found at build time)");
  }();
  return *provider;
}

}  // namespace torch_infini::ops
