"""The operators torch-infini runs on `infini`, and their dtypes.

Read from the native bridge (its operator table, with the dtypes the selected
kernel provider declares), so reports and tests never hard-code them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import _C

# c10's ScalarType names, as the native table spells them.
_DTYPES: dict[str, torch.dtype] = {
    "Bool": torch.bool,
    "Byte": torch.uint8,
    "Char": torch.int8,
    "Short": torch.int16,
    "Int": torch.int32,
    "Long": torch.int64,
    "UInt16": torch.uint16,
    "UInt32": torch.uint32,
    "UInt64": torch.uint64,
    "Half": torch.float16,
    "BFloat16": torch.bfloat16,
    "Float": torch.float32,
    "Double": torch.float64,
    "ComplexFloat": torch.complex64,
    "ComplexDouble": torch.complex128,
}
_C10_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in _DTYPES.items()}


def c10_name(dtype: torch.dtype) -> str:
    """c10's name for ``dtype`` ("Half" for torch.float16), as messages spell it."""
    return _C10_NAMES[dtype]


@dataclass(frozen=True)
class OperatorInfo:
    name: str  # "aten::add.Tensor"
    family: str  # "elementwise", "matmul", ...
    kernel: str | None  # seam operator serving it; None for factories/views/copies
    dtypes: tuple[torch.dtype, ...]


def operators() -> list[OperatorInfo]:
    """Every operator the bridge registers for infini: ATen's, and the fused
    ``infini::`` operators (torch.ops.infini). Initializes the backend."""
    return [
        OperatorInfo(name, family, kernel, tuple(_DTYPES[d] for d in dtypes))
        for name, family, kernel, dtypes in _C._operator_table()
    ]


def supported_dtypes(name: str) -> tuple[torch.dtype, ...]:
    """Dtypes the selected backend accepts for ``name``.

    ``name`` is an operator with or without overload and namespace:
    "aten::add.Tensor", "add.out", "add" (every overload of an operator is
    served by the same kernel, so they share their dtypes).
    """
    full = name if "::" in name else f"aten::{name}"
    infos = operators()
    for info in infos:
        if info.name == full:
            return info.dtypes
    for info in infos:
        if info.name.split(".", 1)[0] == full:
            return info.dtypes
    raise KeyError(f"{name!r} has no infini kernel")


@dataclass(frozen=True)
class Declaration:
    """One (seam operator, device type, dtype) InfiniOps declares, and what
    torch-infini makes of it (the seam's rows in
    native/ops/include/torch_infini/ops/seam_operators.h, less the refusals of
    native/ops/src/seam/declared_support.cpp)."""

    op: str  # seam operator: "gemm"
    infiniops: str  # InfiniOps' operator class: "Gemm"
    device_type: str  # InfiniRT's name: "cpu", "nvidia", ...
    dtype: torch.dtype
    infinirt_refusal: str | None  # why the InfiniOps provider refuses it, or None
    host_refusal: str | None  # why `host` (InfiniOps' cpu column) refuses it, or None


def declarations() -> list[Declaration]:
    """InfiniOps' declarations with torch-infini's refusals, for every device
    type InfiniRT names (independent of the selected backend)."""
    return [
        Declaration(op, infiniops, device_type, _DTYPES[dtype], infinirt_refusal, host_refusal)
        for op, infiniops, device_type, dtype, infinirt_refusal, host_refusal in (
            _C._declarations()
        )
    ]


def gemm_reduced_precision(dtype: torch.dtype) -> str | None:
    """What the selected backend's gemm kernel computes below PyTorch's
    precision for ``dtype`` ("computes float32 matrix products in TF32" on
    NVIDIA and MetaX), or None. Such a gemm is refused at PyTorch's default
    float32 matmul precision and runs where it is "high" or "medium"."""
    return _C._gemm_reduced_precision(dtype)  # type: ignore[no-any-return]
