"""aten::embedding (nn.Embedding, F.embedding) on infini.

The seam's Embedding serves the weight dtypes the backend declares (host:
float32, float16 and bfloat16, the CPU's kernel on the device memory;
InfiniOps' kernel on its accelerators); other dtypes, and InfiniRT ``cpu``
(InfiniOps has no CPU embedding), run in the CPU fallback, or with it off
raise NotImplementedError naming the operator, dtype and provider.

The oracle is the same call on the CPU: a gather copies rows, so values are
bit for bit on every backend, strides too. Gradients go through autograd's
formula for aten::embedding (padding_idx, scale_grad_by_freq) and are the
CPU's bit for bit. An index out of range raises the CPU's IndexError at the
call, before anything is computed, on every backend (InfiniOps' kernel would
skip the row silently).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import raises_exactly, requires_async_host
from op_helpers import DEVICE, assert_matches, expect_kernel, kernel_dtypes, make_cpu

WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INDEX_SHAPES = ((), (0,), (5,), (2, 3), (2, 1, 3))


def _indices(shape: tuple[int, ...], rows: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, rows, shape, generator=g, dtype=torch.int64).to(dtype)


def _weight(layout: str, dtype: torch.dtype) -> torch.Tensor:
    """A [10, 4] weight: dense, a column slice of a wider one, or a transpose."""
    if layout == "contiguous":
        return make_cpu((10, 4), dtype, seed=1)
    if layout == "column slice":
        return make_cpu((10, 7), dtype, seed=1)[:, 2:6]
    return make_cpu((4, 10), dtype, seed=1).t()


def _on_device(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values on infini, in ``t``'s own strides."""
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=DEVICE)
    return out.copy_(t)


@pytest.mark.parametrize("layout", ["contiguous", "column slice", "transposed"])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("dtype", WEIGHT_DTYPES, ids=str)
def test_forward_is_the_cpus(dtype: torch.dtype, index_dtype: torch.dtype, layout: str) -> None:
    """Every index rank (0-D to 3-D, empty included) and weight layout: the
    CPU's rows and strides, natively where the backend serves the dtype
    (expect_kernel: with the fallback off; elsewhere the refusal names the
    operator, dtype and provider)."""
    w = _weight(layout, dtype)
    w_dev = _on_device(w)
    assert w_dev.stride() == w.stride()
    for seed, shape in enumerate(INDEX_SHAPES):
        idx = _indices(shape, 10, index_dtype, seed)
        expected = torch.embedding(w, idx)
        with expect_kernel("embedding", dtype) as native:
            torch_infini.cpu_fallback.reset_stats()
            got = torch.embedding(w_dev, idx.to(DEVICE))
            assert_matches(got, expected, exact=True, check_stride=True)
            assert torch_infini.cpu_fallback.stats() == {}
        if not native:
            with torch_infini.cpu_fallback.allowed("silent"):
                got = torch.embedding(w_dev, idx.to(DEVICE))
            assert_matches(got, expected, exact=True, check_stride=True)


