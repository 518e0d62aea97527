"""The programs test_distributed.py runs on several processes.

``python distributed_jobs.py JOB OUT_DIR``, once per rank (under torchrun, or
with RANK / WORLD_SIZE / INIT_FILE set by the test): each rank runs JOB and
writes ``OUT_DIR/rank<R>.json``, a list of ``{"case", "ok", "detail"}`` plus
whatever the job measures. A failing case is recorded, not raised, so every
rank still issues the same collectives in the same order and the job ends.

The oracle is the CPU: each collective runs on CPU tensors through gloo and
on infini tensors through the "infini" backend with the same inputs; the
results must be equal bit for bit, and where the CPU raises, infini must
raise the same exception type.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch_infini

# Run as a script (by torchrun or a subprocess): the test library of
# tests/python is one folder up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from infini_testing import assert_bitwise_equal  # noqa: E402

CPU = torch.device("cpu")
Results = list[dict[str, Any]]

# Every dtype gloo reduces and moves (int16, uint16 and float8 it refuses).
GLOO_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
]
OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "product": dist.ReduceOp.PRODUCT,
}
# gloo's bitwise reductions (integral and bool tensors; it refuses the others)
# and the fold of every rank's input each one computes.
BITWISE_OPS = {
    "band": (dist.ReduceOp.BAND, torch.bitwise_and),
    "bor": (dist.ReduceOp.BOR, torch.bitwise_or),
    "bxor": (dist.ReduceOp.BXOR, torch.bitwise_xor),
}


def short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Job:
    def __init__(self, out: Path) -> None:
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.out = out
        self.results: Results = []
        self.extra: dict[str, Any] = {}
        count = torch.infini.device_count()
        self.device = torch.device("infini", self.rank % count)
        torch.infini.set_device(self.device)
        if os.environ.get("INFINI_TEST_DIST_STAGED") == "1":
            torch_infini._C._dist_force_staging(True)

    def case(self, name: str, body: Callable[[], None]) -> None:
        try:
            body()
            self.results.append({"case": name, "ok": True, "detail": ""})
        except Exception:  # recorded: the other rank goes on with the same calls
            self.results.append({"case": name, "ok": False, "detail": traceback.format_exc()})

    def write(self) -> None:
        report = {"rank": self.rank, "results": self.results, **self.extra}
        (self.out / f"rank{self.rank}.json").write_text(json.dumps(report))

    def make(
        self, shape: Sequence[int], dtype: torch.dtype, seed: int, rank: int | None = None
    ) -> torch.Tensor:
        """Rank-dependent CPU values of `dtype` (bounded, so sums and products
        stay finite in float16); those of this rank unless `rank` is given."""
        g = torch.Generator().manual_seed(seed * 131 + (self.rank if rank is None else rank))
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        if dtype.is_complex:
            return torch.randn(*shape, 2, generator=g).mul(2).view(torch.complex64).squeeze(-1)
        if dtype.is_floating_point:
            return torch.randn(*shape, generator=g).mul(2).to(dtype)
        low = 0 if dtype == torch.uint8 else -9
        return torch.randint(low, 10, shape, generator=g, dtype=dtype)


def truth(t: torch.Tensor) -> torch.Tensor:
    """A bool tensor as its truth values: gloo's sum leaves bytes other than
    0 and 1, and copies may or may not normalize them. Other dtypes as is."""
    t = t.detach().cpu()
    return t.contiguous().view(torch.uint8) != 0 if t.dtype == torch.bool else t


def assert_same(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> None:
    assert len(actual) == len(expected), (len(actual), len(expected))
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert a.device.type == "infini", f"result {i} on {a.device}"
        assert a.dtype == e.dtype, (i, a.dtype, e.dtype)
        assert_bitwise_equal(truth(a), truth(e))


def same_as_cpu(job: Job, run: Callable[[torch.device], Sequence[torch.Tensor]]) -> None:
    """Runs `run` on CPU tensors (gloo), then on infini tensors; compares."""
    try:
        expected = [t.clone() for t in run(CPU)]
    except Exception as cpu_error:  # the same mistake must fail the same way
        try:
            run(job.device)
        except Exception as infini_error:
            assert type(infini_error) is type(cpu_error), (
                f"CPU raised {type(cpu_error).__name__}: {cpu_error}\n"
                f"infini raised {type(infini_error).__name__}: {infini_error}"
            )
            return
        raise AssertionError(f"CPU raised {cpu_error!r}, infini did not") from None
    actual = run(job.device)
    assert_same(actual, expected)


# ---------------------------------------------------------------- collectives


def collective_cases(job: Job) -> None:
    rank, world = job.rank, job.world

    for dtype in GLOO_DTYPES:
        dt = short(dtype)

        for op_name, op in OPS.items():

            def all_reduce(device: torch.device, op: Any = op, dtype: torch.dtype = dtype) -> list:
                x = job.make((3, 5), dtype, 1).to(device)
                dist.all_reduce(x, op=op)
                return [x]

            job.case(f"all_reduce {op_name} {dt}", lambda f=all_reduce: same_as_cpu(job, f))

        for op_name, (op, fold) in BITWISE_OPS.items():

            def bitwise(device: torch.device, op: Any = op, dtype: torch.dtype = dtype) -> list:
                x = job.make((3, 5), dtype, 70).to(device)
                dist.all_reduce(x, op=op)
                return [x]

            def bitwise_case(
                f: Any = bitwise, fold: Any = fold, dtype: torch.dtype = dtype
            ) -> None:
                same_as_cpu(job, f)
                if dtype.is_floating_point or dtype.is_complex:
                    return  # refused on the CPU, and same_as_cpu saw infini refuse alike
                # Where gloo computes it, the CPU's answer is the bitwise fold.
                expected = job.make((3, 5), dtype, 70, rank=0)
                for r in range(1, world):
                    expected = fold(expected, job.make((3, 5), dtype, 70, rank=r))
                assert_same(f(job.device), [expected])

            job.case(f"all_reduce {op_name} {dt}", bitwise_case)

        for src in range(world):

            def broadcast(device: torch.device, src: int = src, dtype: torch.dtype = dtype) -> list:
                x = job.make((4, 3), dtype, 2).to(device)
                dist.broadcast(x, src=src)
                return [x]

            job.case(f"broadcast src={src} {dt}", lambda f=broadcast: same_as_cpu(job, f))

        for op_name in ("sum", "max"):

            def reduce(device: torch.device, op: Any = OPS[op_name], dtype: torch.dtype = dtype):
                x = job.make((7,), dtype, 3).to(device)
                dist.reduce(x, dst=world - 1, op=op)
                return [x]

            job.case(f"reduce {op_name} {dt}", lambda f=reduce: same_as_cpu(job, f))

            def reduce_scatter(device: torch.device, op: Any = OPS[op_name], dtype=dtype) -> list:
                inputs = [job.make((2, 3), dtype, 10 + i).to(device) for i in range(world)]
                out = torch.zeros(2, 3, dtype=dtype, device=device)
                dist.reduce_scatter(out, inputs, op=op)
                return [out]

            job.case(f"reduce_scatter {op_name} {dt}", lambda f=reduce_scatter: same_as_cpu(job, f))

        def all_gather(device: torch.device, dtype: torch.dtype = dtype) -> list:
            outs = [torch.zeros(2, 3, dtype=dtype, device=device) for _ in range(world)]
            dist.all_gather(outs, job.make((2, 3), dtype, 4).to(device))
            return outs

        job.case(f"all_gather {dt}", lambda f=all_gather: same_as_cpu(job, f))

        def all_gather_into_tensor(device: torch.device, dtype: torch.dtype = dtype) -> list:
            out = torch.zeros(world * 2, 3, dtype=dtype, device=device)
            dist.all_gather_into_tensor(out, job.make((2, 3), dtype, 5).to(device))
            return [out]

        job.case(
            f"all_gather_into_tensor {dt}", lambda f=all_gather_into_tensor: same_as_cpu(job, f)
        )

        def reduce_scatter_tensor(device: torch.device, dtype: torch.dtype = dtype) -> list:
            out = torch.zeros(2, 3, dtype=dtype, device=device)
            dist.reduce_scatter_tensor(out, job.make((world * 2, 3), dtype, 6).to(device))
            return [out]

        job.case(f"reduce_scatter_tensor {dt}", lambda f=reduce_scatter_tensor: same_as_cpu(job, f))

        def all_to_all(device: torch.device, dtype: torch.dtype = dtype) -> list:
            inputs = [job.make((i + 1, 2), dtype, 20 + i).to(device) for i in range(world)]
            outs = [torch.zeros(rank + 1, 2, dtype=dtype, device=device) for _ in range(world)]
            dist.all_to_all(outs, inputs)
            return outs

        job.case(f"all_to_all {dt}", lambda f=all_to_all: same_as_cpu(job, f))

        def all_to_all_single(device: torch.device, dtype: torch.dtype = dtype) -> list:
            # Uneven splits: rank r sends i + r + 1 rows to rank i.
            in_splits = [i + rank + 1 for i in range(world)]
            out_splits = [rank + i + 1 for i in range(world)]
            x = job.make((sum(in_splits), 2), dtype, 7).to(device)
            out = torch.zeros(sum(out_splits), 2, dtype=dtype, device=device)
            dist.all_to_all_single(out, x, out_splits, in_splits)
            even = torch.zeros(world * 2, dtype=dtype, device=device)
            dist.all_to_all_single(even, job.make((world * 2,), dtype, 8).to(device))
            return [out, even]

        job.case(f"all_to_all_single {dt}", lambda f=all_to_all_single: same_as_cpu(job, f))

        def gather(device: torch.device, dtype: torch.dtype = dtype) -> list:
            x = job.make((3,), dtype, 9).to(device)
            if rank == 0:
                outs = [torch.zeros(3, dtype=dtype, device=device) for _ in range(world)]
                dist.gather(x, outs, dst=0)
                return outs
            dist.gather(x, dst=0)
            return [x]

        job.case(f"gather {dt}", lambda f=gather: same_as_cpu(job, f))

        def scatter(device: torch.device, dtype: torch.dtype = dtype) -> list:
            out = torch.zeros(4, dtype=dtype, device=device)
            src = world - 1
            chunks = [job.make((4,), dtype, 30 + i).to(device) for i in range(world)]
            dist.scatter(out, chunks if rank == src else None, src=src)
            return [out]

        job.case(f"scatter {dt}", lambda f=scatter: same_as_cpu(job, f))

        def send_recv(device: torch.device, dtype: torch.dtype = dtype) -> list:
            # Ring: send to the next rank, receive from the previous one.
            x = job.make((5,), dtype, 11).to(device)
            got = torch.zeros(5, dtype=dtype, device=device)
            if rank % 2 == 0:
                dist.send(x, (rank + 1) % world)
                dist.recv(got, (rank - 1) % world)
            else:
                dist.recv(got, (rank - 1) % world)
                dist.send(x, (rank + 1) % world)
            return [got]

        job.case(f"send/recv {dt}", lambda f=send_recv: same_as_cpu(job, f))

    # ---- layouts: non-contiguous and offset tensors, empty tensors
    def strided(device: torch.device) -> list:
        base = job.make((6, 8), torch.float32, 12).to(device)
        transposed = base.t()
        sliced = base[1:, 2:7]
        dist.all_reduce(transposed)
        dist.all_reduce(sliced, op=dist.ReduceOp.MAX)
        gathered = [torch.zeros(5, 5, device=device).t() for _ in range(world)]
        dist.all_gather(gathered, sliced)
        empty = torch.zeros(0, 3, device=device)
        dist.all_reduce(empty)
        return [base, transposed, sliced, *gathered, empty]

    job.case("non-contiguous, offset and empty tensors", lambda: same_as_cpu(job, strided))

    # ---- point-to-point, asynchronous forms
    def isend_irecv(device: torch.device) -> list:
        x = job.make((6,), torch.float32, 13).to(device)
        got = torch.zeros(6, device=device)
        works = [
            dist.isend(x, (rank + 1) % world),
            dist.irecv(got, (rank - 1) % world),
        ]
        for w in works:
            w.wait()
        ops = [
            dist.P2POp(dist.isend, x * 2, (rank + 1) % world),
            dist.P2POp(dist.irecv, got2 := torch.zeros(6, device=device), (rank - 1) % world),
        ]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return [got, got2]

    job.case("isend/irecv and batch_isend_irecv", lambda: same_as_cpu(job, isend_irecv))

    def recv_any_source(device: torch.device) -> list:
        x = job.make((4,), torch.float64, 14).to(device)
        if rank == 0:
            got = [torch.zeros(4, dtype=torch.float64, device=device) for _ in range(world - 1)]
            sources = sorted(dist.recv(g) for g in got)
            assert sources == list(range(1, world)), sources
            return sorted(got, key=lambda t: float(t.sum().cpu()))
        dist.send(x, 0)
        return [x]

    job.case("recv from any source", lambda: same_as_cpu(job, recv_any_source))

    # ---- Work objects: wait, result, future
    def async_work() -> None:
        x = job.make((64,), torch.float32, 15).to(job.device)
        expected = job.make((64,), torch.float32, 15)
        dist.all_reduce(expected)
        work = dist.all_reduce(x, async_op=True)
        assert work.wait()
        assert torch.equal(x.cpu(), expected)
        assert work.is_completed()
        y = job.make((64,), torch.float32, 15).to(job.device)
        future = dist.all_reduce(y, async_op=True).get_future()
        value = future.wait()
        assert len(value) == 1 and value[0].device == job.device, value
        assert value[0].data_ptr() == y.data_ptr()  # the caller's tensor, reduced in place
        assert torch.equal(value[0].cpu(), expected)
        chained = future.then(lambda f: f.value()[0] * 2).wait()
        assert torch.equal(chained.cpu(), expected * 2)
        z = torch.zeros(3, device=job.device)
        outs = [torch.zeros(3, device=job.device) for _ in range(world)]
        work = dist.all_gather(outs, z + rank, async_op=True)
        work.wait()
        assert [float(o[0].cpu()) for o in outs] == [float(r) for r in range(world)]
        assert all(r.device == job.device for r in work.result())

    job.case("async_op: wait, is_completed, result, get_future, then", async_work)

    # ---- stream order: pending producers before, consumers after
    def stream_order() -> None:
        n = 1 << 20
        base = torch.ones(n, device=job.device)
        expected = torch.full((n,), float(3 * world))
        # Producer enqueued on the current stream just before the collective.
        x = base * 3
        dist.all_reduce(x)
        y = x + 1  # consumer enqueued after: sees the sum
        assert torch.equal(y.cpu(), expected + 1)
        # The same on a side stream made current.
        side = torch.infini.Stream()
        with torch.infini.stream(side):
            x2 = base * 3
            work = dist.all_reduce(x2, async_op=True)
            work.wait()
            y2 = x2 * 2
        side.synchronize()
        assert torch.equal(y2.cpu(), expected * 2)

    job.case("stream order: producers waited for, consumers see the result", stream_order)

    # ---- coalescing (what DDP, FSDP and _coalescing_manager issue)
    def coalesced(device: torch.device) -> list:
        tensors = [job.make((i + 2,), torch.float32, 40 + i).to(device) for i in range(3)]
        with dist._coalescing_manager(async_ops=True) as cm:
            for t in tensors:
                dist.all_reduce(t)
        cm.wait()
        outs = [torch.zeros(2 * world, device=device) for _ in range(2)]
        with dist._coalescing_manager():
            for i, o in enumerate(outs):
                dist.all_gather_into_tensor(o, job.make((2,), torch.float32, 50 + i).to(device))
        return [*tensors, *outs]

    job.case(
        "_coalescing_manager (all_reduce, all_gather_into_tensor)",
        lambda: same_as_cpu(job, coalesced),
    )

    def coalescing_block() -> None:
        # start/endCoalescing on the infini backend itself (device given).
        tensors = [job.make((4,), torch.float32, 60 + i) for i in range(2)]
        expected = [t.clone() for t in tensors]
        dist.broadcast(expected[0], src=0)
        dist.broadcast(expected[1], src=world - 1)
        on_device = [t.to(job.device) for t in tensors]
        with dist._coalescing_manager(device=job.device, async_ops=True) as cm:
            dist.broadcast(on_device[0], src=0)
            dist.broadcast(on_device[1], src=world - 1)
        cm.wait()
        assert_same(on_device, expected)

    job.case("start/end coalescing on the infini backend", coalescing_block)

    def barrier() -> None:
        dist.barrier()
        dist.barrier(device_ids=[job.device.index])

    job.case("barrier", barrier)

    # ---- errors
    def mixed_devices() -> None:
        # c10d picks the backend by the input's device: infini; outputs on the CPU.
        outs = [torch.zeros(2) for _ in range(world)]
        try:
            dist.all_gather(outs, torch.zeros(2, device=job.device))
        except ValueError as e:
            message = str(e)
            assert "'infini'" in message and "cpu" in message, message
        else:
            raise AssertionError("a CPU input to the infini backend did not raise")

    job.case("a CPU tensor given to the infini backend: ValueError", mixed_devices)

    def wrong_sizes(device: torch.device) -> list:
        out = torch.zeros(world * 2 + 1, device=device)
        dist.all_gather_into_tensor(out, torch.zeros(2, device=device))
        return [out]

    job.case("all_gather_into_tensor, wrong output size", lambda: same_as_cpu(job, wrong_sizes))

    def wrong_list(device: torch.device) -> list:
        outs = [torch.zeros(2, device=device) for _ in range(world + 1)]
        dist.all_gather(outs, torch.zeros(2, device=device))
        return outs

    job.case("all_gather, wrong output list length", lambda: same_as_cpu(job, wrong_list))


def job_collectives(out: Path) -> None:
    dist.init_process_group("cpu:gloo,infini:infini", timeout=timedelta(seconds=60))
    job = Job(out)
    job.extra["engine"] = torch_infini.distributed.engine()
    job.extra["backend"] = str(dist.get_backend())
    collective_cases(job)
    dist.barrier()
    dist.destroy_process_group()
    job.write()


# ---------------------------------------------------------------- init forms


def job_init_forms(out: Path) -> None:
    """The ways a user names the backend, each on a fresh store."""
    job = Job(out)
    rank, world = job.rank, job.world

    def form(name: str, serves_cpu: bool, **kwargs: Any) -> None:
        store = dist.FileStore(str(out / f"store-{name}"), world)
        dist.init_process_group(store=store, rank=rank, world_size=world, **kwargs)
        try:
            x = torch.full((3,), float(rank + 1), device=job.device)
            dist.all_reduce(x)
            total = float(sum(range(1, world + 1)))
            assert torch.equal(x.cpu(), torch.full((3,), total))
            group = dist.group.WORLD
            served_by = group._get_backend(job.device).name()  # the backend object itself
            assert served_by == "infini", served_by
            if serves_cpu:  # as "cpu:gloo,cuda:nccl": CPU tensors through gloo
                assert dist.get_backend() == "cpu:gloo,infini:infini", dist.get_backend()
                assert group._get_backend(CPU).name() == "gloo", group._get_backend(CPU).name()
                y = torch.full((2,), float(rank + 1))
                dist.all_reduce(y)
                assert torch.equal(y, torch.full((2,), total)), y
                return
            try:
                dist.all_reduce(torch.ones(2))
            except RuntimeError as e:
                assert "cpu" in str(e), e
            else:
                raise AssertionError("a CPU tensor on an infini-only group did not raise")
        finally:
            dist.destroy_process_group()

    job.case(
        'init_process_group(backend="infini")',
        lambda: form("named", serves_cpu=False, backend="infini"),
    )
    job.case(
        "init_process_group() on the infini accelerator: cpu:gloo,infini:infini",
        lambda: form("default", serves_cpu=True),
    )
    job.case(
        "init_process_group(device_id=infini device)",
        lambda: form("device", serves_cpu=False, device_id=job.device),
    )

    def default_for_device() -> None:
        assert dist.get_default_backend_for_device("infini") == "infini"
        assert dist.get_default_backend_for_device(job.device) == "infini"
        assert dist.Backend.INFINI == "infini"

    job.case("get_default_backend_for_device", default_for_device)

    def device_mesh() -> None:
        # init_device_mesh makes the default group itself, without a backend
        # (env:// from torchrun): the same group as init_process_group().
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("infini", (world,))
        try:
            assert dist.get_backend() == "cpu:gloo,infini:infini", dist.get_backend()
            y = torch.full((2,), float(rank + 1))
            dist.all_reduce(y, group=mesh.get_group())
            assert torch.equal(y, torch.full((2,), float(sum(range(1, world + 1))))), y
        finally:
            dist.destroy_process_group()

    job.case("init_device_mesh: cpu:gloo,infini:infini", device_mesh)
    job.write()


# ---------------------------------------------------------------- DDP


def job_ddp(out: Path) -> None:
    """DDP trains an MLP and the Llama example on infini; each rank sees half
    of every global batch. Checks the parameters against the single-process
    full-batch run on the CPU and against the same DDP on CPU/gloo in the same
    group; reports the step times of both DDPs. ``INFINI_TEST_DIST_INIT=none``:
    the group is made by ``init_process_group()`` without any argument."""
    if os.environ.get("INFINI_TEST_DIST_INIT") == "none":
        dist.init_process_group()
    else:
        dist.init_process_group("cpu:gloo,infini:infini", timeout=timedelta(seconds=120))
    job = Job(out)
    job.extra["backend"] = str(dist.get_backend())
    rank, world = job.rank, job.world
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
    import llama  # the main job's model

    def mlp() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(12, 32),
            torch.nn.GELU(),
            torch.nn.Linear(32, 32),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.0),
            torch.nn.Linear(32, 5),
        )

    def mlp_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(1000 + step)
        return torch.randn(16, 12, generator=g), torch.randint(0, 5, (16,), generator=g)

    def mlp_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(x), y)

    cfg = llama.Config(layers=2, dim=32, heads=4, kv_heads=2, ffn=64)

    def llama_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        return llama.batch(8, 6, torch.Generator().manual_seed(2000 + step))

    def llama_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model(x)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())

    models = {
        "mlp": (mlp, mlp_batch, mlp_loss),
        "llama": (lambda: llama.Llama(cfg), llama_batch, llama_loss),
    }
    steps = 4

    def train(name: str, device: torch.device, distributed: bool) -> tuple[Any, list[float]]:
        make, batch, loss_fn = models[name]
        torch.manual_seed(7)
        model = make().to(device)
        net: torch.nn.Module = (
            torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
            if distributed
            else model
        )
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        times = []
        for step in range(steps):
            x, y = batch(step)
            if distributed:  # this rank's half of the global batch
                half = x.shape[0] // world
                x, y = x[rank * half : (rank + 1) * half], y[rank * half : (rank + 1) * half]
            start = time.perf_counter()
            loss = loss_fn(net, x.to(device), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
            times.append(time.perf_counter() - start)
        return model, times

    for name in models:

        def check(name: str = name) -> None:
            model, times = train(name, job.device, distributed=True)
            params = [p.detach() for p in model.parameters()]
            flat = torch.cat([p.reshape(-1) for p in params])
            everyone = [torch.zeros_like(flat) for _ in range(world)]
            dist.all_gather(everyone, flat)
            for r, other in enumerate(everyone):
                assert torch.equal(other.cpu(), flat.cpu()), f"rank {r}'s parameters differ"
            reference, _ = train(name, CPU, distributed=False)  # one process, full batch
            pairs = zip(model.named_parameters(), reference.parameters(), strict=True)
            for (pname, p), ref in pairs:
                torch.testing.assert_close(
                    p.detach().cpu(),
                    ref.detach(),
                    rtol=1e-4,
                    atol=1e-5,
                    msg=lambda m, pname=pname: f"{name}.{pname}: {m}",
                )
            cpu_ddp, cpu_times = train(name, CPU, distributed=True)  # the same DDP on CPU/gloo
            pairs = zip(model.named_parameters(), cpu_ddp.parameters(), strict=True)
            for (pname, p), ref in pairs:
                torch.testing.assert_close(
                    p.detach().cpu(),
                    ref.detach(),
                    msg=lambda m, pname=pname: f"{name}.{pname} against DDP on CPU/gloo: {m}",
                )
            job.extra[f"{name}_step_s"] = {"infini": times[1:], "cpu_gloo": cpu_times[1:]}

        job.case(f"DDP {name}: ranks agree and match one process on the full batch", check)

    dist.destroy_process_group()
    job.write()


# ---------------------------------------------------------------- faults


def job_faults(out: Path) -> None:
    """Rank 1 dies (or stalls) after a first collective; rank 0's next
    collective must fail within the group's timeout, not hang."""
    mode = os.environ["INFINI_TEST_FAULT"]  # "dies" or "stalls"
    timeout = float(os.environ["INFINI_TEST_TIMEOUT"])
    job = Job(out)
    store = dist.FileStore(os.environ["INIT_FILE"], job.world)
    dist.init_process_group(
        "infini",
        store=store,
        rank=job.rank,
        world_size=job.world,
        timeout=timedelta(seconds=timeout),
    )
    x = torch.ones(4, device=job.device)
    dist.all_reduce(x)
    if job.rank == 1:
        if mode == "dies":
            os._exit(17)
        time.sleep(timeout * 3 + 30)  # never joins; the test kills it
        os._exit(0)
    start = time.perf_counter()
    try:
        dist.all_reduce(x)
        job.extra["raised"] = None
    except Exception as e:
        job.extra["raised"] = f"{type(e).__name__}: {e}"[:2000]
    job.extra["elapsed_s"] = time.perf_counter() - start
    job.write()
    os._exit(0)  # the group cannot be shut down cleanly without its peer


JOBS = {
    "collectives": job_collectives,
    "init_forms": job_init_forms,
    "ddp": job_ddp,
    "faults": job_faults,
}

if __name__ == "__main__":
    JOBS[sys.argv[1]](Path(sys.argv[2]))
