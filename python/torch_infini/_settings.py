"""Every setting torch_infini reads from the environment, checked at import
before anything is registered.

A bad value must leave nothing half-done: not a renamed PrivateUse1, a
``torch.infini`` module or a c10d backend with a device that then fails, nor
an ``import torch`` (autoload) that warns and registers half the backend.
So ``import torch_infini`` parses each value here, as its reader will parse
it, and raises ImportError naming the variable before step 3 of the import
(README, "Settings": the table of variables).

The native library parses its own (the host device's, the CPU fallback's)
through ``_C._check_settings()``, with the very functions that read them at
first use; the backend's name is checked against the device-type table
(``_backend.requested_from_environment``); the compile-time ones are
checked here as the compiler will read them.
"""

from __future__ import annotations

import os

from . import _C, _backend, graph_passes


def _check_triton_arch() -> None:
    value = os.environ.get("TORCH_INFINI_TRITON_ARCH")
    if value is not None and not (value.isdigit() and int(value) > 0):
        raise ValueError(
            f"TORCH_INFINI_TRITON_ARCH={value!r}: expected a compute capability as an "
            "integer (90 for sm_90)"
        )


def check() -> str:
    """Checks every setting; returns the requested backend. ImportError
    naming the variable for a bad value."""
    requested = _backend.requested_from_environment()  # ImportError itself
    try:
        _C._check_settings()
        graph_passes.mode()
        _check_triton_arch()
    except (RuntimeError, ValueError) as error:
        raise ImportError(f"torch_infini: {error}") from error
    return requested
