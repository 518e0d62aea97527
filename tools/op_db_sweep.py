"""The op_db sweep: every OpInfo of PyTorch's op_db, run on infini and compared with the CPU.

    python tools/op_db_sweep.py --markdown build/reports/op_db.md --json build/reports/op_db.json
        [--max-samples N] [--jobs J] [--timeout SECONDS] [--only REGEX] [--staged]

The command line of the test library that does the work
(tests/python/op_db_engine.py, whose docstring says what is compared and
how; op_db_workers.py runs it in worker processes): this file writes the
report. It counts match / refused by reason / wrong / error / crash / hang,
forward and backward, and how many samples ran natively or used the CPU
fallback. It never fails on results; it exits with status 2 when it cannot
be generated. tests/conformance/test_op_db.py runs the same checks, bounded,
under pytest.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

from op_db_engine import REFUSALS, SCHEMA, CaseResult, all_opinfos, select_dtypes  # noqa: E402
from op_db_workers import sweep  # noqa: E402
from report_io import (  # noqa: E402
    ReportError,
    add_output_arguments,
    code,
    counts_table,
    require_output,
    run,
    table,
    write_outputs,
)

# ---------------------------------------------------------------- report


COUNT_MEANINGS = {
    "opinfos": "OpInfos in op_db",
    "opinfos_without_cpu_dtype": "OpInfos supporting no dtype on the CPU (nothing to run)",
    "cases": "(OpInfo, dtype) pairs run",
    "samples": "samples run (forward)",
    "forward_match": "forward samples with the CPU's result (or the CPU's exception type)",
    "forward_refused": "forward samples refused with a documented NotImplementedError",
    "forward_wrong": "forward samples whose result differs from the CPU's",
    "forward_error": (
        "forward samples raising where the CPU did not (not a documented refusal), "
        "or not raising / raising another type where the CPU raised"
    ),
    "backward_match": "backward samples with the CPU's gradients (or exception type)",
    "backward_refused": "backward samples refused with a documented NotImplementedError",
    "backward_wrong": "backward samples whose gradients differ from the CPU's",
    "backward_error": "backward samples raising where the CPU did not (or as forward_error)",
    "forward_native": "forward samples infini ran without the CPU fallback",
    "forward_fallback": "forward samples where at least one operator ran in the CPU fallback",
    "backward_native": "backward samples infini ran without the CPU fallback",
    "backward_fallback": "backward samples where at least one operator ran in the CPU fallback",
    "crashed_opinfos": "OpInfos whose worker process died",
    "hung_opinfos": "OpInfos whose worker gave no result within the timeout",
    "sample_generation_failures": "cases whose samples the CPU could not generate",
}


def build_report(
    cases: list[CaseResult],
    failed: list[dict[str, Any]],
    *,
    max_samples: int | None,
    seconds: float,
) -> dict[str, Any]:
    import torch
    import torch_infini

    opinfos = all_opinfos()
    records = [r for c in cases for r in c.records]
    by = Counter((r.phase, r.outcome) for r in records)
    ran = Counter((r.phase, r.ran) for r in records if r.ran)
    refusals = Counter((r.phase, r.reason) for r in records if r.outcome == "refused")
    counts = {
        "opinfos": len(opinfos),
        "opinfos_without_cpu_dtype": sum(not select_dtypes(op) for op in opinfos),
        "cases": len(cases),
        "samples": sum(c.samples for c in cases),
    }
    for phase in ("forward", "backward"):
        for outcome in ("match", "refused", "wrong", "error"):
            counts[f"{phase}_{outcome}"] = by[(phase, outcome)]
    for phase in ("forward", "backward"):
        for where in ("native", "fallback"):
            counts[f"{phase}_{where}"] = ran[(phase, where)]
    counts["crashed_opinfos"] = sum(f["outcome"] == "crash" for f in failed)
    counts["hung_opinfos"] = sum(f["outcome"] == "hang" for f in failed)
    counts["sample_generation_failures"] = sum(bool(c.note) for c in cases)
    failures = [asdict(r) for r in records if r.outcome in ("wrong", "error")]
    return {
        "schema": SCHEMA,
        "generator": "tools/op_db_sweep.py",
        "backend": torch_infini.backend(),
        "fallback_mode": torch_infini.cpu_fallback.mode(),
        "environment": {
            k: os.environ[k]
            for k in ("TORCH_INFINI_HOST_ASYNC", "TORCH_INFINI_HOST_DEVICES")
            if k in os.environ
        },
        "versions": {"torch": torch.__version__, "torch_infini": torch_infini.__version__},
        "max_samples": max_samples,
        "seconds": round(seconds, 1),
        "counts": counts,
        "refusals": {
            key: {
                "meaning": meaning,
                "forward": refusals[("forward", key)],
                "backward": refusals[("backward", key)],
            }
            for key, meaning, _ in REFUSALS
        },
        "match_reasons": {
            f"{phase}:{reason}": n
            for (phase, reason), n in sorted(
                Counter((r.phase, r.reason) for r in records if r.outcome == "match").items()
            )
        },
        "crashed_or_hung": failed,
        "sample_generation_failures": [
            {"opinfo": c.opinfo, "dtype": c.dtype, "note": c.note} for c in cases if c.note
        ],
        "failures": failures,
        "cases": [
            {
                "opinfo": c.opinfo,
                "dtype": c.dtype,
                "samples": c.samples,
                **{
                    o: sum(r.outcome == o for r in c.records)
                    for o in ("match", "refused", "wrong", "error")
                },
            }
            for c in cases
        ],
    }


def render_markdown(data: dict[str, Any]) -> str:
    versions = data["versions"]
    bound = data["max_samples"] if data["max_samples"] is not None else "all"
    lines = [
        "# op_db conformance sweep",
        "",
        f"Generated by `python tools/op_db_sweep.py` on backend `{data['backend']}` "
        f"(fallback mode `{data['fallback_mode']}`, torch {versions['torch']}, "
        f"torch-infini {versions['torch_infini']}; samples per (OpInfo, dtype): {bound}; "
        f"{data['seconds']} s). Every sample of every OpInfo in PyTorch's op_db runs on infini "
        "and on the CPU; results must match (bit for bit where the CPU kernel ran) or raise "
        "a documented refusal.",
        "",
        "## Counts",
        "",
        *counts_table(data["counts"], COUNT_MEANINGS),
        "",
        "## Refusals",
        "",
        *table(
            ["reason", "forward", "backward", "meaning"],
            [
                [code(k), v["forward"], v["backward"], v["meaning"]]
                for k, v in data["refusals"].items()
            ],
        ),
        "",
        "## Matches by kind",
        "",
        *table(["phase:kind", "samples"], [[code(k), v] for k, v in data["match_reasons"].items()]),
        "",
        f"## Crashed or hung OpInfos ({len(data['crashed_or_hung'])})",
        "",
        *table(
            ["OpInfo", "outcome", "dtype", "sample", "detail"],
            [
                [
                    code(f["opinfo"]),
                    f["outcome"],
                    f["dtype"],
                    f"{f['sample']}: {f['summary']}",
                    f["detail"],
                ]
                for f in data["crashed_or_hung"]
            ],
        ),
        "",
        f"## Wrong and error samples ({len(data['failures'])})",
        "",
        *table(
            ["OpInfo", "dtype", "sample", "phase", "outcome", "detail"],
            [
                [code(f["opinfo"]), f["dtype"], f["sample"], f["phase"], f["outcome"], f["detail"]]
                for f in data["failures"]
            ],
        ),
        "",
        f"## Sample generation failures ({len(data['sample_generation_failures'])})",
        "",
        *table(
            ["OpInfo", "dtype", "note"],
            [
                [code(f["opinfo"]), f["dtype"], f["note"]]
                for f in data["sample_generation_failures"]
            ],
        ),
        "",
    ]
    return "\n".join(lines)


def summary_line(data: dict[str, Any]) -> str:
    c = data["counts"]
    return (
        f"backend {data['backend']}: {c['cases']} cases, {c['samples']} samples; forward "
        f"{c['forward_match']} match, {c['forward_refused']} refused, {c['forward_wrong']} wrong, "
        f"{c['forward_error']} error; backward {c['backward_match']} match, "
        f"{c['backward_refused']} refused, {c['backward_wrong']} wrong, "
        f"{c['backward_error']} error; {c['crashed_opinfos']} crashed, "
        f"{c['hung_opinfos']} hung OpInfos"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_arguments(parser)
    parser.add_argument(
        "--max-samples",
        type=int,
        default=None,
        metavar="N",
        help="samples per (OpInfo, dtype) (default: all)",
    )
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: CPUs)"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per OpInfo before it counts as hung"
    )
    parser.add_argument("--only", metavar="REGEX", help="only OpInfos whose id matches")
    parser.add_argument(
        "--staged",
        action="store_true",
        help="stage every fallback call through pinned memory, as on devices whose memory "
        "the CPU cannot address, even where it can",
    )
    args = parser.parse_args(argv)
    require_output(parser, args)

    def generate() -> int:
        start = time.monotonic()
        cases, failed = sweep(
            args.max_samples, max(1, args.jobs), args.timeout, args.only, args.staged
        )
        if not cases and not failed:
            raise ReportError("no OpInfo ran")
        data = build_report(
            cases, failed, max_samples=args.max_samples, seconds=time.monotonic() - start
        )
        data["fallback_staged"] = args.staged
        for path in write_outputs(args, render_markdown(data), data):
            print(f"wrote {path}")
        print(summary_line(data))
        return 0

    return run(generate)


if __name__ == "__main__":
    sys.exit(main())
