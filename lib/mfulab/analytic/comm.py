"""Collective cost models (α–β), nccl-tests bus bandwidth, and the collective benchmark.

Definitions follow nccl-tests ``doc/PERFORMANCE.md``: for a collective over n ranks that
moves S bytes (the *total* size: the full buffer of an all-reduce, the gathered output of
an all-gather, the input of a reduce-scatter) in time t,

    algbw = S / t
    busbw = algbw × bus_factor(op, n)

with bus_factor 2(n−1)/n for all-reduce, (n−1)/n for all-gather, reduce-scatter and
all-to-all, and 1 for broadcast and reduce. busbw is comparable to the bandwidth of the
slowest link whatever n is, which is why nccl-tests reports it: busbw *is* the link-level
figure, with no further factor of two.

This module is analytic (numpy, no torch); the benchmark that measures what it models is
``collectives.py``.

Cost model (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009): a ring all-reduce is
a reduce-scatter and an all-gather, 2(n−1) steps each moving S/n bytes per link:

    t_ring(S) = 2(n−1)·α + 2(n−1)/n · S / B

α is the per-step latency and B the link bandwidth. A binary-tree all-reduce (reduce then
broadcast, pipelined) costs about 2·log2(n)·α + 2·S/B.
"""

from __future__ import annotations

import math

import numpy as np

from mfulab.errors import ParameterError
from mfulab.units import MIB

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")


