"""The DDP bucket simulator: DDP's bucket formation rules and a step-time model, pure Python
(no process group; the reference GPT's tensors from ``flops.param_tensors``).

How DDP buckets (torch 2.13, ``torch/nn/parallel/distributed.py`` and ``reducer.cpp``):
DDP starts with all parameters in one bucket, records the order in which gradients become
ready, and rebuilds its buckets in that order after one iteration, two with ``static_graph``
(the logging data then has ``rebuilt_bucket_sizes``); a bucket closes as soon
as its size reaches its cap — the tensor that crosses the cap stays in it, tensors are never
split. The first bucket's cap is 1 MiB (``dist._DEFAULT_FIRST_BUCKET_BYTES``) when
``bucket_cap_mb`` is left at its default of 25, and ``bucket_cap_mb`` otherwise
(``BucketCapacityConfig``). ``bucket_cap_mb`` is MiB. A bucket's all-reduce starts when all
its gradients are ready and the communication channel is free.

:func:`simulate` applies the same rules to a list of (bytes, ready time) per parameter, with
each all-reduce costed by an α–β model whose algorithm is a named input (``algorithm``):
the ring (``comm.ring_all_reduce_time``, 2(n−1) latency steps: the default, and the measured
2-rank sweep's), the pipelined tree (``comm.tree_all_reduce_time``, 2·log2(n) steps) or
``best``, the faster of the two per call, as NCCL chooses between ring and tree by message
size and rank count. At scale (:func:`gpt_simulation`) the simulator is a finer DP term of the
course's one step model (``step.step_time``): its compute, link, per-call latency (NCCL's
own model, ring or tree) and every other term come from there, on a ``devices.yaml`` device
(``stated.SCALE_CASE``). Output: step time, exposed communication and a bucket timeline.
"""

from __future__ import annotations

import time

import numpy as np

from mfulab.analytic import comm, flops, parallel
from mfulab.analytic import step as step_model
from mfulab.analytic.config import preset
from mfulab.analytic.step_terms import dp_call_s
from mfulab.errors import ParameterError
from mfulab.studies.buckets.stated import SCALE_CASE
from mfulab.units import MIB

DEFAULT_BUCKET_CAP_MB = 25
FIRST_BUCKET_BYTES = comm.DDP_FIRST_BUCKET_BYTES  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
ALGORITHMS = (*comm.NCCL_ALGORITHMS, "best")  # NCCL's two, or the faster of them per call


def form_buckets(param_bytes, *, bucket_cap_mb: float, default_cap: bool = False) -> list[list[int]]:
    """Indices of parameters (given in gradient-ready order) per bucket: ``comm.ddp_buckets``
    (the step model's DDP term forms the same) with the cap in MiB, as DDP's ``bucket_cap_mb``."""
    if bucket_cap_mb <= 0:
        raise ParameterError(f"bucket_cap_mb must be positive, got {bucket_cap_mb}")
    first = FIRST_BUCKET_BYTES if default_cap else None
    return comm.ddp_buckets(param_bytes, cap_bytes=int(bucket_cap_mb * MIB), first_cap_bytes=first)


def allreduce_time(
    nbytes: float, n: int, *, alpha_s: float, link_bytes_per_s: float, algorithm: str = "ring"
) -> float:
    """``ring``: the ring α–β model; ``tree``: the pipelined tree's; ``best``: the faster of
    the two, as NCCL picks its algorithm per call (the tree's log2(n) latency matters at
    thousands of ranks)."""
    if algorithm not in ALGORITHMS:
        raise ParameterError(f"algorithm must be one of {', '.join(ALGORITHMS)}; got {algorithm!r}")
    link = {"alpha_s": alpha_s, "link_bytes_per_s": link_bytes_per_s}
    ring = comm.ring_all_reduce_time(nbytes, n, **link)
    tree = comm.tree_all_reduce_time(nbytes, n, **link)
    return {"ring": ring, "tree": tree, "best": min(ring, tree)}[algorithm]


