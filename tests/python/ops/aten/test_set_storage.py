"""Tensor.set_ and kernels that replace a tensor's storage, against the CPU.

``set_()`` detaches a tensor from its storage; the ``set_(storage, ...)``
forms point it at a storage, which must already hold the geometry (only
``resize_`` grows a storage: a checkpoint whose storage is shorter than its
tensor must not read freed device memory). A kernel run by the CPU fallback
that gives its argument another storage must leave the infini tensor with
that result and the fallback's reused CPU aliases consistent.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy
import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal, describe, forced_staging, run_python

DEVICE = torch.device("infini", 0)


def test_set_without_arguments_detaches_as_on_the_cpu() -> None:
    results = {}
    for device in ("cpu", DEVICE):
        b = torch.arange(8.0, device=device)
        x = b[:4]
        x.set_()
        assert x.shape == (0,) and x.untyped_storage().nbytes() == 0
        assert x.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
        x.resize_(4).fill_(1)  # grows its own storage, never b's
        results[str(device)] = (b.cpu(), x.cpu(), x.stride(), x.storage_offset())
    cpu, dev = results["cpu"], results[str(DEVICE)]
    assert_bitwise_equal(dev[0], cpu[0])
    assert_bitwise_equal(dev[1], cpu[1])
    assert dev[2:] == cpu[2:]


def test_out_calls_after_set_work() -> None:
    """The fallback's per-thread CPU aliases stay usable after set_()."""
    b = torch.arange(8.0, device=DEVICE)
    b[:4].set_()
    a = torch.rand(5)
    with torch_infini.cpu_fallback.allowed("silent"):
        for _ in range(20):  # more calls than the alias pool holds
            out = torch.empty(5, device=DEVICE)
            torch.atan2(a.to(DEVICE), a.to(DEVICE) + 1, out=out)
            assert_bitwise_equal(out.cpu(), torch.atan2(a, a + 1))
    assert "tensor" in repr(out)


@pytest.mark.parametrize(
    "case",
    [
        ("shorter storage", (16,), (1,), 0),
        ("offset past the end", (2,), (1,), 1),
        ("strided past the end", (2,), (2,), 0),
    ],
)
def test_set_outside_the_storage_is_refused_as_on_the_cpu(case: tuple) -> None:
    _, size, stride, offset = case
    messages = {}
    for device in ("cpu", DEVICE):
        storage = torch.zeros(2, device=device).untyped_storage()  # 8 bytes
        # On the CPU, a storage that cannot grow, as a loaded checkpoint's
        # (the CPU's set_ grows a resizable one; infini's never does).
        if device == "cpu":
            storage = torch.from_numpy(numpy.zeros(2, numpy.float32)).untyped_storage()
        t = torch.empty(0, device=device)
        with pytest.raises(RuntimeError) as info:
            t.set_(storage, offset, size, stride)
        assert type(info.value) is RuntimeError
        if device == DEVICE:  # (the CPU's set_ changes the tensor before it fails)
            assert t.shape == (0,), "a refused set_ changes nothing"
        messages[str(device)] = str(info.value)
    assert "out of bounds for storage of size 8" in messages[str(DEVICE)], messages
    assert storage.nbytes() == 8


def test_set_inside_the_storage_is_a_view_of_it() -> None:
    base = torch.arange(6.0)
    dev_base = base.to(DEVICE)
    for size, stride, offset in [((3,), (2,), 0), ((2, 2), (1, 2), 1), ((0,), (1,), 100)]:
        t = torch.empty(0, device=DEVICE).set_(dev_base.untyped_storage(), offset, size, stride)
        c = torch.empty(0).set_(base.untyped_storage(), offset, size, stride)
        assert t.stride() == c.stride() and t.storage_offset() == c.storage_offset()
        assert t.untyped_storage().data_ptr() == dev_base.untyped_storage().data_ptr()
        assert_bitwise_equal(t.cpu(), c)
        assert dev_base.untyped_storage().nbytes() == 24


def _crafted_checkpoint(path, size: int, storage_class: bytes = b"FloatStorage"):  # type: ignore[no-untyped-def]
    """A weights_only checkpoint of a 2-float storage (8 bytes) whose tensor
    claims `size` elements, its storage named `storage_class`."""
    import zipfile

    good = path.parent / "good.pt"
    torch.save(torch.arange(2.0), good)
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.endswith("data.pkl"):
                # The size tuple (2,) pickles as BININT1 2, TUPLE1.
                assert data.count(b"K\x02\x85") == 1, data
                packed = b"K" + bytes([size]) if size < 256 else b"J" + size.to_bytes(4, "little")
                data = data.replace(b"K\x02\x85", packed + b"\x85")
                data = data.replace(b"FloatStorage", storage_class)
            dst.writestr(item, data)
    return path


