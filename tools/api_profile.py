"""The torch.infini API profile: which torch.cuda symbols torch.infini offers.

``tests/conformance/api_profile.json`` classifies every public ``torch.cuda``
symbol (``torch.cuda.__all__``) for ``torch.infini``. Schema (version 1)::

    {"schema_version": 1, "reference": "torch.cuda", "target": "torch.infini",
     "contracts": {"<name>": "<description>", ...},
     "symbols": {"<symbol>": {"status": ..., "signature": ..., "contracts": [...],
                              "reason": "...", "note": "..."}, ...}}

* ``status``: ``required`` (torch.infini has it), ``planned`` (being built) or
  ``excluded`` (a ``reason`` is mandatory: a CUDA-only concept, a deprecated
  alias...); only excluded symbols carry a ``reason``;
* ``signature``: ``strict`` (exactly torch.cuda's parameters: names, kinds,
  defaults, order), ``best_effort`` (compatible: torch.infini's parameters
  are torch.cuda's leading ones; a ``note`` must describe the difference) or
  ``none`` (only existence matters, or torch.cuda's signature cannot be
  inspected; mandatory for excluded symbols);
* ``contracts``: the behaviour groups it belongs to (device, stream, ...),
  each declared under ``contracts`` and each declared one used;
* ``note``: optional elsewhere. No other keys, no repeated keys.

This module loads and validates the profile (every problem listed, in one
error), classifies symbols and compares signatures. The conformance tests and
``tools/report_api_gaps.py`` both use it.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

SCHEMA_VERSION = 1
STATUSES = ("required", "planned", "excluded")
SIGNATURE_POLICIES = ("strict", "best_effort", "none")
_TOP_LEVEL_KEYS = {"schema_version", "reference", "target", "contracts", "symbols"}
_SYMBOL_KEYS = {"status", "signature", "contracts", "reason", "note"}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTRACT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# Report categories, in report order.
CATEGORIES = (
    "required/present",
    "required/missing",
    "planned",
    "excluded",
    "unclassified",
)


class ProfileError(ValueError):
    """An unreadable or invalid profile; ``problems`` lists every problem found."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"invalid API profile {source}: {len(self.problems)} problem(s)\n{lines}")


@dataclass(frozen=True)
class SymbolPolicy:
    name: str
    status: str
    signature: str
    contracts: tuple[str, ...]
    reason: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Profile:
    source: str
    reference: str  # "torch.cuda"
    target: str  # "torch.infini"
    contracts: dict[str, str]  # name -> description
    symbols: dict[str, SymbolPolicy]

    def by_status(self, status: str) -> list[SymbolPolicy]:
        return [policy for policy in self.symbols.values() if policy.status == status]


# ---------------------------------------------------------------- loading


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    duplicates = []
    for key, value in pairs:
        if key in seen:
            duplicates.append(key)
        seen[key] = value
    if duplicates:
        raise _DuplicateKeys(duplicates)
    return seen


class _DuplicateKeys(ValueError):
    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        super().__init__(f"duplicate keys: {', '.join(sorted(set(keys)))}")


def validate_profile(data: Any) -> list[str]:
    """Every problem of a decoded profile, as readable sentences (empty: valid)."""
    if not isinstance(data, dict):
        return [f"the profile must be a JSON object, got {type(data).__name__}"]
    problems: list[str] = []
    for key in sorted(_TOP_LEVEL_KEYS - data.keys()):
        problems.append(f"missing top-level key {key!r}")
    for key in sorted(data.keys() - _TOP_LEVEL_KEYS):
        problems.append(f"unknown top-level key {key!r}")
    if "schema_version" in data and data["schema_version"] != SCHEMA_VERSION:
        problems.append(f"schema_version must be {SCHEMA_VERSION}, got {data['schema_version']!r}")
    for key in ("reference", "target"):
        if key in data and not (isinstance(data[key], str) and _is_module_path(data[key])):
            problems.append(f"{key} must be a module path such as 'torch.cuda', got {data[key]!r}")

    contracts = data.get("contracts")
    contract_names: set[str] = set()
    if "contracts" in data:
        if not isinstance(contracts, dict) or not contracts:
            problems.append("contracts must be a non-empty object: contract name -> description")
        else:
            for name, description in contracts.items():
                if not _CONTRACT_NAME.match(name):
                    problems.append(f"contract name {name!r} must match {_CONTRACT_NAME.pattern}")
                if not isinstance(description, str) or not description.strip():
                    problems.append(
                        f"contract {name!r}: the description must be a non-empty string"
                    )
                contract_names.add(name)

    symbols = data.get("symbols")
    if "symbols" in data:
        if not isinstance(symbols, dict) or not symbols:
            problems.append("symbols must be a non-empty object: symbol name -> classification")
        else:
            used: set[str] = set()
            for name, entry in symbols.items():
                problems.extend(_validate_symbol(name, entry, contract_names, used))
            for name in sorted(contract_names - used):
                problems.append(f"contract {name!r} is declared but no symbol belongs to it")
    return problems


