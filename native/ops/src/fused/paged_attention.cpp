// InfiniOps' (vLLM's) paged KV cache as torch.ops.infini
// reshape_and_cache_flash and paged_attention (docs/fused_operators.md;
// schemas: library.cpp).
//
// reshape_and_cache_flash writes token t's key and value, [T, heads,
// head_size], into slot slot_mapping[t] of the caches, [num_blocks,
// block_size, heads, head_size]: block slot // block_size, row slot %
// block_size; a negative slot skips the token (padding).
//
// paged_attention is one decode step: query [num_seqs, heads, head_size],
// one token per sequence; the caches as [num_blocks, kv_heads, block_size,
// head_size] (the flash caches' transpose(1, 2)); block_tables
// [num_seqs, max_blocks] and seq_lens [num_seqs], integers. Head h of
// sequence s attends to the seq_lens[s] cached tokens, token t at row
// t % block_size of block block_tables[s, t // block_size], through
// kv head h / (heads / kv_heads): scores scale * q.k (+ alibi_slopes[h] *
// (t - seq_lens[s] + 1)), out = sum_t w_t v_t / (sum_t w_t + 1e-6) with
// w = exp(score - max score), in float (double for float64), rounded once
// (the 1e-6 is vLLM's and InfiniOps'). A sequence of length 0 gets zeros.
//
// Both are inference operators: with a gradient required they raise.
// On infini they are the seam's ReshapeAndCacheFlash and PagedAttention:
// InfiniOps' kernels on its CUDA-like device types (the writer also on
// Cambricon; float32/float16/bfloat16, the attention float16/bfloat16 with
// head_size 64 or 128), host runs the references below on the device
// memory in those dtypes; the rest runs in the CPU fallback. InfiniOps'
// kernels index memory with the slots, lengths and block ids unchecked, so
// the infini kernels read those (a few integers) on the host first: a slot
// or length out of range raises the reference's error, a block id out of
// range goes to the reference in the fallback (which counts a negative one
// from the end, as ATen's indexing does).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include <optional>

#include "common/bridge.h"
#include "common/fused_helpers.h"
#include "fused/registration.h"

namespace torch_infini::ops {
namespace {

constexpr const char* kCache = "infini::reshape_and_cache_flash";
constexpr const char* kAttention = "infini::paged_attention";

void checkFloating(const char* name, const char* what, const at::Tensor& t) {
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), name, ": expected ", what,
              " of a floating dtype, got ", t.scalar_type());
}

void checkIndex(const char* name, const char* what, const at::Tensor& t, int64_t dim) {
  TORCH_CHECK(t.scalar_type() == at::kLong || t.scalar_type() == at::kInt, name, ": expected ",
              what, " of dtype int32 or int64, got ", t.scalar_type());
  TORCH_CHECK(t.dim() == dim, name, ": expected ", what, " with ", dim, " dimensions, got ",
              t.sizes());
}

void checkCache(const at::Tensor& key, const at::Tensor& value, const at::Tensor& key_cache,
                const at::Tensor& value_cache, const at::Tensor& slot_mapping) {
  checkFloating(kCache, "key", key);
  TORCH_CHECK(key.dim() == 3 && key.sizes() == value.sizes(), kCache,
              ": expected key and value of one shape [tokens, heads, head_size], got ", key.sizes(),
              " and ", value.sizes());
  TORCH_CHECK(key_cache.dim() == 4 && key_cache.sizes() == value_cache.sizes(), kCache,
              ": expected key_cache and value_cache of one shape [num_blocks, block_size, "
              "heads, head_size], got ",
              key_cache.sizes(), " and ", value_cache.sizes());
  TORCH_CHECK(key_cache.sizes().slice(2) == key.sizes().slice(1), kCache,
              ": the caches' [heads, head_size] ", key_cache.sizes().slice(2),
              " must be the key's ", key.sizes().slice(1));
  for (const at::Tensor* t : {&value, &key_cache, &value_cache}) {
    TORCH_CHECK(t->scalar_type() == key.scalar_type(), kCache,
                ": expected value and the caches in the key's dtype ", key.scalar_type(), ", got ",
                t->scalar_type());
  }
  checkIndex(kCache, "slot_mapping", slot_mapping, 1);
  TORCH_CHECK(slot_mapping.size(0) <= key.size(0), kCache, ": ", slot_mapping.size(0),
              " slots for ", key.size(0), " tokens");
}

