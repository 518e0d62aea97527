"""Backend selection: TORCH_INFINI_BACKEND, torch_infini.backend()/set_backend().

In-process tests see the backend this run was started with; the environment
variable is read once, at import, so its effects are tested in subprocesses.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch_infini
from infini_testing import describe, run_python


def test_compiled_backends_contains_host() -> None:
    compiled = torch_infini.compiled_backends()
    assert isinstance(compiled, list)
    assert all(isinstance(name, str) for name in compiled)
    assert "host" in compiled
    assert "auto" not in compiled
    assert len(set(compiled)) == len(compiled)


def test_selected_backend() -> None:
    selected = torch_infini.backend()
    assert selected in torch_infini.compiled_backends()
    assert torch_infini.is_initialized()
    requested = os.environ.get("TORCH_INFINI_BACKEND", "").strip() or "auto"
    if requested != "auto":
        assert selected == requested
    if torch_infini.compiled_backends() == ["host"]:
        # Nothing else is compiled in: auto falls back to the host device.
        assert selected == "host"


def test_set_backend_to_the_current_one_is_allowed() -> None:
    torch_infini.set_backend(torch_infini.backend())
    assert torch_infini.backend() in torch_infini.compiled_backends()


def test_set_backend_to_another_backend_after_init_raises() -> None:
    current = torch_infini.backend()
    others = [name for name in torch_infini.compiled_backends() if name != current]
    other = others[0] if others else ("cpu" if current != "cpu" else "host")
    # "already initialized" when `other` is compiled in, else "not compiled".
    with pytest.raises(RuntimeError, match="already initialized|not compiled") as exc:
        torch_infini.set_backend(other)
    assert other in str(exc.value)
    assert torch_infini.backend() == current  # unchanged
    assert torch.empty(1, device="infini").device.type == "infini"


def test_set_backend_unknown_name_raises() -> None:
    with pytest.raises(RuntimeError, match="no-such-backend"):
        torch_infini.set_backend("no-such-backend")
    assert torch_infini.backend() in torch_infini.compiled_backends()


# ---------------------------------------------------------------- subprocesses


def test_unknown_backend_before_init_lists_the_choices() -> None:
    code = """
import torch_infini
assert not torch_infini.is_initialized(), "auto must initialize lazily"
try:
    torch_infini.set_backend("no-such-backend")
except RuntimeError as error:
    print("ERROR:", error)
torch_infini.set_backend("host")
print("BACKEND:", torch_infini.backend())
"""
    proc = run_python(code, env={"TORCH_INFINI_BACKEND": None})
    assert proc.returncode == 0, describe(proc)
    error_line = next(line for line in proc.stdout.splitlines() if line.startswith("ERROR:"))
    assert "no-such-backend" in error_line
    assert "unknown backend" in error_line
    assert "host" in error_line  # the choices are listed
    assert "BACKEND: host" in proc.stdout


def test_env_bogus_backend_fails_import_naming_it() -> None:
    code = """
import torch
try:
    import torch_infini
except ImportError as error:
    print("ImportError:", error)
else:
    print("imported")
print("NAME:", torch._C._get_privateuse1_backend_name())
"""
    proc = run_python(code, env={"TORCH_INFINI_BACKEND": "bogus"})
    assert proc.returncode == 0, describe(proc)  # a catchable exception, not a crash
    assert proc.stdout.startswith("ImportError:"), describe(proc)
    assert "'bogus'" in proc.stdout
    assert "host" in proc.stdout  # tells what can be chosen
    # Rejected before the device was renamed or anything registered.
    assert "NAME: privateuseone" in proc.stdout


@pytest.mark.parametrize("value", ["host", " host ", "auto"])
def test_env_host_and_auto_work(value: str) -> None:
    code = """
import json, torch, torch_infini
initialized_at_import = torch_infini.is_initialized()
x = torch.arange(6.0).to("infini")
print(json.dumps({
    "backend": torch_infini.backend(),
    "compiled": torch_infini.compiled_backends(),
    "count": torch.infini.device_count(),
    "ok": torch.equal(x.cpu(), torch.arange(6.0)),
    "accelerator": torch.accelerator.current_accelerator().type,
    "initialized_at_import": initialized_at_import,
}))
"""
    proc = run_python(code, env={"TORCH_INFINI_BACKEND": value})
    assert proc.returncode == 0, describe(proc)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] is True
    assert result["accelerator"] == "infini"
    assert result["count"] >= 1
    # An explicit backend initializes at import (and fails there); auto is lazy.
    assert result["initialized_at_import"] is (value.strip() != "auto")
    if value.strip() == "host" or result["compiled"] == ["host"]:
        assert result["backend"] == "host"
    else:
        assert result["backend"] in result["compiled"]


def test_env_host_devices_sets_the_device_count() -> None:
    code = "import torch, torch_infini; print(torch.infini.device_count())"
    proc = run_python(code, env={"TORCH_INFINI_BACKEND": "host", "TORCH_INFINI_HOST_DEVICES": "3"})
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.strip() == "3"


@pytest.mark.parametrize("value", ["0", "abc"])
def test_env_host_devices_invalid_fails_import(value: str) -> None:
    proc = run_python(
        "import torch_infini",
        env={"TORCH_INFINI_BACKEND": "host", "TORCH_INFINI_HOST_DEVICES": value},
    )
    assert proc.returncode > 0, describe(proc)
    last_line = proc.stderr.strip().splitlines()[-1]
    assert "TORCH_INFINI_HOST_DEVICES" in last_line, describe(proc)
    assert value in last_line, describe(proc)
