"""torch.infini device management and torch.accelerator, as torch.cuda does it."""

from __future__ import annotations

import os
import threading

import pytest
import torch
import torch_infini
from infini_testing import invalid_device_index, requires_two_devices


def test_is_available_and_device_count() -> None:
    assert torch.infini.is_available() is True
    count = torch.infini.device_count()
    assert isinstance(count, int)
    assert count >= 1


def test_device_count_follows_host_devices_env() -> None:
    if torch_infini.backend() != "host":
        # Another backend reports what its runtime sees: at least one device.
        assert torch.infini.device_count() >= 1
        return
    expected = int(os.environ.get("TORCH_INFINI_HOST_DEVICES", "1") or "1")
    assert torch.infini.device_count() == expected


def test_init_and_is_initialized() -> None:
    torch.infini.init()
    assert torch.infini.is_initialized() is True
    assert torch_infini.is_initialized() is True


def test_submodules_import_by_torch_infini_names() -> None:
    """torch.infini.random, .streams, .memory and .amp import as torch.cuda's do,
    as the modules torch.infini re-exports (not second copies)."""
    import importlib

    from torch.infini.random import manual_seed
    from torch.infini.streams import Stream

    assert manual_seed is torch.infini.manual_seed
    assert Stream is torch.infini.Stream
    for name in ("random", "streams", "memory", "amp"):
        module = importlib.import_module(f"torch.infini.{name}")
        assert module is getattr(torch.infini, name)
        assert module is importlib.import_module(f"torch_infini.infini.{name}")
        assert name in torch.infini.__all__
    assert torch.infini.memory.memory_stats is torch.infini.memory_stats
    assert torch.infini.streams.current_stream() == torch.infini.current_stream()


def test_current_device_is_valid() -> None:
    current = torch.infini.current_device()
    assert isinstance(current, int)
    assert 0 <= current < torch.infini.device_count()


@pytest.mark.parametrize("spec", [0, "infini:0", torch.device("infini", 0)])
def test_set_device_accepts_int_str_and_device(spec: object) -> None:
    torch.infini.set_device(spec)
    assert torch.infini.current_device() == 0


def test_set_device_negative_is_a_no_op() -> None:
    before = torch.infini.current_device()
    torch.infini.set_device(-1)
    assert torch.infini.current_device() == before


@requires_two_devices
def test_set_device_switches_and_new_tensors_follow() -> None:
    torch.infini.set_device(1)
    assert torch.infini.current_device() == 1
    assert torch.empty(2, device="infini").device == torch.device("infini", 1)
    assert torch.randn(2).to("infini").device == torch.device("infini", 1)
    torch.infini.set_device(0)
    assert torch.infini.current_device() == 0
    assert torch.empty(2, device="infini").device == torch.device("infini", 0)


@requires_two_devices
def test_current_device_is_per_thread() -> None:
    torch.infini.set_device(1)
    seen: list[int] = []
    worker = threading.Thread(target=lambda: seen.append(torch.infini.current_device()))
    worker.start()
    worker.join()
    assert seen == [0]  # a new thread starts on device 0, as with CUDA
    assert torch.infini.current_device() == 1


def test_set_device_rejects_other_device_types() -> None:
    with pytest.raises(ValueError, match="infini"):
        torch.infini.set_device("cpu")
    with pytest.raises(TypeError, match="1.5"):
        torch.infini.set_device(1.5)  # type: ignore[arg-type]


def test_get_device_name() -> None:
    for index in range(torch.infini.device_count()):
        name = torch.infini.get_device_name(index)
        assert isinstance(name, str)
        assert name
        assert torch.infini.get_device_name(f"infini:{index}") == name
        assert torch.infini.get_device_name(torch.device("infini", index)) == name
    assert torch.infini.get_device_name() == torch.infini.get_device_name(
        torch.infini.current_device()
    )


def test_mem_get_info() -> None:
    free, total = torch.infini.mem_get_info()
    assert isinstance(free, int) and isinstance(total, int)
    assert total > 0
    assert 0 <= free <= total


