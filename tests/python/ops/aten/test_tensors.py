"""Tensors on infini: factories, views, resize_/set_, serialization, moves,
pinned memory and autograd through copies. CPU is the oracle throughout."""

from __future__ import annotations

import io
import math

import pytest
import torch
from infini_testing import ALL_DTYPES, make_cpu, raises_exactly, requires_two_devices


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# ---------------------------------------------------------------- factories


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (2, 0, 4), (2, 3, 4, 5)])
def test_empty(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    x = torch.empty(shape, dtype=dtype, device="infini")
    reference = torch.empty(shape, dtype=dtype)
    assert x.device == torch.device("infini", torch.infini.current_device())
    assert x.shape == reference.shape
    assert x.stride() == reference.stride()
    assert x.dtype == dtype
    assert x.is_contiguous()
    assert x.storage_offset() == 0


def test_empty_default_dtype_and_device_index() -> None:
    x = torch.empty(3, 4, device="infini:0")
    assert x.dtype == torch.get_default_dtype()
    assert x.device == torch.device("infini", 0)
    assert x.is_infini
    assert x.untyped_storage().nbytes() == 3 * 4 * x.element_size()


def test_empty_channels_last() -> None:
    x = torch.empty(2, 3, 4, 5, device="infini", memory_format=torch.channels_last)
    reference = torch.empty(2, 3, 4, 5, memory_format=torch.channels_last)
    assert x.stride() == reference.stride()
    assert x.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize(
    ("size", "stride"),
    [((2, 3), (3, 1)), ((2, 3), (1, 2)), ((4, 2), (4, 1)), ((3,), (0,)), ((0, 3), (3, 1))],
)
def test_empty_strided(size: tuple[int, ...], stride: tuple[int, ...]) -> None:
    x = torch.empty_strided(size, stride, dtype=torch.float64, device="infini")
    reference = torch.empty_strided(size, stride, dtype=torch.float64)
    assert x.shape == reference.shape
    assert x.stride() == reference.stride()
    assert x.dtype == torch.float64
    assert x.device.type == "infini"
    assert x.untyped_storage().nbytes() >= reference.untyped_storage().nbytes()


def test_empty_like() -> None:
    base = torch.empty(2, 3, 4, device="infini")
    like = torch.empty_like(base)
    assert (like.shape, like.stride(), like.dtype, like.device) == (
        base.shape,
        base.stride(),
        base.dtype,
        base.device,
    )
    assert not _same_storage(like, base)
    permuted = torch.empty_like(base.permute(2, 0, 1))
    assert permuted.stride() == torch.empty_like(torch.empty(2, 3, 4).permute(2, 0, 1)).stride()
    assert torch.empty_like(base, dtype=torch.int16).dtype == torch.int16


def test_empty_like_from_cpu_to_infini() -> None:
    cpu = torch.empty(3, 5, dtype=torch.bfloat16)
    x = torch.empty_like(cpu, device="infini")
    assert x.device.type == "infini"
    assert x.shape == cpu.shape and x.dtype == cpu.dtype


@requires_two_devices
def test_factories_on_second_device() -> None:
    assert torch.empty(3, device="infini:1").device == torch.device("infini", 1)
    x = torch.empty_strided((2, 2), (1, 2), device="infini:1")
    assert x.device == torch.device("infini", 1)
    assert torch.empty_like(x).device == torch.device("infini", 1)
    assert torch.infini.current_device() == 0


@pytest.mark.parametrize(
    "factory",
    [
        lambda: torch.empty(-1, device="infini"),
        lambda: torch.empty(2, -3, device="infini"),
        lambda: torch.empty_strided((2, -3), (1, 1), device="infini"),
    ],
    ids=["empty-1d", "empty-2d", "empty_strided"],
)
def test_negative_sizes_raise(factory) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuntimeError, match="negative dimension"):
        factory()


# ---------------------------------------------------------------- views


@pytest.fixture
def cpu_and_infini() -> tuple[torch.Tensor, torch.Tensor]:
    cpu = make_cpu((2, 3, 4), torch.float32, seed=1)
    return cpu, cpu.to("infini")


