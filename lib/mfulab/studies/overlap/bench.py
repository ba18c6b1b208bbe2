"""Measurement of the ``overlap`` study (torch, headless), on every rank under torchrun.

First the collectives benchmark (``collectives.collective_benchmark_worker``: sizes,
algbw/busbw, a checked result). Then ``overlap_worker``: the chunked-overlap pattern for
real. Each chunk is produced by compute, then all-reduced with ``async_op=True`` while the
next chunk computes. Three variants per chunk count k: *overlapped*, *compute only* and
*communication only*; exposed communication = overlapped − compute only.

Every (variant, k) of a compute mode is timed **interleaved** (``timing.interleaved``: each
round runs every one of them once, in an order shuffled per round with the same seed on
every rank, so the ranks issue the same collectives), which makes the rounds paired samples
for ``timing.compare_timings``. Each call records the *slowest rank's* step time
(``collectives.slowest_rank_time``: the timer of ``interleaved`` itself would include the
barrier) and, on gloo, the **communication time in flight**: the length of the union of the
intervals from issuing each chunk's all-reduce to its completion (the work's future
callback). That is the communication time per step of claim A5, measured inside the
overlapped step in each compute mode. NCCL's futures complete when the work is enqueued,
not when it finishes, so on CUDA every interval comes from CUDA events instead
(:func:`cuda_step`): compute on the current stream, each all-reduce issued on a side stream
that waits for its chunk, with events around it (the collective's completion, not its
enqueue), and nothing synchronised between chunks (``torch.cuda.synchronize`` would also
wait for NCCL's stream and serialise the overlap). The compute time inside the overlapped
step, against the compute-only step, is the slowdown NCCL's kernels cause (they take SMs and
memory bandwidth).

Compute is either *real* (matmuls: 128² fp32 on a CPU; on CUDA 4096² bf16, timed with
events, sized to the target time from a calibration on the device) or *emulated*: a sleep
until chunk i's deadline i·C/k, which occupies time but no core. Its total C is
``compute_over_comm`` × the tensor's one-shot all-reduce, measured at the start of the job.
Emulation is the ideal accelerator, one whose collectives take nothing from compute; NCCL's
collectives are kernels that occupy SMs and memory bandwidth, so on a GPU the overlapped
compute slows down and the emulated case is an upper bound on what overlap hides. On the
2-core box real compute and gloo's communication threads fight for the same cores; every
emulated number is labelled as such. ``measure`` returns plain records (JSON) that
``analysis`` reads, here or elsewhere.
"""

from __future__ import annotations

import os
import time
from functools import partial

import numpy as np

from mfulab.measure import calibration, collectives, host
from mfulab.studies.overlap import tp_layout
from mfulab.studies.overlap.cuda_bench import CUDA_MM_SIZE, calibrate_matmul_sizes_cuda, cuda_step
from mfulab.studies.overlap.params import Params
from mfulab.studies.overlap.stated import A3_K

# 5: A2's TP MLP collectives and A18's ratio sweep; 6: A3's duty cycles and A5's padded calls
BENCHMARK_VERSION = {"overlap": 8}  # 8: A5's regime pass compares k = 4 with a5_regime_chunks
VARIANTS = ("overlapped", "compute_only", "comm_only")
DUTY = "duty:"  # A3's contention sweep: "duty:0.5" computes for half of each interval, then waits
PADDED = "comm_padded"  # A5's intervention: the k chunks' all-reduces plus pad_calls one-element calls
MM_SIZE = 128  # real compute's matmul on CPU: small, so that a chunk's compute is a whole number of them
TIMELINE_CANDIDATES = 3  # extra overlapped steps per (mode, k), the drawn one nearest the median


def _calibrate_matmul(size: int = MM_SIZE) -> float:
    import torch

    a = torch.randn(size, size)
    for _ in range(3):
        a @ a
    t0 = time.perf_counter()
    for _ in range(20):
        a @ a
    return (time.perf_counter() - t0) / 20


