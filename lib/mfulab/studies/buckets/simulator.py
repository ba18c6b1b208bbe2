"""The DDP bucket simulator: DDP's bucket formation rules and a step-time model, pure Python
(no process group; the reference GPT's layout is built on the meta device).

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
size and rank count. At scale (:func:`gpt_simulation`) the study's stated setting is
``best`` (``stated.STATED_INTERCONNECT``); at 1024 ranks the tree then wins every call.
Output: step time, exposed communication and a bucket timeline.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from ... import comm, flops
from ...config import ParameterError, preset
from .stated import STATED_INTERCONNECT

MIB = 2**20
DEFAULT_BUCKET_CAP_MB = 25
FIRST_BUCKET_BYTES = 1 * MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
ALGORITHMS = ("ring", "tree", "best")


def form_buckets(param_bytes, *, bucket_cap_mb: float, default_cap: bool = False) -> list[list[int]]:
    """Indices of parameters (given in gradient-ready order) per bucket, by DDP's rules."""
    if bucket_cap_mb <= 0:
        raise ParameterError(f"bucket_cap_mb must be positive, got {bucket_cap_mb}")
    cap = int(bucket_cap_mb * MIB)
    limits = iter([FIRST_BUCKET_BYTES if default_cap else cap])
    limit = next(limits)
    buckets, current, size = [], [], 0
    for i, nbytes in enumerate(param_bytes):
        current.append(i)
        size += nbytes
        if size >= limit:
            buckets.append(current)
            current, size = [], 0
            limit = cap
    if current:
        buckets.append(current)
    return buckets


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
    n: int,
    alpha_s: float,
    link_bytes_per_s: float,
    default_cap: bool = False,
    forward_s: float = 0.0,
    algorithm: str = "ring",
    per_bucket_overhead_s: float = 0.0,
    overhead_on_channel: bool = False,
) -> dict:
    """Step time of one DDP backward: gradients (``param_bytes``, in ready order) become ready
    at ``ready_s`` (from the start of backward); buckets form by DDP's rules; each bucket's
    all-reduce starts when its last gradient is ready and the previous one has finished.

    ``per_bucket_overhead_s``: host work per bucket on the backward's path, beyond the
    all-reduce's α–β (DDP's hook, the copy into the bucket, launching the collective): when a
    bucket closes, the backward stops that long before its all-reduce is issued, so every later
    gradient, and the end of the backward, moves by it (0: the plain α–β model;
    ``model_error`` fits it to a measured sweep). ``overhead_on_channel``: the communication
    channel is busy that long per bucket too (a per-call cost of the collective itself; the
    pessimistic reading, where many buckets cost even when the communication is the
    bottleneck)."""
    buckets = form_buckets(param_bytes, bucket_cap_mb=bucket_cap_mb, default_cap=default_cap)
    channel_free, timeline = 0.0, []
    for k, b in enumerate(buckets):
        nbytes = sum(param_bytes[i] for i in b)
        ready = max(ready_s[i] for i in b) + (k + 1) * per_bucket_overhead_s
        start = max(ready, channel_free)
        channel_free = start + allreduce_time(
            nbytes, n, alpha_s=alpha_s, link_bytes_per_s=link_bytes_per_s, algorithm=algorithm
        )
        channel_free += per_bucket_overhead_s if overhead_on_channel else 0.0
        timeline.append(
            {
                "bucket": len(timeline),
                "bytes": nbytes,
                "tensors": len(b),
                "ready_s": ready,
                "start_s": start,
                "end_s": channel_free,
            }
        )
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


@functools.lru_cache(maxsize=32)
def model_layout(cfg) -> list[tuple[str, int]]:
    """(name, element count) of every parameter of the reference GPT, in the order their
    gradients become ready (reverse of registration), built on the meta device: no memory,
    exact shapes."""
    import torch

    from ...model import GPT

    with torch.device("meta"):
        model = GPT(cfg, attn_impl="sdpa")
    return [(name, p.numel()) for name, p in reversed(list(model.named_parameters()))]


# Megatron-style tensor parallelism (Shoeybi et al. 2019, §3): q/k/v/up/gate column-parallel
# (weights and biases split), o_proj/down row-parallel (weight split, bias replicated), the
# token embedding and head vocab-parallel; norms and learned positions stay whole.
_REPLICATED_UNDER_TP = ("norm", "o_proj.bias", "down.bias", "wpe.")


