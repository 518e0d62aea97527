"""Sizes and device indices from untrusted Python values.

A byte count above INT64_MAX (a negative size seen as unsigned) once wrapped
the caching allocator's rounding to a 0-byte block that a resize then wrote
4 KiB into; a device index of 256 once narrowed to device 0. Each is
refused with the error the CPU (sizes) or torch.cuda (device indices)
raises, and leaves memory as it was. Cases that corrupted memory run in a
subprocess, so a regression fails a test instead of the pytest worker.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal, describe, run_python

DEVICE = torch.device("infini", 0)

# (Below -2^62 a size is no plain integer to PyTorch's SymInt: the CPU and
# infini alike then make a storage without allocating anything.)
NEGATIVE_BYTES = [-1, -4096, -(1 << 21), -(1 << 61)]


@pytest.mark.parametrize("nbytes", NEGATIVE_BYTES)
def test_storage_of_a_negative_size_is_refused(nbytes: int) -> None:
    with pytest.raises(RuntimeError) as cpu:
        torch.UntypedStorage(nbytes)
    with pytest.raises(RuntimeError) as dev:
        torch.UntypedStorage(nbytes, device=DEVICE)
    assert type(dev.value) is type(cpu.value) is RuntimeError
    assert "negative number" in str(dev.value)


@pytest.mark.parametrize("nbytes", NEGATIVE_BYTES)
def test_storage_resize_to_a_negative_size_is_refused(nbytes: int) -> None:
    t = torch.ones(1024, device=DEVICE)
    storage = t.untyped_storage()
    with pytest.raises(RuntimeError) as cpu:
        torch.ones(1024).untyped_storage().resize_(nbytes)
    with pytest.raises(RuntimeError) as dev:
        storage.resize_(nbytes)
    assert type(dev.value) is type(cpu.value) is RuntimeError
    assert "negative number" in str(dev.value)
    assert storage.nbytes() == 4096  # unchanged
    assert_bitwise_equal(t.cpu(), torch.ones(1024))


def test_the_reported_out_of_bounds_write_cannot_happen() -> None:
    """resize_(-1), then set_ over 64 KiB and fill_: once overwrote later tensors."""
    proc = run_python(
        """
import torch, torch_infini
s = torch.ones(1024, device="infini").untyped_storage()
try:
    s.resize_(-1)
except RuntimeError as e:
    print("refused:", type(e).__name__)
print("nbytes", s.nbytes())
try:
    torch.empty(0, device="infini").set_(s, 0, (1 << 14,), (1,)).fill_(7.0)
except RuntimeError as e:
    print("set_ refused")
z = torch.zeros(1024, device="infini")
print("zeros ok", bool((z.cpu() == 0).all()))
"""
    )
    assert proc.returncode == 0, describe(proc)
    assert "refused: RuntimeError" in proc.stdout, describe(proc)
    assert "nbytes 4096" in proc.stdout and "set_ refused" in proc.stdout, describe(proc)
    assert "zeros ok True" in proc.stdout, describe(proc)


@pytest.mark.parametrize(
    "make",
    [
        lambda d: torch.empty(-1, device=d),
        lambda d: torch.empty((1 << 62, 4), device=d),
        lambda d: torch.empty((1 << 40, 1 << 40), device=d),
        lambda d: torch.ones(2, device=d).new_empty((-3, 2)),
        lambda d: torch.ones(2, device=d).new_empty((1 << 62, 8)),
        lambda d: torch.ones(2, device=d).resize_(-1),
        lambda d: torch.ones(2, device=d).resize_((1 << 62, 4)),
        lambda d: torch.empty_strided((2, 2), (1 << 62, 1), device=d),
    ],
    ids=[
        "empty -1",
        "empty overflow",
        "empty 2^80",
        "new_empty -3",
        "new_empty overflow",
        "resize_ -1",
        "resize_ overflow",
        "empty_strided overflow",
    ],
)
def test_negative_and_overflowing_tensor_sizes_are_refused_as_on_the_cpu(
    make: Callable[[torch.device | str], torch.Tensor],
) -> None:
    with pytest.raises(RuntimeError) as cpu:
        make("cpu")
    torch.infini.reset_peak_memory_stats()
    before = torch.infini.memory_allocated()
    with pytest.raises(RuntimeError) as dev:
        make(DEVICE)
    assert type(dev.value) is type(cpu.value), (cpu.value, dev.value)
    assert torch.infini.max_memory_allocated() - before <= 512  # nothing large was taken


@pytest.mark.parametrize("nbytes", [-1, -(1 << 40)])
def test_pinned_memory_of_a_negative_size_is_refused(nbytes: int) -> None:
    with pytest.raises(RuntimeError):
        torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    with pytest.raises(RuntimeError):
        torch.UntypedStorage(nbytes).pin_memory(DEVICE)


def test_pinned_memory_too_large_for_the_host_is_out_of_memory() -> None:
    """A size below 2^63 that no host can pin: OutOfMemoryError, and no
    endless size-class search."""
    proc = run_python(
        """
