"""Measurement of the ``predict`` study (torch, headless): this machine's calibration (matmul
and copy bandwidth, measured once for every study) and one training step of the reference
model, timed (``timing.time_fn``: warm-up, synchronised, median and spread) and split by
operator class (``opprofile.profile_steps``), so that the predictor fed by the calibration can
be compared with it term by term; the calibration's own benchmarks re-timed beside the step
(:func:`calibration_now`: the box's speed moves between hours, and a calibration file can be
hours old); and the step's ops timed alone at its shapes (``op_rates``). The published runs
need no measurement: their YAML is copied into the records so that an analysis elsewhere reads
the same rows."""

from __future__ import annotations

import time

from mfulab.analytic import flops
from mfulab.measure import calibration, host
from mfulab.studies.predict import op_rates
from mfulab.studies.predict.params import Params
from mfulab.studies.predict.validate import load_file, read_history

BENCHMARK_VERSION = {"step": 1, "op_rates": 2, "calibration_now": 1}


def _step_fn(cfg, *, device: str, dtype: str, micro_batch: int):
    """One AdamW training step of the reference model (SDPA attention) on synthetic tokens."""
    import torch
    from torch.profiler import record_function

    from mfulab.measure.train import reference_model, synthetic_batch, train_step

    model, optimizer = reference_model(cfg, attn_impl="sdpa", device=device)
    generator = torch.Generator().manual_seed(1)

    def step():
        with record_function("data"):
            x, y = synthetic_batch(generator, cfg, micro_batch, device)
        return train_step(model, optimizer, x, y, device=device, dtype=dtype).item()

    return step


def calibration_now(cal: dict, *, device: str, dtype: str, threads: int) -> dict:
    """The calibration's square matmuls (the file's sizes up to its best one and the next) and
    its smallest copy beyond the last-level cache, re-timed in this process beside the step,
    in the calibration's record format (``rates.fit_matmul`` reads them alike)."""
    from mfulab.measure import timing

    setting = calibration.SETTINGS[cal["_meta"]["setting"]]
    sizes = [n for n in setting["matmul_sizes"] if n <= 2 * cal[f"matmul:{dtype}"]["best_size"]]
    llc = calibration.last_level_cache_bytes(device)
    copy_bytes = calibration.bandwidth_sizes(setting, llc)[:1]
    return {
        "matmul": timing.matmul_ceiling(
            device=device, dtype=dtype, sizes=sizes, min_run_time_s=0.2, num_threads=threads
        ),
        "bandwidth": timing.memory_bandwidth(
            device=device, sizes_bytes=copy_bytes, min_run_time_s=0.2, num_threads=threads
        ),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _published(p: Params) -> dict:
    """The published runs, their split and per-term figures, and the recorded validation history
    (copied into the records: an analysis elsewhere reads the same)."""
    data = load_file(p.published_runs)
    return {
        "published_runs": data["runs"],
        "published_split": data["split"],
        "published_per_term": data["per_term"],
        "validation_history": read_history(),
    }


def measure(p: Params) -> dict:
    """The calibration, the measured step and the published runs (module docstring)."""
    import torch

    from mfulab.measure import opprofile, timing
    from mfulab.measure.procs import native_stderr_filtered

    p = p.prepared()
    if p.num_threads:
        torch.set_num_threads(p.num_threads)
    device, cfg = p.device, p.model_config()
    threads = torch.get_num_threads()
    cal = calibration.get(
        p.calibration, device=device, parts=[f"matmul:{p.dtype}", "bandwidth"], num_threads=threads
    )
    step = _step_fn(cfg, device=device, dtype=p.dtype, micro_batch=p.micro_batch)
    first_loss = step()
    timed = timing.time_fn(
        step,
        label="train step",
        device=device,
        warmup=p.warmup_steps,
        min_run_time_s=0.0,
        min_samples=p.steps,
    )
    with native_stderr_filtered():  # kineto's start/stop lines would fill the notebook
        profile = opprofile.profile_steps(step, steps=p.profile_steps, device=device)
    last_loss = step()
    now = calibration_now(cal, device=device, dtype=p.dtype, threads=threads)
    ops = op_rates.measure(
        cfg,
        micro_batch=p.micro_batch,
        dtype=p.dtype,
        device=device,
        warmup=p.warmup_steps,
        min_samples=p.steps,
    )
    return {
        "study": "predict",
        "params": p.to_dict(),
        "device": device,
        "device_name": host.device_name(device),
        "num_threads": threads,
        "config": cfg.to_dict(),
        "n_params": flops.param_count(cfg),
        "calibration": {**cal["_meta"], "matmul": cal[f"matmul:{p.dtype}"], "bandwidth": cal["bandwidth"]},
        "calibration_now": now,
        "step": {**timed.to_dict(), "first_loss": first_loss, "last_loss": last_loss},
        "op_profile": profile,
        "op_rates": ops,
        **_published(p),
        "benchmark_version": {**BENCHMARK_VERSION, **timing.BENCHMARK_VERSION},
    }
