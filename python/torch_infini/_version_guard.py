"""Import-time guard: the installed PyTorch must match the build.

A C++ extension built against one PyTorch major.minor or C++ ABI and loaded
into another fails in obscure ways (missing symbols, corrupted objects). The
guard runs before anything is renamed, loaded or registered.
"""

from __future__ import annotations

import re


def major_minor(version: str) -> str:
    """'2.13.0+cpu' -> '2.13'; patch and pre-release suffixes do not matter."""
    match = re.match(r"^(\d+)\.(\d+)", version)
    if match is None:
        raise ImportError(f"torch_infini: cannot parse the PyTorch version {version!r}")
    return f"{match.group(1)}.{match.group(2)}"


def check(
    built_version: str,
    built_cxx11_abi: bool,
    installed_version: str,
    installed_cxx11_abi: bool,
) -> None:
    """Raises ImportError naming both sides when the build cannot load."""
    problems = []
    if major_minor(built_version) != major_minor(installed_version):
        problems.append(
            f"it was built against PyTorch {built_version} but PyTorch "
            f"{installed_version} is installed"
        )
    if bool(built_cxx11_abi) != bool(installed_cxx11_abi):
        problems.append(
            f"it was built with _GLIBCXX_USE_CXX11_ABI={int(built_cxx11_abi)} but the "
            f"installed PyTorch uses _GLIBCXX_USE_CXX11_ABI={int(installed_cxx11_abi)}"
        )
    if problems:
        raise ImportError(
            "torch_infini cannot be loaded: "
            + "; ".join(problems)
            + ". Rebuild torch_infini against the installed PyTorch "
            "(pip install --no-build-isolation .) or install the matching PyTorch."
        )


def check_installed() -> None:
    import torch

    from . import _build_info

    check(
        _build_info.TORCH_VERSION,
        _build_info.CXX11_ABI,
        torch.__version__,
        torch.compiled_with_cxx11_abi(),
    )