void reshape_and_cache_flash_cpu(const at::Tensor& key, const at::Tensor& value,
                                 at::Tensor& key_cache, at::Tensor& value_cache,
                                 const at::Tensor& slot_mapping) {
  checkCache(key, value, key_cache, value_cache, slot_mapping);
  const int64_t tokens = slot_mapping.size(0);
  const at::Tensor slots = slot_mapping.to(at::kLong);
  const int64_t capacity = key_cache.size(0) * key_cache.size(1);
  TORCH_CHECK(tokens == 0 || slots.max().item<int64_t>() < capacity, kCache,
              ": a slot is past the caches' ", capacity, " slots");
  const at::Tensor kept = (slots >= 0).nonzero().squeeze(1);
  const at::Tensor slot = slots.index_select(0, kept);
  const at::Tensor block = slot.div(key_cache.size(1), "floor");
  const at::Tensor row = slot.remainder(key_cache.size(1));
  key_cache.index_put_({block, row}, key.narrow(0, 0, tokens).index_select(0, kept));
  value_cache.index_put_({block, row}, value.narrow(0, 0, tokens).index_select(0, kept));
}

void reshape_and_cache_flash_meta(const at::Tensor& key, const at::Tensor& value,
                                  at::Tensor& key_cache, at::Tensor& value_cache,
                                  const at::Tensor& slot_mapping) {
  checkCache(key, value, key_cache, value_cache, slot_mapping);
}

void checkAttention(const at::Tensor& query, const at::Tensor& key_cache,
                    const at::Tensor& value_cache, const at::Tensor& block_tables,
                    const at::Tensor& seq_lens, const std::optional<at::Tensor>& alibi) {
  checkFloating(kAttention, "query", query);
  TORCH_CHECK(query.dim() == 3, kAttention, ": expected query [num_seqs, heads, head_size], got ",
              query.sizes());
  TORCH_CHECK(key_cache.dim() == 4 && key_cache.sizes() == value_cache.sizes(), kAttention,
              ": expected key_cache and value_cache of one shape [num_blocks, kv_heads, "
              "block_size, head_size], got ",
              key_cache.sizes(), " and ", value_cache.sizes());
  TORCH_CHECK(key_cache.size(3) == query.size(2), kAttention, ": the caches' head_size ",
              key_cache.size(3), " must be the query's ", query.size(2));
  TORCH_CHECK(key_cache.size(1) > 0 && query.size(1) % key_cache.size(1) == 0, kAttention, ": ",
              query.size(1), " query heads are not a multiple of ", key_cache.size(1), " kv heads");
  for (const at::Tensor* t : {&key_cache, &value_cache}) {
    TORCH_CHECK(t->scalar_type() == query.scalar_type(), kAttention,
                ": expected the caches in the query's dtype ", query.scalar_type(), ", got ",
                t->scalar_type());
  }
  checkIndex(kAttention, "block_tables", block_tables, 2);
  checkIndex(kAttention, "seq_lens", seq_lens, 1);
  TORCH_CHECK(block_tables.size(0) == query.size(0) && seq_lens.size(0) == query.size(0),
              kAttention, ": expected block_tables and seq_lens for ", query.size(0),
              " sequences, got ", block_tables.sizes(), " and ", seq_lens.sizes());
  if (alibi.has_value() && alibi->defined()) {
    TORCH_CHECK(alibi->dim() == 1 && alibi->size(0) == query.size(1), kAttention,
                ": expected alibi_slopes [", query.size(1), "], got ", alibi->sizes());
    checkFloating(kAttention, "alibi_slopes", *alibi);
  }
}

