"""tools/gpu_run_report.py: the dated record a GPU run leaves under docs/gpu_runs/.

A GPU is lent rarely and for minutes; what its run found must outlive it.
The record carries the run's header (commits, GPU, steps), the test counts
per file with every failure, and the benchmark table.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "gpu_run_report.py"

SUMMARY = """# GPU run, 2026-12-06 10:00 UTC

- torch 2.11.0+cu128, triton 3.5.0, nvcc 12.8, sm_90
- GPU: NVIDIA H100 80GB HBM3, 570.10
- InfiniRT a38977e, InfiniOps 1f6f9c23
- [12s] InfiniRT built for NVIDIA
"""

# pytest's junit XML as gpu_run.sh asks for it (xunit1: a file per testcase).
JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.python.test_copy" name="test_a" file="tests/python/test_copy.py"/>
<testcase classname="tests.python.test_copy" name="test_b" file="tests/python/test_copy.py">
  <failure message="AssertionError: not bit-for-bit equal: 3 of 8 elements differ">trace</failure>
</testcase>
<testcase classname="tests.python.test_copy" name="test_c" file="tests/python/test_copy.py">
  <skipped message="needs 2 infini devices"/>
</testcase>
<testcase classname="tests.python.test_ops_matmul" name="test_mm"
  file="tests/python/test_ops_matmul.py"/>
<testcase classname="tests.python.test_ops_matmul" name="test_crash"
  file="tests/python/test_ops_matmul.py"><error message="worker crashed">x</error></testcase>
</testsuite></testsuites>
"""


def _run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    summary = tmp_path / "summary.md"
    summary.write_text(SUMMARY)
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--summary", str(summary), "--docs",
         str(tmp_path / "docs"), "--date", "2026-12-06", *extra],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_the_record_has_counts_per_file_failures_commits_and_benchmarks(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    table = tmp_path / "vs_cuda.md"
    table.write_text("| case | infini / cuda |\n|---|---|\n| mm 4096 | 1.02 |\n")
    proc = _run(tmp_path, "--junit", str(junit), "--benchmarks", str(table))
    assert proc.returncode == 0, proc.stderr
    record = tmp_path / "docs" / "2026-12-06-nvidia-h100-80gb-hbm3.md"
    assert proc.stdout.strip() == str(record)
    text = record.read_text()
    assert "InfiniRT a38977e, InfiniOps 1f6f9c23" in text
    assert "| `tests/python/test_copy.py` | 1 | 1 | 0 | 1 |" in text
    assert "| `tests/python/test_ops_matmul.py` | 1 | 0 | 1 | 0 |" in text
    assert "| **all** | 2 | 1 | 1 | 1 |" in text
    assert (
        "- failed: `tests/python/test_copy.py::test_b`: AssertionError: not bit-for-bit equal"
        in text
    )
    assert "- error: `tests/python/test_ops_matmul.py::test_crash`: worker crashed" in text
    assert "| mm 4096 | 1.02 |" in text


def test_a_run_that_stopped_before_its_tests_still_leaves_a_record(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--junit", str(tmp_path / "missing.xml"))
    assert proc.returncode == 0, proc.stderr
    text = Path(proc.stdout.strip()).read_text()
    assert text.startswith("# GPU run, 2026-12-06")
    assert "No test results" in text and "No benchmark table was written." in text


def test_unreadable_junit_fails_naming_the_problem(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text("<testsuites><testsuite>")
    proc = _run(tmp_path, "--junit", str(junit))
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpu_run_report: ")
