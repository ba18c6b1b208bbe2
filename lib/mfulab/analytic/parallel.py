"""Analytic costs of parallel layouts: pipeline bubbles, tensor (+ sequence) parallel
communication, optimizer offload over the host link, and mixture-of-experts all-to-all.
Data-parallel / ZeRO memory and traffic are in :mod:`memory`; times go through the α–β
models of :mod:`comm`. The layout planner that joins them is :mod:`layouts`.

Sources:
- Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM" (arXiv:2104.04473). §2.2.1: with p stages and m micro-batches the
  pipeline bubble takes (p − 1) micro-batch slots of forward + backward on every stage, so
  bubble time / ideal compute time = (p − 1)/m for GPipe and 1F1B alike (1F1B holds p
  micro-batches in flight instead of m). §2.2.2: with v model chunks per device (interleaved
  1F1B) the bubble shrinks to (p − 1)/(v·m) and point-to-point communication grows v-fold;
  Megatron requires m to be a multiple of p for it. §3 (after Shoeybi et al. 2019, Fig. 4):
  tensor parallelism all-reduces the b·s·h activations twice per layer in forward (after the
  attention output projection and the MLP's second linear) and twice in backward.
- Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
  (arXiv:2205.05198). §4.2.2: with sequence parallelism each of those all-reduces becomes a
  reduce-scatter plus an all-gather (4 of each per layer, forward + backward), the same
  bytes on a ring. §4.2.3: the interleaved schedule keeps activations of L·(1 + (p−1)/(p·v))
  layers on the first stage, against L for 1F1B.
- Ren et al. 2021, "ZeRO-Offload" (arXiv:2101.06840), §4.1: the optimizer step runs on the
  host; per step each device sends its fp16 gradient shard down and receives its fp16
  parameter shard back, 2Ψ/N bytes each way.
- Lepikhin et al. 2021 (GShard) and Fedus et al. 2022 (Switch Transformer, §2.1): an expert
  layer dispatches every token's hidden vector to its k experts with one all-to-all and
  combines the results with another; backward repeats both. The most loaded expert rank
  sets the time.

Conventions: counts are *elements* or *bytes each device sends*; a ring collective over n
ranks sends (n − 1)/n of its buffer per device (all-gather, reduce-scatter, all-to-all) or
2(n − 1)/n (all-reduce), as in nccl-tests' bus bandwidth (:mod:`comm`).
"""

from __future__ import annotations

import numbers

from mfulab.analytic.comm import bus_factor, collective_time
from mfulab.analytic.config import TransformerConfig
from mfulab.analytic.flops import param_tensors
from mfulab.errors import ParameterError

SCHEDULES = ("gpipe", "1f1b", "interleaved")


def _check_int(**values):
    for name, value in values.items():
        if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1):
            raise ParameterError(f"{name} must be a whole number ≥ 1, got {value!r}")


# ---------------------------------------------------------------------------- pipeline
def pipeline_bubble_fraction(*, p: int, m: int, v: int = 1) -> float:
    """Bubble time over ideal compute time for ``p`` stages, ``m`` micro-batches and ``v``
    model chunks per device (Narayanan et al. 2021, §2.2.1–2.2.2): (p − 1)/(v·m)."""
    _check_int(p=p, m=m, v=v)
    return (p - 1) / (v * m)


def check_pipeline(*, p: int, m: int, v: int = 1, n_layers: int | None = None) -> str:
    """The schedule a (p, m, v) layout runs, or :class:`ParameterError` with the reason a
    layout cannot exist: v > 1 needs p > 1 and m a multiple of p (Megatron's interleaved
    schedule); 1F1B with p > 1 needs m ≥ p (otherwise the pipeline never fills); the layers
    must split evenly over p·v chunks."""
    _check_int(p=p, m=m, v=v)
    if n_layers is not None and n_layers % (p * v):
        raise ParameterError(f"{n_layers} layers do not split into p·v = {p * v} pipeline chunks")
    if v > 1:
        if p == 1:
            raise ParameterError("virtual stages (v > 1) need pipeline parallelism (p > 1)")
        if m % p:
            raise ParameterError(f"the interleaved schedule needs m a multiple of p; got m={m}, p={p}")
        return "interleaved"
    if p > 1 and m < p:
        raise ParameterError(f"1F1B needs at least p micro-batches per step; got m={m} < p={p}")
    return "1f1b"


