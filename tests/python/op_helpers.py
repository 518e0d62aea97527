"""Helpers for the operator tests (test_ops_*.py, test_modules.py, test_fallback_errors.py).

CPU results are the oracle: every test builds its inputs on the CPU, repeats
the same view operations on an ``infini`` copy of the same memory layout, and
compares results (values, and where PyTorch defines it, output strides).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
import torch_infini
from infini_testing import (  # noqa: F401  (re-exported for the op tests)
    assert_bitwise_equal,
    raises_exactly,
    requires_two_devices,
)
from torch_infini import _operators
from torch_infini._operators import c10_name

DEVICE = "infini"

ViewFn = Callable[[torch.Tensor], torch.Tensor]


def identity(t: torch.Tensor) -> torch.Tensor:
    return t


def make_cpu(shape: Sequence[int], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random CPU data in a range where add/mul/gemm of every dtype stay exact-ish.

    Integers are small (no overflow in a product or a sum with alpha <= 3),
    floats are standard normal times 4 (well inside float16's range).
    """
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=gen)
    if dtype.is_floating_point:
        return (torch.randn(shape, dtype=torch.float64, generator=gen) * 4).to(dtype)
    low = 0 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else -8
    return torch.randint(low, 9, shape, dtype=dtype, generator=gen)


