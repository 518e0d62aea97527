"""torch.ops.infini's topk_softmax (MoE routing) and top_k_top_p_sample.

topk_softmax: the CPU implementation against the definition (InfiniOps'
kernel in plain PyTorch), infini (the CPU fallback) against the CPU bit for
bit, gradients of the weights against autograd of the definition.

top_k_top_p_sample: which tokens can come out (top-k, top-p, both, the
edge values), the frequencies against the kept softmax (a chi-square
bound), one uniform per row from the device generator (torch.manual_seed
and generator= reproduce; two draws differ), the same ids on CPU and
infini for the same uniforms, argument errors.
"""

from __future__ import annotations

import pytest
import torch
import torch_infini
from infini_testing import raises_exactly
from op_helpers import assert_matches, make_cpu
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


@pytest.mark.parametrize("renormalize", [False, True], ids=["plain", "renormalize"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_topk_softmax_is_its_definition_and_infini_matches(
    dtype: torch.dtype, renormalize: bool
) -> None:
    g = make_cpu((6, 8), dtype, seed=1)
    g[2, 3] = g[2, 5] = g[2].max() + 1  # a tie: expert 3 first
    bias = make_cpu((8,), torch.float32, seed=2) * 0.01
    for b in (None, bias):
        want_w, want_i = topk_softmax_definition(g, 3, renormalize, b)
        w, i, t = ops.topk_softmax(g, 3, renormalize, b)
        torch.testing.assert_close(w, want_w, rtol=1.3e-6, atol=1e-7)
        assert torch.equal(i, want_i)
        assert torch.equal(t, (torch.arange(3)[None] * 6 + torch.arange(6)[:, None]).int())
        with torch_infini.cpu_fallback.allowed("silent"):
            on_infini = ops.topk_softmax(
                g.to(DEVICE), 3, renormalize, None if b is None else b.to(DEVICE)
            )
        for got, want in zip(on_infini, (w, i, t), strict=True):
            assert_matches(got, want, exact=True)


def test_topk_softmax_padding_and_gradients() -> None:
    g = make_cpu((4, 6), torch.float32, seed=3)
    padding = torch.tensor([False, True, False, True])
    w, i, _ = ops.topk_softmax(g, 2, True, None, padding)
    assert (i[padding] == -1).all() and (i[~padding] >= 0).all()
    assert torch.allclose(w.sum(-1), torch.ones(4))  # weights still written on padding rows
    grad = make_cpu((4, 2), torch.float32, seed=4)
    for renormalize in (False, True):
        a = g.clone().requires_grad_()
        wa, ia, _ = ops.topk_softmax(a, 2, renormalize, None, padding)
        wa.backward(grad)
        b = g.clone().requires_grad_()
        p = torch.softmax(b, -1)
        chosen = p.topk(2, -1).indices
        sel = p.gather(-1, chosen)
        (sel / sel.sum(-1, keepdim=True) if renormalize else sel).backward(grad)
        torch.testing.assert_close(a.grad, b.grad)
        c = g.to(DEVICE).requires_grad_()
        with torch_infini.cpu_fallback.allowed("silent"):
            wc, _, _ = ops.topk_softmax(c, 2, renormalize, None, padding.to(DEVICE))
            wc.backward(grad.to(DEVICE))
        assert_matches(c.grad, a.grad)
    assert not ia.requires_grad


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
