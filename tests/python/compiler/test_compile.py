"""torch.compile with its default backend (Inductor) on infini.

Where device memory is host memory (``host``, InfiniRT ``cpu``) Inductor's
C++ code generation serves infini (torch_infini/_inductor.py). Every
compiled result is checked against the CPU: against the same function
compiled on the CPU (Inductor generates the same C++ kernels for both
devices) bit for bit where infini runs the CPU's kernels, and against eager
on the CPU within the rounding Inductor's kernels add (INDUCTOR_EPS); eager
on infini is the CPU's eager result. Every test that compiles checks that
Inductor's generated kernels ran (a graph sent to ``aot_eager``,
torch_infini/_compile_fallback.py, runs the same ATen operators eagerly and
would give eager's values) and that a compiled call, once compiled, never
waits for the device (the host device counts its synchronizations).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar
from unittest import mock

import fused_oracles
import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal, llama_example, requires_inductor
from op_helpers import runs_cpu_kernels
from torch._dynamo.utils import counters
from torch._inductor.graph import GraphLowering
from torch.profiler import ProfilerActivity, profile
from torch_infini import _compile_cache, graph_passes

DEVICE = torch.device("infini", 0)

pytestmark = requires_inductor


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Inductor's own kernels, compared with Inductor's for the CPU: the graph
    # passes' rewrites into fused kernels ("auto" makes them where device
    # memory is not host memory) are test_graph_passes.py's.
    monkeypatch.setenv(graph_passes.MODE_VARIABLE, "never")
    torch._dynamo.reset()
    counters.clear()
    # One compile thread: no pool of compile workers on CI's two cores.
    with torch._inductor.config.patch(compile_threads=1):
        yield
    torch._dynamo.reset()


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    """``got`` (on infini) is the CPU's ``want``: bit for bit where infini runs
    the CPU's kernels (host), within PyTorch's tolerances for the dtype where
    InfiniOps' kernels run (InfiniRT ``cpu``); the same strides."""
    assert got.device.type == "infini" and want.device.type == "cpu"
    if runs_cpu_kernels():
        assert_bitwise_equal(got, want)
    else:
        torch.testing.assert_close(got.cpu(), want)
    assert got.stride() == want.stride()


# Inductor's kernels are not ATen's: vectorized transcendental functions
# (Sleef's exp, tanh, atan2, sin), sums split across vector lanes and threads
# (a parallel embedding backward even adds in a varying order). Compiled
# float32 results differ from eager's by a few rounding errors of the largest
# magnitude summed: measured up to 3.7 eps * max|eager| (Llama's gradients; 2.6
# in the forwards). The bound is absolute, at the tensor's scale (an element
# near 0 at the end of a long sum keeps the sum's error), with four times room.
# PyTorch's float32 default, atol 1e-5 + rtol 1.3e-6, is ~100 eps of these
# tensors (gradients of 0.006 to 0.2): it would pass a float32 sum done in
# bfloat16.
INDUCTOR_EPS = 16


def _within_eps(got: torch.Tensor, want: torch.Tensor, eps: float) -> None:
    """``got`` (on infini) within ``eps`` rounding errors of ``want``'s largest magnitude."""
    atol = eps * torch.finfo(want.dtype).eps * float(want.detach().abs().max())
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=atol)


def _near_eager(got: torch.Tensor, eager_cpu: torch.Tensor) -> None:
    """``got`` (compiled, on infini) within INDUCTOR_EPS of eager on the CPU."""
    _within_eps(got, eager_cpu, INDUCTOR_EPS)


# A graph with fused operators (the Llama example calls causal_softmax and
# swiglu on infini) is not the CPU's graph: Inductor lowers the fused calls
# into kernels of its own, which vectorize the softmax rows' tails where the
# CPU's composition (its mask read from a bool buffer) computes them one
# element at a time. exp is then Sleef's vector exp on one side, std::exp on
# the other, each within an ulp: measured up to 1.75 eps * max|x| on an AVX2
# machine (logits and gradients), and bit for bit where one vector covers a
# row (AVX-512). Twice that room.
LOWERED_EPS = 4


def _close(
    got: torch.Tensor,
    eager: torch.Tensor,
    cpu: torch.Tensor,
    compiled_cpu: torch.Tensor | None = None,
    *,
    lowered: bool = False,
) -> None:
    """``got`` (compiled, on infini) against the CPU: the same function
    compiled on the CPU (``compiled_cpu``: the same generated kernels) is
    ``_same`` (within LOWERED_EPS where infini's graph has fused operators,
    ``lowered``), and eager on the CPU (``cpu``) is near (``_near_eager``);
    eager on infini (``eager``) is the CPU's eager result, ``_same``."""
    assert got.device.type == "infini"
    _same(eager, cpu)
    _near_eager(got, cpu)
    if compiled_cpu is None:
        return
    if lowered and runs_cpu_kernels():
        _within_eps(got, compiled_cpu, LOWERED_EPS)
        assert got.stride() == compiled_cpu.stride()
    else:
        _same(got, compiled_cpu)


