"""torch.infini.amp: torch.cuda.amp's names, signatures and warnings, torch.amp's behaviour.

Oracles: torch.cuda.amp for what the module offers and warns (it is
importable without CUDA), torch.autocast("infini") for what an autocast
region does, and torch.amp.GradScaler("cpu") training on the CPU for what
the GradScaler does.
"""

from __future__ import annotations

import importlib
import inspect
import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal
from op_helpers import DEVICE, assert_matches, make_cpu

# Every use warns (as torch.cuda.amp's); test_every_use_warns_as_torch_cuda_amps checks it.
pytestmark = pytest.mark.filterwarnings(r"ignore:`torch\.infini\.amp\.:FutureWarning")

AMP = torch.infini.amp


def _params(obj: Any) -> list[tuple[str, Any, Any]]:
    """Names, kinds and defaults (annotations aside: they are strings here)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(obj).parameters.values()]


def test_the_module_offers_torch_cuda_amps_names() -> None:
    assert AMP is importlib.import_module("torch.infini.amp")
    assert AMP is importlib.import_module("torch_infini.infini.amp")
    assert "amp" in torch.infini.__all__
    assert set(AMP.__all__) == set(torch.cuda.amp.__all__)
    for name in torch.cuda.amp.__all__:
        assert hasattr(AMP, name), name
    assert issubclass(AMP.autocast, torch.amp.autocast)
    assert issubclass(AMP.GradScaler, torch.amp.GradScaler)
    assert AMP.amp_definitely_not_available() is (not torch.infini.is_available())


@pytest.mark.parametrize(
    "get",
    [
        lambda m: m.autocast,
        lambda m: m.autocast.__init__,
        lambda m: m.GradScaler,
        lambda m: m.custom_fwd,
        lambda m: m.custom_bwd,
        lambda m: m.amp_definitely_not_available,
    ],
    ids=["autocast", "autocast.__init__", "GradScaler", "custom_fwd", "custom_bwd", "available"],
)
def test_signatures_are_torch_cuda_amps(get: Callable[[Any], Any]) -> None:
    assert _params(get(AMP)) == _params(get(torch.cuda.amp))


def _future_warnings(use: Callable[[], Any]) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        use()
    return [w for w in caught if issubclass(w.category, FutureWarning)]


@pytest.mark.parametrize(
    "use",
    [
        lambda m: m.autocast(),
        lambda m: m.GradScaler(),
        lambda m: m.custom_fwd(cast_inputs=torch.float32),
        lambda m: m.custom_fwd(lambda ctx, x: x),
        lambda m: m.custom_bwd(lambda ctx, g: g),
        lambda m: m.amp_definitely_not_available(),
    ],
    ids=["autocast", "GradScaler", "custom_fwd()", "custom_fwd", "custom_bwd", "available"],
)
def test_every_use_warns_as_torch_cuda_amps(use: Callable[[Any], Any]) -> None:
    """One FutureWarning naming torch.amp's spelling, attributed to the caller's line."""
    cuda = _future_warnings(lambda: use(torch.cuda.amp))
    infini = _future_warnings(lambda: use(AMP))
    assert len(infini) == len(cuda) <= 1
    for got, want in zip(infini, cuda, strict=True):
        assert got.filename == want.filename == __file__
        expected = str(want.message).replace("cuda", "infini")
        assert str(got.message) == expected
        assert "torch.amp." in expected and "'infini'" in expected


# ---------------------------------------------------------------- autocast

REGIONS = [
    {},
    {"dtype": torch.bfloat16},
    {"enabled": False},
    {"dtype": torch.bfloat16, "cache_enabled": False},
    {"enabled": False, "dtype": torch.bfloat16},
]


def _observe() -> tuple[Any, ...]:
    """What a region changes: the infini autocast state (not the CPU's) and a matmul."""
    a = make_cpu((4, 4), torch.float32, seed=1).to(DEVICE)
    out = a @ a
    return (
        torch.is_autocast_enabled("infini"),
        torch.get_autocast_dtype("infini"),
        torch.is_autocast_enabled("cpu"),
        torch.is_autocast_cache_enabled(),
        out.dtype,
        out.cpu(),
    )


@pytest.mark.parametrize("kwargs", REGIONS, ids=str)
def test_autocast_region_is_torch_autocast_infini(kwargs: dict[str, Any]) -> None:
    with torch.autocast("infini", **kwargs):
        want = _observe()
    with AMP.autocast(**kwargs):
        got = _observe()
    assert got[:5] == want[:5]
    assert_bitwise_equal(got[5], want[5])
    assert _observe()[:4] == (False, torch.float16, False, True)  # restored on exit


def test_default_autocast_dtype_is_torch_infinis() -> None:
    a = make_cpu((4, 4), torch.float32, seed=2).to(DEVICE)
    with AMP.autocast():
        assert torch.is_autocast_enabled("infini")
        assert (a @ a).dtype == torch.get_autocast_dtype("infini") == torch.float16
    assert torch.get_autocast_dtype("infini") == torch.infini.get_amp_supported_dtype()[0]


def test_autocast_as_a_decorator() -> None:
    a = make_cpu((4, 4), torch.float32, seed=3).to(DEVICE)

    @AMP.autocast(dtype=torch.bfloat16)
    def matmul(x: torch.Tensor) -> torch.Tensor:
        assert torch.is_autocast_enabled("infini")
        return x @ x

    for _ in range(2):  # the same region enters again
        assert matmul(a).dtype == torch.bfloat16
        assert not torch.is_autocast_enabled("infini")
    assert (a @ a).dtype == torch.float32


def test_an_error_inside_the_region_restores_the_state() -> None:
    with pytest.raises(KeyError), AMP.autocast(dtype=torch.bfloat16):
        raise KeyError("inside")
    assert not torch.is_autocast_enabled("infini")
    assert torch.get_autocast_dtype("infini") == torch.float16


# ---------------------------------------------------------------- GradScaler


def _train(device: str, make_scaler: Callable[[], torch.amp.GradScaler]) -> Any:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = make_scaler()
    x = make_cpu((4, 5), torch.float32, seed=10).div(10).to(device)
    y = make_cpu((4, 3), torch.float32, seed=11).div(10).to(device)
    history = []
    for step in range(5):
        loss = torch.nn.functional.mse_loss(model(x), y)
        if step == 2:
            loss = loss * math.inf  # skipped, the scale backs off
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        history.append((scaler.get_scale(), [p.detach().cpu().clone() for p in model.parameters()]))
    return scaler, history


def test_grad_scaler_trains_as_torch_amps_on_the_cpu() -> None:
    kwargs = {"init_scale": 2.0**10, "growth_factor": 4.0, "growth_interval": 1}
    with torch_infini.cpu_fallback.allowed("silent"):
        scaler, got = _train(DEVICE, lambda: AMP.GradScaler(**kwargs))
    cpu_scaler, want = _train("cpu", lambda: torch.amp.GradScaler("cpu", **kwargs))
    assert scaler._device == "infini"
    assert scaler._scale is not None and scaler._scale.device.type == "infini"
    assert scaler.state_dict() == cpu_scaler.state_dict()
    for step, ((scale, params), (cpu_scale, cpu_params)) in enumerate(zip(got, want, strict=True)):
        assert scale == cpu_scale, f"step {step}"
        for p, q in zip(params, cpu_params, strict=True):
            assert_matches(p, q, device="cpu")  # bit for bit on host
    assert got[2][0] < got[1][0]  # the inf step backed off


def test_grad_scaler_defaults_are_torch_amps() -> None:
    scaler, reference = AMP.GradScaler(), torch.amp.GradScaler("infini")
    assert scaler._device == reference._device == "infini"
    assert scaler.state_dict() == reference.state_dict()  # (no scale tensor yet: defaults)
    assert AMP.GradScaler(enabled=False).is_enabled() is False


# ---------------------------------------------------------------- custom_fwd / custom_bwd


def test_custom_fwd_casts_inputs_and_custom_bwd_follows_forward() -> None:
    seen: list[tuple[str, bool]] = []

    class Square(torch.autograd.Function):
        @staticmethod
        @AMP.custom_fwd(cast_inputs=torch.float32)
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            seen.append(("forward", torch.is_autocast_enabled("infini")))
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @AMP.custom_bwd
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            seen.append(("backward", torch.is_autocast_enabled("infini")))
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    x_cpu = make_cpu((3,), torch.float16, seed=4)
    x = x_cpu.to(DEVICE).requires_grad_()
    with AMP.autocast(dtype=torch.float16):
        y = Square.apply(x)
    assert y.dtype == torch.float32  # the input was cast, autocast was off inside
    y.backward(torch.ones_like(y))
    assert seen == [("forward", False), ("backward", False)]
    assert x.grad is not None and x.grad.dtype == torch.float16
    assert_matches(x.grad, (2 * x_cpu.float()).half())


def test_custom_bwd_runs_in_the_forwards_autocast_region() -> None:
    seen: list[tuple[str, bool, torch.dtype]] = []

    def state(where: str) -> None:
        enabled, dtype = torch.is_autocast_enabled("infini"), torch.get_autocast_dtype("infini")
        seen.append((where, enabled, dtype))

    class MatmulSelf(torch.autograd.Function):
        @staticmethod
        @AMP.custom_fwd
        def forward(ctx: Any, a: torch.Tensor) -> torch.Tensor:
            state("forward")
            ctx.save_for_backward(a)
            return a @ a

        @staticmethod
        @AMP.custom_bwd
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            state("backward")
            (a,) = ctx.saved_tensors
            return grad @ a.t() + a.t() @ grad

    a = make_cpu((4, 4), torch.float32, seed=5).to(DEVICE).requires_grad_()
    with AMP.autocast(dtype=torch.bfloat16):
        out = MatmulSelf.apply(a)
    assert out.dtype == torch.bfloat16
    out.backward(torch.ones_like(out))  # outside the region: custom_bwd re-enters it
    assert seen == [("forward", True, torch.bfloat16), ("backward", True, torch.bfloat16)]
    assert a.grad is not None and a.grad.dtype == torch.float32
