"""torch.profiler on infini: what a trace shows today.

- ``profile_memory=True``: every allocation and free of the infini caching
  allocator, with the device's totals (the "INFINI Mem" columns, and
  ``[memory]`` events in the Chrome trace, device type PrivateUse1).
- ``torch.profiler.profile(activities=[CPU, PrivateUse1])`` (Kineto): every
  operator that puts work on an infini stream gets a device activity
  "[infini] <operator>" timed with infini events on that stream, linked to
  the operator (its device time in ``key_averages()``) and exported as a
  kernel event on the device's row of the Chrome trace. Operators on CPU
  tensors get none.
- Device time from infini events in the legacy profiler
  (``torch.autograd.profiler.profile(use_device="infini", use_kineto=False)``):
  events recorded on the current stream around each operator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch_infini
from infini_testing import has_async_host, requires_two_devices
from torch.profiler import ProfilerActivity, profile

DEVICE = torch.device("infini", 0)
PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, as the trace writes it
ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
SLACK_US = 2.0  # rounding between the host clock and event times
# A segment closes when Kineto pops the operator's correlation id, just
# after the profiler took the operator's end time (longer under sanitizers).
END_SLACK_US = 50.0


# Where the CPU fallback stages (device memory is not host memory: discrete
# mode, accelerators), an operator without an infini kernel puts two more
# activities on its stream: the copy of its input into pinned memory and of
# its result back, nested in the operator (after it in issue order).
STAGED = not torch_infini._C._capabilities()["host_addressable"]
COPY = "[infini] aten::_copy_from"


def fallback_activities(name: str) -> list[str]:
    """The device activities of a CPU-fallback operator ``name``."""
    return [name, COPY, COPY] if STAGED else [name]


def without_copies(kernels: list[dict], staged_operators: int) -> list[dict]:
    """``kernels`` less the staged copies, after checking there are two per
    staged operator, each on its operator's stream and device."""
    copies = [k for k in kernels if k["name"] == COPY]
    assert len(copies) == (2 * staged_operators if STAGED else 0), [k["name"] for k in kernels]
    ordered = sorted(kernels, key=lambda k: k["args"]["correlation"])
    for i, kernel in enumerate(ordered):
        if kernel["name"] == COPY:
            operator = next(k for k in reversed(ordered[:i]) if k["name"] != COPY)
            assert (kernel["args"]["stream"], kernel["args"]["device"]) == (
                operator["args"]["stream"],
                operator["args"]["device"],
            ), (kernel, operator)
    return [k for k in kernels if k["name"] != COPY]


def trace_events(prof: Any, tmp_path: Path) -> tuple[list[dict], list[dict]]:
    """The exported Chrome trace's CPU operators and infini kernels."""
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    return ops, kernels


def linked_op(kernel: dict, ops: list[dict]) -> dict:
    (op,) = [o for o in ops if o["args"]["External id"] == kernel["args"]["External id"]]
    return op


def test_profile_memory_records_infini_allocations_and_frees(tmp_path: Path) -> None:
    torch.infini.synchronize()
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], profile_memory=True
    ) as prof:
        a = torch.empty(1024, 64, device=DEVICE)  # 256 KiB
        b = torch.empty(512, 64, device=DEVICE)  # 128 KiB
        del a
        allocated_after = torch.infini.memory_allocated()
    del b
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = [
        e["args"]
        for e in json.loads(trace.read_text())["traceEvents"]
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == PRIVATEUSE1
    ]
    sizes = [e["Bytes"] for e in events]
    assert sizes[:3] == [256 * 1024, 128 * 1024, -256 * 1024], sizes
    assert events[2]["Total Allocated"] == allocated_after
    assert all(e["Device Id"] == 0 for e in events)
    empties = [e for e in prof.key_averages() if e.key == "aten::empty"]
    assert empties and empties[0].device_memory_usage == 384 * 1024


def test_legacy_profiler_times_operators_with_infini_events() -> None:
    x = torch.randn(256, 256, device=DEVICE)
    with torch.autograd.profiler.profile(use_device="infini", use_kineto=False) as prof:
        for _ in range(3):
            (x @ x).relu()
        torch.infini.synchronize()
    by_name = {e.key: e for e in prof.key_averages()}
    assert by_name["aten::mm"].device_time_total > 0
    assert by_name["aten::relu"].device_time_total > 0
    assert by_name["aten::mm"].count == 3


