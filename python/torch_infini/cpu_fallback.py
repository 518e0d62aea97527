"""The CPU fallback: what happens to an ATen operator without an infini kernel.

Such an operator runs on the CPU and its result lands on the inputs' infini
device (in-place and ``out=`` arguments are written back into the given
infini tensors), as the mode allows:

* ``"warn"`` (default): run it on the CPU and warn once per operator;
* ``"silent"``: the same without warnings;
* ``"off"``: raise NotImplementedError naming operator, dtype and backend.

``TORCH_INFINI_CPU_FALLBACK`` sets the mode (checked at import, read when
the backend is first used); ``set_mode`` changes it at run time. Random
operators that draw never fall back (no CPU generator stands in for a
device generator; called so that they draw nothing, as ``nn.RReLU`` in
``eval()``, they do), nor do view operators. The policy's state lives in
the native library (the per-call path never enters Python), so it is
process-wide and thread-safe; the context managers change it for the whole
process while they are active.

Cost: every call first waits for the current stream's pending work. Where
device memory is host memory (``host``, InfiniRT ``cpu``) the CPU kernel
then runs on the infini tensors' memory in place: no input is copied,
in-place and ``out=`` results are written where they are, and the results
it allocates are device memory (only a result the kernel keeps a reference
to is copied, once). Elsewhere the call is staged: the bytes its arguments
cover are copied into pinned host memory, the kernel runs on those copies,
and what it wrote or allocated goes back to the device on the current
stream. ``stats()`` reports the bytes copied either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from . import _C

MODES = ("warn", "silent", "off")


def mode() -> str:
    """The current mode: "warn", "silent" or "off"."""
    return str(_C._fallback_mode())


def set_mode(new_mode: str) -> None:
    if new_mode not in MODES:
        raise ValueError(f"CPU fallback mode must be one of {MODES}, got {new_mode!r}")
    _C._set_fallback_mode(new_mode)


@contextmanager
def strict() -> Iterator[None]:
    """A region where operators without an infini kernel raise (mode "off")."""
    with _mode_region("off"):
        yield


@contextmanager
def allowed(region_mode: str = "warn") -> Iterator[None]:
    """A region where operators without an infini kernel run on the CPU."""
    if region_mode not in ("warn", "silent"):
        raise ValueError(f"allowed(): mode must be 'warn' or 'silent', got {region_mode!r}")
    with _mode_region(region_mode):
        yield


@contextmanager
def _mode_region(region_mode: str) -> Iterator[None]:
    previous = mode()
    set_mode(region_mode)
    try:
        yield
    finally:
        set_mode(previous)


def _names(operators: Iterable[str]) -> list[str]:
    names = list(operators)
    for name in names:
        if not isinstance(name, str) or not name.startswith("aten::"):
            raise ValueError(
                f"operator names look like 'aten::add' or 'aten::add.Tensor', got {name!r}"
            )
    return names


def allow(operators: Iterable[str]) -> None:
    """Operators that fall back even in mode "off" (replaces the list)."""
    _C._set_fallback_allowed(_names(operators))


def deny(operators: Iterable[str]) -> None:
    """Operators that never fall back, whatever the mode (replaces the list)."""
    _C._set_fallback_denied(_names(operators))


def routed_operators() -> list[str]:
    """Operators registered for infini only to run in the fallback whole.

    PyTorch would decompose them on a backend without a kernel, rounding
    differently from the CPU's fused kernel; they are not infini kernels
    (torch_infini.operators() leaves them out).
    """
    return list(_C._fallback_routed_operators())


def allowed_operators() -> list[str]:
    return list(_C._fallback_allowed())


def denied_operators() -> list[str]:
    return list(_C._fallback_denied())


@dataclass(frozen=True)
class OperatorStats:
    calls: int
    seconds: float
    bytes_copied: int


def stats() -> dict[str, OperatorStats]:
    """Per operator ("aten::atan2", "aten::add.out"):
    calls, time spent and bytes moved between infini and CPU memory."""
    return {
        name: OperatorStats(int(calls), float(seconds), int(nbytes))
        for name, (calls, seconds, nbytes) in dict(_C._fallback_stats()).items()
    }


def reset_stats() -> None:
    _C._reset_fallback_stats()


def summary() -> str:
    """One line per operator that fell back, most calls first ("" if none)."""
    rows = sorted(stats().items(), key=lambda item: -item[1].calls)
    return "\n".join(
        f"{name}: {s.calls} call(s), {s.seconds * 1e3:.2f} ms, {s.bytes_copied} bytes copied"
        for name, s in rows
    )
