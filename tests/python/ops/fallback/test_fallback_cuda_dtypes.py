"""Where CUDA serves a dtype the CPU kernel refuses, infini gives CUDA's answer (issue 30, item 8).

An operator without an infini kernel runs the CPU's kernel in the CPU
fallback, and some CPU kernels refuse dtypes CUDA's serve: ``torch.histc``
on integers (which Mixtral's and Qwen3-MoE's grouped experts call on every
device but the CPU), complex32 arithmetic, float16/bfloat16 3-d average
pooling, ... infini is a device: it owes the caller CUDA's answer.

Every (OpInfo, dtype) of PyTorch's op_db whose dtype ``supported_dtypes('cuda')``
lists and ``supported_dtypes('cpu')`` does not is checked on its first samples
against CUDA's answer computed on the CPU by stock PyTorch (never by this
project's code):

* the CPU's own result where its kernel runs the sample after all (op_db
  declares some CUDA-only dtypes the CPU serves);
* otherwise the same function in the dtype CUDA's kernel computes in (its
  "opmath": float32 for float16/bfloat16, complex64 for complex32, int64 for
  bool), every result cast to the dtype CUDA returns (which PyTorch's meta
  functions give: angle of complex32 is float16, trace of bool is int64);
* ``histc`` of integers: CUDA's integer algorithm (SummaryOps.cu), written
  out with integer tensor operations;
* ``nansum``/``nanmean`` of complex numbers: CUDA's NanSumOps, where an
  element with a NaN real or imaginary part counts as zero.

Results are compared bit for bit where the recipe is exact (one rounding to
the result dtype, the CPU's kernel in the wider dtype), with tolerances where
CUDA's arithmetic is only approximated (its reduction order for nansum, cuFFT
in half precision: PyTorch's own complex-half FFT tolerance). Backward runs
for the floating dtypes CUDA differentiates in, against the CPU's gradients
where it has them, else those of the widened computation
(``HALF_BACKWARD_TOLERANCE``: CUDA rounds every intermediate of a backward
formula, the oracle once).

What the CPU refuses today, by OpInfo (torch 2.13): histc (5 integer dtypes),
abs/softsign/trace (bool), 24 complex32 operators (elementwise, sum, prod,
trace, angle, lerp, pow, div, logaddexp, FFTs), nansum/nanmean (complex),
avg_pool3d, _upsample_bilinear2d_aa, multi_margin_loss,
multilabel_margin_loss (float16, bfloat16), and the float16 FFTs, which
PyTorch's composite refuses on any device but CUDA before an ATen kernel runs
(serving those takes infini kernels for the ``fft_*`` composites).
"""

from __future__ import annotations

import copy
import itertools
import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal
from op_coverage import load_op_db, opinfo_id
from op_db_engine import REFUSALS, Mover
from op_helpers import runs_cpu_kernels
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = torch.device("infini", 0)

# Samples per (OpInfo, dtype), forward; backward takes the first BACKWARD_SAMPLES.
MAX_SAMPLES = 3
BACKWARD_SAMPLES = 2

# The dtype CUDA's kernels compute a narrow dtype in (at::opmath_type /
# acc_type): the oracle computes there and rounds once.
WIDER = {
    torch.float16: torch.float32,  # (any other dtype: itself)
    torch.bfloat16: torch.float32,
    torch.complex32: torch.complex64,
    torch.bool: torch.int64,
}

# CUDA-only pairs the fallback cannot serve, and why (each named, none silent).
OUT_OF_REACH = {
    "torch.ops.aten._flash_attention_forward": "no CPU kernel at all (a CUDA-only operator)",
    "torch.ops.aten._efficient_attention_forward": "no CPU kernel at all (a CUDA-only operator)",
    "to_sparse": "sparse tensors: infini tensors are strided (README)",
    "nn.functional.rrelu": (
        "the float16 samples the CPU refuses are training=True ones, which draw random "
        "numbers: refused on infini by design (README, 'Random numbers')"
    ),
}

# (OpInfo name prefix, dtype) pairs refused before any infini code runs, and why.
REFUSED_UPSTREAM = {
    ("fft.", torch.float16): (
        "PyTorch's fft composites take float16 on CUDA and meta tensors only "
        "(SpectralOps.cpp, promote_type_fft: 'Unsupported dtype Half'), before an ATen "
        "kernel runs: serving it takes infini kernels for the fft_* composites"
    ),
}


