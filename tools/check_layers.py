#!/usr/bin/env python3
"""Fails on an include that runs up a layer of the native sources.

The layers are the architecture (docs/layout.md, "Layers"): the libraries
(runtime below ops, compiler and distributed; the bindings and the public
API above them all), and inside the runtime and the ops library the
folders of ``src/``, lowest first. A file may include what is in its own
folder or in a lower layer; folders of one layer are peers and include
nothing of each other. Run by CI (ci/test.sh) before the build::

    python tools/check_layers.py            # the checkout's native/
    python tools/check_layers.py --root DIR  # another copy (tests/tools)

Exits 1 listing every upward (or sideways) include, 0 otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# The libraries, lowest first: the public C++ API (torch_infini/torch_infini.h,
# native/torch_infini_api.cpp) above the static libraries, the Python
# bindings on top.
LIBRARIES: list[set[str]] = [
    {"runtime"},
    {"ops", "compiler", "distributed"},
    {"api"},
    {"bindings"},
]

# The folders of each library's src/, lowest first (a file belongs to the
# longest folder that contains it). Folders of one set are peers.
FOLDERS: dict[str, list[set[str]]] = {
    "runtime": [
        {"profiler"},  # device activity for torch.profiler
        {"selection"},  # which backend; the runtime providers' registry
        {"providers", "providers/host", "providers/infinirt"},  # the device runtimes
        {"pytorch"},  # DeviceGuard, hooks, streams, generator
        {"memory"},  # the allocators
    ],
    "ops": [
        {"common"},  # bridge helpers, dims, the operator table, dtype sets
        {"philox"},  # random numbers generated on the host
        {"seam"},  # the kernel seam: declared support, the providers' registry
        {"providers/host", "providers/infiniops"},  # the kernel providers
        {"fallback"},  # the CPU fallback and its refusals
        {"aten", "fused", "random", "amp"},  # the operators registered for infini
    ],
}

# Public headers (include/torch_infini/...) by the library that owns them.
PUBLIC = [
    ("torch_infini/torch_infini.h", "api"),
    ("torch_infini/compiler_plugin.h", "compiler"),
    ("torch_infini/compiler/", "compiler"),
    ("torch_infini/runtime/", "runtime"),
    ("torch_infini/ops/", "ops"),
    ("torch_infini/distributed/", "distributed"),
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
SOURCES = (".h", ".hpp", ".cpp", ".cc", ".c", ".inc")


def _rank(groups: list[set[str]], name: str) -> int | None:
    for i, group in enumerate(groups):
        if name in group:
            return i
    return None


def _folder(library: str, relative: Path) -> str | None:
    """The layer folder of a file under ``native/<library>/src``."""
    parts = relative.parts[:-1]
    known = {f for group in FOLDERS.get(library, []) for f in group}
    for n in range(len(parts), 0, -1):
        if "/".join(parts[:n]) in known:
            return "/".join(parts[:n])
    return None


def _owner(native: Path, path: Path) -> tuple[str, str | None]:
    """(library, folder) of a file under ``native``."""
    relative = path.relative_to(native)
    if len(relative.parts) == 1:
        return "api", None  # native/torch_infini_*.cpp
    library = relative.parts[0]
    inside = relative.relative_to(library)
    if inside.parts[0] == "src":
        return library, _folder(library, inside.relative_to("src"))
    if inside.parts[:2] == ("include", "torch_infini") and inside.name == "torch_infini.h":
        return "api", None
    return library, None


def _target(included: str, library: str, known_folders: set[str]) -> tuple[str, str | None]:
    for prefix, owner in PUBLIC:
        if included == prefix or (prefix.endswith("/") and included.startswith(prefix)):
            return owner, None
    parts = included.split("/")
    for n in range(len(parts) - 1, 0, -1):
        if "/".join(parts[:n]) in known_folders:
            return library, "/".join(parts[:n])
    return library, None  # a file beside the includer, or generated


def violations(native: Path) -> list[str]:
    found = []
    for path in sorted(p for p in native.rglob("*") if p.suffix in SOURCES and p.is_file()):
        library, folder = _owner(native, path)
        known = {f for group in FOLDERS.get(library, []) for f in group}
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in INCLUDE.finditer(text):
            included = match.group(1)
            line = text.count("\n", 0, match.start()) + 1
            where = f"{path.relative_to(native.parent)}:{line}"
            to_library, to_folder = _target(included, library, known)
            if to_library != library:
                mine, theirs = _rank(LIBRARIES, library), _rank(LIBRARIES, to_library)
                if mine is not None and theirs is not None and theirs >= mine:
                    found.append(
                        f'{where}: #include "{included}": library {library} includes '
                        f"{to_library}, which is not below it"
                    )
                continue
            if folder is None or to_folder is None or to_folder == folder:
                continue
            groups = FOLDERS[library]
            mine, theirs = _rank(groups, folder), _rank(groups, to_folder)
            assert mine is not None and theirs is not None
            if theirs >= mine:
                kind = "a peer" if theirs == mine else "a higher layer"
                found.append(
                    f'{where}: #include "{included}": {library}/src/{folder} includes '
                    f"{to_folder}, {kind}"
                )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parents[1] / "native"
    parser.add_argument("--root", type=Path, default=default, help="the native/ folder to check")
    args = parser.parse_args(argv)
    native = args.root.resolve()
    # Every folder of src/ must have its layer: a new one is placed on purpose.
    unplaced = []
    for library in FOLDERS:
        src = native / library / "src"
        for path in src.rglob("*"):
            if path.suffix in SOURCES and _folder(library, path.relative_to(src)) is None:
                unplaced.append(str(path.relative_to(native.parent)))
    problems = violations(native)
    for p in unplaced:
        print(f"{p}: in no layer of tools/check_layers.py's FOLDERS", file=sys.stderr)
    for p in problems:
        print(p, file=sys.stderr)
    if problems or unplaced:
        print(f"{len(problems) + len(unplaced)} layering problem(s)", file=sys.stderr)
        return 1
    files = sum(1 for p in native.rglob("*") if p.suffix in SOURCES)
    print(f"layers: {files} native sources, no include runs up a layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