def test_torch_profiler_records_infini_operators(tmp_path: Path) -> None:
    x = torch.randn(64, 64, device=DEVICE)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        (x @ x).relu().sum()
    names = {e.key for e in prof.key_averages()}
    assert {"aten::mm", "aten::relu", "aten::sum"} <= names
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    traced = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert {"aten::mm", "aten::relu"} <= traced


def test_kineto_gives_each_infini_operator_device_time_from_events(tmp_path: Path) -> None:
    x = torch.randn(128, 128, device=DEVICE)
    torch.infini.synchronize()
    with profile(activities=ACTIVITIES) as prof:
        for _ in range(3):
            (x @ x).relu().add_(1.0)
        torch.infini.synchronize()
    by_name = {(e.key, e.device_type): e for e in prof.key_averages()}
    for op in ("aten::mm", "aten::relu", "aten::add_"):
        cpu_side = by_name[(op, torch.autograd.DeviceType.CPU)]
        device_side = by_name[(f"[infini] {op}", torch.autograd.DeviceType.PrivateUse1)]
        assert device_side.count == cpu_side.count == 3
        assert device_side.device_time_total > 0
        assert cpu_side.self_device_time_total == pytest.approx(device_side.device_time_total)
    ops, kernels = trace_events(prof, tmp_path)
    names = [k["name"] for k in kernels]
    # (A kernel provider may run nested operators too: a scalar's copy, ...)
    for op in ("aten::mm", "aten::relu", "aten::add_"):
        assert names.count(f"[infini] {op}") == 3, names
    ordered = 0
    for kernel in kernels:
        op = linked_op(kernel, ops)
        assert kernel["name"] == f"[infini] {op['name']}"
        assert kernel["pid"] == 0 and kernel["args"]["device"] == 0
        assert kernel["args"]["stream"] == 0 and kernel["tid"] == 0
        if op["name"] in ("aten::mm", "aten::relu", "aten::add_"):
            assert kernel["dur"] > 0, kernel  # each of them does work on the device
        # (A provider's nested 4-byte scalar copy may take less than the
        # events' resolution: 0 on InfiniRT's cpu backend.)
        # The device cannot start an operator's work before it is issued.
        assert kernel["ts"] >= op["ts"] - SLACK_US
        if not has_async_host():
            # Synchronous streams: the work is done when the call returns. Its
            # segment closes just after the operator's end time is taken (a
            # preempted thread can make that any length), but always before
            # the thread issues anything else: before the next operator
            # called after this one returned.
            end = kernel["ts"] + kernel["dur"]
            later = [o["ts"] for o in ops if o["ts"] >= op["ts"] + op["dur"]]
            if later:
                assert end <= min(later) + SLACK_US, (kernel, op)
                ordered += 1
    assert has_async_host() or ordered >= 8  # all but the last operator's kernels


def test_kineto_device_activities_follow_stream_order(tmp_path: Path) -> None:
    x = torch.randn(256, 256, device=DEVICE)
    torch.infini.synchronize()
    with profile(activities=ACTIVITIES) as prof:
        for _ in range(4):
            x = torch.tanh(x @ x)
        torch.infini.synchronize()
    ops, kernels = trace_events(prof, tmp_path)
    kernels.sort(key=lambda k: k["args"]["correlation"])  # issue order
    expected = ["[infini] aten::mm", *fallback_activities("[infini] aten::tanh")] * 4
    assert [k["name"] for k in kernels] == expected
    # (A staged operator's copies lie inside its own activity: in order, and
    # on its stream, as without_copies checks.)
    kernels = without_copies(kernels, staged_operators=4)
    for earlier, later in zip(kernels, kernels[1:], strict=False):
        end = earlier["ts"] + earlier["dur"]
        assert end <= later["ts"] + SLACK_US
        issued = linked_op(later, ops)
        if issued["ts"] + issued["dur"] <= end:
            # Queued while the earlier work ran (asynchronous streams): the
            # stream starts it as soon as that work ends. A gap would be device
            # time the activities miss (an end taken before the work was
            # done): at least half the earlier work's is caught; less may be
            # the stream's thread preempted between the two (2 cores).
            gap_allowed = max(END_SLACK_US, earlier["dur"] / 2)
            assert later["ts"] <= end + gap_allowed, (earlier, later)


