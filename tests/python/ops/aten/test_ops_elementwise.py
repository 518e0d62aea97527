"""add and mul on infini (Tensor, in-place and out= variants) against the CPU oracle.

Covers broadcasting, 0-size / 1-element / 0-dim shapes, strided, transposed,
sliced and permuted (channels_last-like) inputs, output layout (strides as
TensorIterator computes them on the CPU), in-place into views, out= resizing,
the dtype table, and the refusals (out= of another dtype, bool/complex, mixed devices).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable

import pytest
import torch
import torch_infini
from hypothesis import given, settings
from hypothesis import strategies as st
from infini_testing import fallback_off
from op_helpers import (
    DEVICE,
    FLOAT_DTYPES,
    INT_DTYPES,
    KERNEL_DTYPES,
    REDUCED_DTYPES,
    ViewFn,
    add_oracle,
    assert_bitwise_equal,
    assert_matches,
    expect_kernel,
    identity,
    make_cpu,
    pair,
    raises_exactly,
    requires_two_devices,
)

REFUSED_DTYPES = (torch.bool, torch.complex64)

BinaryFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.add(a, b)


def _add_alpha(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    alpha = -1.5 if a.dtype.is_floating_point else 3
    return torch.add(a, b, alpha=alpha)


def _mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mul(a, b)


OPS: dict[str, BinaryFn] = {"add": _add, "add_alpha": _add_alpha, "mul": _mul}


def _kernel_name(op: str) -> str:
    return op.split("_")[0]


def _kernel_of(form: str) -> str:
    """The kernel a scalar form ("x + s", "x.mul_(s)", "x * (2**62 + 1)") runs.

    mul where the form multiplies (``*`` or ``mul``; a ``**`` in a literal is
    no product), add otherwise. expect_kernel checks the name in the refusal.
    """
    form = form.replace("**", "^")
    return "mul" if "*" in form or "mul" in form else "add"


def _alpha_kwargs(op: str, dtype: torch.dtype) -> dict[str, float | int]:
    if op != "add_alpha":
        return {}
    return {"alpha": -1.5 if dtype.is_floating_point else 3}


def _oracle(op: str, cpu_result: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """What infini's ``op`` of CPU operands ``a``, ``b`` must give, from the CPU's result.

    The CPU's result, except float16/bfloat16 add with alpha off host (add_oracle).
    """
    if op != "add_alpha":
        return cpu_result
    return add_oracle(cpu_result, a, b, **_alpha_kwargs(op, a.dtype))


def _run_variant(
    variant: str, op: str, a: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs ``op`` in one of its forms; returns (result, tensor that must hold it)."""
    kwargs = _alpha_kwargs(op, a.dtype)
    name = _kernel_name(op)
    if variant == "function":
        r = getattr(torch, name)(a, b, **kwargs)
        return r, r
    if variant == "method":
        r = getattr(a, name)(b, **kwargs)
        return r, r
    if variant == "operator":
        if name == "add":
            r = a + b if not kwargs else a.add(b, **kwargs)
        else:
            r = a * b
        return r, r
    if variant == "inplace":
        target = a.clone()
        r = getattr(target, name + "_")(b, **kwargs)
        assert r is target
        return r, target
    if variant == "out":
        shape = torch.broadcast_shapes(a.shape, b.shape)
        out = torch.empty(shape, dtype=a.dtype, device=a.device)
        r = getattr(torch, name)(a, b, out=out, **kwargs)
        assert r is out
        return r, out
    raise AssertionError(variant)


# ------------------------------------------------------------ dtype table


@pytest.mark.parametrize("variant", ["function", "method", "operator", "inplace", "out"])
@pytest.mark.parametrize("op", ["add", "add_alpha", "mul"])
@pytest.mark.parametrize("dtype", KERNEL_DTYPES["add"], ids=str)
def test_dtype_table(op: str, dtype: torch.dtype, variant: str) -> None:
    assert dtype in KERNEL_DTYPES[_kernel_name(op)]
    a_cpu, a = pair((4, 5), dtype, seed=1)
    b_cpu, b = pair((5,), dtype, seed=2)
    expected, _ = _run_variant(variant, op, a_cpu, b_cpu)
    expected = _oracle(op, expected, a_cpu, b_cpu)
    with expect_kernel(_kernel_name(op), dtype):
        result, holder = _run_variant(variant, op, a, b)
        assert_matches(result, expected)
        assert_matches(holder, expected)
    # the inputs are untouched (in-place ran on a clone)
    assert_matches(a, a_cpu, exact=True)
    assert_matches(b, b_cpu, exact=True)


@fallback_off
@pytest.mark.parametrize("variant", ["function", "inplace", "out"])
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("dtype", REFUSED_DTYPES, ids=str)
def test_bool_and_complex_refused(op: str, dtype: torch.dtype, variant: str) -> None:
    assert dtype not in KERNEL_DTYPES[op]
    _, a = pair((3, 4), dtype, seed=1)
    _, b = pair((3, 4), dtype, seed=2)
    before = a.cpu()
    with pytest.raises(NotImplementedError, match=op):
        _run_variant(variant, op, a, b)
    torch.infini.synchronize()
    assert torch.equal(a.cpu(), before)


