"""The foreach operators and the fused optimizer steps: one call per tensor list.

PyTorch's optimizers (foreach=True, the default on infini as on CUDA) step
through ``torch._foreach_*`` operators. Every backend without kernels of its
own, the CPU included, runs them as a loop of per-tensor calls; on infini
they run whole in the CPU fallback instead (the CPU's own loop, one call per
list), and ``_fused_adamw_``/``_fused_adam_``/``_fused_sgd_`` as one call per
step. The CPU is the oracle, bit for bit: parameters, optimizer state, and
gradients (which a step must leave untouched). A list spanning devices, or
holding CPU tensors, takes the per-tensor loop, so it is accepted or refused
as on CUDA; an empty list raises as on the CPU.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal, raises_exactly, requires_two_devices
from torch import nn

DEVICE = torch.device("infini", 0)


@pytest.fixture(autouse=True)
def _silent_and_counted() -> Iterator[None]:
    with torch_infini.cpu_fallback.allowed("silent"):
        torch_infini.cpu_fallback.reset_stats()
        yield


def _model(blocks: int) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(blocks):
        layers += [nn.Linear(16, 16), nn.LayerNorm(16)]
    return nn.Sequential(*layers)


def _gradients(model: nn.Module, device: torch.device, seed: int) -> None:
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(seed)).to(device)
    model.zero_grad(set_to_none=True)
    model(x).square().mean().backward()


OPTIMIZERS: dict[str, Callable[[list[nn.Parameter], dict[str, bool]], torch.optim.Optimizer]] = {
    "AdamW": lambda p, kw: torch.optim.AdamW(p, lr=1e-2, **kw),
    "AdamW maximize": lambda p, kw: torch.optim.AdamW(p, lr=1e-2, maximize=True, **kw),
    "Adam amsgrad": lambda p, kw: torch.optim.Adam(p, lr=1e-2, amsgrad=True, **kw),
    "Adam weight decay": lambda p, kw: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, **kw),
    "SGD momentum": lambda p, kw: torch.optim.SGD(p, lr=1e-2, momentum=0.9, **kw),
    "SGD nesterov, weight decay": lambda p, kw: torch.optim.SGD(
        p, lr=1e-2, momentum=0.9, nesterov=True, weight_decay=0.01, **kw
    ),
}


def _steps(
    name: str, kind: str
) -> tuple[tuple[nn.Module, torch.optim.Optimizer], tuple[nn.Module, torch.optim.Optimizer]]:
    """Three steps of the optimizer on the CPU and on infini from the same
    gradients (the CPU's, copied: the forward and backward passes are not
    what is tested, and on the Infini stack their kernels are not the CPU's)."""
    model_cpu = _model(2)
    model_dev = copy.deepcopy(model_cpu).to(DEVICE)
    opt_cpu = OPTIMIZERS[name](list(model_cpu.parameters()), {kind: True})
    opt_dev = OPTIMIZERS[name](list(model_dev.parameters()), {kind: True})
    for step in range(3):
        _gradients(model_cpu, torch.device("cpu"), seed=step)
        for p_cpu, p_dev in zip(model_cpu.parameters(), model_dev.parameters(), strict=True):
            p_dev.grad = p_cpu.grad.to(DEVICE)
        opt_cpu.step()
        opt_dev.step()
    return (model_cpu, opt_cpu), (model_dev, opt_dev)


def _assert_same_training(
    cpu: tuple[nn.Module, torch.optim.Optimizer], dev: tuple[nn.Module, torch.optim.Optimizer]
) -> None:
    (model_cpu, opt_cpu), (model_dev, opt_dev) = cpu, dev
    for p_cpu, p_dev in zip(model_cpu.parameters(), model_dev.parameters(), strict=True):
        assert_bitwise_equal(p_dev.detach(), p_cpu.detach())
        assert_bitwise_equal(p_dev.grad, p_cpu.grad)  # the step leaves gradients alone
        state_cpu, state_dev = opt_cpu.state[p_cpu], opt_dev.state[p_dev]
        assert state_cpu.keys() == state_dev.keys()
        for key, value in state_cpu.items():
            if isinstance(value, torch.Tensor):
                assert_bitwise_equal(state_dev[key], value)


@pytest.mark.parametrize("kind", ["foreach", "fused"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_steps_equal_the_cpu_bit_for_bit(name: str, kind: str) -> None:
    _assert_same_training(*_steps(name, kind))


@pytest.mark.parametrize("kind", ["foreach", "fused"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_step_makes_one_call_per_list_whatever_the_parameter_count(name: str, kind: str) -> None:
    """The fallback calls of one step are the optimizer's list operators
    (fused: its one fused operator, and the step counters' increment, as on
    CUDA), as many for 8 parameters as for 24."""
    calls = {}
    for blocks in (2, 6):
        model = _model(blocks).to(DEVICE)
        opt = OPTIMIZERS[name](list(model.parameters()), {kind: True})
        _gradients(model, DEVICE, seed=0)
        opt.step()  # the state exists from here on
        _gradients(model, DEVICE, seed=1)
        torch_infini.cpu_fallback.reset_stats()
        opt.step()
        torch.infini.synchronize()
        stats = torch_infini.cpu_fallback.stats()
        assert stats, "the step made no fallback call"
        assert all(op.startswith(("aten::_foreach_", "aten::_fused_")) for op in stats), sorted(
            stats
        )
        calls[blocks] = {op: s.calls for op, s in stats.items()}
    assert calls[2] == calls[6]
    fused = {op: n for op, n in calls[2].items() if op.startswith("aten::_fused_")}
    assert list(fused.values()) == ([1] if kind == "fused" else [])


def test_list_results_are_new_infini_tensors_with_the_cpus_values() -> None:
    xs_cpu = [torch.rand(5, 3) + 0.5, torch.rand(7) + 0.5, torch.rand(2, 2).t() + 0.5]
    xs = [x.to(DEVICE) for x in xs_cpu]
    got, want = torch._foreach_sqrt(xs), torch._foreach_sqrt(xs_cpu)
    for g, w in zip(got, want, strict=True):
        assert g.device == DEVICE
        assert g.stride() == w.stride()
        assert_bitwise_equal(g, w)
    assert list(torch_infini.cpu_fallback.stats()) == ["aten::_foreach_sqrt"]


def test_an_empty_list_raises_as_on_the_cpu() -> None:
    with raises_exactly(RuntimeError, match="Tensor list must have at least one tensor"):
        torch._foreach_add_([], 1)
    with raises_exactly(RuntimeError, match="Tensor list must have at least one tensor"):
        torch._foreach_sqrt([])


def test_a_list_with_a_cpu_tensor_is_refused_as_on_cuda() -> None:
    """CUDA's fast path takes one device; its per-tensor loop then refuses a
    CPU tensor of more than zero dimensions, as the per-tensor call does."""
    a = torch.ones(3, device=DEVICE)
    with raises_exactly(RuntimeError, match="Expected all tensors to be on the same device"):
        torch._foreach_add([a], [torch.ones(3)])
    # A 0-dim CPU tensor is a scalar operand, as for add itself.
    (got,) = torch._foreach_mul([a], [torch.tensor(2.0)])
    assert_bitwise_equal(got, torch.full((3,), 2.0))


@requires_two_devices
def test_a_list_spanning_two_devices_runs_per_tensor_as_on_cuda() -> None:
    xs_cpu = [torch.rand(4), torch.rand(3)]
    xs = [xs_cpu[0].to("infini:0"), xs_cpu[1].to("infini:1")]
    torch._foreach_mul_(xs, 3.0)
    torch._foreach_mul_(xs_cpu, 3.0)
    assert [x.device for x in xs] == [torch.device("infini:0"), torch.device("infini:1")]
    for got, want in zip(xs, xs_cpu, strict=True):
        assert_bitwise_equal(got, want)


def test_foreach_in_autograd_matches_the_cpu() -> None:
    """The foreach operators' derivatives (autograd's formulas) over infini
    tensors: gradients equal the CPU's."""
    xs_cpu = [torch.rand(4, requires_grad=True), torch.rand(2, 3, requires_grad=True)]
    xs = [x.detach().to(DEVICE).requires_grad_() for x in xs_cpu]
    for inputs in (xs_cpu, xs):
        outs = torch._foreach_mul(torch._foreach_exp(inputs), 2.0)
        sum(o.sum() for o in outs).backward()
    for x, x_cpu in zip(xs, xs_cpu, strict=True):
        assert_bitwise_equal(x.grad, x_cpu.grad)


def test_copies_of_a_model_train_alike_with_the_fallback_staged() -> None:
    """Staged through pinned memory (as on an accelerator), a foreach step
    gives the in-place step's result."""
    from infini_testing import forced_staging

    model = _model(2).to(DEVICE)
    staged = copy.deepcopy(model)
    for m, staging in ((model, False), (staged, True)):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2, foreach=True)
        with forced_staging(staging):
            for step in range(2):
                _gradients(m, DEVICE, seed=step)
                opt.step()
    for a, b in zip(model.parameters(), staged.parameters(), strict=True):
        assert torch.equal(a.detach().cpu(), b.detach().cpu())
