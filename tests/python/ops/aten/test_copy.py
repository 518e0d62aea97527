"""copy_ between CPU and infini and between infini tensors, CPU as the oracle.

Every test builds its data on CPU, runs the same operation on CPU and through
infini, and compares the results bit for bit (assert_bitwise_equal: torch.equal
would take -0.0 for +0.0).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from infini_testing import (
    ALL_DTYPES,
    assert_bitwise_equal,
    assert_equal_cpu,
    describe,
    make_convertible,
    make_cpu,
    raises_exactly,
    requires_two_devices,
    run_python,
)

# Real -> complex and complex -> complex keep every value; complex -> real
# drops the imaginary part with a warning, on CPU as on infini.
pytestmark = pytest.mark.filterwarnings("ignore:Casting complex values to real:UserWarning")


def _devices() -> list[str]:
    return [f"infini:{i}" for i in range(min(torch.infini.device_count(), 2))]


# ---------------------------------------------------------------- the seed example


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_seed_example(dtype: torch.dtype) -> None:
    src = make_cpu((17, 5), dtype, seed=0)
    x = torch.empty(src.shape, dtype=src.dtype, device="infini:0")
    x.copy_(src)
    out = torch.empty_like(src)
    out.copy_(x)
    assert_bitwise_equal(out, src)


# ---------------------------------------------------------------- directions


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_host_to_device_and_back(dtype: torch.dtype) -> None:
    src = make_cpu((4, 33), dtype, seed=1)
    x = torch.empty(src.shape, dtype=dtype, device="infini")
    returned = x.copy_(src)
    assert returned is x
    assert x.device.type == "infini"
    out = torch.empty_like(src)
    assert out.copy_(x) is out
    assert_bitwise_equal(out, src)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_device_to_device_same_device(dtype: torch.dtype) -> None:
    src = make_cpu((5, 7), dtype, seed=2)
    x = src.to("infini")
    y = torch.empty(src.shape, dtype=dtype, device="infini")
    y.copy_(x)
    assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert_equal_cpu(y, src)
    assert_equal_cpu(x, src)  # the source is untouched


@requires_two_devices
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_device_to_device_across_devices(dtype: torch.dtype) -> None:
    src = make_cpu((6, 5), dtype, seed=3)
    x = src.to("infini:0")
    y = torch.empty(src.shape, dtype=dtype, device="infini:1")
    y.copy_(x)
    assert y.device == torch.device("infini", 1)
    assert_equal_cpu(y, src)
    back = y.to("infini:0")
    assert back.device == torch.device("infini", 0)
    assert_equal_cpu(back, src)


@requires_two_devices
def test_to_other_device_from_either_current_device() -> None:
    src = make_cpu((3, 8), torch.float32, seed=4)
    x = src.to("infini:0")
    for current in (0, 1):
        with torch.infini.device(current):
            y = x.to("infini:1")
            z = y.to("infini:0")
        assert y.device == torch.device("infini", 1)
        assert z.device == torch.device("infini", 0)
        assert_equal_cpu(y, src)
        assert_equal_cpu(z, src)


@requires_two_devices
def test_non_contiguous_copy_across_devices() -> None:
    src = make_cpu((6, 8), torch.float32, seed=5)
    x = src.to("infini:0")
    dst_cpu = make_cpu((8, 12), torch.float32, seed=6)
    dst = dst_cpu.to("infini:1")
    dst[:, ::2].copy_(x.t())
    dst_cpu[:, ::2].copy_(src.t())
    assert_equal_cpu(dst, dst_cpu)


# ---------------------------------------------------------------- layouts


def _layout_cases(src: torch.Tensor) -> dict[str, torch.Tensor]:
    return {
        "transposed": src.t(),
        "sliced_steps": src[1::2, ::3],
        "column": src[:, 3],
        "offset_block": src[2:5, 4:9],
        "expanded_row": src[:1].expand(4, src.shape[1]),
        "expanded_scalar": src[2, 2].expand(3, 5),
        "broadcast_col": src[:, :1].expand(src.shape[0], 6),
    }


@pytest.mark.parametrize(
    "case",
    [
        "transposed",
        "sliced_steps",
        "column",
        "offset_block",
        "expanded_row",
        "expanded_scalar",
        "broadcast_col",
    ],
)
def test_non_contiguous_sources(case: str) -> None:
    src = make_cpu((8, 10), torch.float64, seed=7)
    x = src.to("infini")
    expected = _layout_cases(src)[case]
    view = _layout_cases(x)[case]

    # host -> device from a non-contiguous CPU tensor
    h2d = torch.empty(expected.shape, dtype=expected.dtype, device="infini")
    h2d.copy_(expected)
    assert_equal_cpu(h2d, expected.contiguous())

    # device -> host from a non-contiguous infini view
    assert_equal_cpu(view, expected.contiguous())
    d2h = torch.empty(expected.shape, dtype=expected.dtype)
    d2h.copy_(view)
    assert_bitwise_equal(d2h, expected)

    # device -> device from a non-contiguous infini view
    d2d = torch.empty(expected.shape, dtype=expected.dtype, device="infini")
    d2d.copy_(view)
    assert_equal_cpu(d2d, expected.contiguous())


def test_destination_with_gaps() -> None:
    base_cpu = make_cpu((6, 8), torch.int32, seed=8)
    base = base_cpu.to("infini")
    values = make_cpu((3, 4), torch.int32, seed=9)

    base[::2, 1::2].copy_(values)  # host -> device into a view with gaps
    base_cpu[::2, 1::2].copy_(values)
    assert_equal_cpu(base, base_cpu)

    base[1::2, ::2].copy_(values.to("infini"))  # device -> device
    base_cpu[1::2, ::2].copy_(values)
    assert_equal_cpu(base, base_cpu)

    base.t()[2:6, 1:4].copy_(values.t())  # transposed destination, transposed source
    base_cpu.t()[2:6, 1:4].copy_(values.t())
    assert_equal_cpu(base, base_cpu)

    out = make_cpu((8, 6), torch.int32, seed=10)  # device -> host into a view with gaps
    expected = out.clone()
    out[::2, ::2].copy_(base[::2, ::2].t())
    expected[::2, ::2].copy_(base_cpu[::2, ::2].t())
    assert_bitwise_equal(out, expected)


def test_broadcasting_copies() -> None:
    row = make_cpu((1, 5), torch.float32, seed=11)
    expected = row.expand(4, 5)
    h2d = torch.empty(4, 5, device="infini")
    h2d.copy_(row)
    assert_equal_cpu(h2d, expected.contiguous())
    d2d = torch.empty(4, 5, device="infini")
    d2d.copy_(row.to("infini"))
    assert_equal_cpu(d2d, expected.contiguous())
    d2h = torch.empty(4, 5)
    d2h.copy_(row.to("infini"))
    assert_bitwise_equal(d2h, expected)
    scalar = torch.tensor(3.25)
    filled = torch.empty(2, 3, device="infini").copy_(scalar.to("infini"))
    assert_equal_cpu(filled, torch.full((2, 3), 3.25))


PARTIAL_OVERLAP = (
    "unsupported operation: some elements of the input tensor and the written-to tensor "
    "refer to a single memory location"
)

# Copies within one tensor whose source and destination partially overlap:
# PyTorch's CPU refuses every one of them (it does not pick a direction).
PARTIALLY_OVERLAPPING: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "x[1:] <- x[:-1]": lambda x: x[1:].copy_(x[:-1]),
    "x[:-1] <- x[1:]": lambda x: x[:-1].copy_(x[1:]),
    "x[:6] <- x[3:9]": lambda x: x[:6].copy_(x[3:9]),
    "square <- its transpose": lambda x: x[:9].view(3, 3).copy_(x[:9].view(3, 3).t()),
    "[3, 2] <- [2, 3].t() of the same memory": lambda x: (
        x[:6].view(3, 2).copy_(x[:6].view(2, 3).t())
    ),
    "int32 view of x[1:] <- x[:-1] (converting)": lambda x: x.view(torch.int32)[1:].copy_(x[:-1]),
}


@pytest.mark.parametrize("case", list(PARTIALLY_OVERLAPPING), ids=str)
@pytest.mark.parametrize("dev", ["cpu", "infini"])
def test_partially_overlapping_copy_raises_as_on_cpu(dev: str, case: str) -> None:
    src = torch.arange(12, dtype=torch.float32)
    x = src.to(dev)
    with raises_exactly(RuntimeError, match=PARTIAL_OVERLAP):
        PARTIALLY_OVERLAPPING[case](x)
    assert_equal_cpu(x, src)  # nothing was written


OVERLAPPING_THE_CPU_ACCEPTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "onto itself": lambda x: x.copy_(x),
    "same layout through another view": lambda x: x.view(3, 4).copy_(x.view(4, 3).view(3, 4)),
    "interleaved, disjoint": lambda x: x[::2].copy_(x[1::2]),
    "disjoint halves": lambda x: x[:6].copy_(x[6:]),
    "from an expanded element": lambda x: x.copy_(x[:1].expand(12)),
}


@pytest.mark.parametrize("case", list(OVERLAPPING_THE_CPU_ACCEPTS), ids=str)
def test_overlapping_copies_the_cpu_accepts(case: str) -> None:
    src = torch.arange(12, dtype=torch.float32)
    expected = src.clone()
    OVERLAPPING_THE_CPU_ACCEPTS[case](expected)
    x = src.to("infini")
    OVERLAPPING_THE_CPU_ACCEPTS[case](x)
    assert_equal_cpu(x, expected)


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize("src_dtype", ALL_DTYPES)
def test_dtype_conversion_in_every_direction(src_dtype: torch.dtype) -> None:
    src = make_convertible((3, 7), src_dtype, seed=12)
    x = src.to("infini")
    for dst_dtype in ALL_DTYPES:
        expected = src.to(dst_dtype)
        h2d = torch.empty(src.shape, dtype=dst_dtype, device="infini")
        h2d.copy_(src)
        assert_equal_cpu(h2d, expected)
        d2h = torch.empty(src.shape, dtype=dst_dtype)
        d2h.copy_(x)
        assert_bitwise_equal(d2h, expected)
        d2d = torch.empty(src.shape, dtype=dst_dtype, device="infini")
        d2d.copy_(x)
        assert_equal_cpu(d2d, expected)
        assert_equal_cpu(x.to(dst_dtype), expected)


# Values whose conversion to float16 rounds: to nearest even, overflowing to
# inf, into subnormals. InfiniRT's CPU float -> float16 conversion truncates
# (1.00146484 -> 0x3c01, PyTorch 0x3c02; 65520 -> 65504, PyTorch inf), so on
# that backend InfiniOps Cast does not take float16 and such copies are staged
# through the CPU (infiniops_kernels.cpp, truncatesFloat16). IEEE fixes the
# result: bit for bit on every backend.
ROUNDING_TO_FLOAT16 = [1.00146484375, 1 + 3 * 2**-11, 65520.0, -65520.0, 65519.0, 2**-25, 1e-8, 0.1]


@pytest.mark.parametrize("src_dtype", [torch.float32, torch.float64], ids=str)
def test_conversion_to_float16_rounds_to_nearest_even(src_dtype: torch.dtype) -> None:
    src = torch.tensor(ROUNDING_TO_FLOAT16, dtype=src_dtype)
    expected = src.to(torch.float16)
    x = src.to("infini")
    assert_equal_cpu(x.to(torch.float16), expected)  # device -> device
    assert_equal_cpu(src.to("infini", torch.float16), expected)  # host -> device
    d2h = torch.empty(src.shape, dtype=torch.float16)
    d2h.copy_(x)  # device -> host
    assert_bitwise_equal(d2h, expected)
    strided = torch.zeros(2 * len(ROUNDING_TO_FLOAT16), dtype=torch.float16, device="infini")
    strided[::2].copy_(x)  # into a strided destination
    assert_equal_cpu(strided[::2], expected)
    # and back from float16 to a narrower-mantissa type: bfloat16 rounds too
    assert_equal_cpu(expected.to("infini").to(torch.bfloat16), expected.to(torch.bfloat16))


def test_dtype_conversion_with_non_contiguous_views() -> None:
    src = make_convertible((6, 4), torch.float32, seed=13)
    x = src.to("infini")
    dst = torch.empty(4, 6, dtype=torch.int16, device="infini")
    dst.copy_(x.t())
    assert_equal_cpu(dst, src.t().to(torch.int16))
    out = torch.empty(3, 4, dtype=torch.float64)
    out.copy_(x[::2])
    assert_bitwise_equal(out, src[::2].double())
    gaps = torch.zeros(4, 12, dtype=torch.bfloat16).to("infini")
    gaps[:, ::2].copy_(src.t())
    expected = torch.zeros(4, 12, dtype=torch.bfloat16)
    expected[:, ::2].copy_(src.t())
    assert_equal_cpu(gaps, expected)


@requires_two_devices
def test_dtype_conversion_across_devices() -> None:
    src = make_convertible((5, 6), torch.int64, seed=14)
    x = src.to("infini:0")
    for dtype in (torch.float16, torch.bool, torch.complex64, torch.uint8):
        y = torch.empty(6, 5, dtype=dtype, device="infini:1").t()
        y.copy_(x)
        assert y.device == torch.device("infini", 1)
        assert_equal_cpu(y, src.to(dtype))


def test_complex_conjugate_view_from_cpu() -> None:
    src = make_cpu((7,), torch.complex64, seed=15)
    x = torch.empty(7, dtype=torch.complex64, device="infini")
    x.copy_(src.conj())
    assert_equal_cpu(x, src.conj().resolve_conj())


@pytest.mark.parametrize(
    ("name", "view_code"),
    [
        ("conj", "x.conj()"),
        ("neg", "x._neg_view()"),
    ],
)
def test_conj_and_neg_views_of_infini_tensors_copy_to_cpu(name: str, view_code: str) -> None:
    """Copying a conjugate/negative view of an infini tensor to CPU gives its values.

    Runs in a subprocess: a failure here has been a crash of the interpreter.
    """
    code = f"""
