"""Random operators on infini: their numbers follow the distribution asked for.

infini's numbers are not the CPU's (another generator, test_random_ops.py
has the reproducibility and the CPU's formulas), so the oracle is
statistical: goodness-of-fit tests with fixed seeds, so a test is
deterministic, at thresholds a correct generator passes with overwhelming
probability (p-value > 1e-4), and the support and edge cases of each
distribution as the CPU defines them. The statistics are computed here with
torch (no SciPy in the test extras).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F
from infini_testing import assert_bitwise_equal
from op_helpers import make_cpu

DEVICE = torch.device("infini", 0)
P_MIN = 1e-4  # smallest p-value a goodness-of-fit test accepts
N = 100_000  # samples per statistical test


def _empty(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=DEVICE)


def _on_device(t: torch.Tensor) -> torch.Tensor:
    return t.to(DEVICE)


# ---------------------------------------------------------------- statistics


def _kolmogorov_sf(lam: float) -> float:
    """P(K > lam) for the Kolmogorov distribution."""
    if lam < 0.2:
        return 1.0
    terms = (2 * (-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return min(1.0, max(0.0, sum(terms)))


def _ks_pvalue(sample: torch.Tensor, cdf: Callable[[torch.Tensor], torch.Tensor]) -> float:
    """One-sample Kolmogorov-Smirnov test (Stephens' approximation of the p-value)."""
    x = sample.detach().cpu().double().reshape(-1).sort().values
    n = x.numel()
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    d = max((i / n - f).max().item(), (f - (i - 1) / n).max().item())
    root = math.sqrt(n)
    return _kolmogorov_sf((root + 0.12 + 0.11 / root) * d)


def _chi2_pvalue(observed: Sequence[float] | torch.Tensor, probs: Sequence[float]) -> float:
    """Pearson's chi-square test of counts against category probabilities."""
    obs = torch.as_tensor(observed, dtype=torch.float64).reshape(-1)
    p = torch.as_tensor(probs, dtype=torch.float64).reshape(-1)
    assert obs.shape == p.shape
    expected = p / p.sum() * obs.sum()
    stat = ((obs - expected) ** 2 / expected).sum()
    df = torch.tensor((obs.numel() - 1) / 2, dtype=torch.float64)
    return torch.special.gammaincc(df, stat / 2).item()


def _binomial_pvalue(successes: int, n: int, p: float) -> float:
    """Two-sided normal approximation of a binomial count."""
    z = (successes - n * p) / math.sqrt(n * p * (1 - p))
    return math.erfc(abs(z) / math.sqrt(2))


def _counts(values: torch.Tensor, categories: int) -> torch.Tensor:
    return torch.bincount(values.cpu().reshape(-1).long(), minlength=categories)


def _normal_cdf(mean: float, std: float) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: torch.special.ndtr((x - mean) / std)


def test_the_statistics_helpers_reject_a_wrong_distribution() -> None:
    """The tests below would notice a wrong distribution (CPU samples)."""
    gen = torch.Generator().manual_seed(0)
    uniform = torch.rand(N, generator=gen, dtype=torch.float64)
    assert _ks_pvalue(uniform, lambda x: x) > P_MIN
    assert _ks_pvalue(uniform**1.05, lambda x: x) < 1e-10
    assert _ks_pvalue(torch.randn(N, generator=gen), _normal_cdf(0, 1.05)) < 1e-10
    counts = _counts(torch.randint(0, 10, (N,), generator=gen), 10)
    assert _chi2_pvalue(counts, [1] * 10) > P_MIN
    assert _chi2_pvalue(counts, [1.1] + [1] * 9) < 1e-10
    assert _binomial_pvalue(30_000, N, 0.3) > P_MIN
    assert _binomial_pvalue(31_000, N, 0.3) < 1e-10


@pytest.mark.parametrize(
    ("dtype", "low", "high"),
    [(torch.float32, -2.0, 3.0), (torch.float64, 10.0, 10.5)],
    ids=["float32", "float64"],
)
def test_uniform_ks(dtype: torch.dtype, low: float, high: float) -> None:
    torch.manual_seed(100)
    x = _empty(N, dtype=dtype).uniform_(low, high)
    cpu = x.cpu()
    assert bool(((cpu >= low) & (cpu < high)).all())
    assert _ks_pvalue(cpu, lambda v: (v - low) / (high - low)) > P_MIN


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str
)
@pytest.mark.parametrize(("low", "high"), [(0.0, 1.0), (1.0, 2.0), (-3.0, -1.0)])
def test_uniform_support_and_bins(dtype: torch.dtype, low: float, high: float) -> None:
    """[from, to): never `to`, even where rounding to the dtype could reach it."""
    torch.manual_seed(101)
    x = _empty(N, dtype=dtype).uniform_(low, high).cpu().double()
    assert x.min().item() >= low and x.max().item() < high
    bins = ((x - low) / (high - low) * 8).floor().long()  # edges exact in every dtype
    assert _chi2_pvalue(_counts(bins, 8), [1] * 8) > P_MIN


