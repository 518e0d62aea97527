"""Memory statistics and cache control of torch.infini, as torch.cuda's.

The caching allocator keeps freed blocks for reuse; these functions report
what it holds with torch.cuda.memory_stats' key names and meanings.
"""

from __future__ import annotations

import collections
from typing import Any

from .. import _C
from ._device import DeviceLike, _get_device_index


def memory_stats_as_nested_dict(device: DeviceLike = None) -> dict[str, Any]:
    """The allocator's statistics for ``device`` as a nested dict."""
    return dict(_C._memory_stats(_get_device_index(device, optional=True)))


def memory_stats(device: DeviceLike = None) -> dict[str, Any]:
    """Flattened statistics: ``"allocated_bytes.all.current"`` and so on."""
    result: list[tuple[str, Any]] = []

    def flatten(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            if prefix:
                prefix += "."
            for key, value in obj.items():
                flatten(prefix + key, value)
        else:
            result.append((prefix, obj))

    flatten("", memory_stats_as_nested_dict(device))
    result.sort()
    return collections.OrderedDict(result)


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes occupied by tensors on ``device``."""
    return int(memory_stats(device).get("allocated_bytes.all.current", 0))


def max_memory_allocated(device: DeviceLike = None) -> int:
    """Peak of memory_allocated since start or the last reset_peak_memory_stats."""
    return int(memory_stats(device).get("allocated_bytes.all.peak", 0))


def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes the caching allocator holds from the device (in use or cached)."""
    return int(memory_stats(device).get("reserved_bytes.all.current", 0))


def max_memory_reserved(device: DeviceLike = None) -> int:
    """Peak of memory_reserved since start or the last reset_peak_memory_stats."""
    return int(memory_stats(device).get("reserved_bytes.all.peak", 0))


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    """Restarts the "peak" statistics from the current values."""
    _C._reset_peak_memory_stats(_get_device_index(device, optional=True))


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    """Zeroes the "allocated"/"freed" counters and the event counts."""
    _C._reset_accumulated_memory_stats(_get_device_index(device, optional=True))


def reset_max_memory_allocated(device: DeviceLike = None) -> None:
    """Deprecated torch.cuda name: resets every peak statistic."""
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Returns every cached, unused block to the device."""
    _C._empty_cache()
