"""Automatic mixed precision on infini, as torch.cuda.amp.

``autocast``, ``GradScaler``, ``custom_fwd`` and ``custom_bwd`` are
torch.amp's, with the device fixed to ``infini``. As torch.cuda.amp's
(PyTorch deprecated that module), each warns a FutureWarning naming the
torch.amp spelling when it is constructed or applied; what they do is
exactly torch.amp's: ``torch.infini.amp.autocast()`` is
``torch.autocast("infini")``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch
from typing_extensions import deprecated

from ._device import is_available

__all__ = ["GradScaler", "amp_definitely_not_available", "autocast", "custom_bwd", "custom_fwd"]


def _use_instead(name: str, replacement: str) -> str:
    return f"`torch.infini.amp.{name}` is deprecated. Please use `{replacement}` instead."


@deprecated(
    _use_instead("autocast(args...)", "torch.amp.autocast('infini', args...)"),
    category=FutureWarning,
)
class autocast(torch.amp.autocast_mode.autocast):
    """``torch.autocast("infini", ...)``: a context manager and a decorator."""

    if sys.version_info < (3, 13):
        # Before Python 3.13, inspect.signature reads a @deprecated class's
        # (wrapped) __new__: this one gives it __init__'s parameters.
        def __new__(
            cls,
            enabled: bool = True,
            dtype: torch.dtype = torch.float16,
            cache_enabled: bool = True,
        ) -> autocast:
            return super().__new__(cls)

    def __init__(
        self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True
    ) -> None:
        super().__init__("infini", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("infini", ...)``."""

    @deprecated(
        _use_instead("GradScaler(args...)", "torch.amp.GradScaler('infini', args...)"),
        category=FutureWarning,
    )
    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__(
            "infini",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )


@deprecated(
    _use_instead("custom_fwd(args...)", "torch.amp.custom_fwd(args..., device_type='infini')"),
    category=FutureWarning,
)
def custom_fwd(
    fwd: Callable[..., Any] | None = None, *, cast_inputs: torch.dtype | None = None
) -> Any:
    """``torch.amp.custom_fwd(fwd, device_type="infini", cast_inputs=cast_inputs)``."""
    return functools.partial(torch.amp.custom_fwd, device_type="infini")(
        fwd=fwd, cast_inputs=cast_inputs
    )


@deprecated(
    _use_instead("custom_bwd(args...)", "torch.amp.custom_bwd(args..., device_type='infini')"),
    category=FutureWarning,
)
def custom_bwd(bwd: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.amp.custom_bwd(bwd, device_type="infini")``."""
    return functools.partial(torch.amp.custom_bwd, device_type="infini")(bwd)


def amp_definitely_not_available() -> bool:
    """True when no infini device is available (torch.cuda.amp's asks for CUDA or XLA)."""
    return not is_available()
