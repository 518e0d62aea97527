"""linear (F.linear, nn.Linear) on infini against the CPU oracle.

With no gradient to record and a contiguous input, infini's linear is one
call of the seam's Linear kernel (InfiniOps' ``Linear``; on host the CPU's
own addmm or mm, which is what the CPU's linear runs for such an input).
Otherwise it is PyTorch's decomposition onto mm/addmm, as before the kernel
existed: with a gradient or a forward-mode tangent (aten::linear has no
derivative of its own), a strided input (the CPU adds the bias after the
product there), or a dtype the kernel lacks. Which one ran is read from the
profiler: the decomposition's mm/addmm appear as their own events.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
import torch_infini
from hypothesis import given, settings
from hypothesis import strategies as st
from infini_testing import fallback_off
from op_helpers import (
    DEVICE,
    FLOAT_DTYPES,
    assert_matches,
    identity,
    kernel_dtypes,
    pair,
    raises_exactly,
    requires_two_devices,
    runs_cpu_kernels,
)

# On host the kernel is the CPU's addmm/mm: bit for bit. InfiniOps' Linear
# sums the k products in float in another order and adds the bias to that
# sum: a few float32 ulps of sum |x * w|, above assert_close's defaults.
LINEAR_TOL: dict[str, float] = {} if runs_cpu_kernels() else {"rtol": 1e-4, "atol": 1e-3}
# float16/bfloat16 off host: summed in float and rounded once, the CPU's BLAS
# rounds in another order: a few ulps of the dtype.
REDUCED_TOL = {"rtol": 1.6e-2, "atol": 1e-2}
F32 = torch.float32
PRODUCTS = ("aten::mm", "aten::addmm", "aten::matmul", "aten::bmm")


def aten_events(fn: Callable[[], object]) -> Counter[str]:
    """The ATen operators ``fn`` dispatches, counted (profiler events)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return Counter(e.name for e in prof.events() if e.name.startswith("aten::"))


def served_by_the_kernel(fn: Callable[[], object]) -> bool:
    """Whether ``fn``'s linear ran as one Linear kernel call (no product of
    the decomposition dispatched)."""
    events = aten_events(fn)
    assert events["aten::linear"] >= 1, events
    return not any(events[name] for name in PRODUCTS)


def kernel_takes(dtype: torch.dtype) -> bool:
    return dtype in kernel_dtypes("linear")


def operands(
    in_shape: tuple[int, ...], out_features: int, bias: bool, dtype: torch.dtype = F32
) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """(input, weight[, bias]) on the CPU and on infini."""
    x_cpu, x = pair(in_shape, dtype, seed=1)
    w_cpu, w = pair((out_features, in_shape[-1]), dtype, seed=2)
    if not bias:
        return (x_cpu, w_cpu), (x, w)
    b_cpu, b = pair((out_features,), dtype, seed=3)
    return (x_cpu, w_cpu, b_cpu), (x, w, b)


SHAPES = {
    "1-D": (7,),
    "2-D": (5, 7),
    "3-D": (2, 3, 7),
    "4-D": (2, 2, 3, 7),
    "no rows": (0, 7),
    "3-D no rows": (2, 0, 7),
    "K = 0": (4, 0),
}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("shape", list(SHAPES), ids=str)
def test_forward_without_gradient(shape: str, bias: bool) -> None:
    cpu, dev = operands(SHAPES[shape], 6, bias)
    expected = F.linear(*cpu)
    with torch.no_grad():
        assert_matches(F.linear(*dev), expected, check_stride=True, **LINEAR_TOL)
    # grad mode on, nothing requiring a gradient: the kernel too
    assert_matches(F.linear(*dev), expected, check_stride=True, **LINEAR_TOL)
    with torch.inference_mode():  # autograd's keys excluded: the backend kernel directly
        assert_matches(F.linear(*dev), expected, check_stride=True, **LINEAR_TOL)
    for t_cpu, t in zip(cpu, dev, strict=True):
        assert_matches(t, t_cpu, exact=True)


