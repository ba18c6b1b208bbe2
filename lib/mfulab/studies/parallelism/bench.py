"""Measurement of the ``parallelism`` study (torch, headless): four torchrun jobs per rank
count, each with PyTorch's own implementation of one parallel layout —

- ``pipeline``: ``torch.distributed.pipelining`` schedules, emulated and real stage compute;
- ``sharding``: DDP vs FSDP2 ``fully_shard`` — bytes held and collectives counted per rank;
- ``tensor``: DTensor tensor and sequence parallelism on one block, against the whole block;
- ``moe``: all-to-all vs all-reduce, and an expert layer under skewed routing.

``measure`` returns plain records (JSON) that ``analysis`` reads, here or on another machine.
Started by the project's launcher, each job is its own torchrun with the ranks it names; under
an outer torchrun or Slurm job every layout runs once on that job's ranks.
"""

from __future__ import annotations

import os
from dataclasses import replace

from mfulab.measure import host
from mfulab.studies.parallelism.params import Params
from mfulab.units import MIB

BENCHMARK_VERSION = {"pipeline": 1, "sharding": 1, "tensor": 1, "moe": 1}
WORKERS = {
    "pipeline": "mfulab.studies.parallelism.pipeline:pipeline_worker",
    "sharding": "mfulab.studies.parallelism.sharding:sharding_worker",
    "tensor": "mfulab.studies.parallelism.tensor:tp_worker",
    "moe": "mfulab.studies.parallelism.moe:moe_worker",
}


def pipeline_spec(p: Params, compute: str) -> dict:
    return {
        "device": p.device,
        "compute": compute,
        "schedules": list(p.pipeline_schedules),
        "virtual_stages": p.pipeline_virtual_stages,
        "micro_batch_counts": list(p.pipeline_micro_batch_counts),
        "layers_per_rank": p.pipeline_layers_per_rank,
        "layer_forward_s": p.pipeline_layer_forward_s,
        "layer_backward_s": p.pipeline_layer_backward_s,
        "hidden": p.pipeline_real_hidden if compute == "real" else 16,
        "micro_batch_rows": p.pipeline_micro_batch_rows,
        "steps": p.pipeline_steps,
    }


def copy_bandwidths(nbytes: int = 256 * MIB, iters: int = 10) -> dict:
    """CUDA only (A15): bytes/s of pinned host → device, device → host and device → device
    copies of ``nbytes``, timed with CUDA events over ``iters`` copies after a warm-up, each
    checked (the copy's first and last elements)."""
    import torch

    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).fill_(7)
    dev, dev2 = (
        torch.empty(nbytes, dtype=torch.uint8, device="cuda"),
        torch.empty(nbytes, dtype=torch.uint8, device="cuda"),
    )
    cases = {
        "host_to_device": lambda: dev.copy_(pinned, non_blocking=True),
        "device_to_host": lambda: pinned.copy_(dev, non_blocking=True),
        "device_to_device": lambda: dev2.copy_(dev, non_blocking=True),
    }
    out = {}
    for name, copy in cases.items():
        copy()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            copy()
        end.record()
        torch.cuda.synchronize()
        out[f"{name}_bytes_per_s"] = nbytes * iters / (start.elapsed_time(end) / 1e3)
    out["correct"] = bool(int(dev2[0]) == int(dev2[-1]) == int(pinned[0]) == 7)
    out["bytes"] = nbytes
    return out


def measure(p: Params) -> dict:
    """Every job of the study on this machine's ranks (module docstring)."""
    from mfulab.measure.host import in_distributed_env
    from mfulab.measure.launch import run
    from mfulab.measure.timing import progress

    p = p.prepared()
    if in_distributed_env():  # under torchrun every job runs on the job's ranks, each layout once
        import torch.distributed as dist

        world = int(os.environ["WORLD_SIZE"]) if not dist.is_initialized() else dist.get_world_size()
        p = replace(
            p, pipeline_ranks=(world,), ranks=world, pipeline_real_ranks=world if p.pipeline_real_ranks else 0
        )
    model = {"device": p.device, "preset": p.preset, "seq_len": p.seq_len, "micro_batch": p.micro_batch}
    jobs = [("pipeline", n, pipeline_spec(p, "emulated")) for n in p.pipeline_ranks]
    if p.pipeline_real_ranks:
        jobs.append(("pipeline_real", p.pipeline_real_ranks, pipeline_spec(p, "real")))
    jobs += [
        (
            "sharding",
            p.ranks,
            {**model, "configs": list(p.sharding_configs), "accumulation": list(p.accumulation)},
        ),
        ("tensor", p.ranks, model),
        (
            "moe",
            p.ranks,
            {"device": p.device, **{k: v for k, v in p.to_dict().items() if k.startswith(("a2a", "moe"))}},
        ),
    ]
    rec = {
        "study": "parallelism",
        "params": p.to_dict(),
        "device": p.device,
        "device_name": host.device_name(p.device),
        "benchmark_version": BENCHMARK_VERSION,
        "pipeline": [],
    }
    for name, nproc, spec in progress(jobs, "parallel layouts (torchrun jobs)"):
        worker = WORKERS["pipeline" if name.startswith("pipeline") else name]
        out = run(worker, spec, nproc=nproc, device=p.device, timeout_s=p.timeout_s)
        if name.startswith("pipeline"):
            rec["pipeline"].append(out)
        else:
            rec[name] = out
    # A15 on a GPU: the host link against the device's own copy bandwidth; a CPU has no host link
    rec["copy_bandwidths"] = copy_bandwidths() if p.device == "cuda" else None
    return rec
