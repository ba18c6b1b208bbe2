"""Analysis of the ``recompute`` study: Korthikanti's Table 2 against the exact saved-tensor
count, the policy summary (memory, FLOPs, time, gradient gate), the memory-budget table and
the same-batch comparison (B7) and the headline metrics (the claims are built in ``claims``;
A14's bytes per recomputed FLOP in ``freed_per_flop``).

Every function reads the plain records of ``bench.measure`` (here or from another machine),
the planner's tables (``planner``) or the articles' stated inputs (``stated``).
"""

from __future__ import annotations

from mfulab.analytic import memory
from mfulab.analytic.config import TransformerConfig, preset
from mfulab.errors import ParameterError
from mfulab.measure.timing import RUN_TO_RUN_DRIFT, compare_timings, summarize
from mfulab.studies.recompute.stated import (
    A14_PRESET,
    B7_ARTICLE_COMPUTE_SHARE,
    B7_MFU_PERCENT,
    B7_MIN_COMPUTE_SHARE,
    MEGATRON_FULL_RECOMPUTE_FLOPS_RATIO,
)
from mfulab.units import MIB


def reference_layer_terms(
    cfg: TransformerConfig, *, micro_batch: int, policy: str, attn_impl: str, bytes_per_elem: int = 4
) -> dict:
    """Bytes one layer of the reference model keeps, as Korthikanti's Table 2 form (adapted:
    element size ``bytes_per_elem``, no dropout) plus each term the paper leaves out.

    - ``layernorm_stats``: each LayerNorm that runs un-recomputed keeps mean and rstd (fp32, per token);
    - ``causal_mask``: naive attention keeps its T×T boolean mask for ``masked_fill``'s backward;
    - ``flash_*``: SDPA's flash kernel keeps a per-head log-sum-exp instead of the a·s²
      softmax output; its output shares storage with the projection input (counted once).
    """
    s, b, a, e = cfg.seq_len, micro_batch, cfg.n_heads, bytes_per_elem
    table2 = {"none": "none", "selective": "selective", "mlp": "mlp", "full": "full"}.get(policy)
    if table2 is None:
        raise ParameterError(f"no per-layer analytic form for policy {policy!r}")
    terms = {
        "korthikanti": memory.activation_bytes_per_layer(
            cfg, micro_batch=b, recompute=table2, bytes_per_elem=e, dropout=False
        )
    }
    if policy == "full":
        return terms
    norms_kept = 1 if policy == "mlp" else 2
    terms["layernorm_stats"] = norms_kept * 2 * s * b * 4
    core_kept = policy != "selective"
    if core_kept and attn_impl == "naive":
        terms["causal_mask"] = s * s
    if core_kept and attn_impl == "sdpa":
        terms["flash_logsumexp"] = 4 * b * a * s
        terms["flash_no_scores"] = -e * a * s * s * b
    return terms


def _cfg(records) -> TransformerConfig:
    return TransformerConfig(**records["config"])


def saved_table(records):
    """Every saved tensor (deduplicated) per policy, with layer, module and op."""
    import pandas as pd

    frames = [pd.DataFrame(rows).assign(policy=q) for q, rows in records["saved"].items()]
    return pd.concat(frames, ignore_index=True)


def layer_model_vs_measured(records):
    """Per-layer saved bytes: measured, Korthikanti's form (adapted), and with every named
    residual term; relative errors of both."""
    import pandas as pd

    cfg, p = _cfg(records), records["params"]
    df = saved_table(records)
    rows = []
    for q in records["policies"]:
        per_layer = df[(df.policy == q) & df.layer.notna()].groupby("layer").bytes.sum()
        for layer, measured in per_layer.items():
            layer_policy = ("full" if layer < p["every_k"] else "none") if q == "every_k" else q
            if layer_policy == "sac":
                continue
            terms = reference_layer_terms(
                cfg, micro_batch=records["base_micro_batch"], policy=layer_policy, attn_impl=p["attn_impl"]
            )
            explained = sum(terms.values())
            rows.append(
                {
                    "policy": q,
                    "layer": int(layer),
                    "layer_policy": layer_policy,
                    "measured_bytes": int(measured),
                    "korthikanti_bytes": terms["korthikanti"],
                    "explained_bytes": explained,
                    "korthikanti_rel_error": terms["korthikanti"] / measured - 1,
                    "explained_rel_error": explained / measured - 1,
                    "residual_terms": ", ".join(
                        f"{k} {v:+.0f} B" for k, v in terms.items() if k != "korthikanti"
                    ),
                }
            )
    return pd.DataFrame(rows)


