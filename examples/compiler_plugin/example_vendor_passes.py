"""The example vendor's graph pass (examples/compiler_plugin/example_plugin.c
names it first in its pipeline).

A pass is ``function(gm: torch.fx.GraphModule) -> int``: it rewrites the
post-grad graph in place and returns how many rewrites it made. This one
folds ``relu(relu(x))`` into ``relu(x)`` (relu is idempotent) and counts
its folds in ``torch._dynamo.utils.counters["example_vendor"]``.
"""

from __future__ import annotations

import torch
from torch._dynamo.utils import counters

RELU = torch.ops.aten.relu.default


def fold_repeated_relu(gm: torch.fx.GraphModule) -> int:
    folds = 0
    for outer in list(gm.graph.find_nodes(op="call_function", target=RELU)):
        inner = outer.args[0]
        if (
            isinstance(inner, torch.fx.Node)
            and inner.op == "call_function"
            and inner.target is RELU
        ):
            outer.replace_all_uses_with(inner)
            gm.graph.erase_node(outer)
            folds += 1
    if folds:
        gm.graph.lint()
        gm.recompile()
        counters["example_vendor"]["fold_repeated_relu"] += folds
    return folds
