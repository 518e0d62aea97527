"""torch-infini benchmarks: `infini` against plain PyTorch CPU, in one process.

    python benchmarks/run.py [--json build/benchmarks.json] [--rounds 7] [--quick] [--only TEXT]

Every case runs the same work on CPU tensors and on `infini` tensors,
interleaved round by round, and reports the ratio infini/CPU of the time per
iteration (median and min-max over rounds; below 1 means infini is faster).
Random-number cases draw from different generators on each side: their
infini results are checked statistically instead.
Copy cases report bandwidth as a fraction of the CPU's own copy bandwidth
(above 1 means faster). Every infini result is checked against the CPU one
before anything is timed. Single-threaded (torch.set_num_threads(1)) so both
sides run the same kernels the same way.

Targets on the `host` device: overhead <= 1.5, allocation <= 1.0, add, mm and
MLP <= 1.1, copies >= 0.9 of CPU copy bandwidth, randn and dropout <= 1.5,
the main job's Llama (forward, training step, generation) <= 1.15.
They are reported, never asserted: speed belongs to benchmarks, not tests.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import llama_example
import torch
import torch_infini
from torch import nn

DEVICE = torch.device("infini:0")


@dataclass
class Case:
    name: str
    kind: str  # "time": ratio of times; "bandwidth": ratio of bandwidths
    target: str  # e.g. "<= 1.1"
    cpu: Callable[[], object]
    dev: Callable[[], object]
    check: Callable[[], bool]
    iterations: int
    # A line reported beside the ratio (say, bytes moved per iteration).
    detail: Callable[[], str] | None = None


@dataclass
class Result:
    name: str
    kind: str
    target: str
    ratio: float
    ratio_min: float
    ratio_max: float
    cpu_us: float
    infini_us: float
    meets_target: bool
    rounds: list[float] = field(default_factory=list)
    reruns: int = 0  # measurements repeated for a max/min round spread over SPREAD_LIMIT
    detail: str = ""


def sync() -> None:
    torch.infini.synchronize()


def time_per_iteration(fn: Callable[[], object], iterations: int, device: bool) -> float:
    if device:
        sync()
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    if device:
        sync()
    return (time.perf_counter() - start) / iterations


def memory_mode() -> str:
    """ "discrete" where device memory is out of the host's reach (the host
    device's TORCH_INFINI_HOST_MEMORY=discrete, accelerators), else "shared"."""
    return "shared" if torch_infini._C._capabilities()["host_addressable"] else "discrete"


def boundary_traffic(fn: Callable[[], object], per: int = 1, unit: str = "step") -> str:
    """What one fn() moves across the host boundary, per ``unit`` (fn does
    ``per`` of them): the CPU fallback's calls (staged through pinned memory
    in discrete mode, in place in shared mode), and the bytes copied host to
    device and device to host (the host device counts every copy: staged
    calls, .item(), token reads)."""
    torch_infini.cpu_fallback.reset_stats()
    sync()
    host = torch_infini.backend() == "host"
    before = torch_infini._C._host_transfer_bytes() if host else (0, 0)
    fn()
    sync()
    after = torch_infini._C._host_transfer_bytes() if host else (0, 0)
    stats = torch_infini.cpu_fallback.stats().values()
    calls = sum(s.calls for s in stats) / per
    how = "staged" if memory_mode() == "discrete" else "in place"
    line = f"per {unit}: {calls:.1f} fallback calls ({how})"
    if host:
        to_device, to_host = ((a - b) / per for a, b in zip(after, before, strict=True))
        line += f", {_bytes(to_device)} to the device, {_bytes(to_host)} to the host"
    return line


def _bytes(n: float) -> str:
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def meets(ratio: float, target: str) -> bool:
    op, value = target.split()
    return ratio <= float(value) if op == "<=" else ratio >= float(value)


# A case whose rounds spread wider than this (max/min ratio) was disturbed
# (another process, a frequency change): it is measured again, at most
# MAX_RERUNS times, and the measurement with the narrowest spread is kept.
SPREAD_LIMIT = 1.5
MAX_RERUNS = 2


def spread(result: Result) -> float:
    return result.ratio_max / result.ratio_min


