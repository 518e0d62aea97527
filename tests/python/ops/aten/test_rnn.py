"""Recurrent layers on infini: nn.LSTM, nn.GRU, nn.RNN and their cells, against the CPU.

Off the CPU PyTorch computes LSTM and GRU cells with fused kernels
(_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backward kernels),
which infini implements with CUDA's definition; the CPU's own path is
unfused and rounds differently, so results and gradients are compared with
PyTorch's tolerances (float16 and bfloat16: computed in float, rounded once).

Where device memory is host memory nn.LSTM (float32) and nn.GRU take the
CPU's own route instead (aten/rnn_layers.cpp: the LSTM as one oneDNN layer
call per layer and direction, run by the CPU fallback; the GRU with its
input projections precomputed and the CPU's unfused cell): bit for bit the
CPU's.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Callable

import pytest
import torch
from infini_testing import assert_bitwise_equal, raises_exactly
from op_helpers import DEVICE, make_cpu, runs_cpu_kernels
from torch import nn

LAYERS: dict[str, Callable[[], nn.Module]] = {
    "LSTM": lambda: nn.LSTM(5, 4),
    "LSTM, 2 layers, bidirectional, batch_first": lambda: nn.LSTM(
        5, 4, num_layers=2, bidirectional=True, batch_first=True
    ),
    "LSTM with projections": lambda: nn.LSTM(5, 4, proj_size=2),
    "LSTM without bias": lambda: nn.LSTM(5, 4, bias=False),
    "GRU": lambda: nn.GRU(5, 4),
    "GRU, 2 layers, bidirectional": lambda: nn.GRU(5, 4, num_layers=2, bidirectional=True),
    "GRU without bias": lambda: nn.GRU(5, 4, bias=False),
    "RNN tanh": lambda: nn.RNN(5, 4),
    "RNN relu": lambda: nn.RNN(5, 4, nonlinearity="relu"),
}


def _pair(make: Callable[[], nn.Module], dtype: torch.dtype) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    cpu = make().to(dtype)
    return cpu, copy.deepcopy(cpu).to(DEVICE)


def _compare_module(
    cpu: nn.Module, dev: nn.Module, x_cpu: torch.Tensor, tol: dict[str, float]
) -> None:
    x = x_cpu.to(DEVICE).requires_grad_()
    x_cpu = x_cpu.clone().requires_grad_()
    out_cpu, out = cpu(x_cpu), dev(x)
    y_cpu = out_cpu[0] if isinstance(out_cpu, tuple) else out_cpu
    y = out[0] if isinstance(out, tuple) else out
    torch.testing.assert_close(y.cpu(), y_cpu, **tol)
    if isinstance(out, tuple):  # the final states too
        for s, s_cpu in zip(
            torch.utils._pytree.tree_leaves(out[1]),
            torch.utils._pytree.tree_leaves(out_cpu[1]),
            strict=True,
        ):
            torch.testing.assert_close(s.cpu(), s_cpu, **tol)
    grad = make_cpu(tuple(y_cpu.shape), y_cpu.dtype, seed=5) / 100
    y_cpu.backward(grad)
    y.backward(grad.to(DEVICE))
    assert x.grad is not None
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad, **tol)
    for (name, p), p_cpu in zip(dev.named_parameters(), cpu.parameters(), strict=True):
        assert p.grad is not None, f"{name} got no gradient"
        torch.testing.assert_close(p.grad.cpu(), p_cpu.grad, **tol, msg=name)


# float64 results and gradients differ from the CPU's by at most 2e-16
# (measured on host): PyTorch's float64 default (1e-7) would also pass a
# float32 computation, off by about 1e-9 here.
FLOAT64_TOLERANCE = {"rtol": 1e-12, "atol": 1e-12}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("name", list(LAYERS))
def test_layers_forward_and_backward_match_the_cpu(name: str, dtype: torch.dtype) -> None:
    cpu, dev = _pair(LAYERS[name], dtype)
    batch_first = getattr(cpu, "batch_first", False)
    shape = (2, 6, 5) if batch_first else (6, 2, 5)
    tol = FLOAT64_TOLERANCE if dtype == torch.float64 else {}
    _compare_module(cpu, dev, make_cpu(shape, dtype, seed=1) / 100, tol)


CELLS: dict[str, Callable[[], nn.Module]] = {
    "LSTMCell": lambda: nn.LSTMCell(5, 4),
    "GRUCell": lambda: nn.GRUCell(5, 4),
    "GRUCell without bias": lambda: nn.GRUCell(5, 4, bias=False),
    "RNNCell": lambda: nn.RNNCell(5, 4),
}


@pytest.mark.parametrize("name", list(CELLS))
def test_cells_with_initial_state_match_the_cpu(name: str) -> None:
    cpu, dev = _pair(CELLS[name], torch.float32)
    x_cpu = make_cpu((3, 5), torch.float32, seed=2) / 50
    h_cpu = make_cpu((3, 4), torch.float32, seed=3) / 50
    state_cpu = (h_cpu, h_cpu * 0.5) if name == "LSTMCell" else h_cpu
    state = tuple(s.to(DEVICE) for s in state_cpu) if name == "LSTMCell" else h_cpu.to(DEVICE)
    out_cpu, out = cpu(x_cpu, state_cpu), dev(x_cpu.to(DEVICE), state)
    for got, want in zip(
        torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(out_cpu), strict=True
    ):
        torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_reduced_precision_cells_compute_in_float(dtype: torch.dtype) -> None:
    """As CUDA's fused kernels: float arithmetic, one rounding of each result."""
    cell_cpu, cell = _pair(lambda: nn.LSTMCell(5, 4), dtype)
    x_cpu = make_cpu((3, 5), dtype, seed=4) / 50
    h, c = cell(x_cpu.to(DEVICE))
    ref = copy.deepcopy(cell_cpu).float()
    h_ref, c_ref = ref(x_cpu.float())
    torch.testing.assert_close(h.cpu(), h_ref.to(dtype))
    torch.testing.assert_close(c.cpu(), c_ref.to(dtype))


