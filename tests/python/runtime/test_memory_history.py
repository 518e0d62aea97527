"""torch.infini.memory._record_memory_history / _snapshot, as torch.cuda's.

The trace records each allocator event of every device (alloc,
free_requested, free_completed, segment_alloc, segment_free, oom) with the
stack that caused it; the snapshot lays out every segment with its blocks
(state, sizes, the stack that allocated each live block). The layout is
torch.cuda.memory._snapshot's, so torch.cuda._memory_viz reads it. The
snapshot's segments must add up to the allocator's statistics exactly.
"""

from __future__ import annotations

import gc
import inspect
import json
import pickle
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from infini_testing import describe, requires_two_devices, run_python
from torch.cuda import _memory_viz

DEVICE = torch.device("infini", 0)
MiB = 1 << 20
THIS_FILE = Path(__file__).name


@pytest.fixture(autouse=True)
def history_off_afterwards() -> Iterator[None]:
    yield
    torch.infini.memory._record_memory_history(None, clear_history=True)


def events_at(snapshot: dict[str, Any], address: int, device: int = 0) -> list[dict[str, Any]]:
    return [e for e in snapshot["device_traces"][device] if e["addr"] == address]


def block_events(snapshot: dict[str, Any], address: int) -> list[dict[str, Any]]:
    """The events of the block at ``address`` (not of a segment starting there)."""
    return [e for e in events_at(snapshot, address) if not e["action"].startswith("segment_")]


