"""A model written by others: a small Llama from Hugging Face transformers.

Built from a config (random initialization, no downloaded weights), moved to
infini, and checked against the same model on the CPU: forward logits,
greedy generation with its KV cache, and a few AdamW training steps. What
infini has no kernel for runs in the CPU fallback (default policy); the
test also checks that nothing refuses (issue 11, part 4).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator

import pytest
import torch
import torch_infini
from transformers import LlamaConfig, LlamaForCausalLM

DEVICE = torch.device("infini", 0)


def _models() -> tuple[LlamaForCausalLM, LlamaForCausalLM]:
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, as in Llama 2/3
        max_position_embeddings=64,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    cpu = LlamaForCausalLM(config)
    return cpu, copy.deepcopy(cpu).to(DEVICE)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(1, 128, (2, 10), generator=torch.Generator().manual_seed(1))
    return ids, torch.ones_like(ids)


@pytest.fixture(autouse=True)
def _fallback_quiet() -> Iterator[None]:
    with torch_infini.cpu_fallback.allowed("silent"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' own notices
        yield


def test_forward_logits_match_the_cpu() -> None:
    cpu, dev = _models()
    ids, mask = _inputs()
    with torch.no_grad():
        expected = cpu.eval()(ids, attention_mask=mask).logits
        got = dev.eval()(ids.to(DEVICE), attention_mask=mask.to(DEVICE)).logits
    assert got.device == DEVICE
    torch.testing.assert_close(got.cpu(), expected)


def test_greedy_generation_with_kv_cache_matches_the_cpu() -> None:
    cpu, dev = _models()
    ids, mask = _inputs()
    kwargs = {"max_new_tokens": 8, "do_sample": False, "use_cache": True}
    with torch.no_grad():
        expected = cpu.eval().generate(ids, attention_mask=mask, **kwargs)
        got = dev.eval().generate(ids.to(DEVICE), attention_mask=mask.to(DEVICE), **kwargs)
    assert got.device == DEVICE
    assert torch.equal(got.cpu(), expected)


def test_adamw_training_steps_match_the_cpu() -> None:
    cpu, dev = _models()
    ids, mask = _inputs()
    cpu.train()
    dev.train()
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (cpu, dev)]
    for _ in range(3):
        losses = []
        for model, optimizer, device in zip((cpu, dev), optimizers, ("cpu", DEVICE), strict=True):
            optimizer.zero_grad()
            out = model(ids.to(device), attention_mask=mask.to(device), labels=ids.to(device))
            out.loss.backward()
            optimizer.step()
            losses.append(out.loss.detach().cpu())
        torch.testing.assert_close(losses[1], losses[0])
    for (name, p_cpu), p_dev in zip(cpu.named_parameters(), dev.parameters(), strict=True):
        assert p_dev.device == DEVICE, name
        assert p_dev.grad is not None, f"{name}: no gradient on infini"
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), msg=name)
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, msg=name)
