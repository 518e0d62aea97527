"""The op_db sweep: every OpInfo of PyTorch's op_db, run on infini and compared with the CPU.

    python tools/op_db_sweep.py --markdown build/reports/op_db.md --json build/reports/op_db.json
        [--max-samples N] [--jobs J] [--timeout SECONDS] [--only REGEX]

For every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db``
and each of its dtypes (``select_dtypes``: float32, float16 or bfloat16, one
integer dtype, where the OpInfo supports them on the CPU), the OpInfo's
samples are generated on the CPU and each one runs twice: on the CPU (the
oracle) and on a copy on ``infini`` (same sizes, strides, storage offsets and
storage sharing). With the CPU fallback's default policy, every sample must

* match: the same results as the CPU (nested outputs, Python scalars, and
  the inputs after the call, which catches wrong writes) -- bit for bit
  where the CPU's own kernel ran (the fallback, every kernel of the ``host``
  backend), with the OpInfo's tolerances where an InfiniOps kernel ran
  (widened for float16/bfloat16 kernels and TF32 GEMMs as
  test_op_conformance.py does);
  where the CPU raises, infini raises the same exception type;
* or be refused: NotImplementedError for one of the documented ``REFUSALS``.

Anything else is ``wrong`` (values, dtype, shape, strides or device differ),
``error`` (another exception where the CPU succeeded), ``crash`` or ``hang``
(the sweep runs OpInfos in worker processes and classifies a dying or
stuck worker). Backward runs for float32 wherever the OpInfo supports
autograd: the gradients of every input that requires grad, for fixed
output gradients generated on the CPU.

Exempt from value comparison, and only from that (the geometry is still
compared): results PyTorch leaves uninitialised (``empty*``,
``new_empty*``) and samples that draw random numbers on the CPU (the CPU
generator's state changes across the oracle's call, or across one of its
operators where op_db's ``wrapper_set_seed`` restores the state). On
infini, random operators are refused anyway (no CPU generator stands in
for a device generator).

The report counts match / refused by reason / wrong / error / crash / hang,
forward and backward, and how many samples ran natively or used the CPU
fallback (``torch_infini.cpu_fallback.stats()`` before and after). It
never fails on results; it exits with status 2 when it cannot be generated.
tests/conformance/test_op_db.py runs the same checks, bounded, under pytest.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import selectors
import struct
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_io import (  # noqa: E402
    REPO_ROOT,
    ReportError,
    add_output_arguments,
    code,
    counts_table,
    require_output,
    run,
    table,
    write_outputs,
)

SCHEMA = "torch-infini/op-db-sweep/1"

# NotImplementedError messages that are documented refusals (README, "The CPU
# fallback"): key, meaning, pattern of the message. Any other exception where
# the CPU succeeded is an error.
REFUSALS: tuple[tuple[str, str, str], ...] = (
    (
        "random operator",
        "draws random numbers without an infini kernel: never the CPU's generator (README)",
        r"draws random numbers",
    ),
    (
        "sparse, nested or quantized tensor",
        "infini tensors are strided and dense",
        r"infini supports strided \(dense\) tensors only",
    ),
)

# OpInfos whose samples' positional arguments stay on the CPU, as op_db creates
# them (and PyTorch requires them there), whatever the device under test.
CPU_ARGUMENTS = {
    "tensor_split": "tensor_indices_or_sections must be a CPU tensor",
}

# OpInfos whose function PyTorch defines by device type: infini runs what
# PyTorch asks of a device that is not the CPU, so results are compared with
# the OpInfo's tolerances, not bit for bit.
DEVICE_DEPENDENT = {
    "nn.functional.linear_cross_entropy": (
        "LinearCrossEntropyOptions picks its accumulation by device type: float32 on the CPU, "
        "the input dtype elsewhere"
    ),
}


def _batch_norm_statistics_off_the_cpu(sample: Any, result: Any) -> Any:
    """In evaluation, PyTorch returns the statistics it used (the running mean and
    1/sqrt(running var + eps), in the computation's dtype) on every device but the
    CPU, which returns empty tensors (torch/_decomp's native_batch_norm_helper: "Very
    annoying inconsistency where CPU and CUDA give different shapes"). From stock ops."""
    import torch

    _, _, mean, var, training, _, eps = sample.args
    if training or mean is None or var is None:
        return result
    narrow = sample.input.dtype in (torch.float16, torch.bfloat16)
    compute = torch.float32 if narrow else sample.input.dtype
    output, *_ = result
    mean = mean.detach().to(compute, copy=True)
    invstd = torch.reciprocal(torch.sqrt(var.detach().to(compute) + eps))
    return (output, mean, invstd)


# What PyTorch defines for a device other than the CPU where it differs from
# the CPU's result: the oracle (the CPU's result, and stock CPU operators)
# is adjusted to it. OpInfo name -> (sample, CPU result) -> result off the CPU.
OFF_CPU_RESULTS: dict[str, Callable[[Any, Any], Any]] = {
    "native_batch_norm": _batch_norm_statistics_off_the_cpu,
    "_native_batch_norm_legit": _batch_norm_statistics_off_the_cpu,
}

# CPU kernels known to give other bits for the same values from run to run,
# for the samples the predicate picks. LAPACK's gelsy takes a pivot array
# whose nonzero entries fix columns, and PyTorch passes it uninitialised:
# the result depends on what the allocator's reused memory held (shown by
# filling freed blocks first, which the check below cannot always trigger).
CPU_NOT_REPRODUCIBLE: dict[str, Callable[[Any], bool]] = {
    "linalg.lstsq": lambda sample: sample.kwargs.get("driver") == "gelsy",
}

# Shifts (in elements) of the inputs' storages for reruns of the CPU that
# reveal a kernel whose results depend on the alignment of its data: every
# offset within 64 bytes, then coarser ones up to pages. Before each rerun,
# freed blocks of the CPU allocator are filled with other values, which
# reveals a kernel that reads memory it never initialised (LAPACK's gelsy
# through PyTorch's uninitialised pivot array).
ALIGNMENT_SHIFTS = (*range(1, 17), 32, 64, 128, 256, 512, 1024, 2048)
_JUNK_ELEMENTS = (1, 2, 3, 4, 8, 16, 32, 64, 256, 1024)

# OpInfos whose results are uninitialised memory: only the geometry is compared.
UNINITIALIZED_RESULTS = frozenset(
    {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"}
)

_HALF_DTYPES = ("float16", "bfloat16")
_INTEGER_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
# For OpInfos without float32, half and integer dtypes on the CPU: the first of these.
_OTHER_DTYPES = ("complex64", "float64", "bool", "complex128")

RESULT_PREFIX = "@@op_db "
# For the script's own test: "crash:REGEX" and/or "hang:REGEX" (comma
# separated) make a worker abort or stop responding at a matching OpInfo.
SIMULATE_VARIABLE = "TORCH_INFINI_OP_DB_SWEEP_SIMULATE"


# ---------------------------------------------------------------- selection


def select_dtypes(opinfo: Any) -> list[Any]:
    """The dtypes an OpInfo runs in: float32, float16 or bfloat16, one integer dtype.

    Only dtypes the OpInfo supports on the CPU. Half precision alternates
    between float16 and bfloat16 by the OpInfo's name (a stable hash), so
    both are covered; the other one stands in where one is unsupported.
    The integer dtype is the first of int64, int32, int16, int8, uint8. An
    OpInfo with none of these gets its first of complex64, float64, bool,
    complex128, or else any one dtype it supports (none: nothing runs).
    """
    import torch
    from op_coverage import opinfo_id

    cpu = set(opinfo.supported_dtypes("cpu"))
    chosen = []
    if torch.float32 in cpu:
        chosen.append(torch.float32)
    halves = [getattr(torch, name) for name in _HALF_DTYPES]
    if zlib.crc32(opinfo_id(opinfo).encode()) % 2:
        halves.reverse()
    chosen.extend([d for d in halves if d in cpu][:1])
    chosen.extend([d for d in (getattr(torch, n) for n in _INTEGER_DTYPES) if d in cpu][:1])
    if not chosen:
        chosen.extend([d for d in (getattr(torch, n) for n in _OTHER_DTYPES) if d in cpu][:1])
    if not chosen and cpu:
        chosen.append(sorted(cpu, key=str)[0])
    return chosen


def backward_runs(opinfo: Any, dtype: Any) -> bool:
    """Backward runs for float32 where the OpInfo supports autograd in float32."""
    import torch

    return (
        dtype == torch.float32
        and opinfo.supports_autograd
        and torch.float32 in set(opinfo.supported_backward_dtypes("cpu"))
    )


def uninitialized(opinfo: Any) -> bool:
    return opinfo.name in UNINITIALIZED_RESULTS or bool(
        getattr(opinfo, "has_nondeterministic_output", False)
    )


# ---------------------------------------------------------------- records


@dataclass
class Record:
    """The outcome of one sample, forward or backward."""

    opinfo: str
    dtype: str
    sample: int
    phase: str  # "forward" | "backward"
    outcome: str  # "match" | "refused" | "wrong" | "error" (crash, hang: per OpInfo)
    reason: str = ""  # refusal key; for match: "values", "tolerance", "cpu raised", "geometry"
    ran: str = ""  # "native" | "fallback" ("" when infini did not run to the end)
    detail: str = ""
    summary: str = ""


@dataclass
class CaseResult:
    """Every sample of one (OpInfo, dtype)."""

    opinfo: str
    dtype: str
    records: list[Record] = field(default_factory=list)
    samples: int = 0
    note: str = ""  # e.g. the CPU could not generate samples

    def failures(self) -> list[Record]:
        return [r for r in self.records if r.outcome not in ("match", "refused")]


# ---------------------------------------------------------------- moving samples


class _Mover:
    """Copies a sample's values to a device: sizes, strides, offsets and storage sharing kept.

    Tensors sharing a storage share one storage on the target; the same
    tensor object maps to the same copy. A floating-point or complex tensor
    that requires grad becomes a leaf that requires grad.
    """

    def __init__(self, device: Any, shift: int = 0) -> None:
        import torch

        self.device = torch.device(device)
        self.shift = shift  # elements each copied storage starts after (its alignment)
        self.storages: dict[tuple[int, Any], Any] = {}
        self.tensors: dict[int, Any] = {}
        self.leaves: list[Any] = []
        self.retargeted = False  # a tensor or a device argument now names the target device

    def tensor(self, t: Any) -> Any:
        import torch

        known = self.tensors.get(id(t))
        if known is not None:
            return known[1]
        requires_grad = t.requires_grad
        t_plain = t.detach()
        if t_plain.layout != torch.strided:
            moved = t_plain.to(self.device)
        else:
            conj, neg = t_plain.is_conj(), t_plain.is_neg()
            base = t_plain.conj() if conj else t_plain
            base = base._neg_view() if neg else base
            storage = base.untyped_storage()
            key = (storage.data_ptr(), base.dtype) if storage.nbytes() else (id(base), base.dtype)
            flat = self.storages.get(key)
            if flat is None:
                elements = storage.nbytes() // base.element_size()
                cpu_flat = torch.empty(0, dtype=base.dtype).set_(storage, 0, (elements,), (1,))
                flat = torch.empty(elements + self.shift, dtype=base.dtype, device=self.device)
                flat = flat[self.shift :]
                flat.copy_(cpu_flat)
                self.storages[key] = flat
            offset = flat.storage_offset() + base.storage_offset()  # flat starts at `shift`
            moved = flat.as_strided(base.size(), base.stride(), offset)
            moved = moved._neg_view() if neg else moved
            moved = moved.conj() if conj else moved
        if requires_grad and (moved.dtype.is_floating_point or moved.dtype.is_complex):
            moved = moved.detach().requires_grad_(True)
            self.leaves.append(moved)
        self.tensors[id(t)] = (t, moved)  # keep t alive: ids stay unique
        self.retargeted |= moved.device.type != "cpu"
        return moved

    def value(self, value: Any) -> Any:
        """``value`` with its tensors moved and its CPU devices ("cpu", torch.device) retargeted."""
        import torch

        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return tuple(self.value(v) for v in value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, torch.device) or (isinstance(value, str) and value == "cpu"):
            if torch.device(value).type == "cpu":
                self.retargeted |= self.device.type != "cpu"
                return self.device
        return value


# ---------------------------------------------------------------- comparing


_SAME_WIDTH_INT = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _bits(t: Any) -> Any:
    """The stored bit patterns of a CPU tensor (conj/neg resolved; -0.0 is not 0.0)."""
    import torch

    t = t.resolve_conj().resolve_neg()
    if t.dtype.is_complex:
        t = torch.view_as_real(t)
    if t.dtype.is_floating_point:
        t = t.view(getattr(torch, _SAME_WIDTH_INT[t.element_size()]))
    return t


def _first_differences(got: Any, expected: Any, diff: Any) -> str:
    flat = diff.reshape(-1)
    where = flat.nonzero().reshape(-1)[:3].tolist()
    g = got.resolve_conj().resolve_neg().reshape(-1)
    e = expected.resolve_conj().resolve_neg().reshape(-1)
    if got.dtype.is_complex:
        where = [i // 2 for i in where]
    pairs = ", ".join(f"[{i}] {g[i].item()!r} vs cpu {e[i].item()!r}" for i in where)
    return f"{int(flat.sum())} of {flat.numel()} values differ; first: {pairs}"


class Compare:
    """How a result is compared: bit for bit, or within the OpInfo's tolerances."""

    def __init__(
        self,
        bitwise: bool,
        tolerance: dict[str, float] | None = None,
        infini_results: bool | None = True,
    ) -> None:
        self.bitwise = bitwise
        self.tolerance = tolerance or {}
        # True: the oracle's CPU tensors are infini tensors on infini (the
        # sample names infini); False: they stay CPU tensors (it names no
        # device: a factory's default); None: not checked (inputs).
        self.infini_results = infini_results

    def tensors(self, got: Any, expected: Any, geometry_only: bool) -> str | None:
        """None when ``got`` (infini) is ``expected`` (CPU), else what differs."""
        import torch

        if not isinstance(got, torch.Tensor):
            return f"got {type(got).__name__}, expected a tensor"
        if self.infini_results is not None and expected.device.type == "cpu":
            want = "infini" if self.infini_results else "cpu"
            if got.device.type != want:
                return f"result on {got.device}, expected {want}"
        if (got.dtype, tuple(got.shape), got.layout) != (
            expected.dtype,
            tuple(expected.shape),
            expected.layout,
        ):
            return (
                f"{got.dtype} {tuple(got.shape)} {got.layout} vs cpu "
                f"{expected.dtype} {tuple(expected.shape)} {expected.layout}"
            )
        if got.layout == torch.strided and got.numel() > 1:
            strides = [s for s, n in zip(got.stride(), got.shape, strict=True) if n > 1]
            want = [s for s, n in zip(expected.stride(), expected.shape, strict=True) if n > 1]
            if strides != want:
                return f"strides {got.stride()} vs cpu {expected.stride()}"
        if geometry_only:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "ComplexHalf support is experimental"
            got = got.detach().cpu()
        expected = expected.detach()
        if got.layout != torch.strided:
            got, expected = got.to_dense(), expected.to_dense()
        got_bits, want_bits = _bits(got), _bits(expected)
        if torch.equal(got_bits, want_bits):
            return None
        if not self.bitwise:
            try:
                torch.testing.assert_close(
                    got, expected, equal_nan=True, check_stride=False, **self.tolerance
                )
                return None
            except AssertionError as exc:
                return str(exc).split("\n\n")[0].replace("\n", " ")
        return "not bit for bit: " + _first_differences(got, expected, got_bits != want_bits)

    def values(
        self, got: Any, expected: Any, geometry_only: bool = False, path: str = ""
    ) -> str | None:
        import torch

        where = f" at {path}" if path else ""
        if isinstance(expected, torch.Tensor):
            problem = self.tensors(got, expected, geometry_only)
            return f"{problem}{where}" if problem else None
        if isinstance(expected, (tuple, list)):
            if not isinstance(got, (tuple, list)) or len(got) != len(expected):
                return f"got {_describe(got)}, expected {_describe(expected)}{where}"
            for i, (g, e) in enumerate(zip(got, expected, strict=True)):
                problem = self.values(g, e, geometry_only, f"{path}[{i}]")
                if problem:
                    return problem
            return None
        if isinstance(expected, dict):
            if not isinstance(got, dict) or got.keys() != expected.keys():
                return f"got {_describe(got)}, expected {_describe(expected)}{where}"
            for k in expected:
                problem = self.values(got[k], expected[k], geometry_only, f"{path}[{k!r}]")
                if problem:
                    return problem
            return None
        if isinstance(got, torch.Tensor):
            return f"got a tensor, expected {_describe(expected)}{where}"
        if geometry_only and isinstance(expected, (float, complex)):
            return None if type(got) is type(expected) else f"got {got!r}, cpu {expected!r}"
        if _same_scalar(got, expected):
            return None
        return f"got {got!r}, cpu {expected!r}{where}"


def _same_scalar(got: Any, expected: Any) -> bool:
    if isinstance(expected, float) and isinstance(got, float):
        return struct.pack("<d", got) == struct.pack("<d", expected) or (
            math.isnan(got) and math.isnan(expected)
        )
    if isinstance(expected, complex) and isinstance(got, complex):
        return _same_scalar(got.real, expected.real) and _same_scalar(got.imag, expected.imag)
    if type(got) is not type(expected):
        return False
    try:
        return bool(got == expected)
    except Exception:
        return repr(got) == repr(expected)


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__


# Where an InfiniOps kernel ran: at least these (rtol, atol), as in
# test_op_conformance.py. float16/bfloat16 kernels may round intermediate
# results where the CPU computes in float; NVIDIA and MetaX run float32
# GEMMs as TF32 (README; the provider says where:
# torch_infini._operators.gemm_reduced_precision).
_REDUCED_PRECISION_TOLERANCE = {"float16": (2e-3, 1e-3), "bfloat16": (1.6e-2, 1e-2)}
_TF32_TOLERANCE = (1e-2, 1e-2)


def _tolerance(opinfo: Any, dtype: Any, served: set[str]) -> dict[str, float]:
    """assert_close tolerances where a kernel-provider operator in ``served`` ran.

    The OpInfo's toleranceOverride or precisionOverride for ``dtype`` (the
    largest), else
    torch.testing's defaults; widened as ``_REDUCED_PRECISION_TOLERANCE``
    and ``_TF32_TOLERANCE`` say.
    """
    import torch
    import torch_infini
    from op_coverage import dtype_name

    atol = rtol = 0.0
    for info in getattr(opinfo, "decorators", ()) or ():
        for decorator in getattr(info, "decorators", (info,)):
            overrides = getattr(decorator, "d", None)
            if isinstance(overrides, dict) and dtype in overrides:
                tol = overrides[dtype]
                if isinstance(tol, (int, float)):  # precisionOverride: an atol
                    atol = max(atol, float(tol))
                else:  # toleranceOverride: tol(atol, rtol)
                    atol, rtol = max(atol, tol.atol), max(rtol, tol.rtol)
    floor = _REDUCED_PRECISION_TOLERANCE.get(dtype_name(dtype))
    matmul = {n for n, (_, family) in _kernel_operators().items() if family == "matmul"}
    tf32 = torch_infini._operators.gemm_reduced_precision(torch.float32) is not None
    if dtype == torch.float32 and tf32 and served & matmul:
        floor = _TF32_TOLERANCE
    if floor is not None:
        rtol, atol = max(rtol, floor[0]), max(atol, floor[1])
    return {"atol": atol, "rtol": rtol} if atol or rtol else {}


# ---------------------------------------------------------------- running


def refusal_reason(exc: BaseException) -> str | None:
    """The documented refusal an exception is, or None."""
    if not isinstance(exc, NotImplementedError):
        return None
    message = str(exc)
    for key, _, pattern in REFUSALS:
        if re.search(pattern, message):
            return key
    return None


def _message(exc: BaseException) -> str:
    text = str(exc).strip().split("\n")[0]
    return f"{type(exc).__name__}: {text[:400]}"


def _foreign_launches() -> int:
    """Kernel launches whose arithmetic is not the CPU's own (InfiniOps), so far.

    Counted in the native library, so kernels reached inside a composite
    operator (logsumexp's subtraction) count too, which the recording
    dispatch mode cannot see.
    """
    import torch_infini

    return int(torch_infini._C._non_cpu_kernel_launches())


def _fallback_calls() -> int:
    import torch_infini

    return sum(s.calls for s in torch_infini.cpu_fallback.stats().values())


def _leaves(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)


class _Run:
    """One run of a sample on one device: the result or the exception, and what ran."""

    def __init__(self) -> None:
        self.result: Any = None
        self.args: Any = None
        self.error: BaseException | None = None
        self.drew_random = False
        self.fell_back = False
        self.foreign = False  # a kernel whose arithmetic is not the CPU's ran
        self.native_kernels: set[str] = set()
        self.leaves: list[Any] = []
        self.retargeted = False


@cache
def _kernel_operators() -> dict[str, tuple[frozenset[Any], str]]:
    """Operators a kernel provider (InfiniOps) serves: the dtypes it declares, the family."""
    import torch_infini

    return {
        info.name: (frozenset(info.dtypes), info.family)
        for info in torch_infini.operators()
        if info.kernel is not None
    }


@contextmanager
def _native_kernels() -> Iterator[set[str]]:
    """Collects the kernel-provider operators reached with infini tensors of a declared dtype."""
    import torch
    from op_coverage import DispatchRecorder, overload_name

    served: set[str] = set()
    kernels = _kernel_operators()

    class Recorder(DispatchRecorder):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            name = overload_name(func)
            if name in kernels:
                leaves = torch.utils._pytree.tree_leaves((args, kwargs or {}))
                dtypes = {
                    t.dtype
                    for t in leaves
                    if isinstance(t, torch.Tensor) and t.device.type == "infini"
                }
                if dtypes and dtypes <= kernels[name][0]:
                    served.add(name)
            return func(*args, **(kwargs or {}))

    with Recorder():
        yield served


def _forward(opinfo: Any, sample: Any, device: str, record_native: bool, shift: int = 0) -> _Run:
    import torch

    run = _Run()
    mover = _Mover(device, shift)
    if opinfo.name in CPU_ARGUMENTS:
        args = (mover.value(sample.input), *_Mover("cpu").value(sample.args))
    else:
        args = mover.value((sample.input, *sample.args))
    kwargs = mover.value(dict(sample.kwargs))
    run.leaves = mover.leaves
    run.retargeted = mover.retargeted
    run.args = (args, kwargs)
    on_cpu = device == "cpu"
    calls = 0 if on_cpu else _fallback_calls()
    launches = 0 if on_cpu else _foreign_launches()
    if on_cpu:
        # Random numbers drawn by the oracle show as a change of the generator's state.
        state = torch.get_rng_state()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if on_cpu and seeds_random(opinfo):
                with _RandomDraws() as draws:
                    run.result = opinfo.op(*args, **kwargs)
                run.drew_random = draws.drew
            elif record_native:
                with _native_kernels() as served:
                    run.result = opinfo.op(*args, **kwargs)
                run.native_kernels = served
            else:
                run.result = opinfo.op(*args, **kwargs)
    except Exception as exc:
        run.error = exc
    if on_cpu:
        run.drew_random |= not torch.equal(state, torch.get_rng_state())
        torch.set_rng_state(state)
    else:
        run.fell_back = _fallback_calls() > calls
        run.foreign = _foreign_launches() > launches
    return run


def seeds_random(opinfo: Any) -> bool:
    """The OpInfo's function seeds the generator (op_db's ``wrapper_set_seed``) for each call.

    Such a function also restores the generator's state when it returns, so
    its draws are seen one operator at a time (``_RandomDraws``).
    """
    fn = opinfo.op
    names: set[str] = set()
    while fn is not None:
        code_ = getattr(fn, "__code__", None)
        if code_ is not None:
            names |= set(code_.co_names)
        names.add(getattr(fn, "__name__", ""))
        fn = getattr(fn, "func", None)  # functools.partial
    return "wrapper_set_seed" in names


def _random_draws_mode() -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class RandomDraws(TorchDispatchMode):
        """Whether an operator drew from the CPU generator (its state changed across the call)."""

        drew = False

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if torch.Tag.nondeterministic_seeded not in func.tags:
                return func(*args, **(kwargs or {}))
            before = torch.get_rng_state()
            result = func(*args, **(kwargs or {}))
            self.drew |= not torch.equal(before, torch.get_rng_state())
            return result

    return RandomDraws


def _RandomDraws() -> Any:  # noqa: N802  (a class, built on first use)
    return _random_draws_mode()()


def _grad_outputs(outputs: Sequence[Any], seed: int) -> list[Any]:
    """Fixed output gradients, drawn from a seeded CPU generator."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in outputs]


def _differentiable_outputs(run: _Run, sample: Any) -> list[Any]:
    result = sample.output_process_fn_grad(run.result)
    return [t for t in _leaves(result) if t.requires_grad]


def _backward(run: _Run, sample: Any, grads: list[Any], device: str, record_native: bool) -> _Run:
    """The gradients of every input leaf that requires grad, for the given output gradients."""
    import torch

    back = _Run()
    calls = 0 if device == "cpu" else _fallback_calls()
    launches = 0 if device == "cpu" else _foreign_launches()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outputs = _differentiable_outputs(run, sample)
            grads = [g.to(device) for g in grads]
            if record_native:
                with _native_kernels() as served:
                    back.result = torch.autograd.grad(outputs, run.leaves, grads, allow_unused=True)
                back.native_kernels = served
            else:
                back.result = torch.autograd.grad(outputs, run.leaves, grads, allow_unused=True)
    except Exception as exc:
        back.error = exc
    if device != "cpu":
        back.fell_back = _fallback_calls() > calls
        back.foreign = _foreign_launches() > launches
    return back


def _classify(
    cpu: _Run,
    infini: _Run,
    compare: Compare,
    geometry_only: bool,
    *,
    compare_args: bool,
) -> tuple[str, str, str]:
    """(outcome, reason, detail) of one sample: CPU oracle against infini."""
    if cpu.error is not None:
        if infini.error is None:
            return (
                "error",
                "",
                f"infini returned a result where the CPU raised {_message(cpu.error)}",
            )
        if type(infini.error) is type(cpu.error):
            return "match", "cpu raised", _message(cpu.error)
        refusal = refusal_reason(infini.error)
        if refusal:
            return "refused", refusal, _message(infini.error)
        return (
            "error",
            "",
            f"the CPU raised {_message(cpu.error)}; infini raised {_message(infini.error)}",
        )
    if infini.error is not None:
        refusal = refusal_reason(infini.error)
        if refusal:
            return "refused", refusal, _message(infini.error)
        return "error", "", _message(infini.error)
    problem = compare.values(infini.result, cpu.result, geometry_only)
    if problem is None and compare_args:
        # Inputs written by the call (in-place operators) must be written alike.
        # (An input stays where the sample put it: no device check.)
        inputs = Compare(compare.bitwise, compare.tolerance, infini_results=None)
        problem = inputs.values(
            list(_leaves(infini.args)), list(_leaves(cpu.args)), geometry_only, "input"
        )
    if problem is not None:
        return "wrong", "", problem
    reason = "geometry" if geometry_only else ("values" if compare.bitwise else "tolerance")
    return "match", reason, ""


def _reclassify(
    opinfo: Any,
    sample: Any,
    dtype: Any,
    cpu: _Run,
    infini: _Run,
    outcome: str,
    reason: str,
    detail: str,
    *,
    backward: bool,
) -> tuple[str, str, str]:
    """A sample that is not bit for bit, compared with tolerances where bits cannot agree.

    Bits cannot agree where PyTorch defines the function by device type
    (``DEVICE_DEPENDENT``) or where the CPU kernel itself gives other bits
    for the same values on another run (forward only: the CPU runs again on
    copies of the inputs shifted by ``ALIGNMENT_SHIFTS``, after freed memory
    was filled with other values).
    Otherwise the outcome stays what it was.
    """
    from op_coverage import opinfo_id

    if opinfo.name in DEVICE_DEPENDENT or opinfo_id(opinfo) in DEVICE_DEPENDENT:
        why = "device-dependent definition"
    elif not backward and (
        CPU_NOT_REPRODUCIBLE.get(opinfo.name, lambda _: False)(sample)
        or _cpu_not_reproducible(opinfo, sample, cpu)
    ):
        why = "cpu not reproducible"
    else:
        return outcome, reason, detail
    loose = Compare(False, _tolerance(opinfo, dtype, set()), infini.retargeted)
    loose_outcome, _, loose_detail = _classify(cpu, infini, loose, False, compare_args=not backward)
    if loose_outcome == "match":
        return "match", why, ""
    return loose_outcome, "", f"{loose_detail} ({why}: compared with tolerances)"


def _cpu_not_reproducible(opinfo: Any, sample: Any, cpu: _Run) -> bool:
    """The CPU's own results differ, bit for bit, when it runs again: its inputs at
    other alignments, its allocator's freed blocks holding other values."""
    import torch

    same = Compare(True, None, None)
    for shift in ALIGNMENT_SHIFTS:
        fill = shift % 3  # zeros, ones, twos: pivots, flags and counts read as garbage
        junk = [torch.full((n,), fill, dtype=torch.int64) for n in _JUNK_ELEMENTS for _ in range(4)]
        del junk  # freed: the next allocations of these sizes see these values
        again = _forward(opinfo, sample, "cpu", False, shift)
        if again.error is None and same.values(again.result, cpu.result) is not None:
            return True
    return False


def _summary(sample: Any) -> str:
    try:
        text = sample.summary()
    except Exception:
        text = repr(sample)
    text = " ".join(str(text).split())
    return text if len(text) <= 600 else text[:597] + "..."


def run_case(
    opinfo: Any,
    dtype: Any,
    max_samples: int | None,
    progress: Callable[[int, Any], None] | None = None,
) -> CaseResult:
    """Runs the OpInfo's first ``max_samples`` CPU samples in ``dtype``, forward and backward.

    ``progress(index, sample)`` is called before each sample runs.
    """
    import torch
    import torch_infini
    from op_coverage import dtype_name, opinfo_id, sample_inputs

    case = CaseResult(opinfo_id(opinfo), dtype_name(dtype))
    host = torch_infini.backend() == "host"
    with_backward = backward_runs(opinfo, dtype)
    geometry = uninitialized(opinfo)
    try:
        samples = sample_inputs(opinfo, "cpu", dtype, requires_grad=with_backward)
        index = 0
        while max_samples is None or index < max_samples:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sample = next(samples, None)
            if sample is None:
                break
            if progress is not None:
                progress(index, sample)
            case.records.extend(
                _run_sample(opinfo, case, index, sample, host, with_backward, geometry)
            )
            index += 1
            case.samples = index
    except Exception as exc:
        # The CPU cannot generate (more) samples: nothing to compare with.
        case.note = f"sample generation failed: {_message(exc)}"
    torch.infini.synchronize()
    return case


def _run_sample(
    opinfo: Any,
    case: CaseResult,
    index: int,
    sample: Any,
    host: bool,
    with_backward: bool,
    geometry: bool,
) -> list[Record]:
    import torch

    opinfo_name, dtype = case.opinfo, case.dtype
    torch_dtype = getattr(torch, dtype)
    summary = _summary(sample)
    # Off host, infini runs under a dispatch mode that records which kernel
    # -provider operators served it; a Python mode can change how autograd
    # lays out a gradient (ormqr's), so the oracle runs under the same mode.
    record = not host
    cpu = _forward(opinfo, sample, "cpu", record)
    if cpu.error is None and opinfo.name in OFF_CPU_RESULTS:
        cpu.result = OFF_CPU_RESULTS[opinfo.name](sample, cpu.result)
    infini = _forward(opinfo, sample, "infini", record)
    # Bit for bit where the CPU's own kernel ran: always on host, elsewhere
    # unless a kernel-provider (InfiniOps) operator served part of the call.
    tolerance = {} if host else _tolerance(opinfo, torch_dtype, infini.native_kernels)
    compare = Compare(
        host or not (infini.native_kernels or infini.foreign), tolerance, infini.retargeted
    )
    only_geometry = geometry or cpu.drew_random
    outcome, reason, detail = _classify(cpu, infini, compare, only_geometry, compare_args=True)
    if outcome == "wrong" and compare.bitwise:
        outcome, reason, detail = _reclassify(
            opinfo, sample, torch_dtype, cpu, infini, outcome, reason, detail, backward=False
        )
    ran = "" if infini.error is not None else ("fallback" if infini.fell_back else "native")
    records = [Record(opinfo_name, dtype, index, "forward", outcome, reason, ran, detail, summary)]
    if not with_backward or cpu.error is not None or infini.error is not None:
        return records
    try:
        cpu_outputs = _differentiable_outputs(cpu, sample)
    except Exception:
        return records
    if not cpu_outputs or not cpu.leaves:
        return records  # nothing to differentiate in this sample
    grads = _grad_outputs(cpu_outputs, seed=index)
    cpu_back = _backward(cpu, sample, grads, "cpu", record)
    infini_back = _backward(infini, sample, grads, "infini", record)
    native = infini.native_kernels | infini_back.native_kernels
    tolerance = {} if host else _tolerance(opinfo, torch_dtype, native)
    foreign = infini.foreign or infini_back.foreign
    compare_back = Compare(host or not (native or foreign), tolerance, infini.retargeted)
    outcome, reason, detail = _classify(
        cpu_back, infini_back, compare_back, only_geometry, compare_args=False
    )
    if outcome == "wrong" and compare_back.bitwise:
        outcome, reason, detail = _reclassify(
            opinfo, sample, torch_dtype, cpu_back, infini_back, outcome, reason, detail,
            backward=True,
        )  # fmt: skip
    ran = (
        "" if infini_back.error is not None else ("fallback" if infini_back.fell_back else "native")
    )
    records.append(
        Record(opinfo_name, dtype, index, "backward", outcome, reason, ran, detail, summary)
    )
    return records


def all_opinfos() -> list[Any]:
    """op_db's OpInfos, in op_db's order."""
    from op_coverage import load_op_db

    return list(load_op_db())


# ---------------------------------------------------------------- worker processes


def _worker(max_samples: int | None, staged: bool) -> int:
    """Reads OpInfo indices from stdin, runs every dtype of each, writes one result line each."""
    import faulthandler
    import json

    import torch_infini
    from op_coverage import dtype_name, opinfo_id

    torch_infini._C._set_fallback_staging_forced(staged)
    faulthandler.enable()  # a crash names the Python frame on stderr
    opinfos = all_opinfos()
    simulate = [rule.split(":", 1) for rule in os.environ.get(SIMULATE_VARIABLE, "").split(",")]
    print(RESULT_PREFIX + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        index = int(line)
        opinfo = opinfos[index]
        for outcome, pattern in (rule for rule in simulate if len(rule) == 2):
            if re.search(pattern, opinfo_id(opinfo)):
                if outcome == "crash":
                    os.abort()
                time.sleep(3600)  # "hang"
        for dtype in select_dtypes(opinfo):

            def progress(sample_index: int, sample: Any, dtype: Any = dtype) -> None:
                at = {"dtype": dtype_name(dtype), "sample": sample_index}
                at["summary"] = _summary(sample)
                print(RESULT_PREFIX + json.dumps({"at": at}), flush=True)

            case = run_case(opinfo, dtype, max_samples, progress)
            print(RESULT_PREFIX + json.dumps({"case": asdict(case)}), flush=True)
        print(RESULT_PREFIX + json.dumps({"done": index}), flush=True)
    return 0


class _WorkerProcess:
    def __init__(self, max_samples: int | None, env: dict[str, str], staged: bool) -> None:
        self.log = tempfile.TemporaryFile()
        command = [sys.executable, str(Path(__file__).resolve()), "--worker"]
        if staged:
            command.append("--staged")
        if max_samples is not None:
            command += ["--max-samples", str(max_samples)]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            cwd=REPO_ROOT,
            text=True,
            bufsize=1,
        )
        self.buffer = ""
        self.index: int | None = None
        self.at: dict[str, Any] = {}  # the sample running now
        self.started = 0.0
        self.ready = False

    def send(self, index: int) -> None:
        assert self.process.stdin is not None
        self.index, self.started, self.at = index, time.monotonic(), {}
        self.process.stdin.write(f"{index}\n")
        self.process.stdin.flush()

    def stderr_tail(self) -> str:
        self.log.seek(0)
        lines = self.log.read().decode(errors="replace").strip().splitlines()
        fatal = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
        if fatal:  # faulthandler: the error and the innermost Python frame
            tail = [line.strip() for line in lines[fatal[-1] :]]
            frames = [line for line in tail if line.startswith("File")]
            return " | ".join([tail[0], *frames[:1]])[-600:]
        lines = [line for line in lines if "ran on the CPU" not in line]  # fallback warnings
        return " | ".join(lines[-4:])[-600:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.log.close()


def sweep(
    max_samples: int | None, jobs: int, timeout: float, only: str | None, staged: bool = False
) -> tuple[list[CaseResult], list[dict[str, Any]]]:
    """Runs every OpInfo in worker processes; returns the cases and the crashed/hung OpInfos."""
    import json

    from op_coverage import dtype_name, opinfo_id

    opinfos = all_opinfos()
    pending = [i for i, op in enumerate(opinfos) if not only or re.search(only, opinfo_id(op))]
    total = len(pending)
    pending.reverse()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parent), env.get("PYTHONPATH", "")) if p
    )
    cases: list[CaseResult] = []
    failed: list[dict[str, Any]] = []
    selector = selectors.DefaultSelector()
    workers: list[_WorkerProcess] = []
    done = 0

    def start() -> None:
        worker = _WorkerProcess(max_samples, env, staged)
        assert worker.process.stdout is not None
        os.set_blocking(worker.process.stdout.fileno(), False)
        selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
        worker.started = time.monotonic()
        workers.append(worker)

    def retire(worker: _WorkerProcess, outcome: str, detail: str) -> None:
        nonlocal done
        selector.unregister(worker.process.stdout)
        if worker.index is not None:
            opinfo = opinfos[worker.index]
            failed.append(
                {
                    "opinfo": opinfo_id(opinfo),
                    "outcome": outcome,
                    "dtypes": [dtype_name(d) for d in select_dtypes(opinfo)],
                    "dtype": worker.at.get("dtype", ""),
                    "sample": worker.at.get("sample", -1),
                    "summary": worker.at.get("summary", ""),
                    "detail": detail,
                }
            )
            done += 1
        worker.stop()
        workers.remove(worker)
        if pending:
            start()

    for _ in range(min(jobs, len(pending))):
        start()
    while workers:
        now = time.monotonic()
        for worker in list(workers):
            limit = timeout if worker.ready else max(timeout, 120.0)
            if now - worker.started > limit:
                retire(worker, "hang", f"no result after {limit:.0f} s")
        for key, _ in selector.select(timeout=1.0):
            worker = key.data
            chunk = worker.process.stdout.read()
            if not chunk:
                code_ = worker.process.wait()
                retire(worker, "crash", f"worker exited with {code_}: {worker.stderr_tail()}")
                continue
            worker.buffer += chunk
            *lines, worker.buffer = worker.buffer.split("\n")
            for line in lines:
                if not line.startswith(RESULT_PREFIX):
                    continue
                payload = json.loads(line[len(RESULT_PREFIX) :])
                if "at" in payload:
                    worker.at = payload["at"]
                    continue
                if "case" in payload:
                    cases.append(_case_from_json(payload["case"]))
                    continue
                if "done" in payload:
                    done += 1
                    print(f"[{done}/{total}] {opinfo_id(opinfos[payload['done']])}", flush=True)
                worker.ready = True
                worker.index = None
                if pending:
                    worker.send(pending.pop())
                else:
                    selector.unregister(worker.process.stdout)
                    worker.stop()
                    workers.remove(worker)
                    break
    return cases, failed


def _case_from_json(data: dict[str, Any]) -> CaseResult:
    records = [Record(**r) for r in data.pop("records")]
    return CaseResult(records=records, **data)


# ---------------------------------------------------------------- report


COUNT_MEANINGS = {
    "opinfos": "OpInfos in op_db",
    "opinfos_without_cpu_dtype": "OpInfos supporting no dtype on the CPU (nothing to run)",
    "cases": "(OpInfo, dtype) pairs run",
    "samples": "samples run (forward)",
    "forward_match": "forward samples with the CPU's result (or the CPU's exception type)",
    "forward_refused": "forward samples refused with a documented NotImplementedError",
    "forward_wrong": "forward samples whose result differs from the CPU's",
    "forward_error": (
        "forward samples raising where the CPU did not (not a documented refusal), "
        "or not raising / raising another type where the CPU raised"
    ),
    "backward_match": "backward samples with the CPU's gradients (or exception type)",
    "backward_refused": "backward samples refused with a documented NotImplementedError",
    "backward_wrong": "backward samples whose gradients differ from the CPU's",
    "backward_error": "backward samples raising where the CPU did not (or as forward_error)",
    "forward_native": "forward samples infini ran without the CPU fallback",
    "forward_fallback": "forward samples where at least one operator ran in the CPU fallback",
    "backward_native": "backward samples infini ran without the CPU fallback",
    "backward_fallback": "backward samples where at least one operator ran in the CPU fallback",
    "crashed_opinfos": "OpInfos whose worker process died",
    "hung_opinfos": "OpInfos whose worker gave no result within the timeout",
    "sample_generation_failures": "cases whose samples the CPU could not generate",
}


def build_report(
    cases: list[CaseResult],
    failed: list[dict[str, Any]],
    *,
    max_samples: int | None,
    seconds: float,
) -> dict[str, Any]:
    import torch
    import torch_infini

    opinfos = all_opinfos()
    records = [r for c in cases for r in c.records]
    by = Counter((r.phase, r.outcome) for r in records)
    ran = Counter((r.phase, r.ran) for r in records if r.ran)
    refusals = Counter((r.phase, r.reason) for r in records if r.outcome == "refused")
    counts = {
        "opinfos": len(opinfos),
        "opinfos_without_cpu_dtype": sum(not select_dtypes(op) for op in opinfos),
        "cases": len(cases),
        "samples": sum(c.samples for c in cases),
    }
    for phase in ("forward", "backward"):
        for outcome in ("match", "refused", "wrong", "error"):
            counts[f"{phase}_{outcome}"] = by[(phase, outcome)]
    for phase in ("forward", "backward"):
        for where in ("native", "fallback"):
            counts[f"{phase}_{where}"] = ran[(phase, where)]
    counts["crashed_opinfos"] = sum(f["outcome"] == "crash" for f in failed)
    counts["hung_opinfos"] = sum(f["outcome"] == "hang" for f in failed)
    counts["sample_generation_failures"] = sum(bool(c.note) for c in cases)
    failures = [asdict(r) for r in records if r.outcome in ("wrong", "error")]
    return {
        "schema": SCHEMA,
        "generator": "tools/op_db_sweep.py",
        "backend": torch_infini.backend(),
        "fallback_mode": torch_infini.cpu_fallback.mode(),
        "environment": {
            k: os.environ[k]
            for k in ("TORCH_INFINI_HOST_ASYNC", "TORCH_INFINI_HOST_DEVICES")
            if k in os.environ
        },
        "versions": {"torch": torch.__version__, "torch_infini": torch_infini.__version__},
        "max_samples": max_samples,
        "seconds": round(seconds, 1),
        "counts": counts,
        "refusals": {
            key: {
                "meaning": meaning,
                "forward": refusals[("forward", key)],
                "backward": refusals[("backward", key)],
            }
            for key, meaning, _ in REFUSALS
        },
        "match_reasons": {
            f"{phase}:{reason}": n
            for (phase, reason), n in sorted(
                Counter((r.phase, r.reason) for r in records if r.outcome == "match").items()
            )
        },
        "crashed_or_hung": failed,
        "sample_generation_failures": [
            {"opinfo": c.opinfo, "dtype": c.dtype, "note": c.note} for c in cases if c.note
        ],
        "failures": failures,
        "cases": [
            {
                "opinfo": c.opinfo,
                "dtype": c.dtype,
                "samples": c.samples,
                **{
                    o: sum(r.outcome == o for r in c.records)
                    for o in ("match", "refused", "wrong", "error")
                },
            }
            for c in cases
        ],
    }


def render_markdown(data: dict[str, Any]) -> str:
    versions = data["versions"]
    bound = data["max_samples"] if data["max_samples"] is not None else "all"
    lines = [
        "# op_db conformance sweep",
        "",
        f"Generated by `python tools/op_db_sweep.py` on backend `{data['backend']}` "
        f"(fallback mode `{data['fallback_mode']}`, torch {versions['torch']}, "
        f"torch-infini {versions['torch_infini']}; samples per (OpInfo, dtype): {bound}; "
        f"{data['seconds']} s). Every sample of every OpInfo in PyTorch's op_db runs on infini "
        "and on the CPU; results must match (bit for bit where the CPU kernel ran) or raise "
        "a documented refusal.",
        "",
        "## Counts",
        "",
        *counts_table(data["counts"], COUNT_MEANINGS),
        "",
        "## Refusals",
        "",
        *table(
            ["reason", "forward", "backward", "meaning"],
            [
                [code(k), v["forward"], v["backward"], v["meaning"]]
                for k, v in data["refusals"].items()
            ],
        ),
        "",
        "## Matches by kind",
        "",
        *table(["phase:kind", "samples"], [[code(k), v] for k, v in data["match_reasons"].items()]),
        "",
        f"## Crashed or hung OpInfos ({len(data['crashed_or_hung'])})",
        "",
        *table(
            ["OpInfo", "outcome", "dtype", "sample", "detail"],
            [
                [
                    code(f["opinfo"]),
                    f["outcome"],
                    f["dtype"],
                    f"{f['sample']}: {f['summary']}",
                    f["detail"],
                ]
                for f in data["crashed_or_hung"]
            ],
        ),
        "",
        f"## Wrong and error samples ({len(data['failures'])})",
        "",
        *table(
            ["OpInfo", "dtype", "sample", "phase", "outcome", "detail"],
            [
                [code(f["opinfo"]), f["dtype"], f["sample"], f["phase"], f["outcome"], f["detail"]]
                for f in data["failures"]
            ],
        ),
        "",
        f"## Sample generation failures ({len(data['sample_generation_failures'])})",
        "",
        *table(
            ["OpInfo", "dtype", "note"],
            [
                [code(f["opinfo"]), f["dtype"], f["note"]]
                for f in data["sample_generation_failures"]
            ],
        ),
        "",
    ]
    return "\n".join(lines)


def summary_line(data: dict[str, Any]) -> str:
    c = data["counts"]
    return (
        f"backend {data['backend']}: {c['cases']} cases, {c['samples']} samples; forward "
        f"{c['forward_match']} match, {c['forward_refused']} refused, {c['forward_wrong']} wrong, "
        f"{c['forward_error']} error; backward {c['backward_match']} match, "
        f"{c['backward_refused']} refused, {c['backward_wrong']} wrong, "
        f"{c['backward_error']} error; {c['crashed_opinfos']} crashed, "
        f"{c['hung_opinfos']} hung OpInfos"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_output_arguments(parser)
    parser.add_argument(
        "--max-samples",
        type=int,
        default=None,
        metavar="N",
        help="samples per (OpInfo, dtype) (default: all)",
    )
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: CPUs)"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per OpInfo before it counts as hung"
    )
    parser.add_argument("--only", metavar="REGEX", help="only OpInfos whose id matches")
    parser.add_argument(
        "--staged",
        action="store_true",
        help="stage every fallback call through pinned memory, as on devices whose memory "
        "the CPU cannot address, even where it can",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args.max_samples, args.staged)
    require_output(parser, args)

    def generate() -> int:
        start = time.monotonic()
        cases, failed = sweep(
            args.max_samples, max(1, args.jobs), args.timeout, args.only, args.staged
        )
        if not cases and not failed:
            raise ReportError("no OpInfo ran")
        data = build_report(
            cases, failed, max_samples=args.max_samples, seconds=time.monotonic() - start
        )
        data["fallback_staged"] = args.staged
        for path in write_outputs(args, render_markdown(data), data):
            print(f"wrote {path}")
        print(summary_line(data))
        return 0

    return run(generate)


if __name__ == "__main__":
    sys.exit(main())
