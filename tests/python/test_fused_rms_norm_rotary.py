"""torch.ops.infini's add_rms_norm, fused_add_rms_norm and rotary_embedding.

The CPU implementation is checked against the definition (InfiniOps' kernel
written in PyTorch, docs/fused_operators.md), then serves as the oracle for
infini, where these run in the CPU fallback (InfiniOps has them for CUDA-like
device types only): bit for bit, under the fallback's policy. Gradients of
add_rms_norm and of the out-of-place rotary against PyTorch's autograd of
the definition and gradcheck; the in-place forms refuse a gradient; opcheck
checks the schemas (mutations, aliasing) and the Meta kernels.
"""

from __future__ import annotations

import pytest
import torch
import torch_infini
from infini_testing import raises_exactly
from op_helpers import assert_matches, make_cpu
from torch_infini import ops

DEVICE = torch.device("infini", 0)
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _wide(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


# ---------------------------------------------------------------- definitions


def add_rms_norm_definition(
    x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    dt, wide = x.dtype, _wide(x.dtype)
    residual_out = (x.to(wide) + r.to(wide)).to(dt)
    s = residual_out.to(wide)
    rms = torch.rsqrt(s.square().mean(-1, keepdim=True) + eps)
    return ((s * w.to(wide)) * rms).to(dt), residual_out


def rotary_definition(
    positions: torch.Tensor,
    t: torch.Tensor,
    head_size: int,
    cache: torch.Tensor,
    is_neox: bool,
    offset: int = 0,
    inverse: bool = False,
) -> torch.Tensor:
    """Element by element: pair (a, b) of each head turns by the angle of
    cache[pos] (cos in the first half of the row, sin in the second)."""
    out = t.clone()
    heads = out.reshape(*positions.shape, -1, head_size)
    rot = cache.shape[1]
    wide = _wide(t.dtype)
    for index in torch.cartesian_prod(*(torch.arange(n) for n in positions.shape)).reshape(
        -1, positions.dim()
    ):
        idx = tuple(index.tolist())
        row = cache[positions[idx]].to(wide)
        for j in range(rot // 2):
            a, b = (
                (offset + j, offset + rot // 2 + j)
                if is_neox
                else (offset + 2 * j, offset + 2 * j + 1)
            )
            cos, sin = row[j], -row[rot // 2 + j] if inverse else row[rot // 2 + j]
            x = t.reshape(*positions.shape, -1, head_size)[idx][:, a].to(wide)
            y = t.reshape(*positions.shape, -1, head_size)[idx][:, b].to(wide)
            heads[idx][:, a] = (x * cos - y * sin).to(t.dtype)
            heads[idx][:, b] = (y * cos + x * sin).to(t.dtype)
    return out


def rope_cache(max_position: int, rot_dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A true cos/sin table (base 10000), [max_position, rot_dim]."""
    inv = 1.0 / 10000 ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inv[None]
    return torch.cat([angles.cos(), angles.sin()], -1).to(dtype)


# ---------------------------------------------------------------- add_rms_norm


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 16), (2, 3, 8), (1, 1), (0, 8), (2, 2, 2, 5)], ids=str)
def test_add_rms_norm_is_its_definition_and_infini_matches(
    shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x, r = make_cpu(shape, dtype, seed=1), make_cpu(shape, dtype, seed=2)
    w = make_cpu(shape[-1:], dtype, seed=3)
    expected = add_rms_norm_definition(x, r, w, 1e-5)
    got = ops.add_rms_norm(x, r, w, 1e-5)
    for g, e in zip(got, expected, strict=True):
        assert_matches(g, e, device="cpu", exact=True)
    with torch_infini.cpu_fallback.allowed("silent"):
        on_infini = ops.add_rms_norm(x.to(DEVICE), r.to(DEVICE), w.to(DEVICE), 1e-5)
    for g, e in zip(on_infini, expected, strict=True):
        assert_matches(g, e, exact=True)


def test_add_rms_norm_rounds_the_sum_before_normalizing() -> None:
    """InfiniOps normalizes the residual sum as stored (rounded to the dtype)."""
    x = torch.tensor([[1.0, 2.0**-12, 3.0]], dtype=torch.float16)
    r = torch.tensor([[2.0**-12, 1.0, -3.0]], dtype=torch.float16)
    out, residual_out = ops.add_rms_norm(x, r, torch.ones(3, dtype=torch.float16))
    assert torch.equal(residual_out, torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float16))
    assert_matches(
        out, add_rms_norm_definition(x, r, torch.ones(3), 1e-6)[0], device="cpu", exact=True
    )


def test_add_rms_norm_weight_of_another_dtype_and_strided_inputs() -> None:
    x = make_cpu((6, 8), torch.bfloat16, seed=4).t()  # [8, 6], strided
    r = make_cpu((8, 6), torch.bfloat16, seed=5)
    w = make_cpu((6,), torch.float32, seed=6)
    expected = add_rms_norm_definition(x, r, w, 1e-6)
    with torch_infini.cpu_fallback.allowed("silent"):
        got = ops.add_rms_norm(x.to(DEVICE), r.to(DEVICE), w.to(DEVICE))
    for g, e in zip(got, expected, strict=True):
        assert_matches(g, e, exact=True)


def test_add_rms_norm_gradients() -> None:
    x, r, w = (make_cpu(s, torch.float32, seed=i) for i, s in enumerate([(3, 8), (3, 8), (8,)]))

    def leaves(device: str | torch.device) -> list[torch.Tensor]:
        return [t.detach().clone().to(device).requires_grad_() for t in (x, r, w)]

    grad_out, grad_res = (
        make_cpu((3, 8), torch.float32, seed=7),
        make_cpu((3, 8), torch.float32, seed=8),
    )
    a = leaves("cpu")
    out, res = ops.add_rms_norm(*a)
    torch.autograd.backward([out, res], [grad_out, grad_res])
    b = leaves("cpu")
    d_out, d_res = add_rms_norm_definition(*b, 1e-6)
    torch.autograd.backward([d_out, d_res], [grad_out, grad_res])
    for got, want in zip(a, b, strict=True):
        torch.testing.assert_close(got.grad, want.grad)
    c = leaves(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        out, res = ops.add_rms_norm(*c)
        torch.autograd.backward([out, res], [grad_out.to(DEVICE), grad_res.to(DEVICE)])
    for got, want in zip(c, a, strict=True):
        assert_matches(got.grad, want.grad)
    doubles = [t.double().requires_grad_() for t in (x, r, w)]
    assert torch.autograd.gradcheck(lambda *t: ops.add_rms_norm(*t, 1e-3), doubles)


def test_fused_add_rms_norm_in_place() -> None:
    for dtype in DTYPES:
        x, r = make_cpu((3, 2, 8), dtype, seed=9), make_cpu((3, 2, 8), dtype, seed=10)
        w = make_cpu((8,), dtype, seed=11)
        wide = _wide(dtype)
        s = (x.to(wide) + r.to(wide)).to(dtype)
        sw = s.to(wide)
        normed = sw * torch.rsqrt(sw.square().mean(-1, keepdim=True) + 1e-6)
        for weight, expected in ((w, (normed * w.to(wide)).to(dtype)), (None, normed.to(dtype))):
            xi, ri = x.to(DEVICE), r.to(DEVICE)
            version = xi._version
            with torch_infini.cpu_fallback.allowed("silent"):
                ops.fused_add_rms_norm(xi, ri, None if weight is None else weight.to(DEVICE))
            assert_matches(ri, s, exact=True)
            assert_matches(xi, expected, exact=True)
            assert xi._version > version
            xc, rc = x.clone(), r.clone()
            ops.fused_add_rms_norm(xc, rc, weight)
            assert torch.equal(xc, expected) and torch.equal(rc, s)


def test_in_place_forms_refuse_a_gradient() -> None:
    x = torch.randn(2, 8, requires_grad=True)
    with raises_exactly(
        RuntimeError, match="has no derivative; for training use infini::add_rms_norm"
    ):
        ops.fused_add_rms_norm(x, torch.randn(2, 8), None)
    q = torch.randn(3, 8, requires_grad=True)
    with raises_exactly(RuntimeError, match="apply_rotary_embedding"):
        ops.rotary_embedding(torch.arange(3), q, None, 8, rope_cache(4, 8), True)
    with torch.no_grad():  # inference: fine
        ops.fused_add_rms_norm(x, torch.randn(2, 8), None)


def test_bad_input_raises_the_cpu_error_on_every_device() -> None:
    calls = {
        "residual shape": lambda d: ops.add_rms_norm(
            torch.ones(2, 4, device=d), torch.ones(2, 5, device=d), torch.ones(4, device=d)
        ),
        "weight shape": lambda d: ops.add_rms_norm(
            torch.ones(2, 4, device=d), torch.ones(2, 4, device=d), torch.ones(5, device=d)
        ),
        "integer": lambda d: ops.add_rms_norm(
            torch.ones(2, 4, dtype=torch.int32, device=d),
            torch.ones(2, 4, dtype=torch.int32, device=d),
            torch.ones(4, device=d),
        ),
        "rotary offset": lambda d: ops.rotary_embedding(
            torch.arange(2, device=d),
            torch.ones(2, 8, device=d),
            None,
            8,
            rope_cache(4, 8).to(d),
            True,
            2,
        ),
        "rotary heads": lambda d: ops.rotary_embedding(
            torch.arange(2, device=d),
            torch.ones(2, 12, device=d),
            None,
            8,
            rope_cache(4, 8).to(d),
            True,
        ),
    }
    for name, call in calls.items():
        with raises_exactly(RuntimeError, match="infini::") as cpu_error:
            call("cpu")
        with torch_infini.cpu_fallback.allowed("silent"):
            with raises_exactly(RuntimeError, match=str(cpu_error.value).split("\n")[0][:40]):
                call(DEVICE)
        assert name


def test_refused_with_the_fallback_off() -> None:
    x, w = torch.ones(2, 4, device=DEVICE), torch.ones(4, device=DEVICE)
    positions, q = torch.arange(2).to(DEVICE), torch.ones(2, 8, device=DEVICE)
    cache = rope_cache(4, 8).to(DEVICE)
    with torch_infini.cpu_fallback.strict():
        with raises_exactly(NotImplementedError, match="'infini::add_rms_norm' has no infini"):
            ops.add_rms_norm(x, x, w)
        with raises_exactly(NotImplementedError, match="'infini::rotary_embedding' has no infini"):
            ops.rotary_embedding(positions, q, None, 8, cache, True)
    assert torch.equal(q.cpu(), torch.ones(2, 8))  # untouched


# ---------------------------------------------------------------- rotary


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_is_its_definition_and_infini_matches(dtype: torch.dtype, is_neox: bool) -> None:
    positions = torch.tensor([3, 0, 7, 2, 2])
    head_size, rot = 8, 8
    cache = rope_cache(10, rot)
    q = make_cpu((5, 4 * head_size), dtype, seed=12)
    k = make_cpu((5, 2, head_size), dtype, seed=13)  # grouped: fewer key heads, split layout
    expected_q = rotary_definition(positions, q, head_size, cache, is_neox)
    expected_k = rotary_definition(positions, k, head_size, cache, is_neox)
    qc, kc = q.clone(), k.clone()
    ops.rotary_embedding(positions, qc, kc, head_size, cache, is_neox)
    assert_matches(qc, expected_q, device="cpu", exact=True)
    assert_matches(kc, expected_k, device="cpu", exact=True)
    qi, ki = q.to(DEVICE), k.to(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        ops.rotary_embedding(positions.to(DEVICE), qi, ki, head_size, cache.to(DEVICE), is_neox)
    assert_matches(qi, expected_q, exact=True)
    assert_matches(ki, expected_k, exact=True)


def test_rotary_partial_offset_batched_positions_and_views() -> None:
    """rot_dim < head_size at an offset (the rest untouched), [B, S]
    positions, a query that is a view into a fused qkv projection."""
    positions = torch.tensor([[0, 1, 2], [5, 6, 7]])
    head_size, rot, offset = 8, 4, 2
    cache = rope_cache(8, rot, torch.bfloat16)
    qkv = make_cpu((2, 3, 3 * 2 * head_size), torch.float32, seed=14)
    expected = qkv.clone()
    expected[..., : 2 * head_size] = rotary_definition(
        positions, qkv[..., : 2 * head_size], head_size, cache, False, offset
    )
    on_device = qkv.to(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        ops.rotary_embedding(
            positions.to(DEVICE),
            on_device[..., : 2 * head_size],
            None,
            head_size,
            cache.to(DEVICE),
            False,
            offset,
        )
    # in place through the view; dimensions outside [offset, offset + rot)
    # and the k, v parts of the projection untouched (the definition keeps them)
    assert_matches(on_device, expected, exact=True)
    assert torch.equal(expected[..., :offset], qkv[..., :offset])


def test_rotary_inverse_undoes_it() -> None:
    positions = torch.arange(6)
    cache = rope_cache(6, 16, torch.float64)
    q = make_cpu((6, 2, 16), torch.float64, seed=15)
    turned = q.clone()
    ops.rotary_embedding(positions, turned, None, 16, cache, True)
    assert not torch.allclose(turned, q)
    ops.rotary_embedding(positions, turned, None, 16, cache, True, inverse=True)
    torch.testing.assert_close(turned, q)


def test_apply_rotary_embedding_gradients() -> None:
    positions = torch.tensor([1, 4, 0])
    cache = rope_cache(6, 8)
    q, k = make_cpu((3, 2 * 8), torch.float32, seed=16), make_cpu((3, 8), torch.float32, seed=17)
    gq, gk = make_cpu((3, 16), torch.float32, seed=18), make_cpu((3, 8), torch.float32, seed=19)

    def run(device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        qa = q.detach().clone().to(device).requires_grad_()
        ka = k.detach().clone().to(device).requires_grad_()
        qo, ko = ops.apply_rotary_embedding(positions.to(device), qa, ka, 8, cache.to(device), True)
        torch.autograd.backward([qo, ko], [gq.to(device), gk.to(device)])
        return qa.grad, ka.grad

    # The derivative of the definition, by PyTorch's autograd on the formula.
    qd, kd = q.clone().requires_grad_(), k.clone().requires_grad_()
    half = 4
    rows = cache[positions]
    cos, sin = rows[:, None, :half], rows[:, None, half:]

    def neox(t: torch.Tensor) -> torch.Tensor:
        v = t.reshape(3, -1, 8)
        x, y = v[..., :half], v[..., half:]
        return torch.cat([x * cos - y * sin, y * cos + x * sin], -1).reshape(t.shape)

    torch.autograd.backward([neox(qd), neox(kd)], [gq, gk])
    cpu_grads = run("cpu")
    for got, want in zip(cpu_grads, (qd.grad, kd.grad), strict=True):
        torch.testing.assert_close(got, want)
    with torch_infini.cpu_fallback.allowed("silent"):
        infini_grads = run(DEVICE)
    for got, want in zip(infini_grads, cpu_grads, strict=True):
        assert_matches(got, want, exact=True)
    doubles = (q.double().requires_grad_(), k.double().requires_grad_())
    assert torch.autograd.gradcheck(
        lambda a, b: ops.apply_rotary_embedding(positions, a, b, 8, cache.double(), False), doubles
    )


# ---------------------------------------------------------------- schemas


def test_opcheck() -> None:
    """Schemas (what is mutated), Meta kernels and fake tensors, on CPU tensors."""
    x, r, w = torch.randn(3, 8), torch.randn(3, 8), torch.randn(8)
    torch.library.opcheck(torch.ops.infini.add_rms_norm.default, (x, r, w, 1e-6))
    torch.library.opcheck(
        torch.ops.infini.fused_add_rms_norm.default, (x.clone(), r.clone(), w, 1e-6)
    )
    torch.library.opcheck(
        torch.ops.infini.rotary_embedding.default,
        (
            torch.arange(3),
            torch.randn(3, 16),
            torch.randn(3, 8),
            8,
            rope_cache(4, 8),
            True,
            0,
            False,
        ),
    )


def test_meta_shapes() -> None:
    meta = torch.device("meta")
    out, res = ops.add_rms_norm(
        torch.empty(2, 3, 8, device=meta),
        torch.empty(2, 3, 8, device=meta),
        torch.empty(8, device=meta),
    )
    assert out.shape == res.shape == (2, 3, 8) and out.device == meta
