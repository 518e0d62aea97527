"""Sizes, offsets and device indices from untrusted Python values and files.

A byte count above INT64_MAX (a negative size seen as unsigned) once wrapped
the caching allocator's rounding to a 0-byte block that a resize then wrote
4 KiB into; a device index of 256 once narrowed to device 0; a storage
offset whose byte count wrapped negative (2^61 floats) once passed set_'s
bounds check, so a crafted checkpoint read and wrote other tensors' memory;
"infini:128" (an int8 index of -128) once meant the current device; a
failed resize_ once left a tensor larger than its storage. Each is refused
with the error the CPU (sizes, offsets) or torch.cuda (device indices)
raises, and leaves memory and the tensor as they were. Cases that corrupted
memory run in a subprocess, so a regression fails a test instead of the
pytest worker. tests/python/security/test_untrusted_fuzz.py draws many more.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch_infini
from checkpoints import crafted
from infini_testing import assert_bitwise_equal, describe, forced_staging, run_python

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


# Offsets at the edges of int64 arithmetic: times an element size of 2 to 16
# they wrap (2^61 * 8 = 0, (2^62 - 3) * 4 = -12 modulo 2^64), and the
# largest offset PyTorch takes.
CRAFTED_OFFSETS = [1 << 61, (1 << 62) - 1, (1 << 62) - 3, 1 << 62, (1 << 63) - 1]
# Every element size: 1, 2, 4, 8, 16 bytes.
ELEMENT_SIZES = [torch.uint8, torch.float16, torch.float32, torch.float64, torch.complex128]


def _overflow_refused(call: Callable[[str], object]) -> None:
    """`call` raises on the CPU and on infini alike: the CPU's RuntimeError."""
    with pytest.raises(RuntimeError) as cpu:
        call("cpu")
    with pytest.raises(RuntimeError) as dev:
        call(DEVICE)
    assert type(dev.value) is type(cpu.value) is RuntimeError, (cpu.value, dev.value)
    # Past int64: "Storage size calculation overflowed"; else out of bounds
    # (the CPU says it cannot grow the storage).
    assert "overflowed" in str(dev.value) or "out of bounds" in str(dev.value), dev.value
    assert any(m in str(cpu.value) for m in ("overflowed", "out of bounds", "not resizable"))


def _source(dtype: torch.dtype, device: str | torch.device) -> torch.UntypedStorage:
    """Four zeros' storage; on the CPU one that cannot grow, as a loaded
    checkpoint's (the CPU's set_ grows a resizable storage; infini's never does)."""
    if device == "cpu":
        itemsize = torch.empty(0, dtype=dtype).element_size()
        return torch.frombuffer(bytearray(4 * itemsize), dtype=dtype).untyped_storage()
    return torch.zeros(4, dtype=dtype, device=device).untyped_storage()


@pytest.mark.parametrize("dtype", ELEMENT_SIZES, ids=str)
@pytest.mark.parametrize("offset", CRAFTED_OFFSETS)
def test_set_with_an_overflowing_offset_is_refused_and_changes_nothing(
    offset: int, dtype: torch.dtype
) -> None:
    def call(device: str | torch.device) -> object:
        return torch.empty(0, dtype=dtype, device=device).set_(
            _source(dtype, device), offset, (1,), (1,)
        )

    _overflow_refused(call)
    t = torch.empty(0, dtype=dtype, device=DEVICE)
    with pytest.raises(RuntimeError):
        t.set_(torch.zeros(4, dtype=dtype, device=DEVICE).untyped_storage(), offset, (1,), (1,))
    assert t.shape == (0,) and t.storage_offset() == 0 and t.untyped_storage().nbytes() == 0


@pytest.mark.parametrize("dtype", ELEMENT_SIZES, ids=str)
@pytest.mark.parametrize("offset", CRAFTED_OFFSETS)
def test_as_strided_with_an_overflowing_offset_is_refused(offset: int, dtype: torch.dtype) -> None:
    _overflow_refused(
        lambda device: torch.zeros(4, dtype=dtype, device=device).as_strided((1,), (1,), offset)
    )


@pytest.mark.parametrize("dtype", ELEMENT_SIZES, ids=str)
@pytest.mark.parametrize("offset", CRAFTED_OFFSETS)
def test_a_checkpoint_with_an_overflowing_offset_is_refused(
    offset: int, dtype: torch.dtype
) -> None:
    import io

    data = crafted(dtype, offset, (1,), (1,), bytes(64))
    _overflow_refused(
        lambda device: torch.load(io.BytesIO(data), weights_only=True, map_location=device)
    )


