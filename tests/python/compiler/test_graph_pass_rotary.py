"""The rotary graph pass: torch.compile on infini rewrites a rotation by
halves (rotate_half, Llama's and transformers' way) by cos/sin tables that
repeat their halves into one torch.ops.infini.rotary_embedding_functional
call, and leaves every near miss to Inductor. The oracle is CPU eager, as in
test_graph_passes.py (graph_pass_checks.py has the checks).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from graph_pass_checks import (
    BACKEND,
    DEVICE,
    NOTHING,
    PerBackend,
    _assert_matches_eager,
    _check_against_eager,
    _check_left_to_inductor,
    _expected,
    _Fn,
    _fresh_compile,  # noqa: F401  (the autouse fixture)
    _rewrites,
    _wrapper_code,
)
from infini_testing import llama_example, requires_inductor

pytestmark = requires_inductor

# ------------------------------------------------------------------------ rotary


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate_half_the_other_way(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((x[..., half:], -x[..., :half]), dim=-1)


class _RotateHalfAttentionInput(torch.nn.Module):
    """transformers' rotary embedding: q [b, heads, t, d] from a projection,
    cos and sin of ``cat((freqs, freqs), -1)`` [b, t, d] per position id, or
    tables the caller passes (which may be anything). ``second_half`` scales
    the angles of the tables' second half (1: a rotation), ``rotate`` turns
    the halves (transformers' rotate_half, or the sign on the other half)."""

    def __init__(
        self,
        heads: int = 3,
        d: int = 8,
        second_half: float = 1.0,
        rotate: Callable[[torch.Tensor], torch.Tensor] = _rotate_half,
    ) -> None:
        super().__init__()
        self.heads, self.d = heads, d
        self.second_half, self.rotate = second_half, rotate
        self.proj = torch.nn.Linear(16, heads * d, bias=False)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d))

    def forward(
        self, h: torch.Tensor, positions: torch.Tensor, tables: tuple | None = None
    ) -> torch.Tensor:
        b, t, _ = h.shape
        q = self.proj(h).view(b, t, self.heads, self.d).transpose(1, 2)
        if tables is None:
            freqs = positions[:, :, None].float() * self.inv_freq
            second = freqs if self.second_half == 1.0 else freqs * self.second_half
            emb = torch.cat((freqs, second), dim=-1)
            cos, sin = emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)
        else:
            cos, sin = tables
        return q * cos + self.rotate(q) * sin


ROTARY_ONCE: PerBackend = {"host": {"rotary_embedding": 1}, "cpu": {}}

_POSITIONS = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])


def test_rotate_half_with_tables_that_repeat_their_halves_is_rotary_embedding() -> None:
    """The tables are Inductor's cos and sin of the angles."""
    torch.manual_seed(0)
    _check_left_to_inductor(
        _RotateHalfAttentionInput(), torch.randn(2, 5, 16), _POSITIONS, rewrites=ROTARY_ONCE
    )


@pytest.mark.parametrize(
    "changed",
    [{"second_half": 2.0}, {"rotate": _rotate_half_the_other_way}],
    ids=["tables whose halves differ", "rotate_half with the sign on x1"],
)
def test_rotate_half_that_is_no_rotation_by_the_tables_is_not_rewritten(
    changed: dict[str, Any],
) -> None:
    """cos and sin of ``cat((f, 2 f))`` turn the pairs (j, j + h) by two
    angles; ``cat((x2, -x1))`` turns them by minus the angle. Neither is
    what rotary_embedding computes."""
    torch.manual_seed(0)
    module = _RotateHalfAttentionInput(**changed)
    _check_left_to_inductor(module, torch.randn(2, 5, 16), _POSITIONS)


def _rotate_half_by_repeated_halves(
    q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, second_cos: torch.Tensor
) -> torch.Tensor:
    """transformers' form with tables ``cat((c, c))`` built in the graph
    from halves computed outside it ([b, 1, t, d / 2]): no cos or sin in the
    graph, so a rewrite gives eager's bits."""
    big_cos, big_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    return q * big_cos + _rotate_half(q) * big_sin


def _rotate_half_the_other_way_by_repeated_halves(
    q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, second_cos: torch.Tensor
) -> torch.Tensor:
    big_cos, big_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    return q * big_cos + _rotate_half_the_other_way(q) * big_sin


def _rotate_half_by_halves_that_differ(
    q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, second_cos: torch.Tensor
) -> torch.Tensor:
    big_cos, big_sin = torch.cat((cos, second_cos), -1), torch.cat((sin, sin), -1)
    return q * big_cos + _rotate_half(q) * big_sin


def _repeated_halves_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    angles = torch.outer(torch.arange(5).float(), torch.rand(4)).expand(2, 1, 5, 4)
    other = torch.outer(torch.arange(5).float(), torch.rand(4)).expand(2, 1, 5, 4)
    return torch.randn(2, 3, 5, 8), angles.cos(), angles.sin(), other.cos()


