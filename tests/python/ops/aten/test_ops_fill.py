"""fill_ and zero_ on infini (and the factories built on them) against the CPU oracle."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from op_helpers import (
    DEVICE,
    FLOAT_DTYPES,
    INT_DTYPES,
    ViewFn,
    assert_matches,
    pair,
    requires_two_devices,
)

# fill_ and zero_ work for every dtype below (with or without a fill kernel).
FILL_DTYPES = FLOAT_DTYPES + INT_DTYPES + (torch.bool, torch.complex64)


def fill_value(dtype: torch.dtype) -> bool | int | float | complex:
    """A value every dtype holds exactly and that differs from 0 and 1."""
    if dtype == torch.bool:
        return True
    if dtype.is_complex:
        return 1.5 - 2j
    if dtype.is_floating_point:
        return -2.5
    if dtype == torch.uint8:
        return 200
    return -7


FACTORIES: dict[str, Callable[[tuple[int, ...], torch.dtype, str], torch.Tensor]] = {
    "zeros": lambda s, dt, dev: torch.zeros(s, dtype=dt, device=dev),
    "ones": lambda s, dt, dev: torch.ones(s, dtype=dt, device=dev),
    "full": lambda s, dt, dev: torch.full(s, fill_value(dt), dtype=dt, device=dev),
    "zeros_like": lambda s, dt, dev: torch.zeros_like(torch.empty(s, dtype=dt, device=dev)),
    "ones_like": lambda s, dt, dev: torch.ones_like(torch.empty(s, dtype=dt, device=dev)),
    "full_like": lambda s, dt, dev: torch.full_like(
        torch.empty(s, dtype=dt, device=dev), fill_value(dt)
    ),
    "new_zeros": lambda s, dt, dev: torch.empty(1, dtype=dt, device=dev).new_zeros(s),
    "new_ones": lambda s, dt, dev: torch.empty(1, dtype=dt, device=dev).new_ones(s),
    "new_full": lambda s, dt, dev: torch.empty(1, dtype=dt, device=dev).new_full(s, fill_value(dt)),
    "empty().fill_": lambda s, dt, dev: torch.empty(s, dtype=dt, device=dev).fill_(fill_value(dt)),
    "empty().zero_": lambda s, dt, dev: torch.empty(s, dtype=dt, device=dev).zero_(),
}


@pytest.mark.parametrize("shape", [(3, 5), (), (0, 4), (1,), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("dtype", FILL_DTYPES, ids=str)
@pytest.mark.parametrize("factory", list(FACTORIES), ids=str)
def test_factories(factory: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    make = FACTORIES[factory]
    assert_matches(make(shape, dtype, DEVICE), make(shape, dtype, "cpu"), exact=True)


def test_full_infers_dtype_as_pytorch() -> None:
    for value in (2.5, 3, True, 1 + 2j):
        expected = torch.full((2, 2), value)
        assert_matches(torch.full((2, 2), value, device=DEVICE), expected, exact=True)


@pytest.mark.parametrize("dtype", FILL_DTYPES, ids=str)
def test_like_factories_keep_layout(dtype: torch.dtype) -> None:
    src_cpu, src = pair((2, 4, 5, 3), dtype, seed=1, view=lambda t: t.permute(0, 3, 1, 2))
    for fn in (torch.zeros_like, torch.ones_like):
        assert_matches(fn(src), fn(src_cpu), exact=True, check_stride=True)
    assert_matches(
        torch.full_like(src, fill_value(dtype)),
        torch.full_like(src_cpu, fill_value(dtype)),
        exact=True,
        check_stride=True,
    )


def _every_2nd_column(t: torch.Tensor) -> torch.Tensor:
    return t[:, ::2]


def _transposed_rows(t: torch.Tensor) -> torch.Tensor:
    return t.t()[1:5]


def _grid(t: torch.Tensor) -> torch.Tensor:
    return t[::2, 1::3]


def _one_element(t: torch.Tensor) -> torch.Tensor:
    return t[1, 2]


def _column(t: torch.Tensor) -> torch.Tensor:
    return t[:, 3]


def _block(t: torch.Tensor) -> torch.Tensor:
    return t[1:3, 2:6]


def _empty_slice(t: torch.Tensor) -> torch.Tensor:
    return t[:, 3:3]


def _contiguous_rows(t: torch.Tensor) -> torch.Tensor:
    return t[2:4]


VIEWS: dict[str, ViewFn] = {
    "x[:, ::2]": _every_2nd_column,
    "x.t()[1:5]": _transposed_rows,
    "x[::2, 1::3]": _grid,
    "x[1, 2] (0-dim)": _one_element,
    "x[:, 3]": _column,
    "x[1:3, 2:6]": _block,
    "x[:, 3:3] (empty)": _empty_slice,
    "x[2:4] (dense)": _contiguous_rows,
}


@pytest.mark.parametrize("view", list(VIEWS), ids=str)
@pytest.mark.parametrize("dtype", FILL_DTYPES, ids=str)
def test_fill_views(dtype: torch.dtype, view: str) -> None:
    base_cpu, base = pair((5, 8), dtype, seed=2)
    target = VIEWS[view](base)
    r = target.fill_(fill_value(dtype))
    assert r is target
    VIEWS[view](base_cpu).fill_(fill_value(dtype))
    assert_matches(base, base_cpu, exact=True)  # elements outside the view untouched


@pytest.mark.parametrize("view", list(VIEWS), ids=str)
@pytest.mark.parametrize("dtype", FILL_DTYPES, ids=str)
def test_zero_views(dtype: torch.dtype, view: str) -> None:
    base_cpu, base = pair((5, 8), dtype, seed=3)
    target = VIEWS[view](base)
    assert target.zero_() is target
    VIEWS[view](base_cpu).zero_()
    assert_matches(base, base_cpu, exact=True)


def test_fill_every_other_column() -> None:
    x = torch.zeros(4, 6, device=DEVICE)
    x[:, ::2].fill_(3)
    expected = torch.zeros(4, 6)
    expected[:, ::2] = 3
    assert_matches(x, expected, exact=True)


@pytest.mark.parametrize("dtype", FILL_DTYPES, ids=str)
def test_fill_with_zero_dim_tensors(dtype: torch.dtype) -> None:
    value_cpu = torch.tensor(fill_value(dtype), dtype=dtype)
    for value in (value_cpu, value_cpu.to(DEVICE)):
        base_cpu, base = pair((4, 6), dtype, seed=4)
        base[:, 1::2].fill_(value)
        base_cpu[:, 1::2].fill_(value_cpu)
        assert_matches(base, base_cpu, exact=True)
        dense = torch.empty(3, 2, dtype=dtype, device=DEVICE)
        assert dense.fill_(value) is dense
        assert_matches(dense, torch.empty(3, 2, dtype=dtype).fill_(value_cpu), exact=True)


@pytest.mark.parametrize("on_device", [False, True], ids=["cpu value", "infini value"])
def test_fill_with_zero_dim_tensor_of_other_dtype(on_device: bool) -> None:
    for dtype, value in ((torch.int32, torch.tensor(2.75)), (torch.float32, torch.tensor(7))):
        v = value.to(DEVICE) if on_device else value
        x = torch.zeros(2, 3, dtype=dtype, device=DEVICE)
        x.fill_(v)
        assert_matches(x, torch.zeros(2, 3, dtype=dtype).fill_(value), exact=True)


def test_fill_python_float_into_integer_tensor() -> None:
    x = torch.zeros(5, dtype=torch.int64, device=DEVICE)
    x.fill_(2.75)
    assert_matches(x, torch.zeros(5, dtype=torch.int64).fill_(2.75), exact=True)


def test_fill_errors_as_pytorch() -> None:
    for dev in ("cpu", DEVICE):
        x = torch.zeros(3, 4, device=dev)
        with pytest.raises(RuntimeError, match="0-dimension"):
            x.fill_(torch.ones(1, device=dev))


@pytest.mark.parametrize("op", ["fill_", "zero_"])
def test_fill_internal_overlap_allowed_as_pytorch(op: str) -> None:
    # Filling is idempotent: PyTorch (CPU and CUDA) accepts targets whose
    # elements share memory, e.g. expanded views, and fills the memory behind them.
    for dev in ("cpu", DEVICE):
        x = torch.full((3, 4), 5.0, device=dev)
        target = x[1:2].expand(3, 4)
        if op == "fill_":
            target.fill_(2.0)
        else:
            target.zero_()
        value = 2.0 if op == "fill_" else 0.0
        expected = torch.full((3, 4), 5.0)
        expected[1] = value
        assert_matches(x, expected, device=dev, exact=True)


def test_fill_is_stream_ordered_after_pending_work() -> None:
    a_cpu, a = pair((64, 64), torch.float32, seed=5)
    x = a * a + a
    x.fill_(1.5)
    y = x * a
    x.zero_()
    assert_matches(y, a_cpu * 1.5, exact=True)
    assert_matches(x, torch.zeros(64, 64), exact=True)


def test_large_fill() -> None:
    x = torch.empty(1 << 20, dtype=torch.float16, device=DEVICE)
    x[1::2].fill_(0.5)
    x[::2].zero_()
    expected = torch.zeros(1 << 20, dtype=torch.float16)
    expected[1::2] = 0.5
    assert_matches(x, expected, exact=True)


@requires_two_devices
def test_second_device() -> None:
    torch.infini.set_device(0)
    dev = "infini:1"
    z = torch.zeros(3, 4, device=dev)
    assert_matches(z, torch.zeros(3, 4), device=dev, exact=True)
    assert_matches(torch.full((2,), 2.5, device=dev), torch.full((2,), 2.5), device=dev)
    z[:, ::2].fill_(torch.tensor(4.0, device=dev))
    z[1].fill_(torch.tensor(-1.0))
    expected = torch.zeros(3, 4)
    expected[:, ::2] = 4
    expected[1] = -1
    assert_matches(z, expected, device=dev, exact=True)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        z.fill_(torch.tensor(1.0, device="infini:0"))
    assert torch.zeros_like(z).device == torch.device(dev)