import torch, torch_infini
src = torch.tensor([1 + 2j, -3j, 4.5, -1 - 1j], dtype=torch.complex64)
x = src.to("infini")
view = {view_code}
expected = {view_code.replace("x.", "src.")}
out = view.cpu()
assert out.device.type == "cpu"
assert torch.equal(out.resolve_conj().resolve_neg(), expected.resolve_conj().resolve_neg())
dst = torch.empty(expected.shape, dtype=expected.dtype)
dst.copy_(view)
assert torch.equal(dst, expected.resolve_conj().resolve_neg())
print("OK")
"""
    proc = run_python(code)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", describe(proc)


# ---------------------------------------------------------------- view bits as destinations

# Conjugate and negative views (is_conj() / is_neg()) read and write through
# their bit: writing v into x.conj() stores conj(v) in x. Every combination,
# as source and as destination, against the same copy between CPU tensors.


def _with_bits(t: torch.Tensor, conj: bool, neg: bool) -> torch.Tensor:
    if conj:
        t = t.conj()
        assert t.is_conj()
    if neg:
        t = t._neg_view()
        assert t.is_neg()
    return t


def _bit_cases(dtype: torch.dtype) -> list[tuple[bool, bool]]:
    """(conj, neg) pairs PyTorch has for ``dtype``: the conj bit only on complex."""
    return [(c, n) for c in (False, True) for n in (False, True) if dtype.is_complex or not c]


def _bits_id(bits: tuple[bool, bool]) -> str:
    return {(False, False): "plain", (True, False): "conj", (False, True): "neg"}.get(
        bits, "conj+neg"
    )


VIEW_BIT_PARAMS = [
    pytest.param(
        dtype, src_bits, dst_bits, id=f"{dtype}-{_bits_id(src_bits)}->{_bits_id(dst_bits)}"
    )
    for dtype in (torch.complex64, torch.float32, torch.int32)
    for src_bits in _bit_cases(dtype)
    for dst_bits in _bit_cases(dtype)
]

# The source's dtype: the same, or one the copy converts from.
SOURCE_DTYPES = {
    torch.complex64: (torch.complex64, torch.complex128),
    torch.float32: (torch.float32, torch.float64),
    torch.int32: (torch.int32, torch.int64),
}

# Differing bits between two infini tensors need a conjugate/negate kernel;
# infini documents that it refuses them with this NotImplementedError.
MATERIALIZE_REFUSED = "materializing a conjugate or negative view on infini"


def _assert_same_copy(
    actual: torch.Tensor, expected: torch.Tensor, *bits: tuple[bool, bool]
) -> None:
    """Bit for bit, but for the sign of zero after negating a complex view.

    PyTorch's CPU negates complex numbers as ``0 - x`` in its vectorized loop
    and as ``-x`` in its scalar one, so whether a zero real or imaginary part
    comes out as -0.0 or +0.0 depends on the layout, on the CPU itself
    (``t._neg_view()`` copied into a contiguous vs a transposed tensor). There
    the values must be equal; everywhere else the bits.
    """
    if expected.dtype.is_complex and any(neg for _, neg in bits):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)
    else:
        assert_bitwise_equal(actual, expected)


def _view_bit_data(dtype: torch.dtype, layout: str, seed: int) -> tuple[torch.Tensor, ...]:
    """(destination base, view of it, source) on the CPU; the view is [3, 4]."""
    values = torch.tensor([1 + 2j, -3j, 4.5, -1 - 1j, 0.0, -0.0, 2.25 - 0.5j, 7j, -8, 3, 5j, 1])
    if dtype.is_complex:
        src = values.to(dtype)
    elif dtype.is_floating_point:
        src = (values.real + values.imag).to(dtype)
    else:
        src = (values.real * 3 + values.imag).to(dtype)
    src = src[torch.randperm(12, generator=torch.Generator().manual_seed(seed))].reshape(3, 4)
    dst_base = torch.zeros(4, 6, dtype=dtype) + torch.arange(24).reshape(4, 6).to(dtype)
    if layout == "contiguous":
        return dst_base, dst_base.view(-1)[:12].view(3, 4), src
    # strided and transposed destination, transposed source
    return dst_base, dst_base[:, ::2].t(), src.t().contiguous().t()


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize(("dtype", "src_bits", "dst_bits"), VIEW_BIT_PARAMS)
def test_copy_from_cpu_into_views_with_bits(
    dtype: torch.dtype, src_bits: tuple[bool, bool], dst_bits: tuple[bool, bool], layout: str
) -> None:
    for src_dtype in SOURCE_DTYPES[dtype]:
        base_cpu, view_cpu, src = _view_bit_data(dtype, layout, seed=30)
        src = src.to(src_dtype)
        base = base_cpu.to("infini")
        view = _view_of(base, base_cpu, view_cpu)
        _with_bits(view_cpu, *dst_bits).copy_(_with_bits(src, *src_bits))
        _with_bits(view, *dst_bits).copy_(_with_bits(src, *src_bits))
        _assert_same_copy(base, base_cpu, src_bits, dst_bits)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize(("dtype", "src_bits", "dst_bits"), VIEW_BIT_PARAMS)
def test_copy_to_cpu_from_views_with_bits(
    dtype: torch.dtype, src_bits: tuple[bool, bool], dst_bits: tuple[bool, bool], layout: str
) -> None:
    # the infini tensor is the source now: its view carries src_bits
    src_base_cpu, src_view_cpu, _ = _view_bit_data(dtype, layout, seed=31)
    src_view = _view_of(src_base_cpu.to("infini"), src_base_cpu, src_view_cpu)
    for dst_dtype in SOURCE_DTYPES[dtype]:
        expected = torch.zeros(3, 4, dtype=dst_dtype)
        out = torch.zeros(3, 4, dtype=dst_dtype)
        _with_bits(expected, *dst_bits).copy_(_with_bits(src_view_cpu, *src_bits))
        _with_bits(out, *dst_bits).copy_(_with_bits(src_view, *src_bits))
        _assert_same_copy(out, expected, src_bits, dst_bits)
    assert_bitwise_equal(src_view, src_view_cpu)  # the source is untouched


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize(("dtype", "src_bits", "dst_bits"), VIEW_BIT_PARAMS)
def test_copy_between_infini_views_with_bits(
    dtype: torch.dtype, src_bits: tuple[bool, bool], dst_bits: tuple[bool, bool], layout: str
) -> None:
    base_cpu, view_cpu, src_cpu = _view_bit_data(dtype, layout, seed=32)
    base = base_cpu.to("infini")
    view = _view_of(base, base_cpu, view_cpu)
    src = src_cpu.to("infini")
    before = base_cpu.clone()
    _with_bits(view_cpu, *dst_bits).copy_(_with_bits(src_cpu, *src_bits))
    if src_bits != dst_bits:
        # a documented limitation: refused, never a wrong value
        try:
            _with_bits(view, *dst_bits).copy_(_with_bits(src, *src_bits))
        except NotImplementedError as err:
            assert MATERIALIZE_REFUSED in str(err), err
            assert_bitwise_equal(base, before)  # nothing was written
            return
    else:
        _with_bits(view, *dst_bits).copy_(_with_bits(src, *src_bits))
    _assert_same_copy(base, base_cpu, src_bits, dst_bits)


def _view_of(base: torch.Tensor, base_cpu: torch.Tensor, view_cpu: torch.Tensor) -> torch.Tensor:
    """The view of ``base`` with ``view_cpu``'s geometry within ``base_cpu``."""
    offset = view_cpu.storage_offset() - base_cpu.storage_offset()
    view = base.as_strided(view_cpu.shape, view_cpu.stride(), base.storage_offset() + offset)
    assert view.stride() == view_cpu.stride()
    return view


