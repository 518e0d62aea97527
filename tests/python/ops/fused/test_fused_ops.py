"""torch.ops.infini's fused operators silu_and_mul, swiglu and causal_softmax.

The oracle is each operator's composition from stock PyTorch operators
(fused_oracles.py, docs/fused_operators.md), never the operators' own C++
reference (which the host provider runs) or their autograd Function: in
every dtype the backend declares (torch_infini.supported_dtypes), infini's
results and gradients, and those of the CPU implementation, are compared
with the composition's and with PyTorch's autograd through it. Bit for bit
on host (the composition's ATen CPU kernels are the ones the reference
runs), PyTorch's tolerances for InfiniOps' kernels. Shapes from 1-D to 4-D,
non-contiguous inputs, empty tensors, infs, NaNs and signed zeros,
infini:1, gradcheck of the formula, the Meta kernel and PyTorch's opcheck,
bad input raising the documented errors, and undeclared dtypes served by the
CPU fallback (or refused with it off).
"""

from __future__ import annotations

from collections.abc import Callable

import fused_oracles
import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
import torch_infini
from infini_testing import bit_patterns, raises_exactly, requires_two_devices
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


def _silu_and_mul_by_chunks(x: torch.Tensor) -> torch.Tensor:
    """fused_oracles.silu_and_mul (the same values, bit for bit) with the halves
    taken by ``chunk``: its backward concatenates the halves' gradients, where
    two slices' backward adds each into zeros and turns a -0.0 into +0.0."""
    gate, up = x.chunk(2, -1)
    w = fused_oracles.wide(x.dtype)
    return (F.silu(gate.to(w)) * up.to(w)).to(x.dtype)


# The stock-PyTorch compositions: the values, and the gradients (PyTorch's
# autograd through them).
ORACLES: dict[str, Callable[..., torch.Tensor]] = {
    "infini::silu_and_mul": fused_oracles.silu_and_mul,
    "infini::swiglu": fused_oracles.swiglu,
    "infini::causal_softmax": fused_oracles.causal_softmax,
}
GRAD_ORACLES = ORACLES | {"infini::silu_and_mul": _silu_and_mul_by_chunks}

# Shapes valid for every operator (causal_softmax: [..., s, t], s <= t).
SHAPES = [(3, 8), (2, 3, 16), (4, 4), (2, 5, 6), (0, 6)]


def _same_kernel() -> bool:
    return torch_infini.backend() == "host"


# Every dtype the backend declares for each operator (the others:
# test_undeclared_dtypes_fall_back).
DECLARED = [(op, dtype) for op in OPS for dtype in kernel_dtypes(op)]


def _masked(shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
    """causal_softmax's masked entries of an input [..., s, t]: column j > t - s + i."""
    s, t = shape[-2:]
    return ~torch.ones(s, t, dtype=torch.bool).tril(t - s)


# torch.testing.assert_close's defaults (rtol, atol) by dtype.
DEFAULT_TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}


def _assert_gradient(op: str, got: torch.Tensor | None, want: torch.Tensor, device: object) -> None:
    """``got`` (on ``device``) is the oracle's gradient ``want``.

    causal_softmax's masked entries: a zero of either sign here (the fused
    backward's ``y * (grad - sum(grad * y))`` with y = 0 keeps the sign of
    the bracket where the composition's masked_fill gives +0.0), compared
    bit for bit in test_causal_softmax_masked_gradients_are_positive_zero."""
    assert got is not None, "no gradient"
    assert got.device == torch.device(device), f"gradient on {got.device}"
    got = got.cpu()
    if op == "infini::causal_softmax":
        masked = _masked(got.shape).expand(got.shape)
        assert bool((got[masked] == 0).all()), f"masked entries' gradient {got[masked]}"
        got = got.masked_fill(masked, 0)
        if not _same_kernel():
            # Another kernel's forward (InfiniOps') is within an ulp of the oracle's;
            # the backward's y * (grad - sum(grad * y)) carries that ulp at the
            # row's scale, not each element's (which cancellation makes small).
            rtol, atol = DEFAULT_TOLERANCES[want.dtype]
            if want.numel():
                atol = max(atol, 4 * torch.finfo(want.dtype).eps * float(want.abs().max()))
            assert_matches(got, want, device="cpu", same_kernel=False, rtol=rtol, atol=atol)
            return
    assert_matches(got, want, device="cpu", same_kernel=_same_kernel())