def here() -> int:
    """The caller's line number."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def python_frames(frames: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(f["name"], f["line"]) for f in frames if f["filename"].endswith(THIS_FILE)]


def test_trace_records_each_event_with_the_python_stack() -> None:
    torch.infini.memory._record_memory_history(stacks="python", clear_history=True)
    x = torch.empty(1000, device=DEVICE)
    alloc_line = here() - 1
    address = x.data_ptr()
    del x
    free_line = here() - 1
    snapshot = torch.infini.memory._snapshot()
    events = block_events(snapshot, address)
    assert [e["action"] for e in events] == ["alloc", "free_requested", "free_completed"]
    assert all(e["size"] == 4000 and e["stream"] == 0 for e in events)
    name = "test_trace_records_each_event_with_the_python_stack"
    assert python_frames(events[0]["frames"]) == [(name, alloc_line)]
    assert python_frames(events[1]["frames"]) == [(name, free_line)]
    assert not any("::" in f["name"] for e in events for f in e["frames"]), "no C++ frames"
    times = [e["time_us"] for e in events]
    assert times == sorted(times)


def test_trace_records_segments_and_cpp_frames() -> None:
    torch.infini.empty_cache()
    torch.infini.memory._record_memory_history(stacks="all", clear_history=True)
    x = torch.empty(25 * MiB, dtype=torch.uint8, device=DEVICE)  # a segment of its own
    address = x.data_ptr()
    del x
    torch.infini.empty_cache()
    events = events_at(torch.infini.memory._snapshot(), address)
    assert [(e["action"], e["size"]) for e in events] == [
        ("segment_alloc", 26 * MiB),
        ("alloc", 25 * MiB),
        ("free_requested", 25 * MiB),
        ("free_completed", 25 * MiB),
        ("segment_free", 26 * MiB),
    ]
    names = [f["name"] for f in events[1]["frames"]]
    assert any("torch_infini" in n for n in names), names[:10]  # C++ frames
    assert any(n == "test_trace_records_segments_and_cpp_frames" for n in names)
    assert events[4]["frames"] == []  # empty_cache's segment frees carry no stack


def test_snapshot_blocks_carry_their_allocation_stack() -> None:
    torch.infini.memory._record_memory_history(stacks="python")
    keep = torch.empty(3 * MiB, dtype=torch.uint8, device=DEVICE)
    line = here() - 1
    snapshot = torch.infini.memory._snapshot()
    (block,) = [
        b for s in snapshot["segments"] for b in s["blocks"] if b["address"] == keep.data_ptr()
    ]
    assert block["state"] == "active_allocated"
    assert block["size"] == block["requested_size"] == 3 * MiB
    name = "test_snapshot_blocks_carry_their_allocation_stack"
    assert python_frames(block["frames"]) == [(name, line)]


def check_segments_add_up(device: int = 0) -> None:
    """The snapshot's segments of ``device`` against the allocator's
    statistics, taken at one moment (no garbage collection in between)."""
    gc.collect()
    gc.disable()
    try:
        snapshot = torch.infini.memory._snapshot()
        stats = torch.infini.memory_stats(device)
    finally:
        gc.enable()
    segments = [s for s in snapshot["segments"] if s["device"] == device]
    assert sum(s["total_size"] for s in segments) == stats["reserved_bytes.all.current"]
    assert sum(s["allocated_size"] for s in segments) == stats["allocated_bytes.all.current"]
    assert sum(s["active_size"] for s in segments) == stats["active_bytes.all.current"]
    assert sum(s["requested_size"] for s in segments) == stats["requested_bytes.all.current"]
    assert len(segments) == stats["segment.all.current"]
    for s in segments:
        blocks = s["blocks"]
        assert blocks[0]["address"] == s["address"]
        for a, b in zip(blocks, blocks[1:], strict=False):
            assert a["address"] + a["size"] == b["address"], "blocks tile their segment"
            assert not (a["state"] == b["state"] == "inactive"), "free neighbours merge"
        assert sum(b["size"] for b in blocks) == s["total_size"]
        assert s["segment_type"] == ("small" if s["total_size"] == 2 * MiB else "large")


def test_snapshot_segments_tile_exactly_through_splits_and_merges() -> None:
    rng = random.Random(0)
    live: list[torch.Tensor] = []
    for step in range(400):
        if live and rng.random() < 0.45:
            live.pop(rng.randrange(len(live)))
        else:
            size = rng.choice([1, 300, 4096, 70_000, 600_000, 3 * MiB, 12 * MiB])
            live.append(torch.empty(size, dtype=torch.uint8, device=DEVICE))
        if step % 50 == 0:
            check_segments_add_up()
    live.clear()
    check_segments_add_up()
    torch.infini.empty_cache()
    check_segments_add_up()


def test_a_block_used_on_another_stream_is_pending_until_that_work_is_done() -> None:
    torch.infini.memory._record_memory_history(context=None, clear_history=True)
    side = torch.infini.Stream()
    x = torch.ones(1 << 16, device=DEVICE)
    address = x.data_ptr()
    with torch.infini.stream(side):
        x.mul_(2)
    x.record_stream(side)
    del x

    def state() -> str:
        snapshot = torch.infini.memory._snapshot()
        (block,) = [b for s in snapshot["segments"] for b in s["blocks"] if b["address"] == address]
        return block["state"]

    assert state() == "active_pending_free"
    events = block_events(torch.infini.memory._snapshot(), address)
    assert [e["action"] for e in events] == ["alloc", "free_requested"]
    side.synchronize()
    torch.empty(8, device=DEVICE)  # the allocator looks at pending frees
    assert state() == "inactive"
    events = block_events(torch.infini.memory._snapshot(), address)
    assert [e["action"] for e in events][:3] == ["alloc", "free_requested", "free_completed"]
    assert all(e["frames"] == [] for e in events)  # context=None: no stacks


def test_max_entries_keeps_the_newest_events() -> None:
    torch.infini.memory._record_memory_history(max_entries=5, clear_history=True)
    addresses = []
    for _ in range(10):
        t = torch.empty(16, device=DEVICE)
        addresses.append(t.data_ptr())
        del t
    trace = torch.infini.memory._snapshot()["device_traces"][0]
    assert len(trace) == 5
    # The last tensor's three events, after the previous one's last two.
    assert [e["action"] for e in trace] == [
        "free_requested",
        "free_completed",
        "alloc",
        "free_requested",
        "free_completed",
    ]
    assert trace[-1]["addr"] == addresses[-1]
    torch.infini.memory._record_memory_history(max_entries=2)  # shrinking keeps the newest
    trace = torch.infini.memory._snapshot()["device_traces"][0]
    assert [e["action"] for e in trace] == ["free_requested", "free_completed"]


def test_state_only_stop_and_clear() -> None:
    torch.infini.memory._record_memory_history(enabled="state", clear_history=True)
    kept = torch.empty(100, device=DEVICE)
    snapshot = torch.infini.memory._snapshot()
    assert snapshot["device_traces"][0] == []
    (block,) = [
        b for s in snapshot["segments"] for b in s["blocks"] if b["address"] == kept.data_ptr()
    ]
    assert block["frames"], "state mode keeps the stacks of live blocks"

    torch.infini.memory._record_memory_history("all", clear_history=True)
    torch.empty(100, device=DEVICE)
    assert len(torch.infini.memory._snapshot()["device_traces"][0]) >= 3
    torch.infini.memory._record_memory_history(None)
    recorded = len(torch.infini.memory._snapshot()["device_traces"][0])
    torch.empty(100, device=DEVICE)
    later = torch.empty(100, device=DEVICE)
    assert len(torch.infini.memory._snapshot()["device_traces"][0]) == recorded
    (block,) = [
        b
        for s in torch.infini.memory._snapshot()["segments"]
        for b in s["blocks"]
        if b["address"] == later.data_ptr()
    ]
    assert block["frames"] == []
    torch.infini.memory._record_memory_history(None, clear_history=True)
    assert torch.infini.memory._snapshot()["device_traces"][0] == []


def test_memory_viz_reads_the_snapshot(tmp_path: Path) -> None:
    torch.infini.memory._record_memory_history(stacks="python", clear_history=True)
    a = torch.empty(1 << 20, device=DEVICE)
    b = torch.empty(3, device=DEVICE)
    del a
    snapshot = torch.infini.memory._snapshot()
    assert "total_reserved" in _memory_viz.segsum(snapshot)
    text = _memory_viz.trace(snapshot)
    assert "del " in text and "Device 0" in text
    assert _memory_viz.trace_plot(snapshot).lstrip().startswith("<!DOCTYPE html>")
    assert _memory_viz.segment_plot(snapshot).lstrip().startswith("<!DOCTYPE html>")
    path = tmp_path / "snapshot.pickle"
    torch.infini.memory._dump_snapshot(str(path))
    with path.open("rb") as f:
        loaded = pickle.load(f)
    assert set(loaded) == {"segments", "device_traces"}
    assert torch.infini.memory_snapshot() == torch.infini.memory._snapshot()["segments"]
    del b


def test_out_of_memory_is_a_trace_event() -> None:
    script = """