def pair(
    shape: Sequence[int],
    dtype: torch.dtype,
    seed: int = 0,
    view: ViewFn = identity,
    device: str = DEVICE,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A CPU tensor and its infini twin: same values, same sizes and strides.

    ``view`` is applied to a contiguous base of ``shape`` on both sides, so
    slices, transposes and permutations give identical layouts.
    """
    base = make_cpu(shape, dtype, seed)
    cpu = view(base)
    dev = view(base.to(device))
    assert dev.shape == cpu.shape and dev.stride() == cpu.stride()
    return cpu, dev


def runs_cpu_kernels() -> bool:
    """Whether infini runs the very same ATen CPU kernels as the oracle.

    True on the ``host`` backend: its provider calls the CPU's own kernels on
    aliases of device memory, so a correct result is the CPU's, bit for bit.
    Elsewhere (InfiniOps) a different kernel runs.
    """
    return torch_infini.backend() == "host"


def assert_matches(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    device: str | torch.device | None = DEVICE,
    exact: bool = False,
    same_kernel: bool = True,
    check_stride: bool = False,
    **tols: float,
) -> None:
    """``actual`` (on ``device``) equals the CPU oracle ``expected``.

    Shapes and dtypes must match. Values:

    * ``exact``: bit for bit on every backend (copies, fills, relu, inputs
      that must be untouched);
    * otherwise, where infini runs the CPU's own kernel (``runs_cpu_kernels``),
      bit for bit too: -0.0 is not +0.0, 0.10000000149 is not 0.1;
    * otherwise ``torch.testing.assert_close`` with PyTorch's defaults for the
      dtype, or ``tols`` (rtol/atol) where the caller says why.

    ``same_kernel=False`` opts an operator out of the bitwise comparison on
    ``host`` when its host implementation is known not to be the oracle's CPU
    kernel; the caller says which and why. With ``check_stride`` also the
    strides must match.
    """
    assert expected.device.type == "cpu"
    if device is not None:
        want = torch.device(device)
        assert actual.device.type == want.type, f"result on {actual.device}, expected {want}"
        if want.index is not None:
            assert actual.device == want, f"result on {actual.device}, expected {want}"
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    if check_stride:
        assert actual.stride() == expected.stride(), (
            f"strides {actual.stride()} != CPU strides {expected.stride()} "
            f"for shape {tuple(expected.shape)}"
        )
    if exact or (same_kernel and runs_cpu_kernels()):
        assert_bitwise_equal(actual, expected)
        return
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **tols)


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
REDUCED_DTYPES = (torch.float16, torch.bfloat16)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
UNSIGNED_DTYPES = (torch.uint16, torch.uint32, torch.uint64)

# The declarations of the kernel seam (seam_operators.h's rows, as the
# library was built with them): (operator, InfiniOps class, device type,
# dtype, refused on that InfiniRT device type because, refused on host because).
_DECLARATIONS = torch_infini._C._declarations()
_DTYPE_ORDER = FLOAT_DTYPES + INT_DTYPES + UNSIGNED_DTYPES + (torch.bool,)


def _seam_operator(op: str) -> str:
    """The kernel seam's operator that serves ``op`` (a KERNEL_DTYPES key),
    as the operator table names it."""
    name = op if op.startswith("infini::") else f"aten::{op}"
    kernels = {info.kernel for info in torch_infini.operators() if info.name.split(".")[0] == name}
    assert len(kernels) == 1, f"{op}: served by {sorted(kernels)} in the operator table"
    return kernels.pop()


def _host_dtypes(op: str) -> tuple[torch.dtype, ...]:
    """The dtypes ``host`` has an ``op`` kernel for, from its seam
    operator's row: InfiniOps' ``cpu`` column (or, for an operator InfiniOps
    implements on accelerators only, every column), less what host refuses
    (float64 where InfiniOps computes in float, unsigned arithmetic the CPU
    has no kernel for: ``seam/declared_support.cpp``)."""
    seam = _seam_operator(op)
    rows = [row for row in _DECLARATIONS if row[0] == seam]
    on_cpu = any(row[2] == "cpu" for row in rows)
    served = {row[3] for row in rows if (row[2] == "cpu" or not on_cpu) and row[5] is None}
    return tuple(d for d in _DTYPE_ORDER if c10_name(d) in served)


# The operators the suite expects an infini kernel for, with the dtypes of
# each: their seam rows' (one list: seam_operators.h), on every backend it
# runs on except as ``kernel_dtypes`` says.
KERNEL_DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    op: _host_dtypes(op)
    for op in (
        "add",
        "sub",
        "mul",
        "relu",
        "silu",
        "sigmoid",
        "gelu",
        "mm",
        "bmm",
        "addmm",
        "linear",
        "rms_norm",
        "_softmax",
        "cat",
        "infini::silu_and_mul",
        "infini::swiglu",
        "infini::causal_softmax",
        "infini::rotary_embedding",
        "infini::rotary_embedding_functional",
        "infini::fused_add_rms_norm",
        "infini::add_rms_norm",
        "embedding",
        "infini::topk_softmax",
        "infini::reshape_and_cache_flash",
        "infini::paged_attention",
        "convolution",
    )
}


# CompositeImplicitAutograd operators with a kernel (aten/matmul.cpp): a call
# the kernel does not take (a dtype it lacks, a layout) runs PyTorch's
# decomposition instead of the CPU fallback, so a refusal, or a fallback, is
# that of an operator of the decomposition: these (linear: addmm with a
# bias, mm without).
DECOMPOSED_WHEN_NOT_TAKEN: dict[str, tuple[str, ...]] = {"linear": ("addmm", "mm")}


# InfiniOps implements these on accelerators only (their rows in
# seam_operators.h name no ``cpu`` device type; on a real stack
# test_declared_support.py holds the rows to InfiniOps itself): host serves
# them (in their accelerator dtypes, with the CPU's kernels), InfiniRT
# ``cpu`` not.
_ON_INFINIOPS_CPU = frozenset(row[0] for row in _DECLARATIONS if row[2] == "cpu")
_NONE_ON_INFINIRT_CPU = frozenset(
    op for op in KERNEL_DTYPES if _seam_operator(op) not in _ON_INFINIOPS_CPU
)

# InfiniRT's CPU device converts float -> float16 by truncating the mantissa
# instead of rounding to nearest even (1.00146484 -> 0x3c01 where PyTorch gives
# 0x3c02; 65520 -> 65504 where PyTorch gives inf). So on that device type the
# InfiniOps provider deliberately offers no float16 for the kernels that compute
# in float and write float16 (native/ops/src/seam/declared_support.cpp, ``refusal``):
# they would return silently wrong values, and refuse instead. relu, cat and
# same-dtype copies return input values unchanged and keep float16; casts
# to/from float16 are staged through the CPU (test_copy.py). Derived from the
# declarations (the rows' InfiniRT refusal of float16 on ``cpu``).
# A row: seam operator, InfiniOps class, device type, dtype, InfiniRT refusal, host refusal.
_HALF_REFUSED_ON_INFINIRT_CPU = frozenset(
    row[0] for row in _DECLARATIONS if row[2] == "cpu" and row[3] == "Half" and row[4]
)
_NO_FLOAT16_ON_INFINIRT_CPU = frozenset(
    op for op in KERNEL_DTYPES if _seam_operator(op) in _HALF_REFUSED_ON_INFINIRT_CPU
)


def kernel_dtypes(op: str) -> tuple[torch.dtype, ...]:
    """The dtypes infini has an ``op`` kernel for on the current backend.

    ``KERNEL_DTYPES[op]``, less float16 for the kernels that compute in float
    on the InfiniRT ``cpu`` backend (see ``_NO_FLOAT16_ON_INFINIRT_CPU``).
    test_operator_table.py checks the product declares exactly these.
    """
    backend = torch_infini.backend()
    if backend not in ("host", "cpu"):
        # An accelerator (the GPU run): what the product declares there, from
        # what its InfiniOps build instantiates, less float32 matrix products
        # where InfiniOps computes them in TF32 (refused at PyTorch's default
        # float32 matmul precision).
        dtypes = torch_infini.supported_dtypes(op)
        refused = (
            _operators.gemm_reduced_precision(torch.float32) is not None
            and torch.get_float32_matmul_precision() == "highest"
        )
        if refused and op in ("mm", "bmm", "addmm", "matmul", "linear"):
            dtypes = tuple(d for d in dtypes if d != torch.float32)
        return dtypes
    dtypes = KERNEL_DTYPES[op]
    if backend == "cpu" and op in _NONE_ON_INFINIRT_CPU:
        return ()
    if backend == "cpu" and op in _NO_FLOAT16_ON_INFINIRT_CPU:
        dtypes = tuple(d for d in dtypes if d != torch.float16)
    return dtypes


@contextmanager
def expect_kernel(op: str, dtype: torch.dtype) -> Iterator[bool]:
    """Wraps a block that runs infini's ``op`` on ``dtype`` and checks the result.

    Where the backend has the kernel (``kernel_dtypes``) the block runs as it
    is (yields True). Where it deliberately has none, the block runs with the
    CPU fallback off and its first infini call of ``op`` must raise exactly
    NotImplementedError naming the dtype and the kernel; the rest of the block
    is skipped (yields False). Never a skip: a refusal is asserted like a
    result (test_cpu_fallback.py checks what the fallback computes instead).
    """
    if dtype in kernel_dtypes(op):
        yield True
        return
    provider = "host" if torch_infini.backend() == "host" else "infiniops"
    message = (
        f"dtype {c10_name(dtype)} is not supported on infini by the '{provider}' kernel "
        f"provider ({_seam_kernel(op)} kernel)"
    )
    # With the CPU fallback on, the call would run on the CPU: the refusal
    # itself is what this block asserts, so the fallback is off here.
    with (
        torch_infini.cpu_fallback.strict(),
        raises_exactly(NotImplementedError, match=re.escape(message)),
    ):
        yield False


def _seam_kernel(op: str) -> str:
    """The seam operator serving ``op`` ("mm" -> "gemm"), from the operator table."""
    full = op if "::" in op else f"aten::{op}"
    for info in torch_infini.operators():
        if info.name.split(".", 1)[0] == full and info.kernel is not None:
            return info.kernel
    raise KeyError(op)


def add_oracle(
    cpu_result: torch.Tensor, a: torch.Tensor, b: torch.Tensor, alpha: float
) -> torch.Tensor:
    """The expected ``torch.add(a, b, alpha=alpha)`` of CPU tensors, given the CPU's result.

    On ``host`` (the CPU's own kernel) and for other dtypes: ``cpu_result``,
    compared bit for bit. For float16/bfloat16 elsewhere: CUDA's semantics,
    computed on the CPU into ``cpu_result``'s layout. PyTorch's CPU kernel
    rounds alpha to the tensor dtype and, in its scalar tail loop, rounds
    alpha * b too; CUDA and InfiniOps compute a + alpha * b in float with
    alpha unrounded and round once. Where the sum cancels, the CPU's double
    rounding differs from that by more than assert_close's relative tolerance
    for the dtype, so it is no oracle for a kernel that rounds once.
    """
    if cpu_result.dtype not in REDUCED_DTYPES or alpha == 1 or runs_cpu_kernels():
        return cpu_result
    expected = torch.empty_strided(cpu_result.shape, cpu_result.stride(), dtype=cpu_result.dtype)
    return expected.copy_(a.float() + alpha * b.float())
