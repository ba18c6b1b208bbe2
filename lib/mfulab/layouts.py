"""The layout planner: for a model, a cluster, a global batch and a sequence length, every
TP × PP × DP layout (× virtual stages, ZeRO stage, recompute policy, micro-batch) that can
exist and fits memory, ranked by predicted step time with each term shown.

The step of one layout, per device (all terms in seconds):

    compute      = model FLOPs per step / (n_devices · peak · compute_efficiency)
    recompute    = (hardware − model FLOPs) per step / (same)        flops.flops_per_token
    pp_bubble    = (p − 1)/(v·m) · (compute + recompute)              parallel.pipeline_bubble_fraction
    tp_comm      = per-layer TP collectives · L/p layers · m          parallel.tp_comm_time_per_layer
                   (× 1.5 under full recompute: the forward's two all-reduces run again)
    pp_p2p       = 2·m·v activations of b·s·h/t elements over the stage link (exposed)
    dp_comm      = ZeRO traffic per step over the data-parallel ring  memory.zero_traffic_bytes_per_step
    dp_exposed   = max(0, dp_comm − dp_overlap · backward it can hide under)
    step         = compute + recompute + pp_bubble + tp_comm + pp_p2p + dp_exposed

m = global_batch / (dp · micro_batch) micro-batches per step. The backward DP traffic can hide
under is the last micro-batch's backward (2/3 of its compute) at ZeRO 0–1, where gradients
accumulate locally and are reduced once; at ZeRO 2–3 every micro-batch reduces (and stage 3
prefetches its gathers), so the whole step's compute.

Placement follows Megatron-LM's rank order (tensor innermost, then data, then pipeline;
Narayanan et al. 2021 §3.3): a TP group uses the intra-node link when ``tp`` ≤ devices per
node, a DP group when ``tp · dp`` ≤ devices per node, the pipeline when ``tp · dp · pp`` does.

Memory: ``memory.memory_per_device`` (ZeRO states, Korthikanti Table 2 activations with 1F1B
keeping L layers' worth, logits), the activations scaled by the schedule's
``activation_layers_factor`` (interleaved: 1 + (p − 1)/(p·v)); a layout fits when the total is
at most (1 − ``memory_margin``) of the device's memory.

Assumptions (not measured; each a named argument of :func:`plan` with its default's source):
``compute_efficiency`` 0.5 (Megatron-LM reached 52% of A100 peak at 1T parameters, Narayanan et
al. 2021 Table 1; PaLM 57.8% HFU, Chowdhery et al. 2022 Table 3), ``dp_overlap`` 0.8 (our
assumption: the share of that backward DDP's buckets can hide under), ``memory_margin`` 0.1
(our assumption: allocator fragmentation, runtime context and buffers; the recompute study's
``fragmentation_margin``), ``bytes_per_elem`` 2 (bf16 activations, gradients and messages).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from . import flops, memory, parallel
from .comm import collective_time
from .config import ParameterError, TransformerConfig

RECOMPUTES = ("none", "selective", "full")


@dataclass(frozen=True)
class Link:
    """One α–β link: per-step latency and bandwidth (``comm``'s ring model)."""

    alpha_s: float
    bytes_per_s: float


@dataclass(frozen=True)
class Cluster:
    n_devices: int
    devices_per_node: int
    device_memory_bytes: float
    peak_flops_per_s: float
    intra_node: Link
    inter_node: Link

    def __post_init__(self):
        if self.n_devices < 1 or self.devices_per_node < 1:
            raise ParameterError("a cluster needs at least one device and one device per node")
        if self.n_devices > self.devices_per_node and self.n_devices % self.devices_per_node:
            raise ParameterError(
                f"{self.n_devices} devices do not fill nodes of {self.devices_per_node}: the planner "
                "places whole nodes"
            )

    def link(self, span: int) -> Link:
        """The link a group of ``span`` consecutive ranks communicates over."""
        return self.intra_node if span <= self.devices_per_node else self.inter_node


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_layouts(
    cfg: TransformerConfig,
    *,
    n_devices: int,
    global_batch: int,
    micro_batches=(1, 2, 4, 8),
    virtual_stages=(1, 2),
    zero_stages=(0, 1, 2, 3),
    recomputes=RECOMPUTES,
    max_tp: int | None = None,
):
    """Every (tp, pp, dp, v, micro_batch, zero_stage, recompute) that can exist: tp divides the
    heads (and the key-value heads), p·v divides the layers, tp·pp divides the devices, the
    global batch splits into dp × micro-batches, and the schedule is legal
    (``parallel.check_pipeline``). ``max_tp`` caps TP (e.g. at the devices per node)."""
    kv_heads = cfg.n_kv_heads or cfg.n_heads
    tps = [t for t in _divisors(cfg.n_heads) if kv_heads % t == 0 and n_devices % t == 0]
    tps = [t for t in tps if max_tp is None or t <= max_tp]
    for tp, pp in product(tps, _divisors(cfg.n_layers)):
        if n_devices % (tp * pp):
            continue
        dp = n_devices // (tp * pp)
        for micro_batch, v in product(micro_batches, virtual_stages):
            if global_batch % (dp * micro_batch):
                continue
            m = global_batch // (dp * micro_batch)
            try:
                parallel.check_pipeline(p=pp, m=m, v=v, n_layers=cfg.n_layers)
            except ParameterError:
                continue
            for zero_stage, recompute in product(zero_stages, recomputes):
                yield {
                    "tp": tp,
                    "pp": pp,
                    "dp": dp,
                    "v": v,
                    "micro_batch": micro_batch,
                    "m": m,
                    "zero_stage": zero_stage,
                    "recompute_policy": recompute,
                }


def layout_terms(
    cfg: TransformerConfig,
    layout: dict,
    *,
    cluster: Cluster,
    global_batch: int,
    compute_efficiency: float = 0.5,
    dp_overlap: float = 0.8,
    memory_margin: float = 0.1,
    bytes_per_elem: float = 2,
    sequence_parallel: bool = True,
) -> dict:
    """One layout's memory and step-time terms (module docstring)."""
    tp, pp, dp, v, b, m = (layout[k] for k in ("tp", "pp", "dp", "v", "micro_batch", "m"))
    zero_stage, recompute = layout["zero_stage"], layout["recompute_policy"]
    sp = sequence_parallel and tp > 1
    s, L, e = cfg.seq_len, cfg.n_layers, bytes_per_elem
    tokens_per_step = global_batch * s
    device_flops_per_s = cluster.n_devices * cluster.peak_flops_per_s * compute_efficiency
    model_flops_per_token = flops.flops_per_token(cfg, convention="causal")
    hardware_flops_per_token = flops.flops_per_token(cfg, convention="causal", recompute=recompute)
    compute_s = model_flops_per_token * tokens_per_step / device_flops_per_s
    recompute_s = (hardware_flops_per_token - model_flops_per_token) * tokens_per_step / device_flops_per_s
    schedule = "interleaved" if v > 1 else "1f1b"
    costs = parallel.pipeline_schedule_costs(p=pp, m=m, v=v, schedule=schedule)
    bubble_s = costs["bubble_fraction"] * (compute_s + recompute_s)

    tp_link = cluster.link(tp)
    tp_layer_s = parallel.tp_comm_time_per_layer(
        cfg,
        micro_batch=b,
        tp=tp,
        alpha_s=tp_link.alpha_s,
        link_bytes_per_s=tp_link.bytes_per_s,
        sequence_parallel=sp,
        bytes_per_elem=e,
    )
    tp_comm_s = tp_layer_s * (L // pp) * m * (1.5 if recompute == "full" else 1.0)

    pp_p2p_s = 0.0
    if pp > 1:
        pp_link = cluster.link(tp * dp * pp)
        p2p_bytes = parallel.pipeline_p2p_elements_per_step(cfg, micro_batch=b, m=m, v=v) / tp * e
        pp_p2p_s = 2 * m * v * pp_link.alpha_s + p2p_bytes / pp_link.bytes_per_s

    dp_comm_s = 0.0
    if dp > 1:
        dp_link = cluster.link(tp * dp)
        n_params_shard = flops.param_count(cfg) / (tp * pp)
        dp_bytes = memory.zero_traffic_bytes_per_step(
            n_params_shard, zero_stage=zero_stage, accumulation_steps=m, bytes_per_elem=e
        )
        # zero_traffic counts 2Ψ for an all-reduce: the ring sends (dp − 1)/dp of it per device
        dp_comm_s = collective_time(
            "all_reduce", dp_bytes / 2, dp, alpha_s=dp_link.alpha_s, link_bytes_per_s=dp_link.bytes_per_s
        )
    step_compute_s = compute_s + recompute_s
    hideable_s = (2 / 3) * step_compute_s / m if zero_stage <= 1 else step_compute_s
    dp_exposed_s = max(0.0, dp_comm_s - dp_overlap * hideable_s)
    step_s = step_compute_s + bubble_s + tp_comm_s + pp_p2p_s + dp_exposed_s

    mem = memory.memory_per_device(
        cfg,
        micro_batch=b,
        tp=tp,
        pp=pp,
        dp=dp,
        zero_stage=zero_stage,
        sequence_parallel=sp,
        recompute=recompute,
        bytes_per_elem=e,
    )
    activations_bytes = mem["activations_bytes"] * costs["activation_layers_factor"]
    total_bytes = mem["model_states_bytes"] + activations_bytes + mem["logits_bytes"]
    palm_flops_per_step = flops.flops_per_token(cfg, convention="palm") * tokens_per_step
    peak_per_step = cluster.n_devices * cluster.peak_flops_per_s * step_s
    return {
        **layout,
        "sequence_parallel": sp,
        "schedule": schedule,
        "memory_gib": total_bytes / 2**30,
        "fits": total_bytes <= (1 - memory_margin) * cluster.device_memory_bytes,
        "compute_s": compute_s,
        "recompute_s": recompute_s,
        "pp_bubble_s": bubble_s,
        "tp_comm_s": tp_comm_s,
        "pp_p2p_s": pp_p2p_s,
        "dp_comm_s": dp_comm_s,
        "dp_exposed_s": dp_exposed_s,
        "step_s": step_s,
        "tokens_per_s": tokens_per_step / step_s,
        "mfu_palm": palm_flops_per_step / peak_per_step,
        "hfu_causal": hardware_flops_per_token * tokens_per_step / peak_per_step,
    }


def plan(
    cfg: TransformerConfig,
    *,
    cluster: Cluster,
    global_batch: int,
    top: int | None = 20,
    include_unfit: bool = False,
    max_tp: int | None = None,
    micro_batches=(1, 2, 4, 8),
    virtual_stages=(1, 2),
    zero_stages=(0, 1, 2, 3),
    recomputes=RECOMPUTES,
    **assumptions,
):
    """Every candidate layout's terms (:func:`layout_terms`), the fitting ones ranked by step
    time, then memory (``top`` rows; ``include_unfit`` keeps the rest after them). ``assumptions`` are
    :func:`layout_terms`' named assumptions. Refuses a batch no layout can split."""
    import pandas as pd

    rows = [
        layout_terms(cfg, layout, cluster=cluster, global_batch=global_batch, **assumptions)
        for layout in candidate_layouts(
            cfg,
            n_devices=cluster.n_devices,
            global_batch=global_batch,
            micro_batches=micro_batches,
            virtual_stages=virtual_stages,
            zero_stages=zero_stages,
            recomputes=recomputes,
            max_tp=max_tp,
        )
    ]
    if not rows:
        raise ParameterError(
            f"no layout of {cluster.n_devices} devices splits global batch {global_batch} into "
            f"data-parallel micro-batches of {list(micro_batches)} with a legal pipeline schedule"
        )
    df = pd.DataFrame(rows).sort_values(
        ["fits", "step_s", "memory_gib"], ascending=[False, True, True], ignore_index=True
    )
    if not include_unfit:
        df = df[df.fits].reset_index(drop=True)
    return df if top is None else df.head(top)
