"""aten::convolution (nn.Conv1d/2d/3d, F.conv1d/2d/3d) on infini.

The forward of a convolution that is not transposed is the seam's
Convolution where the backend serves the dtype (host: the CPU's own
convolution on the device memory, in float32, float16 and bfloat16;
InfiniOps' kernel on its CUDA-like accelerators; InfiniRT ``cpu`` has none).
Transposed convolutions, other dtypes and what the kernel does not take run
in the CPU fallback, with the refusal as the reason; so does the backward
(convolution_backward).

The oracle is the same call on the CPU: values bit for bit on host
(InfiniOps: PyTorch's tolerances), in the layout PyTorch's fake tensors
predict for infini (what torch.compile plans with), gradients included.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import raises_exactly
from op_helpers import DEVICE, assert_matches, expect_kernel, kernel_dtypes, make_cpu
from torch._subclasses.fake_tensor import FakeTensorMode

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# name: (conv, input shape, weight shape, with bias, keyword arguments)
CASES: dict[str, tuple[Any, tuple[int, ...], tuple[int, ...], bool, dict]] = {
    "conv1d": (F.conv1d, (2, 4, 11), (6, 4, 3), True, {"stride": 2, "padding": 1}),
    "conv1d dilated, groups": (
        F.conv1d,
        (2, 4, 11),
        (6, 2, 3),
        False,
        {"dilation": 2, "groups": 2},
    ),
    "conv2d": (F.conv2d, (2, 3, 9, 8), (5, 3, 3, 2), True, {"stride": (2, 1), "padding": (1, 0)}),
    "conv2d depthwise": (F.conv2d, (1, 4, 6, 6), (4, 1, 3, 3), True, {"groups": 4, "padding": 1}),
    "conv2d 1x1": (F.conv2d, (3, 8, 4, 4), (2, 8, 1, 1), False, {}),
    "conv3d": (
        F.conv3d,
        (1, 2, 5, 6, 4),
        (3, 2, 2, 3, 2),
        True,
        {"stride": (1, 2, 1), "padding": 1},
    ),
}


def _arguments(case: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    _, x_shape, w_shape, with_bias, _ = CASES[case]
    x = make_cpu(x_shape, dtype, seed=1)
    w = make_cpu(w_shape, dtype, seed=2) / 4
    b = make_cpu((w_shape[0],), dtype, seed=3) if with_bias else None
    return (x, w) if b is None else (x, w, b)


def _predicted_strides(conv: Any, args: tuple[torch.Tensor, ...], kwargs: dict) -> tuple:
    """The strides PyTorch's fake tensors give the result on infini."""
    with FakeTensorMode() as mode:
        fakes = [mode.from_tensor(t) for t in args]
        return conv(*fakes, **kwargs).stride()


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_forward_is_the_cpus(dtype: torch.dtype, case: str) -> None:
    """Natively with the fallback off where the backend serves the dtype
    (expect_kernel; elsewhere the refusal names the dtype and provider, and
    the fallback's result is checked the same way)."""
    conv, _, _, _, kwargs = CASES[case]
    args = _arguments(case, dtype)
    want = conv(*args, **kwargs)
    on_device = [t.to(DEVICE) for t in args]
    with expect_kernel("convolution", dtype) as native:
        torch_infini.cpu_fallback.reset_stats()
        got = conv(*on_device, **kwargs)
        assert torch_infini.cpu_fallback.stats() == {}
        assert_matches(got, want)
        assert got.stride() == _predicted_strides(conv, tuple(on_device), kwargs)
    if not native:
        with torch_infini.cpu_fallback.allowed("silent"):
            got = conv(*on_device, **kwargs)
        assert_matches(got, want)


