"""Memory per device of one training layout: the last of the step model's five steps
(:func:`step.step_time` calls it; the other four are in :mod:`step_terms`)."""

from __future__ import annotations

import math

from mfulab.analytic import memory, parallel, step_modern
from mfulab.analytic.config import TransformerConfig
from mfulab.analytic.rates import Assumptions, Rates
from mfulab.units import GIB


def memory_terms(
    cfg: TransformerConfig,
    layout: dict,
    *,
    rates: Rates,
    a: Assumptions,
    recompute: str,
    attention: str,
    dropout: bool,
) -> dict:
    """Bytes per device (``memory.memory_per_device``: ZeRO states, Korthikanti Table 2
    activations with a flash kernel's log-sum-exp in place of the scores, the logits), the
    activations of the stage that keeps the most layers in flight, scaled by the schedule's
    ``activation_layers_factor``. A MoE, latent-attention or context-parallel config: its model
    states exactly (``step_modern.model_states_bytes``: experts sharded by ep·etp), its
    activations those of ``step_modern.dense_equivalent`` (an approximation). A layout fits
    when that is at most (1 − ``memory_margin``) of the device's memory."""
    cp = layout.get("cp", 1)
    modern = step_modern.is_modern(cfg, cp=cp, ep=layout.get("ep", 1))
    act_cfg = step_modern.dense_equivalent(cfg, cp=cp) if modern else cfg  # activations' stand-in
    mem = memory.memory_per_device(
        act_cfg,
        micro_batch=layout["micro_batch"],
        tp=layout["tp"],
        pp=layout["pp"],
        dp=layout.get("shard_group") or layout["dp"],  # the ranks ZeRO shards over (HSDP: its group)
        zero_stage=layout["zero_stage"],
        bytes_per_elem=a.bytes_per_elem,
    )
    costs = parallel.pipeline_schedule_costs(
        p=layout["pp"], m=layout["m"], v=layout["vpp"], schedule=layout["schedule"]
    )
    # 1F1B: stage i keeps p − i micro-batches of its layers in flight (Korthikanti §4.2.3); with
    # even stages the first holds the most, with uneven end stages the second may; the stage
    # peaks while one micro-batch runs its backward (memory.stage_activation_bytes)
    pp, end, interior = layout["pp"], layout["end_layers"], layout["interior_layers"]
    plan = memory.recompute_plan(recompute, cfg.n_layers)
    kw = dict(
        micro_batch=layout["micro_batch"],
        tp=layout["tp"],
        sequence_parallel=layout["sequence_parallel"],
        attention=attention,
        dropout=dropout,
        bytes_per_elem=a.bytes_per_elem,
    )
    candidates = [(math.ceil(end), pp)] + ([(interior, pp - 1)] if pp > 1 else [])
    stages = [
        memory.stage_activation_bytes(act_cfg, plan, layers=n, in_flight=f, **kw) for n, f in candidates
    ]
    # interleaving keeps activation_layers_factor × as many stored layers in flight
    activations_bytes = max(
        costs["activation_layers_factor"] * st["stored_bytes"] + st["peak_one_bytes"] - st["stored_one_bytes"]
        for st in stages
    )
    states_bytes = step_modern.model_states_bytes(cfg, layout) if modern else mem["model_states_bytes"]
    memory_bytes = states_bytes + activations_bytes + mem["logits_bytes"]
    capacity = rates.memory_capacity_bytes
    return {
        "memory_gib": memory_bytes / GIB,
        "model_states_gib": states_bytes / GIB,
        "activations_gib": activations_bytes / GIB,
        "device_memory_gib": None if capacity is None else capacity / GIB,
        "fits": None if capacity is None else memory_bytes <= (1 - a.memory_margin) * capacity,
    }
