// aten::embedding (what nn.Embedding and F.embedding call) through the
// seam's Embedding: the rows of a 2-D weight that the indices name.
//
// Every index is checked against the weight's rows before anything is
// enqueued, and an index out of range raises the CPU's IndexError at the
// call: InfiniOps' kernels skip such rows silently (the output would keep
// whatever its memory held), and CUDA's assert only surfaces at a later
// synchronization. The check reads the indices on the host: a copy of a few
// integers per call and a wait for the stream, small next to the gather.
//
// The forward ignores padding_idx, scale_grad_by_freq and sparse, as the
// CPU's does; they shape the backward (embedding_dense_backward, in the CPU
// fallback), which autograd's formula for aten::embedding calls.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "common/bridge.h"
#include "common/bridge_registrar.h"
#include "fallback/refusal.h"

namespace torch_infini::ops {
namespace {

constexpr const char* kName = "embedding";

// The indices on the host, each in [0, rows): the CPU's error otherwise.
void checkIndicesInRange(const at::Tensor& indices, int64_t rows) {
  if (indices.numel() == 0) return;
  const at::Tensor host = integersOnHost(indices);
  // A scan of the host copy: no reduction kernel and scalar reads per call
  // (generation embeds one token per step).
  const int64_t* first = host.const_data_ptr<int64_t>();
  const auto [low, high] = std::minmax_element(first, first + host.numel());
  TORCH_CHECK_INDEX(*low >= 0 && *high < rows, "index out of range in self");
}

at::Tensor embedding(const at::Tensor& weight, const at::Tensor& indices, int64_t /*padding_idx*/,
                     bool /*scale_grad_by_freq*/, bool /*sparse*/) {
  // What the kernel does not take runs in the CPU fallback, which also
  // raises the CPU's errors (a 1-D weight, float indices, mixed devices).
  TORCH_CHECK_NOT_IMPLEMENTED(
      isInfini(weight) && isInfini(indices) && weight.device() == indices.device(), kName,
      ": the infini kernel takes weight and indices on one infini "
      "device, got ",
      weight.device(), " and ", indices.device());
  // (A weight without rows: the CPU's index_select raises its own error.)
  TORCH_CHECK_NOT_IMPLEMENTED(weight.dim() == 2 && weight.size(0) > 0, kName,
                              ": the infini kernel takes a 2-D weight with rows, got ",
                              weight.sizes());
  TORCH_CHECK_NOT_IMPLEMENTED(
      indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt, kName,
      ": the infini kernel takes int64 or int32 indices, got ", indices.scalar_type());
  requireKernel(kName, SeamOp::Embedding, weight.scalar_type());
  checkIndicesInRange(indices, weight.size(0));

  const int64_t n = indices.numel();
  const int64_t d = weight.size(1);
  std::vector<int64_t> sizes(indices.sizes().begin(), indices.sizes().end());
  sizes.push_back(d);
  at::Tensor out = emptyOnDevice(weight, sizes);
  if (n == 0 || d == 0) return out;
  const at::Tensor flat = indices.contiguous();
  TensorRef out_ref = toRef(out);
  out_ref.sizes = {n, d};
  out_ref.strides = {d, 1};
  TensorRef indices_ref = toRef(flat);
  indices_ref.sizes = {n};
  indices_ref.strides = {1};
  selectedKernelProvider().embedding(out_ref, toRef(weight), indices_ref, streamOf(out));
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  BridgeRegistrar embedding_ops(m, "aten", "embedding", SeamOp::Embedding);
  TORCH_INFINI_IMPL_OR_FALLBACK(embedding_ops, "embedding", embedding);
}

}  // namespace
}  // namespace torch_infini::ops