@pytest.mark.parametrize("operand", ["input", "weight", "both"])
def test_channels_last_operands_give_the_predicted_layout(operand: str) -> None:
    """The CPU's convolution returns channels-last when an operand is; on
    infini the result has the layout fake tensors predict (contiguous),
    with the CPU's values."""
    x = make_cpu((2, 3, 7, 6), torch.float32, seed=4)
    w = make_cpu((4, 3, 3, 3), torch.float32, seed=5)
    if operand in ("input", "both"):
        x = x.to(memory_format=torch.channels_last)
    if operand in ("weight", "both"):
        w = w.to(memory_format=torch.channels_last)
    want = F.conv2d(x, w, padding=1)
    xd = torch.empty_strided(x.shape, x.stride(), device=DEVICE).copy_(x)
    wd = torch.empty_strided(w.shape, w.stride(), device=DEVICE).copy_(w)
    with expect_kernel("convolution", torch.float32):
        got = F.conv2d(xd, wd, padding=1)
        assert_matches(got, want)
        assert got.stride() == _predicted_strides(F.conv2d, (xd, wd), {"padding": 1})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_module_training_is_the_cpus(dtype: torch.dtype) -> None:
    """nn.Conv2d's forward and backward (the backward in the fallback):
    output, input and parameter gradients as on the CPU."""
    torch.manual_seed(0)
    cpu = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2).to(dtype)
    dev = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2).to(dtype).to(DEVICE)
    dev.load_state_dict(cpu.state_dict())
    x = make_cpu((2, 4, 7, 7), dtype, seed=6).requires_grad_()
    xd = x.detach().to(DEVICE).requires_grad_()
    grad = make_cpu((2, 6, 4, 4), dtype, seed=7)
    y = cpu(x)
    y.backward(grad)
    with torch_infini.cpu_fallback.allowed("silent"):
        yd = dev(xd)
        yd.backward(grad.to(DEVICE))
    assert_matches(yd, y.detach())
    assert x.grad is not None and xd.grad is not None
    assert_matches(xd.grad, x.grad)
    for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters(), strict=True):
        assert p_cpu.grad is not None and p_dev.grad is not None
        assert_matches(p_dev.grad, p_cpu.grad)


@pytest.mark.parametrize("case", ["transposed", "weight of another dtype"])
def test_what_the_kernel_does_not_take_runs_in_the_fallback(case: str) -> None:
    """Refused with its reason under the fallback off; with it on, the CPU's
    result, or its error."""
    if torch.float32 not in kernel_dtypes("convolution"):
        pytest.skip("the backend serves no float32 convolution: every call falls back")
    x = make_cpu((2, 3, 6, 6), torch.float32, seed=8)
    if case == "transposed":
        w = make_cpu((3, 4, 3, 3), torch.float32, seed=9)
        conv, reason = F.conv_transpose2d, "does not compute transposed convolutions"
    else:
        w = make_cpu((4, 3, 3, 3), torch.bfloat16, seed=9)
        conv, reason = F.conv2d, "input, weight and bias of one dtype"
    with torch_infini.cpu_fallback.strict(), raises_exactly(NotImplementedError, match=reason):
        conv(x.to(DEVICE), w.to(DEVICE))
    if case == "transposed":
        with torch_infini.cpu_fallback.allowed("silent"):
            got = conv(x.to(DEVICE), w.to(DEVICE))
        assert_matches(got, conv(x, w), exact=True)
    else:
        with raises_exactly(RuntimeError, match="should be the same"):
            conv(x, w)
        with (
            torch_infini.cpu_fallback.allowed("silent"),
            raises_exactly(RuntimeError, match="should be the same"),
        ):
            conv(x.to(DEVICE), w.to(DEVICE))


@pytest.mark.parametrize(
    "case",
    ["channels do not match", "kernel larger than the input", "negative padding", "zero stride"],
)
def test_bad_input_raises_the_cpus_error(case: str) -> None:
    x = make_cpu((1, 3, 5, 5), torch.float32, seed=10)
    w = make_cpu((2, 3, 3, 3), torch.float32, seed=11)
    kwargs: dict = {}
    if case == "channels do not match":
        w = w[:, :2]
    elif case == "kernel larger than the input":
        w = make_cpu((2, 3, 7, 7), torch.float32, seed=11)
    elif case == "negative padding":
        kwargs = {"padding": -1}
    else:
        kwargs = {"stride": 0}
    with pytest.raises(RuntimeError) as on_cpu:
        F.conv2d(x, w, **kwargs)
    message = str(on_cpu.value).split("\n")[0]
    with (
        torch_infini.cpu_fallback.allowed("silent"),
        raises_exactly(RuntimeError, match=message[:40].replace("(", r"\(").replace("[", r"\[")),
    ):
        F.conv2d(x.to(DEVICE), w.to(DEVICE), **kwargs)


def test_an_empty_batch_is_the_cpus() -> None:
    x = make_cpu((0, 3, 5, 5), torch.float32)
    w = make_cpu((2, 3, 3, 3), torch.float32, seed=12)
    want = F.conv2d(x, w)
    with expect_kernel("convolution", torch.float32):
        got = F.conv2d(x.to(DEVICE), w.to(DEVICE))
        assert got.shape == want.shape == (0, 2, 3, 3)


def test_the_declared_dtypes_are_the_kernels() -> None:
    assert set(torch_infini.supported_dtypes("aten::convolution")) == set(
        kernel_dtypes("convolution")
    )
