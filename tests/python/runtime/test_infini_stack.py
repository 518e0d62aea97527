"""Backend selection against the Infini stack (InfiniRT + InfiniOps).

Tests that need a build against the stack skip with that reason on builds
without it (CI has neither library); the rest hold on every build.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch_infini

# The build's device type table (native/runtime/include/torch_infini/runtime/device_types.h).
INFINI_TYPES = list(torch_infini._C._infinirt_device_types())
STACK_REASON = "needs torch-infini built against InfiniRT/InfiniOps (none was found at build time)"
has_stack = any(name in torch_infini.compiled_backends() for name in INFINI_TYPES)
requires_stack = pytest.mark.skipif(not has_stack, reason=STACK_REASON)


def run_python(code: str, backend: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TORCH_INFINI_BACKEND=backend)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


def test_compiled_backends_are_host_plus_infini_types() -> None:
    compiled = torch_infini.compiled_backends()
    assert compiled[0] == "host"
    assert set(compiled[1:]) <= set(INFINI_TYPES)


def test_the_device_type_table_is_infiniRT_s_order() -> None:
    # InfiniRT's enum order at the tested releases (pinned ends at hygon;
    # the current head adds thead and mars).
    assert INFINI_TYPES[:8] == [
        "cpu",
        "nvidia",
        "cambricon",
        "ascend",
        "metax",
        "moore",
        "iluvatar",
        "hygon",
    ]
    assert {"thead", "mars"} <= set(INFINI_TYPES)


@pytest.mark.parametrize("device_type", INFINI_TYPES)
def test_every_device_type_the_build_knows_is_selectable(device_type: str) -> None:
    """Each name of the table is a backend to TORCH_INFINI_BACKEND: it serves,
    or (not compiled in, no device) fails the import saying so, never with
    "is not a backend"."""
    result = run_python("import torch_infini; print(torch_infini.backend())", device_type)
    assert "is not a backend" not in result.stderr
    if result.returncode == 0:
        assert result.stdout.strip() == device_type
    else:
        assert "ImportError" in result.stderr
        compiled = device_type in torch_infini.compiled_backends()
        reason = "reports no device" if compiled else "not compiled into this build"
        assert reason in result.stderr, result.stderr


def test_uncompiled_infini_type_fails_the_import_with_the_reason() -> None:
    missing = [t for t in INFINI_TYPES if t not in torch_infini.compiled_backends()]
    result = run_python("import torch_infini", missing[0])
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert "not compiled into this build" in result.stderr
    assert missing[0] in result.stderr


def test_auto_prefers_the_stack_when_present() -> None:
    result = run_python("import torch_infini; print(torch_infini.backend())", "auto")
    assert result.returncode == 0, result.stderr
    selected = result.stdout.strip()
    if has_stack:
        assert selected in INFINI_TYPES
    else:
        assert selected == "host"


@requires_stack
@pytest.mark.parametrize(
    "device_type", [t for t in INFINI_TYPES if t in torch_infini.compiled_backends()]
)
def test_a_compiled_type_serves_or_fails_the_import_cleanly(device_type: str) -> None:
    """A type compiled in but without a device (an NVIDIA build on a machine
    without a GPU or driver) fails the import with the reason: no crash."""
    result = run_python("import torch_infini; print(torch_infini.backend())", device_type)
    if result.returncode == 0:
        assert result.stdout.strip() == device_type
    else:
        assert result.returncode == 1, result.stderr
        assert "ImportError" in result.stderr
        assert f"TORCH_INFINI_BACKEND={device_type}" in result.stderr
        assert "InfiniRT reports no device of this type" in result.stderr


@requires_stack
def test_infinirt_cpu_backend_serves_infini_and_matches_cpu() -> None:
    code = (
        "import torch, torch_infini\n"
        "assert torch_infini.backend() == 'cpu', torch_infini.backend()\n"
        "a = torch.randn(5, 7); b = torch.randn(7, 3)\n"
        "out = (a.to('infini') @ b.to('infini')).relu().cpu()\n"
        "assert torch.allclose(out, (a @ b).relu(), atol=1e-5)\n"
        "print(torch.infini.get_device_name(0))\n"
    )
    result = run_python(code, "cpu")
    assert result.returncode == 0, result.stderr
    assert "InfiniRT cpu" in result.stdout


@requires_stack
def test_host_stays_selectable_in_a_stack_build() -> None:
    result = run_python("import torch_infini; print(torch_infini.backend())", "host")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "host"


def test_selected_backend_is_reported_and_fixed() -> None:
    torch.infini.init()
    selected = torch_infini.backend()
    assert selected in torch_infini.compiled_backends()
    other = "cpu" if selected == "host" else "host"
    expected = "cannot change" if other in torch_infini.compiled_backends() else "not compiled"
    with pytest.raises(RuntimeError, match=expected):
        torch_infini.set_backend(other)
    torch_infini.set_backend(selected)  # asking for the current one is fine
