"""Parameters moved to infini stay the same parameters, as on CUDA.

``nn.Module.to()`` moves a parameter in place (``param.data = moved``) only
where PyTorch calls the two tensor types shallow-copy compatible; otherwise
it makes a new ``Parameter`` per module, and a weight two modules share (an
output head tied to its embedding: GPT-2, T5, many Llama configs) comes
apart: training then silently diverges from the CPU. The oracle throughout
is the same model trained on the CPU.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator

import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal
from op_helpers import runs_cpu_kernels
from torch import nn

DEVICE = torch.device("infini", 0)


class TiedLM(nn.Module):
    """An embedding whose weight the output head shares (tie_weights())."""

    def __init__(self, vocab: int = 11, dim: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mix(self.embed(ids))))


def _ids(device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.randint(0, 11, (3, 5), generator=torch.Generator().manual_seed(3)).to(device)


def _train(model: nn.Module, device: torch.device | str, steps: int = 4) -> list[torch.Tensor]:
    """Loss per step, after AdamW steps on one batch."""
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    ids = _ids(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.detach().cpu())
    return losses


def test_shallow_copy_compatibility_is_as_on_cuda() -> None:
    cpu = torch.randn(2)
    dev = torch.randn(2, device=DEVICE)
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert torch._has_compatible_shallow_copy_type(dev, dev)
    # Other layouts stay incompatible, as for CUDA.
    assert not torch._has_compatible_shallow_copy_type(dev, torch.randn(2, 2).to_sparse())
    assert not torch._has_compatible_shallow_copy_type(torch.randn(2, 2).to_sparse(), dev)


def test_to_keeps_tied_weights_one_parameter() -> None:
    torch.manual_seed(0)
    model = TiedLM()
    embed_param = model.embed.weight
    model.to(DEVICE)
    assert model.head.weight is model.embed.weight
    assert model.embed.weight is embed_param  # moved in place, as on CUDA
    assert model.embed.weight.device == DEVICE
    assert len(list(model.parameters())) == 3  # the shared one counted once
    model.to("cpu")
    assert model.head.weight is model.embed.weight and model.embed.weight.device.type == "cpu"


def test_tied_model_trains_as_on_the_cpu() -> None:
    torch.manual_seed(0)
    cpu = TiedLM()
    dev = copy.deepcopy(cpu).to(DEVICE)
    with torch_infini.cpu_fallback.allowed("silent"):
        got = _train(dev, DEVICE)
    expected = _train(cpu, "cpu")
    torch.testing.assert_close(torch.stack(got), torch.stack(expected))
    # The shared weight's gradient sums both uses, and the step moved it once.
    torch.testing.assert_close(dev.embed.weight.grad.cpu(), cpu.embed.weight.grad)
    torch.testing.assert_close(dev.head.weight.cpu(), cpu.head.weight)
    assert dev.head.weight is dev.embed.weight


def test_data_assignment_moves_a_cpu_parameter_to_infini_and_back() -> None:
    p = nn.Parameter(torch.zeros(2))
    p.data = torch.ones(2, device=DEVICE)
    assert p.device == DEVICE and isinstance(p, nn.Parameter) and p.requires_grad
    assert torch.equal(p.detach().cpu(), torch.ones(2))
    (p * 3).sum().backward()
    assert p.grad is not None and p.grad.device == DEVICE
    assert torch.equal(p.grad.cpu(), torch.full((2,), 3.0))
    p.data = torch.full((3,), 2.0)
    assert p.device.type == "cpu" and torch.equal(p.detach(), torch.full((3,), 2.0))


def test_gradients_move_with_their_parameters() -> None:
    model = TiedLM()
    nn.functional.cross_entropy(model(_ids()).flatten(0, 1), _ids().flatten()).backward()
    grad = model.embed.weight.grad.clone()
    model.to(DEVICE)
    assert model.embed.weight.grad.device == DEVICE
    assert torch.equal(model.embed.weight.grad.cpu(), grad)


def test_load_state_dict_into_a_tied_model_on_infini() -> None:
    torch.manual_seed(0)
    source = TiedLM()
    target = TiedLM().to(DEVICE)
    target.load_state_dict(source.state_dict())
    assert target.head.weight is target.embed.weight
    assert target.embed.weight.device == DEVICE
    assert torch.equal(target.head.weight.detach().cpu(), source.embed.weight.detach())
    # assign=True takes the given tensors as the parameters, as on CUDA.
    moved = {k: v.to(DEVICE) for k, v in source.state_dict().items()}
    fresh = TiedLM()
    fresh.load_state_dict(moved, assign=True)
    assert fresh.embed.weight.device == DEVICE
    assert torch.equal(fresh.embed.weight.detach().cpu(), source.embed.weight.detach())


def test_swap_tensors_conversion_keeps_ties() -> None:
    torch.manual_seed(0)
    model = TiedLM()
    before = model.embed.weight.detach().clone()
    previous = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.to(DEVICE)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(previous)
    assert model.head.weight is model.embed.weight and model.embed.weight.device == DEVICE
    assert torch.equal(model.embed.weight.detach().cpu(), before)
    a, b = torch.ones(2), torch.zeros(3, device=DEVICE)
    torch.utils.swap_tensors(a, b)
    assert a.device == DEVICE and a.shape == (3,) and b.device.type == "cpu"


def test_to_empty_treats_ties_as_the_cpu_does() -> None:
    """From CPU parameters the tie holds; from meta ones PyTorch itself makes
    new parameters on every device (meta is no dense backend to it), so
    infini must do what the CPU does there too."""
    model = TiedLM()
    model.to_empty(device=DEVICE)
    assert model.head.weight is model.embed.weight
    assert model.embed.weight.device == DEVICE and model.mix.bias.device == DEVICE
    tied = {}
    for device in ("cpu", DEVICE):
        with torch.device("meta"):
            model = TiedLM()
        model.to_empty(device=device)
        assert model.embed.weight.device == torch.device(device)
        tied[str(device)] = model.head.weight is model.embed.weight
    assert tied["cpu"] == tied[str(DEVICE)], tied


@pytest.fixture
def _quiet() -> Iterator[None]:
    with torch_infini.cpu_fallback.allowed("silent"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_gpt2_from_a_config_keeps_its_tied_head_and_trains_as_on_the_cpu(_quiet: None) -> None:
    """The model the issue found diverging: two layers of GPT-2, tied head."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=64,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    torch.manual_seed(0)
    cpu = transformers.GPT2LMHeadModel(config)
    dev = copy.deepcopy(cpu).to(DEVICE)
    assert dev.lm_head.weight is dev.transformer.wte.weight
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(5))

    def steps(model: nn.Module, device: torch.device | str) -> list[torch.Tensor]:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        out = []
        for _ in range(3):
            opt.zero_grad()
            loss = model(ids.to(device), labels=ids.to(device)).loss
            loss.backward()
            opt.step()
            out.append(loss.detach().cpu())
        return out

    got, expected = steps(dev, DEVICE), steps(cpu, "cpu")
    assert dev.lm_head.weight is dev.transformer.wte.weight
    if not runs_cpu_kernels():
        # InfiniOps' kernels sum in another order, and AdamW's first steps
        # move every weight by about lr whatever its gradient's size (m /
        # sqrt(v)), so a gradient near 0 whose sign rounds differently moves
        # its weight the other way: the losses and the tied gradient after three
        # steps agree to 1e-4, not to float32's rounding (a bound kept from
        # before: on host, where it is not needed, the bits are the CPU's).
        torch.testing.assert_close(torch.stack(got), torch.stack(expected), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(
            dev.transformer.wte.weight.grad.cpu(),
            cpu.transformer.wte.weight.grad,
            rtol=1e-4,
            atol=1e-5,
        )
        return
    # host runs the CPU's kernels: every loss, gradient and weight after three
    # steps is the CPU's, bit for bit
    assert_bitwise_equal(torch.stack(got), torch.stack(expected))
    failures = []
    for (name, p), q in zip(dev.named_parameters(), cpu.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None, name
        for what, g, w in (("gradient", p.grad, q.grad), ("weight", p.detach(), q.detach())):
            try:
                assert_bitwise_equal(g, w)
            except AssertionError as failure:
                failures.append(f"{name} ({what}): {failure}")
    assert not failures, "\n".join(failures)
