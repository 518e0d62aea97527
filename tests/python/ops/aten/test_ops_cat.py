"""cat (torch.cat, concat, stack, cat out=) on infini against the CPU oracle.

cat is InfiniOps' Cat: a byte copy per element, so every backend must give
the CPU's bits exactly, in the CPU's layout.
"""

from __future__ import annotations

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
    UNSIGNED_DTYPES,
    assert_matches,
    expect_kernel,
    make_cpu,
    pair,
    raises_exactly,
    requires_two_devices,
)

F32 = torch.float32
# InfiniOps' dtypes, and one it lacks (bool)
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + UNSIGNED_DTYPES + (torch.bool,)


def _check(result: torch.Tensor, expected: torch.Tensor) -> None:
    """A byte copy: the CPU's bits, in the CPU's layout."""
    assert_matches(result, expected, exact=True, check_stride=True)


@fallback_off
@pytest.mark.parametrize(
    "dtype", FLOAT_DTYPES + INT_DTYPES + UNSIGNED_DTYPES + (torch.bool,), ids=str
)
def test_every_dtype_native_or_refused(dtype: torch.dtype) -> None:
    a_cpu, a = pair((2, 3), dtype, seed=1)
    b_cpu, b = pair((4, 3), dtype, seed=2)
    with expect_kernel("cat", dtype):
        assert_matches(torch.cat([a, b]), torch.cat([a_cpu, b_cpu]), exact=True, check_stride=True)


@fallback_off
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_dims(dim: int) -> None:
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    sizes = [list(s) for s in shapes]
    for i, s in enumerate(sizes):
        s[dim] = i + 1  # 1, 2, 3 along the cat dimension
    pairs = [pair(tuple(s), F32, seed=10 + i) for i, s in enumerate(sizes)]
    expected = torch.cat([c for c, _ in pairs], dim)
    assert_matches(torch.cat([d for _, d in pairs], dim), expected, exact=True, check_stride=True)
    assert_matches(torch.concat([d for _, d in pairs], dim), expected, exact=True)


