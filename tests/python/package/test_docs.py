"""What README.md and docs/ promise stays what the code does (issue 59).

* The environment-variable table of README.md ("Settings") names exactly the
  TORCH_INFINI_* variables the code reads: found by pattern in
  python/torch_infini (os.environ / os.getenv reads, and module constants
  holding such a name) and in native/ (string literals naming one in the
  files that call getenv; CMake's build-time TORCH_INFINI_* variables are
  not environment variables and are never scanned).
* Every repository path README.md and docs/*.md name, in backticks, in code
  blocks or as a relative link, exists (paths under build/ are outputs).
* README.md's benchmark table lists exactly the cases of benchmarks/run.py,
  each with run.py's target.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
DOCUMENTS = [README, *sorted((REPO / "docs").glob("*.md"))]

ENV_NAME = re.compile(r"TORCH_INFINI_[A-Z0-9_]+")


# ---------------------------------------------------------------- markdown


def table_rows(text: str, header: tuple[str, ...]) -> list[list[str]]:
    """The data rows (cells stripped) of the first table whose header row
    has exactly these cells."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if tuple(cell.strip() for cell in line.strip().strip("|").split("|")) != header:
            continue
        rows = []
        for row in lines[index + 2 :]:  # past the |---| line
            if not row.startswith("|"):
                break
            rows.append([cell.strip() for cell in row.strip().strip("|").split("|")])
        return rows
    raise AssertionError(f"no table with the header {header} in README.md")


def unquoted(cell: str) -> str:
    return cell.strip().removeprefix("`").removesuffix("`")


# ---------------------------------------------------------------- environment variables


def _is_environ(node: ast.AST) -> bool:
    """`os.environ`, or `environ` imported from os."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id == "environ"


def _read_key(node: ast.AST) -> ast.expr | None:
    """The key expression of an environment read: os.environ.get(KEY, ...),
    os.getenv(KEY, ...), os.environ[KEY], KEY in os.environ; else None."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
        func = node.func
        if func.attr == "get" and _is_environ(func.value):
            return node.args[0]
        if func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os":
            return node.args[0]
    if isinstance(node, ast.Subscript) and _is_environ(node.value):
        return node.slice
    if (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.In | ast.NotIn)
        and _is_environ(node.comparators[0])
    ):
        return node.left
    return None


def python_environment_variables() -> set[str]:
    """TORCH_INFINI_* variables python/ (torch_infini and its autoload
    module) reads: every module
    constant holding such a name (`ENV_VAR = "TORCH_INFINI_BACKEND"`), and
    every read whose key is such a literal or a constant holding one, also
    through another module (`_compiler.DEVICE_TYPE_SWITCH`)."""
    trees = [ast.parse(p.read_text()) for p in sorted((REPO / "python").rglob("*.py"))]
    constants: dict[str, str] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign | ast.AnnAssign):
                continue
            value = node.value
            if (
                isinstance(value, ast.Constant)
                and isinstance(value.value, str)
                and ENV_NAME.fullmatch(value.value)
            ):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        constants[target.id] = value.value

    def resolve(key: ast.expr) -> str | None:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
        if isinstance(key, ast.Name):
            return constants.get(key.id)
        if isinstance(key, ast.Attribute):
            return constants.get(key.attr)
        return None

    names = set(constants.values())
    for tree in trees:
        for node in ast.walk(tree):
            key = _read_key(node)
            value = resolve(key) if key is not None else None
            if value is not None and ENV_NAME.fullmatch(value):
                names.add(value)
    return names


_GETENV = re.compile(r"\bgetenv\s*\(")
_NAME_LITERAL = re.compile(r'"(TORCH_INFINI_[A-Z0-9_]+)"')


def native_environment_variables() -> set[str]:
    """TORCH_INFINI_* variables native/ reads: in each C/C++ source that
    calls getenv, every string literal that is exactly such a name (read
    directly, `std::getenv("TORCH_INFINI_BACKEND")`, or through a constant
    or helper, `kEnvVar`, `envInt("TORCH_INFINI_HOST_DEVICES", 1)`). CMake
    options and compile definitions are macros, never string literals."""
    names: set[str] = set()
    for path in sorted((REPO / "native").rglob("*")):
        if path.suffix not in {".c", ".cc", ".cpp", ".h", ".hpp"}:
            continue
        text = path.read_text()
        if _GETENV.search(text):
            names.update(_NAME_LITERAL.findall(text))
    return names