def matmul_plan(seconds: float, per_size_s: dict[int, float]) -> tuple[int, int]:
    """(size, count): matmuls of the largest size whose one call fits in ``seconds`` (the
    smallest size when none does), as many as make up ``seconds``: a chunk's compute stays near
    its share at every chunk count, instead of growing with k once the share is below one call."""
    fitting = [size for size, t in per_size_s.items() if t <= seconds]
    size = max(fitting) if fitting else min(per_size_s)
    return size, max(1, round(seconds / per_size_s[size]))


def union_length_s(spans) -> float:
    """Total length of the union of ``[start, end]`` intervals: the time during which at
    least one all-reduce was in flight (overlapping calls count once)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def overlap_worker(spec: dict) -> dict:
    """Runs on every rank: for each compute mode, every (variant, k) interleaved over
    ``spec["rounds"]`` rounds; returns per-round samples (paired) and a timeline per k."""
    import torch
    import torch.distributed as dist

    from mfulab.measure.launch import reduce_scalar
    from mfulab.measure.timing import interleaved, synchronize

    torch.set_num_threads(1)
    rank, n = dist.get_rank(), dist.get_world_size()
    device = spec["device"]
    numel = spec["overlap_bytes"] // 4
    if device == "cuda":
        per_size = calibrate_matmul_sizes_cuda()
        mats = {size: torch.randn(size, size, device=device, dtype=torch.bfloat16) for size in per_size}
        t_mm, comm_stream = per_size[CUDA_MM_SIZE], torch.cuda.Stream()
    else:
        mm, t_mm, comm_stream = torch.randn(MM_SIZE, MM_SIZE), _calibrate_matmul(), None
        per_size, mats = {MM_SIZE: t_mm}, {MM_SIZE: mm}
    in_flight_measured = True  # gloo: futures complete when the work does; CUDA: events
    pad_calls = 0  # set for A5's intervention below
    out = {"world_size": n, "device": device, "rounds": spec["rounds"], "rows": [], "timelines": {}}
    # the CPU budget of real compute, printed with A3 (round seventeen's reader): one intra-op thread
    # per rank for the matmuls; gloo's own threads are on top of it, on the same cores
    out["intra_op_threads"], out["usable_cores"] = torch.get_num_threads(), len(os.sched_getaffinity(0))
    out["tp_mlp"] = tp_layout.tp_mlp_collectives(device)  # A2: where tensor parallelism's all-reduce sits
    out["in_flight_measured"], wrong, compute_s = in_flight_measured, 0, 0.0
    out["matmul_s"], out["matmul_s_per_size"] = t_mm, {str(k): v for k, v in per_size.items()}

    def compute(mode, seconds, deadline):
        if mode.startswith(DUTY):  # A3's contention sweep: real matmuls for a share, then the wait
            size, count = matmul_plan(float(mode[len(DUTY) :]) * seconds, per_size)
            for _ in range(count):
                mats[size] @ mats[size]
            mode = "emulated"
        if mode == "emulated":
            # occupies time, not a core: the ideal accelerator's kernels. Sleeping until a
            # deadline (chunk i ends at i·C/k) keeps k oversleeps from adding up, and lets the
            # host's issuing of the all-reduces overlap the "device" compute, as on a GPU.
            time.sleep(max(0.0, deadline - time.perf_counter()))
            return
        size, count = matmul_plan(seconds, per_size)  # calibrated on this device
        for _ in range(count):
            mats[size] @ mats[size]

    def one_step(mode, k, variant, record=None):
        """One step; returns (slowest-rank step time, this rank's comm time in flight, wrong)."""
        with_compute, with_comm = variant not in ("comm_only", PADDED), variant != "compute_only"
        chunks = [torch.full((numel // k,), float(rank + 1), device=device) for _ in range(k)]
        if variant == PADDED:  # A5's intervention: k chunks, then calls that carry one element each
            chunks += [torch.full((1,), float(rank + 1), device=device) for _ in range(pad_calls)]
        events = []
        if device == "cuda":
            step, read = cuda_step(
                chunks,
                lambda t_start, i: compute(mode, compute_s / k, t_start + (i + 1) * compute_s / k),
                with_compute,
                with_comm,
                comm_stream,
            )
            elapsed, _ = collectives.slowest_rank_time(step, device)
            events = read()
            in_flight = (
                union_length_s((e["comm_start_s"], e["comm_end_s"]) for e in events)
                if with_comm
                else float("nan")
            )
            busy = (
                sum(e["compute_end_s"] - e["compute_start_s"] for e in events)
                if with_compute
                else float("nan")
            )
            n_wrong = sum(int((c != n * (n + 1) / 2).sum()) for c in chunks) if with_comm else 0
            if record is not None:
                record.extend(events)
            return elapsed, in_flight, n_wrong, busy

        def step():
            t_start = time.perf_counter()
            works = []
            for i, chunk in enumerate(chunks):
                c0 = time.perf_counter()
                if with_compute:
                    compute(mode, compute_s / k, t_start + (i + 1) * compute_s / k)
                    synchronize(device)
                ev = {
                    "chunk": i,
                    "compute_start_s": c0 - t_start,
                    "compute_end_s": time.perf_counter() - t_start,
                }
                events.append(ev)
                if with_comm:
                    ev["comm_start_s"] = time.perf_counter() - t_start
                    work = dist.all_reduce(chunk, async_op=True)
                    work.get_future().then(
                        lambda fut, ev=ev: ev.__setitem__("comm_end_s", time.perf_counter() - t_start)
                    )
                    works.append(work)
            for w in works:
                w.wait()

        elapsed, _ = collectives.slowest_rank_time(step, device)
        in_flight = float("nan")
        if with_comm and in_flight_measured:
            for _ in range(100):  # the completion callbacks ran before wait() returned; be safe
                if all("comm_end_s" in e for e in events):
                    break
                time.sleep(0.001)
            in_flight = union_length_s((e["comm_start_s"], e["comm_end_s"]) for e in events)
        n_wrong = sum(int((c != n * (n + 1) / 2).sum()) for c in chunks) if with_comm else 0
        if record is not None:
            record.extend(events)
        return elapsed, in_flight, n_wrong, float("nan")

    def timed(mode, k, variant, sink):
        nonlocal wrong
        elapsed, in_flight, n_wrong, busy = one_step(mode, k, variant)
        sink.append((elapsed, in_flight, busy))
        wrong += n_wrong

    # compute time: a multiple of the one-shot all-reduce (slowest rank: the same on every rank)
    for _ in range(2):
        one_step(None, 1, "comm_only")
    one_shot = sorted(one_step(None, 1, "comm_only")[0] for _ in range(9))[4]  # the median
    compute_s = spec["compute_over_comm"] * one_shot
    out["one_shot_comm_s"], out["compute_s"] = one_shot, compute_s

    def run_interleaved(mode, keys, n_rounds, desc):
        """Every (variant, k) of ``keys`` in ``mode``, interleaved over ``n_rounds`` rounds; the
        timed rounds' samples per key (the warm-up calls dropped). number=1: one call per block on
        every rank (a block size chosen per rank from its own warm-up could differ between ranks
        and desynchronise their collectives)."""
        sinks = {key: [] for key in keys}
        fns = {f"{v}:{k}": partial(timed, mode, k, v, sink) for (v, k), sink in sinks.items()}
        interleaved(
            fns,
            rounds=n_rounds,
            device=device,
            num_threads=1,
            warmup=1,
            number=1,
            seed=spec["seed"],
            desc=desc,
        )
        return {key: sink[-n_rounds:] for key, sink in sinks.items()}

    for mode in spec["modes"]:
        keys = [(v, k) for k in spec["chunks"] for v in VARIANTS]
        rounds = run_interleaved(mode, keys, spec["rounds"], f"overlap {mode} (rank {rank})")
        # the slowest rank's in-flight time of every round, in one all-reduce
        in_flight = torch.tensor([[s[1] for s in rounds[key]] for key in keys], dtype=torch.float64)
        in_flight = in_flight.to(device)  # NCCL reduces CUDA tensors only
        dist.all_reduce(in_flight, op=dist.ReduceOp.MAX)
        in_flight = dict(zip(keys, in_flight.cpu().tolist()))
        for k in spec["chunks"]:
            row = {"mode": mode, "k": k}
            for v in VARIANTS:
                row[f"{v}_times_s"] = [s[0] for s in rounds[(v, k)]]
                if v != "compute_only" and in_flight_measured:
                    row[f"{v}_in_flight_times_s"] = in_flight[(v, k)]
                if device == "cuda" and v != "comm_only":  # compute busy time: NCCL's cost to compute
                    row[f"{v}_compute_busy_s"] = [s[2] for s in rounds[(v, k)]]
            out["rows"].append(row)
            # the drawn timeline: of a few extra steps (the same count on every rank), the one
            # whose step time is nearest the median of the timed rounds, with its own step time
            median_s = float(np.median(row["overlapped_times_s"]))
            candidates = []
            for _ in range(TIMELINE_CANDIDATES):
                events = []
                candidates.append((one_step(mode, k, "overlapped", record=events)[0], events))
            step_s, events = min(candidates, key=lambda c: abs(c[0] - median_s))
            out["timelines"][f"{mode}:{k}"] = events
            out.setdefault("timeline_step_s", {})[f"{mode}:{k}"] = step_s
    # A3's contention sweep (CPU only): serial and k = A3_K at each duty cycle, interleaved
    out["a3_duty_rows"] = []
    for share in spec.get("a3_duty_cycles", []) if device == "cpu" else []:
        keys = [(v, k) for k in (1, A3_K) for v in VARIANTS]
        samples = run_interleaved(
            f"{DUTY}{share:g}", keys, spec["rounds"], f"A3 duty {share:g} (rank {rank})"
        )
        out["a3_duty_rows"].append(
            {"duty": share, **{f"{v}:{k}": [x[0] for x in s] for (v, k), s in samples.items()}}
        )
    # A5: the step's all-reduces alone at the two chunk counts it compares, in rounds of their own:
    # the sweep's rounds spread every k over one interval, too few to read a 16-vs-4 ratio whose
    # rounds are bimodal on a shared CPU (a 16-chunk step runs at the 4-chunk time in about a third).
    # The intervention rides in the same rounds: k=4 followed by 12 calls of one element
    # each (PADDED), the extra calls' fixed cost with none of their bytes: if the per-call cost is
    # why 16 chunks take longer, it takes as long as k=16 (article A §6.3's mechanism, tested)
    a5_ks = [k for k in (4, 16) if k in spec["chunks"]]
    if len(a5_ks) == 2 and spec.get("a5_rounds", 0) >= 2:
        pad_calls = a5_ks[1] - a5_ks[0]
        keys = [("comm_only", k) for k in a5_ks] + [(PADDED, a5_ks[0])]
        samples = run_interleaved("emulated", keys, spec["a5_rounds"], f"A5 k=4 vs k=16 (rank {rank})")
        out["a5_comm_only_times_s"] = {str(k): [x[0] for x in samples[("comm_only", k)]] for k in a5_ks}
        out["a5_padded_times_s"] = [x[0] for x in samples[(PADDED, a5_ks[0])]]
        out["a5_padded_calls"] = pad_calls
        # the same three in the article's regime (a5_regime_bytes: a 16-chunk call's per-call
        # share near the article's scale's, bandwidth-dominated), in rounds of their own
        if spec.get("a5_regime_bytes"):
            numel = spec["a5_regime_bytes"] // 4  # the chunks of one_step are cut from numel
            regime_ks = [a5_ks[0], spec.get("a5_regime_chunks", a5_ks[1])]
            pad_calls = regime_ks[1] - regime_ks[0]
            regime_keys = [("comm_only", k) for k in regime_ks] + [(PADDED, regime_ks[0])]
            samples = run_interleaved(
                "emulated",
                regime_keys,
                spec["a5_rounds"],
                f"A5 at {spec['a5_regime_bytes'] >> 20} MiB (rank {rank})",
            )
            out["a5_regime"] = {
                "bytes": spec["a5_regime_bytes"],
                "k_hi": regime_ks[1],
                "comm_only_times_s": {str(k): [x[0] for x in samples[("comm_only", k)]] for k in regime_ks},
                "padded_times_s": [x[0] for x in samples[(PADDED, regime_ks[0])]],
                "padded_calls": pad_calls,
            }
            numel = spec["overlap_bytes"] // 4
    # A18: the exposed share against compute ÷ communication, emulated compute (a timed wait costs
    # nothing of the communication), serial (k = 1) and chunked (k = a18_k), interleaved per ratio
    out["a18_rows"], measured_compute_s = [], compute_s
    for ratio in spec.get("a18_ratios", []):
        compute_s = ratio * one_shot
        keys = [(v, k) for k in (1, spec["a18_k"]) for v in ("overlapped", "compute_only")]
        samples = run_interleaved(
            "emulated", keys, spec["a18_rounds"], f"A18 compute ÷ comm {ratio:g} (rank {rank})"
        )
        for (v, k), sink in samples.items():
            out["a18_rows"].append(
                {"compute_over_comm": ratio, "k": k, "variant": v, "times_s": [x[0] for x in sink]}
            )
    compute_s = measured_compute_s
    out["wrong"] = int(reduce_scalar(wrong, "sum"))
    return out


def measure(p: Params) -> dict:
    """The collectives benchmark and the overlap sweep, each one torchrun job of ``p.nproc`` ranks."""
    from mfulab.measure.launch import run

    p = p.prepared()
    sizes = [2**i for i in range(p.min_size_log2, p.max_size_log2 + 1)]
    rec = {
        "study": "overlap",
        "params": p.to_dict(),
        "device": p.device,
        "device_name": host.device_name(p.device),
        "benchmark_version": {**BENCHMARK_VERSION, **collectives.BENCHMARK_VERSION},
    }
    for key, target, spec in (
        (
            "collectives",
            "mfulab.measure.collectives:collective_benchmark_worker",
            {"ops": list(p.ops), "sizes_bytes": sizes, "warmup": p.warmup, "iters": p.iters},
        ),
        (
            "overlap",
            "mfulab.studies.overlap.bench:overlap_worker",
            {
                "overlap_bytes": p.overlap_bytes,
                "compute_over_comm": p.compute_over_comm,
                "chunks": list(p.chunks),
                "modes": list(p.modes),
                "rounds": p.rounds,
                "seed": p.seed,
                "a18_ratios": list(p.a18_compute_over_comm),
                "a18_k": p.a18_k,
                "a18_rounds": p.a18_rounds,
                "a5_rounds": p.a5_rounds,
                "a5_regime_bytes": p.a5_regime_bytes,
                "a5_regime_chunks": p.a5_regime_chunks,
                "a3_duty_cycles": list(p.a3_duty_cycles),
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
    # the host's last-level cache: below it a call's buffers stay cache-resident (the busbw figure)
    rec["last_level_cache_bytes"] = calibration.last_level_cache_bytes("cpu")
    # the cores the ranks could use: more ranks than cores take turns on them (oversubscribed)
    rec["usable_cpus"] = host.usable_cpus()
    return rec