at::Tensor paged_attention_cpu(const at::Tensor& query, const at::Tensor& key_cache,
                               const at::Tensor& value_cache, const at::Tensor& block_tables,
                               const at::Tensor& seq_lens, double scale,
                               const std::optional<at::Tensor>& alibi_slopes) {
  checkAttention(query, key_cache, value_cache, block_tables, seq_lens, alibi_slopes);
  const int64_t block_size = key_cache.size(2);
  const int64_t group = query.size(1) / key_cache.size(1);
  const at::Tensor lengths = seq_lens.to(at::kLong);
  const at::Tensor tables = block_tables.to(at::kLong);
  const bool has_alibi = alibi_slopes.has_value() && alibi_slopes->defined();
  const c10::ScalarType math = wide(query.scalar_type());
  at::Tensor out = at::zeros_like(query, at::MemoryFormat::Contiguous);
  for (int64_t s = 0; s < query.size(0); ++s) {
    const int64_t length = lengths[s].item<int64_t>();
    if (length <= 0) continue;
    TORCH_CHECK(length <= tables.size(1) * block_size, kAttention, ": sequence ", s, " has ",
                length, " tokens, more than its ", tables.size(1), " blocks of ", block_size,
                " hold");
    const at::Tensor t = at::arange(length, tables.options());
    const at::Tensor blocks = tables[s].index_select(0, t.div(block_size, "floor"));
    const at::Tensor rows = t.remainder(block_size);
    // [length, kv_heads, head_size] gathered, each kv head repeated for its
    // query heads: [length, heads, head_size], in float.
    const auto gather = [&](const at::Tensor& cache) {
      return at::index(cache, {blocks, std::nullopt, rows})
          .to(math)
          .repeat_interleave(group, /*dim=*/1);
    };
    const at::Tensor k = gather(key_cache);
    const at::Tensor v = gather(value_cache);
    const at::Tensor q = query[s].to(math);                        // [heads, head_size]
    at::Tensor scores = at::einsum("hd,lhd->hl", {q, k}) * scale;  // [heads, length]
    if (has_alibi) {
      const at::Tensor distance = (t - (length - 1)).to(math);
      scores = scores + alibi_slopes->to(math).unsqueeze(1) * distance.unsqueeze(0);
    }
    const at::Tensor w = (scores - std::get<0>(scores.max(1, /*keepdim=*/true))).exp();
    const at::Tensor sum = w.sum(1, /*keepdim=*/true) + 1e-6;
    out[s].copy_(at::einsum("hl,lhd->hd", {w, v}) / sum);
  }
  return out;
}

at::Tensor paged_attention_meta(const at::Tensor& query, const at::Tensor& key_cache,
                                const at::Tensor& value_cache, const at::Tensor& block_tables,
                                const at::Tensor& seq_lens, double /*scale*/,
                                const std::optional<at::Tensor>& alibi_slopes) {
  checkAttention(query, key_cache, value_cache, block_tables, seq_lens, alibi_slopes);
  return at::empty_like(query, at::MemoryFormat::Contiguous);
}

// ---- the infini kernels (the seam) --------------------------------------------------

// A unit stride in the last dimension (or a last dimension of one element).
bool unitLast(const at::Tensor& t) { return t.size(-1) <= 1 || t.stride(-1) == 1; }

