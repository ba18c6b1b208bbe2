"""The claims table of the ``recompute`` study (B7, A14, A17, A12): every verdict computed
from the numbers of ``analysis``, ``planner`` and ``sensitivity``, with the rule it follows
in the docstring of the function that builds the row. :func:`outcome` builds the tables once
and composes the rows from them; nothing else builds these rows."""

from __future__ import annotations

import pandas as pd

from mfulab.analytic.config import ATTENTION_IMPLS
from mfulab.results import run_identity
from mfulab.studies.recompute import analysis, article_rows, freed_per_flop, planner, sensitivity, stated
from mfulab.studies.recompute.analysis import b7_same_batch, budget_table, planner_inputs, policy_summary
from mfulab.studykit import verdicts
from mfulab.studykit.outcome import Outcome
from mfulab.studykit.verdicts import Claim


def consistent_with_band(lo: float, hi: float, band: tuple[float, float]) -> str:
    """A toy regime's reading of a claimed size: ``confirmed`` (shown) when the interval [lo, hi]
    (widened by the run-to-run drift) lies inside the band, ``refuted`` (not shown) when it misses
    the band, ``inconclusive on this machine`` when it straddles an edge."""
    if hi < min(band) or lo > max(band):
        return "refuted"
    return "confirmed" if min(band) <= lo and hi <= max(band) else "inconclusive on this machine"


def b7_claims(records, t) -> list[Claim]:
    """B7 as two rows.

    1. Same micro-batch: the claim's size is 50% → 40% global MFU, a 1.25× step. Recompute
       stretches only the compute, a share c of the step: the compute slowdown the claim implies
       is 1 + 0.25/c, from 1.25 (c = 1) to 1.45 at article B's own c = 0.55 (its local 80% vs
       global 44%); the FLOP count's 1.33 lies inside. This single-process run times compute
       only (c = 1), full against none alone in ``b7_rounds`` interleaved rounds. Rule, for a toy
       regime (:func:`consistent_with_band`): shown when the compute ratio's interval, widened by
       its measured run-to-run drift (``b7_ratio_drift``), lies inside the band
       [1.25, 1 + 0.25/0.55]; not shown when it misses the band; inconclusive otherwise. (An
       interval widened by a generic 5% flipped between fresh runs under every rule tried: the
       ratio itself moves 1.21–1.57× between them.)
    2. At a memory budget: "tokens/s rose while MFU dipped". MFU = model FLOPs per token ×
       tokens/s ÷ peak, and recompute leaves model FLOPs per token unchanged, so MFU moves by
       exactly the factor tokens/s moves (and HFU by that factor times the hardware-FLOPs
       ratio): refuted by that identity of the article's own definition of MFU (its basis: the
       article's own arithmetic), whatever the measurement; the measured tokens/s is shown
       beside it."""
    if "full" not in records["policies"]:
        return []
    b = t["b7_same_batch"].iloc[0].to_dict()
    band = (b["claimed_time_ratio"], b["claimed_compute_ratio_hi"])
    out = [
        Claim(
            "B7",
            f"full recompute lowers MFU from {b['mfu_before_percent']}% to {b['mfu_claimed_percent']}% "
            f"at the same batch (global MFU: a {b['claimed_time_ratio']:.2f}× step)",
            f"step time full vs none at micro-batch {b['micro_batch']}, interleaved ({b['rounds']} "
            f"{'paired ' if b['paired'] else ''}rounds), interval widened by the run-to-run drift; "
            "against the compute slowdown the claim implies, 1 + 0.25/c for a compute share c from "
            f"{b['article_compute_share']:.2f} (article B's own) to 1, [{min(band):.2f}, {max(band):.2f}]×: "
            "shown when the interval, widened by the ratio's run-to-run drift "
            f"({b['run_to_run_drift']:.0%}), lies inside it, not shown when it misses it, inconclusive "
            "otherwise",
            consistent_with_band(b["time_ratio_lo"], b["time_ratio_hi"], band),
            f"full/none compute time = {b['time_ratio']:.2f}× [{b['time_ratio_lo']:.2f}, "
            f"{b['time_ratio_hi']:.2f}] (one process: the step is all compute); the claim implies "
            f"{b['claimed_time_ratio']:.2f}–{b['claimed_compute_ratio_hi']:.2f}× on compute, the FLOP count "
            f"{b['megatron_time_ratio']:.2f}×; at article B's compute share "
            f"{b['article_compute_share']:.2f} the measured ratio takes global MFU "
            f"{b['mfu_before_percent']}% → "
            f"{b['mfu_before_percent'] / (1 + (b['time_ratio'] - 1) * b['article_compute_share']):.1f}%; "
            f"hardware FLOPs counted here {b['counted_flops_ratio']:.2f}× "
            "(torch's non-reentrant checkpoint skips the last matmul of each region), HFU full/none "
            f"{b['hfu_ratio']:.2f}×",
            basis=verdicts.TOY,
        )
    ]
    bt = t["budget"].set_index("policy")
    if bt.loc["none", "fits"] and bt.loc["full", "fits"]:
        row = bt.loc["full"]
        same_direction = (row.mfu_vs_none - 1) * (row.tokens_per_s_vs_none - 1) >= 0
        budget_mib = records["params"]["memory_budget_mib"]
        out.append(
            Claim(
                "B7",
                "with the memory freed for a larger batch, tokens/s rose while MFU dipped",
                "identity: MFU = model FLOPs/token × tokens/s ÷ peak, and recompute does not change "
                f"model FLOPs/token; shown with the largest micro-batch within {budget_mib} MiB per "
                f"policy (none: {int(bt.loc['none', 'micro_batch'])}, full: {int(row.micro_batch)})",
                "refuted" if same_direction else "confirmed",
                f"tokens/s full/none = {row.tokens_per_s_vs_none:.2f} [{row.ratio_lo:.2f}, "
                f"{row.ratio_hi:.2f}] ({row.verdict}); MFU moves by the same factor "
                f"({row.mfu_vs_none:.2f}×) and HFU by that factor times the hardware-FLOPs ratio "
                f"full/none ({row.mfu_vs_none:.3f} × {row.hardware_flops_ratio:.3f} = "
                f"{row.hfu_vs_none:.3f}×): when tokens/s rises, MFU and HFU rise with it; an MFU "
                "that dips while tokens/s rises has changed its FLOPs count or its device count. "
                "Under the article's other convention, local MFU (§1.1: compute-busy time only), the "
                "two can part: recompute lengthens the busy time per token while a larger batch cuts "
                "the per-token communication and data waits; but §2.3 frames this anecdote in global "
                "MFU ('在全局MFU的公式里'), and the refutation holds for that reading",
                basis=verdicts.ARITHMETIC,  # an identity of the article's own MFU definition (§1.1)
            )
        )
    return out


