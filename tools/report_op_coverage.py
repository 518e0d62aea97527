"""Report: the ATen operators with an infini kernel, by family, with their dtypes.

    python tools/report_op_coverage.py --markdown build/reports/op_coverage.md \\
        --json build/reports/op_coverage.json

Asks the dispatcher which ``aten::`` operators have a kernel for the
PrivateUse1 (infini) key, groups them by family with
``torch_infini.operators()`` (registered operators missing from that table
are family ``unlisted``), and shows the dtypes the selected backend's kernel
provider declares, the op_db entries whose samples the conformance suite
runs, and the generated conformance cases. Any failure to generate exits
with status 2 and ``error: ...``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from op_coverage import SERVING  # noqa: E402
from report_io import (  # noqa: E402
    add_output_arguments,
    cell,
    code,
    counts_table,
    generate,
    require_output,
    table,
)

SCHEMA = "torch-infini/op-coverage/1"

COUNT_MEANINGS = {
    "operators": "aten:: operators with a PrivateUse1 (infini) kernel in the dispatcher",
    "families": "operator families",
    "with_kernel_seam": (
        "operators served by a kernel-provider operator (the rest: factories, views, copies, "
        "storage)"
    ),
    "unlisted": "registered but missing from torch_infini.operators()",
    "not_registered": "in torch_infini.operators() but not registered with the dispatcher",
    "with_op_db_entry": "operators PyTorch's op_db has sample inputs for",
    "without_op_db_entry": "operators without an op_db entry",
    "conformance_cases": "generated (operator, OpInfo, declared dtype) conformance tests",
    "undeclared_dtype_checks": "operators checked to refuse an undeclared dtype",
    "other_namespace_registrations": "non-aten PrivateUse1 registrations (not counted above)",
}


def build() -> dict[str, Any]:
    import torch
    import torch_infini
    from op_coverage import (
        conformance_cases,
        dtype_name,
        load_op_db,
        operator_coverage,
        opinfo_id,
        other_namespaces,
        serving_status,
        undeclared_cases,
    )

    backend = torch_infini.backend()
    op_db = load_op_db()
    coverage = operator_coverage(op_db)
    cases = conformance_cases(coverage, op_db)
    undeclared = {case.operator: case for case in undeclared_cases(coverage, op_db)}

    operators = []
    families: dict[str, list[str]] = {}
    for op in coverage:
        tested = [case for case in cases if case.operator == op.name]
        probe = undeclared.get(op.name)
        operators.append(
            {
                "name": op.name,
                "family": op.family,
                "kernel": op.kernel,
                "variant": op.variant,
                "dtypes": [dtype_name(d) for d in op.dtypes],
                "registered": op.registered,
                "in_table": op.in_table,
                "op_db": list(op.opinfos),
                "conformance_cases": [
                    f"{opinfo_id(case.opinfo)}:{dtype_name(case.dtype)}" for case in tested
                ],
                "undeclared_dtype_check": None
                if probe is None
                else f"{opinfo_id(probe.opinfo)}:{dtype_name(probe.dtype)}",
            }
        )
        families.setdefault(op.family, []).append(op.name)

    serving = serving_status()
    by_status: dict[str, list[str]] = {key: [] for key in SERVING}
    for name, status in serving.items():
        by_status[status].append(name)

    registered = [o for o in operators if o["registered"]]
    others = other_namespaces()
    by_backend = _by_backend(operators)
    counts = {
        "operators": len(registered),
        "families": len({o["family"] for o in registered}),
        "with_kernel_seam": sum(o["kernel"] is not None for o in registered),
        "unlisted": sum(not o["in_table"] for o in operators),
        "not_registered": sum(not o["registered"] for o in operators),
        "with_op_db_entry": sum(bool(o["op_db"]) for o in registered),
        "without_op_db_entry": sum(not o["op_db"] for o in registered),
        "conformance_cases": len(cases),
        "undeclared_dtype_checks": len(undeclared),
        "other_namespace_registrations": sum(others.values()),
    }
    return {
        "schema": SCHEMA,
        "generator": "tools/report_op_coverage.py",
        "source": "torch._C._dispatch_get_registrations_for_dispatch_key('PrivateUse1'), "
        "joined with torch_infini.operators()",
        "backend": backend,
        "versions": {"torch": torch.__version__, "torch_infini": torch_infini.__version__},
        "counts": counts,
        "families": {
            family: {
                "operators": len(names),
                "with_kernel_seam": sum(
                    o["kernel"] is not None for o in operators if o["family"] == family
                ),
                "names": names,
            }
            for family, names in families.items()
        },
        "without_op_db_entry": [o["name"] for o in operators if not o["op_db"]],
        "not_registered": [o["name"] for o in operators if not o["registered"]],
        "other_namespaces": others,
        "operators": operators,
        "by_backend": by_backend,
        "serving": {
            "meanings": SERVING,
            "counts": {key: len(names) for key, names in by_status.items()},
            "operators": serving,
        },
    }


def _by_backend(operators: list[dict[str, Any]]) -> dict[str, Any]:
    """Per seam operator and backend: the dtypes served natively and those
    refused (with the reason), from InfiniOps' declarations
    (native/ops/include/torch_infini/ops/seam_operators.h, refusals in
    native/ops/src/seam/declared_support.cpp); every other dtype and every
    backend without the operator runs in the CPU fallback."""
    import torch
    import torch_infini
    from op_coverage import dtype_name
    from torch_infini._operators import declarations

    # The order the table lists dtypes in: floating first.
    order = [
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.uint16,
        torch.uint32,
        torch.uint64,
    ]
    # Copies, casts and fills serve every dtype (staged through the host, or
    # the value uploaded, where the provider lacks one): not part of this table.
    rows = [d for d in declarations() if d.op not in ("copy", "cast", "fill")]
    rows.sort(key=lambda d: order.index(d.dtype))
    backends = ["host", *torch_infini._C._infinirt_device_types()]
    result: dict[str, Any] = {}
    for d in rows:
        entry = result.setdefault(
            d.op,
            {
                "infiniops": d.infiniops,
                "aten": sorted(o["name"] for o in operators if o["kernel"] == d.op),
                "backends": {b: {"native": [], "refused": {}} for b in backends},
            },
        )
        columns = [(d.device_type, d.infinirt_refusal)]
        if d.device_type == "cpu":
            columns.append(("host", d.host_refusal))
        for backend, refusal in columns:
            cell_data = entry["backends"][backend]
            if refusal is None:
                cell_data["native"].append(dtype_name(d.dtype))
            else:
                cell_data["refused"][dtype_name(d.dtype)] = refusal
    return {"backends": backends, "operators": result}


def _backend_cell(data: dict[str, Any]) -> str:
    native = ", ".join(data["native"]) or "–"
    refused = ", ".join(f"~~{d}~~" for d in data["refused"])
    return f"{native}; refused: {refused}" if refused else native


def _dtypes(dtypes: list[str]) -> str:
    return ", ".join(dtypes) if dtypes else "–"


def render_markdown(data: dict[str, Any]) -> str:
    versions = data["versions"]
    by_name = {o["name"]: o for o in data["operators"]}
    lines = [
        "# Operators with an infini kernel",
        "",
        f"Generated by `python tools/report_op_coverage.py` on backend `{data['backend']}` "
        f"(torch {versions['torch']}, torch-infini {versions['torch_infini']}). "
        f"Source: {data['source']}. Dtypes are those the backend's kernel provider declares; "
        "op_db entries are PyTorch's OpInfos whose samples `tests/conformance` runs.",
        "",
        "## Counts",
        "",
        *counts_table(data["counts"], COUNT_MEANINGS),
        "",
        "## Families",
        "",
        *table(
            ["family", "operators", "with kernel seam"],
            [
                [code(family), info["operators"], info["with_kernel_seam"]]
                for family, info in data["families"].items()
            ],
        ),
        "",
    ]
    for family, info in data["families"].items():
        lines.extend([f"### {family} ({info['operators']})", ""])
        rows = []
        for name in info["names"]:
            op = by_name[name]
            rows.append(
                [
                    code(name),
                    code(op["kernel"]),
                    op["variant"],
                    _dtypes(op["dtypes"]),
                    cell([f"`{entry}`" for entry in op["op_db"]]),
                    len(op["conformance_cases"]),
                    op["undeclared_dtype_check"],
                ]
            )
        lines.extend(
            table(
                [
                    "operator",
                    "kernel",
                    "variant",
                    "dtypes",
                    "op_db",
                    "conformance cases",
                    "undeclared-dtype check",
                ],
                rows,
            )
        )
        lines.append("")
    without = data["without_op_db_entry"]
    lines.extend([f"## without an op_db entry ({len(without)})", ""])
    lines.extend(table(["operator", "family"], [[code(n), by_name[n]["family"]] for n in without]))
    lines.append("")
    missing = data["not_registered"]
    lines.extend([f"## in the operator table, not registered ({len(missing)})", ""])
    lines.extend(table(["operator"], [[code(n)] for n in missing]))
    lines.append("")
    by_backend = data["by_backend"]
    lines.extend(
        [
            "## native, fallback, refused: per operator and backend",
            "",
            "From InfiniOps' declarations "
            "(`native/ops/include/torch_infini/ops/seam_operators.h`): the dtypes "
            "each backend serves natively, and those InfiniOps declares but torch-infini "
            "refuses (struck through; the reasons are in the JSON report). Every other dtype, "
            "and every backend shown as –, runs in the CPU fallback under its policy. `host` "
            "is InfiniOps' `cpu` column run by the CPU's own kernels.",
            "",
            *table(
                ["seam operator", "aten", *by_backend["backends"]],
                [
                    [
                        f"{code(op)} ({info['infiniops']})",
                        cell([f"`{n.removeprefix('aten::')}`" for n in info["aten"]]),
                        *(_backend_cell(info["backends"][b]) for b in by_backend["backends"]),
                    ]
                    for op, info in by_backend["operators"].items()
                ],
            ),
            "",
        ]
    )
    serving = data["serving"]
    lines.extend(
        [
            f"## every aten operator on backend `{data['backend']}` ({len(serving['operators'])})",
            "",
            "How each overload in the dispatcher is served on infini: natively, in the CPU "
            "fallback, through PyTorch's composite, or refused.",
            "",
            *table(
                ["serving", "overloads", "meaning"],
                [
                    [code(key), serving["counts"][key], serving["meanings"][key]]
                    for key in serving["meanings"]
                ],
            ),
            "",
        ]
    )
    for key in serving["meanings"]:
        names = [n for n, status in serving["operators"].items() if status == key]
        if key in ("composite", "fallback"):  # long lists: collapsed
            lines.extend([f"<details><summary>{key} ({len(names)})</summary>", ""])
            lines.append(", ".join(f"`{n.removeprefix('aten::')}`" for n in names))
            lines.extend(["", "</details>", ""])
        else:
            lines.extend([f"### {key} ({len(names)})", ""])
            lines.append(", ".join(f"`{n.removeprefix('aten::')}`" for n in names) or "–")
            lines.append("")
    others = data["other_namespaces"]
    lines.extend(["## other namespaces", ""])
    lines.extend(table(["namespace", "registrations"], [[code(k), v] for k, v in others.items()]))
    lines.append("")
    return "\n".join(lines)


def summary(data: dict[str, Any]) -> str:
    c = data["counts"]
    families = ", ".join(f"{name} {info['operators']}" for name, info in data["families"].items())
    return (
        f"backend {data['backend']}: {c['operators']} aten operators with an infini kernel "
        f"({families}); op_db entries for {c['with_op_db_entry']}, none for "
        f"{c['without_op_db_entry']}; {c['conformance_cases']} conformance cases; all "
        f"{len(data['serving']['operators'])} aten overloads: "
        + ", ".join(f"{k} {n}" for k, n in data["serving"]["counts"].items())
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    require_output(parser, args)

    return generate(args, build, render_markdown, summary)


if __name__ == "__main__":
    sys.exit(main())
