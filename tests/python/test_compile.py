"""torch.compile with its default backend (Inductor) on infini.

Where device memory is host memory (``host``, InfiniRT ``cpu``) Inductor's
C++ code generation serves infini (torch_infini/_inductor.py). Every
compiled result is checked against eager on infini and against the CPU, and
every test that compiles checks that Inductor's generated kernels ran: a
graph sent to ``aot_eager`` (torch_infini/_compile_fallback.py) runs the
same ATen operators eagerly and would give the same values.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch_infini
from infini_testing import llama_example
from torch._dynamo.utils import counters
from torch._inductor.graph import GraphLowering
from torch.profiler import ProfilerActivity, profile
from torch_infini import _compile_cache

DEVICE = torch.device("infini", 0)

pytestmark = pytest.mark.skipif(
    not torch_infini._C._capabilities()["host_addressable"],
    reason="Inductor serves infini where device memory is host memory",
)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    counters.clear()
    # One compile thread: no pool of compile workers on CI's two cores.
    with torch._inductor.config.patch(compile_threads=1):
        yield
    torch._dynamo.reset()


def _close(got: torch.Tensor, eager: torch.Tensor, cpu: torch.Tensor) -> None:
    """``got`` (compiled, on infini) matches eager on infini and the CPU."""
    assert got.device.type == "infini" and eager.device.type == "infini"
    torch.testing.assert_close(got.cpu(), eager.cpu(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.cpu(), cpu, rtol=1e-4, atol=1e-5)


_KERNEL_DEFINITION = re.compile(
    r"^(cpp_fused_\w+) = infini_compiler\.cpp_kernel\('\1', ", re.MULTILINE
)
_KERNEL_CALL = re.compile(r"^[ \t]*(cpp_fused_\w+)\.launch\(", re.MULTILINE)


@contextlib.contextmanager
def _inductor_kernels_run() -> Iterator[list[str]]:
    """The block's torch.compile calls run Inductor's generated C++ kernels on infini.

    Collects the wrapper code Inductor generates (``save_output_code`` sees
    an FX graph cache hit too) and, with Inductor's kernel profiling on, the
    kernels that ran (profiler events ``graph_<n>_<kernel>``). Afterwards:
    code was generated (``aot_eager`` generates none), each kernel is
    defined through the compiler plug-in and launched on infini's stream
    (the infini wrapper, not the CPU's), the wrapper never synchronizes, and
    every kernel the code defines ran.
    """
    codes: list[str] = []
    with (
        mock.patch.object(GraphLowering, "save_output_code", codes.append),
        torch._inductor.config.patch({"cpp.enable_kernel_profile": True}),
        # All threads: with async streams the kernels run on a stream's worker.
        profile(
            activities=[ProfilerActivity.CPU],
            experimental_config=torch._C._profiler._ExperimentalConfig(profile_all_threads=True),
        ) as prof,
    ):
        yield codes
        torch.infini.synchronize()  # the kernels' events are recorded as they run
    assert codes, "Inductor generated no code: the graph was compiled by another backend"
    defined = {name for code in codes for name in _KERNEL_DEFINITION.findall(code)}
    assert defined, "Inductor generated no C++ kernel for infini"
    called = {name for code in codes for name in _KERNEL_CALL.findall(code)}
    assert called == defined, (called, defined)
    for code in codes:
        call_code = code.split("def call(", 1)[-1].split("\ndef ", 1)[0]
        assert "synchronize(" not in call_code, "the compiled graph synchronizes"
        # Buffers come from the fast allocator, not torch.empty_strided's parser.
        assert "device='infini'" not in call_code, "a buffer allocated the slow way"
    ran = {e.name for e in prof.events() if "cpp_fused_" in e.name}
    missing = [k for k in sorted(defined) if not any(e.endswith(f"_{k}") for e in ran)]
    assert not missing, f"generated kernels that never ran: {missing} (ran: {sorted(ran)})"


def test_a_fused_kernel_with_a_fallback_operator() -> None:
    """atan2, abs, sub, relu, mul and add fuse into one C++ kernel; nanmedian
    (Inductor's fallback, no infini kernel) runs before it as an ATen call
    in the CPU fallback."""

    def f(a: torch.Tensor) -> torch.Tensor:
        median = a.nanmedian(-1, keepdim=True).values
        return (torch.atan2(a, a.abs() + 1) - median).relu() * 2 + a

    x = torch.randn(33, 7)
    with torch_infini.cpu_fallback.allowed("silent"):
        eager = f(x.to(DEVICE))
        torch_infini.cpu_fallback.reset_stats()
        with _inductor_kernels_run() as codes:
            got = torch.compile(f)(x.to(DEVICE))
    _close(got, eager, f(x))
    assert any("torch.ops.aten.nanmedian.dim(" in code for code in codes)
    assert torch_infini.cpu_fallback.stats()["aten::nanmedian.dim_values"].calls == 1
    assert counters["stats"]["unique_graphs"] == 1


def test_mlp_forward_and_training_step_match_eager() -> None:
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8), torch.nn.LogSoftmax(-1)
    )
    dev, eager_dev = copy.deepcopy(cpu).to(DEVICE), copy.deepcopy(cpu).to(DEVICE)
    x, y = torch.randn(12, 16), torch.randint(0, 8, (12,))

    def step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.nll_loss(model(x), y)
        loss.backward()
        return loss

    compiled = torch.compile(step)
    with _inductor_kernels_run():  # forward and backward graphs
        loss = compiled(dev, x.to(DEVICE), y.to(DEVICE))
    with torch_infini.cpu_fallback.allowed("silent"):  # eager gelu, log_softmax, ...
        eager = step(eager_dev, x.to(DEVICE), y.to(DEVICE))
    want = step(cpu, x, y)
    _close(loss, eager, want)
    for p, e, q in zip(dev.parameters(), eager_dev.parameters(), cpu.parameters(), strict=True):
        _close(p.grad, e.grad, q.grad)


def test_llama_forward_and_training_step_match_eager() -> None:
    llama = llama_example()
    torch.manual_seed(0)
    model = llama.Llama(llama.Config(layers=1))
    reference = llama.Llama(llama.Config(layers=1))
    reference.load_state_dict(model.state_dict())
    eager_model = llama.Llama(llama.Config(layers=1))
    eager_model.load_state_dict(model.state_dict())
    model.to(DEVICE)
    eager_model.to(DEVICE)
    inputs, targets = llama.batch(4, 6, torch.Generator().manual_seed(0))

    def step(m: torch.nn.Module, x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = m(x)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), t.flatten())
        loss.backward()
        return logits, loss

    with torch_infini.cpu_fallback.allowed("silent"):
        with _inductor_kernels_run():
            logits, loss = torch.compile(step)(model, inputs.to(DEVICE), targets.to(DEVICE))
        eager_logits, eager_loss = step(eager_model, inputs.to(DEVICE), targets.to(DEVICE))
    want_logits, want_loss = step(reference, inputs, targets)
    _close(logits, eager_logits, want_logits)
    _close(loss, eager_loss, want_loss)
    for (name, p), e, q in zip(
        model.named_parameters(), eager_model.parameters(), reference.parameters(), strict=True
    ):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad.cpu(), e.grad.cpu(), rtol=1e-4, atol=1e-5, msg=name)
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_a_new_shape_recompiles_and_dynamic_shapes_do_not() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        return (a.sin() * a.cos()).sum(-1)

    def eager(x: torch.Tensor) -> torch.Tensor:
        with torch_infini.cpu_fallback.allowed("silent"):  # sin, cos
            return f(x.to(DEVICE))

    static = torch.compile(f, dynamic=False)
    with _inductor_kernels_run() as codes:
        for n in (5, 9):
            x = torch.randn(n, 3)
            _close(static(x.to(DEVICE)), eager(x), f(x))
    assert counters["stats"]["unique_graphs"] == 2 and len(codes) == 2

    torch._dynamo.reset()
    counters.clear()
    dynamic = torch.compile(f, dynamic=True)
    with _inductor_kernels_run() as codes:
        for n in (5, 9, 17):
            x = torch.randn(n, 3)
            _close(dynamic(x.to(DEVICE)), eager(x), f(x))
    assert counters["stats"]["unique_graphs"] == 1 and len(codes) == 1


def test_one_dynamic_compile_serves_varying_batch_and_sequence_lengths() -> None:
    """The Llama forward compiled once with dynamic shapes: its kernels take
    the sizes as arguments, and the fused operators' Meta kernels keep them
    symbolic, so new batch and sequence lengths reuse it."""
    llama = llama_example()
    torch.manual_seed(0)
    reference = llama.Llama(llama.Config(layers=1)).eval()
    model = copy.deepcopy(reference).to(DEVICE)
    compiled = torch.compile(model, dynamic=True)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad(), torch_infini.cpu_fallback.allowed("silent"):
        # The model builds its rotary table on the first call, a graph of its own.
        compiled(torch.randint(0, 14, (1, 3), generator=generator).to(DEVICE))
        counters.clear()
        with _inductor_kernels_run() as codes:
            for batch, sequence in ((2, 5), (3, 9), (5, 7)):
                tokens = torch.randint(0, 14, (batch, sequence), generator=generator)
                got = compiled(tokens.to(DEVICE))
                _close(got, model(tokens.to(DEVICE)), reference(tokens))
    assert counters["stats"]["unique_graphs"] == 1
    assert len(codes) == 1, f"{len(codes)} compiles for three shapes"


def test_fused_infini_operators_trace_through_their_meta_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One graph (fullgraph), the call kept as one extern call where the
    graph passes keep fused calls (by default on this backend Inductor
    lowers it: test_compiled_fused_calls.py)."""
    monkeypatch.setenv("TORCH_INFINI_GRAPH_PASSES", "always")

    def f(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return torch.ops.infini.swiglu(x, gate) + 1

    x, gate = torch.randn(6, 8), torch.randn(6, 8)
    with _inductor_kernels_run() as codes:
        got = torch.compile(f, fullgraph=True)(x.to(DEVICE), gate.to(DEVICE))
    _close(got, f(x.to(DEVICE), gate.to(DEVICE)), f(x, gate))
    assert any("torch.ops.infini.swiglu.default(" in code for code in codes)


def test_generated_kernels_wait_for_the_stream_and_later_work_sees_them() -> None:
    """A generated kernel is queued on the current stream: its inputs come
    from work enqueued there just before (an extern matmul), and work enqueued
    after it reads what it wrote. With asynchronous streams a kernel run out
    of stream order shows as stale values."""

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a @ b).relu() + 1

    a, b = torch.randn(64, 64), torch.randn(64, 64)
    compiled = torch.compile(f)
    da, db = a.to(DEVICE), b.to(DEVICE)
    eager = f(da, db) * 2
    with _inductor_kernels_run():
        for _ in range(3):
            out = compiled(da * 1, db)  # the producer is enqueued just before
            after = out * 2
            _close(after, eager, f(a, b) * 2)


def test_compile_caches_are_keyed_to_this_code_generation() -> None:
    """Inductor reuses generated code across processes; code generated by
    another torch_infini (say, without the stream waits) must not be reused.
    torch_infini's tag (version and hash of its code generation) is part of
    every cache key."""
    package = Path(torch_infini.__file__)
    sources = b"".join(
        package.with_name(name).read_bytes() for name in _compile_cache.CODEGEN_SOURCES
    )
    tag = _compile_cache.tag()
    assert _compile_cache.CODEGEN_SOURCES == ("_inductor.py", "_patches.py", "_compiler.py")
    assert hashlib.sha256(sources).hexdigest()[:16] in tag
    assert torch_infini.__version__ in tag
    assert tag in torch.compiler.config.cache_key_tag


def test_inductor_decides_for_infini_as_for_the_cpu() -> None:
    """The two decisions Inductor takes by the device name "cpu", extended to
    infini by torch_infini/_patches.py. A PyTorch that moves them makes this
    fail by name rather than a compile fail deep inside Inductor."""
    import torch._inductor.codegen.common as common
    from torch._inductor import scheduler, utils
    from torch_infini import _inductor

    # Inductor's registration of infini is torch_infini's own, with the
    # compiler plug-in's graph passes (Inductor asks the device module for
    # Scheduling first; that lookup registers and reports no attribute, so
    # Inductor keeps it).
    common.init_backend_registration()
    assert common.get_scheduling_for_device("infini") is _inductor.InfiniScheduling
    assert isinstance(common.custom_backend_passes["infini"], _inductor.InfiniGraphPasses)
    assert not hasattr(torch.infini, "Scheduling")
    for module in (utils, common, scheduler):
        assert module.get_current_backend("infini") == "cpp", module.__name__
    assert utils.get_current_backend("cpu") == torch._inductor.config.cpu_backend

    class Node:
        def __init__(self, device: torch.device) -> None:
            self.device = device

        def get_device(self) -> torch.device:
            return self.device

    is_cpu = scheduler.BaseSchedulerNode.is_cpu
    assert is_cpu(Node(DEVICE)) and is_cpu(Node(torch.device("cpu")))
    assert not is_cpu(Node(torch.device("meta")))
    # The realization heuristics' device test (ir.is_cpu).
    from torch._inductor import ir

    assert ir.is_cpu(DEVICE) and ir.is_cpu(torch.device("cpu")) and not ir.is_cpu("meta")


# A kernel's source in the wrapper: cpp_kernel(name, types, r'''...''').
_KERNEL_SOURCE = re.compile(r"r'''\n(.*?)'''", re.DOTALL)


def _kernel_sources(fn: object, *args: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    result, codes = run_and_get_code(torch.compile(fn), *args)
    return result, [k.strip() for code in codes for k in _KERNEL_SOURCE.findall(code)]


def _softmax_of_a_sum(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.softmax(torch.sin(x) * 2 + w, dim=-1).sum(dim=0)


def _layer_norm_exp(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, w).exp()


def _variance_of_rows(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.var_mean(x * w, dim=-1)[0]


@pytest.mark.parametrize("fn", [_softmax_of_a_sum, _layer_norm_exp, _variance_of_rows])
def test_inductor_generates_the_cpus_kernels_for_infini(fn: object) -> None:
    """Inductor's heuristics that test for the device "cpu" (when to store
    an intermediate rather than recompute it in each reader; which variance
    algorithm) answer for infini as for the CPU: the generated C++ is the
    CPU's, line for line, and the values are the CPU's, bit for bit. With
    the GPU heuristics a compiled softmax recomputed sin(x) in every loop
    (1.4x the CPU's time) and a layer norm took Welford's algorithm."""
    x, w = torch.randn(64, 256), torch.randn(256)
    want, cpu_kernels = _kernel_sources(fn, x, w)
    got, infini_kernels = _kernel_sources(fn, x.to(DEVICE), w.to(DEVICE))
    assert cpu_kernels and infini_kernels == cpu_kernels
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    assert got.stride() == want.stride()