def test_mismatched_state_raises_the_cpus_error() -> None:
    cpu, dev = _pair(LAYERS["LSTM"], torch.float32)
    x_cpu = make_cpu((6, 2, 5), torch.float32, seed=6)
    bad = (torch.zeros(1, 2, 3), torch.zeros(1, 2, 4))
    with pytest.raises(RuntimeError) as error:
        cpu(x_cpu, bad)
    with raises_exactly(RuntimeError, match=re.escape(str(error.value).split("\n")[0][:30])):
        dev(x_cpu.to(DEVICE), tuple(s.to(DEVICE) for s in bad))


def test_fused_cell_argument_checks() -> None:
    gates = torch.zeros(2, 8, device=DEVICE)
    with raises_exactly(RuntimeError, match="previous state"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, gates, torch.zeros(2, 3, device=DEVICE))
    with raises_exactly(RuntimeError, match="differ in size"):
        torch.ops.aten._thnn_fused_gru_cell(gates, torch.zeros(2, 9, device=DEVICE), gates)


def _cpu_route() -> bool:
    import torch_infini

    return bool(torch_infini._C._capabilities()["host_addressable"]) and bool(
        torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
    )


CPU_ROUTE_LAYERS: dict[str, Callable[[], nn.Module]] = {
    "LSTM": lambda: nn.LSTM(5, 4),
    "LSTM, 2 layers, bidirectional, batch_first": lambda: nn.LSTM(
        5, 4, num_layers=2, bidirectional=True, batch_first=True
    ),
    "LSTM, 3 layers, no bias": lambda: nn.LSTM(5, 4, num_layers=3, bias=False),
    "GRU": lambda: nn.GRU(5, 4),
    "GRU, 2 layers, bidirectional, batch_first": lambda: nn.GRU(
        5, 4, num_layers=2, bidirectional=True, batch_first=True
    ),
    "GRU, 3 layers, no bias": lambda: nn.GRU(5, 4, num_layers=3, bias=False),
}


def _aten_calls(run: Callable[[], None]) -> dict[str, int]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run()
    return {e.key: e.count for e in prof.key_averages()}


