"""torch.ops.infini's topk_softmax (MoE routing) and top_k_top_p_sample.

The oracles are stock PyTorch (here and in fused_oracles.py), never the
operators' own C++ reference.

topk_softmax: the CPU implementation and infini (the seam's TopkSoftmax
where the backend serves the dtype, else the CPU fallback) each against the
definition (InfiniOps' kernel in plain PyTorch), in float16, bfloat16 and
float32; gradients of the weights, in each dtype, against PyTorch's autograd
through the definition.

top_k_top_p_sample: which tokens can come out (top-k, top-p, both, the
edge values), the frequencies against the kept softmax (a chi-square
bound), one uniform per row from the device generator (torch.manual_seed
and generator= reproduce; two draws differ), the ids for given uniforms
against the selection written in plain PyTorch (per-row k and p, every
floating dtype, CPU and infini), argument errors.
"""

from __future__ import annotations

import fused_oracles
import pytest
import torch
import torch_infini
from infini_testing import raises_exactly
from op_helpers import assert_matches, expect_kernel, kernel_dtypes, make_cpu
from torch_infini import ops

DEVICE = torch.device("infini", 0)


# ---------------------------------------------------------------- topk_softmax


def topk_softmax_definition(
    g: torch.Tensor, k: int, renormalize: bool, bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    p = torch.softmax(g.float(), -1)
    score = p if bias is None else p + bias
    rows = []
    for t in range(g.shape[0]):  # ties to the lower expert: scan in index order
        order = sorted(range(g.shape[1]), key=lambda e, t=t: (-score[t, e].item(), e))
        rows.append(order[:k])
    idx = torch.tensor(rows, dtype=torch.int64).reshape(g.shape[0], k)
    w = p.gather(-1, idx)
    if renormalize:
        w = w * (1.0 / w.sum(-1, keepdim=True))
    return w, idx.int()


ROUTING_DTYPES = [torch.float16, torch.bfloat16, torch.float32]


@pytest.mark.parametrize("renormalize", [False, True], ids=["plain", "renormalize"])
@pytest.mark.parametrize("dtype", ROUTING_DTYPES, ids=str)
def test_topk_softmax_is_its_definition_and_infini_matches(
    dtype: torch.dtype, renormalize: bool
) -> None:
    """Weights within float32 rounding (the definition divides by the sum
    where the kernel multiplies by its reciprocal: an ulp apart; atol below
    the default, as the weights are probabilities), ids bit for bit."""
    g = make_cpu((6, 8), dtype, seed=1)
    g[2, 3] = g[2, 5] = g[2].max() + 1  # a tie: expert 3 first
    bias = make_cpu((8,), torch.float32, seed=2) * 0.01
    token_expert = (torch.arange(3)[None] * 6 + torch.arange(6)[:, None]).int()
    for b in (None, bias):
        want_w, want_i = topk_softmax_definition(g, 3, renormalize, b)
        stock = fused_oracles.topk_softmax(g, 3, renormalize, b)
        torch.testing.assert_close(stock[0], want_w, rtol=1.3e-6, atol=1e-7)
        assert torch.equal(stock[1], want_i) and torch.equal(stock[2], token_expert)
        with torch_infini.cpu_fallback.allowed("silent"):
            on_infini = ops.topk_softmax(
                g.to(DEVICE), 3, renormalize, None if b is None else b.to(DEVICE)
            )
        for device, (w, i, t) in (
            ("cpu", ops.topk_softmax(g, 3, renormalize, b)),
            (DEVICE, on_infini),
        ):
            assert w.device.type == torch.device(device).type
            assert w.dtype == torch.float32 and i.dtype == t.dtype == torch.int32
            torch.testing.assert_close(w.cpu(), want_w, rtol=1.3e-6, atol=1e-7)
            assert torch.equal(i.cpu(), want_i), (device, i, want_i)
            assert torch.equal(t.cpu(), token_expert)


@pytest.mark.parametrize("dtype", ROUTING_DTYPES, ids=str)
def test_topk_softmax_padding_and_gradients(dtype: torch.dtype) -> None:
    """The gradient of the weights against PyTorch's autograd through the
    definition (softmax in float of the logits, the chosen experts' values,
    renormalized), rounded once to the logits' dtype; padding rows choose
    as the others (their ids are -1) and get gradients too. Tolerances:
    PyTorch's defaults for the dtype (the fused backward is softmax's closed
    form in float, autograd's the chain of float operations: an ulp of the
    dtype apart at most)."""
    g = make_cpu((4, 6), dtype, seed=3)
    padding = torch.tensor([False, True, False, True])
    grad = make_cpu((4, 2), torch.float32, seed=4)
    for renormalize in (False, True):
        want = g.clone().requires_grad_()
        want_w, want_i, _ = fused_oracles.topk_softmax(want, 2, renormalize, None, padding)
        assert (want_i[padding] == -1).all() and (want_i[~padding] >= 0).all()
        want_w.backward(grad)
        assert want.grad is not None and want.grad[padding].abs().max() > 0
        a = g.clone().requires_grad_()
        wa, ia, _ = ops.topk_softmax(a, 2, renormalize, None, padding)
        assert torch.equal(ia, want_i) and not ia.requires_grad
        torch.testing.assert_close(wa, want_w.detach(), rtol=1.3e-6, atol=1e-7)
        wa.backward(grad)
        torch.testing.assert_close(a.grad, want.grad)
        c = g.to(DEVICE).requires_grad_()
        with torch_infini.cpu_fallback.allowed("silent"):
            wc, ic, _ = ops.topk_softmax(c, 2, renormalize, None, padding.to(DEVICE))
            wc.backward(grad.to(DEVICE))
        assert torch.equal(ic.cpu(), want_i)
        assert c.grad is not None and c.grad.device.type == "infini"
        torch.testing.assert_close(c.grad.cpu(), want.grad)


@pytest.mark.parametrize("dtype", ROUTING_DTYPES, ids=str)
def test_topk_softmax_runs_natively_where_the_backend_serves_it(dtype: torch.dtype) -> None:
    """A served dtype runs with the fallback off (expect_kernel; an unserved
    one is refused naming the dtype and the provider), with a bias, padding
    tokens given as bool or uint8, renormalized, and with no token at all:
    ids and token_expert_indices bit for bit, the weights the CPU's (host
    runs the CPU's kernels: bit for bit) and the definition's."""
    g = make_cpu((7, 16), dtype, seed=5)
    bias = make_cpu((16,), torch.float32, seed=6) * 0.01
    padding = torch.tensor([False, True, False, False, True, False, False])
    for pad in (padding, padding.to(torch.uint8)):
        want = fused_oracles.topk_softmax(g, 4, True, bias, pad)
        cpu = ops.topk_softmax(g, 4, True, bias, pad)
        with expect_kernel("infini::topk_softmax", dtype):
            torch_infini.cpu_fallback.reset_stats()
            w, i, t = ops.topk_softmax(g.to(DEVICE), 4, True, bias.to(DEVICE), pad.to(DEVICE))
            assert torch_infini.cpu_fallback.stats() == {}
            assert_matches(w, cpu[0], check_stride=True)
            torch.testing.assert_close(w.cpu(), want[0], rtol=1.3e-6, atol=1e-7)
            assert_matches(i, want[1], exact=True, check_stride=True)
            assert_matches(t, want[2], exact=True, check_stride=True)
    with expect_kernel("infini::topk_softmax", dtype):
        empty = ops.topk_softmax(g[:0].to(DEVICE), 2)
        assert [tuple(e.shape) for e in empty] == [(0, 2)] * 3


def test_topk_softmax_declared_dtypes_are_the_kernels() -> None:
    assert set(torch_infini.supported_dtypes("infini::topk_softmax")) == set(
        kernel_dtypes("infini::topk_softmax")
    )


def test_topk_softmax_bad_input() -> None:
    g = torch.randn(3, 4)
    cases = {
        "topk": (lambda: ops.topk_softmax(g, 5), "topk must be in"),
        "rank": (lambda: ops.topk_softmax(g[0], 1), "expected gating_output"),
        "dtype": (lambda: ops.topk_softmax(g.double(), 1), "float32, float16 or bfloat16"),
        "bias": (lambda: ops.topk_softmax(g, 1, False, torch.zeros(3)), "bias"),
    }
    for call, match in cases.values():
        with raises_exactly(RuntimeError, match=match):
            call()


# ---------------------------------------------------------------- sampler

LOGITS = torch.tensor([2.0, 1.0, 0.5, -1.0, -3.0])
PROBABILITIES = torch.softmax(LOGITS.double(), -1)


def _frequencies(ids: torch.Tensor, n: int = 5) -> torch.Tensor:
    return torch.bincount(ids.cpu(), minlength=n).double() / ids.numel()


def _assert_distribution(ids: torch.Tensor, expected: torch.Tensor) -> None:
    """Chi-square against ``expected`` (zeros must never occur)."""
    counts = torch.bincount(ids.cpu(), minlength=expected.numel()).double()
    assert counts[expected == 0].sum() == 0, counts
    e = expected[expected > 0] * ids.numel()
    chi2 = ((counts[expected > 0] - e) ** 2 / e).sum().item()
    assert chi2 < 25.0, (chi2, counts / ids.numel(), expected)  # df <= 4: p < 1e-4


@pytest.mark.parametrize("device", ["cpu", DEVICE], ids=str)
@pytest.mark.parametrize(
    ("top_k", "top_p", "kept"),
    [
        (3, None, 3),
        (None, 0.7, 2),  # cumulative 0.61, 0.83: the crossing token is kept
        (4, 0.9, 3),  # p over the top 4 renormalized: 0.61, 0.84, 0.98
        (1, None, 1),  # greedy
        (0, 1.0, 5),  # k <= 0 and p >= 1: no filter
        (9, 0.0, 5),  # k > V and p <= 0: no filter
    ],
    ids=str,
)
def test_sampler_keeps_the_right_tokens_with_the_right_frequencies(
    device: str | torch.device, top_k: int | None, top_p: float | None, kept: int
) -> None:
    torch.manual_seed(0)
    logits = LOGITS.expand(40000, 5).contiguous().to(device)
    ids = ops.top_k_top_p_sample(logits, top_k, top_p)
    assert ids.dtype == torch.int64 and ids.device == logits.device and ids.shape == (40000,)
    expected = torch.zeros(5, dtype=torch.float64)
    expected[:kept] = PROBABILITIES[:kept] / PROBABILITIES[:kept].sum()
    _assert_distribution(ids, expected)


def test_sampler_per_row_parameters_and_dtypes() -> None:
    logits = torch.stack([LOGITS, LOGITS.flip(0), LOGITS]).to(DEVICE)
    ids = ops.top_k_top_p_sample(logits, torch.tensor([1, 1, 2]), torch.tensor([0.5, 0.5, 0.99]))
    assert ids[0].item() == 0 and ids[1].item() == 4 and ids[2].item() in (0, 1)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        out = ops.top_k_top_p_sample(logits.to(dtype), 1)
        assert out.tolist() == [0, 4, 0]


def test_sampler_draws_from_the_device_generator() -> None:
    logits = make_cpu((8, 50), torch.float32, seed=5).to(DEVICE)
    torch.manual_seed(11)
    a = ops.top_k_top_p_sample(logits, 20, 0.95)
    b = ops.top_k_top_p_sample(logits, 20, 0.95)
    torch.manual_seed(11)
    assert torch.equal(ops.top_k_top_p_sample(logits, 20, 0.95), a)
    assert not torch.equal(a, b)  # the stream moved on
    g = torch.Generator(device=DEVICE).manual_seed(3)
    c = ops.top_k_top_p_sample(logits, 20, 0.95, generator=g)
    g.manual_seed(3)
    assert torch.equal(ops.top_k_top_p_sample(logits, 20, 0.95, generator=g), c)
    # one uniform per row: the device generator's next uniform decides each row
    torch.manual_seed(12)
    u = torch.empty(8, dtype=torch.float64, device=DEVICE).uniform_()
    torch.manual_seed(12)
    ids = ops.top_k_top_p_sample(logits, None, None)
    probs = torch.softmax(logits.cpu().double(), -1)
    order = probs.sort(dim=-1, descending=True, stable=True)
    cumulative = order.values.cumsum(-1)
    want = order.indices.gather(1, (cumulative < u.cpu()[:, None]).sum(-1, keepdim=True))
    assert torch.equal(ids.cpu(), want.squeeze(1))


@pytest.mark.parametrize("device", ["cpu", DEVICE], ids=str)
@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str
)
def test_sampler_picks_the_stock_selection_for_its_uniforms(
    device: str | torch.device, dtype: torch.dtype
) -> None:
    """The ids for the uniforms the generator gives (one per row, drawn
    first) are the selection written in plain PyTorch
    (fused_oracles.top_k_top_p_select): per-row top_k and top_p with their
    edge values, scalar ones, none; ties among the logits (bfloat16 and
    float16 round many together) go to the lower id."""
    rows = 48
    logits = (make_cpu((rows, 40), torch.float32, seed=6) / 2).to(dtype)
    logits[:, 3] = logits[:, 7] = logits.max(-1).values  # the top tied in every row
    gen = torch.Generator().manual_seed(7)
    top_k = torch.randint(-1, 45, (rows,), generator=gen)  # <= 0 and > V: no top-k
    top_p = torch.rand(rows, generator=gen, dtype=torch.float64)
    top_p[:4] = torch.tensor([0.0, 1.0, 1e-9, 0.999999])
    on_device = logits.to(device)
    for k, p in ((top_k, top_p), (top_k, None), (None, top_p), (torch.tensor([5]), 0.8)):
        torch.manual_seed(21)
        uniforms = torch.empty(rows, dtype=torch.float64, device=device).uniform_()
        torch.manual_seed(21)
        ids = ops.top_k_top_p_sample(on_device, k, p)
        assert ids.device.type == torch.device(device).type and ids.dtype == torch.int64
        p_tensor = torch.tensor([p], dtype=torch.float64) if isinstance(p, float) else p
        want = fused_oracles.top_k_top_p_select(logits, k, p_tensor, uniforms.cpu())
        assert torch.equal(ids.cpu(), want), (k, p, (ids.cpu() != want).nonzero())