def simulate(
    param_bytes,
    ready_s,
    *,
    backward_end_s: float,
    bucket_cap_mb: float,
    n: int = 0,
    alpha_s: float = 0.0,
    link_bytes_per_s: float = 0.0,
    default_cap: bool = False,
    forward_s: float = 0.0,
    algorithm: str = "ring",
    call_s=None,
    per_bucket_overhead_s: float = 0.0,
    overhead_on_channel: bool = False,
) -> dict:
    """Step time of one DDP backward: gradients (``param_bytes``, in ready order) become ready
    at ``ready_s`` (from the start of backward); buckets form by DDP's rules; each bucket's
    all-reduce starts when its last gradient is ready and the previous one has finished (one
    channel, ``comm.fifo_channel``). A bucket's all-reduce costs ``call_s(nbytes)`` where given
    (at scale: the step model's DP group, :func:`gpt_simulation`), else the α–β model of
    ``algorithm`` over ``n`` ranks (:func:`allreduce_time`: the measured sweep's fit here).

    ``per_bucket_overhead_s``: host work per bucket on the backward's path, beyond the
    all-reduce's α–β (DDP's hook, the copy into the bucket, launching the collective): when a
    bucket closes, the backward stops that long before its all-reduce is issued, so every later
    gradient, and the end of the backward, moves by it (0: the plain α–β model;
    ``model_error`` fits it to a measured sweep). ``overhead_on_channel``: the communication
    channel is busy that long per bucket too (a per-call cost of the collective itself; the
    pessimistic reading, where many buckets cost even when the communication is the
    bottleneck)."""
    if call_s is None:

        def call_s(nbytes):
            return allreduce_time(
                nbytes, n, alpha_s=alpha_s, link_bytes_per_s=link_bytes_per_s, algorithm=algorithm
            )

    buckets = form_buckets(param_bytes, bucket_cap_mb=bucket_cap_mb, default_cap=default_cap)
    sizes = [sum(param_bytes[i] for i in b) for b in buckets]
    ready = [max(ready_s[i] for i in b) + (k + 1) * per_bucket_overhead_s for k, b in enumerate(buckets)]
    extra = per_bucket_overhead_s if overhead_on_channel else 0.0
    channel = comm.fifo_channel(ready, [call_s(nbytes) + extra for nbytes in sizes])
    timeline = [
        {
            "bucket": k,
            "bytes": sizes[k],
            "tensors": len(b),
            "ready_s": ready[k],
            "start_s": start,
            "end_s": end,
        }
        for k, (b, (start, end)) in enumerate(zip(buckets, channel))
    ]
    channel_free = channel[-1][1] if channel else 0.0
    backward_end_s = backward_end_s + len(buckets) * per_bucket_overhead_s
    backward_step = max(backward_end_s, channel_free)
    return {
        "bucket_cap_mb": bucket_cap_mb,
        "buckets": len(buckets),
        "step_s": forward_s + backward_step,
        "exposed_comm_s": backward_step - backward_end_s,
        "total_comm_s": sum(t["end_s"] - t["start_s"] for t in timeline),
        "timeline": timeline,
    }


def model_layout(cfg) -> list[tuple[str, int]]:
    """(name, element count) of every parameter of the reference GPT, in the order their
    gradients become ready (reverse of registration): ``flops.param_tensors`` reversed."""
    return list(reversed(flops.param_tensors(cfg)))


def sharded_layout(cfg, *, tp: int = 1, pp: int = 1) -> list[tuple[str, int]]:
    """The gradients one device holds under ``tp`` and ``pp``, in gradient-ready order:
    ``parallel.stage_grad_tensors`` (what the step model's DDP term buckets too)."""
    return parallel.stage_grad_tensors(cfg, tp=tp, pp=pp)


