"""Helpers shared by the torch_infini tests (imported by conftest.py and the tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

import pytest
import torch
import torch_infini

TWO_DEVICES_REASON = "needs 2 infini devices (set TORCH_INFINI_HOST_DEVICES=2)"
ASYNC_HOST_REASON = (
    "needs truly asynchronous streams: the 'host' backend with TORCH_INFINI_HOST_ASYNC=1"
)


def has_two_devices() -> bool:
    return torch.infini.device_count() >= 2


def has_async_host() -> bool:
    return torch_infini.backend() == "host" and os.environ.get("TORCH_INFINI_HOST_ASYNC") == "1"


requires_two_devices = pytest.mark.requires_two_devices
requires_async_host = pytest.mark.requires_async_host


def invalid_device_index() -> int:
    """An index no configuration of the suite has: 7, or the count if larger."""
    return max(7, torch.infini.device_count())


# ---------------------------------------------------------------- data


ALL_DTYPES: list[torch.dtype] = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def make_cpu(shape: Sequence[int], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random CPU data covering the dtype's range (bit patterns matter for copies)."""
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=gen)
    if dtype.is_floating_point:
        return (torch.randn(shape, dtype=torch.float64, generator=gen) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, dtype=dtype, generator=gen)


def make_convertible(shape: Sequence[int], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """CPU data every dtype of ALL_DTYPES represents exactly: halves in [0, 100].

    Conversions of such values are fully defined (no overflow, no rounding
    mode, exact in float16/bfloat16), so any correct kernel agrees with CPU.
    """
    gen = torch.Generator().manual_seed(seed)
    halves = torch.randint(0, 201, tuple(shape), generator=gen, dtype=torch.int64)
    return (halves.to(torch.float64) / 2).to(dtype)


def assert_equal_cpu(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """``actual`` (any device) equals the CPU oracle in shape, dtype and values."""
    assert expected.device.type == "cpu"
    got = actual.cpu() if actual.device.type != "cpu" else actual
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)


# ---------------------------------------------------------------- subprocesses


def run_python(
    code: str,
    env: dict[str, str | None] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Runs ``python -c code`` with the current environment plus ``env``.

    A value of None removes the variable.
    """
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", code],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit status {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
