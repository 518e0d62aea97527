"""The record a GPU run leaves in the repository: docs/gpu_runs/<date>-<gpu>.md.

    python tools/gpu_run_report.py --summary OUT/summary.md --junit OUT/junit.xml \
        [--benchmarks OUT/vs_cuda.md] --docs docs/gpu_runs [--date YYYY-MM-DD]

tools/gpu_run.sh calls it after its tests: the run's header (date, torch,
GPU, the InfiniRT and InfiniOps commits, each step's outcome, from
summary.md), the test counts per file and every failure with its first
line (from pytest's junit XML), and the benchmarks/vs_cuda.py table. The
file is committed with the fixes the run led to, so a later session sees
what ran on real hardware and what it found.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter, defaultdict
from pathlib import Path

OUTCOMES = ("passed", "failed", "error", "skipped")


def _test_file(case: ElementTree.Element) -> str:
    """The test file of a junit testcase (xunit1: ``file``; else the
    classname's dotted module path)."""
    if case.get("file"):
        return str(case.get("file"))
    module = str(case.get("classname", "")).split("::")[0]
    return module.replace(".", "/") + ".py" if module else "(unknown file)"


def _outcome(case: ElementTree.Element) -> tuple[str, str]:
    for tag in ("failure", "error", "skipped"):
        child = case.find(tag)
        if child is not None:
            first = (child.get("message") or child.text or "").strip().splitlines()
            return ("failed" if tag == "failure" else tag), (first[0] if first else "")
    return "passed", ""


def tables_of_tests(junit: Path) -> list[str]:
    """Counts per file, then the failures and errors, as Markdown lines."""
    root = ElementTree.parse(junit).getroot()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    failures: list[str] = []
    for case in root.iter("testcase"):
        path = _test_file(case)
        outcome, message = _outcome(case)
        counts[path][outcome] += 1
        if outcome in ("failed", "error"):
            failures.append(f"- {outcome}: `{path}::{case.get('name')}`: {message[:300]}")
    lines = ["| test file | " + " | ".join(OUTCOMES) + " |", "|---" * (len(OUTCOMES) + 1) + "|"]
    total: Counter[str] = Counter()
    for path in sorted(counts):
        total.update(counts[path])
        lines.append(f"| `{path}` | " + " | ".join(str(counts[path][o]) for o in OUTCOMES) + " |")
    lines.append("| **all** | " + " | ".join(str(total[o]) for o in OUTCOMES) + " |")
    lines += ["", "Failures and errors:" if failures else "No failures or errors.", *failures]
    return lines


def _gpu_name(summary: str) -> str:
    match = re.search(r"^- GPU: ([^,\n]+)", summary, re.MULTILINE)
    name = match.group(1).strip() if match else "gpu"
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "gpu"


def render(summary: str, junit: Path | None, benchmarks: str | None) -> str:
    lines = [summary.rstrip(), "", "## Tests", ""]
    if junit is not None and junit.is_file():
        lines += tables_of_tests(junit)
    else:
        lines.append("No test results (the run stopped before its tests, or pytest wrote none).")
    lines += ["", "## Benchmarks (benchmarks/vs_cuda.py)", ""]
    lines.append(benchmarks.rstrip() if benchmarks else "No benchmark table was written.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", type=Path, required=True, help="gpu_run.sh's summary.md")
    parser.add_argument("--junit", type=Path, help="pytest's junit XML")
    parser.add_argument("--benchmarks", type=Path, help="benchmarks/vs_cuda.py --markdown")
    parser.add_argument("--docs", type=Path, required=True, help="the folder of dated records")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    args = parser.parse_args(argv)
    try:
        summary = args.summary.read_text()
        benchmarks = (
            args.benchmarks.read_text() if args.benchmarks and args.benchmarks.is_file() else None
        )
        text = render(summary, args.junit, benchmarks)
        args.docs.mkdir(parents=True, exist_ok=True)
        path = args.docs / f"{args.date}-{_gpu_name(summary)}.md"
        path.write_text(text)
    except (OSError, ElementTree.ParseError) as exc:
        print(f"gpu_run_report: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
