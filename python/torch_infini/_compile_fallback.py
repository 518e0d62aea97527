"""torch.compile's default backend where no compiler plug-in serves infini.

Inductor serves infini through the device type's compiler plug-in
(``_compiler.py``): the built-in cpu plug-in compiles Inductor's C++
kernels for the host device (shared and discrete memory) and InfiniRT cpu,
the nvidia plug-in Inductor's Triton kernels, a vendor's plug-in whatever
language it declares. On a device type with no plug-in at all, a graph that
holds infini tensors compiles with ``aot_eager`` instead: AOTAutograd
traces forward and backward and their ATen operators run on infini as in
eager mode. One warning says so; Inductor's options (``mode``,
``options``) do not apply to such graphs. A plug-in that is configured but
cannot be loaded raises its error: nothing silently stands in for it.
Graphs without infini tensors go to Inductor as before.

The hook is PyTorch's own object for ``backend="inductor"``
(``torch._TorchCompileInductorWrapper``, what ``torch.compile`` builds for
its default backend): _patches.py wraps its ``__call__`` at import, which
loads nothing of Dynamo or Inductor, and the wrapper asks this module.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

_warned = False


def inductor_serves_infini() -> bool:
    """Whether Inductor serves infini: the device type has a compiler
    plug-in (C++ or Triton).

    Only a device type without any plug-in (NotImplementedError) falls back
    to aot_eager; a plug-in that is configured but cannot be loaded raises
    its error, naming it, on every backend (it was asked for, and nothing
    silently stands in for it)."""
    from . import _compiler

    try:
        return _compiler.source_language() in ("c++", "triton")
    except NotImplementedError:  # no plug-in for the device type: aot_eager
        return False


def _is_infini(value: Any) -> bool:
    leaves = torch.utils._pytree.tree_leaves(value)
    return any(isinstance(x, torch.Tensor) and x.device.type == "infini" for x in leaves)


def holds_infini_tensors(gm: Any, example_inputs: Any) -> bool:
    """Any infini tensor among the graph's inputs or the values it makes."""
    if _is_infini(list(example_inputs)):
        return True
    graph = getattr(gm, "graph", None)
    if graph is None:
        return False
    # Dynamo's graphs carry each node's value as "example_value", traced
    # graphs as "val".
    return any(
        _is_infini(node.meta.get("example_value")) or _is_infini(node.meta.get("val"))
        for node in graph.nodes
    )


def _warn_once() -> None:
    global _warned
    if _warned:
        return
    _warned = True
    from . import _C

    warnings.warn(
        f"torch.compile on infini (backend {_C._backend()!r}): no compiler plug-in serves "
        "this device type (TORCH_INFINI_COMPILER_PLUGINS names a vendor's); graphs with "
        "infini tensors compile with backend='aot_eager' instead (Inductor's mode and options "
        "do not apply to them)",
        UserWarning,
        stacklevel=2,
    )


def compile_with_aot_eager(model_: Any, inputs_: Any) -> Any:
    """``model_`` compiled with ``aot_eager``, after the one warning."""
    _warn_once()
    from torch._dynamo.backends.registry import lookup_backend

    return lookup_backend("aot_eager")(model_, inputs_)