def _per_config(frame, column, fmt):
    return ", ".join(f"{fmt.format(v)} ({cfg})" for cfg, v in frame[column].items())


def _a14_measured_text(records, t) -> str:
    measured = t["a14_measured"]
    if not len(measured):
        return ""
    m = measured.set_index(["attention", "policy"]).bytes_per_recomputed_flop
    parts = [
        f"{impl}: core {m[(impl, 'selective')] * 1e6:.3g} vs MLP {m[(impl, 'mlp')] * 1e6:.3g} B/MFLOP"
        for impl in reversed(ATTENTION_IMPLS)  # sdpa first
        if (impl, "selective") in m.index and (impl, "mlp") in m.index
    ]
    return (
        f"; measured on {records['config']['name']} (exact saved bytes; FLOPs of one full re-run of "
        "each region's matmuls, for every row): " + "; ".join(parts)
    )


def a14_claims(records, t) -> list[Claim]:
    """A14 as two rows: one layer of a ~100B-class model and of the article's 13B, without a fused
    attention kernel (the article keeps "the attention-score intermediates", which only an
    unfused kernel stores) and with Flash Attention (its 13B's §3.2) (``freed_per_flop``; Table 2
    bytes, bf16, dropout; FLOPs of the re-run matmuls). Analytic: no run can flip them.

    1. The choice (recompute the MLP, keep the attention), by activation bytes freed per
       recomputed FLOP. "Keep the attention" can be set against recomputing the attention core
       (Korthikanti's selective recompute) or the whole attention block (QKV, core, projection).
       Rule, in the claim's own regime, unfused attention (its premise, "the attention
       activations are large", holds only where the scores are stored): confirmed when the MLP
       frees more per FLOP than both in every layer; refuted when the core frees more than the
       MLP in every layer; otherwise analytic only. The flash reading (the article's 13B runs
       Flash Attention in §3.2) is the evidence's context, not the decision. Here, unfused, the
       core frees 42× and 101× more per FLOP than the MLP: refuted (analysis); with a flash
       kernel the MLP frees 25× and 122× more than the core but 0.93× and 1.21× what the block
       frees (:func:`freed_per_flop.block_break_even_seq_len`).
    2. The reasons ("the MLP is cheap to redo; the attention activations are large and costly
       to redo"). Rule, per layer: "cheap/costly" holds when the MLP's share of the layer's
       forward FLOPs is below the attention block's, "large" when the attention block frees
       more activation bytes than the MLP (the most generous reading: the core frees less).
       Confirmed when both hold in every layer, refuted when either fails in every layer,
       otherwise "analytic only". Here the MLP is 65% and 59% of the forward FLOPs and the
       attention block frees 11 against the MLP's 19 ·s·b·h (the fused core 0.09%): refuted, far
       from both thresholds."""
    regime = t["a14_verdict"].set_index(["config", "attention"])
    fused = regime.xs("fused", level="attention")
    naive = regime.xs("naive", level="attention")
    # the claim's regime: the article keeps "Q, K, V and the attention-score intermediates"
    # (stored only without a fused kernel); its 13B's Flash Attention (§3.2) is context
    if ((naive["MLP ÷ core"] > 1) & (naive["MLP ÷ block"] > 1)).all():
        choice = "confirmed"
    elif (naive["MLP ÷ core"] < 1).all():
        choice = "refuted"
    else:
        choice = "analytic only"
    break_even = ", ".join(
        f"{freed_per_flop.block_break_even_seq_len(cfg):.0f} ({cfg.name}, run at {cfg.seq_len})"
        for cfg in stated.A14_CLAIM_CONFIGS
    )
    regime_text = (
        "one layer of " + ", ".join(naive.index) + " (Table 2, bf16, dropout), unfused attention (the "
        "claim's premise: it keeps the attention scores), Flash Attention (its 13B's §3.2) beside it"
    )
    choice_row = Claim(
        "A14",
        "for ~100B models, recompute the MLP and keep the self-attention activations (the choice)",
        "activation bytes freed per recomputed FLOP (one full re-run of the region's matmuls), the MLP "
        "against the attention core and against the whole attention block (QKV, core, projection), "
        + regime_text
        + "; unfused: confirmed when the MLP frees more than both in every layer, refuted when the core "
        "frees more than the MLP in every layer, analytic only otherwise",
        choice,
        "without a fused kernel the attention core frees "
        + _per_config(1 / naive[["MLP ÷ core"]], "MLP ÷ core", "{:.0f}×")
        + " more per FLOP than the MLP (Korthikanti's selective recompute takes the core: the opposite "
        "choice). Context, not the decision: with a flash kernel the scores are never stored and "
        "the MLP frees "
        + _per_config(fused, "MLP ÷ core", "{:.0f}×")
        + " more per FLOP than the core but "
        + _per_config(fused, "MLP ÷ block", "{:.2f}×")
        + " what the whole attention block frees (it beats the block only above s = (24h + 64a)/76 "
        f"tokens: {break_even})" + _a14_measured_text(records, t),
        basis=verdicts.ANALYSIS,
    )

    reasons = t["a14_reasons"].set_index(["config", "attention"])
    fused_r, naive_r = reasons.xs("fused", level="attention"), reasons.xs("naive", level="attention")
    # "cheap/costly" is a FLOP count, the same in both regimes; "large" is read where the article
    # reads it (unfused: the scores are stored), the fused kernel beside it
    cheap = naive_r["MLP FLOP share"] < naive_r["attention block FLOP share"]
    large = naive_r["attention block byte share"] > naive_r["MLP byte share"]
    if (cheap & large).all():
        because = "confirmed"
    elif (~cheap).all() or (~large).all():
        because = "refuted"
    else:
        because = "analytic only"
    reasons_row = Claim(
        "A14",
        "the reasons: the MLP is cheap to redo, the self-attention activations are large and costly to redo",
        "share of the layer's forward FLOPs (matmuls) each part re-runs and share of the layer's "
        "activation bytes it frees, " + regime_text + "; refuted when in every layer the MLP re-runs "
        "more FLOPs than the attention block or the attention frees fewer bytes than the MLP",
        because,
        "the MLP re-runs "
        + _per_config(naive_r, "MLP FLOP share", "{:.0%}")
        + " of the layer's forward FLOPs, the whole attention block "
        + _per_config(naive_r, "attention block FLOP share", "{:.0%}")
        + ": the MLP is the costlier part to redo. Without a fused kernel (where the article's "
        "'large' holds) the attention core's scores are large ("
        + _per_config(naive_r, "attention core byte share", "{:.0%}")
        + " of the bytes) but the cheapest to redo ("
        + _per_config(naive_r, "attention core FLOP share", "{:.1%}")
        + " of the FLOPs): large, not costly. With a flash kernel the attention block frees "
        + _per_config(fused_r, "attention block byte share", "{:.0%}")
        + " of the bytes against the MLP's "
        + _per_config(fused_r, "MLP byte share", "{:.0%}")
        + " (the core "
        + _per_config(fused_r, "attention core byte share", "{:.2%}")
        + "): not even large",
        basis=verdicts.ANALYSIS,
    )
    return [choice_row, reasons_row]


