"""Finding InfiniRT: an InfiniRT with device types torch-infini has no
capability policy for stops at configure time, naming them and the tested
releases (not deep in a header); the tested enums configure.

Each case configures a small CMake project (no compiler) that uses the
project's cmake/FindInfiniRT.cmake against a fake install: the headers'
device enum and an empty library file.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PINNED = ["Cpu", "Nvidia", "Cambricon", "Ascend", "Metax", "Moore", "Iluvatar", "Hygon"]
HEAD = [*PINNED, "Thead", "Mars"]


def _fake_infinirt(root: Path, types: list[str]) -> None:
    detail = root / "include" / "infini" / "rt" / "detail"
    detail.mkdir(parents=True)
    (root / "include" / "infini" / "rt.h").write_text("#pragma once\n")
    enum = "\n".join(f"    k{name} = {i}," for i, name in enumerate(types))
    (detail / "device.h").write_text(
        f"class Device {{\n public:\n  enum class Type {{\n{enum}\n    kCount\n  }};\n}};\n"
    )
    (root / "lib").mkdir()
    (root / "lib" / "libinfinirt.so").write_bytes(b"")


def _configure(tmp_path: Path, types: list[str]) -> subprocess.CompletedProcess[str]:
    cmake = shutil.which("cmake")
    assert cmake, "cmake is a build requirement of the project"
    fake = tmp_path / "infinirt"
    _fake_infinirt(fake, types)
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(probe NONE)\n"
        f'list(APPEND CMAKE_MODULE_PATH "{REPO / "cmake"}")\n'
        "find_package(InfiniRT REQUIRED)\n"
        'message(STATUS "device types: ${InfiniRT_DEVICE_TYPES}")\n'
    )
    return subprocess.run(
        [
            cmake,
            "-S",
            str(project),
            "-B",
            str(tmp_path / "build"),
            f"-DINFINI_RT_INCLUDE_DIRS={fake / 'include'}",
            f"-DINFINI_RT_LIBRARY_DIRS={fake / 'lib'}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("types", [PINNED, HEAD], ids=["95c70080", "a38977e"])
def test_tested_infinirt_enums_configure(tmp_path: Path, types: list[str]) -> None:
    result = _configure(tmp_path, types)
    assert result.returncode == 0, result.stderr
    assert f"device types: {';'.join(types)}" in result.stdout


def test_an_unknown_device_type_stops_configuration_by_name(tmp_path: Path) -> None:
    result = _configure(tmp_path, [*HEAD, "Orion"])
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert "device types torch-infini has no capability policy for: kOrion" in message
    assert "Tested InfiniRT releases: 95c70080 (pinned) and a38977e" in message