def sharded_layout(cfg, *, tp: int = 1, pp: int = 1) -> list[tuple[str, int]]:
    """(name, element count) of the gradients one device holds under tensor parallelism
    ``tp`` and pipeline parallelism ``pp``, in gradient-ready order: TP splits every tensor
    except those of ``_REPLICATED_UNDER_TP``; a pipeline stage holds ``n_layers / pp`` blocks
    (a middle stage: no embedding, head or final norm when ``pp > 1``)."""
    if tp < 1 or pp < 1 or cfg.n_layers % pp:
        raise ParameterError(
            f"tp and pp must be ≥ 1 and pp must divide {cfg.n_layers} layers; got {tp}, {pp}"
        )
    layout = model_layout(cfg)
    if pp > 1:
        blocks = cfg.n_layers // pp
        layout = [(n, k) for n, k in layout if n.startswith("blocks.") and int(n.split(".")[1]) < blocks]
    return [(n, k if any(r in n for r in _REPLICATED_UNDER_TP) else k // tp) for n, k in layout]


def gpt_simulation(
    cfg,
    *,
    n: int,
    tokens_per_rank: int,
    device_flops_per_s: float,
    compute_efficiency: float,
    alpha_s: float,
    link_bytes_per_s: float,
    bucket_caps_mb,
    algorithm: str = "best",
    grad_bytes_per_elem: int = 2,
    tp: int = 1,
    pp: int = 1,
    accumulation: int = 1,
    per_bucket_overhead_s: float = 0.0,
    overhead_on_channel: bool = False,
) -> list[dict]:
    """Simulated DDP step of ``cfg`` on ``n`` data-parallel ranks for each bucket cap.

    Compute: forward 2N and backward 4N FLOPs per token (plus attention, palm convention
    split 1:2) for ``tokens_per_rank`` tokens per micro-batch, shared by the ``tp·pp``
    devices of one data-parallel rank, at ``compute_efficiency`` × ``device_flops_per_s``;
    each gradient is ready when the backward pass has reached its tensor (time proportional
    to the elements behind it). With ``accumulation`` micro-batches only the last backward
    overlaps the all-reduce (the others run under ``no_sync``).
    Communication: bf16 gradients (``grad_bytes_per_elem``) of one device
    (:func:`sharded_layout`), each bucket all-reduced over the ``n`` data-parallel ranks by
    the α–β model of ``algorithm`` (:func:`allreduce_time`; ``best``: the faster of ring and
    tree per call, the stated setting).
    ``per_bucket_overhead_s`` (and ``overhead_on_channel``): host work per bucket on the
    backward's path (:func:`simulate`; 0 in the stated setting, the overhead fitted to a
    measured sweep in the sensitivity rows).
    Left out, as stated assumptions: TP's activation all-reduces and the pipeline bubble."""
    layout = sharded_layout(cfg, tp=tp, pp=pp)
    numels = np.array([n_ for _, n_ in layout], dtype=float)
    device_flops = flops.flops_per_token(cfg, convention="palm") * tokens_per_rank / (tp * pp)
    rate = device_flops_per_s * compute_efficiency
    forward_s, backward_s = device_flops / 3 / rate, device_flops * 2 / 3 / rate
    earlier_micro_batches_s = (accumulation - 1) * (forward_s + backward_s)
    ready = np.cumsum(numels) / numels.sum() * backward_s  # the backward sweeps the weights in ready order
    param_bytes = (numels * grad_bytes_per_elem).astype(int).tolist()
    out = []
    for cap in bucket_caps_mb:
        link = {"alpha_s": alpha_s, "link_bytes_per_s": link_bytes_per_s, "algorithm": algorithm}
        r = simulate(
            param_bytes,
            ready.tolist(),
            backward_end_s=backward_s,
            bucket_cap_mb=cap,
            n=n,
            forward_s=earlier_micro_batches_s + forward_s,
            per_bucket_overhead_s=per_bucket_overhead_s,
            overhead_on_channel=overhead_on_channel,
            **link,
        )
        r.pop("timeline")
        r["mfu"] = device_flops * accumulation / (r["step_s"] * device_flops_per_s)
        out.append(
            {"preset": cfg.name, "world_size": n, "tp": tp, "pp": pp, "accumulation": accumulation, **r}
        )
    return out


def simulator_speed(preset_name: str = "llama2-70b", world_size: int = 1024, n_sizes: int = 20) -> dict:
    """How long the simulator takes for a 70B layer layout on 1024 ranks over 20 bucket sizes
    (the layout itself is built beforehand), with the stated interconnect."""
    caps = np.geomspace(1, 4096, n_sizes).tolist()
    model_layout(preset(preset_name))  # the layout is built once (on the meta device) and cached
    si = STATED_INTERCONNECT
    t0 = time.perf_counter()
    rows = gpt_simulation(preset(preset_name), n=world_size, bucket_caps_mb=caps, **si)
    seconds = time.perf_counter() - t0
    return {
        "preset": preset_name,
        "world_size": world_size,
        "bucket_sizes": len(rows),
        "tensors": len(model_layout(preset(preset_name))),
        "seconds": seconds,
    }
