"""Softmax of attention scores under a causal mask as one kernel:
``torch.ops.infini.causal_softmax``.

Matched (post-grad ATen: softmax decomposes to ``exp(w - amax(w)) /
sum``)::

    w   = where(masked, -inf, scores)   # masked_fill(masked, -inf)
       or scores + mask                 # an additive mask of 0 and -inf
                                        # (or the dtype's lowest value)
    out = softmax(w, -1)

where ``scores`` is ``[..., s, t]`` with ``s <= t`` and the mask is
causal: query ``i`` sees keys ``j <= t - s + i`` (a KV cache of ``t - s``
keys, then the new tokens causally), exactly the kernel's contract. The
mask is checked by value: it must be computed from no graph input (from
shapes only: ``ones(...).tril(...)``, ``arange`` comparisons), and is
evaluated once at compile time and compared with the causal mask. So
graphs with static sizes are rewritten; with symbolic sizes the mask has
no value at compile time and the softmax is left to Inductor.

Rewritten to ``causal_softmax(scores.reshape(-1, s, t)).reshape(shape)``
(the kernel takes 3-D input). Both exponentiate ``scores - rowmax`` over
the unmasked keys; masked keys are 0 in both.
"""

from __future__ import annotations

import math

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx import GraphModule, Node

from . import _graph, count
from ._graph import aten, call, finish, is_call, is_last_dim, only_used_by, value


def _softmax_input(out: Node) -> tuple[Node, list[Node]] | None:
    """``(w, pattern nodes)`` where ``out`` is ``softmax(w, -1)``."""
    if is_call(out, aten._softmax.default):
        w = out.args[0]
        dim_ok = out.args[1] in (-1, value(w).dim() - 1) and not out.args[2]
        return (w, [out]) if dim_ok else None
    if not is_call(out, aten.div.Tensor):
        return None
    exp, total = out.args
    if not (is_call(exp, aten.exp.default) and is_call(total, aten.sum.dim_IntList)):
        return None
    if total.args[0] is not exp or not (len(total.args) > 2 and total.args[2]):
        return None
    shifted = exp.args[0]
    if not is_call(shifted, aten.sub.Tensor):
        return None
    w, peak = shifted.args
    if not is_call(peak, aten.amax.default) or peak.args[0] is not w:
        return None
    ndim = value(w).dim()
    if not (is_last_dim(total.args[1], ndim) and is_last_dim(peak.args[1], ndim)):
        return None
    if not (len(peak.args) > 2 and peak.args[2]):
        return None
    pattern = [peak, shifted, exp, total, out]
    return (w, pattern) if only_used_by(pattern[:-1], set(pattern)) else None


def _inputs_free(node: Node) -> bool:
    """Whether ``node`` is computed from no graph input (placeholder,
    attribute) and no symbolic size: from constants and shapes only."""
    seen: set[Node] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op != "call_function":
            return False
        for arg in (*n.args, *n.kwargs.values()):
            leaves = arg if isinstance(arg, (list, tuple)) else (arg,)
            for leaf in leaves:
                if isinstance(leaf, torch.SymInt | torch.SymFloat | torch.SymBool):
                    return False
                if isinstance(leaf, Node):
                    stack.append(leaf)
    return True


def _constant(node: Node) -> torch.Tensor | None:
    """The value of a node computed from no graph input, evaluated now
    (a mask built from shapes); None where it depends on an input."""
    if not _inputs_free(node):
        return None
    computed: dict[Node, object] = {}

    def evaluate(n: object) -> object:
        if isinstance(n, torch.device):
            return torch.device("cpu")  # evaluated on the CPU, whatever the device
        if isinstance(n, (list, tuple)):
            return type(n)(evaluate(a) for a in n)
        if not isinstance(n, Node):
            return n
        if n not in computed:
            args = [evaluate(a) for a in n.args]
            kwargs = {k: evaluate(v) for k, v in n.kwargs.items()}
            computed[n] = n.target(*args, **kwargs)
        return computed[n]

    with unset_fake_temporarily():
        result = evaluate(node)
    return result if isinstance(result, torch.Tensor) else None


def _is_causal(allowed: torch.Tensor, shape: torch.Size) -> bool:
    """Whether ``allowed``, broadcast to the scores' ``shape`` ``[..., s,
    t]``, is the causal mask in every ``[s, t]`` slice."""
    s, t = shape[-2], shape[-1]
    try:
        allowed = torch.broadcast_to(allowed.cpu(), shape)
    except RuntimeError:
        return False
    causal = torch.ones(s, t, dtype=torch.bool).tril(t - s)
    return bool(torch.equal(allowed, torch.broadcast_to(causal, shape)))


def _masked_scores(w: Node) -> Node | None:
    """``scores`` where ``w`` is them under a causal mask."""
    w_val = value(w)
    if not isinstance(w_val, torch.Tensor) or w_val.dim() < 2 or not w_val.is_floating_point():
        return None
    s, t = w_val.shape[-2], w_val.shape[-1]
    if not (isinstance(s, int) and isinstance(t, int)) or s > t:
        return None
    if is_call(w, aten.where.self):
        masked, fill, scores = w.args
        fill_value = _constant(fill) if isinstance(fill, Node) else torch.tensor(fill)
        if fill_value is None or fill_value.numel() != 1 or fill_value.item() != -math.inf:
            return None
        mask = _constant(masked)
        if mask is None or mask.dtype != torch.bool or mask.dim() > w_val.dim():
            return None
        allowed = ~mask
    elif is_call(w, aten.add.Tensor) and len(w.args) == 2 and not w.kwargs:
        scores, mask_node = w.args
        mask = _constant(mask_node) if isinstance(mask_node, Node) else None
        if mask is None:
            scores, mask_node = mask_node, scores
            mask = _constant(mask_node) if isinstance(mask_node, Node) else None
        if mask is None or not mask.is_floating_point() or mask.dim() > w_val.dim():
            return None
        lowest = torch.finfo(mask.dtype).min
        blocked = (mask == -math.inf) | (mask == lowest)
        if not bool(((mask == 0) | blocked).all()):
            return None
        allowed = ~blocked
    else:
        return None
    scores_val = value(scores)
    if not isinstance(scores_val, torch.Tensor) or scores_val.shape != w_val.shape:
        return None
    if scores_val.dtype != w_val.dtype:
        return None
    return scores if _is_causal(allowed, w_val.shape) else None


def rewrite(gm: GraphModule) -> int:
    """The graph pass: every match, rewritten; returns how many."""
    graph = gm.graph
    rewrites = 0
    candidates = [
        *graph.find_nodes(op="call_function", target=aten.div.Tensor),
        *graph.find_nodes(op="call_function", target=aten._softmax.default),
    ]
    for out in candidates:
        found = _softmax_input(out)
        if found is None:
            continue
        w, _ = found
        scores = _masked_scores(w)
        if scores is None or not _graph.served("infini::causal_softmax", scores):
            continue
        shape = list(value(scores).shape)
        s, t = shape[-2:]
        with graph.inserting_before(out):
            flat = (
                scores if len(shape) == 3 else call(graph, aten.reshape.default, scores, [-1, s, t])
            )
            fused = call(graph, torch.ops.infini.causal_softmax.default, flat)
            if len(shape) != 3:
                fused = call(graph, aten.reshape.default, fused, shape)
        out.replace_all_uses_with(fused)
        rewrites += 1
    count("causal_softmax", rewrites)
    return finish(gm, rewrites)
