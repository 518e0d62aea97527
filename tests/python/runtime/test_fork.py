"""fork() and infini, as torch.cuda: a child forked after the backend started
cannot use it and says so; a child forked before can (issue 10, defect 8).

A process forked after initialization has no stream worker threads (they do
not survive fork) and a copy of runtime state it does not own, so it used to
hang forever on its first synchronizing operation. Every scenario runs in a
fresh interpreter whose parent waits for the child with a deadline, so a hang
fails one test instead of hanging the suite; each runs with inline and with
asynchronous host streams.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from infini_testing import describe, run_python

BAD_FORK_MESSAGE = "Cannot re-initialize infini in forked subprocess"
CHILD_DEADLINE_S = 20
ASYNC_MODES = pytest.mark.parametrize("async_host", ["0", "1"], ids=["inline", "async"])

# What a child tries first; each on its own, in a fresh process.
CHILD_USES = {
    "empty": 'torch.empty(4, device="infini")',
    "to": 'torch.arange(4.0).to("infini").cpu()',
    "synchronize": "torch.infini.synchronize()",
    "mem_get_info": "torch.infini.mem_get_info()",
}

_OS_FORK_SCRIPT = """
import json
import os
import sys
import time
import torch
import torch_infini

INIT_FIRST = {init_first}
parent_count = None
if INIT_FIRST:
    x = torch.arange(4.0).to("infini") * 2
    torch.infini.synchronize()
    parent_count = torch.infini.device_count()
report = {{
    "parent_initialized_before_fork": bool(torch.infini.is_initialized()),
    "parent_bad_fork_before": torch.infini._is_in_bad_fork(),
    "parent_count": parent_count,
}}
read_end, write_end = os.pipe()
sys.stdout.flush()
sys.stderr.flush()
pid = os.fork()
if pid == 0:
    os.close(read_end)
    child = {{"bad_fork": None, "error": None, "message": None, "values_ok": None}}
    try:
        child["bad_fork"] = torch.infini._is_in_bad_fork()
        if INIT_FIRST:  # (asked before init, the count would initialize the child)
            child["count"] = torch.infini.device_count()
            child["available"] = torch.infini.is_available()
        {use}
        y = torch.arange(5.0).to("infini") + 1
        child["values_ok"] = torch.equal(y.cpu(), torch.arange(5.0) + 1)
    except BaseException as error:
        child["error"] = type(error).__name__
        child["message"] = str(error)
    os.write(write_end, json.dumps(child).encode())
    os._exit(0)
os.close(write_end)
deadline = time.monotonic() + {deadline}
status = None
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.02)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    status = "hung"
data = b""
while chunk := os.read(read_end, 65536):
    data += chunk
report["child_status"] = status
report["child"] = json.loads(data) if data else None
report["parent_bad_fork_after"] = torch.infini._is_in_bad_fork()
z = torch.arange(3.0).to("infini") * 3
report["parent_values_ok"] = torch.equal(z.cpu(), torch.arange(3.0) * 3)
print("REPORT " + json.dumps(report))
"""

_MP_FORK_SCRIPT = """
import json
import multiprocessing
import queue
import torch
import torch_infini


def child(results):
    out = {{"bad_fork": None, "error": None, "message": None, "values_ok": None}}
    try:
        out["bad_fork"] = torch.infini._is_in_bad_fork()
        y = torch.arange(5.0).to("infini") + 1
        out["values_ok"] = torch.equal(y.cpu(), torch.arange(5.0) + 1)
    except BaseException as error:
        out["error"] = type(error).__name__
        out["message"] = str(error)
    results.put(out)


if __name__ == "__main__":
    if {init_first}:
        torch.arange(4.0).to("infini").cpu()
        torch.infini.synchronize()
    report = {{"parent_initialized_before_fork": bool(torch.infini.is_initialized())}}
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    process = ctx.Process(target=child, args=(results,))
    process.start()
    try:
        report["child"] = results.get(timeout={deadline})
    except queue.Empty:
        report["child"] = None
    process.join(timeout=5)
    if process.is_alive():
        process.kill()
        process.join()
        report["child_status"] = "hung"
    else:
        report["child_status"] = process.exitcode
    report["parent_bad_fork_after"] = torch.infini._is_in_bad_fork()
    z = torch.arange(3.0).to("infini") * 3
    report["parent_values_ok"] = torch.equal(z.cpu(), torch.arange(3.0) * 3)
    print("REPORT " + json.dumps(report))
