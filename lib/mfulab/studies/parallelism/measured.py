"""The measurements of the ``parallelism`` study as tables, each next to its formula:
pipeline bubbles (``parallel.pipeline_bubble_fraction`` with a per-slot overhead fitted per
job), bytes held and collectives counted under DDP / FSDP2 (``memory``), tensor and sequence
parallel collectives and activation bytes (``parallel``, Korthikanti Table 2), and the
all-to-all exchange with skewed routing."""

from __future__ import annotations

import statistics

from mfulab.analytic import memory, parallel
from mfulab.analytic.config import TransformerConfig

FP32_BYTES = 4
ADAMW_STATES = 2  # exp_avg and exp_avg_sq, fp32 like the parameters


def pipeline_table(records):
    """One row per (job, schedule, m): the median step of the slowest rank, the ideal (m
    micro-batches of one rank's layers back to back), the measured bubble, the formula
    (p − 1)/(v·m), and the formula with the overhead a pipelined step adds per slot, fitted per
    job and schedule by least squares over its m values:

        step ≈ (m·v + p − 1) · (ideal/(m·v) + c)

    the (m·v + p − 1) slots of the step each costing its compute plus c (the point-to-point
    send and receive, the schedule's bookkeeping). One number per schedule and 3–5 values of
    m: what the fit tests is how the bubble falls with m. ``bubble_held_out`` predicts each m
    with c fitted on the schedule's other m values (leave one out): the out-of-sample check."""
    import pandas as pd

    rows = []
    for job in records["pipeline"]:
        p = job["ranks"]
        fits = {}
        for r in job["runs"]:
            step = statistics.median(r["times_s"])
            slots = r["m"] * r["v"] + p - 1
            fits.setdefault(r["schedule"], []).append((r, step, slots))
        for runs in fits.values():
            c = _slot_overhead(runs)
            for i, (r, step, k) in enumerate(runs):
                others = runs[:i] + runs[i + 1 :]
                held_out = _slot_overhead(others) if others else None  # c fitted without this m
                rows.append(_pipeline_row(job, r, step, k, c, held_out))
    df = pd.DataFrame(rows)
    df["model_error"] = df.bubble_measured / df.bubble_modelled - 1
    df["held_out_error"] = df.bubble_measured / df.bubble_held_out - 1
    return df


def _slot_overhead(runs) -> float:
    """The per-slot overhead c ≥ 0 of ``step ≈ slots · (ideal/(m·v) + c)`` by least squares over
    ``runs`` ((run, median step, slots) of one job and schedule)."""
    residual = [(step - k * r["ideal_s"] / (r["m"] * r["v"]), k) for r, step, k in runs]
    return max(0.0, sum(res * k for res, k in residual) / sum(k * k for _, k in residual))


def _pipeline_row(job, r, step, slots, c, c_held_out=None) -> dict:
    p, ideal = job["ranks"], r["ideal_s"]
    modelled = slots * (ideal / (r["m"] * r["v"]) + c)
    held_out = None if c_held_out is None else slots * (ideal / (r["m"] * r["v"]) + c_held_out)
    return {
        "ranks": p,
        "compute": job["compute"],
        "schedule": r["schedule"],
        "m": r["m"],
        "v": r["v"],
        "step_s": step,
        "ideal_s": ideal,
        "bubble_measured": step / ideal - 1,
        "bubble_formula": parallel.pipeline_bubble_fraction(p=p, m=r["m"], v=r["v"]),
        "slot_overhead_s": c,
        "bubble_modelled": modelled / ideal - 1,
        # the same with c fitted on the job's other m values only: the m predicted, not fitted
        "bubble_held_out": float("nan") if held_out is None else held_out / ideal - 1,
        "p2p_messages": r.get("p2p_messages"),
        "gradient_gate": r.get("gradient_gate"),  # real compute: |gradient − one process's|
        "gradient_scale": r.get("gradient_scale"),  # largest |gradient| of the one process
        # each micro-batch crosses p·v − 1 chunk boundaries forward and backward; a send and a receive each
        "p2p_messages_formula": 2 * 2 * r["m"] * (p * r["v"] - 1),
    }