def layer_model_summary(lm):
    """:func:`layer_model_vs_measured` with one row per policy and per-layer form (``every_k``
    has two: its first k layers fully recomputed, the rest not): the layers it covers, the bytes
    one such layer keeps (the layers of a group keep the same bytes: ``spread_bytes`` = 0) and
    the largest relative errors over them."""
    g = lm.groupby(["policy", "layer_policy"], sort=False)
    out = g.agg(
        layers=("layer", lambda x: f"{x.min()}-{x.max()}" if x.max() > x.min() else f"{x.min()}"),
        measured_bytes=("measured_bytes", "mean"),
        spread_bytes=("measured_bytes", lambda x: x.max() - x.min()),
        korthikanti_bytes=("korthikanti_bytes", "first"),
        explained_bytes=("explained_bytes", "first"),
        korthikanti_rel_error=("korthikanti_rel_error", lambda x: x.loc[x.abs().idxmax()]),
        explained_rel_error=("explained_rel_error", lambda x: x.loc[x.abs().idxmax()]),
        residual_terms=("residual_terms", "first"),
    )
    return out.reset_index()


# The gradient gate: the largest |gradient difference| a policy may show against ``none``.
# Recomputation re-runs the same kernels, so fp32 agrees to rounding; under bf16 / fp16
# autocast a GPU's non-deterministic kernels (atomics in attention backward) may differ by
# about one low-precision ulp of an O(1) gradient (bf16: 2**-7, fp16: 2**-10), doubled.
GRADIENT_TOLERANCE = {"fp32": 1e-5, "bf16": 2 * 2**-7, "fp16": 2 * 2**-10}


def policy_summary(records):
    """One row per policy: saved bytes, peak memory, FLOPs, step time, the gradient gate
    (``GRADIENT_TOLERANCE`` for the run's dtype), each row labelled with its dtype."""
    import pandas as pd

    dtype = records["params"].get("dtype", "fp32")

    df = saved_table(records)
    base_mb = records["base_micro_batch"]
    tokens = base_mb * records["config"]["seq_len"]
    fl_none = records["hardware_flops_per_token"]["none"]
    rows = []
    for q in records["policies"]:
        peak = next(r for r in records["peak"] if r["policy"] == q and r["micro_batch"] == base_mb)
        t = next(r for r in records["timing"] if r["policy"] == q and r["micro_batch"] == base_mb)
        rows.append(
            {
                "policy": q,
                "saved_bytes_total": int(df[df.policy == q].bytes.sum()),
                "saved_bytes_layers": int(df[(df.policy == q) & df.layer.notna()].bytes.sum()),
                "peak_step_added_bytes": peak["step_added_bytes"],
                "hardware_flops_per_token": records["hardware_flops_per_token"][q],
                "recompute_flops_share": records["hardware_flops_per_token"][q] / fl_none - 1,
                "step_s": t["median_s"],
                "step_q1_s": t["q1_s"],
                "step_q3_s": t["q3_s"],
                "step_n": t["n"],
                "tokens_per_s": tokens / t["median_s"],
                "gradient_max_abs_diff": records["gradient_max_abs_diff"][q],
                "gradient_gate_ok": records["gradient_max_abs_diff"][q] <= GRADIENT_TOLERANCE[dtype],
                "dtype": records.get("dtype", "fp32"),
            }
        )
    out = pd.DataFrame(rows)
    if "sac" in records["policies"]:
        out.loc[out.policy == "sac", ["saved_bytes_total", "saved_bytes_layers"]] = None
    return out


def full_vs_none(records) -> dict:
    """Full recompute against none at the base micro-batch: the share of the memory a step
    adds and the step-time ratio (None where ``full`` was not measured)."""
    s = policy_summary(records).set_index("policy")
    if "full" not in s.index:
        return {"memory_share": None, "step_time_ratio": None}
    full, none = s.loc["full"], s.loc["none"]
    return {
        "memory_share": float(full.peak_step_added_bytes / none.peak_step_added_bytes),
        "step_time_ratio": float(full.step_s / none.step_s),
    }


def _per_token_timing(records, policy, micro_batch, key="timing"):
    """Per-token times of one timed point (round order kept: paired with the other points)."""
    t = next(r for r in records[key] if r["policy"] == policy and r["micro_batch"] == micro_batch)
    tokens = micro_batch * records["config"]["seq_len"]
    return summarize(
        [x / tokens for x in t["times_s"]], label=f"{policy}@{micro_batch}", paired=t.get("paired", False)
    )


