"""Random operators on infini: drawn from the device's Philox generator.

infini's numbers are not the CPU's (another generator), so the oracles are:

* reproducibility: the same seed or generator state gives the same bits, on
  any memory layout, thread count or stream mode (the numbering rule:
  element k of the output, in logical row-major order, comes from 32-bit
  lanes [k*w, (k+1)*w) of the Philox stream (seed, offset); w = 2 for
  float64 results of continuous distributions and integer ranges above
  2**32, else 1);
* statistics: test_random_distributions.py;
* the CPU's formula applied to infini's own draw (the dropout mask, the
  standard normal sample), bit for bit, and the CPU's gradients;
* the CPU's error types and messages for bad arguments.

The generator API itself (seeding, states, torch.Generator) is test_random.py's.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import (
    assert_bitwise_equal,
    describe,
    fallback_off,
    raises_exactly,
    requires_two_devices,
    run_python,
)
from op_helpers import make_cpu
from torch.utils.checkpoint import checkpoint

DEVICE = torch.device("infini", 0)

Draw = Callable[[torch.Generator | None], object]


def _empty(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=DEVICE)


def _on_device(t: torch.Tensor) -> torch.Tensor:
    return t.to(DEVICE)


def _probs(n: int = 1000) -> torch.Tensor:
    """Probabilities in [0, 1], both ends included."""
    return _on_device(torch.linspace(0, 1, n))


def _weights(rows: int = 64, cols: int = 10) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    return _on_device(torch.rand(rows, cols, generator=gen) + 0.05)


def _x(n: int = 1000, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return _on_device(make_cpu((n,), dtype, seed=4))


def _std(n: int = 1000) -> torch.Tensor:
    return _on_device(make_cpu((n,), torch.float32, seed=5).abs())


# ---------------------------------------------------------------- the operators

# Every random operator infini implements, through the call a user makes,
# with a generator argument (None: the device's default generator).
WITH_GENERATOR: dict[str, Draw] = {
    "uniform_ float32": lambda g: _empty(64, 33).uniform_(-2, 3, generator=g),
    "uniform_ float16": lambda g: _empty(1001, dtype=torch.float16).uniform_(generator=g),
    "uniform_ bfloat16": lambda g: _empty(1001, dtype=torch.bfloat16).uniform_(1, 2, generator=g),
    "uniform_ float64": lambda g: _empty(1001, dtype=torch.float64).uniform_(generator=g),
    "normal_ float32": lambda g: _empty(1001).normal_(1.5, 2.0, generator=g),
    "normal_ float16": lambda g: _empty(1001, dtype=torch.float16).normal_(generator=g),
    "normal_ bfloat16": lambda g: _empty(1001, dtype=torch.bfloat16).normal_(generator=g),
    "normal_ float64": lambda g: _empty(1001, dtype=torch.float64).normal_(-1, 3, generator=g),
    "normal(Tensor, float)": lambda g: torch.normal(_x(), 0.5, generator=g),
    "normal(float, Tensor)": lambda g: torch.normal(0.5, _std(), generator=g),
    "normal(Tensor, Tensor)": lambda g: torch.normal(_x().reshape(10, 100), _std(100), generator=g),
    "normal(float, float, size)": lambda g: torch.normal(
        2.0, 3.0, (17, 9), generator=g, device=DEVICE
    ),
    "log_normal_ float32": lambda g: _empty(1000).log_normal_(0.5, 0.75, generator=g),
    "log_normal_ float64": lambda g: _empty(1000, dtype=torch.float64).log_normal_(generator=g),
    "exponential_ float32": lambda g: _empty(1000).exponential_(2.5, generator=g),
    "exponential_ float16": lambda g: _empty(1000, dtype=torch.float16).exponential_(generator=g),
    "exponential_ float64": lambda g: _empty(1000, dtype=torch.float64).exponential_(generator=g),
    "geometric_ float32": lambda g: _empty(1000).geometric_(0.3, generator=g),
    "geometric_ int64": lambda g: _empty(1000, dtype=torch.int64).geometric_(0.05, generator=g),
    "geometric_ uint8": lambda g: _empty(1000, dtype=torch.uint8).geometric_(0.5, generator=g),
    "cauchy_ float32": lambda g: _empty(1000).cauchy_(1.0, 2.0, generator=g),
    "cauchy_ bfloat16": lambda g: _empty(1000, dtype=torch.bfloat16).cauchy_(generator=g),
    "cauchy_ float64": lambda g: _empty(1000, dtype=torch.float64).cauchy_(generator=g),
    **{
        f"random_() {str(dtype).removeprefix('torch.')}": (
            lambda g, dtype=dtype: _empty(1000, dtype=dtype).random_(generator=g)
        )
        for dtype in (
            torch.int64,
            torch.int32,
            torch.int16,
            torch.int8,
            torch.uint8,
            torch.bool,
            torch.float16,
            torch.bfloat16,
            torch.float32,
            torch.float64,
        )
    },
    "random_(to) int16": lambda g: _empty(1000, dtype=torch.int16).random_(100, generator=g),
    "random_(from, to) int8": lambda g: _empty(1000, dtype=torch.int8).random_(
        -100, 100, generator=g
    ),
    "random_(from, to) int64 > 2**32": lambda g: _empty(1000, dtype=torch.int64).random_(
        -(2**40), 2**40, generator=g
    ),
    "random_(from, to) float64": lambda g: _empty(1000, dtype=torch.float64).random_(
        -1000, 1000, generator=g
    ),
    "random_(int64 min, None)": lambda g: _empty(1000, dtype=torch.int64).random_(
        -(2**63), None, generator=g
    ),
    "bernoulli_(float) float32": lambda g: _empty(1000).bernoulli_(0.3, generator=g),
    "bernoulli_(float) bool": lambda g: _empty(1000, dtype=torch.bool).bernoulli_(0.5, generator=g),
    "bernoulli_(Tensor) float16": lambda g: _empty(1000, dtype=torch.float16).bernoulli_(
        _probs(), generator=g
    ),
    "bernoulli(Tensor)": lambda g: torch.bernoulli(_probs(), generator=g),
    "bernoulli(Tensor, float)": lambda g: torch.bernoulli(_empty(1000), 0.25, generator=g),
    "rand": lambda g: torch.rand(50, 21, device=DEVICE, generator=g),
    "randn float64": lambda g: torch.randn(1001, dtype=torch.float64, device=DEVICE, generator=g),
    "randint": lambda g: torch.randint(-5, 5, (1000,), device=DEVICE, generator=g),
    "rand_like": lambda g: torch.rand_like(_x(), generator=g),
    "randn_like": lambda g: torch.randn_like(_x(dtype=torch.bfloat16), generator=g),
    "randint_like": lambda g: torch.randint_like(_x(), 0, 7, generator=g),
    "randperm int64": lambda g: torch.randperm(1000, device=DEVICE, generator=g),
    "randperm float32": lambda g: torch.randperm(
        1000, dtype=torch.float32, device=DEVICE, generator=g
    ),
    "multinomial": lambda g: torch.multinomial(_weights(), 6, generator=g),
    "multinomial 1 sample": lambda g: torch.multinomial(_weights(), 1, True, generator=g),
    "multinomial with replacement": lambda g: torch.multinomial(
        _weights(), 50, replacement=True, generator=g
    ),
    "multinomial 1-D": lambda g: torch.multinomial(_weights(1, 1000)[0], 300, generator=g),
    "nn.init.kaiming_uniform_": lambda g: torch.nn.init.kaiming_uniform_(
        _empty(64, 32), generator=g
    ),
    "nn.init.xavier_normal_": lambda g: torch.nn.init.xavier_normal_(_empty(64, 32), generator=g),
    "nn.init.trunc_normal_": lambda g: torch.nn.init.trunc_normal_(_empty(64, 32), generator=g),
}

# Those that always take the device's default generator.
DEFAULT_GENERATOR: dict[str, Callable[[], object]] = {
    "native_dropout float32": lambda: torch.native_dropout(_x(), 0.4, True),
    "native_dropout bfloat16": lambda: torch.native_dropout(_x(dtype=torch.bfloat16), 0.5, True),
    "F.dropout float16": lambda: F.dropout(_x(dtype=torch.float16), 0.25, training=True),
    "F.dropout float64": lambda: F.dropout(_x(dtype=torch.float64), 0.6, training=True),
    "F.dropout2d": lambda: F.dropout2d(_x().reshape(2, 10, 10, 5), 0.5, training=True),
    "nn.Dropout": lambda: torch.nn.Dropout(0.1).train()(_x()),
}

ALL_DRAWS: dict[str, Callable[[], object]] = {
    **{name: (lambda draw=draw: draw(None)) for name, draw in WITH_GENERATOR.items()},
    **DEFAULT_GENERATOR,
}


def _tensors(result: object) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    assert isinstance(result, tuple)
    return list(result)


def _assert_same_draw(actual: object, expected: object) -> None:
    for a, e in zip(_tensors(actual), _tensors(expected), strict=True):
        assert a.device == DEVICE
        assert_bitwise_equal(a, e.cpu())


def _differs(a: object, b: object) -> bool:
    return any(
        not torch.equal(x.cpu(), y.cpu()) for x, y in zip(_tensors(a), _tensors(b), strict=True)
    )


def _offset() -> int:
    """The default generator's Philox offset (bytes 8..15 of its state)."""
    return int.from_bytes(bytes(torch.infini.get_rng_state()[8:].tolist()), "little")