def a17_claims(t, p) -> list[Claim]:
    """A17, one row per reading of ``--recompute-method uniform --recompute-num-layers 12`` (Megatron's
    uniform chunks, the article's block explanation, and the command as Megatron-LM parses it)
    (the planner's memory model at the command's micro-batch, DP = 1): confirmed (analysis) when
    the setting fits the card less the fragmentation margin at every margin of the grid (0-30%),
    refuted (analysis) when it fits at none, analytic only when the margin decides."""
    plans = t["planner"]
    case = next((c for c in p.planner_cases if c["name"] == stated.A17_CASE["name"]), None)
    if case is None or not len(plans) or "a17_readings" not in t:
        return []
    a17 = plans[(plans.case == case["name"]) & (plans.micro_batch == stated.A17_MICRO_BATCH)].set_index(
        "policy"
    )
    readings = {k: v for k, v in stated.A17_READINGS.items() if v in a17.index}
    if "none" not in a17.index or not readings:
        return []
    table = t["a17_readings"].set_index("policy")
    fit_columns = [c for c in table.columns if c.startswith("fits")]
    margins = f"{min(stated.FRAGMENTATION_MARGIN_GRID):.0%}-{max(stated.FRAGMENTATION_MARGIN_GRID):.0%}"
    none = a17.loc["none"]
    what = {
        "uniform": "uniform reading: chunks of 12, 12, 12 and 4 layers, every layer recomputed, one "
        "chunk's activations alive during its backward (what Megatron/MindSpeed do)",
        "block": "block reading: the first 12 layers recomputed, 28 keep everything",
        "as written": "command as Megatron-LM parses it: the two flags act only with "
        "--recompute-granularity full, which the command omits, so nothing is recomputed",
    }
    short = {
        "uniform": "Megatron's uniform chunks",
        "block": "the first 12 layers",
        "as written": "as written",
    }
    out = []
    for name, policy in readings.items():
        r = a17.loc[policy]
        survives = table.loc[policy, fit_columns].all()
        fits_any = table.loc[policy, fit_columns].any()
        article = " (the article's own explanation)" if name == stated.A17_ARTICLE_READING else ""
        out.append(
            Claim(
                "A17",
                "13B on one machine of 8 cards (TP = 8, PP = 1, so DP = 1), seq 4096, micro-batch 1, "
                "ZeRO-2, `--recompute-method uniform --recompute-num-layers 12` fits in 64 GB "
                f"(read: {short[name]})",
                "memory model (Korthikanti Table 2 + ZeRO; DP = 1, so ZeRO-2 shards nothing) under the "
                f"{what[name]}{article}",
                "confirmed" if survives else "refuted" if not fits_any else "analytic only",
                f"{r.total_gib:.1f} GiB per card ({'fits' if r.fits else 'does not fit'} "
                f"{r.usable_gib:.1f} GiB usable at a {p.fragmentation_margin:.0%} margin; "
                f"{'fits' if survives else 'does not fit'} at every margin {margins}); model states "
                f"{r.model_states_gib:.1f} GiB; recompute +{r.recompute_flops_share:.0%} FLOPs; no "
                f"recompute: {none.total_gib:.1f} GiB ({'fits' if none.fits else 'does not fit'}); "
                f"predicted tokens/s {(r.tokens_per_s or 0) / (none.tokens_per_s or float('inf')):.2f}× "
                "no recompute's (the step model)",
                basis=verdicts.ANALYSIS,
            )
        )
    return out