def test_copy_from_cpu_into_a_conjugate_view() -> None:
    x = torch.zeros(2, dtype=torch.complex64, device="infini")
    x.conj().copy_(torch.tensor([1 + 2j, 3 - 4j]))
    assert_bitwise_equal(x, torch.tensor([1 - 2j, 3 + 4j]))


def test_copy_from_cpu_into_a_negative_view() -> None:
    x = torch.zeros(2, device="infini")
    x._neg_view().copy_(torch.tensor([1.0, -0.0]))
    assert_bitwise_equal(x, torch.tensor([-1.0, 0.0]))


# ---------------------------------------------------------------- edge sizes


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 2), (1,), (), (1, 1, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_empty_and_single_element_tensors(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    src = make_cpu(shape, dtype, seed=16)
    x = src.to("infini")
    assert x.shape == src.shape
    assert_equal_cpu(x, src)
    y = torch.empty(shape, dtype=dtype, device="infini")
    y.copy_(x)
    assert_equal_cpu(y, src)
    out = torch.empty(shape, dtype=dtype)
    out.copy_(y)
    assert_bitwise_equal(out, src)
    converted = torch.empty(shape, dtype=torch.float64, device="infini")
    converted.copy_(x)
    assert_equal_cpu(converted, src.double())


# ---------------------------------------------------------------- non_blocking


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.complex64])
def test_non_blocking_with_pinned_memory(dtype: torch.dtype) -> None:
    src = make_cpu((257, 31), dtype, seed=17).pin_memory()
    x = torch.empty(src.shape, dtype=dtype, device="infini")
    x.copy_(src, non_blocking=True)
    out = torch.empty(src.shape, dtype=dtype, pin_memory=True)
    out.copy_(x, non_blocking=True)
    torch.infini.synchronize()
    assert_bitwise_equal(out, src)


