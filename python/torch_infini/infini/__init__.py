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
from ._random import _is_in_bad_fork as _is_in_bad_fork
from ._random import initial_seed, manual_seed, manual_seed_all
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
    "initial_seed",
    "init",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "mem_get_info",
    "set_device",
    "set_stream",
    "stream",
    "synchronize",
]
