"""Which thread runs a backward pass from infini tensors.

Where device memory is host memory (``host``, InfiniRT ``cpu``) the kernels
run on the thread that calls them, so autograd runs an infini graph on the
thread that called ``backward`` or ``torch.autograd.grad``, as it runs a CPU
graph, instead of handing it to the engine's worker thread for the device
and waiting (two thread wake-ups per backward). torch_infini turns
PyTorch's thread-local ``set_multithreading_enabled`` switch off around
the engine's run and restores it after. What must not change: gradients
(the CPU's: bit for bit where its kernels run, PyTorch's tolerances over
InfiniOps' matrix products), the caller's own setting, the stream a node's
backward runs on (its forward's), graphs over two devices, and backward
passes from several threads at once.
"""

from __future__ import annotations

import copy
import threading

import pytest
import torch
import torch_infini
from infini_testing import assert_bitwise_equal, make_cpu, requires_two_devices
from op_helpers import assert_matches

DEVICE = torch.device("infini", 0)
HOST_ADDRESSABLE = bool(torch_infini._C._capabilities()["host_addressable"])

pytestmark = pytest.mark.skipif(
    not HOST_ADDRESSABLE, reason="an accelerator keeps the engine's device threads, as CUDA does"
)


def _threads_of_a_backward(x: torch.Tensor, grad: bool = False) -> tuple[int, bool]:
    """The thread a hook of x's gradient ran on, and the switch it saw."""
    seen: list[tuple[int, bool]] = []
    y = x * 2

    def hook(g: torch.Tensor) -> torch.Tensor:
        seen.append((threading.get_ident(), torch.autograd.is_multithreading_enabled()))
        return g

    y.register_hook(hook)
    if grad:
        torch.autograd.grad(y.sum(), x)
    else:
        y.sum().backward()
    (found,) = seen
    return found


@pytest.mark.parametrize("grad", [False, True], ids=["backward", "autograd.grad"])
def test_an_infini_graph_runs_on_the_calling_thread(grad: bool) -> None:
    x = torch.ones(3, device=DEVICE, requires_grad=True)
    thread, switch = _threads_of_a_backward(x, grad)
    assert thread == threading.get_ident()
    assert switch is False
    assert torch.autograd.is_multithreading_enabled()  # restored after


def test_a_cpu_graph_is_left_as_pytorch_runs_it() -> None:
    x = torch.ones(3, requires_grad=True)
    thread, switch = _threads_of_a_backward(x)
    assert thread == threading.get_ident() and switch is True


def test_the_callers_switch_is_kept_and_restored_after_an_error() -> None:
    x = torch.ones(3, device=DEVICE, requires_grad=True)
    with torch.autograd.set_multithreading_enabled(False):
        _threads_of_a_backward(x)
        assert not torch.autograd.is_multithreading_enabled()
    assert torch.autograd.is_multithreading_enabled()

    y = x * 2

    def fail(g: torch.Tensor) -> torch.Tensor:
        raise ValueError("hook failed")

    y.register_hook(fail)
    with pytest.raises(ValueError, match="hook failed"):
        y.sum().backward()
    assert torch.autograd.is_multithreading_enabled()


def test_gradients_are_the_cpus() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    dev = copy.deepcopy(model).to(DEVICE)
    x = make_cpu((5, 8), torch.float32, seed=1)
    model(x).square().sum().backward()
    with torch_infini.cpu_fallback.allowed("silent"):
        dev(x.to(DEVICE)).square().sum().backward()
    for p, q in zip(dev.parameters(), model.parameters(), strict=True):
        # bit for bit where the CPU's kernels run (host); InfiniOps' matrix
        # products elsewhere: PyTorch's tolerances
        assert_matches(p.grad, q.grad, check_stride=True)


def test_a_node_runs_on_its_forwards_stream() -> None:
    """PyTorch's stream semantics of backward: each node on the stream its
    forward ran on, whichever thread runs it."""
    side = torch.infini.Stream()
    x = torch.ones(4, device=DEVICE, requires_grad=True)
    with torch.infini.stream(side):
        y = x * 3
    streams: list[torch.infini.Stream] = []

    def hook(g: torch.Tensor) -> torch.Tensor:
        streams.append(torch.infini.current_stream())
        return g

    y.register_hook(hook)
    y.sum().backward()
    torch.infini.synchronize()
    assert streams == [side]
    assert torch.equal(x.grad.cpu(), torch.full((4,), 3.0))


def test_backward_passes_from_several_threads_at_once() -> None:
    torch.manual_seed(0)
    reference = torch.nn.Linear(32, 32)
    # unit scale: tanh unsaturated, gradients within PyTorch's tolerances
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(2))
    reference(x).tanh().sum().backward()
    errors: list[BaseException] = []
    results: list[torch.Tensor] = []

    def work() -> None:
        try:
            model = torch.nn.Linear(32, 32).to(DEVICE)
            model.load_state_dict(reference.state_dict())
            for _ in range(20):
                model.zero_grad()
                model(x.to(DEVICE)).tanh().sum().backward()
            results.append(model.weight.grad.cpu())
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    with torch_infini.cpu_fallback.allowed("silent"):  # tanh's kernels: the mode is global
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert len(results) == 4
    for grad in results:
        assert_matches(grad, reference.weight.grad, device=None)


@requires_two_devices
def test_a_graph_over_two_devices() -> None:
    a = make_cpu((6,), torch.float32, seed=3)
    x0 = a.to("infini:0").requires_grad_()
    y1 = (x0 * 2).to("infini:1").exp()
    y1.sum().backward()
    x = a.clone().requires_grad_()
    (x * 2).exp().sum().backward()
    assert x0.grad.device == torch.device("infini:0")
    assert_bitwise_equal(x0.grad, x.grad)
