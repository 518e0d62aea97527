"""The op_db comparison engine: PyTorch's op_db run on infini, compared with the CPU.

A test library (tests/conformance/test_op_db.py, test_output_strides.py and
the fallback's tests use it); ``tools/op_db_sweep.py`` is its command line,
which writes the report. What it checks:
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
tests/conformance/test_op_db.py runs the same checks, bounded, under pytest;
``tools/op_db_sweep.py`` runs them all and writes the report.
"""

from __future__ import annotations

import math
import re
import struct
import sys
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
# tools/op_coverage.py names OpInfos and dtypes as the reports do.
TOOLS_DIR = REPO_ROOT / "tools"
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

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


class Mover:
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
    mover = Mover(device, shift)
    if opinfo.name in CPU_ARGUMENTS:
        args = (mover.value(sample.input), *Mover("cpu").value(sample.args))
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