def _refused_upstream(opinfo: Any, dtype: torch.dtype) -> bool:
    return any(opinfo.name.startswith(p) and dtype == d for p, d in REFUSED_UPSTREAM)


# Gradients through a backward formula: CUDA rounds each intermediate of the
# formula (tanh's 1 - y*y, ...) to the half-precision dtype, the widened
# oracle rounds once at the end; they differ by a few ulps of the
# intermediates (up to 2.5e-3 seen for complex32 tan), and relatively more
# where the formula cancels. (rtol, atol) by dtype; others: torch's defaults.
HALF_BACKWARD_TOLERANCE = {torch.complex32: (1e-2, 5e-3), torch.float16: (1e-2, 5e-3)}

# Where CUDA's arithmetic is only approximated on the CPU: (rtol, atol).
# PyTorch's own tolerance for complex-half FFTs against a complex64 reference
# (op_db: fft.* TestCommon.test_complex_half_reference_testing).
FFT_TOLERANCE = (0.04, 0.04)


@pytest.fixture(autouse=True)
def _fallback_silent() -> Iterator[None]:
    with torch_infini.cpu_fallback.allowed("silent"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
        yield


def first_samples(
    opinfo: Any, dtype: torch.dtype, count: int, requires_grad: bool = False
) -> list[Any]:
    """The OpInfo's first ``count`` CPU samples, from a fixed seed.

    Straight from ``sample_inputs_func``: ``OpInfo.sample_inputs`` walks the
    whole call stack for PyTorch's own test names (a tenth of a second a call).
    """
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        samples = opinfo.sample_inputs_func(opinfo, "cpu", dtype, requires_grad)
        return list(itertools.islice(iter(samples), count))


def cuda_only_pairs(backward: bool = False) -> list[tuple[Any, torch.dtype]]:
    """(OpInfo, dtype) CUDA supports and the CPU does not: forward, or (``backward``) either."""
    pairs = []
    for opinfo in load_op_db():
        extra = set(opinfo.supported_dtypes("cuda")) - set(opinfo.supported_dtypes("cpu"))
        if backward and opinfo.supports_autograd:
            cuda, cpu = (set(opinfo.supported_backward_dtypes(d)) for d in ("cuda", "cpu"))
            extra |= cuda - cpu  # sgn of complex32: forward on the CPU, backward on CUDA only
        pairs.extend((opinfo, dtype) for dtype in sorted(extra, key=str))
    return pairs


def _params(backward: bool = False) -> list[Any]:
    params = []
    for opinfo, dtype in cuda_only_pairs(backward):
        if opinfo.name in OUT_OF_REACH or _refused_upstream(opinfo, dtype):
            continue
        if backward and not (
            opinfo.supports_autograd
            and (dtype.is_floating_point or dtype.is_complex)
            and dtype in set(opinfo.supported_backward_dtypes("cuda"))
        ):
            continue
        name = str(dtype).removeprefix("torch.")
        params.append(pytest.param(opinfo, dtype, id=f"{opinfo_id(opinfo)}-{name}"))
    return params


# ---------------------------------------------------------------- CUDA's answers, on the CPU


def cuda_integer_histc(
    x: torch.Tensor,
    bins: int = 100,
    min: float = 0,
    max: float = 0,  # noqa: A002
) -> torch.Tensor:
    """``torch.histc`` of an integer tensor as CUDA computes it (SummaryOps.cu, _histc_cuda).

    The bounds are ``Scalar.to<int64_t>()`` (truncated toward zero) narrowed to
    the input's dtype; equal bounds take the data's range, still equal ones
    widen by one; an element v with min <= v <= max goes to bin
    ``(v - min) * bins / (max - min)`` in int64 integer division (bins - 1 for
    v == max); counts are kept in the input's dtype (they wrap).
    """
    as_input = lambda v: torch.tensor(int(v)).to(x.dtype).item()  # noqa: E731
    lo, hi = as_input(min), as_input(max)
    if int(min) == int(max) and x.numel() > 0:
        lo, hi = int(x.min()), int(x.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    v = x.reshape(-1).to(torch.int64)
    v = v[(v >= lo) & (v <= hi)]
    which = torch.div((v - lo) * bins, hi - lo, rounding_mode="floor")
    which = torch.where(which == bins, bins - 1, which)
    return torch.bincount(which, minlength=bins).to(x.dtype)


def cuda_nansum(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """CUDA's nansum: an element whose real or imaginary part is NaN adds zero."""
    wide = x.to(torch.complex64) if x.dtype == torch.complex32 else x
    result = torch.sum(
        torch.where(torch.isnan(wide), torch.zeros_like(wide), wide), *args, **kwargs
    )
    return result.to(x.dtype) if x.dtype == torch.complex32 else result


def cuda_nanmean(
    x: torch.Tensor, dim: Any = None, keepdim: bool = False, **kwargs: Any
) -> torch.Tensor:
    """nanmean is nansum divided by the count of non-NaN elements (a composite, as on CUDA).

    complex32: the sum is rounded to complex32, the division computed in complex64 and
    rounded again, as CUDA's div does (opmath).
    """
    count = torch.logical_not(torch.isnan(x)).sum(dim=dim, keepdim=keepdim)
    total = cuda_nansum(x, dim=dim, keepdim=keepdim, **kwargs)
    if total.dtype == torch.complex32:
        return (total.to(torch.complex64) / count).to(torch.complex32)
    return total / count


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _result_dtypes(opinfo: Any, sample: Any) -> list[torch.dtype] | None:
    """The dtypes CUDA returns for the sample: PyTorch's meta functions, device-generic."""
    meta = lambda v: v.detach().to("meta") if isinstance(v, torch.Tensor) else v  # noqa: E731
    try:
        result = opinfo.op(
            meta(sample.input), *tree_map(meta, sample.args), **tree_map(meta, sample.kwargs)
        )
    except Exception:
        return None
    return [t.dtype for t in _tensors(result)]


def _widened(value: Any, dtype: torch.dtype, memo: dict[int, torch.Tensor] | None = None) -> Any:
    """``value`` with every tensor of ``dtype`` in ``WIDER[dtype]`` (one copy per tensor)."""
    memo = {} if memo is None else memo

    def widen(v: Any) -> Any:
        if not (isinstance(v, torch.Tensor) and v.dtype == dtype):
            return v
        if id(v) not in memo:
            wide = WIDER.get(dtype, dtype)
            memo[id(v)] = v.detach().to(wide).requires_grad_(v.requires_grad)
        return memo[id(v)]

    return tree_map(widen, value)


def _narrow_dtype(wide: torch.dtype, dtype: torch.dtype) -> torch.dtype:
    """The dtype CUDA returns where the widened computation returns ``wide``."""
    if wide == WIDER.get(dtype, dtype):
        return dtype
    if dtype.is_complex and wide == WIDER.get(dtype, dtype).to_real():  # angle of complex32
        return dtype.to_real()
    return wide


def cuda_answer(opinfo: Any, sample: Any, dtype: torch.dtype) -> tuple[Any, bool]:
    """(CUDA's result for the sample, whether the recipe is exact: compare bit for bit)."""
    call = (sample.input, *sample.args)
    if opinfo.name == "histc":
        return cuda_integer_histc(*call, **sample.kwargs), True
    if opinfo.name in ("nansum", "nanmean"):
        oracle = cuda_nansum if opinfo.name == "nansum" else cuda_nanmean
        return oracle(*call, **sample.kwargs), False
    exact = not opinfo.name.startswith("fft.")
    try:  # op_db's declaration aside, the CPU may serve it: then its answer is CUDA's
        return opinfo.op(*call, **sample.kwargs), exact
    except (NotImplementedError, RuntimeError):
        pass
    dtypes = _result_dtypes(opinfo, sample)
    result = opinfo.op(*_widened(call, dtype), **_widened(dict(sample.kwargs), dtype))
    leaves, spec = tree_flatten(result)
    tensors = [i for i, t in enumerate(leaves) if isinstance(t, torch.Tensor)]
    assert dtypes is not None and len(dtypes) == len(tensors), (
        "no meta function to say CUDA's dtypes"
    )
    for i, want in zip(tensors, dtypes, strict=True):
        leaves[i] = leaves[i].to(want)
    return spec.unflatten(leaves), exact


def _compare(got: Any, expected: Any, exact: bool, fft: bool, where: str) -> None:
    got_t, want_t = _tensors(got), _tensors(expected)
    assert len(got_t) == len(want_t), f"{where}: {len(got_t)} results, CUDA gives {len(want_t)}"
    for g, e in zip(got_t, want_t, strict=True):
        assert g.device == DEVICE, f"{where}: result on {g.device}"
        assert (g.dtype, g.shape) == (e.dtype, e.shape), (
            f"{where}: {g.dtype} {tuple(g.shape)}, CUDA {e.dtype} {tuple(e.shape)}"
        )
        if exact and runs_cpu_kernels():  # the host backend: the CPU's own kernels
            assert_bitwise_equal(g.detach(), e.detach())
        else:
            rtol, atol = FFT_TOLERANCE if fft else (None, None)
            torch.testing.assert_close(
                g.detach().cpu(),
                e.detach(),
                rtol=rtol,
                atol=atol,
                equal_nan=True,
                msg=lambda m: f"{where}: {m}",
            )


def _describe(exc: BaseException) -> str:
    """One line: the first of an error, the whole of a comparison (where and how far off)."""
    if isinstance(exc, AssertionError):
        return " | ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:600]
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"


def _refused_by_design(exc: BaseException) -> bool:
    return isinstance(exc, NotImplementedError) and any(
        re.search(p, str(exc)) for _, _, p in REFUSALS
    )


# ---------------------------------------------------------------- every CUDA-only pair of op_db


def test_every_cuda_only_pair_is_checked_or_named() -> None:
    """Nothing drops out unnoticed: each pair is tested or out of reach for a stated reason."""
    pairs = cuda_only_pairs()
    assert len(pairs) >= 90  # 99 in torch 2.13
    names = {o.name for o, _ in pairs}
    assert {"histc", "trace", "abs", "nansum", "nn.functional.avg_pool3d"} <= names
    assert set(OUT_OF_REACH) <= names | {o.name for o, _ in cuda_only_pairs(backward=True)}
    for backward in (False, True):
        checked = {
            (p.values[0].name, p.values[0].variant_test_name, p.values[1])
            for p in _params(backward)
        }
        for opinfo, dtype in cuda_only_pairs(backward):
            key = (opinfo.name, opinfo.variant_test_name, dtype)
            differentiable = dtype.is_floating_point or dtype.is_complex
            assert (
                key in checked
                or opinfo.name in OUT_OF_REACH
                or _refused_upstream(opinfo, dtype)
                or (backward and not differentiable)
            ), key


@pytest.mark.parametrize(("opinfo", "dtype"), _params())
def test_cuda_only_dtype_gives_cudas_answer(opinfo: Any, dtype: torch.dtype) -> None:
    failures = []
    for index, sample in enumerate(first_samples(opinfo, dtype, MAX_SAMPLES)):
        where = f"{opinfo_id(opinfo)} {dtype} sample {index}"
        expected, exact = cuda_answer(opinfo, sample, dtype)
        mover = Mover(DEVICE)
        args = mover.value((sample.input, *sample.args))
        kwargs = mover.value(dict(sample.kwargs))
        try:
            got = opinfo.op(*args, **kwargs)
            _compare(got, expected, exact, opinfo.name.startswith("fft."), where)
        except Exception as exc:
            if _refused_by_design(exc):
                continue
            failures.append(f"{where}: {_describe(exc)}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("opinfo", "dtype"), _params(backward=True))
def test_cuda_only_dtype_backward(opinfo: Any, dtype: torch.dtype) -> None:
    """Gradients in the dtype CUDA differentiates in, against the widened computation's."""
    failures = []
    for index, sample in enumerate(
        first_samples(opinfo, dtype, BACKWARD_SAMPLES, requires_grad=True)
    ):
        where = f"{opinfo_id(opinfo)} {dtype} sample {index} backward"
        call = (sample.input, *sample.args)
        g = torch.Generator().manual_seed(index)
        try:  # the CPU differentiates in the dtype after all: its gradients are CUDA's
            leaves = [t for t in _tensors((call, sample.kwargs)) if t.requires_grad]
            outputs = [
                t
                for t in _tensors(sample.output_process_fn_grad(opinfo.op(*call, **sample.kwargs)))
                if t.requires_grad
            ]
            narrow = [torch.randn(o.shape, dtype=o.dtype, generator=g) for o in outputs]
            expected = torch.autograd.grad(outputs, leaves, narrow, allow_unused=True)
        except (NotImplementedError, RuntimeError):  # CUDA's opmath: the widened computation
            g = torch.Generator().manual_seed(index)
            memo: dict[int, torch.Tensor] = {}
            wide_call = _widened(call, dtype, memo)
            wide_kwargs = _widened(dict(sample.kwargs), dtype, memo)
            leaves = [t for t in memo.values() if t.requires_grad]
            reference = {"nansum": cuda_nansum, "nanmean": cuda_nanmean}.get(opinfo.name, opinfo.op)
            wide_result = sample.output_process_fn_grad(reference(*wide_call, **wide_kwargs))
            outputs = [t for t in _tensors(wide_result) if t.requires_grad]
            # output gradients as CUDA's outputs take them: in the outputs' (narrow) dtypes
            narrow = [
                torch.randn(o.shape, dtype=o.dtype, generator=g).to(_narrow_dtype(o.dtype, dtype))
                for o in outputs
            ]
            expected = torch.autograd.grad(
                outputs, leaves, [n.to(o.dtype) for n, o in zip(narrow, outputs, strict=True)],
                allow_unused=True,
            )  # fmt: skip
        if not leaves or not outputs:
            continue
        mover = Mover(DEVICE)
        try:
            args = mover.value(call)
            kwargs = mover.value(dict(sample.kwargs))
            out = [
                t
                for t in _tensors(sample.output_process_fn_grad(opinfo.op(*args, **kwargs)))
                if t.requires_grad
            ]
            got = torch.autograd.grad(
                out, mover.leaves, [n.to(DEVICE) for n in narrow], allow_unused=True
            )
            for k, (gg, ee) in enumerate(zip(got, expected, strict=True)):
                if ee is None:
                    assert gg is None, f"{where}: gradient {k} where CUDA has none"
                    continue
                assert gg is not None, f"{where}: gradient {k} missing"
                rtol, atol = HALF_BACKWARD_TOLERANCE.get(dtype, (None, None))
                torch.testing.assert_close(
                    gg.cpu(), ee.to(gg.dtype), rtol=rtol, atol=atol, equal_nan=True,
                    msg=lambda m, k=k, where=where: f"{where} input {k}: {m}",
                )  # fmt: skip
        except Exception as exc:
            if _refused_by_design(exc):
                continue
            failures.append(f"{where}: {_describe(exc)}")
    assert not failures, "\n".join(failures)


def test_float16_ffts_are_refused_clearly_as_pytorch_refuses_them() -> None:
    """PyTorch's own composite refuses before infini is asked: the error names the dtype."""
    x = torch.randn(8, dtype=torch.float16)
    for fn in (torch.fft.fft, torch.fft.rfft, torch.fft.ifft):
        with pytest.raises(RuntimeError, match="Unsupported dtype Half"):
            fn(_on_infini(x))
    # complex32 reaches the kernels and is served (cuFFT's half precision, widened)
    z = torch.randn(8, dtype=torch.complex64).to(torch.complex32)
    got = torch.fft.fft(_on_infini(z))
    assert got.dtype == torch.complex32
    torch.testing.assert_close(
        got.cpu().to(torch.complex64), torch.fft.fft(z.to(torch.complex64)), rtol=0.04, atol=0.04
    )


# ---------------------------------------------------------------- histc of integers


INTEGER_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def _on_infini(x: torch.Tensor) -> torch.Tensor:
    return x.to(DEVICE)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=str)
def test_histc_counts_integers_as_cuda(dtype: torch.dtype) -> None:
    """The experts' ``histc(ids.int(), bins=E, min=0, max=E-1)``: counts in the input dtype."""
    ids = torch.randint(0, 8, (64,), generator=torch.Generator().manual_seed(0)).to(dtype)
    got = torch.histc(_on_infini(ids), bins=8, min=0, max=7)
    assert got.device == DEVICE
    expected = torch.bincount(ids.long(), minlength=8).to(dtype)
    assert_bitwise_equal(got, expected)
    # the same counts as histc of the same values in floating point, cast back
    assert_bitwise_equal(got, torch.histc(ids.double(), bins=8, min=0, max=7).to(dtype))


def test_histc_integer_bounds_are_truncated() -> None:
    """CUDA takes min/max as integers first: [0, 1, 2, 3] over (0.5, 3.5) is bins of [0, 3]."""
    x = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    got = torch.histc(_on_infini(x), bins=3, min=0.5, max=3.5)
    assert_bitwise_equal(got, torch.tensor([1, 1, 2], dtype=torch.int32))
    # not what histc of the values as floats gives: the bounds matter
    assert not torch.equal(torch.histc(x.float(), bins=3, min=0.5, max=3.5).int(), got.cpu())


def test_histc_integer_equal_bounds_take_the_data_range() -> None:
    x = torch.tensor([2, 3, 3, 9, 5], dtype=torch.int64)
    assert_bitwise_equal(torch.histc(_on_infini(x), bins=4), cuda_integer_histc(x, bins=4))
    # range [2, 9]: (v - 2) * 4 // 7 puts 2, 3, 3 in bin 0, 5 in bin 1, 9 in bin 3
    assert_bitwise_equal(torch.histc(_on_infini(x), bins=4), torch.tensor([3, 1, 0, 1]))
    # 0.2 and 0.7 are both 0 as integers: equal bounds, the data's range again
    assert_bitwise_equal(
        torch.histc(_on_infini(x), bins=4, min=0.2, max=0.7), torch.tensor([3, 1, 0, 1])
    )


def test_histc_of_large_int32_values_is_exact() -> None:
    """Values above 2**24: CUDA's integer arithmetic, which a float32 detour gets wrong."""
    top = 99_999_989
    x = torch.randint(
        0, top + 1, (5000,), generator=torch.Generator().manual_seed(1), dtype=torch.int32
    )
    expected = cuda_integer_histc(x, bins=1000, min=0, max=top)
    float32_detour = torch.histc(x.float(), bins=1000, min=0, max=top).int()
    assert not torch.equal(expected, float32_detour)  # the input tells the two apart
    assert_bitwise_equal(torch.histc(_on_infini(x), bins=1000, min=0, max=top), expected)


def test_histc_of_int64_values_beyond_float64_is_exact() -> None:
    """Near 2**60 consecutive integers are not float64 values; CUDA bins them in int64."""
    base = 2**60
    x = base + torch.arange(100, dtype=torch.int64)
    expected = cuda_integer_histc(x, bins=10, min=base, max=base + 99)
    assert_bitwise_equal(expected, torch.full((10,), 10, dtype=torch.int64))
    assert_bitwise_equal(torch.histc(_on_infini(x), bins=10, min=base, max=base + 99), expected)


def test_histc_uint8_counts_wrap_as_cuda() -> None:
    """Counts are accumulated in the input's dtype: 300 zeros count 44 in uint8."""
    x = torch.zeros(300, dtype=torch.uint8)
    got = torch.histc(_on_infini(x), bins=2, min=0, max=3)
    assert_bitwise_equal(got, torch.tensor([300 % 256, 0], dtype=torch.uint8))


def test_histc_integer_out() -> None:
    x = torch.tensor([0, 1, 1, 3, 7], dtype=torch.int32)
    out = torch.full((4,), -1, dtype=torch.int32, device=DEVICE)
    result = torch.histc(_on_infini(x), bins=4, min=0, max=7, out=out)
    assert result.data_ptr() == out.data_ptr()
    assert_bitwise_equal(out, cuda_integer_histc(x, bins=4, min=0, max=7))


# ---------------------------------------------------------------- nansum of complex numbers


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_nansum_skips_elements_with_a_nan_part(dtype: torch.dtype) -> None:
    nan = float("nan")
    x = torch.tensor([1 + 1j, complex(nan, 2), complex(3, nan), 4 + 4j], dtype=dtype)
    assert_bitwise_equal(torch.nansum(_on_infini(x)), torch.tensor(5 + 5j, dtype=dtype))
    assert_bitwise_equal(torch.nanmean(_on_infini(x)), torch.tensor(2.5 + 2.5j, dtype=dtype))
    rows = x.reshape(2, 2)
    assert_bitwise_equal(
        torch.nansum(_on_infini(rows), dim=1), torch.tensor([1 + 1j, 4 + 4j], dtype=dtype)
    )


def test_in_place_and_out_forms_write_their_argument() -> None:
    """The widened computation's result lands in the caller's tensor, in its dtype."""
    z = torch.randn(6, dtype=torch.complex64, generator=torch.Generator().manual_seed(5))
    z = z.to(torch.complex32)
    expected = torch.exp(z.to(torch.complex64)).to(torch.complex32)
    inplace = _on_infini(z)
    ptr = inplace.data_ptr()
    assert inplace.exp_() is inplace
    assert inplace.data_ptr() == ptr and inplace.dtype == torch.complex32
    assert_bitwise_equal(inplace, expected)
    out = torch.empty(0, dtype=torch.complex32, device=DEVICE)
    assert torch.exp(_on_infini(z), out=out) is out
    assert_bitwise_equal(out, expected)
    flags = torch.tensor([True, False, True])
    assert_bitwise_equal(torch.abs(_on_infini(flags)), flags)  # bool stays bool
    assert_bitwise_equal(torch.trace(_on_infini(torch.eye(3, dtype=torch.bool))), torch.tensor(3))
    angle = torch.angle(_on_infini(z))
    assert_bitwise_equal(angle, torch.angle(z.to(torch.complex64)).half())


def test_the_staged_fallback_gives_the_same_answers() -> None:
    """Staged through pinned memory (devices the CPU cannot address), as in place."""
    ids = torch.tensor([0, 3, 3, 1, 7], dtype=torch.int32)
    z = torch.randn(6, dtype=torch.complex64, generator=torch.Generator().manual_seed(3))
    z = z.to(torch.complex32)
    v = torch.randn(1, 2, 4, 4, 4, generator=torch.Generator().manual_seed(4)).half()
    torch_infini._C._set_fallback_staging_forced(True)
    try:
        counts = torch.histc(_on_infini(ids), bins=8, min=0, max=7)
        exp = torch.exp(_on_infini(z))
        pooled = torch.nn.functional.avg_pool3d(_on_infini(v), 2)
    finally:
        torch_infini._C._set_fallback_staging_forced(False)
    assert_bitwise_equal(counts, cuda_integer_histc(ids, bins=8, min=0, max=7))
    assert_bitwise_equal(exp, torch.exp(z.to(torch.complex64)).to(torch.complex32))
    assert_bitwise_equal(pooled, torch.nn.functional.avg_pool3d(v.float(), 2).half())


# ---------------------------------------------------------------- the models of the issue


def _moe_models(kind: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    if kind == "mixtral":
        from transformers import MixtralConfig, MixtralForCausalLM

        config = MixtralConfig(
            vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
            num_experts_per_tok=2, max_position_embeddings=64, pad_token_id=0,
        )  # fmt: skip
        cls: Any = MixtralForCausalLM
    else:
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

        config = Qwen3MoeConfig(
            vocab_size=128, hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            num_experts=4, num_experts_per_tok=2, max_position_embeddings=64, pad_token_id=0,
        )  # fmt: skip
        cls = Qwen3MoeForCausalLM
    torch.manual_seed(0)
    cpu = cls(config)
    return cpu, copy.deepcopy(cpu).to(DEVICE)


@pytest.mark.parametrize("kind", ["mixtral", "qwen3_moe"])
def test_moe_model_forward_and_backward_match_the_cpu(kind: str) -> None:
    """transformers' default grouped experts: ``torch.histc`` of int32 expert ids on infini."""
    cpu, dev = _moe_models(kind)
    assert dev.config._experts_implementation == "grouped_mm"  # the histc path
    ids = torch.randint(1, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    expected = cpu(ids, labels=ids)
    expected.loss.backward()
    got = dev(ids.to(DEVICE), labels=ids.to(DEVICE))
    got.loss.backward()
    assert got.logits.device == DEVICE
    torch.testing.assert_close(got.logits.cpu(), expected.logits)
    torch.testing.assert_close(got.loss.cpu(), expected.loss)
    for (name, p_cpu), (_, p_dev) in zip(
        cpu.named_parameters(), dev.named_parameters(), strict=True
    ):
        assert p_dev.grad is not None, f"no gradient for {name}"
        torch.testing.assert_close(
            p_dev.grad.cpu(), p_cpu.grad, msg=lambda m, name=name: f"{name}: {m}"
        )