T = TypeVar("T")


def _without_waiting(
    call: Callable[..., T], *args: object, waits: int = 0, fallback_results: int = 0
) -> T:
    """``call(*args)`` (a compiled function called again, so compiling nothing)
    waits for queued work ``waits`` times: none for a compiled graph, whose
    kernels are queued on the stream, or one per CPU-fallback operator it
    calls. The host device counts every device, stream and event
    synchronization, with inline streams as with asynchronous ones (where
    the generated code's text is all another backend lets the wrapper check).

    Where the fallback stages through pinned memory (discrete mode) on a
    runtime whose copies never overlap the caller (inline streams), its
    non_blocking copies wait too: the copy in and each of the operator's
    ``fallback_results`` copied back, besides the fallback's own wait."""
    if torch_infini.backend() != "host":
        return call(*args)
    capabilities = torch_infini._C._capabilities()
    if not capabilities["host_addressable"] and not capabilities["async_memcpy"]:
        waits *= 2 + fallback_results
    before = torch_infini._C._host_synchronizations()
    result = call(*args)
    waited = torch_infini._C._host_synchronizations() - before
    assert waited == waits, f"the compiled call waited for the device {waited} times, not {waits}"
    return result


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
    compiled = torch.compile(f)
    with torch_infini.cpu_fallback.allowed("silent"):
        eager = f(x.to(DEVICE))
        torch_infini.cpu_fallback.reset_stats()
        with _inductor_kernels_run() as codes:
            compiled(x.to(DEVICE))
            dx = x.to(DEVICE)
            # the one wait: the fallback's, before the CPU reads nanmedian's input
            got = _without_waiting(compiled, dx, waits=1, fallback_results=2)
    assert any("torch.ops.aten.nanmedian.dim(" in code for code in codes)
    assert torch_infini.cpu_fallback.stats()["aten::nanmedian.dim_values"].calls == 2
    assert counters["stats"]["unique_graphs"] == 1
    _close(got, eager, f(x), torch.compile(f)(x))


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

    compiled_cpu = copy.deepcopy(cpu)
    compiled = torch.compile(step)
    dx, dy = x.to(DEVICE), y.to(DEVICE)
    with _inductor_kernels_run():  # forward and backward graphs
        compiled(dev, dx, dy)
        dev.zero_grad()
        loss = _without_waiting(compiled, dev, dx, dy)
    with torch_infini.cpu_fallback.allowed("silent"):  # eager gelu, log_softmax, ...
        eager = step(eager_dev, x.to(DEVICE), y.to(DEVICE))
    want = step(cpu, x, y)
    _close(loss, eager, want, torch.compile(step)(compiled_cpu, x, y))
    for p, e, q, c in zip(
        dev.parameters(),
        eager_dev.parameters(),
        cpu.parameters(),
        compiled_cpu.parameters(),
        strict=True,
    ):
        _close(p.grad, e.grad, q.grad, c.grad)


