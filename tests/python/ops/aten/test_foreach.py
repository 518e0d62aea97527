"""The foreach operators and the fused optimizer steps: one call per tensor list.

PyTorch's optimizers (foreach=True, the default on infini as on CUDA) step
through ``torch._foreach_*`` operators. Every backend without kernels of its
own, the CPU included, runs them as a loop of per-tensor calls. On infini
the in-place ones (``_foreach_mul_``, ``_foreach_lerp_``, ...) are device
kernels where the backend's kernel provider has foreach kernels (``host``:
the CPU's loop over the device memory, in stream order, nothing staged in
discrete memory); the others, and every call such a kernel does not take
(several dtypes, devices or shapes in the lists, a written tensor
overlapping itself), run whole in the CPU fallback (the CPU's own loop, one
call per list), and ``_fused_adamw_``/``_fused_adam_``/``_fused_sgd_`` as one
call per step. The CPU is the oracle, bit for bit: parameters, optimizer
state, and gradients (which a step must leave untouched). A list spanning
devices, or holding CPU tensors, takes the per-tensor loop, so it is
accepted or refused as on CUDA; an empty list raises as on the CPU.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal, raises_exactly, requires_two_devices
from op_coverage import relocate_sample, torch_testing_internal
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


def _foreach_kernels() -> bool:
    """Whether the backend runs the in-place foreach operators on the device
    (its kernel provider has foreach kernels for float32)."""
    return torch.float32 in torch_infini.supported_dtypes("aten::_foreach_mul_.Scalar")


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
    (fused: its one fused operator, as on CUDA), as many for 8 parameters as
    for 24; where the device has foreach kernels, none of them is an
    in-place one."""
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
        assert all(op.startswith(("aten::_foreach_", "aten::_fused_")) for op in stats), sorted(
            stats
        )
        if _foreach_kernels():
            in_place = [op for op in stats if op.split(".")[0].endswith("_")]
            assert not [op for op in in_place if op.startswith("aten::_foreach_")], in_place
        else:
            assert stats, "the step made no fallback call"
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
    tensors, in place ones (the device's kernels) included: gradients equal
    the CPU's."""
    xs_cpu = [torch.rand(4, requires_grad=True), torch.rand(2, 3, requires_grad=True)]
    xs = [x.detach().to(DEVICE).requires_grad_() for x in xs_cpu]
    for inputs in (xs_cpu, xs):
        outs = torch._foreach_mul(torch._foreach_exp(inputs), 2.0)
        torch._foreach_add_(outs, inputs, alpha=0.5)
        torch._foreach_mul_(outs, 3.0)
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


def _lists(seed: int, n: int = 3) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(5, 3), (7,), (2, 2, 2)][:n]
    return [torch.rand(shape, generator=g) + 0.5 for shape in shapes]


def test_in_place_list_operators_run_on_the_device_as_the_cpu_runs_them() -> None:
    """What AdamW's and SGD's steps are made of, with the fallback off: every
    call is the device's, and each list ends bit for bit as on the CPU
    (non-contiguous and broadcast-free lists of one dtype)."""
    if not _foreach_kernels():
        pytest.skip(
            f"the {torch_infini.backend()} backend's kernel provider has no foreach kernels "
            "(InfiniOps has none): the operators run in the CPU fallback"
        )
    a, b, c = _lists(0), _lists(1), _lists(2)
    a[0] = a[0].t().contiguous().t()  # written through a transposed layout
    dev = [[t.to(DEVICE) for t in lst] for lst in (a, b, c)]
    dev[0][0] = dev[0][0].t().contiguous().t()
    steps: list[Callable[[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]], None]] = [
        lambda x, y, z: torch._foreach_mul_(x, 0.99),
        lambda x, y, z: torch._foreach_lerp_(x, y, 0.1),
        lambda x, y, z: torch._foreach_addcmul_(x, y, y, 0.001),
        lambda x, y, z: torch._foreach_div_(z, [1.5, 2.5, 3.5]),
        lambda x, y, z: torch._foreach_add_(z, 1e-8),
        lambda x, y, z: torch._foreach_addcdiv_(x, y, z, [-0.1, -0.2, -0.3]),
        lambda x, y, z: torch._foreach_add_(x, y, alpha=-0.01),
        lambda x, y, z: torch._foreach_maximum_(y, z),
        lambda x, y, z: torch._foreach_sqrt_(z),
        lambda x, y, z: torch._foreach_zero_(y),
    ]
    with torch_infini.cpu_fallback.strict():
        for step in steps:
            step(a, b, c)
            step(*dev)
    torch.infini.synchronize()
    assert torch_infini.cpu_fallback.stats() == {}
    for got_list, want_list in zip(dev, (a, b, c), strict=True):
        for got, want in zip(got_list, want_list, strict=True):
            assert got.device == DEVICE and got.stride() == want.stride()
            assert_bitwise_equal(got, want)


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("several dtypes", "lists of several dtypes"),
        ("broadcast shapes", "tensors of different shapes at one index"),
        ("a tensor scalar", "a tensor argument besides the lists"),
    ],
)
def test_a_call_the_device_kernel_does_not_take_runs_in_the_fallback_as_on_the_cpu(
    case: str, reason: str
) -> None:
    """Type promotion, broadcasting and tensor operands are the CPU loop's:
    such a call runs whole in the fallback, which names why (its warning,
    its error with the fallback off), with the CPU's results."""
    x = _lists(0, 2)
    if case == "several dtypes":
        y = [x[0].double(), x[1]]
        call: Callable[[list[torch.Tensor], list[torch.Tensor]], None] = torch._foreach_mul_
    elif case == "broadcast shapes":
        y = [x[0][:1].clone(), x[1][:1].clone()]
        call = torch._foreach_add_
    else:
        y = [torch.tensor(2.0)]

        def call(xs: list[torch.Tensor], ys: list[torch.Tensor]) -> None:
            torch._foreach_mul_(xs, ys[0].to(xs[0].device))

    dx, dy = [t.to(DEVICE) for t in x], [t.to(DEVICE) for t in y]
    call(x, y)
    call(dx, dy)
    for got, want in zip(dx, x, strict=True):
        assert_bitwise_equal(got, want)
    if _foreach_kernels():
        with torch_infini.cpu_fallback.strict(), pytest.raises(NotImplementedError, match=reason):
            call(dx, dy)


