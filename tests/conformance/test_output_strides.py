"""Output geometry on infini: what PyTorch's meta functions predict for the device, and the CPU's.

A result is more than its values: its strides, storage offset, storage size
and which argument it is a view of are observable (``view``,
``is_contiguous``, ``data_ptr`` arithmetic), and ``torch.compile`` relies on
them: it traces with FakeTensorMode, whose strides for an infini tensor come
from PyTorch's meta functions (and fake implementations) *for the device
infini*, and Inductor's generated code asserts that every ATen call it makes
returns exactly those strides (``assert_size_stride``).

The rules, checked over PyTorch's whole operator database (op_db, float32,
the first ``MAX_SAMPLES`` samples, each in several layouts; where device
memory is host memory, each sample runs on infini twice: the CPU fallback in
place, and staged through pinned copies as on NVIDIA):

1. Where FakeTensorMode predicts the call for infini inputs, the infini
   result has the predicted shape, storage offset and aliasing (which input
   or earlier output it is a view of), and the predicted strides in every
   dimension of more than one element (what ``assert_size_stride`` compares).
2. Where that prediction equals the CPU's own result in every stride (size-1
   dimensions too), the infini result equals the CPU's in every stride, and
   in its storage size.
3. Where there is no prediction (data-dependent output shapes, no meta
   function), the infini result equals the CPU's: shape, every stride,
   offset, aliasing and storage size.

Strides of results without elements are not compared (PyTorch's meta
functions and kernels disagree there freely, and nothing can observe them
but ``stride()``).

The prediction for infini differs from the CPU's result for the operators in
``PREDICTION_DIFFERS_FROM_CPU`` (listed with the layout and the reason): there
infini follows the prediction (rule 1), not the CPU. The list is checked: a
difference for an operator it does not name fails.

Regression tests follow for issue 30: native add/sub/mul of operands with a
size-1 dimension (the native fast path copies the operand's strides, where
TensorIterator, the meta function and the CPU give contiguous ones), the
lstsq solution (a column-major view of a larger buffer on the CPU), a
convolution with a channels-last weight (the CPU kernel follows the weight,
PyTorch predicts a contiguous result for a PrivateUse1 device) and
``torch.compile`` of a Conv2d + BatchNorm2d network, which Inductor lays out
channels last.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple
from unittest import mock

import pytest
import torch
import torch_infini
from hypothesis import given, settings
from hypothesis import strategies as st
from infini_testing import (
    assert_bitwise_equal,
    forced_staging,
    requires_inductor,
    requires_two_devices,
)
from op_coverage import load_op_db, opinfo_id, sample_inputs
from op_db_engine import CPU_ARGUMENTS, Mover, refusal_reason
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_leaves, tree_map

DEVICE = torch.device("infini", 0)

# Samples per OpInfo (each in up to four layouts, LAYOUTS): bounds the file's time
# (well under a minute on one core with the host backend).
MAX_SAMPLES = 3

# Operators whose result PyTorch predicts for infini otherwise than the CPU's
# kernel lays it out, in the sample layouts of ``LAYOUTS`` (torch 2.13 with
# oneDNN): OpInfo -> why. Rule 1 holds for them too: infini follows the
# prediction. "device" marks a prediction that depends on the device type
# (FakeTensorMode predicts the CPU's result for CPU tensors); "meta" marks a
# meta function or decomposition that predicts the same for the CPU's own
# tensors (the CPU kernel differs from PyTorch's own prediction).
PREDICTION_DIFFERS_FROM_CPU: dict[str, str] = {
    "nn.functional.conv2d": (
        "device: _select_conv_backend gives Overrideable for a PrivateUse1 tensor, and "
        "_conv_determine_backend_memory_format contiguous; the CPU's oneDNN convolution is "
        "channels last when the input or the weight is"
    ),
    "nn.functional.conv_transpose2d": "device: as conv2d",
    "nn.functional.pixel_shuffle": (
        "device: meta pixel_shuffle keeps channels last only where device_hint is 'cpu'"
    ),
    "native_batch_norm": (
        "device: the decomposition returns save_mean/save_invstd of shape (C,) in eval mode off "
        "the CPU, (0,) on it; meta: its result keeps a permuted input's layout, the CPU "
        "kernel's is contiguous (suggest_memory_format)"
    ),
    "_native_batch_norm_legit": "device, meta: as native_batch_norm",
    "_batch_norm_with_update": "meta: as native_batch_norm (permuted input)",
    "nn.functional.batch_norm": "meta: as native_batch_norm (permuted input)",
    "nn.functional.channel_shuffle": "meta: contiguous; the CPU kernel keeps channels last",
    "nn.functional.max_unpool2d": "meta: contiguous; the CPU kernel keeps channels last",
    "nn.functional.max_unpool2d.grad": "meta: as max_unpool2d",
    "native_dropout_backward": (
        "meta: the decomposition is contiguous for a permuted input (suggest_memory_format, as "
        "CUDA's kernel); the CPU kernel keeps its layout"
    ),
    "normal": (
        "meta: the decomposition (std * samples + mean) takes a tensor std's layout, else "
        "contiguous; the CPU kernel's result is contiguous"
    ),
}


# ---------------------------------------------------------------- geometry


class Geometry(NamedTuple):
    """What a result tensor is, besides its values."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    alias: int | None  # index of the input or earlier output sharing its storage
    nbytes: int | None  # storage size; None for fake tensors (not compared)

    def significant(self) -> tuple[Any, ...]:
        """What ``assert_size_stride`` compares: strides of dimensions of more than one element."""
        strides = tuple(s if n > 1 else None for s, n in zip(self.strides, self.shape, strict=True))
        return (self.shape, strides if self.numel() else None, self.offset, self.alias)

    def full(self) -> tuple[Any, ...]:
        return (self.shape, self.strides if self.numel() else None, self.offset, self.alias)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def _storage_key(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except Exception:  # no storage (a sparse or wrapper tensor)
        return None


def geometry(result: Any, inputs: list[torch.Tensor], fake: bool) -> list[Geometry | str]:
    """The geometry of each tensor in ``result`` (pytree order); its layout if not strided."""
    owners: dict[int, int] = {}
    for i, t in enumerate(inputs):
        key = _storage_key(t)
        if key is not None and t.untyped_storage().nbytes():
            owners.setdefault(key, i)
    found: list[Geometry | str] = []
    for t in tree_leaves(result):
        if not isinstance(t, torch.Tensor):
            continue
        if t.layout != torch.strided:
            found.append(str(t.layout))
            continue
        key = _storage_key(t)
        alias = owners.get(key) if key is not None and t.numel() else None
        nbytes = None if fake else t.untyped_storage().nbytes()
        found.append(Geometry(tuple(t.shape), t.stride(), t.storage_offset(), alias, nbytes))
        if key is not None and t.untyped_storage().nbytes():
            owners.setdefault(key, len(inputs) + len(found) - 1)
    return found


# ---------------------------------------------------------------- sample layouts


def _strided(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.layout == torch.strided


def _odd_size_one_strides(t: torch.Tensor) -> torch.Tensor:
    """The same elements; each size-1 dimension gets a stride no layout would give it
    (as ``x[:1, :4]`` of a (3, 11) tensor has)."""
    if 1 not in t.shape:
        return t
    sizes_strides = enumerate(zip(t.shape, t.stride(), strict=True))
    strides = [97 * (d + 1) if n == 1 else s for d, (n, s) in sizes_strides]
    return t.as_strided(t.shape, strides, t.storage_offset())


def _reversed_memory_order(t: torch.Tensor) -> torch.Tensor:
    """Dense, the first dimension innermost (column-major)."""
    if t.dim() < 2:
        return t
    order = list(range(t.dim()))[::-1]
    return t.permute(order).contiguous().permute(order)


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t


# Layout -> how a sample's tensors are laid out, and how many of the samples.
# (PyTorch's noncontiguous_like samples found nothing these do not, at the
# cost of a fifth of the file's time.)
LAYOUTS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor] | None, int]] = {
    "as given": (None, MAX_SAMPLES),
    "odd size-1 strides": (_odd_size_one_strides, 2),
    "column-major": (_reversed_memory_order, MAX_SAMPLES),
    "channels last": (_channels_last, MAX_SAMPLES),
}


