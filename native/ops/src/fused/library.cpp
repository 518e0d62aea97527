// Every torch.ops.infini schema, in one place (as vLLM's torch_bindings.cpp).
// The kernels are in one file per family (activations, rms_norm, rotary,
// moe, paged_attention, sampler), each registering its operators from a
// struct (fused/registration.h). What each computes: docs/fused_operators.md.
#include <ATen/core/enum_tag.h>
#include <torch/library.h>

TORCH_LIBRARY(infini, m) {
  // activations.cpp
  m.def("silu_and_mul(Tensor input) -> Tensor");
  m.def("swiglu(Tensor input, Tensor gate) -> Tensor");
  m.def("causal_softmax(Tensor input) -> Tensor");
  // rms_norm.cpp
  m.def("rms_norm(Tensor input, Tensor weight, float eps=1e-6) -> Tensor");
  m.def(
      "add_rms_norm(Tensor input, Tensor residual, Tensor weight, float eps=1e-6) -> "
      "(Tensor, Tensor)");
  m.def(
      "fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor? weight, "
      "float eps=1e-6) -> ()");
  // rotary.cpp
  m.def(
      "rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
      "Tensor cos_sin_cache, bool is_neox, int rope_dim_offset=0, bool inverse=False) -> ()");
  m.def(
      "rotary_embedding_functional(Tensor positions, Tensor query, int head_size, "
      "Tensor cos_sin_cache, bool is_neox, bool inverse=False) -> Tensor");
  // moe.cpp
  m.def(
      "topk_softmax(Tensor gating_output, int topk, bool renormalize=False, Tensor? bias=None, "
      "Tensor? is_padding=None) -> (Tensor, Tensor, Tensor)");
  // paged_attention.cpp
  m.def(
      "reshape_and_cache_flash(Tensor key, Tensor value, Tensor(a!) key_cache, "
      "Tensor(b!) value_cache, Tensor slot_mapping) -> ()");
  m.def(
      "paged_attention(Tensor query, Tensor key_cache, Tensor value_cache, Tensor block_tables, "
      "Tensor seq_lens, float scale, Tensor? alibi_slopes=None) -> Tensor");
  // sampler.cpp
  m.def(
      "top_k_top_p_sample(Tensor logits, Tensor? top_k=None, Tensor? top_p=None, *, "
      "Generator? generator=None) -> Tensor",
      {at::Tag::nondeterministic_seeded});
}
