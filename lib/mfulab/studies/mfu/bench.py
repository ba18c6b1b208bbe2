"""Measurement of the ``mfu`` study (torch, headless): the matmul ceiling and memory
bandwidth of this machine (read from its calibration, measured once for every study), an
exact FLOP count, and a timed training run.

Timing of the training run (one process, no communication): each step is timed with
``time.perf_counter`` around three phases, with a device synchronise before each reading:
*data* (fetch the next synthetic batch and copy it to the device), *compute* (forward,
backward, optimizer step) and *other* (reading the loss back, bookkeeping). The time
between consecutive step starts that none of the three covers is loop overhead, and the
time before the first step (model build) is start-up. ``measure`` returns plain records
(JSON) that ``analysis`` reads, here or on another machine.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from mfulab.analytic import flops
from mfulab.analytic.config import ATTENTION_IMPLS, TransformerConfig
from mfulab.measure import calibration, host
from mfulab.studies.mfu.params import Params

BENCHMARK_VERSION = {"train_run": 4, "flop_count": 2, "op_profile": 1}


def flop_count(cfg: TransformerConfig, *, device: str, micro_batch: int = 1) -> dict:
    """FLOPs of one forward+backward counted by ``FlopCounterMode``, with naive attention
    (every matmul visible) and with SDPA (on CPU its flash kernel has no FLOP formula in
    torch, so it counts zero there), per token."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from mfulab.measure.gpt import GPT

    tokens = micro_batch * cfg.seq_len
    out = {"micro_batch": micro_batch, "seq_len": cfg.seq_len, "tokens": tokens}
    idx = torch.randint(0, cfg.vocab_size, (micro_batch, cfg.seq_len), device=device)
    for impl in ATTENTION_IMPLS:
        torch.manual_seed(0)
        model = GPT(cfg, attn_impl=impl).to(device)
        with FlopCounterMode(display=False) as forward_counter:
            _, loss = model(idx, idx)
        with FlopCounterMode(display=False) as counter:
            loss.backward()
        forward_flops = forward_counter.get_total_flops()
        out[f"{impl}_forward_flops_per_token"] = forward_flops / tokens
        out[f"{impl}_backward_flops_per_token"] = counter.get_total_flops() / tokens
        out[f"{impl}_flops_per_token"] = (forward_flops + counter.get_total_flops()) / tokens
        attention_ops = {
            str(op): n
            for op, n in forward_counter.get_flop_counts().get("Global", {}).items()
            if "attention" in str(op)
        }
        out[f"{impl}_attention_op_flops"] = attention_ops
        del model
    out["benchmark_version"] = BENCHMARK_VERSION["flop_count"]
    return out


def ceiling_probe(size: int, *, device: str, dtype: str, min_run_time_s: float = 0.2) -> dict:
    """The calibration's best square matmul timed again inside this process, the same way the
    calibration times it (``timing.matmul_ceiling`` at that one size): the ceiling as the training
    run meets it, read just before the job starts and just after it ends, so the headline's
    denominator carries its own drift."""
    from mfulab.measure import timing

    (row,) = timing.matmul_ceiling(device=device, dtype=dtype, sizes=(size,), min_run_time_s=min_run_time_s)[
        "rows"
    ]
    return {"size": size, "median_s": row["median_s"], "flops_per_s": row["achieved_flops_per_s"]}


def thread_scaling(size: int, *, dtype: str, threads: int) -> dict:
    """:func:`ceiling_probe` on one CPU thread and on ``threads``: about ``threads``× for separate
    cores, 1.0-1.3× for SMT threads of one core (the ISA peak's factorisation, §5)."""
    import torch

    out = []
    for n in (1, threads):
        torch.set_num_threads(n)
        out.append(ceiling_probe(size, device="cpu", dtype=dtype)["flops_per_s"])
    torch.set_num_threads(threads)
    return {"size": size, "threads": [1, threads], "flops_per_s": out}


