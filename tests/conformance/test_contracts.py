"""Behaviour contracts: torch.infini against torch.cuda (see contracts.py).

Each contract runs on ``infini`` always: its invariants must hold and its
observations must be the same on a second run (streams may be asynchronous).
Where CUDA is available it also runs on ``cuda`` with the same number of
devices, and the two observation lists must be equal: same transitions, same
exception types. A difference there is a real finding, not a flaky test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from api_profile import load_profile
from contracts import (
    CONTRACTS,
    CUDA_REASON,
    EXPECTED_ERRORS,
    RETURNED,
    TWO_DEVICE_ERRORS,
    Backend,
    backend_for,
    violations,
)

PROFILE = Path(__file__).with_name("api_profile.json")


def _describe(observations: list[tuple[str, str, bool | str]]) -> str:
    return "\n".join(json.dumps(list(item)) for item in observations)


@pytest.mark.parametrize("contract", sorted(CONTRACTS))
def test_contract_on_infini(contract: str) -> None:
    backend = backend_for("infini")
    first = CONTRACTS[contract](backend)
    problems = violations(first)
    assert not problems, (
        f"{contract} contract on infini ({backend.devices} device(s)):\n" + "\n".join(problems)
    )
    again = CONTRACTS[contract](backend)
    assert again == first, "the observations changed between two runs (not deterministic)"


@pytest.mark.parametrize("contract", sorted(CONTRACTS))
def test_contract_matches_cuda(contract: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip(CUDA_REASON)
    devices = min(torch.infini.device_count(), torch.cuda.device_count(), 2)
    infini = CONTRACTS[contract](Backend("infini", torch.infini, devices))
    cuda = CONTRACTS[contract](Backend("cuda", torch.cuda, devices))
    assert infini == cuda, (
        f"{contract} contract: infini and cuda observe differently\n"
        f"infini:\n{_describe(infini)}\ncuda:\n{_describe(cuda)}"
    )


def test_every_error_contract_declares_the_cuda_exception() -> None:
    """Every "error" observation has the exception class CUDA raises in
    EXPECTED_ERRORS (so a contract can never accept any exception type), and
    the table names no contract that is never observed."""
    backend = backend_for("infini")
    observed = {
        label
        for contract in CONTRACTS.values()
        for kind, label, _ in contract(backend)
        if kind == "error"
    }
    assert observed - set(EXPECTED_ERRORS) == set()
    never = set(EXPECTED_ERRORS) - observed
    if backend.devices < 2:
        never -= TWO_DEVICE_ERRORS
    assert never == set()


@pytest.mark.parametrize("label", sorted(EXPECTED_ERRORS))
def test_violations_refuse_any_other_exception_type(label: str) -> None:
    """The checker itself: on infini alone, only the CUDA class passes."""
    expected = EXPECTED_ERRORS[label][0]
    assert violations([("error", label, expected)]) == []
    for other in ("IndexError", "RuntimeError", "NotImplementedError", "Exception", RETURNED):
        if other != expected:
            assert violations([("error", label, other)]) != [], other
    assert violations([("error", "an undeclared contract", expected)]) != []


def test_contracts_are_declared_in_the_profile() -> None:
    profile = load_profile(PROFILE)
    assert set(CONTRACTS) <= set(profile.contracts), (
        f"contracts without a profile entry: {sorted(set(CONTRACTS) - set(profile.contracts))}"
    )


def _elapsed_time_errors(make: Callable[[bool], Any]) -> list[str]:
    """Exception types of elapsed_time's four precondition failures."""

    def outcome(call: Callable[[], Any]) -> str:
        try:
            call()
        except Exception as exc:
            return type(exc).__name__
        return "returned"

    plain_a, plain_b = make(False), make(False)
    plain_a.record()
    plain_b.record()
    plain_b.synchronize()
    timing_a, timing_b = make(True), make(True)
    results = [
        outcome(lambda: plain_a.elapsed_time(plain_b)),
        outcome(lambda: timing_a.elapsed_time(timing_b)),
    ]
    timing_a.record()
    timing_a.synchronize()
    results.append(outcome(lambda: timing_a.elapsed_time(timing_b)))
    results.append(outcome(lambda: make(False).elapsed_time(make(False))))
    return results


def test_elapsed_time_errors_match_pytorch_event() -> None:
    """PyTorch's own backend-neutral torch.Event, on the infini device, is the reference.

    It runs the same checks as torch.cuda.Event, so this shows on CPU-only
    machines what the cuda comparison of the event contract would find.
    """
    infini = _elapsed_time_errors(lambda timing: torch.infini.Event(enable_timing=timing))
    generic = _elapsed_time_errors(
        lambda timing: torch.Event(device="infini", enable_timing=timing)
    )
    assert infini == generic


def test_set_stream_selects_the_stream_device() -> None:
    if torch.infini.device_count() < 2:
        pytest.skip("needs 2 infini devices (set TORCH_INFINI_HOST_DEVICES=2)")
    start = torch.infini.current_device()
    other = 1 if start == 0 else 0
    torch.infini.set_stream(torch.infini.Stream(device=other))
    try:
        assert torch.infini.current_device() == other
    finally:
        torch.infini.set_stream(torch.infini.default_stream(other))
        torch.infini.set_device(start)
