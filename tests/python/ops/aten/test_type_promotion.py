"""Type promotion of add, sub, mul and div on infini, exactly as PyTorch defines it.

Every pair of the common dtypes, as tensor and tensor, tensor and 0-dim
tensor (infini and CPU), and tensor and Python number, against the CPU:
bit for bit where infini runs the CPU's kernels (``host``). add, sub and mul
run natively where the kernel allows (the operand cast on the device to the
result dtype, then the kernel): no such call reaches the CPU fallback on
any backend. Whatever the CPU refuses, infini refuses alike; nothing PyTorch
accepts is refused.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch_infini
from infini_testing import ALL_DTYPES
from op_helpers import DEVICE, assert_matches, kernel_dtypes, make_cpu
from torch_infini._operators import declarations

# The common dtypes: every real one the suite makes tensors of.
DTYPES = [dtype for dtype in ALL_DTYPES if not dtype.is_complex]
OPS: dict[str, Callable[[object, object], torch.Tensor]] = {
    "add": lambda a, b: torch.add(a, b, alpha=2) if _alpha_ok(a, b) else torch.add(a, b),
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
}
NUMBERS = [3, -2.5, True, 1e5]


def _alpha_ok(a: object, b: object) -> bool:
    return torch.result_type(a, b) != torch.bool  # type: ignore[arg-type]


def _operand(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    t = make_cpu(shape, dtype, seed=seed)
    # small magnitudes: integer products and sums stay in range, so the
    # comparison is about promotion, not about overflow
    return t % 7 if dtype not in (torch.bool,) and not dtype.is_floating_point else t / 50


def _check(op: str, make: Callable[[str], tuple[object, object]], what: str) -> str | None:
    """None if infini agrees with the CPU, else what differs."""
    fn = OPS[op]
    try:
        want = fn(*make("cpu"))
    except RuntimeError as error:
        try:
            fn(*make(DEVICE))
        except RuntimeError as got:
            if type(got) is not type(error):
                return f"{what}: {type(got).__name__} where the CPU raises {type(error).__name__}"
            return None
        return f"{what}: the CPU raises ({error}), infini does not"
    try:
        got = fn(*make(DEVICE))
        assert_matches(got, want)
    except (AssertionError, RuntimeError) as failure:
        return f"{what}: {failure}"
    return None


def _pairs() -> list[tuple[torch.dtype, torch.dtype]]:
    return [(a, b) for a in DTYPES for b in DTYPES]


@pytest.mark.parametrize("op", list(OPS))
def test_tensor_and_tensor(op: str) -> None:
    failures = []
    for a, b in _pairs():
        x, y = _operand(a, (2, 3), 1), _operand(b, (2, 3), 2)
        failures.append(_check(op, lambda d, x=x, y=y: (x.to(d), y.to(d)), f"{a} {op} {b}"))
    assert not [f for f in failures if f], "\n".join(f for f in failures if f)


@pytest.mark.parametrize("op", list(OPS))
def test_broadcast_tensors(op: str) -> None:
    failures = []
    for a, b in _pairs():
        x, y = _operand(a, (2, 1, 3), 3), _operand(b, (4, 1), 4)
        failures.append(_check(op, lambda d, x=x, y=y: (x.to(d), y.to(d)), f"{a} {op} {b}"))
    assert not [f for f in failures if f], "\n".join(f for f in failures if f)


@pytest.mark.parametrize("where", ["infini", "cpu"])
@pytest.mark.parametrize("op", list(OPS))
def test_tensor_and_zero_dim_tensor(op: str, where: str) -> None:
    """A 0-dim operand promotes only across categories (int to float, ...),
    and is read in the result's math type: on both sides."""
    failures = []
    for a, b in _pairs():
        x, s = _operand(a, (5,), 5), _operand(b, (), 6)

        def make(d: str, x: torch.Tensor = x, s: torch.Tensor = s) -> tuple[object, object]:
            return x.to(d), s.to(d if where == "infini" else "cpu")

        def swapped(d: str, make: Callable[[str], tuple[object, object]] = make) -> tuple:
            return tuple(reversed(make(d)))

        failures.append(_check(op, make, f"{a} {op} 0-dim {b} ({where})"))
        failures.append(_check(op, swapped, f"0-dim {b} ({where}) {op} {a}"))
    assert not [f for f in failures if f], "\n".join(f for f in failures if f)


@pytest.mark.parametrize("op", list(OPS))
def test_tensor_and_python_number(op: str) -> None:
    failures = []
    for a in DTYPES:
        x = _operand(a, (5,), 7)
        for n in NUMBERS:
            failures.append(_check(op, lambda d, x=x, n=n: (x.to(d), n), f"{a} {op} {n!r}"))
            failures.append(_check(op, lambda d, x=x, n=n: (n, x.to(d)), f"{n!r} {op} {a}"))
    assert not [f for f in failures if f], "\n".join(f for f in failures if f)


def _castable() -> set[torch.dtype]:
    """The dtypes the selected backend's kernel provider casts on the device:
    every one on host (the CPU's copy), InfiniOps' Cast declarations for the
    device type less torch-infini's refusals elsewhere."""
    if torch_infini.backend() == "host":
        return set(DTYPES)
    return {
        d.dtype
        for d in declarations()
        if d.op == "cast" and d.device_type == torch_infini.backend() and d.infinirt_refusal is None
    }


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_mixed_dtypes_run_natively_where_the_kernel_allows(op: str) -> None:
    """The operand is cast on the device, then the kernel runs: no fallback,
    wherever the backend's kernel takes the result dtype and its provider
    casts both operand dtypes."""
    native = set(kernel_dtypes(op))
    castable = _castable()
    checked = 0
    for a, b in _pairs():
        result = torch.result_type(torch.empty(1, dtype=a), torch.empty(1, dtype=b))
        if a == b or result not in native or (op == "sub" and torch.bool in (a, b)):
            continue
        if not {a, b} <= castable:
            continue
        x, y = _operand(a, (2, 3), 8).to(DEVICE), _operand(b, (2, 3), 9).to(DEVICE)
        torch_infini.cpu_fallback.reset_stats()
        with torch_infini.cpu_fallback.strict():
            OPS[op](x, y)
        checked += 1
    assert checked > 20


def test_a_one_element_operand_of_a_reduced_float_result_is_read_unrounded() -> None:
    """float16 x * int64 tensor(2049): PyTorch's kernels multiply by 2049, not
    by its float16 value 2048; infini agrees (through the fallback)."""
    x_cpu = torch.full((4,), 3.0, dtype=torch.float16)
    s_cpu = torch.tensor(2049)
    want = x_cpu * s_cpu
    with torch_infini.cpu_fallback.allowed("silent"):
        got = x_cpu.to(DEVICE) * s_cpu.to(DEVICE)
    assert_matches(got, want, exact=True)
    assert got[0].item() == 6148.0
