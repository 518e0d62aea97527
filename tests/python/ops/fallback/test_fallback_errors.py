"""With the CPU fallback off, operators without an infini kernel raise NotImplementedError;
nothing runs on the CPU behind the user's back and nothing is written.

Every test here runs in ``torch_infini.cpu_fallback.strict()`` (the ``fallback_off``
marker), except where a test opens an allowed region itself: with the fallback on, the
same calls return exactly what the CPU returns, on the infini device.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch_infini
from infini_testing import fallback_off
from op_helpers import DEVICE, KERNEL_DTYPES, assert_matches, pair

pytestmark = fallback_off

# Operators with a kernel (op_helpers.KERNEL_DTYPES); everything else goes
# to the fallback tested here.

Call = Callable[[torch.Tensor], object]

# call, and the ATen operator the message must name (without overload)
UNSUPPORTED: dict[str, tuple[Call, str]] = {
    "sum": (lambda x: x.sum(), "sum"),
    "sum(dim)": (lambda x: torch.sum(x, dim=0), "sum"),
    "exp": (torch.exp, "exp"),
    "flip": (lambda x: torch.flip(x, [0]), "flip"),
    "log_softmax": (lambda x: torch.log_softmax(x, dim=-1), "_log_softmax"),
    "maximum": (lambda x: torch.maximum(x, x), "maximum"),
    "x % 2": (lambda x: x % 2, "remainder"),
    "mean": (lambda x: x.mean(), "mean"),
    "neg": (lambda x: -x, "neg"),
    "div": (lambda x: x / 2, "div"),
    "eq": (lambda x: x == x, "eq"),
    "log_sigmoid": (torch.nn.functional.logsigmoid, "log_sigmoid_forward"),
    "tanh": (torch.tanh, "tanh"),
    "pow": (lambda x: x**2, "pow"),
    "argmax": (lambda x: x.argmax(), "argmax"),
    "dot": (lambda x: torch.dot(x[0], x[0]), "dot"),
}


def _check_message(message: str, operator: str) -> None:
    assert "no infini kernel" in message, message
    assert f"backend '{torch_infini.backend()}'" in message, message
    assert f"'aten::{operator}" in message, message


@pytest.mark.parametrize("case", list(UNSUPPORTED), ids=str)
def test_unsupported_operator_raises(case: str) -> None:
    call, operator = UNSUPPORTED[case]
    assert operator not in KERNEL_DTYPES
    x_cpu, x = pair((3, 4), torch.float32, seed=1)
    call(x_cpu)  # the CPU runs it
    with pytest.raises(NotImplementedError) as excinfo:
        call(x)
    _check_message(str(excinfo.value), operator)
    torch.infini.synchronize()
    assert torch.equal(x.cpu(), x_cpu)  # the input is untouched


@pytest.mark.parametrize("case", list(UNSUPPORTED), ids=str)
def test_unsupported_operator_falls_back_to_the_cpu(case: str) -> None:
    call, _ = UNSUPPORTED[case]
    x_cpu, x = pair((3, 4), torch.float32, seed=1)
    with torch_infini.cpu_fallback.allowed("silent"):
        result = call(x)
    assert_matches(result, call(x_cpu), exact=True)
    assert_matches(x, x_cpu, exact=True)  # the input is untouched


INPLACE_AND_OUT: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], object], str]] = {
    "exp_": (lambda x, out: x.exp_(), "exp"),
    "fmod_": (lambda x, out: x.fmod_(2), "fmod"),
    "exp(out=)": (lambda x, out: torch.exp(x, out=out), "exp"),
    "sum(out=)": (lambda x, out: torch.sum(x, dim=0, out=out[0]), "sum"),
    "cumsum(out=)": (lambda x, out: torch.cumsum(x, 0, out=out), "cumsum"),
    "maximum(out=)": (lambda x, out: torch.maximum(x, x, out=out), "maximum"),
    "clamp_": (lambda x, out: x.clamp_(min=0.0), "clamp"),
}


@pytest.mark.parametrize("case", list(INPLACE_AND_OUT), ids=str)
def test_nothing_is_written(case: str) -> None:
    call, operator = INPLACE_AND_OUT[case]
    x_cpu, x = pair((3, 4), torch.float32, seed=2)
    out_cpu, out = pair((3, 4), torch.float32, seed=3)
    with pytest.raises(NotImplementedError) as excinfo:
        call(x, out)
    _check_message(str(excinfo.value), operator)
    torch.infini.synchronize()
    assert torch.equal(x.cpu(), x_cpu)
    assert torch.equal(out.cpu(), out_cpu)
    assert x.device.type == "infini" and out.device.type == "infini"


@pytest.mark.parametrize("case", list(INPLACE_AND_OUT), ids=str)
def test_inplace_and_out_fall_back_to_the_cpu(case: str) -> None:
    call, _ = INPLACE_AND_OUT[case]
    x_cpu, x = pair((3, 4), torch.float32, seed=2)
    out_cpu, out = pair((3, 4), torch.float32, seed=3)
    expected = call(x_cpu, out_cpu)
    with torch_infini.cpu_fallback.allowed("silent"):
        result = call(x, out)
    assert isinstance(result, torch.Tensor) and isinstance(expected, torch.Tensor)
    assert_matches(result, expected, exact=True)
    # written into the given infini tensors (the views of out included)
    assert_matches(x, x_cpu, exact=True)
    assert_matches(out, out_cpu, exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_unsupported_for_every_dtype(dtype: torch.dtype) -> None:
    x = torch.ones(4, dtype=dtype, device=DEVICE)
    for call, operator in (UNSUPPORTED["sum"], UNSUPPORTED["flip"], UNSUPPORTED["maximum"]):
        with pytest.raises(NotImplementedError) as excinfo:
            call(x)
        _check_message(str(excinfo.value), operator)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_every_dtype_falls_back_to_the_cpu(dtype: torch.dtype) -> None:
    x_cpu = torch.arange(4).to(dtype)
    x = x_cpu.to(DEVICE)
    for call, _ in (UNSUPPORTED["sum"], UNSUPPORTED["flip"], UNSUPPORTED["maximum"]):
        with torch_infini.cpu_fallback.allowed("silent"):
            result = call(x)
        assert_matches(result, call(x_cpu), exact=True)


def test_message_tells_how_to_run_it_on_the_cpu() -> None:
    with pytest.raises(NotImplementedError) as excinfo:
        torch.ones(2, device=DEVICE).sum()
    assert "TORCH_INFINI_CPU_FALLBACK=warn" in str(excinfo.value)
    assert "move the tensors to the CPU" in str(excinfo.value)
