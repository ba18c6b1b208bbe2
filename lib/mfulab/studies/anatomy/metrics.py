"""The ``anatomy`` study's headline metrics: what ``metrics.json`` carries for comparisons
across machines (units in the names), from the outcome's tables."""

from __future__ import annotations

from mfulab.results import run_identity
from mfulab.studies.anatomy.analysis import (
    MFU_CONVENTION,
    WAITS,
    _total_comparison,
    b2_split,
    b13_effect,
    ladder_table,
)
from mfulab.studykit import verdicts


def headline_metrics(records: dict, p=None, t: dict | None = None) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names), from
    the outcome's tables ``t`` (the ladder, the naive step's split) where given."""
    t = t or {}
    ladder = t["b15_ladder"] if "b15_ladder" in t else ladder_table(records)
    table = ladder.set_index("rung")
    first, last = records["ladder"][0], records["ladder"][-1]
    split = (
        t["b2_split"]
        if "b2_split" in t
        else b2_split(records, present_share=records["params"]["b2_present_share"])
    )
    split = split.set_index("category")
    total = _total_comparison(records)
    return {
        **run_identity(records, "preset", "nproc"),
        "flops_convention": MFU_CONVENTION,
        "naive_step_s": table.step_s[first],
        "best_step_s": table.step_s[last],
        "ladder_speedup": table.step_s[first] / table.step_s[last],
        "ladder_speedup_lo": total.ratio_lo,
        "ladder_speedup_hi": total.ratio_hi,
        "naive_mfu": table.mfu_vs_ceiling[first],
        "best_mfu": table.mfu_vs_ceiling[last],
        "best_mfu_vs_ceiling_now": table.mfu_vs_ceiling_now[last],
        "matmul_ceiling_flops_per_s": records["ceiling"]["best_flops_per_s"],
        "ceiling_now_flops_per_s": (records.get("ceiling_now") or records["ceiling"])["best_flops_per_s"],
        # the last rung's mean step over ranks, split (for the comparison's two MFUs of one box)
        "best_wait_share": sum(table[f"{c}_s"][last] for c in WAITS) / table.mean_step_s[last],
        "best_compute_efficiency": table[f"{verdicts.B2_USEFUL}_s"][last]
        / (table[f"{verdicts.B2_USEFUL}_s"][last] + table["slow operators_s"][last]),
        "naive_comm_wait_share": split.share_of_step["communication wait"],
        "naive_data_wait_share": split.share_of_step["data wait"],
        "straggler_slowdown": b13_effect(records)["slowdown"],
    }
