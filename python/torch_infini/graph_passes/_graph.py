"""What the graph passes share: recognizing ATen nodes of a post-grad FX
graph, and adding or removing nodes with their fake values kept up to date.

A post-grad graph is functional ATen, decomposed: ``F.silu`` is there as
``x / (1 + exp(-x))``, softmax as ``exp(x - amax) / sum``. Each pass matches
such a decomposition and replaces it with one ``torch.ops.infini`` (or ATen)
call. A match needs every intermediate node to be used only inside the
pattern (otherwise its value is needed elsewhere, a training graph's saved
activation for example, and the pattern stays as it is).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node

aten = torch.ops.aten


def is_call(value: Any, *targets: Any) -> bool:
    """Whether ``value`` is a node calling one of ``targets``."""
    return isinstance(value, Node) and value.op == "call_function" and value.target in targets


def sole_user(node: Node) -> Node | None:
    """The node's only user, or None where it has none or several."""
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def only_used_by(nodes: Iterable[Node], allowed: set[Node]) -> bool:
    """Whether every user of every node of ``nodes`` is in ``allowed``."""
    return all(user in allowed for node in nodes for user in node.users)


def other_operand(node: Node, operand: Node) -> Any:
    """The argument of a binary node that is not ``operand`` (None if neither is)."""
    a, b = node.args[0], node.args[1]
    if a is operand:
        return b
    if b is operand:
        return a
    return None


def value(node: Any) -> Any:
    """The fake tensor (or other value) the graph records for ``node``."""
    return node.meta.get("val") if isinstance(node, Node) else node


def is_last_dim(dims: Any, ndim: int) -> bool:
    """Whether a reduction's ``dim`` argument is the last dimension only."""
    return isinstance(dims, (list, tuple)) and len(dims) == 1 and dims[0] in (-1, ndim - 1)


def is_number(value_: Any) -> bool:
    return isinstance(value_, (int, float)) and not isinstance(value_, bool)


def same_shape_and_dtype(*nodes: Any) -> bool:
    """Whether the nodes are tensors of one shape and one floating dtype."""
    values = [value(n) for n in nodes]
    if not all(isinstance(v, torch.Tensor) for v in values):
        return False
    first = values[0]
    return first.is_floating_point() and all(
        v.dtype == first.dtype and v.shape == first.shape for v in values[1:]
    )


def half_of(node: Node) -> tuple[Node, int] | None:
    """``(x, 0 or 1)`` where ``node`` is the first or second half of ``x``'s
    last dimension: a slice, or an item of a split (``chunk(2, -1)``)."""
    if is_call(node, operator.getitem):
        split, index = node.args
        if not is_call(split, aten.split.Tensor, aten.split_with_sizes.default):
            return None
        x = split.args[0]
        x_val = value(x)
        dim = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
        sizes = split.args[1]
        width = x_val.shape[-1]
        if dim not in (-1, x_val.dim() - 1) or not isinstance(width, int) or width % 2:
            return None
        halves = sizes == width // 2 or (
            isinstance(sizes, (list, tuple)) and list(sizes) == [width // 2] * 2
        )
        return (x, index) if halves and index in (0, 1) else None
    if not is_call(node, aten.slice.Tensor) or node.kwargs or len(node.args) < 4:
        return None
    x, dim, start, end = node.args[:4]
    step = node.args[4] if len(node.args) > 4 else 1
    x_val = value(x)
    width = x_val.shape[-1]
    if dim not in (-1, x_val.dim() - 1) or step != 1 or not isinstance(width, int) or width % 2:
        return None
    h = width // 2
    if start == 0 and end == h:
        return x, 0
    if start == h and end >= width:
        return x, 1
    return None


@functools.cache
def _served_dtypes(operator_name: str) -> tuple[torch.dtype, ...]:
    from .._operators import supported_dtypes

    try:
        return supported_dtypes(operator_name)
    except KeyError:
        return ()


def served(operator_name: str, *nodes: Any) -> bool:
    """Whether a rewrite into ``operator_name`` is made for the dtypes of
    ``nodes``: rewrites are enabled on this backend (``rewrites_enabled``)
    and it has a native kernel for each dtype. A rewrite into an operator
    that would run in the CPU fallback would be slower than what Inductor
    generates, so none is made."""
    from . import rewrites_enabled

    if not rewrites_enabled():
        return False
    dtypes = _served_dtypes(operator_name)
    return all(value(n).dtype in dtypes for n in nodes)


def call(graph: Graph, target: Callable[..., Any], *args: Any) -> Node:
    """A new node calling ``target``, its fake value computed from its
    arguments' (the operator's Meta kernel, with symbolic sizes where the
    graph has them)."""
    node = graph.call_function(target, args)
    node.meta["val"] = target(*(value(a) for a in args))
    return node


def getitem(graph: Graph, node: Node, index: int) -> Node:
    item = graph.call_function(operator.getitem, (node, index))
    item.meta["val"] = node.meta["val"][index]
    return item


def position(graph: Graph) -> dict[Node, int]:
    """Each node's place in the graph's (topological) order."""
    return {node: i for i, node in enumerate(graph.nodes)}


def finish(gm: GraphModule, rewrites: int) -> int:
    """Removes what the rewrites left unused and regenerates the module's code."""
    if rewrites:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return rewrites
