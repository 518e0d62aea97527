"""The compiler plug-in's graph passes: torch.compile on infini rewrites what
InfiniOps has fused kernels for into one torch.ops.infini call each.

Models are written the plain torch.nn way (no torch_infini.ops call): a
variant of the Llama example, a transformers Llama built from a config, and
one small module per pattern. Each rewrite is counted pattern by pattern
(``counters["infini_graph_passes"]``) and compared with a literal count per
backend (``host`` serves rotary_embedding and add_rms_norm in float32,
InfiniRT ``cpu`` neither).

The oracle is CPU eager. On ``host`` a rewritten pattern computes as ATen's
own kernels do on the device memory (``rms_norm`` and the rotary embedding
are the host's loops, which round as ATen's ``rms_norm`` and eager's rotation
do, with ATen's own sum; the other references compose the operators eager
runs, in its order), and a graph
whose every reduction and transcendental function was rewritten (the rest
being matmuls and +, -, *, /, which round exactly) gives eager's bits:
those results are compared bit for bit. Where a reduction, an exp, a cos or
a sin is left to Inductor (a pattern that must not be rewritten, symbolic
sizes, a backward, rotary tables computed in the graph), Inductor's C++
rounds in its own order: the result is compared with eager within that
rounding (:func:`_assert_within_inductor_rounding`). Each pass has negative
cases: the pattern with one thing changed (another eps, swapped halves,
another fill value or mask, tables that are no rotation) is not rewritten,
and its result is still the oracle's.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from graph_pass_checks import (
    BACKEND,
    DEVICE,
    PerBackend,
    _assert_matches_eager,
    _assert_within_inductor_rounding,
    _check_against_eager,
    _check_left_to_inductor,
    _everywhere,
    _expected,
    _Fn,
    _fresh_compile,  # noqa: F401  (the autouse fixture)
    _rewrites,
    _run,
    _wrapper_code,
)
from infini_testing import assert_bitwise_equal, llama_example, requires_inductor
from torch._dynamo.utils import counters
from torch_infini import _compiler, graph_passes
from torch_infini.graph_passes import _graph

pytestmark = requires_inductor

# ------------------------------------------------------------- the plain-nn Llama


def _plain_causal_softmax(scores: torch.Tensor) -> torch.Tensor:
    t, total = scores.shape[-2:]
    allowed = torch.ones(t, total, dtype=torch.bool, device=scores.device).tril(total - t)
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)


def _plain_swiglu(up: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    return up * F.silu(gate)


@contextlib.contextmanager
def _plain_llama() -> Iterator[Any]:
    """The Llama example with its two fused calls written in stock PyTorch."""
    llama = llama_example()
    with (
        mock.patch.object(llama, "causal_softmax", _plain_causal_softmax),
        mock.patch.object(llama, "swiglu", _plain_swiglu),
    ):
        yield llama


def _models(llama: Any, layers: int = 2) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    cpu = llama.Llama(llama.Config(layers=layers)).eval()
    return cpu, copy.deepcopy(cpu).to(DEVICE)


# Two layers: each block has two RMSNorms, then the final one: five; all but
# the first read a residual sum (x + attention, x + MLP), which with its norm
# becomes add_rms_norm where the backend serves it (host only: InfiniOps' CPU
# build has none). One SwiGLU and one causal softmax per block; query and key
# rotated per block (host only: InfiniOps' CPU build has no rotary_embedding).
LLAMA_2_LAYERS: PerBackend = {
    "host": {
        "rms_norm": 1,
        "add_rms_norm": 4,
        "swiglu": 2,
        "causal_softmax": 2,
        "rotary_embedding": 4,
    },
    "cpu": {"rms_norm": 5, "swiglu": 2, "causal_softmax": 2},
}
# The same with every norm an rms_norm (add_rms_norm not served).
LLAMA_2_LAYERS_NORMS_ALONE: PerBackend = {
    "host": {"rms_norm": 5, "swiglu": 2, "causal_softmax": 2, "rotary_embedding": 4},
    "cpu": {"rms_norm": 5, "swiglu": 2, "causal_softmax": 2},
}


@contextlib.contextmanager
def _add_rms_norm_serving(dtypes: tuple[torch.dtype, ...]) -> Iterator[None]:
    """The graph passes see add_rms_norm served in exactly ``dtypes``; every
    other operator as the backend serves it."""
    real = _graph._served_dtypes

    def served(name: str) -> tuple[torch.dtype, ...]:
        return dtypes if name == "infini::add_rms_norm" else real(name)

    with mock.patch.object(_graph, "_served_dtypes", served):
        yield


def _norms_alone() -> contextlib.AbstractContextManager[None]:
    """add_rms_norm served nowhere: a residual sum's norm is rms_norm alone.
    add_rms_norm multiplies by the weight before the inverse RMS (InfiniOps'
    AddRmsNorm), nn.RMSNorm after it, so its rewrite leaves eager's last
    bit; without it, a graph whose every reduction was rewritten gives
    eager's bits on host, which checks every other rewrite exactly."""
    return _add_rms_norm_serving(())


