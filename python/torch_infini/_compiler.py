"""torch.compile's kernels through the device type's compiler plug-in.

Each InfiniRT device type (and ``host``) has a compiler plug-in, a C table
(``torch_infini/compiler_plugin.h``; docs/compiler_plugin.md): its
toolchain compiles the source Inductor generates, its runtime strategy
loads the binary, looks kernels up and launches them on the current infini
stream, and its compile strategy names the graph passes to run first.
Built-in plug-ins ship in libtorch_infini; a vendor's is a shared library
named in ``TORCH_INFINI_COMPILER_PLUGINS`` (paths separated by ``:``) or
by an entry point in the ``torch_infini.compiler_plugins`` group (its
value: the library's path, absolute or relative to its distribution's
files, or a ``module:attribute`` reference to the path or to a callable
returning it).

Compiled binaries are cached on disk (Inductor's cache directory, under
``infini/``) by plug-in, options and source, so an FX graph cache hit does
not run the vendor's compiler again.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import os
import re
import shlex
import subprocess
import tempfile
import threading
from importlib import metadata
from typing import Any

import torch

from . import _C, _triton

# The nvidia plug-in compiles Triton through Python's triton package.
_C._compiler_set_triton_compiler(_triton.compile)

ENTRY_POINT_GROUP = "torch_infini.compiler_plugins"

# Inductor's C++ argument types that travel as doubles; every other
# non-pointer argument travels as an int64_t.
_FLOATING = {"float", "double", "const float", "const double"}


# Test only: the device type whose plug-in generates code, whatever the
# backend (the nvidia plug-in's code generation checked without a GPU).
DEVICE_TYPE_SWITCH = "TORCH_INFINI_COMPILER_DEVICE_TYPE"


def device_type() -> str:
    """The device type whose plug-in serves torch.compile: the selected
    InfiniRT type, or ``cpu`` for the host reference device."""
    chosen = os.environ.get(DEVICE_TYPE_SWITCH)
    if chosen:
        return chosen
    backend = _C._backend()
    return "cpu" if backend == "host" else backend


def source_language() -> str:
    """What Inductor generates for infini: the selected plug-in's language
    ("c++" or "triton")."""
    return plugin().source_language


# An entry point's value that names a Python object ("module:attribute",
# importlib.metadata's pattern less extras); anything else, or a name with a
# shared library's suffix ("libvendor.so"), is a path.
_OBJECT_REFERENCE = re.compile(r"^[\w.]+\s*(:\s*[\w.]+\s*)?$")
_LIBRARY_SUFFIX = re.compile(r"\.(so(\.\d+)*|dylib|dll)$")


def _entry_point_library(entry_point: metadata.EntryPoint) -> str:
    """The library an entry point of ENTRY_POINT_GROUP names: its value is
    the library's path (absolute, or relative to its distribution's files),
    or a ``module:attribute`` reference to that path or to a callable
    returning it."""
    value = entry_point.value.strip()
    if not _OBJECT_REFERENCE.match(value) or _LIBRARY_SUFFIX.search(value):
        dist = getattr(entry_point, "dist", None)
        if not os.path.isabs(value) and dist is not None:
            return os.fspath(dist.locate_file(value))
        return value
    loaded = entry_point.load()
    path = loaded() if callable(loaded) else loaded
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"entry point {entry_point.name!r} ({entry_point.value}) in group "
            f"{ENTRY_POINT_GROUP!r} gave {path!r}; expected the path of a compiler "
            "plug-in library"
        )
    return os.fspath(path)


def _entry_point_libraries() -> list[str]:
    return [_entry_point_library(e) for e in metadata.entry_points(group=ENTRY_POINT_GROUP)]


@functools.cache
def _register_entry_points() -> None:
    for path in _entry_point_libraries():
        _C._compiler_add_external(path)


def plugin(for_device_type: str | None = None) -> Any:
    """The compiler plug-in of ``for_device_type`` (default: the selected
    one); raises naming the plug-in and what is wrong if it cannot be used."""
    _register_entry_points()
    return _C._compiler_plugin(for_device_type or device_type())


# ---------------------------------------------------------------- C++ kernels


def cpp_options() -> str:
    """The compiler flags Inductor's C++ code generation requires (the vector
    ISA it generated for, PyTorch's headers, OpenMP), as Inductor itself
    builds its CPU kernels, for Inductor's configuration now."""
    from torch._inductor import config
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    cpp = config.cpp
    return _cpp_options(
        pick_vec_isa(),
        (
            getattr(cpp, "march", None),  # PyTorch 2.13 has it, 2.11 not
            cpp.enable_unsafe_math_opt_flag,
            cpp.enable_floating_point_contract_flag,
            cpp.cxx,
            tuple(cpp.extra_flags) if hasattr(cpp, "extra_flags") else (),
        ),
    )