def test_no_output_features() -> None:
    cpu, dev = operands((3, 5), 0, bias=True)
    with torch.no_grad():
        assert_matches(F.linear(*dev), F.linear(*cpu), check_stride=True)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
def test_which_path_runs(bias: bool) -> None:
    """The kernel where the backend declares it, else the decomposition; the
    decomposition whenever a gradient is recorded, whatever the backend."""
    _, dev = operands((4, 8), 3, bias)
    with torch.no_grad():
        assert served_by_the_kernel(lambda: F.linear(*dev)) == kernel_takes(F32)
    with torch.inference_mode():
        assert served_by_the_kernel(lambda: F.linear(*dev)) == kernel_takes(F32)
    x = dev[0].clone().requires_grad_()
    assert not served_by_the_kernel(lambda: F.linear(x, *dev[1:]))


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("shape", ["2-D", "3-D", "1-D"], ids=str)
def test_gradients(shape: str, bias: bool) -> None:
    cpu, dev = operands(SHAPES[shape], 6, bias)
    cpu = tuple(t.clone().requires_grad_() for t in cpu)
    dev = tuple(t.clone().requires_grad_() for t in dev)
    out_cpu, out = F.linear(*cpu), F.linear(*dev)
    assert out.requires_grad and out.grad_fn is not None
    assert_matches(out, out_cpu, check_stride=True, **LINEAR_TOL)
    grad_cpu, grad = pair(tuple(out_cpu.shape), F32, seed=9)
    out_cpu.backward(grad_cpu)
    out.backward(grad)
    for t_cpu, t in zip(cpu, dev, strict=True):
        assert t.grad is not None, "a gradient went missing"
        assert_matches(t.grad, t_cpu.grad, check_stride=True, **LINEAR_TOL)


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad mode", "no_grad"])
@pytest.mark.parametrize("dual", ["input", "weight", "bias"], ids=str)
def test_forward_mode_tangents(dual: str, grad_mode: bool) -> None:
    """Forward mode works with grad mode off too: a dual operand must take
    the decomposition, or its tangent silently goes missing."""
    cpu, dev = operands((3, 5), 4, bias=True)
    index = ("input", "weight", "bias").index(dual)
    tangent_cpu, tangent = pair(tuple(cpu[index].shape), F32, seed=7)

    def jvp(args: tuple[torch.Tensor, ...], t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.set_grad_enabled(grad_mode), fwAD.dual_level():
            duals = list(args)
            duals[index] = fwAD.make_dual(args[index], t)
            primal, out_tangent = fwAD.unpack_dual(F.linear(*duals))
            assert out_tangent is not None, "the tangent went missing"
            return primal, out_tangent

    primal_cpu, out_tangent_cpu = jvp(cpu, tangent_cpu)
    primal, out_tangent = jvp(dev, tangent)
    assert_matches(primal, primal_cpu, **LINEAR_TOL)
    assert_matches(out_tangent, out_tangent_cpu, **LINEAR_TOL)


def test_special_values() -> None:
    """-0.0, inf and nan in every operand: the CPU's products and sums of
    them (nan where inf meets 0), bit for bit on host."""
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.5, -2.0])
    x_cpu = special.repeat(3, 1)
    w_cpu = special.roll(2).repeat(4, 1)
    b_cpu = torch.tensor([-0.0, float("inf"), float("nan"), 0.0])
    for bias_cpu in (b_cpu, None):
        expected = F.linear(x_cpu, w_cpu, bias_cpu)
        bias = None if bias_cpu is None else bias_cpu.to(DEVICE)
        with torch.no_grad():
            got = F.linear(x_cpu.to(DEVICE), w_cpu.to(DEVICE), bias)
        assert_matches(got, expected, check_stride=True, **LINEAR_TOL)


def test_negative_view_input() -> None:
    """A negative view (its sign a bit of the tensor, not of its memory) is
    resolved before the kernel reads the memory."""
    x_cpu, x = pair((3, 5), F32, seed=1)
    w_cpu, w = pair((4, 5), F32, seed=2)
    with torch.no_grad():
        got = F.linear(torch._neg_view(x), w)
    assert_matches(got, F.linear(torch._neg_view(x_cpu), w_cpu), **LINEAR_TOL)