def test_llama_forward_and_training_step_match_eager() -> None:
    """Compiled on infini its attention and MLP call the fused operators
    (lowered by Inductor: test_compiled_fused_calls.py), compiled on the CPU
    the stock compositions: the same computation in other kernels, the same
    results within LOWERED_EPS."""
    llama = llama_example()
    torch.manual_seed(0)
    model = llama.Llama(llama.Config(layers=1))
    reference = llama.Llama(llama.Config(layers=1))
    reference.load_state_dict(model.state_dict())
    eager_model = llama.Llama(llama.Config(layers=1))
    eager_model.load_state_dict(model.state_dict())
    compiled_reference = copy.deepcopy(reference)
    model.to(DEVICE)
    eager_model.to(DEVICE)
    inputs, targets = llama.batch(4, 6, torch.Generator().manual_seed(0))

    def step(m: torch.nn.Module, x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = m(x)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), t.flatten())
        loss.backward()
        return logits, loss

    compiled = torch.compile(step)
    dx, dt = inputs.to(DEVICE), targets.to(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        with _inductor_kernels_run():
            compiled(model, dx, dt)
            model.zero_grad()
            logits, loss = _without_waiting(compiled, model, dx, dt)
        eager_logits, eager_loss = step(eager_model, inputs.to(DEVICE), targets.to(DEVICE))
    want_logits, want_loss = step(reference, inputs, targets)
    compiled_logits, compiled_loss = torch.compile(step)(compiled_reference, inputs, targets)
    _close(logits, eager_logits, want_logits, compiled_logits, lowered=True)
    _close(loss, eager_loss, want_loss, compiled_loss, lowered=True)
    for (name, p), e, q, c in zip(
        model.named_parameters(),
        eager_model.parameters(),
        reference.parameters(),
        compiled_reference.parameters(),
        strict=True,
    ):
        assert p.grad is not None and c.grad is not None, name
        # Inductor's embedding backward adds rows from parallel threads, in a
        # varying order (two compiled runs on the CPU differ in ~40 of 1024
        # elements): only eager's bound holds for it.
        _close(p.grad, e.grad, q.grad, None if name == "embed.weight" else c.grad, lowered=True)


def test_a_new_shape_recompiles_and_dynamic_shapes_do_not() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        return (a.sin() * a.cos()).sum(-1)

    def eager(x: torch.Tensor) -> torch.Tensor:
        with torch_infini.cpu_fallback.allowed("silent"):  # sin, cos
            return f(x.to(DEVICE))

    static = torch.compile(f, dynamic=False)
    xs = [torch.randn(n, 3) for n in (5, 9, 17)]
    with _inductor_kernels_run() as codes:
        for x in xs[:2]:
            _close(static(x.to(DEVICE)), eager(x), f(x))
    assert counters["stats"]["unique_graphs"] == 2 and len(codes) == 2
    static_cpu = torch.compile(f, dynamic=False)
    for x in xs[:2]:
        _same(static(x.to(DEVICE)), static_cpu(x))

    torch._dynamo.reset()
    counters.clear()
    dynamic = torch.compile(f, dynamic=True)
    with _inductor_kernels_run() as codes:
        for i, x in enumerate(xs):
            dx = x.to(DEVICE)
            got = dynamic(dx) if i == 0 else _without_waiting(dynamic, dx)
            _close(got, eager(x), f(x))
    assert counters["stats"]["unique_graphs"] == 1 and len(codes) == 1
    dynamic_cpu = torch.compile(f, dynamic=True)
    for x in xs:
        _same(dynamic(x.to(DEVICE)), dynamic_cpu(x))


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
    first = torch.randint(0, 14, (1, 3), generator=generator)
    shapes = ((2, 5), (3, 9), (5, 7))
    batches = [torch.randint(0, 14, shape, generator=generator) for shape in shapes]
    with torch.no_grad(), torch_infini.cpu_fallback.allowed("silent"):
        # The model builds its rotary table on the first call, a graph of its own.
        compiled(first.to(DEVICE))
        counters.clear()
        results = []
        with _inductor_kernels_run() as codes:
            for i, tokens in enumerate(batches):
                dt = tokens.to(DEVICE)
                got = compiled(dt) if i == 0 else _without_waiting(compiled, dt)
                results.append(got)
        assert counters["stats"]["unique_graphs"] == 1
        assert len(codes) == 1, f"{len(codes)} compiles for three shapes"
        # Against eager only: a dynamic compile on the CPU would add 20 s, and
        # test_llama_forward_and_training_step_match_eager compares the
        # model's kernels with the CPU's bit for bit.
        for got, tokens in zip(results, batches, strict=True):
            _close(got, model(tokens.to(DEVICE)), reference(tokens))


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
    compiled = torch.compile(f, fullgraph=True)
    dx, dgate = x.to(DEVICE), gate.to(DEVICE)
    with _inductor_kernels_run() as codes:
        compiled(dx, dgate)
        got = _without_waiting(compiled, dx, dgate)
    # The oracle is swiglu's stock composition, never its own CPU kernel; the
    # fused kernel computes it in float32 as the composition does.
    want = fused_oracles.swiglu(x, gate) + 1
    _close(got, f(dx, dgate), want, want)
    # Called through the dispatcher without the OpOverload's Python layer
    # (test_compiled_fused_calls.py).
    assert any(
        "infini_compiler.operator_call('torch.ops.infini.swiglu.default')" in code
        and "= infini_op_swiglu__default(" in code
        for code in codes
    )


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
    compiled_cpu = torch.compile(f)(a, b) * 2
    with _inductor_kernels_run():
        for i in range(3):
            producer = da * 1  # enqueued just before
            out = compiled(producer, db) if i == 0 else _without_waiting(compiled, producer, db)
            after = out * 2
            _close(after, eager, f(a, b) * 2, compiled_cpu)


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
