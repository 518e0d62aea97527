"""The compiler plug-in's graph passes: torch.compile on infini rewrites what
InfiniOps has fused kernels for into one torch.ops.infini call each.

Models are written the plain torch.nn way (no torch_infini.ops call): a
variant of the Llama example and a transformers Llama built from a config.
Each rewrite is counted pattern by pattern
(``counters["infini_graph_passes"]``), and results match CPU eager (the
oracle) within PyTorch's float32 tolerances: the fused kernels multiply in
another order than the decomposition Inductor would have compiled.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import llama_example
from torch._dynamo.utils import counters
from torch._inductor.graph import GraphLowering
from torch_infini import _compiler, graph_passes
from torch_infini.graph_passes import _graph

pytestmark = pytest.mark.skipif(
    not torch_infini._backend.host_addressable(),
    reason="torch.compile on this backend compiles with aot_eager: no Inductor graph passes",
)

DEVICE = torch.device("infini", 0)
COUNTER = "infini_graph_passes"


@pytest.fixture(autouse=True)
def _fresh_compile(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Rewrites on this host-addressable backend too (by default only where
    # device memory is not host memory): the tests exercise them here.
    monkeypatch.setenv(graph_passes.MODE_VARIABLE, "always")
    torch._dynamo.reset()
    counters.clear()
    # Every graph is compiled (a cache hit would skip the passes) with one
    # compile thread (CI's two cores).
    with torch._inductor.config.patch(force_disable_caches=True, compile_threads=1):
        yield
    torch._dynamo.reset()


def _rewrites() -> dict[str, int]:
    return dict(counters[COUNTER])


@contextlib.contextmanager
def _wrapper_code() -> Iterator[list[str]]:
    codes: list[str] = []
    with mock.patch.object(GraphLowering, "save_output_code", codes.append):
        yield codes


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


def _expected_rotary(rewrites: int) -> dict[str, int]:
    """Rotations become rotary_embedding where the backend serves it for
    float32 (host; InfiniOps has it on accelerators only, so not InfiniRT
    `cpu`, where the rotation stays as Inductor compiles it)."""
    served = torch.float32 in _graph._served_dtypes("infini::rotary_embedding")
    return {"rotary_embedding": rewrites} if served else {}


def _expected_norms(layers: int) -> dict[str, int]:
    """Each block has two RMSNorms, then one final: the first reads the
    embedding, the others a residual sum (add_rms_norm where the backend
    serves it for float32, else the norm alone)."""
    if torch.float32 in _graph._served_dtypes("infini::add_rms_norm"):
        return {"rms_norm": 1, "add_rms_norm": 2 * layers}
    return {"rms_norm": 2 * layers + 1}


def test_plain_llama_forward_rewrites_each_pattern_and_matches_cpu() -> None:
    layers = 2
    with _plain_llama() as llama, torch.no_grad(), _wrapper_code() as codes:
        cpu, dev = _models(llama, layers)
        tokens = torch.randint(0, 14, (2, 8))
        got = torch.compile(dev)(tokens.to(DEVICE))
        want = cpu(tokens)
    # Query and key of each layer are rotated by position.
    assert _rewrites() == {
        **_expected_norms(layers),
        "swiglu": layers,
        "causal_softmax": layers,
        **_expected_rotary(2 * layers),
    }
    code = "\n".join(codes)
    for op in ("rms_norm", "swiglu", "causal_softmax"):
        assert f"torch.ops.infini.{op}.default" in code, op
    served = bool(_expected_rotary(1))
    assert ("torch.ops.infini.rotary_embedding_functional.default" in code) == served
    torch.testing.assert_close(got.cpu(), want)


def test_plain_llama_generation_with_a_cache_rewrites_the_causal_softmax() -> None:
    """Decoding with a KV cache: the new token sees every cached key (s < t)."""
    with _plain_llama() as llama, torch.no_grad():
        cpu, dev = _models(llama, layers=1)
        prompt = torch.randint(0, 14, (1, 6))
        want_tokens, _ = llama.generate(cpu, prompt, 3)
        compiled = torch.compile(dev)
        got_tokens, _ = llama.generate(compiled, prompt.to(DEVICE), 3)
    assert got_tokens == want_tokens
    # The prompt (s == t) and each decoding step (s = 1 < t) are graphs of
    # their own; each rewrote its masked softmax.
    assert _rewrites()["causal_softmax"] >= 2


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
    assert _rewrites() == {
        **_expected_norms(2),
        "swiglu": 2,
        "causal_softmax": 2,
        **_expected_rotary(4),
    }
    torch.testing.assert_close(got.cpu(), want)


def test_dynamic_shapes_one_compile_rewrites_norms_and_activations() -> None:
    """With symbolic sizes the norms and activations are rewritten (their
    Meta kernels keep sizes symbolic); the causal mask has no value at
    compile time, so its softmax stays as Inductor compiles it."""
    with _plain_llama() as llama, torch.no_grad():
        cpu, dev = _models(llama, layers=1)
        compiled = torch.compile(dev, dynamic=True)
        # The model builds its rotary table on the first call, a graph of its own.
        compiled(torch.randint(0, 14, (1, 3), device=DEVICE))
        counters.clear()
        for batch, length in ((2, 5), (3, 9), (5, 7)):
            tokens = torch.randint(0, 14, (batch, length))
            torch.testing.assert_close(compiled(tokens.to(DEVICE)).cpu(), cpu(tokens))
    assert counters["stats"]["unique_graphs"] == 1
    assert _rewrites() == {**_expected_norms(1), "swiglu": 1}


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
        cpu(tokens).square().mean().backward()
    torch.testing.assert_close(loss_dev.cpu(), cpu(tokens).square().mean().detach())
    for (name, p_cpu), p_dev in zip(cpu.named_parameters(), dev.parameters(), strict=True):
        assert p_dev.grad is not None, name
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, msg=name)


# ------------------------------------------------------------------ one pattern each


class _GatedHalves(torch.nn.Module):
    """One projection holding gate and up (vLLM's layout), split in two."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 64)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        gate, up = self.proj(h).chunk(2, -1)
        return F.silu(gate) * up


def _compiled_matches_cpu(module: torch.nn.Module, *inputs: torch.Tensor) -> None:
    dev = copy.deepcopy(module).to(DEVICE)
    with torch.no_grad():
        got = torch.compile(dev)(*(x.to(DEVICE) for x in inputs))
        want = module(*inputs)
    torch.testing.assert_close(got.cpu(), want)
    assert got.stride() == want.stride()


def test_silu_of_one_half_times_the_other_is_silu_and_mul() -> None:
    torch.manual_seed(0)
    _compiled_matches_cpu(_GatedHalves(), torch.randn(4, 16))
    assert _rewrites() == {"silu_and_mul": 1}


class _Fn(torch.nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> Any:
        return self.fn(*args)


def test_a_broadcast_product_is_not_swiglu() -> None:
    """``up`` [4, 8] times silu of a gate [8]: the fused kernel takes one
    shape, so nothing is rewritten."""
    _compiled_matches_cpu(
        _Fn(lambda up, gate: up * F.silu(gate)), torch.randn(4, 8), torch.randn(8)
    )
    assert _rewrites() == {}


def test_a_mask_that_is_not_causal_is_not_rewritten() -> None:
    """The upper triangle kept instead of the lower: softmax as written."""

    def anti_causal(scores: torch.Tensor) -> torch.Tensor:
        s, t = scores.shape[-2:]
        blocked = torch.ones(s, t, dtype=torch.bool, device=scores.device).tril(-1)
        return torch.softmax(scores.masked_fill(blocked, float("-inf")), -1)

    _compiled_matches_cpu(_Fn(anti_causal), torch.randn(3, 6, 6))
    assert _rewrites() == {}


def test_a_mask_from_an_input_is_not_rewritten() -> None:
    """A mask the graph receives may be anything at run time."""

    def masked(scores: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scores.masked_fill(blocked, float("-inf")), -1)

    causal_blocked = torch.ones(6, 6, dtype=torch.bool).triu(1)
    _compiled_matches_cpu(_Fn(masked), torch.randn(3, 6, 6), causal_blocked)
    assert _rewrites() == {}


def test_a_4d_causal_softmax_is_rewritten_through_a_3d_view() -> None:
    _compiled_matches_cpu(_Fn(_plain_causal_softmax), torch.randn(2, 3, 4, 7))
    assert _rewrites() == {"causal_softmax": 1}


@pytest.mark.parametrize("also_returned", ["rsqrt", "square"])
def test_a_norm_whose_intermediate_is_also_returned_is_not_rewritten(also_returned: str) -> None:
    def norm_and_rsqrt(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        square = x.pow(2)
        r = torch.rsqrt(square.mean(-1, keepdim=True) + 1e-6)
        return x * r * w, r if also_returned == "rsqrt" else square

    module = _Fn(norm_and_rsqrt)
    x, w = torch.randn(4, 32), torch.randn(32)
    dev = copy.deepcopy(module).to(DEVICE)
    with torch.no_grad():
        got = torch.compile(dev)(x.to(DEVICE), w.to(DEVICE))
    want = norm_and_rsqrt(x, w)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), e)
    assert _rewrites() == {}


def test_a_dtype_the_backend_does_not_serve_is_not_rewritten() -> None:
    """float64: InfiniOps' rms_norm has no such kernel, so the norm stays
    as Inductor compiles it (a rewrite would run in the CPU fallback)."""
    assert torch.float64 not in _graph._served_dtypes("infini::rms_norm")
    norm = torch.nn.RMSNorm(32, eps=1e-6, dtype=torch.float64)
    torch.nn.init.normal_(norm.weight)
    _compiled_matches_cpu(norm, torch.randn(4, 32, dtype=torch.float64))
    assert _rewrites() == {}


def test_residual_add_and_norm_become_add_rms_norm_where_served() -> None:
    """add_rms_norm has no native kernel on this backend yet: claiming one
    shows the rewrite (the operator then runs in the CPU fallback, whose
    result must still match)."""

    class AddNorm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.RMSNorm(32, eps=1e-5)
            torch.nn.init.normal_(self.norm.weight)

        def forward(self, x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            s = x + r
            return self.norm(s), s * 2

    real = _graph._served_dtypes

    def claims_add_rms_norm(name: str) -> tuple[torch.dtype, ...]:
        return (torch.float32,) if name == "infini::add_rms_norm" else real(name)

    module = AddNorm()
    x, r = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    dev = copy.deepcopy(module).to(DEVICE)
    with (
        mock.patch.object(_graph, "_served_dtypes", claims_add_rms_norm),
        torch_infini.cpu_fallback.allowed("silent"),
        torch.no_grad(),
    ):
        got = torch.compile(dev)(x.to(DEVICE), r.to(DEVICE))
    want = module(x, r)
    assert _rewrites() == {"add_rms_norm": 1}
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), e)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _RotateHalfAttentionInput(torch.nn.Module):
    """transformers' rotary embedding: q [b, heads, t, d] from a projection,
    cos and sin of ``cat((freqs, freqs), -1)`` [b, t, d] per position id, or
    tables the caller passes (which may be anything)."""

    def __init__(self, heads: int = 3, d: int = 8) -> None:
        super().__init__()
        self.heads, self.d = heads, d
        self.proj = torch.nn.Linear(16, heads * d, bias=False)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d))

    def forward(
        self, h: torch.Tensor, positions: torch.Tensor, tables: tuple | None = None
    ) -> torch.Tensor:
        b, t, _ = h.shape
        q = self.proj(h).view(b, t, self.heads, self.d).transpose(1, 2)
        if tables is None:
            freqs = positions[:, :, None].float() * self.inv_freq
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)
        else:
            cos, sin = tables
        return q * cos + _rotate_half(q) * sin