@pytest.mark.parametrize("spec", [None, 0, "infini:0", torch.device("infini", 0)])
def test_synchronize(spec: object) -> None:
    src = torch.arange(64, dtype=torch.float32)
    x = src.to("infini")
    assert torch.infini.synchronize(spec) is None
    assert torch.equal(x.cpu(), src)


def test_synchronize_every_device_after_work() -> None:
    src = torch.arange(1000, dtype=torch.float32)
    outs = []
    for index in range(torch.infini.device_count()):
        outs.append(src.to(f"infini:{index}"))
        torch.infini.synchronize(index)
    for out in outs:
        assert torch.equal(out.cpu(), src)


def test_device_context_manager_restores() -> None:
    before = torch.infini.current_device()
    with torch.infini.device(0):
        assert torch.infini.current_device() == 0
    assert torch.infini.current_device() == before


def test_device_context_manager_none_and_negative_are_no_ops() -> None:
    before = torch.infini.current_device()
    with torch.infini.device(None):
        assert torch.infini.current_device() == before
    with torch.infini.device(-1):
        assert torch.infini.current_device() == before
    assert torch.infini.current_device() == before


def test_device_context_manager_restores_after_exception() -> None:
    before = torch.infini.current_device()
    with pytest.raises(KeyError):
        with torch.infini.device(torch.infini.device_count() - 1):
            raise KeyError("boom")
    assert torch.infini.current_device() == before


@requires_two_devices
def test_device_context_manager_switches_and_nests() -> None:
    torch.infini.set_device(0)
    with torch.infini.device(1):
        assert torch.infini.current_device() == 1
        assert torch.empty(1, device="infini").device.index == 1
        with torch.infini.device("infini:0"):
            assert torch.infini.current_device() == 0
        assert torch.infini.current_device() == 1
    assert torch.infini.current_device() == 0


@requires_two_devices
def test_device_of_selects_the_tensor_device() -> None:
    x = torch.empty(3, device="infini:1")
    torch.infini.set_device(0)
    with torch.infini.device_of(x):
        assert torch.infini.current_device() == 1
    assert torch.infini.current_device() == 0


def test_device_of_infini_tensor_single_device() -> None:
    x = torch.empty(3, device="infini:0")
    with torch.infini.device_of(x):
        assert torch.infini.current_device() == 0


def test_device_of_cpu_tensor_is_a_no_op() -> None:
    before = torch.infini.current_device()
    with torch.infini.device_of(torch.empty(3)):
        assert torch.infini.current_device() == before
    assert torch.infini.current_device() == before


# ----------------------------------------------------------- invalid indices
#
# As CUDA (issue 10, defect 9): an invalid device ordinal raises
# torch.AcceleratorError (a RuntimeError, so code written for CUDA catches
# it), never IndexError.


def _assert_invalid_index(error: BaseException, index: int) -> None:
    assert type(error) is torch.AcceleratorError, f"{type(error).__name__}: {error}"
    assert isinstance(error, RuntimeError)
    assert "invalid device" in str(error).lower(), str(error)
    assert str(index) in str(error), str(error)


def test_set_device_invalid_index_raises_accelerator_error() -> None:
    bad = invalid_device_index()
    before = torch.infini.current_device()
    with pytest.raises(torch.AcceleratorError) as exc:
        torch.infini.set_device(bad)
    _assert_invalid_index(exc.value, bad)
    assert torch.infini.current_device() == before


def _enter_device(index: int) -> None:
    with torch.infini.device(index):
        pass


_INVALID_INDEX_CALLS = {
    "set_device(str)": lambda bad: torch.infini.set_device(f"infini:{bad}"),
    "set_device(torch.device)": lambda bad: torch.infini.set_device(torch.device("infini", bad)),
    "device(bad).__enter__": lambda bad: torch.infini.device(bad).__enter__(),
    "with device(bad)": _enter_device,
    "synchronize": lambda bad: torch.infini.synchronize(bad),
    "synchronize(str)": lambda bad: torch.infini.synchronize(f"infini:{bad}"),
    "mem_get_info": lambda bad: torch.infini.mem_get_info(bad),
    "Stream(device=bad)": lambda bad: torch.infini.Stream(device=bad),
    # Tensors on a bad index: test_errors.py::test_out_of_range_device_index.
}


