"""Measurement of the ``overlap`` study (torch, headless), on every rank under torchrun.

First the collectives benchmark (``collectives.collective_benchmark_worker``: sizes,
algbw/busbw, a checked result). Then ``overlap_worker``: the chunked-overlap pattern for
real. Each chunk is produced by compute, then all-reduced with ``async_op=True`` while the
next chunk computes; completion times come from the work's future. Three runs per k:
overlapped, compute only, communication only; exposed communication = overlapped − compute
only. Compute is either *real* (matmuls) or *emulated*: a timed sleep of the same duration,
which occupies time but no core — what an accelerator's kernels look like to the host. On
the 2-core box real compute and gloo's communication threads fight for the same cores, so
only the emulated mode can show overlap there; every emulated number is labelled as such.
``measure`` returns plain records (JSON) that ``analysis`` reads, here or elsewhere.
"""

from __future__ import annotations

import time

from ... import calibration, collectives, hardware
from .params import Params

BENCHMARK_VERSION = {"overlap": 1}


def _calibrate_matmul(size: int = 256) -> float:
    import torch

    a = torch.randn(size, size)
    for _ in range(3):
        a @ a
    t0 = time.perf_counter()
    for _ in range(10):
        a @ a
    return (time.perf_counter() - t0) / 10


def overlap_worker(spec: dict) -> dict:
    """Runs on every rank: sweep k for each compute mode; returns medians and a timeline."""
    import torch
    import torch.distributed as dist

    from ...launch import reduce_scalar
    from ...timing import progress, summarize, synchronize

    torch.set_num_threads(1)
    rank, n = dist.get_rank(), dist.get_world_size()
    device = spec["device"]
    numel = spec["overlap_bytes"] // 4
    mm_size = 256
    mm = torch.randn(mm_size, mm_size, device=device)
    t_mm = _calibrate_matmul(mm_size) if device == "cpu" else None
    out = {"world_size": n, "device": device, "rows": [], "timelines": {}, "wrong": 0}

    def compute(mode, seconds):
        if mode == "emulated":
            time.sleep(seconds)  # occupies time, not a core: an accelerator kernel as the host sees it
            return
        if device == "cuda":  # real kernels: as many matmuls as fill the time at ~60% of the ceiling
            reps = max(1, int(seconds / (2 * mm_size**3 / 2e14)))
        else:
            reps = max(1, round(seconds / t_mm))
        for _ in range(reps):
            mm @ mm

    def one_step(mode, k, with_compute, with_comm, record=None):
        chunks = [torch.full((numel // k,), float(rank + 1), device=device) for _ in range(k)]

        def step():
            t_start = time.perf_counter()
            works = []
            for i, chunk in enumerate(chunks):
                c0 = time.perf_counter()
                if with_compute:
                    compute(mode, spec["compute_s"] / k)
                    synchronize(device)
                c1 = time.perf_counter()
                if with_comm:
                    work = dist.all_reduce(chunk, async_op=True)
                    if record is not None:
                        ev = {
                            "chunk": i,
                            "compute_start_s": c0 - t_start,
                            "compute_end_s": c1 - t_start,
                            "comm_start_s": time.perf_counter() - t_start,
                        }
                        record.append(ev)
                        work.get_future().then(
                            lambda fut, ev=ev: ev.__setitem__("comm_end_s", time.perf_counter() - t_start)
                        )
                    works.append(work)
                elif record is not None:
                    record.append(
                        {"chunk": i, "compute_start_s": c0 - t_start, "compute_end_s": c1 - t_start}
                    )
            for w in works:
                w.wait()

        elapsed, _ = collectives.slowest_rank_time(step, device)
        wrong = 0
        if with_comm:
            expected = n * (n + 1) / 2
            wrong = sum(int((c != expected).sum()) for c in chunks)
        return elapsed, wrong

    for mode in spec["modes"]:
        for k in progress(spec["chunks"], f"overlap {mode}") if rank == 0 else spec["chunks"]:
            one_step(mode, k, True, True)  # warm-up
            result = {}
            for variant, with_compute, with_comm in (
                ("overlapped", True, True),
                ("compute_only", True, False),
                ("comm_only", False, True),
            ):
                times = []
                for _ in range(spec["reps"]):
                    t, wrong = one_step(mode, k, with_compute, with_comm)
                    times.append(t)
                    out["wrong"] += wrong
                result[variant] = times
            timeline = []
            one_step(mode, k, True, True, record=timeline)
            time.sleep(0.01)  # let the last completion callback run
            out["timelines"][f"{mode}:{k}"] = timeline
            row = {"mode": mode, "k": k}
            for variant, times in result.items():
                t = summarize(times)
                row[f"{variant}_s"] = t.median_s
                row[f"{variant}_q1_s"] = t.q1_s
                row[f"{variant}_q3_s"] = t.q3_s
                row[f"{variant}_times_s"] = t.times_s
            row["exposed_comm_s"] = row["overlapped_s"] - row["compute_only_s"]
            out["rows"].append(row)
    out["wrong"] = int(reduce_scalar(out["wrong"], "sum"))
    return out


def measure(p: Params) -> dict:
    """The collectives benchmark and the overlap sweep, each one torchrun job of ``p.nproc`` ranks."""
    from ...launch import run

    p = p.prepared()
    sizes = [2**i for i in range(p.min_size_log2, p.max_size_log2 + 1)]
    rec = {
        "study": "overlap",
        "params": p.to_dict(),
        "device": p.device,
        "device_name": hardware.device_name(p.device),
        "benchmark_version": {**BENCHMARK_VERSION, **collectives.BENCHMARK_VERSION},
    }
    for key, target, spec in (
        (
            "collectives",
            "mfulab.collectives:collective_benchmark_worker",
            {"ops": list(p.ops), "sizes_bytes": sizes, "warmup": p.warmup, "iters": p.iters},
        ),
        (
            "overlap",
            "mfulab.studies.overlap.bench:overlap_worker",
            {
                "overlap_bytes": p.overlap_bytes,
                "compute_s": p.compute_s,
                "chunks": list(p.chunks),
                "modes": list(p.modes),
                "reps": p.reps,
            },
        ),
    ):
        rec[key] = run(
            target, {**spec, "device": p.device}, nproc=p.nproc, device=p.device, timeout_s=p.timeout_s
        )
    # the all-reduce α–β this machine's calibration fitted for this backend and rank count
    key = calibration.collectives_key(p.device, p.nproc)
    cal = calibration.get(p.calibration, device=p.device, parts=[key])
    rec["alpha_beta"], rec["calibration"] = cal[key], cal["_meta"]
    return rec