def gpt_simulation(
    cfg,
    *,
    n: int,
    bucket_caps_mb,
    device: str,
    micro_batch: int = 1,
    algorithm: str = "best",
    tp: int = 1,
    pp: int = 1,
    accumulation: int = 1,
    per_bucket_overhead_s: float = 0.0,
    overhead_on_channel: bool = False,
    **assumptions,
) -> list[dict]:
    """Simulated DDP step of ``cfg`` on ``n`` data-parallel ranks (``n · tp · pp`` cards, the
    rows' ``world_size``) for each bucket cap: the
    course's step model (``step.step_time``, framework ``ddp``) on ``device`` (a
    ``devices.yaml`` key) with its DP term replaced by this finer schedule.

    From the step model: every term but the exposed DP traffic (compute, TP collectives, the
    pipeline bubble, the optimizer), the backward time of the last micro-batch (the others run
    under ``no_sync``), and the DP group: its link and NCCL's per-call latency, each bucket's
    all-reduce priced by ``step_terms.dp_call_s`` (the faster of ring and tree, or the ring
    alone with ``algorithm="ring"``). ``assumptions`` set fields of ``rates.Assumptions``
    (``matmul_share_of_mamf``, ``alpha_inter_s``, ``network_bytes_per_s``, ...).
    The finer part: DDP's buckets formed from one device's real gradient tensors
    (:func:`sharded_layout`, bf16), each ready when the backward pass has reached it (time
    proportional to the elements behind it), on one channel (:func:`simulate`).
    ``per_bucket_overhead_s`` (and ``overhead_on_channel``): host work per bucket on the
    backward's path (0 in the stated setting, the overhead fitted to a measured sweep in the
    sensitivity rows). MFU is the step model's PaLM-convention MFU at the simulated step."""
    if algorithm not in ("best", "ring"):
        raise ParameterError(f"algorithm at scale must be best or ring (NCCL_ALGO=Ring); got {algorithm!r}")
    step = step_model.step_time(
        cfg,
        n_devices=n * tp * pp,
        tp=tp,
        pp=pp,
        micro_batch=micro_batch,
        global_batch=n * micro_batch * accumulation,
        device=device,
        framework="ddp",
        zero_stage=0,
        **assumptions,
    )
    grad_bytes_per_elem = step["assumptions"]["grad_bytes_per_elem"]
    layout = sharded_layout(cfg, tp=tp, pp=pp)
    numels = np.array([n_ for _, n_ in layout], dtype=float)
    last_backward_s = step["backward_s"] / accumulation
    rest_of_step_s = step["step_s"] - step["dp_comm_exposed_s"] - last_backward_s
    ready = (
        np.cumsum(numels) / numels.sum() * last_backward_s
    )  # the backward sweeps the weights in ready order
    param_bytes = (numels * grad_bytes_per_elem).astype(int).tolist()
    group = step["dp_group"]

    def call_s(nbytes):
        return dp_call_s("all_reduce", nbytes, group, ring_only=algorithm == "ring")[0]

    out = []
    for cap in bucket_caps_mb:
        r = simulate(
            param_bytes,
            ready.tolist(),
            backward_end_s=last_backward_s,
            bucket_cap_mb=cap,
            call_s=call_s,
            forward_s=rest_of_step_s,
            per_bucket_overhead_s=per_bucket_overhead_s,
            overhead_on_channel=overhead_on_channel,
        )
        r.pop("timeline")
        r["mfu"] = step["mfu_palm"] * step["step_s"] / r["step_s"]
        r["step_model_dp_exposed_s"] = step["dp_comm_exposed_s"]
        r["last_backward_s"] = last_backward_s  # the only backward any cap can hide a reduction under
        r["fits"] = step["fits"]  # the layout's memory on the card (the step model's memory_terms)
        r["memory_gib"] = step["memory_gib"]
        out.append(
            {
                "preset": cfg.name,
                "world_size": n * tp * pp,  # the job's cards
                "dp": n,
                "tp": tp,
                "pp": pp,
                "accumulation": accumulation,
                **r,
            }
        )
    return out


def simulator_speed(
    preset_name: str = "llama2-70b", world_size: int = 1024, n_sizes: int = 20, **setting
) -> dict:
    """How long the simulator takes for a 70B layer layout on 1024 ranks over 20 bucket sizes
    in the stated setting (the tensor list, ``flops.param_tensors``, is timed with it)."""
    caps = np.geomspace(1, 4096, n_sizes).tolist()
    t0 = time.perf_counter()
    rows = gpt_simulation(preset(preset_name), n=world_size, bucket_caps_mb=caps, **{**SCALE_CASE, **setting})
    seconds = time.perf_counter() - t0
    return {
        "preset": preset_name,
        "world_size": world_size,
        "bucket_sizes": len(rows),
        "tensors": len(model_layout(preset(preset_name))),
        "seconds": seconds,
    }
