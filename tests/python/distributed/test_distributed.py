"""torch.distributed on infini tensors: the c10d backend "infini".

Every test launches real processes on the loopback (torchrun, or plain
subprocesses where a rank must die) running a job of distributed_jobs.py,
and asserts on what each rank reports. The oracle is the CPU: the same
collective on CPU tensors through gloo, and for DDP one process training on
the full batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
import torch_infini

JOBS = Path(__file__).with_name("distributed_jobs.py")
WORLD = 2

pytestmark = pytest.mark.skipif(
    not torch_infini.distributed.is_available(),
    reason="PyTorch built without torch.distributed/gloo",
)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCH_INFINI_CPU_FALLBACK"] = "silent"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def _reports(out: Path, ranks: range, log: str) -> list[dict[str, Any]]:
    reports = []
    for rank in ranks:
        path = out / f"rank{rank}.json"
        assert path.exists(), f"rank {rank} wrote no report\n{log[-6000:]}"
        reports.append(json.loads(path.read_text()))
    return reports


def torchrun(job: str, out: Path, env: dict[str, str] | None = None, timeout: float = 300):
    """``torchrun --standalone --nproc-per-node=2 distributed_jobs.py JOB OUT``."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={WORLD}",
        str(JOBS),
        job,
        str(out),
    ]
    proc = subprocess.run(
        cmd, env=_env(env), capture_output=True, text=True, timeout=timeout, check=False
    )
    log = f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert proc.returncode == 0, log[-6000:]
    return _reports(out, range(WORLD), log)


def assert_all_ok(reports: list[dict[str, Any]], minimum: int) -> None:
    failed = [
        f"rank {r['rank']}: {res['case']}\n{res['detail']}"
        for r in reports
        for res in r["results"]
        if not res["ok"]
    ]
    assert not failed, f"{len(failed)} failed:\n" + "\n".join(failed[:8])
    counts = {len(r["results"]) for r in reports}
    assert len(counts) == 1 and min(counts) >= minimum, counts


def test_registered_for_the_infini_device() -> None:
    assert dist.get_default_backend_for_device("infini") == "infini"
    assert dist.Backend("infini") == "infini"
    assert "infini" in dist.Backend.backend_list
    assert dist.Backend.backend_capability["infini"] == ["infini"]
    assert torch_infini.distributed.engine() == "gloo"


@pytest.mark.parametrize("staged", [False, True], ids=["in-place", "staged"])
def test_every_collective_matches_gloo_on_cpu(tmp_path: Path, staged: bool) -> None:
    """all_reduce (sum, avg, max, min, product; band, bor, bxor, which gloo
    computes on integral and bool tensors, checked against the bitwise fold of
    every rank's input, and refuses on the others), broadcast, reduce, all_gather
    (list and into a tensor), reduce_scatter (list and tensor), all_to_all
    (list and single, uneven splits), gather, scatter, send/recv (blocking,
    async, batched, any source), barrier, coalescing, for every dtype gloo
    supports, bit for bit against gloo on CPU tensors; Work and futures; stream
    order; errors. ``staged``: through pinned copies, as where device memory is
    not host memory."""
    reports = torchrun("collectives", tmp_path, {"INFINI_TEST_DIST_STAGED": "1" if staged else "0"})
    assert_all_ok(reports, minimum=200)
    assert {r["engine"] for r in reports} == {"gloo"}
    assert {r["backend"] for r in reports} == {"cpu:gloo,infini:infini"}


def test_init_forms(tmp_path: Path) -> None:
    """backend="infini", no backend on the infini accelerator, device_id=...,
    and get_default_backend_for_device. Without a backend the group is
    "cpu:gloo,infini:infini" (as "cpu:gloo,cuda:nccl"): CPU tensors go
    through gloo, also for the group init_device_mesh makes. A CPU tensor on
    an infini-only group raises a RuntimeError naming the CPU."""
    assert_all_ok(torchrun("init_forms", tmp_path), minimum=5)


@pytest.mark.parametrize("init", ["cpu:gloo,infini:infini", "none"], ids=["named", "no-argument"])
def test_ddp_trains_mlp_and_llama_like_one_process(tmp_path: Path, init: str) -> None:
    """DDP over the infini backend: after a few SGD steps the parameters are
    identical on every rank, equal (within float32 tolerance) to one process
    training on the full batch on the CPU and to the same DDP on CPU/gloo.
    ``no-argument``: the group comes from ``dist.init_process_group()``."""
    reports = torchrun("ddp", tmp_path, {"INFINI_TEST_DIST_INIT": init})
    assert_all_ok(reports, minimum=2)
    assert {r["backend"] for r in reports} == {"cpu:gloo,infini:infini"}
    for name in ("mlp", "llama"):
        assert all(f"{name}_step_s" in r for r in reports)


def _launch_plain(job: str, out: Path, env: dict[str, str]) -> list[subprocess.Popen[str]]:
    """Two ranks as plain processes (no torchrun agent that would tear the
    group down for us), rendezvous through a file."""
    procs = []
    for rank in range(WORLD):
        rank_env = _env(
            {
                **env,
                "RANK": str(rank),
                "WORLD_SIZE": str(WORLD),
                "INIT_FILE": str(out / "store"),
            }
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(JOBS), job, str(out)],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


@pytest.mark.parametrize("fault", ["dies", "stalls"])
def test_a_lost_peer_fails_the_others_within_the_timeout(tmp_path: Path, fault: str) -> None:
    """Rank 1 exits (or stops taking part) after a first all_reduce; rank 0's
    next all_reduce raises within the group's timeout instead of hanging."""
    timeout = 5.0
    procs = _launch_plain(
        "faults", tmp_path, {"INFINI_TEST_FAULT": fault, "INFINI_TEST_TIMEOUT": str(timeout)}
    )
    start = time.monotonic()
    try:
        rank0_out, _ = procs[0].communicate(timeout=timeout + 90)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert procs[0].returncode == 0, rank0_out[-6000:]
    (report,) = _reports(tmp_path, range(1), rank0_out)
    assert report["raised"] is not None, "rank 0's all_reduce returned without its peer"
    assert report["elapsed_s"] < timeout + 30, report
    assert time.monotonic() - start < timeout + 90


def test_ddp_benchmark_runs_and_reports(tmp_path: Path) -> None:
    """benchmarks/ddp.py (torchrun, 2 processes) checks DDP on infini against
    DDP on the CPU before timing, and reports a ratio per case."""
    out = tmp_path / "ddp.json"
    script = Path(__file__).resolve().parents[3] / "benchmarks" / "ddp.py"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={WORLD}",
            str(script),
            "--quick",
            "--json",
            str(out),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    results = json.loads(out.read_text())
    assert [r["name"] for r in results] == [
        "DDP MLP 256-1024-256, batch 64",
        "DDP Llama example, batch 32",
    ]
    assert all(r["ratio"] > 0 and r["cpu_ms"] > 0 and r["infini_ms"] > 0 for r in results)