def test_on_a_side_stream() -> None:
    """Queued on the current stream after the work that wrote its input
    there; read after that stream's synchronize (async streams: the host's
    worker thread)."""
    cpu, dev = operands((6, 8), 5, bias=True)
    side = torch.infini.Stream()
    busy = torch.ones(2048, 2048, device=DEVICE)
    torch.infini.synchronize()
    with torch.no_grad(), torch.infini.stream(side):
        for _ in range(8):  # keeps the side stream busy (async streams) before x is written
            busy.mul_(1.0)
        x = dev[0] * 2  # written on the side stream
        out = F.linear(x, *dev[1:])
    side.synchronize()
    assert_matches(out, F.linear(cpu[0] * 2, *cpu[1:]), check_stride=True, **LINEAR_TOL)


# The input layouts the kernel does not take: the decomposition, bit for bit
# with the CPU (the same mm/addmm, or matmul then add_ as the CPU's linear).
STRIDED_INPUTS: dict[str, tuple[tuple[int, ...], Callable[[torch.Tensor], torch.Tensor]]] = {
    "transposed": ((7, 5), lambda t: t.t()),
    "every 2nd row": ((10, 7), lambda t: t[::2]),
    "3-D batch/seq swapped": ((3, 2, 7), lambda t: t.transpose(0, 1)),
    "offset columns": ((5, 9), lambda t: t[:, 1:8]),
    "expanded": ((1, 7), lambda t: t.expand(4, 7)),
}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("layout", list(STRIDED_INPUTS), ids=str)
def test_strided_input_takes_the_decomposition(layout: str, bias: bool) -> None:
    shape, view = STRIDED_INPUTS[layout]
    x_cpu, x = pair(shape, F32, seed=4, view=view)
    w_cpu, w = pair((6, 7), F32, seed=5)
    extra_cpu, extra = pair((6,), F32, seed=6) if bias else (None, None)
    expected = F.linear(x_cpu, w_cpu, extra_cpu)
    with torch.no_grad():
        assert not served_by_the_kernel(lambda: F.linear(x, w, extra))
        assert_matches(F.linear(x, w, extra), expected, check_stride=True, **LINEAR_TOL)


WEIGHT_LAYOUTS: dict[str, tuple[tuple[int, ...], Callable[[torch.Tensor], torch.Tensor]]] = {
    "contiguous": ((6, 7), identity),
    "column-major": ((7, 6), lambda t: t.t()),
    "every 2nd column": ((6, 14), lambda t: t[:, ::2]),
}


@pytest.mark.parametrize("layout", list(WEIGHT_LAYOUTS), ids=str)
def test_weight_of_any_layout(layout: str) -> None:
    shape, view = WEIGHT_LAYOUTS[layout]
    x_cpu, x = pair((4, 7), F32, seed=4)
    w_cpu, w = pair(shape, F32, seed=5, view=view)
    b_cpu, b = pair((6,), F32, seed=6)
    with torch.no_grad():
        assert served_by_the_kernel(lambda: F.linear(x, w, b)) == kernel_takes(F32)
        assert_matches(F.linear(x, w, b), F.linear(x_cpu, w_cpu, b_cpu), **LINEAR_TOL)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_every_float_dtype(dtype: torch.dtype) -> None:
    """The kernel where the backend declares the dtype; the decomposition
    elsewhere (float64: InfiniOps computes in float), whose products then run
    natively or in the CPU fallback as mm's and addmm's own tests say."""
    cpu, dev = operands((2, 3, 16), 5, bias=True, dtype=dtype)
    tol = REDUCED_TOL if dtype in (torch.float16, torch.bfloat16) else LINEAR_TOL
    with torch.no_grad(), torch_infini.cpu_fallback.allowed("silent"):
        assert served_by_the_kernel(lambda: F.linear(*dev)) == kernel_takes(dtype)
        assert_matches(F.linear(*dev), F.linear(*cpu), check_stride=True, **tol)
        module = torch.nn.Linear(16, 5, dtype=dtype)
        expected = module(cpu[0])
        assert_matches(module.to(DEVICE)(dev[0]), expected, check_stride=True, **tol)


