"""The directories torch.compile's caches live in.

Inductor loads generated code (and pickles) from its cache directory: by
default a fixed path under the system's temporary directory
(``torchinductor_<user>``), or ``TORCHINDUCTOR_CACHE_DIR``; Triton's under it
or ``TRITON_CACHE_DIR``. Whoever else can write there, or can write one of
its parents and so swap it, can run code in every process that compiles.
Before each graph compiles, torch_infini makes the default directory
private (created with mode 0700, or narrowed to it) and refuses, naming it,
a directory not owned by the current user, one the group or others can
write, or one under a parent that another user owns or that the group or
others can write without the sticky bit. The check is the compile's, not
the import's: a program that never compiles keeps the device whatever the
cache's state, and a setting changed after import is checked when used.
Relative settings are made absolute once and exported.

The checker's cases run in this process on directories under ``tmp_path``
(its temporary directory standing in for the system's); what a user sees
(import, then compile) runs in fresh interpreters.
"""

from __future__ import annotations

import getpass
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from infini_testing import describe, requires_inductor, run_python
from torch_infini import _compile_cache

OTHER_UID = 65534  # "nobody"
AS_ROOT = pytest.mark.skipif(
    os.geteuid() != 0, reason="giving a directory to another user needs root"
)


@pytest.fixture
def tmp_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The system's temporary directory is `tmp_path`; no cache setting."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    yield tmp_path


def _default(tmp_path: Path) -> Path:
    return tmp_path / f"torchinductor_{getpass.getuser()}"


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _refused(directory: Path, why: str, origin: str | None = None) -> None:
    with pytest.raises(PermissionError) as info:
        _compile_cache.secure_directories()
    message = str(info.value)
    assert str(directory) in message, message
    assert why in message, message
    if origin is not None:
        assert origin in message, message


# ------------------------------------------------------------ the checker


def test_the_default_directory_is_created_private(tmp_env: Path) -> None:
    _compile_cache.secure_directories()
    default = _default(tmp_env)
    assert stat.S_ISDIR(os.stat(default).st_mode) and os.stat(default).st_uid == os.geteuid()
    assert _mode(default) == 0o700, oct(_mode(default))
    # Inductor is held to the directory checked.
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(default)


def test_an_existing_default_directory_readable_by_others_is_narrowed(tmp_env: Path) -> None:
    default = _default(tmp_env)
    default.mkdir()
    default.chmod(0o755)
    _compile_cache.secure_directories()
    assert _mode(default) == 0o700, oct(_mode(default))


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702], ids=["world", "group", "others"])
def test_a_default_directory_others_can_write_is_refused(tmp_env: Path, mode: int) -> None:
    default = _default(tmp_env)
    default.mkdir()
    default.chmod(mode)
    _refused(default, "writable", "Inductor's default cache directory")
    assert _mode(default) == mode  # left as found: what is in it may not be ours


@AS_ROOT
def test_a_default_directory_of_another_user_is_refused(tmp_env: Path) -> None:
    default = _default(tmp_env)
    default.mkdir(mode=0o700)
    os.chown(default, OTHER_UID, OTHER_UID)
    _refused(default, f"owned by uid {OTHER_UID}")


@AS_ROOT
def test_a_default_path_that_is_another_users_symlink_is_refused(tmp_env: Path) -> None:
    # The classic squat in a shared /tmp: a link named like our cache,
    # planted by someone else (here to a directory we own, which passes
    # every other check).
    target = tmp_env / "ours"
    target.mkdir(mode=0o700)
    default = _default(tmp_env)
    default.symlink_to(target)
    os.lchown(default, OTHER_UID, OTHER_UID)
    _refused(default, f"symbolic link owned by uid {OTHER_UID}")


def test_a_chosen_directory_is_created_private_with_its_parents(
    tmp_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = tmp_env / "a" / "b" / "cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(chosen))
    _compile_cache.secure_directories()
    for path in (tmp_env / "a", tmp_env / "a" / "b", chosen):
        # (os.makedirs would give the parents 0777 & ~umask: group-writable
        # under umask 002, which the parent check then refuses.)
        assert _mode(path) == 0o700, (path, oct(_mode(path)))


def test_a_chosen_directory_of_ours_is_accepted_as_it_is(
    tmp_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = tmp_env / "cache"
    chosen.mkdir()
    chosen.chmod(0o750)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(chosen))
    _compile_cache.secure_directories()
    assert _mode(chosen) == 0o750  # the user's own choice: not changed
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(chosen)


@pytest.mark.parametrize("mode", [0o777, 0o775], ids=["world", "group"])
def test_a_chosen_directory_others_can_write_is_refused(
    tmp_env: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    chosen = tmp_env / "cache"
    chosen.mkdir()
    chosen.chmod(mode)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(chosen))
    _refused(chosen, "writable", "TORCHINDUCTOR_CACHE_DIR")


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757], ids=["world", "group", "others"])
def test_a_private_directory_under_a_parent_others_can_write_is_refused(
    tmp_env: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    """Whoever can write the parent can rename the private directory away
    and put their own in its place."""
    parent = tmp_env / "shared"
    parent.mkdir()
    parent.chmod(mode)
    chosen = parent / "cache"
    chosen.mkdir(mode=0o700)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(chosen))
    _refused(chosen, f"its parent directory {parent} is writable", "TORCHINDUCTOR_CACHE_DIR")


def test_a_grandparent_others_can_write_is_refused(
    tmp_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grandparent = tmp_env / "shared"
    grandparent.mkdir()
    grandparent.chmod(0o777)
    chosen = grandparent / "mine" / "cache"
    chosen.parent.mkdir(mode=0o700)
    chosen.mkdir(mode=0o700)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(chosen))
    _refused(chosen, f"its parent directory {grandparent} is writable")


