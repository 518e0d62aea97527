"""What the graph passes' test files share (test_graph_passes.py,
test_graph_pass_rotary.py): the fixture that compiles afresh with the passes
on, the rewrite counts per backend, and the checks against CPU eager (bit
for bit on ``host``, within Inductor's rounding where Inductor computes).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal
from torch._dynamo.utils import counters
from torch._inductor.graph import GraphLowering
from torch_infini import graph_passes

DEVICE = torch.device("infini", 0)
COUNTER = "infini_graph_passes"
BACKEND = torch_infini.backend()

Counts = dict[str, int]
PerBackend = dict[str, Counts]  # backend name -> the rewrites made there


@pytest.fixture(autouse=True)
def _fresh_compile(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Rewrites on this host-addressable backend too (by default only where
    # device memory is not host memory): the tests exercise them here.
    monkeypatch.setenv(graph_passes.MODE_VARIABLE, "always")
    torch._dynamo.reset()
    counters.clear()
    # Every graph compiled afresh (a cache hit would skip the graph passes):
    # no FX graph or AOTAutograd cache; one compile thread (CI's two cores).
    # The compiled kernels' binaries stay cached: the same source compiles
    # to the same kernel.
    with (
        torch._inductor.config.patch(fx_graph_cache=False, compile_threads=1),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        yield
    torch._dynamo.reset()


def _rewrites() -> Counts:
    return dict(counters[COUNTER])


def _expected(per_backend: PerBackend) -> Counts:
    """This backend's literal expectation (a KeyError names a backend the
    test has no expectation for)."""
    return per_backend[BACKEND]


def _everywhere(counts: Counts) -> PerBackend:
    """The same rewrites on ``host`` and on InfiniRT ``cpu``."""
    return {"host": counts, "cpu": counts}


NOTHING = _everywhere({})


@contextlib.contextmanager
def _wrapper_code() -> Iterator[list[str]]:
    codes: list[str] = []
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        yield codes


def _outputs(result: Any) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _assert_matches_eager(got: Any, want: Any) -> None:
    """Every output equals eager's, strides included. On ``host`` bit for
    bit: a rewritten pattern runs ATen's kernels, in eager's order, and what
    Inductor compiles around it in these graphs rounds exactly as eager
    (matmuls are ATen's; +, -, *, / are correctly rounded, and the C++ is
    built without contracting them into fused multiply-adds). Elsewhere
    (InfiniRT ``cpu``) a rewrite runs InfiniOps' kernel, which rounds in its
    own order: PyTorch's float32 tolerances."""
    for g, w in zip(_outputs(got), _outputs(want), strict=True):
        if BACKEND == "host":
            assert_bitwise_equal(g, w)
        else:
            torch.testing.assert_close(g.cpu(), w)
        assert g.stride() == w.stride()


def _assert_within_inductor_rounding(got: torch.Tensor, want: torch.Tensor) -> None:
    """``got`` computed by Inductor's C++ where eager ran ATen's kernels:
    Inductor's exp, cos and sin round differently in the last bit, and its
    sums and means (a softmax's, a norm's, a backward's reductions) add in
    another order. That moves results by a few float32 ulps of the largest
    value (measured in this file: at most 4e-7 of it, in the training
    step's gradients; 3.2e-7 in the transformers Llama's logits). Bounded at
    2e-6 of the largest value: five times that, and far below the error of
    the wrong rewrites this file guards against (swapped halves or a wrong
    mask move values by 0.4 and more)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = float(want.abs().max()) if want.numel() else 0.0
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=2e-6 * scale)


def _run(module: torch.nn.Module, *inputs: torch.Tensor) -> tuple[Any, Any]:
    """``module`` compiled on infini and eager on the CPU, on the same inputs."""
    dev = copy.deepcopy(module).to(DEVICE)
    with torch.no_grad():
        got = torch.compile(dev)(*(x.to(DEVICE) for x in inputs))
        want = module(*inputs)
    return got, want


def _check_against_eager(
    module: torch.nn.Module, *inputs: torch.Tensor, rewrites: PerBackend
) -> None:
    """The rewrites made are ``rewrites``, and the result is eager's (on
    ``host`` bit for bit)."""
    got, want = _run(module, *inputs)
    assert _rewrites() == _expected(rewrites)
    _assert_matches_eager(got, want)


def _check_left_to_inductor(
    module: torch.nn.Module, *inputs: torch.Tensor, rewrites: PerBackend = NOTHING
) -> None:
    """The rewrites made are ``rewrites`` (by default none), and the rest is
    Inductor's C++: eager's result within Inductor's rounding. (Not bit for
    bit with what Inductor compiles for the CPU either: the infini backend
    fuses and vectorizes its own way, and a vectorized cos is not a scalar
    one.)"""
    got, want = _run(module, *inputs)
    assert _rewrites() == _expected(rewrites)
    for g, w in zip(_outputs(got), _outputs(want), strict=True):
        _assert_within_inductor_rounding(g, w)
        assert g.stride() == w.stride()


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)