"""


def _run(script: str, async_host: str, *, lazy_backend: bool = False) -> dict[str, Any]:
    """Runs a scenario; ``lazy_backend``: with TORCH_INFINI_BACKEND unset.

    An explicit TORCH_INFINI_BACKEND initializes the runtime at import (so a
    backend that cannot be served fails the import): a child forked "before
    initialization" exists only with the default, lazily selected backend.
    """
    env: dict[str, str | None] = {"TORCH_INFINI_HOST_ASYNC": async_host}
    if lazy_backend:
        env["TORCH_INFINI_BACKEND"] = None
    try:
        proc = run_python(script, env=env, timeout=120)
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"the scenario did not finish: {timeout}")
    assert proc.returncode == 0, describe(proc)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("REPORT ")), None)
    assert line is not None, describe(proc)
    return json.loads(line.removeprefix("REPORT "))


def _assert_child_refused(report: dict[str, Any]) -> None:
    """A child forked after initialization raised CUDA's error, and did not hang."""
    assert report["parent_initialized_before_fork"] is True, report
    assert report["child_status"] != "hung", f"the forked child hung: {report}"
    child = report["child"]
    assert child is not None, report
    assert child["bad_fork"] is True, child
    assert child["error"] == "RuntimeError", child
    assert BAD_FORK_MESSAGE in child["message"], child
    if "parent_count" in report:  # os.fork: the count, as torch.cuda's in a forked child
        assert report["parent_count"] >= 1, report
        assert child["count"] == report["parent_count"] and child["available"] is True, child
    _assert_parent_fine(report)


def _assert_parent_fine(report: dict[str, Any]) -> None:
    assert report["parent_bad_fork_after"] is False, report
    assert report["parent_values_ok"] is True, report


@ASYNC_MODES
@pytest.mark.parametrize("use", sorted(CHILD_USES))
def test_fork_after_init_child_raises_instead_of_hanging(use: str, async_host: str) -> None:
    script = _OS_FORK_SCRIPT.format(init_first=True, use=CHILD_USES[use], deadline=CHILD_DEADLINE_S)
    report = _run(script, async_host)
    _assert_child_refused(report)


@ASYNC_MODES
def test_fork_before_init_child_uses_infini(async_host: str) -> None:
    script = _OS_FORK_SCRIPT.format(
        init_first=False, use=CHILD_USES["synchronize"], deadline=CHILD_DEADLINE_S
    )
    report = _run(script, async_host, lazy_backend=True)
    assert report["parent_initialized_before_fork"] is False, report
    assert report["parent_bad_fork_before"] is False, report
    assert report["child_status"] != "hung", f"the forked child hung: {report}"
    child = report["child"]
    assert child == {"bad_fork": False, "error": None, "message": None, "values_ok": True}, report
    _assert_parent_fine(report)


@ASYNC_MODES
def test_multiprocessing_fork_after_init_child_raises(async_host: str) -> None:
    report = _run(_MP_FORK_SCRIPT.format(init_first=True, deadline=CHILD_DEADLINE_S), async_host)
    _assert_child_refused(report)


@ASYNC_MODES
def test_multiprocessing_fork_before_init_child_uses_infini(async_host: str) -> None:
    report = _run(
        _MP_FORK_SCRIPT.format(init_first=False, deadline=CHILD_DEADLINE_S),
        async_host,
        lazy_backend=True,
    )
    assert report["parent_initialized_before_fork"] is False, report
    assert report["child_status"] == 0, report
    assert report["child"] == {
        "bad_fork": False,
        "error": None,
        "message": None,
        "values_ok": True,
    }, report
    _assert_parent_fine(report)