def test_kineto_records_no_device_time_for_cpu_tensors(tmp_path: Path) -> None:
    a = torch.randn(64, 64)
    b = a.to(DEVICE)
    with profile(activities=ACTIVITIES) as prof:
        a @ a
        b @ b
        torch.infini.synchronize()
    ops, kernels = trace_events(prof, tmp_path)
    assert [o["name"] for o in ops].count("aten::mm") == 2
    assert [k["name"] for k in kernels] == ["[infini] aten::mm"]


def test_kineto_times_a_fallback_operator_with_its_cpu_kernel(tmp_path: Path) -> None:
    """atan2 runs in the CPU fallback: its device activity spans the CPU
    kernel it calls (nested aten::atan2 on CPU tensors gets none itself)."""
    x = torch.randn(512, 512, device=DEVICE)
    torch.infini.synchronize()
    with torch_infini.cpu_fallback.allowed("silent"), profile(activities=ACTIVITIES) as prof:
        torch.atan2(x, x)
        torch.infini.synchronize()
    ops, kernels = trace_events(prof, tmp_path)
    (kernel,) = [k for k in kernels if k["name"] == "[infini] aten::atan2"]
    outer = linked_op(kernel, ops)
    inner = [
        o
        for o in ops
        if o["name"] == "aten::atan2"
        and o is not outer
        and outer["ts"] <= o["ts"] <= outer["ts"] + outer["dur"]
    ]
    assert inner, "the CPU kernel the fallback calls is recorded inside the infini operator"
    assert kernel["dur"] + SLACK_US >= max(o["dur"] for o in inner)


def test_kineto_records_backward_on_the_thread_that_runs_it(tmp_path: Path) -> None:
    """Where device memory is host memory the backward runs on the calling
    thread (test_backward_thread.py); elsewhere on autograd's thread for the
    device, as CUDA's. Either way its kernels link to the operators there."""
    w = torch.randn(32, 32, device=DEVICE, requires_grad=True)
    x = torch.randn(8, 32, device=DEVICE)
    with profile(activities=ACTIVITIES) as prof:
        (x @ w).relu().sum().backward()
        torch.infini.synchronize()
    ops, kernels = trace_events(prof, tmp_path)
    threads = {linked_op(k, ops)["tid"] for k in kernels}
    if torch_infini._C._capabilities()["host_addressable"]:
        assert len(threads) == 1, "forward and backward on the caller"
    else:
        assert len(threads) == 2, "forward on the caller, backward on infini's autograd thread"
    names = {k["name"] for k in kernels}
    assert {"[infini] aten::mm", "[infini] aten::threshold_backward"} <= names


def test_kineto_records_work_on_the_stream_it_ran_on(tmp_path: Path) -> None:
    x = torch.randn(64, 64, device=DEVICE)
    side = torch.infini.Stream()
    torch.infini.synchronize()
    with profile(activities=ACTIVITIES) as prof:
        x.sin()
        with torch.infini.stream(side):
            x.exp()
        torch.infini.synchronize()
    ops, kernels = trace_events(prof, tmp_path)
    kernels = without_copies(kernels, staged_operators=2)
    streams = {k["name"]: (k["tid"], k["args"]["stream"]) for k in kernels}
    assert streams == {
        "[infini] aten::sin": (0, 0),
        "[infini] aten::exp": (side.stream_id, side.stream_id),
    }


@requires_two_devices
def test_kineto_places_activities_on_their_device(tmp_path: Path) -> None:
    a = torch.randn(64, 64, device="infini:0")
    b = torch.randn(64, 64, device="infini:1")
    with profile(activities=ACTIVITIES) as prof:
        a.cos()
        b.sqrt()
        torch.infini.synchronize(0)
        torch.infini.synchronize(1)
    ops, kernels = trace_events(prof, tmp_path)
    kernels = without_copies(kernels, staged_operators=2)
    devices = {k["name"]: (k["pid"], k["args"]["device"]) for k in kernels}
    assert devices == {"[infini] aten::cos": (0, 0), "[infini] aten::sqrt": (1, 1)}
