"""The compiler plug-in (torch_infini/compiler_plugin.h, torch_infini/_compiler.py):
torch.compile's kernels are compiled, loaded and launched through the
device type's plug-in, queued on the current infini stream without a
synchronization; external plug-ins are found by TORCH_INFINI_COMPILER_PLUGINS,
and every way a plug-in can be unusable is a clear error naming it.

Plug-ins written for these tests are C files compiled here with the system C
compiler against the installed header.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch
import torch_infini
from infini_testing import (
    describe,
    private_inductor_cache,
    raises_exactly,
    requires_async_host,
    requires_inductor,
    run_python,
)
from torch_infini import _C, _compiler

DEVICE = torch.device("infini", 0)
HEADER_DIR = Path(__file__).resolve().parents[3] / "native" / "compiler" / "include"
EXAMPLE_DIR = Path(__file__).resolve().parents[3] / "examples" / "compiler_plugin"

pytestmark = requires_inductor


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _build_plugin(directory: Path, source: str, link_torch_infini: bool = False) -> Path:
    """A shared library built from the C `source` against compiler_plugin.h."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "a C compiler is needed to build test plug-ins"
    directory.mkdir(parents=True, exist_ok=True)
    c_file = directory / "plugin.c"
    c_file.write_text(textwrap.dedent(source))
    library = directory / "libplugin.so"
    command = [compiler, "-shared", "-fPIC", f"-I{HEADER_DIR}", "-o", str(library), str(c_file)]
    if link_torch_infini:
        lib = Path(_compiler._libtorch_infini())
        command += [f"-L{lib.parent}", "-ltorch_infini", f"-Wl,-rpath,{lib.parent}"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return library


# A plug-in whose init fills a table from `body` (C statements over `t`).
def _plugin_source(body: str) -> str:
    return f"""
        #include <string.h>
        #include <stdio.h>
        #include "torch_infini/compiler_plugin.h"
        static int compile_(void* c, const char* s, const char* o, TorchInfiniBinary* b,
                            char* e, size_t n) {{ return 1; }}
        static void free_(void* c, TorchInfiniBinary* b) {{}}
        static int load_(void* c, const void* b, size_t s, void** m, char* e, size_t n) {{
          return 1; }}
        static int unload_(void* c, void* m, char* e, size_t n) {{ return 0; }}
        static int address_(void* c, void* m, const char* k, void** f, size_t* a, char* e,
                            size_t n) {{ return 1; }}
        static int launch_(void* c, void* f, void** a, size_t na, const uint32_t* g,
                           const uint32_t* b, size_t sm, void* s, char* e, size_t n) {{
          return 1; }}
        int torch_infini_compiler_plugin_init(TorchInfiniCompilerPlugin* t, size_t size,
                                              char* error, size_t error_size) {{
          t->size = sizeof *t;
          t->abi_version = TORCH_INFINI_COMPILER_PLUGIN_ABI_VERSION;
          t->name = "broken";
          t->device_type = "cpu";
          t->source_language = TORCH_INFINI_SOURCE_CPP;
          t->compile = compile_;
          t->free_binary = free_;
          t->module_load = load_;
          t->module_unload = unload_;
          t->get_kernel_address = address_;
          t->launch_kernel = launch_;
          {body}
          return 0;
        }}
    """


# ---------------------------------------------------------------- the built-in plug-in


def test_the_cpu_plugin_serves_host_addressable_backends() -> None:
    plugin = _compiler.plugin()
    assert _compiler.device_type() == "cpu"
    assert (plugin.name, plugin.device_type, plugin.source_language, plugin.origin) == (
        "cpu",
        "cpu",
        "c++",
        "built-in",
    )
    assert _C._compiler_builtin_device_types() == ["cpu", "nvidia"]
    assert plugin.pass_pipeline() == [  # torch_infini/graph_passes
        "torch_infini.graph_passes.rms_norm:rewrite",
        "torch_infini.graph_passes.swiglu:rewrite",
        "torch_infini.graph_passes.causal_softmax:rewrite",
        "torch_infini.graph_passes.rotary:rewrite",
    ]
    assert plugin.runtime_source() == ""


def test_no_plugin_serves_an_unknown_device_type() -> None:
    with raises_exactly(NotImplementedError, match="no compiler plug-in serves device type 'vx'"):
        _C._compiler_plugin("vx")


_TWICE = """
#include <cstdint>
extern "C" void kernel(const float* in_ptr0, float* out_ptr0, const int64_t ks0) {
  for (int64_t i = 0; i < ks0; ++i) out_ptr0[i] = in_ptr0[i] * 2.0f;
}
"""
_TWICE_TYPES = ["const float*", "float*", "const int64_t"]


def test_a_kernel_is_compiled_loaded_and_launched_by_the_plugin() -> None:
    kernel = _compiler._load_cpp_kernel("twice", _TWICE_TYPES, _TWICE)
    x = torch.arange(10, dtype=torch.float32)
    dx = x.to(DEVICE)
    out = torch.empty(10, device=DEVICE)
    kernel.launch(0, dx, out, 10)
    assert torch.equal(out.cpu(), x * 2)
    # Loaded once: the same source again reuses the module.
    again = _compiler._load_cpp_kernel("twice", _TWICE_TYPES, _TWICE)
    assert again._kernel is kernel._kernel


def test_a_launch_with_the_wrong_arguments_is_refused_naming_the_kernel() -> None:
    kernel = _compiler._load_cpp_kernel("twice", _TWICE_TYPES, _TWICE)
    dx = torch.ones(4, device=DEVICE)
    with raises_exactly(ValueError, match="kernel 'twice' takes 3 arguments, got 2"):
        kernel.launch(0, dx, dx)
    # Below the Python wrapper, the loaded kernel checks too.
    with raises_exactly(ValueError, match="kernel 'kernel' takes 3 arguments, got 2"):
        kernel._kernel.launch([dx.data_ptr(), dx.data_ptr()], "pp", 0)
    with raises_exactly(TypeError, match="kernel 'twice': argument 0 must be an infini tensor"):
        kernel.launch(0, torch.ones(4), dx, 4)
    with raises_exactly(
        TypeError, match="kernel 'twice': argument 1: expected an infini tensor or an address"
    ):
        kernel.launch(0, dx, "out", 4)
    with raises_exactly(TypeError, match="kernel 'twice': argument 2: expected an int, got float"):
        kernel.launch(0, dx, dx, 4.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_compiled_graphs_allocate_as_torch_empty_strided(dtype: torch.dtype) -> None:
    """empty_strided_infini, the compiled wrapper's allocator: a tensor like
    torch.empty_strided(..., device="infini") on the current device."""
    got = _compiler.empty_strided((3, 4), (1, 3), dtype)
    want = torch.empty_strided((3, 4), (1, 3), dtype=dtype, device="infini")
    assert (got.shape, got.stride(), got.dtype, got.device) == (
        want.shape,
        want.stride(),
        want.dtype,
        want.device,
    )
    assert got.device.index == torch.infini.current_device()
    got.fill_(1)
    assert torch.equal(got.cpu(), torch.ones(3, 4, dtype=dtype))
    with raises_exactly(TypeError, match="dtype must be a torch.dtype, got str"):
        _compiler.empty_strided((3,), (1,), "float32")


def test_an_exception_in_a_kernel_is_raised_not_lost() -> None:
    source = """
#include <stdexcept>
extern "C" void kernel(float* out_ptr0) { throw std::runtime_error("kernel says no"); }
"""
    kernel = _compiler._load_cpp_kernel("thrower", ["float*"], source)
    out = torch.empty(1, device=DEVICE)
    # Inline streams raise at the launch, async ones at the next synchronize.
    with pytest.raises(RuntimeError, match="kernel says no"):
        kernel.launch(0, out)
        torch.infini.synchronize()


def test_a_compile_error_gives_the_compiler_message_and_keeps_the_source() -> None:
    plugin = _compiler.plugin()
    with raises_exactly(RuntimeError, match="compile failed: the C.. compiler failed") as info:
        plugin.compile("int broken( {\n", _compiler.cpp_options())
    message = str(info.value)
    assert "error" in message  # the compiler's own diagnostic
    kept = Path(message.split("the source is kept at ", 1)[1].split()[0])
    assert kept.read_text() == "int broken( {\n"
    shutil.rmtree(kept.parent)


def test_a_graphs_kernels_are_compiled_in_one_run_of_the_compiler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each run of the plug-in's compiler costs ~0.4 s before its first
    kernel (the compiler's start, Inductor's precompiled header): a graph's
    C++ kernels go to the plug-in as one source, and each still computes
    what the CPU computes."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    runs: list[str] = []
    get = _compiler._binaries.get

    def counted(compiler: object, source: str, options: str) -> bytes:
        runs.append(source)
        return get(compiler, source, options)

    monkeypatch.setattr(_compiler._binaries, "get", counted)
    # A constant of this run: sources no cache has seen.
    scale = float(torch.rand(()).item()) + 1.0

    def f(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = torch.softmax(a * scale, -1) @ b
        return s.relu().sum(0), (a.t() * scale).exp().amax(-1)

    a, b = torch.randn(16, 8), torch.randn(8, 8)
    with config.patch(compile_threads=1):
        (got, codes) = run_and_get_code(torch.compile(f), a.to(DEVICE), b.to(DEVICE))
    definition = re.compile(r"infini_compiler\.cpp_kernel\('(\w+)'")
    kernels = [name for code in codes for name in definition.findall(code)]
    assert len(kernels) >= 2, kernels
    assert len(runs) == 1, f"{len(runs)} compiler runs for the kernels {kernels}"
    for name in kernels:
        assert f"#define kernel torch_infini_kernel_{kernels.index(name)}" in runs[0]
    for g, w in zip(got, f(a, b), strict=True):
        assert g.device == DEVICE and g.stride() == w.stride()
        # Inductor's C++ kernels against eager CPU: reductions and exp are
        # vectorized in another order than ATen's, hence a tolerance.
        torch.testing.assert_close(g.cpu(), w)


def _twice_times(factor: str) -> str:
    return _TWICE.replace("2.0f", factor)


def test_a_kernel_launched_before_its_modules_last_line_compiles_then() -> None:
    """A kernel launched before compile_pending (or defined outside a
    wrapper module) is compiled on the spot, with the rest deferred on this
    thread in the same run, and computes what it says."""
    first = _compiler.cpp_kernel("twice", _TWICE_TYPES, _twice_times("2.5f"))
    second = _compiler.cpp_kernel("thrice", _TWICE_TYPES, _twice_times("3.5f"))
    x = torch.arange(6, dtype=torch.float32)
    dx, out = x.to(DEVICE), torch.empty(6, device=DEVICE)
    first.launch(0, dx, out, 6)
    assert torch.equal(out.cpu(), x * 2.5)
    assert second.kernel is not None, "not compiled in the same run"
    second.launch(0, dx, out, 6)
    assert torch.equal(out.cpu(), x * 3.5)


def test_a_modules_last_line_compiles_its_own_kernels_and_drops_the_rest() -> None:
    """What a module whose loading failed before its last line deferred is
    not compiled with the next module's kernels."""
    stale = _compiler.cpp_kernel("stale", _TWICE_TYPES, _twice_times("5.5f"))
    scope: dict[str, object] = {
        "mine": _compiler.cpp_kernel("mine", _TWICE_TYPES, _twice_times("4.5f"))
    }
    _compiler.compile_pending(scope)
    assert not isinstance(scope["mine"], _compiler.PendingCppKernel)
    assert stale.kernel is None
    x = torch.arange(6, dtype=torch.float32)
    dx, out = x.to(DEVICE), torch.empty(6, device=DEVICE)
    scope["mine"].launch(0, dx, out, 6)  # type: ignore[attr-defined]
    assert torch.equal(out.cpu(), x * 4.5)
    stale.launch(0, dx, out, 6)  # compiled alone, if ever launched
    assert torch.equal(out.cpu(), x * 5.5)


# ---------------------------------------------------------------- stream order


@requires_async_host
def test_a_compiled_graph_queues_its_kernels_and_returns_without_synchronizing() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a * b + 1).relu().sum(-1) + a.amax(-1)

    a, b = torch.randn(64, 33), torch.randn(64, 33)
    da, db = a.to(DEVICE), b.to(DEVICE)
    compiled = torch.compile(f)
    compiled(da, db)  # compiles
    torch.infini.synchronize()
    with torch_infini.cpu_fallback.strict():
        launches = _C._compiler_kernel_launches()
        before = _C._host_synchronizations()
        out = compiled(da, db)
        after = _C._host_synchronizations()
        launches = _C._compiler_kernel_launches() - launches
    assert launches > 0, "no kernel of the plug-in was launched"
    assert after == before, f"{after - before} synchronizations in a compiled call"
    torch.testing.assert_close(out.cpu(), f(a, b))


# ---------------------------------------------------------------- external plug-ins


def test_an_unloadable_library_is_a_clear_error(tmp_path: Path) -> None:
    not_a_library = tmp_path / "libnothing.so"
    not_a_library.write_text("not an ELF file")
    with raises_exactly(RuntimeError, match=f"compiler plug-in {not_a_library}: cannot be loaded"):
        _C._compiler_load_external(str(not_a_library))


def test_a_library_without_the_init_symbol_is_refused(tmp_path: Path) -> None:
    library = _build_plugin(tmp_path, "int unrelated(void) { return 0; }\n")
    with raises_exactly(RuntimeError, match="exports no torch_infini_compiler_plugin_init"):
        _C._compiler_load_external(str(library))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            'snprintf(error, error_size, "no licence for this host"); return 7;',
            "its init function failed: no licence for this host",
        ),
        ("t->size = 16;", "its table size is 16 bytes; ABI version 1 needs"),
        ("t->abi_version = 99;", "it was built for ABI version 99, torch_infini implements"),
        ("t->launch_kernel = NULL;", "'broken' leaves launch_kernel NULL"),
        ("t->name = NULL;", "its table has no name"),
        ('t->source_language = "fortran";', "'broken' compiles 'fortran'"),
    ],
    ids=["init-fails", "size", "abi-version", "missing-function", "no-name", "language"],
)
def test_an_unusable_plugin_is_refused_naming_it_and_why(
    tmp_path: Path, body: str, message: str
) -> None:
    library = _build_plugin(tmp_path, _plugin_source(body))
    with raises_exactly(RuntimeError, match=re.escape(f"compiler plug-in from {library}: ")):
        _C._compiler_load_external(str(library))
    with raises_exactly(RuntimeError, match=f"{re.escape(f'{library}: ')}{message}"):
        _C._compiler_load_external(str(library))


