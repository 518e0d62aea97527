"""Backend-neutral behaviour contracts of torch.cuda-like device modules.

Each ``observe_<contract>(backend)`` drives ``torch.infini`` or ``torch.cuda``
(through a small :class:`Backend` adapter) and returns observations, never
hardware values (no timings, handles, indices or sizes):

* ``("check", label, bool)``: an invariant every conforming backend keeps
  (e.g. a context manager restores the current device);
* ``("ok", label, outcome)``: a call that must succeed; outcome is
  ``"returned"`` or the exception's class name;
* ``("error", label, outcome)``: a call that must fail; outcome is the
  exception's class name, or ``"returned"`` if it did not fail. It must be
  the class PyTorch raises for the same call on CUDA (``EXPECTED_ERRORS``),
  checked on ``infini`` alone too, and the message must carry the fragment
  both backends' messages share (recorded as a ``check``);
* ``("value", label, bool | str)``: a behaviour only compared between
  backends (where torch.infini is known to differ, a dedicated test says so).

The conformance tests require the invariants on ``infini`` and, where CUDA is
available, equal observation lists on ``infini`` and ``cuda`` (same
transitions, same exception types). Observations are made only at
deterministic points (after synchronize, never while work may be pending), so
they are the same with inline and with asynchronous streams.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

Observation = tuple[str, str, bool | str]

RETURNED = "returned"
CUDA_REASON = "CUDA not available"
# Elements of the tensors the ordering checks write: large enough that a
# missing dependency between two asynchronous streams shows.
_ELEMENTS = 1 << 16
_WRITES = 16


@dataclass(frozen=True)
class Backend:
    """``torch.infini`` or ``torch.cuda``, with how many devices contracts may use.

    ``devices`` is 1 or 2 and is the same for both backends of a comparison,
    so the observation lists have the same shape whatever the machines'
    device counts.
    """

    name: str  # the device type: "infini" or "cuda"
    module: Any  # torch.infini or torch.cuda
    devices: int

    def device(self, index: int) -> torch.device:
        return torch.device(self.name, index)

    @property
    def other(self) -> int:
        """A second device where there is one, else the first."""
        return 1 if self.devices >= 2 else 0

    @property
    def out_of_range(self) -> int:
        return int(self.module.device_count())


def backend_for(name: str, devices: int | None = None) -> Backend:
    module = getattr(torch, name)
    if devices is None:
        devices = min(int(module.device_count()), 2)
    return Backend(name, module, devices)


# The exception class torch.cuda raises for each "error" contract, and a
# fragment (case-insensitive) that its message and torch.infini's share.
# Where the class comes from (PyTorch 2.x sources):
# * AcceleratorError: a failing CUDA runtime call (C10_CUDA_CHECK), here
#   cudaSetDevice on an invalid ordinal ("CUDA error: invalid device
#   ordinal"), reached by set_device, device(), synchronize (which enters
#   device()), Stream(device=) (likewise), mem_get_info (a CUDAGuard) and
#   tensor creation (a DeviceGuard);
# * AssertionError: get_device_name -> get_device_properties checks the
#   index in Python first ("Invalid device id", torch/cuda/__init__.py);
# * RuntimeError: memory_stats and its wrappers check the index in the
#   caching allocator with TORCH_CHECK ("Invalid device argument 7: did you
#   call init?"), no CUDA call; CUDAEvent::record's device check likewise;
# * ValueError: _get_device_index for a non-cuda device ("Expected a cuda
#   device, but got: cpu"); CUDAEvent::elapsed_time's TORCH_CHECK_VALUE
#   preconditions;
# * OutOfMemoryError: the caching allocator when cudaMalloc fails.
EXPECTED_ERRORS: dict[str, tuple[str, str]] = {
    # device
    "set_device(device_count())": ("AcceleratorError", "invalid device"),
    "entering device(device_count())": ("AcceleratorError", "invalid device"),
    "get_device_name(device_count())": ("AssertionError", "invalid device"),
    "synchronize(device_count())": ("AcceleratorError", "invalid device"),
    "a tensor on device device_count()": ("AcceleratorError", "invalid device"),
    "set_device('cpu')": ("ValueError", "but got: cpu"),
    # stream
    "Stream(device=device_count())": ("AcceleratorError", "invalid device"),
    # event
    "elapsed_time() of recorded events without enable_timing": ("ValueError", "enable_timing"),
    "elapsed_time() of never-recorded timing events": ("ValueError", "recorded"),
    "elapsed_time() to a never-recorded end event": ("ValueError", "recorded"),
    "elapsed_time() from a never-recorded start": ("ValueError", "recorded"),
    "elapsed_time() of never-recorded events without enable_timing": (
        "ValueError",
        "enable_timing",
    ),
    "recording it again on a stream of a different device": ("RuntimeError", "device"),
    # memory
    "memory_allocated(device_count())": ("RuntimeError", "invalid device"),
    "mem_get_info(device_count())": ("AcceleratorError", "invalid device"),
    "allocating 2**60 bytes": ("OutOfMemoryError", "out of memory"),
}
# Observed only where the backend has two devices.
TWO_DEVICE_ERRORS = frozenset({"recording it again on a stream of a different device"})


class _Probe(Exception):
    """Raised inside context managers to check they restore state on errors."""


class Observer:
    def __init__(self) -> None:
        self.observations: list[Observation] = []

    def check(self, label: str, condition: object) -> None:
        self.observations.append(("check", label, bool(condition)))

    def ok(self, label: str, call: Callable[[], Any]) -> Any:
        """Records that ``call`` returned (or how it failed); returns its result."""
        try:
            result = call()
        except Exception as exc:
            self.observations.append(("ok", label, type(exc).__name__))
            return None
        self.observations.append(("ok", label, RETURNED))
        return result

    def value(self, label: str, value: bool | str) -> None:
        """A behaviour compared between backends but not asserted on its own."""
        self.observations.append(("value", label, value))

    def error(self, label: str, call: Callable[[], Any]) -> None:
        """Records the exception type ``call`` raised, or that it returned,
        and whether the message has the fragment ``EXPECTED_ERRORS`` names."""
        message = ""
        try:
            call()
        except Exception as exc:
            outcome = type(exc).__name__
            message = str(exc)
        else:
            outcome = RETURNED
        self.observations.append(("error", label, outcome))
        expected = EXPECTED_ERRORS.get(label)
        if expected is not None:
            fragment = expected[1]
            self.check(f"{label}: the message mentions {fragment!r}", fragment in message.lower())


def violations(observations: list[Observation]) -> list[str]:
    """Observations no conforming backend makes."""
    found = []
    for kind, label, value in observations:
        if kind == "check" and value is not True:
            found.append(f"check failed: {label}")
        elif kind == "ok" and value != RETURNED:
            found.append(f"{label}: raised {value}")
        elif kind == "error" and value == RETURNED:
            found.append(f"{label}: did not raise")
        elif kind == "error" and label not in EXPECTED_ERRORS:
            found.append(f"{label}: no expected exception declared in EXPECTED_ERRORS")
        elif kind == "error" and value != EXPECTED_ERRORS[label][0]:
            found.append(f"{label}: raised {value}; CUDA raises {EXPECTED_ERRORS[label][0]}")
    return found


def _enter(context: Any) -> None:
    with context:
        pass


def _synchronize_all(backend: Backend) -> None:
    for index in range(backend.devices):
        backend.module.synchronize(index)


def _write(backend: Backend, stream: Any, x: torch.Tensor, times: int = _WRITES) -> None:
    with backend.module.stream(stream):
        for _ in range(times):
            x.add_(1)


# ---------------------------------------------------------------- device


def observe_device(backend: Backend) -> list[Observation]:
    m = backend.module
    o = Observer()
    o.check("is_available() is True", m.is_available() is True)
    count = m.device_count()
    o.check("device_count() is a positive int", isinstance(count, int) and count >= 1)
    start = m.current_device()
    o.check("current_device() is an index below device_count()", 0 <= start < count)
    o.check("is_initialized() after use", m.is_initialized() is True)
    o.ok("init() again", m.init)

    other = backend.other
    forms: list[tuple[str, object]] = [
        ("int", other),
        ("torch.device", backend.device(other)),
        ("str", f"{backend.name}:{other}"),
    ]
    for form, argument in forms:
        o.ok(f"set_device({form})", lambda argument=argument: m.set_device(argument))
        o.check(f"set_device({form}) makes it current", m.current_device() == other)
        m.set_device(start)
    o.ok("set_device(-1)", lambda: m.set_device(-1))
    o.check("set_device(-1) keeps the current device", m.current_device() == start)

    with m.device(other):
        o.check("inside device(other): it is current", m.current_device() == other)
        with m.device(start):
            o.check("inside a nested device(): it is current", m.current_device() == start)
        o.check("leaving the nested device() restores the outer one", m.current_device() == other)
    o.check("leaving device() restores the device", m.current_device() == start)
    with m.device(backend.device(other)):
        o.check("device(torch.device) selects it", m.current_device() == other)
    o.check("leaving device(torch.device) restores", m.current_device() == start)
    for form, argument in (("None", None), ("-1", -1)):
        with m.device(argument):
            o.check(f"device({form}) keeps the current device", m.current_device() == start)
    try:
        with m.device(other):
            raise _Probe
    except _Probe:
        o.check("device() lets an exception through", True)
    o.check("device() restores the device after an exception", m.current_device() == start)

    tensor = torch.empty(4, device=backend.device(other))
    with m.device_of(tensor):
        o.check("device_of(tensor) selects the tensor's device", m.current_device() == other)
    o.check("leaving device_of() restores", m.current_device() == start)
    with m.device_of(torch.empty(4)):
        o.check("device_of(CPU tensor) keeps the current device", m.current_device() == start)

    with m.device(other):
        made = torch.empty(2, device=backend.name)
        o.check(
            "an index-less device means the current device", made.device == backend.device(other)
        )
    name = m.get_device_name()
    o.check("get_device_name() is a non-empty str", isinstance(name, str) and bool(name))
    o.check("get_device_name(int) equals get_device_name()", m.get_device_name(start) == name)
    o.ok("synchronize()", m.synchronize)
    o.ok("synchronize(int)", lambda: m.synchronize(other))
    o.ok("synchronize(torch.device)", lambda: m.synchronize(backend.device(other)))
    o.check("synchronize(other) keeps the current device", m.current_device() == start)

    bad = backend.out_of_range
    o.error("set_device(device_count())", lambda: m.set_device(bad))
    o.check("a failed set_device() keeps the current device", m.current_device() == start)
    o.error("entering device(device_count())", lambda: _enter(m.device(bad)))
    o.check("a failed device() keeps the current device", m.current_device() == start)
    o.error("get_device_name(device_count())", lambda: m.get_device_name(bad))
    o.error("synchronize(device_count())", lambda: m.synchronize(bad))
    o.error("a tensor on device device_count()", lambda: torch.empty(1, device=backend.device(bad)))
    o.error("set_device('cpu')", lambda: m.set_device("cpu"))
    o.check("failed calls keep the current device", m.current_device() == start)
    return o.observations


# ---------------------------------------------------------------- stream


def observe_stream(backend: Backend) -> list[Observation]:
    m = backend.module
    o = Observer()
    start = m.current_device()
    default = m.default_stream()
    o.check("default_stream() is a Stream", isinstance(default, m.Stream))
    o.check("current_stream() is the default stream at first", m.current_stream() == default)
    o.check("default_stream() is on the current device", default.device == backend.device(start))
    o.check("default_stream() is stable", m.default_stream() == default)
    o.check("default_stream(int) equals default_stream()", m.default_stream(start) == default)

    s = m.Stream()
    o.check("Stream() is a Stream", isinstance(s, m.Stream))
    o.check("Stream() is not the default stream", s != default)
    o.check("Stream() is on the current device", s.device == backend.device(start))
    o.check("a Stream equals itself", s == s)
    o.check("two new Streams differ", m.Stream() != s)

    o.ok("set_stream(Stream())", lambda: m.set_stream(s))
    o.check("set_stream() makes the stream current", m.current_stream() == s)
    o.check("set_stream() leaves default_stream() alone", m.default_stream() == default)
    o.ok("set_stream(default_stream())", lambda: m.set_stream(default))
    o.check("set_stream(default_stream()) makes it current again", m.current_stream() == default)

    with m.stream(s):
        o.check("inside stream(s): s is current", m.current_stream() == s)
        inner = m.Stream()
        with m.stream(inner):
            o.check("inside a nested stream(): it is current", m.current_stream() == inner)
        o.check("leaving the nested stream() restores the outer one", m.current_stream() == s)
    o.check("leaving stream() restores the stream", m.current_stream() == default)
    with m.stream(None):
        o.check("stream(None) keeps the current stream", m.current_stream() == default)
    with m.StreamContext(s):
        o.check("StreamContext(s) selects s", m.current_stream() == s)
    o.check("leaving StreamContext restores", m.current_stream() == default)
    o.error("Stream(device=device_count())", lambda: m.Stream(device=backend.out_of_range))
    o.check("a failed Stream() keeps the current device", m.current_device() == start)
    o.check("a failed Stream() keeps the current stream", m.current_stream() == default)
    try:
        with m.stream(s):
            raise _Probe
    except _Probe:
        o.check("stream() lets an exception through", True)
    o.check("stream() restores the stream after an exception", m.current_stream() == default)

    other = backend.other
    on_other = m.Stream(device=other)
    o.check("Stream(device=other) is on that device", on_other.device == backend.device(other))
    o.check(
        "default_stream(other) is on that device",
        m.default_stream(other).device == backend.device(other),
    )
    with m.stream(on_other):
        o.check("stream(s) selects s's device", m.current_device() == other)
        o.check("stream(s) makes s current there", m.current_stream() == on_other)
    o.check("leaving stream(s) restores the device", m.current_device() == start)
    o.check(
        "leaving stream(s) restores s's device's stream",
        m.current_stream(other) == m.default_stream(other),
    )
    o.check("leaving stream(s) restores the current stream", m.current_stream() == default)
    m.set_stream(on_other)
    # torch.cuda.set_stream also makes the stream's device current; compared,
    # not asserted (see test_set_stream_selects_the_stream_device).
    o.value("set_stream(s) makes s's device current", m.current_device() == other)
    o.check("set_stream(s) makes s current on its device", m.current_stream(other) == on_other)
    m.set_stream(m.default_stream(other))
    m.set_device(start)

    x = torch.zeros(_ELEMENTS, device=backend.device(start))
    m.synchronize()
    _write(backend, s, x)
    o.ok("Stream.synchronize()", s.synchronize)
    o.check("query() after Stream.synchronize() is True", s.query() is True)
    _write(backend, s, x, 1)
    m.synchronize()
    o.check("query() after device synchronize() is True", s.query() and default.query())

    writer, reader = m.Stream(), m.Stream()
    x.zero_()
    m.synchronize()
    _write(backend, writer, x)
    reader.wait_stream(writer)
    with m.stream(reader):
        y = x * 2
    reader.synchronize()
    o.check(
        "wait_stream(): the waiting stream sees every write",
        torch.equal(y.cpu(), torch.full((_ELEMENTS,), 2.0 * _WRITES)),
    )
    event = writer.record_event()
    o.check("record_event() returns an Event", isinstance(event, m.Event))
    _write(backend, writer, x)
    reader.wait_event(writer.record_event())
    with m.stream(reader):
        z = x * 1
    reader.synchronize()
    o.check(
        "wait_event(): the waiting stream sees every write",
        torch.equal(z.cpu(), torch.full((_ELEMENTS,), 2.0 * _WRITES)),
    )
    _synchronize_all(backend)
    return o.observations


# ---------------------------------------------------------------- event


def observe_event(backend: Backend) -> list[Observation]:
    m = backend.module
    o = Observer()
    start = m.current_device()
    e = m.Event()
    o.check("Event() is an Event", isinstance(e, m.Event))
    o.check("query() of a never-recorded event is True", e.query() is True)
    o.ok("synchronize() of a never-recorded event", e.synchronize)
    o.ok("wait() on a never-recorded event", lambda: e.wait())

    s = m.Stream()
    x = torch.zeros(_ELEMENTS, device=backend.device(start))
    m.synchronize()
    _write(backend, s, x)
    o.ok("record(stream)", lambda: e.record(s))
    o.ok("synchronize() after record()", e.synchronize)
    o.check("query() after synchronize() is True", e.query() is True)
    o.check("the event's device is the stream's", e.device == backend.device(start))

    current = m.Event()
    with m.stream(s):
        x.add_(1)
        o.ok("record() on the current stream", current.record)
    current.synchronize()
    o.check("record() without a stream records on the current stream", s.query() is True)
    _write(backend, s, x, 1)
    o.ok("record() again", lambda: e.record(s))
    e.synchronize()
    o.check("query() after re-recording and synchronize() is True", e.query() is True)

    writer, reader = m.Stream(), m.Stream()
    x.zero_()
    m.synchronize()
    _write(backend, writer, x)
    marker = m.Event()
    marker.record(writer)
    o.ok("wait(stream)", lambda: marker.wait(reader))
    with m.stream(reader):
        y = x * 2
    reader.synchronize()
    o.check(
        "wait(stream): the stream sees the work before the record",
        torch.equal(y.cpu(), torch.full((_ELEMENTS,), 2.0 * _WRITES)),
    )
    with m.stream(reader):
        o.ok("wait() on the current stream", lambda: marker.wait())

    begin, end = m.Event(enable_timing=True), m.Event(enable_timing=True)
    begin.record()
    x.add_(1)
    end.record()
    end.synchronize()
    elapsed = o.ok("elapsed_time() of completed timing events", lambda: begin.elapsed_time(end))
    o.check("elapsed_time() is a float >= 0", isinstance(elapsed, float) and elapsed >= 0)

    plain_a, plain_b = m.Event(), m.Event()
    plain_a.record()
    plain_b.record()
    plain_b.synchronize()
    o.error(
        "elapsed_time() of recorded events without enable_timing",
        lambda: plain_a.elapsed_time(plain_b),
    )
    never_a, never_b = m.Event(enable_timing=True), m.Event(enable_timing=True)
    o.error(
        "elapsed_time() of never-recorded timing events",
        lambda: never_a.elapsed_time(never_b),
    )
    never_a.record()
    never_a.synchronize()
    o.error("elapsed_time() to a never-recorded end event", lambda: never_a.elapsed_time(never_b))
    o.error("elapsed_time() from a never-recorded start", lambda: never_b.elapsed_time(never_a))
    o.error(
        "elapsed_time() of never-recorded events without enable_timing",
        lambda: m.Event().elapsed_time(m.Event()),
    )

    if backend.devices >= 2:
        remote = m.Event()
        remote.record(m.Stream(device=backend.other))
        remote.synchronize()
        o.check(
            "an event recorded on another device's stream is on that device",
            remote.device == backend.device(backend.other),
        )
        o.check("query() of it after synchronize() is True", remote.query() is True)
        o.error(
            "recording it again on a stream of a different device",
            lambda: remote.record(m.Stream(device=start)),
        )
    _synchronize_all(backend)
    return o.observations


# ---------------------------------------------------------------- memory


MEMORY_STAT_KEYS = (
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "allocated_bytes.all.allocated",
    "allocated_bytes.all.freed",
    "reserved_bytes.all.current",
    "reserved_bytes.all.peak",
    "active_bytes.all.current",
    "allocation.all.current",
    "segment.all.current",
    "num_alloc_retries",
    "num_ooms",
)
_MIB = 1 << 20


def observe_memory(backend: Backend) -> list[Observation]:
    m = backend.module
    o = Observer()
    start = m.current_device()
    _synchronize_all(backend)
    base = m.memory_allocated()
    o.check("memory_allocated() is an int >= 0", isinstance(base, int) and base >= 0)
    x = torch.empty(_MIB, dtype=torch.uint8, device=backend.device(start))
    allocated = m.memory_allocated()
    o.check("allocating 1 MiB raises memory_allocated() by >= 1 MiB", allocated - base >= _MIB)
    o.check(
        "memory_allocated(int) equals memory_allocated()", m.memory_allocated(start) == allocated
    )
    o.check(
        "memory_allocated(torch.device) equals memory_allocated()",
        m.memory_allocated(backend.device(start)) == allocated,
    )
    o.check("memory_reserved() >= memory_allocated()", m.memory_reserved() >= allocated)
    o.check("max_memory_allocated() >= memory_allocated()", m.max_memory_allocated() >= allocated)
    o.check(
        "max_memory_reserved() >= memory_reserved()", m.max_memory_reserved() >= m.memory_reserved()
    )
    stats = m.memory_stats()
    for key in MEMORY_STAT_KEYS:
        o.check(f"memory_stats() has {key!r}", key in stats)
    o.check(
        "memory_stats()['allocated_bytes.all.current'] is memory_allocated()",
        stats.get("allocated_bytes.all.current") == allocated,
    )
    nested = m.memory_stats_as_nested_dict()
    o.check(
        "memory_stats_as_nested_dict() nests the same statistics",
        nested.get("allocated_bytes", {}).get("all", {}).get("current") == allocated,
    )
    del x
    o.check("freeing returns memory_allocated() to its value before", m.memory_allocated() == base)
    o.check("the peak remembers the freed block", m.max_memory_allocated() >= base + _MIB)
    o.ok("reset_peak_memory_stats()", m.reset_peak_memory_stats)
    o.check(
        "reset_peak_memory_stats() lowers the peak to the current value",
        m.max_memory_allocated() == m.memory_allocated(),
    )
    o.ok("reset_accumulated_memory_stats()", m.reset_accumulated_memory_stats)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.cuda deprecates this name
        o.ok("reset_max_memory_allocated()", m.reset_max_memory_allocated)
    reserved = m.memory_reserved()
    o.ok("empty_cache()", m.empty_cache)
    o.check("empty_cache() does not grow memory_reserved()", m.memory_reserved() <= reserved)
    o.check(
        "memory_reserved() >= memory_allocated() after empty_cache()",
        m.memory_reserved() >= m.memory_allocated(),
    )
    free, total = m.mem_get_info()
    o.check("mem_get_info() is (free, total), 0 <= free <= total", 0 <= free <= total and total > 0)
    o.error("memory_allocated(device_count())", lambda: m.memory_allocated(backend.out_of_range))
    o.error("mem_get_info(device_count())", lambda: m.mem_get_info(backend.out_of_range))
    before_oom = m.memory_allocated()
    o.error(
        "allocating 2**60 bytes",
        lambda: torch.empty(1 << 60, dtype=torch.uint8, device=backend.device(start)),
    )
    o.check("a failed allocation allocates nothing", m.memory_allocated() == before_oom)
    after = torch.ones(4, device=backend.device(start))
    o.check(
        "the device allocates after an out-of-memory error",
        torch.equal(after.cpu(), torch.ones(4)),
    )
    return o.observations


CONTRACTS: dict[str, Callable[[Backend], list[Observation]]] = {
    "device": observe_device,
    "stream": observe_stream,
    "event": observe_event,
    "memory": observe_memory,
}