def test_sampler_bad_input() -> None:
    cases = {
        "rank": (lambda d: ops.top_k_top_p_sample(torch.randn(5, device=d)), "expected logits"),
        "k shape": (
            lambda d: ops.top_k_top_p_sample(torch.randn(3, 5, device=d), torch.tensor([1, 2])),
            "top_k of shape",
        ),
        "p dtype": (
            lambda d: ops.top_k_top_p_sample(torch.randn(3, 5, device=d), None, torch.tensor([1])),
            "top_p",
        ),
        "integer logits": (
            lambda d: ops.top_k_top_p_sample(torch.ones(3, 5, dtype=torch.int64, device=d)),
            "floating-point logits",
        ),
        "nan": (
            lambda d: ops.top_k_top_p_sample(torch.full((3, 5), float("nan"), device=d)),
            "NaN",
        ),
    }
    for device in ("cpu", DEVICE):
        for call, match in cases.values():
            with raises_exactly(RuntimeError, match=match):
                call(device)
    assert ops.top_k_top_p_sample(torch.empty(0, 5, device=DEVICE)).shape == (0,)


def test_opcheck() -> None:
    g = torch.randn(4, 6)
    torch.library.opcheck(torch.ops.infini.topk_softmax.default, (g, 2, True, None, None))
    meta = torch.empty(3, 7, device="meta")
    assert torch.ops.infini.top_k_top_p_sample(meta).shape == (3,)