_WRAPPED_CPU = """
#include <string.h>
#include "torch_infini/compiler_plugin.h"
/* The built-in cpu plug-in under another name, counting its compiles. */
int compiles = 0;
static int (*cpu_compile)(void*, const char*, const char*, TorchInfiniBinary*, char*, size_t);
static int counting_compile(void* c, const char* s, const char* o, TorchInfiniBinary* b,
                            char* e, size_t n) {
  ++compiles;
  return cpu_compile(c, s, o, b, e, n);
}
int torch_infini_compiler_plugin_init(TorchInfiniCompilerPlugin* t, size_t size, char* error,
                                      size_t error_size) {
  int status = torch_infini_cpu_compiler_plugin_init(t, size, error, error_size);
  if (status != 0) return status;
  t->name = "counting-cpu";
  cpu_compile = t->compile;
  t->compile = counting_compile;
  return 0;
}
"""

_COMPILE_IN_A_PROCESS = """
import ctypes, os, torch, torch_infini
from torch_infini import _compiler
def f(a):
    return (a * 3).sin() + 1
x = torch.randn(17)
got = torch.compile(f)(x.to("infini"))
torch.testing.assert_close(got.cpu(), f(x))
plugin = _compiler.plugin()
library = ctypes.CDLL(os.environ["TORCH_INFINI_COMPILER_PLUGINS"])
print("PLUGIN", plugin.name, plugin.origin, ctypes.c_int.in_dll(library, "compiles").value)
"""


