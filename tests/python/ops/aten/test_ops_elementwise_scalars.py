"""add and mul on infini with a scalar operand against the CPU oracle:
CPU scalars (0-dim CPU tensors) and Python numbers, which the CPU applies
unrounded in the operator's math type (float16 and bfloat16 included, alpha
too); test_ops_elementwise.py has the tensor operands.
"""

from __future__ import annotations

import math
import re
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
    add_oracle,
    assert_bitwise_equal,
    assert_matches,
    expect_kernel,
    pair,
    raises_exactly,
)


def _kernel_of(form: str) -> str:
    """The kernel a scalar form ("x + s", "x.mul_(s)", "x * (2**62 + 1)") runs.

    mul where the form multiplies (``*`` or ``mul``; a ``**`` in a literal is
    no product), add otherwise. expect_kernel checks the name in the refusal.
    """
    form = form.replace("**", "^")
    return "mul" if "*" in form or "mul" in form else "add"


def _t(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(-1, -2)


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
