"""add and mul on infini (Tensor, in-place and out= variants) against the CPU oracle.

Covers broadcasting, 0-size / 1-element / 0-dim shapes, strided, transposed,
sliced and permuted (channels_last-like) inputs, output layout (strides as
TensorIterator computes them on the CPU), in-place into views, out= resizing,
the dtype table, and the refusals (out= of another dtype, bool/complex, mixed devices).
Scalar operands: test_ops_elementwise_scalars.py.
"""

from __future__ import annotations

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
    KERNEL_DTYPES,
    ViewFn,
    add_oracle,
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
