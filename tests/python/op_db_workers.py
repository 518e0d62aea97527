"""The op_db sweep in worker processes: every OpInfo of op_db through
op_db_engine.run_case, in processes that may crash or hang without taking
the sweep down (each classified as ``crash`` or ``hang``). A test library
module, as op_db_engine; ``tools/op_db_sweep.py`` calls sweep() and writes
the report, and tests/conformance/test_op_db.py runs that tool."""

from __future__ import annotations

import argparse
import os
import re
import selectors
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from op_db_engine import (
    REPO_ROOT,
    RESULT_PREFIX,
    SIMULATE_VARIABLE,
    TOOLS_DIR,
    CaseResult,
    Record,
    _summary,
    all_opinfos,
    run_case,
    select_dtypes,
)


def _worker(max_samples: int | None, staged: bool) -> int:
    """Reads OpInfo indices from stdin, runs every dtype of each, writes one result line each."""
    import faulthandler
    import json

    import torch_infini
    from op_coverage import dtype_name, opinfo_id

    torch_infini._C._set_fallback_staging_forced(staged)
    faulthandler.enable()  # a crash names the Python frame on stderr
    opinfos = all_opinfos()
    simulate = [rule.split(":", 1) for rule in os.environ.get(SIMULATE_VARIABLE, "").split(",")]
    print(RESULT_PREFIX + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        index = int(line)
        opinfo = opinfos[index]
        for outcome, pattern in (rule for rule in simulate if len(rule) == 2):
            if re.search(pattern, opinfo_id(opinfo)):
                if outcome == "crash":
                    os.abort()
                time.sleep(3600)  # "hang"
        for dtype in select_dtypes(opinfo):

            def progress(sample_index: int, sample: Any, dtype: Any = dtype) -> None:
                at = {"dtype": dtype_name(dtype), "sample": sample_index}
                at["summary"] = _summary(sample)
                print(RESULT_PREFIX + json.dumps({"at": at}), flush=True)

            case = run_case(opinfo, dtype, max_samples, progress)
            print(RESULT_PREFIX + json.dumps({"case": asdict(case)}), flush=True)
        print(RESULT_PREFIX + json.dumps({"done": index}), flush=True)
    return 0


class _WorkerProcess:
    def __init__(self, max_samples: int | None, env: dict[str, str], staged: bool) -> None:
        self.log = tempfile.TemporaryFile()
        command = [sys.executable, str(Path(__file__).resolve()), "--worker"]
        if staged:
            command.append("--staged")
        if max_samples is not None:
            command += ["--max-samples", str(max_samples)]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            cwd=REPO_ROOT,
            text=True,
            bufsize=1,
        )
        self.buffer = ""
        self.index: int | None = None
        self.at: dict[str, Any] = {}  # the sample running now
        self.started = 0.0
        self.ready = False

    def send(self, index: int) -> None:
        assert self.process.stdin is not None
        self.index, self.started, self.at = index, time.monotonic(), {}
        self.process.stdin.write(f"{index}\n")
        self.process.stdin.flush()

    def stderr_tail(self) -> str:
        self.log.seek(0)
        lines = self.log.read().decode(errors="replace").strip().splitlines()
        fatal = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
        if fatal:  # faulthandler: the error and the innermost Python frame
            tail = [line.strip() for line in lines[fatal[-1] :]]
            frames = [line for line in tail if line.startswith("File")]
            return " | ".join([tail[0], *frames[:1]])[-600:]
        lines = [line for line in lines if "ran on the CPU" not in line]  # fallback warnings
        return " | ".join(lines[-4:])[-600:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.log.close()


def sweep(
    max_samples: int | None, jobs: int, timeout: float, only: str | None, staged: bool = False
) -> tuple[list[CaseResult], list[dict[str, Any]]]:
    """Runs every OpInfo in worker processes; returns the cases and the crashed/hung OpInfos."""
    import json

    from op_coverage import dtype_name, opinfo_id

    opinfos = all_opinfos()
    pending = [i for i, op in enumerate(opinfos) if not only or re.search(only, opinfo_id(op))]
    total = len(pending)
    pending.reverse()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p
        for p in (str(Path(__file__).resolve().parent), str(TOOLS_DIR), env.get("PYTHONPATH", ""))
        if p
    )
    cases: list[CaseResult] = []
    failed: list[dict[str, Any]] = []
    selector = selectors.DefaultSelector()
    workers: list[_WorkerProcess] = []
    done = 0

    def start() -> None:
        worker = _WorkerProcess(max_samples, env, staged)
        assert worker.process.stdout is not None
        os.set_blocking(worker.process.stdout.fileno(), False)
        selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
        worker.started = time.monotonic()
        workers.append(worker)

    def retire(worker: _WorkerProcess, outcome: str, detail: str) -> None:
        nonlocal done
        selector.unregister(worker.process.stdout)
        if worker.index is not None:
            opinfo = opinfos[worker.index]
            failed.append(
                {
                    "opinfo": opinfo_id(opinfo),
                    "outcome": outcome,
                    "dtypes": [dtype_name(d) for d in select_dtypes(opinfo)],
                    "dtype": worker.at.get("dtype", ""),
                    "sample": worker.at.get("sample", -1),
                    "summary": worker.at.get("summary", ""),
                    "detail": detail,
                }
            )
            done += 1
        worker.stop()
        workers.remove(worker)
        if pending:
            start()

    for _ in range(min(jobs, len(pending))):
        start()
    while workers:
        now = time.monotonic()
        for worker in list(workers):
            limit = timeout if worker.ready else max(timeout, 120.0)
            if now - worker.started > limit:
                retire(worker, "hang", f"no result after {limit:.0f} s")
        for key, _ in selector.select(timeout=1.0):
            worker = key.data
            chunk = worker.process.stdout.read()
            if not chunk:
                code_ = worker.process.wait()
                retire(worker, "crash", f"worker exited with {code_}: {worker.stderr_tail()}")
                continue
            worker.buffer += chunk
            *lines, worker.buffer = worker.buffer.split("\n")
            for line in lines:
                if not line.startswith(RESULT_PREFIX):
                    continue
                payload = json.loads(line[len(RESULT_PREFIX) :])
                if "at" in payload:
                    worker.at = payload["at"]
                    continue
                if "case" in payload:
                    cases.append(case_from_json(payload["case"]))
                    continue
                if "done" in payload:
                    done += 1
                    print(f"[{done}/{total}] {opinfo_id(opinfos[payload['done']])}", flush=True)
                worker.ready = True
                worker.index = None
                if pending:
                    worker.send(pending.pop())
                else:
                    selector.unregister(worker.process.stdout)
                    worker.stop()
                    workers.remove(worker)
                    break
    return cases, failed


def case_from_json(data: dict[str, Any]) -> CaseResult:
    records = [Record(**r) for r in data.pop("records")]
    return CaseResult(records=records, **data)


def _worker_main(argv: list[str] | None = None) -> int:
    """A worker process of sweep() (its command line: --worker [--staged]
    [--max-samples N])."""
    parser = argparse.ArgumentParser(description="an op_db sweep worker (sweep() starts it)")
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--staged", action="store_true")
    parser.add_argument("--max-samples", type=int, default=None)
    args = parser.parse_args(argv)
    return _worker(args.max_samples, args.staged)


if __name__ == "__main__":
    sys.exit(_worker_main())