# ---------------------------------------------------------------- reproducibility


@pytest.mark.parametrize("name", sorted(ALL_DRAWS))
def test_same_seed_same_bits(name: str) -> None:
    draw = ALL_DRAWS[name]
    torch.manual_seed(1234)
    first = draw()
    before = _offset()
    second = draw()
    assert _offset() > before, "the call did not advance the generator"
    assert _differs(first, second), "two consecutive calls drew the same numbers"
    torch.manual_seed(1234)
    _assert_same_draw(draw(), first)
    _assert_same_draw(draw(), second)


def test_state_saved_mid_sequence_replays_the_rest() -> None:
    draws = list(ALL_DRAWS.values())
    torch.manual_seed(77)
    for draw in draws[:10]:
        draw()
    state = torch.infini.get_rng_state()
    rest = [draw() for draw in draws[10:]]
    torch.infini.manual_seed(5)  # anything else
    torch.infini.set_rng_state(state)
    for draw, expected in zip(draws[10:], rest, strict=True):
        _assert_same_draw(draw(), expected)


@pytest.mark.parametrize("name", sorted(WITH_GENERATOR))
def test_explicit_generator(name: str) -> None:
    """A generator seeded alike gives the same numbers as another one, and as
    the default generator seeded alike; it leaves the default untouched."""
    draw = WITH_GENERATOR[name]
    torch.infini.manual_seed(99)
    default_state = torch.infini.get_rng_state()
    g1 = torch.Generator(device="infini").manual_seed(2024)
    g2 = torch.Generator(device="infini").manual_seed(2024)
    a1, b1 = draw(g1), draw(g1)
    a2, b2 = draw(g2), draw(g2)
    assert torch.equal(torch.infini.get_rng_state(), default_state)
    assert torch.equal(g1.get_state(), g2.get_state())
    assert _differs(a1, b1), "the generator did not advance"
    _assert_same_draw(a1, a2)
    _assert_same_draw(b1, b2)
    torch.infini.manual_seed(2024)
    _assert_same_draw(draw(None), a1)


