"""-DTORCH_INFINI_SANITIZE (cmake/TorchInfiniSanitizers.cmake): which values
configure, what every target gets, and the clear error for a bad value. The
sanitizer builds themselves run in ci/sanitize.sh (CI: the ASan + UBSan
ctest)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from infini_testing import configure_cmake_probe


def configure(tmp_path: Path, value: str) -> subprocess.CompletedProcess[str]:
    return configure_cmake_probe(
        tmp_path / "probe",
        "include(TorchInfiniSanitizers)\n"
        "get_directory_property(_options COMPILE_OPTIONS)\n"
        "get_directory_property(_links LINK_OPTIONS)\n"
        'message(STATUS "COMPILE=${_options}")\n'
        'message(STATUS "LINK=${_links}")\n'
        'message(STATUS "INTERFACE=${TORCH_INFINI_SANITIZER_LINK_OPTIONS}")\n',
        f"-DTORCH_INFINI_SANITIZE={value}",
    )


def test_address_and_undefined_instrument_every_target(tmp_path: Path) -> None:
    proc = configure(tmp_path, "address,undefined")
    assert proc.returncode == 0, proc.stderr
    assert "COMPILE=-fsanitize=address,undefined;-fno-omit-frame-pointer;-g1;-O1;" in proc.stdout
    assert "-fno-sanitize-recover=all" in proc.stdout
    assert "LINK=-fsanitize=address,undefined" in proc.stdout
    assert "INTERFACE=-fsanitize=address,undefined" in proc.stdout


def test_no_value_means_no_sanitizer(tmp_path: Path) -> None:
    proc = configure(tmp_path, "")
    assert proc.returncode == 0, proc.stderr
    assert "-- COMPILE=\n" in proc.stdout and "-- LINK=\n" in proc.stdout
    assert "-fsanitize" not in proc.stdout


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("memory", "unknown sanitizer 'memory'"),
        ("address,thread", "thread and address cannot be combined"),
    ],
)
def test_bad_values_stop_configuration(tmp_path: Path, value: str, message: str) -> None:
    proc = configure(tmp_path, value)
    assert proc.returncode != 0
    assert message in proc.stderr