import json
import torch
import torch_infini

torch.infini.memory._record_memory_history(stacks="python")
try:
    torch.empty(100 << 20, dtype=torch.uint8, device="infini")
except torch.OutOfMemoryError:
    pass
oom = [e for e in torch.infini.memory._snapshot()["device_traces"][0] if e["action"] == "oom"]
print("REPORT " + json.dumps([(e["size"], e["device_free"], e["frames"][-1]["line"]) for e in oom]))
"""
    env = {"TORCH_INFINI_BACKEND": "host", "TORCH_INFINI_HOST_MEMORY_LIMIT": str(64 * MiB)}
    proc = run_python(script, env=env)
    assert proc.returncode == 0, describe(proc)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    oom_line = (
        script.splitlines().index('    torch.empty(100 << 20, dtype=torch.uint8, device="infini")')
        + 1
    )
    assert json.loads(line.removeprefix("REPORT ")) == [[100 * MiB, 64 * MiB, oom_line]]


@requires_two_devices
def test_each_device_has_its_own_trace() -> None:
    torch.infini.memory._record_memory_history(clear_history=True)
    a = torch.empty(10, device="infini:0")
    b = torch.empty(20, device="infini:1")
    snapshot = torch.infini.memory._snapshot()
    assert len(snapshot["device_traces"]) == 2
    assert [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"] == [40]
    assert [e["size"] for e in snapshot["device_traces"][1] if e["action"] == "alloc"] == [80]
    devices = {
        s["device"]
        for s in snapshot["segments"]
        for bl in s["blocks"]
        if bl["address"] in (a.data_ptr(), b.data_ptr())
    }
    assert devices == {0, 1}
    check_segments_add_up(1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"enabled": "some"}, "enabled must be None, 'state' or 'all'"),
        ({"context": "everything"}, "context must be None, 'state', 'alloc' or 'all'"),
        ({"stacks": "cpp"}, "stacks must be 'python' or 'all'"),
        ({"max_entries": 0}, "max_entries must be a positive int"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        torch.infini.memory._record_memory_history(**kwargs)
