"""Arguments on the wrong device raise in the CPU fallback as in CUDA's kernels (issue 30, item 10).

The CPU fallback makes every infini argument a CPU tensor and runs the CPU's
kernel, so a CPU tensor the caller passed by mistake looked like any other
argument: ``torch.log1p(x, out=torch.empty(4))`` wrote the CPU tensor,
``torch.gather(cpu, 0, infini_index)`` returned a CPU tensor, ``index_put_``
took CPU values, ``dot`` mixed devices. CUDA refuses all of these. The rule
CUDA applies (PyTorch's ATen, read from its sources):

* Operators with ``device_check: ExactSame`` in native_functions.yaml (the
  default: gather, index_select, dot, vdot, histc, mm, ...): the generated
  CUDA wrapper refuses any tensor argument (out= included, 0-dim included)
  on another device: "Expected all tensors to be on the same device, but got
  index is on cpu, different from other tensors on cuda:0 (when checking
  argument in method wrapper_CUDA_gather)".
* TensorIterator operators (``device_check: NoCheck``): outputs (out=,
  in-place self) must be on the device; a 0-dim CPU input is a "CPU scalar",
  allowed once, only for operators built with ``allow_cpu_scalars`` (binary,
  ternary: ``x + torch.tensor(2.)``); not for unary ones. "Expected all
  tensors to be on the same device, but found at least two devices, cuda:0
  and cpu!" / "Trying to pass too many CPU scalars to non-CPU kernel!".
* Advanced indexing (index, index_put_) moves CPU index tensors to the device;
  index_put_ takes a 0-dim CPU value, not a CPU tensor of values.

The op_db part mirrors PyTorch's TestCommon.test_out (case "out= with the
correct shape and dtype, but the wrong device"), which is not in the wheel:
one dtype per OpInfo (PyTorch's ``OpDTypes.any_one`` order), its first sample;
left out as PyTorch leaves them out: factory functions, OpInfos whose
test_out op_db marks as an expected failure or skip on CUDA, random ones
(refused on infini) and ``NOT_ON_INFINI``. Operators infini's own kernels
serve are swept too: they refuse already (with their own words).

Where the rule belongs (the fallback's argument conversion, for calls with no
infini kernel and calls a kernel handed over) is the fix's business; these
tests only say what the caller sees.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch_infini
from infini_testing import (
    assert_bitwise_equal,
    forced_staging,
    raises_exactly,
    requires_two_devices,
)
from op_coverage import load_op_db, opinfo_id
from op_db_engine import Mover, seeds_random

DEVICE = torch.device("infini", 0)

# The two messages CUDA's device checks give for a tensor on the wrong device
# (the codegen's ExactSame check and TensorIterator both start with the first;
# a structured kernel's set_output gives the second for a wrong out= device).
SAME_DEVICE = "Expected all tensors to be on the same device"
WRONG_DEVICE = rf"{SAME_DEVICE}|Expected out tensor to have device"
# What the op_db sweep asks of a refusal: a device error (composites, linalg and
# friends word their own: "Expected result and input tensors to be on the same
# device", "quantile() out tensor must be on the same device as the input").
ANY_DEVICE_ERROR = r"(?i)device"
# How infini's own kernels (not the fallback) refuse a CPU tensor: they already did.
NATIVE_REFUSAL = r"to be an infini tensor, got a tensor on cpu"


@pytest.fixture(autouse=True)
def _fallback_silent() -> Iterator[None]:
    with torch_infini.cpu_fallback.allowed("silent"):
        yield


def _fallback_calls() -> int:
    return sum(s.calls for s in torch_infini.cpu_fallback.stats().values())


def _untouched(before: list[torch.Tensor], after: list[torch.Tensor]) -> None:
    for b, a in zip(before, after, strict=True):
        assert_bitwise_equal(a, b)


# ---------------------------------------------------------------- op_db: out= on the CPU

# PyTorch's OpDTypes.any_one order (common_device_type.ANY_DTYPE_ORDER).
_ANY_DTYPE_ORDER = (
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)


def _any_one_dtype(opinfo: Any) -> torch.dtype | None:
    """One dtype CUDA and the CPU both support, in PyTorch's test_out order."""
    both = set(opinfo.supported_dtypes("cpu")) & set(opinfo.supported_dtypes("cuda"))
    backward = set(opinfo.supported_backward_dtypes("cuda")) if opinfo.supports_autograd else set()
    pool = (both & backward) or both
    return next((d for d in _ANY_DTYPE_ORDER if d in pool), None)


