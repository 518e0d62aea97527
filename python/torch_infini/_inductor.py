"""torch.compile's default backend (Inductor) on infini, through the
device type's compiler plug-in (torch_infini/_compiler.py).

Where device memory is host memory (``host``, InfiniRT ``cpu``) Inductor's
C++ CPU code generation serves infini: its kernels read and write device
memory through plain pointers, buffers come from the infini caching
allocator (``empty_strided(..., device="infini")``), and operators Inductor
does not compile run as ATen calls on infini (natively or in the CPU
fallback). Each generated kernel goes to the plug-in: its compiler builds
it, its runtime loads it, and a call queues it on the current infini stream
in stream order, behind the work before it (extern kernels included), with
no synchronization.

Inductor finds this through PyTorch's hook for out-of-tree devices: it asks
the device module (``torch.infini``) for ``Scheduling``,
``PythonWrapperCodegen`` and ``CppWrapperCodegen`` the first time it
compiles, so nothing here is imported before ``torch.compile`` is used.

Four decisions Inductor makes by the device name "cpu" have no hook; this
module has _patches.py extend them to infini as it loads
(``_patches.apply_to_inductor`` lists them).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from textwrap import dedent
from types import SimpleNamespace
from typing import Any

import torch
from torch._dynamo.device_interface import (
    CpuDeviceProperties,
    DeviceInterface,
    register_interface_for_device,
)
from torch._inductor import config as inductor_config
from torch._inductor import ir
from torch._inductor.codegen import common as _common
from torch._inductor.codegen.common import register_backend_for_device
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.triton import TritonScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen  # the CPU's, as is
from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files
from torch._inductor.utils import IndentedBuffer, Placeholder, get_fused_kernel_name
from torch._inductor.virtualized import V
from torch._inductor.wrapper_benchmark import get_kernel_category_by_source_code

from . import _patches

DEVICE = "infini"


class InfiniDeviceOpOverrides(_common.DeviceOpOverrides):
    """What the Python wrapper writes for device housekeeping."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return dedent(
            f"""
            def {name}(_):
                return 0
            """
        )

    def cpp_kernel_type(self) -> str:
        return "void*"

    def set_device(self, device_idx: int) -> str:
        return f"torch.infini.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.infini.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.infini.device({device_idx})"


class _CallsCppKernelsOnInfini:
    """Queues Inductor's C++ kernels for infini buffers on the current
    infini stream through the compiler plug-in (the base class knows "cpu"
    only)."""

    def write_header(self) -> None:
        super().write_header()  # type: ignore[misc]
        self.imports.writeline(  # type: ignore[attr-defined]
            "from torch_infini import _compiler as infini_compiler"
        )
        self.imports.writeline("empty_strided_infini = infini_compiler.empty_strided")  # type: ignore[attr-defined]

    def make_allocation(
        self,
        name: str,
        device: torch.device,
        dtype: torch.dtype,
        shape: Any,
        stride: Any,
        allocation_shape: Any = None,
        is_pinned: bool = False,
    ) -> str:
        # Inductor's fast allocation path knows cpu/cuda/xpu/mtia only; the
        # generic one parses torch.empty_strided's arguments on every call.
        if device.type != DEVICE or inductor_config.test_configs.track_memory_lifecycle:
            return super().make_allocation(  # type: ignore[misc]
                name, device, dtype, shape, stride, allocation_shape, is_pinned
            )
        codegen = self.codegen_python_shape_tuple  # type: ignore[attr-defined]
        allocation = codegen(shape if allocation_shape is None else allocation_shape)
        out = f"{name} = empty_strided_infini({allocation}, {codegen(stride)}, {dtype})"
        if allocation != codegen(shape):
            out += f".as_strided({codegen(shape)}, {codegen(stride)})"
        return out

    def _generate_kernel_call_helper(
        self,
        kernel_name: str,
        call_args: Any,
        *,
        device: Any = None,
        triton: bool = True,
        **kw: Any,
    ) -> None:
        device = device or V.graph.get_current_device_or_throw()
        if not triton and device.type == DEVICE:
            index = device.index if device.index is not None else -1
            args = ", ".join([str(index), *map(str, call_args)])
            self.writeline(f"{kernel_name}.launch({args})")  # type: ignore[attr-defined]
            return
        super()._generate_kernel_call_helper(  # type: ignore[misc]
            kernel_name, call_args, device=device, triton=triton, **kw
        )