def test_numbering_follows_the_logical_index() -> None:
    """Element k of the output depends only on k: a shorter draw is a prefix of
    a longer one (pairs for Box-Muller normals, 2 lanes for 64-bit results)."""
    cases: list[Callable[[int], torch.Tensor]] = [
        lambda n: _empty(n).uniform_(),
        lambda n: _empty(n, dtype=torch.float64).uniform_(),
        lambda n: _empty(n).normal_(),
        lambda n: _empty(n, dtype=torch.float64).exponential_(),
        lambda n: _empty(n, dtype=torch.int64).random_(-(2**63), None),
        lambda n: _empty(n, dtype=torch.int16).random_(),
        lambda n: _empty(n).bernoulli_(0.5),
    ]
    for case in cases:
        torch.manual_seed(8)
        long = case(3001)
        torch.manual_seed(8)
        short = case(1000)
        assert_bitwise_equal(short, long[:1000].cpu())


@pytest.mark.parametrize(
    "fill",
    [
        lambda t: t.normal_(),
        lambda t: t.uniform_(-1, 1),
        lambda t: t.exponential_(),
        lambda t: t.bernoulli_(0.5),
        lambda t: t.random_(0, 1000),
        lambda t: t.log_normal_(),
    ],
    ids=["normal_", "uniform_", "exponential_", "bernoulli_", "random_", "log_normal_"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_values_do_not_depend_on_the_layout(
    fill: Callable[[torch.Tensor], torch.Tensor], dtype: torch.dtype
) -> None:
    torch.manual_seed(0)
    contiguous = fill(_empty(6, 4, dtype=dtype))
    views = {
        "transposed": _empty(4, 6, dtype=dtype).t(),
        "every other column": _empty(6, 8, dtype=dtype)[:, ::2],
        "offset, transposed": _empty(4, 2, 6, dtype=dtype)[:, 1, :].t(),
    }
    for label, view in views.items():
        assert view.shape == (6, 4) and not view.is_contiguous(), label
        torch.manual_seed(0)
        result = fill(view)
        assert result.data_ptr() == view.data_ptr()
        assert_bitwise_equal(result, contiguous.cpu())


def test_bernoulli_with_strided_probabilities() -> None:
    p_cpu = torch.linspace(0, 1, 24, dtype=torch.float64).reshape(6, 4)
    torch.manual_seed(1)
    expected = torch.bernoulli(_on_device(p_cpu))
    torch.manual_seed(1)
    got = torch.empty(4, 6, device=DEVICE).t().bernoulli_(_on_device(p_cpu.t().contiguous()).t())
    assert_bitwise_equal(got, expected.cpu().float())


def test_values_do_not_depend_on_the_thread_count() -> None:
    big: list[Callable[[], object]] = [
        lambda: _empty(1 << 18).uniform_(),
        lambda: _empty(1 << 17, dtype=torch.float64).normal_(),
        lambda: _empty(1 << 17, dtype=torch.float16).exponential_(),
        lambda: _empty(1 << 17, dtype=torch.int64).random_(-(2**63), None),
        lambda: torch.bernoulli(_on_device(torch.rand(1 << 17))),
        lambda: torch.randint(0, 3, (512, 513), device=DEVICE).t(),
        lambda: torch.native_dropout(_empty(1 << 17).fill_(1), 0.5, True),
        lambda: torch.randperm(1 << 16, device=DEVICE),
        lambda: torch.multinomial(_weights(512, 100), 20),
        lambda: torch.multinomial(_weights(512, 100), 20, True),
    ]
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2, 4):
            torch.set_num_threads(count)
            torch.manual_seed(6)
            results.append([draw() for draw in big])
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        for a, b in zip(other, results[0], strict=True):
            _assert_same_draw(a, b)


_DIGEST_CODE = """
import hashlib, torch, torch_infini

def digest() -> str:
    d = torch.device("infini", 0)
    torch.manual_seed(11)
    parts = [
        torch.rand(100_003, device=d),
        torch.randn(5000, dtype=torch.float64, device=d),
        torch.empty(4096, dtype=torch.int64, device=d).random_(),
        torch.bernoulli(torch.linspace(0, 1, 3000).to(d)),
        torch.randperm(1000, device=d),
        torch.multinomial(torch.arange(1.0, 81.0).reshape(8, 10).to(d), 4),
        torch.native_dropout(torch.ones(1000, device=d), 0.5, True)[1],
    ]
    h = hashlib.sha256()
    for t in parts:
        h.update(t.cpu().numpy().tobytes())
    return h.hexdigest()
"""


def test_values_do_not_depend_on_the_stream_mode() -> None:
    """The same draws in a process whose streams run the other way (host:
    TORCH_INFINI_HOST_ASYNC flipped) and with one thread."""
    namespace: dict[str, object] = {}
    exec(_DIGEST_CODE, namespace)
    here = namespace["digest"]()  # type: ignore[operator]
    flipped = None if os.environ.get("TORCH_INFINI_HOST_ASYNC") == "1" else "1"
    proc = run_python(
        _DIGEST_CODE + "torch.set_num_threads(1)\nprint(digest())",
        env={"TORCH_INFINI_HOST_ASYNC": flipped},
    )
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.strip() == here


@requires_two_devices
def test_devices_draw_independently() -> None:
    d0, d1 = torch.device("infini", 0), torch.device("infini", 1)
    torch.manual_seed(31)
    first = torch.randn(1000, device=d0)
    second = torch.rand(1000, device=d0)
    torch.manual_seed(31)
    assert_bitwise_equal(torch.randn(1000, device=d0), first.cpu())
    # Seeding and drawing on infini:1 leaves infini:0's sequence alone ...
    with torch.infini.device(1):
        torch.infini.manual_seed(5)
    on_one = torch.randn(1000, device=d1)
    torch.empty(1000, device=d1).bernoulli_(0.5)
    torch.multinomial(torch.ones(4, 6, device=d1), 3)
    assert on_one.device == d1
    assert_bitwise_equal(torch.rand(1000, device=d0), second.cpu())
    # ... and the numbers depend on (seed, offset) only, not on the device.
    torch.manual_seed(31)
    assert_bitwise_equal(torch.randn(1000, device=d1), first.cpu())
    g = torch.Generator(device=d1).manual_seed(31)
    assert_bitwise_equal(torch.randn(1000, device=d1, generator=g), first.cpu())
    # only infini:1's default generator moved
    state0, state1 = torch.infini.get_rng_state(0), torch.infini.get_rng_state(1)
    assert torch.equal(state0[:8], state1[:8])
    assert state0[8:].tolist() == [0] * 8 and state1[8:].tolist() != [0] * 8


# ---------------------------------------------------------------- checkpoint


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_checkpoint_replays_dropout(reentrant: bool) -> None:
    w_cpu = make_cpu((16, 16), torch.float32, seed=1)

    def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = F.dropout(x @ w, p=0.5, training=True)
        return F.dropout(h * x, p=0.3, training=True)

    def run(use_checkpoint: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = _on_device(make_cpu((8, 16), torch.float32, seed=2)).requires_grad_()
        w = _on_device(w_cpu).requires_grad_()
        torch.manual_seed(42)
        if use_checkpoint:
            out = checkpoint(block, x, w, use_reentrant=reentrant, preserve_rng_state=True)
        else:
            out = block(x, w)
        out.backward(_on_device(make_cpu(out.shape, torch.float32, seed=3)))
        return out.detach(), x.grad, w.grad

    for got, expected in zip(run(True), run(False), strict=True):
        assert_bitwise_equal(got, expected.cpu())


# ---------------------------------------------------------------- gradients


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str
)
def test_dropout_gradient(dtype: torch.dtype) -> None:
    p = 0.3
    scale = 1 / (1 - p)
    x_cpu = make_cpu((40, 25), dtype, seed=7)
    x_cpu[::3] = 0  # zeros in x: out != 0 is no mask
    g_cpu = make_cpu((40, 25), dtype, seed=8)

    x = _on_device(x_cpu).requires_grad_()
    torch.manual_seed(118)
    out, mask = torch.ops.aten.native_dropout(x, p, True)
    out.backward(_on_device(g_cpu))
    expected_grad = torch.ops.aten.native_dropout_backward(g_cpu, mask.cpu(), scale)
    assert_bitwise_equal(x.grad, expected_grad)

    x2 = _on_device(x_cpu).requires_grad_()
    torch.manual_seed(118)
    out2 = F.dropout(x2, p, training=True)
    out2.backward(_on_device(g_cpu))
    assert_bitwise_equal(out2.detach(), out.detach().cpu())
    assert_bitwise_equal(x2.grad, expected_grad)
    assert_bitwise_equal(
        torch.ops.aten.native_dropout_backward(_on_device(g_cpu), mask, scale), expected_grad
    )


NORMAL_CALLS: dict[str, tuple[Callable[..., torch.Tensor], list[tuple[int, ...]]]] = {
    "normal(Tensor, float)": (lambda mean: torch.normal(mean, 0.5), [(5, 7)]),
    "normal(float, Tensor)": (lambda std: torch.normal(0.5, std.abs() + 0.1), [(5, 7)]),
    "normal(Tensor, Tensor)": (
        lambda mean, std: torch.normal(mean, std.abs() + 0.1),
        [(5, 7), (5, 7)],
    ),
    "normal(Tensor, Tensor) broadcast": (
        lambda mean, std: torch.normal(mean, std.abs() + 0.1),
        [(5, 1), (1, 7)],
    ),
}


@pytest.mark.parametrize("name", sorted(NORMAL_CALLS))
def test_normal_gradients_are_the_cpus(name: str) -> None:
    fn, shapes = NORMAL_CALLS[name]
    grads = {}
    for device in ("cpu", DEVICE):
        leaves = [
            make_cpu(shape, torch.float32, seed=i).to(device).requires_grad_()
            for i, shape in enumerate(shapes)
        ]
        out = fn(*leaves)
        assert out.shape == (5, 7)
        out.backward(make_cpu(out.shape, torch.float32, seed=9).to(device))
        grads[str(device)] = [leaf.grad for leaf in leaves]
    for got, expected in zip(grads[str(DEVICE)], grads["cpu"], strict=True):
        assert got is not None and got.device == DEVICE
        assert_bitwise_equal(got, expected)


def test_normal_tensor_overloads_apply_the_cpus_formula_to_the_draw() -> None:
    """mean + std * z for the standard normal draw z of the output's shape
    (std scales in the draw itself for normal(Tensor, float))."""
    mean_cpu = make_cpu((5, 1), torch.float32, seed=10)
    std_cpu = make_cpu((1, 7), torch.float32, seed=11).abs()
    mean, std = _on_device(mean_cpu), _on_device(std_cpu)
    torch.manual_seed(119)
    z = torch.randn(5, 7, device=DEVICE).cpu()
    torch.manual_seed(119)
    assert_bitwise_equal(torch.normal(mean, std), z * std_cpu + mean_cpu)
    torch.manual_seed(119)
    assert_bitwise_equal(torch.normal(1.5, std.expand(5, 7)), z * std_cpu + 1.5)
    torch.manual_seed(119)
    scaled = torch.empty(5, 7, device=DEVICE).normal_(0, 0.5).cpu()
    torch.manual_seed(119)
    assert_bitwise_equal(torch.normal(mean.expand(5, 7), 0.5), scaled + mean_cpu)
    out = torch.empty(5, 7, device=DEVICE)
    torch.manual_seed(119)
    torch.normal(mean, std, out=out)
    assert_bitwise_equal(out, z * std_cpu + mean_cpu)


IN_PLACE_FILLS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "uniform_": lambda y: y.uniform_(),
    "normal_": lambda y: y.normal_(),
    "log_normal_": lambda y: y.log_normal_(),
    "exponential_": lambda y: y.exponential_(),
    "geometric_": lambda y: y.geometric_(0.5),
    "cauchy_": lambda y: y.cauchy_(),
    "random_()": lambda y: y.random_(),
    "random_(to)": lambda y: y.random_(10),
    "random_(from, to)": lambda y: y.random_(-3, 3),
    "bernoulli_(float)": lambda y: y.bernoulli_(0.5),
    "bernoulli_(Tensor)": lambda y: y.bernoulli_(torch.full_like(y, 0.5)),
}


