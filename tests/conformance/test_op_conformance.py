"""Operator conformance: infini against CPU on PyTorch's own OpInfo samples.

For every ATen operator with an infini kernel (asked of the dispatcher) and
every op_db entry for it, one test per dtype the backend declares and the
OpInfo supports on CPU runs the operator's variant (function, in-place or
``out=``) on the first samples, on CPU and on infini, and compares:

* a result must match CPU (dtype-appropriate tolerances);
* a sample CPU computes must not raise on infini in a dtype the backend
  declares for the operator (``torch_infini.supported_dtypes``): a kernel
  that raises on every input fails here. Only where the dtype is not
  declared may a sample be unsupported, and then it must raise
  NotImplementedError or RuntimeError naming infini or the operator;
* a sample CPU rejects must be rejected on infini too;
* the operator under test must actually reach the dispatcher with infini
  tensors (a mapping that exercises something else fails).

Per operator, one dtype CPU supports but the backend does not declare must
raise NotImplementedError with the CPU fallback off, and with the fallback on
give exactly the CPU's result, computed by the fallback. Operators without an
op_db entry are listed explicitly below, so a new one shows up.

Everything else runs with the fallback's default policy, so a sample infini's
kernel refuses runs on the CPU and is compared like any other result.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch_infini
from infini_testing import bit_patterns
from op_coverage import (
    OpCase,
    adapt_sample,
    conformance_cases,
    draws_random,
    load_op_db,
    operator_coverage,
    opinfo_id,
    recording,
    relocate_sample,
    sample_inputs,
    undeclared_cases,
    variant_callable,
)
from op_helpers import DECOMPOSED_WHEN_NOT_TAKEN

MAX_SAMPLES = 20
INFINI = torch.device("infini", 0)
CPU = torch.device("cpu")

# Registered operators op_db has no entry for: internal copies, reshape
# aliases and storage swaps (every other test uses them, none has samples),
# and record_stream (allocator bookkeeping, covered by tests/python).
EXPECTED_WITHOUT_OPINFO = [
    # GradScaler's kernels (tests/python/ops/amp/test_grad_scaler.py).
    "aten::_amp_foreach_non_finite_check_and_unscale_",
    "aten::_amp_update_scale_",
    # The seam's convolution: op_db's conv OpInfos name conv1d/conv2d/conv3d,
    # which call it (tests/python/ops/aten/test_ops_convolution.py).
    "aten::_convolution",
    "aten::_copy_from",
    "aten::_copy_from_and_resize",
    # `param.data = t`, nn.Module.to() (tests/python/models/test_tied_parameters.py).
    "aten::_has_compatible_shallow_copy_type",
    "aten::_local_scalar_dense",
    "aten::_reshape_alias",
    # softmax's kernel: its OpInfos (softmax, nn.functional.softmax) name
    # softmax.int, which calls it (tests/python/ops/aten/test_ops_softmax.py).
    "aten::_softmax",
    "aten::_softmax.out",
    # The fused recurrent cells (tests/python/ops/aten/test_rnn.py, test_autograd.py).
    "aten::_thnn_fused_gru_cell",
    "aten::_thnn_fused_gru_cell_backward",
    "aten::_thnn_fused_lstm_cell",
    "aten::_thnn_fused_lstm_cell_backward_impl",
    "aten::convolution",
    "aten::record_stream",
    # set_() and the set_ forms (tests/python/ops/aten/test_set_storage.py).
    "aten::set_",
    "aten::set_.source_Storage",
    "aten::set_.source_Storage_storage_offset",
    "aten::set_.source_Tensor",
    # torch.ops.infini's fused operators (tests/python/ops/fused/test_fused_ops.py,
    # test_fused_rms_norm_rotary.py, test_fused_routing_sampling.py,
    # test_paged_attention.py).
    "infini::add_rms_norm",
    "infini::causal_softmax",
    "infini::fused_add_rms_norm",
    "infini::paged_attention",
    "infini::reshape_and_cache_flash",
    "infini::rms_norm",
    "infini::rotary_embedding",
    "infini::rotary_embedding_functional",
    "infini::silu_and_mul",
    "infini::swiglu",
    "infini::topk_softmax",
]

# OpInfos whose results are uninitialized memory: only metadata is compared
# (OpInfo's has_nondeterministic_output says the same where torch sets it).
UNINITIALIZED_RESULTS = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}

# Exceptions of the CPU reference that mean the harness or the OpInfo is
# broken rather than that CPU rejects the sample.
_HARNESS_ERRORS = (AttributeError, ImportError, NameError)


_OP_DB = load_op_db()
_COVERAGE = operator_coverage(_OP_DB)
# Random operators (op_coverage.draws_random): infini's generator is not the
# CPU's, so their values differ by design. tests/python/ops/random/test_random_ops.py
# checks them (statistics, reproducibility, errors against the CPU's); op_db's
# samples of them run here through the operators they compose (geometry
# compared), and in the op_db sweep. op_db files a random operator's OpInfo
# under its root name, whose samples reach one overload or another:
# per-overload cases would not hold.
_CASES = [c for c in conformance_cases(_COVERAGE, _OP_DB) if not draws_random(c.operator)]
_UNDECLARED = [c for c in undeclared_cases(_COVERAGE, _OP_DB) if not draws_random(c.operator)]
_RANDOM_OPERATORS = sorted(op.name for op in _COVERAGE if draws_random(op.name))
_BACKEND = torch_infini.backend()


def _params(cases: list[OpCase]) -> list[Any]:
    return [pytest.param(case, id=case.id) for case in cases]


def _tolerance(case: OpCase) -> dict[str, float]:
    """assert_close tolerances: the dtype's defaults, widened for reduced precision.

    float16/bfloat16 kernels may round intermediate results (a product with
    alpha, an accumulation) where CPU computes in float: one or two ulps.
    NVIDIA and MetaX run float32 GEMMs as TF32 (see README).
    """
    dtype = case.dtype
    if dtype == torch.float16:
        return {"rtol": 2e-3, "atol": 1e-3}
    if dtype == torch.bfloat16:
        return {"rtol": 1.6e-2, "atol": 1e-2}
    family = next(op.family for op in _COVERAGE if op.name == case.operator)
    if dtype == torch.float32 and family == "matmul" and _BACKEND in ("nvidia", "metax"):
        return {"rtol": 1e-2, "atol": 1e-2}
    return {}


@dataclass
class _Outcome:
    compared: int = 0
    unsupported: list[str] = field(default_factory=list)
    rejected_by_both: int = 0
    exercised: set[str] = field(default_factory=set)


def _is_clear(exc: BaseException, case: OpCase) -> bool:
    if not isinstance(exc, (NotImplementedError, RuntimeError)):
        return False
    message = str(exc)
    return "infini" in message or case.name.root in message


def _call(case: OpCase, device: torch.device, sample: Any, expected: Any = None) -> Any:
    """Runs the case's variant on a fresh copy of ``sample`` on ``device``."""
    fn, _ = variant_callable(case)
    args, kwargs = adapt_sample(case.operator, (sample.input, *sample.args), dict(sample.kwargs))
    args = relocate_sample(args, device)
    kwargs = relocate_sample(kwargs, device)
    variant = case.name.variant
    if variant == "out":
        # The out tensor takes the function variant's result geometry (CPU's
        # when known: the oracle decides the shape, infini fills it).
        reference = expected if expected is not None else case.opinfo.op(*args, **kwargs)
        out = relocate_sample(_empty_like(reference), device)
        returned = fn(*args, **kwargs, out=out)
        return out, returned
    if variant == "inplace":
        returned = fn(*args, **kwargs)
        return args[0], returned
    return fn(*args, **kwargs), None


