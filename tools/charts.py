"""Pictures of the reports: SVG bar charts, no plotting library needed.

    python tools/charts.py --benchmarks build/reports/benchmarks.json \\
        --op-coverage build/reports/op_coverage.json --op-db build/reports/op_db.json \\
        --out build/reports

writes (for each input given) ``benchmarks.svg``: every case's ratio against
plain PyTorch CPU, with its target marked and misses in red;
``op_coverage.svg``: how infini serves every aten overload; ``op_db.svg``:
the op_db conformance outcomes, forward and backward.
"""

from __future__ import annotations

import argparse
import json
import sys
from html import escape
from pathlib import Path
from typing import Any

ROW = 22  # pixels per bar
LABEL = 330  # width of the label column
PLOT = 420  # width of the bars
GOOD, BAD, NEUTRAL, TARGET = "#3a7d44", "#c0392b", "#4a6fa5", "#222"


def _svg(title: str, height: int, body: list[str]) -> str:
    width = LABEL + PLOT + 90
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="sans-serif" font-size="12">',
            f'<rect width="{width}" height="{height}" fill="white"/>',
            f'<text x="10" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
            *body,
            "</svg>",
            "",
        ]
    )


def bars(
    title: str,
    rows: list[tuple[str, float, str]],
    *,
    scale_max: float,
    value_format: str = "{:.2f}",
    marks: list[tuple[int, float]] | None = None,
    axis: list[float] | None = None,
) -> str:
    """Horizontal bars: (label, value, colour) per row; ``marks``: (row, value) ticks."""
    top = 34
    body = []
    x0 = LABEL
    for tick in axis or []:
        x = x0 + PLOT * tick / scale_max
        body.append(
            f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{top + ROW * len(rows)}" '
            f'stroke="#ddd"/>'
            f'<text x="{x:.1f}" y="{top + ROW * len(rows) + 14}" text-anchor="middle" '
            f'fill="#666">{tick:g}</text>'
        )
    for i, (label, value, colour) in enumerate(rows):
        y = top + ROW * i
        width = PLOT * min(value, scale_max) / scale_max
        body.append(
            f'<text x="{x0 - 6}" y="{y + 15}" text-anchor="end">{escape(label)}</text>'
            f'<rect x="{x0}" y="{y + 4}" width="{width:.1f}" height="{ROW - 8}" fill="{colour}"/>'
            f'<text x="{x0 + width + 4:.1f}" y="{y + 15}">{value_format.format(value)}</text>'
        )
    for i, value in marks or []:
        x = x0 + PLOT * min(value, scale_max) / scale_max
        y = top + ROW * i
        body.append(
            f'<line x1="{x:.1f}" y1="{y + 1}" x2="{x:.1f}" y2="{y + ROW - 1}" '
            f'stroke="{TARGET}" stroke-width="2"/>'
        )
    return _svg(title, top + ROW * len(rows) + 24, body)


def benchmarks_chart(data: dict[str, Any]) -> str:
    """Ratio infini / CPU per case (bandwidth cases: CPU / infini), target as a black tick."""
    rows, marks = [], []
    for i, r in enumerate(data["results"]):
        rows.append((r["name"], r["ratio"], GOOD if r["meets_target"] else BAD))
        marks.append((i, float(r["target"].split()[1])))
    top = max([2.0, *(v for _, v, _ in rows), *(m for _, m in marks)])
    memory = data.get("memory", "shared")
    title = (
        f"benchmarks on {data['backend']} ({memory} memory): infini / CPU time "
        "(copies: bandwidth ratio); black tick: target"
    )
    return bars(title, rows, scale_max=top, marks=marks, axis=[0.5, 1.0, 1.5, 2.0])


def op_coverage_chart(data: dict[str, Any]) -> str:
    counts = data["serving"]["counts"]
    colours = {
        "native": GOOD,
        "refused: random": BAD,
        "refused: view": BAD,
        "no CPU kernel": "#999",
    }
    rows = [(key, float(n), colours.get(key, NEUTRAL)) for key, n in counts.items()]
    title = (
        f"every aten overload on {data['backend']}: how infini serves it ({sum(counts.values())})"
    )
    return bars(title, rows, scale_max=max(n for _, n, _ in rows), value_format="{:.0f}")


def op_db_chart(data: dict[str, Any]) -> str:
    c = data["counts"]
    rows = []
    for phase in ("forward", "backward"):
        for outcome, colour in (
            ("match", GOOD),
            ("refused", NEUTRAL),
            ("wrong", BAD),
            ("error", BAD),
        ):
            rows.append((f"{phase} {outcome}", float(c[f"{phase}_{outcome}"]), colour))
    rows += [
        ("OpInfos crashed", float(c["crashed_opinfos"]), BAD),
        ("OpInfos hung", float(c["hung_opinfos"]), BAD),
    ]
    samples = "all samples" if data["max_samples"] is None else f"<= {data['max_samples']} samples"
    title = f"op_db against the CPU on {data['backend']} ({c['opinfos']} OpInfos, {samples} each)"
    return bars(title, rows, scale_max=max(n for _, n, _ in rows), value_format="{:.0f}")


def _benchmarks_name(source: Path) -> str:
    try:
        memory = json.loads(source.read_text()).get("memory", "shared")
    except (OSError, ValueError):
        memory = "shared"  # (main reports the unreadable file)
    return "benchmarks.svg" if memory == "shared" else f"benchmarks_{memory}.svg"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--benchmarks",
        type=Path,
        action="append",
        help="benchmarks/run.py --json output (repeatable: one chart per memory mode, "
        "benchmarks.svg for shared memory, benchmarks_discrete.svg for discrete)",
    )
    parser.add_argument("--op-coverage", type=Path, help="report_op_coverage.py --json output")
    parser.add_argument("--op-db", type=Path, help="op_db_sweep.py --json output")
    parser.add_argument("--out", type=Path, required=True, help="directory for the .svg files")
    args = parser.parse_args(argv)
    jobs = [
        *((source, benchmarks_chart, _benchmarks_name(source)) for source in args.benchmarks or []),
        (args.op_coverage, op_coverage_chart, "op_coverage.svg"),
        (args.op_db, op_db_chart, "op_db.svg"),
    ]
    if not any(source for source, _, _ in jobs):
        parser.error("give at least one of --benchmarks, --op-coverage, --op-db")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for source, chart, name in jobs:
            if source is None:
                continue
            path = args.out / name
            path.write_text(chart(json.loads(source.read_text())), encoding="utf-8")
            print(f"wrote {path}")
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
