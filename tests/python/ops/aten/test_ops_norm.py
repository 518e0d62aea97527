"""rms_norm (F.rms_norm, nn.RMSNorm) on infini against the CPU oracle."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
import torch_infini
from infini_testing import fallback_off
from op_helpers import (
    DEVICE,
    FLOAT_DTYPES,
    ViewFn,
    assert_matches,
    expect_kernel,
    identity,
    pair,
    raises_exactly,
    requires_two_devices,
    runs_cpu_kernels,
)

# On host rms_norm runs the CPU's own at::rms_norm: bit for bit (assert_matches).
# Elsewhere (InfiniOps) the sum of squares is reduced in another order and rsqrt
# is the device's own: a few float32 ulps, above assert_close's rtol of 1.3e-6.
NORM_TOL: dict[str, object] = {} if runs_cpu_kernels() else {"rtol": 1e-5, "atol": 1e-5}
F32 = torch.float32
EPS_VALUES = [None, 1e-6, 0.5]


@pytest.mark.parametrize("eps", EPS_VALUES, ids=str)
@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no weight"])
@pytest.mark.parametrize(
    "shape", [(4, 16), (2, 3, 16), (1, 1), (5, 1), (2, 1, 7), (3, 257)], ids=str
)
def test_functional(shape: tuple[int, ...], with_weight: bool, eps: float | None) -> None:
    x_cpu, x = pair(shape, F32, seed=1)
    n = shape[-1]
    w_cpu, w = pair((n,), F32, seed=2) if with_weight else (None, None)
    expected = F.rms_norm(x_cpu, (n,), w_cpu, eps)
    assert_matches(F.rms_norm(x, (n,), w, eps), expected, **NORM_TOL)
    assert_matches(F.rms_norm(x, [n], weight=w, eps=eps), expected, **NORM_TOL)
    assert_matches(x, x_cpu, exact=True)


def test_small_values_where_eps_matters() -> None:
    x_cpu = torch.tensor([[1e-4, -2e-4, 3e-4], [0.0, 0.0, 0.0]])
    x = x_cpu.to(DEVICE)
    for eps in (None, 1e-8, 1e-6):
        assert_matches(F.rms_norm(x, (3,), eps=eps), F.rms_norm(x_cpu, (3,), eps=eps), **NORM_TOL)


def test_scale_of_rows_does_not_matter() -> None:
    x_cpu, x = pair((3, 8), F32, seed=3)
    for scale in (1e-3, 1.0, 1e3):
        got = F.rms_norm(x * scale, (8,), eps=0.0)
        assert_matches(got, F.rms_norm(x_cpu * scale, (8,), eps=0.0), **NORM_TOL)


def _t01(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(0, 1)


def _t_last(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(-1, -2)


def _rows_step(t: torch.Tensor) -> torch.Tensor:
    return t[::2]


def _cols_step(t: torch.Tensor) -> torch.Tensor:
    return t[..., ::2]


def _offset(t: torch.Tensor) -> torch.Tensor:
    return t[1:, 2:-1]


def _expand(t: torch.Tensor) -> torch.Tensor:
    return t[:1].expand(4, t.shape[1])


NON_CONTIGUOUS: dict[str, tuple[tuple[int, ...], ViewFn]] = {
    "3-D batch/seq swapped": ((3, 2, 16), _t01),
    "2-D transposed (normalized dim strided)": ((16, 4), _t_last),
    "3-D last two transposed": ((2, 16, 5), _t_last),
    "every 2nd row": ((8, 16), _rows_step),
    "every 2nd column": ((4, 32), _cols_step),
    "offset block": ((5, 19), _offset),
    "expanded rows": ((4, 16), _expand),
}


@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no weight"])
@pytest.mark.parametrize("layout", list(NON_CONTIGUOUS), ids=str)
def test_non_contiguous_input(layout: str, with_weight: bool) -> None:
    shape, view = NON_CONTIGUOUS[layout]
    x_cpu, x = pair(shape, F32, seed=4, view=view)
    n = x.shape[-1]
    w_cpu, w = pair((n,), F32, seed=5) if with_weight else (None, None)
    # With the normalized dim strided, host first copies the rows to stride 1
    # (the kernels take unit-stride rows): the CPU oracle reduces the strided
    # rows in another order, so the same at::rms_norm is not bit-identical.
    same_kernel = x.stride(-1) == 1
    assert_matches(
        F.rms_norm(x, (n,), w), F.rms_norm(x_cpu, (n,), w_cpu), same_kernel=same_kernel, **NORM_TOL
    )
    assert_matches(x, x_cpu, exact=True)


def test_non_contiguous_weight() -> None:
    x_cpu, x = pair((3, 8), F32, seed=6)
    w_cpu, w = pair((16,), F32, seed=7, view=lambda t: t[::2])
    assert_matches(F.rms_norm(x, (8,), w), F.rms_norm(x_cpu, (8,), w_cpu), **NORM_TOL)


def test_empty_input() -> None:
    for shape in ((0, 8), (2, 0, 8)):
        x_cpu, x = pair(shape, F32, seed=8)
        assert_matches(F.rms_norm(x, (8,)), F.rms_norm(x_cpu, (8,)), **NORM_TOL)


@pytest.mark.parametrize("eps", [None, 1e-5], ids=str)
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no affine"])
@pytest.mark.parametrize("shape", [(6, 32), (2, 5, 32)], ids=str)
def test_module(shape: tuple[int, ...], affine: bool, eps: float | None) -> None:
    torch.manual_seed(0)
    ref = torch.nn.RMSNorm(32, eps=eps, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            ref.weight.copy_(torch.randn(32))
    mod = torch.nn.RMSNorm(32, eps=eps, elementwise_affine=affine)
    mod.load_state_dict(ref.state_dict())
    mod = mod.to(DEVICE)
    if affine:
        assert mod.weight.device.type == "infini"
    x_cpu, x = pair(shape, F32, seed=9)
    with torch.no_grad():
        assert_matches(mod(x), ref(x_cpu), **NORM_TOL)


# ------------------------------------------------------------ refusals


@fallback_off
@pytest.mark.parametrize(
    ("shape", "normalized"),
    [((2, 3, 4, 8), (8,)), ((8,), (8,)), ((2, 3, 4, 8), (4, 8))],
    ids=["4-D", "1-D", "4-D two dims"],
)
def test_rank_refused(shape: tuple[int, ...], normalized: tuple[int, ...]) -> None:
    F.rms_norm(torch.ones(shape), normalized)  # fine on the CPU
    x = torch.ones(shape, device=DEVICE)
    with pytest.raises(NotImplementedError, match="rms_norm"):
        F.rms_norm(x, normalized)
    with pytest.raises(NotImplementedError, match="rms_norm"):
        torch.nn.RMSNorm(normalized).to(DEVICE)(x)


@fallback_off
@pytest.mark.parametrize("shape", [(3, 4, 8), (4, 8)], ids=str)
def test_two_normalized_dims_refused(shape: tuple[int, ...]) -> None:
    normalized = shape[-2:]
    F.rms_norm(torch.ones(shape), normalized)  # fine on the CPU
    with pytest.raises(NotImplementedError, match="normalized"):
        F.rms_norm(torch.ones(shape, device=DEVICE), normalized)
    with pytest.raises(NotImplementedError, match="rms_norm"):
        F.rms_norm(
            torch.ones(shape, device=DEVICE), normalized, torch.ones(normalized, device=DEVICE)
        )


# Reduced precision off host: InfiniOps computes in float and rounds once;
# PyTorch's CPU rounds the normalized value, then the product with the weight.
REDUCED_TOL = {"rtol": 1.6e-2, "atol": 1e-2}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_every_float_dtype_native_or_refused(dtype: torch.dtype) -> None:
    """Native where the backend declares the dtype (InfiniOps' rms_norm takes
    float16 and bfloat16 too), else refused with the fallback off."""
    x_cpu, x = pair((3, 16), dtype, seed=14)
    w_cpu, w = pair((16,), dtype, seed=15)
    tol = REDUCED_TOL if dtype in (torch.float16, torch.bfloat16) else NORM_TOL
    with expect_kernel("rms_norm", dtype):
        assert_matches(F.rms_norm(x, (16,)), F.rms_norm(x_cpu, (16,)), **tol)
        assert_matches(F.rms_norm(x, (16,), w, 1e-5), F.rms_norm(x_cpu, (16,), w_cpu, 1e-5), **tol)
        with torch.no_grad():
            module = torch.nn.RMSNorm(16, dtype=dtype)
            expected = module(x_cpu)
            assert_matches(module.to(DEVICE)(x), expected, **tol)


@fallback_off
def test_weight_dtype_refused() -> None:
    x = torch.ones(3, 8, device=DEVICE)
    with pytest.raises(NotImplementedError, match="rms_norm"):
        F.rms_norm(x, (8,), torch.ones(8, dtype=torch.float64, device=DEVICE))


# (input shape, dtype, normalized shape, weight dtype or None)
NormCall = tuple[tuple[int, ...], torch.dtype, tuple[int, ...], torch.dtype | None]
# Every call the refusal tests above make: with the fallback on, the CPU's result.
REFUSED_CALLS: dict[str, NormCall] = {
    "4-D": ((2, 3, 4, 8), F32, (8,), None),
    "4-D weight": ((2, 3, 4, 8), F32, (8,), F32),
    "1-D": ((8,), F32, (8,), None),
    "1-D weight": ((8,), F32, (8,), F32),
    "4-D two dims": ((2, 3, 4, 8), F32, (4, 8), None),
    "4-D two dims weight": ((2, 3, 4, 8), F32, (4, 8), F32),
    "3-D two dims": ((3, 4, 8), F32, (4, 8), None),
    "3-D two dims weight": ((3, 4, 8), F32, (4, 8), F32),
    "2-D two dims": ((4, 8), F32, (4, 8), None),
    "2-D two dims weight": ((4, 8), F32, (4, 8), F32),
    "float64": ((3, 8), torch.float64, (8,), None),
    "float64 weight": ((3, 8), torch.float64, (8,), torch.float64),
    "float64 weight, float32 input": ((3, 8), F32, (8,), torch.float64),
}


# PyTorch warns of the mixed dtypes on the CPU (and so in the fallback) alike
@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight:UserWarning")
@pytest.mark.parametrize("case", list(REFUSED_CALLS), ids=str)
def test_refused_calls_fall_back_to_the_cpu(case: str) -> None:
    shape, dtype, normalized, weight_dtype = REFUSED_CALLS[case]
    x_cpu, x = pair(shape, dtype, seed=12)
    w_cpu, w = pair(normalized, weight_dtype, seed=13) if weight_dtype else (None, None)
    expected = F.rms_norm(x_cpu, normalized, w_cpu)
    with torch_infini.cpu_fallback.allowed("silent"):
        result = F.rms_norm(x, normalized, w)
    assert_matches(result, expected, exact=True)


def test_shape_errors() -> None:
    for dev in ("cpu", DEVICE):
        x = torch.ones(2, 3, 8, device=dev)
        with raises_exactly(RuntimeError, match=r"Given normalized_shape=\[4\], expected input"):
            F.rms_norm(x, (4,))
        # CPU: "Expected weight to be of same shape as normalized_shape";
        # infini: "rms_norm: expected weight of shape [8], got [4]"
        with raises_exactly(RuntimeError, match=r"(?i)expected weight (to be )?of (same )?shape"):
            F.rms_norm(x, (8,), torch.ones(4, device=dev))


def test_cpu_weight_refused() -> None:
    # infini's own wording, or the one PyTorch uses on CUDA
    match = (
        "rms_norm: expected weight to be an infini tensor, got a tensor on cpu"
        "|Expected all tensors to be on the same device"
    )
    with raises_exactly(RuntimeError, match=match):
        F.rms_norm(torch.ones(3, 8, device=DEVICE), (8,), torch.ones(8))


@requires_two_devices
def test_second_device() -> None:
    torch.infini.set_device(0)
    dev = "infini:1"
    x_cpu, x = pair((2, 3, 16), F32, seed=10, view=identity, device=dev)
    w_cpu, w = pair((16,), F32, seed=11, device=dev)
    assert_matches(F.rms_norm(x, (16,), w), F.rms_norm(x_cpu, (16,), w_cpu), device=dev, **NORM_TOL)
    mod = torch.nn.RMSNorm(16).to(dev)
    with torch.no_grad():
        assert_matches(mod(x), F.rms_norm(x_cpu, (16,)), device=dev, **NORM_TOL)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        F.rms_norm(x, (16,), w.to("infini:0"))


@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad mode", "no_grad"])
@pytest.mark.parametrize("dual", ["input", "weight"], ids=str)
def test_forward_mode_tangents(dual: str, grad_mode: bool) -> None:
    """Forward mode works with grad mode off too: a dual operand takes
    PyTorch's decomposition, whose operators carry their tangents, and never
    the kernel, which would drop them silently."""
    x_cpu, x = pair((4, 8), F32, seed=16)
    w_cpu, w = pair((8,), F32, seed=17)
    tangent_cpu, tangent = pair((4, 8) if dual == "input" else (8,), F32, seed=18)

    def jvp(x: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.set_grad_enabled(grad_mode), fwAD.dual_level():
            if dual == "input":
                x = fwAD.make_dual(x, t)
            else:
                w = fwAD.make_dual(w, t)
            primal, out_tangent = fwAD.unpack_dual(F.rms_norm(x, (8,), w))
            assert out_tangent is not None, "the tangent went missing"
            return primal, out_tangent

    primal_cpu, out_tangent_cpu = jvp(x_cpu, w_cpu, tangent_cpu)
    with torch_infini.cpu_fallback.allowed("silent"):  # the decomposition's rsqrt
        primal, out_tangent = jvp(x, w, tangent)
    assert_matches(primal, primal_cpu, **NORM_TOL)
    assert_matches(out_tangent, out_tangent_cpu, **NORM_TOL)
