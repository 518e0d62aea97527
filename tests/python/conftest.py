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

from collections.abc import Iterator
from contextlib import nullcontext

import pytest
import torch
import torch_infini  # registers the infini device
from hypothesis import HealthCheck, settings
from infini_testing import (
    ASYNC_HOST_REASON,
    FALLBACK_OFF_REASON,
    TWO_DEVICES_REASON,
    has_async_host,
    has_two_devices,
)

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
    config.addinivalue_line("markers", f"requires_two_devices: {TWO_DEVICES_REASON}")
    config.addinivalue_line("markers", f"requires_async_host: {ASYNC_HOST_REASON}")
    config.addinivalue_line("markers", f"fallback_off: {FALLBACK_OFF_REASON}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("requires_two_devices") is not None and not has_two_devices():
        pytest.skip(TWO_DEVICES_REASON)
    if item.get_closest_marker("requires_async_host") is not None and not has_async_host():
        pytest.skip(ASYNC_HOST_REASON)


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


@pytest.fixture(autouse=True)
def _cpu_fallback_mode(request: pytest.FixtureRequest) -> Iterator[None]:
    """``fallback_off`` tests run in a strict region; no test may leave the mode changed.

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
