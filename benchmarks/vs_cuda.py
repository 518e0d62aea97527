"""infini against torch.cuda on the same GPU (the GPU run, tools/gpu_run.sh).

Each case is timed on ``infini:0`` (torch-infini over InfiniRT/InfiniOps,
``TORCH_INFINI_BACKEND=nvidia``) and on ``cuda:0`` (PyTorch's own CUDA
backend), each device in its own process: an MLP's forward and backward and
``mm`` of 4096 x 4096 in float32 (at PyTorch's default precision, then with
TF32 allowed), ``mm`` in bfloat16, pinned host-to-device and device-to-host
copies, and the main job's Llama training step. Each result is checked
against the CPU first; the ratio infini / cuda of the median time per
iteration is reported, never asserted.

    python benchmarks/vs_cuda.py [--json out.json] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_example
import torch
import torch.nn.functional as F
from torch import nn

# Each device is measured in its own process: importing torch_infini makes
# infini PyTorch's accelerator (PrivateUse1 comes first), and CUDA's autograd
# then fails an internal assertion of PyTorch's engine (Node::stream()).
DEVICE = torch.device("cuda", 0)


def _sync(device: torch.device) -> None:
    if device.type == "cpu":
        return
    if device.type == "cuda":
        torch.cuda.synchronize()
    else:
        torch.infini.synchronize()


def _median_seconds(
    fn: Callable[[], object], device: torch.device, iters: int, rounds: int = 5
) -> float:
    for _ in range(3):
        fn()
    _sync(device)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        _sync(device)
        times.append((time.perf_counter() - start) / iters)
    return statistics.median(times)


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Relative error in norm: float32 within 2e-5 (accumulation order
    differs between CPU and GPU kernels), bfloat16 within 2e-2."""
    tol = 2e-2 if want.dtype == torch.bfloat16 else 2e-5
    if want.dtype == torch.float32 and torch.get_float32_matmul_precision() != "highest":
        tol = 5e-3  # TF32 products (10-bit mantissa inputs)
    got, want = got.detach().cpu().double(), want.detach().double()
    return got.shape == want.shape and bool(
        (got - want).norm() <= tol * want.norm().clamp_min(1e-30)
    )


def mlp_case() -> dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024))
    x = torch.randn(256, 1024)

    def make(device: torch.device) -> Callable[[], torch.Tensor]:
        m = copy.deepcopy(model).to(device)
        xd = x.to(device)

        def step() -> torch.Tensor:
            m.zero_grad(set_to_none=True)
            out = m(xd)
            out.square().mean().backward()
            return m[0].weight.grad

        return step

    want = make(torch.device("cpu"))()
    return _compare("MLP forward+backward (256x1024 -> 4096 -> 1024, float32)", make, want, 20)


def mm_case(dtype: torch.dtype) -> dict[str, Any]:
    torch.manual_seed(0)
    a, b = torch.randn(4096, 4096, dtype=dtype), torch.randn(4096, 4096, dtype=dtype)

    def make(device: torch.device) -> Callable[[], torch.Tensor]:
        ad, bd = a.to(device), b.to(device)
        return lambda: torch.mm(ad, bd)

    # The oracle: the CPU in float64, rounded to the dtype.
    want = torch.mm(a.double(), b.double()).to(dtype)
    return _compare(f"mm 4096x4096 {str(dtype).removeprefix('torch.')}", make, want, 20)


