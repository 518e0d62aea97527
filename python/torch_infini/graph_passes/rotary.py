"""Rotary position embeddings as one kernel: ``torch.ops.infini.rotary_embedding``
(through its functional form, ``infini.rotary_embedding_functional``).

Matched, for ``x`` ``[b, heads, t, d]`` or ``[heads, t, d]`` with ``h = d / 2``,
``x1 = x[..., :h]`` and ``x2 = x[..., h:]``::

    cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)   # "halves": c, s of width h
    x * C + cat([-x2, x1], -1) * S                # "rotate_half": C, S of width d

(products and sums in either order). The rotate_half form (transformers'
Llama and its kin) is a rotation only where ``C`` and ``S`` repeat their
first half: that is proven from how they were built, ``cat([f, f], -1)`` (or
its decomposition, ``expand`` of ``f`` unsqueezed, then ``reshape``) under
elementwise operations; otherwise nothing is rewritten. ``c`` and ``s`` must
not vary over heads and share one dtype; the result keeps ``x``'s dtype.

The kernel takes a table and positions. The rewrite gives it the rows the
graph already gathered: ``cache = cat([c, s], -1)`` as ``[B * t, 2h]`` (``B =
b`` where ``c`` varies over the batch, else 1) and ``positions`` the row of
each token, an ``arange`` shaped ``[b, t]``; ``x`` goes in as its ``[b, t,
heads, d]`` view and the result comes back transposed, with the original
result's strides (a contiguous copy where the original was contiguous; a
layout it cannot match is not rewritten). Sizes must be static.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node

from . import _graph, count
from ._graph import aten, finish, half_of, is_call, is_number, only_used_by, value

prims = torch.ops.prims
_TARGET = "infini::rotary_embedding"

# Operations f with f(cat([a, a], -1)) == cat([f(a), f(a)], -1): elementwise
# on one tensor.
_ELEMENTWISE = (
    aten.cos.default,
    aten.sin.default,
    aten.neg.default,
    aten.clone.default,
    prims.convert_element_type.default,
    aten._to_copy.default,
)


def _factors(node: Any) -> tuple[Any, Any] | None:
    return tuple(node.args[:2]) if is_call(node, aten.mul.Tensor) and not node.kwargs else None


def _split_product(node: Any, x: Node, index: int) -> Any:
    """``c`` where ``node`` is ``x``'s half ``index`` times ``c`` (either order)."""
    factors = _factors(node)
    if factors is None:
        return None
    a, b = factors
    if _is_half(a, x, index):
        return b
    if _is_half(b, x, index):
        return a
    return None


def _is_half(node: Any, x: Node, index: int) -> bool:
    found = half_of(node) if isinstance(node, Node) else None
    return found is not None and found[0] is x and found[1] == index


def _is_last_dim(dim: Any, ndim: int) -> bool:
    return dim in (-1, ndim - 1)


def _match_halves(cat: Node) -> tuple[Node, Any, Any, list[Node]] | None:
    """``(x, c, s, pattern nodes)`` for ``cat([x1*c - x2*s, x2*c + x1*s], -1)``."""
    tensors, dim = cat.args[0], cat.args[1] if len(cat.args) > 1 else 0
    if len(tensors) != 2 or not _is_last_dim(dim, value(cat).dim()):
        return None
    first, second = tensors
    if not (is_call(first, aten.sub.Tensor) and is_call(second, aten.add.Tensor)):
        return None
    if first.kwargs or second.kwargs:  # an alpha
        return None
    a, b = first.args[:2]
    x1s = [half_of(f) for f in _factors(a) or () if isinstance(f, Node)]
    for x, _ in (h for h in x1s if h is not None and h[1] == 0):
        c = _split_product(a, x, 0)
        s = _split_product(b, x, 1)
        if c is None or s is None:
            continue
        m1, m2 = second.args[:2]
        if not (
            (_split_product(m1, x, 1) is c and _split_product(m2, x, 0) is s)
            or (_split_product(m2, x, 1) is c and _split_product(m1, x, 0) is s)
        ):
            continue
        halves = {f for m in (a, b, m1, m2) for f in _factors(m) if isinstance(f, Node)}
        halves = {f for f in halves if half_of(f) is not None and half_of(f)[0] is x}
        return x, c, s, [*halves, a, b, m1, m2, first, second, cat]
    return None


