"""Which ATen operators run on `infini`, and how PyTorch's OpInfo database covers them.

The dispatcher is the source of truth for "has an infini kernel" (every
``aten::`` registration for the PrivateUse1 key); ``torch_infini.operators()``
adds each operator's family, kernel and the dtypes the selected provider
declares. ``torch.testing._internal.common_methods_invocations.op_db`` gives
PyTorch's own sample inputs for the operators it knows. Both the operator
conformance tests and ``tools/report_op_coverage.py`` use this module.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
import unittest
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any
from unittest import mock

import torch
import torch_infini

UNLISTED_FAMILY = "unlisted"  # registered with the dispatcher, absent from the operator table
VARIANTS = ("function", "inplace", "out")

# Order in which a dtype the backend does not declare is picked for the
# "must raise NotImplementedError" check: common dtypes first.
_PROBE_ORDER = (
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ---------------------------------------------------------------- dispatcher


def dispatcher_registrations() -> list[str]:
    """Every operator with a kernel registered for the PrivateUse1 (infini) key."""
    return sorted(set(torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")))


def registered_aten_operators() -> list[str]:
    """aten operators, and the fused infini:: ones (torch.ops.infini), with an
    infini kernel (not those routed to the CPU fallback)."""
    routed = set(torch_infini.cpu_fallback.routed_operators())
    return [
        name
        for name in dispatcher_registrations()
        if name.startswith(("aten::", "infini::")) and name not in routed
    ]


def other_namespaces() -> dict[str, int]:
    """Non-aten registrations for PrivateUse1 (e.g. c10d's, which PyTorch registers itself)."""
    counts: dict[str, int] = {}
    for name in dispatcher_registrations():
        namespace = name.split("::", 1)[0]
        if namespace not in ("aten", "infini"):
            counts[namespace] = counts.get(namespace, 0) + 1
    return dict(sorted(counts.items()))


# How infini serves an aten operator, per ``serving_status``.
SERVING = {
    "native": "an infini kernel (dtypes outside those it declares run in the CPU fallback)",
    "fallback": "no infini kernel: the CPU's kernel runs in the CPU fallback",
    "fallback (routed)": (
        "registered to run the CPU's kernel whole in the CPU fallback, where PyTorch would "
        "otherwise decompose it on infini (or, for a structured operator's functional and "
        "in-place forms, run its meta function before the CPU's .out kernel runs its own)"
    ),
    "composite": "PyTorch's composite runs on infini and reaches the operators it calls",
    "refused: random": (
        "draws random numbers and has no infini kernel: NotImplementedError (README, 'Random "
        "numbers'), never the CPU's generator"
    ),
    "refused: view": "a view operator without an infini kernel (never computed on the CPU)",
    "no CPU kernel": "no kernel for strided CPU tensors either (CUDA-, sparse- or quantized-only)",
}


def serving_status() -> dict[str, str]:
    """Every aten (and infini::) operator overload in the dispatcher -> its
    ``SERVING`` key on infini."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    routed = set(torch_infini.cpu_fallback.routed_operators())
    status: dict[str, str] = {}
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith(("aten::", "infini::")):
            continue
        name, _, overload = full.partition(".")
        schema = torch._C._get_schema(name, overload)
        if full in routed:
            status[full] = "fallback (routed)"
        elif has(full, "PrivateUse1"):
            status[full] = "native"
        elif any(
            has(full, key) for key in ("CompositeImplicitAutograd", "CompositeExplicitAutograd")
        ):
            status[full] = "composite"
        elif draws_random(full):
            status[full] = "refused: random"
        elif any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
            status[full] = "refused: view"
        elif has(full, "CPU") or has(full, "CompositeExplicitAutogradNonFunctional"):
            status[full] = "fallback"
        else:
            status[full] = "no CPU kernel"
    return dict(sorted(status.items()))


def draws_random(full: str) -> bool:
    """Whether ``aten::bernoulli_.float`` (any namespace) is tagged as drawing random numbers."""
    namespace, _, rest = full.partition("::")
    name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace, None), name, None)
    op = getattr(packet, overload or "default", None) if packet is not None else None
    return op is not None and torch.Tag.nondeterministic_seeded in op.tags


@dataclass(frozen=True)
class AtenName:
    full: str  # "aten::add_.Tensor"
    base: str  # "add_"
    overload: str  # "Tensor" ("" for the default overload)

    @property
    def variant(self) -> str:
        if self.overload == "out" or self.overload.endswith("_out"):
            return "out"
        if self.base.endswith("_") and not self.base.endswith("__"):
            return "inplace"
        return "function"

    @property
    def root(self) -> str:
        """The name without the in-place underscore: add_ -> add."""
        return self.base[:-1] if self.variant == "inplace" else self.base


def parse_aten_name(full: str) -> AtenName:
    name = full.removeprefix("aten::")
    base, _, overload = name.partition(".")
    return AtenName(full, base, overload)


# ---------------------------------------------------------------- op_db


def torch_testing_internal(module: str) -> types.ModuleType:
    """A module of ``torch.testing._internal`` (PyTorch's own test data).

    That package imports ``expecttest`` only for its TestCase base class;
    where that test-only package is missing, a stand-in with unittest's
    TestCase is installed first. Command-line arguments are hidden from the
    import (common_utils parses them).
    """
    try:
        import expecttest  # noqa: F401
    except ImportError:
        stub = types.ModuleType("expecttest")
        stub.TestCase = unittest.TestCase  # type: ignore[attr-defined]
        stub.ACCEPT = False  # type: ignore[attr-defined]
        sys.modules["expecttest"] = stub
    saved_argv = sys.argv
    sys.argv = sys.argv[:1]
    try:
        return importlib.import_module(f"torch.testing._internal.{module}")
    finally:
        sys.argv = saved_argv


def sample_inputs(opinfo: Any, device: str, dtype: Any, **kwargs: Any) -> Iterator[Any]:
    """``opinfo.sample_inputs(device, dtype, **kwargs)`` without its test lookup.

    OpInfo.sample_inputs looks for the unittest method running it with
    ``inspect.stack()``, which reads the source of every frame on the stack:
    a tenth of a second per call under pytest (most of the op_db suite's
    time), a few milliseconds in a shallow script. Nothing here runs in a
    unittest method, so the lookup finds none either way and the samples are
    the same (seeded with ``common_utils.SEED``).
    """
    common_utils = torch_testing_internal("common_utils")
    from torch.testing._internal.opinfo import core

    with (
        mock.patch.object(common_utils, "extract_test_fn", lambda: None),
        mock.patch.object(core, "extract_test_fn", lambda: None),
    ):
        return opinfo.sample_inputs(device, dtype, **kwargs)


@cache
def load_op_db() -> tuple[Any, ...]:
    """PyTorch's OpInfo database (slow: import once)."""
    return tuple(torch_testing_internal("common_methods_invocations").op_db)


def opinfo_id(opinfo: Any) -> str:
    """``add``, ``addmm.decomposed``: the OpInfo's name and variant test name."""
    return f"{opinfo.name}.{opinfo.variant_test_name}" if opinfo.variant_test_name else opinfo.name


def opinfos_for(name: AtenName, op_db: Sequence[Any]) -> list[Any]:
    """op_db entries for an ATen operator: name or aten_name equal to its root name.

    ``aten::add_.Tensor`` -> ``add``; ``aten::relu.out`` -> ``nn.functional.relu``;
    ``aten::zero_`` -> ``zero_``. Overloads and variants share their root's
    entries (the variant is exercised through the entry); an entry whose
    aten_name names another operator is left out.
    """
    candidates = {name.base, name.root, f"nn.functional.{name.root}"}
    aten_names = {name.base, name.root}
    # An entry whose aten_name is another operator runs that one instead
    # (nn.functional.unfold is im2col, not aten::unfold).
    return [
        op
        for op in op_db
        if (op.name in candidates or op.aten_name in candidates)
        and (op.aten_name is None or op.aten_name in aten_names or op.aten_name == op.name)
    ]


# ---------------------------------------------------------------- coverage


@dataclass(frozen=True)
class OperatorCoverage:
    name: str
    family: str
    kernel: str | None
    dtypes: tuple[torch.dtype, ...]  # declared by the selected provider
    registered: bool  # the dispatcher has a PrivateUse1 kernel
    in_table: bool  # torch_infini.operators() lists it
    opinfos: tuple[str, ...]  # op_db entries (opinfo_id)

    @property
    def variant(self) -> str:
        return parse_aten_name(self.name).variant


def operator_coverage(op_db: Sequence[Any] | None = None) -> list[OperatorCoverage]:
    """Registered operators joined with the operator table, in table order.

    Operators registered with the dispatcher but missing from the table get
    family ``unlisted`` and no dtypes; table entries the dispatcher does not
    know are kept with ``registered=False`` (the report lists them).
    """
    if op_db is None:
        op_db = load_op_db()
    registered = set(registered_aten_operators())
    table = {info.name: info for info in torch_infini.operators()}
    names = list(table) + sorted(registered - table.keys())
    result = []
    for name in names:
        info = table.get(name)
        result.append(
            OperatorCoverage(
                name=name,
                family=info.family if info is not None else UNLISTED_FAMILY,
                kernel=info.kernel if info is not None else None,
                dtypes=info.dtypes if info is not None else (),
                registered=name in registered,
                in_table=info is not None,
                opinfos=tuple(opinfo_id(op) for op in opinfos_for(parse_aten_name(name), op_db)),
            )
        )
    return result


# ---------------------------------------------------------------- conformance cases


@dataclass(frozen=True)
class OpCase:
    """One generated conformance test: an infini operator through one OpInfo, one dtype."""

    operator: str  # "aten::add_.Tensor"
    opinfo: Any
    dtype: torch.dtype
    declared: bool  # False: the dtype is undeclared, every sample must raise NotImplementedError

    @property
    def id(self) -> str:
        operator = self.operator.removeprefix("aten::")
        return f"{operator}-{opinfo_id(self.opinfo)}-{dtype_name(self.dtype)}"

    @property
    def name(self) -> AtenName:
        return parse_aten_name(self.operator)


def _cpu_dtypes(opinfo: Any) -> set[torch.dtype]:
    return set(opinfo.supported_dtypes("cpu"))


def conformance_cases(
    coverage: Sequence[OperatorCoverage], op_db: Sequence[Any] | None = None
) -> list[OpCase]:
    """(operator, OpInfo, dtype) for every declared dtype the OpInfo supports on CPU."""
    if op_db is None:
        op_db = load_op_db()
    cases = []
    for op in coverage:
        for opinfo in opinfos_for(parse_aten_name(op.name), op_db):
            cpu = _cpu_dtypes(opinfo)
            cases.extend(OpCase(op.name, opinfo, d, True) for d in op.dtypes if d in cpu)
    return cases


def undeclared_cases(
    coverage: Sequence[OperatorCoverage], op_db: Sequence[Any] | None = None
) -> list[OpCase]:
    """Per operator, one dtype CPU supports but the backend does not declare (if any)."""
    if op_db is None:
        op_db = load_op_db()
    cases = []
    for op in coverage:
        if not op.in_table:
            continue
        declared = set(op.dtypes)
        name = parse_aten_name(op.name)
        for opinfo in opinfos_for(name, op_db):
            cpu = _cpu_dtypes(opinfo)
            if name.base.endswith("_") and getattr(opinfo, "promotes_int_to_float", False):
                # In place, an integer input cannot hold the float result
                # (the CPU refuses every sample): probe the other dtypes.
                cpu = {d for d in cpu if d.is_floating_point or d.is_complex}
            probe = next((d for d in _PROBE_ORDER if d in cpu and d not in declared), None)
            if probe is not None:
                cases.append(OpCase(op.name, opinfo, probe, False))
                break
    return cases


# ---------------------------------------------------------------- running samples


def relocate(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A copy of ``t`` on ``device`` with the same sizes, strides and storage offset.

    The whole storage travels, so views into larger buffers (partial views,
    overlapping strides) keep their exact geometry; ``Tensor.to`` would
    compact them.
    """
    t = t.detach()
    if t.layout != torch.strided:
        return t.to(device)
    elements = t.untyped_storage().nbytes() // t.element_size()
    flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (elements,), (1,))
    moved = flat.to(device, copy=True)
    return moved.as_strided(t.size(), t.stride(), t.storage_offset())


def relocate_sample(value: Any, device: torch.device) -> Any:
    """Tensors copied to ``device`` (geometry kept), ``device=`` arguments retargeted."""
    if isinstance(value, torch.Tensor):
        return relocate(value, device)
    if isinstance(value, list):
        return [relocate_sample(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(relocate_sample(v, device) for v in value)
    if isinstance(value, dict):
        return {
            k: (_retarget_device(v, device) if k == "device" else relocate_sample(v, device))
            for k, v in value.items()
        }
    return value


def _retarget_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, (str, torch.device)) and torch.device(value).type == "cpu":
        return device
    return value


# Overloads op_db's samples never reach as they are, and the change to the
# samples that reaches them (applied to the CPU and the infini run alike).
SAMPLE_ADAPTERS: dict[str, str] = {
    # op_db's fill samples pass the value as a Python scalar, which selects
    # fill_.Scalar; as a 0-dim tensor it selects fill_.Tensor.
    "aten::fill_.Tensor": "scalars as 0-dim tensors",
}


def adapt_sample(operator: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``(input, *args)`` and kwargs as the operator's case runs them (see SAMPLE_ADAPTERS)."""
    if SAMPLE_ADAPTERS.get(operator) == "scalars as 0-dim tensors":

        def convert(value: Any) -> Any:
            is_number = isinstance(value, (bool, int, float, complex))
            return torch.tensor(value) if is_number else value

        args = (args[0], *(convert(a) for a in args[1:]))
        kwargs = {k: convert(v) for k, v in kwargs.items()}
    return args, kwargs


def variant_callable(case: OpCase) -> tuple[Callable[..., Any], str]:
    """What to call for the case's variant, and where it comes from.

    The OpInfo's own function / in-place variant / ``out=`` support where it
    has one, else the ATen operator itself (``torch.ops.aten``).
    """
    name = case.name
    opinfo = case.opinfo
    if name.variant == "function":
        return opinfo.op, "opinfo"
    if name.variant == "inplace":
        if opinfo.inplace_variant is not None:
            return opinfo.inplace_variant, "opinfo inplace_variant"
        return getattr(torch.ops.aten, name.base), f"torch.ops.aten.{name.base}"
    if opinfo.supports_out:
        return opinfo.op, "opinfo out="
    packet = getattr(torch.ops.aten, name.base)
    return getattr(packet, name.overload), f"torch.ops.aten.{name.base}.{name.overload}"


class DispatchRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the ATen overloads that reach the dispatcher with infini tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        leaves = torch.utils._pytree.tree_leaves((args, kwargs))
        on_infini = any(isinstance(x, torch.Tensor) and x.device.type == "infini" for x in leaves)
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "infini":
            on_infini = True
        if on_infini:
            self.seen.add(overload_name(func))
        return func(*args, **kwargs)


def overload_name(func: Any) -> str:
    """``aten::add.Tensor``, ``aten::mm`` (default overload): as the dispatcher spells it."""
    name = func._schema.name
    if func._overloadname != "default":
        name += f".{func._overloadname}"
    return name


@contextlib.contextmanager
def recording() -> Iterator[DispatchRecorder]:
    recorder = DispatchRecorder()
    with recorder:
        yield recorder
