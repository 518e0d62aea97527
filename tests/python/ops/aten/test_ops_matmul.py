"""mm, bmm and addmm (and their out= variants) on infini against the CPU oracle."""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from hypothesis import given, settings
from hypothesis import strategies as st
from infini_testing import fallback_off
from op_helpers import (
    DEVICE,
    ViewFn,
    assert_matches,
    expect_kernel,
    identity,
    kernel_dtypes,
    make_cpu,
    pair,
    raises_exactly,
    requires_two_devices,
    runs_cpu_kernels,
)

# mm and bmm on host run the CPU's own BLAS call: bit for bit (assert_matches).
# Elsewhere (InfiniOps) another kernel sums the k products of N(0, 16) values in
# another order: a few ulps of sum |a * b|, above assert_close's float32 defaults.
GEMM_TOL: dict[str, float] = {} if runs_cpu_kernels() else {"rtol": 1e-4, "atol": 1e-3}
# addmm with a bias (beta != 0): on host the CPU's single BLAS call
# (beta * C + alpha * A @ B, C holding the bias), bit for bit; InfiniOps' Gemm
# takes no C, so there Gemm then Add(beta * bias): two roundings.
ADDMM_TOL: dict[str, object] = GEMM_TOL if runs_cpu_kernels() else {"rtol": 1e-4, "atol": 1e-3}
F32 = torch.float32


