"""Leak check: the Llama example trains 200 AdamW steps on infini:0 after 20
warm-up steps. At every step boundary the caching allocator holds exactly
what it held after warm-up (memory_reserved and memory_allocated constant),
and the process's resident memory grows by less than 1 %. It runs in a
process of its own, so other tests' memory does not blur the figures; the
first 20 losses are checked against the same training on the CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

from infini_testing import describe, run_python

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

SCRIPT = f"""
import gc, json, sys
import torch
import torch_infini
sys.path.insert(0, {str(EXAMPLES)!r})
import llama

def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

def run(device, steps):
    torch.manual_seed(0)
    model = llama.Llama(llama.Config()).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    generator = torch.Generator().manual_seed(1)
    losses, reserved, allocated, rss = [], [], [], []
    # What exists now (torch's modules, the model) is never garbage: frozen,
    # each collection below scans only what the steps made (a full scan of
    # torch's objects took ~0.2 s a step).
    gc.collect()
    gc.freeze()
    for step in range(steps):
        inputs, targets = llama.batch(32, 12, generator)
        losses.append(llama.train_step(model, opt, inputs.to(device), targets.to(device)))
        if device.type == "infini" and step >= 19:
            gc.collect()
            reserved.append(torch.infini.memory_reserved(device))
            allocated.append(torch.infini.memory_allocated(device))
            rss.append(rss_bytes())
    return losses, reserved, allocated, rss

steps = 220
losses, reserved, allocated, rss = run(torch.device("infini", 0), steps)
cpu_losses, _, _, _ = run(torch.device("cpu"), 20)
print("REPORT " + json.dumps(dict(losses=losses, cpu_losses=cpu_losses, reserved=reserved,
                                   allocated=allocated, rss=rss)))
"""


def test_training_holds_device_and_host_memory_steady() -> None:
    proc = run_python(SCRIPT, env={"TORCH_INFINI_CPU_FALLBACK": "silent"}, timeout=600)
    assert proc.returncode == 0, describe(proc)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    report = json.loads(line.removeprefix("REPORT "))
    reserved, allocated, rss = report["reserved"], report["allocated"], report["rss"]
    assert len(reserved) == 201  # after warm-up step 20, then 200 more steps
    assert set(reserved) == {reserved[0]}, "memory_reserved changed during training"
    assert set(allocated) == {allocated[0]}, "memory_allocated changed at step boundaries"
    growth = (rss[-1] - rss[0]) / rss[0]
    assert growth < 0.01, f"RSS grew {growth:.2%} in 200 steps ({rss[0]} -> {rss[-1]} bytes)"
    print(
        f"leak check: reserved {reserved[0]} B, allocated {allocated[0]} B, RSS {rss[0]} B "
        f"-> {rss[-1]} B ({growth:+.3%}) over 200 steps"
    )
    losses, cpu_losses = report["losses"], report["cpu_losses"]
    assert losses[-1] < losses[0] / 2, "the model learns"
    for got, want in zip(losses[:20], cpu_losses, strict=True):
        assert abs(got - want) <= 1e-3 * max(1.0, abs(want)), (got, want)
