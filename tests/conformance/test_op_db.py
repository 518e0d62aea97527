"""Conformance over PyTorch's whole operator database: every OpInfo, infini against the CPU.

One test per (OpInfo of op_db, dtype): float32, float16 or bfloat16, and one
integer dtype where the OpInfo supports them on the CPU (see
``op_db_engine.select_dtypes``). Each runs the OpInfo's first ``MAX_SAMPLES``
samples, generated on the CPU, forward -- and backward for float32 wherever
the OpInfo supports autograd -- on the CPU and on a copy on infini, with the
CPU fallback's default policy. Every sample must match the CPU (bit for bit
where the CPU's kernel ran: the fallback, every kernel of the ``host``
backend; with the OpInfo's tolerances where an InfiniOps kernel ran), raise
the CPU's exception type where the CPU raises, or be refused with one of the
documented NotImplementedErrors (``op_db_engine.REFUSALS``). Only results
PyTorch leaves uninitialised and random samples are exempt from value
comparison (their geometry is compared).

Known wrong answers are never skipped: they fail, naming the OpInfo, the
dtype and the sample. ``tools/op_db_sweep.py`` runs the full sweep (every
sample) in worker processes, classifies crashes and hangs, and writes the
counts to build/reports/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from op_coverage import dtype_name, opinfo_id
from op_db_engine import (
    REFUSALS,
    SIMULATE_VARIABLE,
    _cpu_not_reproducible,
    _forward,
    all_opinfos,
    run_case,
    select_dtypes,
)

# Samples per (OpInfo, dtype): bounds the suite's time (1-2 minutes with -n 2
# on the host backend, inline or async); the sweep script runs them all.
MAX_SAMPLES = 4

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
SWEEP = REPO_ROOT / "tools" / "op_db_sweep.py"


def _params() -> list[Any]:
    params = []
    for opinfo in all_opinfos():
        dtypes = select_dtypes(opinfo)
        if not dtypes:
            params.append(pytest.param(opinfo, None, id=f"{opinfo_id(opinfo)}-none"))
        for dtype in dtypes:
            params.append(
                pytest.param(opinfo, dtype, id=f"{opinfo_id(opinfo)}-{dtype_name(dtype)}")
            )
    return params


@pytest.mark.parametrize(("opinfo", "dtype"), _params())
def test_opinfo_matches_cpu(opinfo: Any, dtype: Any, record_property: Any) -> None:
    if dtype is None:
        pytest.skip(f"{opinfo_id(opinfo)} supports no dtype on the CPU: there is no oracle")
    case = run_case(opinfo, dtype, MAX_SAMPLES)
    for outcome in ("match", "refused", "wrong", "error"):
        record_property(outcome, sum(r.outcome == outcome for r in case.records))
    assert not case.note, f"{case.opinfo} {case.dtype}: {case.note}"
    failures = case.failures()
    assert not failures, f"{len(failures)} sample(s) of {case.opinfo} in {case.dtype}:\n" + (
        "\n".join(
            f"- sample {r.sample} {r.phase}: {r.outcome}: {r.detail}\n  {r.summary}"
            for r in failures
        )
    )


def test_refusals_are_documented_in_the_readme() -> None:
    """Each refusal the conformance accepts is one the README's "CPU fallback" section lists."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### The CPU fallback") :]
    section = section[: section.index("\n## ")]
    documented = {
        "random operator": r"random\s+operators",
        "sparse, nested or quantized tensor": (
            r"sparse\s+\(COO, CSR, \.\.\.\), strided nested[\s\S]{0,120}?\s+and\s+quantized"
        ),
    }
    for key, _, _ in REFUSALS:
        assert key in documented, f"refusal {key!r}: say where the README documents it"
        assert re.search(documented[key], section), f"the README does not document {key!r}"


_COUNT_ROW = re.compile(r"^\| `([a-z_]+)` \| (\d+) \|")


def test_sweep_script_classifies_crashes_and_hangs(tmp_path: Path) -> None:
    """The script's report: counts in JSON and Markdown agree; a dying or stuck worker is named.

    Three OpInfos, one sample each; the worker is made to abort on ``neg``
    and to stop responding on ``abs`` (TORCH_INFINI_OP_DB_SWEEP_SIMULATE).
    """
    env = dict(os.environ)
    env[SIMULATE_VARIABLE] = "crash:^neg$,hang:^abs$"
    proc = subprocess.run(
        [sys.executable, str(SWEEP), "--only", r"^(abs|neg|atan2)$", "--max-samples", "1",
         "--jobs", "1", "--timeout", "5", "--json", str(tmp_path / "r.json"),
         "--markdown", str(tmp_path / "r.md")],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "r.json").read_text())
    failed = {f["opinfo"]: f["outcome"] for f in data["crashed_or_hung"]}
    assert failed == {"neg": "crash", "abs": "hang"}
    assert {case["opinfo"] for case in data["cases"]} == {"atan2"}
    counts = data["counts"]
    assert (counts["crashed_opinfos"], counts["hung_opinfos"]) == (1, 1)
    assert counts["samples"] == len(data["cases"]) and counts["forward_wrong"] == 0
    markdown = (tmp_path / "r.md").read_text()
    table = {m[1]: int(m[2]) for line in markdown.splitlines() if (m := _COUNT_ROW.match(line))}
    assert table == counts


def test_reproducibility_check_tells_a_cpu_kernel_that_varies() -> None:
    """A kernel whose bits depend on where its input lies is caught; add is not.

    Some CPU kernels (LAPACK's blocked drivers, vectorized tails) give other
    bits for the same values at another alignment; where the CPU kernel is not
    reproducible bit for bit, the sweep compares with the OpInfo's tolerances
    instead (``_reclassify``). Whether a given LAPACK build varies is the
    machine's business (CI's gelsy turned out reproducible), so the varying
    kernel here is made to vary: it adds its input's address modulo 4 KiB.
    """
    import torch

    def sample(*tensors: Any, **kwargs: Any) -> Any:
        return SimpleNamespace(input=tensors[0], args=tensors[1:], kwargs=kwargs)

    def address_dependent(x: torch.Tensor) -> torch.Tensor:
        return x + float(x.data_ptr() % 4096)

    g = torch.Generator().manual_seed(0)
    varies = SimpleNamespace(name="address_dependent", op=address_dependent)
    one = sample(torch.randn(2, 3, generator=g))
    assert _cpu_not_reproducible(varies, one, _forward(varies, one, "cpu", False))
    add = SimpleNamespace(name="add", op=torch.add)
    pair = sample(torch.randn(100, generator=g), torch.randn(100, generator=g))
    assert not _cpu_not_reproducible(add, pair, _forward(add, pair, "cpu", False))


def test_staged_fallback_matches_the_cpu(tmp_path: Path) -> None:
    """Every OpInfo again (2 samples each) with the fallback staged through pinned
    memory, the path devices whose memory the CPU cannot address take."""
    proc = subprocess.run(
        [sys.executable, str(SWEEP), "--staged", "--max-samples", "2", "--jobs", "2",
         "--json", str(tmp_path / "r.json")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["fallback_staged"] is True
    failures = [
        f"{f['opinfo']} {f['dtype']} sample {f['sample']} {f['phase']}: {f['detail']}"
        for f in data["failures"]
    ]
    assert not failures and not data["crashed_or_hung"], "\n".join(failures[:20])
    assert data["counts"]["forward_fallback"] > 1000  # the staged path really ran