@pytest.mark.parametrize("variant", ["function", "inplace", "out"])
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("dtype", REFUSED_DTYPES, ids=str)
def test_bool_and_complex_fall_back_to_the_cpu(op: str, dtype: torch.dtype, variant: str) -> None:
    a_cpu, a = pair((3, 4), dtype, seed=1)
    b_cpu, b = pair((3, 4), dtype, seed=2)
    expected, _ = _run_variant(variant, op, a_cpu, b_cpu)
    with torch_infini.cpu_fallback.allowed("silent"):
        result, holder = _run_variant(variant, op, a, b)
    assert_matches(result, expected, exact=True)
    assert_matches(holder, expected, exact=True)
    assert_matches(a, a_cpu, exact=True)  # in-place ran on a clone


# ------------------------------------------------------------ shapes, broadcasting

SHAPES: list[tuple[tuple[int, ...], tuple[int, ...]]] = [
    ((), ()),
    ((1,), (1,)),
    ((1, 1, 1), (1, 1, 1)),
    ((0,), (0,)),
    ((0, 3), (3,)),
    ((2, 0, 3), (1, 3)),
    ((3,), (0, 3)),
    ((7,), (1,)),
    ((1,), (7,)),
    ((4, 1), (1, 5)),
    ((3, 1, 5), (4, 1)),
    ((5,), (2, 3, 5)),
    ((2, 3, 5), (5,)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((2, 1, 4, 1), (3, 1, 5)),
    ((64, 33), (64, 33)),
]


@pytest.mark.parametrize("op", ["add", "add_alpha", "mul"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_shapes_and_broadcasting(op: str, shapes: tuple[tuple[int, ...], ...]) -> None:
    a_cpu, a = pair(shapes[0], torch.float32, seed=3)
    b_cpu, b = pair(shapes[1], torch.float32, seed=4)
    fn = OPS[op]
    assert_matches(fn(a, b), fn(a_cpu, b_cpu), check_stride=True)


# ------------------------------------------------------------ layouts


def _t(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(-1, -2)


def _step(t: torch.Tensor) -> torch.Tensor:
    return t[..., ::2]


def _offset_slice(t: torch.Tensor) -> torch.Tensor:
    return t[1:, 1:-1]


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    # dense, channels_last-like: logical [n, c, h, w] stored as [n, h, w, c]
    return t.permute(0, 3, 1, 2)


def _cl(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last)


def _rev(t: torch.Tensor) -> torch.Tensor:
    return t.permute(*reversed(range(t.dim())))


def _expand_rows(t: torch.Tensor) -> torch.Tensor:
    return t[:1].expand(t.shape[0], *t.shape[1:])


# (base shape, view) for each operand; views give the same logical shape.
LAYOUTS: dict[str, tuple[tuple[tuple[int, ...], ViewFn], tuple[tuple[int, ...], ViewFn]]] = {
    "transposed+contiguous": (((5, 4), _t), ((4, 5), identity)),
    "both transposed": (((5, 4), _t), ((5, 4), _t)),
    "strided+contiguous": (((4, 10), _step), ((4, 5), identity)),
    "contiguous+strided": (((4, 5), identity), ((4, 10), _step)),
    "offset slices": (((5, 7), _offset_slice), ((5, 7), _offset_slice)),
    "expanded input": (((4, 5), _expand_rows), ((4, 5), identity)),
    "nhwc both": (((2, 4, 5, 3), _nhwc), ((2, 4, 5, 3), _nhwc)),
    "nhwc+contiguous": (((2, 4, 5, 3), _nhwc), ((2, 3, 4, 5), identity)),
    "contiguous+nhwc": (((2, 3, 4, 5), identity), ((2, 4, 5, 3), _nhwc)),
    "channels_last both": (((2, 3, 4, 5), _cl), ((2, 3, 4, 5), _cl)),
    "reversed 3-D both": (((5, 4, 3), _rev), ((5, 4, 3), _rev)),
    "reversed 3-D + strided": (((5, 4, 3), _rev), ((3, 4, 10), _step)),
}


@pytest.mark.parametrize("op", ["add", "add_alpha", "mul"])
@pytest.mark.parametrize("layout", list(LAYOUTS), ids=str)
def test_layouts_and_output_strides(op: str, layout: str) -> None:
    (shape_a, view_a), (shape_b, view_b) = LAYOUTS[layout]
    a_cpu, a = pair(shape_a, torch.float32, seed=5, view=view_a)
    b_cpu, b = pair(shape_b, torch.float32, seed=6, view=view_b)
    assert a.shape == b.shape
    fn = OPS[op]
    assert_matches(fn(a, b), fn(a_cpu, b_cpu), check_stride=True)


def test_repeated_layouts_keep_the_cpus_output_strides() -> None:
    """New outputs reuse the geometry TensorIterator chose for the same input
    layouts (a per-thread cache of a few entries): every layout, twice over
    and more layouts than the cache holds, keeps the CPU's strides."""
    cases = []
    for (shape_a, view_a), (shape_b, view_b) in LAYOUTS.values():
        cases.append(
            (
                pair(shape_a, torch.float32, seed=9, view=view_a),
                pair(shape_b, torch.float32, seed=10, view=view_b),
            )
        )
    broadcast = [((2, 1, 3), (4, 1)), ((1, 4), (3, 1)), ((5,), (2, 5)), ((), (2, 3))]
    for shape_a, shape_b in broadcast:
        cases.append((pair(shape_a, torch.float32, seed=11), pair(shape_b, torch.float32, seed=12)))
    assert len(cases) > 8
    for _ in range(3):
        for (a_cpu, a), (b_cpu, b) in cases:
            assert_matches(a * b, a_cpu * b_cpu, check_stride=True)
            assert_matches(torch.relu(a), torch.relu(a_cpu), check_stride=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.int16, torch.uint8], ids=str)
def test_permuted_dense_other_dtypes(dtype: torch.dtype) -> None:
    a_cpu, a = pair((2, 4, 5, 3), dtype, seed=7, view=_nhwc)
    b_cpu, b = pair((2, 3, 4, 5), dtype, seed=8)
    with expect_kernel("mul", dtype):
        assert_matches(a * b, a_cpu * b_cpu, check_stride=True)
    with expect_kernel("add", dtype):
        assert_matches(a + b, a_cpu + b_cpu, check_stride=True)


# ------------------------------------------------------------ CPU scalars

SCALAR_CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "x * 0.5": lambda x: x * 0.5,
    "0.5 * x": lambda x: 0.5 * x,
    "x + 2": lambda x: x + 2,
    "2 + x": lambda x: 2 + x,
    "x + cpu 0-dim float64": lambda x: x + torch.tensor(1.25, dtype=torch.float64),
    "cpu 0-dim int * x": lambda x: torch.tensor(3) * x,
    "add(x, 2, alpha=3)": lambda x: torch.add(x, 2, alpha=3),
    "x.add_(0.5)": lambda x: x.clone().add_(0.5),
    "x.mul_(cpu 0-dim)": lambda x: x.clone().mul_(torch.tensor(-2.0)),
    "mul(x, 0.5, out=)": lambda x: torch.mul(x, 0.5, out=torch.empty_like(x)),
    # values float32 cannot hold: 0.1, 2**24 + 1, 2**62 + 1
    "x + 0.1": lambda x: x + 0.1,
    "0.1 * x": lambda x: 0.1 * x,
    "x * cpu 0-dim float64 0.1": lambda x: x * torch.tensor(0.1, dtype=torch.float64),
    "cpu 0-dim float64 0.1 + x": lambda x: torch.tensor(0.1, dtype=torch.float64) + x,
    "x + 2**24 + 1": lambda x: x + (2**24 + 1),
    "x * (2**62 + 1)": lambda x: x * (2**62 + 1),
    "add(x, 0.1, alpha=3)": lambda x: torch.add(x, 0.1, alpha=3),
    "x.mul_(0.1)": lambda x: x.clone().mul_(0.1),
    "add(x, 0.1, out=)": lambda x: torch.add(x, 0.1, out=torch.empty_like(x)),
    "x * -0.0": lambda x: x * -0.0,
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("case", list(SCALAR_CASES), ids=str)
def test_cpu_scalar_operand(case: str, dtype: torch.dtype) -> None:
    x_cpu, x = pair((3, 4), dtype, seed=9, view=_t)
    fn = SCALAR_CASES[case]
    expected = fn(x_cpu)
    with expect_kernel(_kernel_of(case), dtype):
        assert_matches(fn(x), expected, check_stride=True)


# Small values, and ones float32 cannot hold (above 2**24, near the int64
# limits): the result dtype's wrapping, as on the CPU.
INT_SCALARS = [2, 3, 2**24 + 1, -(2**24 + 1), 2**31 + 1, 2**62 + 1, 2**63 - 1, -(2**63)]


@pytest.mark.parametrize("value", INT_SCALARS, ids=str)
@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_cpu_scalar_operand_integer(dtype: torch.dtype, value: int) -> None:
    x_cpu, x = pair((3, 4), dtype, seed=10)
    s = torch.tensor(value)  # a CPU 0-dim int64 tensor
    assert_matches(x * value, x_cpu * value, exact=True)
    assert_matches(value + x, value + x_cpu, exact=True)
    assert_matches(torch.add(x, value, alpha=2), torch.add(x_cpu, value, alpha=2), exact=True)
    assert_matches(x.clone().mul_(s), x_cpu.clone().mul_(s), exact=True)
    assert_matches(s + x, s + x_cpu, exact=True)
    assert_matches(
        torch.add(x, s, out=torch.empty_like(x)),
        torch.add(x_cpu, s, out=torch.empty_like(x_cpu)),
        exact=True,
    )


def test_zero_dim_infini_tensors() -> None:
    a_cpu, a = pair((), torch.float32, seed=11)
    b_cpu, b = pair((2, 3), torch.float32, seed=12)
    assert_matches(a * b, a_cpu * b_cpu, check_stride=True)
    assert_matches(b + a, b_cpu + a_cpu, check_stride=True)
    assert_matches(a + a, a_cpu + a_cpu, check_stride=True)
    c = a.clone()
    c.mul_(a)
    assert_matches(c, a_cpu * a_cpu)


def test_out_of_range_python_scalar_wraps_as_pytorch() -> None:
    # PyTorch casts the wrapped Python scalar to the result dtype (wrapping), it
    # does not refuse it: int8 tensor * 300 is int8 tensor * 44.
    for dtype, value in ((torch.int8, 300), (torch.uint8, -300), (torch.int16, 70000)):
        x_cpu, x = pair((2, 3), dtype, seed=29)
        for op in ("add", "mul"):
            fn = getattr(torch, op)
            assert_matches(fn(x, value), fn(x_cpu, value), exact=True)


@fallback_off
def test_int64_alpha_is_exact_or_refused() -> None:
    # The add kernel (like InfiniOps Add) takes alpha as a double: integer
    # alphas up to 2**53 are exact, larger ones are refused, never rounded.
    a_cpu = torch.tensor([0, 1, -1], dtype=torch.int64)
    b_cpu = torch.tensor([1, 1, 3], dtype=torch.int64)
    a, b = a_cpu.to(DEVICE), b_cpu.to(DEVICE)
    exact = 2**53
    assert_matches(torch.add(a, b, alpha=exact), torch.add(a_cpu, b_cpu, alpha=exact), exact=True)
    c = a.clone()
    c.add_(b, alpha=-exact)
    assert_matches(c, a_cpu.clone().add_(b_cpu, alpha=-exact), exact=True)
    with pytest.raises(NotImplementedError, match="not exactly representable"):
        torch.add(a, b, alpha=2**53 + 1)


@pytest.mark.parametrize("alpha", [2**53 + 1, -(2**53 + 1), 2**62 + 1], ids=str)
def test_int64_alpha_beyond_2_53_falls_back_to_the_cpu(alpha: int) -> None:
    a_cpu = torch.tensor([0, 1, -1], dtype=torch.int64)
    b_cpu = torch.tensor([1, 1, 3], dtype=torch.int64)
    a, b = a_cpu.to(DEVICE), b_cpu.to(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        result = torch.add(a, b, alpha=alpha)
        c = a.clone()
        c.add_(b, alpha=alpha)
    assert_matches(result, torch.add(a_cpu, b_cpu, alpha=alpha), exact=True)
    assert_matches(c, a_cpu.clone().add_(b_cpu, alpha=alpha), exact=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_reduced_precision_scalar_operand_keeps_its_precision(dtype: torch.dtype) -> None:
    # PyTorch computes half/bfloat16 ops with a CPU scalar in float (opmath):
    # the scalar is not rounded to the tensor's dtype first. 1e5 overflows
    # float16, but 1e-3 * 1e5 = 100 does not.
    x_cpu = torch.full((4,), 1e-3, dtype=dtype)
    x = x_cpu.to(DEVICE)
    with expect_kernel("mul", dtype):
        assert_matches(x * 1e5, x_cpu * 1e5)
    with expect_kernel("add", dtype):
        assert_matches(torch.add(x, 1e5, alpha=1e-3), torch.add(x_cpu, 1e5, alpha=1e-3))
    with expect_kernel("mul", dtype):
        assert_matches(x * torch.tensor(1e5), x_cpu * torch.tensor(1e5))


# ------------------------------------------------------------ scalars are not rounded


def _edges(dtype: torch.dtype) -> torch.Tensor:
    """Values of ``dtype`` where rounding or wrapping shows: near the limits, 0.1, ±0, inf, nan."""
    if dtype == torch.float64:
        return torch.tensor(
            [0.0, -0.0, 1.0, -3.5, 0.1, 1e300, -1e-290, 16777217.0, math.inf, -math.inf, math.nan],
            dtype=dtype,
        )
    info = torch.iinfo(dtype)
    return torch.tensor(
        [0, 1, -1, 7, info.max, info.min, info.max // 3, info.min // 3 + 1, info.max - 5],
        dtype=dtype,
    )


# (dtype, scalar): values float32 cannot hold, and out-of-range ones that wrap.
UNROUNDED_SCALARS = [
    (torch.int64, 2**24 + 1),
    (torch.int64, -(2**24 + 1)),
    (torch.int64, 2**53 + 1),
    (torch.int64, 2**62 + 1),
    (torch.int64, 2**63 - 1),
    (torch.int64, -(2**63)),
    (torch.int64, 3),  # x * 3 near the limits wraps
    (torch.int32, 2**24 + 1),
    (torch.int32, 2**31 + 5),  # wraps to int32
    (torch.int8, 300),  # int8 + 300 is int8 + 44
    (torch.int8, -300),
    (torch.int8, 2**62 + 1),
    (torch.float64, 0.1),
    (torch.float64, -0.1),
    (torch.float64, 1 / 3),
    (torch.float64, 1e-300),  # 0 in float32
    (torch.float64, 1e300),  # inf in float32
    (torch.float64, 2**24 + 1),  # a Python int with a float64 tensor
]

# Forms of add and mul with a scalar operand ``s`` (a Python number or a CPU
# 0-dim tensor) on either side, in place and with out=.
SCALAR_FORMS: dict[str, Callable[[torch.Tensor, object], torch.Tensor]] = {
    "x + s": lambda x, s: x + s,
    "s + x": lambda x, s: s + x,
    "x * s": lambda x, s: x * s,
    "s * x": lambda x, s: s * x,
    "x.add_(s)": lambda x, s: x.clone().add_(s),
    "x.mul_(s)": lambda x, s: x.clone().mul_(s),
    "add(x, s, out=)": lambda x, s: torch.add(x, s, out=torch.empty_like(x)),
    "mul(x, s, out=)": lambda x, s: torch.mul(x, s, out=torch.empty_like(x)),
}


@pytest.mark.parametrize("operand", ["python", "cpu 0-dim"])
@pytest.mark.parametrize("form", list(SCALAR_FORMS), ids=str)
@pytest.mark.parametrize(("dtype", "value"), UNROUNDED_SCALARS, ids=str)
def test_scalar_operand_is_not_rounded_through_float32(
    dtype: torch.dtype, value: float, form: str, operand: str
) -> None:
    # Regression: the scalar was converted through a float32 tensor, so
    # int64 + 16777217 added 16777216 and float64 + 0.1 added 0.10000000149.
    x_cpu = _edges(dtype)
    x = x_cpu.to(DEVICE)
    s = value if operand == "python" else torch.tensor(value, dtype=_scalar_dtype(value))
    fn = SCALAR_FORMS[form]
    # One add or mul of exact operands: a single IEEE operation (or integer
    # wrapping), the same on every correct kernel, so bit for bit everywhere.
    assert_matches(fn(x, s), fn(x_cpu, s), exact=True)


def _scalar_dtype(value: float) -> torch.dtype:
    return torch.int64 if isinstance(value, int) else torch.float64


@pytest.mark.parametrize("operand", ["python", "cpu 0-dim"])
@pytest.mark.parametrize(("dtype", "value"), UNROUNDED_SCALARS, ids=str)
def test_scalar_operand_with_alpha_is_not_rounded(
    dtype: torch.dtype, value: float, operand: str
) -> None:
    x_cpu = _edges(dtype)
    x = x_cpu.to(DEVICE)
    s = value if operand == "python" else torch.tensor(value, dtype=_scalar_dtype(value))
    assert_matches(torch.add(x, s, alpha=3), torch.add(x_cpu, s, alpha=3))
    assert_matches(x.clone().add_(s, alpha=-2), x_cpu.clone().add_(s, alpha=-2))


def test_int64_plus_16777217_is_exact() -> None:
    x = torch.zeros(2, dtype=torch.int64, device=DEVICE)
    assert_bitwise_equal(x + 16777217, torch.full((2,), 16777217, dtype=torch.int64))


def test_float64_plus_0_1_is_exact() -> None:
    y = torch.zeros(2, dtype=torch.float64, device=DEVICE)
    assert (y + 0.1).cpu().tolist() == [0.1, 0.1]
    assert (y + torch.tensor(0.1, dtype=torch.float64)).cpu().tolist() == [0.1, 0.1]


@pytest.mark.parametrize("form", ["x + s", "x * s", "x.mul_(s)", "add(x, s, out=)"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_scalar_beyond_float32_range_as_cpu(dtype: torch.dtype, form: str) -> None:
    # The CPU takes 1e300 as it is (float64) or converts it unchecked to its
    # compute type (inf): no overflow error, and float64 keeps the value.
    x_cpu = torch.tensor([1.0, -2.0, 0.5], dtype=dtype)
    fn = SCALAR_FORMS[form]
    for value in (1e300, -1e300):
        expected = fn(x_cpu, value)
        with expect_kernel(_kernel_of(form), dtype):
            assert_matches(fn(x_cpu.to(DEVICE), value), expected, exact=True)


# ------------------------------------------------------------ float16/bfloat16 with a scalar


def _reduced_values(dtype: torch.dtype) -> torch.Tensor:
    # ±0, tiny values a large scalar lifts into range, the dtype's extremes
    big = torch.finfo(dtype).max
    return torch.tensor(
        [-0.0, 0.0, 1e-3, -1e-3, 1.0, -2.5, 300.0, -big, big, math.inf, -math.inf, math.nan],
        dtype=dtype,
    )


# Forms of x * s for a reduced-precision x; the CPU computes them in float
# with s unrounded.
MUL_SCALAR_FORMS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "x * s": lambda x, s: x * s,
    "s * x": lambda x, s: s * x,
    "torch.mul(x, s)": lambda x, s: torch.mul(x, s),
    "x.mul_(s)": lambda x, s: x.clone().mul_(s),
    "mul(x, s, out=)": lambda x, s: torch.mul(x, s, out=torch.empty_like(x)),
    "x * cpu 0-dim float32": lambda x, s: x * torch.tensor(s, dtype=torch.float32),
    "cpu 0-dim float64 * x": lambda x, s: torch.tensor(s, dtype=torch.float64) * x,
}


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("form", list(MUL_SCALAR_FORMS), ids=str)
@pytest.mark.parametrize("scalar", [0.5, -0.5, 1e5, -1e5, 0.1, 3, 0.0, -0.0], ids=str)
@pytest.mark.parametrize("dtype", REDUCED_DTYPES, ids=str)
def test_reduced_precision_mul_by_scalar_keeps_sign_of_zero(
    dtype: torch.dtype, scalar: float, form: str, layout: str
) -> None:
    # Regression: x * s ran as 0 + s * x, and 0 + (-0.0) is +0.0.
    values = _reduced_values(dtype)
    if layout == "strided":
        x_cpu = torch.stack([values, values.flip(0)], dim=1)[:, 0]
    else:
        x_cpu = values
    x = x_cpu.to(DEVICE)
    fn = MUL_SCALAR_FORMS[form]
    expected = fn(x_cpu, scalar)
    with expect_kernel("mul", dtype):
        result = fn(x, scalar)
        assert_matches(result, expected)
        # IEEE fixes the sign of a zero product: exact on every backend
        zeros = expected == 0
        assert_bitwise_equal(result.cpu()[zeros].signbit(), expected[zeros].signbit())


@pytest.mark.parametrize("dtype", REDUCED_DTYPES, ids=str)
def test_reduced_precision_negative_zero_times_half_is_negative_zero(dtype: torch.dtype) -> None:
    x = torch.tensor([-0.0], dtype=dtype, device=DEVICE)
    for fn in (lambda t: t * 0.5, lambda t: 0.5 * t, lambda t: t.mul_(0.5)):
        with expect_kernel("mul", dtype):
            assert_bitwise_equal(fn(x), torch.tensor([-0.0], dtype=dtype))


# ------------------------------------------------------------ float16/bfloat16 add with alpha


def _reduced_operand(
    dtype: torch.dtype, n: int, layout: str, seed: int
) -> tuple[torch.Tensor, ...]:
    """A CPU operand of n elements and its infini twin, same layout."""
    if layout == "contiguous":
        return pair((n,), dtype, seed=seed)
    if layout == "strided":  # every other element: the vectorized loop cannot run
        return pair((2 * n,), dtype, seed=seed, view=lambda t: t[::2])
    # transposed 2-D, [n // 5, 5]
    return pair((5, n // 5), dtype, seed=seed, view=lambda t: t.t())


@pytest.mark.parametrize("layout", ["contiguous", "strided", "transposed"])
@pytest.mark.parametrize("n", [25, 100, 1000], ids=lambda n: f"n={n}")
@pytest.mark.parametrize("alpha", [-3.125, 0.1, 3, -1.5], ids=str)
@pytest.mark.parametrize("dtype", REDUCED_DTYPES, ids=str)
def test_reduced_precision_add_with_alpha_matches_cpu(
    dtype: torch.dtype, alpha: float, n: int, layout: str
) -> None:
    # Regression: a third of the elements were off by an ulp or more. On host
    # (the CPU's own kernels) assert_matches compares bit for bit; sizes cover
    # the vectorized body and its tail. Elsewhere the oracle is CUDA's
    # a + alpha * b rounded once (add_oracle: the CPU rounds twice).
    a_cpu, a = _reduced_operand(dtype, n, layout, seed=41)
    b_cpu, b = _reduced_operand(dtype, n, layout, seed=42)
    expected = add_oracle(torch.add(a_cpu, b_cpu, alpha=alpha), a_cpu, b_cpu, alpha)
    inplace = add_oracle(a_cpu.clone().add_(b_cpu, alpha=alpha), a_cpu, b_cpu, alpha)
    out_cpu = torch.empty_like(expected)
    torch.add(a_cpu, b_cpu, alpha=alpha, out=out_cpu)
    out_cpu = add_oracle(out_cpu, a_cpu, b_cpu, alpha)
    with expect_kernel("add", dtype):
        assert_matches(torch.add(a, b, alpha=alpha), expected)
    with expect_kernel("add", dtype):
        assert_matches(a.clone().add_(b, alpha=alpha), inplace)
    out = torch.empty_like(expected).to(DEVICE)
    with expect_kernel("add", dtype):
        torch.add(a, b, alpha=alpha, out=out)
        assert_matches(out, out_cpu)


@st.composite
def scalar_for(draw: st.DrawFn, dtype: torch.dtype) -> int | float | bool:
    """A Python scalar that keeps ``dtype`` as the result dtype: any int64 for
    integer tensors; any float (inf, nan, ±0, subnormal, 0.1) or int for floating ones."""
    ints = st.integers(-(2**63), 2**63 - 1)
    if not dtype.is_floating_point:
        return draw(st.one_of(ints, st.booleans()))
    floats = st.floats(allow_nan=True, allow_infinity=True)
    return draw(st.one_of(floats, st.sampled_from([0.1, -0.0, 1e-300, 2**24 + 1]), ints))


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from(KERNEL_DTYPES["add"]),
    form=st.sampled_from(sorted(SCALAR_FORMS)),
    zero_dim=st.booleans(),
)
def test_property_scalar_operands(
    data: st.DataObject, dtype: torch.dtype, form: str, zero_dim: bool
) -> None:
    value = data.draw(scalar_for(dtype), label="scalar")
    s: object = value
    if zero_dim:
        s = torch.tensor(value, dtype=torch.float64 if isinstance(value, float) else None)
    if dtype in REDUCED_DTYPES:
        x_cpu = _reduced_values(dtype)
    elif dtype.is_floating_point:
        x_cpu = _edges(torch.float64).to(dtype)
    else:
        x_cpu = _edges(dtype)
    x = x_cpu.to(DEVICE)
    fn = SCALAR_FORMS[form]
    try:
        expected = fn(x_cpu, s)
    except RuntimeError as err:  # the CPU refuses it: so must infini, alike
        with raises_exactly(type(err), match=re.escape(str(err).splitlines()[0][:40])):
            fn(x, s)
        return
    with expect_kernel(_kernel_of(form), dtype):
        assert_matches(fn(x, s), expected)


# ------------------------------------------------------------ out= dtypes

# Mixed operand dtypes are promoted natively (test_type_promotion.py). An out=
# tensor of another dtype than the result's is not: the kernel computes in the
# result dtype only, and the call runs in the CPU fallback.


def _operand(dtype: torch.dtype, device: str, seed: int = 30) -> torch.Tensor:
    return make_cpu((3,), dtype, seed=seed).to(device)


OUT_OF_ANOTHER_DTYPE: dict[str, Callable[[str], torch.Tensor]] = {
    "add out float64": lambda d: torch.add(
        _operand(torch.float32, d),
        _operand(torch.float32, d, 31),
        out=torch.empty(3, dtype=torch.float64, device=d),
    ),
    "mul out int32": lambda d: torch.mul(
        _operand(torch.int16, d),
        _operand(torch.int16, d, 31),
        out=torch.empty(3, dtype=torch.int32, device=d),
    ),
}


@fallback_off
@pytest.mark.parametrize("case", list(OUT_OF_ANOTHER_DTYPE), ids=str)
def test_out_of_another_dtype_refused(case: str) -> None:
    with pytest.raises(NotImplementedError, match="takes no mixed dtypes"):
        OUT_OF_ANOTHER_DTYPE[case](DEVICE)


@pytest.mark.parametrize("case", list(OUT_OF_ANOTHER_DTYPE), ids=str)
def test_out_of_another_dtype_falls_back_to_the_cpu(case: str) -> None:
    with torch_infini.cpu_fallback.allowed("silent"):
        result = OUT_OF_ANOTHER_DTYPE[case](DEVICE)
    assert_matches(result, OUT_OF_ANOTHER_DTYPE[case]("cpu"), exact=True)


def test_integer_alpha_rules_as_pytorch() -> None:
    for dev in ("cpu", DEVICE):
        a = torch.ones(3, dtype=torch.int32, device=dev)
        with pytest.raises(RuntimeError, match="alpha"):
            torch.add(a, a, alpha=0.5)
        f = torch.ones(3, device=dev)
        with pytest.raises(RuntimeError, match="alpha"):
            torch.add(f, f, alpha=True)


# ------------------------------------------------------------ devices

SAME_DEVICE = "Expected all tensors to be on the same device"
# infini's own wording, or the one PyTorch uses on CUDA
OUT_ON_CPU = f"expected out to be an infini tensor, got a tensor on cpu|{SAME_DEVICE}"


@pytest.mark.parametrize("op", ["add", "mul"])
def test_cpu_tensor_with_dims_refused(op: str) -> None:
    x = torch.ones(3, 4, device=DEVICE)
    c = torch.ones(3, 4)
    fn = getattr(torch, op)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        fn(x, c)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        fn(c, x)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        fn(x, torch.ones(1))  # one element, but not 0-dim
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        getattr(x, op + "_")(c)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        fn(torch.tensor(2.0, device=DEVICE), c)  # an infini 0-dim is no CPU scalar
    with raises_exactly(RuntimeError, match=OUT_ON_CPU):
        fn(x, x, out=torch.empty(3, 4))


@requires_two_devices
@pytest.mark.parametrize("op", ["add", "mul"])
def test_two_infini_devices_refused(op: str) -> None:
    x0 = torch.ones(3, 4, device="infini:0")
    x1 = torch.ones(3, 4, device="infini:1")
    fn = getattr(torch, op)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        fn(x0, x1)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        fn(x1, x0)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        getattr(x0, op + "_")(x1)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        fn(x0, x0, out=torch.empty(3, 4, device="infini:1"))


@requires_two_devices
@pytest.mark.parametrize("op", ["add", "add_alpha", "mul"])
def test_second_device(op: str) -> None:
    torch.infini.set_device(0)
    a_cpu, a = pair((4, 3), torch.float32, seed=13, view=_t, device="infini:1")
    b_cpu, b = pair((4,), torch.float32, seed=14, device="infini:1")
    fn = OPS[op]
    assert_matches(fn(a, b), fn(a_cpu, b_cpu), device="infini:1", check_stride=True)
    assert_matches(a * 0.5, a_cpu * 0.5, device="infini:1")
    c = a.clone()
    c.add_(b)
    assert_matches(c, a_cpu + b_cpu, device="infini:1")


# ------------------------------------------------------------ in-place and overlap


@pytest.mark.parametrize("op", ["add", "mul"])
def test_inplace_into_views(op: str) -> None:
    base_cpu, base = pair((5, 6), torch.float32, seed=15)
    y_cpu, y = pair((3,), torch.float32, seed=16)
    w_cpu, w = pair((6, 5), torch.float32, seed=17)
    method = op + "_"
    for target, t_cpu, other, o_cpu in (
        (base[1:4, 2:5], base_cpu[1:4, 2:5], y, y_cpu),  # sliced block, broadcast other
        (base[:, ::2], base_cpu[:, ::2], y, y_cpu),  # strided columns
        (base.t(), base_cpu.t(), w, w_cpu),  # transposed view, contiguous other
        (base[2], base_cpu[2], base[3], base_cpu[3]),  # row with another row of the same base
    ):
        r = getattr(target, method)(other)
        getattr(t_cpu, method)(o_cpu)
        assert r is target
    assert_matches(base, base_cpu)


def test_inplace_self_aliasing() -> None:
    x_cpu, x = pair((4, 5), torch.float32, seed=18)
    x.mul_(x)
    x_cpu.mul_(x_cpu)
    x.add_(x, alpha=2)
    x_cpu.add_(x_cpu, alpha=2)
    torch.add(x, x.t().t(), out=x)
    torch.add(x_cpu, x_cpu.t().t(), out=x_cpu)
    assert_matches(x, x_cpu)


@pytest.mark.parametrize("dev", ["cpu", DEVICE])
def test_overlap_rules_as_pytorch(dev: str) -> None:
    x = torch.ones(3, 4, device=dev)
    with pytest.raises(RuntimeError, match="single memory location"):
        x[:1].expand(3, 4).add_(x)
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.mul(x, x, out=x[:1].expand(3, 4))
    v = torch.arange(6, dtype=torch.float32).to(dev)
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.add(v[:-1], v[1:], out=v[1:])
    with pytest.raises(RuntimeError, match="broadcast"):
        torch.zeros(4, device=dev).add_(torch.ones(3, 4, device=dev))


# ------------------------------------------------------------ out=


@pytest.mark.parametrize("op", ["add", "mul"])
def test_out_wrong_shape_resized_with_warning(op: str) -> None:
    a_cpu, a = pair((3, 4), torch.float32, seed=19)
    b_cpu, b = pair((4,), torch.float32, seed=20)
    fn = getattr(torch, op)
    out = torch.empty(5, device=DEVICE)
    with pytest.warns(UserWarning, match="resized"):
        r = fn(a, b, out=out)
    assert r is out
    assert_matches(out, fn(a_cpu, b_cpu))


@pytest.mark.parametrize("op", ["add", "mul"])
def test_out_empty_resized_silently(op: str) -> None:
    a_cpu, a = pair((2, 3, 4), torch.float32, seed=21, view=_rev)
    b_cpu, b = pair((4, 3, 2), torch.float32, seed=22)
    fn = getattr(torch, op)
    out = torch.empty(0, device=DEVICE)
    out_cpu = torch.empty(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn(a, b, out=out)
    fn(a_cpu, b_cpu, out=out_cpu)
    assert_matches(out, out_cpu, check_stride=True)


@pytest.mark.parametrize("op", ["add", "mul"])
def test_out_non_contiguous_keeps_layout(op: str) -> None:
    a_cpu, a = pair((4, 5), torch.float32, seed=23)
    b_cpu, b = pair((4, 5), torch.float32, seed=24)
    base = torch.full((5, 8), 7.0, device=DEVICE)
    base_cpu = torch.full((5, 8), 7.0)
    out = base[:, ::2][:, :4].t()  # [4, 5], strided and transposed
    out_cpu = base_cpu[:, ::2][:, :4].t()
    fn = getattr(torch, op)
    assert fn(a, b, out=out) is out
    fn(a_cpu, b_cpu, out=out_cpu)
    assert out.stride() == out_cpu.stride()
    assert_matches(base, base_cpu)  # elements outside the view keep their value


def test_zero_size_results_enqueue_nothing_and_keep_shape() -> None:
    for shape_a, shape_b in (((0, 4), (4,)), ((3, 0), (1, 0)), ((0,), ())):
        a_cpu, a = pair(shape_a, torch.float32, seed=25)
        b_cpu, b = pair(shape_b, torch.float32, seed=26)
        assert_matches(a + b, a_cpu + b_cpu, check_stride=True)
        assert_matches(a * b, a_cpu * b_cpu, check_stride=True)
        c = a.clone()
        c.add_(b)
        assert c.shape == a.shape


# ------------------------------------------------------------ property tests


@st.composite
def layouts(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[tuple[int, ...], ViewFn]:
    """A base shape and a view of it with logical ``shape``: permuted and/or strided."""
    ndim = len(shape)
    perm = draw(st.permutations(range(ndim))) if ndim else []
    steps = [draw(st.sampled_from([1, 1, 2])) for _ in range(ndim)]
    offset = draw(st.booleans())
    # base dim j holds logical dim perm[j]
    base_shape = tuple(shape[perm[j]] * steps[j] + int(offset) for j in range(ndim))
    inverse = [perm.index(i) for i in range(ndim)]

    def view(t: torch.Tensor) -> torch.Tensor:
        start = int(offset)
        sliced = t[
            tuple(slice(start, start + shape[perm[j]] * steps[j], steps[j]) for j in range(ndim))
        ]
        return sliced.permute(*inverse) if ndim else sliced

    return base_shape, view


@st.composite
def broadcast_pair(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    full = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
    drop = draw(st.integers(0, len(full)))
    other = [s if draw(st.booleans()) else 1 for s in full[drop:]]
    shapes = (full, tuple(other))
    return shapes if draw(st.booleans()) else (shapes[1], shapes[0])


@settings(max_examples=25, deadline=None)
@given(
    data=st.data(),
    shapes=broadcast_pair(),
    op=st.sampled_from(sorted(OPS)),
    dtype=st.sampled_from(KERNEL_DTYPES["add"]),
)
def test_property_broadcast_layouts(
    data: st.DataObject,
    shapes: tuple[tuple[int, ...], tuple[int, ...]],
    op: str,
    dtype: torch.dtype,
) -> None:
    base_a, view_a = data.draw(layouts(shapes[0]), label="layout a")
    base_b, view_b = data.draw(layouts(shapes[1]), label="layout b")
    a_cpu = view_a(make_cpu(base_a, dtype, seed=27))
    b_cpu = view_b(make_cpu(base_b, dtype, seed=28))
    a = view_a(make_cpu(base_a, dtype, seed=27).to(DEVICE))
    b = view_b(make_cpu(base_b, dtype, seed=28).to(DEVICE))
    assert a.stride() == a_cpu.stride() and b.stride() == b_cpu.stride()
    fn = OPS[op]
    expected = _oracle(op, fn(a_cpu, b_cpu), a_cpu, b_cpu)
    with expect_kernel(_kernel_name(op), dtype):
        assert_matches(fn(a, b), expected, check_stride=True)
    # in-place where the first operand already has the broadcast shape
    if a_cpu.shape == expected.shape:
        target_cpu = a_cpu.clone()
        target = a.clone()
        assert target.stride() == target_cpu.stride()
        kwargs = _alpha_kwargs(op, dtype)
        name = _kernel_name(op) + "_"
        getattr(target_cpu, name)(b_cpu, **kwargs)
        target_cpu = _oracle(op, target_cpu, a_cpu, b_cpu)
        with expect_kernel(_kernel_name(op), dtype):
            getattr(target, name)(b, **kwargs)
            assert_matches(target, target_cpu)