@functools.cache
def _cpp_options(vec_isa: Any, _config: tuple[Any, ...]) -> str:
    from torch._inductor import config
    from torch._inductor.codecache import (
        CppPythonBindingsCodeCache,
        _get_cpp_prefix_header,
        _precompile_header,
    )
    from torch._inductor.cpp_builder import CppBuilder, CppTorchDeviceOptions

    flags = {
        "vec_isa": vec_isa,
        "device_type": "cpu",
        **CppPythonBindingsCodeCache.cpp_compile_command_flags,
    }
    options = CppTorchDeviceOptions(**flags)
    # The kernels' common header (ATen's vector types) precompiled once, as
    # Inductor does for its own CPU kernels: compiling it into every kernel
    # takes seconds each.
    header = _get_cpp_prefix_header("cpu")
    if config.cpp_cache_precompile_headers and header:
        command = CppBuilder(name="o", sources="i", BuildOption=options).get_command_line()
        options.precompiled_header = _precompile_header(header, command, **flags)
    source, output = "__torch_infini_source__.cpp", "__torch_infini_output__"
    with tempfile.TemporaryDirectory() as directory:
        command = CppBuilder(
            name=output, sources=source, BuildOption=options, output_dir=directory
        ).get_command_line()
    words = shlex.split(command)[1:]  # without the compiler
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "-o":
            skip = True
        elif not word.endswith(source):
            kept.append(word)
    return shlex.join(kept)


def _launch_entry(arg_types: list[str], symbol: str = "kernel") -> str:
    """What the cpu plug-in launches (compiler_plugin.h): ``<symbol>__launch``
    reads each argument from its 8-byte slot and calls ``kernel``, and C++
    exceptions become an error message instead of crossing the stream's
    worker; ``<symbol>__arg_kinds`` tells the plug-in which slots hold
    pointers (it maps device addresses to where host kernels reach them)."""
    params = []
    for i, cpp_type in enumerate(t.strip() for t in arg_types):
        if cpp_type.endswith("*"):
            params.append(f"*static_cast<{cpp_type}*>(args[{i}])")
        elif cpp_type in _FLOATING:
            params.append(f"static_cast<{cpp_type}>(*static_cast<const double*>(args[{i}]))")
        else:
            params.append(f"static_cast<{cpp_type}>(*static_cast<const int64_t*>(args[{i}]))")
    call = ", ".join(params)
    return f"""
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
extern "C" const size_t {symbol}__num_args = {len(arg_types)};
extern "C" const char {symbol}__arg_kinds[] = "{_argument_kinds(arg_types)}";
extern "C" int {symbol}__launch(void** args, char* error, size_t error_size) {{
  try {{
    kernel({call});
    return 0;
  }} catch (const std::exception& e) {{
    std::snprintf(error, error_size, "%s", e.what());
  }} catch (...) {{
    std::snprintf(error, error_size, "%s", "the kernel threw a non-standard exception");
  }}
  return 1;
}}
"""