def sharding_table(records):
    """Per (config, m), rank 0: bytes of parameters, gradients and AdamW states held between
    steps and at the end of the forward (the peak: parameters still gathered for backward), against
    the formulas (DDP: 4Ψ, 4Ψ, 8Ψ in fp32; FSDP2 shards each over the ranks; without resharding
    the parameters are whole at the peak, 4Ψ + 12Ψ/n, ZeRO-2's count), and the counted
    collective buffers in elements against the ZeRO traffic (``memory.zero_traffic_bytes_per_step``
    at one byte per element: DDP 2Ψ; fully sharded 3mΨ; FSDP2 with ``reshard_after_forward``
    off re-gathers every micro-batch, 2mΨ, where DeepSpeed's ZeRO-2 gathers once, (m + 1)Ψ)."""
    import pandas as pd

    sh = records["sharding"]
    psi, n = sh["n_params"], sh["ranks"]
    rows = []
    for r in sh["rows"][0]:
        sharded = r["config"] != "ddp"
        c = r["collectives"]
        counted = 2 * c.get("all_reduce", 0) + c.get("all_gather", 0) + c.get("reduce_scatter", 0)
        m = r["m"]
        formula = {
            "ddp": memory.zero_traffic_bytes_per_step(
                psi, zero_stage=0, accumulation_steps=m, bytes_per_elem=1
            ),
            "fsdp_grad_op": 2 * m * psi,
            "fsdp_full": memory.zero_traffic_bytes_per_step(
                psi, zero_stage=3, accumulation_steps=m, bytes_per_elem=1
            ),
        }[r["config"]]
        held = r["params_bytes"] + r["grads_bytes"] + r["optimizer_bytes"]
        held_formula = (1 + 1 + ADAMW_STATES) * FP32_BYTES * psi / (n if sharded else 1)
        # what backward needs at once: the parameters as the forward left them — gathered (DDP, and
        # FSDP2 without resharding: the ZeRO-2 peak, 4Ψ + 12Ψ/n) or sharded (fully sharded: 16Ψ/n) —
        # with the gradients it produces and the AdamW states, sharded or not
        gathered = r["config"] != "fsdp_full"
        peak = r["params_at_forward_end_bytes"] + r["grads_bytes"] + r["optimizer_bytes"]
        peak_formula = FP32_BYTES * psi / (1 if gathered else n) + (1 + ADAMW_STATES) * FP32_BYTES * psi / (
            n if sharded else 1
        )
        rows.append(
            {
                "config": r["config"],
                "m": m,
                "params_bytes": r["params_bytes"],
                "grads_bytes": r["grads_bytes"],
                "optimizer_bytes": r["optimizer_bytes"],
                "params_at_forward_end_bytes": r["params_at_forward_end_bytes"],
                "held_bytes": held,
                "held_formula_bytes": held_formula,
                "peak_bytes": peak,
                "peak_formula_bytes": peak_formula,
                "collective_calls": sum(v for k, v in c.items() if k.endswith("_calls")),
                "traffic_elements": counted,
                "traffic_formula_elements": formula,
                "traffic_over_psi": counted / psi,
                "zero2_deepspeed_over_psi": m + 1 if r["config"] == "fsdp_grad_op" else None,
                "gradient_gate": sh["gradient_gate"][f"{r['config']}@{m}"],
                "gradient_scale": sh.get("gradient_scale", {}).get(f"{r['config']}@{m}", 1.0),
            }
        )
    return pd.DataFrame(rows)


def tensor_table(records):
    """Per layout (whole block, TP, TP + SP), rank 0: collectives counted and the elements each
    rank sends for them on a ring (every buffer is the b·s·h activation), activation bytes kept
    against Korthikanti's Table 2 form (fp32, no dropout; ``memory.activation_bytes_per_layer``)
    — with sequence parallelism plus the gathered inputs PyTorch's column-parallel linears keep
    for their weight gradients, 2·e·s·b·h·(1 − 1/t) (Megatron keeps the shard and gathers again
    in backward) — and the gradient gate against the whole block."""
    import pandas as pd

    from mfulab.analytic.comm import bus_factor

    tp_rec = records["tensor"]
    cfg = TransformerConfig(**tp_rec["config"])
    t, b = tp_rec["tp"], tp_rec["micro_batch"]
    sbh = cfg.seq_len * b * cfg.d_model
    rows = []
    for r in tp_rec["rows"][0]:
        split, sp = r["layout"] != "whole", r["layout"] == "tp+sp"
        formula = memory.activation_bytes_per_layer(
            cfg,
            micro_batch=b,
            tp=t if split else 1,
            sequence_parallel=sp,
            bytes_per_elem=FP32_BYTES,
            dropout=False,
        )
        gathered = 2 * FP32_BYTES * sbh * (1 - 1 / t) if sp else 0.0
        ops = {k.replace("_into_tensor", "").replace("_tensor", ""): v for k, v in r["collectives"].items()}
        rows.append(
            {
                "layout": r["layout"],
                "collectives": ", ".join(f"{k} ×{v}" for k, v in sorted(ops.items())) or "none",
                "elements_sent": sum(v * bus_factor(k, t) * sbh for k, v in ops.items()),
                "saved_bytes": r["saved_bytes"],
                "korthikanti_bytes": formula,
                "korthikanti_plus_gathered_bytes": formula + gathered,
                "max_abs_diff": r["max_abs_diff"],
                "gradient_scale": r.get("gradient_scale", 1.0),
            }
        )
    df = pd.DataFrame(rows)
    df["saved_share_of_whole"] = df.saved_bytes / df.saved_bytes.iloc[0]
    df["korthikanti_share_of_whole"] = df.korthikanti_bytes / df.korthikanti_bytes.iloc[0]
    return df


