"""Where the CPU fallback's results live, and the structured operators'
direct route.

Where device memory is host memory, a functional fallback call's CPU kernel
allocates its results in device memory (PyTorch's CPU allocator redirected
for that thread, for that call), and the infini results own that memory as
if at::empty had made it: counted by the caching allocator, freed to its
cache, ordered on the current stream. The functional and in-place forms of
structured operators (atan2, atan2_, ...) run the CPU's own kernel directly
instead of a meta function, an allocation and .out. CPU results are the
oracle, bit for bit.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import assert_bitwise_equal, make_cpu, raises_exactly

# The fixture around each test collects garbage.
pytestmark = pytest.mark.usefixtures("only_new_garbage_collected")

fallback = torch_infini.cpu_fallback
DEVICE = torch.device("infini", 0)
HOST_ADDRESSABLE = bool(torch_infini._C._capabilities()["host_addressable"])

in_device_memory = pytest.mark.skipif(
    not HOST_ADDRESSABLE, reason="device memory is not host memory (results are staged)"
)


@pytest.fixture(autouse=True)
def _silent_and_counted() -> Iterator[None]:
    gc.collect()  # earlier tests' tensors must not be freed while one counts memory
    fallback.reset_stats()
    with fallback.allowed("silent"):
        yield


def _pair(shape: tuple[int, ...], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    cpu = make_cpu(shape, torch.float32, seed)
    return cpu, cpu.to(DEVICE)


def _copied() -> dict[str, int]:
    return {name: s.bytes_copied for name, s in fallback.stats().items()}


# ------------------------------------------------ the structured direct route


def test_structured_forms_are_routed_and_native_ones_are_not() -> None:
    routed = set(fallback.routed_operators())
    assert {"aten::atan2", "aten::atan2_", "aten::hypot", "aten::lerp.Scalar"} <= routed
    # operators with an infini kernel (any overload) keep their native path
    natives = {info.name for info in torch_infini.operators()}
    assert "aten::add.Tensor" in natives
    assert not {"aten::add.Tensor", "aten::add_.Tensor", "aten::mul.Tensor", "aten::relu"} & routed


def test_functional_and_in_place_forms_match_the_cpu() -> None:
    (a, ai), (b, bi) = _pair((4, 6)), _pair((4, 6), seed=1)
    assert_bitwise_equal(torch.atan2(ai, bi), torch.atan2(a, b))
    assert_bitwise_equal(torch.lerp(ai, bi, 0.3), torch.lerp(a, b, 0.3))
    view, view_cpu = ai[:, ::2], a[:, ::2]
    version = ai._version
    view.atan2_(bi[:, 1::2])
    view_cpu.atan2_(b[:, 1::2])
    assert ai._version == version + 1
    assert_bitwise_equal(ai, a)
    assert {"aten::atan2", "aten::lerp.Scalar", "aten::atan2_"} <= set(fallback.stats())


def test_a_cpu_tensor_argument_raises_the_device_error_as_before() -> None:
    ai, b = _pair((5,))[1], make_cpu((5,), torch.float32, 1)
    with raises_exactly(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.atan2(ai, b)
    # a 0-dim CPU tensor is a scalar operand, as for CUDA
    a = ai.cpu()
    assert_bitwise_equal(torch.atan2(ai, torch.tensor(0.5)), torch.atan2(a, torch.tensor(0.5)))


def test_a_python_number_beside_infini_tensors_takes_the_direct_route() -> None:
    """`x / 3`, `grad / n`, `x.div_(n)`: a 0-dim CPU tensor beside infini
    tensors (where CUDA's TensorIterator takes one) does not send the call
    through a meta function, an allocation and .out: the CPU's functional or
    in-place kernel runs once. Values, strides and in-place writes as on the
    CPU; what CUDA refuses still raises, before anything runs."""
    a, ai = _pair((6, 4))
    x, xi = a.t(), ai.t()  # a transposed input: the result's strides follow it
    fallback.reset_stats()
    for fn in (
        lambda t: t / 3.0,
        lambda t: torch.atan2(t, torch.tensor(0.5)),
        lambda t: torch.pow(t, torch.tensor(3.0)),
    ):
        got, want = fn(xi), fn(x)
        assert_bitwise_equal(got, want)
        assert got.stride() == want.stride()
    assert set(fallback.stats()) == {"aten::div.Tensor", "aten::atan2", "aten::pow.Tensor_Tensor"}
    # Gradients through it (DivBackward divides by the number too).
    xg, xig = x.clone().requires_grad_(), xi.clone().requires_grad_()
    (xg / 3.0).square().sum().backward()
    (xig / 3.0).square().sum().backward()
    assert_bitwise_equal(xig.grad, xg.grad)
    assert xig.grad.stride() == xg.grad.stride()

    fallback.reset_stats()
    view, view_cpu = ai[1:, ::2], a[1:, ::2]
    version = ai._version
    view.div_(7.0)
    view_cpu.div_(7.0)
    assert ai._version == version + 1
    assert_bitwise_equal(ai, a)
    assert set(fallback.stats()) == {"aten::div_.Tensor"}

    fallback.reset_stats()
    with raises_exactly(RuntimeError, match="Trying to pass too many CPU scalars"):
        torch.lerp(ai, torch.tensor(0.5), torch.tensor(0.3))
    with raises_exactly(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.tensor(2.0).div_(ai[0, 0])  # an in-place self is an output: never a CPU scalar
    assert fallback.stats() == {}


def test_autograd_through_a_structured_form() -> None:
    (a, ai), (b, bi) = _pair((7,)), _pair((7,), seed=1)
    a.requires_grad_()
    ai.requires_grad_()
    torch.atan2(a, b).pow(2).sum().backward()
    torch.atan2(ai, bi).pow(2).sum().backward()
    assert_bitwise_equal(ai.grad, a.grad)


def test_off_mode_names_the_functional_operator() -> None:
    ai = _pair((3,))[1]
    with fallback.strict():
        with raises_exactly(NotImplementedError, match="'aten::atan2' has no infini kernel"):
            torch.atan2(ai, ai)


# ------------------------------ typed entries of unary and binary forms
#
# Structured functional forms over one or two tensors (atan2, hypot, exp,
# div.Tensor, eq.Tensor, ...) are registered unboxed: a call of plain infini
# tensors on one device that the policy lets run quietly goes to the CPU
# kernel without a stack; every other call takes the boxed route. Whichever
# it takes, a user sees the CPU's values and strides, the policy's warnings
# and errors, and one counted call.

# (name in the fallback's statistics, call, dtypes)
_TYPED_FORMS = [
    ("aten::atan2", torch.atan2, (torch.float32, torch.float64, torch.int32)),
    ("aten::hypot", torch.hypot, (torch.float32, torch.bfloat16)),
    ("aten::xlogy.Tensor", torch.xlogy, (torch.float32, torch.float16)),
    ("aten::eq.Tensor", torch.eq, (torch.float32, torch.int64, torch.bool)),
    ("aten::pow.Tensor_Tensor", torch.pow, (torch.float64, torch.int16)),
    ("aten::bitwise_xor.Tensor", torch.bitwise_xor, (torch.int8, torch.bool)),
    ("aten::div.Tensor", torch.div, (torch.float32, torch.int32)),
    ("aten::erfinv", torch.erfinv, (torch.float32, torch.float64)),
    ("aten::exp", torch.exp, (torch.float32, torch.complex64)),
    ("aten::sgn", torch.sgn, (torch.complex128, torch.int32)),
    ("aten::all", torch.all, (torch.float32, torch.bool)),
]


def _layouts(t: torch.Tensor) -> dict[str, torch.Tensor]:
    """A tensor of shape (6, 4) in the layouts a caller may pass, made by the
    same calls on either device (`.to()` would make the strided ones dense)."""
    return {
        "contiguous": t,
        "transposed": t.t().contiguous().t(),
        "offset view": torch.cat([t, t]).view(12, 4)[3:9],
        "strided": torch.stack([t, t], dim=-1)[..., 1],
        "expanded": t[:1].expand(6, 4),
    }


def _typed_inputs(
    dtype: torch.dtype, seed: int
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The layouts on the CPU and on infini, over the same values."""
    cpu = make_cpu((6, 4), dtype, seed)
    if dtype.is_floating_point:
        cpu = cpu.clamp(-0.9, 0.9)  # inside erfinv's domain
    return _layouts(cpu), _layouts(cpu.to(DEVICE))


@pytest.mark.parametrize(
    ("name", "op", "dtype"),
    [pytest.param(n, op, d, id=f"{n}-{d}") for n, op, dtypes in _TYPED_FORMS for d in dtypes],
)
def test_unary_and_binary_forms_match_the_cpu_in_every_layout(
    name: str, op: Callable[..., torch.Tensor], dtype: torch.dtype
) -> None:
    binary = op.__name__ not in {"erfinv", "exp", "sgn", "all"}
    (firsts, firsts_i), (seconds, seconds_i) = _typed_inputs(dtype, 0), _typed_inputs(dtype, 1)
    for layout, a in firsts.items():
        ai = firsts_i[layout]
        if binary:
            cases = [
                ((a, seconds[layout]), (ai, seconds_i[layout])),
                ((a, a), (ai, ai)),  # one storage twice
                ((a, seconds["contiguous"][:1]), (ai, seconds_i["contiguous"][:1])),  # broadcast
            ]
        else:
            cases = [((a,), (ai,))]
        for args, args_i in cases:
            assert [t.stride() for t in args_i] == [t.stride() for t in args]
            want, got = op(*args), op(*args_i)
            assert_bitwise_equal(got, want)
            assert got.stride() == want.stride(), (layout, got.stride(), want.stride())
    # A 0-dim infini operand and an empty one, as the CPU's.
    scalar, empty = make_cpu((), dtype, 2), make_cpu((0, 4), dtype, 3)
    for args in [(scalar, scalar), (empty, empty[:, :1])] if binary else [(scalar,), (empty,)]:
        assert_bitwise_equal(op(*(t.to(DEVICE) for t in args)), op(*args))
    assert name in fallback.stats(), "served by the fallback's structured form"


def test_every_typed_call_is_counted_once_and_copies_nothing() -> None:
    (a, ai), (b, bi) = _pair((5,)), _pair((5,), seed=1)
    fallback.reset_stats()
    for _ in range(7):
        assert_bitwise_equal(torch.atan2(ai, bi), torch.atan2(a, b))
    assert_bitwise_equal(torch.exp(ai), torch.exp(a))
    stats = fallback.stats()
    assert {name: s.calls for name, s in stats.items()} == {"aten::atan2": 7, "aten::exp": 1}
    if HOST_ADDRESSABLE:
        assert all(s.bytes_copied == 0 for s in stats.values())
    else:  # staged through pinned memory
        assert stats["aten::atan2"].bytes_copied > 0


def test_the_policy_holds_after_quiet_typed_calls() -> None:
    """Calls that ran quietly never make the next call skip the policy:
    strict mode and the deny list refuse it, an allow list admits it."""
    ai = _pair((3,))[1]
    for _ in range(3):
        torch.hypot(ai, ai)
    with fallback.strict():
        with raises_exactly(NotImplementedError, match="'aten::hypot' has no infini kernel"):
            torch.hypot(ai, ai)
    try:
        fallback.deny(["aten::hypot"])
        with raises_exactly(NotImplementedError, match="'aten::hypot' has no infini kernel"):
            torch.hypot(ai, ai)
        fallback.deny([])
        fallback.allow(["aten::hypot"])
        with fallback.strict():
            assert_bitwise_equal(torch.hypot(ai, ai), torch.hypot(ai.cpu(), ai.cpu()))
    finally:
        fallback.deny([])
        fallback.allow([])


def test_warn_mode_warns_once_even_after_silent_calls() -> None:
    """The first call in warn mode warns, though the operator ran silently
    before; later calls do not (a fresh process: warnings are per process)."""
    script = textwrap.dedent(
        """
        import warnings, torch, torch_infini
        fallback = torch_infini.cpu_fallback
        x = torch.rand(4, device="infini")
        fallback.set_mode("silent")
        for _ in range(3):
            torch.special.i1(x)
        fallback.set_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                torch.special.i1(x)
        print(sum("'aten::special_i1' ran on the CPU" in str(w.message) for w in caught))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split()[-1] == "1", done.stdout + done.stderr


def test_conjugate_and_negative_views_and_numbers_as_on_the_cpu() -> None:
    """Arguments with a conjugate or negative bit (PyTorch resolves them
    before a backend's kernel of these operators) and Python numbers (the
    boxed route takes them) give the CPU's results."""
    z = make_cpu((4, 3), torch.complex64, 0)
    zi = z.to(DEVICE)
    assert_bitwise_equal(torch.exp(zi.conj()), torch.exp(z.conj()))
    assert_bitwise_equal(torch.sgn(zi.conj()), torch.sgn(z.conj()))
    y, yi = _pair((4, 3), seed=1)
    negative, negative_i = z.conj().imag, zi.conj().imag
    assert negative_i.is_neg()
    assert_bitwise_equal(torch.atan2(negative_i, yi), torch.atan2(negative, y))
    assert_bitwise_equal(torch.atan2(yi, negative_i), torch.atan2(y, negative))
    assert_bitwise_equal(torch.hypot(yi, torch.tensor(2.0)), torch.hypot(y, torch.tensor(2.0)))


def test_gradients_through_typed_forms_match_the_cpu() -> None:
    (a, ai), (b, bi) = _pair((5, 3)), _pair((5, 3), seed=1)
    grads = []
    for x, y in ((a, b), (ai, bi)):
        x, y = x.t().requires_grad_(), y.t().requires_grad_()
        (torch.hypot(x, y) * torch.xlogy(x.abs() + 1, y.exp())).sum().backward()
        grads.append((x.grad, y.grad))
    for got, want in zip(grads[1], grads[0], strict=True):
        assert_bitwise_equal(got, want)
        assert got.stride() == want.stride()


@pytest.mark.requires_two_devices
def test_operands_on_two_infini_devices_raise_cudas_error() -> None:
    x = torch.rand(3, device=DEVICE)
    with raises_exactly(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.atan2(x, torch.rand(3, device="infini:1"))
    assert torch.atan2(x.to("infini:1"), x.to("infini:1")).device == torch.device("infini", 1)


# ---------------------------------------------- results in device memory


@in_device_memory
def test_results_are_device_allocations_counted_and_freed() -> None:
    torch.infini.synchronize()
    base = torch.infini.memory_allocated()
    (a, ai), (b, bi) = _pair((256,)), _pair((256,), seed=1)
    inputs = torch.infini.memory_allocated() - base
    result = torch.atan2(ai, bi)
    assert result.device == DEVICE and result.untyped_storage().nbytes() == 256 * 4
    assert torch.infini.memory_allocated() - base == inputs + 1024  # a 512-byte multiple
    # in the allocator's snapshot: an active block of its own, as at::empty's
    (block,) = [
        blk
        for seg in torch.infini.memory_snapshot()
        for blk in seg["blocks"]
        if blk["address"] == result.data_ptr()
    ]
    assert block["state"] == "active_allocated" and block["size"] == 1024
    del result
    assert torch.infini.memory_allocated() - base == inputs
    assert _copied() == {"aten::atan2": 0}
    assert_bitwise_equal(torch.atan2(ai, bi), torch.atan2(a, b))


@in_device_memory
def test_results_of_every_shape_and_kind_are_not_copied() -> None:
    x_cpu, x = _pair((6, 5))
    eye_cpu = 5 * torch.eye(5)
    eye = eye_cpu.to(DEVICE)
    cases = [
        lambda t: torch.nonzero(t > 0),  # resized as it is filled
        lambda t: t.sort(dim=1),  # two results
        lambda t: torch.cummax(t, 0),
        lambda t: t.t().contiguous().cumsum(0),
        lambda t: torch.unique(t.round(), return_counts=True),
        lambda t: torch.linalg.inv(t[:5] + (eye if t.device == DEVICE else eye_cpu)),
        lambda t: t[:0].atan(),  # empty
        lambda t: torch.atan2(t.sum(), t.mean()),  # 0-dim
    ]
    for run in cases:
        got, want = run(x), run(x_cpu)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want, strict=True):
            assert g.device == DEVICE
            assert_bitwise_equal(g, w)
    assert all(n == 0 for n in _copied().values()), _copied()


@in_device_memory
def test_raw_cpu_allocations_inside_a_kernel_are_served() -> None:
    """oneDNN takes scratch memory with raw_allocate() and frees it with
    raw_deleter(): inside a fallback call that memory is device memory, and
    returns to the device cache."""
    # A transposed convolution: the forward of the others is a seam kernel.
    x, w = make_cpu((2, 3, 9, 9), torch.float32), make_cpu((3, 4, 3, 3), torch.float32, 1)
    torch.infini.synchronize()
    base = torch.infini.memory_allocated()
    xi, wi = x.to(DEVICE), w.to(DEVICE)
    inputs = torch.infini.memory_allocated() - base
    torch_infini.cpu_fallback.reset_stats()
    y = F.conv_transpose2d(xi, wi)
    assert "aten::convolution" in torch_infini.cpu_fallback.stats()
    assert_bitwise_equal(y, F.conv_transpose2d(x, w))
    del y
    assert torch.infini.memory_allocated() - base == inputs


@in_device_memory
def test_cpu_tensors_elsewhere_use_cpu_memory() -> None:
    """The redirect is per thread and per call: CPU work outside a fallback
    call (here and on another thread meanwhile) never takes device memory."""
    ai = _pair((1000,))[1]
    stop = threading.Event()
    allocated: list[int] = []

    def cpu_work() -> None:
        while not stop.is_set():
            t = torch.randn(4096)
            allocated.append(t.untyped_storage().nbytes())

    thread = threading.Thread(target=cpu_work)
    thread.start()
    try:
        torch.infini.synchronize()
        base = torch.infini.memory_allocated()
        for _ in range(200):
            torch.atan2(ai, ai)
            cpu = torch.empty(1 << 16)
            assert torch.infini.memory_allocated() == base
            del cpu
    finally:
        stop.set()
        thread.join()
    assert allocated


@in_device_memory
def test_threads_running_fallback_calls_share_the_cache_correctly() -> None:
    inputs = [_pair((333,), seed=s) for s in range(4)]
    torch.infini.synchronize()
    base = torch.infini.memory_allocated()
    errors: list[BaseException] = []

    def work(cpu: torch.Tensor, dev: torch.Tensor) -> None:
        try:
            for _ in range(50):
                assert_bitwise_equal(torch.hypot(dev, dev), torch.hypot(cpu, cpu))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=pair) for pair in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    torch.infini.synchronize()
    assert torch.infini.memory_allocated() == base
    assert fallback.stats()["aten::hypot"].calls == 200


@in_device_memory
def test_result_belongs_to_the_current_stream() -> None:
    """The result's block is the current stream's, as at::empty's would be:
    freed, it is reused on that stream and not on another."""
    (a, ai) = _pair((4096,))
    side = torch.infini.Stream()
    with torch.infini.stream(side):
        r = torch.atan2(ai, ai)
    assert_bitwise_equal(r, torch.atan2(a, a))
    ptr = r.data_ptr()
    del r
    on_default = torch.empty(4096, device=DEVICE)
    assert on_default.data_ptr() != ptr
    with torch.infini.stream(side):
        again = torch.empty(4096, device=DEVICE)
    assert again.data_ptr() == ptr


def test_inference_mode_results_are_inference_tensors() -> None:
    (a, ai) = _pair((3,))
    with torch.inference_mode():
        r = torch.atan2(ai, ai)
    assert r.is_inference() and r.device == DEVICE
    assert_bitwise_equal(r, torch.atan2(a, a))
