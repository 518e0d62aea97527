"""Misuse gives a clear Python exception, never a crash.

Cases that have crashed the interpreter run in a subprocess, so a regression
fails one test instead of taking the pytest worker down.
"""

from __future__ import annotations

import pytest
import torch
from infini_testing import describe, invalid_device_index, requires_two_devices, run_python

# ---------------------------------------------------------------- device indices


@pytest.mark.parametrize(
    "make",
    [
        lambda bad: torch.empty(3, device=f"infini:{bad}"),
        lambda bad: torch.empty_strided((2, 2), (2, 1), device=f"infini:{bad}"),
        lambda bad: torch.empty_like(torch.empty(2), device=f"infini:{bad}"),
        lambda bad: torch.arange(3.0).to(f"infini:{bad}"),
        lambda bad: torch.arange(3.0).infini(bad),
        lambda bad: torch.empty(2, device="infini").to(f"infini:{bad}"),
    ],
    ids=["empty", "empty_strided", "empty_like", "to", "infini", "device_to_device"],
)
def test_out_of_range_device_index(make) -> None:  # type: ignore[no-untyped-def]
    bad = invalid_device_index()
    with pytest.raises(IndexError) as exc:
        make(bad)
    assert f"invalid device index {bad}" in str(exc.value)
    # The process is fine afterwards.
    assert torch.equal(torch.arange(3.0).to("infini").cpu(), torch.arange(3.0))


def test_stream_on_out_of_range_device() -> None:
    bad = invalid_device_index()
    with pytest.raises(IndexError, match=str(bad)):
        torch.infini.Stream(device=bad)
    with pytest.raises(IndexError, match=str(bad)):
        torch.infini.current_stream(bad)


# ---------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.empty(-1, device="infini"),
        lambda: torch.empty(3, -2, device="infini"),
        lambda: torch.empty_strided((-1,), (1,), device="infini"),
        lambda: torch.empty(2, device="infini").resize_(-1),
        lambda: torch.empty(0, device="infini").set_(
            torch.empty(4, device="infini").untyped_storage(), 0, (2, -2), (1, 1)
        ),
    ],
    ids=["empty", "empty_2d", "empty_strided", "resize_", "set_"],
)
def test_negative_sizes(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuntimeError, match="negative dimension"):
        make()


def test_copy_into_internally_overlapping_destination() -> None:
    dst = torch.empty(3, device="infini").expand(2, 3)
    with pytest.raises(RuntimeError, match="more than one element"):
        dst.copy_(torch.zeros(2, 3))
    with pytest.raises(RuntimeError, match="more than one element"):
        dst.copy_(torch.zeros(2, 3).to("infini"))


def test_item_of_many_elements() -> None:
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        torch.empty(2, 2, device="infini").item()


def test_pinned_infini_tensors_are_refused() -> None:
    with pytest.raises(RuntimeError, match="pinned"):
        torch.empty(2, device="infini", pin_memory=True)
    with pytest.raises(RuntimeError, match="pin"):
        torch.empty(2, device="infini").pin_memory()


def test_sparse_layout_is_not_implemented() -> None:
    with pytest.raises(NotImplementedError):
        torch.empty(2, 2, device="infini", layout=torch.sparse_coo)


def test_copy_from_meta_tensor() -> None:
    with pytest.raises(NotImplementedError, match="meta"):
        torch.empty(2, device="infini").copy_(torch.empty(2, device="meta"))


# ---------------------------------------------------------------- streams and events


def test_set_stream_with_cpu_stream() -> None:
    before = torch.infini.current_stream()
    with pytest.raises(ValueError, match="infini stream"):
        torch.infini.set_stream(torch.Stream(device="cpu"))
    with pytest.raises(ValueError, match="infini stream"):
        with torch.infini.stream(torch.Stream(device="cpu")):
            pass
    assert torch.infini.current_stream() == before


def test_stream_on_cpu_device() -> None:
    with pytest.raises(ValueError, match="infini device"):
        torch.infini.Stream(device="cpu")


def test_event_recorded_on_cpu_stream() -> None:
    with pytest.raises(RuntimeError, match="device type"):
        torch.infini.Event().record(torch.Stream(device="cpu"))


@requires_two_devices
def test_event_recorded_on_stream_of_another_device() -> None:
    event = torch.infini.Event()
    event.record(torch.infini.Stream(device=0))
    with pytest.raises(RuntimeError, match="device"):
        event.record(torch.infini.Stream(device=1))
    event.synchronize()  # still usable afterwards
    assert event.query()
    assert event.device == torch.device("infini", 0)


@requires_two_devices
def test_set_storage_of_another_device() -> None:
    source = torch.empty(4, device="infini:1")
    with pytest.raises(RuntimeError, match="different device"):
        torch.empty(0, device="infini:0").set_(source.untyped_storage())
    with pytest.raises(RuntimeError, match="different device"):
        torch.empty(0, device="infini:0").set_(source)


# ---------------------------------------------------------------- crashes


CONJ_SETUP = """
import torch, torch_infini
src = torch.tensor([1 + 2j, -3j, 4.5], dtype=torch.complex64)
x = src.to("infini")
"""


CONJ_CASES = {
    "conj_to_infini": (
        "y = torch.empty(3, dtype=torch.complex64, device='infini')\n"
        "y.copy_(x.conj())\n"
        "assert torch.equal(y.cpu(), src.conj().resolve_conj())"
    ),
    "neg_to_infini": (
        "y = torch.empty(3, dtype=torch.complex64, device='infini')\n"
        "y.copy_(x._neg_view())\n"
        "assert torch.equal(y.cpu(), src._neg_view().resolve_neg())"
    ),
    "resolve_conj": "assert torch.equal(x.conj().resolve_conj().cpu(), src.conj().resolve_conj())",
}


@pytest.mark.parametrize("name", sorted(CONJ_CASES))
def test_conj_and_neg_views_between_infini_tensors_do_not_crash(name: str) -> None:
    """Either the right values or NotImplementedError; never a dead interpreter."""
    body = CONJ_CASES[name]
    code = CONJ_SETUP + "try:\n" + "".join(f"    {line}\n" for line in body.splitlines())
    code += "    print('VALUES')\n"
    code += "except NotImplementedError:\n    print('NOT IMPLEMENTED')\n"
    proc = run_python(code)
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.strip() in ("VALUES", "NOT IMPLEMENTED"), describe(proc)
