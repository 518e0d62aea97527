"""What is declared native is what runs natively, on the selected backend.

native/ops/include/torch_infini/ops/seam_operators.h holds, in one row per
operator, which dtypes InfiniOps declares on which device types, and
native/ops/src/seam/declared_support.cpp which of them torch-infini refuses.
Here, on whichever backend the suite runs:

* the dtypes the operator table reports are exactly the declared, unrefused
  ones for the backend's device type (host: InfiniOps' ``cpu`` column, and
  for an operator InfiniOps has on accelerators only, their dtypes);
* every such pair runs natively (the CPU fallback off) and matches the CPU;
* one pair per operator that is not declared, or refused, raises
  NotImplementedError naming the dtype and the kernel.

Run against a real Infini stack this checks the snapshot of InfiniOps'
declarations: a dtype InfiniOps' dispatch does not take would abort there.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import fallback_off
from op_helpers import (
    DECOMPOSED_WHEN_NOT_TAKEN,
    DEVICE,
    assert_matches,
    expect_kernel,
    make_cpu,
    runs_cpu_kernels,
)
from torch_infini._operators import declarations

ROOT = Path(__file__).resolve().parents[4]

# Dtypes probed for a refusal, in this order: InfiniOps' dtypes, then two it lacks.
CANDIDATES = (
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.bool,
    torch.complex64,
)

# One ATen call per seam operator, on tensors of `dtype` on `device`; the
# names are the operator table's (aten::<name>) for expect_kernel.
Call = Callable[[torch.dtype, str], torch.Tensor]


def _t(shape: tuple[int, ...], dtype: torch.dtype, device: str, seed: int) -> torch.Tensor:
    return make_cpu(shape, dtype, seed=seed).to(device)


CALLS: dict[str, tuple[str, Call]] = {
    "add": ("add", lambda dt, d: _t((3, 4), dt, d, 1) + _t((3, 4), dt, d, 2)),
    "mul": ("mul", lambda dt, d: _t((3, 4), dt, d, 1) * _t((3, 4), dt, d, 2)),
    "gemm": ("mm", lambda dt, d: _t((3, 5), dt, d, 1) @ _t((5, 4), dt, d, 2)),
    "relu": ("relu", lambda dt, d: torch.relu(_t((3, 4), dt, d, 1))),
    "silu": ("silu", lambda dt, d: F.silu(_t((3, 4), dt, d, 1))),
    "sigmoid": ("sigmoid", lambda dt, d: torch.sigmoid(_t((3, 4), dt, d, 1))),
    "gelu": ("gelu", lambda dt, d: F.gelu(_t((3, 4), dt, d, 1))),
    "softmax": ("_softmax", lambda dt, d: torch.softmax(_t((3, 4), dt, d, 1), -1)),
    "rms_norm": ("rms_norm", lambda dt, d: F.rms_norm(_t((3, 8), dt, d, 1), (8,))),
    "linear": (  # with a bias: undeclared, addmm (DECOMPOSED_WHEN_NOT_TAKEN)
        "linear",
        lambda dt, d: F.linear(_t((3, 5), dt, d, 1), _t((4, 5), dt, d, 2), _t((4,), dt, d, 3)),
    ),
    "silu_and_mul": (
        "infini::silu_and_mul",
        lambda dt, d: torch_infini.ops.silu_and_mul(_t((3, 8), dt, d, 1)),
    ),
    "swiglu": (
        "infini::swiglu",
        lambda dt, d: torch_infini.ops.swiglu(_t((3, 4), dt, d, 1), _t((3, 4), dt, d, 2)),
    ),
    "causal_softmax": (
        "infini::causal_softmax",
        lambda dt, d: torch_infini.ops.causal_softmax(_t((2, 3, 5), dt, d, 1)),
    ),
    "cat": ("cat", lambda dt, d: torch.cat([_t((2, 3), dt, d, 1), _t((1, 3), dt, d, 2)])),
    "rotary_embedding": ("infini::rotary_embedding", lambda dt, d: _rotated(dt, d)),
    "fused_add_rms_norm": ("infini::fused_add_rms_norm", lambda dt, d: _normed(dt, d)),
    "add_rms_norm": (
        "infini::add_rms_norm",
        lambda dt, d: torch_infini.ops.add_rms_norm(
            _t((3, 8), dt, d, 1), _t((3, 8), dt, d, 2), _t((8,), dt, d, 3)
        )[0],
    ),
    "embedding": (
        "embedding",
        lambda dt, d: torch.embedding(_t((10, 4), dt, d, 1), torch.tensor([[1, 9], [0, 1]]).to(d)),
    ),
    "topk_softmax": (
        "infini::topk_softmax",
        lambda dt, d: torch_infini.ops.topk_softmax(_t((4, 8), dt, d, 1), 2, True)[0],
    ),
    "reshape_and_cache_flash": ("infini::reshape_and_cache_flash", lambda dt, d: _cached(dt, d)),
    "paged_attention": ("infini::paged_attention", lambda dt, d: _attended(dt, d)),
    "convolution": (
        "convolution",
        lambda dt, d: F.conv2d(_t((2, 3, 6, 6), dt, d, 1), _t((4, 3, 3, 3), dt, d, 2), padding=1),
    ),
}


def _cached(dtype: torch.dtype, device: str) -> torch.Tensor:
    """reshape_and_cache_flash of 3 tokens into [4, 2, 2, 8] caches (one
    padding slot); returns the key cache."""
    key, value = _t((3, 2, 8), dtype, device, 1), _t((3, 2, 8), dtype, device, 2)
    key_cache, value_cache = _t((4, 2, 2, 8), dtype, device, 3), _t((4, 2, 2, 8), dtype, device, 4)
    slots = torch.tensor([5, -1, 0]).to(device)
    torch_infini.ops.reshape_and_cache_flash(key, value, key_cache, value_cache, slots)
    return key_cache


def _attended(dtype: torch.dtype, device: str) -> torch.Tensor:
    """paged_attention of 2 sequences (3 and 6 tokens), 4 query heads on 2
    kv heads of size 64, blocks of 4."""
    query = (make_cpu((2, 4, 64), dtype, seed=1) / 8).to(device)
    caches = _t((2, 5, 2, 4, 64), dtype, device, 2)
    tables = torch.tensor([[3, 0], [1, 4]], dtype=torch.int32).to(device)
    lengths = torch.tensor([3, 6], dtype=torch.int32).to(device)
    return torch_infini.ops.paged_attention(query, caches[0], caches[1], tables, lengths, 0.125)


def _normed(dtype: torch.dtype, device: str) -> torch.Tensor:
    """fused_add_rms_norm of [3, 8] rows in place, with a weight; returns the
    normalized input (the new residual is its input)."""
    x, residual = _t((3, 8), dtype, device, 1), _t((3, 8), dtype, device, 2)
    torch_infini.ops.fused_add_rms_norm(x, residual, _t((8,), dtype, device, 3))
    return x


def _rotated(dtype: torch.dtype, device: str) -> torch.Tensor:
    """rotary_embedding of a query [B, S, heads, d] in place, with a cache
    of its dtype; returns the query."""
    q = _t((2, 3, 2, 8), dtype, device, 1)
    cache = _t((6, 8), dtype, device, 2)
    positions = torch.arange(6).view(2, 3).to(device)
    torch_infini.ops.rotary_embedding(positions, q, None, 8, cache, True)
    return q


# Seam operators that never refuse: copies and casts of a dtype the provider
# lacks are staged through the host instead (test_copy.py), and fills
# without a kernel upload the value (test_ops_fill.py); host serves all
# three in every dtype, with the CPU's kernels.
NEVER_REFUSED = {"copy", "cast", "fill"}


def _device_type() -> str:
    backend = torch_infini.backend()
    return "cpu" if backend == "host" else backend


def _native(op: str) -> set[torch.dtype]:
    """The declared, unrefused dtypes of seam operator ``op`` on this backend
    (host: InfiniOps' ``cpu`` column; for an operator InfiniOps implements
    on accelerators only, the dtypes it declares there)."""
    host = torch_infini.backend() == "host"
    rows = [d for d in declarations() if d.op == op]
    if host and not any(d.device_type == "cpu" for d in rows):
        return {d.dtype for d in rows if d.host_refusal is None}
    return {
        d.dtype
        for d in rows
        if d.device_type == _device_type()
        and (d.host_refusal if host else d.infinirt_refusal) is None
    }


def test_every_seam_operator_with_a_declaration_has_a_call_here() -> None:
    declared = {d.op for d in declarations()}
    assert declared - NEVER_REFUSED == set(CALLS)


def test_the_operator_table_reports_the_declared_dtypes() -> None:
    for op, (aten, _) in CALLS.items():
        reported = set(torch_infini.supported_dtypes(aten))
        if torch_infini.backend() != "host" and not reported:
            continue  # not in the installed InfiniOps' operator allowlist
        assert reported == _native(op), (op, sorted(map(str, reported ^ _native(op))))


def test_refusals_say_why() -> None:
    for d in declarations():
        for reason in (d.infinirt_refusal, d.host_refusal):
            assert reason is None or len(reason) > 20, (d.op, d.device_type, d.dtype)
        assert d.infiniops[0].isupper(), d.infiniops
    gemm_double = [d for d in declarations() if d.op == "gemm" and d.dtype == torch.float64]
    assert gemm_double and all("float" in (d.infinirt_refusal or "") for d in gemm_double)


def _tolerances(dtype: torch.dtype) -> dict[str, float]:
    if runs_cpu_kernels() or not dtype.is_floating_point:
        return {}
    if dtype in (torch.float16, torch.bfloat16):
        return {"rtol": 1.6e-2, "atol": 1e-2}
    return {"rtol": 1e-4, "atol": 1e-4}


@fallback_off
@pytest.mark.parametrize("op", list(CALLS), ids=str)
def test_every_declared_pair_runs_natively(op: str) -> None:
    aten, call = CALLS[op]
    native = _native(op) & set(torch_infini.supported_dtypes(aten))
    for dtype in sorted(native, key=str):
        expected = call(dtype, "cpu")
        result = call(dtype, DEVICE)  # strict: a fallback would raise
        assert_matches(result, expected, **_tolerances(dtype))


def _cpu_takes(call: Call, dtype: torch.dtype) -> bool:
    try:
        call(dtype, "cpu")
    except RuntimeError:
        return False
    return True


@fallback_off
@pytest.mark.parametrize("op", list(CALLS), ids=str)
def test_one_undeclared_pair_is_refused(op: str) -> None:
    """The first dtype the CPU takes but the backend does not declare raises
    NotImplementedError (the fallback would serve it). Where the backend
    declares every dtype the CPU takes, there is nothing to refuse, and that
    itself is asserted."""
    aten, call = CALLS[op]
    native = set(torch_infini.supported_dtypes(aten))
    cpu_takes = [d for d in CANDIDATES if _cpu_takes(call, d)]
    undeclared = [d for d in cpu_takes if d not in native]
    if not undeclared:
        assert set(cpu_takes) <= native
        return
    with expect_kernel(
        DECOMPOSED_WHEN_NOT_TAKEN.get(aten, (aten,))[0], undeclared[0]
    ) as ran_natively:
        call(undeclared[0], DEVICE)
    assert not ran_natively


def _infiniops_allowlist(seam_list: Path | None = None) -> list[str]:
    command = ["cmake", *([f"-DSEAM_LIST={seam_list}"] if seam_list else [])]
    command += ["-P", str(ROOT / "cmake" / "infiniops_allowlist.cmake")]
    return (
        subprocess.run(command, check=True, capture_output=True, text=True)
        .stdout.strip()
        .split(";")
    )


def test_the_gpu_run_builds_infiniops_with_the_operators_of_the_seam_rows(tmp_path: Path) -> None:
    """tools/gpu_run.sh builds InfiniOps for the operators the seam wires,
    read from seam_operators.h's rows (cmake/infiniops_allowlist.cmake),
    not from a list of its own: every InfiniOps class the compiled rows
    declare, in InfiniOps' snake case, once."""
    allowlist = _infiniops_allowlist()
    snake = {re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", d.infiniops).lower() for d in declarations()}
    assert sorted(allowlist) == sorted(snake)
    assert "paged_attention_infinilm" in allowlist and "rms_norm" in allowlist
    script = (ROOT / "tools" / "gpu_run.sh").read_text()
    assert 'OPS="$(cmake -P "$REPO/cmake/infiniops_allowlist.cmake")"' in script
    assert "rms_norm;" not in script  # no list of its own
    # A new row is in the allowlist the next run builds.
    seam_list = ROOT / "native" / "ops" / "include" / "torch_infini" / "ops" / "seam_operators.h"
    text = seam_list.read_text()
    row = "  X(Copy, copy, Copy,"
    assert row in text
    edited = tmp_path / "seam_operators.h"
    edited.write_text(
        text.replace(
            row,
            "  X(MoeSum, moe_sum, MoeSum, kAllTypes, kCudaLike, nullptr) \\\n" + row,
        )
    )
    assert sorted(_infiniops_allowlist(edited)) == sorted([*allowlist, "moe_sum"])