def _compile_in_a_process(plugins: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """_COMPILE_IN_A_PROCESS with TORCH_INFINI_COMPILER_PLUGINS naming `plugins`."""
    return run_python(
        _COMPILE_IN_A_PROCESS,
        env={
            "TORCH_INFINI_COMPILER_PLUGINS": str(plugins),
            **private_inductor_cache(tmp_path / "inductor"),
        },
        timeout=300,
    )


def test_an_external_plugin_serves_its_device_type_instead_of_the_built_in_one(
    tmp_path: Path,
) -> None:
    library = _build_plugin(tmp_path, _WRAPPED_CPU, link_torch_infini=True)
    proc = _compile_in_a_process(library, tmp_path)
    assert proc.returncode == 0, describe(proc)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PLUGIN "))
    name, origin, compiles = line.split()[1:]
    assert (name, origin) == ("counting-cpu", str(library))
    assert int(compiles) >= 1


def test_the_example_vendor_plugin_serves_torch_compile_with_its_own_pass(
    tmp_path: Path,
) -> None:
    """examples/compiler_plugin (ctest builds it too): one C file on the cpu
    table, loaded through TORCH_INFINI_COMPILER_PLUGINS; its run_example.py
    checks its compiles, launches and graph pass, and the result."""
    library = _build_plugin(
        tmp_path, (EXAMPLE_DIR / "example_plugin.c").read_text(), link_torch_infini=True
    )
    pythonpath = os.pathsep.join(p for p in (str(EXAMPLE_DIR), os.environ.get("PYTHONPATH")) if p)
    proc = run_python(
        (EXAMPLE_DIR / "run_example.py").read_text(),
        env={
            "TORCH_INFINI_COMPILER_PLUGINS": str(library),
            "PYTHONPATH": pythonpath,
            **private_inductor_cache(tmp_path / "inductor"),
        },
        timeout=300,
    )
    assert proc.returncode == 0, describe(proc)
    assert re.search(
        rf"plug-in example-vendor \({re.escape(str(library))}\): [1-9]\d* compiles, "
        r"[1-9]\d* launches, 1 relu folds",
        proc.stdout,
    ), describe(proc)


# A Python process that asks for the plug-in serving the selected device
# type (entry points are read then) and prints its name and library.
_WHICH_PLUGIN = """
from torch_infini import _compiler
plugin = _compiler.plugin()
print("PLUGIN", plugin.name, plugin.origin)
"""


def _install_distribution(site: Path, entry_point_value: str, files: dict[str, str]) -> None:
    """A distribution installed in `site` as pip installs one (its
    dist-info with an entry point of torch_infini.compiler_plugins), with
    `files` beside it."""
    dist_info = site / "vendor_compiler-1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vendor-compiler\nVersion: 1.0\n"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[torch_infini.compiler_plugins]\nvendor = {entry_point_value}\n"
    )
    for name, text in files.items():
        (site / name).write_text(text)


