"""InfiniOps' fused LLM kernels as PyTorch operators: ``torch.ops.infini.*``.

Each operator runs on ``infini`` tensors through the kernel seam (InfiniOps'
own kernel on the Infini stack, the CPU reference on ``host``), on CPU
tensors as the CPU reference, and on meta/fake tensors for shapes (so
``torch.compile`` traces it); autograd differentiates it on every device. A
dtype the backend does not declare (``torch_infini.supported_dtypes``) runs
in the CPU fallback, under its policy. Computed in float (float64 for
float64 inputs) and rounded once to the input's dtype. See
docs/fused_operators.md.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "add_rms_norm",
    "apply_rotary_embedding",
    "causal_softmax",
    "fused_add_rms_norm",
    "paged_attention",
    "reshape_and_cache_flash",
    "rms_norm",
    "rotary_embedding",
    "rotary_embedding_functional",
    "silu_and_mul",
    "swiglu",
    "top_k_top_p_sample",
    "topk_softmax",
]


def silu_and_mul(input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (PyTorch's name)
    """``silu(input[..., :h]) * input[..., h:]`` for ``input`` of shape ``[..., 2h]``.

    The gated MLP activation with the gate and up projections concatenated
    (vLLM's layout): one ``[..., 2h]`` projection, one ``[..., h]`` result.
    """
    return torch.ops.infini.silu_and_mul(input)


def swiglu(input: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:  # noqa: A002
    """``input * silu(gate)``: Llama's MLP activation, ``up(x) * silu(gate(x))``.

    ``input`` and ``gate`` have one shape and one dtype.
    """
    return torch.ops.infini.swiglu(input, gate)


def causal_softmax(input: torch.Tensor) -> torch.Tensor:  # noqa: A002
    """Softmax over the last dimension under a causal mask.

    ``input`` is ``[..., s, t]`` attention scores of ``s`` new queries
    against ``t >= s`` keys (the first ``t - s`` from a KV cache): row ``i``
    is normalized over columns ``j <= t - s + i``, and the others are 0.
    The infini kernel takes 2-D and 3-D inputs (more dimensions run in the
    CPU fallback).
    """
    return torch.ops.infini.causal_softmax(input)


def rms_norm(
    input: torch.Tensor,  # noqa: A002
    weight: torch.Tensor,
    eps: float = 1e-6,
) -> torch.Tensor:
    """RMSNorm in one kernel (InfiniOps' rms_norm): ``input * weight /
    sqrt(mean(input ** 2, -1) + eps)``, computed in float, rounded once.
    ``weight`` is ``[hidden]`` of the input's dtype. Differentiable in both.
    torch.compile's graph pass rewrites RMSNorm modules into it."""
    return torch.ops.infini.rms_norm(input, weight, eps)


def add_rms_norm(
    input: torch.Tensor,  # noqa: A002
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A transformer block's residual add and RMSNorm in one kernel.

    Returns ``(out, residual_out)``: ``residual_out = input + residual``
    (rounded to the dtype; the next block's residual) and ``out =
    residual_out * weight / sqrt(mean(residual_out ** 2, -1) + eps)``
    (computed in float, rounded once). ``weight`` is ``[hidden]`` of any
    floating dtype. Differentiable in all three tensors.
    """
    out, residual_out = torch.ops.infini.add_rms_norm(input, residual, weight, eps)
    return out, residual_out


def fused_add_rms_norm(
    input: torch.Tensor,  # noqa: A002
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
) -> None:
    """vLLM's in-place ``fused_add_rms_norm``: ``residual`` becomes ``input +
    residual`` and ``input`` the normalized sum, times ``weight`` if given.

    For inference: it overwrites its inputs and has no derivative (with a
    gradient required it raises); training uses :func:`add_rms_norm`.
    """
    torch.ops.infini.fused_add_rms_norm(input, residual, weight, eps)


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    rope_dim_offset: int = 0,
    inverse: bool = False,
) -> None:
    """vLLM's (and InfiniOps') in-place rotary position embedding.

    ``positions`` is ``[T]`` or ``[B, S]`` (integers); ``query`` and ``key``
    are ``[*positions.shape, heads * head_size]`` or ``[*positions.shape,
    heads, head_size]``; ``cos_sin_cache`` is ``[max_position, rot_dim]``,
    each row the ``rot_dim / 2`` cosines then the sines. Dimensions
    ``[rope_dim_offset, rope_dim_offset + rot_dim)`` of each head turn by
    pairs: ``(j, j + rot_dim / 2)`` with ``is_neox`` (rotating halves), ``(2j,
    2j + 1)`` otherwise (GPT-J); ``inverse`` turns the other way. For
    inference: no derivative (see :func:`apply_rotary_embedding`).
    """
    torch.ops.infini.rotary_embedding(
        positions, query, key, head_size, cos_sin_cache, is_neox, rope_dim_offset, inverse
    )


class _Rotary(torch.autograd.Function):
    """Out of place and differentiable: a rotation's adjoint is the inverse
    rotation, which the same kernel computes."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor | None,
        head_size: int,
        cos_sin_cache: torch.Tensor,
        is_neox: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        ctx.save_for_backward(positions, cos_sin_cache)
        ctx.args = (head_size, is_neox, query.shape, query.dtype, query.device)
        q = query.clone()
        k = None if key is None else key.clone()
        rotary_embedding(positions, q, k, head_size, cos_sin_cache, is_neox)
        return q, k

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_q: torch.Tensor | None, grad_k: torch.Tensor | None
    ) -> tuple[Any, ...]:
        positions, cache = ctx.saved_tensors
        head_size, is_neox, shape, dtype, device = ctx.args
        # The kernel needs a query; without a gradient for it, a zero one.
        dq = torch.zeros(shape, dtype=dtype, device=device) if grad_q is None else grad_q.clone()
        dk = None if grad_k is None else grad_k.clone()
        rotary_embedding(positions, dq, dk, head_size, cache, is_neox, inverse=True)
        return None, None if grad_q is None else dq, dk, None, None, None


def apply_rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`rotary_embedding` out of place, differentiable in ``query`` and
    ``key`` (the cache is a constant: no gradient). Returns the rotated
    ``(query, key)``; ``key`` is ``None`` when none is given."""
    if cos_sin_cache.requires_grad:
        raise NotImplementedError(
            "apply_rotary_embedding: cos_sin_cache is a constant table; it gets no gradient"
        )
    return _Rotary.apply(positions, query, key, head_size, cos_sin_cache, is_neox)


def rotary_embedding_functional(
    positions: torch.Tensor,
    query: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    inverse: bool = False,
) -> torch.Tensor:
    """:func:`rotary_embedding` of ``query`` alone, out of place: a new
    contiguous tensor (the layout the kernel takes), ``query`` untouched.
    Differentiable in ``query`` (the gradient is the inverse rotation; the
    cache gets none). What the compiler plug-in's rotary graph pass rewrites
    a model's rotation into: a compiled graph is functional."""
    return torch.ops.infini.rotary_embedding_functional(
        positions, query, head_size, cos_sin_cache, is_neox, inverse
    )


def topk_softmax(
    gating_output: torch.Tensor,
    topk: int,
    renormalize: bool = False,
    bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mixture-of-experts routing (vLLM's ``topk_softmax``).

    ``gating_output`` is ``[tokens, experts]`` (float16, bfloat16, float32).
    Per token: the softmax of the logits in float, the ``topk`` experts with
    the largest softmax + ``bias`` (float32 ``[experts]``; it moves the
    choice, not the weights; ties go to the lower expert). Returns
    ``(weights, indices, token_expert_indices)``, each ``[tokens, topk]``:
    float32 softmax values (renormalized to sum 1 with ``renormalize``),
    int32 expert ids (-1 on ``is_padding`` tokens) and int32 ``k * tokens +
    t``. Differentiable in ``gating_output`` through the weights.
    """
    weights, indices, token_expert = torch.ops.infini.topk_softmax(
        gating_output, topk, renormalize, bias, is_padding
    )
    return weights, indices, token_expert


def _per_row(value: int | float | torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    if value is None or isinstance(value, torch.Tensor):
        return value
    return torch.tensor([value], dtype=dtype)


def top_k_top_p_sample(
    logits: torch.Tensor,
    top_k: int | torch.Tensor | None = None,
    top_p: float | torch.Tensor | None = None,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Samples one token id per row of ``logits`` ``[batch, vocabulary]``.

    InfiniOps' sampler: keep the ``top_k`` largest logits (``<= 0``: all),
    then the shortest prefix of those whose probabilities, renormalized over
    them, reach ``top_p`` (``<= 0`` or ``>= 1``: no top-p), and draw from the
    softmax over what is kept. ``top_k`` / ``top_p`` are numbers or tensors
    ``[1]`` / ``[batch]``. No temperature: divide the logits first. One
    uniform per row comes from the logits' device generator (or
    ``generator``), so ``torch.manual_seed`` reproduces the ids. Returns int64
    ``[batch]`` on the logits' device.
    """
    return torch.ops.infini.top_k_top_p_sample(
        logits,
        _per_row(top_k, torch.int64),
        _per_row(top_p, torch.float64),
        generator=generator,
    )


def reshape_and_cache_flash(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Writes tokens into a paged KV cache, in place (vLLM's flash layout).

    ``key``/``value`` ``[tokens, heads, head_size]``; ``key_cache``/
    ``value_cache`` ``[num_blocks, block_size, heads, head_size]`` of the
    same dtype; token ``t`` goes to slot ``slot_mapping[t]`` (int32/int64):
    block ``slot // block_size``, row ``slot % block_size``; a negative slot
    skips the token. Inference only: raises when a gradient is required.
    """
    torch.ops.infini.reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping)


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    alibi_slopes: torch.Tensor | None = None,
) -> torch.Tensor:
    """One decode step of attention over a paged KV cache (vLLM's paged attention).

    ``query`` ``[num_seqs, heads, head_size]``, one token per sequence; the
    caches ``[num_blocks, kv_heads, block_size, head_size]`` (a flash cache's
    ``transpose(1, 2)``); ``block_tables`` ``[num_seqs, max_blocks]`` and
    ``seq_lens`` ``[num_seqs]`` (int32/int64). Head ``h`` attends through kv
    head ``h // (heads // kv_heads)`` to its sequence's cached tokens:
    ``softmax(scale * q.k + alibi)`` with vLLM's ``1e-6`` added to the
    denominator, in float, rounded once. A sequence of length 0 gets zeros.
    Returns ``[num_seqs, heads, head_size]``. Inference only.
    """
    return torch.ops.infini.paged_attention(
        query, key_cache, value_cache, block_tables, seq_lens, scale, alibi_slopes
    )


def __getattr__(name: str) -> Any:
    # Every torch.ops.infini operator is reachable here; the functions above
    # add a docstring, defaults or an out-of-place form where one helps, and
    # an operator without one is served as its torch.ops.infini packet.
    if not name.startswith("_"):
        operator = getattr(torch.ops.infini, name, None)
        if isinstance(operator, torch._ops.OpOverloadPacket):
            return operator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    operators = torch._C._dispatch_get_all_op_names()
    fused = {n.split("::", 1)[1].split(".")[0] for n in operators if n.startswith("infini::")}
    return sorted(set(globals()) | fused)
