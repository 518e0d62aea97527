"""Small nn.Modules built only from operators with infini kernels, against the CPU oracle.

Modules with an operator infini has no kernel for name it with the CPU fallback off, and run
it on the CPU with the fallback on.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import fallback_off
from op_helpers import (
    DEVICE,
    KERNEL_DTYPES,
    assert_matches,
    make_cpu,
    requires_two_devices,
    runs_cpu_kernels,
)
from torch import nn

# On host every layer runs the CPU's own kernel: bit for bit (assert_matches),
# a biased nn.Linear (addmm) included. Elsewhere (InfiniOps) each of 2-3 layers
# (gemm sums over 8-40 products) rounds in its own order and the differences
# compound: above assert_close's defaults.
MODULE_TOL: dict[str, object] = {} if runs_cpu_kernels() else {"rtol": 1e-4, "atol": 1e-4}


class MLP(nn.Module):
    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.up = nn.Linear(hidden, inner)
        self.act = nn.ReLU()
        self.down = nn.Linear(inner, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class GatedMLP(nn.Module):
    """down(silu(gate(x)) * up(x)), as in LLaMA-style blocks."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, inner, bias=False)
        self.up = nn.Linear(hidden, inner, bias=False)
        self.down = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """x + mlp(rms_norm(x)): residual add, RMSNorm and a gated MLP."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=1e-6)
        self.mlp = GatedMLP(hidden, inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


def _seeded(model: nn.Module, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * 0.3)
    return model


def _run_both(
    model: nn.Module, x_cpu: torch.Tensor, device: str = DEVICE
) -> tuple[torch.Tensor, torch.Tensor]:
    ref = model.eval()
    dev_model = copy.deepcopy(model).to(device)
    for p in dev_model.parameters():
        assert p.device.type == "infini"
    with torch.no_grad():
        expected = ref(x_cpu)
        result = dev_model(x_cpu.to(device))
    return result, expected


LINEAR_INPUTS = [(5, 16), (2, 7, 16), (1, 16), (0, 16), (3, 0, 16)]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("shape", LINEAR_INPUTS, ids=str)
def test_linear(shape: tuple[int, ...], bias: bool) -> None:
    assert torch.float32 in KERNEL_DTYPES["addmm"] and torch.float32 in KERNEL_DTYPES["mm"]
    model = _seeded(nn.Linear(16, 12, bias=bias), seed=1)
    result, expected = _run_both(model, make_cpu(shape, torch.float32, seed=2))
    assert_matches(result, expected, **MODULE_TOL)


def test_linear_functional() -> None:
    x_cpu = make_cpu((4, 8), torch.float32, seed=3)
    w_cpu = make_cpu((6, 8), torch.float32, seed=4)
    b_cpu = make_cpu((6,), torch.float32, seed=5)
    got = F.linear(x_cpu.to(DEVICE), w_cpu.to(DEVICE), b_cpu.to(DEVICE))
    assert_matches(got, F.linear(x_cpu, w_cpu, b_cpu), **MODULE_TOL)


@pytest.mark.parametrize("shape", [(6, 16), (2, 5, 16)], ids=str)
def test_mlp(shape: tuple[int, ...]) -> None:
    model = _seeded(MLP(16, 32), seed=6)
    result, expected = _run_both(model, make_cpu(shape, torch.float32, seed=7))
    assert_matches(result, expected, **MODULE_TOL)


@pytest.mark.parametrize("shape", [(6, 16), (2, 5, 16)], ids=str)
def test_gated_mlp(shape: tuple[int, ...]) -> None:
    model = _seeded(GatedMLP(16, 40), seed=8)
    result, expected = _run_both(model, make_cpu(shape, torch.float32, seed=9))
    assert_matches(result, expected, **MODULE_TOL)


@pytest.mark.parametrize("shape", [(6, 16), (2, 5, 16)], ids=str)
def test_norm_and_residual_block(shape: tuple[int, ...]) -> None:
    model = _seeded(Block(16, 24), seed=10)
    result, expected = _run_both(model, make_cpu(shape, torch.float32, seed=11))
    assert_matches(result, expected, **MODULE_TOL)


def test_sequential_stack_repeated_calls() -> None:
    model = _seeded(
        nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, 4)),
        seed=12,
    )
    dev_model = copy.deepcopy(model).to(DEVICE)
    with torch.no_grad():
        for seed in range(3):
            x_cpu = make_cpu((3, 8), torch.float32, seed=13 + seed)
            assert_matches(dev_model(x_cpu.to(DEVICE)), model(x_cpu), **MODULE_TOL)


def test_module_infini_method_moves_parameters() -> None:
    model = _seeded(MLP(8, 8), seed=14)
    dev_model = copy.deepcopy(model).infini()
    assert all(p.device == torch.device("infini", 0) for p in dev_model.parameters())
    x_cpu = make_cpu((2, 8), torch.float32, seed=15)
    with torch.no_grad():
        assert_matches(dev_model(x_cpu.infini()), model(x_cpu), device="infini:0", **MODULE_TOL)


MODELS = {
    "linear": lambda: nn.Linear(16, 8),
    "mlp": lambda: MLP(16, 24),
    "gated mlp": lambda: GatedMLP(16, 24),
    "block": lambda: Block(16, 24),
}
HAS_BIAS = {"linear": True, "mlp": True, "gated mlp": False, "block": False}


@requires_two_devices
@pytest.mark.parametrize("name", list(MODELS), ids=str)
def test_models_on_second_device(name: str) -> None:
    torch.infini.set_device(0)
    model = _seeded(MODELS[name](), seed=16)
    x_cpu = make_cpu((2, 3, 16), torch.float32, seed=17)
    result, expected = _run_both(model, x_cpu, device="infini:1")
    assert_matches(result, expected, device="infini:1", **MODULE_TOL)
    assert torch.infini.current_device() == 0
    # the same model refuses inputs on the other device
    dev_model = copy.deepcopy(model).to("infini:1")
    with torch.no_grad(), pytest.raises(RuntimeError, match="same device"):
        dev_model(x_cpu.to("infini:0"))


@requires_two_devices
def test_models_on_both_devices_interleaved() -> None:
    model = _seeded(GatedMLP(16, 24), seed=18)
    models = {i: copy.deepcopy(model).to(f"infini:{i}") for i in range(2)}
    x_cpu = make_cpu((4, 16), torch.float32, seed=19)
    with torch.no_grad():
        expected = model(x_cpu)
        results = {i: models[i](x_cpu.to(f"infini:{i}")) for i in (1, 0)}
    for i, r in results.items():
        assert_matches(r, expected, device=f"infini:{i}", **MODULE_TOL)


class TanhMLP(MLP):
    def __init__(self) -> None:
        super().__init__(8, 8)
        self.act = nn.Tanh()


class MaxResidual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.maximum(x, self.lin(x))


class SoftplusMLP(MLP):
    def __init__(self) -> None:
        super().__init__(8, 8)
        self.act = nn.Softplus()


UNSUPPORTED_MODELS: dict[str, tuple[type[nn.Module], str]] = {
    "tanh": (TanhMLP, "tanh"),
    "maximum": (MaxResidual, "maximum"),
    "softplus": (SoftplusMLP, "softplus"),
}


@fallback_off
@pytest.mark.parametrize("name", list(UNSUPPORTED_MODELS), ids=str)
def test_unsupported_operator_in_a_model_names_it(name: str) -> None:
    factory, operator = UNSUPPORTED_MODELS[name]
    model = factory().to(DEVICE)
    x = torch.ones(2, 8, device=DEVICE)
    with torch.no_grad(), pytest.raises(NotImplementedError) as excinfo:
        model(x)
    message = str(excinfo.value)
    assert f"aten::{operator}" in message
    assert "no infini kernel" in message


@pytest.mark.parametrize("name", list(UNSUPPORTED_MODELS), ids=str)
def test_unsupported_operator_in_a_model_falls_back_to_the_cpu(name: str) -> None:
    model = _seeded(UNSUPPORTED_MODELS[name][0](), seed=20)
    with torch_infini.cpu_fallback.allowed("silent"):
        result, expected = _run_both(model, make_cpu((2, 8), torch.float32, seed=21))
    # the biased Linear layers are native; the fallback operator is the CPU's
    assert_matches(result, expected, **MODULE_TOL)


COMPOSED: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "maximum": (lambda x: torch.maximum(x, x), "aten::maximum"),
    "tanh": (torch.tanh, "aten::tanh"),
}


@fallback_off
def test_composed_ops_name_the_operator() -> None:
    x = torch.ones(2, 3, device=DEVICE)
    for call, operator in COMPOSED.values():
        with pytest.raises(NotImplementedError, match=operator):
            call(x)


def test_composed_ops_fall_back_to_the_cpu() -> None:
    x_cpu = make_cpu((2, 3), torch.float32, seed=22)
    for call, _ in COMPOSED.values():
        with torch_infini.cpu_fallback.allowed("silent"):
            result = call(x_cpu.to(DEVICE))
        assert_matches(result, call(x_cpu), exact=True)