@pytest.mark.parametrize(
    "form", ["absolute path", "path relative to the distribution", "module attribute", "callable"]
)
def test_an_entry_point_names_the_plugin_library(tmp_path: Path, form: str) -> None:
    """docs/compiler_plugin.md: an entry point's value is the library's path
    (absolute or relative to the distribution's files), or a reference to a
    path or to a callable returning it."""
    site = tmp_path / "site"
    library = _build_plugin(site / "lib", _WRAPPED_CPU, link_torch_infini=True)
    value, files = {
        "absolute path": (str(library), {}),
        "path relative to the distribution": ("lib/libplugin.so", {}),
        "module attribute": (
            "vendor_paths:LIBRARY",
            {"vendor_paths.py": f"LIBRARY = {str(library)!r}\n"},
        ),
        "callable": (
            "vendor_paths:library",
            {"vendor_paths.py": f"def library():\n    return {str(library)!r}\n"},
        ),
    }[form]
    _install_distribution(site, value, files)
    proc = run_python(
        _WHICH_PLUGIN,
        env={
            "PYTHONPATH": os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))
        },
        timeout=120,
    )
    assert proc.returncode == 0, describe(proc)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PLUGIN "))
    assert line.split()[1:] == ["counting-cpu", str(library)], describe(proc)


