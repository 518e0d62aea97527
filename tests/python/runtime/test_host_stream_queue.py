"""The async host stream's queue is bounded, as a device's launch queue is.

With ``TORCH_INFINI_HOST_ASYNC=1`` every host stream runs its work on a
worker thread. Its queue holds at most ``TORCH_INFINI_HOST_QUEUE_DEPTH``
items (default 1024): a caller that submits more waits for room, so
enqueueing far ahead of the device neither grows memory without bound nor
lets work drain for minutes after the loop that queued it. Each case runs in
a subprocess (the depth is read when the runtime starts).
"""

from __future__ import annotations

import pytest
import torch_infini
from infini_testing import describe, run_python

ASYNC = {"TORCH_INFINI_HOST_ASYNC": "1", "TORCH_INFINI_HOST_DEVICES": None}

# The queue is the host runtime's (its worker threads): other backends' streams
# are their runtime's.
pytestmark = pytest.mark.skipif(
    torch_infini.backend() != "host", reason="the host backend's stream queue"
)


def test_enqueueing_waits_at_the_bound() -> None:
    """Behind a long matmul, a depth of 4 lets the caller queue a few items
    without waiting, and makes it wait for the long one past that."""
    proc = run_python(
        """
import torch, torch_infini
big = torch.randn(2048, 2048, device="infini")
small = torch.randn(4, 4, device="infini")
torch.infini.synchronize()
for items in (1, 12):
    done = torch.infini.Event()
    torch.mm(big, big)  # one item of ~100 ms or more
    done.record()       # a second
    for _ in range(items):
        small = small + 1
    print(items, done.query())
    torch.infini.synchronize()
""",
        env={**ASYNC, "TORCH_INFINI_HOST_QUEUE_DEPTH": "4"},
    )
    assert proc.returncode == 0, describe(proc)
    lines = proc.stdout.split()
    # Within the bound nothing waited (the long work is still running);
    # past it, the caller waited for room, so the long work had finished.
    assert lines == ["1", "False", "12", "True"], describe(proc)


def test_memory_comes_back_after_many_queued_operations() -> None:
    """40,000 small matmuls queued behind busy work: unbounded, they held
    ~19 MiB that stayed after synchronize(); bounded, RSS comes back."""
    proc = run_python(
        """
import os, torch, torch_infini
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
big = torch.randn(2048, 2048, device="infini")
a = torch.randn(16, 16, device="infini")
for _ in range(200):
    a @ a
torch.mm(big, big)  # its result's block stays cached: part of the start
torch.infini.synchronize()
start = rss_mib()
for _ in range(4):
    torch.mm(big, big)  # keeps the stream busy while the loop below queues
for _ in range(40000):
    a @ a
torch.infini.synchronize()
print(f"{rss_mib() - start:.1f}")
""",
        env=ASYNC,
        timeout=300,
    )
    assert proc.returncode == 0, describe(proc)
    assert float(proc.stdout.split()[-1]) < 4.0, describe(proc)


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_bad_depth_is_named(value: str) -> None:
    proc = run_python(
        "import torch, torch_infini\ntorch.ones(1, device='infini')\n",
        env={**ASYNC, "TORCH_INFINI_HOST_QUEUE_DEPTH": value},
    )
    assert proc.returncode != 0
    assert "TORCH_INFINI_HOST_QUEUE_DEPTH" in proc.stderr, describe(proc)
