"""The built-in compiler plug-ins' graph passes: what InfiniOps has fused
kernels for, found in a compiled graph and rewritten into one call each.

A compiler plug-in names its passes in order (``query_pass_pipeline``,
docs/compiler_plugin.md) as ``package.module:function``; torch_infini's
Inductor backend runs them on each post-grad graph of infini tensors
through Inductor's per-device hook (``register_backend_for_device(...,
device_custom_pass=...)``, _inductor.py). A pass is ``function(gm:
torch.fx.GraphModule) -> int``: it rewrites ``gm`` in place and returns
how many rewrites it made.

The built-in pipeline (:data:`BUILTIN_PIPELINE`), one module per pattern
family:

- rms_norm.py: RMSNorm -> ``infini.rms_norm``; residual
  add + RMSNorm -> ``infini.add_rms_norm``;
- swiglu.py: ``up * silu(gate)`` -> ``infini.swiglu`` (``silu_and_mul`` where
  gate and up are halves of one tensor);
- causal_softmax.py: softmax of causally masked scores ->
  ``infini.causal_softmax``;
- rotary.py: a rotation of query or key by position (the halves written
  out, or transformers' ``rotate_half``) -> ``infini.rotary_embedding``.

Each rewrite is counted in ``torch._dynamo.utils.counters["infini_graph_passes"]``
by pattern, as Inductor counts its own pattern matches.

Where the rewrites are made (``TORCH_INFINI_GRAPH_PASSES``, :func:`rewrites_enabled`):
``auto`` (the default) where device memory is not host memory; on a
host-addressable backend (``host``, InfiniRT ``cpu``) Inductor already
compiles each pattern into one C++ loop over the same memory, and a call
into the fused operator only adds cost (a call from Inductor's wrapper
where Inductor launches its own loop). ``always`` rewrites there too (the tests
exercise the rewrites and the kernels this way); ``never`` nowhere.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from torch.fx import GraphModule

COUNTER = "infini_graph_passes"
MODE_VARIABLE = "TORCH_INFINI_GRAPH_PASSES"
_MODES = ("auto", "always", "never")


def mode() -> str:
    """``TORCH_INFINI_GRAPH_PASSES`` (auto, always, never; see above);
    ValueError naming it for another value."""
    value = os.environ.get(MODE_VARIABLE, "auto")
    if value not in _MODES:
        raise ValueError(f"{MODE_VARIABLE}={value!r}: expected one of {', '.join(_MODES)}")
    return value


def rewrites_enabled() -> bool:
    """Whether the built-in passes rewrite on the selected backend."""
    mode_ = mode()
    if mode_ == "auto":
        from .._backend import host_addressable

        return not host_addressable()
    return mode_ == "always"


BUILTIN_PIPELINE = (
    "torch_infini.graph_passes.rms_norm:rewrite",
    "torch_infini.graph_passes.swiglu:rewrite",
    "torch_infini.graph_passes.causal_softmax:rewrite",
    "torch_infini.graph_passes.rotary:rewrite",
)


# The operators the built-in passes rewrite into: whether each is served
# (per dtype) decides which rewrites are made, so it is part of the compiled
# graph's cache key.
TARGETS = (
    "infini::rms_norm",
    "infini::add_rms_norm",
    "infini::swiglu",
    "infini::silu_and_mul",
    "infini::causal_softmax",
    "infini::rotary_embedding",
)


def served_key() -> tuple[Any, ...]:
    """Whether rewrites are made, and which dtypes the selected backend
    serves for each rewrite target."""
    from ._graph import _served_dtypes

    served = tuple((name, tuple(str(d) for d in _served_dtypes(name))) for name in TARGETS)
    return (("rewrites", rewrites_enabled()), *served)


def count(pattern: str, rewrites: int) -> None:
    """Adds ``rewrites`` to the pattern's counter."""
    if rewrites:
        from torch._dynamo.utils import counters

        counters[COUNTER][pattern] += rewrites


def resolve(name: str, plugin: str) -> Callable[[GraphModule], int]:
    """The pass a pipeline entry ``package.module:function`` names; a
    ValueError naming the plug-in and the entry where it names none."""
    module_name, sep, function = name.partition(":")
    if not sep or not module_name or not function:
        raise ValueError(
            f"compiler plug-in {plugin}: graph pass {name!r} is not named 'package.module:function'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(
            f"compiler plug-in {plugin}: graph pass {name!r}: cannot import {module_name!r}: {e}"
        ) from e
    found = getattr(module, function, None)
    if not callable(found):
        raise ValueError(
            f"compiler plug-in {plugin}: graph pass {name!r}: {module_name} has no function "
            f"{function!r}"
        )
    return found


def source_files(names: tuple[str, ...] | list[str]) -> list[str]:
    """The source files of the modules the pipeline names, and of the
    fused operators' decompositions (for the compile cache key: a changed
    pass or decomposition recompiles)."""
    here = os.path.dirname(__file__)
    files = [os.path.join(here, "decompositions.py")]
    for name in names:
        module = importlib.import_module(name.partition(":")[0])
        path = getattr(module, "__file__", None)
        if path:
            files.append(path)
    if any(os.path.dirname(f) == here for f in files[1:]):
        files += [os.path.join(here, "__init__.py"), os.path.join(here, "_graph.py")]
    return sorted(set(files))