def ratio_drift(records) -> float:
    """The one run-to-run drift of the chapter's recompute ratios: ``b7_ratio_drift``, set per
    profile from the box's spread between fresh runs (the generic drift where unset)."""
    return records.get("params", {}).get("b7_ratio_drift", RUN_TO_RUN_DRIFT)


def budget_table(records):
    """B7: each policy at the largest micro-batch that fits the memory budget; tokens/s, MFU
    and HFU relative to ``none`` at its own largest micro-batch (ratios with intervals).
    ``micro_batch_limit`` says whether the memory stopped the search (the next doubling did not
    fit) or the search did (``max_micro_batch`` still fits: "≥ N (search limit)")."""
    import pandas as pd

    none_mb = records["chosen_micro_batch"]["none"]
    ref = _per_token_timing(records, "none", none_mb) if none_mb else None
    # until round thirty-one's reader of chapter 04 this table used the course's generic 5%
    drift = ratio_drift(records)
    fl_none = records["hardware_flops_per_token"]["none"]
    rows = []
    for q in records["policies"]:
        mb = records["chosen_micro_batch"][q]
        if mb is None:
            rows.append(
                {
                    "policy": q,
                    "micro_batch": None,
                    "micro_batch_limit": "none fits",
                    "fits": False,
                    "tokens_per_s": None,
                    "tokens_per_s_vs_none": None,
                    "ratio_lo": None,
                    "ratio_hi": None,
                    "verdict": None,
                    "mfu_vs_none": None,
                    "hardware_flops_ratio": None,
                    "hfu_vs_none": None,
                }
            )
            continue
        t = _per_token_timing(records, q, mb)
        c = compare_timings(ref, t, run_to_run_drift=drift) if ref else None
        hw_ratio = records["hardware_flops_per_token"][q] / fl_none
        limit_reached = records.get("micro_batch_limit_reached", {}).get(q, False)
        rows.append(
            {
                "policy": q,
                "micro_batch": mb,
                "micro_batch_limit": f"≥ {mb} (search limit)" if limit_reached else f"{mb}",
                "fits": True,
                "tokens_per_s": 1 / t.median_s,
                "tokens_per_s_vs_none": c.ratio if c else None,
                "ratio_lo": c.ratio_lo if c else None,
                "ratio_hi": c.ratio_hi if c else None,
                "verdict": "reference" if q == "none" else c.verdict if c else None,
                # MFU ∝ model FLOPs × tokens/s (model FLOPs are the same for every policy);
                # HFU ∝ hardware FLOPs × tokens/s
                "mfu_vs_none": c.ratio if c else None,
                "hardware_flops_ratio": hw_ratio,  # FlopCounterMode's count: matmuls only
                "hfu_vs_none": c.ratio * hw_ratio if c else None,
            }
        )
    return pd.DataFrame(rows)


def budget_note(records) -> str | None:
    """A clear message when the memory budget leaves some policy (or every one) without a
    micro-batch, naming the parameter and what the smallest measured step needed."""
    missing = [q for q, mb in records["chosen_micro_batch"].items() if mb is None]
    if not missing:
        return None
    need = {
        q: min(
            (r["step_added_bytes"] for r in records["peak"] if r["policy"] == q and r["step_added_bytes"]),
            default=None,  # every point ran out of device memory
        )
        for q in missing
    }
    base = records["base_micro_batch"]
    detail = ", ".join(
        f"{q} needs {b / MIB:.0f} MiB at micro-batch {base}"
        if b is not None
        else f"{q} does not fit in the device's memory at micro-batch {base}"
        for q, b in need.items()
    )
    scope = "no policy" if len(missing) == len(records["chosen_micro_batch"]) else "some policies"
    return (
        f"memory_budget_mib={records['params']['memory_budget_mib']} leaves {scope} without a "
        f"micro-batch that fits ({detail}); raise memory_budget_mib or lower micro_batches"
    )


