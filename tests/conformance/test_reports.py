"""The report tools, run as CI runs them: in subprocesses, on temporary outputs.

Gaps never fail a report; an invalid profile or a failure to generate exits
with status 2 and ``error: ...``. The JSON and Markdown carry the same counts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch_infini

REPO_ROOT = Path(__file__).resolve().parents[2]
API_GAPS = REPO_ROOT / "tools" / "report_api_gaps.py"
OP_COVERAGE = REPO_ROOT / "tools" / "report_op_coverage.py"
PROFILE = Path(__file__).with_name("api_profile.json")

_COUNT_ROW = re.compile(r"^\| `([a-z_]+)` \| (\d+) \|")
_SECTION = re.compile(r"^#{2,3} (.+) \((\d+)\)$")


def _run(tool: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(tool), *map(str, args)],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _describe(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit status {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"


def _markdown_counts(text: str) -> dict[str, int]:
    """The rows of the "## Counts" table."""
    counts: dict[str, int] = {}
    in_counts = False
    for line in text.splitlines():
        if line.startswith("#"):
            in_counts = line == "## Counts"
        elif in_counts and (match := _COUNT_ROW.match(line)):
            counts[match[1]] = int(match[2])
    return counts


def _markdown_sections(text: str) -> dict[str, tuple[int, int]]:
    """Heading -> (count in the heading, table rows below it)."""
    sections: dict[str, tuple[int, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        if match := _SECTION.match(line):
            current = match[1]
            sections[current] = (int(match[2]), 0)
        elif line.startswith("#"):
            current = None
        elif current is not None and line.startswith("| ") and not line.startswith("|---"):
            count, rows = sections[current]
            sections[current] = (count, rows + 1)
    # Header rows are counted too: one per non-empty table.
    return {name: (count, rows - 1 if rows else 0) for name, (count, rows) in sections.items()}


def _generate(tmp_path: Path, tool: Path, *extra: str | Path) -> tuple[dict[str, Any], str]:
    markdown, data = tmp_path / "out" / "report.md", tmp_path / "out" / "report.json"
    proc = _run(tool, *extra, "--markdown", markdown, "--json", data)
    assert proc.returncode == 0, _describe(proc)
    assert proc.stderr.strip() == "" or "Warning" in proc.stderr, _describe(proc)
    return json.loads(data.read_text(encoding="utf-8")), markdown.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def api_gaps(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    return _generate(tmp_path_factory.mktemp("api"), API_GAPS, "--profile", PROFILE)


@pytest.fixture(scope="module")
def op_coverage(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    return _generate(tmp_path_factory.mktemp("ops"), OP_COVERAGE)


# ---------------------------------------------------------------- API gaps


def test_api_gaps_counts(api_gaps: tuple[dict[str, Any], str]) -> None:
    data, markdown = api_gaps
    counts = data["counts"]
    assert _markdown_counts(markdown) == counts
    assert counts["total"] == len(torch.cuda.__all__) == len(data["symbols"])
    categories = data["categories"]
    assert sum(len(names) for names in categories.values()) == counts["total"]
    assert len(categories["required/present"]) == counts["required_present"]
    assert len(categories["required/missing"]) == counts["required_missing"]
    assert len(categories["planned"]) == counts["planned"]
    assert len(categories["excluded"]) == counts["excluded"]
    assert len(categories["unclassified"]) == counts["unclassified"]
    assert counts["required"] == counts["required_present"] + counts["required_missing"]
    assert counts["required_present"] == (
        counts["required_present_signature_equal"]
        + counts["required_present_signature_different"]
        + counts["required_present_signature_uninspectable"]
    )
    sections = _markdown_sections(markdown)
    for category, names in categories.items():
        assert sections[category] == (len(names), len(names)), category


def test_api_gaps_today(api_gaps: tuple[dict[str, Any], str]) -> None:
    """Today every symbol is classified and every required one is present."""
    data, _ = api_gaps
    counts = data["counts"]
    assert counts["unclassified"] == 0
    assert counts["required_missing"] == 0
    assert counts["symbols_with_problems"] == 0
    event = next(s for s in data["symbols"] if s["name"] == "Event")
    assert event["category"] == "required/present"
    assert event["signature"]["comparison"] == "different"
    assert event["signature"]["differences"] == ["parameter 'external' is missing"]
    assert event["signature_ok"] is True


def test_gaps_do_not_fail_the_report(tmp_path: Path) -> None:
    profile = json.loads(PROFILE.read_text(encoding="utf-8"))
    del profile["symbols"]["cudart"]  # -> unclassified
    profile["symbols"]["get_device_properties"] = {  # -> required, missing
        "status": "required",
        "signature": "strict",
        "contracts": ["properties"],
    }
    profile["symbols"]["synchronize"]["status"] = "planned"  # present although planned
    profile["symbols"]["stale_symbol"] = {
        "status": "excluded",
        "signature": "none",
        "contracts": ["interop"],
        "reason": "not in torch.cuda",
    }
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile), encoding="utf-8")
    data, markdown = _generate(tmp_path, API_GAPS, "--profile", path)
    counts = data["counts"]
    assert data["categories"]["unclassified"] == ["cudart"]
    assert data["categories"]["required/missing"] == ["get_device_properties"]
    assert counts["planned_present"] == 1
    assert data["stale_profile_entries"] == ["stale_symbol"]
    assert counts["symbols_with_problems"] == 2
    assert _markdown_counts(markdown) == counts
    assert "`cudart`" in markdown and "`get_device_properties`" in markdown


def test_invalid_profile_exits_2(tmp_path: Path) -> None:
    profile = json.loads(PROFILE.read_text(encoding="utf-8"))
    profile["symbols"]["init"]["status"] = "someday"
    profile["symbols"]["cudart"].pop("reason")
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile), encoding="utf-8")
    out = tmp_path / "gaps.json"
    proc = _run(API_GAPS, "--profile", path, "--json", out)
    assert proc.returncode == 2, _describe(proc)
    assert proc.stderr.startswith(f"error: invalid API profile {path}: 2 problem(s)"), proc.stderr
    assert "symbol 'init': status must be one of required, planned, excluded" in proc.stderr
    assert "symbol 'cudart': an excluded symbol needs a 'reason'" in proc.stderr
    assert not out.exists()


def test_unreadable_profile_exits_2(tmp_path: Path) -> None:
    proc = _run(API_GAPS, "--profile", tmp_path / "absent.json", "--json", tmp_path / "x.json")
    assert proc.returncode == 2, _describe(proc)
    assert "error: invalid API profile" in proc.stderr and "cannot read the file" in proc.stderr


@pytest.mark.parametrize("tool", [API_GAPS, OP_COVERAGE], ids=["api_gaps", "op_coverage"])
def test_output_option_required(tool: Path) -> None:
    proc = _run(tool)
    assert proc.returncode == 2, _describe(proc)
    assert "error: give at least one of --markdown PATH and --json PATH" in proc.stderr


@pytest.mark.parametrize("tool", [API_GAPS, OP_COVERAGE], ids=["api_gaps", "op_coverage"])
def test_write_failure_exits_2(tool: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    proc = _run(tool, "--json", blocker / "report.json")
    assert proc.returncode == 2, _describe(proc)
    assert proc.stderr.startswith(f"error: cannot write {blocker / 'report.json'}"), proc.stderr


# ---------------------------------------------------------------- operator coverage


def test_op_coverage_counts(op_coverage: tuple[dict[str, Any], str]) -> None:
    data, markdown = op_coverage
    counts = data["counts"]
    assert _markdown_counts(markdown) == counts
    families = data["families"]
    assert counts["families"] == len(families)
    assert sum(info["operators"] for info in families.values()) == counts["operators"]
    assert counts["with_op_db_entry"] + counts["without_op_db_entry"] == counts["operators"]
    assert len(data["without_op_db_entry"]) == counts["without_op_db_entry"]
    sections = _markdown_sections(markdown)
    for family, info in families.items():
        assert sections[family] == (info["operators"], info["operators"]), family
    assert sections["without an op_db entry"][0] == counts["without_op_db_entry"]
    assert (
        sum(len(o["conformance_cases"]) for o in data["operators"]) == counts["conformance_cases"]
    )


def test_op_coverage_matches_the_dispatcher(op_coverage: tuple[dict[str, Any], str]) -> None:
    data, _ = op_coverage
    routed = set(torch_infini.cpu_fallback.routed_operators())  # fallback, not kernels
    registered = sorted(
        name
        for name in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
        if name.startswith(("aten::", "infini::")) and name not in routed
    )
    assert sorted(o["name"] for o in data["operators"] if o["registered"]) == registered
    assert data["backend"] == torch_infini.backend()
    declared = {
        info.name: [str(d).removeprefix("torch.") for d in info.dtypes]
        for info in torch_infini.operators()
    }
    for op in data["operators"]:
        if op["in_table"]:
            assert op["dtypes"] == declared[op["name"]], op["name"]
        else:
            assert op["family"] == "unlisted"


def test_op_coverage_says_how_every_operator_is_served(
    op_coverage: tuple[dict[str, Any], str],
) -> None:
    """Per aten overload: native on this backend, falls back, composite, or refused."""
    data, markdown = op_coverage
    serving = data["serving"]
    status = serving["operators"]
    assert set(status.values()) <= set(serving["meanings"])
    assert sum(serving["counts"].values()) == len(status)
    assert set(torch._C._dispatch_get_all_op_names()) >= set(status)
    declared = {info.name for info in torch_infini.operators()}
    assert {n for n, s in status.items() if s == "native"} == declared
    routed = set(torch_infini.cpu_fallback.routed_operators())
    assert {n for n, s in status.items() if s == "fallback (routed)"} == routed
    expected = {
        "aten::atan2.out": "fallback",  # a CPU kernel, no infini kernel
        "aten::atan2": "fallback (routed)",  # a structured operator's functional form
        "aten::mm": "native",
        "aten::native_layer_norm": "fallback (routed)",
        "aten::linear": "native",  # CompositeImplicitAutograd, with a kernel
        "aten::matmul": "composite",
        "aten::normal_": "native",
        "aten::poisson": "refused: random",
        "aten::_values": "refused: view",
        "aten::_cudnn_rnn_flatten_weight": "no CPU kernel",
    }
    assert {name: status[name] for name in expected} == expected
    sections = _markdown_sections(markdown)
    for key, count in serving["counts"].items():
        if key not in ("composite", "fallback"):
            assert sections[key][0] == count, key


def test_charts_draw_one_bar_per_row(
    op_coverage: tuple[dict[str, Any], str], tmp_path: Path
) -> None:
    """tools/charts.py: valid SVG, one bar per serving kind / benchmark case."""
    import xml.etree.ElementTree as ET

    data, _ = op_coverage
    (tmp_path / "cov.json").write_text(json.dumps(data))
    bench = {
        "backend": "host",
        "device": "d",
        "results": [
            {"name": "a", "ratio": 1.05, "target": "<= 1.1", "meets_target": True},
            {"name": "b", "ratio": 1.8, "target": "<= 1.3", "meets_target": False},
        ],
    }
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools" / "charts.py"), "--op-coverage",
         str(tmp_path / "cov.json"), "--benchmarks", str(tmp_path / "bench.json"),
         "--out", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    ns = "{http://www.w3.org/2000/svg}"
    coverage = ET.parse(tmp_path / "op_coverage.svg").getroot()
    assert len(coverage.findall(f"{ns}rect")) == 1 + len(data["serving"]["counts"])
    benchmarks = ET.parse(tmp_path / "benchmarks.svg").getroot()
    fills = [r.get("fill") for r in benchmarks.findall(f"{ns}rect")][1:]
    assert fills == ["#3a7d44", "#c0392b"]  # a miss is red