def measured_tables(records) -> dict:
    """The measured policies on this machine (``analysis``)."""
    return {
        "saved_tensors": analysis.saved_table(records),
        "layer_model_vs_measured": analysis.layer_model_vs_measured(records),
        "policy_summary": policy_summary(records),  # fails early on records without the reference policy
        "peak_memory": pd.DataFrame(records["peak"]),
        "b7_same_batch": pd.DataFrame([b7_same_batch(records)] if "full" in records["policies"] else []),
        "budget": budget_table(records),
    }


def a14_tables(records) -> dict:
    """A14 at the claim's configurations (``freed_per_flop``), and what was measured here."""
    long = freed_per_flop.analytic_table(stated.A14_CLAIM_CONFIGS)
    return {
        "a14_sdpa_saves": freed_per_flop.kernel_saves(records),
        "a14_bytes_per_flop": long,
        "a14_verdict": freed_per_flop.verdict_table(long),
        "a14_measured": freed_per_flop.measured_table(records),
        "a14_reasons": freed_per_flop.reasons_table(long),
        "a14_sequence_sensitivity": freed_per_flop.verdict_table(
            freed_per_flop.analytic_table(stated.A14_CLAIM_CONFIGS, seq_lens=stated.A14_SEQ_LEN_GRID)
        ),
    }