def _test_out_disabled_on_cuda(opinfo: Any, dtype: torch.dtype) -> bool:
    """op_db marks TestCommon.test_out an expected failure or skip on CUDA for this dtype."""
    for info in opinfo.decorators:
        is_active = getattr(info, "is_active", None)
        if is_active is not None and is_active("TestCommon", "test_out", "cuda", dtype, {}):
            return True
    return False


def first_samples(
    opinfo: Any, dtype: torch.dtype, count: int, requires_grad: bool = False
) -> list[Any]:
    """The OpInfo's first ``count`` CPU samples, drawn from a fixed seed.

    Straight from ``sample_inputs_func``: ``OpInfo.sample_inputs`` wraps it in
    an iterator that walks the whole call stack (``inspect.stack()``, for
    PyTorch's own test names), a tenth of a second per call under pytest.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        samples = opinfo.sample_inputs_func(opinfo, "cpu", dtype, requires_grad)
        return list(itertools.islice(iter(samples), count))


# OpInfos PyTorch itself refuses on any device but its own (not the fallback's doing).
NOT_ON_INFINI = {
    "mode": "aten::mode checks 'mode only supports CPU, CUDA and XPU device type'",
    # and one whose result is no tensor (PyTorch's test_out skips it too)
    "equal": "returns a Python bool",
}


def _out_params() -> list[Any]:
    params = []
    for opinfo in load_op_db():
        if not opinfo.supports_out or opinfo.is_factory_function or seeds_random(opinfo):
            continue  # factories take the device from out=; random ones are refused on infini
        if opinfo.name in NOT_ON_INFINI:
            continue
        dtype = _any_one_dtype(opinfo)
        if dtype is None or _test_out_disabled_on_cuda(opinfo, dtype):
            continue
        name = str(dtype).removeprefix("torch.")
        params.append(pytest.param(opinfo, dtype, id=f"{opinfo_id(opinfo)}-{name}"))
    return params


def _outs(result: Any) -> list[torch.Tensor] | None:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in result):
        return list(result)
    return None


def _as_out(tensors: list[torch.Tensor], single: bool) -> Any:
    return tensors[0] if single else tuple(tensors)


@pytest.mark.parametrize(("opinfo", "dtype"), _out_params())
def test_out_on_the_cpu_raises(opinfo: Any, dtype: torch.dtype) -> None:
    """An infini call with every out= on the CPU raises RuntimeError, writing nothing.

    The same call with out= on infini must work first (so the refusal is about
    the device, nothing else). The refusal must be a device error: CUDA's own
    words differ by operator (``SAME_DEVICE``, ``Expected out tensor to have
    device``, the composites' own checks), infini's kernels word theirs
    (``NATIVE_REFUSAL``); the targeted tests below pin CUDA's words.
    """
    sample = first_samples(opinfo, dtype, 1)[0]
    expected = opinfo.op(sample.input, *sample.args, **sample.kwargs)
    outs = _outs(expected)
    if outs is None:
        pytest.fail(f"{opinfo_id(opinfo)} returns {type(expected).__name__}: not an out= operator")
    single = isinstance(expected, torch.Tensor)
    mover = Mover(DEVICE)
    args = mover.value((sample.input, *sample.args))
    kwargs = mover.value(dict(sample.kwargs))

    good = [torch.empty_like(t, device=DEVICE) for t in outs]
    calls = _fallback_calls()
    opinfo.op(*args, out=_as_out(good, single), **kwargs)
    fell_back = _fallback_calls() > calls
    ran = "the CPU fallback" if fell_back else "an infini kernel"
    refusal = rf"{ANY_DEVICE_ERROR}|{NATIVE_REFUSAL}"

    wrong = [torch.testing.make_tensor(t.shape, dtype=t.dtype, device="cpu") for t in outs]
    before = [t.clone() for t in wrong]
    with raises_exactly(RuntimeError, refusal):
        try:
            opinfo.op(*args, out=_as_out(wrong, single), **kwargs)
        except RuntimeError:
            raise
        except Exception as exc:  # another type: say so, with the path it took
            raise AssertionError(f"{type(exc).__name__} via {ran}: {exc}") from exc
        else:
            pytest.fail(f"no error: out= on the CPU accepted ({ran} ran)")
    _untouched(before, wrong)


def test_out_sweep_covers_fallback_operators() -> None:
    """The sweep is not empty and reaches operators served by the CPU fallback."""
    names = {p.values[0].name for p in _out_params()}
    assert {"log1p", "gather", "atan2", "index_select", "dot"} <= names
    assert len(names) > 150


# ---------------------------------------------------------------- the cases


def test_log1p_out_on_the_cpu_raises() -> None:
    x = torch.rand(4, device=DEVICE)
    out = torch.full((4,), 7.0)
    with raises_exactly(RuntimeError, SAME_DEVICE):
        torch.log1p(x, out=out)
    assert torch.equal(out, torch.full((4,), 7.0))


def test_inplace_on_a_cpu_tensor_with_an_infini_operand_raises() -> None:
    """The in-place self is an output: never a CPU scalar, not even 0-dim."""
    for target in (torch.ones(3), torch.tensor(1.0)):
        before = target.clone()
        with raises_exactly(RuntimeError, SAME_DEVICE):
            target.atan2_(torch.ones(3, device=DEVICE)[: target.numel()].reshape(target.shape))
        assert torch.equal(target, before)


def test_gather_across_devices_raises() -> None:
    """PyTorch's test_gather_take_along_dim_cross_device (test_torch.py)."""
    t = torch.testing.make_tensor((2, 3, 1, 4), dtype=torch.float32, device=DEVICE)
    indices = torch.argsort(t, dim=0)
    with raises_exactly(RuntimeError, SAME_DEVICE):
        torch.gather(t, 0, indices.cpu())
    with raises_exactly(RuntimeError, SAME_DEVICE):
        torch.gather(t.cpu(), 0, indices)
    take = r"Expected tensor to have .* but got tensor with .* torch.take_along_dim\(\)"
    with raises_exactly(RuntimeError, take):
        torch.take_along_dim(t, indices.cpu(), dim=0)
    with raises_exactly(RuntimeError, take):
        torch.take_along_dim(t.cpu(), indices, dim=0)


def test_gather_out_on_the_cpu_raises() -> None:
    t = torch.arange(6.0, device=DEVICE).reshape(2, 3)
    index = torch.tensor([[0, 2], [1, 0]], device=DEVICE)
    out = torch.full((2, 2), -1.0)
    with raises_exactly(RuntimeError, WRONG_DEVICE):
        torch.gather(t, 1, index, out=out)
    assert torch.equal(out, torch.full((2, 2), -1.0))


@pytest.mark.parametrize("accumulate", [False, True], ids=["set", "accumulate"])
def test_index_put_with_cpu_values_raises(accumulate: bool) -> None:
    """PyTorch's test_invalid_device (test_indexing.py): CPU indices and CPU values."""
    idx = torch.tensor([0, 1])
    b = torch.zeros(5, device=DEVICE)
    c = torch.tensor([1.0, 2.0])
    message = rf"{SAME_DEVICE}|expected device infini:0 but got device cpu"
    with raises_exactly(RuntimeError, message):
        torch.index_put_(b, (idx,), c, accumulate=accumulate)
    assert torch.equal(b.cpu(), torch.zeros(5))


@pytest.mark.parametrize("fn", [torch.dot, torch.vdot], ids=["dot", "vdot"])
def test_dot_across_devices_raises(fn: Callable[..., torch.Tensor]) -> None:
    """PyTorch's test_errors_dot / test_errors_vdot (test_linalg.py)."""
    x = torch.testing.make_tensor(10, dtype=torch.float32, device=DEVICE)
    y = torch.testing.make_tensor(10, dtype=torch.float32, device="cpu")
    with raises_exactly(RuntimeError, SAME_DEVICE):
        fn(x, y)
    with raises_exactly(RuntimeError, SAME_DEVICE):
        fn(y, x)


CPU_OPERAND_REFUSED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "atan2": lambda x: torch.atan2(x, torch.rand(3)),
    "maximum": lambda x: torch.maximum(x, torch.rand(3)),
    "fmod": lambda x: torch.fmod(x, torch.rand(3)),
    "where(other)": lambda x: torch.where(x > 0.5, x, torch.rand(3)),
    # clamp.Tensor's TensorIterator has no allow_cpu_scalars: not even a 0-dim bound
    "clamp(min 0-dim)": lambda x: torch.clamp(x, min=torch.tensor(0.25)),
}


