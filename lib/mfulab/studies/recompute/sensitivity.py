"""Sensitivity of the ``recompute`` study's at-scale conclusions to their assumed inputs
(docs: issue "assumptions in the open"): the planner's decisions against the step model's
assumptions (the GEMMs' share of MAMF, a GEMM kernel's launch latency), the fragmentation
margin and the attention kernel (non-fused as Table 2 prints it, or fused) (A17 and the other
cases), the article's launch command under both readings of its recompute flag against the
margin (A17), and ZeRO-3's extra traffic against the micro-batches accumulated per optimizer
step (A12).

Each function returns a DataFrame the notebook displays and saves; the grids are named in
``stated``. No torch.
"""

from __future__ import annotations

from mfulab.analytic import flops, memory, rates
from mfulab.analytic.config import ATTENTION_KERNELS, preset
from mfulab.studies.recompute import stated
from mfulab.studies.recompute.planner import chosen_plans, plans_table
from mfulab.units import GIB


def _scenarios(cases, assumptions: dict, margin: float):
    """One-at-a-time variations around the stated assumptions: (label, cases, assumptions,
    margin), the assumptions being ``rates.Assumptions`` fields."""
    yield "stated", cases, assumptions, margin
    for share in stated.MATMUL_SHARE_GRID:
        if share != assumptions["matmul_share_of_mamf"]:
            yield (
                f"matmul_share_of_mamf={share:g}",
                cases,
                {**assumptions, "matmul_share_of_mamf": share},
                margin,
            )
    stated_latency = assumptions.get("matmul_latency_s", rates.Assumptions().matmul_latency_s)
    for t0 in stated.MATMUL_LATENCY_GRID_S:
        if t0 != stated_latency:
            yield f"matmul_latency_s={t0 * 1e6:g} µs", cases, {**assumptions, "matmul_latency_s": t0}, margin
    for f in stated.FRAGMENTATION_MARGIN_GRID:
        if f != margin:
            yield f"fragmentation_margin={f:g}", cases, assumptions, f
    for kernel in ATTENTION_KERNELS:  # every case on one kernel, where a stated case runs the other
        if any(c.get("attention", "naive") != kernel for c in cases):
            yield f"attention={kernel}", [{**c, "attention": kernel} for c in cases], assumptions, margin


def decisions(cases, *, assumptions: dict, fragmentation_margin: float):
    """The planner's decision (``policy@micro-batch`` with the most tokens/s that fits) per
    case, under the stated assumptions and with each assumption varied alone (the last rows:
    every case on one attention kernel, naive or fused); a ``*`` marks a
    decision that differs from the stated one."""
    import pandas as pd

    rows, stated_row = [], None
    for label, varied, assumed, margin in _scenarios(cases, assumptions, fragmentation_margin):
        chosen = chosen_plans(plans_table(varied, assumptions=assumed, fragmentation_margin=margin))
        row = {"assumption varied": label}
        for case in dict.fromkeys(c["name"] for c in cases):
            best = chosen[(chosen.case == case) & chosen.decision]
            row[case] = (
                f"{best.policy.iloc[0]}@{int(best.micro_batch.iloc[0])}" if len(best) else "nothing fits"
            )
        stated_row = stated_row or dict(row)
        rows.append(
            {k: v if k == "assumption varied" or v == stated_row[k] else f"{v} *" for k, v in row.items()}
        )
    return pd.DataFrame(rows)


def a17_readings(case: dict, *, assumptions: dict, fragmentation_margin: float, micro_batch: int):
    """The launch command's micro-batch under every policy of the A17 case, both readings of
    ``--recompute-method uniform --recompute-num-layers 12`` among them: memory, recomputed
    FLOPs, predicted tokens/s, and whether it fits at each fragmentation margin of the grid, with
    the gradients in each of ``stated.A17_GRAD_BYTES_PER_PARAM`` bytes (2: the memory model's;
    4: Megatron's fp32 main_grad, +2 B per parameter on the card)."""
    plans = plans_table([case], assumptions=assumptions, fragmentation_margin=0.0)
    plans = plans[plans.micro_batch == micro_batch].reset_index(drop=True)
    reading = {v: f"{k} reading" for k, v in stated.A17_READINGS.items()}
    out = plans[["policy", "total_gib", "activations_gib", "recompute_flops_share"]].copy()
    out.insert(1, "reading of the flag", out.policy.map(reading).fillna(""))
    stated_plans = plans_table([case], assumptions=assumptions, fragmentation_margin=fragmentation_margin)
    tps = stated_plans[stated_plans.micro_batch == micro_batch].set_index("policy").tokens_per_s
    out["tokens_per_s"] = out.policy.map(tps)
    capacity_gib = float(plans.device_memory_gib.iloc[0]) if len(plans) else float("nan")
    # gradients held in more bytes than the memory model's 2 (fp32 main_grad: 4), per device:
    # sharded over DP from ZeRO-2 on
    params_per_device = flops.param_count(preset(case["preset"])) / (case["tp"] * case["pp"])
    grad_shards = case["dp"] if case["zero_stage"] >= 2 else 1
    for grad_bytes in stated.A17_GRAD_BYTES_PER_PARAM:
        extra_gib = (grad_bytes - stated.MODEL_STATE_GRAD_BYTES) * params_per_device / grad_shards / GIB
        total = out.total_gib + extra_gib
        if grad_bytes != stated.MODEL_STATE_GRAD_BYTES:
            out[f"total_gib, {grad_bytes} B gradients"] = total
        for margin in stated.FRAGMENTATION_MARGIN_GRID:
            usable_gib = capacity_gib * (1 - margin)
            out[f"fits, {margin:.0%} margin ({usable_gib:.1f} GiB), {grad_bytes} B gradients"] = (
                total <= usable_gib
            )
    return out


