"""torch.compile's default backend where Inductor cannot serve infini.

On a device type that no compiler plug-in serves, graphs with infini
tensors compile with ``aot_eager`` after one warning, never a KeyError or an
Inductor failure; graphs without infini tensors still go to Inductor. Every
backend this suite runs on has a plug-in (host in both memory modes and
InfiniRT ``cpu``: the cpu plug-in), so the tests make that decision answer
"no", which is the only thing they change.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch_infini import _compile_fallback

DEVICE = torch.device("infini", 0)
MESSAGE = "graphs with infini tensors compile with backend='aot_eager'"


@pytest.fixture
def inductor_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Inductor cannot serve infini; the graphs that reach Inductor."""
    monkeypatch.setattr(_compile_fallback, "inductor_serves_infini", lambda: False)
    monkeypatch.setattr(_compile_fallback, "_warned", False)
    import torch._inductor.compile_fx as compile_fx_module

    calls: list[Any] = []
    original = compile_fx_module.compile_fx

    def counting(gm: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(gm)
        return original(gm, *args, **kwargs)

    monkeypatch.setattr(compile_fx_module, "compile_fx", counting)
    torch._dynamo.reset()
    yield calls
    torch._dynamo.reset()
    # Inductor registers out-of-tree devices once per process (a cached
    # function): one that ran under the "cannot serve" answer above left
    # infini unregistered, which later compiles in this process would keep.
    from torch._inductor.codegen import common

    common.init_backend_registration.cache_clear()


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def test_infini_training_step_compiles_with_aot_eager(inductor_calls: list[Any]) -> None:
    eager = mlp().to(DEVICE)
    compiled_model = mlp().to(DEVICE)
    x = torch.randn(8, 16).to(DEVICE)

    def step(model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        loss = model(inputs).square().mean()
        loss.backward()
        return loss

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(step)(compiled_model, x)
    want = step(eager, x)
    assert [str(w.message) for w in caught if MESSAGE in str(w.message)] != []
    assert len([w for w in caught if MESSAGE in str(w.message)]) == 1
    assert got.device == DEVICE
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-6, atol=1e-7)
    for a, b in zip(compiled_model.parameters(), eager.parameters(), strict=True):
        assert a.grad is not None and a.grad.device == DEVICE
        torch.testing.assert_close(a.grad.cpu(), b.grad.cpu(), rtol=1e-5, atol=1e-6)
    assert inductor_calls == []


def test_the_warning_comes_once_and_new_shapes_recompile(inductor_calls: list[Any]) -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        return torch.sin(a) * a + 1

    compiled = torch.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (3, 5, 9):
            x = torch.randn(n)
            got = compiled(x.to(DEVICE))
            torch.testing.assert_close(got.cpu(), f(x))
        torch.compile(lambda a: a.cos())(torch.ones(2, device=DEVICE))
    assert len([w for w in caught if MESSAGE in str(w.message)]) == 1
    assert inductor_calls == []


def test_graphs_without_infini_tensors_still_go_to_inductor(inductor_calls: list[Any]) -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        return a * 2 + 1

    x = torch.randn(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch._inductor.config.patch(compile_threads=1):
            got = torch.compile(f)(x)
    torch.testing.assert_close(got, f(x))
    assert len(inductor_calls) == 1
    assert not [w for w in caught if MESSAGE in str(w.message)]


def test_a_factory_graph_without_infini_inputs_is_recognised(inductor_calls: list[Any]) -> None:
    def f() -> torch.Tensor:
        return torch.arange(6, device=DEVICE).reshape(2, 3) * 2

    got = torch.compile(f)()
    assert got.device == DEVICE
    assert torch.equal(got.cpu(), torch.arange(6).reshape(2, 3) * 2)
    assert inductor_calls == []
