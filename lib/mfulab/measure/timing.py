"""Timing harness, statistics and comparisons, and the device's measured ceilings.

How timings are taken (docs/architecture.md, measurement rules):
- ``torch.utils.benchmark.Timer`` with ``num_threads`` set explicitly (its default is 1),
  after explicit warm-up calls; the Timer synchronises CUDA around each block.
- ``blocked_autorange`` repeats the statement in blocks until ``min_run_time_s``; each block
  gives one per-call time, and we report the median of blocks with its IQR and count.
- A/B comparisons are timed **interleaved** (:func:`interleaved`): in each round every
  variant runs one block, in an order drawn at random per round, so that drift (thermal,
  frequency, a neighbour process) hits both sides. The rounds are paired samples.
- A comparison is a ratio of medians with a bootstrap interval, resampling whole rounds when
  the samples are paired. The interval is then widened by :data:`RUN_TO_RUN_DRIFT`, the
  relative drift of a ratio between fresh runs of the same profile, which a single process
  cannot see (``make stability`` measures it: ``results/<machine>/<study>/stability.json``).
  If the widened interval includes 1.0 the verdict is ``inconclusive`` (*inconclusive on this
  machine*), never a win.

Ceilings, in the spirit of stas00's MAMF finder (ml-engineering, ``mamf-finder.py``):
the best median achieved FLOP/s over a sweep of matmul shapes is the practical maximum a
real kernel reaches on this device; it is the MFU denominator on CPUs, which have no
datasheet peak here. Memory bandwidth is a large tensor copy: bytes read + bytes written.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np

BENCHMARK_VERSION = {"time_fn": 1, "matmul_ceiling": 2, "memory_bandwidth": 2}

# Assumed relative drift of a timing ratio between two fresh runs of one profile on one machine:
# ``make stability`` measured up to a few percent on the 2-core box (results/cpu-2c/*/stability.json),
# often past one run's bootstrap interval. Every comparison widens its interval by it on each side.
RUN_TO_RUN_DRIFT = 0.05


def progress(iterable, desc: str):
    """A tqdm progress bar in the log (stderr); plain iteration inside a Jupyter kernel (the
    executed notebook is a record, not a log: the runner reports progress cell by cell) and
    a one-line note where tqdm is not installed (a node that runs only ``mfulab measure``)."""
    if "ipykernel" in sys.modules:
        return iterable
    try:
        from tqdm import tqdm
    except ImportError:
        print(f"{desc} ...", file=sys.stderr, flush=True)
        return iterable
    return tqdm(iterable, desc=desc, mininterval=1.0)


@dataclass
class Timing:
    """Per-call times of one benchmark: median, quartiles and every sample (seconds)."""

    label: str
    median_s: float
    q1_s: float
    q3_s: float
    n: int
    times_s: list = field(default_factory=list)
    paired: bool = False  # times_s[i] is round i of an interleaved run (see ``interleaved``)

    @property
    def iqr_s(self) -> float:
        return self.q3_s - self.q1_s

    def to_dict(self, with_samples: bool = False) -> dict:
        d = asdict(self)
        d["iqr_s"] = self.iqr_s
        if not with_samples:
            d.pop("times_s")
        return d


def summarize(times_s, label: str = "", *, paired: bool = False) -> Timing:
    """Median, quartiles and count of a list of per-call times (``paired``: one per round of
    an interleaved run, in round order)."""
    arr = np.asarray(list(times_s), dtype=float)
    if arr.size == 0:
        raise ValueError("no samples to summarize")
    q1, med, q3 = np.percentile(arr, [25, 50, 75])
    return Timing(
        label=label,
        median_s=float(med),
        q1_s=float(q1),
        q3_s=float(q3),
        n=int(arr.size),
        times_s=[float(t) for t in arr],
        paired=paired,
    )


def synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def time_fn(
    fn,
    *,
    label: str = "",
    device: str = "cpu",
    num_threads: int | None = None,
    warmup: int = 3,
    min_run_time_s: float = 0.5,
    min_samples: int = 5,
) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``Timer.blocked_autorange``; slow
    statements get extra blocks until there are ``min_samples`` (a spread needs several)."""
    import torch
    from torch.utils import benchmark

    threads = num_threads or torch.get_num_threads()
    for _ in range(warmup):
        fn()
    synchronize(device)
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads, label=label)
    measurement = timer.blocked_autorange(min_run_time=min_run_time_s)
    times = list(measurement.times)
    while len(times) < min_samples:
        times.extend(timer.timeit(measurement.number_per_run).times)
    return summarize(times, label=label)


