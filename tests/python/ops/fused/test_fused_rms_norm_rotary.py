"""torch.ops.infini's rms_norm, add_rms_norm, fused_add_rms_norm and rotary_embedding.

The oracle is the definition composed from stock PyTorch operators
(InfiniOps' kernels written in PyTorch, docs/fused_operators.md; here and in
fused_oracles.py), never the operators' own C++ reference: the CPU
implementation and infini (rms_norm, fused_add_rms_norm and rotary_embedding
through the kernel seam where the backend serves the dtype, the rest in the
CPU fallback) are each compared with it, bit for bit, in every floating
dtype (InfiniOps' kernels: PyTorch's tolerances). Gradients of rms_norm, add_rms_norm and of the
out-of-place rotary, in every dtype, against PyTorch's autograd through the
stock composition (computed in float, rounded once, as the fused backward
promises) and gradcheck; the in-place forms refuse a gradient; opcheck
checks the schemas (mutations, aliasing) and the Meta kernels.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import fused_oracles
import pytest
import torch
import torch_infini
from infini_testing import raises_exactly
from op_helpers import assert_matches, make_cpu
from torch_infini import ops

DEVICE = torch.device("infini", 0)
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _wide(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


# ---------------------------------------------------------------- definitions


add_rms_norm_definition = fused_oracles.add_rms_norm


def rotary_definition(
    positions: torch.Tensor,
    t: torch.Tensor,
    head_size: int,
    cache: torch.Tensor,
    is_neox: bool,
    offset: int = 0,
    inverse: bool = False,
) -> torch.Tensor:
    """Element by element: pair (a, b) of each head turns by the angle of
    cache[pos] (cos in the first half of the row, sin in the second)."""
    out = t.clone()
    heads = out.reshape(*positions.shape, -1, head_size)
    rot = cache.shape[1]
    wide = _wide(t.dtype)
    for index in torch.cartesian_prod(*(torch.arange(n) for n in positions.shape)).reshape(
        -1, positions.dim()
    ):
        idx = tuple(index.tolist())
        row = cache[positions[idx]].to(wide)
        for j in range(rot // 2):
            a, b = (
                (offset + j, offset + rot // 2 + j)
                if is_neox
                else (offset + 2 * j, offset + 2 * j + 1)
            )
            cos, sin = row[j], -row[rot // 2 + j] if inverse else row[rot // 2 + j]
            x = t.reshape(*positions.shape, -1, head_size)[idx][:, a].to(wide)
            y = t.reshape(*positions.shape, -1, head_size)[idx][:, b].to(wide)
            heads[idx][:, a] = (x * cos - y * sin).to(t.dtype)
            heads[idx][:, b] = (y * cos + x * sin).to(t.dtype)
    return out


def rope_cache(max_position: int, rot_dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A true cos/sin table (base 10000), [max_position, rot_dim]."""
    inv = 1.0 / 10000 ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inv[None]
    return torch.cat([angles.cos(), angles.sin()], -1).to(dtype)


