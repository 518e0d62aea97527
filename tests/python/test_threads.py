"""Runtime calls from several Python threads: each thread binds the backend itself."""

from __future__ import annotations

import threading

import torch
import torch_infini  # noqa: F401


def test_copies_and_ops_from_many_threads_match_cpu() -> None:
    errors: list[BaseException] = []
    results: dict[int, bool] = {}

    def work(index: int) -> None:
        try:
            gen = torch.Generator().manual_seed(index)
            a = torch.randn(33, 17, generator=gen)
            b = torch.randn(17, 9, generator=gen)
            dev_a, dev_b = a.to("infini"), b.to("infini")
            out = (dev_a @ dev_b + 1.0).cpu()
            torch.infini.current_stream().synchronize()
            results[index] = torch.allclose(out, a @ b + 1.0, rtol=1e-5, atol=1e-5)
        except BaseException as exc:  # reported below with the thread's index
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == {i: True for i in range(6)}


def test_new_threads_start_on_device_zero_with_default_stream() -> None:
    seen: list[tuple[int, bool]] = []

    def probe() -> None:
        seen.append(
            (
                torch.infini.current_device(),
                torch.infini.current_stream() == torch.infini.default_stream(),
            )
        )

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert seen == [(0, True)]
