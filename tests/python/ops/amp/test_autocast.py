"""torch.autocast("infini"): CUDA's autocast policy on infini.

The operator lists are PyTorch's own for CUDA: the policy is ATen's lists
(registered for infini's AutocastPrivateUse1 key), and the cases here are
PyTorch's CUDA autocast test lists (torch.testing._internal.autocast_test_lists)
made with infini tensors. Every result is checked against the CPU computing
the same casts explicitly, with autocast off (CPU autocast's own lists
differ, so it is no oracle): bit for bit where infini runs the CPU's kernels
(``host``), within float16/bfloat16 tolerances elsewhere. Whole models
(Linear, an MLP, the Llama example) are checked operator by operator: every
operator autocast lets through is run again on the CPU with the same inputs.
A torch.ops.infini operator's oracle is its composition from stock PyTorch
operators (fused_oracles.py), never its own CPU implementation.
"""

from __future__ import annotations

import collections.abc
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fused_oracles
import pytest
import torch
import torch_infini
from infini_testing import llama_example, raises_exactly
from op_coverage import torch_testing_internal
from op_helpers import DEVICE, assert_matches, make_cpu, runs_cpu_kernels
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

AMP_DTYPES = [torch.float16, torch.bfloat16]
REPO = Path(__file__).resolve().parents[4]


@functools.cache
def _lists() -> Any:
    """PyTorch's CUDA autocast test lists, their tensors made on infini."""
    torch.manual_seed(0)
    return torch_testing_internal("autocast_test_lists").AutocastTestLists(torch.device(DEVICE))


def _cast(value: Any, dtype: torch.dtype) -> Any:
    """PyTorch's explicit casts: floating tensors to ``dtype``, anything else kept."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _to_cpu(value: Any) -> Any:
    return tree_map(lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, value)


def _call(op: str, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if module is not None and hasattr(module, op):
        return getattr(module, op)(*args, **kwargs)
    return getattr(args[0], op)(*args[1:], **kwargs)


def _tolerances(want: torch.Tensor) -> dict[str, float]:
    """Where another kernel than the CPU's ran (InfiniOps): float16/bfloat16
    results within a few roundings of the largest magnitude involved (a
    composite such as conv_tbc accumulates rounded partial sums); float32
    results with PyTorch's defaults."""
    if want.dtype not in AMP_DTYPES or want.numel() == 0:
        return {}
    eps = torch.finfo(want.dtype).eps
    return {"rtol": 1e-2, "atol": 4 * eps * float(want.abs().max().clamp(min=1))}


def _assert_result(
    got: Any, want: Any, out_type: torch.dtype, what: str, same_kernel: bool = True
) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), what
        if want.is_floating_point():
            assert got.dtype == out_type, f"{what}: produced {got.dtype}, should produce {out_type}"
        tols = _tolerances(want)
        assert_matches(got, want, device=None, same_kernel=same_kernel, **tols)
    elif isinstance(want, collections.abc.Iterable) and not isinstance(want, str):
        for g, w in zip(got, want, strict=True):
            _assert_result(g, w, out_type, what, same_kernel)
    else:
        assert got == want, what


# Operators PyTorch serves with fused kernels off the CPU (CUDA's and infini's
# lstm_cell and gru_cell compute in float and round once; the CPU's path
# rounds every step to the autocast dtype): their control computes the cast
# inputs in float32 on the CPU and rounds the results to the autocast dtype.
FUSED_OFF_THE_CPU = {"lstm_cell", "gru_cell"}


def _promoted_dtype(args: tuple[Any, ...], amp_dtype: torch.dtype) -> torch.dtype | None:
    """CUDA's promote policy (at::autocast::prioritize): the widest floating
    input, float64 ignored; None where it raises (float16 inputs under
    bfloat16 autocast, or the reverse)."""
    current = amp_dtype
    for t in tree_flatten(args)[0]:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dtype == torch.float64:
            continue
        if torch.float32 in (current, t.dtype):
            current = torch.float32
        elif not current == t.dtype == amp_dtype:
            return None
    return current