@pytest.mark.parametrize("name", sorted(IN_PLACE_FILLS))
def test_in_place_fill_of_a_non_leaf_gives_a_zero_gradient(name: str) -> None:
    fill = IN_PLACE_FILLS[name]
    grads = []
    for device in ("cpu", DEVICE):
        x = make_cpu((4, 6), torch.float32, seed=12).to(device).requires_grad_()
        y = x * 1
        fill(y)
        (y * 2).sum().backward()
        grads.append(x.grad)
    assert grads[1] is not None and grads[1].device == DEVICE
    assert_bitwise_equal(grads[1], grads[0])


# ---------------------------------------------------------------- errors


def _raised(call: Callable[[torch.device | str], object], device: torch.device | str) -> Exception:
    with pytest.raises(Exception) as info:  # noqa: B017  (the CPU decides which)
        call(device)
    return info.value


def _zeros(
    *shape: int, device: torch.device | str, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device=device)


def _t(values: list[float], device: torch.device | str) -> torch.Tensor:
    return torch.tensor(values, device=device)


NAN, INF = float("nan"), float("inf")

BAD_ARGUMENTS: dict[str, Callable[[torch.device | str], object]] = {
    "bernoulli_ p=1.5": lambda d: _zeros(4, device=d).bernoulli_(1.5),
    "bernoulli_ p=-0.1": lambda d: _zeros(4, device=d).bernoulli_(-0.1),
    "bernoulli p tensor 1.5": lambda d: torch.bernoulli(_t([0.5, 1.5], d)),
    "bernoulli p tensor nan": lambda d: torch.bernoulli(_t([0.5, NAN], d)),
    "bernoulli_ p tensor 1.5": lambda d: _zeros(2, device=d).bernoulli_(_t([0.5, 1.5], d)),
    "normal_ std<0": lambda d: _zeros(4, device=d).normal_(0, -1),
    "normal(Tensor, float) std<0": lambda d: torch.normal(_zeros(3, device=d), -1.0),
    "normal(float, Tensor) std<0": lambda d: torch.normal(0.0, _t([1, -1, 1], d)),
    "normal(Tensor, Tensor) std<0": lambda d: torch.normal(_zeros(3, device=d), _t([1, -1, 1], d)),
    "normal complex std": lambda d: torch.normal(
        _zeros(3, device=d), torch.ones(3, dtype=torch.complex64, device=d)
    ),
    "uniform_ from>to": lambda d: _zeros(4, device=d).uniform_(2, 1),
    "uniform_ to=inf": lambda d: _zeros(4, device=d).uniform_(0, INF),
    "uniform_ float16 out of range": lambda d: _zeros(4, dtype=torch.float16, device=d).uniform_(
        -1e5, 1e5
    ),
    "random_ from>=to": lambda d: _zeros(4, device=d).random_(5, 3),
    "random_ to out of range": lambda d: _zeros(4, dtype=torch.uint8, device=d).random_(0, 300),
    "random_ bool to=3": lambda d: _zeros(4, dtype=torch.bool, device=d).random_(0, 3),
    "randint low>=high": lambda d: torch.randint(5, 3, (3,), device=d),
    "geometric_ p=0": lambda d: _zeros(4, device=d).geometric_(0),
    "geometric_ p=1": lambda d: _zeros(4, device=d).geometric_(1),
    "exponential_ lambd=0": lambda d: _zeros(4, device=d).exponential_(0),
    "exponential_ lambd=-1": lambda d: _zeros(4, device=d).exponential_(-1),
    "exponential_ int32": lambda d: _zeros(4, dtype=torch.int32, device=d).exponential_(),
    "cauchy_ sigma=0": lambda d: _zeros(4, device=d).cauchy_(0, 0),
    "cauchy_ int64": lambda d: _zeros(4, dtype=torch.int64, device=d).cauchy_(),
    "log_normal_ std=0": lambda d: _zeros(4, device=d).log_normal_(1, 0),
    "multinomial zeros": lambda d: torch.multinomial(_zeros(2, 3, device=d), 1),
    "multinomial zeros, replacement": lambda d: torch.multinomial(_zeros(2, 3, device=d), 2, True),
    "multinomial a zero row": lambda d: torch.multinomial(_t([[1, 1, 1], [0, 0, 0]], d), 2),
    "multinomial too many": lambda d: torch.multinomial(torch.ones(2, 3, device=d), 4),
    **{
        f"multinomial {label}{suffix}": (
            lambda d, v=value, n=n, r=r: torch.multinomial(_t([1.0, v, 1.0], d), n, r)
        )
        for label, value in (("negative", -1.0), ("inf", INF), ("nan", NAN))
        for suffix, n, r in ((", 1 sample", 1, False), ("", 2, False), (", replacement", 2, True))
    },
    "multinomial 3-D": lambda d: torch.multinomial(torch.ones(2, 2, 3, device=d), 1),
    "multinomial 0-D": lambda d: torch.multinomial(torch.tensor(1.0, device=d), 1),
    "multinomial n_sample=0": lambda d: torch.multinomial(torch.ones(2, 3, device=d), 0),
    "multinomial int64": lambda d: torch.multinomial(torch.ones(3, dtype=torch.long, device=d), 1),
    "randperm float16 n=3000": lambda d: torch.randperm(3000, dtype=torch.float16, device=d),
    "randperm n<0": lambda d: torch.randperm(-1, device=d),
    "native_dropout p=1.5": lambda d: torch.native_dropout(torch.ones(4, device=d), 1.5, True),
    "native_dropout int32": lambda d: torch.native_dropout(
        torch.ones(4, dtype=torch.int32, device=d), 0.5, True
    ),
    "F.dropout p=1.5": lambda d: F.dropout(torch.ones(4, device=d), 1.5, True),
    "uniform_ overlapping": lambda d: _zeros(3, device=d).expand(2, 3).uniform_(),
    "normal_ overlapping": lambda d: _zeros(3, device=d).expand(2, 3).normal_(),
}


