"""DDP training step on infini (backend "infini") against the same DDP on the
CPU (gloo), measured in the same processes.

    torchrun --standalone --nproc-per-node=2 benchmarks/ddp.py [--quick] [--json FILE]

Each rank trains its half of every global batch; the ratio is infini step
time over CPU step time (median of interleaved rounds). Before timing, one
step on each side is checked to give the same parameters (the CPU is the
oracle).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch_infini
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import llama  # noqa: E402  (the main job's model)

CPU = torch.device("cpu")


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))


def mlp_batch(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(rank)
    return torch.randn(64 // world, 256, generator=g), torch.randn(64 // world, 256, generator=g)


def mlp_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(model(x), y)


def llama_batch(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    return llama.batch(32 // world, 8, torch.Generator().manual_seed(rank))


def llama_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable, Callable]] = {
    "DDP MLP 256-1024-256, batch 64": (mlp, mlp_batch, mlp_loss),
    "DDP Llama example, batch 32": (lambda: llama.Llama(llama.Config()), llama_batch, llama_loss),
}


def step_fn(name: str, device: torch.device) -> tuple[nn.Module, Callable[[], None]]:
    make, batch, loss_fn = MODELS[name]
    torch.manual_seed(0)
    model = make().to(device)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = batch(dist.get_rank(), dist.get_world_size())
    x, y = x.to(device), y.to(device)

    def step() -> None:
        loss = loss_fn(ddp, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()  # the step's time is all in

    return model, step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch_infini.cpu_fallback.set_mode("silent")
    dist.init_process_group("cpu:gloo,infini:infini")
    rank = dist.get_rank()
    device = torch.device("infini", rank % torch.infini.device_count())
    torch.infini.set_device(device)
    rounds, iterations = (2, 2) if args.quick else (5, 10)
    results = []
    for name in MODELS:
        cpu_model, cpu_step = step_fn(name, CPU)
        dev_model, dev_step = step_fn(name, device)
        cpu_step()
        dev_step()
        for p, q in zip(dev_model.parameters(), cpu_model.parameters(), strict=True):
            torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)
        ratios, cpu_times, dev_times = [], [], []
        for _ in range(rounds):
            timed = []
            for step in (cpu_step, dev_step):
                dist.barrier()
                start = time.perf_counter()
                for _ in range(iterations):
                    step()
                timed.append((time.perf_counter() - start) / iterations)
            cpu_times.append(timed[0])
            dev_times.append(timed[1])
            ratios.append(timed[1] / timed[0])
        results.append(
            {
                "name": name,
                "ratio": statistics.median(ratios),
                "cpu_ms": statistics.median(cpu_times) * 1e3,
                "infini_ms": statistics.median(dev_times) * 1e3,
            }
        )
    if rank == 0:
        print(
            f"backend {torch_infini.backend()}, engine {torch_infini.distributed.engine()}, "
            f"{dist.get_world_size()} processes"
        )
        print(f"{'case':<36} {'ratio':>6} {'cpu ms':>8} {'infini ms':>10}")
        for r in results:
            print(f"{r['name']:<36} {r['ratio']:>6.2f} {r['cpu_ms']:>8.2f} {r['infini_ms']:>10.2f}")
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
