"""Compiles a graph through the example plug-in and checks what it did.

    TORCH_INFINI_COMPILER_PLUGINS=/path/to/libexample_compiler_plugin.so \
    PYTHONPATH=examples/compiler_plugin python3 examples/compiler_plugin/run_example.py

Exits 0 when the plug-in served torch.compile (its name, its compiles and
launches, its graph pass) and the result equals CPU eager; 77 (CTest's
skip) when torch_infini cannot be imported by this interpreter.
"""

from __future__ import annotations

import ctypes
import os
import sys

try:
    import torch
    import torch_infini  # noqa: F401
except ImportError as e:
    print(f"skipped: torch_infini cannot be imported ({e})")
    sys.exit(77)

from torch._dynamo.utils import counters
from torch_infini import _compiler


def model(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.relu(x * 3)) + 1


def main() -> int:
    library = ctypes.CDLL(os.environ["TORCH_INFINI_COMPILER_PLUGINS"])
    # Every step runs: no compiled graph or binary from an earlier run.
    torch._inductor.config.force_disable_caches = True
    x = torch.randn(64)
    got = torch.compile(model)(x.to("infini"))
    torch.testing.assert_close(got.cpu(), model(x), rtol=0, atol=0)
    plugin = _compiler.plugin()
    compiles = ctypes.c_int.in_dll(library, "example_compiles").value
    launches = ctypes.c_int.in_dll(library, "example_launches").value
    folds = counters["example_vendor"]["fold_repeated_relu"]
    print(
        f"plug-in {plugin.name} ({plugin.origin}): {compiles} compiles, {launches} launches, "
        f"{folds} relu folds"
    )
    problems = []
    if plugin.name != "example-vendor":
        problems.append(f"torch.compile used plug-in {plugin.name!r}")
    if compiles < 1 or launches < 1:
        problems.append("the plug-in compiled or launched nothing")
    if folds != 1:
        problems.append(f"the vendor's pass folded {folds} relus, expected 1")
    for problem in problems:
        print("FAILED:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