def run_case(case: Case, rounds: int) -> Result:
    if not case.check():
        raise AssertionError(f"{case.name}: infini result differs from the CPU result")
    for _ in range(max(3, case.iterations // 10)):  # warm caches and allocators
        case.cpu()
        case.dev()
    sync()
    result = measure(case, rounds)
    reruns = 0
    while spread(result) > SPREAD_LIMIT and reruns < MAX_RERUNS:
        reruns += 1
        again = measure(case, rounds)
        if spread(again) < spread(result):
            result = again
    result.reruns = reruns
    if case.detail is not None:
        result.detail = case.detail()
    return result


def measure(case: Case, rounds: int) -> Result:
    ratios, cpu_times, dev_times = [], [], []
    for index in range(rounds):
        # Alternate which side runs first: the second of a pair otherwise
        # always inherits the first's caches, allocator state and garbage.
        if index % 2:
            t_dev = time_per_iteration(case.dev, case.iterations, device=True)
            t_cpu = time_per_iteration(case.cpu, case.iterations, device=False)
        else:
            t_cpu = time_per_iteration(case.cpu, case.iterations, device=False)
            t_dev = time_per_iteration(case.dev, case.iterations, device=True)
        cpu_times.append(t_cpu)
        dev_times.append(t_dev)
        # bandwidth ratio = cpu time / infini time
        ratios.append(t_cpu / t_dev if case.kind == "bandwidth" else t_dev / t_cpu)
    ratio = statistics.median(ratios)
    return Result(
        name=case.name,
        kind=case.kind,
        target=case.target,
        ratio=ratio,
        ratio_min=min(ratios),
        ratio_max=max(ratios),
        cpu_us=statistics.median(cpu_times) * 1e6,
        infini_us=statistics.median(dev_times) * 1e6,
        meets_target=meets(ratio, case.target),
        rounds=ratios,
    )


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.device.type == "infini" and torch.allclose(a.cpu(), b, rtol=1e-4, atol=1e-5)


def elementwise_cases(scale: float) -> list[Case]:
    cases = []
    for name, n, iters in [
        ("overhead: add 1 element", 1, 20000),
        ("add 1e3", 1000, 20000),
        ("add 1e6", 1_000_000, 200),
    ]:
        a, b = torch.randn(n), torch.randn(n)
        da, db = a.to(DEVICE), b.to(DEVICE)
        target = "<= 1.5" if n == 1 else "<= 1.1"
        cases.append(
            Case(
                name,
                "time",
                target,
                lambda a=a, b=b: a + b,
                lambda da=da, db=db: da + db,
                lambda a=a, b=b, da=da, db=db: close(da + db, a + b),
                max(1, int(iters * scale)),
            )
        )
    return cases


def fallback_cases(scale: float) -> list[Case]:
    """atan2, an operator no open issue makes native: the CPU fallback's cost.

    Where device memory is host memory the fallback runs the CPU kernel on it
    in place, so the check also demands 0 bytes copied.
    """
    host_addressable = bool(torch_infini._C._capabilities()["host_addressable"])

    def served_in_place(run: Callable[[], torch.Tensor], want: torch.Tensor) -> bool:
        torch_infini.cpu_fallback.reset_stats()
        with torch_infini.cpu_fallback.allowed("silent"):
            got = run()
        stats = torch_infini.cpu_fallback.stats()
        copied = sum(s.bytes_copied for s in stats.values())
        return bool(stats) and close(got, want) and (copied == 0 or not host_addressable)

    cases = []
    for name, n, iters, target in [
        ("fallback: atan2 1 element", 1, 20000, "<= 1.3"),
        ("fallback: atan2 1e3", 1000, 20000, "<= 1.15"),
        ("fallback: atan2 1e6", 1_000_000, 100, "<= 1.1"),
    ]:
        a, b = torch.randn(n), torch.randn(n)
        da, db = a.to(DEVICE), b.to(DEVICE)
        cases.append(
            Case(
                name,
                "time",
                target,
                lambda a=a, b=b: torch.atan2(a, b),
                lambda da=da, db=db: torch.atan2(da, db),
                lambda a=a, b=b, da=da, db=db: served_in_place(
                    lambda: torch.atan2(da, db), torch.atan2(a, b)
                ),
                max(1, int(iters * scale)),
            )
        )
    return cases


def matmul_cases(scale: float) -> list[Case]:
    cases = []
    for n, iters in [(256, 200), (1024, 5)]:
        a, b = torch.randn(n, n), torch.randn(n, n)
        da, db = a.to(DEVICE), b.to(DEVICE)
        cases.append(
            Case(
                f"mm {n}",
                "time",
                "<= 1.1",
                lambda a=a, b=b: a @ b,
                lambda da=da, db=db: da @ db,
                lambda a=a, b=b, da=da, db=db: torch.allclose(
                    (da @ db).cpu(), a @ b, rtol=1e-4, atol=1e-3
                ),
                max(1, int(iters * scale)),
            )
        )
    return cases


def mlp_case(scale: float) -> Case:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)).eval()
    mlp_dev = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512)).eval()
    mlp_dev.load_state_dict(mlp.state_dict())
    mlp_dev.to(DEVICE)
    x = torch.randn(4, 64, 512)
    dx = x.to(DEVICE)

    def cpu() -> torch.Tensor:
        with torch.no_grad():
            return mlp(x)

    def dev() -> torch.Tensor:
        with torch.no_grad():
            return mlp_dev(dx)

    def check() -> bool:
        return torch.allclose(dev().cpu(), cpu(), rtol=1e-4, atol=1e-4)

    return Case(
        "MLP Linear-ReLU-Linear [4, 64, 512]",
        "time",
        "<= 1.1",
        cpu,
        dev,
        check,
        max(1, int(10 * scale)),
    )


