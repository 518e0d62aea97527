"""Devices of torch.infini: count, current device, names, synchronization."""

from __future__ import annotations

from typing import Any

import torch

from .. import _C

DeviceLike = torch.device | str | int | None


def _get_device_index(device: DeviceLike, optional: bool = True) -> int:
    """Index of an infini device given as int, 'infini:N', torch.device or None.

    None (when optional) and an index-less 'infini' mean the current device.
    """
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "infini":
            raise ValueError(f"Expected an infini device, but got: {device}")
        device = device.index
        if device is not None and device < -1:
            # "infini:128" ... "infini:254": PyTorch keeps the index in an
            # int8, which wrapped it. Raises torch.AcceleratorError, as a
            # device the backend does not have.
            _C._check_device(device)
    if device is None:
        if not optional:
            raise ValueError("Expected an infini device with a specified index, got None")
        return current_device()
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"Invalid device {device!r}: expected an int, str or torch.device")
    return device


def is_available() -> bool:
    """Whether at least one infini device can be used. Never raises."""
    return device_count() > 0


def device_count() -> int:
    """Number of infini devices of the selected backend (0 if unusable)."""
    return int(_C._device_count())


def init() -> None:
    """Initializes the backend (done lazily otherwise)."""
    _C._init()


def is_initialized() -> bool:
    return bool(_C._is_initialized())


def current_device() -> int:
    return int(_C._current_device())


def set_device(device: DeviceLike) -> None:
    """Sets the current device; a negative index is ignored, as in torch.cuda."""
    index = _get_device_index(device)
    if index >= 0:
        _C._set_device(index)


def synchronize(device: DeviceLike = None) -> None:
    """Waits for all work queued on every stream of ``device``."""
    with torch.infini.device(device):
        _C._synchronize(-1)


def get_device_name(device: DeviceLike = None) -> str:
    index = _get_device_index(device)
    if not 0 <= index < device_count():
        # torch.cuda.get_device_properties checks the same way, before any call.
        raise AssertionError("Invalid device id")
    return str(_C._get_device_name(index))


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of device memory, as torch.cuda.mem_get_info."""
    free, total = _C._mem_get_info(_get_device_index(device))
    return int(free), int(total)


class device:
    """Context manager that changes the current device (torch.cuda.device)."""

    def __init__(self, device: DeviceLike) -> None:
        self.idx = _get_device_index(device, optional=True) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx < 0:
            return
        self.prev_idx = current_device()
        if self.prev_idx != self.idx:
            _C._set_device(self.idx)

    def __exit__(self, *args: Any) -> bool:
        if self.idx >= 0 and self.prev_idx != self.idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager selecting the device of a tensor (no-op off infini)."""

    def __init__(self, obj: torch.Tensor) -> None:
        idx = obj.get_device() if obj.device.type == "infini" else -1
        super().__init__(idx if idx >= 0 else None)
