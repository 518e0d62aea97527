"""The built-in ``nvidia`` compiler plug-in's toolchain: Triton.

Triton is a Python package, so the plug-in (native/compiler/src/plugins/
nvidia) calls back into this module for each kernel:
``compile(source, options) -> bytes``. ``source`` is Python source that
defines the ``@triton.jit`` kernel (Inductor's kernel module, or any);
``options`` is JSON::

    {"kernel": "triton_poi_fused_add_0",          # the jit function's name
     "signature": {"in_ptr0": "*fp32", "xnumel": "i32", "XBLOCK": "constexpr"},
     "constexprs": {"XBLOCK": 128},
     "arch": 90,                                   # the device's compute capability
     "num_warps": 4, "num_stages": 1}

Triton compiles it for ``cuda:<arch>`` without a GPU
(``GPUTarget("cuda", arch, 32)``), and the result is the plug-in's binary
(plugins/nvidia/binary_format.h): the launch parameters, each argument's
type, then the cubin. Kernels that need Triton's global or profile scratch
memory are refused (the plug-in passes NULL for both).

Registered with the plug-in when torch_infini's compiler layer loads
(_compiler.py); a process without Python has no Triton compiler, and the
plug-in says so.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import struct
import sys
import tempfile
from typing import Any

MAGIC = b"TINVCUB1"
# Triton's parameter types, as the plug-in's argument kinds.
_KINDS = {"i32": "i", "u32": "u", "i64": "l", "u64": "L", "fp32": "f", "fp64": "d"}


def _kind(name: str, triton_type: str) -> str:
    if triton_type.startswith("*"):
        return "p"
    kind = _KINDS.get(triton_type)
    if kind is None:
        raise NotImplementedError(
            f"nvidia compiler plug-in: argument {name!r} of Triton type {triton_type!r} has no "
            f"launch slot (supported: pointers, {', '.join(sorted(_KINDS))})"
        )
    return kind


def _module_attribute(source: str, name: str) -> Any:
    """What ``source`` defines as ``name``, the source imported from a file
    (Triton reads a kernel's source back through ``inspect``)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    directory = os.path.join(tempfile.gettempdir(), f"torch_infini_triton_{os.getuid()}")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    module_name = f"torch_infini_triton_{digest}"
    path = os.path.join(directory, f"{module_name}.py")
    if not os.path.exists(path):
        with tempfile.NamedTemporaryFile("w", dir=directory, suffix=".py", delete=False) as f:
            f.write(source)
        os.replace(f.name, path)
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    function = getattr(module, name, None)
    if function is None:
        raise ValueError(f"nvidia compiler plug-in: the Triton source defines no kernel {name!r}")
    return function


def kernel_object(source: str, name: str) -> Any:
    """Inductor's autotuner object for kernel ``name`` of a kernel module:
    its configurations, ``triton_meta`` and ``inductor_meta``."""
    found = _module_attribute(source, name)
    if not hasattr(found, "configs"):
        raise ValueError(f"nvidia compiler plug-in: {name!r} is not an Inductor Triton kernel")
    return found


def arch(autotuner: Any) -> int:
    """The compute capability Inductor generated a kernel for (its
    ``DeviceProperties.cc``; the autotuner keeps them apart from
    ``triton_meta``, whose device it turns into an index)."""
    props = getattr(autotuner, "device_props", None) or autotuner.triton_meta["device"]
    return int(props.cc)


def kernel_name(binary: bytes) -> str:
    """The kernel name a binary of the plug-in holds."""
    name_size = struct.unpack_from("<I", binary, 20)[0]
    return binary[24 : 24 + name_size].decode()


def toolchain() -> str:
    """What a compiled binary depends on besides source and options."""
    try:
        import triton
    except ImportError:
        return "triton: not installed"
    return f"triton {triton.__version__}"


def install_compile_only_target(arch_: int) -> None:
    """Test only (``TORCH_INFINI_COMPILER_DEVICE_TYPE=nvidia`` without a
    GPU): Triton's active driver reports ``cuda:<arch>`` and nothing else,
    so Inductor generates Triton and the plug-in compiles it; launching
    needs the real driver."""
    import torch
    import triton
    from torch._inductor.runtime import triton_helpers
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class CompileOnlyTarget(DriverBase):
        @classmethod
        def is_active(cls) -> bool:
            return True

        def get_current_target(self) -> Any:
            return GPUTarget("cuda", arch_, 32)

        def get_active_torch_device(self) -> Any:
            return torch.device("infini", 0)

        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: Any = None) -> int:
            return 0

        def map_python_to_cpp_type(self, ty: str) -> str:
            raise NotImplementedError("compile-only Triton target")

        def get_benchmarker(self) -> Any:
            raise NotImplementedError("compile-only Triton target")

    triton.runtime.driver.set_active(CompileOnlyTarget())
    # Inductor's kernel modules select the GPU driver as they load; the
    # compile-only target stays.
    triton_helpers.set_driver_to_gpu = lambda: None


def _num_params(ptx: str, name: str) -> int:
    """The parameters of the kernel's entry in its PTX (Triton's scratch
    pointers included)."""
    match = re.search(rf"\.entry\s+{re.escape(name)}\s*\((.*?)\)", ptx, re.DOTALL)
    if match is None:
        raise RuntimeError(f"nvidia compiler plug-in: no entry {name!r} in the compiled PTX")
    return match.group(1).count(".param")


def compile(source: str, options: str) -> bytes:  # noqa: A001  (the plug-in's word)
    opts = json.loads(options)
    name = opts["kernel"]
    signature: dict[str, str] = opts["signature"]
    kinds = "".join(_kind(arg, t) for arg, t in signature.items() if t != "constexpr")
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:
        raise RuntimeError(
            "the nvidia compiler plug-in compiles Triton kernels with the triton package, "
            f"which cannot be imported here: {e}"
        ) from e
    # Inductor's kernels are wrapped in its autotuner; Triton compiles the
    # jit function inside.
    found = _module_attribute(source, name)
    function = found if isinstance(found, triton.runtime.JITFunction) else found.fn
    compiled = triton.compile(
        ASTSource(function, signature, constexprs=opts.get("constexprs", {})),
        target=GPUTarget("cuda", int(opts["arch"]), 32),
        options={
            "num_warps": int(opts.get("num_warps", 4)),
            "num_stages": int(opts.get("num_stages", 1)),
        },
    )
    metadata = compiled.metadata
    for scratch in ("global_scratch_size", "profile_scratch_size"):
        if getattr(metadata, scratch, 0):
            raise NotImplementedError(
                f"nvidia compiler plug-in: kernel {name!r} needs Triton {scratch.split('_')[0]} "
                "scratch memory, which torch_infini does not allocate yet"
            )
    num_params = _num_params(compiled.asm["ptx"], metadata.name)
    if num_params != len(kinds) + 2:
        raise RuntimeError(
            f"nvidia compiler plug-in: kernel {name!r} has {num_params} parameters, expected "
            f"{len(kinds)} arguments and Triton's two scratch pointers"
        )
    kernel_name = metadata.name.encode()
    header = struct.pack(
        "<8sIIII", MAGIC, num_params, 32 * metadata.num_warps, metadata.shared, len(kernel_name)
    )
    return header + kernel_name + kinds.encode() + compiled.asm["cubin"]
