"""Helpers shared by the torch_infini tests (imported by conftest.py and the tests)."""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch_infini

TWO_DEVICES_REASON = "needs 2 infini devices (set TORCH_INFINI_HOST_DEVICES=2)"
ASYNC_HOST_REASON = (
    "needs truly asynchronous streams: the 'host' backend with TORCH_INFINI_HOST_ASYNC=1"
)
FALLBACK_OFF_REASON = (
    "runs with the CPU fallback off (torch_infini.cpu_fallback.strict()): asserts a refusal"
)


INDUCTOR_REASON = (
    "no compiler plug-in serves this device type: torch.compile runs its graphs with "
    "aot_eager, Inductor generates no kernels"
)


def inductor_serves_infini() -> bool:
    """Whether torch.compile's Inductor generates kernels for infini here: the
    device type has a compiler plug-in (the host device in both memory modes
    and InfiniRT cpu: the built-in cpu plug-in; NVIDIA: the nvidia one)."""
    from torch_infini import _compile_fallback

    return _compile_fallback.inductor_serves_infini()


requires_inductor = pytest.mark.skipif(not inductor_serves_infini(), reason=INDUCTOR_REASON)


def has_two_devices() -> bool:
    return torch.infini.device_count() >= 2


def has_async_host() -> bool:
    return torch_infini.backend() == "host" and os.environ.get("TORCH_INFINI_HOST_ASYNC") == "1"


requires_two_devices = pytest.mark.requires_two_devices
requires_async_host = pytest.mark.requires_async_host
# A test asserting a refusal (NotImplementedError for an operator, dtype or
# shape without an infini kernel): conftest.py runs it in a strict region.
fallback_off = pytest.mark.fallback_off


def register_markers(config: pytest.Config) -> None:
    """The suite's markers, for both conftests (tests/python, tests/conformance):
    CI's passes select them by name."""
    for name, reason in (
        ("requires_two_devices", TWO_DEVICES_REASON),
        ("requires_async_host", ASYNC_HOST_REASON),
        ("fallback_off", FALLBACK_OFF_REASON),
    ):
        config.addinivalue_line("markers", f"{name}: {reason}")


def skip_unless_configured(item: pytest.Item) -> None:
    """Skips a test marked for two devices or async streams where this
    run's configuration has neither (the reason says which to set)."""
    if item.get_closest_marker("requires_two_devices") is not None and not has_two_devices():
        pytest.skip(TWO_DEVICES_REASON)
    if item.get_closest_marker("requires_async_host") is not None and not has_async_host():
        pytest.skip(ASYNC_HOST_REASON)


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


_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bit_patterns(t: torch.Tensor) -> torch.Tensor:
    """The stored bit patterns of ``t``'s values (conj/neg bits resolved first)."""
    t = t.resolve_conj().resolve_neg()
    if t.dtype.is_complex:
        t = torch.view_as_real(t)
    if t.dtype.is_floating_point:
        t = t.view(_SAME_WIDTH_INT[t.element_size()])
    return t


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """``actual`` (any device) equals the CPU oracle bit for bit.

    Same shape and dtype, and every value has the same bit pattern: -0.0 is
    not +0.0, NaN equals NaN only with the same payload. ``torch.equal``
    would accept a lost sign of zero and refuse every NaN.
    """
    assert expected.device.type == "cpu"
    got = actual.cpu() if actual.device.type != "cpu" else actual
    assert got.shape == expected.shape, f"shape {tuple(got.shape)} != {tuple(expected.shape)}"
    assert got.dtype == expected.dtype, f"dtype {got.dtype} != {expected.dtype}"
    got_bits, want_bits = bit_patterns(got), bit_patterns(expected)
    if not torch.equal(got_bits, want_bits):
        diff = (got_bits != want_bits).reshape(-1)
        if got.dtype.is_complex:  # real/imag pairs
            diff = diff.reshape(-1, 2).any(dim=1)
        where = diff.nonzero().reshape(-1)[:5].tolist()
        flat_got = got.resolve_conj().resolve_neg().reshape(-1)
        flat_want = expected.resolve_conj().resolve_neg().reshape(-1)
        pairs = ", ".join(f"[{i}] {flat_got[i].item()!r} != {flat_want[i].item()!r}" for i in where)
        raise AssertionError(
            f"not bit-for-bit equal: {int(diff.sum())} of {got.numel()} elements differ; "
            f"first: {pairs}"
        )