def test_views_share_storage(cpu_and_infini: tuple[torch.Tensor, torch.Tensor]) -> None:
    cpu, x = cpu_and_infini
    views = {
        "as_strided": (lambda t: t.as_strided((3, 2), (2, 5), 1)),
        "view": (lambda t: t.view(6, 4)),
        "view_dtype": (lambda t: t.view(torch.int32)),
        "t": (lambda t: t[0].t()),
        "transpose": (lambda t: t.transpose(0, 2)),
        "permute": (lambda t: t.permute(2, 0, 1)),
        "select": (lambda t: t[1, :, 2]),
        "slice_step": (lambda t: t[:, ::2, 1::2]),
        "narrow": (lambda t: t.narrow(2, 1, 2)),
        "unsqueeze": (lambda t: t.unsqueeze(1)),
        "squeeze": (lambda t: t[:1].squeeze(0)),
        "expand": (lambda t: t[:, :1].expand(2, 5, 4)),
        "diagonal": (lambda t: t[0, :, :3].diagonal()),
        "unbind": (lambda t: t.unbind(1)[2]),
    }
    for name, make_view in views.items():
        view = make_view(x)
        expected = make_view(cpu)
        assert view.device == x.device, name
        assert _same_storage(view, x), name
        assert view.shape == expected.shape, name
        assert view.stride() == expected.stride(), name
        assert view.storage_offset() == expected.storage_offset(), name
        assert torch.equal(view.cpu(), expected), name


def test_view_sees_writes_through_base(cpu_and_infini: tuple[torch.Tensor, torch.Tensor]) -> None:
    cpu, x = cpu_and_infini
    view = x.transpose(0, 1)
    replacement = make_cpu((2, 3, 4), torch.float32, seed=2)
    x.copy_(replacement)
    assert torch.equal(view.cpu(), replacement.transpose(0, 1))
    view[1].copy_(torch.zeros(2, 4))
    replacement.transpose(0, 1)[1] = 0
    assert torch.equal(x.cpu(), replacement)
    assert not torch.equal(x.cpu(), cpu)


def test_view_compatible_reshape_is_a_view(
    cpu_and_infini: tuple[torch.Tensor, torch.Tensor],
) -> None:
    cpu, x = cpu_and_infini
    for shape in [(24,), (6, 4), (4, 3, 2), (-1, 2), (2, 12)]:
        reshaped = x.reshape(shape)
        assert _same_storage(reshaped, x)
        assert torch.equal(reshaped.cpu(), cpu.reshape(shape))
    flat = x.flatten(1)
    assert _same_storage(flat, x)
    assert torch.equal(flat.cpu(), cpu.flatten(1))


def test_view_of_incompatible_layout_raises(
    cpu_and_infini: tuple[torch.Tensor, torch.Tensor],
) -> None:
    _, x = cpu_and_infini
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.transpose(0, 2).view(24)


def test_nn_flatten(cpu_and_infini: tuple[torch.Tensor, torch.Tensor]) -> None:
    cpu, x = cpu_and_infini
    flatten = torch.nn.Flatten()
    out = flatten(x)
    assert out.device == x.device
    assert out.shape == (2, 12)
    assert torch.equal(out.cpu(), flatten(cpu))


# ---------------------------------------------------------------- resize_ / set_


def test_resize_grow_keeps_prefix() -> None:
    src = make_cpu((6,), torch.float64, seed=3)
    x = src.to("infini")
    x.resize_(4, 5)
    assert x.shape == (4, 5)
    assert x.is_contiguous()
    assert x.untyped_storage().nbytes() >= 20 * x.element_size()
    assert torch.equal(x.cpu().flatten()[:6], src)


def test_resize_shrink_then_grow_back_keeps_data() -> None:
    src = make_cpu((10,), torch.int32, seed=4)
    x = src.to("infini")
    x.resize_(3)
    assert torch.equal(x.cpu(), src[:3])
    x.resize_(10)
    assert torch.equal(x.cpu(), src)  # shrinking never released the storage


def test_resize_with_storage_offset() -> None:
    src = torch.arange(10, dtype=torch.float32)
    x = src.to("infini")[4:]
    x.resize_(8)
    cpu = src.clone()[4:]
    cpu.resize_(8)
    assert x.storage_offset() == cpu.storage_offset() == 4
    assert x.untyped_storage().nbytes() == cpu.untyped_storage().nbytes()
    assert torch.equal(x.cpu()[:6], cpu[:6])


def test_resize_grow_is_seen_by_other_views() -> None:
    src = torch.arange(4, dtype=torch.float32)
    x = src.to("infini")
    alias = x.view(2, 2)
    x.resize_(100)
    assert _same_storage(alias, x)
    assert torch.equal(alias.cpu(), src.view(2, 2))


