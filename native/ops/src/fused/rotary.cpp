// InfiniOps' (vLLM's) rotary position embedding as torch.ops.infini
// rotary_embedding (docs/fused_operators.md; schema: library.cpp).
//
// In place on query and key. positions: integer, [T] or [B, S]; query/key:
// [*positions.shape, heads * head_size] or [*positions.shape, heads,
// head_size]; cos_sin_cache: [max_position, rot_dim], each row the rot_dim/2
// cosines then the rot_dim/2 sines. Dimensions [offset, offset + rot_dim) of
// each head rotate by pairs: (j, j + rot_dim/2) when is_neox (rotating
// halves), (2j, 2j + 1) otherwise (GPT-J); pair j turns by the angle whose
// cosine and sine are cache[pos, j] and cache[pos, rot_dim/2 + j] (the
// opposite angle when inverse). Computed in float (double for float64),
// rounded once per element.
//
// It overwrites its inputs, so it has no derivative (with a gradient
// required it raises); torch_infini.ops.apply_rotary_embedding is the
// differentiable, out-of-place form (its backward is the inverse rotation).
// On infini, the kernel seam's rotary_embedding: InfiniOps' kernel on the
// CUDA-like device types (none on its CPU build: InfiniRT `cpu` takes the CPU
// fallback), the CPU kernel below on `host`. Layouts the kernel does not take
// are refused to the fallback (rotary_embedding_infini).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "common/bridge.h"
#include "common/fused_helpers.h"
#include "fused/registration.h"

