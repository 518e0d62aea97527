"""relu, silu, sigmoid and gelu on infini (out-of-place, in-place, out=) against the CPU oracle."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import fallback_off
from op_helpers import (
    DEVICE,
    FLOAT_DTYPES,
    INT_DTYPES,
    KERNEL_DTYPES,
    ViewFn,
    assert_matches,
    expect_kernel,
    identity,
    pair,
    raises_exactly,
    requires_two_devices,
)

UnaryFn = Callable[[torch.Tensor], torch.Tensor]


def _out(op: str) -> UnaryFn:
    overload = getattr(torch.ops.aten, op).out

    def run(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        r = overload(x, out=out)
        assert r is out
        return r

    return run


def _inplace(fn: Callable[[torch.Tensor], torch.Tensor]) -> UnaryFn:
    def run(x: torch.Tensor) -> torch.Tensor:
        target = x.clone()
        r = fn(target)
        assert r is target
        return target

    return run


VARIANTS: dict[str, dict[str, UnaryFn]] = {
    "relu": {
        "torch.relu": torch.relu,
        "F.relu": F.relu,
        "Tensor.relu": torch.Tensor.relu,
        "nn.ReLU": torch.nn.ReLU(),
        "relu_": _inplace(torch.relu_),
        "F.relu(inplace)": _inplace(lambda t: F.relu(t, inplace=True)),
        "relu.out": _out("relu"),
    },
    "silu": {
        "F.silu": F.silu,
        "nn.SiLU": torch.nn.SiLU(),
        "F.silu(inplace)": _inplace(lambda t: F.silu(t, inplace=True)),
        "silu_": _inplace(torch.ops.aten.silu_),
        "silu.out": _out("silu"),
    },
    "sigmoid": {
        "torch.sigmoid": torch.sigmoid,
        "F.sigmoid": F.sigmoid,
        "Tensor.sigmoid": torch.Tensor.sigmoid,
        "nn.Sigmoid": torch.nn.Sigmoid(),
        "sigmoid_": _inplace(torch.sigmoid_),
        "Tensor.sigmoid_": _inplace(torch.Tensor.sigmoid_),
        "sigmoid.out": _out("sigmoid"),
    },
    "gelu": {
        "F.gelu": F.gelu,
        "F.gelu(tanh)": lambda t: F.gelu(t, approximate="tanh"),
        "nn.GELU": torch.nn.GELU(),
        "nn.GELU(tanh)": torch.nn.GELU("tanh"),
        "gelu_": _inplace(torch.ops.aten.gelu_),
        "gelu_(tanh)": _inplace(lambda t: torch.ops.aten.gelu_(t, approximate="tanh")),
        "gelu.out": _out("gelu"),
        "gelu.out(tanh)": lambda t: torch.ops.aten.gelu.out(
            t, approximate="tanh", out=torch.empty_like(t)
        ),
    },
}

OPS = list(VARIANTS)
# Each operator's functional and in-place form.
FUNCTIONAL: dict[str, UnaryFn] = {
    "relu": torch.relu,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "gelu": F.gelu,
}
INPLACE: dict[str, UnaryFn] = {
    "relu": torch.relu_,
    "silu": torch.ops.aten.silu_,
    "sigmoid": torch.sigmoid_,
    "gelu": torch.ops.aten.gelu_,
}

CASES = [
    (op, variant, dtype)
    for op, variants in VARIANTS.items()
    for variant in variants
    for dtype in KERNEL_DTYPES[op]
]


@pytest.mark.parametrize(("op", "variant", "dtype"), CASES, ids=str)
def test_dtype_table_and_variants(op: str, variant: str, dtype: torch.dtype) -> None:
    x_cpu, x = pair((5, 7), dtype, seed=1)
    fn = VARIANTS[op][variant]
    expected = fn(x_cpu)
    with expect_kernel(op, dtype):
        assert_matches(fn(x), expected, exact=op == "relu")
    assert_matches(x, x_cpu, exact=True)  # input untouched (in-place ran on a clone)


def _t(t: torch.Tensor) -> torch.Tensor:
    return t.t()


def _step(t: torch.Tensor) -> torch.Tensor:
    return t[1:, ::3]


def _nhwc(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 3, 1, 2)


def _expand(t: torch.Tensor) -> torch.Tensor:
    return t[:, :1].expand(t.shape[0], 6)


LAYOUTS: dict[str, tuple[tuple[int, ...], ViewFn]] = {
    "contiguous": ((4, 6), identity),
    "transposed": ((6, 4), _t),
    "strided slice": ((5, 12), _step),
    "nhwc": ((2, 3, 4, 5), _nhwc),
    "expanded": ((4, 6), _expand),
    "0-dim": ((), identity),
    "1 element": ((1, 1), identity),
    "0-size": ((3, 0, 2), identity),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", list(LAYOUTS), ids=str)
def test_layouts(op: str, layout: str) -> None:
    shape, view = LAYOUTS[layout]
    x_cpu, x = pair(shape, torch.float32, seed=2, view=view)
    fn = FUNCTIONAL[op]
    # output layout follows the input, as TensorIterator does on the CPU
    assert_matches(fn(x), fn(x_cpu), exact=op == "relu", check_stride=True)


@pytest.mark.parametrize("op", OPS)
def test_inplace_into_views(op: str) -> None:
    base_cpu, base = pair((6, 8), torch.float32, seed=3)
    inplace = INPLACE[op]
    for index in ((slice(1, 4), slice(2, 7)), (slice(None), slice(None, None, 2))):
        assert inplace(base[index]).data_ptr() == base[index].data_ptr()
        inplace(base_cpu[index])
    inplace(base.t()[:3])
    inplace(base_cpu.t()[:3])
    assert_matches(base, base_cpu)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
def test_relu_integer_extremes(dtype: torch.dtype) -> None:
    info = torch.iinfo(dtype)
    values = torch.tensor([info.min, -1, 0, 1, info.max], dtype=dtype)
    x = values.to(DEVICE)
    assert_matches(torch.relu(x), torch.relu(values), exact=True)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_special_values(dtype: torch.dtype) -> None:
    inf, nan = float("inf"), float("nan")
    values = torch.tensor([-inf, -1e3, -1.5, -0.0, 0.0, 1.5, 1e3, inf, nan], dtype=dtype)
    x = values.to(DEVICE)
    assert_matches(torch.relu(x), torch.relu(values), exact=True)
    with expect_kernel("silu", dtype):
        assert_matches(F.silu(x), F.silu(values))
    with expect_kernel("sigmoid", dtype):
        assert_matches(torch.sigmoid(x), torch.sigmoid(values))
    for approximate in ("none", "tanh"):
        with expect_kernel("gelu", dtype):
            assert_matches(
                F.gelu(x, approximate=approximate), F.gelu(values, approximate=approximate)
            )


@pytest.mark.parametrize("op", OPS)
def test_out_resized(op: str) -> None:
    # torch.ops calls report the deprecation warning on stderr, not as a Python
    # warning (the same on the CPU), so only the result is checked here.
    x_cpu, x = pair((3, 4), torch.float32, seed=4)
    overload = getattr(torch.ops.aten, op).out
    out = torch.empty(7, device=DEVICE)
    assert overload(x, out=out) is out
    assert_matches(out, overload(x_cpu, out=torch.empty(7)), check_stride=True)


@pytest.mark.parametrize("op", OPS)
def test_out_empty_takes_pytorch_layout(op: str) -> None:
    # A zero-element out is resized to the layout PyTorch gives it on the CPU.
    x_cpu, x = pair((3, 4), torch.float32, seed=4)
    overload = getattr(torch.ops.aten, op).out
    empty = torch.empty(0, device=DEVICE)
    assert overload(x.t(), out=empty) is empty
    assert_matches(empty, overload(x_cpu.t(), out=torch.empty(0)), check_stride=True)


def test_silu_out_resize_warns() -> None:
    x_cpu, x = pair((3, 4), torch.float32, seed=4)
    out = torch.empty(7, device=DEVICE)
    with pytest.warns(UserWarning, match="resized"):
        torch._C._nn.silu(x, out=out)
    assert_matches(out, F.silu(x_cpu))


@pytest.mark.parametrize("op", OPS)
def test_out_non_contiguous(op: str) -> None:
    x_cpu, x = pair((4, 5), torch.float32, seed=5)
    overload = getattr(torch.ops.aten, op).out
    base = torch.full((5, 9), 3.0, device=DEVICE)
    base_cpu = torch.full((5, 9), 3.0)
    out = base[:, 1::2].t()
    out_cpu = base_cpu[:, 1::2].t()
    assert overload(x, out=out) is out
    overload(x_cpu, out=out_cpu)
    assert_matches(base, base_cpu)


RELU_REFUSED_DTYPES = (torch.bool, torch.complex64)
# The dtypes each operator's kernel refuses. The CPU's sigmoid takes integers
# (a float result) and complex, its silu and gelu neither: on infini they all
# run in the fallback.
REFUSED_DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    "silu": INT_DTYPES + (torch.bool, torch.complex64),
    "sigmoid": INT_DTYPES + (torch.bool, torch.complex64),
    "gelu": INT_DTYPES + (torch.bool, torch.complex64),
    "relu": RELU_REFUSED_DTYPES,
}


@fallback_off
@pytest.mark.parametrize(
    ("op", "dtype"),
    [(op, d) for op in ("silu", "sigmoid", "gelu") for d in REFUSED_DTYPES[op]],
    ids=str,
)
def test_refused(op: str, dtype: torch.dtype) -> None:
    assert dtype not in KERNEL_DTYPES[op]
    _, x = pair((3,), dtype)
    before = x.cpu()
    for fn in (FUNCTIONAL[op], INPLACE[op], _out(op)):
        with pytest.raises(NotImplementedError, match=op):
            fn(x)
    assert torch.equal(x.cpu(), before)


@pytest.mark.parametrize("approximate", ["exact", "Tanh", ""])
def test_gelu_approximate_other_than_none_or_tanh_raises_as_on_the_cpu(approximate: str) -> None:
    x_cpu, x = pair((3,), torch.float32)
    for fn in (F.gelu, torch.ops.aten.gelu_):
        with pytest.raises(RuntimeError) as cpu_error:
            fn(x_cpu.clone(), approximate=approximate)
        with raises_exactly(RuntimeError, match=re.escape(str(cpu_error.value))):
            fn(x, approximate=approximate)
    assert_matches(x, x_cpu, exact=True)


@fallback_off
@pytest.mark.parametrize("dtype", RELU_REFUSED_DTYPES, ids=str)
def test_relu_refused(dtype: torch.dtype) -> None:
    assert dtype not in KERNEL_DTYPES["relu"]
    _, x = pair((3,), dtype)
    for fn in (torch.relu, torch.relu_, _out("relu")):
        with pytest.raises(NotImplementedError, match="relu"):
            fn(x)
    with pytest.raises(NotImplementedError, match="relu"):
        torch.relu(torch.ones(3, dtype=dtype, device=DEVICE))


def _falls_back_like_the_cpu(fn: UnaryFn, x_cpu: torch.Tensor, x: torch.Tensor) -> None:
    """``fn(x)`` with the fallback on gives the CPU's result (and writes), or raises its error."""
    try:
        expected = fn(x_cpu)
    except (NotImplementedError, RuntimeError) as cpu_error:  # the CPU has no kernel either
        with torch_infini.cpu_fallback.allowed("silent"):
            with raises_exactly(type(cpu_error), match=re.escape(str(cpu_error))):
                fn(x)
        assert_matches(x, x_cpu, exact=True)
        return
    with torch_infini.cpu_fallback.allowed("silent"):
        result = fn(x)
    assert_matches(result, expected, exact=True)
    assert_matches(x, x_cpu, exact=True)  # in-place variants write the infini input


