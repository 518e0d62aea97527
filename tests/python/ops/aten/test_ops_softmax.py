"""softmax on infini (aten::_softmax and its out=: torch.softmax, F.softmax,
nn.Softmax, Tensor.softmax) against the CPU oracle: values, strides,
gradients, special values, and what the kernel refuses."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import fallback_off
from op_helpers import (
    DEVICE,
    INT_DTYPES,
    KERNEL_DTYPES,
    assert_matches,
    expect_kernel,
    identity,
    pair,
)

SoftmaxFn = Callable[[torch.Tensor, int], torch.Tensor]


def _out(x: torch.Tensor, dim: int) -> torch.Tensor:
    out = torch.empty(0, dtype=x.dtype, device=x.device)
    r = torch.ops.aten._softmax.out(x, dim, False, out=out)
    assert r is out
    return r


VARIANTS: dict[str, SoftmaxFn] = {
    "torch.softmax": lambda x, d: torch.softmax(x, d),
    "F.softmax": lambda x, d: F.softmax(x, dim=d),
    "Tensor.softmax": lambda x, d: x.softmax(d),
    "nn.Softmax": lambda x, d: torch.nn.Softmax(dim=d)(x),
    "_softmax.out": _out,
}


@pytest.mark.parametrize("dtype", KERNEL_DTYPES["_softmax"], ids=str)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variants_and_dtypes(variant: str, dtype: torch.dtype) -> None:
    x_cpu, x = pair((4, 6, 5), dtype, seed=1)
    fn = VARIANTS[variant]
    for dim in (0, 1, -1):
        with expect_kernel("_softmax", dtype):
            assert_matches(fn(x, dim), fn(x_cpu, dim), check_stride=True)
    assert_matches(x, x_cpu, exact=True)  # the input untouched


def _t(t: torch.Tensor) -> torch.Tensor:
    return t.t()


def _step(t: torch.Tensor) -> torch.Tensor:
    return t[1:, ::3]


def _expand(t: torch.Tensor) -> torch.Tensor:
    return t[:, :1].expand(t.shape[0], 6)


LAYOUTS = {
    "contiguous": ((4, 6), identity),
    "transposed": ((6, 4), _t),
    "strided slice": ((5, 12), _step),
    "expanded": ((4, 6), _expand),
    "1 element": ((1, 1), identity),
    "0-size rows": ((0, 5), identity),
    "0-size softmax dim": ((3, 0), identity),
}


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=str)
def test_layouts_give_the_cpu_result_and_strides(layout: str) -> None:
    shape, view = LAYOUTS[layout]
    x_cpu, x = pair(shape, torch.float32, seed=2, view=view)
    for dim in (0, 1):
        with expect_kernel("_softmax", torch.float32):
            assert_matches(torch.softmax(x, dim), torch.softmax(x_cpu, dim), check_stride=True)


def test_special_values_as_on_the_cpu() -> None:
    inf, nan = float("inf"), float("nan")
    rows = torch.tensor(
        [
            [0.0, 1.0, 2.0, 3.0],
            [-inf, 0.0, 1.0, -inf],  # masked entries: exactly 0
            [-inf, -inf, -inf, -inf],  # a fully masked row: NaN
            [inf, 0.0, 1.0, 2.0],
            [nan, 0.0, 1.0, 2.0],
            [1e4, -1e4, 0.0, 1e4],  # no overflow: the row's max is subtracted
        ]
    )
    with expect_kernel("_softmax", torch.float32):
        assert_matches(torch.softmax(rows.to(DEVICE), -1), torch.softmax(rows, -1))


def test_softmax_with_a_dtype_converts_first_as_on_the_cpu() -> None:
    x_cpu, x = pair((3, 5), torch.bfloat16, seed=3)
    with expect_kernel("_softmax", torch.float32):
        got = torch.softmax(x, -1, dtype=torch.float32)
        assert got.dtype == torch.float32
        assert_matches(got, torch.softmax(x_cpu, -1, dtype=torch.float32))


def test_out_is_resized_and_may_be_strided() -> None:
    x_cpu, x = pair((4, 5), torch.float32, seed=4)
    with expect_kernel("_softmax", torch.float32):
        out = torch.empty(7, device=DEVICE)
        assert torch.ops.aten._softmax.out(x, 1, False, out=out) is out
        assert_matches(out, torch.softmax(x_cpu, 1), check_stride=True)
        base = torch.full((5, 9), 3.0, device=DEVICE)
        base_cpu = torch.full((5, 9), 3.0)
        torch.ops.aten._softmax.out(x, 0, False, out=base[:, 1::2].t())
        torch.ops.aten._softmax.out(x_cpu, 0, False, out=base_cpu[:, 1::2].t())
        assert_matches(base, base_cpu)


def test_out_that_is_the_input_gives_the_softmax() -> None:
    x_cpu, x = pair((4, 5), torch.float32, seed=5)
    with expect_kernel("_softmax", torch.float32):
        torch.ops.aten._softmax.out(x, 1, False, out=x)
        torch.ops.aten._softmax.out(x_cpu, 1, False, out=x_cpu)
        assert_matches(x, x_cpu)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gradients_match_the_cpu(dim: int) -> None:
    x_cpu, x = pair((4, 6), torch.float32, seed=6)
    leaf_cpu, leaf = x_cpu.clone().requires_grad_(), x.clone().requires_grad_()
    weights = torch.randn(4, 6, generator=torch.Generator().manual_seed(7))
    (torch.softmax(leaf_cpu, dim) * weights).sum().backward()
    # The backward (_softmax_backward_data) has no infini kernel: the fallback.
    with torch_infini.cpu_fallback.allowed("silent"):
        (torch.softmax(leaf, dim) * weights.to(DEVICE)).sum().backward()
    assert leaf.grad is not None
    assert_matches(leaf.grad, leaf_cpu.grad)


def test_a_dim_out_of_range_raises_as_on_the_cpu() -> None:
    x_cpu, x = pair((3, 4), torch.float32)
    with pytest.raises(IndexError) as cpu_error:
        torch.softmax(x_cpu, 2)
    with pytest.raises(IndexError, match=str(cpu_error.value).split(" (")[0]):
        torch.softmax(x, 2)


# Refused by the kernel: float64 (InfiniOps computes in float), integer and
# complex dtypes (no softmax kernel), 0-dim inputs (the kernel takes at least
# one dimension). With the fallback on they run there and match the CPU.
REFUSED = [torch.float64, torch.complex64]


@fallback_off
@pytest.mark.parametrize("dtype", REFUSED, ids=str)
def test_refused_dtypes_raise_naming_the_operator_and_dtype(dtype: torch.dtype) -> None:
    assert dtype not in KERNEL_DTYPES["_softmax"]
    _, x = pair((3, 4), dtype)
    with pytest.raises(NotImplementedError, match="_softmax"):
        torch.softmax(x, -1)


@fallback_off
def test_a_0_dim_input_is_refused_by_the_kernel() -> None:
    x = torch.tensor(2.5, device=DEVICE)
    with pytest.raises(NotImplementedError, match="_softmax: 0-dim inputs are not supported"):
        torch.softmax(x, 0)


@pytest.mark.parametrize("dtype", [torch.float64, *INT_DTYPES[:1]], ids=str)
def test_what_the_kernel_refuses_runs_in_the_fallback_as_on_the_cpu(dtype: torch.dtype) -> None:
    x_cpu, x = pair((3, 4), dtype, seed=8)
    with torch_infini.cpu_fallback.allowed("silent"):
        try:
            want = torch.softmax(x_cpu, -1)
        except RuntimeError as cpu_error:
            with pytest.raises(RuntimeError, match=str(cpu_error).split("\n")[0]):
                torch.softmax(x, -1)
            return
        assert_matches(torch.softmax(x, -1), want, exact=True)
        scalar = torch.tensor(2.5)
        assert_matches(torch.softmax(scalar.to(DEVICE), 0), torch.softmax(scalar, 0))