def a12_accumulation(preset_name: str, *, tp: int, steps=stated.ACCUMULATION_STEPS_GRID):
    """ZeRO-2 vs ZeRO-3 data-parallel bytes per device and optimizer step, per number of
    micro-batches accumulated per step (``memory.zero_traffic_bytes_per_step``): the ratio is 1.5 at
    one micro-batch per step (the paper's count) and tends to 3 as accumulation grows."""
    import pandas as pd

    n = flops.param_count(preset(preset_name)) / tp
    rows = []
    for m in steps:
        z2 = memory.zero_traffic_bytes_per_step(n, zero_stage=2, accumulation_steps=m)
        z3 = memory.zero_traffic_bytes_per_step(n, zero_stage=3, accumulation_steps=m)
        rows.append(
            {
                "accumulation_steps": m,
                "zero2_traffic_gib": z2 / GIB,
                "zero3_traffic_gib": z3 / GIB,
                "extra_gib": (z3 - z2) / GIB,
                "traffic_ratio": z3 / z2,
                "zero3_moves_more": z3 > z2,
            }
        )
    return pd.DataFrame(rows)


def _largest_fitting(plans, policy: str):
    rows = plans[(plans.policy == policy) & plans.fits.astype(bool)]
    return rows.loc[rows.micro_batch.idxmax()] if len(rows) else None


def _bears_out(micro_batch: int, base, tokens_vs_none) -> bool | None:
    """B7's answer for one policy: no when it does not double no recompute's largest micro-batch;
    where it does, yes / no when its tokens/s are above / below no recompute's by more than
    ``stated.B7_CONFIG_DECISIVE_MARGIN``, open (None) inside it; None where no recompute fits."""
    if base is None:
        return None
    if micro_batch < 2 * base.micro_batch:
        return False
    if abs(tokens_vs_none - 1) < stated.B7_CONFIG_DECISIVE_MARGIN:
        return None
    return bool(tokens_vs_none > 1)


def b7_config_scenarios(case: dict, *, assumptions: dict, fragmentation_margin: float):
    """B7 at article B's configuration under the stated assumptions and with each varied alone
    (the planner's sensitivity rows; the attention kernel among them, since article B §2.3 does
    not name it and its §5 baseline ran the standard one): per policy of
    ``stated.B7_CONFIG_POLICIES``, the largest micro-batch that fits against no recompute's
    largest, tokens/s against no recompute's there, and whether the policy bears the claim out
    (it at least doubles the micro-batch and raises tokens/s; None where no recompute fits)."""
    import pandas as pd

    rows = []
    scenarios = [(*s, None) for s in _scenarios([case], assumptions, fragmentation_margin)]
    # B7's own readings of its cluster and of "the batch": the network as chapter 05 reads article
    # B (one 200 Gb/s port per node of 8), and the batch as the global batch, doubled with the
    # micro-batch (the same accumulation, twice the tokens per step) for the recompute policies
    port = {**assumptions, "network_bytes_per_s": stated.B_NODE_PORT_BYTES_PER_S}
    scenarios.append((stated.B7_NETWORK_READING, [case], port, fragmentation_margin, None))
    doubled = {**case, "global_batch": 2 * case["global_batch"]}
    scenarios.append((stated.B7_GLOBAL_BATCH_READING, [case], assumptions, fragmentation_margin, [doubled]))
    for label, varied, assumed, margin, policy_cases in scenarios:
        plans = plans_table(varied, assumptions=assumed, fragmentation_margin=margin)
        base = _largest_fitting(plans, "none")
        policy_plans = (
            plans
            if policy_cases is None
            else plans_table(policy_cases, assumptions=assumed, fragmentation_margin=margin)
        )
        for policy in stated.B7_CONFIG_POLICIES:
            r = _largest_fitting(policy_plans, policy)
            if r is None:
                continue
            row = {
                "assumption varied": label,
                "attention": r.attention,
                "policy": policy,
                "micro_batch": int(r.micro_batch),
                "total_gib": r.total_gib,
                "usable_gib": r.usable_gib,
                "recompute_flops_share": r.recompute_flops_share,
                "tokens_per_s": r.tokens_per_s,
                "none_micro_batch": None if base is None else int(base.micro_batch),
                "none_total_gib": None if base is None else base.total_gib,
                "none_tokens_per_s": None if base is None else base.tokens_per_s,
            }
            row["tokens_vs_none"] = None if base is None else r.tokens_per_s / base.tokens_per_s
            row["bears_out"] = _bears_out(r.micro_batch, base, row["tokens_vs_none"])
            rows.append(row)
    return pd.DataFrame(rows)