def _match_rotate_half(add: Node) -> tuple[Node, Any, Any, list[Node]] | None:
    """``(x, C[..., :h], S[..., :h] as (C, S), pattern nodes)`` for
    ``x * C + cat([-x2, x1], -1) * S``."""
    if add.kwargs:
        return None
    for direct, rotated in (add.args[:2], tuple(reversed(add.args[:2]))):
        f_direct, f_rotated = _factors(direct), _factors(rotated)
        if f_direct is None or f_rotated is None:
            continue
        for cat, big_s in (f_rotated, tuple(reversed(f_rotated))):
            if not is_call(cat, aten.cat.default):
                continue
            tensors = cat.args[0]
            dim = cat.args[1] if len(cat.args) > 1 else 0
            if len(tensors) != 2 or not _is_last_dim(dim, value(cat).dim()):
                continue
            neg, x1 = tensors
            if not is_call(neg, aten.neg.default):
                continue
            first, second = half_of(x1), half_of(neg.args[0])
            if first is None or second is None or first[0] is not second[0]:
                continue
            x = first[0]
            if (first[1], second[1]) != (0, 1) or x not in f_direct:
                continue
            big_c = f_direct[1] if f_direct[0] is x else f_direct[0]
            return x, big_c, big_s, [x1, neg.args[0], neg, cat, direct, rotated, add]
    return None


def _repeats_its_first_half(node: Any) -> bool:
    """Whether ``node``'s last dimension is ``[f, f]`` by construction."""
    while isinstance(node, Node):
        nd = value(node).dim()
        if is_call(node, aten.cat.default):
            tensors = node.args[0]
            dim = node.args[1] if len(node.args) > 1 else 0
            return len(tensors) == 2 and tensors[0] is tensors[1] and _is_last_dim(dim, nd)
        if is_call(node, aten.reshape.default, aten.view.default, aten._unsafe_view.default):
            return _expanded_pair(node)
        if is_call(node, *_ELEMENTWISE):
            if is_call(node, aten._to_copy.default) and set(node.kwargs) - {"dtype"}:
                return False
            node = node.args[0]
        elif is_call(node, aten.mul.Tensor) and any(is_number(a) for a in node.args[:2]):
            node = node.args[0] if isinstance(node.args[0], Node) else node.args[1]
        elif is_call(node, aten.div.Tensor) and is_number(node.args[1]):
            node = node.args[0]
        elif is_call(node, aten.unsqueeze.default) and not _is_last_dim(node.args[1], nd):
            node = node.args[0]
        elif (
            is_call(node, aten.expand.default)
            and value(node.args[0]).dim() == nd
            and value(node.args[0]).shape[-1] == value(node).shape[-1]
        ):
            node = node.args[0]
        else:
            return False
    return False


def _expanded_pair(reshape: Node) -> bool:
    """``reshape(expand(unsqueeze(f, -2), [..., 2, h]), [..., 2h])``: how
    Inductor decomposes ``cat([f, f], -1)``."""
    source = reshape.args[0]
    if is_call(source, aten.clone.default):
        source = source.args[0]
    if not is_call(source, aten.expand.default):
        return False
    unsqueezed = source.args[0]
    if not is_call(unsqueezed, aten.unsqueeze.default):
        return False
    f = value(unsqueezed.args[0])
    dim = unsqueezed.args[1]
    out, expanded = value(reshape), value(source)
    return (
        dim in (-2, f.dim() - 1)
        and list(expanded.shape[-2:]) == [2, f.shape[-1]]
        and list(out.shape) == [*expanded.shape[:-2], 2 * f.shape[-1]]
    )


def _static(*sizes: Any) -> bool:
    return all(isinstance(s, int) for s in sizes)


class _Builder:
    """Adds nodes before ``anchor`` with their fake values (in the graph's
    fake mode: some of them make tensors from nothing)."""

    def __init__(self, graph: Graph, anchor: Node, fake_mode: Any) -> None:
        self.graph, self.anchor, self.fake_mode = graph, anchor, fake_mode
        self.added: list[Node] = []

    def __call__(self, target: Any, *args: Any, **kwargs: Any) -> Node:
        with self.graph.inserting_before(self.anchor):
            node = self.graph.call_function(target, args, kwargs)
        self.added.append(node)

        def fake(a: Any) -> Any:
            if isinstance(a, (list, tuple)):
                return type(a)(fake(i) for i in a)
            return value(a)

        with self.fake_mode:
            node.meta["val"] = target(*fake(args), **{k: fake(v) for k, v in kwargs.items()})
        return node

    def undo(self) -> None:
        for node in reversed(self.added):
            self.graph.erase_node(node)


