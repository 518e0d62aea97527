"""torch.ops.infini's paged KV cache: reshape_and_cache_flash and paged_attention.

The oracle is written here in stock PyTorch, token by token, independently
of the C++ reference: slots written one at a time; attention per sequence
and head in float64 with vLLM's 1e-6 in the denominator, rounded once to the
dtype. The operators run on CPU tensors (the reference) and on infini, and
each result is compared with the oracle, in every floating dtype. On infini
they are seam operators where the backend serves the dtype and the kernel
takes the call (host: the references on the device memory, in InfiniOps'
dtypes; the attention with head_size 64 or 128): that path runs with the
fallback off, and what the kernels do not take (other head sizes, strided
caches, block ids out of range) is refused to the CPU fallback.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch_infini
from infini_testing import raises_exactly
from op_helpers import DEVICE, assert_matches, expect_kernel, make_cpu

ops = torch_infini.ops
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _naive_cache(key: torch.Tensor, cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    out = cache.clone()
    block_size = cache.shape[1]
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            out[slot // block_size, slot % block_size] = key[t]
    return out


def _naive_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,  # [blocks, kv_heads, block_size, head_size]
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    alibi: torch.Tensor | None,
) -> torch.Tensor:
    heads, kv_heads, block_size = query.shape[1], key_cache.shape[1], key_cache.shape[2]
    out = torch.zeros(query.shape, dtype=torch.float64)
    for s, length in enumerate(seq_lens.tolist()):
        for h in range(heads):
            kvh = h // (heads // kv_heads)
            scores, values = [], []
            for t in range(length):
                block = int(block_tables[s, t // block_size])
                k = key_cache[block, kvh, t % block_size].double()
                score = scale * float(query[s, h].double() @ k)
                if alibi is not None:
                    score += float(alibi[h]) * (t - (length - 1))
                scores.append(score)
                values.append(value_cache[block, kvh, t % block_size].double())
            if not scores:
                continue
            top = max(scores)
            weights = [math.exp(x - top) for x in scores]
            total = sum(weights) + 1e-6
            out[s, h] = sum(w * v for w, v in zip(weights, values, strict=True)) / total
    return out


def _problem(dtype: torch.dtype, seed: int = 0, alibi: bool = False) -> dict:
    gen = torch.Generator().manual_seed(seed)
    blocks, block_size, heads, kv_heads, head_size = 12, 4, 4, 2, 8
    seq_lens = torch.tensor([5, 0, 9, 1], dtype=torch.int32)
    tables = torch.stack([torch.randperm(blocks, generator=gen)[:3] for _ in seq_lens]).to(
        torch.int32
    )
    return {
        "query": (torch.randn(4, heads, head_size, generator=gen) / 2).to(dtype),
        "key_cache": torch.randn(blocks, kv_heads, block_size, head_size, generator=gen).to(dtype),
        "value_cache": torch.randn(blocks, kv_heads, block_size, head_size, generator=gen).to(
            dtype
        ),
        "block_tables": tables,
        "seq_lens": seq_lens,
        "scale": head_size**-0.5,
        "alibi_slopes": torch.tensor([0.5, 0.25, 0.125, 0.0625]) if alibi else None,
    }


def _on(device: str, problem: dict) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in problem.items()}


def _expected(problem: dict) -> torch.Tensor:
    """The oracle in float64, rounded once to the query's dtype (the kernel
    computes in float, float64 for float64, and rounds once)."""
    arguments = {k: v for k, v in problem.items() if k != "alibi_slopes"}
    return _naive_attention(**arguments, alibi=problem["alibi_slopes"]).to(problem["query"].dtype)


def _assert_attention(got: torch.Tensor, want: torch.Tensor) -> None:
    """PyTorch's default tolerances for the dtype: the kernel's float
    arithmetic and the oracle's float64 agree to an ulp of the dtype once
    both are rounded (float32: to float32 rounding)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("alibi", [False, True], ids=["no alibi", "alibi"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_paged_attention_matches_the_oracle(dtype: torch.dtype, alibi: bool) -> None:
    problem = _problem(dtype, alibi=alibi)
    want = _expected(problem)
    got_cpu = ops.paged_attention(**problem)
    with torch_infini.cpu_fallback.allowed("silent"):
        got = ops.paged_attention(**_on(DEVICE, problem))
    assert got.device.type == "infini" and got.dtype == dtype and got.shape == (4, 4, 8)
    _assert_attention(got_cpu, want)
    _assert_attention(got, want)
    for result in (got_cpu, got.cpu()):  # a sequence of length 0: zeros
        assert torch.equal(result[1], torch.zeros_like(result[1]))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reshape_and_cache_flash_writes_the_slots(dtype: torch.dtype) -> None:
    key = make_cpu((6, 2, 8), dtype, seed=1)
    value = make_cpu((6, 2, 8), dtype, seed=2)
    key_cache = make_cpu((5, 4, 2, 8), dtype, seed=3)
    value_cache = make_cpu((5, 4, 2, 8), dtype, seed=4)
    slots = torch.tensor([3, 17, -1, 0, 19, 8])  # one padding token
    want_k, want_v = _naive_cache(key, key_cache, slots), _naive_cache(value, value_cache, slots)
    ops.reshape_and_cache_flash(key, value, key_cache, value_cache, slots)
    assert torch.equal(key_cache, want_k) and torch.equal(value_cache, want_v)
    dev_k, dev_v = make_cpu((5, 4, 2, 8), dtype, seed=3), make_cpu((5, 4, 2, 8), dtype, seed=4)
    dev_k, dev_v = dev_k.to(DEVICE), dev_v.to(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        ops.reshape_and_cache_flash(
            key.to(DEVICE), value.to(DEVICE), dev_k, dev_v, slots.int().to(DEVICE)
        )
    assert torch.equal(dev_k.cpu(), want_k) and torch.equal(dev_v.cpu(), want_v)


def _decode_problem(dtype: torch.dtype, head_size: int, alibi: bool) -> dict:
    """The kernel's shapes: 8 query heads on 2 kv heads, blocks of 16, int64
    tables and lengths, one sequence without tokens."""
    gen = torch.Generator().manual_seed(head_size)
    blocks, block_size, heads, kv_heads = 9, 16, 8, 2
    seq_lens = torch.tensor([17, 0, 40, 1])
    tables = torch.stack([torch.randperm(blocks, generator=gen)[:3] for _ in seq_lens])
    cache = (blocks, kv_heads, block_size, head_size)
    return {
        "query": torch.randn(4, heads, head_size, generator=gen).to(dtype),
        "key_cache": (torch.randn(cache, generator=gen) / 4).to(dtype),
        "value_cache": torch.randn(cache, generator=gen).to(dtype),
        "block_tables": tables,
        "seq_lens": seq_lens,
        "scale": head_size**-0.5,
        "alibi_slopes": torch.linspace(0.5, 0.01, heads) if alibi else None,
    }


@pytest.mark.parametrize("alibi", [False, True], ids=["no alibi", "alibi"])
@pytest.mark.parametrize("head_size", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_paged_attention_runs_natively_where_the_backend_serves_it(
    dtype: torch.dtype, head_size: int, alibi: bool
) -> None:
    """With the fallback off where the backend serves the dtype (expect_kernel;
    elsewhere the refusal names the dtype and provider): the oracle's values
    (host: the CPU's bits), and zeros for the sequence without tokens, in
    memory that held other values before."""
    problem = _decode_problem(dtype, head_size, alibi)
    want, cpu = _expected(problem), ops.paged_attention(**problem)
    on_device = _on(DEVICE, problem)
    with expect_kernel("infini::paged_attention", dtype):
        junk = torch.full((4, 8, head_size), 7.0, dtype=dtype, device=DEVICE)
        del junk  # its block is the result's next: an unwritten row would show 7
        torch_infini.cpu_fallback.reset_stats()
        got = ops.paged_attention(**on_device)
        assert torch_infini.cpu_fallback.stats() == {}
        assert_matches(got, cpu, check_stride=True)
        _assert_attention(got, want)
        assert torch.equal(got[1].cpu(), torch.zeros_like(cpu[1]))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reshape_and_cache_flash_runs_natively_where_the_backend_serves_it(
    dtype: torch.dtype,
) -> None:
    """A key strided in head_size (copied for the kernel), int32 slots with a
    padding token and more key rows than slots: the caches written bit for
    bit, with the fallback off where served."""
    key = make_cpu((7, 2, 16), dtype, seed=11)[..., ::2]
    value = make_cpu((7, 2, 8), dtype, seed=12)
    slots = torch.tensor([9, -1, 0, 19, 4, 10], dtype=torch.int32)
    caches = [make_cpu((5, 4, 2, 8), dtype, seed=13 + i) for i in range(2)]
    want = [_naive_cache(key, caches[0], slots), _naive_cache(value, caches[1], slots)]
    key_dev = make_cpu((7, 2, 16), dtype, seed=11).to(DEVICE)[..., ::2]
    with expect_kernel("infini::reshape_and_cache_flash", dtype):
        dev = [c.to(DEVICE) for c in caches]
        torch_infini.cpu_fallback.reset_stats()
        ops.reshape_and_cache_flash(key_dev, value.to(DEVICE), dev[0], dev[1], slots.to(DEVICE))
        assert torch_infini.cpu_fallback.stats() == {}
        assert_matches(dev[0], want[0], exact=True)
        assert_matches(dev[1], want[1], exact=True)


@pytest.mark.parametrize(
    "case", ["head_size 8", "strided cache", "negative block id", "block id past the cache"]
)
def test_calls_the_kernels_do_not_take_run_in_the_fallback(case: str) -> None:
    """Refused with the reason under the fallback off, and with it on the
    reference's result (a negative block id counts from the end, as ATen's
    indexing does), nothing written before the refusal."""
    if torch.float16 not in torch_infini.supported_dtypes("infini::paged_attention"):
        pytest.skip("the backend serves no float16 paged_attention: every call falls back")
    problem = _decode_problem(torch.float16, 64, False)
    reason = {
        "head_size 8": "head_size 64 or 128",
        "strided cache": "unit stride in head_size",
        "negative block id": "reads block -1",
        "block id past the cache": "reads block 9 of 9",
    }[case]
    if case == "head_size 8":
        problem = _problem(torch.float16)
    elif case == "strided cache":
        wide = torch.cat([problem["key_cache"]] * 2, -1)
        problem["key_cache"] = wide[..., ::2].copy_(problem["key_cache"])
    else:
        tables = problem["block_tables"].clone()
        tables[2, 1] = -1 if case == "negative block id" else 9
        problem["block_tables"] = tables
    on_device = _on(DEVICE, problem)
    if case == "strided cache":
        on_device["key_cache"] = torch.cat([on_device["key_cache"]] * 2, -1)[..., ::2]
        on_device["key_cache"].copy_(problem["key_cache"])
    if case == "block id past the cache":
        with raises_exactly(IndexError, match="out of bounds"):
            ops.paged_attention(**problem)
    else:
        want = ops.paged_attention(**problem)
    with torch_infini.cpu_fallback.strict(), raises_exactly(NotImplementedError, match=reason):
        ops.paged_attention(**on_device)
    with torch_infini.cpu_fallback.allowed("silent"):
        if case == "block id past the cache":
            with raises_exactly(IndexError, match="out of bounds"):
                ops.paged_attention(**on_device)
        else:
            assert_matches(ops.paged_attention(**on_device), want, exact=True)


def test_reshape_and_cache_flash_refuses_a_strided_cache() -> None:
    if torch.float32 not in torch_infini.supported_dtypes("infini::reshape_and_cache_flash"):
        pytest.skip("the backend serves no float32 reshape_and_cache_flash: every call falls back")
    key = make_cpu((2, 2, 8), torch.float32, seed=14)
    cache = torch.zeros(3, 4, 2, 16, device=DEVICE)[..., ::2]
    slots = torch.tensor([1, 5], device=DEVICE)
    with (
        torch_infini.cpu_fallback.strict(),
        raises_exactly(NotImplementedError, match="unit stride in head_size"),
    ):
        ops.reshape_and_cache_flash(key.to(DEVICE), key.to(DEVICE), cache, cache.clone(), slots)
    assert torch.equal(cache.cpu(), torch.zeros(3, 4, 2, 8))  # nothing written
    with torch_infini.cpu_fallback.allowed("silent"):
        ops.reshape_and_cache_flash(key.to(DEVICE), key.to(DEVICE), cache, cache.clone(), slots)
    assert torch.equal(cache.cpu()[0, 1], key[0]) and torch.equal(cache.cpu()[1, 1], key[1])


def test_a_decode_loop_over_the_paged_cache_is_dense_attention() -> None:
    """Tokens written with reshape_and_cache_flash, read back by
    paged_attention (the caches' transpose(1, 2)): causal attention."""
    gen = torch.Generator().manual_seed(5)
    heads, kv_heads, head_size, block_size, steps = 4, 2, 8, 4, 7
    key_cache = torch.zeros(6, block_size, kv_heads, head_size, device=DEVICE)
    value_cache = torch.zeros_like(key_cache)
    table = torch.tensor([[4, 1]], dtype=torch.int32)  # the sequence's blocks
    keys, values = [], []
    with torch_infini.cpu_fallback.allowed("silent"):
        for t in range(steps):
            k, v = torch.randn(2, 1, kv_heads, head_size, generator=gen)
            q = torch.randn(1, heads, head_size, generator=gen)
            keys.append(k[0])
            values.append(v[0])
            slot = torch.tensor([int(table[0, t // block_size]) * block_size + t % block_size])
            ops.reshape_and_cache_flash(
                k.to(DEVICE), v.to(DEVICE), key_cache, value_cache, slot.to(DEVICE)
            )
            out = ops.paged_attention(
                q.to(DEVICE),
                key_cache.transpose(1, 2),
                value_cache.transpose(1, 2),
                table.to(DEVICE),
                torch.tensor([t + 1], dtype=torch.int32, device=DEVICE),
                head_size**-0.5,
            )
            dense_k = torch.stack(keys).repeat_interleave(heads // kv_heads, 1).transpose(0, 1)
            dense_v = torch.stack(values).repeat_interleave(heads // kv_heads, 1).transpose(0, 1)
            want = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(0, 1), dense_k, dense_v
            ).transpose(0, 1)
            torch.testing.assert_close(out.cpu(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", DEVICE], ids=str)
def test_strided_arguments(device: str) -> None:
    problem = _problem(torch.float32, seed=6)
    strided = _on(device, problem)
    query = torch.cat([strided["query"]] * 2, dim=2)[:, :, ::2]
    strided["query"] = query.copy_(strided["query"])
    strided["key_cache"] = strided["key_cache"].transpose(1, 2).contiguous().transpose(1, 2)
    tables = strided["block_tables"]
    strided["block_tables"] = torch.stack([tables, torch.full_like(tables, -1)], -1)[..., 0]
    assert not strided["query"].is_contiguous() and not strided["key_cache"].is_contiguous()
    assert not strided["block_tables"].is_contiguous()
    with torch_infini.cpu_fallback.allowed("silent"):
        got = ops.paged_attention(**strided)
    assert got.device.type == torch.device(device).type
    _assert_attention(got, _expected(problem))


def test_meta_shapes() -> None:
    problem = _on("meta", _problem(torch.float16))
    out = ops.paged_attention(**problem)
    assert out.device.type == "meta" and out.shape == (4, 4, 8) and out.dtype == torch.float16
    k = torch.empty(3, 2, 8, device="meta")
    cache = torch.empty(5, 4, 2, 8, device="meta")
    ops.reshape_and_cache_flash(
        k, k, cache, cache.clone(), torch.empty(3, dtype=torch.long, device="meta")
    )


def test_no_gradient_inference_only() -> None:
    problem = _problem(torch.float32)
    problem["query"].requires_grad_()
    with raises_exactly(RuntimeError, match="paged_attention is a decode"):
        ops.paged_attention(**problem)
    key = torch.zeros(2, 2, 8, requires_grad=True)
    with raises_exactly(RuntimeError, match="reshape_and_cache_flash writes a KV cache"):
        ops.reshape_and_cache_flash(
            key, key, torch.zeros(2, 4, 2, 8), torch.zeros(2, 4, 2, 8), torch.tensor([0, 1])
        )
    with torch.no_grad():
        ops.paged_attention(**problem)  # fine without grad mode


@pytest.mark.parametrize("device", ["cpu", DEVICE])
def test_bad_arguments(device: str) -> None:
    p = _on(device, _problem(torch.float32))
    cases = {
        "query of 2 dimensions": (dict(p, query=p["query"][0]), "query \\[num_seqs"),
        "integer query": (dict(p, query=p["query"].int()), "floating dtype"),
        "head sizes differ": (dict(p, query=p["query"][:, :, :4]), "head_size"),
        "heads not a multiple": (dict(p, query=p["query"][:, :3]), "not a multiple"),
        "cache dtypes differ": (
            dict(p, key_cache=p["key_cache"].double(), value_cache=p["value_cache"].double()),
            "query's dtype",
        ),
        "float block table": (dict(p, block_tables=p["block_tables"].float()), "int32 or int64"),
        "seq_lens for 3 sequences": (dict(p, seq_lens=p["seq_lens"][:3]), "for 4 sequences"),
        "alibi for 3 heads": (dict(p, alibi_slopes=torch.ones(3, device=device)), "alibi_slopes"),
    }
    with torch_infini.cpu_fallback.allowed("silent"):
        for name, (arguments, message) in cases.items():
            with raises_exactly(RuntimeError, match=message):
                ops.paged_attention(**arguments)
            del name
        too_long = dict(p, seq_lens=torch.tensor([5, 0, 13, 1], device=device))
        with raises_exactly(RuntimeError, match="more than its 3 blocks"):
            ops.paged_attention(**too_long)
        key = torch.zeros(2, 2, 8, device=device)
        cache = torch.zeros(2, 4, 2, 8, device=device)
        with raises_exactly(RuntimeError, match="past the caches' 8 slots"):
            ops.reshape_and_cache_flash(
                key, key, cache, cache.clone(), torch.tensor([0, 8], device=device)
            )
        with raises_exactly(RuntimeError, match="heads, head_size"):
            ops.reshape_and_cache_flash(
                key,
                key,
                cache[..., :4],
                cache[..., :4].clone(),
                torch.tensor([0, 1], device=device),
            )