# ---------------------------------------------------------------- rms_norm


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 16), (2, 3, 8), (1, 1), (0, 8), (2, 2, 2, 5)], ids=str)
def test_rms_norm_is_its_definition_and_infini_matches(
    shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    """On infini InfiniOps' rms_norm kernel (2-D and 3-D, the dtypes it
    declares; the rest in the CPU fallback) multiplies in its own order:
    PyTorch's tolerances for the dtype."""
    x, w = make_cpu(shape, dtype, seed=1), make_cpu(shape[-1:], dtype, seed=3)
    expected = fused_oracles.rms_norm(x, w, 1e-5)
    assert_matches(ops.rms_norm(x, w, 1e-5), expected, device="cpu", exact=True)
    with torch_infini.cpu_fallback.allowed("silent"):
        on_infini = ops.rms_norm(x.to(DEVICE), w.to(DEVICE), 1e-5)
    assert_matches(on_infini, expected, same_kernel=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_gradients(dtype: torch.dtype) -> None:
    """Both inputs' gradients against PyTorch's autograd through the stock
    composition (fused_oracles.rms_norm), on the CPU and on infini; the
    dtype's default tolerances (the closed-form backward orders its float
    operations differently)."""
    x, w = make_cpu((3, 8), dtype, seed=0), make_cpu((8,), dtype, seed=2)
    grad_out = make_cpu((3, 8), dtype, seed=7)

    def leaves(device: str | torch.device) -> list[torch.Tensor]:
        return [t.detach().clone().to(device).requires_grad_() for t in (x, w)]

    oracle = leaves("cpu")
    fused_oracles.rms_norm(*oracle, 1e-6).backward(grad_out)
    cpu = leaves("cpu")
    ops.rms_norm(*cpu).backward(grad_out)
    on_infini = leaves(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        ops.rms_norm(*on_infini).backward(grad_out.to(DEVICE))
    for name, want, got_cpu, got in zip("xw", oracle, cpu, on_infini, strict=True):
        assert want.grad is not None and want.grad.abs().max() > 0, name
        torch.testing.assert_close(got_cpu.grad, want.grad, msg=lambda m, n=name: f"{n}: {m}")
        assert got.grad is not None and got.grad.device.type == "infini", name
        torch.testing.assert_close(got.grad.cpu(), want.grad, msg=lambda m, n=name: f"{n}: {m}")
    if dtype == torch.float64:
        doubles = [t.detach().clone().requires_grad_() for t in (x, w)]
        assert torch.autograd.gradcheck(lambda *t: ops.rms_norm(*t, 1e-3), doubles)


def test_rms_norm_refuses_a_weight_of_another_dtype_or_size() -> None:
    x = torch.randn(2, 8, device=DEVICE)
    with pytest.raises(RuntimeError, match=r"infini::rms_norm: weight must have the input's dtype"):
        ops.rms_norm(x, torch.ones(8, dtype=torch.float64, device=DEVICE))
    with pytest.raises(RuntimeError, match=r"infini::rms_norm: expected weight of shape \[8\]"):
        ops.rms_norm(x, torch.ones(7, device=DEVICE))


# ---------------------------------------------------------------- add_rms_norm


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 16), (2, 3, 8), (1, 1), (0, 8), (2, 2, 2, 5)], ids=str)
def test_add_rms_norm_is_its_definition_and_infini_matches(
    shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x, r = make_cpu(shape, dtype, seed=1), make_cpu(shape, dtype, seed=2)
    w = make_cpu(shape[-1:], dtype, seed=3)
    expected = add_rms_norm_definition(x, r, w, 1e-5)
    got = ops.add_rms_norm(x, r, w, 1e-5)
    for g, e in zip(got, expected, strict=True):
        assert_matches(g, e, device="cpu", exact=True)
    with torch_infini.cpu_fallback.allowed("silent"):
        on_infini = ops.add_rms_norm(x.to(DEVICE), r.to(DEVICE), w.to(DEVICE), 1e-5)
    for g, e in zip(on_infini, expected, strict=True):
        assert_matches(g, e, exact=True)


def test_add_rms_norm_rounds_the_sum_before_normalizing() -> None:
    """InfiniOps normalizes the residual sum as stored (rounded to the dtype)."""
    x = torch.tensor([[1.0, 2.0**-12, 3.0]], dtype=torch.float16)
    r = torch.tensor([[2.0**-12, 1.0, -3.0]], dtype=torch.float16)
    out, residual_out = ops.add_rms_norm(x, r, torch.ones(3, dtype=torch.float16))
    assert torch.equal(residual_out, torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float16))
    assert_matches(
        out, add_rms_norm_definition(x, r, torch.ones(3), 1e-6)[0], device="cpu", exact=True
    )


def test_add_rms_norm_weight_of_another_dtype_and_strided_inputs() -> None:
    x = make_cpu((6, 8), torch.bfloat16, seed=4).t()  # [8, 6], strided
    r = make_cpu((8, 6), torch.bfloat16, seed=5)
    w = make_cpu((6,), torch.float32, seed=6)
    expected = add_rms_norm_definition(x, r, w, 1e-6)
    with torch_infini.cpu_fallback.allowed("silent"):
        got = ops.add_rms_norm(x.to(DEVICE), r.to(DEVICE), w.to(DEVICE))
    for g, e in zip(got, expected, strict=True):
        assert_matches(g, e, exact=True)


ADD_SERVED = torch_infini.supported_dtypes("infini::add_rms_norm")


