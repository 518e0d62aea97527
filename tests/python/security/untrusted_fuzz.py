"""A fuzzer for the inputs a user may be sent or may compute: checkpoints
loaded with ``torch.load(weights_only=True)`` and the geometries of
``set_``, ``as_strided`` and ``resize_``, drawn at random (sizes, strides,
offsets, dtypes, storage lengths; edges of int64 arithmetic often), each run
on the CPU and on infini.

The CPU is the oracle: infini must refuse what the CPU refuses (never
accept it), and accept what it accepts with the same geometry and the same
bits (sampled where a tensor has many elements); a refused call leaves the
infini tensor as it was. Run as a script it prints one line per case before
running it (so a crash names its case) and a JSON summary last:

    python tests/python/security/untrusted_fuzz.py --seed 0 --cases 3000

test_untrusted_fuzz.py runs it in a subprocess; ci/sanitize.sh runs it
under ASan + UBSan.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
import torch_infini  # noqa: E402, F401
from checkpoints import STORAGE_CLASSES, crafted  # noqa: E402

DEVICE = torch.device("infini", 0)
DTYPES = list(STORAGE_CLASSES)

# Values where int64 arithmetic on sizes, strides and offsets breaks.
EDGES = [
    1 << 31,
    (1 << 32) + 1,
    1 << 40,
    1 << 61,
    (1 << 62) - 1,
    (1 << 62) - 3,
    1 << 62,
    (1 << 63) - 1,
]
NEGATIVES = [-1, -2, -(1 << 62)]
# Above this many elements values are compared at sampled indices.
MAX_COMPARED = 4096


def _int(rng: random.Random, small: int, edge: float = 0.15, negative: float = 0.03) -> int:
    r = rng.random()
    if r < negative:
        return rng.choice(NEGATIVES)
    if r < negative + edge:
        return rng.choice(EDGES) + rng.choice([0, 0, 1, -1])
    return rng.randint(0, small)


def _geometry(rng: random.Random) -> dict[str, Any]:
    rank = rng.randint(0, 3)
    return {
        "size": [_int(rng, 5, edge=0.08, negative=0.02) for _ in range(rank)],
        "stride": [_int(rng, 8, edge=0.08, negative=0.03) for _ in range(rank)],
        "offset": _int(rng, 8),
    }


def draw(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["checkpoint", "set_", "as_strided", "resize_"])
    case: dict[str, Any] = {"kind": kind, "dtype": str(rng.choice(DTYPES))}
    case["storage_bytes"] = rng.randint(1, 64)
    case["seed"] = rng.randrange(1 << 30)
    if kind == "resize_":
        # Small sizes, or byte counts no machine has or int64 cannot hold (a
        # size in between would really allocate gigabytes).
        rank = rng.randint(0, 3)
        case["size"] = [
            rng.randint(0, 6) if rng.random() < 0.8 else rng.choice(EDGES + NEGATIVES)
            for _ in range(rank)
        ]
        case["view"] = rng.choice(["contiguous", "transposed", "offset"])
        return case
    case.update(_geometry(rng))
    if kind == "checkpoint" and rng.random() < 0.1:
        case["declared_numel"] = _int(rng, 64)  # the record's element count, wrong
    return case


def _dtype(case: dict[str, Any]) -> torch.dtype:
    return getattr(torch, case["dtype"].removeprefix("torch."))


def _bytes(case: dict[str, Any]) -> bytes:
    return random.Random(case["seed"]).randbytes(case["storage_bytes"])


def _cpu_storage(data: bytes) -> torch.UntypedStorage:
    """A CPU storage that cannot grow, as a loaded checkpoint's (the CPU's
    set_ grows a resizable one; infini's never does)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).untyped_storage()


def _base(case: dict[str, Any], device: str | torch.device) -> torch.Tensor:
    """A tensor of the case's dtype over its storage bytes (whole elements)."""
    dtype = _dtype(case)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    data = _bytes(case)
    count = max(1, len(data) // itemsize)
    data = (data * itemsize)[: count * itemsize]
    cpu = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).clone()
    return cpu if device == "cpu" else cpu.to(device)


def _make(case: dict[str, Any], device: str | torch.device) -> Callable[[], torch.Tensor]:
    kind, dtype = case["kind"], _dtype(case)
    if kind == "checkpoint":
        data = crafted(
            dtype,
            case["offset"],
            tuple(case["size"]),
            tuple(case["stride"]),
            _bytes(case),
            case.get("declared_numel"),
        )
        return lambda: torch.load(io.BytesIO(data), weights_only=True, map_location=device)
    if kind == "set_":
        storage = (
            _cpu_storage(_bytes(case))
            if device == "cpu"
            else torch.frombuffer(bytearray(_bytes(case)), dtype=torch.uint8)
            .to(device)
            .untyped_storage()
        )
        return lambda: torch.empty(0, dtype=dtype, device=device).set_(
            storage, case["offset"], case["size"], case["stride"]
        )
    if kind == "as_strided":
        base = _base(case, device)
        return lambda: base.as_strided(case["size"], case["stride"], case["offset"])
    raise AssertionError(kind)


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.bool:
        # Random bytes are no valid bools: a copy may store 0x37 as 0x01.
        # What a byte means (zero or not) is what must agree.
        return t.view(torch.uint8) != 0
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.is_floating_point():
        return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def _plain(t: torch.Tensor) -> torch.Tensor:
    """The same elements with stride 1 on dimensions of size 1: a stride of
    2^62 or more (which only such a dimension can have inside a small
    storage) is symbolic to PyTorch, and no kernel computes on it."""
    stride = [s if n > 1 else 1 for n, s in zip(t.shape, t.stride(), strict=True)]
    return t.as_strided(t.shape, stride, t.storage_offset())


