"""The directories torch.compile's caches live in.

Inductor loads generated code (and pickles) from its cache directory: by
default a fixed path under the system's temporary directory
(``torchinductor_<user>``), or ``TORCHINDUCTOR_CACHE_DIR``; Triton's under it
or ``TRITON_CACHE_DIR``. Whoever else can write there can run code in every
process that compiles. ``import torch_infini`` (which enables Inductor for
infini) therefore makes the default directory private (created with mode
0700, or narrowed to it) and refuses, naming it, a directory that is not
owned by the current user or that the group or others can write.

Each case is a fresh interpreter with its own environment: the directories
are read at import.
"""

from __future__ import annotations

import getpass
import json
import os
import stat
from pathlib import Path

import pytest
import torch_infini
from infini_testing import describe, run_python

OTHER_UID = 65534  # "nobody"
AS_ROOT = pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a directory to another user needs root"
)

# Imports torch_infini; prints what it raised, or the cache directories after.
PROBE = """
import json, os, sys
try:
    import torch_infini
except Exception as error:
    print(json.dumps({"raised": type(error).__name__, "message": str(error)}))
    sys.exit(0)
env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")  # before Inductor sets it itself
from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir
print(json.dumps({
    "raised": None,
    "env": env,
    "cache_dir": cache_dir(),
    "default_cache_dir": default_cache_dir(),
}))
"""


def _import(tmp_path: Path, code: str = PROBE, **env: str | None) -> dict:
    """Runs `code` in a fresh interpreter whose temporary directory is
    `tmp_path` (so Inductor's default cache directory is
    `tmp_path/torchinductor_<user>`)."""
    full = {
        "TMPDIR": str(tmp_path),
        "TORCHINDUCTOR_CACHE_DIR": None,
        "TRITON_CACHE_DIR": None,
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        **env,
    }
    proc = run_python(code, env=full, timeout=300)
    assert proc.returncode == 0, describe(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _default(tmp_path: Path) -> Path:
    return tmp_path / f"torchinductor_{getpass.getuser()}"


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _assert_refused(report: dict, directory: Path, why: str) -> None:
    assert report["raised"] == "PermissionError", report
    assert str(directory) in report["message"], report
    assert why in report["message"], report


def test_the_default_directory_is_created_private(tmp_path: Path) -> None:
    default = _default(tmp_path)
    report = _import(tmp_path)
    assert report["raised"] is None, report
    assert report["default_cache_dir"] == str(default)
    assert report["cache_dir"] == str(default)  # what Inductor uses: the one checked
    assert report["env"] == str(default)  # Inductor is held to the directory checked
    st = os.stat(default)
    assert stat.S_ISDIR(st.st_mode)
    assert _mode(default) == 0o700, oct(_mode(default))
    assert st.st_uid == os.geteuid()


def test_an_existing_default_directory_readable_by_others_is_narrowed(tmp_path: Path) -> None:
    default = _default(tmp_path)
    default.mkdir()
    default.chmod(0o755)
    report = _import(tmp_path)
    assert report["raised"] is None, report
    assert _mode(default) == 0o700, oct(_mode(default))


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702], ids=["world", "group", "others"])
def test_a_default_directory_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    default = _default(tmp_path)
    default.mkdir()
    default.chmod(mode)
    _assert_refused(_import(tmp_path), default, "writable")
    assert _mode(default) == mode  # left as found: what is in it may not be ours


@AS_ROOT
def test_a_default_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    default = _default(tmp_path)
    default.mkdir(mode=0o700)
    os.chown(default, OTHER_UID, OTHER_UID)
    _assert_refused(_import(tmp_path), default, f"owned by uid {OTHER_UID}")


@AS_ROOT
def test_a_default_path_that_is_another_users_symlink_is_refused(tmp_path: Path) -> None:
    # The classic squat in a shared /tmp: a link named like our cache,
    # planted by someone else (here to a directory we own, which passes
    # every other check).
    target = tmp_path / "ours"
    target.mkdir(mode=0o700)
    default = _default(tmp_path)
    default.symlink_to(target)
    os.lchown(default, OTHER_UID, OTHER_UID)
    _assert_refused(_import(tmp_path), default, f"symbolic link owned by uid {OTHER_UID}")


def test_a_chosen_directory_is_created_private_and_used(tmp_path: Path) -> None:
    chosen = tmp_path / "a" / "cache"
    report = _import(tmp_path, TORCHINDUCTOR_CACHE_DIR=str(chosen))
    assert report["raised"] is None, report
    assert report["cache_dir"] == str(chosen)
    assert _mode(chosen) == 0o700, oct(_mode(chosen))


def test_a_chosen_directory_of_ours_is_accepted_as_it_is(tmp_path: Path) -> None:
    chosen = tmp_path / "cache"
    chosen.mkdir()
    chosen.chmod(0o750)
    report = _import(tmp_path, TORCHINDUCTOR_CACHE_DIR=str(chosen))
    assert report["raised"] is None, report
    assert report["cache_dir"] == str(chosen)
    assert _mode(chosen) == 0o750  # the user's own choice: not changed


@pytest.mark.parametrize("mode", [0o777, 0o775], ids=["world", "group"])
def test_a_chosen_directory_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    chosen = tmp_path / "cache"
    chosen.mkdir()
    chosen.chmod(mode)
    report = _import(tmp_path, TORCHINDUCTOR_CACHE_DIR=str(chosen))
    _assert_refused(report, chosen, "writable")
    assert "TORCHINDUCTOR_CACHE_DIR" in report["message"], report


@AS_ROOT
def test_a_chosen_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    chosen = tmp_path / "cache"
    chosen.mkdir(mode=0o700)
    os.chown(chosen, OTHER_UID, OTHER_UID)
    report = _import(tmp_path, TORCHINDUCTOR_CACHE_DIR=str(chosen))
    _assert_refused(report, chosen, f"owned by uid {OTHER_UID}")
    assert "TORCHINDUCTOR_CACHE_DIR" in report["message"], report


def test_a_triton_cache_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    triton = tmp_path / "triton"
    triton.mkdir()
    triton.chmod(0o777)
    report = _import(tmp_path, TRITON_CACHE_DIR=str(triton))
    _assert_refused(report, triton, "writable")
    assert "TRITON_CACHE_DIR" in report["message"], report


@pytest.mark.skipif(
    not torch_infini._C._capabilities()["host_addressable"],
    reason="Inductor serves infini where device memory is host memory",
)
def test_a_compile_on_infini_caches_into_the_private_directory(tmp_path: Path) -> None:
    """Inductor's FX graph cache and generated code land in the directory
    torch_infini checked, not in a shared one."""
    code = """
import os, torch, torch_infini
torch._inductor.config.compile_threads = 1
f = torch.compile(lambda a: (a * 2).relu() + 1)
x = torch.randn(8, 3)
y = f(x.to("infini"))
assert y.device.type == "infini"
torch.testing.assert_close(y.cpu(), (x * 2).relu() + 1)
print("{}")
"""
    _import(tmp_path, code)
    default = _default(tmp_path)
    assert _mode(default) == 0o700
    assert (default / "fxgraph").is_dir(), sorted(p.name for p in default.iterdir())
    assert not [p for p in tmp_path.iterdir() if p.name != default.name and "inductor" in p.name]
