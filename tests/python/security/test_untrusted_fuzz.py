"""The untrusted-input fuzzer (untrusted_fuzz.py) finds nothing.

Checkpoints loaded with ``torch.load(weights_only=True)`` and ``set_``,
``as_strided`` and ``resize_`` geometries, mutated at random from a fixed
seed, each compared with what the CPU accepts or refuses: infini never
accepts what the CPU refuses, never crashes (the fuzzer runs in a
subprocess: a crash fails this test and names the case), never reads or
writes outside a storage (values and the storage after a write equal the
CPU's), and a refused resize_ leaves the tensor as it was.

Inline: 3,000 cases. ``TORCH_INFINI_FUZZ_CASES`` sets more: CI runs the
tests marked ``fuzz`` again with 40,000 (ci/test.sh), in discrete mode,
and under ASan + UBSan (ci/sanitize.sh).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from infini_testing import describe, run_python

DRIVER = Path(__file__).with_name("untrusted_fuzz.py")
CASES = int(os.environ.get("TORCH_INFINI_FUZZ_CASES", "3000"))
KINDS = ("checkpoint", "set_", "as_strided", "resize_")


def _fuzz(seed: int, cases: int) -> dict:
    proc = run_python(
        f"import runpy, sys; sys.argv = ['fuzz', '--seed', '{seed}', '--cases', '{cases}'];"
        f" runpy.run_path({str(DRIVER)!r}, run_name='__main__')",
        timeout=1800,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("SUMMARY "):
        last = lines[-1] if lines else "(none)"
        pytest.fail(f"the fuzzer died at the case it printed last: {last}\n{describe(proc)}")
    return json.loads(lines[-1].removeprefix("SUMMARY "))


@pytest.mark.fuzz
@pytest.mark.parametrize("seed", [0, 1])
def test_the_fuzzer_finds_nothing(seed: int) -> None:
    cases = CASES // 2  # per seed
    summary = _fuzz(seed, cases)
    assert summary["mismatches"] == [], json.dumps(summary["mismatches"][:20], indent=1)
    verdicts = summary["cpu_verdicts"]
    # Both sides of every kind were explored: the draws reach what the CPU
    # accepts and what it refuses (the overflowing edges included).
    for kind in KINDS:
        assert verdicts.get(f"{kind} accepted", 0) >= cases // 50, verdicts
        assert verdicts.get(f"{kind} refused", 0) >= cases // 50, verdicts
