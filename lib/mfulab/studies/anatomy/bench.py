"""Measurement of the ``anatomy`` study (torch, headless): this machine's matmul ceiling (its
calibration), the corpus written in the two formats the ladder reads, and the DDP training job
(``worker.anatomy_worker``) on ``p.nproc`` ranks under the project's torchrun launcher, with its
timeout and whole-group kill. Returns plain records (JSON); the per-rank traces stay in a
temporary folder that the notebook copies into ``traces/``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from mfulab.analytic import flops
from mfulab.measure import calibration, host
from mfulab.measure.corpus import check_free_space, corpus_checksum, estimate_bytes, synthetic_corpus
from mfulab.measure.dataformats import write_format
from mfulab.studies.anatomy.params import Params

# 2: the leave-one-out configurations; 3: article B §5.2's order, DDP's own overlap in every rung,
# its bucket caps scaled to the article's MLP matrices per bucket
BENCHMARK_VERSION = {"anatomy": 3}
WORKER = "mfulab.studies.anatomy.worker:anatomy_worker"  # the job every rank runs


def write_corpus(p: Params) -> dict:
    """The corpus in the naive and the good format under ``p.scratch_dir``. Under an outer
    torchrun or Slurm job every rank measures in its own process: each writes its own copy (the
    same seed, the same bytes) in ``rank<R>/``, so that no rank reads a file another is writing,
    and a rank on another node has its corpus on its own disk."""
    import os

    from mfulab.measure.host import in_distributed_env

    root = Path(p.scratch_dir)
    if in_distributed_env():
        root = root / f"rank{os.environ['RANK']}"
    samples = synthetic_corpus(n_samples=p.n_samples, mean_bytes=p.mean_bytes, length_sigma=0.8, seed=0)
    check_free_space(root, estimate_bytes(samples) * 2)
    written = {
        fmt: write_format(fmt, samples, root, shard_samples=max(1, p.n_samples // 16))
        for fmt in dict.fromkeys((p.naive_format, p.good_format))
    }
    return {"root": str(root), "written": written, **corpus_checksum(samples)}


def measure(p: Params) -> dict:
    """Everything the study measures (see the module docstring)."""
    import torch

    from mfulab.measure import timing
    from mfulab.measure.launch import run
    from mfulab.studies.anatomy.ladder import LADDER, article_bucket_caps_mib, leave_one_out

    p = p.prepared()
    device, cfg = p.device, p.model_config()
    records = {
        "study": "anatomy",
        "params": p.to_dict(),
        "device": device,
        "device_name": host.device_name(device),
        "config": cfg.to_dict(),
        "n_params": flops.param_count(cfg),
        "ladder": [name for name, _ in LADDER],
        "leave_one_out": [name for name, _ in leave_one_out()] if p.leave_one_out else [],
        "benchmark_version": BENCHMARK_VERSION,
    }
    cal = calibration.get(
        p.calibration, device=device, parts=[f"matmul:{p.dtype}"], num_threads=torch.get_num_threads()
    )
    records["ceiling"], records["calibration"] = cal[f"matmul:{p.dtype}"], cal["_meta"]
    # DDP reduces fp32 gradients (autocast keeps fp32 parameters); the MLP matrix is the largest
    mlp_matrix_bytes = cfg.d_ff * cfg.d_model * 4
    scaled = article_bucket_caps_mib(mlp_matrix_bytes)
    records["bucket_caps_mib"] = {
        "naive": p.naive_bucket_cap_mb or scaled[0],
        "buckets": p.good_bucket_cap_mb or scaled[1],
        "scaled_from_article": [not p.naive_bucket_cap_mb, not p.good_bucket_cap_mb],
    }
    records["corpus"] = write_corpus(p)
    trace_dir = tempfile.mkdtemp(prefix="mfulab-trace-")
    spec = {
        **{k: v for k, v in p.to_dict().items()},
        "device": device,
        "config": cfg.to_dict(),
        "corpus_dir": records["corpus"]["root"],
        "naive_bucket_cap_mb": records["bucket_caps_mib"]["naive"],
        "good_bucket_cap_mb": records["bucket_caps_mib"]["buckets"],
        "trace_dir": trace_dir,
    }
    records["job"] = run(WORKER, spec, nproc=p.nproc, device=device, timeout_s=p.timeout_s)
    # the cached ceiling may be days old on a shared box: re-time its best size (and its
    # neighbours) right after the job, so MFU can be read against the machine as it was
    best = records["ceiling"]["best_size"]
    sizes = sorted(
        {s for s in calibration.SETTINGS[cal["_meta"]["setting"]]["matmul_sizes"] if s <= 2 * best}
    )
    records["ceiling_now"] = timing.matmul_ceiling(
        device=device, dtype=p.dtype, sizes=sizes, min_run_time_s=0.2, num_threads=torch.get_num_threads()
    )
    return records