def _is_module_path(value: str) -> bool:
    return all(_NAME.match(part) for part in value.split("."))


def _validate_symbol(name: str, entry: Any, contracts: set[str], used: set[str]) -> list[str]:
    where = f"symbol {name!r}"
    if not _NAME.match(name):
        return [f"{where}: not a Python identifier"]
    if not isinstance(entry, dict):
        return [f"{where}: must be an object, got {type(entry).__name__}"]
    problems = [f"{where}: unknown key {key!r}" for key in sorted(entry.keys() - _SYMBOL_KEYS)]
    status = entry.get("status")
    if status not in STATUSES:
        problems.append(f"{where}: status must be one of {', '.join(STATUSES)}, got {status!r}")
    signature = entry.get("signature")
    if signature not in SIGNATURE_POLICIES:
        problems.append(
            f"{where}: signature must be one of {', '.join(SIGNATURE_POLICIES)}, got {signature!r}"
        )
    member_of = entry.get("contracts")
    if (
        not isinstance(member_of, list)
        or not member_of
        or not all(isinstance(item, str) for item in member_of)
    ):
        problems.append(f"{where}: contracts must be a non-empty list of contract names")
    else:
        if len(set(member_of)) != len(member_of):
            problems.append(f"{where}: contracts lists a contract twice")
        for contract in member_of:
            if contract not in contracts:
                problems.append(f"{where}: contract {contract!r} is not declared in 'contracts'")
        used.update(member_of)
    for key in ("reason", "note"):
        if key in entry and not (isinstance(entry[key], str) and entry[key].strip()):
            problems.append(f"{where}: {key} must be a non-empty string")
    if status == "excluded":
        if "reason" not in entry:
            problems.append(f"{where}: an excluded symbol needs a 'reason'")
        if signature not in (None, "none") and signature in SIGNATURE_POLICIES:
            problems.append(f"{where}: an excluded symbol has signature policy 'none'")
    elif status in STATUSES and "reason" in entry:
        problems.append(f"{where}: only excluded symbols carry a 'reason' (use 'note')")
    if signature == "best_effort" and "note" not in entry:
        problems.append(
            f"{where}: a best_effort signature needs a 'note' describing the difference"
        )
    return problems


def parse_profile(data: Any, source: str = "<profile>") -> Profile:
    """Validates decoded JSON and builds the Profile; ProfileError lists every problem."""
    problems = validate_profile(data)
    if problems:
        raise ProfileError(source, problems)
    symbols = {
        name: SymbolPolicy(
            name=name,
            status=entry["status"],
            signature=entry["signature"],
            contracts=tuple(entry["contracts"]),
            reason=entry.get("reason"),
            note=entry.get("note"),
        )
        for name, entry in data["symbols"].items()
    }
    return Profile(
        source=source,
        reference=data["reference"],
        target=data["target"],
        contracts=dict(data["contracts"]),
        symbols=symbols,
    )