def copy_cases(scale: float) -> list[Case]:
    n = 64 * 2**20 // 4  # 64 MiB of float32
    src = torch.randn(n)
    iters = max(1, int(10 * scale))
    cases = []
    # The CPU baseline is a CPU-to-CPU copy of the same bytes.
    cpu_dst = torch.empty(n)
    dev_buf = src.to(DEVICE)
    host_dst = torch.empty(n)

    cases.append(
        Case(
            "copy 64 MiB host->device (pageable)",
            "bandwidth",
            ">= 0.9",
            lambda: cpu_dst.copy_(src),
            lambda: dev_buf.copy_(src),
            lambda: (dev_buf.copy_(src), torch.equal(dev_buf.cpu(), src))[1],
            iters,
        )
    )
    cases.append(
        Case(
            "copy 64 MiB device->host (pageable)",
            "bandwidth",
            ">= 0.9",
            lambda: cpu_dst.copy_(src),
            lambda: host_dst.copy_(dev_buf),
            lambda: (host_dst.copy_(dev_buf), torch.equal(host_dst, src))[1],
            iters,
        )
    )
    pinned_src = src.pin_memory()
    pinned_dst = torch.empty(n).pin_memory()

    def h2d_pinned() -> None:
        dev_buf.copy_(pinned_src, non_blocking=True)

    def d2h_pinned() -> None:
        pinned_dst.copy_(dev_buf, non_blocking=True)

    def check_pinned() -> bool:
        h2d_pinned()
        d2h_pinned()
        sync()
        return torch.equal(pinned_dst, src)

    cases.append(
        Case(
            "copy 64 MiB host->device (pinned, non_blocking)",
            "bandwidth",
            ">= 0.9",
            lambda: cpu_dst.copy_(pinned_src),
            h2d_pinned,
            check_pinned,
            iters,
        )
    )
    cases.append(
        Case(
            "copy 64 MiB device->host (pinned, non_blocking)",
            "bandwidth",
            ">= 0.9",
            lambda: pinned_dst.copy_(src),
            d2h_pinned,
            check_pinned,
            iters,
        )
    )
    return cases