@pytest.mark.parametrize(
    ("dtype", "mean", "std"),
    [(torch.float32, 1.5, 2.0), (torch.float64, -1.0, 0.25)],
    ids=["float32", "float64"],
)
def test_normal_ks(dtype: torch.dtype, mean: float, std: float) -> None:
    torch.manual_seed(102)
    x = _empty(N, dtype=dtype).normal_(mean, std)
    assert _ks_pvalue(x, _normal_cdf(mean, std)) > P_MIN
    torch.manual_seed(103)
    assert _ks_pvalue(torch.randn(N, dtype=dtype, device=DEVICE), _normal_cdf(0, 1)) > P_MIN


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_normal_reduced_precision_moments(dtype: torch.dtype) -> None:
    torch.manual_seed(104)
    x = _empty(N, dtype=dtype).normal_(3.0, 2.0).cpu().double()
    assert bool(x.isfinite().all())
    assert abs(x.mean().item() - 3.0) < 5 * 2.0 / math.sqrt(N)
    assert abs(x.std().item() / 2.0 - 1) < 0.02


def test_normal_tensor_overloads_ks() -> None:
    torch.manual_seed(105)
    mean = _on_device(torch.full((N,), 4.0))
    std = _on_device(torch.full((N,), 0.5))
    for x in (torch.normal(mean, 0.5), torch.normal(4.0, std), torch.normal(mean, std)):
        assert _ks_pvalue(x, _normal_cdf(4.0, 0.5)) > P_MIN


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str
)
def test_exponential(dtype: torch.dtype) -> None:
    lambd = 2.5
    torch.manual_seed(106)
    x = _empty(N, dtype=dtype).exponential_(lambd).cpu().double()
    assert x.min().item() > 0 and bool(x.isfinite().all())
    if dtype in (torch.float32, torch.float64):
        assert _ks_pvalue(x, lambda v: 1 - torch.exp(-lambd * v)) > P_MIN
    else:
        assert abs(x.mean().item() * lambd - 1) < 5 / math.sqrt(N)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_cauchy_ks(dtype: torch.dtype) -> None:
    median, sigma = 1.0, 2.0
    torch.manual_seed(107)
    x = _empty(N, dtype=dtype).cauchy_(median, sigma)
    assert _ks_pvalue(x, lambda v: 0.5 + torch.atan((v - median) / sigma) / math.pi) > P_MIN


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_log_normal_ks(dtype: torch.dtype) -> None:
    torch.manual_seed(108)
    x = _empty(N, dtype=dtype).log_normal_(0.5, 0.75).cpu()
    assert x.min().item() > 0
    assert _ks_pvalue(x.double().log(), _normal_cdf(0.5, 0.75)) > P_MIN


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16], ids=str)
def test_bernoulli_scalar(dtype: torch.dtype) -> None:
    torch.manual_seed(109)
    for p in (0.3, 0.5):
        x = _empty(N, dtype=dtype).bernoulli_(p).cpu()
        assert bool(((x == 0) | (x == 1)).all())
        assert _binomial_pvalue(int(x.long().sum()), N, p) > P_MIN
    assert not bool(_empty(1000, dtype=dtype).bernoulli_(0.0).cpu().any())
    assert bool(_empty(1000, dtype=dtype).bernoulli_(1.0).cpu().all())