def test_the_reported_checkpoint_cannot_reach_other_tensors() -> None:
    """The audit's case, in a fresh process: an offset of 2^62 - k floats
    over a 16-byte storage, loaded with weights_only=True, then read and
    filled; a neighbour tensor must keep its values."""
    here = str(Path(__file__).parent)
    proc = run_python(
        f"""
import io, sys, torch, torch_infini
sys.path.insert(0, {here!r})
from checkpoints import crafted
neighbour = torch.arange(1024.0, device="infini")
for k in (1, 2, 3, 4, 1024):
    data = crafted(torch.float32, (1 << 62) - k, (4,), (1,), bytes(16))
    try:
        t = torch.load(io.BytesIO(data), weights_only=True, map_location="infini")
    except RuntimeError as error:
        print("refused", k, "overflowed" in str(error))
        continue
    print("loaded", k, t.cpu())
    t.fill_(-1.0)
print("neighbour intact", bool((neighbour.cpu() == torch.arange(1024.0)).all()))
"""
    )
    assert proc.returncode == 0, describe(proc)
    assert "loaded" not in proc.stdout, describe(proc)
    for k in (1, 2, 3, 4, 1024):  # refused as overflowing, as the CPU refuses it
        assert f"refused {k} True" in proc.stdout, describe(proc)
    assert "neighbour intact True" in proc.stdout, describe(proc)


def test_the_staged_fallback_takes_an_empty_view_at_any_offset() -> None:
    """A tensor without elements may carry any offset (the CPU accepts 2^62
    - 1); staged beside a view of the same storage that has elements, its
    offset is never turned into a byte count (it once wrapped, and the call
    failed where the CPU's succeeds)."""
    results = {}
    for device in ("cpu", DEVICE):
        base = torch.arange(4.0).to(device)
        empty = torch.empty(0, device=device).set_(
            base.untyped_storage(), (1 << 62) - 1, (0,), (1,)
        )
        with forced_staging(device != "cpu"), torch_infini.cpu_fallback.allowed("silent"):
            results[str(device)] = torch.atan2(base[:1], empty)
    cpu, dev = results["cpu"], results[str(DEVICE)]
    assert dev.shape == cpu.shape == (0,) and dev.stride() == cpu.stride()
    assert dev.device == DEVICE


RESIZE_FAILURES = {
    # bytes no allocator has (torch.OutOfMemoryError on infini)
    "out of memory": ((1 << 50,), torch.OutOfMemoryError),
    # a byte count past int64 (the CPU's RuntimeError)
    "overflow": ((1 << 62, 4), RuntimeError),
}


@pytest.mark.parametrize("case", sorted(RESIZE_FAILURES))
@pytest.mark.parametrize("layout", ["contiguous", "transposed view", "offset view"])
def test_a_failed_resize_leaves_the_tensor_as_it_was(case: str, layout: str) -> None:
    """The CPU and CUDA set the new sizes before they allocate, leaving a
    tensor larger than its storage (reading it segfaults); infini checks and
    allocates first."""
    size, error = RESIZE_FAILURES[case]
    base_cpu = torch.arange(12.0).reshape(3, 4)
    base = base_cpu.to(DEVICE)
    t = {"contiguous": base, "transposed view": base.t(), "offset view": base[1:]}[layout]
    expected = {
        "contiguous": base_cpu,
        "transposed view": base_cpu.t(),
        "offset view": base_cpu[1:],
    }
    before = (t.shape, t.stride(), t.storage_offset(), t.untyped_storage().data_ptr())
    with pytest.raises(error) as info:
        t.resize_(size)
    assert type(info.value) is error, info.value
    after = (t.shape, t.stride(), t.storage_offset(), t.untyped_storage().data_ptr())
    assert after == before
    assert base.untyped_storage().nbytes() == 48
    assert_bitwise_equal(t.cpu(), expected[layout])


# "infini:128" ... "infini:254": PyTorch keeps a device index in an int8.
WRAPPING_DEVICES = ["infini:128", "infini:200", "infini:254"]


@pytest.mark.parametrize("device", WRAPPING_DEVICES)
@pytest.mark.parametrize(
    "make",
    [
        lambda d: torch.empty(2, device=d),
        lambda d: torch.ones(2, device=d),
        lambda d: torch.empty_strided((2,), (1,), device=d),
        lambda d: torch.zeros(2).to(d),
        lambda d: torch.Generator(device=d),
        lambda d: torch.infini.set_device(d),
        lambda d: torch.infini.current_stream(d),
        lambda d: torch.infini.synchronize(d),
    ],
    ids=[
        "empty",
        "ones",
        "empty_strided",
        "to",
        "Generator",
        "set_device",
        "current_stream",
        "synchronize",
    ],
)
def test_device_indices_that_wrap_are_refused(device: str, make: Callable[[str], object]) -> None:
    """Never the current device (an index that wrapped negative once meant it)."""
    assert torch.device(device).index < -1  # what PyTorch hands over
    allocated = torch.infini.memory_allocated(0)
    with pytest.raises(torch.AcceleratorError, match="invalid device ordinal"):
        make(device)
    assert torch.infini.memory_allocated(0) <= allocated  # nothing allocated on device 0
    assert torch.infini.current_device() == 0