def _libtorch_infini() -> str:
    """The libtorch_infini.so this process runs (built-in plug-ins live there)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith("/libtorch_infini.so"):
                return line.split()[-1]
    return _C.__file__


@functools.cache
def _system_compiler() -> str:
    """The C++ compiler the built-in cpu plug-in runs, and its version."""
    command = os.environ.get("TORCH_INFINI_CXX") or os.environ.get("CXX") or "c++"
    try:
        version = subprocess.run(
            [*shlex.split(command), "--version"], capture_output=True, text=True, check=False
        ).stdout
    except OSError as error:
        version = str(error)
    return f"{command}\n{version}"


def _identity(compiler: Any) -> tuple[str, ...]:
    """What a cached binary depends on besides its source and options: the
    plug-in, the library it lives in as built (a rebuilt plug-in compiles
    afresh), and for the built-in cpu plug-in the system compiler."""
    built_in = compiler.origin == "built-in"
    library = _libtorch_infini() if built_in else compiler.origin
    try:
        stat = os.stat(library)
        build = f"{library}:{stat.st_size}:{stat.st_mtime_ns}"
    except OSError:
        build = f"{library}:unknown"
    toolchain = ""
    if built_in and compiler.name == "cpu":
        toolchain = _system_compiler()
    elif built_in and compiler.name == "nvidia":
        toolchain = _triton.toolchain()
    return (compiler.name, compiler.origin, build, toolchain)


class _BinaryCache:
    """Compiled binaries by (plug-in, options, source): in memory, and on
    disk under Inductor's cache directory unless Inductor's caches are off
    (``force_disable_caches``, as for Inductor's own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._binaries: dict[str, bytes] = {}

    def _path(self, key: str) -> str:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        from . import _compile_cache

        _compile_cache.secure_directories()  # before a binary is read from there
        return os.path.join(cache_dir(), "infini", key[:2], f"{key}.bin")

    def get(self, compiler: Any, source: str, options: str) -> bytes:
        key = hashlib.sha256(
            "\0".join((*_identity(compiler), options, source)).encode()
        ).hexdigest()
        with self._lock:
            if key in self._binaries:
                return self._binaries[key]
        from torch._inductor import config

        if config.force_disable_caches:
            binary = compiler.compile(source, options)
            with self._lock:
                return self._binaries.setdefault(key, binary)
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                binary = f.read()
        except OSError:
            binary = compiler.compile(source, options)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=os.path.dirname(path), delete=False) as f:
                f.write(binary)
            os.replace(f.name, path)
        with self._lock:
            self._binaries[key] = binary
        return binary


_binaries = _BinaryCache()


# One of Inductor's C++ kernels, compiled and loaded by the plug-in, with
# its argument kinds: ``kernel.launch(device, *args)`` queues it on the
# device's current infini stream. The launch is C++ from the wrapper's call
# on (tensors checked and read there): no Python frame per kernel.
CppKernel = _C._BoundKernel


def _argument_kinds(arg_types: list[str]) -> str:
    """One letter per argument, as the plug-in's launch slots hold them:
    ``p`` pointer, ``f`` double, ``i`` int64."""
    kinds = []
    for cpp_type in (t.strip() for t in arg_types):
        kinds.append("p" if cpp_type.endswith("*") else "f" if cpp_type in _FLOATING else "i")
    return "".join(kinds)


# What compiled graphs allocate their buffers with (Inductor's
# empty_strided_cpu for infini): no argument parsing, no dispatcher.
empty_strided = _C._compiler_empty_strided


@functools.cache
def operator_call(kernel_name: str) -> Any:
    """What Inductor's wrapper calls for ``kernel_name``, a fused operator's
    overload as the wrapper spells it (``torch.ops.infini.rms_norm.default``):
    the same operator through the same dispatcher, without OpOverload's
    Python layer (``_C._OperatorCall``; about 2 us a call less)."""
    namespace, name, overload = kernel_name.removeprefix("torch.ops.").split(".")
    python_op = getattr(getattr(getattr(torch.ops, namespace), name), overload)
    return _C._OperatorCall(
        f"{namespace}::{name}", "" if overload == "default" else overload, python_op
    )


class PendingCppKernel:
    """A C++ kernel of a wrapper module being loaded, not compiled yet.

    ``cpp_kernel`` defers each kernel of the module; the module's last line,
    ``compile_pending(globals())``, compiles them all in one run of the
    plug-in's compiler (each run costs ~0.4 s before its first kernel:
    the compiler's start and Inductor's precompiled header) and puts the
    loaded kernels in their names' place. Anything that launches a pending
    kernel before then compiles it on the spot.
    """

    __slots__ = ("arg_types", "kernel", "name", "source")

    def __init__(self, name: str, arg_types: list[str], source: str) -> None:
        self.name = name
        self.arg_types = arg_types
        self.source = source
        self.kernel: CppKernel | None = None

    def launch(self, *args: Any) -> None:
        _resolve(self).launch(*args)


# The kernels cpp_kernel deferred on this thread (a module loads on one thread).
_queued = threading.local()


def _queue() -> list[PendingCppKernel]:
    if not hasattr(_queued, "kernels"):
        _queued.kernels = []
    return _queued.kernels


def _include_lines(source: str) -> tuple[list[str], str]:
    """A kernel's #include lines, and the rest of its source."""
    includes, rest = [], []
    for line in source.splitlines():
        (includes if line.lstrip().startswith("#include") else rest).append(line)
    return includes, "\n".join(rest)


