"""What must finish before the interpreter finalizes.

Threads outside Python may hold the last reference to Python objects: since
PyTorch 2.13 every backward started from Python stashes a ``contextvars``
context in the thread-local state that its GraphTask, and every future
callback registered during it, carry a copy of. The thread that frees the
last copy takes the GIL; during finalization that makes the thread exit
inside C++ and the process aborts ("terminate called without an active
exception"). Two kinds of threads do this for ``infini``:

- the completion thread of the c10d backend "infini", which runs and frees
  the callbacks chained on its Works' futures (DDP's reducer chains them);
- PyTorch's autograd thread of each infini device, which drops its GraphTask
  just after waking the caller, so a program ending right after a backward
  races it.

- gloo's worker threads (the engine of "infini", and the group's gloo for
  CPU tensors), which free each Work just after completing it: a Work
  enqueued during a backward (DDP's reducer) carries such a copy, so a
  program exiting right after its last collective races them.

At exit, with the GIL released: the completion thread is drained, then one
tiny backward per initialized device, run through the C++ engine directly
(no Python context stashed, no gradient handed back), queues behind whatever each autograd thread
still holds. PyTorch gives no way to wait until gloo's workers are idle;
in a process that made an "infini" process group, exit gives them a bounded
moment (``_GLOO_SETTLE_S``).
"""

from __future__ import annotations

import atexit
import sys
import time

import torch

from . import _C

# How long exit waits for collectives still in flight (a peer that never
# answers must not hold the process forever).
_DRAIN_TIMEOUT_MS = 30_000
# How long exit lets gloo's workers free the Works they just completed.
_GLOO_SETTLE_S = 0.2


def _drain() -> None:
    from .infini import _device

    _C._dist_drain_completions(_DRAIN_TIMEOUT_MS)
    distributed = sys.modules.get("torch_infini.distributed")
    if distributed is not None and distributed._made_a_backend:
        time.sleep(_GLOO_SETTLE_S)  # releases the GIL: the workers can take it
    if not _device.is_initialized():
        return
    try:
        for index in range(_device.device_count()):
            x = torch.zeros((), device=torch.device("infini", index), requires_grad=True)
            y = x * 2
            # Accumulates into x.grad: asking for the gradient back would put
            # tensors with Python wrappers in the GraphTask this thread frees.
            torch.autograd.Variable._execution_engine.run_backward(  # type: ignore[attr-defined]
                (y,), (torch.ones_like(y),), False, False, (), True, True
            )
    except Exception:  # a broken device at exit must not turn into an error here
        pass


def install() -> None:
    atexit.register(_drain)
