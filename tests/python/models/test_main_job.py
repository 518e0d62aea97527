"""The main job (README command 1) runs and checks itself against the CPU.

Its CPU model is the oracle: it must compute with stock PyTorch operators
only, never with torch.ops.infini (whose CPU implementation is the project's
own code), while the infini model runs the fused kernels.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
import torch_infini
from infini_testing import llama_example
from torch.utils._python_dispatch import TorchDispatchMode

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llama.py"
DEVICE = torch.device("infini", 0)


def test_llama_trains_and_generates_as_on_the_cpu() -> None:
    # Fewer steps than the default: the task is not learned, but losses and
    # generated tokens must still be the CPU's (the script exits 1 otherwise).
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "40"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "largest relative difference" in out and "-> ok" in out
    assert "ran on the CPU (fallback):" in out
    if "backend: host" in out:
        assert "generated tokens equal the CPU's -> ok" in out


class _InfiniOperators(TorchDispatchMode):
    """The torch.ops.infini operators dispatched (any device)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func._schema.name.startswith("infini::"):
            self.names.add(func._schema.name)
        return func(*args, **(kwargs or {}))


def _train_step_and_generate(model: torch.nn.Module, device: torch.device) -> set[str]:
    llama = llama_example()
    inputs, targets = llama.batch(2, 4, torch.Generator().manual_seed(3))
    prompt = inputs[:, :5]
    seen = _InfiniOperators()
    with torch_infini.cpu_fallback.allowed("silent"), seen:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        llama.train_step(model, opt, inputs.to(device), targets.to(device))
        llama.generate(model, prompt[:1].to(device), 3)
    return seen.names


def test_the_cpu_reference_model_uses_stock_pytorch_only() -> None:
    llama = llama_example()
    torch.manual_seed(0)
    model = llama.Llama(llama.Config(layers=1))
    on_infini = copy.deepcopy(model).to(DEVICE)
    assert _train_step_and_generate(model, torch.device("cpu")) == set()
    # the infini model runs the fused kernels the CPU model composes
    assert _train_step_and_generate(on_infini, DEVICE) == {
        "infini::causal_softmax",
        "infini::swiglu",
    }