def _t(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(-1, -2)


def operand(
    rows: int, cols: int, transposed: bool, seed: int, batch: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A [.., rows, cols] float32 operand, column-major when ``transposed``."""
    lead = () if batch is None else (batch,)
    if transposed:
        return pair((*lead, cols, rows), F32, seed=seed, view=_t)
    return pair((*lead, rows, cols), F32, seed=seed)


# ------------------------------------------------------------ mm

MM_VARIANTS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "torch.mm": torch.mm,
    "Tensor.mm": torch.Tensor.mm,
    "@": lambda a, b: a @ b,
    "torch.matmul": torch.matmul,
    "mm.out": lambda a, b: torch.mm(a, b, out=torch.empty(0, dtype=a.dtype, device=a.device)),
}


@pytest.mark.parametrize("variant", list(MM_VARIANTS), ids=str)
@pytest.mark.parametrize("ta", [False, True], ids=["a", "aT"])
@pytest.mark.parametrize("tb", [False, True], ids=["b", "bT"])
def test_mm_transposed_operands(variant: str, ta: bool, tb: bool) -> None:
    a_cpu, a = operand(7, 5, ta, seed=1)
    b_cpu, b = operand(5, 6, tb, seed=2)
    fn = MM_VARIANTS[variant]
    assert_matches(fn(a, b), fn(a_cpu, b_cpu), check_stride=True, **GEMM_TOL)


def _cols_step(t: torch.Tensor) -> torch.Tensor:
    return t[:, ::2]


def _rows_step(t: torch.Tensor) -> torch.Tensor:
    return t[::3]


def _inner_block(t: torch.Tensor) -> torch.Tensor:
    return t[1:-1, 2:-1]


def _expand(t: torch.Tensor) -> torch.Tensor:
    return t[:1].expand(t.shape[0], t.shape[1])


def _inner_block_t(t: torch.Tensor) -> torch.Tensor:
    return t[2:-1, 1:-1].t()


STRIDED: dict[str, tuple[tuple[int, int], ViewFn]] = {
    # base shape, view giving a [6, 5] operand
    "every 2nd column": ((6, 10), _cols_step),
    "every 3rd row": ((18, 5), _rows_step),
    "inner block (row stride > cols)": ((8, 8), _inner_block),
    "inner block transposed": ((8, 8), _inner_block_t),
    "expanded rows (stride 0)": ((6, 5), _expand),
}


@pytest.mark.parametrize("which", ["first", "second"])
@pytest.mark.parametrize("layout", list(STRIDED), ids=str)
def test_mm_strided_operands(layout: str, which: str) -> None:
    shape, view = STRIDED[layout]
    s_cpu, s = pair(shape, F32, seed=3, view=view)
    assert s.shape == (6, 5)
    if which == "first":
        o_cpu, o = pair((5, 4), F32, seed=4)
        result, expected = torch.mm(s, o), torch.mm(s_cpu, o_cpu)
    else:
        o_cpu, o = pair((3, 6), F32, seed=4)
        result, expected = torch.mm(o, s), torch.mm(o_cpu, s_cpu)
    assert_matches(result, expected, check_stride=True, **GEMM_TOL)
    assert_matches(s, s_cpu, exact=True)


@pytest.mark.parametrize(("m", "k", "n"), [(4, 0, 3), (0, 5, 3), (4, 5, 0), (0, 0, 0), (1, 1, 1)])
def test_mm_empty_and_tiny(m: int, k: int, n: int) -> None:
    a_cpu, a = pair((m, k), F32, seed=5)
    b_cpu, b = pair((k, n), F32, seed=6)
    assert_matches(torch.mm(a, b), torch.mm(a_cpu, b_cpu), check_stride=True, **GEMM_TOL)
    # k = 0 writes zeros into memory that held something else
    out = torch.full((m, n), float("nan"), device=DEVICE)
    torch.mm(a, b, out=out)
    assert_matches(out, torch.mm(a_cpu, b_cpu), **GEMM_TOL)


def test_mm_out_resized_and_non_contiguous() -> None:
    a_cpu, a = pair((4, 3), F32, seed=7)
    b_cpu, b = pair((3, 5), F32, seed=8)
    expected = torch.mm(a_cpu, b_cpu)
    out = torch.empty(7, device=DEVICE)
    with pytest.warns(UserWarning, match="resized"):
        assert torch.mm(a, b, out=out) is out
    assert_matches(out, expected, **GEMM_TOL)
    base = torch.full((5, 9), -1.0, device=DEVICE)
    base_cpu = torch.full((5, 9), -1.0)
    out = base[:, 1::2].t()  # [4, 5], neither row- nor column-major dense
    out_cpu = base_cpu[:, 1::2].t()
    assert torch.mm(a, b, out=out) is out
    torch.mm(a_cpu, b_cpu, out=out_cpu)
    assert out.stride() == out_cpu.stride()
    assert_matches(base, base_cpu, **GEMM_TOL)


# ------------------------------------------------------------ bmm


def _batch_inner(t: torch.Tensor) -> torch.Tensor:
    # [k, b, m] stored, used as [b, m, k]: the batch stride is not the largest
    return t.permute(1, 2, 0)


@pytest.mark.parametrize("ta", [False, True], ids=["a", "aT"])
@pytest.mark.parametrize("tb", [False, True], ids=["b", "bT"])
@pytest.mark.parametrize("out", [False, True], ids=["bmm", "bmm.out"])
def test_bmm_transposed_operands(ta: bool, tb: bool, out: bool) -> None:
    a_cpu, a = operand(4, 6, ta, seed=9, batch=3)
    b_cpu, b = operand(6, 5, tb, seed=10, batch=3)
    expected = torch.bmm(a_cpu, b_cpu)
    if out:
        result = torch.empty(3, 4, 5, device=DEVICE)
        assert torch.bmm(a, b, out=result) is result
    else:
        result = torch.bmm(a, b)
        assert_matches(a @ b, expected, check_stride=True, **GEMM_TOL)
        assert_matches(torch.matmul(a, b), expected, **GEMM_TOL)
    assert_matches(result, expected, check_stride=True, **GEMM_TOL)


def test_bmm_batch_not_outermost_and_strided() -> None:
    a_cpu, a = pair((6, 3, 4), F32, seed=11, view=_batch_inner)  # [3, 4, 6]
    b_cpu, b = pair((3, 6, 10), F32, seed=12, view=lambda t: t[..., ::2])  # [3, 6, 5]
    assert_matches(torch.bmm(a, b), torch.bmm(a_cpu, b_cpu), check_stride=True, **GEMM_TOL)
    # one matrix broadcast over the batch (batch stride 0)
    w_cpu, w = pair((6, 5), F32, seed=41, view=lambda t: t[None].expand(3, 6, 5))
    assert_matches(torch.bmm(a, w), torch.bmm(a_cpu, w_cpu), check_stride=True, **GEMM_TOL)


@pytest.mark.parametrize(
    ("bs", "m", "k", "n"), [(0, 2, 3, 4), (2, 0, 3, 4), (2, 3, 0, 4), (2, 3, 4, 0)]
)
def test_bmm_empty(bs: int, m: int, k: int, n: int) -> None:
    a_cpu, a = pair((bs, m, k), F32, seed=13)
    b_cpu, b = pair((bs, k, n), F32, seed=14)
    assert_matches(torch.bmm(a, b), torch.bmm(a_cpu, b_cpu), check_stride=True, **GEMM_TOL)


def test_matmul_3d_by_2d_folds_to_mm() -> None:
    x_cpu, x = pair((2, 3, 4), F32, seed=15)
    w_cpu, w = pair((5, 4), F32, seed=16)
    assert_matches(x @ w.t(), x_cpu @ w_cpu.t(), **GEMM_TOL)


# ------------------------------------------------------------ addmm

BIAS_SHAPES: dict[str, tuple[tuple[int, ...], ViewFn]] = {
    "[n]": ((6,), identity),
    "[1, n]": ((1, 6), identity),
    "[m, 1]": ((4, 1), identity),
    "[m, n]": ((4, 6), identity),
    "[m, n] transposed": ((6, 4), _t),
    "0-dim": ((), identity),
    "[n] strided": ((12,), lambda t: t[::2]),
}

ALPHA_BETA: list[tuple[float | int, float | int]] = [
    (1, 1),
    (0.5, 2.0),
    (-1.0, -0.25),
    (2, 0),
    (0, 1.5),
    (3, 2),
]


@pytest.mark.parametrize(("alpha", "beta"), ALPHA_BETA, ids=str)
@pytest.mark.parametrize("bias", list(BIAS_SHAPES), ids=str)
def test_addmm_bias_broadcast_and_scalars(bias: str, alpha: float, beta: float) -> None:
    shape, view = BIAS_SHAPES[bias]
    c_cpu, c = pair(shape, F32, seed=17, view=view)
    a_cpu, a = operand(4, 5, True, seed=18)
    b_cpu, b = operand(5, 6, False, seed=19)
    expected = torch.addmm(c_cpu, a_cpu, b_cpu, beta=beta, alpha=alpha)
    assert_matches(
        torch.addmm(c, a, b, beta=beta, alpha=alpha), expected, check_stride=True, **ADDMM_TOL
    )
    out = torch.empty(4, 6, device=DEVICE)
    assert torch.addmm(c, a, b, beta=beta, alpha=alpha, out=out) is out
    assert_matches(out, expected, **ADDMM_TOL)
    assert_matches(c, c_cpu, exact=True)  # the bias is only read


@pytest.mark.parametrize("bias", ["[n]", "[m, n]", "0-dim"])
def test_addmm_beta_zero_ignores_nan_bias(bias: str) -> None:
    shape = BIAS_SHAPES[bias][0]
    c = torch.full(shape, float("nan"), device=DEVICE)
    c_cpu = torch.full(shape, float("nan"))
    a_cpu, a = pair((4, 5), F32, seed=20)
    b_cpu, b = pair((5, 6), F32, seed=21)
    expected = torch.addmm(c_cpu, a_cpu, b_cpu, beta=0, alpha=1.5)
    assert not expected.isnan().any()
    result = torch.addmm(c, a, b, beta=0, alpha=1.5)
    assert_matches(result, expected, **GEMM_TOL)
    assert not result.cpu().isnan().any()


@pytest.mark.parametrize("transposed_bias", [False, True], ids=["bias", "biasT"])
def test_addmm_out_aliases_bias(transposed_bias: bool) -> None:
    view = _t if transposed_bias else identity
    shape = (6, 4) if transposed_bias else (4, 6)
    c_cpu, c = pair(shape, F32, seed=22, view=view)
    a_cpu, a = operand(4, 5, False, seed=23)
    b_cpu, b = operand(5, 6, True, seed=24)
    # The oracle is the same call: an out= of c's layout is computed in that layout.
    expected = c_cpu.clone()
    torch.addmm(c_cpu, a_cpu, b_cpu, beta=0.5, alpha=2.0, out=expected)
    assert torch.addmm(c, a, b, beta=0.5, alpha=2.0, out=c) is c
    assert_matches(c, expected, **ADDMM_TOL)
    # in-place spelling
    d_cpu, d = pair(shape, F32, seed=25, view=view)
    d.addmm_(a, b)
    d_cpu.addmm_(a_cpu, b_cpu)
    assert_matches(d, d_cpu, **ADDMM_TOL)


def test_addmm_empty() -> None:
    for m, k, n in ((4, 0, 3), (0, 5, 3), (4, 5, 0)):
        c_cpu, c = pair((n,), F32, seed=26)
        a_cpu, a = pair((m, k), F32, seed=27)
        b_cpu, b = pair((k, n), F32, seed=28)
        expected = torch.addmm(c_cpu, a_cpu, b_cpu, beta=2, alpha=3)
        assert_matches(torch.addmm(c, a, b, beta=2, alpha=3), expected, **ADDMM_TOL)


def test_addmm_out_resized() -> None:
    c_cpu, c = pair((6,), F32, seed=29)
    a_cpu, a = pair((4, 5), F32, seed=30)
    b_cpu, b = pair((5, 6), F32, seed=31)
    out = torch.empty(3, device=DEVICE)
    with pytest.warns(UserWarning, match="resized"):
        torch.addmm(c, a, b, out=out)
    assert_matches(out, torch.addmm(c_cpu, a_cpu, b_cpu), **ADDMM_TOL)
    out = torch.empty(0, device=DEVICE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.addmm(c, a, b, out=out)
    assert_matches(out, torch.addmm(c_cpu, a_cpu, b_cpu), check_stride=True, **ADDMM_TOL)


def test_linear_is_addmm_with_transposed_weight() -> None:
    x_cpu, x = pair((3, 5), F32, seed=32)
    w_cpu, w = pair((4, 5), F32, seed=33)
    c_cpu, c = pair((4,), F32, seed=34)
    assert_matches(F.linear(x, w, c), F.linear(x_cpu, w_cpu, c_cpu), **ADDMM_TOL)
    assert_matches(F.linear(x, w), F.linear(x_cpu, w_cpu), **GEMM_TOL)


# ------------------------------------------------------------ refusals

# Every float dtype and one integer one: each is native where the backend
# declares it (kernel_dtypes), else refused with the fallback off and the
# CPU's result with it on.
MATMUL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32)
# Reduced-precision products off host: InfiniOps sums in float and rounds once,
# the CPU's BLAS in another order: a few ulps of the dtype.
REDUCED_TOL = {"rtol": 1.6e-2, "atol": 1e-2}


def _matmul_calls(
    dtype: torch.dtype, device: str = DEVICE
) -> dict[str, Callable[[], torch.Tensor]]:
    seeds = iter(range(100))

    def t(*shape: int) -> torch.Tensor:
        return make_cpu(shape, dtype, seed=next(seeds)).to(device)

    return {
        "mm": lambda: torch.mm(t(2, 3), t(3, 4)),
        "mm.out": lambda: torch.mm(t(2, 3), t(3, 4), out=t(2, 4)),
        "bmm": lambda: torch.bmm(t(2, 2, 3), t(2, 3, 4)),
        "bmm.out": lambda: torch.bmm(t(2, 2, 3), t(2, 3, 4), out=t(2, 2, 4)),
        "addmm": lambda: torch.addmm(t(4), t(2, 3), t(3, 4)),
        "addmm.out": lambda: torch.addmm(t(4), t(2, 3), t(3, 4), out=t(2, 4)),
        "matmul": lambda: t(2, 3) @ t(3, 4),
    }


@pytest.mark.parametrize("dtype", MATMUL_DTYPES, ids=str)
@pytest.mark.parametrize("call", list(_matmul_calls(torch.float64)), ids=str)
def test_every_dtype_native_or_refused(call: str, dtype: torch.dtype) -> None:
    with expect_kernel("mm", dtype):
        result = _matmul_calls(dtype)[call]()
        expected = _matmul_calls(dtype, "cpu")[call]()
        tol = REDUCED_TOL if dtype in (torch.float16, torch.bfloat16) else GEMM_TOL
        assert_matches(result, expected, **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("ta", [False, True], ids=["a", "aT"])
@pytest.mark.parametrize("tb", [False, True], ids=["b", "bT"])
def test_reduced_precision_transposed_operands_and_bias(
    dtype: torch.dtype, ta: bool, tb: bool
) -> None:
    """Half-precision products of strided operands, with a broadcast bias
    (nn.Linear in float16/bfloat16), where the backend declares them."""
    view = _t if ta else identity
    a_cpu, a = pair((9, 16) if ta else (16, 9), dtype, seed=50, view=view)
    b_cpu, b = pair((7, 9) if tb else (9, 7), dtype, seed=51, view=_t if tb else identity)
    c_cpu, c = pair((7,), dtype, seed=52)
    with expect_kernel("mm", dtype):
        assert_matches(a @ b, a_cpu @ b_cpu, **REDUCED_TOL)
        assert_matches(
            torch.addmm(c, a, b, beta=0.5, alpha=2),
            torch.addmm(c_cpu, a_cpu, b_cpu, beta=0.5, alpha=2),
            **REDUCED_TOL,
        )
        batch_cpu, batch = pair((3, 16, 9), dtype, seed=53)
        assert_matches(batch @ b, batch_cpu @ b_cpu, **REDUCED_TOL)


@pytest.mark.parametrize("dtype", MATMUL_DTYPES, ids=str)
@pytest.mark.parametrize("call", list(_matmul_calls(torch.float64)), ids=str)
def test_dtypes_fall_back_to_the_cpu(call: str, dtype: torch.dtype) -> None:
    if dtype in kernel_dtypes("mm"):
        return  # native: test_every_dtype_native_or_refused
    expected = _matmul_calls(dtype, "cpu")[call]()
    with torch_infini.cpu_fallback.allowed("silent"):
        result = _matmul_calls(dtype)[call]()
    assert_matches(result, expected, exact=True, check_stride=True)


def _addmm_float64_bias(device: str) -> torch.Tensor:
    a = make_cpu((2, 3), F32, seed=42).to(device)
    b = make_cpu((3, 4), F32, seed=43).to(device)
    return torch.addmm(make_cpu((4,), torch.float64, seed=44).to(device), a, b)


@fallback_off
def test_addmm_bias_dtype_refused() -> None:
    with pytest.raises(NotImplementedError, match="addmm: .*takes no mixed dtypes"):
        _addmm_float64_bias(DEVICE)


def test_addmm_bias_dtype_falls_back_to_the_cpu() -> None:
    # the CPU refuses it too (a RuntimeError): the fallback raises the CPU's error
    with raises_exactly(RuntimeError, match="must have the same dtype") as cpu_error:
        _addmm_float64_bias("cpu")
    with torch_infini.cpu_fallback.allowed("silent"):
        with raises_exactly(RuntimeError, match=re.escape(str(cpu_error.value))):
            _addmm_float64_bias(DEVICE)


# (call on a device, fragment of the message): the CPU's wording or infini's,
# where they differ; the type is exactly RuntimeError on both.
SHAPE_ERRORS: dict[str, tuple[Callable[[str], torch.Tensor], str]] = {
    "mm inner mismatch": (
        lambda d: torch.mm(torch.ones(2, 3, device=d), torch.ones(4, 5, device=d)),
        r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)",
    ),
    "mm 1-D operand": (
        lambda d: torch.mm(torch.ones(3, device=d), torch.ones(3, 5, device=d)),
        r"self must be a matrix|expected a 2-D tensor for the first operand, got 1-D",
    ),
    "mm 3-D operand": (
        lambda d: torch.mm(torch.ones(2, 2, 3, device=d), torch.ones(3, 5, device=d)),
        r"self must be a matrix|expected a 2-D tensor for the first operand, got 3-D",
    ),
    "mm.out inner mismatch": (
        lambda d: torch.mm(
            torch.ones(2, 3, device=d), torch.ones(2, 3, device=d), out=torch.empty(2, 3, device=d)
        ),
        r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 2x3\)",
    ),
    "bmm batch mismatch": (
        lambda d: torch.bmm(torch.ones(2, 2, 3, device=d), torch.ones(3, 3, 4, device=d)),
        r"Expected size for first two dimensions of batch2 tensor to be: \[2, 3\] but got: "
        r"\[3, 3\]|batch1 and batch2 must have the same number of batches, got 2 and 3",
    ),
    "bmm inner mismatch": (
        lambda d: torch.bmm(torch.ones(2, 2, 3, device=d), torch.ones(2, 4, 4, device=d)),
        r"Expected size for first two dimensions of batch2 tensor to be: \[2, 3\] but got: "
        r"\[2, 4\]|mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x4\)",
    ),
    "bmm 2-D operand": (
        lambda d: torch.bmm(torch.ones(2, 3, device=d), torch.ones(3, 4, device=d)),
        r"batch1 must be a 3D tensor|expected a 3-D tensor for the first operand, got 2-D",
    ),
    "addmm inner mismatch": (
        lambda d: torch.addmm(
            torch.ones(4, device=d), torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)
        ),
        r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 2x4\)",
    ),
    "addmm bias not broadcastable": (
        lambda d: torch.addmm(
            torch.ones(3, device=d), torch.ones(2, 3, device=d), torch.ones(3, 4, device=d)
        ),
        r"The expanded size of the tensor \(4\) must match the existing size \(3\)"
        r"|self of shape \[3\] cannot be broadcast to the product shape \[2, 4\]",
    ),
    "addmm bias too many dims": (
        lambda d: torch.addmm(
            torch.ones(1, 2, 4, device=d), torch.ones(2, 3, device=d), torch.ones(3, 4, device=d)
        ),
        r"the number of sizes provided \(2\) must be greater or equal to the number of "
        r"dimensions|self of shape \[1, 2, 4\] cannot be broadcast to the product shape",
    ),
    "mm operand dtypes differ": (
        lambda d: torch.mm(
            torch.ones(2, 3, device=d), torch.ones(3, 4, dtype=torch.float64, device=d)
        ),
        r"(?i)expected m1 and m2 to have the same dtype, but got: float != double",
    ),
}


@pytest.mark.parametrize("case", list(SHAPE_ERRORS), ids=str)
def test_shape_errors(case: str) -> None:
    call, message = SHAPE_ERRORS[case]
    with raises_exactly(RuntimeError, match=message):
        call("cpu")  # the oracle refuses it too
    with raises_exactly(RuntimeError, match=message):
        call(DEVICE)


def test_cpu_operand_refused() -> None:
    x = torch.ones(2, 3, device=DEVICE)
    # infini's own wording, or the one PyTorch uses on CUDA
    same = "Expected all tensors to be on the same device"
    with raises_exactly(
        RuntimeError, match=f"mm: expected the second operand to be an infini tensor|{same}"
    ):
        torch.mm(x, torch.ones(3, 4))
    with raises_exactly(
        RuntimeError, match=f"mm: expected the first operand to be an infini tensor|{same}"
    ):
        torch.mm(torch.ones(4, 2), x)
    with raises_exactly(RuntimeError, match=f"addmm: expected self to be an infini tensor|{same}"):
        torch.addmm(torch.ones(4), x, torch.ones(3, 4, device=DEVICE))


@requires_two_devices
def test_second_device() -> None:
    torch.infini.set_device(0)
    dev = "infini:1"
    a_cpu, a = pair((5, 4), F32, seed=35, view=_t, device=dev)
    b_cpu, b = pair((5, 6), F32, seed=36, device=dev)
    c_cpu, c = pair((6,), F32, seed=37, device=dev)
    assert_matches(torch.mm(a, b), torch.mm(a_cpu, b_cpu), device=dev, **GEMM_TOL)
    assert_matches(
        torch.addmm(c, a, b, beta=0.5),
        torch.addmm(c_cpu, a_cpu, b_cpu, beta=0.5),
        device=dev,
        **ADDMM_TOL,
    )
    assert_matches(
        torch.bmm(a[None], b[None]), torch.bmm(a_cpu[None], b_cpu[None]), device=dev, **GEMM_TOL
    )
    same = "Expected all tensors to be on the same device"
    with pytest.raises(RuntimeError, match=same):
        torch.mm(a, b.to("infini:0"))
    with pytest.raises(RuntimeError, match=same):
        torch.addmm(c.to("infini:0"), a, b)
    with pytest.raises(RuntimeError, match=same):
        torch.mm(a, b, out=torch.empty(4, 6, device="infini:0"))
    with pytest.raises(RuntimeError, match=same):
        torch.bmm(a[None], b[None].to("infini:0"))


# ------------------------------------------------------------ property test


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(0, 17),
    n=st.integers(0, 17),
    k=st.integers(0, 17),
    ta=st.booleans(),
    tb=st.booleans(),
    op=st.sampled_from(["mm", "mm.out", "addmm", "addmm.out", "bmm"]),
    bias=st.sampled_from(["[n]", "[1, n]", "[m, 1]", "[m, n]", "0-dim"]),
    beta=st.sampled_from([0.0, 1.0, -0.5]),
    alpha=st.sampled_from([1.0, 0.25, -2.0]),
    batch=st.integers(0, 3),
)
def test_property_gemm(
    m: int,
    n: int,
    k: int,
    ta: bool,
    tb: bool,
    op: str,
    bias: str,
    beta: float,
    alpha: float,
    batch: int,
) -> None:
    lead = batch if op == "bmm" else None
    a_cpu, a = operand(m, k, ta, seed=38, batch=lead)
    b_cpu, b = operand(k, n, tb, seed=39, batch=lead)
    if op == "bmm":
        expected = torch.bmm(a_cpu, b_cpu)
        assert_matches(torch.bmm(a, b), expected, check_stride=True, **GEMM_TOL)
        return
    if op.startswith("mm"):
        expected = torch.mm(a_cpu, b_cpu)
        if op == "mm":
            result = torch.mm(a, b)
        else:
            result = torch.full((m, n), math.nan, device=DEVICE)
            torch.mm(a, b, out=result)
        assert_matches(result, expected, check_stride=True, **GEMM_TOL)
        return
    shape = {"[n]": (n,), "[1, n]": (1, n), "[m, 1]": (m, 1), "[m, n]": (m, n), "0-dim": ()}[bias]
    c_cpu, c = pair(shape, F32, seed=40)
    expected = torch.addmm(c_cpu, a_cpu, b_cpu, beta=beta, alpha=alpha)
    if op == "addmm":
        result = torch.addmm(c, a, b, beta=beta, alpha=alpha)
    else:
        result = torch.full((m, n), math.nan, device=DEVICE)
        torch.addmm(c, a, b, beta=beta, alpha=alpha, out=result)
    assert_matches(result, expected, check_stride=True, **(ADDMM_TOL if beta else GEMM_TOL))


def test_the_provider_says_which_gemms_lose_precision() -> None:
    """gemm_reduced_precision (what the tests' tolerances read) is what the
    gemm kernel does, for each dtype it has: where it says None a product at
    PyTorch's default precision runs natively; where it names a loss the
    product is refused with that reason."""
    reduced_ones = [
        d
        for d in torch_infini.supported_dtypes("mm")
        if torch_infini._operators.gemm_reduced_precision(d) is not None
    ]
    dtypes = [*kernel_dtypes("mm"), *reduced_ones]  # the refused ones are not kernel_dtypes
    assert dtypes, "no mm kernel on this backend"
    for dtype in dtypes:
        reduced = torch_infini._operators.gemm_reduced_precision(dtype)
        a_cpu, a = pair((3, 3), dtype, seed=60)
        with torch_infini.cpu_fallback.strict():
            if reduced is None:
                tol = REDUCED_TOL if dtype in (torch.float16, torch.bfloat16) else GEMM_TOL
                assert_matches(a @ a, a_cpu @ a_cpu, **tol)
            else:
                with pytest.raises(NotImplementedError, match=re.escape(reduced)):
                    a @ a