def scale_tables(p) -> dict:
    """The articles' scale under ``p``'s stated assumptions: the planner, its chosen plans and
    sensitivity, A17's readings, and the ZeRO-2 vs ZeRO-3 comparison (A12)."""
    plans, zero = planner_inputs(p)  # no planner cases: an empty table, and A17 is left out
    t = {
        "planner": plans,
        "planner_chosen": planner.chosen_plans(plans),
        "planner_sensitivity": sensitivity.decisions(
            p.planner_cases, assumptions=p.step_assumptions(), fragmentation_margin=p.fragmentation_margin
        ),
        "zero2_vs_zero3": zero,
        "a12_accumulation": sensitivity.a12_accumulation(
            stated.A12_ZERO["preset_name"], tp=stated.A12_ZERO["tp"]
        ),
        "a12_throughput_sensitivity": article_rows.a12_throughput_table(),
    }
    if any(c["name"] == stated.A17_CASE["name"] for c in p.planner_cases):
        t["a17_readings"] = sensitivity.a17_readings(
            stated.A17_CASE,
            assumptions=p.step_assumptions(),
            fragmentation_margin=p.fragmentation_margin,
            micro_batch=stated.A17_MICRO_BATCH,
        )
    return t


def tables(records, p) -> dict:
    """Every table the chapter shows, computed once (saved as ``tables/<name>.csv``); with article
    A's launch command flag by flag as Megatron-LM reads it (``articles.A_LAUNCH_COMMAND``)."""
    import pandas as pd

    from mfulab.analytic import articles

    launch = {"launch_command": pd.DataFrame(articles.launch_command_rows())}
    return {**measured_tables(records), **a14_tables(records), **scale_tables(p), **launch}


def outcome(records, p) -> Outcome:
    """The tables, the claims rows (B7, A14, A17, A12) and the headline metrics, each computed
    once; the notebook shows them and ``make stability`` reads the claims and metrics."""
    t = tables(records, p)
    claim_list = (
        b7_claims(records, t)
        + [article_rows.b7_published_claim()]
        + a14_claims(records, t)
        + [article_rows.doubling_claim(), article_rows.gpt3_activations_claim()]
        + a17_claims(t, p)
        + article_rows.a12_claim(t["zero2_vs_zero3"])
        + [
            article_rows.zero2_comm_claim(),
            article_rows.zero2_throughput_claim(t["a12_throughput_sensitivity"]),
        ]
    )
    values = {"full_vs_none": analysis.full_vs_none(records)}  # quoted by the notebook and a figure
    return Outcome(claim_list, headline_metrics(records, claim_list, t, values), t, values=values)


def headline_metrics(records, claim_list, t, values: dict) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names)."""
    lm = t["layer_model_vs_measured"]
    full = values["full_vs_none"]
    return {
        **run_identity(records, "preset", "attn_impl"),
        "dtype": records.get("dtype", "fp32"),
        "tf32_matmul": records.get("tf32_matmul"),
        "base_micro_batch": records["base_micro_batch"],
        "policies": t["policy_summary"].to_dict(orient="records"),
        "budget": t["budget"].to_dict(orient="records"),
        "chosen_micro_batch": records["chosen_micro_batch"],
        "layer_model_max_abs_rel_error_korthikanti": float(lm.korthikanti_rel_error.abs().max()),
        "layer_model_max_abs_rel_error_explained": float(lm.explained_rel_error.abs().max()),
        "full_recompute_memory_share": full["memory_share"],
        "full_recompute_step_time_ratio": full["step_time_ratio"],
        "gradient_max_abs_diff": records["gradient_max_abs_diff"],
        "skipped_policies": records["skipped"],
        "claims": verdicts.records(claim_list),
    }
