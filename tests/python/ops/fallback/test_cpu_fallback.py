"""The CPU fallback: operators without an infini kernel run on the CPU.

The CPU result is the oracle, bit for bit: the fallback runs the CPU's own
kernel. Results land on the inputs' infini device; in-place and out=
arguments are the given infini tensors (views included); random and view
operators never fall back; the policy (torch_infini.cpu_fallback) decides,
warns once per operator and counts.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import (
    assert_bitwise_equal,
    describe,
    raises_exactly,
    requires_async_host,
    run_python,
)
from op_helpers import kernel_dtypes, make_cpu

fallback = torch_infini.cpu_fallback
DEVICE = torch.device("infini", 0)


@pytest.fixture(autouse=True)
def _silent_and_counted() -> Iterator[None]:
    """Each test starts with fresh stats, silent (warnings have their own test)."""
    fallback.reset_stats()
    with fallback.allowed("silent"):
        yield
    fallback.allow([])
    fallback.deny([])


def _pair(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, seed: int = 0):
    cpu = make_cpu(shape, dtype, seed)
    return cpu, cpu.to(DEVICE)


# ---------------------------------------------------------------- semantics


def test_functional_result_on_the_inputs_device() -> None:
    (a, ai), (b, bi) = _pair((3, 5)), _pair((3, 5), seed=1)
    out = torch.atan2(ai, bi)
    assert out.device == DEVICE
    assert_bitwise_equal(out, torch.atan2(a, b))
    assert "aten::atan2.out" in fallback.stats() or "aten::atan2" in fallback.stats()


@pytest.mark.requires_two_devices
def test_result_on_the_second_device() -> None:
    a = make_cpu((4,), torch.float32)
    out = torch.exp(a.to("infini:1"))
    assert out.device == torch.device("infini", 1)
    assert_bitwise_equal(out, torch.exp(a))


def test_in_place_on_a_strided_view_writes_through() -> None:
    base_cpu, base = _pair((4, 6))
    view_cpu, view = base_cpu[1:, ::2], base[1:, ::2]
    view_cpu.exp_()
    result = view.exp_()
    assert result is view
    assert_bitwise_equal(view, view_cpu)
    assert_bitwise_equal(base, base_cpu)  # the base sees the change


def test_in_place_on_views_sharing_a_storage() -> None:
    base_cpu, base = _pair((8,))
    base_cpu[:4].atan2_(base_cpu[4:])
    base[:4].atan2_(base[4:])
    assert_bitwise_equal(base, base_cpu)


def test_out_argument_is_written_and_resized_as_on_the_cpu() -> None:
    (a, ai), (b, bi) = _pair((2, 3)), _pair((2, 3), seed=2)
    out_cpu, out = torch.empty(0), torch.empty(0, device=DEVICE)
    result = torch.atan2(ai, bi, out=out)
    torch.atan2(a, b, out=out_cpu)
    assert result is out
    assert_bitwise_equal(out, out_cpu)
    strided_cpu, strided = torch.zeros(2, 6)[:, ::2], torch.zeros(2, 6, device=DEVICE)[:, ::2]
    torch.atan2(a, b, out=strided_cpu)
    torch.atan2(ai, bi, out=strided)
    assert_bitwise_equal(strided, strided_cpu)


@pytest.mark.parametrize(
    "factory",
    [
        lambda d: torch.arange(2, 11, 3, device=d),
        lambda d: torch.linspace(-1, 1, 7, device=d),
        lambda d: torch.eye(3, 4, device=d),
        lambda d: torch.full((2, 3), 2.5, device=d),
        lambda d: torch.tril(torch.ones(3, 3, device=d)),
    ],
    ids=["arange", "linspace", "eye", "full", "tril"],
)
def test_factories_on_infini(factory: Callable[[str | torch.device], torch.Tensor]) -> None:
    out = factory(DEVICE)
    assert out.device == DEVICE
    assert_bitwise_equal(out, factory("cpu"))


def test_tensor_lists_in_and_out() -> None:
    (a, ai), (b, bi) = _pair((2, 3)), _pair((2, 3), seed=3)
    assert_bitwise_equal(torch.cat([ai, bi], 1), torch.cat([a, b], 1))
    assert_bitwise_equal(torch.stack([ai, bi]), torch.stack([a, b]))
    cpu_list, infini_list = [a.clone(), b.clone()], [ai.clone(), bi.clone()]
    torch._foreach_mul_(cpu_list, 1.5)
    torch._foreach_mul_(infini_list, 1.5)
    for got, want in zip(infini_list, cpu_list, strict=True):
        assert_bitwise_equal(got, want)
    sums_cpu = torch._foreach_add(cpu_list, cpu_list)
    sums = torch._foreach_add(infini_list, infini_list)
    assert all(t.device == DEVICE for t in sums)
    for got, want in zip(sums, sums_cpu, strict=True):
        assert_bitwise_equal(got, want)


def test_non_tensor_and_integer_results() -> None:
    (a, ai), (_, bi) = _pair((3, 4)), _pair((3, 4), seed=4)
    # Equal values in other memory, then one element apart (the CPU: True, False).
    twin, off_by_one = a.to(DEVICE), a.clone()
    off_by_one[-1, -1] += 1
    assert torch.equal(a, twin.cpu()) and not torch.equal(a, off_by_one)
    assert torch.equal(ai, twin) and not torch.equal(ai, off_by_one.to(DEVICE))
    assert not torch.equal(ai, bi)
    assert torch.allclose(ai, ai.clone())
    values, indices = ai.max(dim=1)
    values_cpu, indices_cpu = a.max(dim=1)
    assert_bitwise_equal(values, values_cpu)
    assert_bitwise_equal(indices, indices_cpu)
    assert indices.dtype == torch.int64 and indices.device == DEVICE
    assert_bitwise_equal(ai > 0, a > 0)
    assert_bitwise_equal(torch.nonzero(ai > 0), torch.nonzero(a > 0))
    assert ai.sum().item() == a.sum().item()


def test_cpu_zero_dim_operand_and_empty_tensors() -> None:
    a, ai = _pair((5,))
    scalar = torch.tensor(0.3, dtype=torch.float64)
    assert_bitwise_equal(torch.atan2(ai, scalar), torch.atan2(a, scalar))
    empty = torch.atan2(torch.empty(0, 3, device=DEVICE), torch.empty(0, 3, device=DEVICE))
    assert empty.shape == (0, 3) and empty.device == DEVICE


def test_found_by_the_op_db_sweep() -> None:
    """Each once wrong, crashing or refused (issue 11's op_db sweep)."""
    # "infini" without an index is the current device (was a segfault)
    assert_bitwise_equal(torch.tril_indices(3, 3, device="infini"), torch.tril_indices(3, 3))
    # an out= of 0 elements resized within its memory takes the new shape
    x_cpu, x = torch.zeros(1, 0, 3), torch.zeros(1, 0, 3, device=DEVICE)
    assert torch.logical_not(x).shape == torch.logical_not(x_cpu).shape == (1, 0, 3)
    assert torch.isfinite(x).shape == (1, 0, 3)
    assert torch.eye(0, device=DEVICE).shape == (0, 0)
    # an out= the CPU kernel grows keeps the CPU's layout (column-major here)
    a, b = make_cpu((2, 3), torch.float32), make_cpu((2, 3), torch.float32, seed=1)
    solution = torch.linalg.lstsq(a.to(DEVICE), b.to(DEVICE)).solution
    expected = torch.linalg.lstsq(a, b).solution
    assert solution.stride() == expected.stride()
    # LAPACK's result depends on the memory's alignment (the fallback's copy
    # of the input sits elsewhere): equal values, not necessarily equal bits
    torch.testing.assert_close(solution.cpu(), expected)
    # conjugate views materialize through the CPU instead of refusing
    z = torch.randn(3, dtype=torch.complex64, generator=torch.Generator().manual_seed(2))
    assert_bitwise_equal(z.to(DEVICE).conj().resolve_conj(), z.conj().resolve_conj())
    # other layouts are refused clearly
    with raises_exactly(NotImplementedError, match="strided .* only, not the Sparse layout"):
        torch.ones(3, 3, device=DEVICE).to_sparse()


def test_autograd_through_fallback_operators() -> None:
    a = make_cpu((3, 4), torch.float32).requires_grad_()
    b = make_cpu((3, 4), torch.float32, seed=5).requires_grad_()
    ai = a.detach().to(DEVICE).requires_grad_()
    bi = b.detach().to(DEVICE).requires_grad_()
    (torch.atan2(a, b).exp() * b).sum().backward()
    (torch.atan2(ai, bi).exp() * bi).sum().backward()
    assert_bitwise_equal(ai.grad, a.grad)
    assert_bitwise_equal(bi.grad, b.grad)


# ------------------------------------------------------------ never through it

VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "select": lambda t: t.select(0, 1),
    "slice": lambda t: t[:, 1:3],
    "narrow": lambda t: t.narrow(1, 1, 2),
    "unfold": lambda t: t.unfold(1, 2, 1),
    "diagonal": lambda t: t.diagonal(),
    "split": lambda t: t.split(2, dim=1)[1],
    "unbind": lambda t: t.unbind(0)[2],
    "expand": lambda t: t[:1].expand(3, 4),
    "squeeze": lambda t: t[:1].squeeze(0),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "transpose": lambda t: t.t(),
    "permute": lambda t: t.permute(1, 0),
    "view_as_real": lambda t: torch.view_as_real(t.to(torch.complex64))[..., 0],
    "as_strided": lambda t: t.as_strided((2, 2), (1, 4)),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_operators_are_native_aliases(name: str) -> None:
    make_view = VIEWS[name]
    base_cpu, base = _pair((3, 4))
    if name == "view_as_real":  # the complex tensor is the base
        base_cpu, base = base_cpu.to(torch.complex64), base.to(torch.complex64)
        make_view = lambda t: torch.view_as_real(t)[..., 0]  # noqa: E731
    with fallback.strict():  # a view must never need the fallback
        view_cpu, view = make_view(base_cpu), make_view(base)
        assert view._is_view() and view._base is base
        view_cpu.fill_(7.0)
        view.fill_(7.0)
    assert_bitwise_equal(base, base_cpu)
    assert fallback.stats() == {}


RANDOM: dict[str, Callable[[], object]] = {
    "randn": lambda: torch.randn(3, device=DEVICE),
    "rand_like": lambda: torch.rand_like(torch.zeros(3, device=DEVICE)),
    "dropout (training)": lambda: torch.nn.functional.dropout(
        torch.ones(8, device=DEVICE), 0.5, training=True
    ),
    "randperm": lambda: torch.randperm(5, device=DEVICE),
    "multinomial": lambda: torch.multinomial(torch.ones(4, device=DEVICE), 2),
    "bernoulli_": lambda: torch.zeros(4, device=DEVICE).bernoulli_(0.5),
}


@pytest.mark.parametrize("mode", fallback.MODES)
@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_operators_run_on_the_device_generator(name: str, mode: str) -> None:
    """Native under every policy (even off): nothing reaches the CPU fallback."""
    fallback.set_mode(mode)
    RANDOM[name]()
    assert fallback.stats() == {}


@pytest.mark.parametrize("mode", fallback.MODES)
def test_random_operators_without_a_kernel_are_refused(mode: str) -> None:
    """The random operators the README lists as not implemented raise, under
    every policy: the CPU's generator never decides infini's numbers."""
    fallback.set_mode(mode)
    ones = torch.ones(3, device=DEVICE)
    for call in (
        lambda: torch.poisson(ones),
        lambda: torch._standard_gamma(ones),
        lambda: torch.binomial(ones, ones * 0.5),
        lambda: torch._sample_dirichlet(ones),
    ):
        with raises_exactly(NotImplementedError, match="draws random numbers and has no infini"):
            call()
    assert fallback.stats() == {}


def test_declared_kernels_never_reach_the_fallback() -> None:
    """What operators() lists is served natively for its declared dtypes."""
    calls: dict[str, Callable[[torch.dtype], object]] = {
        "add": lambda dt: torch.add(_ones(dt), _ones(dt), alpha=2),
        "sub": lambda dt: torch.sub(_ones(dt), _ones(dt), alpha=2),
        "mul": lambda dt: torch.mul(_ones(dt), _ones(dt)),
        "relu": lambda dt: torch.relu(_ones(dt)),
        "silu": lambda dt: torch.nn.functional.silu(_ones(dt)),
        "mm": lambda dt: torch.mm(_ones(dt, (2, 3)), _ones(dt, (3, 2))),
        "bmm": lambda dt: torch.bmm(_ones(dt, (2, 2, 3)), _ones(dt, (2, 3, 2))),
        "addmm": lambda dt: torch.addmm(_ones(dt, (2, 2)), _ones(dt, (2, 3)), _ones(dt, (3, 2))),
        "rms_norm": lambda dt: torch.nn.functional.rms_norm(_ones(dt, (2, 4)), [4]),
        "infini::silu_and_mul": lambda dt: torch.ops.infini.silu_and_mul(_ones(dt, (2, 4))),
        "infini::swiglu": lambda dt: torch.ops.infini.swiglu(_ones(dt), _ones(dt)),
        "infini::causal_softmax": lambda dt: torch.ops.infini.causal_softmax(_ones(dt, (2, 3))),
    }
    with fallback.strict():
        for op, call in calls.items():
            for dtype in kernel_dtypes(op):
                call(dtype)
    assert fallback.stats() == {}


def _bypassed_cpu_kernels() -> list[str]:
    """Operators whose CPU kernel PyTorch would bypass on a backend without one of its own.

    A CPU kernel, no infini kernel, and a composite that such a backend gets
    instead (CompositeExplicitAutograd, or CompositeImplicitAutograd); view
    and random operators aside (never through the fallback).
    """
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    found = []
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith("aten::") or not has(full, "CPU") or has(full, "PrivateUse1"):
            continue
        composites = ("CompositeExplicitAutograd", "CompositeImplicitAutograd")
        if not any(has(full, key) for key in composites):
            continue
        name, _, overload = full.partition(".")
        schema = torch._C._get_schema(name, overload)
        op = getattr(getattr(torch.ops.aten, name.removeprefix("aten::")), overload or "default")
        if torch.Tag.nondeterministic_seeded in op.tags:
            continue
        if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
            continue
        found.append(full)
    return found


def test_cpu_kernels_are_not_decomposed() -> None:
    """The CPU's own kernel runs whole where PyTorch would decompose on infini.

    The decomposition rounds differently (fallback.cpp routes these to the
    fallback); so do convolutions, which PyTorch sends to
    convolution_overrideable on other backends.
    """
    assert _bypassed_cpu_kernels() == []
    routed = set(fallback.routed_operators())
    assert {"aten::native_layer_norm", "aten::native_group_norm", "aten::addr"} <= routed
    assert {"aten::convolution_backward", "aten::silu_backward"} <= routed
    # The forward is the seam's convolution kernel (its refusals run here).
    assert "aten::convolution" not in routed
    assert "aten::convolution" in {info.name for info in torch_infini.operators()}
    x, w = make_cpu((2, 3, 7, 6), torch.float32), make_cpu((6, 3, 3, 3), torch.float32, seed=1)
    b, g = make_cpu((6,), torch.float32, seed=2), make_cpu((2, 6, 5, 6), torch.float32, seed=3)

    def run(device: str) -> list[torch.Tensor]:
        xd, wd, bd = (t.to(device).requires_grad_() for t in (x, w, b))
        y = F.conv2d(xd, wd, bd, padding=(0, 1))
        z = F.group_norm(F.layer_norm(y, (5, 6)), 3)
        z.backward(g.to(device))
        outer = torch.addr(bd.detach().outer(bd.detach()), bd.detach(), bd.detach(), beta=0.5)
        return [y, z, xd.grad, wd.grad, bd.grad, outer]

    for got, want in zip(run("infini"), run("cpu"), strict=True):
        assert_bitwise_equal(got, want)


@pytest.mark.parametrize("profiled", [False, True], ids=["direct", "profiled"])
def test_cpu_autocast_leaves_infini_tensors_alone(profiled: bool) -> None:
    """torch.autocast("cpu") is for CPU tensors: a bfloat16 prod on infini
    (a fallback operator, which CPU autocast runs in float32) stays bfloat16,
    as a CUDA one would. The fallback's CPU kernel must not pass through CPU
    autocast, whether it is called directly or, with a profiler recording
    operators, through the full dispatch."""
    x = make_cpu((4, 5), torch.bfloat16)
    want = torch.prod(x, 1)
    profiler = torch.profiler.profile() if profiled else contextlib.nullcontext()
    with profiler, torch.autocast("cpu", dtype=torch.bfloat16):
        got = torch.prod(x.to(DEVICE), 1)
        assert torch.prod(x, 1).dtype == torch.float32  # autocast is on for CPU tensors
    assert got.dtype == torch.bfloat16
    assert_bitwise_equal(got, want)
    assert any("prod" in name for name in fallback.stats())


@pytest.mark.parametrize("loss", [F.mse_loss, F.smooth_l1_loss], ids=["mse", "smooth_l1"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_run_the_cpus_functional_kernel_without_warnings(
    loss: Callable[..., torch.Tensor], reduction: str
) -> None:
    """mse_loss and smooth_l1_loss: on other backends PyTorch allocates the
    reduced result and calls .out, whose CPU kernel resized it with a
    deprecation warning ("An output with one or more elements was resized").
    The CPU's functional kernel runs instead: no warning, the CPU's values
    and gradients bit for bit."""
    x, t = make_cpu((5, 7), torch.float32), make_cpu((5, 7), torch.float32, seed=1)

    def run(device: str) -> list[torch.Tensor]:
        xd = x.to(device).requires_grad_()
        out = loss(xd, t.to(device), reduction=reduction)
        out.backward(torch.ones_like(out))
        return [out, xd.grad]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run("infini")
    for a, b in zip(got, run("cpu"), strict=True):
        assert_bitwise_equal(a, b)
    assert {"aten::mse_loss", "aten::smooth_l1_loss"} <= set(fallback.routed_operators())


def test_sparse_nested_and_quantized_tensors_are_refused_clearly() -> None:
    dense = make_cpu((3, 3), torch.float32)
    with raises_exactly(NotImplementedError, match="strided .* only, not sparse COO tensors"):
        dense.to_sparse().to(DEVICE)
    csr = dense.to_sparse_csr().to(DEVICE)  # its members are dense infini tensors
    with raises_exactly(NotImplementedError, match="strided .* only, not sparse compressed"):
        csr.to_dense()
    quantized = torch.quantize_per_tensor(dense, 0.1, 0, torch.qint8)
    with raises_exactly(NotImplementedError, match="strided .* only, not quantized tensors"):
        quantized.to(DEVICE)
    nested = torch.nested.as_nested_tensor([dense, dense[:2]])
    with raises_exactly(NotImplementedError, match="strided .* only, not nested tensors"):
        nested.to(DEVICE)


@pytest.mark.parametrize(
    "quantize",
    [
        lambda x: torch.quantize_per_tensor(x, 0.1, 0, torch.quint8),
        lambda x: torch.quantize_per_tensor(x, 0.1, 3, torch.qint8),
        lambda x: torch.quantize_per_tensor_dynamic(x, torch.quint8, False),
    ],
    ids=["quint8", "qint8", "dynamic"],
)
def test_quantizing_an_infini_tensor_is_refused_clearly(quantize: Callable) -> None:
    """The CPU's kernel would return a quantized tensor, which infini has no
    form for: refused by name, never an infini tensor of a quantized dtype
    that is not quantized (its .cpu() and .dequantize() once failed)."""
    x = make_cpu((4, 3), torch.float32).to(DEVICE)
    with raises_exactly(NotImplementedError, match=r"returns a quantized tensor \(Q"):
        quantize(x)


def _ones(dtype: torch.dtype, shape: tuple[int, ...] = (2, 3)) -> torch.Tensor:
    return torch.ones(shape, dtype=dtype, device=DEVICE)


# ------------------------------------------------------------- stream order


@requires_async_host
def test_fallback_waits_for_the_stream_and_later_work_sees_its_writes() -> None:
    side = torch.infini.Stream()
    w = torch.full((256, 256), 1e-3, device=DEVICE)
    x = torch.zeros(1 << 16, device=DEVICE)
    torch.infini.synchronize()
    with torch.infini.stream(side):
        for _ in range(10):
            torch.mm(w, w)  # keeps the side stream busy
        x.fill_(0.5)  # queued behind the products
        y = torch.atan2(x, torch.ones_like(x))  # the fallback must read 0.5, not 0
        x.mul_(2)  # queued after the fallback's write of y
        z = y * 1  # native, sees the fallback's result
    torch.infini.synchronize()
    expected = torch.atan2(torch.full((1 << 16,), 0.5), torch.ones(1 << 16))
    assert_bitwise_equal(y, expected)
    assert_bitwise_equal(z, expected)
    assert_bitwise_equal(x, torch.ones(1 << 16))


# ------------------------------------------------------------------- policy


def test_modes_and_regions() -> None:
    a = torch.ones(3, device=DEVICE)
    with fallback.strict():
        assert fallback.mode() == "off"
        with raises_exactly(NotImplementedError, match=r"aten::exp.*TORCH_INFINI_CPU_FALLBACK=off"):
            torch.exp(a)
        with fallback.allowed("silent"):
            assert_bitwise_equal(torch.exp(a), torch.exp(torch.ones(3)))
        assert fallback.mode() == "off"
    assert fallback.mode() == "silent"
    with pytest.raises(ValueError, match="mode"):
        fallback.set_mode("sometimes")


def test_allow_and_deny_lists() -> None:
    a = torch.ones(3, device=DEVICE)
    fallback.deny(["aten::exp"])
    with raises_exactly(NotImplementedError, match="aten::exp"):
        torch.exp(a)
    assert fallback.denied_operators() == ["aten::exp"]
    fallback.deny([])
    fallback.allow(["aten::exp"])
    with fallback.strict():
        assert_bitwise_equal(torch.exp(a), torch.exp(torch.ones(3)))
        with raises_exactly(NotImplementedError, match="aten::log"):
            torch.log(a)
    with pytest.raises(ValueError, match="aten::add"):
        fallback.allow(["exp"])


def test_stats_count_calls_time_and_bytes() -> None:
    a = torch.ones(1000, device=DEVICE)
    start = time.perf_counter()
    for _ in range(3):
        torch.exp(a)
    elapsed = time.perf_counter() - start
    (name, s), *rest = fallback.stats().items()
    assert rest == [] and "exp" in name
    # seconds, not clock ticks: within the time the three calls took
    assert s.calls == 3 and 0 < s.seconds <= elapsed
    if _host_addressable():
        # the CPU's exp reads device memory in place and allocates its
        # result in device memory, which the infini result takes over
        assert s.bytes_copied == 0
    else:
        # the input staged to the CPU, the result back: 8 kB a call
        assert s.bytes_copied == 3 * 2 * 1000 * 4
    assert "exp" in fallback.summary()
    fallback.reset_stats()
    assert fallback.stats() == {}


def _host_addressable() -> bool:
    """The fallback runs the CPU kernel on device memory in place (else: staged copies)."""
    in_place = bool(torch_infini._C._capabilities()["host_addressable"])
    return in_place and not torch_infini._C._fallback_staging_forced()


@pytest.mark.skipif(not _host_addressable(), reason="device memory is not host memory")
def test_in_place_where_memory_is_host_memory() -> None:
    """Inputs are read where they are; results the CPU kernel allocates are
    allocated in device memory; an out= argument that must grow grows in
    device memory: nothing is copied."""
    x_cpu, x = _pair((100,))
    torch.atan2(x, x)  # structured: the CPU's functional atan2
    torch.exp_(x[::2])  # in place on a view
    x.view(10, 10).max(dim=1)  # two results
    x_cpu[::2].exp_()
    assert_bitwise_equal(x, x_cpu)
    indices = torch.nonzero(x > 0)  # the CPU kernel resizes its result as it goes
    assert_bitwise_equal(indices, torch.nonzero(x_cpu > 0))
    copied = {name: s.bytes_copied for name, s in fallback.stats().items()}
    assert {"aten::atan2", "aten::exp_", "aten::max.dim", "aten::nonzero"} <= set(copied)
    assert all(n == 0 for n in copied.values()), copied
    fallback.reset_stats()
    out = torch.empty(0, device=DEVICE)
    torch.atan2(x, x, out=out)  # out= must grow
    assert_bitwise_equal(out, torch.atan2(x_cpu, x_cpu))
    assert fallback.stats()["aten::atan2.out"].bytes_copied == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda out: torch.arange(3, 40, 2, out=out),
        lambda out: torch.atan2(
            torch.linspace(-2, 2, 12, device=out.device),
            torch.linspace(1, 3, 12, device=out.device).flip(0),
            out=out,
        ),
        lambda out: torch.cumsum(torch.arange(30.0, device=out.device).view(5, 6).t(), 0, out=out),
    ],
    ids=["arange", "atan2", "cumsum_of_transposed"],
)
@pytest.mark.parametrize("start", [0, 3], ids=["empty", "too_small"])
@pytest.mark.filterwarnings("ignore:.*(resized|out tensor of shape).*:UserWarning")
def test_an_out_argument_grows_in_device_memory_as_on_the_cpu(call: Callable, start: int) -> None:
    """An out= the CPU kernel must grow (arange(..., out=torch.empty(0)) in
    position ids) grows as its storage would on the CPU: every tensor of the
    storage sees the new memory. Where device memory is host memory the
    kernel's new memory is device memory and becomes the infini storage's,
    with no copy and no retry (it was a refused resize, an exception and a
    staged copy: 7x the CPU's time)."""
    out_cpu = torch.arange(float(start))
    out = out_cpu.to(DEVICE)
    sibling_cpu, sibling = out_cpu[:0], out[:0]  # another tensor of the storage
    want, got = call(out_cpu), call(out)
    assert got is out and want is out_cpu
    assert_bitwise_equal(out, out_cpu)
    assert out.stride() == out_cpu.stride() and out.storage_offset() == out_cpu.storage_offset()
    storage, storage_cpu = out.untyped_storage(), out_cpu.untyped_storage()
    assert storage.nbytes() == storage_cpu.nbytes()
    assert sibling.untyped_storage().data_ptr() == storage.data_ptr()
    assert sibling_cpu.untyped_storage().data_ptr() == storage_cpu.data_ptr()
    assert_bitwise_equal(
        torch.empty(0, device=DEVICE).set_(storage, 0, (storage.nbytes() // 4,)),
        torch.empty(0).set_(storage_cpu, 0, (storage_cpu.nbytes() // 4,)),
    )
    if _host_addressable():  # (staged: the result is copied back, as ever)
        assert all(s.bytes_copied == 0 for s in fallback.stats().values())


def test_threads_share_one_policy_and_exact_counts() -> None:
    a = torch.ones(64, device=DEVICE)
    expected = torch.exp(torch.ones(64))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                assert_bitwise_equal(torch.exp(a), expected)
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(s.calls for s in fallback.stats().values()) == 80


_WARN_SCRIPT = """
import warnings, torch, torch_infini
warnings.simplefilter("always")
a = torch.ones(3, device="infini")
with warnings.catch_warnings(record=True) as caught:
    torch.exp(a); torch.exp(a); torch.log(a)
infini = [str(w.message) for w in caught if "infini" in str(w.message)]
print("MODE", torch_infini.cpu_fallback.mode())
print("WARNINGS", len(infini))
for m in infini:
    print("W", m)
"""


@pytest.mark.parametrize(("env", "count"), [(None, 2), ("warn", 2), ("silent", 0)])
def test_warns_once_per_operator_as_the_variable_says(env: str | None, count: int) -> None:
    proc = run_python(_WARN_SCRIPT, env={"TORCH_INFINI_CPU_FALLBACK": env})
    assert proc.returncode == 0, describe(proc)
    assert f"MODE {env or 'warn'}" in proc.stdout, describe(proc)
    assert f"WARNINGS {count}" in proc.stdout, describe(proc)
    if count:
        assert "exp" in proc.stdout and "TORCH_INFINI_CPU_FALLBACK=off" in proc.stdout


def test_variable_off_refuses_and_a_bad_value_is_named() -> None:
    code = "import torch, torch_infini; torch.exp(torch.ones(2, device='infini'))"
    proc = run_python(code, env={"TORCH_INFINI_CPU_FALLBACK": "off"})
    assert proc.returncode != 0 and "NotImplementedError" in proc.stderr, describe(proc)
    proc = run_python(code, env={"TORCH_INFINI_CPU_FALLBACK": "sometimes"})
    assert proc.returncode != 0, describe(proc)
    assert "TORCH_INFINI_CPU_FALLBACK" in proc.stderr and "sometimes" in proc.stderr


def test_attention_takes_the_cpus_fused_kernel() -> None:
    """scaled_dot_product_attention picks what the CPU picks (its flash kernel, run
    whole in the fallback): float16 results and gradient layouts are the CPU's.
    With dropout PyTorch takes its math path, whose dropout is infini's own."""
    q, k, v = (
        make_cpu(s, torch.float16, seed)
        for seed, s in enumerate([(2, 4, 3, 8), (2, 4, 6, 8), (2, 4, 6, 8)])
    )
    for causal in (False, True):
        assert_bitwise_equal(
            F.scaled_dot_product_attention(
                q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), is_causal=causal
            ),
            F.scaled_dot_product_attention(q, k, v, is_causal=causal),
        )
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in fallback.stats()
    x_cpu = make_cpu((2, 4, 6, 8), torch.float32).requires_grad_()
    x = x_cpu.detach().to(DEVICE).requires_grad_()
    F.scaled_dot_product_attention(x, x, x).sum().backward()
    F.scaled_dot_product_attention(x_cpu, x_cpu, x_cpu).sum().backward()
    assert x.grad.stride() == x_cpu.grad.stride()
    assert_bitwise_equal(x.grad, x_cpu.grad)
    draws = []
    for _ in range(2):
        torch.manual_seed(5)
        draws.append(F.scaled_dot_product_attention(x, x, x, dropout_p=0.5))
    assert_bitwise_equal(draws[0], draws[1].cpu())
    assert not any("dropout" in name for name in fallback.stats())