def test_resize_memory_format() -> None:
    x = torch.empty(2, 3, device="infini")
    x.resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert x.stride() == torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).stride()


def test_resize_to_same_shape_leaves_non_contiguous_tensor_unchanged() -> None:
    """torch docs: resize_ to the current size leaves the tensor unchanged."""
    src = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    cpu = src.clone().t()
    x = src.to("infini").t()
    cpu.resize_(3, 2)
    x.resize_(3, 2)
    assert x.stride() == cpu.stride() == (1, 3)
    assert torch.equal(x.cpu(), cpu)


def test_resize_negative_raises() -> None:
    x = torch.empty(3, device="infini")
    with pytest.raises(RuntimeError, match="negative dimension"):
        x.resize_(-2)


def test_resize_as() -> None:
    x = torch.arange(3, dtype=torch.float32).to("infini")
    x.resize_as_(torch.empty(2, 4))
    assert x.shape == (2, 4)
    assert torch.equal(x.cpu().flatten()[:3], torch.arange(3, dtype=torch.float32))


def test_set_tensor() -> None:
    cpu = make_cpu((3, 4), torch.float32, seed=5)
    source = cpu.to("infini").t()
    x = torch.empty(0, device="infini")
    x.set_(source)
    assert _same_storage(x, source)
    assert (x.shape, x.stride(), x.storage_offset()) == (
        source.shape,
        source.stride(),
        source.storage_offset(),
    )
    assert torch.equal(x.cpu(), cpu.t())


def test_set_storage() -> None:
    cpu = make_cpu((12,), torch.int64, seed=6)
    source = cpu.to("infini")
    x = torch.empty(0, dtype=torch.int64, device="infini")
    x.set_(source.untyped_storage())
    assert x.shape == (12,)
    assert _same_storage(x, source)
    assert torch.equal(x.cpu(), cpu)


def test_set_storage_offset_size_stride() -> None:
    cpu = torch.arange(12, dtype=torch.float32)
    source = cpu.to("infini")
    x = torch.empty(0, device="infini")
    x.set_(source.untyped_storage(), 2, (3, 2), (1, 3))
    expected = torch.empty(0).set_(cpu.untyped_storage(), 2, (3, 2), (1, 3))
    assert (x.shape, x.stride(), x.storage_offset()) == (
        expected.shape,
        expected.stride(),
        expected.storage_offset(),
    )
    assert _same_storage(x, source)
    assert torch.equal(x.cpu(), expected)


def test_set_storage_never_grows_the_storage() -> None:
    """Only resize_ grows a storage: set_ outside it is refused (issue 35,
    a checkpoint shorter than its tensor), and nothing changes."""
    storage = torch.arange(4, dtype=torch.float32).to("infini").untyped_storage()
    x = torch.empty(0, device="infini")
    with raises_exactly(RuntimeError, match="out of bounds for storage of size 16"):
        x.set_(storage, 2, (8,), (1,))
    assert storage.nbytes() == 16 and x.shape == (0,)
    x.set_(storage, 2, (2,), (1,))
    assert torch.equal(x.cpu(), torch.tensor([2.0, 3.0]))


def test_set_errors() -> None:
    x = torch.empty(0, device="infini")
    with pytest.raises(RuntimeError, match="different device"):
        x.set_(torch.empty(3).untyped_storage())
    with raises_exactly(RuntimeError, match="Could not set tensor of type float to a tensor"):
        torch.empty(0, dtype=torch.int32, device="infini").set_(torch.empty(3, device="infini"))
    storage = torch.empty(4, device="infini").untyped_storage()
    with pytest.raises(RuntimeError, match="negative dimension"):
        x.set_(storage, 0, (-1,), (1,))
    with pytest.raises(RuntimeError, match="storage offset"):
        x.set_(storage, -1, (1,), (1,))


# ---------------------------------------------------------------- serialization