def test_non_blocking_to_and_from() -> None:
    src = make_cpu((1024,), torch.float32, seed=18).pin_memory()
    x = src.to("infini", non_blocking=True)
    back = x.to("cpu", non_blocking=True)
    torch.infini.synchronize()
    assert back.device.type == "cpu"
    assert_bitwise_equal(back, src)


def test_non_blocking_from_pageable_memory_is_safe_to_reuse() -> None:
    """Pageable memory is staged synchronously: reusing it right away is fine."""
    src = make_cpu((4096,), torch.float32, seed=19)
    expected = src.clone()
    x = torch.empty(src.shape, device="infini")
    x.copy_(src, non_blocking=True)
    src.zero_()
    out = torch.zeros(src.shape)
    out.copy_(x, non_blocking=True)  # into pageable memory: complete on return
    assert_bitwise_equal(out, expected)
    torch.infini.synchronize()
    assert_equal_cpu(x, expected)


def test_non_blocking_non_contiguous_and_converting() -> None:
    src = make_convertible((64, 48), torch.float32, seed=20).pin_memory()
    x = torch.empty(48, 64, dtype=torch.float64, device="infini")
    x.copy_(src.t(), non_blocking=True)
    out = torch.empty(64, 48, dtype=torch.float16).pin_memory()
    out.copy_(x.t(), non_blocking=True)
    torch.infini.synchronize()
    assert_bitwise_equal(out, src.half())


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("dst_shape", "src_shape"),
    [((4,), (2, 3)), ((2, 3), (3, 2)), ((5,), (4,)), ((2, 3), (2, 3, 1))],
)
def test_mismatched_shapes_raise(dst_shape: tuple[int, ...], src_shape: tuple[int, ...]) -> None:
    src_cpu = torch.zeros(src_shape)
    src_infini = src_cpu.to("infini")
    # the CPU's (and CUDA's) wording, or infini's
    match = "must match the size of tensor|cannot be broadcast to destination of shape"
    with raises_exactly(RuntimeError, match=match):
        torch.empty(dst_shape).copy_(src_cpu)  # the oracle refuses it too
    with raises_exactly(RuntimeError, match=match):
        torch.empty(dst_shape, device="infini").copy_(src_cpu)
    with raises_exactly(RuntimeError, match=match):
        torch.empty(dst_shape, device="infini").copy_(src_infini)
    with raises_exactly(RuntimeError, match=match):
        torch.empty(dst_shape).copy_(src_infini)


