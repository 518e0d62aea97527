"""Command-line plumbing shared by the report tools.

Each report is written as Markdown and/or JSON; gaps are data, never a
failure. A failure to generate (invalid input, an import or write error)
prints ``error: ...`` to stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

EXIT_ERROR = 2
REPO_ROOT = Path(__file__).resolve().parents[1]


class ReportError(Exception):
    """A report cannot be generated; the message says why."""


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", type=Path, metavar="PATH", help="write the Markdown report")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the JSON report")


def require_output(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.markdown is None and args.json is None:
        parser.error("give at least one of --markdown PATH and --json PATH")


def write_outputs(args: argparse.Namespace, markdown: str, data: dict[str, Any]) -> list[Path]:
    written = []
    if args.markdown is not None:
        written.append(_write(args.markdown, markdown))
    if args.json is not None:
        written.append(_write(args.json, json.dumps(data, indent=2, sort_keys=False) + "\n"))
    return written


def _write(path: Path, text: str) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write {path}: {exc}") from exc
    return path


def run(main: Callable[[], int]) -> int:
    """Runs ``main``; any failure becomes ``error: ...`` and exit status 2."""
    try:
        return main()
    except SystemExit:
        raise
    except Exception as exc:
        message = str(exc) or type(exc).__name__
        if not isinstance(exc, ReportError) and type(exc).__name__ != "ProfileError":
            message = f"{type(exc).__name__}: {message}"
        print(f"error: {message}", file=sys.stderr)
        return EXIT_ERROR


def generate(
    args: argparse.Namespace,
    build: Callable[[], dict[str, Any]],
    render_markdown: Callable[[dict[str, Any]], str],
    summary: Callable[[dict[str, Any]], str],
) -> int:
    """Builds a report, writes the requested outputs, prints a summary.

    Exit status 0 whatever the report says; 2 with ``error: ...`` when it
    cannot be generated.
    """

    def main() -> int:
        data = build()
        written = write_outputs(args, render_markdown(data), data)
        print(summary(data))
        for path in written:
            print(f"wrote {path}")
        return 0

    return run(main)


# ---------------------------------------------------------------- Markdown


def cell(value: Any) -> str:
    """A Markdown table cell: pipes escaped, newlines flattened, empty as a dash."""
    if value is None or value == "" or value == []:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        value = ", ".join(str(v) for v in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    if not rows:
        return ["_none_"]
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines.extend("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)
    return lines


def code(value: Any) -> str:
    return f"`{value}`" if value not in (None, "") else "–"


def counts_table(counts: dict[str, int], meanings: dict[str, str]) -> list[str]:
    """``| `key` | n | meaning |`` rows: the same keys and numbers as the JSON counts."""
    return table(
        ["count", "value", "meaning"],
        [(f"`{key}`", value, meanings.get(key, "")) for key, value in counts.items()],
    )
