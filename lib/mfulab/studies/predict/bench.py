"""Measurement of the ``predict`` study (torch, headless): this machine's calibration (matmul
and copy bandwidth, measured once for every study) and one training step of the reference
model, split by operator class (``opprofile.profile_steps``), so that the predictor fed by the
calibration can be compared with it term by term. The step, each of its ops alone at its shapes
(``op_rates``) and the calibration's own benchmarks (:func:`calibration_cases`) are timed
interleaved, round by round (``timing.interleaved``): the box's speed moves between hours and
within minutes, and a calibration file can be hours old. The published runs need no
measurement: their YAML is copied into the records so that an analysis elsewhere reads the
same rows."""

from __future__ import annotations

import os
import time

from mfulab.analytic import flops
from mfulab.measure import calibration, host
from mfulab.studies.predict import op_rates
from mfulab.studies.predict.params import Params
from mfulab.studies.predict.validate import load_file, read_history

BENCHMARK_VERSION = {"step": 3, "op_rates": 2, "calibration_now": 2}
STEP = "train step"


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


def calibration_cases(cal: dict, *, device: str, dtype: str) -> dict:
    """The calibration's own benchmarks, to re-time beside the step: its square matmuls (the
    file's sizes up to twice its best one) and its smallest copy beyond the last-level cache.
    ``{label: (callable, meta)}``."""
    import torch

    from mfulab.measure.timing import torch_dtype

    setting = calibration.SETTINGS[cal["_meta"]["setting"]]
    best = cal[f"matmul:{dtype}"]["best_size"]
    out = {}
    for n in (n for n in setting["matmul_sizes"] if n <= 2 * best):
        a = torch.randn(n, n, device=device, dtype=torch_dtype(dtype))
        b = torch.randn(n, n, device=device, dtype=torch_dtype(dtype))
        out[f"mm{n}"] = (lambda a=a, b=b: torch.mm(a, b), {"size": n, "flops": 2.0 * n**3})
    (nbytes, *_) = calibration.bandwidth_sizes(setting, calibration.last_level_cache_bytes(device))
    src = torch.empty(nbytes // 4, device=device, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    out[f"copy{nbytes}"] = (
        lambda: dst.copy_(src),
        {"size_bytes": nbytes, "moved_bytes": 2.0 * nbytes, "check": (dst, src)},
    )
    return out


def calibration_now(timings: dict, now_cases: dict, *, dtype: str, device: str) -> dict:
    """The re-timed benchmarks in the calibration's record format (``rates.fit_matmul`` reads
    them alike), with the copy's correctness gate; each row keeps its per-round times
    (``calibrated.paired_step_errors`` pairs them with the step's own rounds)."""
    import torch

    mm, copies = [], []
    for label, (_, meta) in now_cases.items():
        t = timings[label]
        if "flops" in meta:
            mm.append({"size": meta["size"], "flops": meta["flops"], **t.to_dict(with_samples=True)})
            mm[-1]["achieved_flops_per_s"] = meta["flops"] / t.median_s
        else:
            dst, src = meta["check"]
            if not torch.equal(dst, src):
                raise RuntimeError("the re-timed copy produced a wrong result")
            copies.append(
                {
                    "size_bytes": meta["size_bytes"],
                    "moved_bytes": meta["moved_bytes"],
                    **t.to_dict(with_samples=True),
                }
            )
            copies[-1]["achieved_bytes_per_s"] = meta["moved_bytes"] / t.median_s
    best = max(mm, key=lambda r: r["achieved_flops_per_s"])
    return {
        "matmul": {
            "best_flops_per_s": best["achieved_flops_per_s"],
            "best_size": best["size"],
            "dtype": dtype,
            "device": device,
            "rows": mm,
        },
        "bandwidth": {
            "plateau_bytes_per_s": copies[0]["achieved_bytes_per_s"],
            "device": device,
            "rows": copies,
        },
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "num_threads": torch.get_num_threads(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
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
    # the step, each of its ops alone and the calibration's benchmarks, interleaved round by round:
    # this box's speed moves within minutes, and each reading compares figures of the same rounds
    ops = op_rates.cases(cfg, micro_batch=p.micro_batch, dtype=p.dtype, device=device)
    now_cases = calibration_cases(cal, device=device, dtype=p.dtype)
    fns = {STEP: step} | {k: fn for k, (fn, _) in (ops | now_cases).items()}
    timings = timing.interleaved(
        fns,
        rounds=p.steps,
        device=device,
        warmup=p.warmup_steps,
        min_block_s=0.05,
        desc="the step, its ops and the calibration's benchmarks",
    )
    with native_stderr_filtered():  # kineto's start/stop lines would fill the notebook
        profile = opprofile.profile_steps(step, steps=p.profile_steps, device=device)
    last_loss = step()
    return {
        "study": "predict",
        "params": p.to_dict(),
        "device": device,
        "device_name": host.device_name(device),
        "num_threads": threads,
        "config": cfg.to_dict(),
        "n_params": flops.param_count(cfg),
        "calibration": {**cal["_meta"], "matmul": cal[f"matmul:{p.dtype}"], "bandwidth": cal["bandwidth"]},
        "calibration_now": calibration_now(timings, now_cases, dtype=p.dtype, device=device),
        "step": {
            **timings[STEP].to_dict(with_samples=True),
            "first_loss": first_loss,
            "last_loss": last_loss,
        },
        "op_profile": profile,
        "op_rates": op_rates.records(timings, ops),
        **_published(p),
        "benchmark_version": {**BENCHMARK_VERSION, **timing.BENCHMARK_VERSION},
    }
