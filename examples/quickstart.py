"""Main job: move data to infini:0 and back, and check it against the CPU.

Run after `pip install --no-build-isolation .` (README command 1 does both).
"""

from __future__ import annotations

import time

import torch

import torch_infini


def main() -> int:
    device = torch.device("infini:0")
    print(f"torch {torch.__version__}, torch_infini {torch_infini.__version__}")
    print(f"backend: {torch_infini.backend()}, device: {torch.infini.get_device_name(0)}")

    torch.manual_seed(0)
    src = torch.randn(256, 1024)

    # The seed example: empty on the device, copy in, copy back.
    start = time.perf_counter()
    x = torch.empty(src.shape, dtype=src.dtype, device=device)
    x.copy_(src)
    out = torch.empty_like(src)
    out.copy_(x)
    elapsed = (time.perf_counter() - start) * 1e3

    checks = {
        "round trip": torch.equal(out, src),
        "transposed view": torch.equal(x.t().cpu(), src.t()),
        "dtype conversion": torch.equal(x.to(torch.float64).cpu(), src.to(torch.float64)),
        "pinned non_blocking": _pinned_round_trip(src, device),
    }
    for name, ok in checks.items():
        print(f"  {name:<22} {'ok' if ok else 'MISMATCH'}")
    print(f"round trip of {src.numel() * src.element_size() / 2**20:.1f} MiB: {elapsed:.2f} ms")
    return 0 if all(checks.values()) else 1


def _pinned_round_trip(src: torch.Tensor, device: torch.device) -> bool:
    pinned = src.pin_memory()
    on_device = torch.empty_like(src, device=device)
    on_device.copy_(pinned, non_blocking=True)
    back = torch.empty_like(src).pin_memory()
    back.copy_(on_device, non_blocking=True)
    torch.infini.synchronize()
    return torch.equal(back, src)


if __name__ == "__main__":
    raise SystemExit(main())
