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
    with pytest.raises(TypeError):
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


def _assert_invalid_index(exc: pytest.ExceptionInfo[BaseException], index: int) -> None:
    assert str(index) in str(exc.value)


def test_set_device_invalid_index_raises_index_error() -> None:
    bad = invalid_device_index()
    before = torch.infini.current_device()
    with pytest.raises(IndexError) as exc:
        torch.infini.set_device(bad)
    _assert_invalid_index(exc, bad)
    assert torch.infini.current_device() == before


def test_invalid_index_in_device_functions_raises_index_error() -> None:
    bad = invalid_device_index()
    calls = [
        lambda: torch.infini.get_device_name(bad),
        lambda: torch.infini.synchronize(bad),
        lambda: torch.infini.mem_get_info(bad),
        lambda: torch.infini.current_stream(bad),
        lambda: torch.infini.default_stream(bad),
        lambda: torch.infini.device(bad).__enter__(),
        lambda: torch.infini.set_device(f"infini:{bad}"),
    ]
    for call in calls:
        with pytest.raises(IndexError) as exc:
            call()
        _assert_invalid_index(exc, bad)
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
    with pytest.raises(IndexError) as exc:
        torch.accelerator.set_device_index(bad)
    _assert_invalid_index(exc, bad)


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
