// The built-in plug-ins' graph passes (python/torch_infini/graph_passes):
// what InfiniOps has fused kernels for, rewritten into one call each.
#pragma once

namespace torch_infini::compiler {

inline constexpr const char* kBuiltinPassPipeline[] = {
    "torch_infini.graph_passes.rms_norm:rewrite",
    "torch_infini.graph_passes.swiglu:rewrite",
    "torch_infini.graph_passes.causal_softmax:rewrite",
    "torch_infini.graph_passes.rotary:rewrite",
};

}  // namespace torch_infini::compiler