@pytest.mark.parametrize("call", sorted(_INVALID_INDEX_CALLS))
def test_invalid_index_raises_accelerator_error(call: str) -> None:
    bad = invalid_device_index()
    before = torch.infini.current_device()
    with pytest.raises(torch.AcceleratorError) as exc:
        _INVALID_INDEX_CALLS[call](bad)
    _assert_invalid_index(exc.value, bad)
    assert torch.infini.current_device() == before


def test_get_device_name_invalid_index_raises_as_cuda() -> None:
    """torch.cuda.get_device_name(bad) goes through get_device_properties,
    which checks the index in Python and raises AssertionError("Invalid
    device id") (torch/cuda/__init__.py), before any CUDA call."""
    bad = invalid_device_index()
    with pytest.raises(AssertionError, match="(?i)invalid device") as exc:
        torch.infini.get_device_name(bad)
    assert type(exc.value) is AssertionError


@pytest.mark.parametrize("call", ["current_stream", "default_stream"])
def test_stream_lookup_invalid_index_raises_runtime_error(call: str) -> None:
    """torch.cuda.current_stream/default_stream(bad) fail a TORCH_CHECK (a
    RuntimeError) without calling CUDA: a RuntimeError or AcceleratorError,
    never IndexError or NotImplementedError."""
    bad = invalid_device_index()
    with pytest.raises(RuntimeError, match=str(bad)) as exc:
        getattr(torch.infini, call)(bad)
    assert type(exc.value) in (RuntimeError, torch.AcceleratorError), type(exc.value)
    assert 0 <= torch.infini.current_device() < torch.infini.device_count()


# ----------------------------------------------------------- torch.accelerator


def test_accelerator_is_infini() -> None:
    assert torch.accelerator.is_available()
    accelerator = torch.accelerator.current_accelerator()
    assert accelerator is not None
    assert accelerator.type == "infini"


def test_accelerator_device_count_and_index() -> None:
    assert torch.accelerator.device_count() == torch.infini.device_count()
    assert torch.accelerator.current_device_index() == torch.infini.current_device()


def test_accelerator_set_device_index() -> None:
    last = torch.infini.device_count() - 1
    torch.accelerator.set_device_index(last)
    assert torch.accelerator.current_device_index() == last
    assert torch.infini.current_device() == last
    torch.accelerator.set_device_index(0)
    assert torch.infini.current_device() == 0


def test_accelerator_set_device_index_invalid() -> None:
    bad = invalid_device_index()
    with pytest.raises(torch.AcceleratorError) as exc:
        torch.accelerator.set_device_index(bad)
    _assert_invalid_index(exc.value, bad)


@requires_two_devices
def test_accelerator_device_index_context_manager() -> None:
    torch.infini.set_device(0)
    with torch.accelerator.device_index(1):
        assert torch.infini.current_device() == 1
    assert torch.infini.current_device() == 0


def test_accelerator_synchronize() -> None:
    src = torch.arange(128, dtype=torch.float32)
    x = src.to("infini")
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(torch.infini.current_device())
    torch.accelerator.synchronize("infini:0")
    assert torch.equal(x.cpu(), src)


def test_accelerator_current_stream_is_infini_current_stream() -> None:
    stream = torch.accelerator.current_stream()
    assert stream.device.type == "infini"
    assert stream.device_index == torch.infini.current_device()
    assert stream == torch.infini.current_stream()

    pool_stream = torch.infini.Stream()
    torch.accelerator.set_stream(pool_stream)
    assert torch.accelerator.current_stream() == pool_stream
    assert torch.infini.current_stream() == pool_stream
