"""pytest configuration of the torch.infini conformance suite.

The suite checks torch.infini against torch.cuda: the API profile
(api_profile.json), backend-neutral behaviour contracts (run on ``infini``
always and on ``cuda`` where CUDA is available) and operator results against
CPU on PyTorch's OpInfo samples. It runs in every configuration of the
backend (1 or 2 host devices, inline or asynchronous streams, InfiniRT).

The profile and operator-coverage logic lives in the repository's tools/
directory (shared with the report tools), which is put on sys.path here.

Every test runs with the CPU fallback's default policy, except tests marked
``fallback_off``: they assert a refusal and run inside
``torch_infini.cpu_fallback.strict()``. No test may leave the mode changed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
import torch
import torch_infini  # registers the infini device

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO_ROOT / "tools"
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

FALLBACK_OFF_REASON = (
    "runs with the CPU fallback off (torch_infini.cpu_fallback.strict()): asserts a refusal"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"fallback_off: {FALLBACK_OFF_REASON}")


def _device_modules() -> list[Any]:
    modules: list[Any] = [torch.infini]
    if torch.cuda.is_available():
        modules.append(torch.cuda)
    return modules


@pytest.fixture(autouse=True)
def _restore_device_state() -> Iterator[None]:
    """Each test starts and ends on the same devices and streams, with no work queued."""
    saved = []
    for module in _device_modules():
        count = module.device_count()
        saved.append(
            (
                module,
                module.current_device(),
                [module.current_stream(i) for i in range(count)],
            )
        )
    yield
    for module, device, streams in saved:
        for stream in streams:
            module.set_stream(stream)
        module.set_device(device)
        for index in range(len(streams)):
            module.synchronize(index)


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