def test_rotate_half_by_tables_that_repeat_their_halves_is_rotary_embedding_bit_for_bit() -> None:
    _check_against_eager(
        _Fn(_rotate_half_by_repeated_halves), *_repeated_halves_inputs(), rewrites=ROTARY_ONCE
    )


@pytest.mark.parametrize(
    "not_a_rotation",
    [_rotate_half_the_other_way_by_repeated_halves, _rotate_half_by_halves_that_differ],
    ids=["the sign on x1", "cos halves that differ"],
)
def test_rotate_half_that_is_no_rotation_is_not_rewritten_bit_for_bit(
    not_a_rotation: Callable[..., torch.Tensor],
) -> None:
    """``cat((x2, -x1))`` turns the pairs by minus the angle; a cos table
    whose halves differ turns them by two angles (a rewrite would read the
    first half only)."""
    _check_against_eager(_Fn(not_a_rotation), *_repeated_halves_inputs(), rewrites=NOTHING)


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
    assert _rewrites() == _expected(NOTHING)
    _assert_matches_eager(got, want)


def _rotate_by_halves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def test_a_3d_rotation_by_halves_is_rotary_embedding() -> None:
    """[heads, t, d] (no batch), tables [t, d / 2]; the result keeps the
    layout the decomposition gives (contiguous)."""
    torch.manual_seed(0)
    angles = torch.outer(torch.arange(6).float(), torch.rand(4))
    x = torch.randn(6, 3, 8).transpose(0, 1)  # [heads, t, d], not contiguous
    _check_against_eager(
        _Fn(_rotate_by_halves), x, angles.cos(), angles.sin(), rewrites=ROTARY_ONCE
    )


class _LlamaRope(torch.nn.Module):
    """The Llama example's rotary embedding (its ``rope_tables`` and
    ``apply_rope``) on query and key projections."""

    def __init__(self) -> None:
        super().__init__()
        llama = llama_example()
        self.cfg = llama.Config()
        self.apply_rope = llama.apply_rope
        self.q = torch.nn.Linear(self.cfg.dim, self.cfg.dim, bias=False)
        self.k = torch.nn.Linear(self.cfg.dim, self.cfg.dim, bias=False)
        cos, sin = llama.rope_tables(self.cfg)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        heads, d = self.cfg.heads, self.cfg.head_dim
        q = self.q(x).view(b, t, heads, d).transpose(1, 2)
        k = self.k(x).view(b, t, heads, d).transpose(1, 2)
        cos, sin = self.cos[:t], self.sin[:t]
        return self.apply_rope(q, cos, sin), self.apply_rope(k, cos, sin)


def test_the_llama_examples_rotary_embedding_is_rewritten() -> None:
    torch.manual_seed(0)
    module = _LlamaRope()
    x = torch.randn(2, 9, module.cfg.dim)
    with _wrapper_code() as codes:
        _check_against_eager(module, x, rewrites={"host": {"rotary_embedding": 2}, "cpu": {}})
    rotary = "torch.ops.infini.rotary_embedding_functional.default" in "\n".join(codes)
    assert rotary == {"host": True, "cpu": False}[BACKEND]


def _sign_flipped(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin), dim=-1)


def _cos_and_sin_exchanged(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * sin + x1 * cos), dim=-1)


def _halves_exchanged(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x2 * cos - x1 * sin, x1 * cos + x2 * sin), dim=-1)


def _the_first_half_twice(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * cos + x1 * sin), dim=-1)


@pytest.mark.parametrize(
    "not_a_rotation",
    [_sign_flipped, _cos_and_sin_exchanged, _halves_exchanged, _the_first_half_twice],
    ids=lambda f: f.__name__.strip("_"),
)
def test_halves_that_are_not_rotated_by_the_angle_are_not_rewritten(
    not_a_rotation: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    """The rotation by minus the angle, cos and sin exchanged in the second
    half, the halves' roles exchanged, the first half where the second goes."""
    torch.manual_seed(0)
    angles = torch.outer(torch.arange(6).float(), torch.rand(4))
    x = torch.randn(2, 3, 6, 8)
    _check_against_eager(_Fn(not_a_rotation), x, angles.cos(), angles.sin(), rewrites=NOTHING)


def test_tables_that_vary_over_heads_are_not_rewritten() -> None:
    """The kernel turns every head of a token by one angle."""
    angles = torch.rand(2, 3, 5, 4)  # [b, heads, t, d / 2]
    x = torch.randn(2, 3, 5, 8)
    _check_against_eager(_Fn(_rotate_by_halves), x, angles.cos(), angles.sin(), rewrites=NOTHING)
