"""Failing-first tests of CUDA's finer device rules in the CPU fallback
(issue 30, item 10), pending their fix: see tests/pending/README.md.

TensorIterator takes a 0-dim CPU tensor as a scalar only where the kernel
allows CPU scalars (binary operators, at most one per call), and operators
whose device check is "exact same" (gather, index_select, ...) take none.
The fallback today accepts every 0-dim CPU input.
"""

from __future__ import annotations

import torch
import torch_infini  # noqa: F401
from infini_testing import raises_exactly

DEVICE = torch.device("infini", 0)
SAME_DEVICE = "Expected all tensors to be on the same device"


def test_cpu_scalar_input_of_a_unary_out_call_raises() -> None:
    """Unary TensorIterator operators take no CPU scalar: log1p(cpu 0-dim, out=cuda) raises."""
    out = torch.zeros((), device=DEVICE)
    with raises_exactly(RuntimeError, SAME_DEVICE):
        torch.log1p(torch.tensor(1.0), out=out)
    assert out.item() == 0.0


def test_two_cpu_scalars_into_an_infini_out_raise() -> None:
    """TensorIterator allows one CPU scalar per call on a device ("too many CPU scalars")."""
    out = torch.zeros((), device=DEVICE)
    with raises_exactly(RuntimeError, "Trying to pass too many CPU scalars to non-CPU kernel"):
        torch.atan2(torch.tensor(1.0), torch.tensor(2.0), out=out)
    assert out.item() == 0.0


def test_exact_same_operators_refuse_a_cpu_zero_dim_tensor() -> None:
    """gather and index_select check every tensor (ExactSame): a 0-dim CPU index is no scalar."""
    with raises_exactly(RuntimeError, SAME_DEVICE):
        torch.gather(torch.tensor(5.0, device=DEVICE), 0, torch.tensor(0))
    with raises_exactly(RuntimeError, SAME_DEVICE):
        torch.index_select(torch.arange(4.0, device=DEVICE), 0, torch.tensor(1))
    with raises_exactly(RuntimeError, SAME_DEVICE):
        torch.index_select(torch.arange(4.0, device=DEVICE), 0, torch.tensor([1, 2]))
