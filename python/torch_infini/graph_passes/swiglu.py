"""SiLU(gate) · up as one kernel: ``torch.ops.infini.swiglu``, or
``silu_and_mul`` where gate and up are the two halves of one projection.

Matched (post-grad ATen: ``F.silu`` decomposes to ``g / (1 + exp(-g))``)::

    out = up * silu(gate)             # either order

with ``up`` and ``gate`` of one shape and one floating dtype (no
broadcasting), rewritten to ``swiglu(up, gate)``; where ``gate = x[...,
:h]`` and ``up = x[..., h:2h]`` of one ``x`` whose last dimension is
``2h``, to ``silu_and_mul(x)``. Both compute in float32 and round once, as
the decomposition does for float32 inputs.
"""

from __future__ import annotations

import torch
from torch.fx import GraphModule, Node

from . import _graph, count
from ._graph import (
    aten,
    call,
    finish,
    half_of,
    is_call,
    is_number,
    only_used_by,
    other_operand,
    same_shape_and_dtype,
    sole_user,
)


def _silu_input(node: Node) -> tuple[Node, list[Node]] | None:
    """``(g, pattern nodes)`` where ``node`` computes ``silu(g)``."""
    if is_call(node, aten.silu.default):
        return node.args[0], [node]
    if not is_call(node, aten.div.Tensor):
        return None
    g, denominator = node.args
    if not is_call(denominator, aten.add.Tensor, aten.add.Scalar):
        return None
    exp, one = denominator.args[0], denominator.args[1]
    if is_number(exp):
        exp, one = one, exp
    if one != 1 or not is_call(exp, aten.exp.default):
        return None
    neg = exp.args[0]
    if not is_call(neg, aten.neg.default) or neg.args[0] is not g:
        return None
    return g, [neg, exp, denominator, node]


def _halves(gate: Node, up: Node) -> Node | None:
    """``x`` where ``gate`` is the first half of ``x``'s last dimension and
    ``up`` the second."""
    first, second = half_of(gate), half_of(up)
    if first is None or second is None or first[0] is not second[0]:
        return None
    return first[0] if (first[1], second[1]) == (0, 1) else None


def rewrite(gm: GraphModule) -> int:
    """The graph pass: every match, rewritten; returns how many."""
    graph = gm.graph
    swiglu = halves = 0
    candidates = [
        *graph.find_nodes(op="call_function", target=aten.div.Tensor),
        *graph.find_nodes(op="call_function", target=aten.silu.default),
    ]
    for silu in candidates:
        found = _silu_input(silu)
        product = sole_user(silu)
        if found is None or not is_call(product, aten.mul.Tensor):
            continue
        gate, pattern = found
        up = other_operand(product, silu)
        if up is None or up is gate or not same_shape_and_dtype(product, up, gate):
            continue
        if not only_used_by(pattern, {*pattern, product}):
            continue
        x = _halves(gate, up)
        if x is not None and not _graph.served("infini::silu_and_mul", x):
            x = None
        if x is None and not _graph.served("infini::swiglu", up):
            continue
        with graph.inserting_before(product):
            if x is not None:
                fused = call(graph, torch.ops.infini.silu_and_mul.default, x)
                halves += 1
            else:
                fused = call(graph, torch.ops.infini.swiglu.default, up, gate)
                swiglu += 1
        product.replace_all_uses_with(fused)
    count("swiglu", swiglu)
    count("silu_and_mul", halves)
    return finish(gm, swiglu + halves)