def test_an_entry_point_that_names_nothing_loadable_is_a_clear_error(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _install_distribution(site, "lib/libabsent.so", {})
    proc = run_python(
        _WHICH_PLUGIN,
        env={
            "PYTHONPATH": os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))
        },
        timeout=120,
    )
    assert proc.returncode != 0
    assert f"compiler plug-in {site / 'lib' / 'libabsent.so'}: cannot be loaded" in proc.stderr, (
        describe(proc)
    )


def test_every_configured_plugin_is_loaded_before_the_lookup(tmp_path: Path) -> None:
    """A library that cannot be loaded fails the lookup even where one
    named before it serves the device type: it was asked for, and nothing
    silently stands in for it (docs/compiler_plugin.md)."""
    good = _build_plugin(tmp_path / "good", _WRAPPED_CPU, link_torch_infini=True)
    broken = tmp_path / "libbroken.so"
    broken.write_text("not an ELF file")
    for order in ((good, broken), (broken, good)):
        proc = run_python(
            _WHICH_PLUGIN,
            env={"TORCH_INFINI_COMPILER_PLUGINS": os.pathsep.join(map(str, order))},
            timeout=120,
        )
        assert proc.returncode != 0, describe(proc)
        assert f"compiler plug-in {broken}: cannot be loaded" in proc.stderr, describe(proc)