@pytest.mark.skipif(not _cpu_route(), reason="the CPU route needs host memory and oneDNN")
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "given_state"])
@pytest.mark.parametrize(
    ("name", "dtype"),
    [(name, torch.float32) for name in CPU_ROUTE_LAYERS]
    + [("GRU, 2 layers, bidirectional, batch_first", torch.float64)],
)
def test_lstm_and_gru_are_the_cpus_bit_for_bit(
    name: str, dtype: torch.dtype, with_state: bool
) -> None:
    """nn.LSTM (float32) and nn.GRU take the CPU's route on device memory:
    the LSTM one oneDNN layer call per layer and direction each way, the
    GRU each layer's input projection once per sequence and no fused cell
    (not ten calls per time step). Outputs, final states and every gradient
    (input, initial states, parameters) are the CPU's bits where the CPU's
    kernels run (strides everywhere)."""
    import torch_infini

    cpu, dev = _pair(CPU_ROUTE_LAYERS[name], dtype)
    lstm = isinstance(cpu, nn.LSTM)
    shape = (2, 7, 5) if cpu.batch_first else (7, 2, 5)
    layers = cpu.num_layers * (2 if cpu.bidirectional else 1)
    x_cpu = (make_cpu(shape, dtype, seed=1) / 10).requires_grad_()
    x = x_cpu.detach().to(DEVICE).requires_grad_()
    states_cpu: tuple[torch.Tensor, ...] = ()
    if with_state:
        states_cpu = tuple(
            (make_cpu((layers, 2, 4), dtype, seed=s) / 10).requires_grad_()
            for s in ((2, 3) if lstm else (2,))
        )
    states = tuple(s.detach().to(DEVICE).requires_grad_() for s in states_cpu)

    def initial(states: tuple[torch.Tensor, ...]) -> object:
        return (states if lstm else states[0]) if states else None

    def run(
        module: nn.Module, x: torch.Tensor, states: tuple[torch.Tensor, ...]
    ) -> list[torch.Tensor]:
        y, final = module(x, initial(states))
        results = [y, *(final if lstm else (final,))]
        grads = [
            make_cpu(tuple(t.shape), dtype, seed=9 + i).to(x.device) for i, t in enumerate(results)
        ]
        torch.autograd.backward(results, grads)
        return results

    got: list[torch.Tensor] = []
    torch_infini.cpu_fallback.reset_stats()
    with torch_infini.cpu_fallback.allowed("silent"):
        calls = _aten_calls(lambda: got.extend(run(dev, x, states)))
    want = run(cpu, x_cpu, states_cpu)
    fallback_calls = {k: v.calls for k, v in torch_infini.cpu_fallback.stats().items()}
    if lstm:
        assert fallback_calls.get("aten::mkldnn_rnn_layer") == layers
        assert fallback_calls.get("aten::mkldnn_rnn_layer_backward") == layers
    else:
        assert "aten::_thnn_fused_gru_cell" not in calls
        steps = shape[1] if cpu.batch_first else shape[0]
        assert calls["aten::linear"] == layers * (steps + 1)  # per layer: 1 + 1 per step
    # The LSTM's layers are the CPU's kernel on every backend; the GRU's
    # matrix products and gates are the CPU's on host only (InfiniRT cpu runs
    # InfiniOps' kernels: PyTorch's tolerances there).
    bitwise = lstm or runs_cpu_kernels()

    def same(g: torch.Tensor, w: torch.Tensor) -> None:
        if bitwise:
            assert torch.equal(g.cpu(), w), "differs from the CPU's bits"
        else:
            torch.testing.assert_close(g.cpu(), w)

    for g, w in zip(got, want, strict=True):
        same(g, w)
        assert g.stride() == w.stride()
    leaves = [(x, x_cpu), *zip(states, states_cpu, strict=True)]
    leaves += list(zip(dev.parameters(), cpu.parameters(), strict=True))
    for g, w in leaves:
        assert g.grad is not None and w.grad is not None
        same(g.grad, w.grad)


@pytest.mark.skipif(not _cpu_route(), reason="the CPU route needs host memory and oneDNN")
def test_lstm_without_gradients_takes_the_cpu_route_too() -> None:
    """Evaluation, torch.no_grad and inference mode (no autograd key)."""
    cpu, dev = _pair(CPU_ROUTE_LAYERS["LSTM, 2 layers, bidirectional, batch_first"], torch.float32)
    cpu.eval(), dev.eval()
    x_cpu = make_cpu((3, 5, 5), torch.float32, seed=4)
    for context in (contextlib.nullcontext, torch.no_grad, torch.inference_mode):
        with context():  # (the CPU's own bits differ between these modes)
            got, want = dev(x_cpu.to(DEVICE))[0], cpu(x_cpu)[0]
        assert torch.equal(got.cpu(), want) and got.stride() == want.stride()


@pytest.mark.skipif(not _cpu_route(), reason="the CPU route needs host memory and oneDNN")
def test_lstm_dropout_between_layers_draws_on_infini() -> None:
    """Dropout between layers (training) is infini's own dropout, as the
    CPU's route calls it: the infini seed decides it (the same seed repeats
    the result, another changes it), and evaluation has none."""
    torch.manual_seed(0)
    dev = nn.LSTM(5, 8, num_layers=2, dropout=0.5).to(DEVICE)
    x = make_cpu((6, 3, 5), torch.float32, seed=5).to(DEVICE)
    torch.infini.manual_seed(1)
    first = dev(x)[0]
    torch.infini.manual_seed(1)
    again = dev(x)[0]
    assert torch.equal(first.cpu(), again.cpu())
    torch.infini.manual_seed(2)
    assert not torch.equal(dev(x)[0].cpu(), first.cpu())
    dev.eval()
    assert torch.equal(dev(x)[0].cpu(), dev(x)[0].cpu())