@fallback_off
def test_float64_is_not_computed_in_float() -> None:
    """float64 never reaches a kernel that computes in float: with the
    fallback off, the decomposition's product is refused by name."""
    assert torch.float64 not in kernel_dtypes("linear")
    _, dev = operands((3, 4), 2, bias=True, dtype=torch.float64)
    if torch.float64 in kernel_dtypes("addmm"):
        assert_matches(F.linear(*dev), F.linear(*(t.cpu() for t in dev)), **LINEAR_TOL)
        return
    with raises_exactly(NotImplementedError, match="addmm: dtype Double is not supported"):
        with torch.no_grad():
            F.linear(*dev)


def test_autocast() -> None:
    cpu, dev = operands((4, 16), 8, bias=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = F.linear(*cpu)
    with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16):
        result = F.linear(*dev)
    assert result.dtype == torch.bfloat16
    assert_matches(result, expected, check_stride=True, **REDUCED_TOL)


# (call on a device, fragment of the message): the CPU's wording or infini's
# where they differ; the type is exactly RuntimeError on both.
ERRORS: dict[str, tuple[Callable[[str], torch.Tensor], str]] = {
    "features mismatch": (
        lambda d: F.linear(torch.ones(2, 3, device=d), torch.ones(4, 5, device=d)),
        r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 5x4\)",
    ),
    "dtype mismatch": (
        lambda d: F.linear(
            torch.ones(2, 3, device=d), torch.ones(4, 3, dtype=torch.float64, device=d)
        ),
        r"expected (m1|mat1) and (m2|mat2) to have the same dtype",
    ),
    "bias of another size": (
        lambda d: F.linear(
            torch.ones(2, 3, device=d), torch.ones(4, 3, device=d), torch.ones(5, device=d)
        ),
        r"cannot be broadcast|must match the size|expand",
    ),
    "0-dim input": (
        lambda d: F.linear(torch.ones((), device=d), torch.ones(4, 3, device=d)),
        r"both arguments to linear need to be at least 1D",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS), ids=str)
def test_errors(case: str) -> None:
    call, match = ERRORS[case]
    with raises_exactly(RuntimeError, match=match):
        call("cpu")
    with torch.no_grad(), raises_exactly(RuntimeError, match=match):
        call(DEVICE)


def test_cpu_weight_refused() -> None:
    match = "Expected all tensors to be on the same device|expected .* to be an infini tensor"
    with torch.no_grad(), raises_exactly(RuntimeError, match=match):
        F.linear(torch.ones(2, 3, device=DEVICE), torch.ones(4, 3))


@requires_two_devices
def test_second_device() -> None:
    torch.infini.set_device(0)
    dev = "infini:1"
    x_cpu, x = pair((2, 3, 8), F32, seed=10, device=dev)
    w_cpu, w = pair((5, 8), F32, seed=11, device=dev)
    b_cpu, b = pair((5,), F32, seed=12, device=dev)
    with torch.no_grad():
        assert_matches(F.linear(x, w, b), F.linear(x_cpu, w_cpu, b_cpu), device=dev, **LINEAR_TOL)
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            F.linear(x, w.to("infini:0"), b)


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(0, 9),
    k=st.integers(0, 33),
    n=st.integers(1, 17),
    lead=st.sampled_from([(), (2,), (2, 1)]),
    bias=st.booleans(),
)
def test_property_matches_the_cpu(
    rows: int, k: int, n: int, lead: tuple[int, ...], bias: bool
) -> None:
    cpu, dev = operands((*lead, rows, k), n, bias)
    with torch.no_grad():
        assert_matches(F.linear(*dev), F.linear(*cpu), check_stride=True, **LINEAR_TOL)