@pytest.mark.parametrize("name", sorted(BAD_ARGUMENTS))
def test_bad_arguments_raise_the_cpus_error(name: str) -> None:
    call = BAD_ARGUMENTS[name]
    expected = _raised(call, "cpu")
    got = _raised(call, DEVICE)
    assert type(got) is type(expected), f"{type(got).__name__}: {got}"
    assert str(got) == str(expected)


UNSUPPORTED_DTYPES: dict[str, Callable[[torch.device | str], object]] = {
    "random_ uint16": lambda d: _zeros(4, dtype=torch.uint16, device=d).random_(),
    "random_ complex64": lambda d: _zeros(4, dtype=torch.complex64, device=d).random_(),
    "normal_ int32": lambda d: _zeros(4, dtype=torch.int32, device=d).normal_(),
    "uniform_ int32": lambda d: _zeros(4, dtype=torch.int32, device=d).uniform_(),
    "uniform_ uint16": lambda d: _zeros(4, dtype=torch.uint16, device=d).uniform_(),
    "log_normal_ int64": lambda d: _zeros(4, dtype=torch.int64, device=d).log_normal_(),
    "geometric_ bool": lambda d: _zeros(4, dtype=torch.bool, device=d).geometric_(0.5),
    "geometric_ uint16": lambda d: _zeros(4, dtype=torch.uint16, device=d).geometric_(0.5),
    "bernoulli_ complex64": lambda d: _zeros(4, dtype=torch.complex64, device=d).bernoulli_(0.5),
    "bernoulli_ uint16": lambda d: _zeros(4, dtype=torch.uint16, device=d).bernoulli_(0.5),
    "bernoulli_ int64 p": lambda d: _zeros(3, device=d).bernoulli_(
        torch.ones(3, dtype=torch.int64, device=d)
    ),
    "randperm bool": lambda d: torch.randperm(3, dtype=torch.bool, device=d),
    "randperm uint16": lambda d: torch.randperm(3, dtype=torch.uint16, device=d),
    "randperm complex64": lambda d: torch.randperm(3, dtype=torch.complex64, device=d),
}