def test_a_written_tensor_overlapping_itself_raises_as_on_the_cpu() -> None:
    """Checked on the calling thread before anything is queued: the CPU's
    message, never a deferred error on the stream."""
    cpu = torch.zeros(1).expand(3)
    dev = torch.zeros(1, device=DEVICE).expand(3)
    match = "unsupported operation: more than one element of the written-to tensor"
    with raises_exactly(RuntimeError, match=match):
        torch._foreach_add_([cpu], 1.0)
    with raises_exactly(RuntimeError, match=match):
        torch._foreach_add_([dev], 1.0)
    torch.infini.synchronize()  # nothing failing was queued


def _foreach_opinfos() -> list[object]:
    """PyTorch's OpInfos of the foreach operators with an in-place variant
    (common_methods_invocations' foreach_*_op_db, which op_db leaves out)."""
    cmi = torch_testing_internal("common_methods_invocations")
    names = sorted(n for n in dir(cmi) if n.startswith("foreach_") and n.endswith("_op_db"))
    infos = [info for name in names for info in getattr(cmi, name)]
    return [info for info in infos if info.inplace_variant is not None]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("info", _foreach_opinfos(), ids=lambda info: info.name)
def test_every_in_place_foreach_operator_matches_the_cpu_on_pytorchs_samples(
    info: object, dtype: torch.dtype
) -> None:
    """Each in-place foreach operator on the samples of PyTorch's own OpInfo
    (lists of 3 tensors, empty ones included; scalars, scalar lists, lists
    and tensors as operands), the operands on infini: every list ends bit for
    bit as on the CPU (the CPU's own loop, on the device or in the fallback),
    or the call raises what the CPU raises."""
    if dtype not in info.supported_dtypes("cpu"):
        pytest.skip(f"{info.name}: the CPU has no {dtype} kernel")
    compared = 0
    for sample in info.sample_inputs("cpu", dtype, num_input_tensors=[3]):
        # Copies with the samples' exact geometry (relocate_sample), so the
        # lists are written through the layouts PyTorch's samples have.
        want = relocate_sample(sample.input, torch.device("cpu"))
        dev = relocate_sample(sample.input, DEVICE)
        args, dev_args, kwargs = sample.args, relocate_sample(sample.args, DEVICE), sample.kwargs
        try:
            info.inplace_variant(want, *args, **kwargs)
        except (RuntimeError, TypeError, ValueError) as cpu_error:
            with pytest.raises(type(cpu_error)):
                info.inplace_variant(dev, *dev_args, **kwargs)
                torch.infini.synchronize()
            continue
        info.inplace_variant(dev, *dev_args, **kwargs)
        for got, expected in zip(dev, want, strict=True):
            assert got.stride() == expected.stride(), (info.name, sample)
            assert_bitwise_equal(got, expected)
        compared += 1
    assert compared > 0, f"no sample of {info.name} ran in {dtype}"
