"""examples/llama.py, the main job's model, for the benchmarks (it is no
package: loaded by path; it imports torch_infini only where infini tensors
run, so benchmarks/vs_cuda.py's CUDA process can load it too)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any


def load() -> Any:
    path = Path(__file__).resolve().parents[1] / "examples" / "llama.py"
    spec = importlib.util.spec_from_file_location("torch_infini_example_llama", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
