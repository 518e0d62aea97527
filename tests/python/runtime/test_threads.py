"""Runtime calls from several Python threads: each thread binds the backend itself."""

from __future__ import annotations

import threading
import time

import pytest
import torch
import torch_infini
from infini_testing import requires_async_host


def test_copies_and_ops_from_many_threads_match_cpu() -> None:
    errors: list[BaseException] = []
    results: dict[int, bool] = {}

    def work(index: int) -> None:
        try:
            gen = torch.Generator().manual_seed(index)
            a = torch.randn(33, 17, generator=gen)
            b = torch.randn(17, 9, generator=gen)
            dev_a, dev_b = a.to("infini"), b.to("infini")
            out = (dev_a @ dev_b + 1.0).cpu()
            torch.infini.current_stream().synchronize()
            results[index] = torch.allclose(out, a @ b + 1.0, rtol=1e-5, atol=1e-5)
        except BaseException as exc:  # reported below with the thread's index
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == {i: True for i in range(6)}


def test_new_threads_start_on_device_zero_with_default_stream() -> None:
    seen: list[tuple[int, bool]] = []

    def probe() -> None:
        seen.append(
            (
                torch.infini.current_device(),
                torch.infini.current_stream() == torch.infini.default_stream(),
            )
        )

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert seen == [(0, True)]


@requires_async_host
def test_a_fallback_result_never_takes_memory_with_queued_work() -> None:
    """Two threads on ONE stream: one queues matmuls and frees their results,
    the other runs a fallback operator (atan2). The fallback's CPU kernel
    writes its result now; a block the first thread freed may still have a
    queued matmul writing it, and must not be handed to the fallback."""
    stop = threading.Event()
    errors: list[BaseException] = []
    a = torch.randn(128, 128, device="infini")

    def producer() -> None:
        try:
            while not stop.is_set():
                for _ in range(8):
                    (a @ a).relu_()  # queued, then freed at once, work still pending
                # A short queue keeps each synchronize below short.
                torch.infini.current_stream().synchronize()
        except BaseException as exc:
            errors.append(exc)

    x = torch.rand(128, 128)
    y = torch.rand(128, 128) + 0.5
    expected = torch.atan2(x, y)
    dx, dy = x.to("infini"), y.to("infini")
    thread = threading.Thread(target=producer)
    thread.start()
    wrong = 0
    try:
        with torch_infini.cpu_fallback.allowed("silent"):
            for _ in range(150):
                got = torch.atan2(dx, dy)
                torch.infini.synchronize()
                if not torch.equal(got.cpu(), expected):
                    wrong += 1
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert wrong == 0, f"{wrong} of 150 fallback results were overwritten by queued work"


@requires_async_host
@pytest.mark.parametrize("wait", ["torch.infini.synchronize", "Stream.synchronize"])
def test_synchronize_lets_other_python_threads_run(wait: str) -> None:
    """torch.infini.synchronize waits without the GIL, as torch.cuda's does:
    another Python thread keeps running while the stream drains."""
    ticks = 0
    done = threading.Event()

    def counter() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    big = torch.randn(512, 512, device="infini")
    for _ in range(40):  # ~100 ms of queued work on the default stream
        big = torch.mm(big, big).mul_(1e-3)
    thread = threading.Thread(target=counter)
    thread.start()
    try:
        while ticks == 0:
            time.sleep(0)
        assert not torch.infini.current_stream().query(), "the work ran before the wait"
        before = ticks
        if wait == "Stream.synchronize":
            torch.infini.current_stream().synchronize()
        else:
            torch.infini.synchronize()
        during = ticks - before
    finally:
        done.set()
        thread.join()
    assert during > 0, "no other thread ran while synchronize() waited"