def _translation_unit(runtime_source: str, kernels: list[PendingCppKernel]) -> str:
    """One source for several kernels: their #include lines first (each
    header once, outside any namespace), then each kernel in a namespace of
    its own with its name ``kernel`` made unique by a macro, beside its launch
    entry ``kernel__launch`` (the first) or ``kernel_<i>__launch``."""
    headers: dict[str, None] = {}
    bodies = []
    for i, k in enumerate(kernels):
        includes, rest = _include_lines(k.source)
        headers.update(dict.fromkeys(includes))
        entry_includes, entry = _include_lines(_launch_entry(k.arg_types, _symbol(i)))
        headers.update(dict.fromkeys(entry_includes))
        bodies.append(
            f"namespace torch_infini_k{i} {{\n#define kernel torch_infini_kernel_{i}\n"
            f"{rest}\n{entry}\n#undef kernel\n}}  // namespace torch_infini_k{i}\n"
        )
    return runtime_source + "\n".join(headers) + "\n" + "".join(bodies)


def _symbol(index: int) -> str:
    return "kernel" if index == 0 else f"kernel_{index}"


def _load_cpp_kernels(kernels: list[PendingCppKernel]) -> None:
    """Compiles ``kernels`` in one run of the plug-in's compiler, loads the
    binary and sets each one's ``kernel``."""
    compiler = plugin()
    if compiler.source_language != "c++":
        raise NotImplementedError(
            f"torch.compile on infini: the {compiler.device_type} compiler plug-in "
            f"{compiler.name!r} ({compiler.origin}) compiles {compiler.source_language}, "
            "but Inductor generated C++ for this graph"
        )
    full = _translation_unit(compiler.runtime_source(), kernels)
    options = cpp_options()
    key = (compiler.name, compiler.origin, options, full)
    with _loaded_lock:
        loaded = _loaded.get(key)
    if loaded is None:
        # A graph compiled again (a recompile, an FX graph cache hit) reuses
        # the loaded module instead of loading another copy.
        module = compiler.load(_binaries.get(compiler, full, options))
        loaded = [module.kernel(_symbol(i)) for i in range(len(kernels))]
        with _loaded_lock:
            loaded = _loaded.setdefault(key, loaded)
    for k, kernel in zip(kernels, loaded, strict=True):
        k.kernel = kernel.bind(k.name, _argument_kinds(k.arg_types))


def _load_cpp_kernel(name: str, arg_types: list[str], source: str) -> CppKernel:
    """One kernel, compiled and loaded on its own."""
    pending = PendingCppKernel(name, arg_types, source)
    _load_cpp_kernels([pending])
    assert pending.kernel is not None
    return pending.kernel


_loaded: dict[tuple[str, str, str, str], Any] = {}
_loaded_lock = threading.Lock()


_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _forget_pool_in_child() -> None:
    # The pool's threads do not survive a fork: a child makes its own.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


# A run of the compiler for at least this many kernels: where Inductor
# compiles in parallel, a module's kernels are split among its threads.
_KERNELS_PER_RUN = 4