def _gradients(
    fn: Callable[..., torch.Tensor],
    args: list[torch.Tensor],
    grad: torch.Tensor,
    device: str | torch.device,
) -> list[torch.Tensor | None]:
    leaves = [a.detach().clone().to(device).requires_grad_() for a in args]
    fn(*leaves).backward(grad.to(device))
    return [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize(("op", "dtype"), DECLARED, ids=str)
def test_matches_the_stock_composition(op: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    fn, inputs = CALLS[op]
    args = inputs(shape, dtype)
    expected = ORACLES[op](*args)
    assert_matches(fn(*args), expected, device="cpu", exact=True)  # the CPU implementation
    torch_infini.cpu_fallback.reset_stats()
    got = fn(*(a.to(DEVICE) for a in args))
    assert got.device == DEVICE
    assert_matches(got, expected, same_kernel=_same_kernel())
    assert torch_infini.cpu_fallback.stats() == {}  # served natively


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize(("op", "dtype"), DECLARED, ids=str)
def test_gradients_match_the_stock_composition(
    op: str, dtype: torch.dtype, shape: tuple[int, ...]
) -> None:
    """Every input's gradient on infini and on the CPU against PyTorch's
    autograd through the composition (in float, rounded once: the casts'
    backward), for an upstream gradient of the output's dtype."""
    fn, inputs = CALLS[op]
    args = inputs(shape, dtype)
    grad = make_cpu(tuple(ORACLES[op](*args).shape), dtype, seed=9)
    wanted = _gradients(GRAD_ORACLES[op], args, grad, "cpu")
    assert all(w is not None for w in wanted)
    if grad.numel() > 0:
        assert all(bool(w.abs().max() > 0) for w in wanted if w is not None)
    on_cpu = _gradients(fn, args, grad, "cpu")
    on_infini = _gradients(fn, args, grad, DEVICE)
    for want, got_cpu, got in zip(wanted, on_cpu, on_infini, strict=True):
        assert want is not None
        _assert_gradient(op, got_cpu, want, "cpu")
        _assert_gradient(op, got, want, DEVICE)


@pytest.mark.parametrize("dtype", kernel_dtypes("infini::causal_softmax"), ids=str)
def test_causal_softmax_masked_gradients_are_positive_zero(dtype: torch.dtype) -> None:
    """Masked entries get +0.0, as through PyTorch's masked_fill (the fused
    backward's y * (grad - sum(grad * y)) once gave -0.0 or NaN there)."""
    x = make_cpu((2, 5, 6), dtype, seed=3)
    grad = make_cpu((2, 5, 6), dtype, seed=9)
    (want,) = _gradients(fused_oracles.causal_softmax, [x], grad, "cpu")
    assert want is not None
    for device in ("cpu", DEVICE):
        (got,) = _gradients(torch_infini.ops.causal_softmax, [x], grad, device)
        assert got is not None
        assert_matches(got, want, device=device, same_kernel=_same_kernel())


# Values whose every rounding, sign and propagation is defined: signed zeros,
# infinities, NaN, overflow of exp (88.0 in float, 6e4 and 3e38 beyond float16
# range: inf there), underflow (-1e4, 1e-30).
SPECIAL = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan")]
SPECIAL += [88.0, -88.0, -1e4, 1e-30, 6e4, 3e38]


def _special_grid(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (gate, up) pair of SPECIAL values: two [n * n, 1] columns."""
    v = torch.tensor(SPECIAL, dtype=torch.float64).to(dtype)
    gate, up = torch.meshgrid(v, v, indexing="ij")
    return gate.reshape(-1, 1), up.reshape(-1, 1)


@pytest.mark.parametrize(
    ("op", "dtype"), [(op, d) for op, d in DECLARED if op != "infini::causal_softmax"], ids=str
)
def test_special_values_match_the_stock_composition(op: str, dtype: torch.dtype) -> None:
    """silu_and_mul and swiglu on every pair of special values, forward and
    backward (upstream gradients of special values too), NaN payloads and
    signs of zero included on host."""
    gate, up = _special_grid(dtype)
    args = [torch.cat([gate, up], -1)] if op == "infini::silu_and_mul" else [up, gate]
    fn = CALLS[op][0]
    expected = ORACLES[op](*args)
    assert_matches(fn(*args), expected, device="cpu", exact=True)
    assert_matches(fn(*(a.to(DEVICE) for a in args)), expected, same_kernel=_same_kernel())
    cycle = torch.tensor([0.5, -0.5, 0.0, -0.0, float("inf"), float("nan"), 3.0]).to(dtype)
    grad = cycle.repeat(expected.numel() // len(cycle) + 1)[: expected.numel()]
    grad = grad.reshape(expected.shape)
    wanted = _gradients(GRAD_ORACLES[op], args, grad, "cpu")
    for device in ("cpu", DEVICE):
        for got, want in zip(_gradients(fn, args, grad, device), wanted, strict=True):
            assert want is not None
            _assert_gradient(op, got, want, device)


def _assert_same_nans_else_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    """Bit for bit, except that a NaN matches any NaN: PyTorch's own softmax
    writes different NaNs in float (its half-type kernels' intermediate) and
    float16/bfloat16 (0xffff vs 0x7e00 from the same input), so a payload is
    no part of the contract of a kernel that computes in float."""
    got = got.cpu()
    assert torch.equal(got.isnan(), want.isnan()), f"NaNs at {got.isnan()} != {want.isnan()}"
    finite = ~want.isnan()
    assert torch.equal(bit_patterns(got[finite]), bit_patterns(want[finite])), (got, want)


def _assert_causal_softmax_on_both(x: torch.Tensor, expected: torch.Tensor) -> None:
    """infini::causal_softmax of CPU ``x`` and of its infini copy: NaN where
    ``expected`` has them, its bits elsewhere (PyTorch's tolerances where
    infini runs another kernel)."""
    for got in (
        torch_infini.ops.causal_softmax(x),
        torch_infini.ops.causal_softmax(x.to(DEVICE)),
    ):
        if _same_kernel() or got.device.type == "cpu":
            _assert_same_nans_else_bits(got, expected)
        else:
            assert_matches(got, expected)


@pytest.mark.parametrize("dtype", kernel_dtypes("infini::causal_softmax"), ids=str)
def test_causal_softmax_special_values(dtype: torch.dtype) -> None:
    """NaN and infinities in the masked entries do not leak into a row, -inf
    and underflowing scores among the allowed ones weigh 0, huge scores
    dominate, a row with +inf or NaN allowed is NaN where allowed (as PyTorch's
    softmax) and 0 where masked;
    the gradient of the finite rows against the composition's."""
    x = make_cpu((3, 4, 6), torch.float64, seed=5)  # s = 4, t = 6
    masked = _masked(x.shape).expand(x.shape)
    fill = torch.tensor([float("nan"), float("inf"), float("-inf"), 3e38], dtype=torch.float64)
    x[masked] = fill.repeat(int(masked.sum()) // 4 + 1)[: int(masked.sum())]
    x[0, 1, 0], x[0, 2, 1], x[0, 3, 3] = float("-inf"), -1e4, 6e4
    x[1, 1, :3] = torch.tensor([-0.0, 0.0, -0.0])
    x[1, 2, :5] = torch.tensor([6e4, 6e4, -6e4, 1.0, 88.0])  # finite in float16
    finite_rows = x.clone()
    x[2, 0, 1], x[2, 2, 0], x[2, 3, 5] = float("inf"), float("nan"), float("nan")
    x = x.to(dtype)
    expected = fused_oracles.causal_softmax(x)
    assert bool(expected[2, 0, :3].isnan().all()) and bool(expected[0].isfinite().all())
    assert bool((expected[2, 0, 3:] == 0).all())  # masked: 0 even in a row of NaN
    _assert_causal_softmax_on_both(x, expected)
    rows = finite_rows[:2].to(dtype)
    grad = make_cpu(tuple(rows.shape), dtype, seed=8)
    (want,) = _gradients(fused_oracles.causal_softmax, [rows], grad, "cpu")
    assert want is not None and bool(want.isfinite().all())
    for device in ("cpu", DEVICE):
        (got,) = _gradients(torch_infini.ops.causal_softmax, [rows], grad, device)
        _assert_gradient("infini::causal_softmax", got, want, device)


@pytest.mark.parametrize("dtype", kernel_dtypes("infini::causal_softmax"), ids=str)
def test_causal_softmax_of_one_query_is_the_rows_softmax(dtype: torch.dtype) -> None:
    """A decoding step (s = 1, after t - 1 cached keys) masks nothing: each
    row's softmax as PyTorch computes it (in float for the half types, as
    the kernel), infinities and NaN included; 2-D and 3-D inputs."""
    x = make_cpu((4, 1, 7), torch.float64, seed=9) / 50
    x[1, 0, 2], x[2, 0, 0], x[3, 0, 5] = float("-inf"), float("inf"), float("nan")
    x = x.to(dtype)
    wide = torch.float64 if dtype == torch.float64 else torch.float32

    def softmax(t: torch.Tensor) -> torch.Tensor:
        return torch.softmax(t.to(wide), -1).to(dtype)

    for inputs in (x, x[0]):
        _assert_causal_softmax_on_both(inputs, softmax(inputs))
    # The gradient, on finite rows, against stock softmax's: bit for bit in
    # float32 and float64; the half types round the fused backward's
    # y * (grad - sum(grad * y)) once where stock autograd rounds each step,
    # so they agree within a few ulps at the row's scale.
    rows = (make_cpu((3, 1, 7), torch.float64, seed=10) / 50).to(dtype)
    grad = make_cpu(tuple(rows.shape), dtype, seed=11) / 50
    (want,) = _gradients(softmax, [rows], grad, "cpu")
    wide_dtype = dtype in (torch.float32, torch.float64)
    rtol, atol = DEFAULT_TOLERANCES[dtype]
    atol = max(atol, 4 * torch.finfo(dtype).eps * float(want.abs().max()))
    for device in ("cpu", DEVICE):
        (got,) = _gradients(torch_infini.ops.causal_softmax, [rows], grad, device)
        assert got is not None and got.device == torch.device(device)
        assert_matches(got.cpu(), want, device="cpu", same_kernel=wide_dtype, rtol=rtol, atol=atol)


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
    assert_matches(got4, fused_oracles.causal_softmax(x4), exact=True)
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


@pytest.mark.parametrize(("op", "dtype"), DECLARED, ids=str)
def test_non_contiguous_inputs(op: str, dtype: torch.dtype) -> None:
    fn, inputs = CALLS[op]
    args = [t.t() for t in inputs((8, 6), dtype)]  # [6, 8], transposed
    got = fn(*(relocate_view(a) for a in args))
    assert_matches(got, ORACLES[op](*args), same_kernel=_same_kernel())
    sliced = [t[:, 1::2] for t in inputs((3, 16), dtype)]  # strided last dim
    got = fn(*(relocate_view(a) for a in sliced))
    assert_matches(got, ORACLES[op](*sliced), same_kernel=_same_kernel())
    offset = [t[1:, 2:] for t in inputs((4, 10), dtype)]  # storage offset
    got = fn(*(relocate_view(a) for a in offset))
    assert_matches(got, ORACLES[op](*offset), same_kernel=_same_kernel())


def relocate_view(t: torch.Tensor) -> torch.Tensor:
    """The same view (sizes, strides, offset) of a copy of t's storage on infini."""
    base = torch.empty(0, dtype=t.dtype).set_(
        t.untyped_storage(), 0, (t.untyped_storage().nbytes() // t.element_size(),), (1,)
    )
    return base.to(DEVICE).as_strided(t.size(), t.stride(), t.storage_offset())


@requires_two_devices
@pytest.mark.parametrize("op", OPS)
def test_second_device(op: str) -> None:
    """On infini:1: the result and the gradients there, against the composition."""
    fn, inputs = CALLS[op]
    second = torch.device("infini", 1)
    args = inputs((2, 3, 8), torch.bfloat16)
    got = fn(*(a.to(second) for a in args))
    assert_matches(got, ORACLES[op](*args), device=second, same_kernel=_same_kernel())
    grad = make_cpu(tuple(got.shape), torch.bfloat16, seed=9)
    wanted = _gradients(GRAD_ORACLES[op], args, grad, "cpu")
    for got_grad, want in zip(_gradients(fn, args, grad, second), wanted, strict=True):
        assert want is not None
        _assert_gradient(op, got_grad, want, second)


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
    expected = ORACLES[op](*args)
    assert meta.shape == expected.shape and meta.dtype == expected.dtype
    assert meta.device.type == "meta"
    packet = getattr(torch.ops.infini, op.removeprefix("infini::"))
    torch.library.opcheck(packet.default, [a.requires_grad_() for a in args])
    # opcheck's autograd-registration test knows only CPU/CUDA/XPU devices.
    dev_args = [a.detach().to(DEVICE).requires_grad_() for a in args]
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(packet.default, dev_args, test_utils=utils)


# Bad input: the call, and what its RuntimeError says (docs/fused_operators.md).
BAD: dict[str, tuple[Callable[[torch.device], object], str]] = {
    "silu_and_mul odd last dim": (
        lambda d: torch_infini.ops.silu_and_mul(torch.ones(3, 5, device=d)),
        "infini::silu_and_mul: the last dimension holds the gate and the up halves and must be "
        "even, got input of shape [3, 5]",
    ),
    "silu_and_mul 0-dim": (
        lambda d: torch_infini.ops.silu_and_mul(torch.tensor(1.0, device=d)),
        "infini::silu_and_mul: the last dimension holds the gate and the up halves and must be "
        "even, got input of shape []",
    ),
    "silu_and_mul int": (
        lambda d: torch_infini.ops.silu_and_mul(torch.ones(3, 4, dtype=torch.int32, device=d)),
        "infini::silu_and_mul: expected a floating-point input, got Int",
    ),
    "swiglu shapes": (
        lambda d: torch_infini.ops.swiglu(torch.ones(3, 4, device=d), torch.ones(4, 4, device=d)),
        "infini::swiglu: input and gate must have one shape, got [3, 4] and [4, 4]",
    ),
    "swiglu dtypes": (
        lambda d: torch_infini.ops.swiglu(
            torch.ones(3, 4, device=d), torch.ones(3, 4, dtype=torch.float64, device=d)
        ),
        "infini::swiglu: input and gate must have one dtype, got Float and Double",
    ),
    "swiglu int": (
        lambda d: torch_infini.ops.swiglu(
            torch.ones(3, dtype=torch.int64, device=d), torch.ones(3, dtype=torch.int64, device=d)
        ),
        "infini::swiglu: expected floating-point tensors, got Long",
    ),
    "causal_softmax 1-D": (
        lambda d: torch_infini.ops.causal_softmax(torch.ones(4, device=d)),
        "infini::causal_softmax: expected input [..., s, t] with s <= t (queries after t - s "
        "cached keys), got shape [4]",
    ),
    "causal_softmax more queries than keys": (
        lambda d: torch_infini.ops.causal_softmax(torch.ones(5, 4, device=d)),
        "infini::causal_softmax: expected input [..., s, t] with s <= t (queries after t - s "
        "cached keys), got shape [5, 4]",
    ),
    "causal_softmax int": (
        lambda d: torch_infini.ops.causal_softmax(torch.ones(3, 4, dtype=torch.int32, device=d)),
        "infini::causal_softmax: expected a floating-point input, got Int",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_raises_the_documented_error(name: str) -> None:
    """Exactly RuntimeError with the message that names the problem, on the
    CPU and on infini (at the call: the argument checks precede the kernel)."""
    call, message = BAD[name]
    for device in (torch.device("cpu"), DEVICE):
        with raises_exactly(RuntimeError, match=None) as info:
            call(device)
        assert str(info.value).splitlines()[0] == message, device


def test_tensors_on_two_devices_are_refused() -> None:
    with raises_exactly(RuntimeError, match="same device, but found at least two devices"):
        torch_infini.ops.swiglu(torch.ones(3, device=DEVICE), torch.ones(3))


@pytest.mark.parametrize("op", OPS)
def test_undeclared_dtypes_fall_back(op: str) -> None:
    """A dtype the backend does not declare for the kernel runs in the CPU
    fallback (the reference, same result), or is refused with it off. Where
    the backend declares every floating dtype (the reference takes no other;
    host: silu_and_mul, swiglu), each of them runs natively with the fallback
    off: nothing is refused or routed."""
    fn, inputs = CALLS[op]
    undeclared = [d for d in FLOAT_DTYPES if d not in kernel_dtypes(op)]
    if not undeclared:
        for dtype in FLOAT_DTYPES:
            args = inputs((3, 8), dtype)
            torch_infini.cpu_fallback.reset_stats()
            with torch_infini.cpu_fallback.strict():
                got = fn(*(a.to(DEVICE) for a in args))
            assert_matches(got, fn(*args), same_kernel=_same_kernel())
            assert torch_infini.cpu_fallback.stats() == {}, dtype
        return
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


def _infini_operators() -> list[str]:
    return sorted(
        {n.split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith("infini::")}
    )


def test_every_fused_operator_has_cpu_meta_and_autograd_kernels() -> None:
    # library.cpp holds the schemas and registerFused() the kernels: an
    # operator defined without them would run nowhere, or lose its gradient.
    names = _infini_operators()
    assert len(names) == 12, names  # docs/fused_operators.md lists twelve
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    for name in names:
        for key in ("CPU", "Meta", "Autograd"):
            assert has(name, key), f"{name} has no {key} kernel"


def test_torch_infini_ops_serves_every_fused_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    for qualified in _infini_operators():
        name = qualified.split("::")[1]
        assert name in dir(torch_infini.ops)
        # Without a Python wrapper, the operator itself, listed all the same.
        monkeypatch.delattr(torch_infini.ops, name, raising=False)
        assert name in dir(torch_infini.ops)
        assert getattr(torch_infini.ops, name) is getattr(torch.ops.infini, name)
    with pytest.raises(AttributeError, match="no attribute 'not_an_operator'"):
        torch_infini.ops.not_an_operator  # noqa: B018


def _in_place_calls(device: torch.device | str) -> dict[str, Callable[[], list[torch.Tensor]]]:
    """Each operator that writes its arguments, called once on ``device``;
    returns what it wrote."""

    def fused_add_rms_norm() -> list[torch.Tensor]:
        x = make_cpu((3, 8), torch.float32, seed=1).to(device)
        r = make_cpu((3, 8), torch.float32, seed=2).to(device)
        torch_infini.ops.fused_add_rms_norm(x, r, None)
        return [x, r]

    def rotary_embedding() -> list[torch.Tensor]:
        q = make_cpu((2, 8), torch.float32, seed=3).to(device)
        k = make_cpu((2, 8), torch.float32, seed=4).to(device)
        cache = make_cpu((4, 8), torch.float32, seed=5).to(device)
        positions = torch.tensor([0, 3], device=device)
        torch_infini.ops.rotary_embedding(positions, q, k, 8, cache, True)
        return [q, k]

    def reshape_and_cache_flash() -> list[torch.Tensor]:
        key = make_cpu((2, 2, 8), torch.float32, seed=6).to(device)
        value = make_cpu((2, 2, 8), torch.float32, seed=7).to(device)
        caches = [make_cpu((2, 4, 2, 8), torch.float32, seed=s).to(device) for s in (8, 9)]
        slots = torch.tensor([5, 0], dtype=torch.int32, device=device)
        torch_infini.ops.reshape_and_cache_flash(key, value, *caches, slots)
        return caches

    return {
        "fused_add_rms_norm": fused_add_rms_norm,
        "rotary_embedding": rotary_embedding,
        "reshape_and_cache_flash": reshape_and_cache_flash,
    }


@pytest.mark.parametrize("device", ["cpu", DEVICE], ids=str)
@pytest.mark.parametrize("op", sorted(_in_place_calls("cpu")))
def test_in_place_operators_bump_versions_with_grad_mode_off(op: str, device: object) -> None:
    """With grad mode off a fused operator skips its autograd Function
    (inference and compiled graphs), but one that writes its arguments still
    bumps their versions there: a tensor saved for a backward and then
    overwritten under no_grad must still fail that backward (autograd
    compares the saved version), not give a wrong gradient."""
    versions: list[int] = []

    def call_recording_versions() -> list[torch.Tensor]:
        written = _in_place_calls(device)[op]()
        versions.extend(t._version for t in written)
        return written

    with torch.no_grad(), torch_infini.cpu_fallback.allowed("silent"):
        call_recording_versions()
    assert versions and all(v > 0 for v in versions), versions


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad mode", "no_grad"])
@pytest.mark.parametrize("device", ["cpu", DEVICE], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_forward_mode_ad_is_refused_not_dropped(op: str, device: object, grad_mode: bool) -> None:
    """The fused operators have no forward derivative: a dual operand
    (torch.autograd.forward_ad) raises, naming the operator, on every device
    and with grad mode off too (forward mode does not depend on it), instead
    of a result whose tangent silently went missing."""
    fn, inputs = CALLS[op]
    args = [t.to(device) for t in inputs((3, 8), torch.float32)]
    with torch.set_grad_enabled(grad_mode), fwAD.dual_level():
        args[0] = fwAD.make_dual(args[0], torch.ones_like(args[0]))
        with raises_exactly(NotImplementedError, match=f"{op}: forward-mode AD"):
            fn(*args)
