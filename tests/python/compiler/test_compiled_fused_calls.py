"""torch.compile of programs that call the fused operators themselves
(``torch.ops.infini.swiglu``, ``causal_softmax``, ...; the Llama example
does).

Where the graph passes make no rewrites (``TORCH_INFINI_GRAPH_PASSES``: by
default on a host-addressable backend) Inductor lowers each such call
(graph_passes/decompositions.py) and fuses it with its neighbours: no
``torch.ops.infini`` call is left in the compiled code. Where they rewrite,
the call stays one fused kernel. Either way results match the CPU oracle
(fused_oracles.py: stock PyTorch, in float and rounded once as the kernels
promise), values and strides, forward and backward: float16 and bfloat16
results bit for bit, float32 and float64 within a few ulps (WIDE_EPS says
why).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import fused_oracles as oracle
import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal, describe, requires_inductor, run_python
from torch._inductor.graph import GraphLowering
from torch_infini import graph_passes

pytestmark = requires_inductor

DEVICE = torch.device("infini", 0)


@pytest.fixture(autouse=True)
def _fresh_compile(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Nothing rewritten unless a test says so ("auto" rewrites where device
    # memory is not host memory: discrete mode, accelerators).
    monkeypatch.setenv(graph_passes.MODE_VARIABLE, "never")
    torch._dynamo.reset()
    # Every graph compiled afresh (a cache hit would skip the graph passes):
    # no FX graph or AOTAutograd cache. The compiled kernels' binaries stay
    # cached: the same source compiles to the same kernel.
    with (
        torch._inductor.config.patch(fx_graph_cache=False, compile_threads=1),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        yield
    torch._dynamo.reset()


@contextlib.contextmanager
def _wrapper_code() -> Iterator[list[str]]:
    codes: list[str] = []
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        yield codes


def _inputs(name: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=g).to(dtype)

    return {
        "silu_and_mul": lambda: (randn(3, 5, 16),),
        "swiglu": lambda: (randn(4, 24), randn(4, 24)),
        "causal_softmax": lambda: (randn(6, 3, 7),),
        "rms_norm": lambda: (randn(2, 5, 32), randn(32)),
        "add_rms_norm": lambda: (randn(2, 5, 32), randn(2, 5, 32), randn(32)),
    }[name]()


OPERATORS = ["silu_and_mul", "swiglu", "causal_softmax", "rms_norm", "add_rms_norm"]


def _call(name: str) -> Callable[..., Any]:
    op = getattr(torch.ops.infini, name)
    # A neighbour to fuse with: the call's inputs scaled first.
    return lambda *xs: op(*(x * 2 for x in xs))


def _oracle(name: str) -> Callable[..., Any]:
    fn = getattr(oracle, name)
    return lambda *xs: fn(*(x * 2 for x in xs))


# Neither Inductor's C++ kernel nor, where a call stays the fused operator, the
# host's reference kernel (native/ops/src/fused) is ATen's: Inductor's vectorized
# exp (silu, softmax) and rsqrt and their orders of summation (rms_norm's mean,
# softmax's sum) put float32 and float64 results a few ulps from the eager
# oracle's (measured: up to 1.9 eps relative in float32, 2.3e-7; 1.7 eps in
# float64). Rounded once to float16 or bfloat16, those lie 2^13 and 2^16 times
# below the result's ulp, and for these inputs the half-precision results are
# the oracle's bits: there a rounding left out (add_rms_norm's residual sum kept
# in float: 72 of 320 float16 and 82 bfloat16 outputs change) shows.
WIDE_EPS = 4  # relative tolerance in eps of float32 and float64: the measured 1.9, twice


def _assert_value(got: torch.Tensor, want: torch.Tensor) -> None:
    """``got`` (on infini) against the oracle's ``want``: bit for bit in float16
    and bfloat16, within WIDE_EPS relative eps in float32 and float64, and
    the same strides."""
    if want.dtype in (torch.float16, torch.bfloat16):
        assert_bitwise_equal(got, want)
    else:
        eps = torch.finfo(want.dtype).eps
        torch.testing.assert_close(got.cpu(), want, rtol=WIDE_EPS * eps, atol=0, equal_nan=True)
    assert got.stride() == want.stride()


def _assert_matches(got: Any, want: Any) -> None:
    gots = got if isinstance(got, tuple) else (got,)
    wants = want if isinstance(want, tuple) else (want,)
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants, strict=True):
        _assert_value(g, w)


# The backward is the operator's own formula (torch_infini's autograd
# registration, compiled by Inductor); the oracle's autograd differentiates the
# composition: the same derivative in other expressions, summed over a row in
# another order. Float32 gradients differ by up to 2.4e-6 where they reach 22
# (add_rms_norm's weight) and 6.3e-7 where they reach 0.5 (causal_softmax: the
# error follows the incoming gradient's scale, not the result's), so PyTorch's
# float32 tolerances (atol 1e-5, rtol 1.3e-6) for another kernel's rounding.
def _assert_gradient(got: torch.Tensor, want: torch.Tensor) -> None:
    assert want.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), want)


# Every floating dtype the operators declare.
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPERATORS)
def test_a_call_is_lowered_by_inductor_where_nothing_is_rewritten(
    name: str, dtype: torch.dtype
) -> None:
    xs = _inputs(name, dtype)
    with _wrapper_code() as codes:
        got = torch.compile(_call(name))(*(x.to(DEVICE) for x in xs))
    _assert_matches(got, _oracle(name)(*xs))
    assert len(codes) == 1
    assert "torch.ops.infini" not in codes[0]


@pytest.mark.parametrize("name", OPERATORS)
def test_where_the_passes_rewrite_a_call_stays_the_fused_kernel(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(graph_passes.MODE_VARIABLE, "always")
    xs = _inputs(name, torch.float32)
    with _wrapper_code() as codes:
        got = torch.compile(_call(name))(*(x.to(DEVICE) for x in xs))
    _assert_matches(got, _oracle(name)(*xs))
    assert f"torch.ops.infini.{name}" in codes[0]


def test_a_call_on_cpu_tensors_is_left_to_the_operator() -> None:
    """The lowering is for infini tensors: on the CPU the operator's own
    (reference) kernel runs."""
    xs = _inputs("swiglu", torch.float32)
    with _wrapper_code() as codes:
        got = torch.compile(_call("swiglu"))(*xs)
    _assert_matches(got, _oracle("swiglu")(*xs))
    assert "torch.ops.infini.swiglu" in codes[0]


def test_dynamic_shapes_one_compile_serves_every_cache_length() -> None:
    """causal_softmax's mask follows the symbolic sizes: one compile for
    scores [h, s, t] of any s <= t (above 1, which Dynamo specializes)."""
    fn = torch.compile(_call("causal_softmax"), dynamic=True)
    g = torch.Generator().manual_seed(0)
    with _wrapper_code() as codes:
        for s, t in [(2, 5), (3, 7), (4, 9), (6, 6)]:
            x = torch.randn(4, s, t, generator=g)
            _assert_matches(fn(x.to(DEVICE)), _oracle("causal_softmax")(x))
    assert len(codes) == 1
    assert "torch.ops.infini" not in codes[0]


def test_a_row_of_nan_is_zero_outside_the_mask() -> None:
    """As the kernel writes them: masked entries are 0 whatever the row
    holds (a plain masked softmax gives NaN there)."""
    x = torch.randn(2, 3, 5)
    x[0, 1] = float("nan")
    got = torch.compile(_call("causal_softmax"))(x.to(DEVICE))
    _assert_matches(got, _oracle("causal_softmax")(x))


@pytest.mark.parametrize("name", ["swiglu", "causal_softmax", "rms_norm"])
def test_gradients_through_a_lowered_call_match_cpu(name: str) -> None:
    """The forward is Inductor's; the backward the operator's own formula:
    every input's gradient matches the oracle's."""
    xs = _inputs(name, torch.float32)
    leaves = [x.clone().requires_grad_() for x in xs]
    dev = [x.detach().to(DEVICE).requires_grad_() for x in xs]
    weights = torch.randn(_oracle(name)(*xs).shape)
    (_oracle(name)(*leaves) * weights).sum().backward()
    with _wrapper_code() as codes:
        (torch.compile(_call(name))(*dev) * weights.to(DEVICE)).sum().backward()
    assert "torch.ops.infini" not in codes[0]  # the forward
    for leaf, d in zip(leaves, dev, strict=True):
        assert d.grad is not None and leaf.grad is not None
        _assert_gradient(d.grad, leaf.grad)


def _sized_inputs(name: str, n: int) -> tuple[torch.Tensor, ...]:
    """Inputs whose sizes grow with n: rows, sequence and, for silu_and_mul,
    the width. For n in N_SIZES no two sizes are equal and none is 1 (Dynamo
    would tie equal sizes together and specialize a 1)."""
    g = torch.Generator().manual_seed(n)

    def randn(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=g)

    return {
        "silu_and_mul": lambda: (randn(2, n, 8 * n),),
        "swiglu": lambda: (randn(n, 24), randn(n, 24)),
        "causal_softmax": lambda: (randn(3, n, 2 * n + 1),),
        "rms_norm": lambda: (randn(2, n, 32), randn(32)),
        "add_rms_norm": lambda: (randn(n, 3, 32), randn(n, 3, 32), randn(32)),
    }[name]()


N_SIZES = (4, 5, 7)


@pytest.mark.parametrize("name", OPERATORS)
def test_with_gradients_one_dynamic_compile_serves_every_size(name: str) -> None:
    """Training (autograd on) with torch.compile(dynamic=True): the forward
    and the operator's backward formula are traced with symbolic sizes, so
    new lengths reuse the one compile; gradients match the oracle's."""
    from torch._dynamo.utils import counters

    fn = torch.compile(_call(name), dynamic=True)
    counters.clear()
    for n in N_SIZES:
        xs = _sized_inputs(name, n)
        leaves = [x.clone().requires_grad_() for x in xs]
        dev = [x.detach().to(DEVICE).requires_grad_() for x in xs]
        want = _oracle(name)(*leaves)
        got = fn(*dev)
        wants = want if isinstance(want, tuple) else (want,)
        gots = got if isinstance(got, tuple) else (got,)
        weights = [torch.randn(w.shape, generator=torch.Generator().manual_seed(n)) for w in wants]
        sum((w * c).sum() for w, c in zip(wants, weights, strict=True)).backward()
        sum((d * c.to(DEVICE)).sum() for d, c in zip(gots, weights, strict=True)).backward()
        _assert_matches(tuple(x.detach() for x in gots), tuple(w.detach() for w in wants))
        for leaf, d in zip(leaves, dev, strict=True):
            assert d.grad is not None and leaf.grad is not None
            _assert_gradient(d.grad, leaf.grad)
    assert counters["stats"]["unique_graphs"] == 1