def assert_equal_cpu(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """``actual`` (any device) equals the CPU oracle in shape, dtype and bits."""
    assert_bitwise_equal(actual, expected)


@contextmanager
def raises_exactly(
    exc_type: type[BaseException], match: str
) -> Iterator[pytest.ExceptionInfo[BaseException]]:
    """``pytest.raises(exc_type, match=match)`` that refuses subclasses.

    ``pytest.raises(RuntimeError)`` also passes on NotImplementedError ("no
    kernel"), torch.AcceleratorError or OutOfMemoryError: it proves nothing
    about which error was raised.
    """
    with pytest.raises(exc_type, match=match) as info:
        yield info
    assert type(info.value) is exc_type, (
        f"raised {type(info.value).__name__}, expected exactly {exc_type.__name__}: {info.value}"
    )


@contextmanager
def forced_staging(on: bool = True) -> Iterator[None]:
    """The CPU fallback staged through pinned memory (as where the CPU cannot
    address device memory) inside the block; off: the block as it is."""
    if not on:
        yield
        return
    torch_infini._C._set_fallback_staging_forced(True)
    try:
        yield
    finally:
        torch_infini._C._set_fallback_staging_forced(False)


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


def private_inductor_cache(directory: Path) -> dict[str, str]:
    """``run_python``'s environment for a process that compiles into an
    Inductor cache of its own, ``directory``. Inductor would first
    precompile its kernels' common header there (15 s on CI's machine, for
    the one or two kernels such a process compiles): the header is compiled
    into each kernel instead."""
    return {
        "TORCHINDUCTOR_CACHE_DIR": str(directory),
        "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0",
    }


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit status {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"


def cpu_fallback_mode_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Both suites' autouse fixture: ``fallback_off`` tests run in a strict
    region; no test may leave the CPU fallback mode changed.

    Only the mode is checked (and put back after a failure, so one leak does
    not fail every later test); allow/deny lists and stats are left alone.
    """
    before = torch_infini.cpu_fallback.mode()
    strict = request.node.get_closest_marker("fallback_off") is not None
    expected = "off" if strict else before
    with torch_infini.cpu_fallback.strict() if strict else nullcontext():
        yield
        left = torch_infini.cpu_fallback.mode()
    if left != expected:
        torch_infini.cpu_fallback.set_mode(before)
        pytest.fail(f"the test changed the CPU fallback mode from {expected!r} to {left!r}")


@functools.cache
def llama_example() -> ModuleType:
    """The main job's model, examples/llama.py, imported once."""
    path = Path(__file__).resolve().parents[2] / "examples" / "llama.py"
    spec = importlib.util.spec_from_file_location("llama_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def configure_cmake_probe(
    project: Path, body: str, *defines: str, languages: str = "NONE"
) -> subprocess.CompletedProcess[str]:
    """Configures a probe CMake project in ``project`` (created; its build
    tree beside it) that can include the repository's cmake/ modules and
    whose CMakeLists.txt ends with ``body``."""
    cmake = shutil.which("cmake")
    assert cmake, "cmake is a build requirement of the project"
    repo_cmake = Path(__file__).resolve().parents[2] / "cmake"
    project.mkdir(exist_ok=True)
    (project / "CMakeLists.txt").write_text(
        f"cmake_minimum_required(VERSION 3.18)\nproject(probe {languages})\n"
        f'list(APPEND CMAKE_MODULE_PATH "{repo_cmake}")\n' + body
    )
    return subprocess.run(
        [cmake, "-S", str(project), "-B", str(project.parent / "build"), *defines],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def build_cmake_probe(project: Path) -> subprocess.CompletedProcess[str]:
    """Builds a probe configured by ``configure_cmake_probe(project, ...)``."""
    return subprocess.run(
        [shutil.which("cmake") or "cmake", "--build", str(project.parent / "build")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