@pytest.mark.parametrize(
    "size, storage_class",
    [(16, b"FloatStorage"), (1 << 30, b"FloatStorage"), (2, b"DoubleStorage")],
    ids=["short storage", "huge declared size", "wrong dtype"],
)
def test_malformed_checkpoints_are_refused_as_on_the_cpu(tmp_path, size, storage_class) -> None:  # type: ignore[no-untyped-def]
    path = _crafted_checkpoint(tmp_path / "crafted.pt", size, storage_class)
    with pytest.raises(RuntimeError) as cpu:
        torch.load(path, weights_only=True, map_location="cpu")
    torch.infini.reset_peak_memory_stats()
    before = torch.infini.memory_allocated()
    with pytest.raises(RuntimeError) as dev:
        torch.load(path, weights_only=True, map_location=DEVICE)
    assert type(dev.value) is type(cpu.value) is RuntimeError, (cpu.value, dev.value)
    if size != 2:  # a tensor larger than its storage: infini checks the bounds
        assert "out of bounds for storage of size 8" in str(dev.value)
    # No large allocation was made for the claimed size.
    assert torch.infini.max_memory_allocated() - before < 1 << 20


def test_a_well_formed_checkpoint_loads_on_infini(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "ok.pt"
    state = {"w": torch.randn(3, 4), "view": torch.arange(10.0)[2:7:2]}
    torch.save(state, path)
    loaded = torch.load(path, weights_only=True, map_location=DEVICE)
    for key, expected in state.items():
        assert loaded[key].device == DEVICE
        assert loaded[key].stride() == expected.stride()
        assert loaded[key].storage_offset() == expected.storage_offset()
        assert_bitwise_equal(loaded[key].cpu(), expected)


# A custom operator whose CPU kernel gives its argument a new storage, as
# set_ does: it has no infini kernel, so it runs in the CPU fallback.
_lib = torch.library.Library("infini_test_set_storage", "DEF")
_lib.define("replace_storage(Tensor(a!) self, Tensor source) -> ()")
_lib.define("share_storage(Tensor(a!) self, Tensor(b) source) -> ()")


def _replace_storage(self: torch.Tensor, source: torch.Tensor) -> None:
    self.set_(source.clone())


def _share_storage(self: torch.Tensor, source: torch.Tensor) -> None:
    self.set_(source)


_lib.impl("replace_storage", _replace_storage, "CPU")
_lib.impl("share_storage", _share_storage, "CPU")


@pytest.fixture(params=["in place", "staged"])
def _silent(request: pytest.FixtureRequest) -> Iterator[None]:
    """The fallback silent, in place (where memory is host memory) and
    staged through pinned memory (as on an accelerator; forced here)."""
    with (
        torch_infini.cpu_fallback.allowed("silent"),
        forced_staging(request.param == "staged"),
    ):
        yield


def test_a_fallback_kernel_that_replaces_the_storage(_silent: None) -> None:
    b = torch.arange(8.0, device=DEVICE)
    x = b[2:6]
    source = torch.full((3, 2), 5.0)
    torch.ops.infini_test_set_storage.replace_storage(x, source.to(DEVICE))
    assert x.device == DEVICE and x.shape == (3, 2) and x.stride() == (2, 1)
    assert x.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    assert_bitwise_equal(x.cpu(), source)
    x.fill_(7.0)
    assert_bitwise_equal(b.cpu(), torch.arange(8.0))  # b untouched
    # Later calls on this thread (the alias pool) still compute right.
    for _ in range(20):
        out = torch.empty(4, device=DEVICE)
        torch.atan2(b[:4], b[4:], out=out)
        assert_bitwise_equal(out.cpu(), torch.atan2(torch.arange(4.0), torch.arange(4.0, 8.0)))


def test_a_fallback_kernel_that_shares_another_arguments_storage(_silent: None) -> None:
    src = torch.arange(6.0, device=DEVICE)
    x = torch.zeros(2, device=DEVICE)
    torch.ops.infini_test_set_storage.share_storage(x, src[1:5])
    assert x.untyped_storage().data_ptr() == src.untyped_storage().data_ptr()
    assert x.storage_offset() == 1 and x.shape == (4,)
    x.fill_(9.0)  # writes src, as on the CPU
    assert_bitwise_equal(src.cpu(), torch.tensor([0.0, 9, 9, 9, 9, 5]))


def test_set_and_print_in_a_fresh_process() -> None:
    """The reported crash: set_, resize_, fill_, then an out= call, then print."""
    proc = run_python(
        """
import torch, torch_infini
torch_infini.cpu_fallback.set_mode("silent")
b = torch.arange(8., device="infini")
x = b[:4]
x.set_()
x.resize_(4).fill_(1)
y = torch.empty(3, device="infini")
torch.atan2(torch.ones(3, device="infini"), torch.ones(3, device="infini"), out=y)
print(b.cpu().tolist(), y)
"""
    )
    assert proc.returncode == 0, describe(proc)
    assert "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]" in proc.stdout, describe(proc)
