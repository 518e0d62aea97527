"""The installed package: what it links, where it looks for libraries, what it bundles."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from pathlib import Path

import pytest
import torch_infini

PACKAGE_DIR = Path(torch_infini.__file__).parent
pytestmark = pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf")


def dynamic_section(library: Path) -> list[str]:
    out = subprocess.run(
        ["readelf", "-d", str(library)], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def entries(library: Path, tag: str) -> list[str]:
    values = []
    for line in dynamic_section(library):
        if f"({tag})" in line:
            values.append(line.split("[", 1)[1].rsplit("]", 1)[0])
    return values


def native_libraries() -> list[Path]:
    libs = [PACKAGE_DIR / "libtorch_infini.so", *PACKAGE_DIR.glob("_C*.so")]
    assert all(lib.exists() for lib in libs), libs
    return libs


def installed_from_a_wheel() -> bool:
    """Whether the torch_infini imported is the installed distribution's
    (not a build tree staged on PYTHONPATH)."""
    try:
        dist = importlib.metadata.distribution("torch-infini")
    except importlib.metadata.PackageNotFoundError:
        return False
    return Path(dist.locate_file("torch_infini/__init__.py")).resolve() == (
        Path(torch_infini.__file__).resolve()
    )


# A build tree's libraries carry CMake's build RPATH (absolute: the tree's
# C++ tests run from it); the wheel's install step sets $ORIGIN, and the
# wheel is what users get (CI installs it and runs this test on it).
@pytest.mark.skipif(
    not installed_from_a_wheel(), reason="a build tree's libraries carry CMake's build RPATH"
)
def test_native_libraries_store_no_absolute_search_path() -> None:
    for lib in native_libraries():
        for tag in ("RPATH", "RUNPATH"):
            for value in entries(lib, tag):
                for path in value.split(":"):
                    assert path.startswith("$ORIGIN"), f"{lib.name} {tag} has {path!r}"


def test_module_links_the_shared_backend_library() -> None:
    (module,) = PACKAGE_DIR.glob("_C*.so")
    assert "libtorch_infini.so" in entries(module, "NEEDED")


def test_infini_stack_is_linked_ops_first_and_not_bundled() -> None:
    needed = entries(PACKAGE_DIR / "libtorch_infini.so", "NEEDED")
    assert not list(PACKAGE_DIR.glob("libinfini*.so*")), "InfiniRT/InfiniOps must not be bundled"
    if "libinfinirt.so" not in needed:
        assert "libinfiniops.so" not in needed
        assert torch_infini.compiled_backends() == ["host"]
        return
    assert needed.index("libinfiniops.so") < needed.index("libinfinirt.so")


def test_build_records_torch_version_and_abi() -> None:
    import torch
    from torch_infini import _build_info

    assert _build_info.TORCH_VERSION == torch.__version__
    assert _build_info.TORCH_MAJOR_MINOR == ".".join(torch.__version__.split(".")[:2])
    assert _build_info.CXX11_ABI == torch.compiled_with_cxx11_abi()