def _relayout(sample: Any, f: Callable[[torch.Tensor], torch.Tensor]) -> Any | None:
    """``sample`` with its strided tensors laid out by ``f``; None where that changes nothing."""
    changed = False

    def g(t: Any) -> Any:
        nonlocal changed
        if not _strided(t):
            return t
        out = f(t)
        changed |= out.stride() != t.stride() or out.storage_offset() != t.storage_offset()
        return out

    relaid = sample.transform(g)
    return relaid if changed else None


def _samples(opinfo: Any) -> Iterator[tuple[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = []
        for sample in sample_inputs(opinfo, "cpu", torch.float32):
            samples.append(sample)
            if len(samples) == MAX_SAMPLES:
                break
    for layout, (f, count) in LAYOUTS.items():
        for index, sample in enumerate(samples[:count]):
            relaid = sample if f is None else _relayout(sample, f)
            if relaid is not None:
                yield f"sample {index} ({layout})", relaid


# ---------------------------------------------------------------- running


class Call(NamedTuple):
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _on(device: str, opinfo: Any, sample: Any) -> Call:
    """The sample's arguments on ``device``, every geometry and storage sharing kept."""
    mover = Mover(device)
    if opinfo.name in CPU_ARGUMENTS:
        args = (mover.value(sample.input), *Mover("cpu").value(sample.args))
    else:
        args = mover.value((sample.input, *sample.args))
    return Call(tuple(args), mover.value(dict(sample.kwargs)))


def _inputs(call: Call) -> list[torch.Tensor]:
    return [t for t in tree_leaves((call.args, call.kwargs)) if isinstance(t, torch.Tensor)]


def _run(opinfo: Any, call: Call) -> list[Geometry | str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = opinfo.op(*call.args, **call.kwargs)
    return geometry(result, _inputs(call), fake=False)


def predict(opinfo: Any, call: Call, mode: FakeTensorMode) -> list[Geometry | str] | None:
    """What FakeTensorMode predicts for ``call`` (infini tensors); None where it cannot.

    ``mode`` is made without fallback kernels: a prediction made by running
    the real operator on infini would predict infini by infini.
    """
    try:
        fake = Call(*tree_map(lambda t: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t,
                              (call.args, call.kwargs)))  # fmt: skip
        with warnings.catch_warnings(), mode:
            warnings.simplefilter("ignore")
            result = opinfo.op(*fake.args, **fake.kwargs)
    except Exception:  # data-dependent output, no meta function, ...
        return None
    return geometry(result, _inputs(fake), fake=True)


def _differences(
    got: list[Geometry | str], want: list[Geometry | str], key: Callable[[Geometry], Any]
) -> list[str]:
    if len(got) != len(want):
        return [f"{len(got)} result tensors, expected {len(want)}"]
    problems = []
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if isinstance(g, str) or isinstance(w, str):
            if g != w:
                problems.append(f"result {i}: {g} vs {w}")
        elif key(g) != key(w):
            problems.append(f"result {i}: {g} vs {w}")
    return problems


def check_sample(opinfo: Any, sample: Any, mode: FakeTensorMode) -> tuple[list[str], bool]:
    """(violations of the three rules, whether the prediction differs from the CPU's result)."""
    cpu_call = _on("cpu", opinfo, sample)
    try:
        cpu = _run(opinfo, cpu_call)
    except Exception:
        return [], False  # the CPU refuses the sample: nothing to compare (test_op_db.py)
    fake = predict(opinfo, _on("infini", opinfo, sample), mode)
    differs = fake is not None and bool(_differences(fake, cpu, Geometry.significant))
    problems: list[str] = []
    for staged in STAGINGS:
        with forced_staging(staged):
            found = _check_infini(opinfo, sample, cpu, fake)
        problems += [f"{'staged: ' if staged else ''}{p}" for p in found]
    return problems, differs


# Where device memory is host memory, fallback calls run on it in place; the
# staged way (through pinned copies, as on NVIDIA) is forced for a second run.
HOST_ADDRESSABLE = bool(torch_infini._C._capabilities()["host_addressable"])
STAGINGS = (False, True) if HOST_ADDRESSABLE else (False,)


def _check_infini(
    opinfo: Any, sample: Any, cpu: list[Geometry | str], fake: list[Geometry | str] | None
) -> list[str]:
    """The three rules for one run of the sample on infini."""
    try:
        got = _run(opinfo, _on("infini", opinfo, sample))
    except NotImplementedError as exc:
        if refusal_reason(exc) is not None:
            return []  # random operators, sparse tensors: documented refusals
        return [f"infini raised NotImplementedError: {str(exc).splitlines()[0]}"]
    except Exception as exc:
        return [f"infini raised {type(exc).__name__}: {str(exc).splitlines()[0]}"]
    storage = _differences(got, cpu, lambda g: g.nbytes)
    if fake is None:  # rule 3
        problems = [f"vs cpu: {p}" for p in _differences(got, cpu, Geometry.full)]
        return problems + [f"storage size vs cpu: {p}" for p in storage]
    problems = [f"vs prediction: {p}" for p in _differences(got, fake, Geometry.significant)]
    if not _differences(fake, cpu, Geometry.full):  # rule 2
        problems += [f"vs cpu: {p}" for p in _differences(got, cpu, Geometry.full)]
        problems += [f"storage size vs cpu: {p}" for p in storage]
    return problems


def _opinfos() -> list[Any]:
    return [
        pytest.param(opinfo, id=opinfo_id(opinfo))
        for opinfo in load_op_db()
        if torch.float32 in opinfo.supported_dtypes("cpu")
    ]


@pytest.fixture
def _silent_fallback() -> Iterator[None]:
    with torch_infini.cpu_fallback.allowed("silent"):
        yield


@pytest.fixture
def _quiet_fake_tensors() -> Iterator[None]:
    """FakeTensorMode logs every exception a prediction raises, traceback and all."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


@pytest.mark.usefixtures("_silent_fallback", "_quiet_fake_tensors")
@pytest.mark.parametrize("opinfo", _opinfos())
def test_result_geometry_is_the_prediction_for_infini(opinfo: Any) -> None:
    check_result_geometry(opinfo)


def check_result_geometry(opinfo: Any) -> None:
    name = opinfo_id(opinfo)
    problems: list[str] = []
    unlisted: list[str] = []
    mode = FakeTensorMode(allow_fallback_kernels=False)
    for label, sample in _samples(opinfo):
        found, differs = check_sample(opinfo, sample, mode)
        problems += [f"{label}: {p}" for p in found]
        if differs and name not in PREDICTION_DIFFERS_FROM_CPU:
            unlisted.append(label)
    torch.infini.synchronize()
    assert not problems, f"{name}:\n" + "\n".join(problems)
    assert not unlisted, (
        f"{name}: PyTorch's prediction for infini differs from the CPU's result in "
        f"{', '.join(unlisted)}: add it to PREDICTION_DIFFERS_FROM_CPU with the reason"
    )


# ---------------------------------------------------------------- native elementwise operators


def _follows_the_rules(fn: Callable[..., torch.Tensor], *cpu_inputs: torch.Tensor) -> None:
    """``fn`` on infini: rule 1 against PyTorch's prediction for infini, rule 2
    against the CPU (every stride, where the prediction is the CPU's)."""
    inputs = [t.to(DEVICE) for t in cpu_inputs]
    # .to() keeps a dense tensor's strides, size-1 dimensions included
    assert [t.stride() for t in inputs] == [t.stride() for t in cpu_inputs]
    (want,) = geometry(fn(*cpu_inputs), list(cpu_inputs), fake=False)
    mode = FakeTensorMode()
    fakes = [mode.from_tensor(t) for t in inputs]
    with mode:
        (predicted,) = geometry(fn(*fakes), fakes, fake=True)
    (got,) = geometry(fn(*inputs), inputs, fake=False)
    assert isinstance(got, Geometry) and isinstance(predicted, Geometry)
    assert isinstance(want, Geometry)
    assert got.significant() == predicted.significant(), (
        f"strides {got.strides}, predicted for infini {predicted.strides} (cpu {want.strides})"
    )
    if predicted.full() == want.full():
        assert (got.full(), got.nbytes) == (want.full(), want.nbytes), (
            f"strides {got.strides}, the CPU's and the prediction {want.strides}"
        )


ELEMENTWISE: dict[str, Callable[..., torch.Tensor]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "add alpha": lambda a, b: torch.add(a, b, alpha=2),
    "add a number": lambda a, b: a + 1,
    "mul by a number": lambda a, b: a * 0.5,
    "relu": lambda a, b: torch.relu(a),
    "silu": lambda a, b: torch.nn.functional.silu(a),
}
# The ATen operator each serves through (its declared dtypes decide a skip).
ELEMENTWISE_OPERATORS = {
    "add": "aten::add",
    "sub": "aten::sub",
    "mul": "aten::mul",
    "add alpha": "aten::add",
    "add a number": "aten::add",
    "mul by a number": "aten::mul",
    "relu": "aten::relu",
    "silu": "aten::silu",
}


def _sliced_row() -> torch.Tensor:
    return torch.randn(3, 11)[:1, :4]  # (1, 4), strides (11, 1): contiguous, not canonical


def _channels_last_one_channel() -> torch.Tensor:
    # (2, 1, 3, 3) channels last: strides (9, 1, 3, 1), contiguous as well
    return torch.randn(2, 1, 3, 3).contiguous(memory_format=torch.channels_last)


def _channels_last_one_row() -> torch.Tensor:
    # (2, 3, 1, 5) channels last, the size-1 row with an odd stride: (15, 1, 97, 3)
    return (
        torch.randn(2, 3, 1, 5)
        .contiguous(memory_format=torch.channels_last)
        .as_strided((2, 3, 1, 5), (15, 1, 97, 3))
    )


def _column_major_one_column() -> torch.Tensor:
    # (4, 1, 3) with the first dimension innermost, the size-1 one odd: (1, 97, 4)
    return torch.randn(3, 4).t().unsqueeze(1).as_strided((4, 1, 3), (1, 97, 4))


OPERANDS: dict[str, Callable[[], torch.Tensor]] = {
    "sliced row": _sliced_row,
    "channels last, one channel": _channels_last_one_channel,
    "channels last, size-1 row": _channels_last_one_row,
    "column-major, size-1 column": _column_major_one_column,
}


@pytest.mark.parametrize("operands", list(OPERANDS))
@pytest.mark.parametrize("op", list(ELEMENTWISE))
def test_native_elementwise_result_strides(op: str, operands: str) -> None:
    """Issue 30, item 5: ``x[:1, :4] + same`` is (4, 1) on the CPU, CUDA and in
    PyTorch's prediction for infini; the native fast path (same-layout dense
    operands, or one operand and a number) copied the operand's (11, 1).

    TensorIterator's rule for operands of one geometry: contiguous strides
    when they are contiguous, channels-last ones when they are channels last,
    else their own strides as they are; with a number (a 0-dim operand) its
    general rule, which orders dimensions by stride."""
    torch.manual_seed(0)
    a = OPERANDS[operands]()
    b = a.clone().as_strided(a.shape, a.stride())  # same geometry, own storage
    if torch.float32 not in torch_infini.supported_dtypes(ELEMENTWISE_OPERATORS[op]):
        pytest.skip(f"{op}: the backend declares no float32 kernel for it")
    with torch_infini.cpu_fallback.strict():  # the native kernel: a refusal fails
        _follows_the_rules(ELEMENTWISE[op], a, b)


@requires_two_devices
def test_second_device_results_have_the_same_strides() -> None:
    """On infini:1 too: the native fast path and the convolution's layout."""
    device = torch.device("infini", 1)
    x = torch.randn(3, 11, device=device)[:1, :4]
    assert (x + x).stride() == (4, 1) and (x + x).device == device
    sizes = (2, 3, 1, 5)
    y = (
        torch.randn(sizes)
        .contiguous(memory_format=torch.channels_last)
        .as_strided(sizes, (15, 1, 97, 3))
    )
    assert (y.to(device) * y.to(device)).stride() == (y * y).stride()  # (15, 1, 15, 3)
    x_cpu, w_cpu = _conv_case(False, True)
    with torch_infini.cpu_fallback.allowed("silent"):
        got = torch.nn.functional.conv2d(x_cpu.to(device), w_cpu.to(device))
    assert got.device == device and got.is_contiguous()
    torch.testing.assert_close(got.cpu(), torch.nn.functional.conv2d(x_cpu, w_cpu))


def test_native_add_issue_example() -> None:
    x = torch.randn(3, 11, device=DEVICE)[:1, :4]
    got = x + x
    assert x.stride() == (11, 1)
    assert got.stride() == (4, 1)  # CPU and CUDA
    assert (x * x).stride() == (4, 1)
    assert torch.relu(x).stride() == (4, 1)


@st.composite
def _dense_layout(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(sizes, strides) of a dense tensor with size-1 dimensions, in any memory
    order, the strides of its size-1 dimensions odd or not."""
    shape = draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=1, max_size=4))
    order = draw(st.permutations(range(len(shape))))  # outermost first
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= shape[d]
    for d, n in enumerate(shape):
        if n == 1 and draw(st.booleans()):
            strides[d] = draw(st.sampled_from([0, 7, 1000]))
    return tuple(shape), tuple(strides)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(layout=_dense_layout(), op=st.sampled_from(sorted(ELEMENTWISE)))
def test_property_native_elementwise_strides(
    layout: tuple[tuple[int, ...], tuple[int, ...]], op: str
) -> None:
    shape, strides = layout
    numel = 1
    for n in shape:
        numel *= n
    g = torch.Generator().manual_seed(1)
    a = torch.randn(numel, generator=g).as_strided(shape, strides)
    b = torch.randn(numel, generator=g).as_strided(shape, strides)
    with torch_infini.cpu_fallback.allowed("silent"):
        _follows_the_rules(ELEMENTWISE[op], a, b)


# ---------------------------------------------------------------- fallback results


def _described(t: torch.Tensor) -> tuple[Any, ...]:
    return tuple(t.shape), t.stride(), t.storage_offset(), t.untyped_storage().nbytes()


@pytest.mark.usefixtures("_silent_fallback")
@pytest.mark.parametrize("staged", [False, True], ids=["in place", "staged"])
@pytest.mark.parametrize("mnk", [(5, 1, 3), (3, 1, 5), (6, 3, 5)], ids=str)
def test_lstsq_solution_is_laid_out_as_on_the_cpu(mnk: tuple[int, int, int], staged: bool) -> None:
    """Issue 30, item 5: the solution is the top rows of a column-major (m, k)
    buffer on the CPU; FakeTensorMode cannot predict lstsq (its output shapes
    depend on the data), so the CPU's geometry is the rule: strides, offset
    and storage size."""
    m, n, k = mnk
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, n, generator=g), torch.randn(m, k, generator=g)
    want = torch.linalg.lstsq(a, b)
    with forced_staging(staged):
        got = torch.linalg.lstsq(a.to(DEVICE), b.to(DEVICE))
    for name in ("solution", "residuals", "rank", "singular_values"):
        assert _described(getattr(got, name)) == _described(getattr(want, name)), name
    # Views of the solution reach the same elements as on the CPU. (Close,
    # not equal: LAPACK's result on the CPU itself follows the alignment of
    # its workspace, one ulp apart in about a third of repeated CPU calls.)
    torch.testing.assert_close(got.solution.cpu(), want.solution)


# ---------------------------------------------------------------- convolution


def _conv_case(input_cl: bool, weight_cl: bool) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 3, 8, 8, generator=g), torch.randn(4, 3, 3, 3, generator=g)
    if input_cl:
        x = x.contiguous(memory_format=torch.channels_last)
    if weight_cl:
        w = w.contiguous(memory_format=torch.channels_last)
    return x, w


@pytest.mark.usefixtures("_silent_fallback")
@pytest.mark.parametrize(
    ("input_cl", "weight_cl"),
    [(False, False), (False, True), (True, False), (True, True)],
    ids=["contiguous", "channels-last weight", "channels-last input", "both channels last"],
)
def test_convolution_strides_are_the_prediction_for_infini(input_cl: bool, weight_cl: bool) -> None:
    """Issue 30, item 9. PyTorch predicts a contiguous convolution result for a
    PrivateUse1 device (_select_conv_backend: Overrideable), whatever the
    layouts; the CPU's oneDNN kernel is channels last when either operand is.
    Forward and backward (grad_input and grad_weight follow the same rule)."""
    x_cpu, w_cpu = _conv_case(input_cl, weight_cl)
    x, w = x_cpu.to(DEVICE), w_cpu.to(DEVICE)
    mode = FakeTensorMode()
    with mode:
        fx, fw = mode.from_tensor(x), mode.from_tensor(w)
        predicted = torch.nn.functional.conv2d(fx, fw)
        grads = torch.ops.aten.convolution_backward(
            torch.empty_like(predicted), fx, fw, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
            [True, True, False],
        )  # fmt: skip
    assert predicted.is_contiguous()
    got = torch.nn.functional.conv2d(x, w)
    want = torch.nn.functional.conv2d(x_cpu, w_cpu)
    assert got.stride() == predicted.stride(), (
        f"conv2d result strides {got.stride()}, predicted for infini {predicted.stride()} "
        f"(the CPU's: {want.stride()})"
    )
    torch.testing.assert_close(got.cpu(), want)
    grad = torch.randn(got.shape, generator=torch.Generator().manual_seed(1))
    got_gi, got_gw, _ = torch.ops.aten.convolution_backward(
        grad.to(DEVICE), x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
        [True, True, False],
    )  # fmt: skip
    assert got_gi.stride() == grads[0].stride(), "grad_input"
    assert got_gw.stride() == grads[1].stride(), "grad_weight"


def test_prediction_for_cpu_tensors_is_the_cpu_convolution() -> None:
    """The oracle's own consistency: for CPU tensors FakeTensorMode predicts the
    CPU kernel's channels-last result, so the difference above is the device's."""
    x, w = _conv_case(False, True)
    mode = FakeTensorMode()
    with mode:
        predicted = torch.nn.functional.conv2d(mode.from_tensor(x), mode.from_tensor(w))
    assert predicted.stride() == torch.nn.functional.conv2d(x, w).stride()
    assert predicted.is_contiguous(memory_format=torch.channels_last)


# ---------------------------------------------------------------- torch.compile


class ConvBnNet(torch.nn.Module):
    """Wide enough (96 channels) that Inductor lays the convolutions out channels last."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 96, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(96)
        self.conv2 = torch.nn.Conv2d(96, 96, 3)
        self.head = torch.nn.Linear(96, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv2(torch.relu(self.bn(self.conv1(x))))
        return self.head(x.mean((2, 3)))


@contextlib.contextmanager
def _inductor_code() -> Iterator[list[str]]:
    """The Inductor wrapper code generated in the block (aot_eager generates none)."""
    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        yield codes
    assert codes, "Inductor generated no code: the graph was compiled by another backend"


@pytest.fixture
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    with torch._inductor.config.patch(compile_threads=1):
        yield
    torch._dynamo.reset()


@requires_inductor
@pytest.mark.usefixtures("_fresh_dynamo", "_silent_fallback")
def test_compiled_conv_batchnorm_net_matches_the_cpu() -> None:
    """Issue 30, item 9: Inductor makes the convolution weights channels last and
    asserts the convolution's result strides against PyTorch's prediction for
    infini (contiguous); the fallback's convolution followed the weight
    (``AssertionError: expected size 96==96, stride 1==64``). Inference only:
    a training step compiles twice as long; convolution_backward's strides are
    checked eagerly above."""
    torch.manual_seed(0)
    cpu = ConvBnNet().eval()
    dev = copy.deepcopy(cpu).to(DEVICE)
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with _inductor_code() as codes, torch.no_grad():
        got = torch.compile(dev)(x.to(DEVICE))
        want = cpu(x)
    assert any("convolution" in code for code in codes)
    assert got.device.type == "infini"
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- batch norm in evaluation


@pytest.mark.usefixtures("_silent_fallback")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize(
    "form", ["native_batch_norm", "_native_batch_norm_legit", "no_training"], ids=str
)
def test_batch_norm_in_evaluation_returns_the_statistics_it_used(
    form: str, dtype: torch.dtype
) -> None:
    """Off the CPU, evaluation returns the running mean and 1/sqrt(var + eps) (shape (C,), in
    the computation's dtype) where the CPU returns empty tensors; the output is the CPU's."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 5, generator=g).to(dtype)
    mean, var = torch.randn(3, generator=g), torch.rand(3, generator=g) + 0.5
    eps = 1e-5

    def call(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if form == "no_training":
            return torch.ops.aten._native_batch_norm_legit_no_training(*args, 0.1, eps)
        return getattr(torch.ops.aten, form)(*args, False, 0.1, eps)

    want = call(x, None, None, mean, var)
    got = call(x.to(DEVICE), None, None, mean.to(DEVICE), var.to(DEVICE))
    assert_bitwise_equal(got[0], want[0])
    assert want[1].shape == (0,)  # the CPU's
    assert_bitwise_equal(got[1], mean)
    assert_bitwise_equal(got[2], torch.reciprocal(torch.sqrt(var + eps)))
