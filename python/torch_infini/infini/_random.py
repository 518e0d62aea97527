"""Seeding and generator state of torch.infini, as torch.cuda's.

No infini operator draws random numbers yet (random tensors are generated on
the CPU and copied), so the device generator's whole state is its seed:
initial_seed() reports it, get_rng_state() returns it as a ByteTensor and
set_rng_state() restores it (torch.testing's freeze_rng_state relies on the
pair). Device-side random operators, when they come, start from it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch

_seed: int = 0


def _is_in_bad_fork() -> bool:
    """True in a child forked after the backend was initialized (as torch.cuda's).

    Such a child cannot use infini: every runtime call raises "Cannot
    re-initialize infini in forked subprocess" instead of waiting forever on
    stream worker threads that did not survive the fork.
    """
    from .. import _C

    return bool(_C._is_in_bad_fork())


def manual_seed(seed: int) -> None:
    global _seed
    _seed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def initial_seed() -> int:
    return _seed


def seed() -> None:
    """Seeds with a non-deterministic random number."""
    manual_seed(int.from_bytes(os.urandom(8), "little"))


def seed_all() -> None:
    seed()


def get_rng_state(device: int | str | torch.device = "infini") -> torch.Tensor:
    """The generator state of ``device`` (its seed, 8 bytes) as a CPU ByteTensor."""
    _check_device(device)
    return torch.tensor(list(_seed.to_bytes(8, "little")), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = "infini") -> None:
    """Restores a state returned by get_rng_state."""
    _check_device(device)
    if new_state.dtype != torch.uint8 or new_state.numel() != 8:
        raise ValueError(
            f"set_rng_state: expected an 8-byte torch.uint8 state from "
            f"torch.infini.get_rng_state(), got {new_state.numel()} elements of {new_state.dtype}"
        )
    manual_seed(int.from_bytes(bytes(new_state.cpu().tolist()), "little"))


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(torch.infini.device_count())]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def _check_device(device: int | str | torch.device) -> None:
    from ._device import _get_device_index

    index = _get_device_index(device, optional=True)
    count = torch.infini.device_count()
    if not 0 <= index < count:
        raise IndexError(f"infini: invalid device index {index}; there are {count} device(s)")
