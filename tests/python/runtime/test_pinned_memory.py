"""The pinned host allocator (pin_memory(), torch.infini.host_memory_stats,
empty_host_cache) and non-blocking copies through pinned memory: reuse of a
pinned block waits for the copies that read or write it."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch
from infini_testing import (
    requires_async_host,
)
from memory_rules import (
    READ_NUMEL,
    MiB,
    overlaps,
    queue_busy_work,
)

# Garbage collected and the device cache emptied after each test (conftest.py).
pytestmark = pytest.mark.usefixtures("only_new_garbage_collected", "cached_blocks_released")


# ---------------------------------------------------------------- pinned memory


@pytest.mark.parametrize("nbytes", [1, 511, 512, 513, 4096, 100_000, MiB + 1])
def test_pinned_tensors_and_reuse(nbytes: int) -> None:
    data = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=torch.Generator())
    pinned = data.pin_memory()
    assert pinned.is_pinned()
    assert not data.is_pinned()
    assert torch.equal(pinned, data)
    assert pinned[nbytes // 2 :].is_pinned()  # interior pointers too
    assert pinned.view(torch.uint8)[-1:].is_pinned()
    del pinned
    # A new tensor of the same size class (maybe the cached block): pinned, own data.
    again = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    assert again.is_pinned()
    again.fill_(7)
    assert torch.equal(again, torch.full((nbytes,), 7, dtype=torch.uint8))
    other = (data.flip(0)).pin_memory()
    assert other.is_pinned()
    assert torch.equal(other, data.flip(0))
    assert torch.equal(again, torch.full((nbytes,), 7, dtype=torch.uint8))


def test_pinned_round_trip_through_device() -> None:
    data = torch.randn(3, 1000, generator=torch.Generator().manual_seed(3))
    pinned = data.pin_memory()
    on_device = pinned.to("infini", non_blocking=True)
    back = torch.empty(3, 1000, pin_memory=True)
    back.copy_(on_device, non_blocking=True)
    torch.infini.synchronize()
    assert back.is_pinned()
    assert torch.equal(back, data)


def test_empty_host_cache_keeps_live_pinned_tensors() -> None:
    data = torch.arange(5000, dtype=torch.float64)
    live = data.pin_memory()
    cached = data.pin_memory()
    del cached
    torch.accelerator.empty_host_cache()
    assert live.is_pinned()
    assert torch.equal(live, data)
    fresh = torch.zeros(5000, dtype=torch.float64).pin_memory()
    assert fresh.is_pinned()
    assert torch.equal(fresh, torch.zeros(5000, dtype=torch.float64))
    assert torch.equal(live.to("infini").cpu(), data)


# torch.cuda.host_memory_stats' keys (its docstring lists them).
HOST_STAT_KEYS = (
    {
        f"{stat}.{kind}"
        for stat in ("allocations", "allocated_bytes", "active_requests", "active_bytes")
        for kind in ("current", "peak", "allocated", "freed")
    }
    | {
        f"{timing}.{kind}"
        for timing in ("host_alloc_time", "host_free_time")
        for kind in ("total", "max", "min", "count", "avg")
    }
    | {"num_host_alloc", "num_host_free"}
)


def test_host_memory_stats_have_torch_cuda_keys() -> None:
    stats = torch.infini.host_memory_stats()
    assert set(stats) == HOST_STAT_KEYS
    assert list(stats) == sorted(stats)
    assert all(isinstance(v, int) for v in stats.values())
    nested = torch.infini.host_memory_stats_as_nested_dict()
    assert nested["allocations"]["current"] == stats["allocations.current"]
    assert nested["host_alloc_time"]["count"] == stats["host_alloc_time.count"]


def test_host_memory_stats_count_blocks_reuse_and_release() -> None:
    """A pinned block is allocated once, reused for its size class, and
    returned by empty_host_cache: each step shows in the statistics."""
    # torch.accelerator.empty_host_cache does nothing before PyTorch has
    # initialized the device for a tensor (as for CUDA).
    torch.ones(1, device="infini")
    gc.collect()
    torch.accelerator.empty_host_cache()
    torch.infini.reset_accumulated_host_memory_stats()
    base = torch.infini.host_memory_stats()
    assert base["num_host_alloc"] == base["num_host_free"] == 0
    nbytes = 3 * MiB + 5  # a size class (4 MiB) nothing else in the test uses
    first = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    s = torch.infini.host_memory_stats()
    assert s["num_host_alloc"] == 1
    assert s["allocations.current"] == base["allocations.current"] + 1
    assert s["allocated_bytes.current"] == base["allocated_bytes.current"] + 4 * MiB
    assert s["active_requests.current"] == base["active_requests.current"] + 1
    assert s["active_bytes.current"] == base["active_bytes.current"] + 4 * MiB
    assert s["host_alloc_time.count"] == 1
    del first
    s = torch.infini.host_memory_stats()
    assert s["active_requests.current"] == base["active_requests.current"]
    assert s["allocations.current"] == base["allocations.current"] + 1  # cached
    for _ in range(3):  # the cached block serves every later request of its class
        again = torch.empty(nbytes - 100, dtype=torch.uint8, pin_memory=True)
        del again
    s = torch.infini.host_memory_stats()
    assert s["num_host_alloc"] == 1
    assert s["active_requests.allocated"] == base["active_requests.allocated"] + 4
    torch.accelerator.empty_host_cache()
    s = torch.infini.host_memory_stats()
    assert s["num_host_free"] >= 1
    assert s["allocations.current"] == 0
    assert s["allocated_bytes.current"] == 0
    assert s["host_free_time.count"] == s["num_host_free"]


def test_reset_host_memory_stats() -> None:
    held = torch.empty(5 * MiB, dtype=torch.uint8, pin_memory=True)
    torch.infini.reset_peak_host_memory_stats()
    s = torch.infini.host_memory_stats()
    assert s["allocated_bytes.peak"] == s["allocated_bytes.current"]
    assert s["active_requests.peak"] == s["active_requests.current"]
    torch.infini.reset_accumulated_host_memory_stats()
    s = torch.infini.host_memory_stats()
    assert s["num_host_alloc"] == s["num_host_free"] == 0
    assert s["allocations.allocated"] == s["allocations.freed"] == 0
    assert s["host_alloc_time.count"] == s["host_alloc_time.total"] == 0
    assert s["allocations.current"] >= 1  # the current values stay
    del held


@requires_async_host
@pytest.mark.parametrize("whole", [True, False], ids=["whole", "slice"])
def test_non_blocking_upload_survives_reuse_of_its_pinned_source(whole: bool) -> None:
    for attempt in range(5):
        oracle = torch.arange(READ_NUMEL, dtype=torch.float32) * 2 + attempt
        source = oracle.pin_memory()
        dst = torch.empty(READ_NUMEL, device="infini")
        if not whole:
            dst[:1].copy_(oracle[:1])  # blocking, before the queued work
        queue_busy_work()
        if whole:
            dst.copy_(source, non_blocking=True)  # queued behind the busy work
        else:
            dst[1:].copy_(source[1:], non_blocking=True)  # an interior pinned pointer
        done = torch.infini.current_stream().record_event()
        source_ptr, nbytes = source.data_ptr(), source.nbytes
        del source
        scratch = torch.empty(READ_NUMEL, pin_memory=True)  # the same size class
        pending = not done.query()
        scratch.fill_(-1.0)
        if pending:
            assert not overlaps(scratch.data_ptr(), source_ptr, nbytes), attempt
        torch.infini.synchronize()
        assert torch.equal(dst.cpu(), oracle), attempt
        assert torch.equal(scratch, torch.full((READ_NUMEL,), -1.0)), attempt


@requires_async_host
def test_non_blocking_download_does_not_write_into_a_reused_pinned_block() -> None:
    for attempt in range(5):
        src = (torch.arange(READ_NUMEL, dtype=torch.float32) + attempt).to("infini")
        queue_busy_work()
        landing = torch.empty(READ_NUMEL, pin_memory=True)
        landing.copy_(src, non_blocking=True)  # queued behind the busy work
        done = torch.infini.current_stream().record_event()
        landing_ptr, nbytes = landing.data_ptr(), landing.nbytes
        del landing  # the result is dropped, but the queued copy still writes there
        scratch = torch.empty(READ_NUMEL, pin_memory=True)
        pending = not done.query()
        scratch.fill_(-1.0)
        if pending:
            assert not overlaps(scratch.data_ptr(), landing_ptr, nbytes), attempt
        torch.infini.synchronize()
        assert torch.equal(scratch, torch.full((READ_NUMEL,), -1.0)), attempt


# Aliases of pinned memory: tensors whose storage is not the pinned
# allocator's DataPtr (or is, through a view), but whose data lies inside a
# pinned block. CUDA's caching host allocator finds such a block by address.
PINNED_ALIASES: dict[str, Any] = {
    "from_dlpack": lambda base: torch.from_dlpack(base),
    "from_dlpack_interior": lambda base: torch.from_dlpack(base[16:]),
    "from_numpy": lambda base: torch.from_numpy(base.numpy()),
    "frombuffer": lambda base: torch.frombuffer(base.numpy(), dtype=base.dtype),
    "slice": lambda base: base[16:],
    "set_storage": lambda base: torch.Tensor().set_(base.untyped_storage()),
    "as_strided": lambda base: base.as_strided((base.numel() - 16,), (1,), 16),
    "view_dtype": lambda base: base.view(torch.int32).view(torch.float32),
}


@requires_async_host
@pytest.mark.parametrize("alias", sorted(PINNED_ALIASES))
def test_non_blocking_download_into_an_alias_of_pinned_memory(alias: str) -> None:
    """The pinned block under an alias is not reused while the copy into it is
    in flight: an unrelated pinned tensor allocated after the alias (and its
    base) died must keep its own values (issue 10, defect 6)."""
    make = PINNED_ALIASES[alias]
    for attempt in range(3):
        src = torch.full((READ_NUMEL,), 5.0 + attempt, device="infini")
        base = torch.empty(READ_NUMEL, pin_memory=True)
        view = make(base)
        queue_busy_work()
        view.copy_(src[: view.numel()], non_blocking=True)  # queued behind the busy work
        del view, base
        other = torch.empty(READ_NUMEL, pin_memory=True).fill_(-1.0)  # same size class
        torch.infini.synchronize()
        assert torch.equal(other, torch.full((READ_NUMEL,), -1.0)), attempt


@requires_async_host
@pytest.mark.parametrize("alias", sorted(PINNED_ALIASES))
def test_non_blocking_upload_from_an_alias_of_pinned_memory(alias: str) -> None:
    """The upload reads the alias's values, even when the pinned block is
    handed out again (and overwritten) before the queued copy ran."""
    make = PINNED_ALIASES[alias]
    for attempt in range(3):
        oracle = torch.arange(READ_NUMEL, dtype=torch.float32) * 3 + attempt
        base = oracle.pin_memory()
        view = make(base)
        expected = view.clone()
        dst = torch.empty(view.numel(), device="infini")
        queue_busy_work()
        dst.copy_(view, non_blocking=True)  # queued behind the busy work
        del view, base
        scratch = torch.empty(READ_NUMEL, pin_memory=True).fill_(-1.0)
        torch.infini.synchronize()
        assert torch.equal(dst.cpu(), expected), attempt
        assert torch.equal(scratch, torch.full((READ_NUMEL,), -1.0)), attempt


@pytest.mark.parametrize("alias", sorted(PINNED_ALIASES))
def test_non_blocking_round_trip_through_an_alias_of_pinned_memory(alias: str) -> None:
    """Values only (every configuration): the alias lands the copy and feeds
    the upload, the base sees what was written through the alias."""
    make = PINNED_ALIASES[alias]
    data = torch.randn(READ_NUMEL, generator=torch.Generator().manual_seed(5))
    base = torch.zeros(READ_NUMEL).pin_memory()
    view = make(base)
    src = data[: view.numel()].to("infini")
    view.copy_(src, non_blocking=True)
    torch.infini.synchronize()
    assert torch.equal(view, data[: view.numel()])
    back = torch.empty(view.numel(), device="infini")
    back.copy_(view, non_blocking=True)
    torch.infini.synchronize()
    assert torch.equal(back.cpu(), data[: view.numel()])
