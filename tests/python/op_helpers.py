"""Helpers for the operator tests (test_ops_*.py, test_modules.py, test_fallback_errors.py).

CPU results are the oracle: every test builds its inputs on the CPU, repeats
the same view operations on an ``infini`` copy of the same memory layout, and
compares results (values, and where PyTorch defines it, output strides).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch_infini  # noqa: F401  (registers the infini device)
from infini_testing import requires_two_devices  # noqa: F401  (re-exported for the op tests)

DEVICE = "infini"

ViewFn = Callable[[torch.Tensor], torch.Tensor]


def identity(t: torch.Tensor) -> torch.Tensor:
    return t


def make_cpu(shape: Sequence[int], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random CPU data in a range where add/mul/gemm of every dtype stay exact-ish.

    Integers are small (no overflow in a product or a sum with alpha <= 3),
    floats are standard normal times 4 (well inside float16's range).
    """
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=gen)
    if dtype.is_floating_point:
        return (torch.randn(shape, dtype=torch.float64, generator=gen) * 4).to(dtype)
    low = 0 if dtype == torch.uint8 else -8
    return torch.randint(low, 9, shape, dtype=dtype, generator=gen)


def pair(
    shape: Sequence[int],
    dtype: torch.dtype,
    seed: int = 0,
    view: ViewFn = identity,
    device: str = DEVICE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A CPU tensor and its infini twin: same values, same sizes and strides.

    ``view`` is applied to a contiguous base of ``shape`` on both sides, so
    slices, transposes and permutations give identical layouts.
    """
    base = make_cpu(shape, dtype, seed)
    cpu = view(base)
    dev = view(base.to(device))
    assert dev.shape == cpu.shape and dev.stride() == cpu.stride()
    return cpu, dev


def tolerances(dtype: torch.dtype) -> dict[str, float]:
    """rtol/atol for comparing a floating result with the CPU oracle; exact otherwise."""
    if dtype == torch.float16:
        return {"rtol": 1e-3, "atol": 1e-3}
    if dtype == torch.bfloat16:
        return {"rtol": 1.6e-2, "atol": 1e-2}
    if dtype == torch.float32:
        return {"rtol": 1.3e-6, "atol": 1e-5}
    if dtype == torch.float64:
        return {"rtol": 1e-7, "atol": 1e-7}
    return {"rtol": 0.0, "atol": 0.0}


def assert_matches(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    device: str | torch.device | None = DEVICE,
    exact: bool = False,
    check_stride: bool = False,
    **tols: float,
) -> None:
    """``actual`` (on ``device``) equals the CPU oracle ``expected``.

    Shapes and dtypes must match; values within the dtype's tolerance
    (``exact``: bit-for-bit, NaN equal to NaN); with ``check_stride`` also
    the strides.
    """
    assert expected.device.type == "cpu"
    if device is not None:
        want = torch.device(device)
        assert actual.device.type == want.type, f"result on {actual.device}, expected {want}"
        if want.index is not None:
            assert actual.device == want, f"result on {actual.device}, expected {want}"
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    if check_stride:
        assert actual.stride() == expected.stride(), (
            f"strides {actual.stride()} != CPU strides {expected.stride()} "
            f"for shape {tuple(expected.shape)}"
        )
    got = actual.cpu()
    if exact:
        tols = {"rtol": 0.0, "atol": 0.0}
    elif not tols:
        tols = tolerances(expected.dtype)
    torch.testing.assert_close(got, expected, equal_nan=True, **tols)


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)

# (operator, dtype) pairs the suite expects an infini kernel for, on every
# backend it runs on; test_operator_table.py checks the product declares them.
KERNEL_DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    "add": FLOAT_DTYPES + INT_DTYPES,
    "mul": FLOAT_DTYPES + INT_DTYPES,
    "relu": FLOAT_DTYPES + INT_DTYPES,
    "silu": FLOAT_DTYPES,
    "mm": (torch.float32,),
    "bmm": (torch.float32,),
    "addmm": (torch.float32,),
    "rms_norm": (torch.float32,),
}
