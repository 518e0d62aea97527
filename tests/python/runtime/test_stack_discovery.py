"""Finding the Infini stack.

- InfiniRT: an InfiniRT with device types torch-infini has no capability
  policy for stops at configure time, naming them and the tested releases
  (not deep in a header); the tested enums configure.
- InfiniOps, InfiniCCL: a vendor build's own libraries (CUDA, NCCL) reach
  everything that links torch-infini, so an executable linking a library that
  links them links; where they cannot be found, configuration stops and says
  what to set.

Each case configures a small CMake project that uses the project's
cmake/Find*.cmake against a fake install: InfiniRT's device enum and an empty
library file; an InfiniOps library that calls into a fake cuBLAS; an
InfiniCCL library that calls into a fake NCCL.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from infini_testing import build_cmake_probe, configure_cmake_probe

REPO = Path(__file__).resolve().parents[3]
PINNED = ["Cpu", "Nvidia", "Cambricon", "Ascend", "Metax", "Moore", "Iluvatar", "Hygon"]
HEAD = [*PINNED, "Thead", "Mars"]


def _tested_infinirt() -> tuple[str, str]:
    """The pinned and head InfiniRT commits: the InfiniRT row of
    docs/stack_versions.md, which cmake/FindInfiniRT.cmake reads too."""
    text = (REPO / "docs" / "stack_versions.md").read_text()
    row = re.search(r"^\| *InfiniRT *\| *`([0-9a-f]+)` *\| *`([0-9a-f]+)` *\|", text, re.M)
    assert row, "docs/stack_versions.md has no InfiniRT row"
    return row[1], row[2]


PINNED_RT, HEAD_RT = _tested_infinirt()


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
    fake = tmp_path / "infinirt"
    _fake_infinirt(fake, types)
    return configure_cmake_probe(
        tmp_path / "project",
        "find_package(InfiniRT REQUIRED)\n"
        'message(STATUS "device types: ${InfiniRT_DEVICE_TYPES}")\n',
        f"-DINFINI_RT_INCLUDE_DIRS={fake / 'include'}",
        f"-DINFINI_RT_LIBRARY_DIRS={fake / 'lib'}",
    )


@pytest.mark.parametrize("types", [PINNED, HEAD], ids=[PINNED_RT[:8], HEAD_RT])
def test_tested_infinirt_enums_configure(tmp_path: Path, types: list[str]) -> None:
    result = _configure(tmp_path, types)
    assert result.returncode == 0, result.stderr
    assert f"device types: {';'.join(types)}" in result.stdout


def test_an_unknown_device_type_stops_configuration_by_name(tmp_path: Path) -> None:
    result = _configure(tmp_path, [*HEAD, "Orion"])
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert "device types torch-infini has no capability policy for: kOrion" in message
    assert f"Tested InfiniRT releases: {PINNED_RT[:8]} (pinned) and {HEAD_RT}" in message


def _shared_library(cc: str, out: Path, source: str, *link: str, soname: str = "") -> None:
    src = out.with_suffix(".c")
    src.write_text(source)
    flags = [f"-Wl,-soname,{soname}"] if soname else []
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(out), str(src), *flags, *link],
        check=True,
        capture_output=True,
    )


def _fake_vendor_build(
    root: Path, vendor: Path, vendor_libs: dict[str, str], header: str, library: str, probe: str
) -> Path:
    """An install tree at `root` (`include/<header>`, `lib/<library>`) whose
    library calls into vendor libraries (soname: C source) that lie in
    `vendor`, a folder of their own (as the nvidia wheels' do)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is a build requirement of the project"
    vendor.mkdir(parents=True)
    for soname, source in vendor_libs.items():
        _shared_library(cc, vendor / soname, source, soname=soname)
    (root / "include" / header).parent.mkdir(parents=True)
    (root / "include" / header).write_text("#pragma once\n")
    (root / "lib").mkdir()
    _shared_library(
        cc,
        root / "lib" / library,
        probe,
        "-Wl,--no-as-needed",
        *(str(vendor / soname) for soname in vendor_libs),
    )
    return root


def _fake_cuda_infiniops(root: Path) -> tuple[Path, Path]:
    """libinfiniops.so needing libcublas.so.13 and libcudart.so.13."""
    cuda = root / "cuda"
    ops = _fake_vendor_build(
        root / "infiniops",
        cuda,
        {
            "libcublas.so.13": "int cublasCreate_v2(void) { return 0; }\n",
            "libcudart.so.13": "int cudaFree(void* p) { return 0; }\n",
        },
        "infini/ops.h",
        "libinfiniops.so",
        "int cublasCreate_v2(void); int cudaFree(void*);\n"
        "int infini_ops_probe(void) { return cublasCreate_v2() + cudaFree(0); }\n",
    )
    return ops, cuda


def _configure_consumer(
    tmp_path: Path,
    package: str,
    target: str,
    probe: str,
    needs: str,
    *defines: str,
    prelude: str = "",
) -> subprocess.CompletedProcess[str]:
    """Configures a library that links `target` privately (as libtorch_infini
    does) and an executable that links that library (as a LibTorch app
    does); the configure output says `needs: <value of the variable needs>`."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "consumer.c").write_text(
        f"int {probe}(void);\nint consumer(void) {{ return {probe}(); }}\n"
    )
    (project / "app.c").write_text("int consumer(void);\nint main(void) { return consumer(); }\n")
    return configure_cmake_probe(
        project,
        f"{prelude}"
        f"find_package({package} REQUIRED)\n"
        f'message(STATUS "needs: ${{{needs}}}")\n'
        "add_library(consumer SHARED consumer.c)\n"
        f"target_link_libraries(consumer PRIVATE {target})\n"
        "add_executable(app app.c)\n"
        "target_link_libraries(app PRIVATE consumer)\n",
        *defines,
        languages="C",
    )


def _configure_infiniops(
    tmp_path: Path, cuda_targets: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    ops, cuda = _fake_cuda_infiniops(tmp_path / "fake")
    result = _configure_consumer(
        tmp_path,
        "InfiniOps",
        "InfiniOps::infiniops",
        "infini_ops_probe",
        "InfiniOps_LINK_DEPENDENCIES",
        f"-DINFINI_OPS_PREFIX={ops}",
        # Deterministic on machines with and without a CUDA toolkit: the
        # project under test supplies (or withholds) the CUDA targets.
        "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON",
        prelude=cuda_targets,
    )
    return result, cuda


def test_a_cuda_infiniops_carries_its_libraries_to_executables(tmp_path: Path) -> None:
    cuda = tmp_path / "fake" / "cuda"
    targets = "".join(
        f"add_library(CUDA::{name} UNKNOWN IMPORTED)\n"
        f'set_target_properties(CUDA::{name} PROPERTIES IMPORTED_LOCATION "{cuda / file}")\n'
        for name, file in (("cublas", "libcublas.so.13"), ("cudart", "libcudart.so.13"))
    )
    result, _ = _configure_infiniops(tmp_path, targets)
    assert result.returncode == 0, result.stderr
    needs = next(line for line in result.stdout.splitlines() if "needs: " in line)
    assert sorted(needs.split("needs: ")[1].split(";")) == ["CUDA::cublas", "CUDA::cudart"]
    built = build_cmake_probe(tmp_path / "project")
    # Before FindInfiniOps carried them: "libcublas.so.13, needed by
    # libinfiniops.so, not found", then undefined cublasCreate_v2.
    assert built.returncode == 0, built.stdout + built.stderr


def test_a_cuda_infiniops_without_cuda_stops_configuration(tmp_path: Path) -> None:
    result, _ = _configure_infiniops(tmp_path, "")
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert "is a CUDA build (it needs " in message
    assert "libcublas.so.13" in message
    assert "did not find CUDA::cublas, CUDA::cudart" in message
    assert "CUDA_cublas_LIBRARY" in message


def _fake_nccl_infiniccl(root: Path) -> tuple[Path, Path]:
    """libinfiniccl.so (an NCCL build) needing libnccl.so.2."""
    nccl = root / "nccl" / "lib"
    ccl = _fake_vendor_build(
        root / "infiniccl",
        nccl,
        {"libnccl.so.2": "int ncclGetVersion(int* v) { return 0; }\n"},
        "infiniccl/comm.h",
        "libinfiniccl.so",
        "int ncclGetVersion(int*);\n"
        "int infiniccl_probe(void) { int v; return ncclGetVersion(&v); }\n",
    )
    return ccl, nccl


def _configure_infiniccl(
    tmp_path: Path, *defines: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    ccl, nccl = _fake_nccl_infiniccl(tmp_path / "fake")
    result = _configure_consumer(
        tmp_path,
        "InfiniCCL",
        "InfiniCCL::infiniccl",
        "infiniccl_probe",
        "InfiniCCL_LINK_DEPENDENCY_FILES",
        f"-DINFINI_CCL_PREFIX={ccl}",
        *defines,
    )
    return result, nccl


def test_an_nccl_infiniccl_carries_nccl_to_executables(tmp_path: Path) -> None:
    nccl = tmp_path / "fake" / "nccl" / "lib"
    result, _ = _configure_infiniccl(tmp_path, f"-DNCCL_LIBRARY={nccl / 'libnccl.so.2'}")
    assert result.returncode == 0, result.stderr
    assert f"needs: {nccl / 'libnccl.so.2'}" in result.stdout
    built = build_cmake_probe(tmp_path / "project")
    # Without the dependency: "libnccl.so.2, needed by libinfiniccl.so, not found".
    assert built.returncode == 0, built.stdout + built.stderr


def test_an_nccl_infiniccl_without_nccl_stops_configuration(tmp_path: Path) -> None:
    # No system NCCL may stand in for the missing one (the tools are named,
    # since system paths are not searched).
    make, cc = shutil.which("make"), shutil.which("cc") or shutil.which("gcc")
    assert make and cc, "make and a C compiler are build requirements of the project"
    result, _ = _configure_infiniccl(
        tmp_path,
        "-DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF",
        "-DCMAKE_FIND_USE_SYSTEM_ENVIRONMENT_PATH=OFF",
        f"-DCMAKE_MAKE_PROGRAM={make}",
        f"-DCMAKE_C_COMPILER={cc}",
    )
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert "InfiniCCL at" in message and "(it needs libnccl.so.2" in message
    assert "set NCCL_ROOT or NCCL_LIBRARY" in message