namespace torch_infini::ops {
namespace {

constexpr const char* kName = "infini::rotary_embedding";

// Heads per token of `t` (query or key), checking its layout.
int64_t checkHeads(const char* what, const at::Tensor& t, const at::Tensor& positions,
                   int64_t head_size) {
  const int64_t p = positions.dim();
  const bool split = t.dim() == p + 2;
  TORCH_CHECK(t.dim() == p + 1 || split, kName, ": expected ", what, " of shape [",
              positions.sizes(), ", heads * head_size] or [", positions.sizes(),
              ", heads, head_size], got ", t.sizes());
  TORCH_CHECK(t.sizes().slice(0, p) == positions.sizes(), kName, ": ", what,
              "'s leading dimensions ", t.sizes(), " must be the positions' shape ",
              positions.sizes());
  if (split) {
    TORCH_CHECK(t.size(-1) == head_size, kName, ": ", what, "'s last dimension ", t.size(-1),
                " must be head_size ", head_size);
    return t.size(-2);
  }
  TORCH_CHECK(t.size(-1) % head_size == 0, kName, ": ", what, "'s last dimension ", t.size(-1),
              " is not a multiple of head_size ", head_size);
  return t.size(-1) / head_size;
}

void checkRotary(const at::Tensor& positions, const at::Tensor& query,
                 const std::optional<at::Tensor>& key, int64_t head_size, const at::Tensor& cache,
                 int64_t offset) {
  TORCH_CHECK(positions.scalar_type() == at::kLong || positions.scalar_type() == at::kInt, kName,
              ": expected int64 or int32 positions, got ", positions.scalar_type());
  TORCH_CHECK(positions.dim() == 1 || positions.dim() == 2, kName,
              ": expected positions [T] or [B, S], got ", positions.sizes());
  TORCH_CHECK(at::isFloatingType(query.scalar_type()), kName,
              ": expected a floating-point query, got ", query.scalar_type());
  TORCH_CHECK(at::isFloatingType(cache.scalar_type()) && cache.dim() == 2 && cache.size(1) % 2 == 0,
              kName,
              ": expected a floating-point cos_sin_cache [max_position, rot_dim] with an "
              "even rot_dim, got ",
              cache.scalar_type(), " ", cache.sizes());
  TORCH_CHECK(head_size > 0 && offset >= 0 && offset + cache.size(1) <= head_size, kName,
              ": rope_dim_offset ", offset, " + rot_dim ", cache.size(1), " must fit in head_size ",
              head_size);
  const int64_t heads = checkHeads("query", query, positions, head_size);
  checkSameDevice(query, positions);
  checkSameDevice(query, cache);
  if (key.has_value() && key->defined()) {
    TORCH_CHECK(key->scalar_type() == query.scalar_type(), kName,
                ": key and query must have one dtype, got ", key->scalar_type(), " and ",
                query.scalar_type());
    const int64_t kv_heads = checkHeads("key", *key, positions, head_size);
    TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, kName, ": query's ", heads,
                " heads are not a multiple of key's ", kv_heads);
    checkSameDevice(query, *key);
  }
}

// Rotates t ([*P, heads * head_size] or [*P, heads, head_size], P the
// positions' shape) in place, with cos and sin [*P, 1, rot_dim / 2] in the
// wide dtype.
void rotate(const at::Tensor& t, const at::Tensor& cos, const at::Tensor& sin,
            int64_t positions_dim, int64_t head_size, int64_t offset, bool is_neox) {
  const int64_t rot = 2 * cos.size(-1);
  const at::Tensor split = t.dim() == positions_dim + 1 ? t.unflatten(-1, {-1, head_size}) : t;
  const at::Tensor heads = split.narrow(-1, offset, rot);
  at::Tensor xs = is_neox ? heads.narrow(-1, 0, rot / 2) : heads.slice(-1, 0, rot, 2);
  at::Tensor ys = is_neox ? heads.narrow(-1, rot / 2, rot / 2) : heads.slice(-1, 1, rot, 2);
  const at::Tensor x = xs.to(cos.scalar_type());
  const at::Tensor y = ys.to(cos.scalar_type());
  const at::Tensor new_x = (x * cos - y * sin).to(t.scalar_type());
  const at::Tensor new_y = (y * cos + x * sin).to(t.scalar_type());
  xs.copy_(new_x);
  ys.copy_(new_y);
}

void rotary_embedding_cpu(const at::Tensor& positions, at::Tensor& query,
                          const std::optional<at::Tensor>& key, int64_t head_size,
                          const at::Tensor& cache, bool is_neox, int64_t offset, bool inverse) {
  checkRotary(positions, query, key, head_size, cache, offset);
  if (positions.numel() == 0) return;
  const int64_t half = cache.size(1) / 2;
  std::vector<int64_t> shape(positions.sizes().begin(), positions.sizes().end());
  shape.push_back(cache.size(1));
  const at::Tensor rows =
      cache.index_select(0, positions.reshape({-1})).reshape(shape).to(wide(query.scalar_type()));
  const at::Tensor cos = rows.narrow(-1, 0, half).unsqueeze(-2);
  at::Tensor sin = rows.narrow(-1, half, half).unsqueeze(-2);
  if (inverse) sin = sin.neg();
  const int64_t p = positions.dim();
  rotate(query, cos, sin, p, head_size, offset, is_neox);
  if (key.has_value() && key->defined()) rotate(*key, cos, sin, p, head_size, offset, is_neox);
}

void rotary_embedding_meta(const at::Tensor& positions, at::Tensor& query,
                           const std::optional<at::Tensor>& key, int64_t head_size,
                           const at::Tensor& cache, bool /*is_neox*/, int64_t offset,
                           bool /*inverse*/) {
  checkRotary(positions, query, key, head_size, cache, offset);
}

// ---- infini, through the kernel seam ------------------------------------------------

// Whether the kernel takes `t` (query or key) as laid out: a unit stride in
// the last dimension and tokens evenly strided ([B, S] positions: the batch
// stride is S token strides), as InfiniOps indexes token i at i * stride.
bool kernelLayout(const at::Tensor& t, int64_t positions_dim) {
  if (t.size(-1) > 1 && t.stride(-1) != 1) return false;
  return positions_dim == 1 || t.size(0) <= 1 || t.stride(0) == t.size(1) * t.stride(1);
}

void rotary_embedding_infini(const at::Tensor& positions, at::Tensor& query,
                             const std::optional<at::Tensor>& key, int64_t head_size,
                             const at::Tensor& cache, bool is_neox, int64_t offset, bool inverse) {
  checkRotary(positions, query, key, head_size, cache, offset);
  requireKernel(kName, SeamOp::RotaryEmbedding, query.scalar_type());
  requireKernel(kName, SeamOp::RotaryEmbedding, cache.scalar_type());
  const bool has_key = key.has_value() && key->defined();
  const int64_t p = positions.dim();
  TORCH_CHECK_NOT_IMPLEMENTED(positions.scalar_type() == at::kLong && positions.is_contiguous(),
                              kName, ": the kernel takes contiguous int64 positions, got ",
                              positions.scalar_type(), " with strides ", positions.strides());
  TORCH_CHECK_NOT_IMPLEMENTED(cache.size(1) <= 1 || cache.stride(1) == 1, kName,
                              ": the kernel takes a cos_sin_cache with unit column stride, got "
                              "strides ",
                              cache.strides());
  TORCH_CHECK_NOT_IMPLEMENTED(
      kernelLayout(query, p) && (!has_key || kernelLayout(*key, p)), kName,
      ": the kernel takes query and key with a unit stride in the last dimension and evenly "
      "strided tokens, got query strides ",
      query.strides(), has_key ? " and key strides " : "",
      has_key ? c10::str(key->strides()) : std::string());
  if (positions.numel() == 0) return;
  const TensorRef key_ref = has_key ? toRef(*key) : TensorRef{};
  selectedKernelProvider().rotaryEmbedding(toRef(query), has_key ? &key_ref : nullptr,
                                           toRef(positions), toRef(cache), head_size, is_neox,
                                           offset, inverse, streamOf(query));
}

// ---- the operators (schemas: library.cpp) ----------------------------------------------

void rotary_embedding_autograd(const at::Tensor& positions, at::Tensor& query,
                               const std::optional<at::Tensor>& key, int64_t head_size,
                               const at::Tensor& cache, bool is_neox, int64_t offset, bool inverse);

struct RotaryEmbedding {
  static constexpr const char* name = "infini::rotary_embedding";
  static constexpr auto cpu = &rotary_embedding_cpu;
  static constexpr auto meta = &rotary_embedding_meta;
  static constexpr auto autograd = &rotary_embedding_autograd;
  static constexpr auto infini = &rotary_embedding_infini;
  static constexpr SeamOp seam = SeamOp::RotaryEmbedding;
};

// ---- autograd --------------------------------------------------------------------------

void rotary_embedding_autograd(const at::Tensor& positions, at::Tensor& query,
                               const std::optional<at::Tensor>& key, int64_t head_size,
                               const at::Tensor& cache, bool is_neox, int64_t offset,
                               bool inverse) {
  const bool has_key = key.has_value() && key->defined();
  TORCH_CHECK(
      !at::GradMode::is_enabled() ||
          !(query.requires_grad() || (has_key && key->requires_grad()) || cache.requires_grad()),
      kName,
      " rotates query and key in place and has no derivative; for training use "
      "torch_infini.ops.apply_rotary_embedding, which returns new tensors and "
      "differentiates");
  callBelowAutograd<RotaryEmbedding>(positions, query, key, head_size, cache, is_neox, offset,
                                     inverse);
  bumpVersion(query);
  if (has_key) bumpVersion(*key);
}

// ---- rotary_embedding_functional: query alone, out of place --------------------------
//
// A new contiguous tensor (the layout the kernel takes) rotated by the
// in-place operator's kernels; what torch.compile's rotary graph pass
// rewrites into. Differentiable in query: the adjoint of a rotation is the
// inverse rotation, this operator again (so double backward works too).

at::Tensor rotary_embedding_functional_cpu(const at::Tensor& positions, const at::Tensor& query,
                                           int64_t head_size, const at::Tensor& cache, bool is_neox,
                                           bool inverse) {
  at::Tensor out = query.clone(at::MemoryFormat::Contiguous);
  rotary_embedding_cpu(positions, out, std::nullopt, head_size, cache, is_neox, 0, inverse);
  return out;
}

at::Tensor rotary_embedding_functional_meta(const at::Tensor& positions, const at::Tensor& query,
                                            int64_t head_size, const at::Tensor& cache,
                                            bool /*is_neox*/, bool /*inverse*/) {
  checkRotary(positions, query, std::nullopt, head_size, cache, 0);
  return at::empty_symint(query.sym_sizes(), query.options());
}

at::Tensor rotary_embedding_functional_infini(const at::Tensor& positions, const at::Tensor& query,
                                              int64_t head_size, const at::Tensor& cache,
                                              bool is_neox, bool inverse) {
  at::Tensor out = query.clone(at::MemoryFormat::Contiguous);  // checked by the in-place kernel
  rotary_embedding_infini(positions, out, std::nullopt, head_size, cache, is_neox, 0, inverse);
  return out;
}

at::Tensor rotary_embedding_functional_autograd(const at::Tensor& positions,
                                                const at::Tensor& query, int64_t head_size,
                                                const at::Tensor& cache, bool is_neox,
                                                bool inverse);

struct RotaryEmbeddingFunctional {
  static constexpr const char* name = "infini::rotary_embedding_functional";
  static constexpr auto cpu = &rotary_embedding_functional_cpu;
  static constexpr auto meta = &rotary_embedding_functional_meta;
  static constexpr auto autograd = &rotary_embedding_functional_autograd;
  static constexpr auto infini = &rotary_embedding_functional_infini;
  static constexpr SeamOp seam = SeamOp::RotaryEmbedding;
};

class RotaryFunctionalFunction : public torch::autograd::Function<RotaryFunctionalFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& positions,
                            const at::Tensor& query, int64_t head_size, const at::Tensor& cache,
                            bool is_neox, bool inverse) {
    ctx->save_for_backward({positions, cache});
    ctx->saved_data["head_size"] = head_size;
    ctx->saved_data["is_neox"] = is_neox;
    ctx->saved_data["inverse"] = inverse;
    return callBelowAutograd<RotaryEmbeddingFunctional>(positions, query, head_size, cache, is_neox,
                                                        inverse);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow(RotaryEmbeddingFunctional::name, "")
                               .typed<FusedSignature<RotaryEmbeddingFunctional>>();
    at::Tensor grad_query =
        op.call(saved[0], grads[0], ctx->saved_data["head_size"].toInt(), saved[1],
                ctx->saved_data["is_neox"].toBool(), !ctx->saved_data["inverse"].toBool());
    return {at::Tensor(), grad_query, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor rotary_embedding_functional_autograd(const at::Tensor& positions,
                                                const at::Tensor& query, int64_t head_size,
                                                const at::Tensor& cache, bool is_neox,
                                                bool inverse) {
  // Checked here: Function::apply runs forward() with grad mode off.
  TORCH_CHECK(!at::GradMode::is_enabled() || !cache.requires_grad(),
              RotaryEmbeddingFunctional::name,
              ": cos_sin_cache is a constant table; it gets no gradient");
  return RotaryFunctionalFunction::apply(positions, query, head_size, cache, is_neox, inverse);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(infini, m) {
  registerFused<RotaryEmbedding>(m);
  registerFused<RotaryEmbeddingFunctional>(m);
}

}  // namespace torch_infini::ops
