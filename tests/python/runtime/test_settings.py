"""A bad setting registers nothing.

Every ``TORCH_INFINI_*`` variable the device reads is checked at import,
before anything is renamed or registered: ``import torch`` (which loads
torch_infini through PyTorch's autoload) warns and leaves PyTorch as it was
(PrivateUse1 keeps its name, no ``torch.infini``, no c10d backend, no
device), and ``import torch_infini`` raises ImportError naming the variable
and its value, again on every try. A bad CPU-fallback mode once
half-registered the device: ``torch.ones(3, device="infini")`` worked and
the explicit import then failed with "already registered".
"""

from __future__ import annotations

import json

import pytest
from infini_testing import describe, run_python

PROBE = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
import torch.distributed as dist
report = {
    "warned": [str(w.message) for w in caught if "torch_infini" in str(w.message)],
    "privateuse1": torch._C._get_privateuse1_backend_name(),
    "torch.infini": hasattr(torch, "infini"),
    "c10d": "infini" in getattr(dist.Backend, "backend_list", []),
}
try:
    torch.ones(3, device="infini")
    report["device"] = "works"
except Exception as error:
    report["device"] = type(error).__name__
report["imports"] = []
for _ in range(2):
    try:
        import torch_infini
        report["imports"].append("imported")
    except Exception as error:
        report["imports"].append([type(error).__name__, str(error)])
print(json.dumps(report))
"""

BAD = [
    ("TORCH_INFINI_CPU_FALLBACK", "bogus"),
    ("TORCH_INFINI_BACKEND", "no-such-backend"),
    # A device type this build was not made for (the 'mars' column of the
    # device-type table: no vendor build of this project has it).
    ("TORCH_INFINI_BACKEND", "mars"),
    ("TORCH_INFINI_HOST_DEVICES", "two"),
    ("TORCH_INFINI_HOST_DEVICES", "65"),
    ("TORCH_INFINI_HOST_ASYNC", "yes"),
    ("TORCH_INFINI_HOST_QUEUE_DEPTH", "0"),
    ("TORCH_INFINI_HOST_MEMORY_LIMIT", "-1"),
    ("TORCH_INFINI_HOST_MEMORY", "unified"),
    ("TORCH_INFINI_GRAPH_PASSES", "sometimes"),
    ("TORCH_INFINI_TRITON_ARCH", "sm_90"),
]


@pytest.mark.parametrize(("variable", "value"), BAD, ids=[f"{k}={v}" for k, v in BAD])
def test_a_bad_value_registers_nothing_and_the_import_names_it(variable: str, value: str) -> None:
    proc = run_python(PROBE, env={variable: value, "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})
    assert proc.returncode == 0, describe(proc)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["privateuse1"] == "privateuseone", report
    assert not report["torch.infini"] and not report["c10d"], report
    assert report["device"] == "RuntimeError", report  # "infini" is no device type
    assert len(report["warned"]) == 1 and variable in report["warned"][0], report
    for attempt in report["imports"]:  # the same error each time
        assert attempt[0] == "ImportError", report
        assert variable in attempt[1] and value in attempt[1], report


def test_good_values_import() -> None:
    env = {
        "TORCH_INFINI_CPU_FALLBACK": "silent",
        "TORCH_INFINI_HOST_QUEUE_DEPTH": "4",
        "TORCH_INFINI_GRAPH_PASSES": "never",
        "TORCH_INFINI_TRITON_ARCH": "80",
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "1",
    }
    proc = run_python(PROBE, env=env)
    assert proc.returncode == 0, describe(proc)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["privateuse1"] == "infini" and report["device"] == "works", report
    assert report["torch.infini"] and report["c10d"], report
    assert report["imports"] == ["imported", "imported"] and not report["warned"], report