def _run_case(
    op: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    run_as: torch.dtype,
    amp_dtype: torch.dtype,
    module: Any = torch,
    out_type: torch.dtype | None = None,
) -> None:
    """PyTorch's out-of-place autocast check (test_cuda's), against the CPU."""
    control_args = _cast(_to_cpu(args), run_as)
    if op in FUSED_OFF_THE_CPU:
        control_args = _cast(control_args, torch.float32)
    try:
        want = _call(op, module, control_args, kwargs)
        if op in FUSED_OFF_THE_CPU:
            want = _cast(want, run_as)
    except Exception as error:  # the CPU refuses it: infini must, alike
        with torch.autocast("infini", dtype=amp_dtype):
            with raises_exactly(type(error), match=""):
                _call(op, module, args, kwargs)
        return
    with torch.autocast("infini", dtype=amp_dtype):
        assert torch.is_autocast_enabled("infini")
        got = _call(op, module, args, kwargs)
    what = f"autocast {op} ({amp_dtype})"
    _assert_result(_to_cpu(got), want, out_type or run_as, what, op not in FUSED_OFF_THE_CPU)


def _entries(name: str) -> list[tuple[str, tuple[Any, ...], dict[str, Any], Any]]:
    """(op, args, kwargs, extra) of one list; extra: an expected dtype or None.

    Entries are (op, args), (op, args, kwargs), (op, args, out dtype),
    (op, args, a skip flag for ROCm) or, for einsum, (op, equation, args).
    """
    out = []
    for entry in getattr(_lists(), name):
        op, args, rest = entry[0], entry[1], entry[2:]
        if isinstance(args, str):  # einsum's equation
            args, rest = (args, *rest[0]), ()
        kwargs = rest[0] if rest and isinstance(rest[0], dict) else {}
        extra = rest[0] if rest and isinstance(rest[0], torch.dtype) else None
        out.append((op, args, kwargs, extra))
    return out


# (list, the module its ops are looked up in, run in the autocast dtype?)
LISTS = {
    "torch_fp16": (torch, True),
    "torch_fp32": (torch, False),
    "torch_need_autocast_promote": (torch, False),
    "nn_fp16": (torch._C._nn, True),
    "nn_fp32": (torch._C._nn, False),
    "linalg_fp16": (torch._C._linalg, True),
    "methods_fp16": (None, True),
    "methods_fp32": (None, False),
}