def _check_plain_llama_forward_rewrites_each_pattern() -> None:
    """The plain Llama's forward compiled: each pattern a fused call (the
    rotary embedding where the backend serves it), with eager's results."""
    with _norms_alone(), _plain_llama() as llama, torch.no_grad(), _wrapper_code() as codes:
        cpu, dev = _models(llama, layers=2)
        tokens = torch.randint(0, 14, (2, 8))
        got = torch.compile(dev)(tokens.to(DEVICE))
        want = cpu(tokens)
    assert _rewrites() == _expected(LLAMA_2_LAYERS_NORMS_ALONE)
    code = "\n".join(codes)
    for op in ("rms_norm", "swiglu", "causal_softmax"):
        assert f"torch.ops.infini.{op}.default" in code, op
    rotary = "torch.ops.infini.rotary_embedding_functional.default" in code
    assert rotary == {"host": True, "cpu": False}[BACKEND]
    # Every reduction of the graph was rewritten: eager's bits.
    _assert_matches_eager(got, want)


def test_plain_llama_forward_rewrites_each_pattern_and_matches_cpu() -> None:
    _check_plain_llama_forward_rewrites_each_pattern()


def test_plain_llama_residual_norms_become_add_rms_norm_where_served() -> None:
    """By default (add_rms_norm as the backend serves it) each residual
    sum's norm is one add_rms_norm call: eager's result within the two
    products' other order (a few float32 ulps per norm, carried through the
    blocks' matmuls: within the bound of Inductor's rounding)."""
    with _plain_llama() as llama, torch.no_grad(), _wrapper_code() as codes:
        cpu, dev = _models(llama, layers=2)
        tokens = torch.randint(0, 14, (2, 8))
        got = torch.compile(dev)(tokens.to(DEVICE))
        want = cpu(tokens)
    assert _rewrites() == _expected(LLAMA_2_LAYERS)
    fused = "torch.ops.infini.add_rms_norm.default" in "\n".join(codes)
    assert fused == {"host": True, "cpu": False}[BACKEND]
    _assert_within_inductor_rounding(got, want)


def test_plain_llama_rewrites_what_infinirt_cpu_serves() -> None:
    """InfiniRT ``cpu``'s served dtypes, simulated on this backend: the
    ``cpu`` expectation above, and the same result. (InfiniOps' CPU build has
    no rotary_embedding and no add_rms_norm; InfiniRT refuses its float16,
    whose conversion truncates, and float64 where InfiniOps computes in
    float.)"""
    cpu_serves = {
        "infini::rms_norm": (torch.float32, torch.bfloat16),
        "infini::add_rms_norm": (),
        "infini::swiglu": (torch.float32, torch.float64, torch.bfloat16),
        "infini::silu_and_mul": (torch.float32, torch.float64, torch.bfloat16),
        "infini::causal_softmax": (torch.float32, torch.bfloat16),
        "infini::rotary_embedding": (),
    }
    with (
        mock.patch.object(_graph, "_served_dtypes", cpu_serves.__getitem__),
        _plain_llama() as llama,
        torch.no_grad(),
    ):
        cpu, dev = _models(llama, layers=2)
        tokens = torch.randint(0, 14, (2, 8))
        got = torch.compile(dev)(tokens.to(DEVICE))
        want = cpu(tokens)
    assert _rewrites() == LLAMA_2_LAYERS["cpu"]
    # The rotations are Inductor's elementwise C++: the same bits on host.
    _assert_matches_eager(got, want)


