"""Gradients through every operator with an infini kernel, against the CPU.

Every operator ``torch_infini.operators()`` lists is either differentiated
here or named in ``NOT_DIFFERENTIABLE`` with the reason, so an operator added
without an autograd path cannot pass unnoticed (issue 11, part 1: rms_norm
once gave its input no gradient at all, with only a UserWarning).

For each case the same function runs on CPU leaves and on infini leaves with
the same values; the infini gradients of every input that requires grad must
equal the CPU's (bit for bit where infini runs the CPU's own kernels), with
the CPU fallback serving the backward operators infini has no kernel for. A
missing gradient is never accepted. With the fallback off, the cases that
need it raise NotImplementedError naming the operator infini lacks, as
``REFUSED_WITHOUT_FALLBACK`` records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
import torch_infini
from infini_testing import fallback_off, raises_exactly
from op_helpers import assert_matches, make_cpu


@dataclass(frozen=True)
class GradCase:
    operator: str  # the ATen operator the case exercises, as operators() names it
    fn: Callable[..., torch.Tensor]
    shapes: Sequence[tuple[int, ...]]  # one float32 leaf requiring grad per shape
    # False where the host kernel is not the CPU's own (addmm with a bias on
    # host is a gemm plus a separate bias add, rounding twice): PyTorch's tolerances.
    same_kernel: bool = True


# LSTM and GRU layers take the CPU's own route (oneDNN, the CPU's GRU
# projection) where the CPU can address device memory (rnn_layers.cpp); on a
# device it cannot (discrete mode, accelerators) they run ATen's composite
# cells, a different summation order: PyTorch's tolerances there.
CPU_ROUTE_FOR_RNNS = bool(torch_infini._C._capabilities()["host_addressable"])

CASES: dict[str, GradCase] = {
    "add": GradCase("aten::add.Tensor", lambda a, b: torch.add(a, b, alpha=2.5), [(3, 4), (3, 4)]),
    "add_": GradCase("aten::add_.Tensor", lambda a, b: a.clone().add_(b, alpha=-2), [(3, 4)] * 2),
    "sub": GradCase("aten::sub.Tensor", lambda a, b: torch.sub(a, b, alpha=1.5), [(3, 4), (3, 4)]),
    "sub_": GradCase("aten::sub_.Tensor", lambda a, b: a.clone().sub_(b, alpha=2), [(3, 4)] * 2),
    "mul": GradCase("aten::mul.Tensor", lambda a, b: a * b, [(3, 4), (3, 4)]),
    "mul_": GradCase("aten::mul_.Tensor", lambda a, b: a.clone().mul_(b), [(3, 4), (3, 4)]),
    # Python-number operands reach the kernel as scalars (binaryScalar)
    "mul, add, sub with Python numbers": GradCase(
        "aten::mul.Tensor", lambda a: (a * 0.5 + 1.0) * (a - 2.0), [(3, 4)]
    ),
    "relu": GradCase("aten::relu", torch.relu, [(3, 4)]),
    "relu_": GradCase("aten::relu_", lambda a: a.clone().relu_(), [(3, 4)]),
    "silu": GradCase("aten::silu", F.silu, [(3, 4)]),
    "silu_": GradCase("aten::silu_", lambda a: F.silu(a.clone(), inplace=True), [(3, 4)]),
    "sigmoid": GradCase("aten::sigmoid", torch.sigmoid, [(3, 4)]),
    "sigmoid_": GradCase("aten::sigmoid_", lambda a: a.clone().sigmoid_(), [(3, 4)]),
    "gelu": GradCase("aten::gelu", F.gelu, [(3, 4)]),
    "softmax": GradCase("aten::_softmax", lambda a: torch.softmax(a, -1), [(3, 4)]),
    "softmax (dim 0)": GradCase("aten::_softmax", lambda a: F.softmax(a, dim=0), [(3, 4)]),
    "gelu (tanh)": GradCase("aten::gelu", lambda a: F.gelu(a, approximate="tanh"), [(3, 4)]),
    "gelu_": GradCase(
        "aten::gelu_", lambda a: torch.ops.aten.gelu_(a.clone(), approximate="tanh"), [(3, 4)]
    ),
    "cat": GradCase("aten::cat", lambda a, b: torch.cat([a, b.t()], 1), [(3, 4), (2, 3)]),
    "stack": GradCase("aten::cat", lambda a, b: torch.stack([a, b], -1), [(3, 4), (3, 4)]),
    "mm": GradCase("aten::mm", torch.mm, [(3, 4), (4, 5)]),
    "bmm": GradCase("aten::bmm", torch.bmm, [(2, 3, 4), (2, 4, 5)]),
    "addmm": GradCase(
        "aten::addmm",
        lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2),
        [(3, 5), (3, 4), (4, 5)],
    ),
    "addmm (Linear bias)": GradCase("aten::addmm", torch.addmm, [(5,), (3, 4), (4, 5)]),
    # Linear's kernel serves no gradient: with one recorded, PyTorch's decomposition
    "linear": GradCase("aten::linear", F.linear, [(2, 3, 4), (5, 4), (5,)]),
    "linear (no bias)": GradCase("aten::linear", F.linear, [(3, 4), (5, 4)]),
    "rms_norm": GradCase(
        "aten::rms_norm", lambda x, w: F.rms_norm(x, [4], w, 1e-5), [(3, 4), (4,)]
    ),
    "fill_": GradCase("aten::fill_.Scalar", lambda a: a.clone().fill_(2.0) * a, [(3, 4)]),
    "fill_ (tensor)": GradCase(
        "aten::fill_.Tensor", lambda a, v: a.clone().fill_(v.sum()) * a, [(3, 4), (2,)]
    ),
    "zero_": GradCase("aten::zero_", lambda a: a.clone().zero_() + a, [(3, 4)]),
    "view": GradCase("aten::view", lambda a: a.view(4, 3) * 2, [(3, 4)]),
    "as_strided": GradCase("aten::as_strided", lambda a: a.as_strided((2, 2), (1, 4), 1), [(3, 4)]),
    "unfold": GradCase("aten::unfold", lambda a: a.unfold(1, 2, 1) * 2, [(3, 4)]),
    "view_as_complex": GradCase(
        "aten::view_as_complex", lambda a: torch.view_as_complex(a).abs(), [(3, 2)]
    ),
    "view_as_real": GradCase(
        "aten::view_as_real", lambda a, b: torch.view_as_real(torch.complex(a, b)) * 2, [(3,)] * 2
    ),
    "reshape (alias)": GradCase("aten::_reshape_alias", lambda a: a.t().reshape(2, 6), [(3, 4)]),
    "to infini": GradCase("aten::_copy_from", lambda a: a.to("infini").cpu(), [(3, 4)]),
    # Repeated rows and the padding row (its gradient stays zero).
    "embedding": GradCase(
        "aten::embedding",
        lambda w: F.embedding(torch.tensor([[1, 0, 3], [3, 4, 1]], device=w.device), w, 0),
        [(5, 4)],
    ),
    "conv2d": GradCase(
        "aten::convolution",
        lambda x, w, b: F.conv2d(x, w, b, stride=(1, 2), padding=1, groups=2),
        [(2, 4, 5, 6), (6, 2, 3, 3), (6,)],
    ),
    "_convolution (conv1d, dilated)": GradCase(
        "aten::_convolution",
        lambda x, w: torch._convolution(
            x, w, None, [1], [2], [2], False, [0], 1, False, False, True, True
        ),
        [(2, 3, 7), (4, 3, 3)],
    ),
    "topk_softmax": GradCase(
        "infini::topk_softmax",
        lambda g: torch.ops.infini.topk_softmax(g, 2, True)[0],
        [(4, 6)],
    ),
    "silu_and_mul": GradCase("infini::silu_and_mul", torch.ops.infini.silu_and_mul, [(3, 8)]),
    "swiglu": GradCase("infini::swiglu", torch.ops.infini.swiglu, [(3, 4), (3, 4)]),
    # On infini InfiniOps' rms_norm kernel (host: another multiplication
    # order than the CPU reference): PyTorch's tolerances.
    "infini_rms_norm": GradCase(
        "infini::rms_norm",
        lambda x, w: torch.ops.infini.rms_norm(x, w, 1e-5),
        [(3, 8), (8,)],
        same_kernel=False,
    ),
    # Both results (the normalized sum, the sum) receive a gradient.
    "add_rms_norm": GradCase(
        "infini::add_rms_norm",
        lambda x, r, w: torch.cat(list(torch.ops.infini.add_rms_norm(x, r, w, 1e-5))),
        [(3, 8), (3, 8), (8,)],
    ),
    "causal_softmax": GradCase(
        "infini::causal_softmax", torch.ops.infini.causal_softmax, [(2, 3, 5)]
    ),
    # query [B, S, heads, d] rotated out of place (the cache is a constant).
    "rotary_embedding_functional": GradCase(
        "infini::rotary_embedding_functional",
        lambda q: torch.ops.infini.rotary_embedding_functional(
            torch.tensor([[0, 1, 2], [5, 6, 7]], device=q.device),
            q,
            8,
            (torch.arange(64, dtype=torch.float32).view(8, 8) / 7).to(q.device),
            True,
        ),
        [(2, 3, 2, 8)],
    ),
    # PyTorch takes the fused cells off the CPU; the CPU's unfused path rounds
    # differently: PyTorch's tolerances. Inputs scaled into the gates' range.
    "lstm_cell": GradCase(
        "aten::_thnn_fused_lstm_cell",
        lambda x, h, c, *w: torch.cat(
            torch.lstm_cell(x / 100, (h / 100, c / 100), *(t / 100 for t in w)), 1
        ),
        [(2, 3), (2, 4), (2, 4), (16, 3), (16, 4), (16,), (16,)],
        same_kernel=False,
    ),
    "gru_cell": GradCase(
        "aten::_thnn_fused_gru_cell",
        lambda x, h, *w: torch.gru_cell(x / 100, h / 100, *(t / 100 for t in w)),
        [(2, 3), (2, 4), (12, 3), (12, 4), (12,), (12,)],
        same_kernel=False,
    ),
    # Whole layers ([steps, batch, features]), as nn.LSTM and nn.GRU call
    # them: on host the CPU's route (rnn_layers.cpp), bit for bit.
    "lstm": GradCase(
        "aten::lstm.input",
        lambda x, h, c, *w: torch.cat(
            [
                t.flatten()
                for t in torch.lstm(x / 10, (h / 10, c / 10), w, True, 1, 0.0, True, False, False)
            ]
        ),
        [(5, 2, 3), (1, 2, 4), (1, 2, 4), (16, 3), (16, 4), (16,), (16,)],
        same_kernel=CPU_ROUTE_FOR_RNNS,
    ),
    "gru": GradCase(
        "aten::gru.input",
        lambda x, h, *w: torch.cat(
            [t.flatten() for t in torch.gru(x / 10, h / 10, w, True, 1, 0.0, True, False, False)]
        ),
        [(5, 2, 3), (1, 2, 4), (12, 3), (12, 4), (12,), (12,)],
        same_kernel=CPU_ROUTE_FOR_RNNS,
    ),
}

# Cases whose backward needs an operator infini has no kernel for (the CPU
# fallback runs it): with the fallback off, the operator the
# NotImplementedError must name. One disappears once infini gains the kernel.
REFUSED_WITHOUT_FALLBACK: dict[str, str] = {
    "relu": "aten::threshold_backward",
    "relu_": "aten::threshold_backward",
    "silu": "aten::silu_backward",
    "silu_": "aten::silu_backward",
    "addmm (Linear bias)": "aten::sum",
    "linear": "aten::sum",
    "rms_norm": "rms_norm: with requires_grad=True.*aten::pow",
    "fill_ (tensor)": "aten::sum",
}

# Operators with an infini kernel that autograd does not differentiate, and why.
NOT_DIFFERENTIABLE: dict[str, str] = {
    "aten::empty.memory_format": "a factory: no tensor input",
    "aten::empty_strided": "a factory: no tensor input",
    "aten::resize_": "changes storage, not values; autograd refuses it on tensors requiring grad",
    "aten::set_.source_Storage_storage_offset": "rebinds storage; not differentiable",
    "aten::set_.source_Storage": "rebinds storage; not differentiable",
    "aten::set_.source_Tensor": "rebinds storage; not differentiable",
    "aten::set_": "detaches from its storage; not differentiable",
    "aten::_has_compatible_shallow_copy_type": "a type query; no tensor result",
    "aten::record_stream": "allocator bookkeeping; no output",
    "aten::_local_scalar_dense": "returns a Python number (item())",
    "aten::_copy_from_and_resize": "the out= resize path of copies; see 'to infini' for _copy_from",
    "aten::add.out": "out= variants do not support autograd (tested below, as on the CPU)",
    "aten::sub.out": "out= variant",
    "aten::mul.out": "out= variant",
    "aten::relu.out": "out= variant",
    "aten::silu.out": "out= variant",
    "aten::sigmoid.out": "out= variant",
    "aten::gelu.out": "out= variant",
    "aten::_softmax.out": "out= variant",
    "aten::mm.out": "out= variant",
    "aten::bmm.out": "out= variant",
    "aten::addmm.out": "out= variant",
    "aten::cat.out": "out= variant",
    "aten::randperm.generator_out": "a factory: no tensor input",
    "aten::_thnn_fused_lstm_cell_backward_impl": "the backward kernel of the fused LSTM cell "
    "(its own gradient, in double backward, is PyTorch's differentiable formula, as on CUDA)",
    "aten::_thnn_fused_gru_cell_backward": "the backward kernel of the fused GRU cell "
    "(double backward: PyTorch's differentiable formula, as on CUDA)",
    "aten::_amp_foreach_non_finite_check_and_unscale_": "GradScaler's in-place unscale of "
    "gradients; not differentiable, as on the CPU",
    "aten::_amp_update_scale_": "GradScaler's scale update; not differentiable, as on the CPU",
    "infini::top_k_top_p_sample": "returns token ids (int64): nothing to differentiate",
    "infini::rotary_embedding": "rotates query and key in place and refuses a gradient "
    "(test_fused_rms_norm_rotary.py checks the refusal, and the gradients of its "
    "differentiable form, apply_rotary_embedding)",
    "infini::fused_add_rms_norm": "overwrites input and residual in place and refuses a "
    "gradient (test_fused_rms_norm_rotary.py checks the refusal, and the gradients of its "
    "differentiable form, add_rms_norm)",
    "infini::reshape_and_cache_flash": "writes a KV cache in place for inference and refuses "
    "a gradient (test_paged_attention.py checks the refusal)",
    "infini::paged_attention": "a decode (inference) kernel that refuses a gradient "
    "(test_paged_attention.py checks the refusal; training uses scaled_dot_product_attention)",
    "aten::multinomial": "integer samples",
    "aten::multinomial.out": "out= variant",
    "aten::bernoulli.out": "out= variant",
    "aten::normal.Tensor_float_out": "out= variant",
    "aten::normal.float_Tensor_out": "out= variant",
    "aten::normal.Tensor_Tensor_out": "out= variant",
    **{
        name: "refills its input with random numbers: autograd gives the input a zero gradient "
        "(test_random_ops.py checks it, as on the CPU)"
        for name in (
            "aten::uniform_",
            "aten::normal_",
            "aten::log_normal_",
            "aten::exponential_",
            "aten::geometric_",
            "aten::cauchy_",
            "aten::random_",
            "aten::random_.from",
            "aten::random_.to",
            "aten::bernoulli_.float",
            "aten::bernoulli_.Tensor",
        )
    },
}

# Random operators whose outputs differ from the CPU's (another generator):
# test_random_ops.py differentiates them against the CPU's formula applied
# to the same draw (the dropout mask, the standard normal sample).
DIFFERENTIATED_IN_TEST_RANDOM_OPS = (
    "aten::native_dropout",
    "aten::native_dropout_backward",
    "aten::normal.Tensor_float",
    "aten::normal.float_Tensor",
    "aten::normal.Tensor_Tensor",
)


def _leaves(shapes: Sequence[tuple[int, ...]], device: str, seed: int) -> list[torch.Tensor]:
    return [
        make_cpu(shape, torch.float32, seed=seed + i).to(device).requires_grad_()
        for i, shape in enumerate(shapes)
    ]


def _forward_backward(case: GradCase, device: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = _leaves(case.shapes, device, seed=7)
    out = case.fn(*leaves)
    grad_out = make_cpu(tuple(out.shape), torch.float32, seed=99).to(out.device)
    out.backward(grad_out)
    return out, leaves


def test_every_operator_is_differentiated_or_explained() -> None:
    infos = torch_infini.operators()
    listed = {info.name for info in infos}
    # The in-place foreach operators (aten/foreach.cpp): the optimizers'
    # in-place updates of parameters and state, under no_grad; autograd's
    # foreach formulas run around the kernel, as around the CPU's loop
    # (test_foreach.py: gradients through the list operators).
    foreach = {info.name for info in infos if info.family == "foreach"}
    covered = (
        {case.operator for case in CASES.values()}
        | set(NOT_DIFFERENTIABLE)
        | set(DIFFERENTIATED_IN_TEST_RANDOM_OPS)
        | foreach
    )
    assert listed - covered == set(), "operators with no gradient test and no reason"
    assert covered - listed == set(), "cases for operators infini no longer lists"


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_the_cpu(name: str) -> None:
    case = CASES[name]
    expected_out, cpu_leaves = _forward_backward(case, "cpu")
    out, leaves = _forward_backward(case, "infini")
    assert_matches(out, expected_out, device=out.device, same_kernel=case.same_kernel)
    for index, (leaf, cpu_leaf) in enumerate(zip(leaves, cpu_leaves, strict=True)):
        assert leaf.grad is not None, f"{name}: input {index} got no gradient"
        assert_matches(leaf.grad, cpu_leaf.grad, same_kernel=case.same_kernel)


@fallback_off
@pytest.mark.parametrize("name", sorted(REFUSED_WITHOUT_FALLBACK))
def test_gradients_refused_with_the_fallback_off(name: str) -> None:
    with raises_exactly(NotImplementedError, match=REFUSED_WITHOUT_FALLBACK[name]):
        _forward_backward(CASES[name], "infini")


@pytest.mark.parametrize(
    "call",
    [
        lambda a, b, out: torch.add(a, b, out=out),
        lambda a, b, out: torch.mul(a, b, out=out),
        lambda a, b, out: torch.mm(a, b.t(), out=out[:, :3]),
    ],
    ids=["add.out", "mul.out", "mm.out"],
)
def test_out_variants_refuse_gradients_as_on_the_cpu(call: Callable[..., object]) -> None:
    def run(device: str) -> RuntimeError:
        a, b = _leaves([(3, 3), (3, 3)], device, seed=3)
        out = torch.empty(3, 3, device=device)
        with pytest.raises(RuntimeError) as info:
            call(a, b, out)
        return info.value

    cpu_error, infini_error = run("cpu"), run("infini")
    assert type(infini_error) is type(cpu_error)
    assert str(infini_error) == str(cpu_error)
