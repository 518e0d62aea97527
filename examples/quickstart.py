"""Main job: a small transformer-style MLP stack on infini:0, checked against the CPU.

Each block is RMSNorm followed by a gated MLP, ``down(silu(gate(x)) * up(x))``,
with a residual connection; every operator runs through torch-infini's kernel
seam. Run after ``pip install --no-build-isolation .`` (README command 1 does both).
"""

from __future__ import annotations

import time

import torch
import torch_infini
from torch import nn


class GatedMLPBlock(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=1e-6)
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


def build_model(hidden: int = 256, intermediate: int = 688, layers: int = 4) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[GatedMLPBlock(hidden, intermediate) for _ in range(layers)]).eval()


def timed(fn, sync=None, repeats: int = 5) -> tuple[torch.Tensor, float]:
    out = fn()  # warm-up
    if sync:
        sync()
    start = time.perf_counter()
    for _ in range(repeats):
        out = fn()
    if sync:
        sync()
    return out, (time.perf_counter() - start) / repeats * 1e3


def main() -> int:
    device = torch.device("infini:0")
    print(f"torch {torch.__version__}, torch_infini {torch_infini.__version__}")
    print(f"backend: {torch_infini.backend()}, device: {torch.infini.get_device_name(0)}")

    model_cpu = build_model()
    model_dev = build_model().to(device)
    x = torch.randn(4, 64, 256, generator=torch.Generator().manual_seed(1))
    x_dev = x.to(device)

    with torch.no_grad():
        ref, cpu_ms = timed(lambda: model_cpu(x))
        out_dev, dev_ms = timed(lambda: model_dev(x_dev), sync=torch.infini.synchronize)
    out = out_dev.cpu()

    max_err = (out - ref).abs().max().item()
    ok = out_dev.device == device and torch.allclose(out, ref, rtol=1e-4, atol=1e-4)
    print(f"model: 4 x (RMSNorm + gated MLP 256->688->256), input {tuple(x.shape)}")
    print(f"agreement with CPU: max |diff| = {max_err:.3e} -> {'ok' if ok else 'MISMATCH'}")
    print(f"forward time: infini {dev_ms:.2f} ms, CPU {cpu_ms:.2f} ms")
    fell_back = torch_infini.cpu_fallback.summary()
    print("ran on the CPU (fallback):", f"\n{fell_back}" if fell_back else "nothing")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