@pytest.mark.parametrize("name", sorted(UNSUPPORTED_DTYPES))
def test_dtypes_the_cpu_refuses_are_refused(name: str) -> None:
    call = UNSUPPORTED_DTYPES[name]
    expected = _raised(call, "cpu")
    got = _raised(call, DEVICE)
    assert type(got) is type(expected), f"{type(got).__name__}: {got} (CPU: {expected})"


def test_a_generator_of_another_device_is_refused() -> None:
    with raises_exactly(RuntimeError, match="Expected a 'infini' device type for generator"):
        torch.randperm(3, device=DEVICE, generator=torch.Generator())
    with raises_exactly(RuntimeError, match="Expected a 'infini' device type for generator"):
        torch.multinomial(torch.ones(3, device=DEVICE), 1, generator=torch.Generator())
    for call in (
        lambda: _empty(3).uniform_(generator=torch.Generator()),
        lambda: torch.randn(3, device=DEVICE, generator=torch.Generator()),
        lambda: torch.empty(3).normal_(generator=torch.Generator(device="infini")),
    ):
        with raises_exactly(RuntimeError, match="."):
            call()


# ---------------------------------------------------------------- no fallback

_RANDOM_WORDS = (
    "rand",  # rand, randn, randint, randperm, random_
    "normal",
    "uniform",
    "exponential",
    "geometric",
    "cauchy",
    "bernoulli",
    "multinomial",
    "dropout",
    "poisson",
    "binomial",
    "gamma",
    "dirichlet",
    "rrelu",
)