def _check_n(n):
    if not (isinstance(n, int) and n >= 1):
        raise ParameterError(f"n (ranks) must be a positive integer, got {n!r}")


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` on ``n`` ranks (nccl-tests PERFORMANCE.md)."""
    _check_n(n)
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "reduce"):
        return 1.0
    raise ParameterError(f"unknown collective {op!r}; valid: {', '.join(OPS)}")


def ring_steps(op: str, n: int) -> int:
    """Latency-bearing steps of the ring algorithm: 2(n−1) for all-reduce, n−1 for the
    half-collectives, n−1 for a pipelined ring broadcast/reduce."""
    _check_n(n)
    return 2 * (n - 1) if op == "all_reduce" else (n - 1)


def ring_all_reduce_time(nbytes: float, n: int, *, alpha_s: float, link_bytes_per_s: float) -> float:
    """t = 2(n−1)·α + 2(n−1)/n · S/B (module docstring)."""
    _check_n(n)
    if nbytes < 0 or alpha_s < 0 or link_bytes_per_s <= 0:
        raise ParameterError("nbytes and alpha_s must be non-negative and link_bytes_per_s positive")
    if n == 1:
        return 0.0
    return 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * nbytes / link_bytes_per_s


def tree_all_reduce_time(nbytes: float, n: int, *, alpha_s: float, link_bytes_per_s: float) -> float:
    """Pipelined binary tree: 2·log2(n)·α + 2·S/B (latency grows as log n, bandwidth term
    does not approach the ring's 2(n−1)/n · S/B)."""
    _check_n(n)
    if n == 1:
        return 0.0
    return 2 * math.log2(n) * alpha_s + 2 * nbytes / link_bytes_per_s


def collective_time(op: str, nbytes: float, n: int, *, alpha_s: float, link_bytes_per_s: float) -> float:
    """Ring-model time of any collective: steps·α + bus_factor · S / B."""
    if n == 1:
        return 0.0
    return ring_steps(op, n) * alpha_s + bus_factor(op, n) * nbytes / link_bytes_per_s


def fit_alpha_beta(sizes_bytes, times_s, n: int, op: str = "all_reduce") -> dict:
    """α (per-step latency, s) and B (link bytes/s) of t = steps·α + bus_factor·S/B, each
    from the regime that determines it (Hockney's latency–bandwidth model, as nccl-tests
    reads busbw at large sizes and latency at small ones):

    - B from the least-squares slope over the larger half of the sizes, where S/B dominates;
    - α from the smaller half: the median of (t − bus_factor·S/B) / steps.

    One least-squares line over every size does neither well: unweighted, the largest
    message sets the intercept and α moved 2× between fresh calibrations of one box;
    weighted by 1/t, a noisy mid-size point sets the slope and B moved 40%.
    Returns the fit and its relative residuals at every size."""
    s = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if s.size < 2 or s.size != t.size:
        raise ParameterError("fit_alpha_beta needs at least two (size, time) pairs of equal length")
    steps, factor = ring_steps(op, n), bus_factor(op, n)
    order = np.argsort(s)
    half = s.size // 2
    large = order[half:] if s.size - half >= 2 else order  # two points at least for a slope
    small = order[: max(1, half)]
    slope = np.polyfit(s[large], t[large], 1)[0]
    link = factor / slope if slope > 0 else float("inf")
    alpha = max(float(np.median((t[small] - factor * s[small] / link) / steps)), 0.0)
    predicted = np.array([collective_time(op, x, n, alpha_s=alpha, link_bytes_per_s=link) for x in s])
    return {
        "op": op,
        "n": n,
        "alpha_s": alpha,
        "link_bytes_per_s": link,
        "relative_residuals": ((predicted - t) / t).tolist(),
    }


def nccl_tests_table(rows) -> str:
    """The benchmark in nccl-tests' column layout (size, count, type, time in µs, GB/s, #wrong)."""
    lines = [
        f"{'op':>15} {'size(B)':>12} {'count':>11} {'type':>6} {'time(us)':>10} {'algbw(GB/s)':>12} "
        f"{'busbw(GB/s)':>12} {'#wrong':>7}"
    ]
    for r in rows:
        lines.append(
            f"{r['op']:>15} {r['size_bytes']:>12} {r['count']:>11} {'float':>6} {r['time_s'] * 1e6:>10.1f} "
            f"{r['algbw_bytes_per_s'] / 1e9:>12.3f} {r['busbw_bytes_per_s'] / 1e9:>12.3f} {r['wrong']:>7}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- NCCL's latency model
NCCL_TUNING_SOURCE = (
    "NVIDIA/nccl src/graph/tuning.cc of NCCL 2.23.4 (68b54236), unchanged through 2.30 (5067397c): "
    "baseLat and hwLat of the Simple protocol (NCCL's for megabyte buffers), ncclTopoTuneModel's step "
    "counts (until 2026-12-07 the course read 2.20.3, b6475625: a 28 µs tree step in and across nodes)"
)
NCCL_ALGORITHMS = ("ring", "tree")


def nccl_latency_s(
    op: str,
    n: int,
    n_nodes: int,
    *,
    base_s: float,
    intra_step_s: float,
    inter_step_s: float,
    tree_intra_step_s: float,
    tree_inter_step_s: float,
) -> dict:
    """Per-call latency of ``op`` on ``n`` ranks over ``n_nodes`` nodes by each algorithm NCCL
    can run it with (NCCL's own cost model, :data:`NCCL_TUNING_SOURCE`):

    - ring: base + (steps − inter-node steps)·intra + inter-node steps·inter, with 2(n − 1)
      steps of which 2(N − 1) cross nodes for an all-reduce over N > 1 nodes, n − 1 and N − 1
      for an all-gather or a reduce-scatter;
    - tree (all-reduce only): base + 2·((n/N − 1)·intra + log₂ N·inter), up the tree and down.

    Returns ``{algorithm: seconds}``. Left out: PAT (NCCL ≥ 2.23), the topology's ``latencyInter``,
    the network overhead that raises an intra-node step on AMD hosts (2 µs × 3, Simple) and the
    1.9× "plateau" correction of large multi-node ring all-reduces."""
    _check_n(n)
    if not (isinstance(n_nodes, int) and 1 <= n_nodes <= n):
        raise ParameterError(f"n_nodes must be a whole number between 1 and n = {n}; got {n_nodes!r}")
    if n == 1:
        return {"ring": 0.0}
    if op == "all_reduce":
        steps, inter_steps = 2 * (n - 1), (2 * (n_nodes - 1) if n_nodes > 1 else 0)
    elif op in ("all_gather", "reduce_scatter", "broadcast"):  # broadcast: a pipelined chain
        steps, inter_steps = n - 1, n_nodes - 1
    else:
        raise ParameterError(
            f"the NCCL latency model covers all_reduce, all_gather, reduce_scatter, broadcast; got {op!r}"
        )
    out = {"ring": base_s + (steps - inter_steps) * intra_step_s + inter_steps * inter_step_s}
    if op == "all_reduce":
        ranks_per_node = n / n_nodes
        hops_s = (ranks_per_node - 1) * tree_intra_step_s + math.log2(n_nodes) * tree_inter_step_s
        out["tree"] = base_s + 2 * hops_s  # up the tree and down
    return out


def nccl_call_s(
    op: str,
    nbytes: float,
    n: int,
    n_nodes: int,
    *,
    link_bytes_per_s: float,
    ring_only: bool = False,
    **latencies,
) -> tuple[float, str]:
    """Seconds of one collective call and the algorithm NCCL would pick for it (the faster;
    ``ring_only`` forces the ring, as ``NCCL_ALGO=Ring`` does): a ring sends
    bus_factor · S over the slowest link; a tree all-reduce sends 2·S (NCCL's algorithm
    bandwidth is half the bus bandwidth for trees). Latencies as :func:`nccl_latency_s`."""
    if n == 1 or nbytes <= 0:
        return 0.0, "none"
    if link_bytes_per_s <= 0:
        raise ParameterError("link_bytes_per_s must be positive")
    lat = nccl_latency_s(op, n, n_nodes, **latencies)
    times = {"ring": lat["ring"] + bus_factor(op, n) * nbytes / link_bytes_per_s}
    if "tree" in lat and not ring_only:
        times["tree"] = lat["tree"] + 2 * nbytes / link_bytes_per_s
    algorithm = min(times, key=times.get)
    return times[algorithm], algorithm


# ---------------------------------------------------------------------------- one channel, in order
def fifo_channel(ready_s, durations_s) -> list[tuple[float, float]]:
    """Start and end of each transfer on one communication channel that runs them one at a
    time in the order given: transfer i starts when it is ready (``ready_s[i]``) and the
    channel is free, and holds it ``durations_s[i]``. This is how NCCL serialises the
    collectives of one communicator on its stream, and the overlap model of chapter 02's
    chunked all-reduce and chapter 05's DDP buckets (a bucket is ready at its last gradient)."""
    if len(ready_s) != len(durations_s):
        raise ParameterError("fifo_channel needs one ready time per duration")
    channel_free_s, out = 0.0, []
    for ready, duration in zip(ready_s, durations_s):
        if duration < 0:
            raise ParameterError(f"a transfer cannot take negative time ({duration})")
        start = max(float(ready), channel_free_s)
        channel_free_s = start + float(duration)
        out.append((start, channel_free_s))
    return out


# ---------------------------------------------------------------------------- DP collectives by framework
DP_FRAMEWORKS = ("ddp", "megatron", "deepspeed", "fsdp")
DP_ZERO_STAGES = {"ddp": (0, 1), "megatron": (0, 1), "deepspeed": (0, 1, 2, 3), "fsdp": (2, 3)}
# When a DP call can run beside compute: under the last micro-batch's backward (gradients reduced
# once per step), under every micro-batch's backward or forward, or after the optimizer (parameter
# all-gather of a sharded optimizer, before the next step's first forward).
DP_PHASES = ("last_backward", "backward", "forward", "after_step")
# Framework defaults (each a named argument of dp_collectives, with its source):
DDP_BUCKET_BYTES = 25 * MIB  # torch DistributedDataParallel(bucket_cap_mb=25)
DDP_FIRST_BUCKET_BYTES = 2**20  # DDP's first bucket: 1 MiB (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES)
DEEPSPEED_BUCKET_ELEMS = 5e8  # DeepSpeed zero_optimization reduce_bucket_size and allgather_bucket_size
DEEPSPEED_PREFETCH_ELEMS = 5e7  # DeepSpeed ZeRO-3 stage3_prefetch_bucket_size
MEGATRON_MIN_BUCKET_ELEMS, MEGATRON_BUCKET_ELEMS_PER_RANK = 40e6, 1e6  # max(40M, 1M·dp) (Megatron-Core DDP)


def ddp_buckets(
    tensor_bytes, *, cap_bytes: float = DDP_BUCKET_BYTES, first_cap_bytes: float | None = None
) -> list[list[int]]:
    """Indices of gradient tensors (in the order they become ready) per DDP bucket, by DDP's
    rules (torch ``reducer.cpp``, ``_compute_bucket_assignment_by_size``): a bucket closes as
    soon as its size reaches its cap, the tensor that crosses the cap stays in it (tensors are
    never split); the first bucket's cap is ``first_cap_bytes`` (DDP: 1 MiB when
    ``bucket_cap_mb`` is left at its default, else the cap itself)."""
    if cap_bytes <= 0:
        raise ParameterError(f"a bucket cap must be positive, got {cap_bytes} bytes")
    limit = cap_bytes if first_cap_bytes is None else first_cap_bytes
    buckets, current, size = [], [], 0
    for i, nbytes in enumerate(tensor_bytes):
        current.append(i)
        size += nbytes
        if size >= limit:
            buckets.append(current)
            current, size, limit = [], 0, cap_bytes
    if current:
        buckets.append(current)
    return buckets


def _calls(total: float, per_call: float, at_least: int = 1) -> int:
    return max(at_least, int(-(-total // per_call)))


def check_shard_group(shard_group: int | None, *, dp: int, framework: str) -> None:
    """HSDP (FSDP's HYBRID_SHARD): ZeRO shards over ``shard_group`` ranks and replicates across
    the rest, so the group must be a whole divisor of ``dp`` between 2 and dp − 1, under fsdp."""
    if shard_group is not None and not (
        framework == "fsdp"
        and isinstance(shard_group, int)
        and 1 < shard_group < dp
        and dp % shard_group == 0
    ):
        raise ParameterError(
            f"shard_group (FSDP's HYBRID_SHARD) needs framework fsdp and a whole divisor of dp = {dp} "
            f"between 2 and dp − 1; got {shard_group!r} with {framework}"
        )


def dp_collectives(
    n_params: float,
    *,
    dp: int,
    zero_stage: int,
    micro_batches: int,
    framework: str,
    units: int = 1,
    grad_bytes_per_elem: float = 2,
    param_bytes_per_elem: float = 2,
    overlap: bool = True,
    ddp_bucket_bytes: float = DDP_BUCKET_BYTES,
    deepspeed_bucket_elems: float = DEEPSPEED_BUCKET_ELEMS,
    deepspeed_prefetch_elems: float = DEEPSPEED_PREFETCH_ELEMS,
    tensor_elems=None,
    shard_group: int | None = None,
) -> list[dict]:
    """The data-parallel collectives of one optimizer step for a ``n_params`` replica shard,
    as each framework issues them: ``[{op, phase, calls, bytes_per_call}]`` with the full buffer
    of each call (an all-reduce's input, an all-gather's output); :data:`DP_PHASES` says what
    a call can hide under. ``units``: the FSDP units (one per block) or ZeRO-3 modules.

    - ``ddp`` (PyTorch DDP, no_sync over the accumulation steps): one all-reduce of the
      gradients per step in buckets of ``ddp_bucket_bytes``, the first 1 MiB at the default
      cap; with ``tensor_elems`` (the shard's gradient tensors in ready order,
      ``parallel.stage_grad_tensors``) the buckets DDP forms from them (:func:`ddp_buckets`),
      one call per bucket, else the bytes cut evenly;
    - ``megatron`` (Megatron-LM/-Core): ZeRO 0 all-reduces the gradient buffer, the distributed
      optimizer (ZeRO 1) reduce-scatters it and all-gathers the updated parameters; buckets of
      max(40M, 1M·dp) elements with ``overlap`` (``--overlap-grad-reduce``), else one call;
    - ``deepspeed`` (Rajbhandari et al. 2020): ZeRO 0 all-reduces, 1 reduce-scatters once per
      step, 2 every micro-batch, each in buckets of ``deepspeed_bucket_elems``, then the
      parameters are all-gathered in buckets of the same size; 3 all-gathers every micro-batch's
      parameters forward and backward (``deepspeed_prefetch_elems`` per call, at least one per
      unit) and reduce-scatters its gradients;
    - ``ddp`` at ZeRO 1 (DDP with torch's ``ZeroRedundancyOptimizer``): DDP's all-reduce, then
      after the step each updated parameter broadcast from the rank that owns it, one call per
      tensor (``parameters_as_bucket_view=False``, the default), in the gradients' dtype (DDP's
      gradients have their parameters' dtype);
    - ``fsdp`` (FSDP/FSDP2, Zhao et al. 2023): per micro-batch and unit one all-gather forward,
      one reduce-scatter backward, and with FULL_SHARD (ZeRO 3) one all-gather backward again;
      with ``shard_group`` g (HYBRID_SHARD, HSDP) those run among g ranks and each
      reduce-scattered shard is then all-reduced among the dp/g replicas of it.

    A call with ``"group": "shard"`` or ``"replica"`` runs in that subgroup, else in the whole
    DP group.

    With equal element sizes the bytes are ``memory.zero_traffic_bytes_per_step``'s for
    ``deepspeed`` (a test pins it)."""
    if framework not in DP_FRAMEWORKS:
        raise ParameterError(f"framework must be one of {', '.join(DP_FRAMEWORKS)}; got {framework!r}")
    if zero_stage not in DP_ZERO_STAGES[framework]:
        raise ParameterError(
            f"{framework} runs ZeRO stage {' or '.join(map(str, DP_ZERO_STAGES[framework]))}, not "
            f"{zero_stage!r} (FSDP's SHARD_GRAD_OP is 2 and FULL_SHARD 3; Megatron's distributed "
            "optimizer is 1; DDP alone shards nothing, with ZeroRedundancyOptimizer it is 1)"
        )
    if not (isinstance(micro_batches, int) and micro_batches >= 1 and isinstance(units, int) and units >= 1):
        raise ParameterError("micro_batches and units must be whole numbers ≥ 1")
    check_shard_group(shard_group, dp=dp, framework=framework)
    if dp == 1:
        return []
    m = micro_batches
    grad_bytes, param_bytes = n_params * grad_bytes_per_elem, n_params * param_bytes_per_elem

    def call(op, phase, total_bytes, n_calls, repeats=1):
        return {"op": op, "phase": phase, "calls": n_calls * repeats, "bytes_per_call": total_bytes / n_calls}

    if framework == "ddp" and tensor_elems is not None:
        tensor_bytes = [n * grad_bytes_per_elem for n in tensor_elems]
        first = DDP_FIRST_BUCKET_BYTES if ddp_bucket_bytes == DDP_BUCKET_BYTES else None
        sizes = [
            sum(tensor_bytes[i] for i in b)
            for b in ddp_buckets(tensor_bytes, cap_bytes=ddp_bucket_bytes, first_cap_bytes=first)
        ]
        out = [{"op": "all_reduce", "phase": "last_backward", "calls": 1, "bytes_per_call": b} for b in sizes]
        if zero_stage == 1:  # ZeroRedundancyOptimizer: each tensor from its owner, after the step
            out.append(call("broadcast", "after_step", grad_bytes, len(tensor_bytes)))
        return out
    if framework == "ddp":
        rest = max(0.0, grad_bytes - DDP_FIRST_BUCKET_BYTES)
        n_calls = 1 + (_calls(rest, ddp_bucket_bytes) if rest > 0 else 0)
        out = [call("all_reduce", "last_backward", grad_bytes, n_calls)]
        return out + ([call("broadcast", "after_step", grad_bytes, 1)] if zero_stage == 1 else [])
    if framework == "megatron":
        bucket_bytes = (
            max(MEGATRON_MIN_BUCKET_ELEMS, MEGATRON_BUCKET_ELEMS_PER_RANK * dp) * grad_bytes_per_elem
        )
        n_calls = _calls(grad_bytes, bucket_bytes) if overlap else 1
        if zero_stage == 0:
            return [call("all_reduce", "last_backward", grad_bytes, n_calls)]
        return [
            call("reduce_scatter", "last_backward", grad_bytes, n_calls),
            call("all_gather", "after_step", param_bytes, n_calls),
        ]
    if framework == "fsdp":
        shard = {} if shard_group is None else {"group": "shard"}
        out = [
            {**call("all_gather", "forward", param_bytes, units, m), **shard},
            {**call("reduce_scatter", "backward", grad_bytes, units, m), **shard},
        ]
        if zero_stage == 3:
            out.append({**call("all_gather", "backward", param_bytes, units, m), **shard})
        if shard_group is not None:  # HSDP: the reduced shard, all-reduced among its replicas
            out.append(
                {**call("all_reduce", "backward", grad_bytes / shard_group, units, m), "group": "replica"}
            )
        return out
    bucket = deepspeed_bucket_elems
    if zero_stage == 0:
        return [call("all_reduce", "last_backward", grad_bytes, _calls(n_params, bucket))]
    if zero_stage in (1, 2):
        reduce = (
            call("reduce_scatter", "last_backward", grad_bytes, _calls(n_params, bucket))
            if zero_stage == 1
            else call("reduce_scatter", "backward", grad_bytes, _calls(n_params, bucket), m)
        )
        return [reduce, call("all_gather", "after_step", param_bytes, _calls(n_params, bucket))]
    gathers = _calls(n_params, deepspeed_prefetch_elems, at_least=units)
    return [
        call("all_gather", "forward", param_bytes, gathers, m),
        call("all_gather", "backward", param_bytes, gathers, m),
        call("reduce_scatter", "backward", grad_bytes, _calls(n_params, bucket), m),
    ]


def dp_bytes_per_step(collectives: list[dict]) -> float:
    """The summed buffers of :func:`dp_collectives` (an all-reduce counted twice: a
    reduce-scatter and an all-gather), comparable with ``memory.zero_traffic_bytes_per_step``."""
    return sum(c["calls"] * c["bytes_per_call"] * (2 if c["op"] == "all_reduce" else 1) for c in collectives)
