"""pytest configuration of the torch_infini Python suite.

The same suite runs against every configuration of the backend:

* the default host device (1 device, inline streams),
* ``TORCH_INFINI_HOST_ASYNC=1 TORCH_INFINI_HOST_DEVICES=2`` (2 devices whose
  streams run work on worker threads, so ordering bugs show up),
* a real InfiniRT backend (possibly 1 device, possibly without async streams).

Tests that need more than one device or truly asynchronous streams carry the
``requires_two_devices`` / ``requires_async_host`` markers (see
infini_testing.py) and are skipped with a reason elsewhere; nothing else is
skipped.

Every test runs with the CPU fallback's default policy ("warn": operators and
calls without an infini kernel run on the CPU), except tests marked
``fallback_off``: they assert a refusal (NotImplementedError for an operator,
dtype or shape without a kernel) and run inside
``torch_infini.cpu_fallback.strict()``. No test may leave the mode changed.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, settings
from infini_testing import cpu_fallback_mode_guard, register_markers, skip_unless_configured

# The report tools (tools/), which also import PyTorch's own test data
# (op_coverage.torch_testing_internal), as in the conformance suite.
_TOOLS = str(Path(__file__).resolve().parents[2] / "tools")
if _TOOLS not in sys.path:
    sys.path.insert(0, _TOOLS)

# Fixed, bounded property tests: the same examples on every run, no example
# database written into the checkout, no deadline (copies may be slow on CI).
settings.register_profile(
    "torch_infini",
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("torch_infini")


def pytest_configure(config: pytest.Config) -> None:
    register_markers(config)
    config.addinivalue_line(
        "markers", "fuzz: the untrusted-input fuzzer (TORCH_INFINI_FUZZ_CASES sets its size)"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    skip_unless_configured(item)


@pytest.fixture(scope="module")
def only_new_garbage_collected() -> Iterator[None]:
    """For a file whose tests collect garbage around each test
    (``pytestmark = pytest.mark.usefixtures("only_new_garbage_collected")``):
    what is alive when the file starts is collected once and frozen
    (``gc.freeze``) until it ends, so each ``gc.collect()`` there scans only
    the objects made since. A full collection in a worker holding PyTorch,
    Inductor, sympy and the OpInfo database takes 0.6 s. Not for the whole
    session: Python starts a full collection when the objects that survived
    since the last one outnumber a quarter of the older ones it tracks, and
    frozen ones are not counted, so full collections come more often (one
    Llama compile: 13 instead of 9, 12% more of its Python time)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture
def cached_blocks_released() -> Iterator[None]:
    """For a file whose tests measure the caching allocator
    (``pytestmark = pytest.mark.usefixtures("cached_blocks_released")``):
    what a test cached goes back to the device afterwards, so the next one
    starts from the same baseline."""
    yield
    gc.collect()
    torch.infini.empty_cache()


# Where a run's time goes, per file (CI's time limit; a cold run's compiles
# show up here): the seconds of each file's tests, setup and teardown
# included, summed over workers.
_seconds_per_file: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _seconds_per_file[path] = _seconds_per_file.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _seconds_per_file:
        return
    total = sum(_seconds_per_file.values())
    terminalreporter.section(f"seconds per file ({total:.0f} s of tests in all)")
    ranked = sorted(_seconds_per_file.items(), key=lambda item: -item[1])
    for path, seconds in ranked[:12]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {path}")


@pytest.fixture(autouse=True)
def _restore_infini_state() -> Iterator[None]:
    """Each test starts and ends on the same device with the same streams.

    Also drains every device, so work a test left queued never leaks into
    the next one.
    """
    count = torch.infini.device_count()
    device = torch.infini.current_device()
    streams = [torch.infini.current_stream(i) for i in range(count)]
    yield
    for stream in streams:
        torch.infini.set_stream(stream)
    torch.infini.set_device(device)
    for index in range(count):
        torch.infini.synchronize(index)


# fallback_off tests run with the CPU fallback off; no test leaks a mode change.
_cpu_fallback_mode = pytest.fixture(autouse=True)(cpu_fallback_mode_guard)
