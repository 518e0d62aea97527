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
from pathlib import Path
from typing import Any

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO_ROOT / "tools"
# The report tools, and the Python suite's shared test helpers.
for _path in (TOOLS_DIR, REPO_ROOT / "tests" / "python"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from infini_testing import (  # noqa: E402
    cpu_fallback_mode_guard,
    register_markers,
    skip_unless_configured,
)


def pytest_configure(config: pytest.Config) -> None:
    register_markers(config)  # the Python suite's: CI's two-device pass selects them here too


def pytest_runtest_setup(item: pytest.Item) -> None:
    skip_unless_configured(item)


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


# fallback_off tests run with the CPU fallback off; no test leaks a mode change.
_cpu_fallback_mode = pytest.fixture(autouse=True)(cpu_fallback_mode_guard)
