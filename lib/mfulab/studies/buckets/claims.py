"""The claims of the ``buckets`` study (A6, B8, B6): :func:`outcome` builds the tables the
notebook shows once and composes the rows the topic modules build from them (A6's measured row
in ``analysis``; A6's analytic rows and B8 at cluster scale in ``cluster_scale``; B6 in
``flags``), with the headline metrics; the notebook and ``make stability`` call it."""

from __future__ import annotations

from mfulab.results import run_identity
from mfulab.studies.buckets import (
    analysis,
    b6_scale,
    b8_case,
    b8_consistency,
    cluster_scale,
    flags,
    grad_memory,
    mindspeed_rule,
    model_error,
    sensitivity,
    tradeoff,
)
from mfulab.studies.buckets.stated import A6_SMALL_CARDS
from mfulab.studykit import verdicts
from mfulab.studykit.outcome import Outcome


def tables(records) -> dict:
    """Every table the chapter shows, computed once (saved as ``tables/<name>.csv``)."""
    scale = cluster_scale.scale_table(records)
    return {
        "bucket_layouts": analysis.layout_table(records),
        "gpt_layouts": analysis.gpt_layout_table(records),
        "sweep": analysis.sweep_table(records),
        "model_error": model_error.fit_table(records),
        "sync_cost": model_error.sync_cost_table(records),
        "flags": flags.flag_table(records),
        "grad_memory": grad_memory.memory_table(records),
        "scale": scale,
        "best_caps": cluster_scale.best_caps(scale),
        "sensitivity": sensitivity.sensitivity_table(records),
        "a6_per_tensor": cluster_scale.per_tensor_table(records),
        "a6_per_tensor_small": cluster_scale.per_tensor_table(records, cards=A6_SMALL_CARDS),
        "b8_case": b8_case.b8_table(records),
        "b8_tail": b8_case.b8_tail_table(records),
        "b8_consistency": b8_consistency.consistency_table(records),
    }


def outcome(records, p) -> Outcome:
    """The tables, the claims rows and the headline metrics, each computed once: A6 measured
    here (one bucket per tensor vs the fastest cap), A6's per-tensor sentence at the article's
    own 13B layout, A6 at cluster scale (how far the cap moves MFU; the sweet spot), B8 (the
    simulator's 7B case), B6 (the two DDP flags)."""
    t = tables(records)
    best, sens = t["best_caps"], t["sensitivity"]
    values = {  # derived once, read by the claims, the metrics, the notebook and its figure
        "a6_measured": analysis.a6_measured(records)
    }
    claim_list = (
        analysis.a6_ddp_default_claim(records, t["gpt_layouts"])
        + analysis.a6_measured_claim(records, values["a6_measured"])
        + tradeoff.tradeoff_claim(records)
        + cluster_scale.a6_per_tensor_claim(t["a6_per_tensor"], t["a6_per_tensor_small"])
        + cluster_scale.a6_spread_claim(records, best, sens)
        + cluster_scale.a6_sweet_spot_claim(records, best, sens)
        + mindspeed_rule.a6_megatron_default_claims(records)
        + [mindspeed_rule.a6_merge_count_claim()]
        + b8_case.b8_claims(
            records,
            t["b8_case"],
            t["b8_tail"],
            t["b8_consistency"],
            b8_consistency.gated_rows(records, t["b8_consistency"]),
        )
        + b8_case.b8_earlier_claim(t["gpt_layouts"], b8_case.article_first_buckets(records))
        + flags.b6_claims(
            records,
            t["flags"],
            b8_case.b6_exposed_reduction(records, b6_scale.B6_MICRO_BATCH_SCENARIOS, t["b8_consistency"]),
        )
    )
    return Outcome(claim_list, headline_metrics(records, claim_list, t, values), t, values=values)


def headline_metrics(records, claim_list, t, values: dict) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names)."""
    gpt = t["gpt_layouts"]
    m = values["a6_measured"]
    return {
        **run_identity(records),
        "world_size": records["ddp"]["world_size"],
        "sweep": t["sweep"].to_dict(orient="records"),
        "best_bucket_cap_mb_real": analysis.best_real_cap(records),
        "per_tensor_slowdown": m["per_tensor"].ratio if m else None,
        # 25 MiB vs the fastest cap: stable where caps tie, unlike the argmax above
        "default_cap_slowdown": m["default"].ratio if m and "default" in m else None,
        "layouts_match_simulator": all(v["equal"] for v in analysis.layout_check(records).values())
        and (gpt.empty or bool(gpt.matches_rules.all())),
        "gpt_layouts": gpt.to_dict(orient="records"),
        "gradient_gate_max_abs_diff": max(records["ddp"]["gradient_gate"].values()),
        "allreduce_fit": {
            k: v
            for k, v in records["ddp"]["allreduce_fit"].items()
            if k not in ("relative_residuals", "rows")
        },
        **flags.headline(records, t["flags"]),
        # the simulator's model error here: DDP's work per bucket beyond the calibration's α–β
        **{
            f"per_bucket_overhead_s_{f['mode']}": float(f["per_bucket_overhead_s"])
            for f in t["model_error"].to_dict(orient="records")
        },
        "best_caps_at_scale": t["best_caps"].to_dict(orient="records"),
        "claims": verdicts.records(claim_list),
    }