void reshape_and_cache_flash_infini(const at::Tensor& key, const at::Tensor& value,
                                    at::Tensor& key_cache, at::Tensor& value_cache,
                                    const at::Tensor& slot_mapping) {
  checkCache(key, value, key_cache, value_cache, slot_mapping);
  for (const at::Tensor* t :
       std::initializer_list<const at::Tensor*>{&value, &key_cache, &value_cache, &slot_mapping})
    checkSameDevice(key, *t);
  requireKernel(kCache, SeamOp::ReshapeAndCacheFlash, key.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(unitLast(key_cache) && unitLast(value_cache), kCache,
                              ": the kernel writes caches with a unit stride in head_size, got "
                              "strides ",
                              key_cache.strides(), " and ", value_cache.strides());
  const int64_t tokens = slot_mapping.size(0);
  if (tokens == 0) return;
  const int64_t capacity = key_cache.size(0) * key_cache.size(1);
  TORCH_CHECK(integersOnHost(slot_mapping).max().item<int64_t>() < capacity, kCache,
              ": a slot is past the caches' ", capacity, " slots");
  if (key.size(1) == 0 || key.size(2) == 0) return;
  const at::Tensor k = unitLast(key) ? key : key.contiguous();
  const at::Tensor v = unitLast(value) ? value : value.contiguous();
  const at::Tensor slots = slot_mapping.to(at::kLong).contiguous();
  selectedKernelProvider().reshapeAndCacheFlash(
      toRef(k), toRef(v), toRef(key_cache), toRef(value_cache), toRef(slots), streamOf(key_cache));
}

// Checks each sequence's length and the blocks it uses on the host (the
// reference's error for a length past its blocks; a block id out of range
// is refused to the reference); whether any sequence is empty (<= 0
// tokens: the kernel leaves its rows unwritten, the reference zeroes them).
bool checkPages(const at::Tensor& block_tables, const at::Tensor& seq_lens, int64_t block_size,
                int64_t num_blocks) {
  const at::Tensor lengths = integersOnHost(seq_lens);
  const at::Tensor tables = integersOnHost(block_tables);
  const auto length = lengths.accessor<int64_t, 1>();
  const auto table = tables.accessor<int64_t, 2>();
  const int64_t max_blocks = tables.size(1);
  bool any_empty = false;
  for (int64_t s = 0; s < lengths.size(0); ++s) {
    if (length[s] <= 0) {
      any_empty = true;
      continue;
    }
    TORCH_CHECK(length[s] <= max_blocks * block_size, kAttention, ": sequence ", s, " has ",
                length[s], " tokens, more than its ", max_blocks, " blocks of ", block_size,
                " hold");
    for (int64_t b = 0; b < (length[s] + block_size - 1) / block_size; ++b) {
      TORCH_CHECK_NOT_IMPLEMENTED(table[s][b] >= 0 && table[s][b] < num_blocks, kAttention,
                                  ": sequence ", s, " reads block ", table[s][b], " of ",
                                  num_blocks, "; the kernel takes block ids in range");
    }
  }
  return any_empty;
}

at::Tensor paged_attention_infini(const at::Tensor& query, const at::Tensor& key_cache,
                                  const at::Tensor& value_cache, const at::Tensor& block_tables,
                                  const at::Tensor& seq_lens, double scale,
                                  const std::optional<at::Tensor>& alibi_slopes) {
  checkAttention(query, key_cache, value_cache, block_tables, seq_lens, alibi_slopes);
  const bool has_alibi = alibi_slopes.has_value() && alibi_slopes->defined();
  for (const at::Tensor* t : {&key_cache, &value_cache, &block_tables, &seq_lens})
    checkSameDevice(query, *t);
  if (has_alibi) checkSameDevice(query, *alibi_slopes);
  requireKernel(kAttention, SeamOp::PagedAttention, query.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(query.size(2) == 64 || query.size(2) == 128, kAttention,
                              ": the kernel takes head_size 64 or 128, got ", query.size(2));
  TORCH_CHECK_NOT_IMPLEMENTED(unitLast(key_cache) && unitLast(value_cache), kAttention,
                              ": the kernel reads caches with a unit stride in head_size, got "
                              "strides ",
                              key_cache.strides(), " and ", value_cache.strides());
  const bool any_empty = checkPages(block_tables, seq_lens, key_cache.size(2), key_cache.size(0));
  at::Tensor out = any_empty ? at::zeros(query.sizes(), query.options())
                             : at::empty(query.sizes(), query.options());
  if (query.numel() == 0) return out;
  const at::Tensor q = unitLast(query) ? query : query.contiguous();
  // One integer dtype for the tables and the lengths, contiguous; the
  // slopes in float, as the reference computes with them.
  const at::Tensor tables = block_tables.contiguous();
  const at::Tensor lengths = seq_lens.to(block_tables.scalar_type()).contiguous();
  const at::Tensor alibi = has_alibi ? alibi_slopes->to(at::kFloat).contiguous() : at::Tensor();
  const TensorRef alibi_ref = has_alibi ? toRef(alibi) : TensorRef{};
  selectedKernelProvider().pagedAttention(
      toRef(out), toRef(q), toRef(key_cache), toRef(value_cache), toRef(tables), toRef(lengths),
      has_alibi ? &alibi_ref : nullptr, static_cast<float>(scale), streamOf(out));
  return out;
}

// ---- declared here, defined below: the kernels the structs name ------------------------

void reshape_and_cache_flash_autograd(const at::Tensor& key, const at::Tensor& value,
                                      at::Tensor& key_cache, at::Tensor& value_cache,
                                      const at::Tensor& slot_mapping);
at::Tensor paged_attention_autograd(const at::Tensor& query, const at::Tensor& key_cache,
                                    const at::Tensor& value_cache, const at::Tensor& block_tables,
                                    const at::Tensor& seq_lens, double scale,
                                    const std::optional<at::Tensor>& alibi_slopes);

// ---- the operators (schemas: library.cpp) ----------------------------------------------

struct ReshapeAndCacheFlash {
  static constexpr const char* name = "infini::reshape_and_cache_flash";
  static constexpr auto cpu = &reshape_and_cache_flash_cpu;
  static constexpr auto meta = &reshape_and_cache_flash_meta;
  static constexpr auto autograd = &reshape_and_cache_flash_autograd;
  static constexpr auto infini = &reshape_and_cache_flash_infini;
  static constexpr SeamOp seam = SeamOp::ReshapeAndCacheFlash;
};
struct PagedAttention {
  static constexpr const char* name = "infini::paged_attention";
  static constexpr auto cpu = &paged_attention_cpu;
  static constexpr auto meta = &paged_attention_meta;
  static constexpr auto autograd = &paged_attention_autograd;
  static constexpr auto infini = &paged_attention_infini;
  static constexpr SeamOp seam = SeamOp::PagedAttention;
};

// ---- autograd --------------------------------------------------------------------------

bool requiresGrad(std::initializer_list<const at::Tensor*> tensors) {
  if (!at::GradMode::is_enabled()) return false;
  for (const at::Tensor* t : tensors)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

void reshape_and_cache_flash_autograd(const at::Tensor& key, const at::Tensor& value,
                                      at::Tensor& key_cache, at::Tensor& value_cache,
                                      const at::Tensor& slot_mapping) {
  TORCH_CHECK(!requiresGrad({&key, &value, &key_cache, &value_cache}), kCache,
              " writes a KV cache in place for inference and has no derivative");
  callBelowAutograd<ReshapeAndCacheFlash>(key, value, key_cache, value_cache, slot_mapping);
  bumpVersion(key_cache);
  bumpVersion(value_cache);
}

at::Tensor paged_attention_autograd(const at::Tensor& query, const at::Tensor& key_cache,
                                    const at::Tensor& value_cache, const at::Tensor& block_tables,
                                    const at::Tensor& seq_lens, double scale,
                                    const std::optional<at::Tensor>& alibi_slopes) {
  const at::Tensor alibi = alibi_slopes.has_value() ? *alibi_slopes : at::Tensor();
  TORCH_CHECK(!requiresGrad({&query, &key_cache, &value_cache, &alibi}), kAttention,
              " is a decode (inference) kernel and has no derivative; for training use "
              "torch.nn.functional.scaled_dot_product_attention");
  return callBelowAutograd<PagedAttention>(query, key_cache, value_cache, block_tables, seq_lens,
                                           scale, alibi_slopes);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(infini, m) {
  registerFused<ReshapeAndCacheFlash>(m);
  registerFused<PagedAttention>(m);
}

}  // namespace torch_infini::ops