def _same_values(cpu: torch.Tensor, dev: torch.Tensor, rng: random.Random) -> bool:
    if cpu.numel() == 0:  # (a size above 2^62 is symbolic to PyTorch: no copies of it)
        return True
    if cpu.numel() <= MAX_COMPARED:
        return torch.equal(_bits(_plain(dev).cpu()), _bits(_plain(cpu)))
    for _ in range(16):
        index = tuple(rng.randrange(n) for n in cpu.shape)
        if not torch.equal(_bits(dev[index].cpu()), _bits(cpu[index])):
            return False
    return True


def _geometry_of(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype)


def _outcome(make: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "accepted", make()
    except (RuntimeError, ValueError, TypeError, IndexError, OverflowError) as error:
        return "refused", error


def _stricter(case: dict[str, Any], error: BaseException, verdicts: Counter[str]) -> str | None:
    """The CPU accepted, infini refused: right only for a negative size,
    which the CPU takes below -2^62 (PyTorch's SymInt holds such a value as
    symbolic, and no check sees it negative) and infini refuses by name."""
    if any(n < 0 for n in case["size"]) and "negative dimension" in str(error):
        verdicts[f"{case['kind']} refused by infini only (negative size)"] += 1
        return None
    return f"the CPU accepted; infini refused ({type(error).__name__}: {error})"


def _compare_made(case: dict[str, Any], verdicts: Counter[str]) -> str | None:
    """None when infini agrees with the CPU; else what differs."""
    cpu_kind, cpu = _outcome(_make(case, "cpu"))
    verdicts[f"{case['kind']} {cpu_kind}"] += 1
    dev_kind, dev = _outcome(_make(case, DEVICE))
    if cpu_kind == "refused":
        return None if dev_kind == "refused" else f"the CPU refused ({cpu}); infini accepted"
    if dev_kind == "refused":
        return _stricter(case, dev, verdicts)
    if _geometry_of(dev) != _geometry_of(cpu):
        return f"geometry {_geometry_of(dev)} != the CPU's {_geometry_of(cpu)}"
    if dev.device != DEVICE:
        return f"loaded on {dev.device}"
    rng = random.Random(case["seed"])
    if not _same_values(cpu, dev, rng):
        return "values differ from the CPU's"
    if 0 < cpu.numel() <= MAX_COMPARED and case["kind"] != "as_strided":
        # A write through the view stays inside its storage: the whole
        # storage afterwards equals the CPU's.
        cpu.fill_(1)
        dev.fill_(1)
        after_cpu = torch.tensor(bytearray(bytes(cpu.untyped_storage())), dtype=torch.uint8)
        after_dev = torch.empty(0, dtype=torch.uint8, device=DEVICE).set_(dev.untyped_storage())
        if not torch.equal(after_dev.cpu(), after_cpu):
            return "a write through the view changed other bytes than on the CPU"
    return None


def _compare_resize(case: dict[str, Any], verdicts: Counter[str]) -> str | None:
    def view(base: torch.Tensor) -> torch.Tensor:
        if case["view"] == "transposed" and base.dim() == 1 and base.numel() >= 2:
            return base[: base.numel() // 2 * 2].view(2, -1).t()
        if case["view"] == "offset":
            return base[1:]
        return base

    cpu, dev = view(_base(case, "cpu")), view(_base(case, DEVICE))
    before = (_geometry_of(dev), dev.untyped_storage().data_ptr(), dev.untyped_storage().nbytes())
    # (A CPU tensor whose resize_ failed may be larger than its storage: it
    # is never read after.)
    cpu_kind, cpu_error = _outcome(lambda: cpu.resize_(case["size"]))
    verdicts[f"resize_ {cpu_kind}"] += 1
    dev_kind, dev_error = _outcome(lambda: dev.resize_(case["size"]))
    if cpu_kind == "refused":
        if dev_kind != "refused":
            return f"the CPU refused ({cpu_error}); infini accepted"
        after = (
            _geometry_of(dev),
            dev.untyped_storage().data_ptr(),
            dev.untyped_storage().nbytes(),
        )
        return None if after == before else f"a refused resize_ changed the tensor: {after}"
    if dev_kind == "refused":
        return _stricter(case, dev_error, verdicts)
    if _geometry_of(dev) != _geometry_of(cpu):
        return f"geometry {_geometry_of(dev)} != the CPU's {_geometry_of(cpu)}"
    return None


def compare(case: dict[str, Any], verdicts: Counter[str]) -> str | None:
    """Runs `case` on the CPU and on infini; counts the CPU's verdict."""
    if case["kind"] == "resize_":
        return _compare_resize(case, verdicts)
    return _compare_made(case, verdicts)


def run(seed: int, cases: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    rng = random.Random(seed)
    verdicts: Counter[str] = Counter()
    mismatches = []
    for number in range(cases):
        case = draw(rng)
        log(json.dumps({"case": number, **case}))
        try:
            problem = compare(case, verdicts)
        except Exception as error:  # noqa: BLE001  (a comparison that raises is a finding)
            problem = f"raised {type(error).__name__}: {error}"
        if problem is not None:
            mismatches.append({"case": number, **case, "problem": problem})
    return {"seed": seed, "cases": cases, "cpu_verdicts": dict(verdicts), "mismatches": mismatches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=3000)
    args = parser.parse_args()
    summary = run(args.seed, args.cases, log=lambda line: print(line, flush=True))
    print("SUMMARY " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
