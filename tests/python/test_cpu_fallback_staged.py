"""The CPU fallback staged through pinned memory, as it runs where the CPU
cannot address device memory (NVIDIA, ...): the tests of test_cpu_fallback.py
again, with staging forced on the host-addressable backends CI has.

Staging copies the byte spans the call's tensors cover into pinned memory on
the current stream, runs the CPU kernel on views of them (arguments sharing a
storage still share one), and copies written spans back on the current
stream. Results must be the CPU's, bit for bit, exactly as in place.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal, forced_staging, requires_async_host
from op_helpers import make_cpu
from test_cpu_fallback import *  # noqa: F403  (the same tests, collected again here)
from test_cpu_fallback import _silent_and_counted  # noqa: F401  (autouse fixture)

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
