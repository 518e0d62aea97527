"""The built-in ``nvidia`` compiler plug-in without a GPU.

Its toolchain is Triton: a kernel's source compiles to a cubin for the
device's architecture on any machine where the triton package imports
(ci/install_deps.sh installs it: CI runs these without a GPU). Its runtime is the CUDA driver,
found at run time: without one, loading says so. Loading and launching on
a GPU are checked by the GPU run (tools/).
"""

from __future__ import annotations

import ctypes.util
import json
import os
import struct
import subprocess
import sys
from unittest import mock

import pytest
import torch_infini
from infini_testing import raises_exactly
from torch_infini import _compiler

HEADER = struct.Struct("<8sIIII")

SCALE_ADD = """
import triton
import triton.language as tl


@triton.jit
def scale_add(x_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha + 1, mask=mask)
"""


def _options(arch: int = 90, **overrides: object) -> str:
    options = {
        "kernel": "scale_add",
        "signature": {
            "x_ptr": "*fp32",
            "out_ptr": "*fp32",
            "alpha": "fp32",
            "n": "i32",
            "BLOCK": "constexpr",
        },
        "constexprs": {"BLOCK": 256},
        "arch": arch,
        "num_warps": 4,
    }
    return json.dumps({**options, **overrides})


def _parse(binary: bytes) -> tuple[int, int, int, str, str, bytes]:
    magic, num_params, threads, shared, name_size = HEADER.unpack_from(binary)
    assert magic == b"TINVCUB1"
    rest = binary[HEADER.size :]
    name = rest[:name_size].decode()
    kinds = rest[name_size : name_size + num_params - 2].decode()
    return num_params, threads, shared, name, kinds, rest[name_size + num_params - 2 :]


def test_the_nvidia_plugin_is_built_in_and_compiles_triton() -> None:
    plugin = _compiler.plugin("nvidia")
    assert (plugin.name, plugin.device_type, plugin.source_language, plugin.origin) == (
        "nvidia",
        "nvidia",
        "triton",
        "built-in",
    )
    assert plugin.runtime_source() == ""
    assert plugin.pass_pipeline() == _compiler.plugin("cpu").pass_pipeline()


def cubin_arch(cubin: bytes) -> int:
    """The SM version an ELF cubin is for, from its e_flags (offset 48):
    the low byte where the ELF ABI version (EI_ABIVERSION, offset 8) is
    below 8, the next byte from 8 on (ptxas 12.9 writes sm_90 so, sm_80 the
    old way)."""
    (e_flags,) = struct.unpack_from("<I", cubin, 48)
    return (e_flags >> 8) & 0xFF if cubin[8] >= 8 else e_flags & 0xFF


@pytest.mark.parametrize("arch", [90, 80])
def test_a_triton_kernel_compiles_to_a_cubin_for_the_architecture(arch: int) -> None:
    pytest.importorskip("triton", reason="Triton is not installed (ci/install_deps.sh installs it)")
    binary = _compiler.plugin("nvidia").compile(SCALE_ADD, _options(arch))
    num_params, threads, shared, name, kinds, cubin = _parse(binary)
    # Four arguments (pointer, pointer, float, int32) and Triton's two
    # scratch pointers; four warps.
    assert (num_params, threads, name, kinds) == (6, 128, "scale_add", "ppfi")
    assert shared >= 0
    assert cubin[:4] == b"\x7fELF"
    assert cubin_arch(cubin) == arch, cubin[:64].hex()


def test_without_triton_compile_says_which_package_is_missing() -> None:
    with (
        mock.patch.dict(sys.modules, {"triton": None}),
        raises_exactly(
            RuntimeError,
            match=r"compiler plug-in 'nvidia' \(built-in\): compile failed: .*the nvidia compiler "
            r"plug-in compiles Triton kernels with the triton package, which cannot be imported",
        ),
    ):
        _compiler.plugin("nvidia").compile(SCALE_ADD, _options())


def test_an_argument_type_without_a_launch_slot_is_refused() -> None:
    options = _options(signature={"x_ptr": "*fp32", "flag": "i1", "BLOCK": "constexpr"})
    with raises_exactly(RuntimeError, match=r"argument 'flag' of Triton type 'i1' has no launch"):
        _compiler.plugin("nvidia").compile(SCALE_ADD, options)


def test_a_binary_of_another_plugin_is_refused_on_load() -> None:
    with raises_exactly(RuntimeError, match="not a binary of this plug-in"):
        _compiler.plugin("nvidia").load(b"\x7fELF not ours")


@pytest.mark.skipif(
    ctypes.util.find_library("cuda") is not None, reason="this machine has a CUDA driver"
)
def test_without_a_cuda_driver_loading_says_so() -> None:
    binary = HEADER.pack(b"TINVCUB1", 3, 128, 0, 1) + b"k" + b"p" + b"\x7fELF"
    with raises_exactly(
        RuntimeError,
        match=r"compiler plug-in 'nvidia' \(built-in\): module_load failed: the CUDA driver "
        r"\(libcuda.so.1\) cannot be loaded",
    ):
        _compiler.plugin("nvidia").load(binary)