@pytest.mark.parametrize("dtype", ADD_SERVED, ids=str)
@pytest.mark.parametrize("shape", [(4, 16), (2, 3, 8), (1, 1), (0, 8)], ids=str)
def test_add_rms_norm_runs_natively_where_the_backend_serves_it(
    shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    """A served dtype (host: InfiniOps' accelerator dtypes, its AddRmsNorm
    kernel's, run by the CPU reference on the device memory) runs with the
    fallback off on the 2-D and 3-D contiguous tensors the kernel takes:
    both results are the definition's, dense, as the CPU's."""
    x, r = make_cpu(shape, dtype, seed=51), make_cpu(shape, dtype, seed=52)
    w = make_cpu(shape[-1:], dtype, seed=53)
    expected = add_rms_norm_definition(x, r, w, 1e-5)
    torch_infini.cpu_fallback.reset_stats()
    with torch_infini.cpu_fallback.strict():
        got = ops.add_rms_norm(x.to(DEVICE), r.to(DEVICE), w.to(DEVICE), 1e-5)
    assert torch_infini.cpu_fallback.stats() == {}
    # host: bit for bit; InfiniOps' kernel: PyTorch's tolerances for the
    # dtype. Strides included: both results are dense, as the CPU's.
    for g, e in zip(got, expected, strict=True):
        assert_matches(g, e, check_stride=True)


@pytest.mark.parametrize(
    "case", ["4-D input", "weight of another dtype", "strided input", "strided residual"]
)
def test_add_rms_norm_calls_the_kernel_does_not_take_run_in_the_fallback(case: str) -> None:
    """The kernel's contract (2-D or 3-D, contiguous input and residual, a
    weight of their dtype): other calls are refused to the CPU fallback,
    which gives the definition's results in the CPU's layout."""
    if torch.float32 not in ADD_SERVED:
        pytest.skip("the backend serves no float32 add_rms_norm: every call falls back")
    x, r = make_cpu((4, 6), torch.float32, seed=54), make_cpu((4, 6), torch.float32, seed=55)
    w = make_cpu((6,), torch.float32, seed=56)
    reason = {
        "4-D input": "takes 2-D and 3-D inputs",
        "weight of another dtype": "a weight of the input's dtype",
        "strided input": "contiguous input and residual",
        "strided residual": "contiguous input and residual",
    }[case]
    if case == "4-D input":
        x, r = x.reshape(1, 2, 2, 6), r.reshape(1, 2, 2, 6)
    elif case == "weight of another dtype":
        w = w.to(torch.bfloat16)
    elif case == "strided input":
        x = make_cpu((6, 4), torch.float32, seed=54).t()
    else:
        r = make_cpu((6, 4), torch.float32, seed=55).t()
    x_dev = x.to(DEVICE) if x.is_contiguous() else _same_view_on_device(x)
    r_dev = r.to(DEVICE) if r.is_contiguous() else _same_view_on_device(r)
    assert (x_dev.stride(), r_dev.stride()) == (x.stride(), r.stride())
    expected = add_rms_norm_definition(x, r, w, 1e-6)
    torch_infini.cpu_fallback.reset_stats()
    with torch_infini.cpu_fallback.allowed("silent"):
        got = ops.add_rms_norm(x_dev, r_dev, w.to(DEVICE))
    assert "infini::add_rms_norm" in torch_infini.cpu_fallback.stats()
    for g, e, c in zip(got, expected, ops.add_rms_norm(x, r, w), strict=True):
        assert_matches(g, e, exact=True)
        assert g.stride() == c.stride()  # the CPU's layout
    with torch_infini.cpu_fallback.strict(), raises_exactly(NotImplementedError, match=reason):
        ops.add_rms_norm(x_dev, r_dev, w.to(DEVICE))


@pytest.mark.parametrize(
    ("dtype", "weight_dtype"),
    [(d, d) for d in DTYPES] + [(torch.bfloat16, torch.float32)],
    ids=str,
)
def test_add_rms_norm_gradients(dtype: torch.dtype, weight_dtype: torch.dtype) -> None:
    """Gradients of all three inputs against PyTorch's autograd through the
    stock composition (fused_oracles.add_rms_norm), on the CPU and on infini.

    Tolerances: PyTorch's defaults for the dtype. The fused backward
    (RMSNorm's closed form, in float, rounded once) and autograd's chain of
    float operations differ in the order of float32 operations only, so
    after the one rounding they agree to an ulp of the dtype at most."""
    x, r = make_cpu((3, 8), dtype, seed=0), make_cpu((3, 8), dtype, seed=1)
    w = make_cpu((8,), weight_dtype, seed=2)
    grad_out, grad_res = make_cpu((3, 8), dtype, seed=7), make_cpu((3, 8), dtype, seed=8)

    def leaves(device: str | torch.device) -> list[torch.Tensor]:
        return [t.detach().clone().to(device).requires_grad_() for t in (x, r, w)]

    oracle = leaves("cpu")
    torch.autograd.backward(list(fused_oracles.add_rms_norm(*oracle, 1e-6)), [grad_out, grad_res])
    cpu = leaves("cpu")
    torch.autograd.backward(list(ops.add_rms_norm(*cpu)), [grad_out, grad_res])
    on_infini = leaves(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        out, res = ops.add_rms_norm(*on_infini)
        torch.autograd.backward([out, res], [grad_out.to(DEVICE), grad_res.to(DEVICE)])
    for name, want, got_cpu, got in zip("xrw", oracle, cpu, on_infini, strict=True):
        assert want.grad is not None and want.grad.abs().max() > 0, name
        torch.testing.assert_close(got_cpu.grad, want.grad, msg=lambda m, n=name: f"{n}: {m}")
        assert got.grad is not None and got.grad.device.type == "infini", name
        torch.testing.assert_close(got.grad.cpu(), want.grad, msg=lambda m, n=name: f"{n}: {m}")
    if dtype == torch.float64:
        doubles = [t.detach().clone().requires_grad_() for t in (x, r, w)]
        assert torch.autograd.gradcheck(lambda *t: ops.add_rms_norm(*t, 1e-3), doubles)


def test_fused_add_rms_norm_in_place() -> None:
    for dtype in DTYPES:
        x, r = make_cpu((3, 2, 8), dtype, seed=9), make_cpu((3, 2, 8), dtype, seed=10)
        w = make_cpu((8,), dtype, seed=11)
        for weight in (w, None):
            expected, s = fused_oracles.fused_add_rms_norm(x, r, weight)
            xi, ri = x.to(DEVICE), r.to(DEVICE)
            version = xi._version
            with torch_infini.cpu_fallback.allowed("silent"):
                ops.fused_add_rms_norm(xi, ri, None if weight is None else weight.to(DEVICE))
            assert_matches(ri, s, exact=True)
            assert_matches(xi, expected, exact=True)
            assert xi._version > version
            xc, rc = x.clone(), r.clone()
            ops.fused_add_rms_norm(xc, rc, weight)
            assert_matches(xc, expected, device="cpu", exact=True)
            assert_matches(rc, s, device="cpu", exact=True)


FUSED_ADD_SERVED = torch_infini.supported_dtypes("infini::fused_add_rms_norm")


@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no weight"])
@pytest.mark.parametrize("dtype", FUSED_ADD_SERVED, ids=str)
def test_fused_add_rms_norm_runs_natively_where_the_backend_serves_it(
    dtype: torch.dtype, with_weight: bool
) -> None:
    """A served dtype (host: InfiniOps' accelerator dtypes, run by the CPU
    kernel on the device memory) runs with the fallback off, in the layouts
    models give it: a residual stream [B, S, hidden], an input that is a
    slice of a wider projection (rows strided past hidden), and 1-D."""
    for shape, width in (((2, 3, 16), 16), ((4, 16), 24), ((16,), 16)):
        wide_x = make_cpu((*shape[:-1], width), dtype, seed=41)
        x, r = wide_x[..., :16], make_cpu(shape, dtype, seed=42)
        w = make_cpu((16,), dtype, seed=43) if with_weight else None
        expected, s = fused_oracles.fused_add_rms_norm(x, r, w)
        wide_dev, r_dev = wide_x.to(DEVICE), r.to(DEVICE)
        x_dev = wide_dev[..., :16]
        torch_infini.cpu_fallback.reset_stats()
        with torch_infini.cpu_fallback.strict():
            ops.fused_add_rms_norm(x_dev, r_dev, None if w is None else w.to(DEVICE))
        assert torch_infini.cpu_fallback.stats() == {}
        # host runs the CPU kernel: bit for bit (assert_matches); InfiniOps'
        # kernel: PyTorch's tolerances for the dtype.
        assert_matches(r_dev, s)
        assert_matches(x_dev, expected)
        assert torch.equal(wide_dev[..., 16:].cpu(), wide_x[..., 16:])  # untouched


@pytest.mark.parametrize(
    "case",
    [
        "strided hidden dimension",
        "unevenly strided rows",
        "weight of another dtype",
        "input and residual overlap",
    ],
)
def test_fused_add_rms_norm_layouts_the_kernel_does_not_take_run_in_the_fallback(
    case: str,
) -> None:
    """The kernel's contract (rows evenly strided, unit stride within a row,
    a weight of the input's dtype, input and residual apart): other calls
    are refused to the CPU fallback, which gives the definition's result."""
    if torch.float32 not in FUSED_ADD_SERVED:
        pytest.skip("the backend serves no float32 fused_add_rms_norm: every call falls back")
    base = make_cpu((2, 5, 16), torch.float32, seed=44)
    x, r = base[:, :3].clone(), make_cpu((2, 3, 16), torch.float32, seed=45)
    w = make_cpu((16,), torch.float32, seed=46)
    reason = "unit stride in the last dimension and evenly strided rows"
    if case == "strided hidden dimension":
        x = make_cpu((2, 3, 32), torch.float32, seed=44)[..., ::2]
    elif case == "unevenly strided rows":  # batch 1's rows do not follow batch 0's
        x = base[:, :3]
    elif case == "weight of another dtype":
        w = w.to(torch.bfloat16)
        reason = "a weight of the input's dtype"
    x_dev = x.to(DEVICE) if x.is_contiguous() else _same_view_on_device(x)
    r_dev = r.to(DEVICE)
    if case == "input and residual overlap":
        # The same memory for both, on each side: residual = 2x, then input = norm(2x).
        reason = "must not overlap"
        r, r_dev = x, x_dev
        expected = fused_oracles.fused_add_rms_norm(x * 2, torch.zeros_like(x), w)[0]
        s = expected
    else:
        expected, s = fused_oracles.fused_add_rms_norm(x, r, w)
    assert x_dev.stride() == x.stride()
    snapshot = (x_dev.clone(), r_dev.clone())
    torch_infini.cpu_fallback.reset_stats()
    with torch_infini.cpu_fallback.allowed("silent"):
        ops.fused_add_rms_norm(x_dev, r_dev, w.to(DEVICE))
    assert "infini::fused_add_rms_norm" in torch_infini.cpu_fallback.stats()
    assert_matches(x_dev, expected, exact=True)
    if case != "input and residual overlap":
        assert_matches(r_dev, s, exact=True)
    x_dev.copy_(snapshot[0])
    r_dev.copy_(snapshot[1])
    with (
        torch_infini.cpu_fallback.strict(),
        raises_exactly(NotImplementedError, match=reason),
    ):
        ops.fused_add_rms_norm(x_dev, r_dev, w.to(DEVICE))
    assert torch.equal(x_dev.cpu(), snapshot[0].cpu())  # refused before writing anything


def test_in_place_forms_refuse_a_gradient() -> None:
    x = torch.randn(2, 8, requires_grad=True)
    with raises_exactly(
        RuntimeError, match="has no derivative; for training use infini::add_rms_norm"
    ):
        ops.fused_add_rms_norm(x, torch.randn(2, 8), None)
    q = torch.randn(3, 8, requires_grad=True)
    with raises_exactly(RuntimeError, match="apply_rotary_embedding"):
        ops.rotary_embedding(torch.arange(3), q, None, 8, rope_cache(4, 8), True)
    with torch.no_grad():  # inference: fine
        ops.fused_add_rms_norm(x, torch.randn(2, 8), None)


def test_bad_input_raises_the_cpu_error_on_every_device() -> None:
    """Each bad argument raises its own RuntimeError (the check that names
    it), on the CPU and, with the same message, on infini."""
    calls = {
        "residual must have the input's shape and dtype": lambda d: ops.add_rms_norm(
            torch.ones(2, 4, device=d), torch.ones(2, 5, device=d), torch.ones(4, device=d)
        ),
        "expected weight of shape [4], got [5]": lambda d: ops.add_rms_norm(
            torch.ones(2, 4, device=d), torch.ones(2, 4, device=d), torch.ones(5, device=d)
        ),
        "expected a floating-point input, got Int": lambda d: ops.add_rms_norm(
            torch.ones(2, 4, dtype=torch.int32, device=d),
            torch.ones(2, 4, dtype=torch.int32, device=d),
            torch.ones(4, device=d),
        ),
        "rope_dim_offset 2 + rot_dim 8 must fit in head_size 8": lambda d: ops.rotary_embedding(
            torch.arange(2, device=d),
            torch.ones(2, 8, device=d),
            None,
            8,
            rope_cache(4, 8).to(d),
            True,
            2,
        ),
        "query's last dimension 12 is not a multiple of head_size 8": lambda d: (
            ops.rotary_embedding(
                torch.arange(2, device=d),
                torch.ones(2, 12, device=d),
                None,
                8,
                rope_cache(4, 8).to(d),
                True,
            )
        ),
    }
    for message, call in calls.items():
        with raises_exactly(RuntimeError, match=r"^infini::\w+: " + re.escape(message)):
            call("cpu")
        with torch_infini.cpu_fallback.allowed("silent"):
            with raises_exactly(RuntimeError, match=r"^infini::\w+: " + re.escape(message)):
                call(DEVICE)


def test_refused_with_the_fallback_off() -> None:
    # add_rms_norm in float64 (its kernel takes float32 and the half types).
    x = torch.ones(2, 4, dtype=torch.float64, device=DEVICE)
    w = torch.ones(4, dtype=torch.float64, device=DEVICE)
    with (
        torch_infini.cpu_fallback.strict(),
        raises_exactly(NotImplementedError, match=r"add_rms_norm: dtype Double .*kernel provider"),
    ):
        ops.add_rms_norm(x, x, w)
    # rotary_embedding is a seam operator: a dtype the backend does not serve
    # (float64 everywhere: InfiniOps' kernel takes float32 and the half types)
    # is refused with the fallback off, naming the provider, and the query is
    # left untouched.
    positions = torch.arange(2).to(DEVICE)
    q = torch.ones(2, 8, dtype=torch.float64, device=DEVICE)
    cache = rope_cache(4, 8, torch.float64).to(DEVICE)
    assert torch.float64 not in torch_infini.supported_dtypes("infini::rotary_embedding")
    with (
        torch_infini.cpu_fallback.strict(),
        raises_exactly(
            NotImplementedError, match=r"rotary_embedding: dtype Double .*kernel provider"
        ),
    ):
        ops.rotary_embedding(positions, q, None, 8, cache, True)
    assert torch.equal(q.cpu(), torch.ones(2, 8, dtype=torch.float64))  # untouched


# ---------------------------------------------------------------- rotary


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_is_its_definition_and_infini_matches(
    dtype: torch.dtype, is_neox: bool, inverse: bool
) -> None:
    positions = torch.tensor([3, 0, 7, 2, 2])
    head_size, rot = 8, 8
    cache = rope_cache(10, rot)
    q = make_cpu((5, 4 * head_size), dtype, seed=12)
    k = make_cpu((5, 2, head_size), dtype, seed=13)  # grouped: fewer key heads, split layout
    expected_q = rotary_definition(positions, q, head_size, cache, is_neox, inverse=inverse)
    expected_k = rotary_definition(positions, k, head_size, cache, is_neox, inverse=inverse)
    # the two stock definitions (element by element; vectorized, for the
    # gradients below) agree
    for t, want in ((q, expected_q), (k, expected_k)):
        vectorized = fused_oracles.rotary(positions, t, head_size, cache, is_neox, 0, inverse)
        assert_matches(vectorized, want, device="cpu", exact=True)
    qc, kc = q.clone(), k.clone()
    ops.rotary_embedding(positions, qc, kc, head_size, cache, is_neox, inverse=inverse)
    assert_matches(qc, expected_q, device="cpu", exact=True)
    assert_matches(kc, expected_k, device="cpu", exact=True)
    qi, ki = q.to(DEVICE), k.to(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        ops.rotary_embedding(
            positions.to(DEVICE), qi, ki, head_size, cache.to(DEVICE), is_neox, inverse=inverse
        )
    assert_matches(qi, expected_q, exact=True)
    assert_matches(ki, expected_k, exact=True)


@pytest.mark.parametrize("position", [4, -1], ids=["past-the-end", "negative"])
def test_rotary_position_outside_the_cache_is_an_index_error(position: int) -> None:
    """A position outside the cos_sin_cache's rows raises IndexError, as the
    CPU's row lookup does (``index_select``), on the CPU and on infini
    (native or in the fallback; raised by the stream's synchronize when it
    is asynchronous), never a read outside the table."""
    cache = rope_cache(4, 8)
    positions = torch.tensor([1, position])
    q = make_cpu((2, 8), torch.float32, seed=1)
    with pytest.raises(IndexError):
        ops.rotary_embedding(positions, q.clone(), None, 8, cache, True)
    with pytest.raises(IndexError), torch_infini.cpu_fallback.allowed("silent"):
        ops.rotary_embedding(positions.to(DEVICE), q.to(DEVICE), None, 8, cache.to(DEVICE), True)
        torch.infini.synchronize()


def test_rotary_partial_offset_batched_positions_and_views() -> None:
    """rot_dim < head_size at an offset (the rest untouched), [B, S]
    positions, a query that is a view into a fused qkv projection."""
    positions = torch.tensor([[0, 1, 2], [5, 6, 7]])
    head_size, rot, offset = 8, 4, 2
    cache = rope_cache(8, rot, torch.bfloat16)
    qkv = make_cpu((2, 3, 3 * 2 * head_size), torch.float32, seed=14)
    expected = qkv.clone()
    expected[..., : 2 * head_size] = rotary_definition(
        positions, qkv[..., : 2 * head_size], head_size, cache, False, offset
    )
    on_device = qkv.to(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        ops.rotary_embedding(
            positions.to(DEVICE),
            on_device[..., : 2 * head_size],
            None,
            head_size,
            cache.to(DEVICE),
            False,
            offset,
        )
    # in place through the view; dimensions outside [offset, offset + rot)
    # and the k, v parts of the projection untouched (the definition keeps them)
    assert_matches(on_device, expected, exact=True)
    assert torch.equal(expected[..., :offset], qkv[..., :offset])


ROTARY_SERVED = torch_infini.supported_dtypes("infini::rotary_embedding")


@pytest.mark.parametrize("dtype", ROTARY_SERVED, ids=str)
def test_rotary_runs_natively_where_the_backend_serves_it(dtype: torch.dtype) -> None:
    """A served dtype (host: InfiniOps' accelerator dtypes, run by the CPU
    kernel on the device memory) runs with the fallback off, query and key
    in the layouts models give it: [B, S] positions, a query [B, S, heads,
    d] (a projection's output viewed per head), a key of fewer heads cut
    from a fused key-value projection; a cache in another served dtype."""
    positions = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])
    cache = rope_cache(8, 8, torch.float32 if dtype != torch.float32 else torch.bfloat16)
    q = make_cpu((2, 4, 32), dtype, seed=31).view(2, 4, 4, 8)
    kv = make_cpu((2, 4, 2, 2, 8), dtype, seed=32)  # [B, S, k|v, kv_heads, d]
    k = kv[:, :, 0]
    want_q = rotary_definition(positions, q, 8, cache, True)
    want_k = rotary_definition(positions, k, 8, cache, True)
    q_dev = q.to(DEVICE)
    kv_dev = kv.to(DEVICE)
    torch_infini.cpu_fallback.reset_stats()
    with torch_infini.cpu_fallback.strict():
        ops.rotary_embedding(
            positions.to(DEVICE), q_dev, kv_dev[:, :, 0], 8, cache.to(DEVICE), True
        )
    assert torch_infini.cpu_fallback.stats() == {}
    # host runs the CPU kernel: bit for bit (assert_matches); InfiniOps'
    # kernel: PyTorch's tolerances for the dtype.
    assert_matches(q_dev, want_q)
    assert_matches(kv_dev[:, :, 0], want_k)
    assert torch.equal(kv_dev[:, :, 1].cpu(), kv[:, :, 1])  # the values: untouched


@pytest.mark.parametrize(
    "case",
    ["int32 positions", "strided head dimension", "unevenly strided tokens"],
)
def test_rotary_layouts_the_kernel_does_not_take_run_in_the_fallback(case: str) -> None:
    """The kernel's contract (InfiniOps indexes token i at i * stride, with
    int64 positions and a unit stride within a head): other layouts are
    refused to the CPU fallback, which gives the same result."""
    if torch.float32 not in ROTARY_SERVED:
        pytest.skip("the backend serves no float32 rotary_embedding: every call falls back")
    positions = torch.tensor([[0, 1, 2], [3, 4, 5]])
    cache = rope_cache(6, 8)
    q = make_cpu((2, 3, 2, 8), torch.float32, seed=33)
    reason = "int64 positions"
    if case == "int32 positions":
        positions = positions.int()
    elif case == "strided head dimension":
        q = make_cpu((2, 3, 2, 16), torch.float32, seed=33)[..., ::2]
        reason = "unit stride in the last dimension"
    else:  # tokens of batch 1 do not follow batch 0's at S token strides
        q = make_cpu((2, 5, 2, 8), torch.float32, seed=33)[:, :3]
        reason = "evenly strided tokens"
    want = rotary_definition(positions, q, 8, cache, True)
    q_dev = q.to(DEVICE) if q.is_contiguous() else _same_view_on_device(q)
    assert q_dev.stride() == q.stride()
    torch_infini.cpu_fallback.reset_stats()
    with torch_infini.cpu_fallback.allowed("silent"):
        ops.rotary_embedding(positions.to(DEVICE), q_dev, None, 8, cache.to(DEVICE), True)
    assert_matches(q_dev, want, exact=True)
    assert "infini::rotary_embedding" in torch_infini.cpu_fallback.stats()
    with (
        torch_infini.cpu_fallback.strict(),
        raises_exactly(NotImplementedError, match=reason),
    ):
        ops.rotary_embedding(positions.to(DEVICE), q_dev, None, 8, cache.to(DEVICE), True)


def _same_view_on_device(view: torch.Tensor) -> torch.Tensor:
    """``view`` on infini with its strides and offset, in a copy of its base."""
    base = view._base if view._base is not None else view
    on_device = base.to(DEVICE)
    return on_device.as_strided(view.size(), view.stride(), view.storage_offset())


def test_rotary_embedding_functional_rotates_a_contiguous_copy() -> None:
    """The compiled graphs' form: a new contiguous tensor (the kernel's
    layout, whatever the query's), the query untouched, the result the
    in-place operator's."""
    positions = torch.tensor([[0, 1, 2], [3, 4, 5]])
    cache = rope_cache(6, 8)
    q = make_cpu((2, 2, 3, 8), torch.float32, seed=34).transpose(1, 2)  # [B, S, heads, d] view
    want = rotary_definition(positions, q, 8, cache, True)
    for device in ("cpu", DEVICE):
        q_in = q.to(device) if device == "cpu" else _same_view_on_device(q)
        with torch_infini.cpu_fallback.allowed("silent"):
            got = torch.ops.infini.rotary_embedding_functional(
                positions.to(device), q_in, 8, cache.to(device), True
            )
        assert_matches(got, want, device=device)
        assert got.is_contiguous()
        assert torch.equal(q_in.cpu(), q)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_embedding_functional_gradients(dtype: torch.dtype) -> None:
    """The query's gradient against PyTorch's autograd through the stock
    rotation (fused_oracles.rotary), on the CPU and on infini (PyTorch's
    tolerances: the inverse rotation in float against the adjoint of each
    product); in float64 also gradcheck and gradgradcheck (its backward is
    the operator again)."""
    positions = torch.tensor([[0, 3], [1, 5]])
    cache = rope_cache(6, 8)
    q = make_cpu((2, 2, 3, 8), dtype, seed=35)  # [B, S, heads, d]
    g = make_cpu((2, 2, 3, 8), dtype, seed=36)

    def grad(device: str | torch.device, rotate: Callable[..., torch.Tensor]) -> torch.Tensor:
        qa = q.clone().to(device).requires_grad_()
        rotate(positions.to(device), qa, cache.to(device)).backward(g.to(device))
        assert qa.grad is not None
        return qa.grad

    want = grad("cpu", lambda p, qa, c: fused_oracles.rotary(p, qa, 8, c, True))
    for device in ("cpu", DEVICE):
        with torch_infini.cpu_fallback.allowed("silent"):
            got = grad(device, lambda p, qa, c: ops.rotary_embedding_functional(p, qa, 8, c, True))
        assert got.device.type == torch.device(device).type
        torch.testing.assert_close(got.cpu(), want)
    if dtype == torch.float64:
        q64 = q.clone().requires_grad_()
        table = cache.double()
        fn = lambda t: ops.rotary_embedding_functional(positions, t, 8, table, True)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (q64,))
        assert torch.autograd.gradgradcheck(fn, (q64,))


def test_rotary_embedding_functional_refuses_a_cache_gradient() -> None:
    cache = rope_cache(4, 8).requires_grad_()
    with raises_exactly(RuntimeError, match="cos_sin_cache is a constant table"):
        ops.rotary_embedding_functional(torch.arange(2), torch.ones(2, 1, 8), 8, cache, True)


def test_rotary_inverse_undoes_it() -> None:
    positions = torch.arange(6)
    cache = rope_cache(6, 16, torch.float64)
    q = make_cpu((6, 2, 16), torch.float64, seed=15)
    turned = q.clone()
    ops.rotary_embedding(positions, turned, None, 16, cache, True)
    assert not torch.allclose(turned, q)
    ops.rotary_embedding(positions, turned, None, 16, cache, True, inverse=True)
    torch.testing.assert_close(turned, q)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_apply_rotary_embedding_gradients(dtype: torch.dtype, is_neox: bool) -> None:
    """Gradients of query and key (fewer heads, split layout) against
    PyTorch's autograd through the stock rotation (fused_oracles.rotary), on
    the CPU and on infini. Tolerances: PyTorch's defaults for the dtype (the
    fused backward is the inverse rotation in float, autograd the adjoint of
    each product: the same float operations up to their order, one rounding)."""
    positions = torch.tensor([1, 4, 0])
    cache = rope_cache(6, 8)
    q, k = make_cpu((3, 2 * 8), dtype, seed=16), make_cpu((3, 1, 8), dtype, seed=17)
    gq, gk = make_cpu((3, 16), dtype, seed=18), make_cpu((3, 1, 8), dtype, seed=19)

    def run(device: str | torch.device, rotate: Callable[..., Any]) -> tuple[torch.Tensor, ...]:
        qa = q.detach().clone().to(device).requires_grad_()
        ka = k.detach().clone().to(device).requires_grad_()
        outputs = rotate(positions.to(device), qa, ka, cache.to(device))
        torch.autograd.backward(list(outputs), [gq.to(device), gk.to(device)])
        assert qa.grad is not None and ka.grad is not None
        return qa.grad, ka.grad

    def stock(p: torch.Tensor, qa: torch.Tensor, ka: torch.Tensor, c: torch.Tensor) -> tuple:
        return tuple(fused_oracles.rotary(p, t, 8, c, is_neox) for t in (qa, ka))

    def fused(p: torch.Tensor, qa: torch.Tensor, ka: torch.Tensor, c: torch.Tensor) -> tuple:
        return ops.apply_rotary_embedding(p, qa, ka, 8, c, is_neox)

    want = run("cpu", stock)
    cpu_grads = run("cpu", fused)
    with torch_infini.cpu_fallback.allowed("silent"):
        infini_grads = run(DEVICE, fused)
    for name, w, c, i in zip(("query", "key"), want, cpu_grads, infini_grads, strict=True):
        torch.testing.assert_close(c, w, msg=lambda m, n=name: f"CPU {n}: {m}")
        assert i.device.type == "infini"
        torch.testing.assert_close(i.cpu(), w, msg=lambda m, n=name: f"infini {n}: {m}")
    if dtype == torch.float64:
        doubles = (q.clone().requires_grad_(), k.clone().requires_grad_())
        assert torch.autograd.gradcheck(
            lambda a, b: ops.apply_rotary_embedding(positions, a, b, 8, cache.double(), is_neox),
            doubles,
        )


# ---------------------------------------------------------------- schemas


def test_opcheck() -> None:
    """Schemas (what is mutated), Meta kernels and fake tensors, on CPU tensors."""
    x, r, w = torch.randn(3, 8), torch.randn(3, 8), torch.randn(8)
    torch.library.opcheck(torch.ops.infini.rms_norm.default, (x, w, 1e-6))
    torch.library.opcheck(torch.ops.infini.add_rms_norm.default, (x, r, w, 1e-6))
    torch.library.opcheck(
        torch.ops.infini.fused_add_rms_norm.default, (x.clone(), r.clone(), w, 1e-6)
    )
    torch.library.opcheck(
        torch.ops.infini.rotary_embedding.default,
        (
            torch.arange(3),
            torch.randn(3, 16),
            torch.randn(3, 8),
            8,
            rope_cache(4, 8),
            True,
            0,
            False,
        ),
    )


def test_meta_shapes() -> None:
    meta = torch.device("meta")
    out, res = ops.add_rms_norm(
        torch.empty(2, 3, 8, device=meta),
        torch.empty(2, 3, 8, device=meta),
        torch.empty(8, device=meta),
    )
    assert out.shape == res.shape == (2, 3, 8) and out.device == meta
