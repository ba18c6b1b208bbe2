"""Analysis of the ``recompute`` study: Korthikanti's Table 2 against the exact saved-tensor
count, the policy summary (memory, FLOPs, time, gradient gate), the memory-budget table
(B7), bytes saved per recomputed FLOP (A14), the claims table (B7, A14, A17, A12) and the
headline metrics.

Every function reads the plain records of ``bench.measure`` (here or from another machine),
the planner's tables (``planner``) or the articles' stated inputs (``stated``).
"""

from __future__ import annotations

from ... import flops, memory
from ... import verdicts as claims_mod
from ...config import ParameterError, TransformerConfig, preset
from ...results import run_identity
from ...timing import compare_timings, summarize
from ...verdicts import Claim
from .planner import hardware_flops_per_token as planned_flops_per_token
from .stated import A14_PRESET, A17_MICRO_BATCH, A17_POLICY, B7_MFU_PERCENT


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


def policy_summary(records):
    """One row per policy: saved bytes, peak memory, FLOPs, step time, gradient gate."""
    import pandas as pd

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


def _per_token_timing(records, policy, micro_batch):
    t = next(r for r in records["timing"] if r["policy"] == policy and r["micro_batch"] == micro_batch)
    tokens = micro_batch * records["config"]["seq_len"]
    return summarize([x / tokens for x in t["times_s"]], label=f"{policy}@{micro_batch}")