def test_no_random_operator_falls_back() -> None:
    random_ops = {info.name for info in torch_infini.operators() if info.family == "random"}
    assert "aten::native_dropout" in random_ops and "aten::multinomial" in random_ops
    torch_infini.cpu_fallback.reset_stats()
    with torch_infini.cpu_fallback.allowed("silent"):  # non-random helpers may fall back
        torch.manual_seed(0)
        for draw in ALL_DRAWS.values():
            draw()
        fell_back = set(torch_infini.cpu_fallback.stats())
    assert not {name for name in fell_back if any(w in name for w in _RANDOM_WORDS)}
    assert not fell_back & random_ops


@fallback_off
def test_random_operators_run_with_the_fallback_off() -> None:
    torch.manual_seed(0)
    x = _x()
    results = [
        torch.randn(10, 10, device=DEVICE),
        torch.rand(10, dtype=torch.float16, device=DEVICE),
        torch.randint(0, 10, (10,), device=DEVICE),
        torch.randperm(100, device=DEVICE),
        torch.multinomial(_weights(), 3),
        torch.multinomial(_weights(), 30, replacement=True),
        torch.bernoulli(_probs()),
        _empty(100).bernoulli_(0.5),
        F.dropout(x, 0.5, training=True),
        torch.native_dropout(x, 0.2, True)[0],
        torch.normal(x, 1.0),
        torch.normal(x, _std()),
        _empty(100).exponential_(),
        _empty(100).geometric_(0.5),
        _empty(100).cauchy_(),
        _empty(100).log_normal_(),
        _empty(100, dtype=torch.int64).random_(),
        torch.nn.init.kaiming_uniform_(_empty(8, 8)),
    ]
    for result in results:
        assert result.device == DEVICE
    torch.infini.synchronize()


# ---------------------------------------------------------------- no kernel

# Samplers infini has no kernel for: refused, never run on the CPU's
# generator. F.rrelu(training=True) does not decompose into uniform_: it
# dispatches to aten::rrelu_with_noise(_), which is refused the same way.
NO_KERNEL: dict[str, Callable[[], object]] = {
    "poisson": lambda: torch.poisson(_on_device(torch.ones(3))),
    "binomial": lambda: torch.binomial(
        _on_device(torch.full((3,), 5.0)), _on_device(torch.full((3,), 0.5))
    ),
    "_standard_gamma": lambda: torch._standard_gamma(_on_device(torch.ones(3))),
    "_sample_dirichlet": lambda: torch._sample_dirichlet(_on_device(torch.ones(3))),
    "rrelu": lambda: F.rrelu(_on_device(-torch.ones(3)), training=True),
    "rrelu_": lambda: F.rrelu(_on_device(-torch.ones(3)), training=True, inplace=True),
}