# A graph of infini tensors compiled with the nvidia plug-in selected for
# code generation (the test-only switch), run by a subprocess that reports
# as JSON what Inductor generated, what the plug-in compiled and, where the
# module load is replaced by a recorder ("record"), each launch.
INDUCTOR_TO_TRITON = """
import json, struct, sys
import torch, torch_infini
from torch_infini import _compiler, _triton

sources, binaries, launches, xblocks = [], [], [], []
triton_kernel, get = _compiler.triton_kernel, _compiler._binaries.get
def record_source(name, source):
    sources.append(source)
    xblocks.append(_triton.kernel_object(source, name).configs[0].kwargs.get("XBLOCK"))
    return triton_kernel(name, source)
def record_binary(compiler, source, options):
    binary = get(compiler, source, options)
    binaries.append(binary)
    return binary
_compiler.triton_kernel, _compiler._binaries.get = record_source, record_binary

class Recorder:
    def launch(self, args, kinds, device, grid):
        launches.append({"kinds": kinds, "grid": list(grid), "args": [
            a if isinstance(a, int) else str(a.device) for a in args]})
if sys.argv[1] == "record":
    _compiler._load_triton_kernel = lambda compiler, binary: Recorder()

def f(x, y):
    return (x.sin() + y) * 2, (x * y).sum(dim=1)

x, y = torch.randn(8, 300), torch.randn(8, 300)
error = None
try:
    compiled = torch.compile(f)
    compiled(x.to("infini"), y.to("infini"))
    compiled(x[:5].to("infini"), y[:5].to("infini"))  # another batch: dynamic sizes
except Exception as e:
    error = f"{type(e).__name__}: {e}"

def cubin_arch(b):
    num_params, name_size = struct.unpack_from("<I", b, 8)[0], struct.unpack_from("<I", b, 20)[0]
    start = 24 + name_size + num_params - 2
    e_flags = struct.unpack_from("<I", b, start + 48)[0]
    return (e_flags >> 8) & 0xFF if b[start + 8] >= 8 else e_flags & 0xFF

print(json.dumps({
    "error": error, "sources": sources, "xblocks": xblocks, "launches": launches,
    "magics": [b[:8].decode() for b in binaries], "cubin_arches": [cubin_arch(b) for b in binaries],
}))
"""


def _compile_with_the_nvidia_plugin(mode: str) -> dict:
    pytest.importorskip("triton", reason="Triton is not installed (ci/install_deps.sh installs it)")
    env = {
        **os.environ,
        _compiler.DEVICE_TYPE_SWITCH: "nvidia",
        "TORCH_INFINI_TRITON_ARCH": "90",
        "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
    }
    run = subprocess.run(
        [sys.executable, "-c", INDUCTOR_TO_TRITON, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    ctypes.util.find_library("cuda") is not None, reason="this machine has a CUDA driver"
)
def test_inductor_generates_triton_for_infini_which_the_plugin_compiles_without_a_gpu() -> None:
    report = _compile_with_the_nvidia_plugin("load")
    # Inductor generated Triton for the graph of infini tensors: one kernel,
    # the pointwise outputs fused with the row sums.
    assert len(report["sources"]) == 1, report["sources"]
    source = report["sources"][0]
    assert "@triton.jit" in source and "triton_heuristics" in source and "tl.sum" in source
    # The plug-in compiled it to a cubin for sm_90 ...
    assert (report["magics"], report["cubin_arches"]) == (["TINVCUB1"], [90])
    # ... and loading it needs the CUDA driver this machine lacks.
    assert report["error"] is not None
    assert "module_load failed: the CUDA driver (libcuda.so.1) cannot be loaded" in report["error"]


def test_the_wrapper_launches_each_triton_kernel_with_inductors_grid_and_arguments() -> None:
    report = _compile_with_the_nvidia_plugin("record")
    assert report["error"] is None, report["error"]
    # Two compiles (batch 8, then batch 5 with dynamic sizes), one launch each:
    # two input and two output pointers on infini, then the sizes; the grid is
    # Inductor's, one program per XBLOCK rows.
    assert len(report["launches"]) == 2 == len(report["xblocks"])
    for launch, rows, xblock in zip(report["launches"], (8, 5), report["xblocks"], strict=True):
        assert launch["kinds"] == "ppppii"
        assert launch["args"] == ["infini:0"] * 4 + [rows, 300]
        assert launch["grid"] == [-(-rows // xblock), 1, 1]


@pytest.mark.skipif(
    torch_infini.backend() != "nvidia", reason="the GPU run (tools/gpu_run.sh) selects nvidia"
)
def test_on_a_gpu_a_compiled_graph_runs_the_plugins_triton_kernels() -> None:
    import torch

    sources: list[str] = []
    triton_kernel = _compiler.triton_kernel

    def record(name: str, source: str) -> object:
        sources.append(source)
        return triton_kernel(name, source)

    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x.sin() + y) * 2, (x * y).sum(dim=1)

    x, y = torch.randn(8, 300), torch.randn(8, 300)
    with mock.patch.object(_compiler, "triton_kernel", record):
        got = torch.compile(f)(x.to("infini"), y.to("infini"))
    want = f(x, y)
    assert sources and all("@triton.jit" in s for s in sources)
    for g, w in zip(got, want, strict=True):
        assert g.device.type == "infini" and g.stride() == w.stride()
        torch.testing.assert_close(g.cpu(), w, rtol=1.3e-6, atol=1e-5)