def code_environment_variables() -> set[str]:
    return python_environment_variables() | native_environment_variables()


def readme_environment_variables() -> set[str]:
    rows = table_rows(README.read_text(), ("variable", "meaning"))
    names = {unquoted(row[0]) for row in rows}
    bad = sorted(name for name in names if not ENV_NAME.fullmatch(name))
    assert not bad, f"README's variable table has rows that name no variable: {bad}"
    return names


def test_the_scan_finds_reads_through_constants_and_helpers() -> None:
    # The scan itself must see the indirect forms the code uses; written as
    # literals here, not computed by the scan.
    python, native = python_environment_variables(), native_environment_variables()
    assert {"TORCH_INFINI_BACKEND", "TORCH_INFINI_GRAPH_PASSES"} <= python  # module constants
    assert "TORCH_INFINI_COMPILER_DEVICE_TYPE" in python  # read as _compiler.DEVICE_TYPE_SWITCH
    assert "TORCH_INFINI_CPU_FALLBACK" in native  # kEnvVar
    assert "TORCH_INFINI_HOST_DEVICES" in native  # envInt("...")
    assert "TORCH_INFINI_STACK" not in python | native  # a CMake option


def test_every_variable_the_code_reads_is_in_the_readme_table() -> None:
    missing = sorted(code_environment_variables() - readme_environment_variables())
    assert not missing, f"read by the code, missing from README's variable table: {missing}"


def test_every_variable_in_the_readme_table_is_read_by_the_code() -> None:
    unread = sorted(readme_environment_variables() - code_environment_variables())
    assert not unread, f"in README's variable table, read nowhere in python/ or native/: {unread}"


# ---------------------------------------------------------------- paths

# (document, path) pairs naming something outside this repository, each
# with why.
PATH_ALLOWLIST: dict[tuple[str, str], str] = {
    # InfiniRT's own documentation, which docs/stack_versions.md cites.
    ("docs/stack_versions.md", "docs/backends.md"): "a file of InfiniRT's repository",
}

_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*```")
_LEADING = "([{'\""
_TRAILING = ")]},;:'\"."


def _words(text: str) -> list[str]:
    """Words of inline code spans and fenced code blocks."""
    words: list[str] = []
    prose: list[str] = []
    in_block = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_block = not in_block
            continue
        if in_block:
            words += re.split(r"[\s=]+", line)
        else:
            prose.append(line)
    for span in _CODE_SPAN.findall("\n".join(prose)):
        words += re.split(r"[\s=]+", span)
    return words


@functools.cache
def _top_level() -> frozenset[str]:
    """The repository's top-level entries, as git tracks them (an untracked
    folder such as a checkout's shared/ is not the repository's), and
    build/, the outputs."""
    try:
        listed = subprocess.run(
            ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.splitlines()
        names = {line.split("/", 1)[0] for line in listed if line}
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        names = {p.name for p in REPO.iterdir() if p.name != ".git"}
    return frozenset(names | {"build"})


def named_paths(document: Path) -> set[str]:
    """Repository paths a document names: code words whose first component
    is a top-level entry of the repository (or ../ from docs/), and the
    targets of relative links; relative to the repository root."""
    top = _top_level()
    text = document.read_text()
    found: set[str] = set()
    for word in _words(text):
        word = word.lstrip(_LEADING).rstrip(_TRAILING)
        if "://" in word or "$" in word:
            continue
        first = word.split("/", 1)[0]
        if word.startswith("../") or ("/" in word and first in top):
            target = (document.parent / word) if word.startswith("../") else REPO / word
            found.add(os.path.relpath(os.path.normpath(target), REPO))
    for link in _LINK.findall(text):
        if "://" in link or link.startswith(("#", "mailto:")):
            continue
        target = document.parent / link.split("#", 1)[0]
        found.add(os.path.relpath(os.path.normpath(target), REPO))
    return found


def _exists(path: str) -> bool:
    pattern = re.sub(r"<[^>]*>", "*", path)  # native/ops/src/aten/<family>.cpp
    if any(c in pattern for c in "*?["):
        return any(REPO.glob(pattern))
    return (REPO / pattern).exists()


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_path_a_document_names_exists(document: Path) -> None:
    name = document.relative_to(REPO).as_posix()
    paths = named_paths(document)
    outside = sorted(p for p in paths if p.split("/", 1)[0] not in _top_level())
    assert not outside, f"{document.name} names paths outside the repository: {outside}"
    missing = sorted(
        p
        for p in paths
        if not p.startswith("build/") and (name, p) not in PATH_ALLOWLIST and not _exists(p)
    )
    assert not missing, f"{document.name} names paths that do not exist: {missing}"


def test_the_path_scan_sees_what_the_documents_name() -> None:
    # Literals, not computed by the scan: a code span, a glob with a
    # placeholder, a code block's argument and a relative link.
    readme = named_paths(README)
    assert "native/ops/include/torch_infini/ops/seam_operators.h" in readme
    assert ".ci/run" in readme
    assert "build/reports/*.svg" in readme
    assert "ci/quickstart.sh" in readme  # from a ```bash block
    assert "docs/stack_versions.md" in readme  # a link
    adding = named_paths(REPO / "docs" / "adding_an_operator.md")
    assert "native/ops/src/aten/<family>.cpp" in adding
    assert "docs/stack_versions.md" in adding  # a link from docs/
    assert _exists("native/ops/src/aten/<family>.cpp")
    assert not _exists("native/ops/src/aten/<family>.hpp")


