"""Failing-first: operators whose infini results do not yet have the
geometry PyTorch predicts for infini (issue 30, items 5 and 9). The
checks are tests/conformance/test_output_strides.py's; its PENDING list
names these operators and why (see tests/pending/README.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
import test_output_strides as strides  # noqa: E402


@pytest.mark.usefixtures("_silent_fallback", "_quiet_fake_tensors")
@pytest.mark.parametrize("opinfo", strides._opinfos(pending=True))
def test_result_geometry_is_the_prediction_for_infini(opinfo: Any) -> None:
    strides.check_result_geometry(opinfo)


@pytest.mark.usefixtures("_silent_fallback")
@pytest.mark.parametrize("staged", [False, True], ids=["in place", "staged"])
@pytest.mark.parametrize("mnk", [(5, 1, 3), (3, 1, 5), (6, 3, 5)], ids=str)
def test_lstsq_solution_is_laid_out_as_on_the_cpu(mnk: tuple[int, int, int], staged: bool) -> None:
    strides.check_lstsq_solution_is_laid_out_as_on_the_cpu(mnk, staged)


_silent_fallback = strides._silent_fallback
_quiet_fake_tensors = strides._quiet_fake_tensors
