"""Checkpoints as an attacker writes them: torch.save's zip format with a
tensor whose storage, dtype, offset, sizes and strides are chosen freely.

`crafted(...)` pickles exactly what ``torch.load(weights_only=True)``
rebuilds a tensor from (``torch._utils._rebuild_tensor_v2`` over a
persistent storage record), so no field is checked by the writer: the
loader alone decides what to accept.
"""

from __future__ import annotations

import collections
import io
import pickle
import zipfile

import torch

# The storage classes a checkpoint names, by element type (the loader takes
# the tensor's dtype from them).
STORAGE_CLASSES: dict[torch.dtype, type] = {
    torch.bool: torch.BoolStorage,
    torch.uint8: torch.ByteStorage,
    torch.int8: torch.CharStorage,
    torch.int16: torch.ShortStorage,
    torch.float16: torch.HalfStorage,
    torch.bfloat16: torch.BFloat16Storage,
    torch.int32: torch.IntStorage,
    torch.float32: torch.FloatStorage,
    torch.int64: torch.LongStorage,
    torch.float64: torch.DoubleStorage,
    torch.complex64: torch.ComplexFloatStorage,
    torch.complex128: torch.ComplexDoubleStorage,
}


class _Storage:
    """Pickled as a persistent id: the record ``data/0``."""


class _Tensor:
    def __init__(self, offset: int, size: tuple, stride: tuple) -> None:
        self.args = (offset, size, stride)

    def __reduce__(self) -> tuple:
        offset, size, stride = self.args
        return (
            torch._utils._rebuild_tensor_v2,
            (_STORAGE, offset, size, stride, False, collections.OrderedDict()),
        )


_STORAGE = _Storage()


def _template() -> bytes:
    """A checkpoint torch.save wrote (its records other than the pickle and
    the storage are kept as they are)."""
    buffer = io.BytesIO()
    torch.save(torch.zeros(1), buffer)
    return buffer.getvalue()


_TEMPLATE = _template()


def crafted(
    dtype: torch.dtype,
    offset: int,
    size: tuple,
    stride: tuple,
    storage_bytes: bytes,
    declared_numel: int | None = None,
) -> bytes:
    """A checkpoint of one tensor of `dtype` over a storage holding
    `storage_bytes`, whose record says it has `declared_numel` elements
    (by default as many as the bytes hold)."""
    storage_class = STORAGE_CLASSES[dtype]
    itemsize = torch.empty(0, dtype=dtype).element_size()
    numel = len(storage_bytes) // itemsize if declared_numel is None else declared_numel

    class _Pickler(pickle.Pickler):
        def persistent_id(self, obj: object) -> tuple | None:
            if obj is _STORAGE:
                return ("storage", storage_class, "0", "cpu", numel)
            return None

    data = io.BytesIO()
    _Pickler(data, protocol=2).dump(_Tensor(offset, size, stride))
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(_TEMPLATE)) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            if item.filename.endswith("/data.pkl"):
                dst.writestr(item, data.getvalue())
            elif item.filename.endswith("/data/0"):
                dst.writestr(item, storage_bytes)
            else:
                dst.writestr(item, src.read(item.filename))
    return out.getvalue()
