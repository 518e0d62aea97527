"""record_stream on infini tensors, as on CUDA: a block freed while another
stream still reads it is not reused until that stream's work up to the
free has run; without it, the block is reused at once."""

from __future__ import annotations

import pytest
import torch
from infini_testing import (
    requires_async_host,
    requires_two_devices,
)
from memory_rules import (
    READ_NUMEL,
    MiB,
    clean_baseline,
    current_deltas,
    expected_current,
    overlaps,
    queue_busy_work,
    stats,
)
from torch_infini import _C

# Garbage collected and the device cache emptied after each test (conftest.py).
pytestmark = pytest.mark.usefixtures("only_new_garbage_collected", "cached_blocks_released")


# ---------------------------------------------------------------- record_stream


def _read_on_side_stream(
    x: torch.Tensor, side: torch.infini.Stream
) -> tuple[torch.Tensor, torch.infini.Event]:
    """Queues busy work, then a copy of `x`, on `side`; returns the copy and an event after it."""
    side.wait_stream(torch.infini.current_stream())
    with torch.infini.stream(side):
        queue_busy_work()
        copy = x.clone()
        done = side.record_event()
    return copy, done


def test_record_stream_keeps_block_active() -> None:
    base = clean_baseline()
    side = torch.infini.Stream()
    x = torch.full((1000,), 2.0, device="infini")
    side.wait_stream(torch.infini.current_stream())
    with torch.infini.stream(side):
        r = x.clone()  # on the side stream's own (small) segment
    x.record_stream(side)
    before = stats()
    del x
    after = stats()
    if _C._capabilities()["events"]:
        # Freed for PyTorch, but still active: reused only after an event recorded on the
        # side stream completes (checked when memory is next requested).
        assert current_deltas(before, after) == expected_current(
            "small_pool", allocation=-1, allocated_bytes=-4096, requested_bytes=-4000
        )
    else:
        # Without events the allocator waits for the side stream at once.
        assert after["active.all.current"] == before["active.all.current"] - 1
    side.synchronize()
    torch.infini.empty_cache()  # x's segment is free once the recorded use completed
    final = stats()
    assert current_deltas(base, final) == expected_current(
        "small_pool",
        allocation=1,
        segment=1,
        active=1,
        inactive_split=1,
        allocated_bytes=4096,
        reserved_bytes=2 * MiB,
        active_bytes=4096,
        inactive_split_bytes=2 * MiB - 4096,
        requested_bytes=4000,
    )
    assert torch.equal(r.cpu(), torch.full((1000,), 2.0))


def test_record_stream_on_the_allocation_stream_changes_nothing() -> None:
    clean_baseline()
    x = torch.full((1000,), 2.0, device="infini")
    x.record_stream(torch.infini.current_stream())
    x_ptr = x.data_ptr()
    before = stats()
    del x
    after = stats()
    assert after["active.all.current"] == before["active.all.current"] - 1
    y = torch.empty(1000, device="infini")
    assert y.data_ptr() == x_ptr


def _record_stream_attempt(attempt: int) -> None:
    clean_baseline()
    oracle = torch.arange(READ_NUMEL, dtype=torch.float32) + attempt
    side = torch.infini.Stream()
    x = oracle.to("infini")
    copy, done = _read_on_side_stream(x, side)
    x.record_stream(side)
    x_ptr, nbytes = x.data_ptr(), x.nbytes
    del x
    y = torch.empty(READ_NUMEL, device="infini")  # same size, on the default stream
    pending = not done.query()
    y.fill_(-1.0)
    if pending:
        # The side stream has not read x yet: its block must not be handed out again.
        assert not overlaps(y.data_ptr(), x_ptr, nbytes), attempt
    side.synchronize()
    assert torch.equal(copy.cpu(), oracle), attempt
    assert torch.equal(y.cpu(), torch.full((READ_NUMEL,), -1.0)), attempt


@requires_async_host
def test_record_stream_defers_reuse_until_the_stream_read() -> None:
    for attempt in range(5):
        _record_stream_attempt(attempt)


def test_without_record_stream_the_block_is_reused_at_once() -> None:
    """What the test above guards against: the freed block goes straight to the next
    same-size request on the allocation stream, although the side stream may not have
    read it yet (the copy's value is racy here and is not checked)."""
    clean_baseline()
    side = torch.infini.Stream()
    x = torch.arange(READ_NUMEL, dtype=torch.float32).to("infini")
    copy, done = _read_on_side_stream(x, side)
    x_ptr = x.data_ptr()
    del x
    y = torch.empty(READ_NUMEL, device="infini")
    assert y.data_ptr() == x_ptr
    side.synchronize()
    del copy, done, y


def _resize_attempt(attempt: int) -> None:
    clean_baseline()
    oracle = torch.arange(READ_NUMEL, dtype=torch.float32) - attempt
    side = torch.infini.Stream()
    x = oracle.to("infini")
    old_ptr, nbytes = x.data_ptr(), x.nbytes
    side.wait_stream(torch.infini.current_stream())
    with torch.infini.stream(side):
        queue_busy_work()
        x.resize_(READ_NUMEL + 1)  # the copy of the old storage queues behind the busy work
        done = side.record_event()
    assert x.data_ptr() != old_ptr
    y = torch.empty(READ_NUMEL, device="infini")  # the old block's size, default stream
    pending = not done.query()
    y.fill_(-1.0)
    if pending:
        assert not overlaps(y.data_ptr(), old_ptr, nbytes), attempt
    side.synchronize()
    assert torch.equal(x[:READ_NUMEL].cpu(), oracle), attempt
    assert torch.equal(y.cpu(), torch.full((READ_NUMEL,), -1.0)), attempt


@requires_async_host
def test_resize_on_side_stream_defers_reuse_of_old_storage() -> None:
    """resize_ on another stream copies the old storage there and records that stream
    on the old block (the allocator's recordStream, reached without Tensor.record_stream)."""
    for attempt in range(5):
        _resize_attempt(attempt)


@requires_two_devices
def test_record_stream_on_another_devices_stream_raises() -> None:
    x = torch.empty(1000, device="infini:0")
    other = torch.infini.Stream(device=1)
    with pytest.raises(RuntimeError, match="cannot be recorded on a stream of") as exc:
        x.record_stream(other)
    assert type(exc.value) is RuntimeError