def budget_table(records):
    """B7: each policy at the largest micro-batch that fits the memory budget; tokens/s, MFU
    and HFU relative to ``none`` at its own largest micro-batch (ratios with intervals)."""
    import pandas as pd

    none_mb = records["chosen_micro_batch"]["none"]
    ref = _per_token_timing(records, "none", none_mb) if none_mb else None
    fl_none = records["hardware_flops_per_token"]["none"]
    rows = []
    for q in records["policies"]:
        mb = records["chosen_micro_batch"][q]
        if mb is None:
            rows.append(
                {
                    "policy": q,
                    "micro_batch": None,
                    "fits": False,
                    "tokens_per_s": None,
                    "tokens_per_s_vs_none": None,
                    "ratio_lo": None,
                    "ratio_hi": None,
                    "verdict": None,
                    "mfu_vs_none": None,
                    "hfu_vs_none": None,
                }
            )
            continue
        t = _per_token_timing(records, q, mb)
        c = compare_timings(ref, t) if ref else None
        hw_ratio = records["hardware_flops_per_token"][q] / fl_none
        rows.append(
            {
                "policy": q,
                "micro_batch": mb,
                "fits": True,
                "tokens_per_s": 1 / t.median_s,
                "tokens_per_s_vs_none": c.ratio if c else None,
                "ratio_lo": c.ratio_lo if c else None,
                "ratio_hi": c.ratio_hi if c else None,
                "verdict": c.verdict if c else None,
                # MFU ∝ model FLOPs × tokens/s (model FLOPs are the same for every policy);
                # HFU ∝ hardware FLOPs × tokens/s
                "mfu_vs_none": c.ratio if c else None,
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
    need = {q: min(r["step_added_bytes"] for r in records["peak"] if r["policy"] == q) for q in missing}
    detail = ", ".join(
        f"{q} needs {b / 2**20:.0f} MiB at micro-batch {records['base_micro_batch']}" for q, b in need.items()
    )
    scope = "no policy" if len(missing) == len(records["chosen_micro_batch"]) else "some policies"
    return (
        f"memory_budget_mib={records['params']['memory_budget_mib']} leaves {scope} without a "
        f"micro-batch that fits ({detail}); raise memory_budget_mib or lower micro_batches"
    )


def a14_table(records):
    """Memory saved per recomputed FLOP: attention core (selective) vs MLP, measured here and
    analytic for the article's 13B shape."""
    import pandas as pd

    rows = []
    s = policy_summary(records).set_index("policy")
    tokens = records["base_micro_batch"] * records["config"]["seq_len"]
    for q in ("selective", "mlp"):
        if q not in s.index:
            continue
        saved = s.loc["none", "saved_bytes_layers"] - s.loc[q, "saved_bytes_layers"]
        extra = (s.loc[q, "hardware_flops_per_token"] - s.loc["none", "hardware_flops_per_token"]) * tokens
        where = f"measured ({records['config']['name']}, {records['params']['attn_impl']} attention)"
        rows.append(
            {
                "where": where,
                "policy": q,
                "bytes_saved": saved,
                "flops_recomputed": extra,
                "bytes_per_recomputed_flop": saved / extra if extra else None,
            }
        )
    cfg = preset(A14_PRESET)
    for q in ("selective", "mlp"):
        kept = memory.activation_bytes_per_layer(cfg, micro_batch=1, recompute=q)
        saved = memory.activation_bytes_per_layer(cfg, micro_batch=1) - kept
        extra = (
            (planned_flops_per_token(cfg, q, None) - flops.flops_per_token(cfg, convention="palm"))
            * cfg.seq_len
            / cfg.n_layers
        )
        rows.append(
            {
                "where": f"analytic, {A14_PRESET} layer (bf16, dropout, s={cfg.seq_len})",
                "policy": q,
                "bytes_saved": saved,
                "flops_recomputed": extra,
                "bytes_per_recomputed_flop": saved / extra,
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- claims, metrics
def _b7_claims(records, summary) -> list[Claim]:
    out = []
    base_mb = records["base_micro_batch"]
    c = compare_timings(
        _per_token_timing(records, "none", base_mb), _per_token_timing(records, "full", base_mb)
    )
    share = summary.loc["full", "recompute_flops_share"]
    out.append(
        Claim(
            "B7",
            f"full recompute lowers MFU ({B7_MFU_PERCENT[0]}% → {B7_MFU_PERCENT[1]}% in the article) "
            "at the same batch",
            f"step time full vs none at micro-batch {base_mb}; recomputed FLOPs from FlopCounterMode",
            claims_mod.verdict_from_comparison(c, claimed="slower"),
            f"MFU(full)/MFU(none) = {c.ratio:.2f} [{c.ratio_lo:.2f}, {c.ratio_hi:.2f}] (95% bootstrap); full "
            f"recomputes {share:.0%} extra FLOPs, so at equal hardware efficiency MFU falls to "
            f"{1 / (1 + share):.0%} of its value "
            f"({B7_MFU_PERCENT[0]}% → {B7_MFU_PERCENT[0] / (1 + share):.0f}%)",
        )
    )
    bt = budget_table(records).set_index("policy")
    if bt.loc["none", "fits"] and bt.loc["full", "fits"]:
        row = bt.loc["full"]
        same_direction = (row.mfu_vs_none - 1) * (row.tokens_per_s_vs_none - 1) >= 0
        out.append(
            Claim(
                "B7",
                "with the memory freed for a larger batch, tokens/s can rise while MFU falls",
                f"largest micro-batch within {records['params']['memory_budget_mib']} MiB per policy "
                f"(none: {int(bt.loc['none', 'micro_batch'])}, full: {int(row.micro_batch)}); "
                "tokens/s and MFU",
                "refuted" if same_direction else "confirmed",
                f"tokens/s full/none = {row.tokens_per_s_vs_none:.2f} [{row.ratio_lo:.2f}, "
                f"{row.ratio_hi:.2f}] "
                f"({row.verdict}); MFU moves by exactly the same factor ({row.mfu_vs_none:.2f}) "
                "because model "
                f"FLOPs per token do not change with recompute: MFU and tokens/s cannot move in opposite "
                f"directions; only HFU ({row.hfu_vs_none:.2f}×) carries the recomputation",
            )
        )
    return out


def _a14_claim(records) -> list[Claim]:
    a14 = a14_table(records)
    measured = a14[a14["where"].str.startswith("measured")].set_index("policy")
    analytic = a14[a14["where"].str.startswith("analytic")].set_index("policy")
    if not {"selective", "mlp"} <= set(measured.index):
        return []
    sel = measured.loc["selective", "bytes_per_recomputed_flop"]
    mlp = measured.loc["mlp", "bytes_per_recomputed_flop"]
    a_sel = analytic.loc["selective", "bytes_per_recomputed_flop"]
    a_mlp = analytic.loc["mlp", "bytes_per_recomputed_flop"]
    return [
        Claim(
            "A14",
            "selective recompute should recompute the MLP and keep the attention activations",
            "activation bytes saved per recomputed FLOP, attention core vs MLP "
            "(exact saved bytes, FlopCounterMode)",
            "refuted" if sel > mlp else "confirmed",
            f"measured: attention core {sel:.3g} B/FLOP vs MLP {mlp:.3g} B/FLOP "
            f"({sel / mlp:.0f}×); {A14_PRESET} "
            f"analytic: {a_sel:.3g} vs {a_mlp:.3g} B/FLOP ({a_sel / a_mlp:.0f}×); "
            ""
            "with a flash kernel the a·s² tensors are never stored and the attention-core "
            "advantage disappears",
        )
    ]


def _a17_claim(plans) -> list[Claim]:
    a17 = plans[plans.case.str.startswith("A17")]

    def pick(policy):
        r = a17[(a17.policy == policy) & (a17.micro_batch == A17_MICRO_BATCH)]
        return r.iloc[0] if len(r) else None

    k12, none = pick(A17_POLICY), pick("none")
    if k12 is None or none is None:
        return []
    return [
        Claim(
            "A17",
            "13B, TP=8, 40 layers, seq 4096, micro-batch 1, ZeRO-2, recompute 12 of 40 layers fits in 64 GB",
            "memory model (Korthikanti Table 2 + ZeRO) for the stated setup, dp = 4 (32 cards, the "
            "A4 setting)",
            "analytic only",
            f"{k12.total_gib:.1f} GiB with 12 layers recomputed ({'fits' if k12.fits else 'does not fit'}); "
            f"{none.total_gib:.1f} GiB with no recompute ({'fits' if none.fits else 'does not fit'}); "
            f"model states {none.model_states_gib:.1f} GiB; predicted tokens/s without recompute "
            f"{(none.tokens_per_s or 0) / (k12.tokens_per_s or 1):.2f}× the 12-layer setting",
        )
    ]


def claims(records, plans, zero_df) -> list[Claim]:
    """The claims table of this study (B7, A14, A17, A12), verdicts computed from numbers;
    an empty planner table (no ``planner_cases``) leaves A17 out."""
    out = []
    summary = policy_summary(records).set_index("policy")
    if "full" in summary.index:
        out += _b7_claims(records, summary)
    out += _a14_claim(records)
    out += _a17_claim(plans)
    if len(zero_df):
        r = zero_df.iloc[0]
        out.append(
            Claim(
                "A12",
                "ZeRO-3 saves memory over ZeRO-2 at the cost of extra parameter all-gathers",
                "ZeRO model-state formulas and per-step traffic (Rajbhandari et al. 2020)",
                "analytic only",
                f"{r.preset}, TP={r.tp}, dp={r.dp}: ZeRO-2 {r.zero2_gib:.1f} GiB vs ZeRO-3 "
                f"{r.zero3_gib:.1f} GiB per device (saves {r.saved_gib:.1f} GiB, {r.saved_share_of_card:.0%} "
                f"of the card); traffic {r.zero2_traffic_gib:.1f} → {r.zero3_traffic_gib:.1f} GiB "
                "per step (+50%)",
            )
        )
    return out


def headline_metrics(records, plans, zero_df) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names)."""
    s = policy_summary(records)
    lm = layer_model_vs_measured(records)
    full = full_vs_none(records)
    return {
        **run_identity(records, "preset", "attn_impl"),
        "base_micro_batch": records["base_micro_batch"],
        "policies": s.to_dict(orient="records"),
        "budget": budget_table(records).to_dict(orient="records"),
        "chosen_micro_batch": records["chosen_micro_batch"],
        "layer_model_max_abs_rel_error_korthikanti": float(lm.korthikanti_rel_error.abs().max()),
        "layer_model_max_abs_rel_error_explained": float(lm.explained_rel_error.abs().max()),
        "full_recompute_memory_share": full["memory_share"],
        "full_recompute_step_time_ratio": full["step_time_ratio"],
        "gradient_max_abs_diff": records["gradient_max_abs_diff"],
        "skipped_policies": records["skipped"],
        "claims": claims_mod.records(claims(records, plans, zero_df)),
    }


def outcome(records, p) -> tuple[list[Claim], dict]:
    """The claims and headline metrics the notebook publishes (also ``make stability``):
    the measured records plus the planner's cases and the ZeRO comparison of ``p``."""
    from . import planner, stated

    plans = planner.plans_table(p.planner_cases)
    zero = planner.zero_comparison(**stated.A12_ZERO)
    return claims(records, plans, zero), headline_metrics(records, plans, zero)
