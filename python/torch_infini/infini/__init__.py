"""torch.infini: the infini device API, named and behaving like torch.cuda."""

from __future__ import annotations

from ._device import (
    current_device,
    device,
    device_count,
    device_of,
    get_device_name,
    init,
    is_available,
    is_initialized,
    mem_get_info,
    set_device,
    synchronize,
)
from ._streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "get_device_name",
    "init",
    "is_available",
    "is_initialized",
    "mem_get_info",
    "set_device",
    "set_stream",
    "stream",
    "synchronize",
]
