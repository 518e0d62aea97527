"""RMSNorm, and a residual add followed by RMSNorm, as one kernel each.

Matched (post-grad ATen, as ``nn.RMSNorm``, ``F.rms_norm`` and Llama-style
modules written by hand decompose)::

    r   = rsqrt(mean(pow(x, 2), [-1], keepdim=True) + eps)
    out = (x * r) * weight

with ``x`` 2-D or 3-D and ``weight`` of ``x``'s dtype and shape
``[hidden]`` (what InfiniOps' rms_norm kernel takes), rewritten to
``torch.ops.infini.rms_norm(x, weight, eps)`` (InfiniOps' rms_norm).
Where ``x = a + b`` of one shape and dtype, to
``torch.ops.infini.add_rms_norm(a, b, weight, eps)``, whose second result
replaces the sum everywhere else it is used (the next block's residual).

Both compute in float32 for float32 inputs, as the decomposition does;
the order of the multiplications differs, so results agree within
rounding (``docs/compiler_plugin.md``).
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from . import _graph, count
from ._graph import (
    aten,
    call,
    finish,
    getitem,
    is_call,
    is_last_dim,
    is_number,
    only_used_by,
    other_operand,
    position,
    same_shape_and_dtype,
    sole_user,
    value,
)


def _match(rsqrt: Node) -> tuple[Node, Node, Node | None, float, list[Node]] | None:
    """``(x, out, weight, eps, pattern nodes)`` of the RMSNorm around ``rsqrt``."""
    add = rsqrt.args[0]
    if not is_call(add, aten.add.Scalar, aten.add.Tensor) or not is_number(add.args[1]):
        return None
    eps = float(add.args[1])
    mean = add.args[0]
    if not is_call(mean, aten.mean.dim) or mean.kwargs.get("dtype") is not None:
        return None
    square = mean.args[0]
    if is_call(square, aten.pow.Tensor_Scalar) and square.args[1] == 2:
        x = square.args[0]
    elif is_call(square, aten.mul.Tensor) and square.args[0] is square.args[1]:
        x = square.args[0]
    else:
        return None
    x_val = value(x)
    if not isinstance(x_val, torch.Tensor) or x_val.dim() not in (2, 3):
        return None
    keepdim = mean.args[2] if len(mean.args) > 2 else mean.kwargs.get("keepdim", False)
    if not x_val.is_floating_point() or not is_last_dim(mean.args[1], x_val.dim()) or not keepdim:
        return None
    normed = sole_user(rsqrt)
    if not is_call(normed, aten.mul.Tensor) or other_operand(normed, rsqrt) is not x:
        return None
    pattern = [square, mean, add, rsqrt, normed]
    out, weight = normed, None
    scale = sole_user(normed)
    if is_call(scale, aten.mul.Tensor):
        candidate = other_operand(scale, normed)
        w = value(candidate)
        if (
            isinstance(w, torch.Tensor)
            and w.dim() == 1
            and w.dtype == x_val.dtype
            and w.shape[0] == x_val.shape[-1]
            and value(scale).shape == x_val.shape
        ):
            out, weight = scale, candidate
            pattern.append(scale)
    if not only_used_by(pattern[:-1], set(pattern)):
        return None
    if value(out).dtype != x_val.dtype or value(out).shape != x_val.shape:
        return None
    return x, out, weight, eps, pattern


def rewrite(gm: GraphModule) -> int:
    """The graph pass: every match, rewritten; returns how many."""
    graph = gm.graph
    plain = residual = 0
    for rsqrt in list(graph.find_nodes(op="call_function", target=aten.rsqrt.default)):
        match = _match(rsqrt)
        if match is None:
            continue
        x, out, weight, eps, _ = match
        order = position(graph)
        if (
            weight is not None
            and is_call(x, aten.add.Tensor)
            and len(x.args) == 2
            and not x.kwargs
            and same_shape_and_dtype(x, *x.args)
            and order[weight] < order[x]
            and _graph.served("infini::add_rms_norm", x)
        ):
            # The sum's other users may come before `out`: the fused call
            # goes where the sum was.
            with graph.inserting_after(x):
                fused = call(graph, torch.ops.infini.add_rms_norm.default, *x.args, weight, eps)
                with graph.inserting_after(fused):
                    normed = getitem(graph, fused, 0)
                    with graph.inserting_after(normed):
                        summed = getitem(graph, fused, 1)
            out.replace_all_uses_with(normed)
            x.replace_all_uses_with(summed)
            residual += 1
            continue
        if weight is None or not _graph.served("infini::rms_norm", x):
            continue  # InfiniOps' kernel takes a weight
        with graph.inserting_before(out):
            fused = call(graph, torch.ops.infini.rms_norm.default, x, weight, eps)
        out.replace_all_uses_with(fused)
        plain += 1
    count("rms_norm", plain)
    count("add_rms_norm", residual)
    return finish(gm, plain + residual)