def allocation_cases(scale: float) -> list[Case]:
    n = 4 * 2**20 // 4  # 4 MiB
    iters = max(1, int(5000 * scale))
    cpu = torch.device("cpu")  # both sides name their device, as user code does

    def check() -> bool:
        t = torch.empty(n, device=DEVICE)
        return t.device == DEVICE and t.numel() == n

    cases = [
        Case(
            "empty 4 MiB",
            "time",
            "<= 1.0",
            lambda: torch.empty(n, device=cpu),
            lambda: torch.empty(n, device=DEVICE),
            check,
            iters,
        )
    ]
    live_cpu = [torch.empty(n // 16) for _ in range(64)]
    live_dev = [torch.empty(n // 16, device=DEVICE) for _ in range(64)]
    cases.append(
        Case(
            "empty 4 MiB with 64 live tensors",
            "time",
            "<= 1.0",
            lambda: (live_cpu, torch.empty(n, device=cpu))[1],
            lambda: (live_dev, torch.empty(n, device=DEVICE))[1],
            check,
            iters,
        )
    )
    return cases


def view_case(scale: float) -> Case:
    x = torch.randn(64, 64)
    dx = x.to(DEVICE)
    return Case(
        "view creation (view + transpose)",
        "time",
        "<= 1.1",
        lambda: x.view(4096).view(64, 64).t(),
        lambda: dx.view(4096).view(64, 64).t(),
        lambda: torch.equal(dx.view(4096).view(64, 64).t().cpu(), x.t()),
        max(1, int(20000 * scale)),
    )


def random_cases(scale: float) -> list[Case]:
    """Random numbers from the device generator against the CPU's. The values
    differ by design, so the check is statistical: moments for randn, the
    kept fraction and the scaling for dropout."""
    n = 10**6
    iters = max(1, int(100 * scale))
    cpu = torch.device("cpu")
    ones_cpu = torch.ones(n)
    ones_dev = ones_cpu.to(DEVICE)

    def randn_plausible() -> bool:
        x = torch.randn(n, device=DEVICE).double()
        return abs(x.mean().item()) < 0.01 and abs(x.std().item() - 1) < 0.01

    def dropout_plausible() -> bool:
        y = torch.nn.functional.dropout(ones_dev, 0.5, training=True).cpu()
        kept = y != 0
        return bool((y[kept] == 2).all()) and abs(kept.double().mean().item() - 0.5) < 0.01

    return [
        Case(
            "randn 1e6",
            "time",
            "<= 1.5",
            lambda: torch.randn(n, device=cpu),
            lambda: torch.randn(n, device=DEVICE),
            randn_plausible,
            iters,
        ),
        Case(
            "dropout 1e6 (training)",
            "time",
            "<= 1.5",
            lambda: torch.nn.functional.dropout(ones_cpu, 0.5, training=True),
            lambda: torch.nn.functional.dropout(ones_dev, 0.5, training=True),
            dropout_plausible,
            iters,
        ),
    ]


def llama_cases(scale: float) -> list[Case]:
    """The main job's Llama as a whole: forward, one AdamW training step, 32
    generated tokens with the KV cache; against the same model on the CPU
    (CPU eager). Checked first: equal logits, losses and tokens on host."""
    llama = llama_example.load()
    cfg = llama.Config()
    torch.manual_seed(0)
    model_cpu = llama.Llama(cfg)
    model_dev = copy.deepcopy(model_cpu).to(DEVICE)
    inputs, targets = llama.batch(32, 8, torch.Generator().manual_seed(1))
    inputs_dev, targets_dev = inputs.to(DEVICE), targets.to(DEVICE)
    prompt = inputs[:1, :9]
    prompt_dev = prompt.to(DEVICE)
    opt_cpu = torch.optim.AdamW(model_cpu.parameters(), lr=1e-4)
    opt_dev = torch.optim.AdamW(model_dev.parameters(), lr=1e-4)
    iters = max(1, int(20 * scale))

    @torch.no_grad()
    def forward(model: Any, x: torch.Tensor) -> torch.Tensor:
        model.eval()
        return model(x)

    def step(model: Any, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
        model.train()  # the forward case leaves it in eval mode
        return llama.train_step(model, opt, x, y)

    def forward_agrees() -> bool:
        return close(forward(model_dev, inputs_dev), forward(model_cpu, inputs))

    def step_agrees() -> bool:
        # On copies: the timed models keep their own (equal) trajectories.
        cpu, dev = copy.deepcopy(model_cpu), copy.deepcopy(model_dev)
        loss_cpu = step(cpu, torch.optim.AdamW(cpu.parameters(), lr=1e-4), inputs, targets)
        loss_dev = step(dev, torch.optim.AdamW(dev.parameters(), lr=1e-4), inputs_dev, targets_dev)
        return abs(loss_cpu - loss_dev) <= 1e-4 * abs(loss_cpu)

    @functools.cache
    def training_copy() -> tuple[Any, torch.optim.Optimizer]:
        # A copy whose optimizer state exists: the timed model keeps its trajectory.
        dev = copy.deepcopy(model_dev)
        opt = torch.optim.AdamW(dev.parameters(), lr=1e-4)
        step(dev, opt, inputs_dev, targets_dev)
        return dev, opt

    def step_copy() -> float:
        dev, opt = training_copy()
        return step(dev, opt, inputs_dev, targets_dev)

    def generation_agrees() -> bool:
        tokens_dev = llama.generate(model_dev, prompt_dev, 32)[0]
        return tokens_dev == llama.generate(model_cpu, prompt, 32)[0]

    return [
        Case(
            "Llama forward [32, 16]",
            "time",
            "<= 1.15",
            lambda: forward(model_cpu, inputs),
            lambda: forward(model_dev, inputs_dev),
            forward_agrees,
            iters,
        ),
        Case(
            "Llama training step [32, 16] (AdamW)",
            "time",
            "<= 1.1",
            lambda: step(model_cpu, opt_cpu, inputs, targets),
            lambda: step(model_dev, opt_dev, inputs_dev, targets_dev),
            step_agrees,
            iters,
            lambda: boundary_traffic(lambda: step_copy(), unit="training step"),
        ),
        Case(
            "Llama generate 32 tokens (KV cache)",
            "time",
            "<= 1.1",
            lambda: llama.generate(model_cpu, prompt, 32),
            lambda: llama.generate(model_dev, prompt_dev, 32),
            generation_agrees,
            max(1, iters // 4),
            lambda: boundary_traffic(
                lambda: llama.generate(model_dev, prompt_dev, 32), per=32, unit="generated token"
            ),
        ),
    ]


def recurrent_cases(scale: float) -> list[Case]:
    """A 2-layer LSTM and GRU (batch 8, 20 steps, 32 -> 64), forward and
    backward, against the CPU. Checked first: equal outputs and gradients
    (the LSTM runs the CPU's own layers: bit for bit)."""
    iters = max(1, int(20 * scale))
    cases = []
    for name, layer in (("LSTM", nn.LSTM), ("GRU", nn.GRU)):
        torch.manual_seed(0)
        model_cpu = layer(32, 64, num_layers=2, batch_first=True)
        model_dev = copy.deepcopy(model_cpu).to(DEVICE)
        x = torch.randn(8, 20, 32, generator=torch.Generator().manual_seed(1))
        x_dev = x.to(DEVICE)

        def step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
            model.zero_grad(set_to_none=True)
            out, _ = model(x)
            out.square().mean().backward()
            return out

        def agrees(
            model_cpu: nn.Module = model_cpu,
            model_dev: nn.Module = model_dev,
            x: torch.Tensor = x,
            x_dev: torch.Tensor = x_dev,
        ) -> bool:
            with torch_infini.cpu_fallback.allowed("silent"):
                out_dev = step(model_dev, x_dev)
            out_cpu = step(model_cpu, x)
            grads = zip(model_dev.parameters(), model_cpu.parameters(), strict=True)
            return close(out_dev, out_cpu) and all(close(p.grad, q.grad) for p, q in grads)

        cases.append(
            Case(
                f"{name} 2 layers [8, 20, 32] -> 64, forward and backward",
                "time",
                "<= 1.2",
                lambda model=model_cpu, x=x: step(model, x),
                lambda model=model_dev, x=x_dev: step(model, x),
                agrees,
                iters,
            )
        )
    return cases


def transformers_case(scale: float) -> list[Case]:
    """A Hugging Face transformers Llama (tiny config, as tests/python/
    test_llama.py builds it; grouped-query attention) training step with
    AdamW, against the CPU. Skipped where transformers is not installed."""
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        return []
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model_cpu = LlamaForCausalLM(config)
    model_dev = copy.deepcopy(model_cpu).to(DEVICE)
    ids = torch.randint(1, 128, (8, 16), generator=torch.Generator().manual_seed(1))
    ids_dev = ids.to(DEVICE)
    opt_cpu = torch.optim.AdamW(model_cpu.parameters(), lr=1e-4)
    opt_dev = torch.optim.AdamW(model_dev.parameters(), lr=1e-4)

    def step(model: nn.Module, opt: torch.optim.Optimizer, ids: torch.Tensor) -> float:
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    def agrees() -> bool:
        cpu, dev = copy.deepcopy(model_cpu), copy.deepcopy(model_dev)
        loss_cpu = step(cpu, torch.optim.AdamW(cpu.parameters(), lr=1e-4), ids)
        loss_dev = step(dev, torch.optim.AdamW(dev.parameters(), lr=1e-4), ids_dev)
        return abs(loss_cpu - loss_dev) <= 1e-4 * abs(loss_cpu)

    def traffic() -> str:
        # A copy whose optimizer state exists: the timed model keeps its trajectory.
        dev = copy.deepcopy(model_dev)
        opt = torch.optim.AdamW(dev.parameters(), lr=1e-4)
        step(dev, opt, ids_dev)
        return boundary_traffic(lambda: step(dev, opt, ids_dev), unit="training step")

    return [
        Case(
            "transformers Llama training step [8, 16] (AdamW)",
            "time",
            "<= 1.1",
            lambda: step(model_cpu, opt_cpu, ids),
            lambda: step(model_dev, opt_dev, ids_dev),
            agrees,
            max(1, int(10 * scale)),
            traffic,
        )
    ]


@contextlib.contextmanager
def fallback_staged() -> Iterator[None]:
    """The CPU fallback staged through pinned memory, as where device memory
    is not host memory (NVIDIA, ...), on `host`."""
    torch_infini._C._set_fallback_staging_forced(True)
    try:
        yield
    finally:
        torch_infini._C._set_fallback_staging_forced(False)


def fallback_traffic(fn: Callable[[], object]) -> tuple[int, int]:
    """(fallback calls, bytes the fallback copied) of one fn()."""
    torch_infini.cpu_fallback.reset_stats()
    fn()
    sync()
    stats = torch_infini.cpu_fallback.stats().values()
    return sum(s.calls for s in stats), sum(s.bytes_copied for s in stats)


def staging_cases(scale: float) -> list[Case]:
    """The main job's Llama on infini with the CPU fallback staged through
    pinned memory (as on an accelerator) against the same run in place (the
    "cpu" column is infini with the fallback in place). Where device memory is
    not host memory the fallback always stages: no cases."""
    if not torch_infini._C._capabilities()["host_addressable"]:
        return []
    llama = llama_example.load()
    torch.manual_seed(0)
    model = llama.Llama(llama.Config()).to(DEVICE)
    in_place, staged = model, copy.deepcopy(model)
    opt_in_place = torch.optim.AdamW(in_place.parameters(), lr=1e-4)
    opt_staged = torch.optim.AdamW(staged.parameters(), lr=1e-4)
    inputs, targets = llama.batch(32, 8, torch.Generator().manual_seed(1))
    inputs, targets = inputs.to(DEVICE), targets.to(DEVICE)
    prompt = inputs[:1, :9]
    iters = max(1, int(20 * scale))

    def step(model: Any, opt: torch.optim.Optimizer) -> float:
        model.train()
        return llama.train_step(model, opt, inputs, targets)

    def step_staged() -> object:
        return _staged_call(lambda: step(staged, opt_staged))

    def generate_staged() -> object:
        return _staged_call(lambda: llama.generate(staged, prompt, 32)[0])

    def steps_agree() -> bool:
        # On copies, bit for bit: the same kernels run either way.
        a, b = copy.deepcopy(in_place), copy.deepcopy(staged)
        loss_a = step(a, torch.optim.AdamW(a.parameters(), lr=1e-4))
        with fallback_staged():
            loss_b = step(b, torch.optim.AdamW(b.parameters(), lr=1e-4))
        return loss_a == loss_b and all(
            torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True)
        )

    def traffic(run_in_place: Callable[[], object], run_staged: Callable[[], object]) -> str:
        calls, moved = fallback_traffic(run_staged)
        _, moved_in_place = fallback_traffic(run_in_place)
        return (
            f"staged: {moved / 1e6:.2f} MB copied in {calls} fallback calls per iteration; "
            f"in place: {moved_in_place / 1e6:.2f} MB"
        )

    def training_traffic() -> str:
        # Steps of throwaway copies: the timed models keep their trajectories.
        a, b = copy.deepcopy(in_place), copy.deepcopy(staged)
        opt_a = torch.optim.AdamW(a.parameters(), lr=1e-4)
        opt_b = torch.optim.AdamW(b.parameters(), lr=1e-4)
        step(a, opt_a), step(b, opt_b)  # the optimizers' state exists
        return traffic(lambda: step(a, opt_a), lambda: _staged_call(lambda: step(b, opt_b)))

    return [
        Case(
            "Llama training step, fallback staged vs in place",
            "time",
            "<= 1.5",
            lambda: step(in_place, opt_in_place),
            step_staged,
            steps_agree,
            iters,
            training_traffic,
        ),
        Case(
            "Llama generate 32 tokens, fallback staged vs in place",
            "time",
            "<= 1.5",
            lambda: llama.generate(in_place, prompt, 32),
            generate_staged,
            lambda: generate_staged() == llama.generate(in_place, prompt, 32)[0],
            max(1, iters // 4),
            lambda: traffic(lambda: llama.generate(in_place, prompt, 32), generate_staged),
        ),
    ]


def _staged_call(fn: Callable[[], object]) -> object:
    with fallback_staged():
        return fn()


def compile_cases(scale: float) -> list[Case]:
    """torch.compile (Inductor) on infini: compiled infini against compiled
    CPU, and compiled against eager on infini (the "cpu" column is then
    infini eager). Where no compiler plug-in serves the device type, Inductor
    does not serve infini: no cases."""
    from torch_infini import _compile_fallback

    if not _compile_fallback.inductor_serves_infini():
        return []
    llama = llama_example.load()
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).eval()
    mlp_dev = copy.deepcopy(mlp).to(DEVICE)
    model = llama.Llama(llama.Config()).eval()
    model_dev = copy.deepcopy(model).to(DEVICE)
    x = torch.randn(4, 64, 512)
    inputs = llama.batch(32, 8, torch.Generator().manual_seed(1))[0]
    dx, dinputs = x.to(DEVICE), inputs.to(DEVICE)
    compiled = {
        name: torch.compile(m)
        for name, m in (
            ("mlp", mlp),
            ("mlp_dev", mlp_dev),
            ("llama", model),
            ("llama_dev", model_dev),
        )
    }

    def run(name: str, arg: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return compiled[name](arg)

    def eager(m: nn.Module, arg: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return m(arg)

    iters = max(1, int(10 * scale))
    return [
        Case(
            "compiled MLP Linear-GELU-Linear [4, 64, 512]",
            "time",
            "<= 1.1",
            lambda: run("mlp", x),
            lambda: run("mlp_dev", dx),
            lambda: close(run("mlp_dev", dx), eager(mlp, x)),
            iters,
        ),
        Case(
            "compiled Llama forward [32, 16]",
            "time",
            "<= 1.15",
            lambda: run("llama", inputs),
            lambda: run("llama_dev", dinputs),
            lambda: close(run("llama_dev", dinputs), eager(model, inputs)),
            iters,
        ),
        Case(
            "compiled vs eager on infini: Llama forward",
            "time",
            "<= 1.0",
            lambda: eager(model_dev, dinputs),
            lambda: run("llama_dev", dinputs),
            lambda: close(run("llama_dev", dinputs), eager(model, inputs)),
            iters,
        ),
        *_compiled_training_cases(llama, iters),
        *_compiled_generation_cases(llama, iters),
        *_rk4_cases(iters),
    ]


def _compiled_generation_cases(llama: Any, iters: int) -> list[Case]:
    """32 tokens generated with the KV cache by the Llama compiled with
    dynamic shapes (one graph for the prompt, one for every decoding step
    whatever the cache length): against the same generation eager on infini
    and compiled on the CPU. Warmed up (compiled) before timing."""
    torch.manual_seed(0)
    model_cpu = llama.Llama(llama.Config()).eval()
    model_dev = copy.deepcopy(model_cpu).to(DEVICE)
    compiled_cpu = torch.compile(model_cpu, dynamic=True)
    compiled_dev = torch.compile(model_dev, dynamic=True)
    prompt = llama.batch(32, 8, torch.Generator().manual_seed(1))[0][:1, :9]
    prompt_dev = prompt.to(DEVICE)

    def generate(model: Any, tokens: torch.Tensor) -> list[int]:
        with torch.no_grad(), torch_infini.cpu_fallback.allowed("silent"):
            return llama.generate(model, tokens, 32)[0]

    @functools.cache
    def agrees() -> bool:
        # Compiles both on the first call; checked once for both cases.
        want = generate(model_cpu, prompt)
        return generate(compiled_dev, prompt_dev) == want == generate(compiled_cpu, prompt)

    return [
        Case(
            "compiled vs eager on infini: Llama generate 32 tokens",
            "time",
            "<= 1.0",
            lambda: generate(model_dev, prompt_dev),
            lambda: generate(compiled_dev, prompt_dev),
            agrees,
            max(1, iters // 4),
        ),
        Case(
            "compiled Llama generate 32 tokens (KV cache)",
            "time",
            "<= 1.1",
            lambda: generate(compiled_cpu, prompt),
            lambda: generate(compiled_dev, prompt_dev),
            agrees,
            max(1, iters // 4),
            lambda: boundary_traffic(
                lambda: generate(compiled_dev, prompt_dev), per=32, unit="generated token"
            ),
        ),
    ]


def _compiled_training_cases(llama: Any, iters: int) -> list[Case]:
    """The Llama training step (AdamW, eager) with its forward and backward
    compiled: against the same step eager on infini (the CINN article's
    +27.4 %: target >= 1.27x the eager speed) and compiled on the CPU."""
    torch.manual_seed(0)
    eager_dev = llama.Llama(llama.Config())
    model_cpu = copy.deepcopy(eager_dev)
    model_dev = copy.deepcopy(eager_dev).to(DEVICE)
    eager_dev.to(DEVICE)
    compiled_dev, compiled_cpu = torch.compile(model_dev), torch.compile(model_cpu)
    inputs, targets = llama.batch(32, 8, torch.Generator().manual_seed(1))
    dinputs, dtargets = inputs.to(DEVICE), targets.to(DEVICE)
    optimizers = {
        id(m): torch.optim.AdamW(m.parameters(), lr=1e-4) for m in (eager_dev, model_cpu, model_dev)
    }

    def step(model: nn.Module, compiled: Any, x: torch.Tensor, y: torch.Tensor) -> float:
        with torch_infini.cpu_fallback.allowed("silent"):
            return llama.train_step(compiled, optimizers[id(model)], x, y)

    @functools.cache
    def agrees() -> bool:
        # One step from equal weights, on copies (the timed models move on);
        # checked once for both cases.
        base = llama.Llama(llama.Config())
        cpu, dev = copy.deepcopy(base), copy.deepcopy(base).to(DEVICE)
        loss_cpu = llama.train_step(
            cpu, torch.optim.AdamW(cpu.parameters(), lr=1e-4), inputs, targets
        )
        with torch_infini.cpu_fallback.allowed("silent"):
            loss_dev = llama.train_step(
                torch.compile(dev), torch.optim.AdamW(dev.parameters(), lr=1e-4), dinputs, dtargets
            )
        return abs(loss_cpu - loss_dev) <= 1e-4 * abs(loss_cpu)

    return [
        Case(
            "compiled vs eager on infini: Llama train step",
            "time",
            "<= 0.787",
            lambda: step(eager_dev, eager_dev, dinputs, dtargets),
            lambda: step(model_dev, compiled_dev, dinputs, dtargets),
            agrees,
            iters,
        ),
        Case(
            "compiled Llama training step [32, 8]",
            "time",
            "<= 1.1",
            lambda: step(model_cpu, compiled_cpu, inputs, targets),
            lambda: step(model_dev, compiled_dev, dinputs, dtargets),
            agrees,
            iters,
            lambda: boundary_traffic(
                lambda: step(model_dev, compiled_dev, dinputs, dtargets), unit="training step"
            ),
        ),
    ]


def _rk4(x: torch.Tensor, v: torch.Tensor, steps: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """RK4 for damped oscillators x'' = -k x - c x', one step of dt per loop."""
    dt, k, c = 0.01, 4.0, 0.1

    def acceleration(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return -k * x - c * v

    for _ in range(steps):
        k1x, k1v = v, acceleration(x, v)
        k2x, k2v = v + 0.5 * dt * k1v, acceleration(x + 0.5 * dt * k1x, v + 0.5 * dt * k1v)
        k3x, k3v = v + 0.5 * dt * k2v, acceleration(x + 0.5 * dt * k2x, v + 0.5 * dt * k2v)
        k4x, k4v = v + dt * k3v, acceleration(x + dt * k3x, v + dt * k3v)
        x = x + dt / 6 * (k1x + 2 * k2x + 2 * k3x + k4x)
        v = v + dt / 6 * (k1v + 2 * k2v + 2 * k3v + k4v)
    return x, v


def _rk4_cases(iters: int) -> list[Case]:
    """A scientific-computing case: RK4 over 4,096 damped oscillators (x, v
    float32), 40 steps. Compiled against eager on infini (the CINN article's
    ODE solve, +115 %: target >= 2.15x) and against compiled on the CPU."""
    generator = torch.Generator().manual_seed(5)
    x, v = torch.randn(4096, generator=generator), torch.randn(4096, generator=generator)
    dx, dv = x.to(DEVICE), v.to(DEVICE)
    compiled_cpu, compiled_dev = torch.compile(_rk4), torch.compile(_rk4)

    def agrees() -> bool:
        want = _rk4(x.double(), v.double())
        got = compiled_dev(dx, dv)
        return all(
            g.device.type == "infini" and torch.allclose(g.cpu().double(), w, rtol=1e-5, atol=1e-5)
            for g, w in zip(got, want, strict=True)
        )

    return [
        Case(
            "compiled vs eager on infini: RK4 ODE 4096x40",
            "time",
            "<= 0.465",
            lambda: _rk4(dx, dv),
            lambda: compiled_dev(dx, dv),
            agrees,
            iters * 5,
        ),
        Case(
            "compiled RK4 ODE 4096 oscillators x 40 steps",
            "time",
            "<= 1.1",
            lambda: compiled_cpu(x, v),
            lambda: compiled_dev(dx, dv),
            agrees,
            iters * 5,
        ),
    ]


def amp_cases(scale: float) -> list[Case]:
    """Mixed precision: a bfloat16 mm, and the Llama's training step under
    bfloat16 autocast (CUDA's policy on infini) against CPU autocast (the
    CPU's own policy, which PyTorch defines separately)."""
    a, b = torch.randn(1024, 1024).bfloat16(), torch.randn(1024, 1024).bfloat16()
    da, db = a.to(DEVICE), b.to(DEVICE)
    llama = llama_example.load()
    torch.manual_seed(0)
    model_cpu = llama.Llama(llama.Config())
    model_dev = copy.deepcopy(model_cpu).to(DEVICE)
    inputs, targets = llama.batch(32, 8, torch.Generator().manual_seed(1))
    inputs_dev, targets_dev = inputs.to(DEVICE), targets.to(DEVICE)
    opt_cpu = torch.optim.AdamW(model_cpu.parameters(), lr=1e-4)
    opt_dev = torch.optim.AdamW(model_dev.parameters(), lr=1e-4)

    def step(model: Any, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            logits = model(x)
        loss = nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    def step_agrees() -> bool:
        # Two autocast policies: equal to bfloat16 resolution, on copies.
        cpu, dev = copy.deepcopy(model_cpu), copy.deepcopy(model_dev)
        loss_cpu = step(cpu, torch.optim.AdamW(cpu.parameters(), lr=1e-4), inputs, targets)
        loss_dev = step(dev, torch.optim.AdamW(dev.parameters(), lr=1e-4), inputs_dev, targets_dev)
        return abs(loss_cpu - loss_dev) <= 2e-2 * abs(loss_cpu)

    return [
        Case(
            "mm 1024 bfloat16",
            "time",
            "<= 1.1",
            lambda: a @ b,
            lambda: da @ db,
            lambda: torch.allclose((da @ db).cpu().float(), (a @ b).float(), rtol=1e-2, atol=1e-1),
            max(1, int(5 * scale)),
        ),
        Case(
            "Llama training step, bfloat16 autocast",
            "time",
            "<= 1.15",
            lambda: step(model_cpu, opt_cpu, inputs, targets),
            lambda: step(model_dev, opt_dev, inputs_dev, targets_dev),
            step_agrees,
            max(1, int(20 * scale)),
        ),
    ]


def all_cases(scale: float) -> list[Case]:
    return [
        *elementwise_cases(scale),
        *fallback_cases(scale),
        *matmul_cases(scale),
        mlp_case(scale),
        *copy_cases(scale),
        *allocation_cases(scale),
        view_case(scale),
        *random_cases(scale),
        *llama_cases(scale),
        *recurrent_cases(scale),
        *transformers_case(scale),
        *staging_cases(scale),
        *amp_cases(scale),
        *compile_cases(scale),
    ]


def render(results: list[Result]) -> str:
    lines = [
        f"{'case':<56} {'ratio':>7} {'min-max':>13} {'cpu us':>10} {'infini us':>10}  target   ok",
        "-" * 110,
    ]
    for r in results:
        lines.append(
            f"{r.name:<56} {r.ratio:>7.2f} {r.ratio_min:>6.2f}-{r.ratio_max:<6.2f} "
            f"{r.cpu_us:>10.2f} {r.infini_us:>10.2f}  {r.target:<7}  "
            f"{'yes' if r.meets_target else 'NO'}"
            + (f"  (measured {r.reruns + 1} times: spread)" if r.reruns else "")
        )
    details = [f"  {r.name}: {r.detail}" for r in results if r.detail]
    return "\n".join(lines + details)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write results as JSON here")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per case")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads on both sides")
    parser.add_argument(
        "--only", action="append", help="run the cases whose name contains TEXT (repeatable)"
    )
    parser.add_argument(
        "--exclude", action="append", help="skip the cases whose name contains TEXT (repeatable)"
    )
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch_infini.cpu_fallback.set_mode("silent")  # the fallback cases are measured, not warned
    scale = 0.05 if args.quick else 1.0
    rounds = 2 if args.quick else args.rounds
    print(
        f"torch {torch.__version__}, torch_infini {torch_infini.__version__}, "
        f"backend {torch_infini.backend()} ({torch.infini.get_device_name(0)}, "
        f"{memory_mode()} memory), "
        f"threads {args.threads}, rounds {rounds}"
    )
    results = []
    for case in all_cases(scale):
        if args.only and not any(text in case.name for text in args.only):
            continue
        if args.exclude and any(text in case.name for text in args.exclude):
            continue
        results.append(run_case(case, rounds))
        print("\n".join(render(results[-1:]).splitlines()[2:]), flush=True)
    print()
    print(render(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "torch": torch.__version__,
            "torch_infini": torch_infini.__version__,
            "backend": torch_infini.backend(),
            "memory": memory_mode(),
            "device": torch.infini.get_device_name(0),
            "threads": args.threads,
            "rounds": rounds,
            "results": [asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(payload, indent=2))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