def pipeline_schedule_costs(*, p: int, m: int, v: int = 1, schedule: str = "1f1b") -> dict:
    """What a schedule costs besides compute (module docstring, Narayanan §2.2; Korthikanti
    §4.2.3): the bubble fraction; how many layers' activations the first stage keeps, as a
    multiple of the L layers 1F1B keeps (GPipe: all m micro-batches of its L/p layers, m/p;
    interleaved: 1 + (p − 1)/(p·v), capped at m/p: no schedule keeps more micro-batches than the
    step has, as the executed schedules of chapter 08 show at m = p); and the point-to-point
    messages per micro-batch and stage boundary relative to 1F1B (v for interleaved)."""
    if schedule not in SCHEDULES:
        raise ParameterError(f"unknown schedule {schedule!r}; valid: {', '.join(SCHEDULES)}")
    if schedule != "interleaved" and v != 1:
        raise ParameterError(f"v = {v} virtual stages need the interleaved schedule, not {schedule!r}")
    if schedule == "interleaved":
        check_pipeline(p=p, m=m, v=v)
    bubble = pipeline_bubble_fraction(p=p, m=m, v=v)
    in_flight_factor = {"gpipe": m / p, "1f1b": 1.0, "interleaved": 1 + (p - 1) / (p * v)}[schedule]
    all_micro_batches_factor = m / p  # every micro-batch of the step held at once (GPipe's)
    activation_layers_factor = min(in_flight_factor, all_micro_batches_factor)
    return {
        "schedule": schedule,
        "bubble_fraction": bubble,
        "activation_layers_factor": activation_layers_factor,
        "p2p_messages_factor": float(v),
    }


def pipeline_p2p_elements_per_step(
    cfg: TransformerConfig, *, micro_batch: int, m: int, v: int = 1, seq_len: int | None = None
) -> float:
    """Elements an interior stage sends per step: each micro-batch's b·s·h activation forward
    and its gradient backward, at each of the v chunk boundaries (Narayanan §2.2.2)."""
    _check_int(micro_batch=micro_batch, m=m, v=v)
    s = cfg.seq_len if seq_len is None else seq_len
    return 2 * m * v * micro_batch * s * cfg.d_model


# ---------------------------------------------------------------------------- tensor parallel
def tp_comm_elements_per_layer(
    cfg: TransformerConfig,
    *,
    micro_batch: int,
    tp: int,
    sequence_parallel: bool = False,
    seq_len: int | None = None,
) -> dict:
    """Tensor-parallel collectives of one layer and one micro-batch, forward + backward
    (Narayanan et al. 2021 §3; Korthikanti et al. 2022 §4.2.2 with ``sequence_parallel``):
    4 all-reduces of b·s·h elements, or 4 all-gathers + 4 reduce-scatters whose full buffers
    are b·s·h. Returns the collectives and the elements each device sends on a ring: both
    8·(t − 1)/t·b·s·h — sequence parallelism does not change the traffic, it removes the
    duplicated LayerNorm and dropout work and memory. (Megatron's backward also re-gathers
    the sequence-sharded input of each column-parallel linear for its weight gradient when
    it did not keep it; not counted here.)"""
    _check_int(micro_batch=micro_batch, tp=tp)
    s = cfg.seq_len if seq_len is None else seq_len
    activation_elements = micro_batch * s * cfg.d_model  # b·s·h: the full buffer of each collective
    if tp == 1:
        collectives = []
    elif sequence_parallel:
        collectives = [("all_gather", 4, activation_elements), ("reduce_scatter", 4, activation_elements)]
    else:
        collectives = [("all_reduce", 4, activation_elements)]
    sent = sum(count * bus_factor(op, tp) * elements for op, count, elements in collectives)
    return {
        "tp": tp,
        "sequence_parallel": sequence_parallel,
        "collectives": [{"op": op, "count": c, "elements": e} for op, c, e in collectives],
        "elements_sent_per_device": sent,
    }


