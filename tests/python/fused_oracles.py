"""torch.ops.infini's fused operators composed from stock PyTorch operators.

The oracles of the fused-operator tests (docs/fused_operators.md gives the
semantics): nothing here calls ``torch.ops.infini`` or ``torch_infini``, so
a test never checks the project's code against itself (docs/TESTING.md).

Each composition computes as the kernels promise: in float (float64 for
float64 inputs) and rounded once to the input's dtype, with the intermediate
roundings InfiniOps' kernels make (the residual sum of ``add_rms_norm``).
The compositions are differentiable: the gradients of a leaf in float16 or
bfloat16 flow through the ``.to(wide)`` casts, so PyTorch's autograd computes
them in float and rounds them once, as the fused autograd formulas promise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def wide(dtype: torch.dtype) -> torch.dtype:
    """The dtype the fused kernels compute in: float64 for float64, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def round_through(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` (wide) rounded to ``dtype`` and read back, with an identity
    gradient: a stored intermediate the kernel rounds in its forward but
    whose derivative the fused backward takes in float. (``t + (q - t)`` is
    ``q`` exactly: ``q - t`` is exact by Sterbenz's lemma for finite ``t``.)"""
    return t + (t.detach().to(dtype).to(t.dtype) - t.detach())


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :h]) * x[..., h:]``."""
    h = x.shape[-1] // 2
    w = wide(x.dtype)
    return (F.silu(x[..., :h].to(w)) * x[..., h:].to(w)).to(x.dtype)


def swiglu(input: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:  # noqa: A002
    """``input * silu(gate)``."""
    w = wide(input.dtype)
    return (input.to(w) * F.silu(gate.to(w))).to(input.dtype)


def causal_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of ``x`` ``[..., s, t]``, row ``i`` over
    columns ``j <= t - s + i`` (the others 0, whatever the row holds).

    PyTorch's own softmax in the input's dtype: on float16/bfloat16 it
    computes in float and rounds once, and differentiates from its rounded
    output, as CUDA's softmax and the fused backward (``y * (grad - sum(grad
    * y))`` of the saved output) do. (Through ``x.float()`` the gradient would
    come from the unrounded output instead: up to 4e-4 (float16) and 3e-3
    (bfloat16) apart for unit gradients, beyond the dtypes' tolerances.)"""
    s, t = x.shape[-2:]
    allowed = torch.ones(s, t, dtype=torch.bool).tril(t - s)
    # masked_fill after: 0 elsewhere even in a row of NaN (softmax's would be NaN there)
    return torch.softmax(x.masked_fill(~allowed, float("-inf")), -1).masked_fill(~allowed, 0)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``(x * weight) * rsqrt(mean(x², -1) + eps)`` in float, rounded once."""
    dt, w = x.dtype, wide(x.dtype)
    xw = x.to(w)
    return ((xw * weight.to(w)) * torch.rsqrt(xw.square().mean(-1, keepdim=True) + eps)).to(dt)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, residual_out)``: ``residual_out = x + residual`` rounded to the
    dtype; ``out = (residual_out * weight) * rsqrt(mean(residual_out², -1) + eps)``."""
    dt, w = x.dtype, wide(x.dtype)
    s = round_through(x.to(w) + residual.to(w), dt)
    inverse_rms = torch.rsqrt(s.square().mean(-1, keepdim=True) + eps)
    return ((s * weight.to(w)) * inverse_rms).to(dt), s.to(dt)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's in-place form, out of place: ``(new input, new residual)``; the
    weight multiplies after the inverse RMS."""
    dt, w = x.dtype, wide(x.dtype)
    s = round_through(x.to(w) + residual.to(w), dt)
    y = s * torch.rsqrt(s.square().mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(w)
    return y.to(dt), s.to(dt)


def rotary(
    positions: torch.Tensor,
    t: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    offset: int = 0,
    inverse: bool = False,
) -> torch.Tensor:
    """``t`` (``[*P, heads * head_size]`` or ``[*P, heads, head_size]``, ``P``
    the positions' shape) rotated: dimensions ``[offset, offset + rot)`` of
    each head by pairs ``(j, j + rot/2)`` (NeoX) or ``(2j, 2j + 1)`` (GPT-J),
    ``x' = x cos - y sin``, ``y' = y cos + x sin`` (``-sin`` with ``inverse``)."""
    dt, w = t.dtype, wide(t.dtype)
    split = t.dim() == positions.dim() + 2
    heads = (t if split else t.unflatten(-1, (-1, head_size))).to(w)
    rot = cos_sin_cache.shape[1]
    half = rot // 2
    rows = cos_sin_cache[positions.long()].to(w).unsqueeze(-2)  # [*P, 1, rot]
    cos, sin = rows[..., :half], rows[..., half:]
    if inverse:
        sin = -sin
    part = heads[..., offset : offset + rot]
    if is_neox:
        x, y = part[..., :half], part[..., half:]
        turned = torch.cat([x * cos - y * sin, y * cos + x * sin], -1)
    else:
        x, y = part[..., 0::2], part[..., 1::2]
        turned = torch.stack([x * cos - y * sin, y * cos + x * sin], -1).flatten(-2)
    out = torch.cat([heads[..., :offset], turned, heads[..., offset + rot :]], -1)
    return out.to(dt).reshape(t.shape)


def topk_softmax(
    gating: torch.Tensor,
    topk: int,
    renormalize: bool = False,
    bias: torch.Tensor | None = None,
    is_padding: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MoE routing: ``(weights float32, indices int32, token_expert int32)``.

    The softmax over experts in float; the ``topk`` experts by softmax +
    ``bias`` (a stable descending sort: ties go to the lower expert); their
    softmax values (divided by their sum with ``renormalize``); -1 for the
    experts of ``is_padding`` tokens; ``k * tokens + t``.
    """
    tokens = gating.shape[0]
    p = torch.softmax(gating.float(), -1)
    score = p if bias is None else p + bias
    chosen = torch.sort(score.detach(), dim=-1, descending=True, stable=True).indices[:, :topk]
    weights = p.gather(-1, chosen)
    if renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    indices = chosen.int()
    if is_padding is not None:
        indices = indices.masked_fill(is_padding.bool()[:, None], -1)
    token_expert = (torch.arange(topk)[None] * tokens + torch.arange(tokens)[:, None]).int()
    return weights, indices, token_expert


def top_k_top_p_select(
    logits: torch.Tensor,
    top_k: torch.Tensor | None,
    top_p: torch.Tensor | None,
    uniforms: torch.Tensor,
) -> torch.Tensor:
    """The token ids ``top_k_top_p_sample`` picks for the uniforms ``uniforms``
    ``[B]``, row by row in float64: the logits (read in float) in descending
    order, ties to the lower id; the top ``k`` (``<= 0`` or ``> V``: all);
    the shortest prefix of those whose renormalized probabilities reach
    ``p`` (only for ``0 < p < 1``); the first kept token whose cumulative
    probability over the kept ones reaches the row's uniform (the last kept
    one if rounding leaves the total short of it)."""
    rows, vocabulary = logits.shape
    values = logits.float().double()
    ids = []
    for r in range(rows):
        row = values[r].tolist()
        order = sorted(range(vocabulary), key=lambda i, row=row: (-row[i], i))
        k = vocabulary if top_k is None else int(top_k[r if top_k.numel() > 1 else 0])
        kept = order if k <= 0 or k > vocabulary else order[:k]
        probabilities = torch.softmax(values[r][kept], -1)
        p = None if top_p is None else float(top_p[r if top_p.numel() > 1 else 0])
        if p is not None and 0 < p < 1:
            reach = int((probabilities.cumsum(-1) < p).sum()) + 1
            kept = kept[: min(reach, len(kept))]
            probabilities = torch.softmax(values[r][kept], -1)
        cumulative = probabilities.cumsum(-1).tolist()
        u = float(uniforms[r])
        pick = next((i for i, c in enumerate(cumulative) if c >= u), len(kept) - 1)
        ids.append(kept[pick])
    return torch.tensor(ids, dtype=torch.int64)
