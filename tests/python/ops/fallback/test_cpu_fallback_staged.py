"""The CPU fallback staged through pinned memory, as it runs where the CPU
cannot address device memory (NVIDIA, ...): the tests of test_cpu_fallback.py
again, with staging forced on the host-addressable backends CI has.

Staging copies the byte spans the call's tensors cover into pinned memory on
the current stream, runs the CPU kernel on views of them (arguments sharing a
storage still share one), and copies written spans back on the current
stream. Results must be the CPU's, bit for bit, exactly as in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal, forced_staging, requires_async_host
from op_helpers import make_cpu
from test_cpu_fallback import *  # noqa: F403  (the same tests, collected again here)
from test_cpu_fallback import _silent_and_counted  # noqa: F401  (autouse fixture)
from torch_infini import _C

# What only the in-place path promises, and subprocess tests (no staging there).
del test_in_place_where_memory_is_host_memory  # noqa: F821
del test_warns_once_per_operator_as_the_variable_says  # noqa: F821
del test_variable_off_refuses_and_a_bad_value_is_named  # noqa: F821

DEVICE = torch.device("infini", 0)


@pytest.fixture(autouse=True)
def _staged() -> Iterator[None]:
    with forced_staging():
        yield


def test_only_the_spans_used_are_staged() -> None:
    """A slice of a large tensor stages the slice's span, not the whole storage."""
    big_cpu = make_cpu((1000, 100), torch.float32)
    big = big_cpu.to(DEVICE)
    torch_infini.cpu_fallback.reset_stats()
    got = torch.atan2(big[10:12], big[20:22])
    assert_bitwise_equal(got, torch.atan2(big_cpu[10:12], big_cpu[20:22]))
    (stats,) = torch_infini.cpu_fallback.stats().values()
    # two 800-byte input spans (one storage: one span from row 10 to row 22,
    # 4800 bytes, 16-byte aligned), then the 800-byte result back
    assert stats.bytes_copied == 12 * 400 + 800


@requires_async_host
def test_staged_writes_are_ordered_on_the_stream() -> None:
    """Later work on the stream sees the fallback's writes; earlier work is read."""
    x_cpu = make_cpu((256, 256), torch.float32)
    x = x_cpu.to(DEVICE)
    for _ in range(3):
        x = x * 1.5  # queued native work the staged copy must wait for
        x.atan_()  # staged: read after the mul, written back on the stream
        x_cpu = (x_cpu * 1.5).atan_()
    assert_bitwise_equal(x + 0, x_cpu + 0)


# ------------------------------------------ results and resized out= arguments
# The CPU kernel allocates its results in pageable memory (and resizes an out=
# argument into new memory): they go back through the caching pinned
# allocator's buffers on the current stream. Only the copy in waits (the CPU
# must read the arguments); nothing waits for the copy back.


def _waits(call: Callable[[], object]) -> tuple[object, int]:
    """call()'s result and how many times the host device was waited for."""
    torch.infini.synchronize()
    before = _C._host_synchronizations()
    result = call()
    return result, _C._host_synchronizations() - before


@requires_async_host
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_a_result_comes_back_without_a_wait(layout: str) -> None:
    a_cpu, b_cpu = make_cpu((64, 33), torch.float32), make_cpu((64, 33), torch.float32, seed=1)
    if layout == "transposed":  # the CPU kernel gives its result the inputs' layout
        a_cpu, b_cpu = a_cpu.t(), b_cpu.t()
    a, b = a_cpu.to(DEVICE), b_cpu.to(DEVICE)
    assert a.stride() == a_cpu.stride()
    got, waits = _waits(lambda: torch.atan2(a, b))
    assert waits == 1  # the copy in only
    expected = torch.atan2(a_cpu, b_cpu)
    assert got.stride() == expected.stride()
    assert_bitwise_equal(got, expected)


@requires_async_host
def test_a_resized_out_argument_comes_back_without_a_wait() -> None:
    a_cpu, b_cpu = make_cpu((100, 7), torch.float32), make_cpu((100, 7), torch.float32, seed=1)
    a, b = a_cpu.to(DEVICE), b_cpu.to(DEVICE)
    out = torch.empty(0, device=DEVICE)
    _, waits = _waits(lambda: torch.atan2(a, b, out=out))
    assert waits == 1
    expected = torch.atan2(a_cpu, b_cpu, out=torch.empty(0))
    assert (out.shape, out.stride()) == (expected.shape, expected.stride())
    out.mul_(2)  # queued behind the copy back
    assert_bitwise_equal(out, expected * 2)


def test_results_survive_the_reuse_of_their_pinned_buffers() -> None:
    """Twenty results of one size class in a row: each pinned buffer is
    reused only after its copy to the device has run."""
    xs_cpu = [make_cpu((512,), torch.float32, seed=i) for i in range(20)]
    y_cpu = make_cpu((512,), torch.float32, seed=99)
    xs, y = [x.to(DEVICE) for x in xs_cpu], y_cpu.to(DEVICE)
    results = [torch.atan2(x, y) for x in xs]
    resized = []
    for x in xs:
        out = torch.empty(0, device=DEVICE)
        resized.append(torch.hypot(x, y, out=out))
    for x_cpu, got, got_out in zip(xs_cpu, results, resized, strict=True):
        assert_bitwise_equal(got, torch.atan2(x_cpu, y_cpu))
        assert_bitwise_equal(got_out, torch.hypot(x_cpu, y_cpu))


def test_staged_calls_reuse_pinned_buffers() -> None:
    """After the first call, a loop of staged calls allocates no pinned memory."""
    x, y = make_cpu((4096,), torch.float32).to(DEVICE), make_cpu((4096,), torch.float32).to(DEVICE)
    torch.atan2(x, y)
    torch.infini.synchronize()
    before = torch.infini.host_memory_stats()["num_host_alloc"]
    for _ in range(10):
        torch.atan2(x, y)
        torch.infini.synchronize()
    assert torch.infini.host_memory_stats()["num_host_alloc"] == before


def test_a_result_without_memory_comes_back_as_its_values() -> None:
    """sgn's gradient is a ZeroTensor (_efficientzerotensor: sizes, no
    memory): it comes back as zeros, as on the CPU."""
    x_cpu = make_cpu((20, 20), torch.float32).requires_grad_()
    x = x_cpu.detach().to(DEVICE).requires_grad_()
    torch.sgn(x).sum().backward()
    torch.sgn(x_cpu).sum().backward()
    assert x.grad is not None and x_cpu.grad is not None
    assert_bitwise_equal(x.grad, x_cpu.grad)