def _transposed(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(0, 1)


def _offset(t: torch.Tensor) -> torch.Tensor:
    return t[1:, 1:]


def _broadcast(t: torch.Tensor) -> torch.Tensor:
    return t[:1].expand(4, -1)


@fallback_off
@pytest.mark.parametrize("view", [_transposed, _offset, _broadcast], ids=lambda f: f.__name__)
def test_strided_inputs(view) -> None:  # noqa: ANN001
    s_cpu, s = pair((5, 4), F32, seed=3, view=view)
    rows = s_cpu.shape[1]
    d_cpu, d = pair((s_cpu.shape[0], 2), F32, seed=4)
    assert_matches(
        torch.cat([s, d], 1), torch.cat([s_cpu, d_cpu], 1), exact=True, check_stride=True
    )
    e_cpu, e = pair((3, rows), F32, seed=5)
    assert_matches(
        torch.cat([e, s], 0), torch.cat([e_cpu, s_cpu], 0), exact=True, check_stride=True
    )


@fallback_off
def test_channels_last_inputs_keep_their_layout() -> None:
    a_cpu = make_cpu((2, 3, 4, 5), F32, seed=6).contiguous(memory_format=torch.channels_last)
    b_cpu = make_cpu((2, 2, 4, 5), F32, seed=7).contiguous(memory_format=torch.channels_last)
    result = torch.cat([a_cpu.to(DEVICE), b_cpu.to(DEVICE)], 1)
    assert_matches(result, torch.cat([a_cpu, b_cpu], 1), exact=True, check_stride=True)
    assert result.is_contiguous(memory_format=torch.channels_last)


@fallback_off
def test_empty_and_legacy_empty_inputs() -> None:
    a_cpu, a = pair((2, 3), F32, seed=8)
    z_cpu, z = pair((0, 3), F32, seed=9)
    legacy = torch.empty(0)  # 1-D of size 0: skipped whatever the other ranks
    cases = [
        ([legacy, a_cpu, legacy], [legacy.to(DEVICE), a, legacy.to(DEVICE)], 0),
        ([z_cpu, a_cpu, z_cpu], [z, a, z], 0),
        ([z_cpu, z_cpu], [z, z], 0),
        ([legacy, legacy], [legacy.to(DEVICE), legacy.to(DEVICE)], 0),
        ([a_cpu[:, :0], a_cpu], [a[:, :0], a], 1),
    ]
    for cpu_inputs, inputs, dim in cases:
        expected = torch.cat(cpu_inputs, dim)
        assert_matches(torch.cat(inputs, dim), expected, exact=True, check_stride=True)


@fallback_off
def test_stack_and_hstack_go_through_cat() -> None:
    a_cpu, a = pair((3, 4), F32, seed=11)
    b_cpu, b = pair((3, 4), F32, seed=12)
    for fn in (torch.stack, torch.hstack, torch.vstack, torch.dstack):
        assert_matches(fn([a, b]), fn([a_cpu, b_cpu]), exact=True, check_stride=True)
    assert_matches(torch.stack([a, b], -1), torch.stack([a_cpu, b_cpu], -1), exact=True)


@fallback_off
def test_out_resized_and_strided() -> None:
    a_cpu, a = pair((2, 3), F32, seed=13)
    b_cpu, b = pair((1, 3), F32, seed=14)
    out_cpu, out = torch.empty(0), torch.empty(0, device=DEVICE)
    torch.cat([a_cpu, b_cpu], out=out_cpu)
    assert torch.cat([a, b], out=out) is out
    assert_matches(out, out_cpu, exact=True, check_stride=True)
    # a transposed out of the right shape keeps its strides
    t_cpu = torch.zeros(3, 3).t()
    t = torch.zeros(3, 3, device=DEVICE).t()
    torch.cat([a_cpu, b_cpu], out=t_cpu)
    torch.cat([a, b], out=t)
    assert_matches(t, t_cpu, exact=True, check_stride=True)


@fallback_off
def test_out_overlapping_an_input_raises_as_on_the_cpu() -> None:
    for device in ("cpu", DEVICE):
        x = torch.zeros(4, 3, device=device)
        with raises_exactly(RuntimeError, match="unsupported operation: some elements"):
            torch.cat([x[:2], x[2:]], out=x)


def test_mixed_dtypes_are_promoted_in_the_fallback() -> None:
    a_cpu, a = pair((2, 3), F32, seed=15)
    b_cpu, b = pair((2, 3), torch.float64, seed=16)
    with (
        torch_infini.cpu_fallback.strict(),
        raises_exactly(NotImplementedError, match="different dtypes"),
    ):
        torch.cat([a, b])
    with torch_infini.cpu_fallback.allowed("silent"):
        result = torch.cat([a, b])
    assert_matches(result, torch.cat([a_cpu, b_cpu]), exact=True)
    # out= of another dtype: the CPU casts into it
    out_cpu, out = (
        torch.empty(4, 3, dtype=torch.float64),
        torch.empty(4, 3, dtype=torch.float64, device=DEVICE),
    )
    with torch_infini.cpu_fallback.allowed("silent"):
        torch.cat([a, a], out=out)
    assert_matches(out, torch.cat([a_cpu, a_cpu], out=out_cpu), exact=True)


def test_argument_errors_match_the_cpu() -> None:
    calls = {
        "zero-dim": (
            lambda d: torch.cat([torch.tensor(1.0, device=d)]),
            RuntimeError,
            "zero-dimensional",
        ),
        "no tensors": (
            lambda d: torch.cat([], out=torch.empty(0, device=d)),
            ValueError,
            "non-empty list",
        ),
        "shapes": (
            lambda d: torch.cat([torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)]),
            RuntimeError,
            "Sizes of tensors must match except in dimension 0",
        ),
        "dim": (
            lambda d: torch.cat([torch.ones(2, 3, device=d)], 2),
            IndexError,
            "Dimension out of range",
        ),
        "ranks": (
            lambda d: torch.cat([torch.ones(2, 3, device=d), torch.ones(2, 3, 1, device=d)]),
            RuntimeError,
            "Tensors must have same number of dimensions",
        ),
    }
    for name, (call, error, match) in calls.items():
        for device in ("cpu", DEVICE):
            with raises_exactly(error, match=match):
                call(device)
            assert name


def test_a_cpu_tensor_among_infini_ones_raises() -> None:
    with raises_exactly(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.cat([torch.ones(2, device=DEVICE), torch.ones(2)])


@requires_two_devices
def test_second_device_and_mixed_devices() -> None:
    a_cpu, a = pair((2, 3), F32, seed=17, device="infini:1")
    result = torch.cat([a, a])
    assert result.device == torch.device("infini:1")
    assert_matches(result, torch.cat([a_cpu, a_cpu]), device="infini:1", exact=True)
    with raises_exactly(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.cat([a, a_cpu.to("infini:0")])


@fallback_off
@settings(max_examples=40, deadline=None)
@given(
    rank=st.integers(1, 3),
    dim_seed=st.integers(0, 2),
    sizes=st.lists(st.integers(0, 3), min_size=1, max_size=4),
    other=st.integers(1, 3),
    transpose=st.booleans(),
)
def test_property_matches_the_cpu(
    rank: int, dim_seed: int, sizes: list[int], other: int, transpose: bool
) -> None:
    dim = dim_seed % rank
    cpu_inputs, inputs = [], []
    for i, size in enumerate(sizes):
        shape = [other] * rank
        shape[dim] = size
        c, d = pair(tuple(shape), F32, seed=20 + i)
        if transpose and rank > 1:
            c, d = (
                c.transpose(0, -1).contiguous().transpose(0, -1),
                d.transpose(0, -1).contiguous().transpose(0, -1),
            )
        cpu_inputs.append(c)
        inputs.append(d)
    assert_matches(
        torch.cat(inputs, dim), torch.cat(cpu_inputs, dim), exact=True, check_stride=True
    )