def fresh_process_probe(size: int, *, device: str, dtype: str, num_threads: int) -> dict:
    """:func:`ceiling_probe` in a fresh Python process (same torch threads), run just before the
    job: beside the probes inside the training process and the cached calibration it tells a
    machine that got slower since it was calibrated (the fresh process reads low too) from a
    process that runs slower than a fresh one (only the in-process probes read low)."""
    import json
    import subprocess
    import sys

    code = (
        f"import json, torch; torch.set_num_threads({num_threads}); "
        "from mfulab.studies.mfu.bench import ceiling_probe; "
        f"print(json.dumps(ceiling_probe({size}, device={device!r}, dtype={dtype!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def train_run(
    cfg: TransformerConfig,
    *,
    device: str,
    dtype: str,
    micro_batch: int,
    steps: int,
    warmup_steps: int,
    attn_impl: str,
    probe_size: int | None = None,
    probe_every: int = 0,
    data_delay_s: float = 0.0,
) -> dict:
    """Train the reference model on synthetic tokens and time each step's phases; with
    ``probe_size``, the matmul ceiling probed just before the job, after every ``probe_every``
    steps (0: never) and just after it (:func:`ceiling_probe`): the ceiling as this process meets
    it, interleaved with the steps. The probes are outside the job's clock: the time they take
    is taken off every later step's start and off the job's wall."""
    import torch

    from mfulab.measure.timing import progress, synchronize
    from mfulab.measure.train import reference_model, synthetic_batch, train_step

    probes = []

    def probe(after_step: int | None) -> float:
        """One ceiling probe; returns the seconds it took (to take off the job's clock)."""
        t_start = time.perf_counter()
        probes.append({"after_step": after_step, **ceiling_probe(probe_size, device=device, dtype=dtype)})
        return time.perf_counter() - t_start

    if probe_size:
        probe(None)
    paused_s = 0.0  # seconds spent in probes inside the job: off its clock
    job_start = time.perf_counter()
    model, optimizer = reference_model(cfg, attn_impl=attn_impl, device=device)
    generator = torch.Generator().manual_seed(1)

    def next_batch():
        if data_delay_s:
            time.sleep(data_delay_s)  # a loader that keeps the step waiting (the waits demo)
        return synthetic_batch(generator, cfg, micro_batch, device)

    rows = []
    synchronize(device)
    for step in progress(range(warmup_steps + steps), "mfu train"):
        if probe_size and probe_every and step > 0 and step % probe_every == 0:
            paused_s += probe(step - 1)
        t0 = time.perf_counter()
        x, y = next_batch()
        synchronize(device)
        t1 = time.perf_counter()
        loss = train_step(model, optimizer, x, y, device=device, dtype=dtype)
        synchronize(device)
        t2 = time.perf_counter()
        loss_value = loss.item()
        t3 = time.perf_counter()
        rows.append(
            {
                "step": step,
                "warmup": step < warmup_steps,
                "start_s": t0 - job_start - paused_s,
                "data_s": t1 - t0,
                "compute_s": t2 - t1,
                "other_s": t3 - t2,
                "loss": loss_value,
            }
        )
    job_wall_s = time.perf_counter() - job_start - paused_s
    if probe_size:
        probe(len(rows) - 1)
    for i, row in enumerate(rows):  # period: from this step's start to the next one's (or job end)
        end = rows[i + 1]["start_s"] if i + 1 < len(rows) else job_wall_s
        row["period_s"] = end - row["start_s"]
    losses = [r["loss"] for r in rows]
    return {
        "tokens_per_step": micro_batch * cfg.seq_len,
        "micro_batch": micro_batch,
        "seq_len": cfg.seq_len,
        "warmup_steps": warmup_steps,
        "steps": steps,
        "dtype": dtype,
        "attn_impl": attn_impl,
        "data_delay_s": data_delay_s,
        "job_wall_s": job_wall_s,
        "setup_s": rows[0]["start_s"],
        "rows": rows,
        # before the job, between steps (after_step), after it: off the job's clock
        "ceiling_probes": probes or None,
        # correctness gate: finite losses, and the first one near ln(V) as for a uniform guess
        "initial_loss": losses[0],
        "expected_initial_loss": math.log(cfg.vocab_size),
        "losses_finite": all(math.isfinite(v) for v in losses),
        "benchmark_version": BENCHMARK_VERSION["train_run"],
    }


def op_profile(
    cfg: TransformerConfig,
    *,
    device: str,
    dtype: str,
    micro_batch: int,
    attn_impl: str,
    p,
    keep_trace: bool = True,
) -> dict:
    """A few steady steps of the same training step under ``torch.profiler``
    (:mod:`mfulab.measure.opprofile`): seconds per operator category per step, and the trace, gzipped,
    in a temporary folder that the notebook copies into ``traces/``."""
    import tempfile

    import torch
    from torch.profiler import record_function

    from mfulab.measure import opprofile
    from mfulab.measure.procs import native_stderr_filtered
    from mfulab.measure.train import reference_model, synthetic_batch, train_step

    model, optimizer = reference_model(cfg, attn_impl=attn_impl, device=device)
    generator = torch.Generator().manual_seed(2)

    def step():
        with record_function("data"):
            x, y = synthetic_batch(generator, cfg, micro_batch, device)
        train_step(model, optimizer, x, y, device=device, dtype=dtype).item()

    trace = Path(tempfile.mkdtemp(prefix="mfulab-trace-")) / "mfu_train_step.json.gz" if keep_trace else None
    with native_stderr_filtered():  # kineto's "USDT:" start/stop lines would fill the notebook
        out = opprofile.profile_steps(
            step, steps=p.profile_steps, device=device, trace_path=trace, max_trace_bytes=p.trace_max_bytes
        )
    out["benchmark_version"] = BENCHMARK_VERSION["op_profile"]
    return out