def test_save_load_round_trip() -> None:
    cpu = make_cpu((4, 5), torch.float32, seed=7)
    x = cpu.to("infini")
    payload = {
        "x": x,
        "view": x[1:, ::2],
        "int": make_cpu((3,), torch.int16, seed=8).to("infini"),
        "half": make_cpu((2, 2), torch.bfloat16, seed=9).to("infini"),
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    for key, value in payload.items():
        assert loaded[key].device == value.device, key
        assert loaded[key].dtype == value.dtype, key
        assert loaded[key].shape == value.shape, key
        assert loaded[key].stride() == value.stride(), key
        assert torch.equal(loaded[key].cpu(), value.cpu()), key
    # Views keep sharing the storage they were saved with.
    assert _same_storage(loaded["x"], loaded["view"])
    assert not _same_storage(loaded["x"], x)


def test_load_with_map_location() -> None:
    cpu = make_cpu((3, 3), torch.float64, seed=10)
    buffer = io.BytesIO()
    torch.save(cpu.to("infini"), buffer)
    buffer.seek(0)
    to_cpu = torch.load(buffer, map_location="cpu")
    assert to_cpu.device.type == "cpu"
    assert torch.equal(to_cpu, cpu)

    buffer = io.BytesIO()
    torch.save(cpu, buffer)
    buffer.seek(0)
    to_infini = torch.load(buffer, map_location="infini")
    assert to_infini.device.type == "infini"
    assert torch.equal(to_infini.cpu(), cpu)


@requires_two_devices
def test_save_load_keeps_device_index() -> None:
    cpu = make_cpu((5,), torch.float32, seed=11)
    buffer = io.BytesIO()
    torch.save(cpu.to("infini:1"), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded.device == torch.device("infini", 1)
    assert torch.equal(loaded.cpu(), cpu)


# ---------------------------------------------------------------- moving tensors


def test_tensor_moves() -> None:
    cpu = make_cpu((3, 4), torch.float32, seed=12)
    for moved in [cpu.infini(), cpu.to("infini"), cpu.to(torch.device("infini", 0)), cpu.infini(0)]:
        assert moved.is_infini
        assert moved.device.type == "infini"
        back = moved.cpu()
        assert not back.is_infini
        assert back.device.type == "cpu"
        assert torch.equal(back, cpu)
    assert not cpu.is_infini


def test_to_with_dtype() -> None:
    cpu = make_cpu((3, 4), torch.float32, seed=13)
    x = cpu.to("infini", dtype=torch.float64)
    assert x.dtype == torch.float64
    assert torch.equal(x.cpu(), cpu.double())
    assert torch.equal(x.to(torch.float32).cpu(), cpu)
    assert torch.equal(x.to("cpu", torch.float16), cpu.half())


def test_to_same_device_is_identity() -> None:
    x = torch.arange(3.0).to("infini")
    assert x.to("infini") is x
    assert x.infini() is x


@requires_two_devices
def test_tensor_infini_with_index() -> None:
    cpu = make_cpu((5,), torch.int32, seed=14)
    x = cpu.infini(1)
    assert x.device == torch.device("infini", 1)
    assert torch.equal(x.cpu(), cpu)


def test_module_to_infini() -> None:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    reference = {name: t.clone() for name, t in module.state_dict().items()}
    module.to("infini")
    for name, tensor in module.state_dict().items():
        assert tensor.device.type == "infini", name
        assert torch.equal(tensor.cpu(), reference[name]), name
    for parameter in module.parameters():
        assert parameter.is_infini
        assert isinstance(parameter, torch.nn.Parameter)


def test_module_infini() -> None:
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 2)
    weight = module.weight.detach().clone()
    returned = module.infini()
    assert returned is module
    assert all(p.device.type == "infini" for p in module.parameters())
    assert torch.equal(module.weight.cpu(), weight)
    module.cpu()
    assert all(p.device.type == "cpu" for p in module.parameters())
    assert torch.equal(module.weight, weight)


def test_storage_moves() -> None:
    cpu = torch.arange(8, dtype=torch.uint8)
    storage = cpu.untyped_storage().infini()
    assert storage.device.type == "infini"
    assert storage.is_infini
    assert bytes(storage.cpu()) == bytes(cpu.untyped_storage())


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_item(dtype: torch.dtype) -> None:
    cpu = make_cpu((4,), dtype, seed=15)
    x = cpu.to("infini")
    for index in range(4):
        value = x[index].item()
        expected = cpu[index].item()
        assert type(value) is type(expected)
        assert value == expected
    assert x[2:3].item() == cpu[2:3].item()
    assert x.view(2, 2)[1, 0].item() == cpu[2].item()


@pytest.mark.parametrize(
    "dtype",
    [
        torch.complex128,
        torch.complex32,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
    ],
)
def test_item_of_every_other_dtype(dtype: torch.dtype) -> None:
    """Each dtype's element becomes the Python value the CPU makes of it."""
    if dtype.is_complex:
        cpu = torch.tensor([1.5 - 2j, -0.25 + 4j, 3j, 7.0], dtype=dtype)
    elif dtype.is_floating_point:
        cpu = torch.tensor([1.5, -2.25, 3.0, 0.5]).to(dtype)
    else:
        cpu = (torch.arange(4) * 3 + 1).to(dtype)
    x = cpu.to("infini")
    for index in range(4):
        value, expected = x[index].item(), cpu[index].item()
        assert type(value) is type(expected)
        assert value == expected


def test_item_resolves_conjugate_and_negative_views_and_keeps_nan() -> None:
    cpu = torch.tensor([1.0 + 2.0j, -3.0 - 0.5j])
    x = cpu.to("infini")
    assert x.conj()[0].item() == cpu.conj()[0].item() == 1.0 - 2.0j
    assert torch._neg_view(x)[1].item() == -cpu[1].item()
    assert math.isnan(torch.tensor([float("nan")]).to("infini").item())
    assert torch.tensor([2], dtype=torch.uint8).to("infini").bool().item() is True


def test_item_reads_after_the_streams_pending_work() -> None:
    """.item() waits for the current stream, as on CUDA (no stale value)."""
    x = torch.zeros(1, device="infini")
    side = torch.infini.Stream()
    side.wait_stream(torch.infini.current_stream())  # the zeros first, as on CUDA
    with torch.infini.stream(side):
        for step in range(1, 51):
            x.add_(1.0)
            assert x.item() == float(step)


def test_item_of_scalar_tensor() -> None:
    assert torch.tensor(2.5).to("infini").item() == 2.5
    assert torch.tensor(-7).to("infini").item() == -7
    assert torch.tensor(True).to("infini").item() is True


def test_item_of_many_elements_raises() -> None:
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        torch.empty(3, device="infini").item()


# ---------------------------------------------------------------- pinned memory


def test_pin_memory() -> None:
    cpu = make_cpu((16,), torch.float32, seed=16)
    assert not cpu.is_pinned()
    pinned = cpu.pin_memory()
    assert pinned.is_pinned()
    assert pinned.device.type == "cpu"
    assert torch.equal(pinned, cpu)
    assert pinned[3:].is_pinned()
    assert pinned.view(4, 4).t().is_pinned()
    assert pinned.pin_memory().is_pinned()


def test_empty_pinned() -> None:
    pinned = torch.empty(8, pin_memory=True)
    assert pinned.is_pinned()
    assert not torch.empty(8).is_pinned()


def test_storage_pin_memory() -> None:
    storage = torch.arange(6, dtype=torch.int16).untyped_storage()
    assert not storage.is_pinned()
    pinned = storage.pin_memory()
    assert pinned.is_pinned()
    assert bytes(pinned) == bytes(storage)


def test_infini_tensors_are_not_pinned() -> None:
    x = torch.empty(4, device="infini")
    assert not x.is_pinned()
    with raises_exactly(RuntimeError, match="cannot pin .* only dense CPU tensors can be pinned"):
        x.pin_memory()


# ---------------------------------------------------------------- autograd


def test_autograd_through_copies() -> None:
    x = make_cpu((3, 4), torch.float32, seed=17).requires_grad_()
    y = x.to("infini")
    assert y.requires_grad
    assert y.grad_fn is not None
    y.retain_grad()
    z = y.cpu()
    z.sum().backward()
    assert x.grad is not None
    assert x.grad.device.type == "cpu"
    assert torch.equal(x.grad, torch.ones(3, 4))
    assert y.grad is not None
    assert y.grad.device.type == "infini"
    assert torch.equal(y.grad.cpu(), torch.ones(3, 4))


def test_autograd_through_views_and_dtype_changes() -> None:
    x = make_cpu((2, 3), torch.float32, seed=18).requires_grad_()
    z = x.to("infini", dtype=torch.float64).t().cpu()
    weights = torch.arange(6, dtype=torch.float64).reshape(3, 2)
    (z * weights).sum().backward()
    assert x.grad is not None
    assert x.grad.dtype == torch.float32
    assert torch.equal(x.grad, weights.t().float())


@requires_two_devices
def test_autograd_across_devices() -> None:
    x = make_cpu((3, 4), torch.float32, seed=19).requires_grad_()
    z = x.to("infini:0").t().to("infini:1").cpu()
    weights = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    (z * weights).sum().backward()
    assert x.grad is not None
    assert torch.equal(x.grad, weights.t())