# ---------------------------------------------------------------------------- B7, text figures
def b7_same_batch(records) -> dict:
    """B7 at one micro-batch: the step-time ratio full/none from the interleaved timing (paired
    rounds, interval widened by ``b7_ratio_drift``, this ratio's run-to-run drift; B7's own timing
    of the two alone when the records have it, else the whole grid's), the MFU it implies from the article's
    50%, and the two expectations: the article's own 50% → 40% (a 1.25× step) and Megatron's
    96/72 FLOPs (a 1.33× step, 50% → 37.5%), plus the hardware FLOPs counted here."""
    base_mb = records["base_micro_batch"]
    key = "b7_timing" if records.get("b7_timing") else "timing"  # its own longer timing, when run
    drift = ratio_drift(records)
    c = compare_timings(
        _per_token_timing(records, "none", base_mb, key),
        _per_token_timing(records, "full", base_mb, key),
        run_to_run_drift=drift,
    )
    before, after = B7_MFU_PERCENT
    counted = records["hardware_flops_per_token"]["full"] / records["hardware_flops_per_token"]["none"]
    time_ratio = 1 / c.ratio  # compare_timings: baseline/candidate; here full/none
    return {
        "micro_batch": base_mb,
        "time_ratio": time_ratio,
        "time_ratio_lo": 1 / c.ratio_hi,
        "time_ratio_hi": 1 / c.ratio_lo,
        "paired": c.paired,
        "run_to_run_drift": drift,
        # this run's own interval, before the drift widens it (for the verdict at another drift)
        "time_ratio_within_lo": 1 / c.within_hi,
        "time_ratio_within_hi": 1 / c.within_lo,
        "rounds": len(next(r for r in records[key] if r["policy"] == "none")["times_s"]),
        "claimed_time_ratio": before / after,
        # the compute slowdown the claim implies when compute is only B7_MIN_COMPUTE_SHARE of the
        # step (global MFU 50% with local MFU at most 100%): 1 + (1.25 − 1) / 0.50
        "claimed_compute_ratio_hi": 1 + (before / after - 1) / B7_MIN_COMPUTE_SHARE,
        "min_compute_share": B7_MIN_COMPUTE_SHARE,
        "article_compute_share": B7_ARTICLE_COMPUTE_SHARE,
        "megatron_time_ratio": MEGATRON_FULL_RECOMPUTE_FLOPS_RATIO,
        "counted_flops_ratio": counted,
        "mfu_before_percent": before,
        "mfu_claimed_percent": after,
        "mfu_implied_percent": before / time_ratio,  # were the whole step compute
        # were compute only B7_MIN_COMPUTE_SHARE of the step (the rest unchanged by recompute)
        "mfu_implied_min_share_percent": before / (1 + (time_ratio - 1) * B7_MIN_COMPUTE_SHARE),
        "mfu_implied_lo_percent": before * c.ratio_lo,
        "mfu_implied_hi_percent": before * c.ratio_hi,
        "mfu_megatron_percent": before / MEGATRON_FULL_RECOMPUTE_FLOPS_RATIO,
        # HFU(full)/HFU(none) at the same batch: hardware FLOPs ratio over time ratio
        "hfu_ratio": counted / time_ratio,
    }


def table2_split(cfg: TransformerConfig | None = None) -> dict:
    """Korthikanti et al. 2022 (Sec. 4.1, Table 2) per layer, in bytes per s·b·h for 16-bit
    activations with dropout, computed from ``memory.activation_bytes_per_layer``: the total
    without the a·s²·b terms (34), the MLP's share (what the ``mlp`` policy drops: 19), the two
    LayerNorm inputs (2 × 2 bytes) and the attention block's remainder (11), plus the
    coefficient of a·s²·b (5)."""
    cfg = cfg or preset(A14_PRESET)
    sbh = cfg.seq_len * cfg.d_model
    as2b = cfg.n_heads * cfg.seq_len**2
    none = memory.activation_bytes_per_layer(cfg, micro_batch=1)
    selective = memory.activation_bytes_per_layer(cfg, micro_batch=1, recompute="selective")
    mlp = memory.activation_bytes_per_layer(cfg, micro_batch=1, recompute="mlp")
    total, mlp_part, norms = selective / sbh, (none - mlp) / sbh, 2 * 2
    return {
        "total_per_sbh": total,
        "mlp_per_sbh": mlp_part,
        "norms_per_sbh": norms,
        "attention_per_sbh": total - mlp_part - norms,
        "scores_per_as2b": (none - selective) / as2b,
    }


def planner_inputs(p):
    """The planner's table and the ZeRO comparison under ``p``'s stated assumptions."""
    from mfulab.studies.recompute import planner, stated

    plans = planner.plans_table(
        p.planner_cases, assumptions=p.step_assumptions(), fragmentation_margin=p.fragmentation_margin
    )
    return plans, planner.zero_comparison(**stated.A12_ZERO)