def interleaved(
    fns: dict,
    *,
    rounds: int = 15,
    device: str = "cpu",
    num_threads: int | None = None,
    warmup: int = 2,
    min_block_s: float = 0.02,
    number: int | None = None,
    seed: int = 0,
    desc: str | None = None,
) -> dict[str, Timing]:
    """Time every callable of ``fns`` ({label: fn}) interleaved: ``rounds`` rounds, each
    running every variant once as a block of ``number`` calls (chosen per variant after
    warm-up so that a block lasts ≥ ``min_block_s``), in an order shuffled per round with a
    seeded generator. ``number`` fixes the calls per block for every variant instead (ranks
    of a collective job must all run the same count). Returns ``{label: Timing}`` whose
    ``times_s[i]`` is round ``i``'s per-call time (``paired=True``): :func:`compare_timings`
    resamples whole rounds."""
    import torch

    if len(fns) < 1 or rounds < 2:
        raise ValueError("interleaved needs at least one variant and two rounds")
    if number is not None and number < 1:
        raise ValueError(f"number must be at least 1, got {number}")
    threads = num_threads or torch.get_num_threads()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        calls = {}
        for label, fn in fns.items():
            for _ in range(warmup):
                fn()
            synchronize(device)
            if number is not None:
                calls[label] = number
                continue
            start = time.perf_counter()
            fn()
            synchronize(device)
            once_s = max(time.perf_counter() - start, 1e-9)
            calls[label] = max(1, int(np.ceil(min_block_s / once_s)))
        rng = np.random.default_rng(seed)
        labels = list(fns)
        samples = {label: [] for label in labels}
        for _ in progress(range(rounds), desc or f"interleaved {' / '.join(labels)}"):
            for i in rng.permutation(len(labels)):
                label = labels[i]
                fn, n = fns[label], calls[label]
                synchronize(device)
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                synchronize(device)
                samples[label].append((time.perf_counter() - start) / n)
    finally:
        torch.set_num_threads(previous_threads)
    return {label: summarize(times, label=label, paired=True) for label, times in samples.items()}


@dataclass
class Comparison:
    """``ratio`` = baseline median / candidate median (>1: the candidate is faster).

    ``ratio_lo``/``ratio_hi`` is the bootstrap interval widened by ``run_to_run_drift``
    (``within_lo``/``within_hi``: the bootstrap interval of this run alone)."""

    baseline: str
    candidate: str
    ratio: float
    ratio_lo: float
    ratio_hi: float
    confidence: float
    verdict: str  # faster | slower | inconclusive
    within_lo: float = float("nan")
    within_hi: float = float("nan")
    run_to_run_drift: float = 0.0
    paired: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def _bootstrap_medians(samples: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return np.median(samples[idx], axis=1)


def compare_timings(
    baseline: Timing,
    candidate: Timing,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    run_to_run_drift: float = RUN_TO_RUN_DRIFT,
) -> Comparison:
    """Speed-up of ``candidate`` over ``baseline``: the ratio of medians with a bootstrap
    interval, widened by ``run_to_run_drift`` on each side (see the module docstring).

    Paired timings (both from one :func:`interleaved` run, equal round counts) are resampled
    by whole rounds, so that a slow round counts on both sides; otherwise each side is
    resampled on its own. ``faster``/``slower`` only when the widened interval is on one side
    of 1.0."""
    a = np.asarray(baseline.times_s, dtype=float)
    b = np.asarray(candidate.times_s, dtype=float)
    if a.size < 2 or b.size < 2:
        raise ValueError("compare needs at least two samples on each side")
    if run_to_run_drift < 0:
        raise ValueError(f"run_to_run_drift must be ≥ 0, got {run_to_run_drift}")
    rng = np.random.default_rng(seed)
    paired = bool(baseline.paired and candidate.paired and a.size == b.size)
    idx_a = rng.integers(0, a.size, size=(n_boot, a.size))
    idx_b = idx_a if paired else rng.integers(0, b.size, size=(n_boot, b.size))
    ratios = _bootstrap_medians(a, idx_a) / _bootstrap_medians(b, idx_b)
    tail = (1 - confidence) / 2 * 100
    within_lo, within_hi = (float(x) for x in np.percentile(ratios, [tail, 100 - tail]))
    lo, hi = within_lo / (1 + run_to_run_drift), within_hi * (1 + run_to_run_drift)
    ratio = float(np.median(a) / np.median(b))
    verdict = "faster" if lo > 1 else "slower" if hi < 1 else "inconclusive"
    return Comparison(
        baseline.label,
        candidate.label,
        ratio,
        lo,
        hi,
        confidence,
        verdict,
        within_lo=within_lo,
        within_hi=within_hi,
        run_to_run_drift=run_to_run_drift,
        paired=paired,
    )


def torch_dtype(name: str):
    import torch

    table = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if name not in table:
        raise ValueError(f"dtype must be one of {', '.join(table)}; got {name!r}")
    return table[name]


def autocast(device: str, dtype: str):
    """The mixed-precision context of a training step in ``dtype``: fp32 runs as it is; bf16 and
    fp16 run the forward under ``torch.autocast`` (low-precision matmuls, fp32 weights and
    reductions), as a mixed-precision training step does."""
    import contextlib

    import torch

    if dtype in ("fp32", "tf32"):
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=torch_dtype(dtype))


def dtype_label(dtype: str) -> str:
    """How a row names the precision it ran in: ``fp32`` or e.g. ``bf16 autocast``."""
    return dtype if dtype in ("fp32", "tf32") else f"{dtype} autocast"


TF32_OVERRIDES = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")  # NGC images set the first


