"""torch.ops.infini's fused operators against their CPU reference.

silu_and_mul and swiglu: every declared dtype (bit for bit where the host
provider runs the reference, PyTorch's tolerances for InfiniOps' kernels),
shapes from 1-D to 4-D, non-contiguous inputs, empty tensors, gradients
against the reference's autograd (and gradcheck of the formula), the Meta
kernel and PyTorch's opcheck, bad input raising the reference's errors, and
undeclared dtypes served by the CPU fallback (or refused with it off).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import raises_exactly
from op_helpers import FLOAT_DTYPES, assert_matches, kernel_dtypes, make_cpu

DEVICE = torch.device("infini", 0)
OPS = ("infini::silu_and_mul", "infini::swiglu", "infini::causal_softmax")


def _silu_and_mul_inputs(shape: tuple[int, ...], dtype: torch.dtype) -> list[torch.Tensor]:
    return [make_cpu(shape, dtype, seed=3)]


def _swiglu_inputs(shape: tuple[int, ...], dtype: torch.dtype) -> list[torch.Tensor]:
    return [make_cpu(shape, dtype, seed=3), make_cpu(shape, dtype, seed=4)]


CALLS: dict[str, tuple[Callable[..., torch.Tensor], Callable[..., list[torch.Tensor]]]] = {
    "infini::silu_and_mul": (torch_infini.ops.silu_and_mul, _silu_and_mul_inputs),
    "infini::swiglu": (torch_infini.ops.swiglu, _swiglu_inputs),
    "infini::causal_softmax": (torch_infini.ops.causal_softmax, _silu_and_mul_inputs),
}
# Shapes valid for every operator (causal_softmax: [..., s, t], s <= t).
SHAPES = [(3, 8), (2, 3, 16), (4, 4), (2, 5, 6), (0, 6)]


def _same_kernel() -> bool:
    return torch_infini.backend() == "host"


# Every dtype the backend declares for each operator (the others:
# test_undeclared_dtypes_fall_back).
DECLARED = [(op, dtype) for op in OPS for dtype in kernel_dtypes(op)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize(("op", "dtype"), DECLARED, ids=str)
def test_matches_the_cpu_reference(op: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    fn, inputs = CALLS[op]
    args = inputs(shape, dtype)
    expected = fn(*args)
    torch_infini.cpu_fallback.reset_stats()
    got = fn(*(a.to(DEVICE) for a in args))
    assert got.device == DEVICE
    assert_matches(got, expected, same_kernel=_same_kernel())
    assert torch_infini.cpu_fallback.stats() == {}  # served natively


def test_causal_softmax_is_masked_softmax() -> None:
    """Row i of [s, t] attends to the t - s cached keys and the first i + 1
    new ones: PyTorch's softmax under that mask, exactly 0 elsewhere; 4-D
    inputs (beyond the kernel) run in the CPU fallback with the same result."""
    x = make_cpu((2, 3, 5), torch.float32, seed=6)
    allowed = torch.ones(3, 5, dtype=torch.bool).tril(2)
    expected = torch.softmax(x.masked_fill(~allowed, float("-inf")), -1)
    assert torch.equal(torch_infini.ops.causal_softmax(x), expected)
    got = torch_infini.ops.causal_softmax(x.to(DEVICE))
    assert_matches(got, expected, same_kernel=_same_kernel())
    assert torch.equal(got.cpu()[..., ~allowed], torch.zeros(2, int((~allowed).sum())))
    x4 = make_cpu((2, 2, 3, 5), torch.float32, seed=7)
    torch_infini.cpu_fallback.reset_stats()
    with torch_infini.cpu_fallback.allowed("silent"):
        got4 = torch_infini.ops.causal_softmax(x4.to(DEVICE))
    assert_matches(got4, torch_infini.ops.causal_softmax(x4), exact=True)
    assert "infini::causal_softmax" in torch_infini.cpu_fallback.stats()


def test_the_reference_is_the_unfused_formula() -> None:
    """In float32 the reference is F.silu(gate) * up bit for bit; in the
    half types it rounds once (from float), within half an ulp of float64."""
    x = make_cpu((4, 10), torch.float32, seed=1)
    assert torch.equal(torch_infini.ops.silu_and_mul(x), F.silu(x[:, :5]) * x[:, 5:])
    a, g = make_cpu((4, 5), torch.float32, seed=2), make_cpu((4, 5), torch.float32, seed=3)
    assert torch.equal(torch_infini.ops.swiglu(a, g), a * F.silu(g))
    for dtype in (torch.float16, torch.bfloat16):
        h = x.to(dtype)
        exact = (F.silu(h[:, :5].double()) * h[:, 5:].double()).to(dtype)
        assert_matches(torch_infini.ops.silu_and_mul(h), exact, device="cpu", rtol=0, atol=0)


@pytest.mark.parametrize("op", OPS)
def test_non_contiguous_inputs(op: str) -> None:
    fn, inputs = CALLS[op]
    args = [t.t() for t in inputs((8, 6), torch.float32)]  # [6, 8], transposed
    expected = fn(*args)
    got = fn(*(relocate_view(a) for a in args))
    assert_matches(got, expected, same_kernel=_same_kernel())
    sliced = [t[:, 1::2] for t in inputs((3, 16), torch.float32)]  # strided last dim
    assert_matches(fn(*(relocate_view(a) for a in sliced)), fn(*sliced), same_kernel=_same_kernel())


def relocate_view(t: torch.Tensor) -> torch.Tensor:
    """The same view (sizes, strides, offset) of a copy of t's storage on infini."""
    base = torch.empty(0, dtype=t.dtype).set_(
        t.untyped_storage(), 0, (t.untyped_storage().nbytes() // t.element_size(),), (1,)
    )
    return base.to(DEVICE).as_strided(t.size(), t.stride(), t.storage_offset())


@pytest.mark.parametrize("op", OPS)
def test_gradients_match_the_reference(op: str) -> None:
    fn, inputs = CALLS[op]
    cpu = [t.requires_grad_() for t in inputs((3, 8), torch.float32)]
    dev = [t.detach().to(DEVICE).requires_grad_() for t in cpu]
    grad = make_cpu(tuple(fn(*cpu).shape), torch.float32, seed=9)
    fn(*cpu).backward(grad)
    fn(*dev).backward(grad.to(DEVICE))
    for d, c in zip(dev, cpu, strict=True):
        assert d.grad is not None and d.grad.device == DEVICE
        assert_matches(d.grad, c.grad, same_kernel=_same_kernel())


@pytest.mark.parametrize("op", OPS)
def test_the_gradient_formula_is_the_derivative(op: str) -> None:
    fn, inputs = CALLS[op]
    args = [t.requires_grad_() for t in inputs((3, 8), torch.float64)]
    assert torch.autograd.gradcheck(fn, args)


@pytest.mark.parametrize("op", OPS)
def test_meta_and_opcheck(op: str) -> None:
    """Shapes without data (torch.compile's fake tensors) and PyTorch's
    custom-operator checks (schema, fake kernel, autograd registration, AOT)."""
    fn, inputs = CALLS[op]
    args = inputs((2, 3, 8), torch.float32)
    meta = fn(*(a.to("meta") for a in args))
    assert meta.shape == fn(*args).shape and meta.device.type == "meta"
    packet = getattr(torch.ops.infini, op.removeprefix("infini::"))
    torch.library.opcheck(packet.default, [a.requires_grad_() for a in args])
    # opcheck's autograd-registration test knows only CPU/CUDA/XPU devices.
    dev_args = [a.detach().to(DEVICE).requires_grad_() for a in args]
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(packet.default, dev_args, test_utils=utils)


BAD: dict[str, Callable[[torch.device], object]] = {
    "silu_and_mul odd last dim": lambda d: torch_infini.ops.silu_and_mul(
        torch.ones(3, 5, device=d)
    ),
    "silu_and_mul 0-dim": lambda d: torch_infini.ops.silu_and_mul(torch.tensor(1.0, device=d)),
    "silu_and_mul int": lambda d: torch_infini.ops.silu_and_mul(
        torch.ones(3, 4, dtype=torch.int32, device=d)
    ),
    "swiglu shapes": lambda d: torch_infini.ops.swiglu(
        torch.ones(3, 4, device=d), torch.ones(4, 4, device=d)
    ),
    "swiglu dtypes": lambda d: torch_infini.ops.swiglu(
        torch.ones(3, 4, device=d), torch.ones(3, 4, dtype=torch.float64, device=d)
    ),
    "causal_softmax 1-D": lambda d: torch_infini.ops.causal_softmax(torch.ones(4, device=d)),
    "causal_softmax more queries than keys": lambda d: torch_infini.ops.causal_softmax(
        torch.ones(5, 4, device=d)
    ),
    "causal_softmax int": lambda d: torch_infini.ops.causal_softmax(
        torch.ones(3, 4, dtype=torch.int32, device=d)
    ),
    "swiglu int": lambda d: torch_infini.ops.swiglu(
        torch.ones(3, dtype=torch.int64, device=d), torch.ones(3, dtype=torch.int64, device=d)
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_raises_the_references_error(name: str) -> None:
    with pytest.raises(RuntimeError) as on_cpu:
        BAD[name](torch.device("cpu"))
    with raises_exactly(type(on_cpu.value), match=None) as on_infini:
        BAD[name](DEVICE)
    assert str(on_infini.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]


def test_tensors_on_two_devices_are_refused() -> None:
    with pytest.raises(RuntimeError, match="same device"):
        torch_infini.ops.swiglu(torch.ones(3, device=DEVICE), torch.ones(3))


@pytest.mark.parametrize("op", OPS)
def test_undeclared_dtypes_fall_back(op: str) -> None:
    """A dtype the backend does not declare for the kernel runs in the CPU
    fallback (the reference, same result), or is refused with it off."""
    undeclared = [d for d in FLOAT_DTYPES if d not in kernel_dtypes(op)]
    if not undeclared:
        # Nothing undeclared to route on this backend (on InfiniRT cpu: float16,
        # and causal_softmax's float64).
        pytest.skip(f"{torch_infini.backend()} declares every float dtype for {op}")
    fn, inputs = CALLS[op]
    for dtype in undeclared:
        args = inputs((3, 8), dtype)
        torch_infini.cpu_fallback.reset_stats()
        # Silent: through torch.ops, PyTorch prints C++ warnings to stderr
        # instead of raising Python warnings.
        with torch_infini.cpu_fallback.allowed("silent"):
            got = fn(*(a.to(DEVICE) for a in args))
        assert_matches(got, fn(*args), exact=True)
        assert op in torch_infini.cpu_fallback.stats()
        with (
            torch_infini.cpu_fallback.strict(),
            raises_exactly(NotImplementedError, match="kernel provider"),
        ):
            fn(*(a.to(DEVICE) for a in args))