def test_torch_compile_names_the_plugin_it_could_not_use(tmp_path: Path) -> None:
    missing = tmp_path / "libmissing_plugin.so"
    proc = _compile_in_a_process(missing, tmp_path)
    assert proc.returncode != 0
    assert f"compiler plug-in {missing}: cannot be loaded" in proc.stderr, describe(proc)


def test_a_plugin_that_cannot_load_fails_the_compile_for_an_accelerator_too(
    tmp_path: Path,
) -> None:
    """For a device type whose memory is not host memory (metax here, by
    the test-only switch), a configured plug-in that cannot be loaded fails
    torch.compile naming it; it once "compiled" with aot_eager instead."""
    missing = tmp_path / "libmissing_plugin.so"
    proc = run_python(
        _COMPILE_IN_A_PROCESS,
        env={
            "TORCH_INFINI_COMPILER_PLUGINS": str(missing),
            "TORCH_INFINI_COMPILER_DEVICE_TYPE": "metax",
            **private_inductor_cache(tmp_path / "inductor"),
        },
        timeout=300,
    )
    assert proc.returncode != 0, describe(proc)
    assert f"compiler plug-in {missing}: cannot be loaded" in proc.stderr, describe(proc)
    assert "aot_eager" not in proc.stderr, describe(proc)
