"""The benchmarks in shared and discrete memory, side by side, as Markdown.

    python benchmarks/side_by_side.py SHARED.json DISCRETE.json [--markdown OUT.md]

Each input is a ``benchmarks/run.py --json`` file: one run with the host
device's memory shared with the host (the default), one with
``TORCH_INFINI_HOST_MEMORY=discrete`` (device memory out of the host's reach,
as on an accelerator). A row per case that either run measured: the CPU's
time (from the shared run), infini's time and ratio to the CPU in each mode,
and what crossed the host boundary per step in each (the cases that report
it). Ratios are against plain PyTorch on the CPU in the same process, as
run.py measures them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _load(path: Path, memory: str) -> dict[str, Any]:
    data = json.loads(path.read_text())
    got = data.get("memory", "shared")
    if got != memory:
        raise ValueError(f"{path}: a run with {got} memory, expected {memory}")
    return data


def _us(value: float) -> str:
    return f"{value:.2f} us" if value < 10 else f"{value:.0f} us"


def _cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "not run"
    ok = "" if result["meets_target"] else " (misses)"
    return f"{_us(result['infini_us'])}, {result['ratio']:.2f}{ok}"


def render(shared: dict[str, Any], discrete: dict[str, Any]) -> str:
    by_name = {
        "shared": {r["name"]: r for r in shared["results"]},
        "discrete": {r["name"]: r for r in discrete["results"]},
    }
    names = list(by_name["shared"]) + [n for n in by_name["discrete"] if n not in by_name["shared"]]
    lines = [
        f"Benchmarks on {shared['backend']} ({shared['device']}), torch {shared['torch']}, "
        f"{shared['threads']} thread(s), {shared['rounds']} rounds: infini's time per "
        "iteration and its ratio to the CPU's (bandwidth cases: the CPU's time over "
        "infini's), in shared and in discrete memory.",
        "",
        "| case | target | CPU | shared memory | discrete memory |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        s, d = by_name["shared"].get(name), by_name["discrete"].get(name)
        either = s or d
        assert either is not None
        cpu = _us(either["cpu_us"])
        lines.append(f"| {name} | {either['target']} | {cpu} | {_cell(s)} | {_cell(d)} |")
    details = [
        (name, mode, result["detail"])
        for name in names
        for mode in ("shared", "discrete")
        if (result := by_name[mode].get(name)) is not None and result.get("detail")
    ]
    if details:
        lines += ["", "What crossed the host boundary (and other details):", ""]
        lines += [f"- {name}, {mode}: {detail}" for name, mode, detail in details]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shared", type=Path, help="run.py --json of a shared-memory run")
    parser.add_argument("discrete", type=Path, help="run.py --json of a discrete-memory run")
    parser.add_argument("--markdown", type=Path, help="write the table here too")
    args = parser.parse_args(argv)
    try:
        text = render(_load(args.shared, "shared"), _load(args.discrete, "discrete"))
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text, end="")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
