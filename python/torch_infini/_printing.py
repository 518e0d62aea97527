"""Printing infini tensors.

PyTorch formats a tensor with tensor operations (abs, isfinite, max, ...) on
the tensor's own device, and moves only some backends (xla, lazy, ipu, mtia)
to the CPU first. Most of those operations have no infini kernel, so
``print(x)`` would fail; like those backends, infini tensors are copied to
the CPU for formatting. This is display only: no operator result ever comes
from the CPU.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch._tensor_str as tensor_str


def install() -> None:
    original = tensor_str._tensor_str
    if getattr(original, "_torch_infini", False):
        return

    @functools.wraps(original)
    def _tensor_str(self: torch.Tensor, indent: int, *args: Any, **kwargs: Any) -> str:
        if self.device.type == "infini":
            self = self.cpu()
        return original(self, indent, *args, **kwargs)

    _tensor_str._torch_infini = True  # type: ignore[attr-defined]
    tensor_str._tensor_str = _tensor_str