def tf32_overrides() -> dict[str, str]:
    """The variables that make cuBLAS run fp32 matmuls as TF32 whatever ``allow_tf32`` says."""
    import os

    return {k: os.environ[k] for k in TF32_OVERRIDES if k in os.environ}


def tf32_state(device: str) -> bool | None:
    """Whether fp32 matmuls may use TF32 now (None on CPU): ``NVIDIA_TF32_OVERRIDE=0`` turns it off
    in cuBLAS, ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (NVIDIA's containers) on, else ``allow_tf32``."""
    if device != "cuda":
        return None
    import torch

    env, on = tf32_overrides(), bool(torch.backends.cuda.matmul.allow_tf32)
    return env.get("NVIDIA_TF32_OVERRIDE") != "0" and (on or env.get(TF32_OVERRIDES[0]) == "1")


def matmul_ceiling(
    *,
    device: str = "cpu",
    dtype: str = "fp32",
    sizes=(256, 512, 1024),
    min_run_time_s: float = 0.3,
    num_threads: int | None = None,
    max_call_s: float | None = None,
) -> dict:
    """Best achieved FLOP/s of square matmuls ``size³`` over ``sizes`` (MAMF-style ceiling).

    Returns ``{"best_flops_per_s", "best_size", "dtype", "rows": [...], "skipped_sizes",
    "skipped_because"}``; each row has the size, FLOPs (2·m·n·k), median/IQR time and achieved
    FLOP/s at the median. ``max_call_s``: a size whose first call takes longer is not timed, nor
    any larger one (bf16 emulated on a CPU without AVX512_BF16 or AMX); the smallest always is."""
    import torch

    torch_dt = torch_dtype(dtype)
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32 if device == "cuda" else None
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    rows, skipped, because = [], [], ""
    try:
        for size in progress(sizes, f"matmul ceiling {dtype}"):
            a = torch.randn(size, size, device=device, dtype=torch_dt)
            b = torch.randn(size, size, device=device, dtype=torch_dt)
            flops = 2.0 * size**3
            if max_call_s is not None and rows:
                t0 = time.perf_counter()
                torch.mm(a, b)
                if device == "cuda":
                    torch.cuda.synchronize()
                one_call_s = time.perf_counter() - t0
                if one_call_s > max_call_s:
                    skipped = [n for n in sizes if n >= size]
                    because = f"one {size}³ {dtype} matmul took {one_call_s:.1f} s (> {max_call_s:g} s): "
                    because += f"{', '.join(map(str, skipped))} not timed"
                    break
            t = time_fn(
                lambda a=a, b=b: torch.mm(a, b),
                label=f"mm{size}",
                device=device,
                num_threads=num_threads,
                min_run_time_s=min_run_time_s,
            )
            rows.append(
                {"size": size, "flops": flops, **t.to_dict(), "achieved_flops_per_s": flops / t.median_s}
            )
    finally:
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    best = max(rows, key=lambda r: r["achieved_flops_per_s"])
    return {
        "best_flops_per_s": best["achieved_flops_per_s"],
        "best_size": best["size"],
        "dtype": dtype,
        "device": device,
        "benchmark_version": BENCHMARK_VERSION["matmul_ceiling"],
        "tf32_overrides": tf32_overrides(),  # set: an "fp32" ceiling on CUDA is TF32's
        "rows": rows,
        "skipped_sizes": skipped,
        "skipped_because": because,
    }


def memory_bandwidth(
    *,
    device: str = "cpu",
    sizes_bytes=(64 << 20,),
    min_run_time_s: float = 0.3,
    num_threads: int | None = None,
) -> dict:
    """Bytes/s of ``dst.copy_(src)`` (each copy reads and writes ``size`` bytes) at each size,
    and the *plateau*: the median over the sizes of each size's median. With every size well
    beyond the last-level cache (``calibration``) the plateau is the DRAM bandwidth; the best
    size would favour a copy partly served from cache."""
    import torch

    rows = []
    for nbytes in sizes_bytes:
        src = torch.empty(nbytes // 4, device=device, dtype=torch.float32).uniform_()
        dst = torch.empty_like(src)
        moved_bytes = 2.0 * src.numel() * 4
        t = time_fn(
            lambda dst=dst, src=src: dst.copy_(src),
            label=f"copy{nbytes}",
            device=device,
            num_threads=num_threads,
            min_run_time_s=min_run_time_s,
        )
        if not torch.equal(dst, src):  # correctness gate beside the speed number
            raise RuntimeError("memory bandwidth copy produced a wrong result")
        rows.append(
            {
                "size_bytes": nbytes,
                "moved_bytes": moved_bytes,
                **t.to_dict(),
                "achieved_bytes_per_s": moved_bytes / t.median_s,
            }
        )
    per_size = np.array([r["achieved_bytes_per_s"] for r in rows])
    return {
        "plateau_bytes_per_s": float(np.median(per_size)),
        "spread_between_sizes": float(per_size.max() / per_size.min() - 1),
        "device": device,
        "benchmark_version": BENCHMARK_VERSION["memory_bandwidth"],
        "rows": rows,
    }
