"""The import-time guard: torch_infini refuses a PyTorch it was not built for."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import torch
import torch_infini
from infini_testing import describe, run_python
from torch_infini import _version_guard

ABI = torch.compiled_with_cxx11_abi()


@pytest.mark.parametrize(
    ("built", "installed"),
    [
        ("2.13.0+cpu", "2.13.0+cpu"),
        ("2.13.0+cpu", "2.13.1"),
        ("2.13.0", "2.13.0a0"),
        ("2.13.0a0+git1234567", "2.13.2+cu126"),
        ("2.13.0.dev20250101", "2.13.0rc1"),
        ("2.12.1", "2.12.0+cpu"),
    ],
)
def test_patch_pre_release_and_local_differences_are_accepted(built: str, installed: str) -> None:
    _version_guard.check(built, ABI, installed, ABI)


@pytest.mark.parametrize(
    ("built", "installed"),
    [
        ("2.13.0+cpu", "2.12.0"),
        ("2.13.0", "2.14.0a0"),
        ("2.13.0", "3.13.0"),
        ("2.1.0", "2.13.0"),  # 2.1 is not a prefix match of 2.13
    ],
)
def test_major_minor_mismatch_names_both_versions(built: str, installed: str) -> None:
    with pytest.raises(ImportError) as exc:
        _version_guard.check(built, ABI, installed, ABI)
    message = str(exc.value)
    assert built in message
    assert installed in message
    assert "ABI" not in message  # only the version is wrong


@pytest.mark.parametrize(("built_abi", "installed_abi"), [(True, False), (False, True)])
def test_abi_mismatch_names_both_abis(built_abi: bool, installed_abi: bool) -> None:
    with pytest.raises(ImportError) as exc:
        _version_guard.check("2.13.0", built_abi, "2.13.0", installed_abi)
    message = str(exc.value)
    assert f"_GLIBCXX_USE_CXX11_ABI={int(built_abi)}" in message
    assert f"_GLIBCXX_USE_CXX11_ABI={int(installed_abi)}" in message


def test_version_and_abi_mismatch_are_both_reported() -> None:
    with pytest.raises(ImportError) as exc:
        _version_guard.check("2.13.0", True, "2.11.0", False)
    message = str(exc.value)
    assert "2.13.0" in message and "2.11.0" in message
    assert "_GLIBCXX_USE_CXX11_ABI=1" in message and "_GLIBCXX_USE_CXX11_ABI=0" in message


def test_unparsable_version_raises_import_error() -> None:
    with pytest.raises(ImportError, match="nightly"):
        _version_guard.check("nightly", ABI, "2.13.0", ABI)


def test_major_minor() -> None:
    assert _version_guard.major_minor("2.13.0+cpu") == "2.13"
    assert _version_guard.major_minor("2.13") == "2.13"
    assert _version_guard.major_minor("10.2.3a0") == "10.2"


def test_installed_build_matches_running_torch() -> None:
    # The package imported, so the guard accepted this combination.
    built = torch_infini.built_torch_version
    assert _version_guard.major_minor(built) == _version_guard.major_minor(torch.__version__)
    _version_guard.check_installed()


def _pythonpath(first: Path) -> dict[str, str | None]:
    rest = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(first) + (os.pathsep + rest if rest else "")}


def _copy_package(tmp_path: Path) -> Path:
    package_dir = Path(torch_infini.__file__).resolve().parent
    target = tmp_path / "torch_infini"
    shutil.copytree(package_dir, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_real_version_mismatch_fails_import_before_renaming(tmp_path: Path) -> None:
    target = _copy_package(tmp_path)
    build_info = target / "_build_info.py"
    text = build_info.read_text()
    text, replaced = re.subn(r"^TORCH_VERSION = .*$", 'TORCH_VERSION = "2.99.0"', text, flags=re.M)
    assert replaced == 1
    build_info.write_text(text)

    code = """
import traceback
import torch
try:
    import torch_infini
except ImportError as error:
    print("IMPORT ERROR:", error)
    print("RAISED IN:", traceback.extract_tb(error.__traceback__)[-1].filename)
else:
    print("IMPORTED FROM:", torch_infini.__file__)
print("BACKEND NAME:", torch._C._get_privateuse1_backend_name())
print("HAS INFINI MODULE:", hasattr(torch, "infini"))
"""
    proc = run_python(code, env=_pythonpath(tmp_path))
    assert proc.returncode == 0, describe(proc)
    lines = dict(line.split(": ", 1) for line in proc.stdout.strip().splitlines())
    assert "IMPORT ERROR" in lines, describe(proc)
    assert "2.99.0" in lines["IMPORT ERROR"]
    assert torch.__version__ in lines["IMPORT ERROR"]
    assert lines["RAISED IN"].startswith(str(tmp_path))  # the patched copy was imported
    # Nothing was renamed, loaded or registered before the guard refused.
    assert lines["BACKEND NAME"] == "privateuseone"
    assert lines["HAS INFINI MODULE"] == "False"