def _pinned(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` in page-locked memory of ``device``'s host allocator (with two
    accelerators in one process, ``pin_memory()`` alone picks CUDA's)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the device argument is deprecated
        return t.pin_memory(device.type)


def copy_cases() -> list[dict[str, Any]]:
    host = torch.randn(256 * 1024 * 1024 // 4)
    results = []
    for direction in ("H2D", "D2H"):

        def make(device: torch.device, direction: str = direction) -> Callable[[], torch.Tensor]:
            src = _pinned(host, device)
            dev = src.to(device)
            back = _pinned(torch.empty_like(host), device)
            if direction == "H2D":
                return lambda: dev.copy_(src, non_blocking=True)
            return lambda: back.copy_(dev, non_blocking=True)

        results.append(
            _compare(f"pinned {direction} 256 MiB", make, host, 10, bytes_=host.numel() * 4)
        )
    return results


def llama_case() -> dict[str, Any]:
    llama = llama_example.load()
    cfg = llama.Config()
    torch.manual_seed(0)
    model = llama.Llama(cfg)
    inputs, targets = llama.batch(32, 8, torch.Generator().manual_seed(1))

    def make(device: torch.device) -> Callable[[], torch.Tensor]:
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        x, y = inputs.to(device), targets.to(device)

        def step() -> torch.Tensor:
            logits = m(x)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    want = make(torch.device("cpu"))()
    return _compare("Llama training step (main job's model, batch 32)", make, want, 20)


def _compare(
    name: str,
    make: Callable[[torch.device], Callable[[], torch.Tensor]],
    want: torch.Tensor,
    iters: int,
    bytes_: int = 0,
) -> dict[str, Any]:
    """The case on this process's device: agreement with the CPU, then the
    median time per iteration."""
    fn = make(DEVICE)
    got = fn()
    _sync(DEVICE)
    result: dict[str, Any] = {"case": name, "agrees": _close(got, want)}
    result["s"] = _median_seconds(fn, DEVICE, iters)
    if bytes_:
        result["GBps"] = bytes_ / result["s"] / 1e9
    return result


def _tf32(case: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The case with float32 products in TF32 on both devices
    (torch.set_float32_matmul_precision("high"); infini's InfiniOps gemm on
    NVIDIA computes only so, and is refused at the default "highest")."""
    torch.set_float32_matmul_precision("high")
    try:
        result = case()
    finally:
        torch.set_float32_matmul_precision("highest")
    result["case"] += ", TF32 (matmul precision 'high')"
    return result


def _one_device(device: str) -> list[dict[str, Any]]:
    """Every case on ``device`` ("infini" or "cuda"), in this process."""
    global DEVICE
    if device == "infini":
        import torch_infini  # noqa: F401  (registers the infini device)
    DEVICE = torch.device(device, 0)
    cases: list[Callable[[], Any]] = [
        mlp_case,
        lambda: mm_case(torch.float32),
        lambda: _tf32(mlp_case),
        lambda: _tf32(lambda: mm_case(torch.float32)),
        lambda: mm_case(torch.bfloat16),
        copy_cases,
        llama_case,
    ]
    results: list[dict[str, Any]] = []
    for case in cases:
        try:
            out = case()
        except Exception as e:  # noqa: BLE001  (one failing case does not hide the others)
            print(f"vs_cuda ({device}): a case failed: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        results.extend(out if isinstance(out, list) else [out])
    return results


def _in_subprocess(device: str) -> list[dict[str, Any]]:
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0" if device == "cuda" else "1"}
    run = subprocess.run(
        [sys.executable, __file__, "--only", device], env=env, capture_output=True, text=True
    )
    sys.stderr.write(run.stderr[-20000:])
    if run.returncode != 0 or not run.stdout.strip():
        print(f"vs_cuda: the {device} process failed (exit {run.returncode})", file=sys.stderr)
        return []
    return json.loads(run.stdout.strip().splitlines()[-1])


def merge(infini: list[dict[str, Any]], cuda: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_case = {r["case"]: r for r in cuda}
    results = []
    for r in infini:
        c = by_case.get(r["case"])
        if c is None:
            continue
        merged = {
            "case": r["case"],
            "infini_agrees": r["agrees"],
            "cuda_agrees": c["agrees"],
            "infini_s": r["s"],
            "cuda_s": c["s"],
            "ratio": r["s"] / c["s"],
        }
        if "GBps" in r:
            merged["infini_GBps"], merged["cuda_GBps"] = r["GBps"], c["GBps"]
        results.append(merged)
    return results


def render(results: list[dict[str, Any]], backend: str) -> str:
    lines = [
        f"infini ({backend}) vs torch.cuda (each in its own process), "
        f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}",
        "",
        "| case | infini | cuda | infini / cuda | agree (infini, cuda) |",
        "|---|---:|---:|---:|---|",
    ]
    for r in results:
        extra = (
            f" ({r['infini_GBps']:.1f} / {r['cuda_GBps']:.1f} GB/s)" if "infini_GBps" in r else ""
        )
        lines.append(
            f"| {r['case']} | {r['infini_s'] * 1e6:.1f} us | {r['cuda_s'] * 1e6:.1f} us | "
            f"{r['ratio']:.2f}{extra} | {r['infini_agrees']}, {r['cuda_agrees']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--only", choices=("infini", "cuda"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("vs_cuda: torch.cuda sees no GPU", file=sys.stderr)
        return 2
    if args.only:
        print(json.dumps(_one_device(args.only)))
        return 0
    backend = subprocess.run(
        [sys.executable, "-c", "import torch_infini; print(torch_infini.backend())"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    results = merge(_in_subprocess("infini"), _in_subprocess("cuda"))
    text = render(results, backend)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.markdown:
        args.markdown.write_text(text)
    return 0 if results and all(r["infini_agrees"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