def _rewrite(add: _Builder, result: Node, x: Node, c: Any, s: Any) -> bool:
    """Replaces ``result`` (x rotated by the half-width ``c``, ``s``) with the
    kernel's call, its nodes added through ``add``; False where the shapes,
    dtypes or layout do not allow it (the caller then undoes what ``add``
    added)."""
    xv, rv = value(x), value(result)
    if not isinstance(c, Node) or not isinstance(s, Node):
        return False
    cv, sv = value(c), value(s)
    nd = xv.dim()
    if nd not in (3, 4) or not _static(*xv.shape, *cv.shape, *sv.shape):
        return False
    d = xv.shape[-1]
    h, t = d // 2, xv.shape[-2]
    if d % 2 or rv.shape != xv.shape or rv.dtype != xv.dtype or not xv.is_floating_point():
        return False
    if cv.shape != sv.shape or cv.dtype != sv.dtype or cv.dim() > nd:
        return False
    table = [1] * (nd - cv.dim()) + list(cv.shape)
    if table[-1] != h or table[-2] not in (1, t) or table[-3] != 1:
        return False
    b = xv.shape[0] if nd == 4 else 1
    rows = table[0] if nd == 4 else 1  # B: the batch rows the tables vary over
    if rows not in (1, b):
        return False
    if not _graph.served(_TARGET, x, c):
        return False

    halves = []
    for half in (c, s):
        if cv.dim() != nd:
            half = add(aten.reshape.default, half, table)
        half = add(aten.expand.default, half, [rows, 1, t, h] if nd == 4 else [1, t, h])
        halves.append(add(aten.reshape.default, half, [rows * t, h]))
    cache = add(aten.cat.default, halves, -1)
    positions = add(
        prims.iota.default,
        rows * t,
        start=0,
        step=1,
        dtype=torch.int64,
        device=xv.device,
        requires_grad=False,
    )
    order = [0, 2, 1, 3] if nd == 4 else [1, 0, 2]
    if nd == 4:
        positions = add(aten.reshape.default, positions, [rows, t])
        if rows != b:
            positions = add(aten.expand.default, positions, [b, t])
            positions = add(aten.clone.default, positions, memory_format=torch.contiguous_format)
    tokens_first = add(aten.permute.default, x, order)
    rotated = add(
        torch.ops.infini.rotary_embedding_functional.default,
        positions,
        tokens_first,
        d,
        cache,
        True,  # is_neox: the halves turn as pairs (j, j + h)
    )
    back = add(aten.permute.default, rotated, order)
    if not _same_layout(value(back), rv):
        if not rv.is_contiguous():
            return False
        back = add(aten.clone.default, back, memory_format=torch.contiguous_format)
    result.replace_all_uses_with(back)
    return True


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same strides wherever a dimension has more than one element."""
    return all(
        size <= 1 or sa == sb for size, sa, sb in zip(a.shape, a.stride(), b.stride(), strict=True)
    )


def rewrite(gm: GraphModule) -> int:
    """The graph pass: every match, rewritten; returns how many."""
    graph = gm.graph
    made = 0
    for cat in list(graph.find_nodes(op="call_function", target=aten.cat.default)):
        found = _match_halves(cat)
        if found is None:
            continue
        x, c, s, pattern = found
        add = _Builder(graph, cat, value(x).fake_mode)
        if only_used_by(pattern[:-1], set(pattern)) and _rewrite(add, cat, x, c, s):
            made += 1
        else:
            add.undo()
    for total in list(graph.find_nodes(op="call_function", target=aten.add.Tensor)):
        found = _match_rotate_half(total)
        if found is None:
            continue
        x, big_c, big_s, pattern = found
        if not only_used_by(pattern[:-1], set(pattern)):
            continue
        if not (_repeats_its_first_half(big_c) and _repeats_its_first_half(big_s)):
            continue
        if not _static(*value(big_c).shape) or value(big_c).shape[-1] != value(x).shape[-1]:
            continue
        add = _Builder(graph, total, value(x).fake_mode)
        h = value(big_c).shape[-1] // 2
        c = add(aten.slice.Tensor, big_c, -1, 0, h)  # the tables' first halves
        s = add(aten.slice.Tensor, big_s, -1, 0, h)
        if _rewrite(add, total, x, c, s):
            made += 1
        else:
            add.undo()
    count("rotary_embedding", made)
    return finish(gm, made)
