"""The fused operators a program calls itself (``torch.ops.infini.swiglu``,
``causal_softmax``, ...), lowered by Inductor where the passes make no
rewrites.

The built-in passes rewrite patterns into fused kernels only where that is
faster (:func:`~torch_infini.graph_passes.rewrites_enabled`: by default
where device memory is not host memory). Where they do not, Inductor's
own code is the fused kernel, and an explicit call into the operator would
stay an opaque call in the compiled graph (on ``host`` the operator's CPU
reference, several ATen calls, each a pass over memory). So there each
such call is decomposed into the ATen ops of its CPU reference
(native/ops/src/fused/: the same arithmetic in the same dtypes), which
Inductor fuses with its neighbours, as it does the stock-PyTorch form of
the same pattern.

The decompositions enter Inductor's table (``torch._inductor.decomposition``)
and return ``NotImplemented`` for tensors on other devices and wherever the
rewrites are on, which leaves the call as it is. The inputs were already
checked by the operator's Meta kernel when Dynamo traced the call, so a
decomposition never sees an input the operator refuses. Whether the
rewrites are on is part of the compile cache key (``served_key``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def _wide(dtype: torch.dtype) -> torch.dtype:
    """The dtype the CPU references compute in (common.h: ``wide``)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _lowered(x: torch.Tensor) -> bool:
    from . import rewrites_enabled

    return x.device.type == "infini" and not rewrites_enabled()


def silu_and_mul(x: torch.Tensor) -> Any:
    if not _lowered(x):
        return NotImplemented
    h = x.shape[-1] // 2
    gate, up = x[..., :h].to(_wide(x.dtype)), x[..., h:].to(_wide(x.dtype))
    return (torch.nn.functional.silu(gate) * up).to(x.dtype)


def swiglu(input: torch.Tensor, gate: torch.Tensor) -> Any:  # noqa: A002  (the schema's name)
    if not _lowered(input):
        return NotImplemented
    w = _wide(input.dtype)
    return (input.to(w) * torch.nn.functional.silu(gate.to(w))).to(input.dtype)


def causal_softmax(x: torch.Tensor) -> Any:
    if not _lowered(x):
        return NotImplemented
    s, t = x.shape[-2:]
    rows = torch.arange(s, device=x.device).unsqueeze(-1)
    cols = torch.arange(t, device=x.device)
    # Query i follows t - s cached keys: it sees keys j <= t - s + i. The
    # masked entries are 0 whatever the row holds, as the kernel writes them.
    outside = cols > rows + (t - s)
    probs = torch.softmax(x.to(_wide(x.dtype)).masked_fill(outside, float("-inf")), -1)
    return probs.masked_fill(outside, 0).to(x.dtype)


def _inverse_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


def rms_norm(input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> Any:  # noqa: A002
    if not _lowered(input):
        return NotImplemented
    w = _wide(input.dtype)
    x = input.to(w)
    return ((x * weight.to(w)) * _inverse_rms(x, eps)).to(input.dtype)


def add_rms_norm(
    input: torch.Tensor,  # noqa: A002
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
) -> Any:
    if not _lowered(input):
        return NotImplemented
    dtype, w = input.dtype, _wide(input.dtype)
    residual_out = (input.to(w) + residual.to(w)).to(dtype)
    x = residual_out.to(w)  # the rounded sum, as the kernel reads it back
    return ((x * weight.to(w)) * _inverse_rms(x, eps)).to(dtype), residual_out


def table() -> dict[Any, Callable[..., Any]]:
    """Each fused operator's decomposition, keyed by its overload."""
    ops = torch.ops.infini
    return {
        ops.silu_and_mul.default: silu_and_mul,
        ops.swiglu.default: swiglu,
        ops.causal_softmax.default: causal_softmax,
        ops.rms_norm.default: rms_norm,
        ops.add_rms_norm.default: add_rms_norm,
    }


def register() -> None:
    """Adds the decompositions to Inductor's table (and to the copy with its
    random-op decompositions, which Inductor caches on first use).

    A call a decomposition leaves (``NotImplemented``) reaches Inductor's
    lowering as the operator itself, which Inductor then calls as an
    extern kernel. It would create that fallback on first sight, but
    refuses to for an operator that has a decomposition, so it is created
    here, with the layout constraint Inductor gives a custom operator."""
    from torch._inductor import decomposition, lowering

    decompositions = table()
    decomposition.decompositions.update(decompositions)
    decomposition.fast_random_decomps.cache_clear()
    for op in decompositions:
        if op not in lowering.lowerings:
            tag = lowering.get_layout_constraint_tag(op, with_default=True)
            lowering.make_fallback(
                op, layout_constraint=lowering.tag_to_layout_constraint(tag), override_decomp=True
            )
