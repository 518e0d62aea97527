"""The `host` device in discrete mode (TORCH_INFINI_HOST_MEMORY=discrete):
device memory the host cannot touch, as an accelerator's.

The address PyTorch sees (``data_ptr()``) has no access rights; the bytes
live in a kernel view only the runtime's copies and the host kernel provider
reach. A host read or write of a device address faults at once and says
that it was device memory; everything a program does through PyTorch (ops,
the CPU fallback, copies, printing, ``.item()``, saving) is the CPU's
result. Each case runs in a fresh interpreter in discrete mode (the mode is
chosen when the runtime starts), inline and with async streams on two
devices.
"""

from __future__ import annotations

import json

import pytest
from infini_testing import describe, run_python

DISCRETE = {"TORCH_INFINI_HOST_MEMORY": "discrete", "TORCH_INFINI_BACKEND": "host"}
MODES = pytest.mark.parametrize(
    "streams",
    [{}, {"TORCH_INFINI_HOST_ASYNC": "1", "TORCH_INFINI_HOST_DEVICES": "2"}],
    ids=["inline", "async-2-devices"],
)


def _run(code: str, **env: str) -> dict:
    proc = run_python(code, env={**DISCRETE, **env}, timeout=300)
    assert proc.returncode == 0, describe(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_host_read_of_device_memory_faults_naming_it() -> None:
    """The stray access a real accelerator would fault on: it dies loudly,
    naming the address as device memory (in shared mode it read 1.0)."""
    code = """
import ctypes, torch, torch_infini
x = torch.ones(1024, device="infini")
print("address", hex(x.data_ptr()), flush=True)
print("read", ctypes.c_float.from_address(x.data_ptr()).value, flush=True)
"""
    proc = run_python(code, env=DISCRETE, timeout=120)
    assert proc.returncode != 0, describe(proc)
    assert "read" not in proc.stdout.replace("address", ""), describe(proc)
    address = proc.stdout.split()[1]
    assert f"host code read or wrote device memory at address {address}" in proc.stderr, describe(
        proc
    )
    assert "Segmentation fault" in proc.stderr, describe(proc)  # Python's faulthandler too


def test_a_host_write_from_another_thread_faults_too() -> None:
    code = """
import ctypes, threading, torch, torch_infini
x = torch.zeros(16, device="infini")
t = threading.Thread(target=lambda: ctypes.memset(x.data_ptr(), 1, 4))
t.start(); t.join()
print("wrote", flush=True)
"""
    proc = run_python(code, env=DISCRETE, timeout=120)
    assert proc.returncode != 0 and "wrote" not in proc.stdout, describe(proc)
    assert "host code read or wrote device memory" in proc.stderr, describe(proc)


def test_the_mode_is_reported_and_shared_stays_the_default() -> None:
    code = """
import json, torch, torch_infini
print(json.dumps(torch_infini._C._capabilities()))
"""
    assert _run(code)["host_addressable"] is False
    proc = run_python(code, env={"TORCH_INFINI_HOST_MEMORY": None, "TORCH_INFINI_BACKEND": "host"})
    assert proc.returncode == 0, describe(proc)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["host_addressable"] is True


# What a program does with device tensors, each result compared with the
# CPU's bit for bit (same kernels: the CPU's own, on the kernel view).
USES = """
import io, json, warnings, torch, torch_infini
warnings.simplefilter("ignore")
def bits(t):
    t = t.detach().cpu()
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int64).tolist()
dev = torch.device("infini", torch.infini.device_count() - 1)
a_cpu = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
b_cpu = torch.randn(5, 6, generator=torch.Generator().manual_seed(1))
a, b = a_cpu.to(dev), b_cpu.to(dev)
r = {}
def same(name, got, expected):
    r[name] = bits(got) == bits(expected) and got.stride() == expected.stride()
same("native", (a * 2 + 1).sin(), (a_cpu * 2 + 1).sin())
same("matmul", a @ b, a_cpu @ b_cpu)
same("transposed copy", a.t().contiguous(), a_cpu.t().contiguous())
same("fallback", torch.atan2(a, a + 1), torch.atan2(a_cpu, a_cpu + 1))
same("fallback in place", a.clone().atan_(), a_cpu.clone().atan_())
out = torch.empty(6, 5, device=dev)
same("fallback out", torch.hypot(a, a, out=out), torch.hypot(a_cpu, a_cpu))
same("reduction", a.sum(1), a_cpu.sum(1))
same("index", a[torch.tensor([4, 0, 2], device=dev)], a_cpu[torch.tensor([4, 0, 2])])
pinned = torch.empty(6, 5).pin_memory()
pinned.copy_(a, non_blocking=True)
torch.infini.synchronize(dev)
same("to pinned, non_blocking", pinned, a_cpu)
back = torch.empty(6, 5, device=dev)
back.copy_(pinned, non_blocking=True)
same("from pinned, non_blocking", back, a_cpu)
r["item"] = a[1, 2].item() == a_cpu[1, 2].item()
r["tolist"] = a.tolist() == a_cpu.tolist()
r["print"] = repr(a).replace(f", device='{dev}'", "") == repr(a_cpu)
buffer = io.BytesIO()
torch.save({"a": a, "view": a[1:, ::2]}, buffer)
buffer.seek(0)
loaded = torch.load(buffer, weights_only=True)
same("save/load", loaded["view"], a_cpu[1:, ::2])
r["loaded on infini"] = loaded["a"].device == dev
x = a_cpu.clone().requires_grad_()
xd = a.clone().requires_grad_()
(x.sin() * x).sum().backward()
(xd.sin() * xd).sum().backward()
same("gradient", xd.grad, x.grad)
if torch.infini.device_count() > 1:
    same("across devices", a.to("infini:0").cos(), a_cpu.cos())
r["memory allocated"] = torch.infini.memory_allocated(dev) > 0
print(json.dumps(r))
"""


@MODES
def test_what_a_program_does_gives_the_cpus_results(streams: dict[str, str]) -> None:
    report = _run(USES, **streams)
    assert report and all(report.values()), report


@MODES
def test_memory_statistics_are_those_of_shared_mode(streams: dict[str, str]) -> None:
    code = """
import json, torch, torch_infini
x = torch.empty(1000, device="infini")
y = torch.empty(3 << 20, dtype=torch.uint8, device="infini")
del x
stats = torch.infini.memory_stats()
print(json.dumps({k: stats[k] for k in (
    "allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
    "num_alloc_retries", "segment.all.current")}))
"""
    discrete = _run(code, **streams)
    shared = _run(code, TORCH_INFINI_HOST_MEMORY="shared", **streams)
    assert discrete == shared, (discrete, shared)


def test_out_of_memory_in_discrete_mode_is_torch_out_of_memory() -> None:
    code = """
import json, torch, torch_infini
try:
    torch.empty(1 << 30, device="infini")
    print(json.dumps({"raised": None}))
except Exception as error:
    print(json.dumps({"raised": type(error).__name__}))
"""
    assert _run(code, TORCH_INFINI_HOST_MEMORY_LIMIT=str(64 << 20)) == {
        "raised": "OutOfMemoryError"
    }