def test_bernoulli_tensor() -> None:
    levels = torch.tensor([0.0, 0.2, 0.7, 1.0], dtype=torch.float64)
    p_cpu = levels.repeat(N // 4)
    torch.manual_seed(110)
    for x in (
        torch.bernoulli(_on_device(p_cpu)),
        _empty(N, dtype=torch.uint8).bernoulli_(_on_device(p_cpu.float())),
        torch.bernoulli(_on_device(p_cpu.reshape(-1, 4)).t()).t().reshape(-1),
    ):
        x = x.cpu().double()
        assert bool(((x == 0) | (x == 1)).all())
        per_level = x.reshape(-1, 4).sum(0)
        assert per_level[0].item() == 0 and per_level[3].item() == N // 4
        for k in (1, 2):
            assert _binomial_pvalue(int(per_level[k]), N // 4, levels[k].item()) > P_MIN
    # p broadcast over self
    x = _empty(N // 4, 4).bernoulli_(_on_device(levels.float()))
    per_level = x.cpu().sum(0)
    assert per_level[0].item() == 0 and per_level[3].item() == N // 4
    assert _binomial_pvalue(int(per_level[1]), N // 4, 0.2) > P_MIN


def test_random_from_to() -> None:
    torch.manual_seed(111)
    x = _empty(N, dtype=torch.int64).random_(0, 10).cpu()
    assert x.min().item() >= 0 and x.max().item() < 10
    assert _chi2_pvalue(_counts(x, 10), [1] * 10) > P_MIN
    x = _empty(N, dtype=torch.int8).random_(-100, 100).cpu()
    assert x.min().item() >= -100 and x.max().item() < 100
    assert _chi2_pvalue(_counts(x.long() + 100, 200), [1] * 200) > P_MIN
    x = torch.randint(3, 8, (N,), dtype=torch.float16, device=DEVICE).cpu()
    assert _chi2_pvalue(_counts(x - 3, 5), [1] * 5) > P_MIN
    assert x.min().item() == 3 and x.max().item() == 7
    # a range wider than 2**32: both halves of each value random
    x = _empty(N, dtype=torch.int64).random_(-(2**40), 2**40).cpu()
    assert x.min().item() >= -(2**40) and x.max().item() < 2**40
    assert _binomial_pvalue(int((x < 0).sum()), N, 0.5) > P_MIN
    assert _binomial_pvalue(int((x & 1).sum()), N, 0.5) > P_MIN
    assert _binomial_pvalue(int(((x >> 38) & 1).sum()), N, 0.5) > P_MIN
    # the full int64 range
    x = _empty(N, dtype=torch.int64).random_(-(2**63), None).cpu()
    for bit in (0, 31, 32, 62, 63):
        assert _binomial_pvalue(int(((x >> bit) & 1).sum()), N, 0.5) > P_MIN, bit


_RANDOM_MAX = {
    torch.uint8: 255,
    torch.int8: 127,
    torch.int16: 2**15 - 1,
    torch.int32: 2**31 - 1,
    torch.int64: 2**63 - 1,
    torch.bool: 1,
    torch.float16: 2**11,
    torch.bfloat16: 2**8,
    torch.float32: 2**24,
    torch.float64: 2**53,
}


@pytest.mark.parametrize("dtype", list(_RANDOM_MAX), ids=str)
def test_random_default_range(dtype: torch.dtype) -> None:
    """random_(): [0, max] for integers, [0, 2**digits] for floating types."""
    top = _RANDOM_MAX[dtype]
    torch.manual_seed(112)
    x = _empty(N, dtype=dtype).random_().cpu()
    wide = x.double() if dtype.is_floating_point else x.long()
    assert wide.min().item() >= 0 and wide.max().item() <= top
    if dtype.is_floating_point:
        assert bool((wide == wide.round()).all())
    if top < 4096:
        assert _chi2_pvalue(_counts(wide, top + 1), [1] * (top + 1)) > P_MIN
    else:  # the upper half of the range as often as the lower
        upper = int((wide > top // 2).sum()) if dtype != torch.int64 else int((x >> 62).sum())
        assert _binomial_pvalue(upper, N, 0.5) > P_MIN


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8], ids=str)
def test_geometric(dtype: torch.dtype) -> None:
    p = 0.3
    torch.manual_seed(113)
    x = _empty(N, dtype=dtype).geometric_(p).cpu().double()
    assert x.min().item() >= 1 and bool((x == x.round()).all())
    probs = [(1 - p) ** (k - 1) * p for k in range(1, 7)]
    counts = [int((x == k).sum()) for k in range(1, 7)] + [int((x > 6).sum())]
    assert _chi2_pvalue(counts, [*probs, 1 - sum(probs)]) > P_MIN


def test_multinomial_with_replacement() -> None:
    weights = torch.tensor([[1.0, 0.0, 2.0, 3.0, 4.0], [5.0, 1.0, 0.0, 0.0, 4.0]])
    torch.manual_seed(114)
    samples = torch.multinomial(_on_device(weights), N // 2, replacement=True).cpu()
    assert samples.shape == (2, N // 2) and samples.dtype == torch.int64
    for row, w in zip(samples, weights, strict=True):
        counts = _counts(row, 5)
        assert bool((counts[w == 0] == 0).all()), "a category of probability 0 was drawn"
        assert _chi2_pvalue(counts[w > 0], w[w > 0].tolist()) > P_MIN
    one_d = torch.multinomial(_on_device(weights[0].double()), N, replacement=True).cpu()
    assert one_d.shape == (N,)
    assert _chi2_pvalue(_counts(one_d, 5)[weights[0] > 0], [1, 2, 3, 4]) > P_MIN


def test_multinomial_without_replacement() -> None:
    w = torch.tensor([1.0, 2.0, 0.0, 3.0, 4.0, 5.0])
    p = w / w.sum()
    rows = 40_000
    torch.manual_seed(115)
    samples = torch.multinomial(_on_device(w).expand(rows, 6), 3).cpu()
    assert samples.shape == (rows, 3)
    s = samples.sort(1).values
    assert bool((s[:, 1:] != s[:, :-1]).all()), "a row drew a category twice"
    assert not bool((samples == 2).any()), "a category of probability 0 was drawn"
    nonzero = p > 0
    first = _counts(samples[:, 0], 6)
    assert _chi2_pvalue(first[nonzero], p[nonzero].tolist()) > P_MIN
    # P(second = j) = sum over i != j of p_i * p_j / (1 - p_i)
    second_p = torch.tensor(
        [sum(p[i] * p[j] / (1 - p[i]) for i in range(6) if i != j) for j in range(6)]
    )
    second = _counts(samples[:, 1], 6)
    assert _chi2_pvalue(second[nonzero], second_p[nonzero].tolist()) > P_MIN
    # all categories: a permutation of the nonzero ones
    full = torch.multinomial(_on_device(w), 5).cpu()
    assert sorted(full.tolist()) == [0, 1, 3, 4, 5]


def test_randperm() -> None:
    torch.manual_seed(116)
    for n, dtype in [(100_003, torch.int64), (5000, torch.int32), (2049, torch.float16)]:
        perm = torch.randperm(n, dtype=dtype, device=DEVICE).cpu()
        assert perm.dtype == dtype
        assert torch.equal(perm.long().sort().values, torch.arange(n))
        assert not torch.equal(perm.long(), torch.arange(n))
    assert torch.randperm(0, device=DEVICE).shape == (0,)
    assert torch.randperm(1, device=DEVICE).tolist() == [0]
    draws = torch.stack([torch.randperm(6, device=DEVICE).cpu() for _ in range(12_000)])
    for position in range(6):
        assert _chi2_pvalue(_counts(draws[:, position], 6), [1] * 6) > P_MIN, position


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64], ids=str
)
@pytest.mark.parametrize("p", [0.3, 0.5])
def test_dropout_keeps_and_scales(dtype: torch.dtype, p: float) -> None:
    """Keeps 1 - p of the elements; the output is the CPU's formula on the mask:
    x * mask * scale with scale = 1 / (1 - p) rounded to x's dtype."""
    x_cpu = make_cpu((N,), dtype, seed=5)
    scale = torch.tensor(1 / (1 - p), dtype=dtype)
    # the CPU's own formula, on the CPU
    out_cpu, mask_cpu = torch.native_dropout(x_cpu, p, True)
    assert_bitwise_equal(out_cpu, x_cpu * mask_cpu.to(dtype) * scale)

    torch.manual_seed(117)
    out, mask = torch.native_dropout(_on_device(x_cpu), p, True)
    assert mask.dtype == torch.bool and mask.device == DEVICE
    assert _binomial_pvalue(int(mask.cpu().sum()), N, 1 - p) > P_MIN
    assert_bitwise_equal(out, x_cpu * mask.cpu().to(dtype) * scale)
    torch.manual_seed(117)
    assert_bitwise_equal(F.dropout(_on_device(x_cpu), p, training=True), out.cpu())


def test_dropout_edge_cases() -> None:
    x_cpu = make_cpu((1000,), torch.float32, seed=6)
    x = _on_device(x_cpu)
    assert_bitwise_equal(F.dropout(x, 0.5, training=False), x_cpu)
    out, mask = torch.native_dropout(x, 0.5, False)
    assert_bitwise_equal(out, x_cpu)
    assert bool(mask.cpu().all())
    for p in (0.0, 1.0):
        out, mask = torch.native_dropout(x, p, True)
        cpu_out, cpu_mask = torch.native_dropout(x_cpu, p, True)
        assert_bitwise_equal(out, cpu_out)
        assert_bitwise_equal(mask, cpu_mask)