def measure(p: Params) -> dict:
    """Everything the study measures on this device (see the module docstring)."""
    import torch

    from mfulab.measure import timing as m

    p = p.prepared()
    if p.num_threads:
        torch.set_num_threads(p.num_threads)
    device, cfg = p.device, p.model_config()
    threads = torch.get_num_threads()
    records = {
        "study": "mfu",
        "params": p.to_dict(),
        "device": device,
        "num_threads": threads,
        "device_name": host.device_name(device),
        "config": cfg.to_dict(),
        "n_params": flops.param_count(cfg),
        "benchmark_version": {**BENCHMARK_VERSION, **m.BENCHMARK_VERSION},
        "cpu_isa": host.cpu_isa() if device == "cpu" else None,  # a CPU's peak from its ISA (§5)
    }
    cal = calibration.get(
        p.calibration, device=device, parts=[f"matmul:{p.dtype}", "bandwidth"], num_threads=threads
    )
    records["ceiling"], records["bandwidth"] = cal[f"matmul:{p.dtype}"], cal["bandwidth"]
    records["calibration"] = cal["_meta"]
    records["flop_count"] = flop_count(cfg, device=device)
    if device == "cpu" and threads > 1:  # two cores, or two SMT threads of one (§5)
        records["thread_scaling"] = thread_scaling(
            records["ceiling"]["best_size"], dtype=p.dtype, threads=threads
        )
    records["fresh_process_probe"] = fresh_process_probe(
        records["ceiling"]["best_size"], device=device, dtype=p.dtype, num_threads=threads
    )
    records["train"] = train_run(
        cfg,
        device=device,
        dtype=p.dtype,
        micro_batch=p.micro_batch,
        steps=p.steps,
        warmup_steps=p.warmup_steps,
        attn_impl=p.attn_impl,
        probe_size=records["ceiling"]["best_size"],
        probe_every=p.ceiling_probe_every,
    )
    if p.wait_steps:
        # global and local MFU pulled apart on purpose: the same steps again, once as they are and
        # once behind a loader that sleeps ``wait_over_compute`` × the run's median compute time
        import statistics

        compute_s = statistics.median(r["compute_s"] for r in records["train"]["rows"] if not r["warmup"])
        records["waits"] = [
            train_run(
                cfg,
                device=device,
                dtype=p.dtype,
                micro_batch=p.micro_batch,
                steps=p.wait_steps,
                warmup_steps=1,
                attn_impl=p.attn_impl,
                data_delay_s=delay_s,
            )
            for delay_s in (0.0, p.wait_over_compute * compute_s)
        ]
    records["op_profile"] = op_profile(
        cfg, device=device, dtype=p.dtype, micro_batch=p.micro_batch, attn_impl=p.attn_impl, p=p
    )
    records["shape_sweep"] = shape_sweep(cfg, p, device=device)
    return records


def shape_sweep(cfg: TransformerConfig, p: Params, *, device: str) -> list[dict]:
    """The same training step at other widths (``p.sweep_d_models``, at the run's seq_len) and
    sequence lengths (``p.sweep_seq_lens``, at the preset's width), the tokens per step and the
    head width kept, each profiled as the main run is
    (:func:`op_profile`, ``p.sweep_profile_steps`` steps, no trace kept): what the step's time
    and the attention core's share of it do as the GEMMs shrink or T grows. Every shape's step
    is timed under the profiler (its overhead is in §7's profiled-vs-timed check)."""
    from types import SimpleNamespace

    from mfulab.measure.timing import progress

    tokens = p.micro_batch * p.seq_len
    head_width = cfg.d_model // cfg.n_heads
    sweep_p = SimpleNamespace(profile_steps=p.sweep_profile_steps, trace_max_bytes=p.trace_max_bytes)
    shapes = [(d, cfg.seq_len) for d in p.sweep_d_models]
    shapes += [(cfg.d_model, t) for t in p.sweep_seq_lens if (cfg.d_model, t) not in shapes]
    rows = []
    for d_model, seq_len in progress(shapes, "mfu shape sweep"):
        n_heads = max(1, d_model // head_width)
        shape = cfg.with_(
            d_model=d_model,
            n_heads=n_heads,
            n_kv_heads=max(1, n_heads * cfg.n_kv_heads // cfg.n_heads),  # the same grouping
            d_ff=cfg.d_ff * d_model // cfg.d_model,  # the same MLP ratio
            seq_len=seq_len,
        )
        micro_batch = max(1, tokens // seq_len)
        prof = op_profile(
            shape,
            device=device,
            dtype=p.dtype,
            micro_batch=micro_batch,
            attn_impl=p.attn_impl,
            p=sweep_p,
            keep_trace=False,
        )
        rows.append({"config": shape.to_dict(), "micro_batch": micro_batch, "op_profile": prof})
    return rows