# ------------------------------------------------- the wrapper's operator calls
#
# Where a call stays the fused operator, Inductor's wrapper calls it through
# infini_compiler.operator_call (_C._OperatorCall): the same dispatcher call
# as the OpOverload's, without its Python layer. What a user sees must not
# change: results, errors, warnings, the profiler, __torch_function__.


def _rms_norm_args() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return torch.randn(2, 5, 32, generator=g), torch.randn(32, generator=g)


def test_a_rewritten_call_bypasses_the_overloads_python_layer_not_the_profiler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The compiled graph never enters OpOverload.__call__ for the fused
    operator, and the profiler still records it (the dispatcher's
    RecordFunction): a trace of a compiled model shows its fused kernels."""
    monkeypatch.setenv(graph_passes.MODE_VARIABLE, "always")
    x, w = _rms_norm_args()
    fn = torch.compile(_call("rms_norm"))
    fn(x.to(DEVICE), w.to(DEVICE))  # compiled outside the counted region
    entered: list[str] = []
    overload_call = torch._ops.OpOverload.__call__

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        entered.append(str(self))
        return overload_call(self, *args, **kwargs)

    monkeypatch.setattr(torch._ops.OpOverload, "__call__", counting)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        got = fn(x.to(DEVICE), w.to(DEVICE))
    _assert_matches(got, _oracle("rms_norm")(x, w))
    assert not [name for name in entered if name.startswith("infini.")]
    assert "infini::rms_norm" in {event.name for event in prof.events()}


def _operator_call(name: str) -> Any:
    from torch_infini import _compiler

    return _compiler.operator_call(f"torch.ops.infini.{name}.default")


def test_an_operator_call_takes_what_the_overload_takes() -> None:
    """Positional, keyword and default arguments, bit for bit the
    OpOverload's results (the same kernel)."""
    x, w = (t.to(DEVICE) for t in _rms_norm_args())
    call, overload = _operator_call("rms_norm"), torch.ops.infini.rms_norm.default
    want = overload(x, w, 1e-5)
    assert_bitwise_equal(call(x, w, 1e-5), want.cpu())
    assert_bitwise_equal(call(x, weight=w, eps=1e-5), want.cpu())
    assert_bitwise_equal(call(input=x, weight=w, eps=1e-5), want.cpu())
    assert_bitwise_equal(call(x, w), overload(x, w).cpu())  # eps's default
    with torch_infini.cpu_fallback.allowed("silent"):  # add_rms_norm: the CPU's kernel
        out, residual = _operator_call("add_rms_norm")(x, x, w, 1e-5)
        want_out, want_residual = torch.ops.infini.add_rms_norm.default(x, x, w, 1e-5)
    assert_bitwise_equal(out, want_out.cpu())
    assert_bitwise_equal(residual, want_residual.cpu())


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(lambda x, w: (x, w.double(), 1e-5), id="a kernel's check"),
        pytest.param(lambda x, w: (x, 3, 1e-5), id="an int for a Tensor"),
        pytest.param(lambda x, w: (x, w, "small"), id="a str for a float"),
        pytest.param(lambda x, w: (x, w, 1e-5, 1), id="too many arguments"),
        pytest.param(lambda x, w: (x,), id="a missing argument"),
    ],
)
def test_an_operator_call_raises_what_the_overload_raises(args: Callable[..., Any]) -> None:
    x, w = (t.to(DEVICE) for t in _rms_norm_args())
    with pytest.raises(Exception) as want:
        torch.ops.infini.rms_norm.default(*args(x, w))
    with pytest.raises(Exception) as got:
        _operator_call("rms_norm")(*args(x, w))
    assert type(got.value) is type(want.value)
    assert str(got.value) == str(want.value)