@pytest.mark.parametrize("case", list(CPU_OPERAND_REFUSED), ids=str)
def test_a_cpu_operand_that_is_no_scalar_raises(case: str) -> None:
    x = torch.rand(3, device=DEVICE)
    with raises_exactly(RuntimeError, SAME_DEVICE):
        CPU_OPERAND_REFUSED[case](x)


# ---------------------------------------------------------------- what CUDA allows


def _same(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.device == DEVICE, got.device
    assert_bitwise_equal(got, expected)


BINARY_CPU_SCALAR: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": lambda x, s: x + s,
    "mul": lambda x, s: s * x,
    "atan2": torch.atan2,
    "atan2(scalar first)": lambda x, s: torch.atan2(s, x),
    "maximum": torch.maximum,
    "fmod": torch.fmod,
    "pow": torch.pow,
    "lt": torch.lt,
    "where(other)": lambda x, s: torch.where(x > 0.5, x, s),
    "lerp(weight)": lambda x, s: torch.lerp(x, x * 2, s),
    "addcmul(tensor2)": lambda x, s: torch.addcmul(x, x, s),
}


@pytest.mark.parametrize("case", list(BINARY_CPU_SCALAR), ids=str)
def test_a_cpu_zero_dim_tensor_is_a_scalar_operand(case: str) -> None:
    """``infini + torch.tensor(2.0)``: one 0-dim CPU input of a TensorIterator operator is fine."""
    call = BINARY_CPU_SCALAR[case]
    x_cpu = torch.rand(5, generator=torch.Generator().manual_seed(0))
    s = torch.tensor(0.375)
    _same(call(x_cpu.to(DEVICE), s), call(x_cpu, s))


