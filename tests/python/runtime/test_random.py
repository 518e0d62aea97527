"""The infini generator: one default per device, torch.Generator(device="infini"),
and the torch.cuda seeding API in torch.infini, with CUDA's state layout
(16 bytes: the seed, then the Philox offset, little-endian)."""

from __future__ import annotations

import pytest
import torch
import torch_infini  # noqa: F401  (registers infini)
from infini_testing import raises_exactly

DEFAULT_SEED = 67280421310721  # c10::default_rng_seed_val, as CUDA's generators start


def _state(seed: int, offset: int = 0) -> torch.Tensor:
    raw = seed.to_bytes(8, "little") + offset.to_bytes(8, "little")
    return torch.tensor(list(raw), dtype=torch.uint8)


def test_generator_on_infini() -> None:
    g = torch.Generator(device="infini")
    assert g.device == torch.device("infini", 0)
    assert g.initial_seed() == DEFAULT_SEED
    g.manual_seed(1234)
    assert g.initial_seed() == 1234
    assert torch.equal(g.get_state(), _state(1234))
    g.set_state(_state(99, 400))
    assert g.initial_seed() == 99 and g.get_offset() == 400
    clone = g.clone_state()
    assert torch.equal(clone.get_state(), _state(99, 400))
    # an explicit generator leaves the device's default untouched
    torch.infini.manual_seed(7)
    g.manual_seed(8)
    assert torch.infini.initial_seed() == 7


def test_state_is_checked() -> None:
    g = torch.Generator(device="infini")
    with raises_exactly(TypeError, match="RNG state must be a torch.ByteTensor"):
        g.set_state(torch.zeros(16, dtype=torch.int32))
    with raises_exactly(RuntimeError, match="must be 16 bytes"):
        g.set_state(torch.zeros(8, dtype=torch.uint8))
    with raises_exactly(RuntimeError, match="multiple of 4"):
        g.set_state(_state(1, 3))
    with raises_exactly(ValueError, match="16-byte torch.uint8 state"):
        torch.infini.set_rng_state(torch.zeros(8, dtype=torch.uint8))


def test_seeding_api_reaches_the_default_generator() -> None:
    torch.infini.manual_seed(42)
    assert torch.infini.initial_seed() == 42
    assert torch.equal(torch.infini.get_rng_state(), _state(42))
    assert torch.equal(torch.infini.get_rng_state("infini:0"), _state(42))
    torch.infini.set_rng_state(_state(5, 16))
    assert torch.equal(torch.infini.get_rng_state(0), _state(5, 16))
    torch.infini.manual_seed(-1)  # as torch.Generator: taken modulo 2**64
    assert torch.infini.initial_seed() == 2**64 - 1
    torch.infini.seed()
    first = torch.infini.initial_seed()
    torch.infini.seed()
    assert torch.infini.initial_seed() != first  # non-deterministic (2**-64 to collide)


def test_torch_manual_seed_seeds_every_device() -> None:
    torch.manual_seed(2024)
    states = torch.infini.get_rng_state_all()
    assert len(states) == torch.infini.device_count()
    assert all(torch.equal(s, _state(2024)) for s in states)
    # Distinct states first (seeds and offsets), so seed_all must replace each.
    count = torch.infini.device_count()
    torch.infini.set_rng_state_all([_state(2024 + i, 8) for i in range(count)])
    torch.infini.seed_all()
    fresh = torch.infini.initial_seed()
    assert fresh not in range(2024, 2024 + count)  # non-deterministic (2**-64 to collide)
    states = torch.infini.get_rng_state_all()
    assert all(torch.equal(s, _state(fresh)) for s in states), states  # one seed, offset 0
    torch.infini.set_rng_state_all([_state(3, 8)] * torch.infini.device_count())
    assert all(torch.equal(s, _state(3, 8)) for s in torch.infini.get_rng_state_all())


@pytest.mark.requires_two_devices
def test_devices_have_their_own_generators() -> None:
    torch.infini.set_rng_state(_state(11), 0)
    torch.infini.set_rng_state(_state(12, 4), 1)
    assert torch.equal(torch.infini.get_rng_state(0), _state(11))
    assert torch.equal(torch.infini.get_rng_state(1), _state(12, 4))
    assert torch.Generator(device="infini:1").device == torch.device("infini", 1)
    with torch.infini.device(1):
        torch.infini.manual_seed(13)
    assert torch.infini.initial_seed() == 11


def test_fork_rng_restores_infini_state() -> None:
    torch.infini.set_rng_state(_state(21, 32))
    with torch.random.fork_rng(device_type="infini"):
        torch.infini.manual_seed(22)
        assert torch.infini.initial_seed() == 22
    assert torch.equal(torch.infini.get_rng_state(), _state(21, 32))


def test_invalid_device_index() -> None:
    count = torch.infini.device_count()
    with raises_exactly(IndexError, match="invalid device index"):
        torch.infini.get_rng_state(count)
    # A generator for a device the backend lacks: torch.AcceleratorError, as
    # every use of an invalid device index.
    with raises_exactly(torch.AcceleratorError, match="invalid device ordinal"):
        torch.Generator(device=f"infini:{count}")
