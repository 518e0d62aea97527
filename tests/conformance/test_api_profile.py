"""The API profile: valid, complete, and true of torch.infini today.

* the profile validates (an invalid profile is an error, every problem listed);
* every public torch.cuda symbol is classified;
* every required symbol exists on torch.infini with a signature its policy
  accepts (strict: torch.cuda's parameters exactly; best_effort: compatible);
* planned and excluded symbols are absent (a present one must be reclassified).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from api_profile import (
    ProfileError,
    classify,
    compare_signatures,
    load_profile,
    parse_profile,
    public_surface,
    signature_acceptable,
    stale_symbols,
    validate_profile,
)

PROFILE = Path(__file__).with_name("api_profile.json")
RAW: dict[str, Any] = json.loads(PROFILE.read_text(encoding="utf-8"))


def _names(status: str) -> list[str]:
    return sorted(name for name, entry in RAW["symbols"].items() if entry["status"] == status)


def test_profile_is_valid() -> None:
    profile = load_profile(PROFILE)
    assert profile.reference == "torch.cuda"
    assert profile.target == "torch.infini"


def test_every_public_torch_cuda_symbol_is_classified() -> None:
    profile = load_profile(PROFILE)
    unclassified = [r.name for r in classify(profile, torch.cuda, torch.infini) if r.status is None]
    assert not unclassified, (
        f"classify these torch.cuda symbols in {PROFILE.name} "
        f"(required/planned/excluded): {unclassified}"
    )
    assert not stale_symbols(profile, torch.cuda), "profile entries torch.cuda no longer has"


@pytest.mark.parametrize("name", _names("required"))
def test_required_symbol(name: str) -> None:
    profile = load_profile(PROFILE)
    (report,) = classify(profile, torch.cuda, torch.infini, [name])
    assert report.present, f"torch.infini.{name} is required but missing"
    assert report.signature is not None
    ok, why = signature_acceptable(report.signature_policy or "none", report.signature)
    assert ok, why


@pytest.mark.parametrize("name", _names("planned") + _names("excluded"))
def test_not_required_symbol_is_absent(name: str) -> None:
    status = RAW["symbols"][name]["status"]
    assert not hasattr(torch.infini, name), (
        f"torch.infini.{name} exists but the profile says {status!r}: classify it as required "
        f"(with its signature policy) in {PROFILE.name}"
    )


def test_required_symbols_are_public() -> None:
    """torch.infini lists what it offers in __all__, as torch.cuda does."""
    missing = sorted(set(_names("required")) - set(public_surface(torch.infini)))
    assert not missing, f"required but not in torch.infini.__all__: {missing}"


# ---------------------------------------------------------------- validation


def _invalid(data: Any) -> list[str]:
    with pytest.raises(ProfileError) as info:
        parse_profile(data, "test-profile")
    return info.value.problems


def test_validation_lists_every_problem() -> None:
    data = copy.deepcopy(RAW)
    data["extra"] = 1
    data["schema_version"] = 99
    data["symbols"]["is_available"]["status"] = "maybe"
    data["symbols"]["device_count"]["signature"] = "loose"
    data["symbols"]["Event"].pop("note")
    data["symbols"]["cudart"].pop("reason")
    data["symbols"]["cudart"]["signature"] = "strict"
    data["symbols"]["init"]["contracts"] = ["nonexistent"]
    data["symbols"]["init"]["colour"] = "blue"
    data["symbols"]["set_device"]["reason"] = "required symbols have no reason"
    problems = _invalid(data)
    expected = [
        "unknown top-level key 'extra'",
        "schema_version must be 1, got 99",
        "symbol 'is_available': status must be one of required, planned, excluded, got 'maybe'",
        "symbol 'device_count': signature must be one of strict, best_effort, none, got 'loose'",
        "symbol 'Event': a best_effort signature needs a 'note' describing the difference",
        "symbol 'cudart': an excluded symbol needs a 'reason'",
        "symbol 'cudart': an excluded symbol has signature policy 'none'",
        "symbol 'init': contract 'nonexistent' is not declared in 'contracts'",
        "symbol 'init': unknown key 'colour'",
        "symbol 'set_device': only excluded symbols carry a 'reason' (use 'note')",
    ]
    for sentence in expected:
        assert sentence in problems, f"{sentence!r} not among {problems}"
    assert len(problems) == len(expected), problems
    message = str(ProfileError("test-profile", problems))
    assert message.startswith(f"invalid API profile test-profile: {len(expected)} problem(s)")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([], "the profile must be a JSON object"),
        ({}, "missing top-level key 'symbols'"),
        ({**RAW, "symbols": {}}, "symbols must be a non-empty object"),
        ({**RAW, "contracts": []}, "contracts must be a non-empty object"),
        ({**RAW, "reference": "torch cuda"}, "reference must be a module path"),
        ({**RAW, "symbols": {"not a name": {}}}, "not a Python identifier"),
        ({**RAW, "symbols": {"x": "required"}}, "symbol 'x': must be an object"),
        (
            {
                **RAW,
                "symbols": {"x": {"status": "required", "signature": "strict", "contracts": []}},
            },
            "contracts must be a non-empty list",
        ),
        (
            {
                **RAW,
                "symbols": {
                    "x": {
                        "status": "required",
                        "signature": "none",
                        "contracts": ["device", "device"],
                    }
                },
            },
            "lists a contract twice",
        ),
        (
            {
                **RAW,
                "symbols": {
                    "x": {
                        "status": "planned",
                        "signature": "none",
                        "contracts": ["device"],
                        "note": "",
                    }
                },
            },
            "note must be a non-empty string",
        ),
    ],
)
def test_validation_problem(data: Any, fragment: str) -> None:
    problems = validate_profile(data)
    assert any(fragment in problem for problem in problems), problems


def test_unused_contract_is_a_problem() -> None:
    data = copy.deepcopy(RAW)
    data["contracts"]["teleport"] = "moving tensors without copies"
    assert "contract 'teleport' is declared but no symbol belongs to it" in _invalid(data)


def test_load_rejects_bad_json_duplicates_and_missing_files(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1,', encoding="utf-8")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_profile(broken)
    duplicated = tmp_path / "duplicated.json"
    duplicated.write_text(
        PROFILE.read_text(encoding="utf-8").replace(
            '"symbols": {', '"symbols": {\n    "init": {"status": "excluded"},', 1
        ),
        encoding="utf-8",
    )
    with pytest.raises(ProfileError, match="duplicate keys: init"):
        load_profile(duplicated)
    with pytest.raises(ProfileError, match="cannot read the file"):
        load_profile(tmp_path / "absent.json")


# ---------------------------------------------------------------- signatures


def _f(device: object = None) -> None: ...
def _g(device: object = 0) -> None: ...
def _h(device: object = None, extra: int = 1) -> None: ...
def _k(other: object = None) -> None: ...


class _RefNew:
    def __new__(cls, a: int = 0, b: bool = False, c: bool = False) -> _RefNew:
        return super().__new__(cls)


class _TargetNew:
    def __new__(cls, a: int = 0, b: bool = False) -> _TargetNew:
        return super().__new__(cls)


class _RefInit:
    def __init__(self, device: object) -> None: ...


class _TargetInit:
    def __init__(self, device: object) -> None: ...


def test_compare_signatures() -> None:
    equal = compare_signatures(_f, _f)
    assert (equal.status, equal.reference, equal.compatible) == ("equal", "(device=None)", True)
    default = compare_signatures(_f, _g)
    assert default.status == "different"
    assert default.differences == ("parameter 'device': default 0 instead of None",)
    assert not default.compatible
    assert compare_signatures(_h, _f).compatible  # torch.infini lacks a trailing optional one
    assert not compare_signatures(_f, _h).compatible  # torch.infini adds one
    renamed = compare_signatures(_f, _k)
    assert "parameter 'device' is missing" in renamed.differences
    assert "extra parameter 'other'" in renamed.differences
    constructor = compare_signatures(_RefNew, _TargetNew)
    assert constructor.status == "different"
    assert constructor.reference == "(a=0, b=False, c=False)"
    assert constructor.target == "(a=0, b=False)"
    assert constructor.compatible
    assert compare_signatures(_RefInit, _TargetInit).status == "equal"
    assert compare_signatures(torch.cuda.amp, torch.cuda.amp).status == "uninspectable"
    assert compare_signatures(len, len).status in ("equal", "uninspectable")


def test_signature_policies() -> None:
    assert signature_acceptable("strict", compare_signatures(_f, _f)) == (True, "")
    ok, why = signature_acceptable("strict", compare_signatures(_f, _g))
    assert not ok and "strict signature differs" in why
    assert signature_acceptable("best_effort", compare_signatures(_RefNew, _TargetNew))[0]
    ok, why = signature_acceptable("best_effort", compare_signatures(_f, _h))
    assert not ok and "not compatible" in why
    assert signature_acceptable("none", compare_signatures(_f, _k)) == (True, "")
    ok, why = signature_acceptable("strict", compare_signatures(torch.cuda.amp, torch.cuda.amp))
    assert not ok and "use 'none'" in why
