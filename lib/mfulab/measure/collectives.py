"""Collectives measured on every rank of a process group (torch.distributed: NCCL on CUDA,
gloo on CPU), in the spirit of nccl-tests: sizes, algbw/busbw (``comm.bus_factor``) and a
``#wrong`` count that checks every result.

:func:`slowest_rank_time` is the one timing loop of every multi-rank measurement: barrier,
synchronise, run, synchronise, and the *slowest* rank's time counts (a collective, or a
DDP step, ends when its last rank does).
"""

from __future__ import annotations

import time

from mfulab.analytic.comm import bus_factor
from mfulab.errors import ParameterError
from mfulab.measure.timing import summarize, synchronize

BENCHMARK_VERSION = {"collectives": 2}
CUDA_CALLS_PER_SAMPLE = 20  # back-to-back calls between two CUDA events, one sample (nccl-tests: -n)


def slowest_rank_time(fn, device: str):
    """``(seconds, fn())``: ``fn`` timed between a barrier and a device synchronise on every
    rank; the time returned is the maximum over ranks."""
    import torch.distributed as dist

    from mfulab.measure.launch import reduce_scalar

    dist.barrier()
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    return reduce_scalar(time.perf_counter() - t0, "max"), out


def _buffers(op, nbytes, n, rank, device, dtype):
    """Input/output tensors for one collective of total size ``nbytes`` (nccl-tests sizes),
    filled with rank-dependent values so that the result can be checked."""
    import torch

    elem = torch.empty(0, dtype=dtype).element_size()
    total = max(nbytes // elem // n * n, n)  # divisible by n
    value = float(rank + 1)
    if op == "all_reduce":
        return torch.full((total,), value, device=device, dtype=dtype), None
    if op == "all_gather":
        return torch.full((total // n,), value, device=device, dtype=dtype), torch.empty(
            total, device=device, dtype=dtype
        )
    if op == "reduce_scatter":
        return torch.full((total,), value, device=device, dtype=dtype), torch.empty(
            total // n, device=device, dtype=dtype
        )
    if op == "broadcast":
        return torch.full((total,), value, device=device, dtype=dtype), None
    raise ParameterError(
        f"the benchmark runs all_reduce, all_gather, reduce_scatter and broadcast; got {op!r}"
    )


def expected_result(op: str, n: int, numel: int, *, device="cpu", dtype=None):
    """What every element of the result must hold when rank r contributed r + 1, built where
    the result lives (no host-to-device copy of a result-sized tensor)."""
    import torch

    dtype = dtype or torch.float32
    if op in ("all_reduce", "reduce_scatter"):
        return torch.full((numel,), n * (n + 1) / 2, device=device, dtype=dtype)
    if op == "all_gather":
        ranks = torch.arange(1, n + 1, device=device, dtype=dtype)
        return ranks.repeat_interleave(numel // n)
    if op == "broadcast":
        return torch.full((numel,), 1.0, device=device, dtype=dtype)  # rank 0's value
    raise ParameterError(f"no expected result for {op!r}")


def count_wrong(op: str, result, n: int) -> int:
    """Elements of ``result`` that differ from the expected value (nccl-tests' ``#wrong``),
    counted on the result's device."""
    import torch

    expected = expected_result(op, n, result.numel(), device=result.device, dtype=result.dtype)
    return int((~torch.isclose(result, expected)).sum())


def _run_op(op, inp, out, group=None):
    import torch.distributed as dist

    if op == "all_reduce":
        dist.all_reduce(inp)
        return inp
    if op == "all_gather":
        dist.all_gather_into_tensor(out, inp)
        return out
    if op == "reduce_scatter":
        dist.reduce_scatter_tensor(out, inp)
        return out
    dist.broadcast(inp, src=0)
    return inp


def _timed_sample(run, device: str, calls: int) -> float:
    """Seconds per call of one sample, slowest rank. On CUDA: ``calls`` back-to-back calls
    between two events on the stream (a host timer around one synchronised call would time
    launch and synchronisation for small messages); elsewhere one call between barriers."""
    if device != "cuda":
        return slowest_rank_time(run, device)[0]
    import torch
    import torch.distributed as dist

    from mfulab.measure.launch import reduce_scalar

    dist.barrier()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        run()
    end.record()
    end.synchronize()
    return reduce_scalar(start.elapsed_time(end) / 1e3 / calls, "max")


def benchmark(
    *, ops, sizes_bytes, warmup: int, iters: int, device: str, calls_per_sample: int | None = None
) -> list[dict]:
    """Inside a process group, on every rank, nccl-tests style: for every op and size one pair
    of buffers, ``warmup`` calls, ``iters`` timed samples (:func:`_timed_sample`; on CUDA each
    is ``calls_per_sample`` calls, :data:`CUDA_CALLS_PER_SAMPLE` by default), then a separate
    correctness run: fresh rank-dependent input, one call, every element checked on the device
    (``wrong``, summed over ranks)."""
    import torch
    import torch.distributed as dist

    from mfulab.measure.launch import reduce_scalar
    from mfulab.measure.timing import progress

    rank, n = dist.get_rank(), dist.get_world_size()
    dtype = torch.float32
    calls = calls_per_sample or (CUDA_CALLS_PER_SAMPLE if device == "cuda" else 1)
    rows = []
    for op in ops:
        for nbytes in progress(sizes_bytes, f"{op}") if rank == 0 else sizes_bytes:
            inp, out = _buffers(op, nbytes, n, rank, device, dtype)

            def run(op=op, inp=inp, out=out):
                return _run_op(op, inp, out)

            for _ in range(warmup):
                run()
            times = [_timed_sample(run, device, calls) for _ in range(iters)]
            inp, out = _buffers(op, nbytes, n, rank, device, dtype)  # timed calls changed the values
            wrong = count_wrong(op, _run_op(op, inp, out), n)
            wrong_total = int(reduce_scalar(wrong, "sum"))
            total_bytes = (inp.numel() if op != "all_gather" else out.numel()) * inp.element_size()
            t = summarize(times)
            rows.append(
                {
                    "op": op,
                    "size_bytes": total_bytes,
                    "count": total_bytes // inp.element_size(),
                    "time_s": t.median_s,
                    "q1_s": t.q1_s,
                    "q3_s": t.q3_s,
                    "n": t.n,
                    "calls_per_sample": calls,
                    "algbw_bytes_per_s": total_bytes / t.median_s,
                    "busbw_bytes_per_s": total_bytes / t.median_s * bus_factor(op, n),
                    "wrong": wrong_total,
                }
            )
    return rows


def all_reduce_alpha_beta(
    *, device: str, sizes_bytes=tuple(2**k for k in range(12, 25, 2)), warmup: int = 3, iters: int = 5
) -> dict:
    """Inside a process group: α (per-step latency) and link bandwidth of this group's
    all-reduce, fitted (``comm.fit_alpha_beta``) to :func:`benchmark`'s medians."""
    import torch.distributed as dist

    from mfulab.analytic.comm import fit_alpha_beta

    rows = benchmark(ops=["all_reduce"], sizes_bytes=sizes_bytes, warmup=warmup, iters=iters, device=device)
    fit = fit_alpha_beta(
        [r["size_bytes"] for r in rows], [r["time_s"] for r in rows], dist.get_world_size(), "all_reduce"
    )
    return {**fit, "rows": rows, "wrong": sum(r["wrong"] for r in rows)}


def alpha_beta_worker(spec: dict) -> dict:
    """torchrun worker of ``calibration``: :func:`all_reduce_alpha_beta` of this group."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(spec.get("threads_per_rank", 1))
    fit = all_reduce_alpha_beta(device=spec["device"], sizes_bytes=spec["sizes_bytes"], iters=spec["iters"])
    return {
        **fit,
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        "benchmark_version": BENCHMARK_VERSION["collectives"],
    }


def collective_benchmark_worker(spec: dict) -> dict:
    """torchrun worker (``launch.run``): :func:`benchmark` over the spec's ops and sizes."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(spec.get("threads_per_rank", 1))
    rows = benchmark(
        ops=spec["ops"],
        sizes_bytes=spec["sizes_bytes"],
        warmup=spec["warmup"],
        iters=spec["iters"],
        device=spec["device"],
    )
    return {
        "world_size": dist.get_world_size(),
        "device": spec["device"],
        "rows": rows,
        "benchmark_version": BENCHMARK_VERSION["collectives"],
    }
