"""torch.profiler on infini: what a trace shows today.

- ``profile_memory=True``: every allocation and free of the infini caching
  allocator, with the device's totals (the "INFINI Mem" columns, and
  ``[memory]`` events in the Chrome trace, device type PrivateUse1).
- Device time from infini events: the legacy profiler
  (``torch.autograd.profiler.profile(use_device="infini", use_kineto=False)``)
  times each operator on the device with events recorded on the current
  stream.
- ``torch.profiler.profile(activities=[CPU, PrivateUse1])`` records the
  infini operators (their CPU side) and exports them.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

DEVICE = torch.device("infini", 0)
PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, as the trace writes it


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
