"""Soak: 8 threads, each with its own streams on 2 asynchronous host devices,
run a random mix of allocations, copies (pageable and pinned, blocking and
non_blocking, host<->device and device<->device), native operators, CPU
fallback operators, events, cross-stream use with record_stream, for a
bounded time (TORCH_INFINI_SOAK_SECONDS, 45 s by default). Every result is
checked against the CPU; at the end no thread failed or hung and
memory_allocated() is back at its starting value on every device.

It needs truly asynchronous streams and two devices: CI's second pass
(TORCH_INFINI_HOST_ASYNC=1 TORCH_INFINI_HOST_DEVICES=2) runs it.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
import torch_infini
from infini_testing import requires_async_host, requires_two_devices

THREADS = 8
SECONDS = float(os.environ.get("TORCH_INFINI_SOAK_SECONDS", "45"))
HANG_GRACE_S = 120.0


@dataclass
class Pending:
    """A device result, the CPU's answer, and whatever must outlive the
    asynchronous work that makes it (pinned buffers)."""

    tensor: torch.Tensor
    expected: torch.Tensor
    keep: list[torch.Tensor] = field(default_factory=list)
    exact: bool = True
    stream: torch.infini.Stream | None = None  # the stream whose work makes it


@dataclass
class Stats:
    steps: int = 0
    checks: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


def check(p: Pending, reader: torch.infini.Stream) -> None:
    """Reads the result on `reader` (a stream of its device), ordered after
    the stream that makes it, as a program must."""
    assert p.stream is not None and reader.device == p.tensor.device
    with torch.infini.stream(reader):
        reader.wait_stream(p.stream)
        got = p.tensor.cpu()  # waits for the reader's work only
    if p.exact:
        assert torch.equal(got, p.expected), (got, p.expected)
    else:
        torch.testing.assert_close(got, p.expected, rtol=1e-4, atol=1e-4)


class Worker:
    def __init__(self, index: int, deadline: float) -> None:
        self.rng = random.Random(1000 + index)
        self.gen = torch.Generator().manual_seed(index)
        self.deadline = deadline
        self.streams = [torch.infini.Stream(device=d) for d in (0, 1) for _ in range(2)]
        self.pending: list[Pending] = []
        self.stats = Stats()
        self.kinds: list[Callable[[torch.infini.Stream], None]] = [
            self.alloc_fill,
            self.copy_pageable,
            self.copy_pinned,
            self.copy_to_host_pinned,
            self.copy_between_devices,
            self.native_elementwise,
            self.native_matmul,
            self.fallback_op,
            self.cross_stream,
        ]

    # ---------------------------------------------------------- data
    def cpu_tensor(self) -> torch.Tensor:
        n = self.rng.choice([1, 7, 64, 1000, 4096, 70_000])
        return torch.randn(n, generator=self.gen)

    # ---------------------------------------------------------- operations
    def alloc_fill(self, s: torch.infini.Stream) -> None:
        value = float(self.rng.randint(-5, 5))
        n = self.rng.choice([0, 1, 513, 1 << 16, 1 << 20])
        t = torch.empty(n, device=s.device).fill_(value)
        self.pending.append(Pending(t, torch.full((n,), value)))

    def copy_pageable(self, s: torch.infini.Stream) -> None:
        x = self.cpu_tensor()
        self.pending.append(Pending(x.to(s.device, non_blocking=self.rng.random() < 0.5), x))

    def copy_pinned(self, s: torch.infini.Stream) -> None:
        x = self.cpu_tensor()
        pinned = x.pin_memory()
        d = pinned.to(s.device, non_blocking=True)
        self.pending.append(Pending(d, x, keep=[pinned]))

    def copy_to_host_pinned(self, s: torch.infini.Stream) -> None:
        x = self.cpu_tensor()
        d = x.to(s.device)
        out = torch.empty_like(x).pin_memory()
        out.copy_(d, non_blocking=True)
        event = torch.infini.Event()
        event.record(s)
        event.synchronize()
        assert torch.equal(out, x)
        self.stats.checks += 1

    def copy_between_devices(self, s: torch.infini.Stream) -> None:
        x = self.cpu_tensor()
        src = x.to(s.device)
        other = torch.device("infini", 1 - s.device.index)
        dst = src.to(other, non_blocking=self.rng.random() < 0.5)
        # A copy between devices is ordered on both devices' current streams.
        self.pending.append(Pending(dst, x, stream=torch.infini.current_stream(other)))

    def native_elementwise(self, s: torch.infini.Stream) -> None:
        a = self.cpu_tensor()
        b = torch.randn(a.shape, generator=self.gen)
        da, db = a.to(s.device), b.to(s.device)
        op = self.rng.choice(["add", "mul", "relu", "sub_", "silu"])
        if op == "add":
            got, want = da + db * 2, a + b * 2
        elif op == "mul":
            got, want = da * db, a * b
        elif op == "relu":
            got, want = torch.relu(da), torch.relu(a)
        elif op == "sub_":
            got, want = da.sub_(db), a.sub_(b)
        else:
            got, want = torch.nn.functional.silu(da), torch.nn.functional.silu(a)
        self.pending.append(Pending(got, want, exact=op != "silu"))

    def native_matmul(self, s: torch.infini.Stream) -> None:
        m, k, n = (self.rng.choice([1, 8, 33, 64]) for _ in range(3))
        a = torch.randn(m, k, generator=self.gen)
        b = torch.randn(k, n, generator=self.gen)
        got = a.to(s.device) @ b.to(s.device)
        self.pending.append(Pending(got, a @ b, exact=False))

    def fallback_op(self, s: torch.infini.Stream) -> None:
        a = self.cpu_tensor()
        b = torch.randn(a.shape, generator=self.gen)
        da, db = a.to(s.device), b.to(s.device)
        if self.rng.random() < 0.5:
            self.pending.append(Pending(torch.atan2(da, db), torch.atan2(a, b)))
        else:
            self.pending.append(Pending(torch.cumsum(da, 0), torch.cumsum(a, 0)))

    def cross_stream(self, s: torch.infini.Stream) -> None:
        """Made on `s`, used on another stream of the device after an
        event, freed while that stream may still read it (record_stream)."""
        same_device = [t for t in self.streams if t.device == s.device and t != s]
        other = same_device[0]
        x = self.cpu_tensor()
        d = x.to(s.device) * 3
        event = s.record_event()
        with torch.infini.stream(other):
            other.wait_event(event)
            result = d + 1
            d.record_stream(other)
        del d
        self.pending.append(Pending(result, x * 3 + 1, stream=other))

    # ---------------------------------------------------------- loop
    def run(self) -> None:
        while time.monotonic() < self.deadline:
            stream = self.rng.choice(self.streams)
            kind = self.rng.choice(self.kinds)
            made = len(self.pending)
            with torch.infini.stream(stream):
                kind(stream)
            for p in self.pending[made:]:
                p.stream = p.stream or stream
            self.stats.steps += 1
            self.stats.by_kind[kind.__name__] = self.stats.by_kind.get(kind.__name__, 0) + 1
            while len(self.pending) > self.rng.randint(0, 16):
                self.check_one(self.pending.pop(self.rng.randrange(len(self.pending))))
        while self.pending:
            self.check_one(self.pending.pop())

    def check_one(self, p: Pending) -> None:
        readers = [s for s in self.streams if s.device == p.tensor.device]
        check(p, self.rng.choice(readers))
        self.stats.checks += 1


@requires_async_host
@requires_two_devices
def test_soak_threads_streams_and_devices() -> None:
    torch.infini.synchronize(0)
    torch.infini.synchronize(1)
    gc.collect()
    start = [torch.infini.memory_allocated(d) for d in (0, 1)]
    deadline = time.monotonic() + SECONDS
    workers = [Worker(i, deadline) for i in range(THREADS)]
    errors: list[BaseException] = []

    def body(w: Worker) -> None:
        try:
            w.run()
        except BaseException as error:  # noqa: BLE001  (re-raised below)
            errors.append(error)

    threads = [threading.Thread(target=body, args=(w,), daemon=True) for w in workers]
    with torch_infini.cpu_fallback.allowed("silent"):
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()) + HANG_GRACE_S)
    hung = [t.name for t in threads if t.is_alive()]
    if hung:
        faulthandler.dump_traceback(file=sys.stderr)
        pytest.fail(f"soak: threads still running {HANG_GRACE_S:.0f} s after the deadline: {hung}")
    if errors:
        raise errors[0]
    steps = sum(w.stats.steps for w in workers)
    checks = sum(w.stats.checks for w in workers)
    kinds = {k for w in workers for k in w.stats.by_kind}
    assert kinds == {k.__name__ for k in workers[0].kinds}, "every kind of work ran"
    del workers
    torch.infini.synchronize(0)
    torch.infini.synchronize(1)
    gc.collect()
    assert [torch.infini.memory_allocated(d) for d in (0, 1)] == start
    print(f"soak: {THREADS} threads, {SECONDS:.0f} s, {steps} steps, {checks} results checked")