def test_a_cpu_zero_dim_out_call_with_one_scalar_works() -> None:
    x_cpu = torch.rand(4, generator=torch.Generator().manual_seed(1))
    out = torch.empty(4, device=DEVICE)
    torch.atan2(x_cpu.to(DEVICE), torch.tensor(0.5), out=out)
    _same(out, torch.atan2(x_cpu, torch.tensor(0.5)))


def test_cpu_indices_index_an_infini_tensor() -> None:
    """PyTorch's test_cpu_indices (test_indexing.py): CPU index tensors move to the device."""
    idx = torch.tensor([0, 1])
    x = torch.ones(10, device=DEVICE)
    x[idx] = torch.zeros(2, device=DEVICE)
    ref = torch.ones(10)
    ref[:2] = 0
    _same(x, ref)
    _same(x[idx], torch.zeros(2))
    _same(x[torch.tensor([True, False] * 5)], ref[torch.tensor([True, False] * 5)])


@pytest.mark.parametrize("accumulate", [False, True], ids=["set", "accumulate"])
def test_index_put_takes_a_cpu_zero_dim_value(accumulate: bool) -> None:
    idx = torch.tensor([1, 3])
    value = torch.tensor(2.5)
    x = torch.ones(5, device=DEVICE)
    expected = torch.ones(5).index_put_((idx,), value, accumulate=accumulate)
    _same(x.index_put_((idx,), value, accumulate=accumulate), expected)


def test_masked_fill_takes_a_cpu_zero_dim_value() -> None:
    x_cpu = torch.arange(6.0).reshape(2, 3)
    mask = x_cpu > 2
    _same(x_cpu.to(DEVICE).masked_fill(mask.to(DEVICE), torch.tensor(-1.0)),
          x_cpu.masked_fill(mask, torch.tensor(-1.0)))  # fmt: skip


def test_masked_fill_refuses_a_cpu_mask() -> None:
    """CUDA's masked_fill_ takes a CPU value scalar but not a CPU mask."""
    x = torch.arange(6.0, device=DEVICE)
    # CUDA: "expected self and mask to be on the same device"
    with raises_exactly(RuntimeError, "to be on the same device"):
        x.masked_fill_(torch.arange(6) > 2, 1.0)
    assert torch.equal(x.cpu(), torch.arange(6.0))