def test_plain_llama_generation_with_a_cache_rewrites_the_causal_softmax() -> None:
    """Decoding with a KV cache: the new token sees every cached key (s < t)."""
    with _plain_llama() as llama, torch.no_grad():
        cpu, dev = _models(llama, layers=1)
        prompt = torch.randint(0, 14, (1, 6))
        want_tokens, want_margins = llama.generate(cpu, prompt, 3)
        compiled = torch.compile(dev)
        got_tokens, got_margins = llama.generate(compiled, prompt.to(DEVICE), 3)
    assert got_tokens == want_tokens
    # Three graphs: the prompt (s == t == 6), the first step (s = 1, t = 7)
    # and, from the second step on, one with the cache length symbolic.
    # Each has 3 norms (two of a residual sum: add_rms_norm where served), a
    # SwiGLU and 2 rotations; the static two rewrite their masked softmax,
    # the symbolic one cannot evaluate its mask.
    assert _rewrites() == _expected(
        {
            "host": {
                "rms_norm": 3,
                "add_rms_norm": 6,
                "swiglu": 3,
                "causal_softmax": 2,
                "rotary_embedding": 6,
            },
            "cpu": {"rms_norm": 9, "swiglu": 3, "causal_softmax": 2},
        }
    )
    # The margins (top-1 minus top-2 logit): the symbolic graph's softmax is
    # Inductor's, add_rms_norm's products are in its own order (logits of
    # about 2, measured 2e-7 apart). Eager's bits where neither is:
    # test_plain_llama_forward_rewrites_each_pattern_and_matches_cpu.
    assert got_margins == pytest.approx(want_margins, rel=0, abs=2e-6)


def test_transformers_llama_rewrites_each_pattern_and_matches_cpu() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        attn_implementation="eager",  # the softmax is in the graph (sdpa has none)
    )
    torch.manual_seed(0)
    cpu = transformers.LlamaForCausalLM(config).eval()
    dev = copy.deepcopy(cpu).to(DEVICE)
    tokens = torch.randint(1, 128, (2, 8))
    with torch.no_grad():
        got = torch.compile(dev)(tokens.to(DEVICE)).logits
        want = cpu(tokens).logits
    # LlamaRMSNorm, LlamaMLP's act_fn(gate) * up, the additive causal mask
    # (0 and the dtype's lowest value) before softmax, and apply_rotary_pos_emb
    # on query and key (rotate_half, with cos and sin of cat((freqs, freqs))).
    assert _rewrites() == _expected(LLAMA_2_LAYERS)
    # Every pattern is rewritten, but the rotary tables are computed in the
    # graph: Inductor's cos and sin.
    _assert_within_inductor_rounding(got, want)


def test_dynamic_shapes_one_compile_rewrites_norms_and_activations() -> None:
    """With symbolic sizes the norms and activations are rewritten (their
    Meta kernels keep sizes symbolic); the causal mask has no value at
    compile time, so its softmax stays as Inductor compiles it, and so do
    the rotations (the rotary rewrite needs static sizes)."""
    with _plain_llama() as llama, torch.no_grad():
        cpu, dev = _models(llama, layers=1)
        compiled = torch.compile(dev, dynamic=True)
        # The model builds its rotary table on the first call, a graph of its own.
        compiled(torch.randint(0, 14, (1, 3), device=DEVICE))
        counters.clear()
        for batch, length in ((2, 5), (3, 9), (5, 7)):
            tokens = torch.randint(0, 14, (batch, length))
            _assert_within_inductor_rounding(compiled(tokens.to(DEVICE)), cpu(tokens))
    assert counters["stats"]["unique_graphs"] == 1
    assert _rewrites() == _expected(
        {
            "host": {"rms_norm": 1, "add_rms_norm": 2, "swiglu": 1},
            "cpu": {"rms_norm": 3, "swiglu": 1},
        }
    )