def test_rotate_half_with_tables_that_repeat_their_halves_is_rotary_embedding() -> None:
    torch.manual_seed(0)
    module = _RotateHalfAttentionInput()
    h, positions = torch.randn(2, 5, 16), torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    _compiled_matches_cpu(module, h, positions)
    assert _rewrites() == _expected_rotary(1)


def test_rotate_half_with_tables_from_inputs_is_not_rewritten() -> None:
    """Tables the graph receives need not repeat their halves: x * C +
    rotate_half(x) * S is then no rotation, and stays as written."""
    torch.manual_seed(0)
    module = _RotateHalfAttentionInput()
    h, positions = torch.randn(2, 5, 16), torch.arange(5).expand(2, 5)
    cos, sin = torch.randn(2, 1, 5, 8), torch.randn(2, 1, 5, 8)
    dev = copy.deepcopy(module).to(DEVICE)
    with torch.no_grad():
        got = torch.compile(dev)(
            h.to(DEVICE), positions.to(DEVICE), (cos.to(DEVICE), sin.to(DEVICE))
        )
        want = module(h, positions, (cos, sin))
    torch.testing.assert_close(got.cpu(), want)
    assert _rewrites() == {}


def _rotate_by_halves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def test_a_3d_rotation_by_halves_is_rotary_embedding() -> None:
    """[heads, t, d] (no batch), tables [t, d / 2]; the result keeps the
    layout the decomposition gives (contiguous)."""
    angles = torch.outer(torch.arange(6).float(), torch.rand(4))
    x = torch.randn(6, 3, 8).transpose(0, 1)  # [heads, t, d], not contiguous
    _compiled_matches_cpu(_Fn(_rotate_by_halves), x, angles.cos(), angles.sin())
    assert _rewrites() == _expected_rotary(1)