def test_a_sticky_parent_others_can_write_is_accepted(
    tmp_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As /tmp: with the sticky bit, others cannot rename what they do not own."""
    parent = tmp_env / "tmp"
    parent.mkdir()
    parent.chmod(0o1777)
    chosen = parent / "cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(chosen))
    _compile_cache.secure_directories()
    assert _mode(chosen) == 0o700


def test_a_link_into_a_parent_others_can_write_is_refused(
    tmp_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our own link, to a private directory inside a parent others can
    write: where the link leads is checked too."""
    shared = tmp_env / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "cache").mkdir(mode=0o700)
    link = tmp_env / "cache"
    link.symlink_to(shared / "cache")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(link))
    _refused(link, f"its parent directory {shared} is writable")


@AS_ROOT
def test_a_parent_of_another_user_is_refused(
    tmp_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its owner can swap the private directory inside it."""
    parent = tmp_env / "theirs"
    parent.mkdir(mode=0o755)
    chosen = parent / "cache"
    chosen.mkdir(mode=0o700)
    os.chown(parent, OTHER_UID, OTHER_UID)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(chosen))
    _refused(chosen, f"its parent directory {parent} is owned by uid {OTHER_UID}")


def test_a_triton_cache_directory_others_can_write_is_refused(
    tmp_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    triton = tmp_env / "triton"
    triton.mkdir()
    triton.chmod(0o777)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton))
    _refused(triton, "writable", "TRITON_CACHE_DIR")


def test_a_relative_setting_is_made_absolute_and_exported(
    tmp_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_env)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "rel/cache")
    monkeypatch.setenv("TRITON_CACHE_DIR", "rel/triton")
    _compile_cache.secure_directories()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_env / "rel" / "cache")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_env / "rel" / "triton")
    assert _mode(tmp_env / "rel" / "cache") == 0o700


# ------------------------------------------------- what a user sees


def _run(tmp_path: Path, code: str, **env: str | None) -> dict:
    """`code` in a fresh interpreter whose temporary directory is
    `tmp_path`; it prints one JSON line last."""
    full = {
        "TMPDIR": str(tmp_path),
        "TORCHINDUCTOR_CACHE_DIR": None,
        "TRITON_CACHE_DIR": None,
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        # A fresh cache: no precompiled kernel header built there first
        # (private_inductor_cache says why).
        "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0",
        **env,
    }
    proc = run_python(code, env=full, timeout=300)
    assert proc.returncode == 0, describe(proc)
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Imports torch_infini, uses the device, runs AFTER_IMPORT, then compiles a
# CPU function.
USE_THEN_COMPILE = """
import json, os, torch
import torch_infini
report = {"env_at_import": os.environ.get("TORCHINDUCTOR_CACHE_DIR")}
report["device"] = torch.ones(2, device="infini").sum().item()
AFTER_IMPORT
try:
    f = torch.compile(lambda a: a * 2 + 1)
    report["compiled"] = f(torch.ones(3)).tolist()
except Exception as error:
    report["raised"] = type(error).__name__
    report["message"] = str(error)
report["env_after"] = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
print(json.dumps(report))
"""


def test_a_group_writable_cache_leaves_the_device_usable_and_refuses_the_compile(
    tmp_path: Path,
) -> None:
    """The audit's case: after an earlier torch.compile under umask 002 made
    the default directory 0775, `import torch` only warned and infini was
    never registered."""
    default = _default(tmp_path)
    default.mkdir()
    default.chmod(0o775)
    report = _run(tmp_path, USE_THEN_COMPILE.replace("AFTER_IMPORT", ""))
    assert report["device"] == 2.0, report  # import and the device work
    assert "compiled" not in report, report
    assert report["raised"] in ("PermissionError", "BackendCompilerFailed"), report
    assert "refuses the compile cache directory" in report["message"], report
    assert str(default) in report["message"] and "writable" in report["message"], report
    assert _mode(default) == 0o775  # left as found


def test_a_setting_changed_after_import_is_checked_at_compile(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    code = USE_THEN_COMPILE.replace(
        "AFTER_IMPORT", f"os.environ['TORCHINDUCTOR_CACHE_DIR'] = {str(shared)!r}"
    )
    report = _run(tmp_path, code)
    assert report["device"] == 2.0 and "compiled" not in report, report
    assert str(shared) in report["message"] and "TORCHINDUCTOR_CACHE_DIR" in report["message"]


def test_a_relative_setting_stays_where_it_was_checked_after_chdir(tmp_path: Path) -> None:
    (tmp_path / "start").mkdir()
    (tmp_path / "elsewhere").mkdir()
    code = "import os\nos.chdir(os.environ['TMPDIR'] + '/start')\n" + USE_THEN_COMPILE.replace(
        "AFTER_IMPORT", "os.chdir(os.environ['TMPDIR'] + '/elsewhere')"
    )
    report = _run(tmp_path, code, TORCHINDUCTOR_CACHE_DIR="rel-cache")
    expected = str(tmp_path / "start" / "rel-cache")
    assert report["env_at_import"] == expected, report  # resolved at import
    assert report["compiled"] == [3.0, 3.0, 3.0], report
    assert report["env_after"] == expected, report  # compiled after chdir: same place
    assert (tmp_path / "start" / "rel-cache" / "fxgraph").is_dir()
    assert not (tmp_path / "elsewhere" / "rel-cache").exists()


@requires_inductor
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
    _run(tmp_path, code)
    default = _default(tmp_path)
    assert _mode(default) == 0o700
    assert (default / "fxgraph").is_dir(), sorted(p.name for p in default.iterdir())
    assert not [p for p in tmp_path.iterdir() if p.name != default.name and "inductor" in p.name]