def test_the_staged_fallback_applies_the_same_rule() -> None:
    x_cpu = torch.rand(4, generator=torch.Generator().manual_seed(2))
    x = x_cpu.to(DEVICE)
    out = torch.full((4,), 7.0)
    with forced_staging():
        with raises_exactly(RuntimeError, WRONG_DEVICE):
            torch.log1p(x, out=out)
        with raises_exactly(RuntimeError, SAME_DEVICE):
            torch.gather(x, 0, torch.tensor([0, 1]))
        with raises_exactly(RuntimeError, rf"{SAME_DEVICE}|expected device infini:0"):
            torch.zeros(5, device=DEVICE).index_put_((torch.tensor([0]),), torch.tensor([1.0]))
        allowed = torch.atan2(x, torch.tensor(0.5))
        put = torch.zeros(5, device=DEVICE).index_put_((torch.tensor([1, 3]),), torch.tensor(2.5))
    assert torch.equal(out, torch.full((4,), 7.0))
    _same(allowed, torch.atan2(x_cpu, torch.tensor(0.5)))
    _same(put, torch.zeros(5).index_put_((torch.tensor([1, 3]),), torch.tensor(2.5)))


@requires_two_devices
def test_out_on_another_infini_device_raises() -> None:
    """Two infini devices are two devices, as cuda:0 and cuda:1 are."""
    x = torch.rand(4, device=DEVICE)
    out = torch.full((4,), 7.0, device="infini:1")
    with raises_exactly(RuntimeError, SAME_DEVICE):
        torch.log1p(x, out=out)
    with raises_exactly(RuntimeError, SAME_DEVICE):
        torch.gather(x, 0, torch.tensor([0, 1], device="infini:1"))
    assert torch.equal(out.cpu(), torch.full((4,), 7.0))


def test_messages_name_both_devices() -> None:
    """The refusal names the infini device and the CPU, as CUDA's names cuda:0 and cpu."""
    with raises_exactly(RuntimeError, SAME_DEVICE) as info:
        torch.gather(torch.zeros(3, device=DEVICE), 0, torch.tensor([0]))
    message = str(info.value)
    assert re.search(r"infini:0", message) and re.search(r"\bcpu\b", message), message


# CUDA's finer rules: which 0-dim CPU tensors are scalars (native_functions.yaml
# device_check and TensorIterator operands, native/ops/codegen/device_checks.py).
SAME_DEVICE_MESSAGE = "Expected all tensors to be on the same device"


def test_cpu_scalar_input_of_a_unary_out_call_raises() -> None:
    """Unary TensorIterator operators take no CPU scalar: log1p(cpu 0-dim, out=cuda) raises."""
    out = torch.zeros((), device=DEVICE)
    with raises_exactly(RuntimeError, SAME_DEVICE_MESSAGE):
        torch.log1p(torch.tensor(1.0), out=out)
    assert out.item() == 0.0


def test_two_cpu_scalars_into_an_infini_out_raise() -> None:
    """TensorIterator allows one CPU scalar per call on a device ("too many CPU scalars")."""
    out = torch.zeros((), device=DEVICE)
    with raises_exactly(RuntimeError, "Trying to pass too many CPU scalars to non-CPU kernel"):
        torch.atan2(torch.tensor(1.0), torch.tensor(2.0), out=out)
    assert out.item() == 0.0


def test_exact_same_operators_refuse_a_cpu_zero_dim_tensor() -> None:
    """gather and index_select check every tensor (ExactSame): a 0-dim CPU index is no scalar."""
    with raises_exactly(RuntimeError, SAME_DEVICE_MESSAGE):
        torch.gather(torch.tensor(5.0, device=DEVICE), 0, torch.tensor(0))
    with raises_exactly(RuntimeError, SAME_DEVICE_MESSAGE):
        torch.index_select(torch.arange(4.0, device=DEVICE), 0, torch.tensor(1))
    with raises_exactly(RuntimeError, SAME_DEVICE_MESSAGE):
        torch.index_select(torch.arange(4.0, device=DEVICE), 0, torch.tensor([1, 2]))
