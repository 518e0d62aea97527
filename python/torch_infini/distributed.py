"""torch.distributed on ``infini`` tensors: the c10d backend ``"infini"``.

``import torch_infini`` registers it for the ``infini`` device type, as
``"nccl"`` is for ``cuda``::

    dist.init_process_group(backend="infini")              # infini tensors
    dist.init_process_group(backend="cpu:gloo,infini:infini")  # both kinds
    dist.init_process_group(device_id=torch.device("infini", rank))
    dist.init_process_group()       # "cpu:gloo,infini:infini" on the infini accelerator
    dist.get_default_backend_for_device("infini")           # "infini"

Its engine is an existing collective library (:func:`engine`):

- ``"gloo"`` (inside PyTorch) through host memory, on ``host`` and InfiniRT
  ``cpu``: gloo reads and writes device memory in place where it is
  host-addressable, and pinned staging copies elsewhere;
- ``"infiniccl"`` on accelerator device types where the build found InfiniCCL:
  InfiniCCL serves the calls its backend implements (all_reduce, at the
  commit this was built against), stream-ordered on device memory; gloo
  through pinned staging serves the rest, and dtypes or ops InfiniCCL lacks.

A collective waits for the work pending on the current stream of its tensors'
device, and ``wait()`` (or the Work's future) returns once the results are in
device memory, so work enqueued after it sees them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from . import _C, _backend

BACKEND_NAME = "infini"

# What ``init_process_group()`` without a backend and a device_id uses where
# infini is the accelerator (_patches.py makes it so): CPU tensors through
# gloo, infini tensors through "infini" (as "cpu:gloo,cuda:nccl" serves both
# kinds of tensors on CUDA).
DEFAULT_BACKEND = f"cpu:gloo,infini:{BACKEND_NAME}"

__all__ = ["BACKEND_NAME", "engine", "is_available"]


def is_available() -> bool:
    """Whether the ``"infini"`` backend can be created in this process (it
    needs PyTorch built with torch.distributed and gloo)."""
    return dist.is_available() and dist.is_gloo_available()


def engine() -> str:
    """The collective library a new ``"infini"`` group uses on this backend:
    ``"infiniccl"`` (with gloo for what it does not serve) where this build
    has InfiniCCL and device memory is not host memory, else ``"gloo"``."""
    if _C._dist_has_infiniccl() and not _backend.host_addressable():
        return "infiniccl"
    return "gloo"


# Whether this process made an "infini" backend (read at exit: _exit.py).
_made_a_backend = False


def _create_backend(
    backend_options: Any, _process_group_options: Any
) -> torch._C._distributed_c10d.Backend:
    """c10d's creator for ``"infini"`` (extended API): one backend of one
    group, given the group's store, rank, size and timeout."""
    global _made_a_backend
    if not dist.is_gloo_available():
        raise RuntimeError(
            "ProcessGroup backend 'infini' needs gloo (its CPU engine), and this PyTorch "
            "was built without it"
        )
    rank: int = backend_options.group_rank
    size: int = backend_options.group_size
    timeout: timedelta = backend_options.timeout
    # The engine's own keys live under a prefix of the group's store, apart
    # from a gloo backend the same group may hold for CPU tensors.
    store = dist.PrefixStore("infini-engine", backend_options.store)
    gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
    infiniccl_store = (
        dist.PrefixStore("infini-ccl", backend_options.store) if engine() == "infiniccl" else None
    )
    timeout_ms = int(timeout.total_seconds() * 1000)
    _made_a_backend = True
    return _C._dist_backend(gloo, rank, size, infiniccl_store, timeout_ms)


def _register() -> None:
    if not dist.is_available() or BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(
        BACKEND_NAME, _create_backend, extended_api=True, devices=["infini"]
    )