def _empty_like(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.empty_like(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_empty_like(v) for v in value)
    return value


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (tuple, list)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def _devices_of(value: Any) -> set[str]:
    if isinstance(value, torch.Tensor):
        return {value.device.type}
    if isinstance(value, (tuple, list)):
        return set().union(*(_devices_of(v) for v in value)) if value else set()
    return set()


class _Where:
    """Names a sample in failure messages (formatted only when a message is)."""

    def __init__(self, case: OpCase, index: int, sample: Any, suffix: str = "") -> None:
        self.case, self.index, self.sample, self.suffix = case, index, sample, suffix

    def __str__(self) -> str:
        summary = self.sample.summary() if hasattr(self.sample, "summary") else self.sample
        return f"{self.case.id} sample {self.index} ({summary}){self.suffix}"


def _compare_geometry(got: Any, expected: Any, what: _Where) -> None:
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected), f"{what}: arity"
        for g, e in zip(got, expected, strict=True):
            _compare_geometry(g, e, what)
        return
    assert isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor), what
    assert (got.shape, got.dtype, got.stride()) == (
        expected.shape,
        expected.dtype,
        expected.stride(),
    ), f"{what}: metadata differs"


def _compare(case: OpCase, got: Any, expected: Any, what: _Where) -> None:
    devices = _devices_of(got)
    if _devices_of(expected):
        assert devices == {"infini"}, f"{what}: result on {devices}, expected infini"
    if draws_random(case.operator):
        _compare_geometry(got, expected, what)
        return
    got_cpu = _to_cpu(got)
    if case.opinfo.name in UNINITIALIZED_RESULTS or getattr(
        case.opinfo, "has_nondeterministic_output", False
    ):
        # Uninitialized values: compare the geometry, read on the device
        # (a copy to the CPU makes non-dense results contiguous).
        assert isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor)
        assert (got.shape, got.dtype, got.stride()) == (
            expected.shape,
            expected.dtype,
            expected.stride(),
        ), f"{what}: metadata differs"
        return
    torch.testing.assert_close(
        got_cpu, expected, equal_nan=True, msg=lambda m: f"{what}: {m}", **_tolerance(case)
    )


