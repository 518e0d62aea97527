"""The caching allocator's rules and statistics helpers shared by the memory
tests (test_memory.py, test_record_stream.py, test_pinned_memory.py): the
sizes it rounds to and the segments it takes (native/runtime/src/memory/
caching_allocator.cpp, which follows CUDA's allocator), and baselines and
deltas of torch.infini.memory_stats()."""

from __future__ import annotations

import gc

import torch

MiB = 1 << 20

MIN_BLOCK = 512
SMALL_SIZE = 1 * MiB
SMALL_SEGMENT = 2 * MiB
LARGE_SEGMENT = 20 * MiB
MIN_LARGE_ALLOC = 10 * MiB
ROUND_LARGE = 2 * MiB

STAT_ARRAYS = [
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
]
POOLS = ["all", "small_pool", "large_pool"]
FIELDS = ["current", "peak", "allocated", "freed"]
COUNTERS = [
    "num_alloc_retries",
    "num_ooms",
    "num_sync_all_streams",
    "num_device_alloc",
    "num_device_free",
]


# ---------------------------------------------------------------- the rules


def round_size(nbytes: int) -> int:
    return max(MIN_BLOCK, -(-nbytes // MIN_BLOCK) * MIN_BLOCK)


def segment_size(rounded: int) -> int:
    if rounded <= SMALL_SIZE:
        return SMALL_SEGMENT
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-rounded // ROUND_LARGE) * ROUND_LARGE


def pool_of(nbytes: int) -> str:
    return "small_pool" if round_size(nbytes) <= SMALL_SIZE else "large_pool"


def fresh_block(nbytes: int) -> tuple[int, int, int]:
    """(block size, segment size, free split remainder) of a request served by a new segment."""
    size = round_size(nbytes)
    segment = segment_size(size)
    remainder = segment - size
    worth_splitting = MIN_BLOCK if size <= SMALL_SIZE else SMALL_SIZE + 1
    if remainder >= worth_splitting:
        return size, segment, remainder
    return segment, segment, 0


# ---------------------------------------------------------------- stats helpers


def stats(device: int | None = None) -> dict[str, int]:
    return {key: int(value) for key, value in torch.infini.memory_stats(device).items()}


def clean_baseline(device: int | None = None, strict: bool = True) -> dict[str, int]:
    """Statistics after every cached block went back to the device.

    With ``strict``, also checks that no free piece of memory is left in any
    pool (only live tensors of earlier tests may hold segments, and those are
    fully used), so the next request of any size is served by a new segment.
    """
    gc.collect()
    for index in range(torch.infini.device_count()):
        torch.infini.synchronize(index)
    torch.infini.empty_cache()
    base = stats(device)
    assert not strict or base["inactive_split_bytes.all.current"] == 0, (
        "after empty_cache() a free piece of a split segment is still cached: a tensor an "
        "earlier test left alive keeps that segment"
    )
    return base


def current_deltas(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Non-zero changes of the ``.current`` statistics."""
    return {
        key.removesuffix(".current"): after[key] - before[key]
        for key in after
        if key.endswith(".current") and after[key] != before[key]
    }


def expected_current(pool: str, **deltas: int) -> dict[str, int]:
    """``allocation=1`` -> {"allocation.all": 1, "allocation.<pool>": 1} (zeros dropped)."""
    result: dict[str, int] = {}
    for name, delta in deltas.items():
        if delta != 0:
            result[f"{name}.all"] = delta
            result[f"{name}.{pool}"] = delta
    return result


def counter_deltas(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in COUNTERS}


def counters(
    alloc: int = 0, free: int = 0, retries: int = 0, ooms: int = 0, syncs: int = 0
) -> dict[str, int]:
    return {
        "num_alloc_retries": retries,
        "num_ooms": ooms,
        "num_sync_all_streams": syncs,
        "num_device_alloc": alloc,
        "num_device_free": free,
    }


def empty_bytes(nbytes: int, device: str = "infini") -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def overlaps(ptr_a: int, ptr_b: int, nbytes: int) -> bool:
    return abs(ptr_a - ptr_b) < nbytes


# Streams kept busy, so that work queued after is still pending when a test
# looks (the record_stream and non-blocking copy tests).
BUSY = 1024  # a 1024x1024 mm takes milliseconds on the host device's worker thread
READ_NUMEL = MiB  # float32: a 4 MiB large-pool block


def queue_busy_work(times: int = 8) -> None:
    """Queues `times` matrix products on the current stream, keeping it busy."""
    a = torch.full((BUSY, BUSY), 1e-3, device="infini")
    for _ in range(times):
        torch.mm(a, a)