def _compile(kernels: list[PendingCppKernel]) -> None:
    """Compiles ``kernels``: one run of the compiler, or one per compile
    thread for a module with many kernels."""
    from torch._inductor.async_compile import get_compile_threads

    if not kernels:
        return
    runs = max(1, min(get_compile_threads(), len(kernels) // _KERNELS_PER_RUN))
    if runs == 1:
        _load_cpp_kernels(kernels)
        return
    size = -(-len(kernels) // runs)
    chunks = [kernels[i : i + size] for i in range(0, len(kernels), size)]
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=get_compile_threads(), thread_name_prefix="torch_infini_compile"
            )
        pool = _pool
    for future in [pool.submit(_load_cpp_kernels, chunk) for chunk in chunks]:
        future.result()


def _resolve(pending: PendingCppKernel) -> CppKernel:
    """The loaded kernel; a kernel launched before its module's
    compile_pending is compiled with the rest deferred on this thread."""
    if pending.kernel is None and pending in _queue():
        queued = [k for k in _queue() if k.kernel is None]
        _queue().clear()
        _compile(queued)
    if pending.kernel is None:  # deferred on another thread, or its run failed
        _load_cpp_kernels([pending])
    assert pending.kernel is not None
    return pending.kernel


def cpp_kernel(name: str, arg_types: list[str], source: str) -> PendingCppKernel:
    """What Inductor's wrapper calls for each C++ kernel of an infini graph:
    the kernel, deferred until ``compile_pending`` compiles the module's
    kernels together."""
    pending = PendingCppKernel(name, arg_types, source)
    _queue().append(pending)
    return pending


def compile_pending(scope: dict[str, Any]) -> None:
    """The wrapper module's last line: compiles its deferred kernels and
    binds each name in ``scope`` to its loaded kernel (launched from C++
    from then on, no Python frame in between)."""
    # The module's own kernels, in their order (a stable source for the
    # binary cache); whatever else is queued on this thread was deferred by a
    # module whose loading failed before its last line, and is dropped.
    kernels = [v for v in scope.values() if isinstance(v, PendingCppKernel) and v.kernel is None]
    _queue().clear()
    _compile(kernels)
    for name, value in list(scope.items()):
        if isinstance(value, PendingCppKernel):
            scope[name] = _resolve(value)


# ------------------------------------------------------------- Triton kernels


class TritonKernel:
    """One of Inductor's Triton kernels, compiled and loaded by the plug-in
    (its first autotuning configuration, no benchmarking); ``run`` queues it
    on the current infini stream with the grid Inductor's launcher would
    compute."""

    __slots__ = ("_grid", "_kernel", "_kinds", "name")

    def __init__(self, name: str, kernel: Any, kinds: str, grid: Any) -> None:
        self.name = name
        self._kernel = kernel
        self._kinds = kinds
        self._grid = grid

    def run(self, *args: Any, stream: Any = None) -> None:
        del stream  # the current infini stream (the wrapper's raw stream is a placeholder)
        if len(args) != len(self._kinds):
            raise ValueError(
                f"kernel {self.name!r} takes {len(self._kinds)} arguments, got {len(args)}"
            )
        grid = self._grid(*args)
        try:
            self._kernel.launch(args, self._kinds, -1, grid)
        except TypeError as e:
            raise TypeError(f"kernel {self.name!r}: {e}") from None


def _launch_kind(triton_type: str) -> str:
    # The launch slots: pointers, doubles for floating scalars, else int64.
    if triton_type.startswith("*"):
        return "p"
    return "f" if triton_type.startswith(("fp", "bf")) else "i"


def _grid_function(autotuner: Any, config: Any, arg_names: list[str]) -> Any:
    """``grid(*args) -> (x, y, z)``: Inductor's grid expressions for the
    configuration, over the kernel's arguments (its numels)."""
    from torch._inductor.runtime.triton_heuristics import GridExpr

    grid = GridExpr.from_meta(autotuner.inductor_meta, config)
    body = "\n".join(f"    {line}" for line in grid.prefix) or "    pass"
    constants = ", ".join(f"{k}={v!r}" for k, v in config.kwargs.items())
    source = (
        f"def grid({', '.join(arg_names)}, *, {constants or '_unused=None'}):\n{body}\n"
        f"    return ({grid.x_grid}, {grid.y_grid}, {grid.z_grid})\n"
    )
    scope: dict[str, Any] = {}
    exec(source, scope)  # noqa: S102  (Inductor's own grid expressions)
    return scope["grid"]


def _load_triton_kernel(compiler: Any, binary: bytes) -> Any:
    """The plug-in's module load and kernel lookup (a test without a GPU
    replaces it)."""
    return compiler.load(binary).kernel(_triton.kernel_name(binary))


def triton_kernel(name: str, source: str) -> TritonKernel:
    """What the wrapper Inductor generates for infini calls for each Triton
    kernel (the nvidia plug-in's language)."""
    import json

    compiler = plugin()
    if compiler.source_language != "triton":
        raise NotImplementedError(
            f"torch.compile on infini: the {compiler.device_type} compiler plug-in "
            f"{compiler.name!r} ({compiler.origin}) compiles {compiler.source_language}, "
            "but Inductor generated Triton for this graph"
        )
    autotuner = _triton.kernel_object(source, name)
    config = autotuner.configs[0]
    signature = dict(autotuner.triton_meta["signature"])
    constants = dict(autotuner.triton_meta.get("constants", {}))
    arg_names = [a for a, t in signature.items() if t != "constexpr" and a not in constants]
    options = json.dumps(
        {
            "kernel": name,
            "signature": signature,
            "constexprs": {**constants, **config.kwargs},
            "arch": _triton.arch(autotuner),
            "num_warps": config.num_warps,
            "num_stages": config.num_stages,
        },
        sort_keys=True,
    )
    key = (compiler.name, compiler.origin, options, source)
    with _loaded_lock:
        kernel = _loaded.get(key)
    if kernel is None:
        kernel = _load_triton_kernel(compiler, _binaries.get(compiler, source, options))
        with _loaded_lock:
            kernel = _loaded.setdefault(key, kernel)
    kinds = "".join(_launch_kind(signature[a]) for a in arg_names)
    grid = _grid_function(autotuner, config, arg_names)
    return TritonKernel(name, kernel, kinds, grid)