def _cuda_autocast_reference(
    layer: nn.Module, x: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    """What CUDA computes for a one-layer nn.LSTM or nn.GRU (zero initial
    state) under autocast to ``dtype``, composed on the CPU from stock
    operators: (output, h_n[, c_n]).

    Per time step ATen's composite form (aten/src/ATen/native/RNN.cpp, the
    cells' fused path off the CPU) multiplies the step's input and the hidden
    state by the transposed weights (matmul: lower precision, so in ``dtype``)
    and calls the fused cell (``_thnn_fused_lstm_cell`` or ``_gru_cell``: lower
    precision too, so the float32 zero state and biases are cast to ``dtype``).
    The cell computes as CUDA's kernel (aten/src/ATen/native/cuda/RNN.cu): in
    float, the gates summed as input + hidden + input bias + hidden bias, and
    rounds its results once to ``dtype``. The CPU's own route is no oracle: it
    takes no fused cell, and CPU autocast's lists differ."""
    w_ih, w_hh = layer.weight_ih_l0.detach(), layer.weight_hh_l0.detach()
    b1 = layer.bias_ih_l0.detach().to(dtype).float()
    b2 = layer.bias_hh_l0.detach().to(dtype).float()
    h = torch.zeros(x.shape[1], layer.hidden_size)
    c = torch.zeros_like(h)
    outputs = []
    for step in x.unbind(0):
        gates_in = torch.matmul(step.to(dtype), w_ih.t().to(dtype)).float()
        gates_hidden = torch.matmul(h.to(dtype), w_hh.t().to(dtype)).float()
        if isinstance(layer, nn.LSTM):
            i, f, g, o = (gates_in + gates_hidden + b1 + b2).chunk(4, 1)
            i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
            c_wide = f * c.to(dtype).float() + i * g
            h, c = (o * c_wide.tanh()).to(dtype), c_wide.to(dtype)
        else:
            in_r, in_z, in_n = gates_in.chunk(3, 1)
            hid_r, hid_z, hid_n = gates_hidden.chunk(3, 1)
            (b1_r, b1_z, b1_n), (b2_r, b2_z, b2_n) = b1.chunk(3), b2.chunk(3)
            r = (in_r + hid_r + b1_r + b2_r).sigmoid()
            z = (in_z + hid_z + b1_z + b2_z).sigmoid()
            n = ((in_n + b1_n) + r * (hid_n + b2_n)).tanh()
            h_wide = h.to(dtype).float()
            h = (n + z * (h_wide - n)).to(dtype)
        outputs.append(h)
    final = (h, c) if isinstance(layer, nn.LSTM) else (h,)
    return (torch.stack(outputs), *(s.unsqueeze(0) for s in final))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layer", [nn.LSTM, nn.GRU], ids=["LSTM", "GRU"])
def test_under_infini_autocast_cells_follow_cudas_policy(
    layer: type[nn.Module], dtype: torch.dtype
) -> None:
    """Autocast on infini is CUDA's policy: lstm_cell and gru_cell in the
    autocast dtype, through the fused cells. The CPU's route is not taken
    there. The output and final states are CUDA's computation composed on
    the CPU (_cuda_autocast_reference): bit for bit where infini runs the
    CPU's kernels (the fused cells are ATen calls on infini tensors,
    rnn_cells.cpp), within PyTorch's tolerances for the dtype elsewhere."""
    import torch_infini

    torch.manual_seed(0)
    cpu = layer(5, 4)
    dev = copy.deepcopy(cpu).to(DEVICE)
    x_cpu = make_cpu((6, 2, 5), torch.float32, seed=7)
    x = x_cpu.to(DEVICE)
    results: list[torch.Tensor] = []

    def run() -> None:
        out, final = dev(x)
        results.extend([out, *(final if isinstance(final, tuple) else (final,))])

    with torch_infini.cpu_fallback.allowed("silent"), torch.autocast("infini", dtype):
        calls = _aten_calls(run)
    assert [r.dtype for r in results] == [dtype] * len(results)
    fused = "aten::_thnn_fused_lstm_cell" if layer is nn.LSTM else "aten::_thnn_fused_gru_cell"
    assert calls.get(fused, 0) >= 6  # one per time step (6)
    wants = _cuda_autocast_reference(cpu, x_cpu, dtype)
    assert len(results) == len(wants)
    for got, want in zip(results, wants, strict=True):
        if runs_cpu_kernels():
            assert_bitwise_equal(got, want)
        else:  # InfiniOps' kernels round the sums and products their own way
            torch.testing.assert_close(got.cpu(), want)
        assert got.stride() == want.stride()