# ---------------------------------------------------------------- benchmarks

# The case run.py defines only where transformers is installed (CI installs it).
TRANSFORMERS_CASE_PREFIX = "transformers "

# Imports run.py and lists every case it defines; nothing is measured. The
# staged and compiled cases exist only where device memory is host memory
# (README says so): the capability is reported true so that they are
# listed on every backend.
_LIST_CASES = """
import importlib.util, json
import torch_infini
capabilities = dict(torch_infini._C._capabilities())
torch_infini._C._capabilities = lambda: {**capabilities, "host_addressable": True}
import run
cases = [[case.name, case.target] for case in run.all_cases(0.05)]
transformers = importlib.util.find_spec("transformers") is not None
print(json.dumps({"cases": cases, "transformers": transformers}))
"""


@functools.cache
def run_py_cases() -> tuple[dict[str, str], bool]:
    """benchmarks/run.py's cases ({name: target}), and whether transformers
    is installed."""
    proc = subprocess.run(
        [sys.executable, "-c", _LIST_CASES],
        cwd=REPO / "benchmarks",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    payload = json.loads(proc.stdout.strip().splitlines()[-1])
    cases = {str(name): str(target) for name, target in payload["cases"]}
    assert len(cases) == len(payload["cases"]), "run.py defines a case name twice"
    return cases, bool(payload["transformers"])


def readme_benchmark_cases() -> dict[str, str]:
    text = README.read_text()
    section = text[text.index("## Benchmarks") :]
    rows = table_rows(section, ("case", "target"))
    cases = {unquoted(row[0]): row[1].strip() for row in rows}
    assert len(cases) == len(rows), "README's benchmark table lists a case twice"
    return cases


def test_every_benchmark_case_in_the_readme_is_in_run_py_with_its_target() -> None:
    defined, transformers = run_py_cases()
    listed = readme_benchmark_cases()
    if not transformers:
        listed = {n: t for n, t in listed.items() if not n.startswith(TRANSFORMERS_CASE_PREFIX)}
    unknown = sorted(set(listed) - set(defined))
    assert not unknown, f"README lists benchmark cases run.py does not define: {unknown}"
    wrong = {name: (target, defined[name]) for name, target in listed.items()}
    wrong = {name: pair for name, pair in wrong.items() if pair[0] != pair[1]}
    assert not wrong, f"README's targets differ from run.py's (README, run.py): {wrong}"


def test_every_benchmark_case_of_run_py_is_in_the_readme() -> None:
    defined, _ = run_py_cases()
    missing = sorted(set(defined) - set(readme_benchmark_cases()))
    assert not missing, f"run.py defines benchmark cases README's table lacks: {missing}"