class InfiniPythonWrapperCodegen(_CallsCppKernelsOnInfini, PythonWrapperCodegen):
    def _generate_extern_kernel_alloc_helper(self, extern_kernel: Any, args: Any) -> None:
        # A fused operator (a graph pass's rewrite) is called through
        # infini_compiler.operator_call: the same dispatcher call without
        # OpOverload's Python layer (a module-level name, bound once).
        kernel_name = extern_kernel.get_kernel_name()
        if not kernel_name.startswith("torch.ops.infini."):
            super()._generate_extern_kernel_alloc_helper(extern_kernel, args)
            return
        alias = "infini_op_" + kernel_name.removeprefix("torch.ops.infini.").replace(".", "__")
        if alias not in self._infini_operator_calls:
            self._infini_operator_calls.add(alias)
            self.header.writeline(f"{alias} = infini_compiler.operator_call({kernel_name!r})")
        call = f"{alias}({', '.join(args)}){self.ending}"
        if isinstance(extern_kernel.layout, ir.NoneLayout):
            self.writeline(f"{self.declare}{call}")
            return
        output = extern_kernel.get_name()
        self.writeline(f"{self.declare}{output} = {call}")
        origin = extern_kernel.get_origin_node()
        if inductor_config.generate_intermediate_hooks and origin is not None:
            self.writeline(f"run_intermediate_hooks({origin.name!r}, {output})")

    @functools.cached_property
    def _infini_operator_calls(self) -> set[str]:
        return set()

    def write_async_compile_wait(self) -> None:
        super().write_async_compile_wait()
        # The module's C++ kernels (its subgraphs' included), compiled
        # together: one run of the plug-in's compiler instead of one each.
        self.prefix.writeline("infini_compiler.compile_pending(globals())")

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: str | None,
        parent_wrapper: PythonWrapperCodegen | None,
        partition_signatures: Any = None,
    ) -> PythonWrapperCodegen:
        if is_subgraph:
            assert subgraph_name is not None and parent_wrapper is not None
            return InfiniSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return InfiniPythonWrapperCodegen()


class InfiniSubgraphWrapperCodegen(_CallsCppKernelsOnInfini, SubgraphPythonWrapperCodegen):
    pass


class InfiniCppWrapperCodegen:
    """``cpp_wrapper=True`` is not served on infini (it needs C shims for
    every extern kernel); the Python wrapper is."""

    @staticmethod
    def create(*_: Any, **__: Any) -> Any:
        raise NotImplementedError(
            "torch.compile on infini: the C++ wrapper (cpp_wrapper=True) is not supported; "
            "use the default Python wrapper"
        )


class InfiniInterface(DeviceInterface):
    """What Dynamo and Inductor ask of a device at run time (streams, events,
    properties); C++ code generation, no Triton."""

    device = torch.infini.device  # type: ignore[assignment]
    Event = torch.infini.Event  # type: ignore[assignment]
    Stream = torch.infini.Stream  # type: ignore[assignment]

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.infini.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.infini.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            return CpuDeviceProperties(multiprocessing.cpu_count())

    current_device = staticmethod(torch.infini.current_device)
    set_device = staticmethod(torch.infini.set_device)
    device_count = staticmethod(torch.infini.device_count)
    is_available = staticmethod(torch.infini.is_available)
    stream = staticmethod(torch.infini.stream)
    current_stream = staticmethod(torch.infini.current_stream)
    set_stream = staticmethod(torch.infini.set_stream)
    synchronize = staticmethod(torch.infini.synchronize)

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return 0

    @staticmethod
    def get_device_properties(device: torch.types.Device = None) -> Any:
        if _generates_triton():
            return _gpu_properties()
        return CpuDeviceProperties(multiprocessing.cpu_count())

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> Any:
        return _triton_arch() if _generates_triton() else ""

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return _generates_triton()

    @staticmethod
    def raise_if_triton_unavailable(device: torch.types.Device = None) -> None:
        if not _generates_triton():
            raise RuntimeError("torch.compile on infini generates C++ kernels, not Triton")