@pytest.mark.parametrize("scale_grad_by_freq", [False, True], ids=["plain", "scaled"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_module_gradients_are_the_cpus(dtype: torch.dtype, scale_grad_by_freq: bool) -> None:
    """nn.Embedding with a padding row, repeated indices and the padding
    index among them: the output and the weight's gradient (the padding
    row's stays zero) are the CPU's bit for bit."""
    torch.manual_seed(0)
    cpu = torch.nn.Embedding(10, 6, padding_idx=0, scale_grad_by_freq=scale_grad_by_freq).to(dtype)
    dev = torch.nn.Embedding(10, 6, padding_idx=0, scale_grad_by_freq=scale_grad_by_freq)
    dev = dev.to(dtype).to(DEVICE)
    with torch.no_grad():
        dev.weight.copy_(cpu.weight)
    idx = torch.tensor([[1, 0, 3, 3], [9, 1, 1, 0]])
    grad = make_cpu((2, 4, 6), dtype, seed=2)
    out = cpu(idx)
    out.backward(grad)
    with torch_infini.cpu_fallback.allowed("silent"):  # the backward is the fallback's
        out_dev = dev(idx.to(DEVICE))
        out_dev.backward(grad.to(DEVICE))
    assert_matches(out_dev, out.detach(), exact=True, check_stride=True)
    assert cpu.weight.grad is not None and dev.weight.grad is not None
    assert_matches(dev.weight.grad, cpu.weight.grad, exact=True)
    assert torch.equal(dev.weight.grad[0].cpu(), torch.zeros(6, dtype=dtype))


def test_max_norm_renormalizes_the_weight_in_place_as_on_the_cpu() -> None:
    w = make_cpu((10, 4), torch.float32, seed=3) * 3
    w_dev = w.to(DEVICE)
    idx = torch.tensor([2, 5, 5, 7])
    out = F.embedding(idx, w, max_norm=1.0)
    with torch_infini.cpu_fallback.allowed("silent"):  # embedding_renorm_ is the fallback's
        out_dev = F.embedding(idx.to(DEVICE), w_dev, max_norm=1.0)
    assert_matches(out_dev, out, exact=True)
    assert_matches(w_dev, w, exact=True)  # rows 2, 5, 7 renormalized, the rest as they were


@pytest.mark.parametrize("bad", [[10], [-1], [3, 11, 0], [[0, 1], [2, -3]]], ids=str)
def test_an_index_out_of_range_raises_the_cpus_index_error(bad: list) -> None:
    """Before anything is computed: the CPU's IndexError, never rows of
    whatever memory held; with the fallback off too where the backend has
    the kernel (elsewhere the refusal names the dtype and provider)."""
    w = make_cpu((10, 4), torch.float32, seed=4)
    idx = torch.tensor(bad)
    with raises_exactly(IndexError, match="index out of range in self"):
        torch.embedding(w, idx)
    w_dev, idx_dev = w.to(DEVICE), idx.to(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        with raises_exactly(IndexError, match="index out of range in self"):
            torch.embedding(w_dev, idx_dev)
    with expect_kernel("embedding", torch.float32):
        with raises_exactly(IndexError, match="index out of range in self"):
            torch.embedding(w_dev, idx_dev)
    # A weight without rows: the CPU's own error.
    for weight in (torch.empty(0, 4), torch.empty(0, 4, device=DEVICE)):
        with (
            torch_infini.cpu_fallback.allowed("silent"),
            raises_exactly(RuntimeError, match="self indexing axis dim should be positive"),
        ):
            torch.embedding(weight, torch.tensor([0], device=weight.device))
    assert_matches(w_dev, w, exact=True)  # untouched


@requires_async_host
def test_an_index_out_of_range_raises_at_the_call_with_asynchronous_streams() -> None:
    """The range check reads the indices before the kernel is enqueued: the
    error comes from the call itself, not from a later synchronization (as
    a kernel's own check would, and CUDA's device-side assert does); the
    stream stays usable."""
    w_dev = make_cpu((10, 4), torch.float32, seed=4).to(DEVICE)
    with raises_exactly(IndexError, match="index out of range in self"):
        torch.embedding(w_dev, torch.tensor([0, 12]).to(DEVICE))
    torch.infini.synchronize()  # nothing was left pending
    idx = torch.tensor([0, 9])
    assert_matches(torch.embedding(w_dev, idx.to(DEVICE)), torch.embedding(w_dev.cpu(), idx))


def test_bad_input_raises_the_cpus_errors() -> None:
    """What the kernel does not take reaches the CPU fallback, which raises
    the CPU's error (float indices, a 1-D weight); indices on another
    device raise CUDA's error."""
    w = make_cpu((10, 4), torch.float32, seed=5)
    cases = {
        "float indices": (w, torch.tensor([1.0]), "to have one of the following scalar types"),
        "1-D weight": (w[0], torch.tensor([1]), "'weight' must be 2-D"),
    }
    for weight, idx, match in cases.values():
        with raises_exactly(RuntimeError, match=match):
            torch.embedding(weight, idx)
        with (
            torch_infini.cpu_fallback.allowed("silent"),
            raises_exactly(RuntimeError, match=match),
        ):
            torch.embedding(weight.to(DEVICE), idx.to(DEVICE))
    with raises_exactly(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.embedding(w.to(DEVICE), torch.tensor([1]))


def test_the_declared_dtypes_are_the_kernels() -> None:
    assert set(torch_infini.supported_dtypes("aten::embedding")) == set(kernel_dtypes("embedding"))
