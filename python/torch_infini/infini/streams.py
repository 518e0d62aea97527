"""Streams and events of torch.infini, as torch.cuda.Stream / torch.cuda.Event.

Both build on PyTorch's generic torch.Stream / torch.Event, which reach the
backend through its DeviceGuard implementation.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _C
from ._device import DeviceLike, _get_device_index
from ._device import device as _device_ctx

_INFINI_TYPE: int | None = None


def _wrap(triple: tuple[int, int, int]) -> Stream:
    stream_id, device_index, device_type = triple
    return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


class Stream(torch.Stream):
    """An in-order queue of work on one infini device (torch.cuda.Stream)."""

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: Any) -> Stream:
        if {"stream_id", "device_index", "device_type"} <= kwargs.keys():
            return super().__new__(
                cls,
                stream_id=kwargs["stream_id"],
                device_index=kwargs["device_index"],
                device_type=kwargs["device_type"],
            )
        if kwargs:
            raise TypeError(f"Stream() got unexpected keyword arguments {sorted(kwargs)}")
        index = _get_device_index(device, optional=True)
        with _device_ctx(index):
            return super().__new__(cls, device=torch.device("infini", index), priority=priority)

    def wait_event(self, event: Event) -> None:
        """Makes future work on this stream wait for ``event``."""
        event.wait(self)

    def wait_stream(self, stream: Stream) -> None:
        """Makes future work on this stream wait for work queued on ``stream``."""
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        """Records ``event`` (a new one if None) on this stream and returns it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    @property
    def infini_stream(self) -> int:
        """The runtime's native stream handle, as an integer."""
        return int(_C._stream_native_handle(self.stream_id, self.device_index))

    def __repr__(self) -> str:
        return f"<torch.infini.Stream device={self.device} infini_stream={self.infini_stream:#x}>"


class Event(torch.Event):
    """A marker in a stream's work (torch.cuda.Event).

    ``blocking`` and ``interprocess`` events are not offered by the infini
    backend and raise NotImplementedError.
    """

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> Event:
        if blocking:
            raise NotImplementedError(
                "torch.infini.Event(blocking=True) is not supported by the infini backend"
            )
        if interprocess:
            raise NotImplementedError(
                "torch.infini.Event(interprocess=True) is not supported by the infini backend"
            )
        event = super().__new__(cls, device=torch.device("infini"), enable_timing=enable_timing)
        event._enable_timing = bool(enable_timing)
        return event

    def record(self, stream: Stream | None = None) -> None:
        """Records the event on ``stream`` (the current stream if None)."""
        super().record(current_stream() if stream is None else stream)

    def wait(self, stream: Stream | None = None) -> None:
        """Makes ``stream`` (the current stream if None) wait for this event."""
        super().wait(current_stream() if stream is None else stream)

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event and ``end_event`` (both completed)."""
        if not isinstance(end_event, Event):
            raise TypeError(
                f"expected end_event to be a torch.infini.Event, got {type(end_event).__name__}"
            )
        # The checks and their order are torch.Event's (c10::Event::elapsedTime).
        if not (self._enable_timing and end_event._enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if not (self.event_id and end_event.event_id):
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        if self.device != end_event.device:
            raise RuntimeError(
                f"elapsed_time: events were recorded on different devices "
                f"({self.device} and {end_event.device})"
            )
        if not (self.query() and end_event.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return float(_C._event_elapsed_time(self.event_id, end_event.event_id))

    def ipc_handle(self) -> Any:
        raise NotImplementedError("torch.infini.Event: IPC handles are not supported")

    def __repr__(self) -> str:
        return f"<torch.infini.Event {self.event_id:#x}>"


def current_stream(device: DeviceLike = None) -> Stream:
    """The calling thread's current stream on ``device``."""
    return _wrap(_C._current_stream(_get_device_index(device)))


def default_stream(device: DeviceLike = None) -> Stream:
    """The default stream of ``device``."""
    return _wrap(_C._default_stream(_get_device_index(device)))


def set_stream(stream: Stream | None) -> None:
    """Makes ``stream`` current for its device; None is ignored."""
    if stream is None:
        return
    _check_infini_stream(stream)
    # As torch.cuda.set_stream: the stream's device becomes current too.
    if stream.device_index != _C._current_device():
        _C._set_device(stream.device_index)
    _C._exchange_stream(stream.stream_id, stream.device_index)


def _check_infini_stream(stream: torch.Stream) -> None:
    if stream.device.type != "infini":
        raise ValueError(f"Expected an infini stream, got a stream of device {stream.device}")


class StreamContext:
    """Context manager that selects a stream (and its device), then restores."""

    def __init__(self, stream: Stream | None) -> None:
        self.stream = stream
        self.src_prev_stream: Stream | None = None
        self.dst_prev_stream: Stream | None = None
        self.device_ctx: _device_ctx | None = None

    def __enter__(self) -> None:
        if self.stream is None:
            return
        _check_infini_stream(self.stream)
        self.src_prev_stream = current_stream()
        # Switching to a stream of another device switches device too.
        if self.src_prev_stream.device != self.stream.device:
            self.device_ctx = _device_ctx(self.stream.device)
            self.device_ctx.__enter__()
        self.dst_prev_stream = current_stream(self.stream.device_index)
        set_stream(self.stream)

    def __exit__(self, *args: Any) -> bool:
        if self.stream is None:
            return False
        if self.dst_prev_stream is not None:
            set_stream(self.dst_prev_stream)
        if self.device_ctx is not None:
            self.device_ctx.__exit__(*args)
        if self.src_prev_stream is not None:
            set_stream(self.src_prev_stream)
        return False


def stream(stream: Stream | None) -> StreamContext:
    """``with torch.infini.stream(s):`` runs the block with ``s`` current."""
    return StreamContext(stream)
