"""Seeding and generator state of torch.infini, as torch.cuda's.

Each infini device has a default generator in the native library
(torch_infini/runtime/generator.h): counter-based, its state a seed and an
offset into the Philox stream the seed selects, as CUDA's.
get_rng_state() returns that state in CUDA's layout (16 bytes: seed, then
offset, little-endian) and set_rng_state() restores it; torch.manual_seed,
torch.random.fork_rng and torch.utils.checkpoint reach it through this
module.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

_STATE_BYTES = 16
_MASK = 0xFFFF_FFFF_FFFF_FFFF


def _is_in_bad_fork() -> bool:
    """True in a child forked after the backend was initialized (as torch.cuda's).

    Such a child cannot use infini: every runtime call raises "Cannot
    re-initialize infini in forked subprocess" instead of waiting forever on
    stream worker threads that did not survive the fork.
    """
    from .. import _C

    return bool(_C._is_in_bad_fork())


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator (its offset restarts at 0)."""
    from .. import _C

    _C._rng_manual_seed(-1, int(seed) & _MASK)


def manual_seed_all(seed: int) -> None:
    from .. import _C

    for device in range(torch.infini.device_count()):
        _C._rng_manual_seed(device, int(seed) & _MASK)


def initial_seed() -> int:
    """The current device's seed."""
    from .. import _C

    return int(_C._rng_initial_seed(-1))


def seed() -> None:
    """Seeds the current device's generator with a non-deterministic random number."""
    from .. import _C

    _C._rng_seed(-1)


def seed_all() -> None:
    """Seeds every device's generator with one non-deterministic random number."""
    from .. import _C

    fresh = int(_C._rng_seed(0))
    for device in range(1, torch.infini.device_count()):
        _C._rng_manual_seed(device, fresh)


def get_rng_state(device: int | str | torch.device = "infini") -> torch.Tensor:
    """The generator state of ``device``: a 16-byte CPU ByteTensor (seed, offset)."""
    from .. import _C

    seed_value, offset = _C._rng_get_state(_check_device(device))
    raw = int(seed_value).to_bytes(8, "little") + int(offset).to_bytes(8, "little")
    return torch.tensor(list(raw), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = "infini") -> None:
    """Restores a state returned by get_rng_state."""
    from .. import _C

    index = _check_device(device)
    if new_state.dtype != torch.uint8 or new_state.numel() != _STATE_BYTES:
        raise ValueError(
            f"set_rng_state: expected a {_STATE_BYTES}-byte torch.uint8 state from "
            f"torch.infini.get_rng_state(), got {new_state.numel()} elements of {new_state.dtype}"
        )
    raw = bytes(new_state.cpu().tolist())
    _C._rng_set_state(index, int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little"))


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(torch.infini.device_count())]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def _check_device(device: int | str | torch.device) -> int:
    from ._device import _get_device_index

    index = _get_device_index(device, optional=True)
    count = torch.infini.device_count()
    if not 0 <= index < count:
        raise IndexError(f"infini: invalid device index {index}; there are {count} device(s)")
    return index