def test_training_step_gradients_match_cpu() -> None:
    """In a training graph an intermediate the backward saves (the rsqrt of
    the norm) keeps its pattern as it is; whatever is rewritten, every
    gradient matches the CPU's."""
    with _plain_llama() as llama:
        cpu, dev = _models(llama, layers=1)
        cpu.train()
        dev.train()
        tokens = torch.randint(0, 14, (2, 8))
        loss_dev = torch.compile(dev)(tokens.to(DEVICE)).square().mean()
        loss_dev.backward()
        loss_cpu = cpu(tokens).square().mean()
        loss_cpu.backward()
    # The forward's SwiGLU, causal softmax and two rotations, and the
    # backward's grad * silu(gate) (a SwiGLU too).
    assert _rewrites() == _expected(
        {
            "host": {"swiglu": 2, "causal_softmax": 1, "rotary_embedding": 2},
            "cpu": {"swiglu": 2, "causal_softmax": 1},
        }
    )
    _assert_within_inductor_rounding(loss_dev.detach(), loss_cpu.detach())
    for (name, p_cpu), p_dev in zip(cpu.named_parameters(), dev.parameters(), strict=True):
        assert p_dev.grad is not None and p_cpu.grad is not None, name
        # The backward's reductions are Inductor's.
        _assert_within_inductor_rounding(p_dev.grad, p_cpu.grad)


# ------------------------------------------------------------------------ RMSNorm


def _hand_norm(eps: float) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    return norm


@pytest.mark.parametrize("eps", [1e-5, 1e-6, 1e-2])
@pytest.mark.parametrize("written", ["nn.RMSNorm", "by hand"])
def test_a_norm_is_rewritten_with_the_models_eps(eps: float, written: str) -> None:
    """Rows whose mean square (about 1e-6) is of the order of eps: a rewrite
    that passed another eps than the model's would move every value."""
    torch.manual_seed(0)
    x, w = torch.randn(2, 5, 32) * 1e-3, torch.randn(32)
    if written == "nn.RMSNorm":
        module: torch.nn.Module = torch.nn.RMSNorm(32, eps=eps)
        with torch.no_grad():
            module.weight.copy_(w)
        inputs: tuple[torch.Tensor, ...] = (x,)
    else:
        module, inputs = _Fn(_hand_norm(eps)), (x, w)
    _check_against_eager(module, *inputs, rewrites=_everywhere({"rms_norm": 1}))