import torch, torch_infini
try:
    torch.empty(1 << 62, dtype=torch.uint8, pin_memory=True, device="cpu")
except torch.OutOfMemoryError:
    print("oom")
except RuntimeError as e:
    print("runtime error:", e)
""",
        timeout=60,
    )
    assert proc.returncode == 0, describe(proc)
    assert "oom" in proc.stdout or "runtime error" in proc.stdout, describe(proc)


BAD_DEVICES = [256, 257, 1 << 31, (1 << 63) - 1, -2]


def _calls() -> dict[str, Callable[[int], object]]:
    infini = torch.infini
    return {
        "memory_stats": lambda d: torch_infini._C._memory_stats(d),
        "reset_peak_memory_stats": lambda d: torch_infini._C._reset_peak_memory_stats(d),
        "reset_accumulated_memory_stats": lambda d: torch_infini._C._reset_accumulated_memory_stats(
            d
        ),
        "synchronize": lambda d: torch_infini._C._synchronize(d),
        "set_device": lambda d: torch_infini._C._set_device(d),
        "get_device_name": lambda d: torch_infini._C._get_device_name(d),
        "mem_get_info": lambda d: torch_infini._C._mem_get_info(d),
        "current_stream": lambda d: torch_infini._C._current_stream(d),
        "default_stream": lambda d: torch_infini._C._default_stream(d),
        "exchange_stream": lambda d: torch_infini._C._exchange_stream(0, d),
        "stream_native_handle": lambda d: torch_infini._C._stream_native_handle(0, d),
        "rng_manual_seed": lambda d: torch_infini._C._rng_manual_seed(d, 1),
        "rng_get_state": lambda d: torch_infini._C._rng_get_state(d),
        "public memory_stats": lambda d: infini.memory_stats(d),
        "public max_memory_allocated": lambda d: infini.max_memory_allocated(d),
        "public current_stream": lambda d: infini.current_stream(d),
    }


# Memory statistics raise RuntimeError for an invalid device, as CUDA's do
# ("Invalid device argument"); every other call torch.AcceleratorError, as
# CUDA's "invalid device ordinal".
STATISTICS = {
    "memory_stats",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "public memory_stats",
    "public max_memory_allocated",
}


@pytest.mark.parametrize("index", BAD_DEVICES)
@pytest.mark.parametrize("call", sorted(_calls()))
def test_bad_device_indices_raise_as_torch_cuda_does(call: str, index: int) -> None:
    """Never device 0's answer (an index narrowed to 8 bits)."""
    if call in STATISTICS:
        with pytest.raises(RuntimeError, match="Invalid device argument") as info:
            _calls()[call](index)
        assert type(info.value) is RuntimeError
    else:
        with pytest.raises(torch.AcceleratorError, match="invalid device ordinal"):
            _calls()[call](index)


def test_stream_exchange_with_device_256_leaves_device_0_alone() -> None:
    side = torch.infini.Stream()
    with torch.infini.stream(side):
        with pytest.raises(torch.AcceleratorError):
            torch_infini._C._exchange_stream(0, 256)
        assert torch.infini.current_stream() == side
    assert torch.infini.current_stream() == torch.infini.default_stream()


def test_memory_stats_of_device_256_are_not_device_0s() -> None:
    keep = torch.ones(1 << 16, device=DEVICE)
    assert torch.infini.memory_stats(0)["allocated_bytes.all.current"] >= keep.numel() * 4
    with pytest.raises(RuntimeError, match="Invalid device argument 256"):
        torch.infini.memory_stats(256)
