"""PyTorch's device-backend autoload: ``import torch`` alone makes ``infini``
usable; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns it off; a torch_infini
that cannot load (built for another PyTorch) warns once instead of failing
``import torch``, registers nothing, and an explicit ``import torch_infini``
still raises the guard's ImportError.

Each case is a fresh interpreter. Where the wheel is installed its entry
point is used; elsewhere (a build tree on PYTHONPATH) the test declares the
same entry point in a probe distribution of its own.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
from pathlib import Path

import torch
import torch_infini
from infini_testing import describe, run_python

REPO = Path(__file__).resolve().parents[3]
ENTRY_POINT = "torch_infini_autoload:load"


def _installed_entry_point() -> bool:
    return any(
        ep.value == ENTRY_POINT for ep in importlib.metadata.entry_points(group="torch.backends")
    )


def _env(tmp_path: Path, *first: Path, **extra: str) -> dict[str, str | None]:
    """PYTHONPATH with `first` ahead, plus a probe distribution declaring the
    entry point where no installed wheel does."""
    paths = [str(p) for p in first]
    if not _installed_entry_point():
        probe = tmp_path / "probe"
        info = probe / "torch_infini_probe-0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: torch-infini-probe\nVersion: 0\n"
        )
        (info / "entry_points.txt").write_text(f"[torch.backends]\ntorch_infini = {ENTRY_POINT}\n")
        paths.append(str(probe))
    rest = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join(paths + ([rest] if rest else [])), **extra}


def test_the_wheel_declares_the_entry_point_and_ships_its_module() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    section = re.search(r'\[project\.entry-points\."torch\.backends"\]\n([^\[]*)', pyproject)
    assert section and f'torch_infini = "{ENTRY_POINT}"' in section.group(1)
    spec = importlib.util.find_spec("torch_infini_autoload")
    assert spec is not None and spec.origin is not None, "torch_infini_autoload is not installed"
    assert Path(spec.origin).parent == Path(torch_infini.__file__).resolve().parent.parent


def test_import_torch_alone_makes_infini_usable(tmp_path: Path) -> None:
    code = """
import sys, warnings
with warnings.catch_warnings():
    warnings.simplefilter("error")  # a clean load warns about nothing
    import torch
print("LOADED:", "torch_infini" in sys.modules)
x = torch.tensor([0.0, 1.0, 2.0, 3.0]).to("infini") * 2
print("RESULT:", x.cpu().tolist(), x.device)
print("MODULE:", torch.infini.is_available())
"""
    proc = run_python(code, env=_env(tmp_path))
    assert proc.returncode == 0, describe(proc)
    assert "LOADED: True" in proc.stdout
    assert "RESULT: [0.0, 2.0, 4.0, 6.0] infini:0" in proc.stdout
    assert "MODULE: True" in proc.stdout


def test_autoload_off_imports_nothing(tmp_path: Path) -> None:
    code = """
import sys, torch
print("LOADED:", "torch_infini" in sys.modules)
print("NAME:", torch._C._get_privateuse1_backend_name())
import torch_infini
print("EXPLICIT:", torch.ones(1, device="infini").device)
"""
    proc = run_python(code, env=_env(tmp_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert proc.returncode == 0, describe(proc)
    assert "LOADED: False" in proc.stdout and "NAME: privateuseone" in proc.stdout
    assert "EXPLICIT: infini:0" in proc.stdout


def test_a_mismatched_pytorch_warns_once_and_registers_nothing(tmp_path: Path) -> None:
    package = tmp_path / "pkg" / "torch_infini"
    shutil.copytree(
        Path(torch_infini.__file__).resolve().parent,
        package,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    info = package / "_build_info.py"
    text, n = re.subn(
        r"^TORCH_VERSION = .*$", 'TORCH_VERSION = "2.99.0"', info.read_text(), flags=re.M
    )
    assert n == 1
    info.write_text(text)
    shutil.copy(
        Path(torch_infini.__file__).resolve().parent.parent / "torch_infini_autoload.py",
        package.parent,
    )
    code = """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
ours = [str(w.message) for w in caught if "torch_infini" in str(w.message)]
print("WARNINGS:", len(ours))
print("WARNING:", ours[0] if ours else "")
print("NAME:", torch._C._get_privateuse1_backend_name())
print("HAS INFINI MODULE:", hasattr(torch, "infini"))
try:
    import torch_infini
except ImportError as error:
    print("EXPLICIT:", error)
"""
    proc = run_python(code, env=_env(tmp_path, package.parent))
    assert proc.returncode == 0, describe(proc)
    lines = dict(line.split(": ", 1) for line in proc.stdout.strip().splitlines())
    assert lines["WARNINGS"] == "1", describe(proc)
    assert "2.99.0" in lines["WARNING"] and torch.__version__ in lines["WARNING"]
    assert lines["NAME"] == "privateuseone" and lines["HAS INFINI MODULE"] == "False"
    assert "2.99.0" in lines["EXPLICIT"]