# The architecture Triton compiles for (an H100/H200's by default): the GPU
# run sets it from the device; without a GPU it is what the test compiles for.
TRITON_ARCH_VARIABLE = "TORCH_INFINI_TRITON_ARCH"


def _triton_arch() -> int:
    return int(os.environ.get(TRITON_ARCH_VARIABLE, "90"))


def _generates_triton() -> bool:
    from . import _compiler

    try:
        return _compiler.source_language() == "triton"
    except Exception:  # noqa: BLE001  (a plug-in that cannot load: torch.compile says so)
        return False


def _gpu_properties() -> Any:
    """What Inductor's Triton heuristics read of a GPU: an sm_90 part's
    (H100/H200: 132 multiprocessors, 64 Ki registers and 2048 threads
    each), the architecture from TORCH_INFINI_TRITON_ARCH."""
    arch = _triton_arch()
    return SimpleNamespace(
        multi_processor_count=132,
        major=arch // 10,
        minor=arch % 10,
        regs_per_multiprocessor=65536,
        max_threads_per_multi_processor=2048,
        max_threads_per_block=1024,
        warp_size=32,
    )


_common.register_device_op_overrides(DEVICE, InfiniDeviceOpOverrides())
register_interface_for_device(DEVICE, InfiniInterface)
_patches.apply_to_inductor()


class InfiniScheduling(CppScheduling):
    """Inductor's C++ scheduling, its kernels defined through the compiler
    plug-in (``infini_compiler.cpp_kernel``) instead of Python bindings."""

    def define_kernel(self, src_code: str, nodes: Any, kernel_args: Any = None) -> str:
        wrapper = V.graph.wrapper_code
        # Kept apart from identical CPU-device kernels of the same graph.
        dedup_key = f"// infini\n{src_code}"
        if dedup_key in wrapper.src_to_kernel:
            return wrapper.src_to_kernel[dedup_key]
        fused_name = (
            get_fused_kernel_name(nodes, inductor_config.cpp.descriptive_names)
            if inductor_config.cpp.descriptive_names
            else ""
        )
        kernel_name = "_".join(["cpp", fused_name, wrapper.next_kernel_suffix()])
        wrapper.src_to_kernel[dedup_key] = kernel_name
        src_code = src_code.replace(str(Placeholder.KERNEL_NAME), "kernel")
        src_code = src_code.replace(str(Placeholder.DESCRIPTIVE_NAME), kernel_name)
        src_code = src_code.replace("#pragma CMT", "//")
        first = src_code.rfind('extern "C"')
        definition = f"{src_code[first : src_code.find(')', first) + 1]};\n"
        args = self.kernel_group.args if kernel_args is None else kernel_args
        _, _, arg_types = args.cpp_argdefs()
        body = IndentedBuffer()
        body.writeline(f"infini_compiler.cpp_kernel({kernel_name!r}, {arg_types!r}, r'''")
        body.splice(src_code, strip=True)
        body.writeline("''')")
        wrapper.define_kernel(kernel_name, body.getvalue(), gpu=False, cpp_definition=definition)
        return kernel_name


Scheduling = InfiniScheduling