@pytest.mark.parametrize(
    ("op", "dtype"),
    [(op, d) for op, dtypes in REFUSED_DTYPES.items() for d in dtypes],
    ids=str,
)
def test_refused_dtypes_fall_back_to_the_cpu(op: str, dtype: torch.dtype) -> None:
    for fn in (FUNCTIONAL[op], INPLACE[op], _out(op)):
        _falls_back_like_the_cpu(fn, *pair((3,), dtype))


@fallback_off
@pytest.mark.parametrize("op", OPS)
def test_out_dtype_mismatch_refused(op: str) -> None:
    x = torch.ones(3, device=DEVICE)
    overload = getattr(torch.ops.aten, op).out
    with pytest.raises(NotImplementedError, match=f"{op}.out: .*takes no mixed dtypes"):
        overload(x, out=torch.empty(3, dtype=torch.float64, device=DEVICE))


@pytest.mark.parametrize("op", OPS)
def test_out_dtype_mismatch_falls_back_to_the_cpu(op: str) -> None:
    overload = getattr(torch.ops.aten, op).out

    def run(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(3, dtype=torch.float64, device=x.device)
        assert overload(x, out=out) is out
        return out

    _falls_back_like_the_cpu(run, *pair((3,), torch.float32, seed=7))


@pytest.mark.parametrize("op", OPS)
def test_overlap_rules_as_pytorch(op: str) -> None:
    overload = getattr(torch.ops.aten, op).out
    for dev in ("cpu", DEVICE):
        v = torch.arange(-3, 3, dtype=torch.float32).to(dev)
        with pytest.raises(RuntimeError, match="single memory location"):
            overload(v, out=v[:1].expand(6))
        with pytest.raises(RuntimeError, match="single memory location"):
            getattr(torch.ops.aten, op + "_")(v[:1].expand(6))
    # partial overlap of input and out: PyTorch refuses it for silu, sigmoid
    # and gelu (relu.out on the CPU goes through a temporary and accepts it)
    if op == "relu":
        return
    for dev in ("cpu", DEVICE):
        v = torch.arange(-3, 3, dtype=torch.float32).to(dev)
        with pytest.raises(RuntimeError, match="single memory location"):
            overload(v[:-1], out=v[1:])


@pytest.mark.parametrize("op", OPS)
def test_cpu_operands_refused(op: str) -> None:
    overload = getattr(torch.ops.aten, op).out
    # infini's own wording, or the one PyTorch uses on CUDA
    match = (
        f"{op}.out: expected out to be an infini tensor, got a tensor on cpu"
        "|Expected all tensors to be on the same device"
    )
    with raises_exactly(RuntimeError, match=match):
        overload(torch.ones(3, device=DEVICE), out=torch.empty(3))


@requires_two_devices
@pytest.mark.parametrize("op", OPS)
def test_second_device(op: str) -> None:
    torch.infini.set_device(0)
    x_cpu, x = pair((6, 4), torch.float32, seed=6, view=_t, device="infini:1")
    fn = FUNCTIONAL[op]
    assert_matches(fn(x), fn(x_cpu), device="infini:1", check_stride=True)
    overload = getattr(torch.ops.aten, op).out
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        overload(x, out=torch.empty(4, 6, device="infini:0"))