def test_norms_with_two_eps_in_one_graph_each_keep_theirs() -> None:
    torch.manual_seed(0)
    x, w = torch.randn(4, 32) * 1e-3, torch.randn(32)

    def two_norms(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _hand_norm(1e-5)(x, w), _hand_norm(1e-6)(x * 2, w)

    _check_against_eager(_Fn(two_norms), x, w, rewrites=_everywhere({"rms_norm": 2}))


def _rms_of_another_tensor(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _rms_over_rows(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + 1e-6) * w


def _mean_absolute_value(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.abs().mean(-1, keepdim=True) + 1e-6) * w


def _no_weight(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _a_weight_per_row(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * y


@pytest.mark.parametrize(
    "not_a_norm",
    [_rms_of_another_tensor, _rms_over_rows, _mean_absolute_value, _no_weight, _a_weight_per_row],
    ids=lambda f: f.__name__.strip("_"),
)
def test_what_is_not_rms_norm_is_not_rewritten(
    not_a_norm: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    """One thing changed: another tensor's RMS, the mean over rows, of |x|
    instead of x^2; no weight (InfiniOps' kernel takes one), or a weight
    per element instead of per column."""
    torch.manual_seed(0)
    x, y, w = torch.randn(4, 32), torch.randn(4, 32), torch.randn(32)
    _check_left_to_inductor(_Fn(not_a_norm), x, y, w)


@pytest.mark.parametrize("also_returned", ["rsqrt", "square"])
def test_a_norm_whose_intermediate_is_also_returned_is_not_rewritten(also_returned: str) -> None:
    def norm_and_rsqrt(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        square = x.pow(2)
        r = torch.rsqrt(square.mean(-1, keepdim=True) + 1e-6)
        return x * r * w, r if also_returned == "rsqrt" else square

    _check_left_to_inductor(_Fn(norm_and_rsqrt), torch.randn(4, 32), torch.randn(32))


def test_a_dtype_the_backend_does_not_serve_is_not_rewritten() -> None:
    """float64: InfiniOps' rms_norm computes in float, so no backend serves
    float64 and the norm stays as Inductor compiles it (a rewrite would run
    in the CPU fallback)."""
    norm = torch.nn.RMSNorm(32, eps=1e-6, dtype=torch.float64)
    torch.nn.init.normal_(norm.weight)
    _check_left_to_inductor(norm, torch.randn(4, 32, dtype=torch.float64))


class _AddNorm(torch.nn.Module):
    """A residual sum, normalized, and used once more (the next block's
    residual)."""

    def __init__(self, eps: float, combine: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.combine = combine
        self.norm = torch.nn.RMSNorm(32, eps=eps)
        torch.nn.init.normal_(self.norm.weight)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.combine(x, r)
        return self.norm(s), s * 2


@contextlib.contextmanager
def _add_rms_norm_served() -> Iterator[None]:
    """add_rms_norm served in float32 on every backend (host serves it,
    InfiniRT ``cpu`` does not: claiming it there shows the rewrite too, the
    operator then running in the CPU fallback)."""
    with _add_rms_norm_serving((torch.float32,)), torch_infini.cpu_fallback.allowed("silent"):
        yield


@pytest.mark.parametrize("eps", [1e-5, 1e-6])
def test_residual_add_and_norm_become_add_rms_norm_where_served(eps: float) -> None:
    torch.manual_seed(0)
    module = _AddNorm(eps, torch.add)
    x, r = torch.randn(2, 5, 32) * 1e-3, torch.randn(2, 5, 32) * 1e-3
    with _add_rms_norm_served():
        got, want = _run(module, x, r)
    assert _rewrites() == _expected(_everywhere({"add_rms_norm": 1}))
    normed, summed = got
    assert_bitwise_equal(summed, want[1])
    # add_rms_norm's definition multiplies by the weight before the inverse
    # RMS, nn.RMSNorm after it: each product rounded twice in another order,
    # at most 4 float32 half-ulps (2.4e-7) apart. The RMS itself is the same.
    torch.testing.assert_close(normed.cpu(), want[0], rtol=3e-7, atol=0)


@pytest.mark.parametrize(
    "combine",
    [torch.sub, lambda x, r: x + r[0, 0]],
    ids=["difference", "broadcast residual"],
)
def test_a_norm_of_what_is_not_a_residual_sum_is_rms_norm_alone(
    combine: Callable[..., torch.Tensor],
) -> None:
    """A difference, or a sum with a broadcast operand, is no residual add:
    the norm alone is rewritten."""
    torch.manual_seed(0)
    module = _AddNorm(1e-5, combine)
    with _add_rms_norm_served():
        _check_against_eager(
            module,
            torch.randn(2, 5, 32),
            torch.randn(2, 5, 32),
            rewrites=_everywhere({"rms_norm": 1}),
        )


# ------------------------------------------------------------------------ SwiGLU


class _GatedHalves(torch.nn.Module):
    """One projection holding gate and up (vLLM's layout), split in two:
    ``gate, up`` in this order, or ``up, gate`` (the order silu_and_mul does
    not take)."""

    def __init__(self, gate_first: bool = True) -> None:
        super().__init__()
        self.gate_first = gate_first
        self.proj = torch.nn.Linear(16, 64)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        first, second = self.proj(h).chunk(2, -1)
        gate, up = (first, second) if self.gate_first else (second, first)
        return F.silu(gate) * up


def test_silu_of_the_first_half_times_the_second_is_silu_and_mul() -> None:
    torch.manual_seed(0)
    _check_against_eager(
        _GatedHalves(), torch.randn(4, 16), rewrites=_everywhere({"silu_and_mul": 1})
    )


def test_gate_and_up_halves_in_the_other_order_are_swiglu_not_silu_and_mul() -> None:
    """``up, gate = x.chunk(2)``: silu_and_mul(x) would compute silu(up) *
    gate. Rewritten to swiglu(up, gate), which takes the halves as they are."""
    torch.manual_seed(0)
    _check_against_eager(
        _GatedHalves(gate_first=False), torch.randn(4, 16), rewrites=_everywhere({"swiglu": 1})
    )


def _halves_of_two_tensors(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.silu(x[..., :24]) * y[..., 24:]


def _halves_along_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    gate, up = x[:, :24].chunk(2, 0)
    return F.silu(gate) * up


def _thirds(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.silu(x[..., :16]) * x[..., 16:32]


def _the_same_half(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.silu(x[..., :24]) * x[..., 24:].flip(-1)


@pytest.mark.parametrize(
    "product",
    [_halves_of_two_tensors, _halves_along_rows, _thirds, _the_same_half],
    ids=lambda f: f.__name__.strip("_"),
)
def test_what_is_not_one_tensors_halves_is_swiglu(
    product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    """Gate and up that are not the first and the second half of one
    tensor's last dimension: swiglu of the two as they are."""
    torch.manual_seed(0)
    _check_against_eager(
        _Fn(product), torch.randn(4, 48), torch.randn(4, 48), rewrites=_everywhere({"swiglu": 1})
    )


def _sigmoid_of_another_tensor(g: torch.Tensor, u: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    return g / (1 + torch.exp(-o)) * u


def _two_plus_exp(g: torch.Tensor, u: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    return g / (2 + torch.exp(-g)) * u


def _exp_without_the_minus(g: torch.Tensor, u: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    return g / (1 + torch.exp(g)) * u


def _broadcast_gate(g: torch.Tensor, u: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """The fused kernel takes one shape: up [4, 8] times silu of a gate [8]."""
    return u * F.silu(g[0])


@pytest.mark.parametrize(
    "not_swiglu",
    [_sigmoid_of_another_tensor, _two_plus_exp, _exp_without_the_minus, _broadcast_gate],
    ids=lambda f: f.__name__.strip("_"),
)
def test_what_is_not_silu_times_up_is_not_rewritten(
    not_swiglu: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    torch.manual_seed(0)
    g, u, o = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)
    _check_left_to_inductor(_Fn(not_swiglu), g, u, o)


# ---------------------------------------------------------------- causal softmax


def _masked_softmax(
    fill: float, diagonal: int | None = None, dim: int = -1
) -> Callable[[torch.Tensor], torch.Tensor]:
    """softmax(masked_fill(scores, ~tril(diagonal), fill), dim): causal
    where fill is -inf, diagonal t - s (the default) and dim -1."""

    def masked(scores: torch.Tensor) -> torch.Tensor:
        s, t = scores.shape[-2:]
        d = t - s if diagonal is None else diagonal
        allowed = torch.ones(s, t, dtype=torch.bool, device=scores.device).tril(d)
        return torch.softmax(scores.masked_fill(~allowed, fill), dim)

    return masked


def _additive_mask(blocked: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """softmax(scores + mask): 0 where causal, ``blocked`` elsewhere."""

    def masked(scores: torch.Tensor) -> torch.Tensor:
        s, t = scores.shape[-2:]
        allowed = torch.ones(s, t, dtype=torch.bool, device=scores.device).tril(t - s)
        zeros = torch.zeros(s, t, device=scores.device)
        return torch.softmax(scores + zeros.masked_fill(~allowed, blocked), -1)

    return masked


def _alibi(scores: torch.Tensor) -> torch.Tensor:
    """softmax(scores + bias): -inf where causal masks, and ALiBi's linear
    bias by distance on the keys a query sees (not 0: no causal mask)."""
    s, t = scores.shape[-2:]
    rows = torch.arange(s, device=scores.device)[:, None] + (t - s)
    cols = torch.arange(t, device=scores.device)
    bias = ((cols - rows) * 0.5).float().masked_fill(cols > rows, float("-inf"))
    return torch.softmax(scores + bias, -1)


@pytest.mark.parametrize(
    ("shape", "masked"),
    [
        ((3, 6, 6), _masked_softmax(float("-inf"))),
        ((2, 3, 4, 7), _masked_softmax(float("-inf"))),  # 4-D, 3 cached keys
        ((3, 6, 6), _additive_mask(float("-inf"))),
        ((3, 2, 5), _additive_mask(torch.finfo(torch.float32).min)),  # transformers'
    ],
    ids=["masked_fill", "4d with a cache", "additive -inf", "additive lowest"],
)
def test_a_causal_softmax_is_rewritten(
    shape: tuple[int, ...], masked: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    torch.manual_seed(0)
    _check_against_eager(
        _Fn(masked), torch.randn(*shape), rewrites=_everywhere({"causal_softmax": 1})
    )


@pytest.mark.parametrize(
    ("shape", "masked"),
    [
        ((3, 6, 6), _masked_softmax(0.0)),
        ((3, 6, 6), _masked_softmax(-1.0)),
        # exp(-1e4 - max) is 0 in float32: the same values as -inf, but
        # another constant than the pass was written for.
        ((3, 6, 6), _masked_softmax(-1e4)),
        ((3, 6, 6), _additive_mask(-1e4)),
        ((3, 6, 6), _additive_mask(1.0)),
        ((3, 4, 7), _alibi),
        ((3, 6, 6), _masked_softmax(float("-inf"), diagonal=1)),  # one key too many
        ((3, 4, 7), _masked_softmax(float("-inf"), diagonal=2)),  # one key too few
        ((3, 4, 7), _masked_softmax(float("-inf"), diagonal=0)),  # the cached keys masked
        ((3, 6, 6), _masked_softmax(float("-inf"), dim=-2)),  # over the queries
    ],
    ids=[
        "fill 0",
        "fill -1",
        "fill -1e4",
        "additive -1e4",
        "additive +1",
        "additive ALiBi bias",
        "diagonal t - s + 1",
        "diagonal t - s - 1",
        "cache masked",
        "softmax over queries",
    ],
)
def test_a_softmax_under_another_mask_or_fill_is_not_rewritten(
    shape: tuple[int, ...], masked: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    torch.manual_seed(0)
    _check_left_to_inductor(_Fn(masked), torch.randn(*shape))


def test_a_mask_that_is_not_causal_is_not_rewritten() -> None:
    """The upper triangle kept instead of the lower: softmax as written."""

    def anti_causal(scores: torch.Tensor) -> torch.Tensor:
        s, t = scores.shape[-2:]
        blocked = torch.ones(s, t, dtype=torch.bool, device=scores.device).tril(-1)
        return torch.softmax(scores.masked_fill(blocked, float("-inf")), -1)

    _check_left_to_inductor(_Fn(anti_causal), torch.randn(3, 6, 6))


def test_a_mask_from_an_input_is_not_rewritten() -> None:
    """A mask the graph receives may be anything at run time."""

    def masked(scores: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scores.masked_fill(blocked, float("-inf")), -1)

    causal_blocked = torch.ones(6, 6, dtype=torch.bool).triu(1)
    _check_left_to_inductor(_Fn(masked), torch.randn(3, 6, 6), causal_blocked)


# ----------------------------------------------------------------------- the mode


@pytest.mark.parametrize("mode", ["auto", "never"])
def test_the_mode_decides_whether_the_patterns_become_fused_calls(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """auto (the default): where device memory is host memory (host in shared
    mode, InfiniRT cpu) Inductor's own C++ loop is the fused kernel, so
    nothing is rewritten; where it is not (the host device's discrete mode,
    as on an accelerator) the Llama's patterns become torch.ops.infini
    calls, with the CPU's results. never: nothing anywhere."""
    monkeypatch.setenv(graph_passes.MODE_VARIABLE, mode)
    rewrites = mode == "auto" and not torch_infini._backend.host_addressable()
    assert graph_passes.rewrites_enabled() == rewrites
    if not rewrites:
        with _plain_llama() as llama, _wrapper_code() as codes:
            cpu, _ = _models(llama, 1)
            _check_left_to_inductor(cpu, torch.randint(0, 14, (2, 8)))
        assert "torch.ops.infini" not in "\n".join(codes)
        return
    _check_plain_llama_forward_rewrites_each_pattern()


def test_a_bad_mode_fails_the_compile_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(graph_passes.MODE_VARIABLE, "sometimes")
    with pytest.raises(Exception, match=r"TORCH_INFINI_GRAPH_PASSES='sometimes': expected one of"):
        torch.compile(_Fn(lambda x: x.relu() + 1))(torch.randn(4, device=DEVICE))
    x = torch.randn(4)  # a CPU-only graph still compiles
    assert_bitwise_equal(torch.compile(_Fn(lambda a: a.relu() + 3))(x), x.relu() + 3)


# --------------------------------------------------------------------- the pipeline


class _PluginWithPasses:
    """The selected plug-in, its pass pipeline replaced."""

    def __init__(self, names: list[str]) -> None:
        self._real = _compiler.plugin()
        self._names = names

    def pass_pipeline(self) -> list[str]:
        return self._names

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_a_pipeline_entry_that_names_no_pass_fails_naming_the_plugin() -> None:
    plugin = _PluginWithPasses(["torch_infini.graph_passes.rms_norm:no_such_pass"])
    with mock.patch.object(_compiler, "plugin", lambda: plugin):
        with pytest.raises(Exception, match=r"compiler plug-in 'cpu'.*no_such_pass"):
            torch.compile(_Fn(lambda x: x.relu() + 1))(torch.randn(4, device=DEVICE))


def test_a_broken_pipeline_leaves_cpu_graphs_alone() -> None:
    """Inductor keys every compile on every device's pass: a CPU-only graph
    still compiles, and the infini graph fails with the plug-in's error."""
    plugin = _PluginWithPasses(["no_such_package.passes:rewrite"])
    with mock.patch.object(_compiler, "plugin", lambda: plugin):
        x = torch.randn(4)
        assert_bitwise_equal(torch.compile(_Fn(lambda a: a.relu() + 1))(x), x.relu() + 1)
        with pytest.raises(Exception, match=r"cannot import 'no_such_package.passes'"):
            torch.compile(_Fn(lambda a: a.relu() + 2))(x.to(DEVICE))


def test_the_pipeline_runs_in_the_plugins_order() -> None:
    calls: list[str] = []

    def first(gm: torch.fx.GraphModule) -> int:
        calls.append("first")
        return 0

    def second(gm: torch.fx.GraphModule) -> int:
        calls.append("second")
        return 0

    module = types.ModuleType("_infini_test_passes")
    module.first, module.second = first, second  # type: ignore[attr-defined]
    plugin = _PluginWithPasses(["_infini_test_passes:second", "_infini_test_passes:first"])
    with (
        mock.patch.dict(sys.modules, {"_infini_test_passes": module}),
        mock.patch.object(_compiler, "plugin", lambda: plugin),
    ):
        torch.compile(_Fn(lambda x: x.relu() + 1))(torch.randn(4, device=DEVICE))
    assert calls == ["second", "first"]


def test_the_builtin_plugin_names_the_builtin_pipeline() -> None:
    assert tuple(_compiler.plugin().pass_pipeline()) == graph_passes.BUILTIN_PIPELINE