def load_profile(path: str | Path) -> Profile:
    """Reads, decodes and validates the profile at ``path``."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(source, [f"cannot read the file: {exc}"]) from exc
    try:
        data = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except _DuplicateKeys as exc:
        raise ProfileError(source, [f"{exc} (JSON objects must not repeat a key)"]) from exc
    except json.JSONDecodeError as exc:
        raise ProfileError(source, [f"not valid JSON: {exc}"]) from exc
    return parse_profile(data, source)


# ---------------------------------------------------------------- signatures


@dataclass(frozen=True)
class SignatureComparison:
    """torch.infini's signature of a symbol against torch.cuda's.

    ``status``: ``equal``, ``different``, or ``uninspectable`` (either side has
    no Python signature: builtins, modules, constants). Annotations are not
    compared (they name module-specific types); parameter names, kinds,
    defaults and order are.
    """

    status: str
    reference: str | None
    target: str | None
    differences: tuple[str, ...] = ()
    compatible: bool = False  # every call torch.infini accepts is a valid torch.cuda call


_Param = tuple[str, str, str]  # (name, kind, repr(default) or "")


def constructor_method(cls: type) -> str | None:
    """``__init__`` or ``__new__``: whichever the class (or its nearest Python base) defines."""
    for klass in cls.__mro__:
        if klass is object:
            break
        for method in ("__init__", "__new__"):
            member = klass.__dict__.get(method)
            if isinstance(member, staticmethod):
                member = member.__func__
            if inspect.isfunction(member):
                return method
    return None


def _parameters(obj: Any, method: str | None) -> list[_Param] | None:
    target = obj
    if inspect.isclass(obj):
        if method is None:
            return None
        target = getattr(obj, method, None)
        if isinstance(target, staticmethod):
            target = target.__func__
        if not inspect.isfunction(target):
            return None
    elif not callable(obj) or inspect.ismodule(obj):
        return None
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    params = list(signature.parameters.values())
    if inspect.isclass(obj):
        params = params[1:]  # self / cls
    return [
        (
            p.name,
            p.kind.name,
            "" if p.default is inspect.Parameter.empty else repr(p.default),
        )
        for p in params
    ]


def format_parameters(params: Sequence[_Param] | None) -> str | None:
    """``(a, b=None, *, c=0, **kwargs)`` without annotations."""
    if params is None:
        return None
    parts: list[str] = []
    star_done = False
    for index, (name, kind, default) in enumerate(params):
        if kind == "KEYWORD_ONLY" and not star_done:
            parts.append("*")
            star_done = True
        if kind == "VAR_POSITIONAL":
            parts.append(f"*{name}")
            star_done = True
        elif kind == "VAR_KEYWORD":
            parts.append(f"**{name}")
        else:
            parts.append(f"{name}={default}" if default else name)
        last_positional_only = kind == "POSITIONAL_ONLY" and (
            index == len(params) - 1 or params[index + 1][1] != "POSITIONAL_ONLY"
        )
        if last_positional_only:
            parts.append("/")
    return f"({', '.join(parts)})"


def _describe_differences(reference: list[_Param], target: list[_Param]) -> list[str]:
    differences: list[str] = []
    ref_by_name = {p[0]: (i, p) for i, p in enumerate(reference)}
    tgt_by_name = {p[0]: (i, p) for i, p in enumerate(target)}
    for name in ref_by_name:
        if name not in tgt_by_name:
            differences.append(f"parameter {name!r} is missing")
    for name in tgt_by_name:
        if name not in ref_by_name:
            differences.append(f"extra parameter {name!r}")
    for name, (i, p) in ref_by_name.items():
        if name not in tgt_by_name:
            continue
        j, q = tgt_by_name[name]
        if p[1] != q[1]:
            differences.append(f"parameter {name!r}: kind {q[1]} instead of {p[1]}")
        if p[2] != q[2]:
            ref_default = p[2] or "no default"
            tgt_default = q[2] or "no default"
            differences.append(
                f"parameter {name!r}: default {tgt_default} instead of {ref_default}"
            )
        if i != j:
            differences.append(f"parameter {name!r}: position {j} instead of {i}")
    return differences


def _compatible(reference: list[_Param], target: list[_Param]) -> bool:
    """torch.infini's parameters are torch.cuda's, in order, minus some trailing ones.

    So every call torch.infini accepts is also a valid torch.cuda call with
    the same meaning; torch.infini may lack trailing optional parameters.
    """
    if len(target) > len(reference):
        return False
    # A device argument defaulting to the backend's own device ('cuda' there,
    # 'infini' here) has the same meaning.
    reference = [
        (name, kind, "'infini'" if default == "'cuda'" else default)
        for name, kind, default in reference
    ]
    if reference[: len(target)] != target:
        return False
    missing = reference[len(target) :]
    return all(default or kind in ("VAR_POSITIONAL", "VAR_KEYWORD") for _, kind, default in missing)


def compare_signatures(reference_obj: Any, target_obj: Any) -> SignatureComparison:
    """Compares callables, or for classes the constructor torch.cuda's class defines."""
    method = constructor_method(reference_obj) if inspect.isclass(reference_obj) else None
    reference = _parameters(reference_obj, method)
    target = (
        _parameters(target_obj, method) if inspect.isclass(target_obj) or method is None else None
    )
    if reference is None or target is None:
        return SignatureComparison(
            "uninspectable", format_parameters(reference), format_parameters(target)
        )
    if reference == target:
        return SignatureComparison(
            "equal", format_parameters(reference), format_parameters(target), (), True
        )
    return SignatureComparison(
        "different",
        format_parameters(reference),
        format_parameters(target),
        tuple(_describe_differences(reference, target)),
        _compatible(reference, target),
    )


