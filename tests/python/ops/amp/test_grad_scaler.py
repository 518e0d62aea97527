"""torch.amp.GradScaler("infini"): its kernels and a training loop, against the CPU.

GradScaler's two kernels, _amp_foreach_non_finite_check_and_unscale_ and
_amp_update_scale_, run on infini in stream order (natively where the kernel
provider has them: ``host``; in the CPU fallback elsewhere). Their results,
and a whole training loop with an injected inf, equal the CPU's exactly.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal, raises_exactly
from op_helpers import DEVICE, make_cpu

UNSCALE = torch._amp_foreach_non_finite_check_and_unscale_
UPDATE = torch._amp_update_scale_


def _native_here() -> bool:
    return torch_infini.backend() == "host"


def _grads(values: list[float], dtype: torch.dtype, device: str) -> list[torch.Tensor]:
    base = [make_cpu((3, 5), dtype, seed=i) for i in range(3)]
    base[1].view(-1)[: len(values)] = torch.tensor(values, dtype=dtype)
    return [g.to(device) for g in base]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize(
    "values",
    [[], [math.inf], [-math.inf], [math.nan], [1.0, math.nan, math.inf]],
    ids=["finite", "inf", "-inf", "nan", "mixed"],
)
def test_unscale_and_inf_detection_are_the_cpus(values: list[float], dtype: torch.dtype) -> None:
    results = {}
    for device in ("cpu", DEVICE):
        grads = _grads(values, dtype, device)
        found_inf = torch.zeros((), device=device)
        inv_scale = torch.full((), 1 / 1024, device=device)
        torch_infini.cpu_fallback.reset_stats()
        UNSCALE(grads, found_inf, inv_scale)
        results[device] = (grads, found_inf)
        if device == DEVICE and _native_here():
            assert torch_infini.cpu_fallback.stats() == {}, "GradScaler's unscale fell back"
    (cpu_grads, cpu_found), (grads, found) = results["cpu"], results[DEVICE]
    assert_bitwise_equal(found, cpu_found)
    assert found.item() == (1.0 if values and any(not math.isfinite(v) for v in values) else 0.0)
    for got, want in zip(grads, cpu_grads, strict=True):
        assert_bitwise_equal(got, want)


@pytest.mark.parametrize(
    ("found", "tracker", "interval"),
    [(0.0, 0, 3), (0.0, 2, 3), (1.0, 2, 3), (0.0, 0, 1), (1.0, 0, 1)],
    ids=["count", "grow", "back off", "grow every step", "back off at interval 1"],
)
def test_update_scale_is_the_cpus(found: float, tracker: int, interval: int) -> None:
    results = []
    for device in ("cpu", DEVICE):
        scale = torch.full((1,), 1024.0, device=device)
        growth_tracker = torch.full((1,), tracker, dtype=torch.int32, device=device)
        found_inf = torch.full((1,), found, device=device)
        torch_infini.cpu_fallback.reset_stats()
        out = UPDATE(scale, growth_tracker, found_inf, 2.0, 0.5, interval)
        assert out is scale
        if device == DEVICE and _native_here():
            assert torch_infini.cpu_fallback.stats() == {}, "GradScaler's update fell back"
        results.append((scale.cpu(), growth_tracker.cpu()))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@pytest.mark.parametrize(("start", "grows"), [(3e38, False), (1.5e38, True)], ids=str)
def test_a_scale_that_would_overflow_does_not_grow(start: float, grows: bool) -> None:
    """Growth is skipped exactly where the grown scale is not finite (float32
    ends at 3.4e38): 3e38 stays, 1.5e38 doubles, as on the CPU, bit for bit.
    The tracker restarts at 0 either way, so only the scale tells them apart."""
    results = {}
    for device in ("cpu", DEVICE):
        scale = torch.full((1,), start, device=device)
        tracker = torch.zeros(1, dtype=torch.int32, device=device)
        UPDATE(scale, tracker, torch.zeros(1, device=device), 2.0, 0.5, 1)
        results[device] = (scale, tracker)
    (cpu_scale, cpu_tracker), (scale, tracker) = results["cpu"], results[DEVICE]
    start_f32 = torch.full((1,), start)
    assert torch.equal(cpu_scale, start_f32 * 2 if grows else start_f32)  # the oracle's case
    assert_bitwise_equal(scale, cpu_scale)
    assert_bitwise_equal(tracker, cpu_tracker)


def _train(device: str, inject_inf_at: int, steps: int = 6) -> list[tuple[float, int, list]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**12, growth_interval=2)
    x = make_cpu((4, 6), torch.float32, seed=20).div(100).to(device)
    y = make_cpu((4, 2), torch.float32, seed=21).div(100).to(device)
    history = []
    for step in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        if step == inject_inf_at:
            loss = loss * math.inf
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        params = [p.detach().cpu().clone() for p in model.parameters()]
        history.append((scaler.get_scale(), int(scaler._growth_tracker.item()), params))
    return history


def test_a_training_loop_with_an_injected_inf_is_the_cpus() -> None:
    """The step with inf is skipped and the scale halved, exactly as on the
    CPU; then training proceeds (the scale grows back, the weights move)."""
    with torch_infini.cpu_fallback.allowed("silent"):
        got = _train(DEVICE, inject_inf_at=2)
    want = _train("cpu", inject_inf_at=2)
    for step, ((scale, tracker, params), (cpu_scale, cpu_tracker, cpu_params)) in enumerate(
        zip(got, want, strict=True)
    ):
        assert (scale, tracker) == (cpu_scale, cpu_tracker), f"step {step}"
        for p, q in zip(params, cpu_params, strict=True):
            if _native_here():  # the CPU's kernels: bit for bit
                assert_bitwise_equal(p, q)
            else:
                torch.testing.assert_close(p, q)
    scales = [s for s, _, _ in got]
    assert scales[2] == scales[1] / 2  # skipped and backed off
    assert torch.equal(got[2][2][0], got[1][2][0])  # the skipped step left the weights
    assert scales[-1] > scales[2]  # grown back
    assert not torch.equal(got[-1][2][0], got[2][2][0])  # training proceeded


def test_bad_arguments_raise_cudas_errors() -> None:
    grads = [torch.ones(3, device=DEVICE)]
    found = torch.zeros(1, device=DEVICE)
    inv = torch.ones(1, device=DEVICE)
    cases = [
        (lambda: UNSCALE(grads, found.double(), inv), "found_inf must be a float tensor"),
        (lambda: UNSCALE(grads, found, torch.ones(2, device=DEVICE)), "inv_scale must be a 1-"),
        (lambda: UNSCALE(grads, found, inv.cpu()), "inv_scale must be a|same device"),
        (
            lambda: UPDATE(found.clone(), torch.zeros(1, device=DEVICE), found, 2.0, 0.5, 1),
            "growth_tracker must be an int tensor",
        ),
        (
            lambda: UPDATE(torch.ones(2, device=DEVICE), found.int(), found, 2.0, 0.5, 1),
            "current_scale must be a 1-element tensor",
        ),
    ]
    for call, message in cases:
        with raises_exactly(RuntimeError, match=message):
            call()
