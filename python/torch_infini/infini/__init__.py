"""torch.infini: the infini device API, named and behaving like torch.cuda."""

from __future__ import annotations

from . import memory
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
from .memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_stats_as_nested_dict,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_peak_memory_stats,
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
    "empty_cache",
    "get_device_name",
    "initial_seed",
    "init",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
    "set_device",
    "set_stream",
    "stream",
    "synchronize",
]