def signature_acceptable(policy: str, comparison: SignatureComparison) -> tuple[bool, str]:
    """Whether a present symbol's signature satisfies its policy, and why not."""
    if policy == "none":
        return True, ""
    if comparison.status == "uninspectable":
        return False, (
            f"signature policy {policy!r} needs inspectable signatures "
            f"(torch.cuda: {comparison.reference}, torch.infini: {comparison.target}); "
            "use 'none'"
        )
    if policy == "strict" and comparison.status != "equal":
        return False, (
            f"strict signature differs: torch.cuda{comparison.reference} vs "
            f"torch.infini{comparison.target}: {'; '.join(comparison.differences)}"
        )
    if policy == "best_effort" and not comparison.compatible:
        return False, (
            f"best_effort signature is not compatible (torch.infini's parameters must be "
            f"torch.cuda's leading ones): torch.cuda{comparison.reference} vs "
            f"torch.infini{comparison.target}: {'; '.join(comparison.differences)}"
        )
    return True, ""


# ---------------------------------------------------------------- classification


@dataclass(frozen=True)
class SymbolReport:
    name: str
    category: str  # one of CATEGORIES
    status: str | None  # the profile's status, None when unclassified
    present: bool  # torch.infini has it
    signature_policy: str | None
    signature: SignatureComparison | None  # when present on both sides
    signature_ok: bool | None  # policy satisfied (present symbols with a policy)
    contracts: tuple[str, ...] = ()
    reason: str | None = None
    note: str | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)
    kind: str = ""  # what torch.cuda's object is: class, function, module, ...


def describe_kind(obj: Any) -> str:
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if isinstance(obj, type):
        return "type"
    if callable(obj):
        return "function"
    return type(obj).__name__


def public_surface(module: ModuleType) -> list[str]:
    """The public names of ``module``: its ``__all__``."""
    names = getattr(module, "__all__", None)
    if names is None:
        raise ValueError(f"{module.__name__} has no __all__")
    return sorted(set(names))


def classify(
    profile: Profile,
    reference: ModuleType,
    target: ModuleType,
    names: Iterable[str] | None = None,
) -> list[SymbolReport]:
    """One report per public reference symbol (``reference.__all__`` by default)."""
    reports = []
    for name in sorted(set(public_surface(reference) if names is None else names)):
        policy = profile.symbols.get(name)
        present = hasattr(target, name)
        reference_obj = getattr(reference, name, None)
        kind = describe_kind(reference_obj) if hasattr(reference, name) else "absent"
        comparison = None
        if present and hasattr(reference, name):
            comparison = compare_signatures(reference_obj, getattr(target, name))
        if policy is None:
            reports.append(
                SymbolReport(name, "unclassified", None, present, None, comparison, None, kind=kind)
            )
            continue
        problems: list[str] = []
        signature_ok: bool | None = None
        if present and comparison is not None:
            signature_ok, why = signature_acceptable(policy.signature, comparison)
            if not signature_ok:
                problems.append(why)
        if policy.status == "required":
            category = "required/present" if present else "required/missing"
            if not present:
                problems.append(f"{profile.target}.{name} is required but missing")
        else:
            category = policy.status
            if present and policy.status == "planned":
                problems.append(f"{profile.target}.{name} exists: promote it to 'required'")
            if present and policy.status == "excluded":
                problems.append(f"{profile.target}.{name} exists although the profile excludes it")
        reports.append(
            SymbolReport(
                name=name,
                category=category,
                status=policy.status,
                present=present,
                signature_policy=policy.signature,
                signature=comparison,
                signature_ok=signature_ok,
                contracts=policy.contracts,
                reason=policy.reason,
                note=policy.note,
                problems=tuple(problems),
                kind=kind,
            )
        )
    return reports


def stale_symbols(profile: Profile, reference: ModuleType) -> list[str]:
    """Profile entries the reference no longer lists publicly (e.g. another torch)."""
    return sorted(set(profile.symbols) - set(public_surface(reference)))


def count_reports(reports: Sequence[SymbolReport], stale: Sequence[str] = ()) -> dict[str, int]:
    """The report's counts (stable keys; the Markdown shows the same numbers)."""
    present = [r for r in reports if r.category == "required/present"]
    return {
        "total": len(reports),
        "required": sum(r.status == "required" for r in reports),
        "required_present": len(present),
        "required_present_signature_equal": sum(
            r.signature is not None and r.signature.status == "equal" for r in present
        ),
        "required_present_signature_different": sum(
            r.signature is not None and r.signature.status == "different" for r in present
        ),
        "required_present_signature_uninspectable": sum(
            r.signature is None or r.signature.status == "uninspectable" for r in present
        ),
        "required_missing": sum(r.category == "required/missing" for r in reports),
        "planned": sum(r.category == "planned" for r in reports),
        "planned_present": sum(r.category == "planned" and r.present for r in reports),
        "excluded": sum(r.category == "excluded" for r in reports),
        "excluded_present": sum(r.category == "excluded" and r.present for r in reports),
        "unclassified": sum(r.category == "unclassified" for r in reports),
        "stale_profile_entries": len(stale),
    }
