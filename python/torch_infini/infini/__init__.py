"""torch.infini: the infini device API, named and behaving like torch.cuda.

As torch.cuda's, its functions live in submodules that are public too:
``torch.infini.random`` (seeds and generator states), ``torch.infini.streams``
(streams and events) and ``torch.infini.memory`` (allocator statistics and
history); this module re-exports them. ``torch.infini.amp`` is torch.cuda.amp's
counterpart (autocast, GradScaler, custom_fwd/custom_bwd for infini, deprecated
in favour of torch.amp as torch.cuda.amp's are); as there, its names stay in it.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import torch

from . import amp, memory, random, streams
from ._device import (
    current_device,
    device,
    device_count,
    device_of,
    get_device_name,
    init,
    is_available,
    is_initialized,
    mem_get_info,
    set_device,
    synchronize,
)
from .memory import (
    empty_cache,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_as_nested_dict,
    reset_accumulated_host_memory_stats,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
)
from .random import _is_in_bad_fork as _is_in_bad_fork
from .random import (
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "amp",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "init",
    "is_bf16_supported",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "random",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "streams",
    "synchronize",
]


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("infini")`` casts to: float16 and bfloat16.

    The autocast policy is CUDA's (ATen's operator lists, registered for
    infini's AutocastPrivateUse1 key). Any other dtype makes PyTorch warn and
    leave autocast disabled, as it does for CUDA.
    """
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether bfloat16 tensors compute on infini, as ``torch.cuda.is_bf16_supported``.

    Every infini backend stores and computes bfloat16 (natively where the
    kernel library implements an operator in bfloat16, else in the CPU
    fallback), so it is True; ``including_emulation`` is accepted for
    torch.cuda's signature.
    """
    del including_emulation
    return True


def _install_submodules(name: str) -> None:
    """Makes this package's submodules importable as ``<name>.<submodule>``
    (``import torch.infini.streams``), as torch.cuda's are.

    Without their ``sys.modules`` entries the import system would load a
    second copy of each, whose relative imports resolve inside torch.
    """
    for value in list(globals().values()):
        if isinstance(value, ModuleType) and value.__name__.startswith(__name__ + "."):
            sys.modules[name + value.__name__.removeprefix(__name__)] = value


# What Inductor asks a device module for the first time it compiles for the
# device. torch_infini registers its Inductor backend itself then, with the
# compiler plug-in's graph passes, which Inductor's own registration from
# these attributes would drop (torch_infini/_inductor.py, _register): the
# lookup registers, then reports no such attribute, and Inductor keeps the
# registration it finds.
_INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def __getattr__(name: str) -> Any:
    # torch.utils.checkpoint saves and restores a device's RNG state only if
    # its module's ``_initialized`` is true (torch.cuda keeps such a flag).
    if name == "_initialized":
        return is_initialized()
    if name in _INDUCTOR_HOOKS:
        from .. import _C, _compile_fallback

        # torch.compile's default backend never gets here for such a backend
        # (_compile_fallback.py); Inductor called some other way does.
        if not _compile_fallback.inductor_serves_infini():
            raise NotImplementedError(
                f"Inductor on infini (backend {_C._backend()!r}): its C++ kernels need device "
                "memory the CPU can address, which this backend's is not; compile with "
                "backend='aot_eager'"
            )
        from .. import _inductor

        _inductor.register()

        raise AttributeError(
            f"torch.infini.{name}: torch_infini registered its Inductor backend with "
            "torch._inductor.codegen.common.register_backend_for_device (get_scheduling_for_device"
            "('infini'))"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