def test_tables_that_vary_over_heads_are_not_rewritten() -> None:
    """The kernel turns every head of a token by one angle."""
    angles = torch.rand(2, 3, 5, 4)  # [b, heads, t, d / 2]
    x = torch.randn(2, 3, 5, 8)
    _compiled_matches_cpu(_Fn(_rotate_by_halves), x, angles.cos(), angles.sin())
    assert _rewrites() == {}


@pytest.mark.parametrize("mode", ["auto", "never"])
def test_by_default_a_host_addressable_backend_leaves_the_patterns_to_inductor(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """auto: where device memory is host memory, Inductor's own C++ loop is
    the fused kernel, so nothing is rewritten (an accelerator rewrites);
    never: nothing anywhere. Results match either way."""
    monkeypatch.setenv(graph_passes.MODE_VARIABLE, mode)
    assert graph_passes.rewrites_enabled() == (
        mode == "auto" and not torch_infini._backend.host_addressable()
    )
    with _plain_llama() as llama, torch.no_grad(), _wrapper_code() as codes:
        cpu, dev = _models(llama, 1)
        tokens = torch.randint(0, 14, (2, 8))
        torch.testing.assert_close(torch.compile(dev)(tokens.to(DEVICE)).cpu(), cpu(tokens))
    if not graph_passes.rewrites_enabled():
        assert _rewrites() == {}
        assert "torch.ops.infini" not in "\n".join(codes)


def test_a_bad_mode_fails_the_compile_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(graph_passes.MODE_VARIABLE, "sometimes")
    with pytest.raises(Exception, match=r"TORCH_INFINI_GRAPH_PASSES='sometimes': expected one of"):
        torch.compile(_Fn(lambda x: x.relu() + 1))(torch.randn(4, device=DEVICE))
    x = torch.randn(4)  # a CPU-only graph still compiles
    torch.testing.assert_close(torch.compile(_Fn(lambda a: a.relu() + 3))(x), x.relu() + 3)


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
        torch.testing.assert_close(torch.compile(_Fn(lambda a: a.relu() + 1))(x), x.relu() + 1)
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

    import sys
    import types

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