@pytest.mark.parametrize("name", sorted(NO_KERNEL))
def test_samplers_without_a_kernel_are_refused(name: str) -> None:
    with raises_exactly(NotImplementedError, match="draws random numbers"):
        NO_KERNEL[name]()


@fallback_off
@pytest.mark.parametrize("name", sorted(NO_KERNEL))
def test_samplers_without_a_kernel_are_refused_with_the_fallback_off(name: str) -> None:
    with raises_exactly(NotImplementedError, match="draws random numbers"):
        NO_KERNEL[name]()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("inplace", [False, True], ids=["functional", "in place"])
def test_rrelu_in_evaluation_draws_nothing_and_runs_as_on_the_cpu(
    dtype: torch.dtype, inplace: bool
) -> None:
    """nn.RReLU in eval() is a leaky ReLU with slope (lower + upper) / 2: it
    draws no number, so it is not refused; its values and gradient are the
    CPU's, bit for bit (the CPU's kernel runs in the fallback)."""
    x_cpu = make_cpu((5, 7), dtype) / 10
    module = torch.nn.RReLU(0.1, 0.3, inplace=inplace).eval()
    results = {}
    for device in ("cpu", DEVICE):
        x = x_cpu.to(device).detach().requires_grad_()
        y = module(x * 1)  # (a non-leaf, so the in-place form may write it)
        y.backward(torch.ones_like(y))
        results[str(device)] = (y.detach().cpu(), x.grad.cpu(), y.stride())
    cpu, dev = results["cpu"], results[str(DEVICE)]
    assert_bitwise_equal(dev[0], cpu[0])
    assert_bitwise_equal(dev[1], cpu[1])
    assert dev[2] == cpu[2]
    # Training mode still draws, and is still refused.
    with raises_exactly(NotImplementedError, match="draws random numbers"):
        module.train()(x_cpu.to(DEVICE))


_ALL_DTYPES = (
    torch.bool,
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
    torch.complex64,
    torch.complex128,
)

# One call per random operator of torch_infini.operators(), on a small tensor
# of a given dtype (the operator's out=/overload siblings share its dtypes).
DTYPE_PROBES: dict[str, Callable[[torch.dtype, str], object]] = {
    "aten::uniform_": lambda dt, d: torch.zeros(2, dtype=dt, device=d).uniform_(),
    "aten::normal_": lambda dt, d: torch.zeros(2, dtype=dt, device=d).normal_(),
    "aten::normal.Tensor_float": lambda dt, d: torch.normal(torch.zeros(2, dtype=dt, device=d)),
    "aten::log_normal_": lambda dt, d: torch.zeros(2, dtype=dt, device=d).log_normal_(),
    "aten::exponential_": lambda dt, d: torch.zeros(2, dtype=dt, device=d).exponential_(),
    "aten::geometric_": lambda dt, d: torch.zeros(2, dtype=dt, device=d).geometric_(0.5),
    "aten::cauchy_": lambda dt, d: torch.zeros(2, dtype=dt, device=d).cauchy_(),
    "aten::random_": lambda dt, d: torch.zeros(2, dtype=dt, device=d).random_(),
    "aten::random_.from": lambda dt, d: torch.zeros(2, dtype=dt, device=d).random_(0, 2),
    "aten::bernoulli_.float": lambda dt, d: torch.zeros(2, dtype=dt, device=d).bernoulli_(0.5),
    "aten::bernoulli_.Tensor": lambda dt, d: torch.zeros(2, dtype=dt, device=d).bernoulli_(
        torch.full((2,), 0.5, device=d)
    ),
    "aten::randperm.generator_out": lambda dt, d: torch.randperm(3, dtype=dt, device=d),
    "aten::multinomial": lambda dt, d: torch.multinomial(torch.ones(3, dtype=dt, device=d), 1),
    "aten::native_dropout": lambda dt, d: torch.native_dropout(
        torch.ones(2, dtype=dt, device=d), 0.5, True
    ),
}


def _runs(call: Callable[[], object]) -> bool:
    try:
        call()
    except (RuntimeError, NotImplementedError):
        return False
    return True


@pytest.mark.parametrize("name", sorted(DTYPE_PROBES))
def test_declared_dtypes_are_the_cpus(name: str) -> None:
    """torch_infini.operators() declares, per random operator, exactly the
    dtypes the CPU's kernel takes; each of them runs on infini, the others
    are refused there as on the CPU."""
    declared = {info.name: set(info.dtypes) for info in torch_infini.operators()}[name]
    probe = DTYPE_PROBES[name]
    for dtype in _ALL_DTYPES:
        cpu = _runs(lambda dt=dtype: probe(dt, "cpu"))
        assert (dtype in declared) == cpu, (name, dtype, cpu)
        assert _runs(lambda dt=dtype: probe(dt, "infini")) == cpu, (name, dtype)