@pytest.mark.parametrize("amp_dtype", AMP_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(LISTS))
def test_pytorch_cuda_autocast_lists(name: str, amp_dtype: torch.dtype) -> None:
    module, lower_precision = LISTS[name]
    run_as = amp_dtype if lower_precision else torch.float32
    failures = []
    entries = _entries(name)
    assert entries, f"PyTorch's {name} list is empty"
    for op, args, kwargs, _ in entries:
        if name == "torch_need_autocast_promote":
            promoted = _promoted_dtype(args, amp_dtype)
            if promoted is None:  # as on CUDA
                with torch.autocast("infini", dtype=amp_dtype):
                    with raises_exactly(RuntimeError, match="Unexpected floating ScalarType"):
                        _call(op, module, args, kwargs)
                continue
            run_as = promoted
        try:
            _run_case(op, args, kwargs, run_as, amp_dtype, module)
        except AssertionError as failure:
            failures.append(f"{op}: {failure}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("amp_dtype", AMP_DTYPES, ids=str)
@pytest.mark.parametrize("name", ["torch_expect_builtin_promote", "methods_expect_builtin_promote"])
def test_operators_outside_the_lists_promote_as_usual(name: str, amp_dtype: torch.dtype) -> None:
    module = torch if name.startswith("torch") else None
    for op, args, kwargs, out_type in _entries(name):
        if op == "__div__":
            op = "__truediv__"  # Python 3's name for the listed method
        _run_case(op, args, kwargs, torch.float32, amp_dtype, module, out_type)


def test_binary_cross_entropy_is_banned_as_on_cuda() -> None:
    (_, args, module), *_ = _lists().banned
    with torch.autocast("infini", dtype=torch.float16):
        with raises_exactly(RuntimeError, match="unsafe to autocast"):
            module.binary_cross_entropy(*args)


# ---------------------------------------------------------------- the API


def test_autocast_is_available_with_float16_and_bfloat16() -> None:
    assert torch.amp.is_autocast_available("infini")
    assert torch.infini.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.infini.is_bf16_supported()
    assert torch.get_autocast_dtype("infini") == torch.float16  # PyTorch's default, as CUDA's


def test_dtype_enabled_state_and_nesting() -> None:
    a = make_cpu((4, 4), torch.float32, seed=1).to(DEVICE)
    assert not torch.is_autocast_enabled("infini")
    with torch.autocast("infini", dtype=torch.bfloat16):
        assert torch.get_autocast_dtype("infini") == torch.bfloat16
        assert (a @ a).dtype == torch.bfloat16
        with torch.autocast("infini", enabled=False):
            assert not torch.is_autocast_enabled("infini")
            assert (a @ a).dtype == torch.float32
        with torch.autocast("infini", dtype=torch.float16):
            assert (a @ a).dtype == torch.float16
        assert (a @ a).dtype == torch.bfloat16
        # a CPU region inside leaves infini's alone, and the reverse
        with torch.autocast("cpu", enabled=False):
            assert (a @ a).dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("infini")
    assert torch.get_autocast_dtype("infini") == torch.float16
    assert (a @ a).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.float32  # infini tensors: the CPU region does not apply


class _CountCasts(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.casts = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten._to_copy.default:
            self.casts += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("cache_enabled", [True, False])
def test_weight_casts_are_cached_within_a_region(cache_enabled: bool) -> None:
    """As on CUDA: a leaf that requires grad is cast once per region."""
    weight = make_cpu((4, 4), torch.float32, seed=2).to(DEVICE).requires_grad_()
    x = make_cpu((2, 4), torch.float32, seed=3).to(DEVICE)
    counter = _CountCasts()
    with torch.autocast("infini", dtype=torch.bfloat16, cache_enabled=cache_enabled):
        with counter:
            torch.nn.functional.linear(x, weight)
            torch.nn.functional.linear(x, weight)
    # two casts of x, and of the weight one (cached) or two
    assert counter.casts == (3 if cache_enabled else 4)


def test_custom_fwd_and_custom_bwd() -> None:
    class Square(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="infini", cast_inputs=torch.float32)
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            assert not torch.is_autocast_enabled("infini")  # cast_inputs turns it off inside
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @torch.amp.custom_bwd(device_type="infini")
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    x_cpu = make_cpu((3,), torch.float16, seed=4)
    x = x_cpu.to(DEVICE).requires_grad_()
    with torch.autocast("infini", dtype=torch.float16):
        y = Square.apply(x)
    assert y.dtype == torch.float32
    y.sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float16
    assert_matches(x.grad, (2 * x_cpu.float()).half())


def test_an_unsupported_dtype_warns_and_disables_autocast() -> None:
    a = make_cpu((2, 2), torch.float32, seed=5).to(DEVICE)
    with pytest.warns(UserWarning, match="In infini autocast, but the target dtype is not supp"):
        region = torch.autocast("infini", dtype=torch.float64)
    with region:
        assert not torch.is_autocast_enabled("infini")
        assert (a @ a).dtype == torch.float32


class _KernelInputs(TorchDispatchMode):
    """Records the floating dtypes each torch.ops.infini operator receives
    (below autocast: after its casts)."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: dict[str, list[torch.dtype]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name
        if name.startswith("infini::"):
            tensors = tree_flatten((args, kwargs or {}))[0]
            self.dtypes[name] = [
                t.dtype for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()
            ]
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("amp_dtype", AMP_DTYPES, ids=str)
def test_fused_kernels_follow_the_policy_of_their_aten_counterparts(
    amp_dtype: torch.dtype,
) -> None:
    """README: causal_softmax, topk_softmax, rms_norm and add_rms_norm run in float32
    (softmax's and rms_norm's policy); swiglu is in no list. The kernels'
    inputs are seen below autocast; results against the stock-PyTorch
    compositions (fused_oracles) of the inputs cast as the policy says."""
    x_cpu = make_cpu((3, 4), amp_dtype, seed=6)
    w_cpu = make_cpu((4,), torch.float32, seed=7)
    g_cpu = make_cpu((5, 6), amp_dtype, seed=8)
    x, w = x_cpu.to(DEVICE), w_cpu.to(DEVICE)
    g = g_cpu.to(DEVICE).requires_grad_()
    ops = torch.ops.infini
    seen = _KernelInputs()
    with torch_infini.cpu_fallback.allowed("silent"), seen:
        with torch.autocast("infini", dtype=amp_dtype):
            soft = ops.causal_softmax(x)  # softmax: float32
            normed, residual = ops.add_rms_norm(x, x, w, 1e-6)  # rms_norm: float32
            plain = ops.rms_norm(x, w.to(x.dtype), 1e-6)  # rms_norm: float32
            gated = ops.swiglu(x, x)  # in no list: the inputs' dtype
            weights, experts, _ = ops.topk_softmax(g, 2, True, None, None)  # softmax: float32
        weights.backward(torch.ones_like(weights))
    f32 = torch.float32
    assert seen.dtypes == {
        "infini::causal_softmax": [f32],
        "infini::add_rms_norm": [f32, f32, f32],
        "infini::rms_norm": [f32, f32],
        "infini::swiglu": [amp_dtype, amp_dtype],
        "infini::topk_softmax": [f32],
    }
    assert (soft.dtype, normed.dtype, residual.dtype, gated.dtype, weights.dtype) == (
        f32,
        f32,
        f32,
        amp_dtype,
        f32,
    )
    x32 = x_cpu.float()
    assert_matches(soft, fused_oracles.causal_softmax(x32))
    want_normed, want_residual = fused_oracles.add_rms_norm(x32, x32, w_cpu, 1e-6)
    # the composition makes the kernel's float operations in its order
    assert_matches(normed, want_normed)
    assert_matches(residual, want_residual)
    assert plain.dtype == f32
    want_plain = fused_oracles.rms_norm(x32, w_cpu.to(amp_dtype).float(), 1e-6)
    assert_matches(plain, want_plain, same_kernel=False)
    assert_matches(gated, fused_oracles.swiglu(x_cpu, x_cpu))
    # topk: the renormalized weights divide where the kernel multiplies by
    # the reciprocal: within float32 rounding, not bit for bit
    g_oracle = g_cpu.clone().requires_grad_()
    want_weights, want_experts, _ = fused_oracles.topk_softmax(g_oracle.float(), 2, True)
    want_weights.backward(torch.ones_like(want_weights))
    torch.testing.assert_close(
        weights.detach().cpu(), want_weights.detach(), rtol=1.3e-6, atol=1e-7
    )
    assert torch.equal(experts.cpu(), want_experts)
    # the gradient reaches the amp-dtype leaf through autocast's cast
    assert g.grad is not None and g.grad.dtype == amp_dtype
    torch.testing.assert_close(g.grad.cpu(), g_oracle.grad)


# ------------------------------------------------------------ whole models

# Operators the dispatch mode sees (below autocast) whose output dtype the
# policy decides: CUDA's lower-precision and float32 lists as models reach them.
LOWER_PRECISION_OPS = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"}
FLOAT32_OPS = {
    "aten::_softmax",
    "aten::_log_softmax",
    "aten::rms_norm",
    "aten::native_layer_norm",
    "aten::nll_loss_forward",
    "aten::mse_loss",
    "infini::causal_softmax",
}


# torch.ops.infini operators are replayed with their stock-PyTorch
# composition, never with their own CPU implementation: (composition,
# whether it rounds as the kernel does, so bit for bit on host).
STOCK_FUSED: dict[str, tuple[Callable[..., Any], bool]] = {
    "infini::causal_softmax": (fused_oracles.causal_softmax, True),
    "infini::swiglu": (fused_oracles.swiglu, True),
    "infini::silu_and_mul": (fused_oracles.silu_and_mul, True),
    "infini::add_rms_norm": (fused_oracles.add_rms_norm, True),
    "infini::rms_norm": (fused_oracles.rms_norm, True),
    # renormalize divides where the kernel multiplies by the reciprocal
    "infini::topk_softmax": (fused_oracles.topk_softmax, False),
}


class CpuReplay(TorchDispatchMode):
    """Runs every operator that reaches infini (after autocast's casts) again
    on the CPU with the same inputs (a torch.ops.infini operator: its stock
    composition) and checks its results against those; records the
    operators' output dtypes."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: list[tuple[str, torch.dtype]] = []
        self.failures: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        cpu_args, cpu_kwargs = tree_map(_cpu_copy, (args, kwargs))
        out = func(*args, **kwargs)
        name = func._schema.name
        results = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if results and results[0].is_floating_point():
            self.outputs.append((name, results[0].dtype))
        if torch.Tag.nondeterministic_seeded in func.tags:
            return out  # another generator than the CPU's
        same_kernel = True
        if name.startswith("infini::"):
            if name not in STOCK_FUSED:
                self.failures.append(f"{name}: no stock-PyTorch oracle to replay it with")
                return out
            stock, same_kernel = STOCK_FUSED[name]
            want = stock(*cpu_args, **cpu_kwargs)
        else:
            want = func(*cpu_args, **cpu_kwargs)
        if func._schema.is_mutable:  # in-place and out=: compare every argument
            results = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            want = (cpu_args, cpu_kwargs)
        expected = [t for t in tree_flatten(want)[0] if isinstance(t, torch.Tensor)]
        for got, reference in zip(results, expected, strict=True):
            try:
                assert_matches(
                    got, reference, device=None, same_kernel=same_kernel, **_tolerances(reference)
                )
            except AssertionError as failure:
                self.failures.append(f"{name}: {failure}")
        return out


def _cpu_copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone() if value.device.type == "infini" else value
    if isinstance(value, torch.device) and value.type == "infini":
        return torch.device("cpu")
    return value


def _check_policy(replay: CpuReplay, amp_dtype: torch.dtype) -> None:
    assert not replay.failures, "\n".join(replay.failures)
    seen = set()
    for name, dtype in replay.outputs:
        if name in LOWER_PRECISION_OPS:
            assert dtype == amp_dtype, f"{name} produced {dtype} under autocast({amp_dtype})"
            seen.add(name)
        if name in FLOAT32_OPS:
            assert dtype == torch.float32, f"{name} produced {dtype}, not float32"
            seen.add(name)
    assert seen, "the model reached no operator of the policy's lists"


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4), torch.nn.LogSoftmax(-1)
    )


# name: (model, inputs, the output dtype under autocast or None: the autocast dtype)
MODELS: dict[str, Callable[[], tuple[torch.nn.Module, torch.Tensor, torch.dtype | None]]] = {
    "linear": lambda: (
        torch.nn.Linear(8, 4),
        make_cpu((3, 8), torch.float32, seed=8) / 100,
        None,  # linear: lower precision
    ),
    "mlp": lambda: (_mlp(), make_cpu((3, 8), torch.float32, seed=9) / 100, torch.float32),
    "llama": lambda: (
        llama_example().Llama(llama_example().Config()),
        torch.randint(0, 14, (2, 9), generator=torch.Generator().manual_seed(10)),
        None,  # its head is a Linear
    ),
}


@pytest.mark.parametrize("amp_dtype", AMP_DTYPES, ids=str)
@pytest.mark.parametrize("model_name", list(MODELS))
def test_models_forward_and_backward_under_autocast(
    model_name: str, amp_dtype: torch.dtype
) -> None:
    torch.manual_seed(0)
    model, inputs, out_dtype = MODELS[model_name]()
    model, inputs = model.to(DEVICE), inputs.to(DEVICE)
    replay = CpuReplay()
    with torch_infini.cpu_fallback.allowed("silent"), replay:
        with torch.autocast("infini", dtype=amp_dtype):
            out = model(inputs)
        out.float().square().mean().backward()
    _check_policy(replay, amp_dtype)
    assert out.dtype == (out_dtype or amp_dtype)
    for p in model.parameters():  # float32 leaves get float32 gradients
        assert p.grad is not None and p.grad.dtype == torch.float32


def test_training_with_autocast_and_grad_scaler_learns() -> None:
    """The Llama example trains under bfloat16 autocast with a GradScaler."""
    llama = llama_example()
    torch.manual_seed(0)
    model = llama.Llama(llama.Config()).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scaler = torch.amp.GradScaler("infini")
    generator = torch.Generator().manual_seed(1)
    losses = []
    with torch_infini.cpu_fallback.allowed("silent"):
        for _ in range(40):
            inputs, targets = llama.batch(16, 6, generator)
            with torch.autocast("infini", dtype=torch.bfloat16):
                logits = model(inputs.to(DEVICE))
            loss = torch.nn.functional.cross_entropy(
                logits.float().flatten(0, 1), targets.to(DEVICE).flatten()
            )
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-5:]) < 0.85 * sum(losses[:5]), losses


def test_results_are_the_cpus_bit_for_bit_on_host() -> None:
    """On host the autocast path runs the CPU's kernels on the cast inputs."""
    if not runs_cpu_kernels():
        pytest.skip("InfiniOps' kernels round differently: compared within tolerances above")
    a_cpu, b_cpu = make_cpu((16, 16), torch.float32, seed=11), make_cpu((16, 16), torch.float32, 12)
    with torch.autocast("infini", dtype=torch.bfloat16):
        got = torch.mm(a_cpu.to(DEVICE), b_cpu.to(DEVICE))
    assert torch.equal(got.cpu(), torch.mm(a_cpu.bfloat16(), b_cpu.bfloat16()))
