"""Seeding hooks torch.manual_seed / torch.seed call on the device module.

No infini operator draws random numbers yet (random tensors are generated on
the CPU and copied), so the seed is only recorded: initial_seed() reports the
last one set. Device-side random operators, when they come, read it.
"""

from __future__ import annotations

import os

_seed: int = 0
_forked_child = False


def _mark_forked_child() -> None:
    global _forked_child
    _forked_child = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked_child)


def _is_in_bad_fork() -> bool:
    """True in a child forked after the backend started worker threads."""
    from .. import _C

    return _forked_child and bool(_C._is_initialized())


def manual_seed(seed: int) -> None:
    global _seed
    _seed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def initial_seed() -> int:
    return _seed
