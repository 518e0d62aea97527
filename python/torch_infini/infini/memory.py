"""Memory statistics, cache control and memory history of torch.infini, as
torch.cuda's.

The caching allocator keeps freed blocks for reuse; these functions report
what it holds with torch.cuda.memory_stats' key names and meanings, and
``_record_memory_history`` / ``_snapshot`` record and show its events and
segments with torch.cuda.memory._snapshot's layout (so
``torch.cuda._memory_viz`` and pytorch.org/memory_viz read them).
"""

from __future__ import annotations

import collections
import pickle
import sys
from typing import Any

from .. import _C
from ._device import DeviceLike, _get_device_index


def memory_stats_as_nested_dict(device: DeviceLike = None) -> dict[str, Any]:
    """The allocator's statistics for ``device`` as a nested dict."""
    return dict(_C._memory_stats(_get_device_index(device, optional=True)))


def memory_stats(device: DeviceLike = None) -> dict[str, Any]:
    """Flattened statistics: ``"allocated_bytes.all.current"`` and so on."""
    return _flattened(memory_stats_as_nested_dict(device))


def _flattened(nested: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys, sorted: {"a": {"b": 1}} -> {"a.b": 1}."""
    result: list[tuple[str, Any]] = []

    def flatten(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            if prefix:
                prefix += "."
            for key, value in obj.items():
                flatten(prefix + key, value)
        else:
            result.append((prefix, obj))

    flatten("", nested)
    result.sort()
    return collections.OrderedDict(result)


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    """The pinned host allocator's statistics as a nested dict
    (torch.cuda.host_memory_stats_as_nested_dict's layout)."""
    return dict(_C._host_memory_stats())


def host_memory_stats() -> dict[str, Any]:
    """The pinned host allocator's statistics, flattened as
    torch.cuda.host_memory_stats: ``"allocations.current"`` (blocks held,
    in use or cached), ``"active_requests.current"`` (in use),
    ``"num_host_alloc"`` (blocks the runtime allocated: a reused block
    counts no more), ``"host_alloc_time.total"`` (microseconds), ..."""
    return _flattened(host_memory_stats_as_nested_dict())


def reset_peak_host_memory_stats() -> None:
    """Restarts the pinned allocator's "peak" statistics from the current values."""
    _C._reset_peak_host_memory_stats()


def reset_accumulated_host_memory_stats() -> None:
    """Zeroes the pinned allocator's "allocated"/"freed" counters and event counts."""
    _C._reset_accumulated_host_memory_stats()


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


_CONTEXTS = {None: 0, "state": 1, "alloc": 2, "all": 3}  # c10::RecordContext


def _record_memory_history(
    enabled: str | bool | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device: DeviceLike = None,
    clear_history: bool = False,
) -> None:
    """Records the caching allocator's history, as torch.cuda's does.

    ``enabled``: ``"all"`` keeps every allocator event (alloc, free_requested,
    free_completed, segment_alloc, segment_free, oom; the last
    ``max_entries`` per device), ``"state"`` only the stacks of live blocks,
    ``None`` stops recording. ``context``: which events get a stack
    (``"state"``: live blocks, ``"alloc"``: also allocations, ``"all"``: also
    frees, ``None``: none). ``stacks``: ``"python"`` or ``"all"`` (C++ frames
    too). Every device records (``device`` is checked, as torch.cuda accepts
    it). ``clear_history`` empties the recorded events.
    """
    if isinstance(enabled, bool):  # torch.cuda's legacy form
        enabled = "all" if enabled else None
    if enabled not in (None, "state", "all"):
        raise ValueError(
            f"_record_memory_history: enabled must be None, 'state' or 'all', got {enabled!r}"
        )
    if context not in _CONTEXTS:
        raise ValueError(
            "_record_memory_history: context must be None, 'state', 'alloc' or 'all', "
            f"got {context!r}"
        )
    if stacks not in ("python", "all"):
        raise ValueError(
            f"_record_memory_history: stacks must be 'python' or 'all', got {stacks!r}"
        )
    if not isinstance(max_entries, int) or max_entries <= 0:
        raise ValueError(
            f"_record_memory_history: max_entries must be a positive int, got {max_entries!r}"
        )
    if device is not None:
        _get_device_index(device)
    _C._record_memory_history(
        trace=enabled == "all",
        context=_CONTEXTS[context] if enabled is not None else 0,
        cpp_stacks=stacks == "all",
        max_entries=min(max_entries, sys.maxsize),
        clear=clear_history,
    )


def _snapshot(device: DeviceLike = None) -> dict[str, Any]:
    """The allocator's state: ``segments`` (every device's, each with its
    blocks and their stacks) and ``device_traces`` (each device's recorded
    events, oldest first), laid out as torch.cuda.memory._snapshot's."""
    if device is not None:
        _get_device_index(device)
    return dict(_C._memory_snapshot())


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickles ``_snapshot()`` to ``filename`` (for pytorch.org/memory_viz)."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def memory_snapshot(mempool_id: Any = None, include_traces: bool = True) -> list[dict[str, Any]]:
    """The segments of every device, as torch.cuda.memory_snapshot()
    (``include_traces`` is accepted for torch.cuda's signature: the segments
    carry no traces either way)."""
    if mempool_id is not None:
        raise NotImplementedError(
            "torch.infini.memory_snapshot: infini has no memory pools (mempool_id must be None)"
        )
    return list(_snapshot()["segments"])
