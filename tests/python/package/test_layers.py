"""The native sources' layers (tools/check_layers.py, run by CI): the
checkout passes, and each kind of include that runs up or across a layer is
caught, named by file, line and layers."""

from __future__ import annotations

import shutil
from pathlib import Path

import check_layers  # tools/, on sys.path (conftest.py)
import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def native(tmp_path: Path) -> Path:
    copy = tmp_path / "native"
    shutil.copytree(ROOT / "native", copy)
    return copy


def _add_include(file: Path, included: str) -> int:
    """Appends ``#include "included"`` to ``file``; returns its line."""
    text = file.read_text()
    file.write_text(text + f'#include "{included}"\n')
    return text.count("\n") + 1


def test_the_checkout_has_no_upward_include(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_layers.main(["--root", str(ROOT / "native")]) == 0
    assert "no include runs up a layer" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("file", "included", "message"),
    [
        # The cycle the layers removed: the shared helpers include the fallback.
        (
            "ops/src/common/dims.h",
            "fallback/refusal.h",
            "ops/src/common includes fallback, a higher layer",
        ),
        # The seam naming an implementation again.
        (
            "ops/src/seam/kernel_provider.cpp",
            "providers/host/fused_loops.h",
            "ops/src/seam includes providers/host, a higher layer",
        ),
        # The host provider reaching up into the operators.
        (
            "ops/src/providers/host/host_provider.cpp",
            "fused/registration.h",
            "ops/src/providers/host includes fused, a higher layer",
        ),
        # Operators of one layer are peers.
        (
            "ops/src/fused/rotary.cpp",
            "aten/bridge_helpers.h",
            "ops/src/fused includes aten, a peer",
        ),
        (
            "runtime/src/memory/allocator.cpp",
            "selection/provider_registry.h",
            None,  # memory is above selection: allowed
        ),
        (
            "runtime/src/profiler/device_activity.h",
            "memory/range_map.h",
            "runtime/src/profiler includes memory, a higher layer",
        ),
        # Libraries: the runtime below the ops library and the public API.
        (
            "runtime/src/selection/init.cpp",
            "torch_infini/ops/cpu_fallback.h",
            "library runtime includes ops",
        ),
        (
            "runtime/src/selection/init.cpp",
            "torch_infini/torch_infini.h",
            "library runtime includes api",
        ),
        ("ops/src/aten/cat.cpp", "torch_infini/compiler/plugin.h", "library ops includes compiler"),
    ],
)
def test_an_include_up_or_across_a_layer_fails(
    native: Path, capsys: pytest.CaptureFixture[str], file: str, included: str, message: str | None
) -> None:
    line = _add_include(native / file, included)
    status = check_layers.main(["--root", str(native)])
    err = capsys.readouterr().err
    if message is None:
        assert status == 0, err
        return
    assert status == 1
    assert f'native/{file}:{line}: #include "{included}": {message}' in err


def test_a_folder_in_no_layer_fails(native: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (native / "ops" / "src" / "kernels").mkdir()
    (native / "ops" / "src" / "kernels" / "gemm.cpp").write_text("// a new folder\n")
    assert check_layers.main(["--root", str(native)]) == 1
    assert "native/ops/src/kernels/gemm.cpp: in no layer" in capsys.readouterr().err