def _run(case: OpCase) -> _Outcome:
    outcome = _Outcome()
    samples = sample_inputs(case.opinfo, "cpu", case.dtype)
    for index, sample in enumerate(itertools.islice(samples, MAX_SAMPLES)):
        what = _Where(case, index, sample)
        try:
            expected, expected_returned = _call(case, CPU, sample)
            cpu_error: Exception | None = None
        except _HARNESS_ERRORS:
            raise  # the reference itself is broken, not the sample
        except Exception as exc:  # CPU rejects the sample: infini must too
            cpu_error = exc
        with recording() as recorder:
            try:
                if cpu_error is None:
                    got, got_returned = _call(case, INFINI, sample, expected)
                else:
                    _call(case, INFINI, sample)
            except Exception as exc:
                infini_error: Exception | None = exc
            else:
                infini_error = None
        outcome.exercised |= recorder.seen
        if cpu_error is not None:
            assert infini_error is not None, (
                f"{what}: infini returned a result where CPU raised "
                f"{type(cpu_error).__name__}: {cpu_error}"
            )
            assert isinstance(infini_error, type(cpu_error)) or _is_clear(infini_error, case), (
                f"{what}: CPU raised {type(cpu_error).__name__}, infini "
                f"{type(infini_error).__name__}: {infini_error}"
            )
            outcome.rejected_by_both += 1
            continue
        if infini_error is not None:
            assert case.dtype not in torch_infini.supported_dtypes(case.operator), (
                f"{what}: CPU computed a result, infini raised in a dtype it declares for "
                f"{case.operator}: {type(infini_error).__name__}: {infini_error}"
            )
            assert _is_clear(infini_error, case), (
                f"{what}: unsupported samples must raise NotImplementedError or RuntimeError "
                f"naming infini or {case.name.root!r}; got {type(infini_error).__name__}: "
                f"{infini_error}"
            )
            outcome.unsupported.append(f"{type(infini_error).__name__}: {infini_error}")
            continue
        _compare(case, got, expected, what)
        if case.name.variant != "function" and isinstance(expected_returned, torch.Tensor):
            _compare(
                case, got_returned, expected_returned, _Where(case, index, sample, " (returned)")
            )
        outcome.compared += 1
    return outcome


@pytest.mark.parametrize("case", _params(_CASES))
def test_operator_matches_cpu(case: OpCase, record_property: Any) -> None:
    outcome = _run(case)
    record_property("compared_samples", outcome.compared)
    record_property("unsupported_samples", len(outcome.unsupported))
    attempted = outcome.compared + len(outcome.unsupported)
    assert attempted > 0, (
        f"no sample of {opinfo_id(case.opinfo)} applies to {case.operator} "
        f"({outcome.rejected_by_both} rejected by CPU and infini alike)"
    )
    assert case.operator in outcome.exercised, (
        f"{opinfo_id(case.opinfo)} ({variant_callable(case)[1]}) never reached {case.operator} "
        f"on infini; it reached {sorted(outcome.exercised)}"
    )


@pytest.mark.fallback_off
@pytest.mark.parametrize("case", _params(_UNDECLARED))
def test_undeclared_dtype_is_refused(case: OpCase) -> None:
    """A dtype the backend does not declare raises NotImplementedError, never a result."""
    refused = 0
    samples = sample_inputs(case.opinfo, "cpu", case.dtype)
    for index, sample in enumerate(itertools.islice(samples, MAX_SAMPLES)):
        try:
            expected, _ = _call(case, CPU, sample)
        except _HARNESS_ERRORS:
            raise
        except Exception:
            continue  # not a valid sample for CPU either
        with pytest.raises(NotImplementedError) as info:
            _call(case, INFINI, sample, expected)
        assert torch_infini.backend() in str(info.value) or "infini" in str(info.value), (
            f"sample {index}: the refusal should name the backend: {info.value}"
        )
        refused += 1
    assert refused > 0, f"no sample of {opinfo_id(case.opinfo)} in {case.dtype} applies"


