"""The built-in ``nvidia`` compiler plug-in without a GPU.

Its toolchain is Triton: a kernel's source compiles to a cubin for the
device's architecture on any machine where the triton package imports (not
in CI, which installs no Triton: run these by hand with Triton from the
registry, as docs/compiler_plugin.md says). Its runtime is the CUDA driver,
found at run time: without one, loading says so. Loading and launching on
a GPU are checked by the GPU run (tools/).
"""

from __future__ import annotations

import ctypes.util
import json
import struct
import sys
from unittest import mock

import pytest
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


@pytest.mark.parametrize("arch", [90, 80])
def test_a_triton_kernel_compiles_to_a_cubin_for_the_architecture(arch: int) -> None:
    pytest.importorskip("triton", reason="Triton is installed by hand, not in CI")
    binary = _compiler.plugin("nvidia").compile(SCALE_ADD, _options(arch))
    num_params, threads, shared, name, kinds, cubin = _parse(binary)
    # Four arguments (pointer, pointer, float, int32) and Triton's two
    # scratch pointers; four warps.
    assert (num_params, threads, name, kinds) == (6, 128, "scale_add", "ppfi")
    assert shared >= 0
    assert cubin[:4] == b"\x7fELF"
    # An ELF64 cubin's e_flags (offset 48) hold the SM version in its low byte.
    (e_flags,) = struct.unpack_from("<I", cubin, 48)
    assert e_flags & 0xFF == arch, hex(e_flags)


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