def exchange_table(records):
    """All-to-all vs all-reduce of the same buffer on the same ranks (medians of interleaved
    rounds), with the ratio a bandwidth-bound ring predicts: (n − 1)/n over 2(n − 1)/n = ½."""
    import pandas as pd

    moe = records["moe"]
    rows = []
    for r in moe["exchange"]:
        a2a, ar = statistics.median(r["all_to_all_times_s"]), statistics.median(r["all_reduce_times_s"])
        rows.append(
            {
                "size_bytes": r["size_bytes"],
                "all_to_all_s": a2a,
                "all_reduce_s": ar,
                "ratio": a2a / ar,
                "ring_bandwidth_ratio": 0.5,
                "wrong": r["wrong"],
            }
        )
    return pd.DataFrame(rows)


def skew_table(records):
    """Per imbalance and rank: tokens received, medians of the expert compute and of the
    combine all-to-all, and the wait the imbalance predicts for that rank: the most loaded
    rank's compute minus its own (emulated compute, a sleep per token)."""
    import pandas as pd

    per_token = records["params"]["moe_expert_s_per_token"]
    rows = []
    for rank, steps in enumerate(records["moe"]["skewed"]):
        for imb in sorted({s["imbalance"] for s in steps}):
            mine = [s for s in steps if s["imbalance"] == imb]
            hot = max(
                s["received_tokens"] for rs in records["moe"]["skewed"] for s in rs if s["imbalance"] == imb
            )
            rows.append(
                {
                    "imbalance": imb,
                    "rank": rank,
                    "received_tokens": mine[0]["received_tokens"],
                    "expert_s": statistics.median(s["expert_s"] for s in mine),
                    "combine_s": statistics.median(s["combine_s"] for s in mine),
                    "step_s": statistics.median(s["step_s"] for s in mine),
                    "predicted_wait_s": (hot - mine[0]["received_tokens"]) * per_token,
                }
            )
    return pd.DataFrame(rows)


def peak_layers_in_flight(spans) -> int:
    """The most layer activations one rank held at once in a step: every layer's forward (an
    ``F`` span) stores its activations until that layer's backward (a ``B`` span) ends, so the
    count is the running sum of forward starts minus backward ends, in time order."""
    events = sorted(
        [(a, 1) for kind, _, a, _ in spans if kind == "F"]
        + [(b, -1) for kind, _, _, b in spans if kind == "B"]
    )
    held = peak = 0
    for _, change in events:
        held += change
        peak = max(peak, held)
    return peak


def pipeline_memory_table(records):
    """Activations in flight per schedule, counted from the executed step (emulated compute,
    where every layer logs its forward and its backward; a real first layer logs no backward),
    in units of one layer's activations for one micro-batch: the first rank's peak against the
    step model's schedule term (``parallel.pipeline_schedule_costs``' ``activation_layers_factor``
    × p micro-batches × the rank's layers, which caps it at the m micro-batches the step has)."""
    import pandas as pd

    L = records["params"]["pipeline_layers_per_rank"]
    rows = []
    for job in records["pipeline"]:
        if job["compute"] != "emulated":
            continue
        p = job["ranks"]
        for r in job["runs"]:
            peaks = [peak_layers_in_flight(r["spans"][str(k)]) for k in range(p)]
            factor = parallel.pipeline_schedule_costs(p=p, m=r["m"], v=r["v"], schedule=r["schedule"])[
                "activation_layers_factor"
            ]
            model = factor * p * L
            rows.append(
                {
                    "ranks": p,
                    "schedule": r["schedule"],
                    "m": r["m"],
                    "v": r["v"],
                    "layers_per_rank": L,
                    "first_rank_peak_layers": peaks[0],
                    "peak_layers_by_rank": " ".join(map(str, peaks)),
                    "step_model_layers": model,
                    "matches_step_model": peaks[0] == model,
                }
            )
    return pd.DataFrame(rows)