def test_an_unknown_keyword_is_refused_as_the_overload_refuses_it() -> None:
    x, w = (t.to(DEVICE) for t in _rms_norm_args())
    with pytest.raises(Exception) as want:
        torch.ops.infini.rms_norm.default(x, w, epsilon=1e-5)
    with pytest.raises(Exception) as got:
        _operator_call("rms_norm")(x, w, epsilon=1e-5)
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)


class _Traced(torch.Tensor):
    """A Tensor subclass whose __torch_function__ records what it sees."""

    seen: list[str] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.seen.append(str(func))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_tensor_subclass_still_sees_the_call() -> None:
    x, w = (t.to(DEVICE) for t in _rms_norm_args())
    _Traced.seen.clear()
    _operator_call("rms_norm")(x.as_subclass(_Traced), w, 1e-5)
    assert "infini.rms_norm.default" in _Traced.seen


def test_a_torch_function_mode_still_sees_the_call() -> None:
    from torch.overrides import TorchFunctionMode

    x, w = (t.to(DEVICE) for t in _rms_norm_args())

    class Recording(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Recording() as mode:
        _operator_call("rms_norm")(x, w, 1e-5)
    assert mode.seen == ["infini.rms_norm.default"]


def test_a_kernels_warning_is_a_python_warning() -> None:
    """A warning the call raises in C++ (here the CPU fallback's, for a 4-D
    input the kernel refuses) is a Python warning, as through the
    OpOverload: -W error makes it an exception the caller catches."""
    code = (
        "import torch, torch_infini\n"
        "from torch_infini import _compiler\n"
        "call = _compiler.operator_call('torch.ops.infini.rms_norm.default')\n"
        "x, w = torch.randn(2, 2, 2, 8).to('infini'), torch.randn(8).to('infini')\n"
        "try:\n"
        "    call(x, w, 1e-5)\n"
        "except UserWarning as warning:\n"
        "    print('caught:', warning)\n"
    )
    proc = run_python(code, env={"PYTHONWARNINGS": "error"})
    assert proc.returncode == 0, describe(proc)
    assert "caught: infini: infini::rms_norm: the infini kernel takes 2-D and 3-D" in proc.stdout


def test_an_in_place_operator_call_returns_none_as_the_overload() -> None:
    """An operator that returns nothing (``-> ()``, fused_add_rms_norm writes
    its inputs) gives None, as the OpOverload does, and the same writes."""
    x, w = (t.to(DEVICE) for t in _rms_norm_args())
    call_input, call_residual = x.clone(), (x * 2).clone()
    want_input, want_residual = x.clone(), (x * 2).clone()
    with torch_infini.cpu_fallback.allowed("silent"):  # where the kernel refuses the layout
        got = _operator_call("fused_add_rms_norm")(call_input, call_residual, w, 1e-5)
        want = torch.ops.infini.fused_add_rms_norm.default(want_input, want_residual, w, 1e-5)
    assert got is None and want is None
    assert_bitwise_equal(call_input, want_input.cpu())
    assert_bitwise_equal(call_residual, want_residual.cpu())
