"""Every change torch_infini makes to PyTorch's code is listed in
torch_infini/_patches.py's PATCHES, with the PyTorch releases it was checked
on and the extension point that would replace it, and is in place: a
PyTorch that moves, renames or rewrites a patched function fails here, by
name, instead of deep inside printing, c10d, autograd or Inductor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch_infini  # noqa: F401  (makes the eager patches)
from torch_infini import _inductor, _patches  # noqa: F401  (_inductor makes Inductor's)
from torch_infini._version_guard import major_minor


@pytest.mark.parametrize("patch", _patches.PATCHES, ids=lambda p: p.target)
def test_each_patch_is_in_place(patch: _patches.Patch) -> None:
    found = _patches.resolve(patch.target)
    assert found is not None, f"{patch.target} no longer exists in PyTorch {torch.__version__}"
    assert _patches.applied(patch), (
        f"{patch.target} is PyTorch's own, not torch_infini's replacement ({patch.by}): "
        "the patch did not apply"
    )


@pytest.mark.parametrize("patch", _patches.PATCHES, ids=lambda p: p.target)
def test_each_patch_was_checked_on_this_pytorch(patch: _patches.Patch) -> None:
    """A new PyTorch release is checked patch by patch: its major.minor is
    added to ``checked`` once the suite passes on it (and the patch is
    dropped where the release gained the extension point)."""
    release = major_minor(torch.__version__)
    assert release in patch.checked, (
        f"{patch.target} ({patch.by}) was checked on PyTorch {', '.join(patch.checked)}, "
        f"not {release}: see whether {release} has {patch.upstream!r}"
    )
    assert patch.upstream


def test_every_replacement_is_listed() -> None:
    """Each replacement is marked with the target it replaces, and each
    target marked in _patches.py is in PATCHES: none is made unlisted."""
    source = Path(_patches.__file__).read_text()
    marked = set(re.findall(r'_mark\(\s*(?:#[^\n]*\n\s*)?\w+,\s*"([\w.]+)"', source))
    assert marked == {p.target for p in _patches.PATCHES}
    assert len(_patches.PATCHES) == len(marked)  # one entry per target


def test_printing_an_infini_tensor_formats_a_cpu_copy() -> None:
    """The printing patch at work: the text is the CPU tensor's, with the
    device named, and no operator ran on the device to produce it."""
    x = torch.tensor([[1.5, -0.0], [float("inf"), 3.0]])
    text = repr(x.to("infini"))
    assert text == repr(x)[:-1] + ", device='infini:0')"