# ---------------------------------------------------------------- _copy_from_and_resize


def test_copy_from_and_resize() -> None:
    src = make_cpu((3, 4), torch.float32, seed=21)
    x = src.to("infini")
    out = torch.ops.aten._copy_from_and_resize(x, torch.empty(0))
    assert out.shape == src.shape
    assert_bitwise_equal(out, src)
    dst = torch.empty(0, device="infini")
    torch.ops.aten._copy_from_and_resize(src, dst)
    assert_equal_cpu(dst, src)


# ---------------------------------------------------------------- property tests


@dataclass(frozen=True)
class ViewSpec:
    """A base shape and the permute + slicing applied to it."""

    base_shape: tuple[int, ...]
    perm: tuple[int, ...]
    slices: tuple[slice, ...]

    def apply(self, base: torch.Tensor) -> torch.Tensor:
        return base.permute(self.perm)[self.slices]


@st.composite
def view_specs(draw: st.DrawFn, max_dim: int = 4) -> ViewSpec:
    ndim = draw(st.integers(1, max_dim))
    base_shape = tuple(draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim)))
    perm = tuple(draw(st.permutations(range(ndim))))
    slices = []
    for dim in perm:
        size = base_shape[dim]
        start = draw(st.integers(0, max(size - 1, 0)))
        stop = draw(st.integers(start, size))
        step = draw(st.integers(1, 3))
        slices.append(slice(start, stop, step))
    return ViewSpec(base_shape, perm, tuple(slices))