def _compare_bitwise(got: Any, expected: Any, what: _Where) -> None:
    """``got`` is ``expected`` on infini, bit for bit: the fallback ran the CPU's own kernel."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}"
        assert got.device.type == "infini", f"{what}: result on {got.device}, expected infini"
        got = got.cpu()
        assert (got.shape, got.dtype) == (expected.shape, expected.dtype), (
            f"{what}: {tuple(got.shape)} {got.dtype} != {tuple(expected.shape)} {expected.dtype}"
        )
        assert torch.equal(bit_patterns(got), bit_patterns(expected)), (
            f"{what}: not bit for bit the CPU's"
        )
    elif isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected), what
        for g, e in zip(got, expected, strict=True):
            _compare_bitwise(g, e, what)
    else:
        assert got == expected, f"{what}: {got!r} != {expected!r}"


def _fallback_calls(operators: list[str]) -> int:
    stats = torch_infini.cpu_fallback.stats()
    return sum(stats[name].calls for name in operators if name in stats)


@pytest.mark.parametrize("case", _params(_UNDECLARED))
def test_undeclared_dtype_falls_back_to_the_cpu(case: OpCase) -> None:
    """With the fallback on, a dtype the backend does not declare gives the CPU's result."""
    compared = 0
    samples = sample_inputs(case.opinfo, "cpu", case.dtype)
    for index, sample in enumerate(itertools.islice(samples, MAX_SAMPLES)):
        try:
            expected, expected_returned = _call(case, CPU, sample)
        except _HARNESS_ERRORS:
            raise
        except Exception:
            continue  # not a valid sample for CPU either
        # A decomposed operator's products run there (op_helpers.DECOMPOSED_WHEN_NOT_TAKEN).
        short = case.operator.removeprefix("aten::")
        staged = [f"aten::{p}" for p in DECOMPOSED_WHEN_NOT_TAKEN.get(short, ())] or [case.operator]
        calls_before = _fallback_calls(staged)
        with torch_infini.cpu_fallback.allowed("silent"):
            got, got_returned = _call(case, INFINI, sample, expected)
        what = _Where(case, index, sample)
        assert _fallback_calls(staged) > calls_before, (
            f"{what}: {' or '.join(staged)} did not run through the CPU fallback"
        )
        _compare_bitwise(got, expected, what)
        if case.name.variant != "function":
            _compare_bitwise(got_returned, expected_returned, _Where(case, index, sample, " (ret)"))
        compared += 1
    assert compared > 0, f"no sample of {opinfo_id(case.opinfo)} in {case.dtype} applies"


def test_every_registered_operator_has_cases_or_is_listed() -> None:
    # The in-place foreach operators have no op_db entry: op_db leaves out
    # PyTorch's foreach OpInfos, which tests/python/ops/aten/test_foreach.py runs on
    # every one of them against the CPU, bit for bit.
    foreach = {info.name for info in torch_infini.operators() if info.family == "foreach"}
    tested = {case.operator for case in _CASES} | set(_RANDOM_OPERATORS) | foreach
    # An operator the backend declares no dtype for (one InfiniOps has on
    # accelerators only, on InfiniRT cpu: sigmoid) is tested by the
    # undeclared-dtype cases: refused, or run in the fallback.
    tested |= {c.operator for c in _UNDECLARED} & {op.name for op in _COVERAGE if not op.dtypes}
    untested = [op.name for op in _COVERAGE if op.name not in tested]
    without_opinfo = [
        op.name
        for op in _COVERAGE
        if not op.opinfos and op.name not in _RANDOM_OPERATORS and op.name not in foreach
    ]
    assert sorted(without_opinfo) == EXPECTED_WITHOUT_OPINFO, (
        "registered operators without an op_db entry changed; update EXPECTED_WITHOUT_OPINFO "
        f"(and the reason) to: {without_opinfo}"
    )
    assert sorted(untested) == sorted(without_opinfo), (
        f"operators with an op_db entry but no declared dtype the OpInfo supports on CPU: "
        f"{sorted(set(untested) - set(without_opinfo))}"
    )


def test_dispatcher_and_operator_table_agree() -> None:
    unlisted = [op.name for op in _COVERAGE if not op.in_table]
    unregistered = [op.name for op in _COVERAGE if not op.registered]
    assert not unlisted, (
        f"registered for PrivateUse1 but missing from the operator table: {unlisted}"
    )
    assert not unregistered, f"in the operator table but not registered: {unregistered}"