# Megatron-style tensor parallelism (Shoeybi et al. 2019, §3): q/k/v/up/gate column-parallel
# (weights and biases split), o_proj/down row-parallel (weight split, bias replicated), the
# token embedding and head vocab-parallel; norms and learned positions stay whole.
REPLICATED_UNDER_TP = ("norm", "o_proj.bias", "down.bias", "wpe.")


def stage_grad_tensors(
    cfg: TransformerConfig, *, tp: int = 1, pp: int = 1, blocks: int | None = None
) -> list[tuple[str, int]]:
    """(name, element count) of the gradients one device of a pipeline stage holds, in the
    order the backward makes them ready (reverse of registration, ``flops.param_tensors``):
    TP splits every tensor but those of :data:`REPLICATED_UNDER_TP`; with ``pp > 1`` the stage
    holds ``blocks`` blocks (default ``n_layers / pp``) and no embedding, head or final norm
    (an interior stage's share). What DDP buckets (``comm.ddp_buckets``)."""
    _check_int(tp=tp, pp=pp)
    if blocks is None and cfg.n_layers % pp:
        raise ParameterError(f"pp must divide {cfg.n_layers} layers (or name the stage's blocks); got {pp}")
    tensors = list(reversed(param_tensors(cfg)))
    if pp > 1:
        blocks = cfg.n_layers // pp if blocks is None else blocks
        tensors = [(n, k) for n, k in tensors if n.startswith("blocks.") and int(n.split(".")[1]) < blocks]
    return [(n, k if any(r in n for r in REPLICATED_UNDER_TP) else k // tp) for n, k in tensors]


def tp_comm_time_per_layer(
    cfg: TransformerConfig,
    *,
    micro_batch: int,
    tp: int,
    alpha_s: float,
    link_bytes_per_s: float,
    sequence_parallel: bool = False,
    bytes_per_elem: float = 2,
    seq_len: int | None = None,
) -> float:
    """Seconds of tensor-parallel communication per layer and micro-batch (forward + backward):
    each collective of :func:`tp_comm_elements_per_layer` through the ring α–β model."""
    comm = tp_comm_elements_per_layer(
        cfg, micro_batch=micro_batch, tp=tp, sequence_parallel=sequence_parallel, seq_len=seq_len
    )
    return sum(
        c["count"]
        * collective_time(
            c["op"], c["elements"] * bytes_per_elem, tp, alpha_s=alpha_s, link_bytes_per_s=link_bytes_per_s
        )
        for c in comm["collectives"]
    )


# ---------------------------------------------------------------------------- offload
OFFLOAD_MODES = ("zero-offload", "adam-moments")


def offload_bytes_per_step(
    n_params: float, *, dp: int = 1, mode: str = "zero-offload", host_link_bytes_per_s: float | None = None
) -> dict:
    """Bytes each device moves over its host link per optimizer step, each way, and the time
    at ``host_link_bytes_per_s`` per direction (a full-duplex link: the larger direction):

    - ``zero-offload`` (Ren et al. 2021, §4.1): the optimizer runs on the host; fp16 gradients
      down and fp16 parameters back, 2Ψ/N bytes each way for a device's 1/N shard;
    - ``adam-moments``: the step stays on the device and only Adam's two fp32 moments live on
      the host (the article's A15 reading): 8Ψ/N bytes in and 8Ψ/N out every step."""
    if mode not in OFFLOAD_MODES:
        raise ParameterError(f"unknown offload mode {mode!r}; valid: {', '.join(OFFLOAD_MODES)}")
    _check_int(dp=dp)
    shard_params = n_params / dp
    per_direction_bytes = (2 if mode == "zero-offload" else 8) * shard_params
    out = {
        "mode": mode,
        "device_to_host_bytes": per_direction_bytes,
        "host_to_device_bytes": per_direction_bytes,
    }
    if host_link_bytes_per_s is not None:
        if host_link_bytes_per_s <= 0:
            raise ParameterError("host_link_bytes_per_s must be positive")
        out["time_s"] = per_direction_bytes / host_link_bytes_per_s
    return out


# ---------------------------------------------------------------------------- mixture of experts
def moe_all_to_all_bytes_per_layer(
    *, tokens: int, hidden: int, top_k: int, bytes_per_elem: float = 2, backward: bool = True
) -> float:
    """Bytes of one expert layer's all-to-alls for ``tokens`` tokens on a device: each token's
    hidden vector goes to its k experts (dispatch) and comes back (combine), tokens·h·k·e
    each way; backward sends the gradients of both again (GShard; Switch §2.1)."""
    _check_int(tokens=tokens, hidden=hidden, top_k=top_k)
    one_way_bytes = tokens * hidden * top_k * bytes_per_elem
    return one_way_bytes * 2 * (2 if backward else 1)


def all_to_all_call_s(
    nbytes: float,
    n_ranks: int,
    *,
    alpha_s: float,
    link_bytes_per_s: float,
    ranks_per_node: int | None = None,
    inter_link_bytes_per_s: float | None = None,
) -> float:
    """Seconds of one all-to-all in which each of ``n_ranks`` ranks sends ``nbytes`` spread
    evenly over the group, pairwise (Thakur et al. 2005 §4: n − 1 steps of α, (n − 1)/n of the
    bytes on the wire). With ``ranks_per_node`` r < n the group spans nodes: the bytes for the
    r − 1 peers in the node go over ``link_bytes_per_s``, those for the n − r others through the
    rank's own network port at ``inter_link_bytes_per_s``, both at once."""
    if n_ranks <= 1:
        return 0.0
    r = n_ranks if ranks_per_node is None else max(1, min(n_ranks, ranks_per_node))
    if r >= n_ranks:
        return collective_time(
            "all_to_all", nbytes, n_ranks, alpha_s=alpha_s, link_bytes_per_s=link_bytes_per_s
        )
    if inter_link_bytes_per_s is None:
        raise ParameterError("an all-to-all across nodes needs inter_link_bytes_per_s")
    intra_s = nbytes * (r - 1) / n_ranks / link_bytes_per_s
    inter_s = nbytes * (n_ranks - r) / n_ranks / inter_link_bytes_per_s
    return (n_ranks - 1) * alpha_s + max(intra_s, inter_s)


def moe_all_to_all_time(
    *,
    tokens: int,
    hidden: int,
    top_k: int,
    n_ranks: int,
    alpha_s: float,
    link_bytes_per_s: float,
    imbalance: float = 1.0,
    bytes_per_elem: float = 2,
    backward: bool = True,
) -> dict:
    """Seconds of one expert layer's all-to-alls on ``n_ranks`` expert-parallel ranks, for the
    average rank and for the most loaded one, which receives ``imbalance`` × the average
    (max over mean tokens per expert rank, ≥ 1) and so sets the layer's time; every other
    rank waits the difference."""
    if imbalance < 1:
        raise ParameterError(
            f"imbalance is the most loaded rank's tokens over the mean, ≥ 1; got {imbalance}"
        )
    nbytes = moe_all_to_all_bytes_per_layer(
        tokens=tokens, hidden=hidden, top_k=top_k, bytes_per_elem=bytes_per_elem, backward=backward
    )
    calls = 4 if backward else 2
    per_call = nbytes / calls
    link = dict(alpha_s=alpha_s, link_bytes_per_s=link_bytes_per_s)
    mean_s = calls * all_to_all_call_s(per_call, n_ranks, **link)
    slowest_s = calls * all_to_all_call_s(per_call * imbalance, n_ranks, **link)
    return {"bytes": nbytes, "mean_rank_s": mean_s, "slowest_rank_s": slowest_s, "wait_s": slowest_s - mean_s}