@st.composite
def destination_for(draw: st.DrawFn, shape: tuple[int, ...]) -> ViewSpec:
    """A (possibly permuted, gapped) view whose shape is ``shape``."""
    ndim = len(shape)
    perm = tuple(draw(st.permutations(range(ndim))))
    steps = [draw(st.integers(1, 3)) for _ in range(ndim)]
    offsets = [draw(st.integers(0, 2)) for _ in range(ndim)]
    permuted_shape = [offsets[i] + shape[i] * steps[i] for i in range(ndim)]
    base_shape = [0] * ndim
    for i, dim in enumerate(perm):
        base_shape[dim] = permuted_shape[i]
    slices = tuple(
        slice(offsets[i], offsets[i] + shape[i] * steps[i], steps[i]) for i in range(ndim)
    )
    return ViewSpec(tuple(base_shape), perm, slices)


COPY_DTYPES = st.sampled_from([torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool])


@given(data=st.data(), spec=view_specs(), dtype=COPY_DTYPES, seed=st.integers(0, 2**16))
def test_property_strided_views_round_trip(
    data: st.DataObject, spec: ViewSpec, dtype: torch.dtype, seed: int
) -> None:
    base_cpu = make_cpu(spec.base_shape, dtype, seed=seed)
    view_cpu = spec.apply(base_cpu)
    base = base_cpu.to("infini")
    view = spec.apply(base)

    # device -> host of a strided view
    assert_equal_cpu(view, view_cpu.contiguous())

    # host -> device from a strided CPU view into a strided infini destination
    dst_spec = data.draw(destination_for(tuple(view_cpu.shape)), label="dst")
    dst_base_cpu = make_cpu(dst_spec.base_shape, dtype, seed=seed + 1)
    dst_base = dst_base_cpu.to("infini")
    dst_spec.apply(dst_base).copy_(view_cpu)
    dst_spec.apply(dst_base_cpu).copy_(view_cpu)
    assert_equal_cpu(dst_base, dst_base_cpu)

    # device -> device between strided views
    dst_base2_cpu = make_cpu(dst_spec.base_shape, dtype, seed=seed + 2)
    dst_base2 = dst_base2_cpu.to("infini")
    dst_spec.apply(dst_base2).copy_(view)
    dst_spec.apply(dst_base2_cpu).copy_(view_cpu)
    assert_equal_cpu(dst_base2, dst_base2_cpu)

    # device -> host into a strided CPU destination
    out_cpu = make_cpu(dst_spec.base_shape, dtype, seed=seed + 3)
    expected = out_cpu.clone()
    dst_spec.apply(out_cpu).copy_(view)
    dst_spec.apply(expected).copy_(view_cpu)
    assert_bitwise_equal(out_cpu, expected)


