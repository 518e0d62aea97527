"""torch.infini.Stream / Event and the stream context, as torch.cuda's.

The ordering tests at the end need streams that really run asynchronously
(the host backend with TORCH_INFINI_HOST_ASYNC=1): there, a missing wait lets
a copy read memory another stream has not written yet.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import pytest
import torch
import torch_infini
from infini_testing import requires_async_host, requires_two_devices

# Big enough that a copy takes a while on a worker thread (16 MiB of float32).
BIG = 4 * 1024 * 1024


# ---------------------------------------------------------------- streams


def test_stream_construction() -> None:
    stream = torch.infini.Stream()
    assert isinstance(stream, torch.infini.Stream)
    assert isinstance(stream, torch.Stream)
    assert stream.device.type == "infini"
    assert stream.device_index == torch.infini.current_device()
    assert stream != torch.infini.default_stream()


@pytest.mark.parametrize("spec", [0, "infini:0", torch.device("infini", 0)])
def test_stream_on_explicit_device(spec: object) -> None:
    stream = torch.infini.Stream(device=spec)
    assert stream.device == torch.device("infini", 0)


@requires_two_devices
def test_stream_on_other_device_keeps_current_device() -> None:
    torch.infini.set_device(0)
    stream = torch.infini.Stream(device=1)
    assert stream.device == torch.device("infini", 1)
    assert torch.infini.current_device() == 0


def test_stream_rejects_unknown_keywords() -> None:
    with pytest.raises(TypeError, match="bogus"):
        torch.infini.Stream(bogus=1)


def test_default_stream_is_initial_current_stream() -> None:
    default = torch.infini.default_stream()
    assert default.device_index == torch.infini.current_device()
    assert torch.infini.current_stream() == default
    assert torch.infini.default_stream(0) == torch.infini.default_stream("infini:0")


def test_set_stream() -> None:
    default = torch.infini.default_stream()
    stream = torch.infini.Stream()
    torch.infini.set_stream(stream)
    assert torch.infini.current_stream() == stream
    torch.infini.set_stream(None)  # ignored
    assert torch.infini.current_stream() == stream
    torch.infini.set_stream(default)
    assert torch.infini.current_stream() == default


def test_current_stream_is_per_thread() -> None:
    stream = torch.infini.Stream()
    torch.infini.set_stream(stream)
    seen: list[bool] = []

    def look() -> None:
        seen.append(torch.infini.current_stream() == torch.infini.default_stream())

    worker = threading.Thread(target=look)
    worker.start()
    worker.join()
    assert seen == [True]  # a new thread starts on the default stream, as with CUDA
    assert torch.infini.current_stream() == stream


def test_stream_context_manager_restores() -> None:
    before = torch.infini.current_stream()
    outer, inner = torch.infini.Stream(), torch.infini.Stream()
    with torch.infini.stream(outer):
        assert torch.infini.current_stream() == outer
        with torch.infini.stream(inner):
            assert torch.infini.current_stream() == inner
        assert torch.infini.current_stream() == outer
    assert torch.infini.current_stream() == before


def test_stream_context_manager_none_is_a_no_op() -> None:
    before = torch.infini.current_stream()
    with torch.infini.stream(None):
        assert torch.infini.current_stream() == before
    assert torch.infini.current_stream() == before


def test_stream_context_manager_restores_after_exception() -> None:
    before = torch.infini.current_stream()
    with pytest.raises(KeyError):
        with torch.infini.stream(torch.infini.Stream()):
            raise KeyError("boom")
    assert torch.infini.current_stream() == before


@requires_two_devices
def test_stream_of_other_device_switches_device_and_restores() -> None:
    torch.infini.set_device(0)
    stream0 = torch.infini.Stream(device=0)
    torch.infini.set_stream(stream0)
    before1 = torch.infini.current_stream(1)
    stream1 = torch.infini.Stream(device=1)
    with torch.infini.stream(stream1):
        assert torch.infini.current_device() == 1
        assert torch.infini.current_stream() == stream1
        assert torch.infini.current_stream(0) == stream0
        assert torch.empty(1, device="infini").device.index == 1
    assert torch.infini.current_device() == 0
    assert torch.infini.current_stream() == stream0
    assert torch.infini.current_stream(1) == before1


def test_stream_query_and_synchronize() -> None:
    stream = torch.infini.Stream()
    src = torch.arange(1024, dtype=torch.float32)
    with torch.infini.stream(stream):
        x = src.to("infini")
    assert stream.synchronize() is None
    assert stream.query() is True
    assert torch.equal(x.cpu(), src)


def test_stream_is_idle_once_its_last_event_completed() -> None:
    """After synchronizing the last event recorded on a stream, query() is True.

    As with CUDA: the event completes after everything queued before it, and
    nothing was queued after it. Repeated, because a wrong implementation only
    loses a race.
    """
    stream = torch.infini.Stream()
    busy_after_event = 0
    for size in (1 << 18, 1 << 19, 1 << 20):
        src = torch.arange(size, dtype=torch.float32).pin_memory()
        x = torch.empty(size, device="infini")
        for _ in range(100):
            with torch.infini.stream(stream):
                x.copy_(src, non_blocking=True)
            stream.record_event().synchronize()
            busy_after_event += not stream.query()
        assert torch.equal(x.cpu(), src)
    assert busy_after_event == 0


def test_infini_stream_native_handle() -> None:
    default = torch.infini.default_stream()
    stream = torch.infini.Stream()
    assert isinstance(default.infini_stream, int)
    assert isinstance(stream.infini_stream, int)
    if torch_infini.backend() == "host":
        # Every host stream is a real object. (An InfiniRT type may use a null
        # handle for its streams, as CUDA does for its legacy default stream.)
        assert default.infini_stream != 0
        assert stream.infini_stream != 0
        assert stream.infini_stream != default.infini_stream
    # The handle belongs to the stream, not to the Python object.
    assert torch.infini.current_stream().infini_stream == default.infini_stream
    torch.infini.set_stream(stream)
    assert torch.infini.current_stream().infini_stream == stream.infini_stream
    assert "infini" in repr(stream)


def test_record_event_returns_infini_event() -> None:
    stream = torch.infini.Stream()
    event = stream.record_event()
    assert isinstance(event, torch.infini.Event)
    event.synchronize()
    assert event.query() is True
    same = torch.infini.Event()
    assert stream.record_event(same) is same


def test_wait_event_and_wait_stream_keep_data_correct() -> None:
    src = torch.arange(4096, dtype=torch.float32)
    producer, consumer = torch.infini.Stream(), torch.infini.Stream()
    with torch.infini.stream(producer):
        x = src.to("infini")
        ready = producer.record_event()
    consumer.wait_event(ready)
    with torch.infini.stream(consumer):
        y = torch.empty_like(x)
        y.copy_(x)
    torch.infini.current_stream().wait_stream(consumer)
    assert torch.equal(y.cpu(), src)


@requires_two_devices
def test_wait_stream_across_devices() -> None:
    src = torch.arange(4096, dtype=torch.float32)
    stream0, stream1 = torch.infini.Stream(device=0), torch.infini.Stream(device=1)
    with torch.infini.stream(stream0):
        x = src.to("infini:0")
    stream1.wait_stream(stream0)
    with torch.infini.stream(stream1):
        y = torch.empty(src.shape, device="infini:1")
        y.copy_(x)
    stream1.synchronize()
    assert y.device == torch.device("infini", 1)
    assert torch.equal(y.cpu(), src)


# ---------------------------------------------------------------- events


def test_event_record_query_synchronize() -> None:
    event = torch.infini.Event()
    assert event.query() is True  # never recorded: nothing to wait for
    event.synchronize()
    event.record()
    event.synchronize()
    assert event.query() is True
    assert event.device == torch.device("infini", torch.infini.current_device())


def test_event_wait_on_streams() -> None:
    event = torch.infini.Event()
    event.record(torch.infini.Stream())
    event.wait()
    event.wait(torch.infini.Stream())
    torch.infini.current_stream().synchronize()
    assert event.query() is True


def test_elapsed_time() -> None:
    start = torch.infini.Event(enable_timing=True)
    end = torch.infini.Event(enable_timing=True)
    start.record()
    x = torch.randn(4096).to("infini")
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert isinstance(elapsed, float)
    assert math.isfinite(elapsed)
    assert elapsed >= 0.0
    assert x.device.type == "infini"


def test_elapsed_time_requires_recorded_events() -> None:
    start = torch.infini.Event(enable_timing=True)
    end = torch.infini.Event(enable_timing=True)
    with pytest.raises(ValueError, match="recorded"):
        start.elapsed_time(end)
    start.record()
    start.synchronize()
    with pytest.raises(ValueError, match="recorded"):
        start.elapsed_time(end)


def test_elapsed_time_requires_timing_enabled() -> None:
    start = torch.infini.Event()
    end = torch.infini.Event()
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        start.elapsed_time(end)
    timed = torch.infini.Event(enable_timing=True)
    timed.record()
    timed.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        timed.elapsed_time(end)


def test_elapsed_time_rejects_non_infini_event() -> None:
    start = torch.infini.Event(enable_timing=True)
    with pytest.raises(TypeError, match="torch.infini.Event"):
        start.elapsed_time(torch.Event(device="infini", enable_timing=True))


@requires_two_devices
def test_elapsed_time_across_devices_raises() -> None:
    start = torch.infini.Event(enable_timing=True)
    end = torch.infini.Event(enable_timing=True)
    start.record(torch.infini.Stream(device=0))
    end.record(torch.infini.Stream(device=1))
    start.synchronize()
    end.synchronize()
    with pytest.raises(RuntimeError, match="different devices") as exc:
        start.elapsed_time(end)
    assert type(exc.value) is RuntimeError


@pytest.mark.parametrize("kwargs", [{"blocking": True}, {"interprocess": True}])
def test_unsupported_event_flags(kwargs: dict[str, bool]) -> None:
    with pytest.raises(NotImplementedError, match="not supported"):
        torch.infini.Event(**kwargs)


def test_ipc_handle_not_supported() -> None:
    with pytest.raises(NotImplementedError, match="IPC"):
        torch.infini.Event().ipc_handle()


# ---------------------------------------------------------------- real ordering


def _queue_busy_work(pinned: torch.Tensor, scratch: torch.Tensor, times: int = 4) -> None:
    """Queues several large copies on the current stream, so it stays busy."""
    for _ in range(times):
        scratch.copy_(pinned, non_blocking=True)


def _sync_event(stream: torch.infini.Stream) -> None:
    stream.record_event().synchronize()


def _sync_stream(stream: torch.infini.Stream) -> None:
    stream.synchronize()


def _sync_device(stream: torch.infini.Stream) -> None:
    torch.infini.synchronize(stream.device_index)


@requires_async_host
@pytest.mark.parametrize(
    "sync", [_sync_event, _sync_stream, _sync_device], ids=["event", "stream", "device"]
)
def test_async_round_trip_through_pinned_memory(
    sync: Callable[[torch.infini.Stream], None],
) -> None:
    src = torch.arange(BIG, dtype=torch.float32).pin_memory()
    out = torch.zeros(BIG).pin_memory()
    stream = torch.infini.Stream()
    with torch.infini.stream(stream):
        x = torch.empty(BIG, device="infini")
        x.copy_(src, non_blocking=True)
        out.copy_(x, non_blocking=True)
    sync(stream)
    assert torch.equal(out, src)


@requires_async_host
def test_async_wait_stream_orders_copies_across_streams() -> None:
    src = torch.arange(BIG, dtype=torch.float32).pin_memory()
    scratch = torch.empty(BIG, device="infini")
    x = torch.zeros(BIG).to("infini")
    y = torch.empty(BIG, device="infini")
    producer, consumer = torch.infini.Stream(), torch.infini.Stream()
    assert producer != consumer
    with torch.infini.stream(producer):
        _queue_busy_work(src, scratch)
        x.copy_(src, non_blocking=True)  # queued behind the busy work
    consumer.wait_stream(producer)
    with torch.infini.stream(consumer):
        y.copy_(x)  # device-to-device: queued on consumer, must see x written
        out = y.cpu()
    assert torch.equal(out, src)


@requires_async_host
def test_async_wait_event_orders_copies_across_streams() -> None:
    src = torch.arange(BIG, dtype=torch.float32).pin_memory()
    scratch = torch.empty(BIG, device="infini")
    x = torch.zeros(BIG).to("infini")
    y = torch.empty(BIG, device="infini")
    out = torch.zeros(BIG).pin_memory()
    producer, consumer = torch.infini.Stream(), torch.infini.Stream()
    written = torch.infini.Event()
    with torch.infini.stream(producer):
        _queue_busy_work(src, scratch)
        x.copy_(src, non_blocking=True)
        written.record()
    with torch.infini.stream(consumer):
        written.wait()
        y.copy_(x)
        out.copy_(y, non_blocking=True)
        done = consumer.record_event()
    done.synchronize()
    assert done.query() is True
    assert torch.equal(out, src)


@requires_async_host
def test_async_device_synchronize_drains_all_streams() -> None:
    sources = [torch.full((BIG // 4,), float(i)).pin_memory() for i in range(3)]
    outs = [torch.zeros(BIG // 4).pin_memory() for _ in sources]
    streams = [torch.infini.Stream() for _ in sources]
    keep = []
    for src, out, stream in zip(sources, outs, streams, strict=True):
        with torch.infini.stream(stream):
            x = torch.empty(src.shape, device="infini")
            x.copy_(src, non_blocking=True)
            out.copy_(x, non_blocking=True)
            keep.append(x)
    torch.infini.synchronize()
    for stream in streams:
        assert stream.query() is True
    for src, out in zip(sources, outs, strict=True):
        assert torch.equal(out, src)


@requires_async_host
def test_async_elapsed_time_around_queued_work() -> None:
    src = torch.arange(BIG, dtype=torch.float32).pin_memory()
    x = torch.empty(BIG, device="infini")
    start = torch.infini.Event(enable_timing=True)
    end = torch.infini.Event(enable_timing=True)
    stream = torch.infini.Stream()
    with torch.infini.stream(stream):
        start.record()
        x.copy_(src, non_blocking=True)
        end.record()
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) >= 0.0
    assert torch.equal(x.cpu(), src)


@requires_async_host
@requires_two_devices
def test_async_copy_across_devices_waits_for_source_stream() -> None:
    src = torch.arange(BIG, dtype=torch.float32).pin_memory()
    scratch = torch.empty(BIG, device="infini:0")
    x = torch.zeros(BIG).to("infini:0")
    with torch.infini.device(0):
        # Queued on device 0's current stream; the copy below must wait for it.
        _queue_busy_work(src, scratch)
        x.copy_(src, non_blocking=True)
    y = torch.empty(BIG, device="infini:1")
    y.copy_(x)
    assert y.device == torch.device("infini", 1)
    assert torch.equal(y.cpu(), src)


# ---------------------------------------------------------------- re-recorded events


def _queue_products(times: int = 10, size: int = 512) -> None:
    """Queues `times` matrix products on the current stream, keeping it busy."""
    w = torch.full((size, size), 1e-3, device="infini")
    for _ in range(times):
        torch.mm(w, w)


def _wait_event(stream: torch.infini.Stream, event: torch.infini.Event) -> None:
    stream.wait_event(event)


def _event_wait(stream: torch.infini.Stream, event: torch.infini.Event) -> None:
    event.wait(stream)


@requires_async_host
@pytest.mark.parametrize("wait", [_wait_event, _event_wait], ids=["wait_event", "event.wait"])
def test_async_re_recording_an_event_keeps_an_earlier_wait(
    wait: Callable[[torch.infini.Stream, torch.infini.Event], None],
) -> None:
    """A wait holds the record that was the event's latest when it was queued.

    As cudaStreamWaitEvent: recording the event again later, on another
    (idle) stream, must not release a wait queued before (issue 10, defect 5).
    """
    for attempt in range(3):
        producer, consumer, other = (torch.infini.Stream() for _ in range(3))
        src = torch.zeros(1 << 20, device="infini")
        out = torch.empty_like(src)
        torch.infini.synchronize()
        event = torch.infini.Event()
        with torch.infini.stream(producer):
            _queue_products()
            src.fill_(1.0 + attempt)
            event.record()
        wait(consumer, event)
        event.record(other)  # idle: this record completes at once
        with torch.infini.stream(consumer):
            out.copy_(src)
        torch.infini.synchronize()
        assert torch.equal(out.cpu(), torch.full((1 << 20,), 1.0 + attempt)), attempt


@requires_async_host
def test_async_wait_on_re_recorded_event_waits_for_the_latest_record() -> None:
    """The other direction: a wait queued after re-recording on a busy stream
    waits for that latest record, not for the earlier (completed) one."""
    producer, consumer = torch.infini.Stream(), torch.infini.Stream()
    src = torch.zeros(1 << 20, device="infini")
    out = torch.empty_like(src)
    event = torch.infini.Event()
    event.record(consumer)  # completes at once
    torch.infini.synchronize()
    with torch.infini.stream(producer):
        _queue_products()
        src.fill_(3.0)
        event.record()
    consumer.wait_event(event)
    with torch.infini.stream(consumer):
        out.copy_(src)
    torch.infini.synchronize()
    assert torch.equal(out.cpu(), torch.full((1 << 20,), 3.0))


def test_event_query_and_synchronize_follow_the_latest_record() -> None:
    """query()/synchronize() are about the latest record only, as with CUDA."""
    busy, idle = torch.infini.Stream(), torch.infini.Stream()
    event = torch.infini.Event()
    # Latest record on an idle stream: synchronize() returns once it is done,
    # and query() is True, even while an earlier record is still queued.
    with torch.infini.stream(busy):
        _queue_products()
    event.record(busy)
    event.record(idle)
    event.synchronize()
    assert event.query() is True
    # Latest record behind busy work: synchronize() waits for that work.
    src = torch.zeros(1 << 20, device="infini")
    with torch.infini.stream(busy):
        _queue_products()
        src.fill_(4.0)
    event.record(busy)
    event.synchronize()
    assert event.query() is True
    assert busy.query() is True  # nothing was queued on busy after the record
    assert torch.equal(src.cpu(), torch.full((1 << 20,), 4.0))


def test_elapsed_time_uses_the_latest_records() -> None:
    """start re-recorded on the current (idle) stream: elapsed_time measures
    from that record, not from the earlier one queued behind busy work (which
    completes after `end`, so using it would give a negative time)."""
    busy = torch.infini.Stream()
    start = torch.infini.Event(enable_timing=True)
    end = torch.infini.Event(enable_timing=True)
    with torch.infini.stream(busy):
        _queue_products(times=20)
        start.record()
    start.record()  # current stream
    end.record()
    torch.infini.synchronize()
    elapsed = start.elapsed_time(end)
    assert math.isfinite(elapsed)
    assert elapsed >= 0.0
