"""The ``fusion`` study's headline metrics: what ``metrics.json`` carries for comparisons across
machines (units in the names), from the outcome's tables."""

from __future__ import annotations

from mfulab.results import run_identity
from mfulab.studies.fusion import a7_controls, a7_rows, norm_fusion
from mfulab.studykit import verdicts


def _mechanism_ratio(t) -> float | None:
    """The ratio A7's mechanism row reads (``a7_rows.mechanism_speedup``), or None."""
    s = a7_rows.mechanism_speedup(t)
    return float(s.ratio) if s is not None else None


def _controls_ratio(t, reading: str) -> float | None:
    """A reading of the controls' table (``a7_controls.PAIRS``), or None where it did not run."""
    c = t.get("ln_controls")
    hit = c[c.reading == reading] if c is not None and len(c) else []
    return float(hit.ratio.iloc[0]) if len(hit) else None


def headline_metrics(records, t, v: dict, claim_list) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names)."""
    slopes = v["attention_slopes"]
    compiled = t["ln_fusion_speedup"][t["ln_fusion_speedup"].candidate.str.contains("compiled")]
    largest_p = compiled.loc[compiled.dropout_p.idxmax()] if len(compiled) else None
    layer = t["ln_layer_share"]
    roofs = norm_fusion.roofs(records)  # the copy and the layer's GEMM timed in the sub-block's rounds
    return {
        **run_identity(records, "dtype"),
        "matmul_ceiling_flops_per_s": records["ceiling"]["best_flops_per_s"],
        "memory_bandwidth_bytes_per_s": records["bandwidth"]["plateau_bytes_per_s"],
        "in_round_bandwidth_bytes_per_s": roofs["bandwidth_bytes_per_s"],
        "in_round_layer_matmul_flops_per_s": roofs["layer_matmul_flops_per_s"],
        "ln_fusion": t["ln_fusion_speedup"].to_dict(orient="records"),
        "ln_rows": t["ln_fusion"].to_dict(orient="records"),
        "ln_working_set_bytes": records["ln"]["working_set_bytes"],
        "ln_fusion_speedup_largest_p": float(largest_p.ratio) if largest_p is not None else None,
        # A7's mechanism ratio (the fewest-passes fused kernel over eager in DRAM, p = 0), so that
        # make stability measures its drift between fresh runs on each box
        "ln_mechanism_dram_speedup": _mechanism_ratio(t),
        # fusion's own effect at p = 0 (add + LN: one C pass over two, ordinary stores)
        "ln_fusion_own_dram_speedup": _controls_ratio(t, a7_controls.PAIRS[1][0]),
        # the row's deciding reading: dropout + add + LN, one C pass over three, same random numbers
        "ln_fusion_three_pass_dram_speedup": _controls_ratio(t, a7_controls.FUSION),
        "ln_layer_share": float(layer.sub_block_share.iloc[0]),  # the same row, so that
        "ln_layer_speedup_ceiling": float(layer.ceiling.iloc[0]),  # ceiling = 1/(1 − share)
        "ln_article_layer_speedup_ceiling": float(t["a7_article_sensitivity"].layer_speedup_ceiling.iloc[0]),
        "triton_skipped": records["ln"]["triton_skipped"],
        "sdpa_backend": records["attention"]["backend"],
        "attention_slopes": slopes,
        "attention_skipped": records["attention"]["skipped"],
        "naive_attention_saved_bytes_slope": slopes.get("naive_saved_bytes_slope"),
        "sdpa_saved_bytes_slope": slopes.get("sdpa_saved_bytes_slope"),
        "compile": t["model_compile"].to_dict(orient="records"),
        "matmul_dtypes": t["matmul_dtypes"].to_dict(orient="records"),
        "a8_article_scale": v["a8_article_scale"],
        "claims": verdicts.records(claim_list),
    }