@given(
    spec=view_specs(max_dim=3),
    src_dtype=st.sampled_from(ALL_DTYPES),
    dst_dtype=st.sampled_from(ALL_DTYPES),
    seed=st.integers(0, 2**16),
)
def test_property_converting_copies(
    spec: ViewSpec, src_dtype: torch.dtype, dst_dtype: torch.dtype, seed: int
) -> None:
    base_cpu = make_convertible(spec.base_shape, src_dtype, seed=seed)
    view_cpu = spec.apply(base_cpu)
    view = spec.apply(base_cpu.to("infini"))
    expected = view_cpu.to(dst_dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        d2d = torch.empty(view.shape, dtype=dst_dtype, device="infini")
        d2d.copy_(view)
        h2d = torch.empty(view.shape, dtype=dst_dtype, device="infini")
        h2d.copy_(view_cpu)
        d2h = torch.empty(view.shape, dtype=dst_dtype)
        d2h.copy_(view)
    assert_equal_cpu(d2d, expected)
    assert_equal_cpu(h2d, expected)
    assert_bitwise_equal(d2h, expected)


@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    data=st.data(),
    seed=st.integers(0, 2**16),
)
def test_property_broadcast_sources(shape: list[int], data: st.DataObject, seed: int) -> None:
    # Source: some dimensions of size 1 and possibly fewer leading dimensions.
    keep = data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    drop_leading = data.draw(st.integers(0, len(shape) - 1))
    src_shape = [s if k else 1 for s, k in zip(shape, keep, strict=True)][drop_leading:]
    src_cpu = make_cpu(src_shape, torch.int32, seed=seed)
    expected = src_cpu.expand(shape)
    h2d = torch.empty(shape, dtype=torch.int32, device="infini")
    h2d.copy_(src_cpu)
    assert_equal_cpu(h2d, expected.contiguous())
    src = src_cpu.to("infini")
    d2d = torch.empty(shape, dtype=torch.int32, device="infini")
    d2d.copy_(src)
    assert_equal_cpu(d2d, expected.contiguous())
    d2h = torch.empty(shape, dtype=torch.int32)
    d2h.copy_(src)
    assert_bitwise_equal(d2h, expected)


@requires_two_devices
@given(spec=view_specs(max_dim=3), data=st.data(), seed=st.integers(0, 2**16))
def test_property_strided_copies_across_devices(
    spec: ViewSpec, data: st.DataObject, seed: int
) -> None:
    base_cpu = make_cpu(spec.base_shape, torch.float32, seed=seed)
    view_cpu = spec.apply(base_cpu)
    view = spec.apply(base_cpu.to("infini:0"))
    dst_spec = data.draw(destination_for(tuple(view_cpu.shape)), label="dst")
    dst_base_cpu = make_cpu(dst_spec.base_shape, torch.float32, seed=seed + 1)
    dst_base = dst_base_cpu.to("infini:1")
    dst_spec.apply(dst_base).copy_(view)
    dst_spec.apply(dst_base_cpu).copy_(view_cpu)
    assert dst_base.device == torch.device("infini", 1)
    assert_equal_cpu(dst_base, dst_base_cpu)