class InfiniTritonScheduling(TritonScheduling):
    """Inductor's Triton scheduling (the nvidia plug-in's language), its
    kernels defined through the compiler plug-in
    (``infini_compiler.triton_kernel``) instead of Inductor's own Triton
    runtime."""

    def define_kernel(self, src_code: str, node_schedule: Any, kernel: Any) -> str:
        wrapper = V.graph.wrapper_code
        if src_code in wrapper.src_to_kernel:
            return wrapper.src_to_kernel[src_code]
        fused_name = (
            get_fused_kernel_name(node_schedule, inductor_config.triton.descriptive_names)
            if inductor_config.triton.descriptive_names
            else ""
        )
        kernel_category = get_kernel_category_by_source_code(src_code)[:3]
        kernel_name = "_".join(
            ["triton", kernel_category, fused_name, wrapper.next_kernel_suffix()]
        )
        wrapper.src_to_kernel[src_code] = kernel_name
        src_code = src_code.replace(str(Placeholder.DESCRIPTIVE_NAME), kernel_name)
        src_code = src_code.replace(str(Placeholder.KERNEL_NAME), kernel_name)
        src_code = src_code.replace("#pragma CMT", "#")
        body = IndentedBuffer()
        body.writeline(f"infini_compiler.triton_kernel({kernel_name!r}, r'''")
        body.splice(src_code, strip=True)
        body.writeline("''')")
        wrapper.define_kernel(kernel_name, body.getvalue(), gpu=True)
        return kernel_name


class InfiniGraphPasses(CustomGraphModulePass):
    """The compiler plug-in's graph passes, in its order, on each post-grad
    graph of infini tensors (Inductor's per-device hook). The pipeline is
    the plug-in's ``query_pass_pipeline`` (torch_infini/graph_passes); an
    entry that names no pass raises, naming the plug-in."""

    def _pipeline(self) -> tuple[str, list[Any]]:
        from . import _compiler, graph_passes

        compiler = _compiler.plugin()
        label = f"{compiler.name!r} ({compiler.origin})"
        names = list(compiler.pass_pipeline())
        return label, [graph_passes.resolve(name, label) for name in names]

    def __call__(self, gm: torch.fx.GraphModule) -> None:
        from . import graph_passes

        _, passes = self._pipeline()
        graph_passes.rewrites_enabled()  # a bad TORCH_INFINI_GRAPH_PASSES fails here, named
        for graph_pass in passes:
            graph_pass(gm)

    def uuid(self) -> Any:
        # Inductor's FX graph cache key: the plug-in, its pipeline, the
        # passes' sources (a changed pass recompiles) and which rewrite
        # targets the backend serves (a graph cached on one backend is not
        # reused rewritten for another). Inductor asks for it on every
        # compile, CPU-only graphs included: a plug-in that cannot be used
        # fails the infini graphs (in __call__, with its error), not those.
        from . import _compiler, graph_passes

        try:
            compiler = _compiler.plugin()
            names = tuple(compiler.pass_pipeline())
            self._pipeline()
            served = graph_passes.served_key()
        except Exception as e:  # noqa: BLE001  (reported by __call__)
            return ("unusable", type(e).__name__, str(e))
        return (compiler.name, compiler.origin, names, _hash_of_pass_sources(names), served)


@functools.cache
def _hash_of_pass_sources(names: tuple[str, ...]) -> str:
    from . import graph_passes

    return get_hash_for_files(tuple(graph_passes.source_files(names))).hex()


def register() -> None:
    """Registers infini with Inductor, the plug-in's graph passes included.

    Inductor registers an out-of-tree device itself from the device module's
    ``Scheduling`` and wrapper codegen attributes, but passes no graph pass,
    and only while the device has none registered. So torch_infini registers
    first: the device module's lookup of those names (what Inductor asks the
    first time) calls this, then answers that it has none, and Inductor
    keeps this registration (infini/__init__.py).
    """
    from . import _compiler, _triton
    from .graph_passes import decompositions

    triton = _generates_triton()
    if triton and os.environ.get(_compiler.DEVICE_TYPE_SWITCH):
        # The test-only switch: Triton code for a GPU this machine lacks.
        _triton.install_compile_only_target(_triton_arch())
    register_backend_for_device(
        DEVICE,
        InfiniTritonScheduling if triton else InfiniScheduling,
        InfiniPythonWrapperCodegen,
        InfiniCppWrapperCodegen,
        WrapperFxCodegen,
        device_custom_pass=InfiniGraphPasses(),
    )
    decompositions.register()


register()
