"""The claims table of the ``overlap`` study (A2, A3, A4, A5, A18, B9) and its headline metrics,
from the measured tables of ``analysis`` and the models of ``alpha_beta`` and ``step_at_scale``;
:func:`outcome` builds the tables once and publishes them. Every verdict is computed from
numbers, with the numbers in its evidence."""

from __future__ import annotations

import pandas as pd

from mfulab.results import run_identity
from mfulab.studies.overlap import (
    a3_rows,
    a4_bound,
    a5_intervention,
    a5_rows,
    ab_regime,
    alpha_beta,
    exposed_share,
    nccl_reference,
    pseudo_code,
    stated,
    step_at_scale,
    tp_layout,
)
from mfulab.studies.overlap.analysis import (
    a3_outcome,
    a5_comparisons,
    a5_gap,
    alpha_beta_residuals,
    best_k,
    collectives_table,
    crossover_bytes,
    fitted_alpha_beta,
    overlap_table,
    own_alpha_beta,
    per_call_s,
    step_best_k_text,
)
from mfulab.studies.overlap.params import Params
from mfulab.studies.overlap.stated import A4_STATED
from mfulab.studykit import verdicts
from mfulab.studykit.outcome import Outcome
from mfulab.studykit.verdicts import Claim
from mfulab.units import GB, MB


# ---------------------------------------------------------------------------- claims and metrics
def _a4_claim(records, t: dict, v: dict) -> Claim:
    art, sens, flip = v["article_scale"], t["a4_sensitivity"], v["a4_flip_link"]
    runs = sens[sens.fits != False]  # noqa: E712 (None: no memory figure, kept)
    changed = runs[~runs.same_as_baseline]
    changes = "; ".join(f"{r.varied} {r.value}: {r.reading}" for r in changed.itertuples())
    flip_text = ""
    if flip["flip_bytes_per_s"]:
        side = "above" if flip["baseline_reading"] == flip["below"] else "below"
        flip_text = (
            f"; it changes to '{flip[side]}' {side} {flip['flip_bytes_per_s'] / GB:.0f} GB/s per direction "
            f"inside a node (the 910B's table figure: {art['a4_tp_link_gb_per_s']:.0f} GB/s)"
        )
    before, after = A4_STATED["step_before_s"], A4_STATED["step_after_s"]
    margin = A4_STATED["decisive_margin"]
    article_mfu_after = art["a4_mfu_overlapped"] * art["a4_step_overlapped_s"] / after
    article_mfu_before = art["a4_mfu_overlapped"] * art["a4_step_overlapped_s"] / before
    tp_off = sens[sens.varied == "TP communication overlap"]
    tp_on_text = (
        f"; with the 8-card command's gradient overlap alone (TP all-reduces exposed) "
        f"{tp_off.step_overlapped_s.iloc[0]:.2f} s"
        if len(tp_off)
        else ""
    )
    stated = sens[sens.kind == "stated case"].reproduces_article.iloc[0]
    stated = None if stated is None or stated != stated else bool(stated)  # NaN from a CSV: None
    inconsistent = runs[~runs.consistent_with_stated_step.astype(bool)]
    saved_needed = (before - after) / art["a4_total_comm_s"]
    too_big = sens[sens.fits == False]  # noqa: E712
    assumed = runs[runs.kind == "assumed input"]
    other = runs[runs.kind == "other configuration"]
    too_big_text = (
        "; left out as they do not fit the card: "
        + "; ".join(f"{r.varied} {r.value} ({r.memory_gib:.0f} GiB)" for r in too_big.itertuples())
        if len(too_big)
        else ""
    )
    reversing = other[other.reproduces_article.map(lambda r: r is not None and bool(r) != bool(stated))]
    reversed_text = (
        "; other configurations that would reproduce it: "
        + "; ".join(f"{r.varied} {r.value}" for r in reversing.itertuples())
        if stated is not None and not stated and len(reversing)
        else ""
    )
    modelled_saving = art["a4_step_serial_s"] / art["a4_step_overlapped_s"]
    bound = a4_bound.a4_grad_overlap_bound(
        {"compute_s": art["a4_compute_s"], "accumulation_steps": art["a4_accumulation_steps"]}
    )
    batch = records["params"]["article_global_batch"]
    over_batches = a4_bound.a4_bound_text(records["params"]["article_n"], batch)
    grad_only = (
        tp_off.step_serial_s.iloc[0] / tp_off.step_overlapped_s.iloc[0] if len(tp_off) else float("nan")
    )
    frontier = v.get("a4_saving_frontier") or {}
    frontier_text = (
        f" Feasibility: the model saves the article's {frontier['needed_s']:.1f} s only where the node's TP "
        f"link runs at ≤ {frontier['frontier_bytes_per_s'] / GB:.0f} GB/s per direction (slower links leave "
        f"more to hide; at the 910B's table figure it saves {frontier['saved_at_device_s']:.2f} s): a "
        "measured 8-card HCCL all-reduce above that would refute the saving without the step model's margin."
        if frontier.get("frontier_bytes_per_s")
        else ""
    )
    power_text = frontier_text + (
        f" Power: at ±{margin:.0%} a case misses only where its modelled saving is under "
        f"{step_at_scale.a4_power(margin):.2f}× (almost none; the gradient overlap alone gives "
        f"{grad_only:.2f}×), so the model can refute the article only by finding no overlap to speak of. "
        "A bound that needs no step model: the gradient buckets hide only under the last micro-batch's "
        f"backward (of {bound['micro_batches']}), at most ⅔ of its compute: "
        f"{bound['bound_modelled_s']:.2f} s at the modelled compute, "
        f"{bound['bound_model_free_s']:.2f} s even were the whole 2.1 s overlapped step compute, "
        f"against the {bound['saved_s']:.1f} s saved: "
        + (
            "gradient overlap alone cannot account for the article's saving, which needs the TP "
            "all-reduces hidden (§2.2's chunking)."
            if not bound["can_account"]
            else "gradient overlap alone could account for the saving."
        )
    )
    key_text = (
        a4_bound.a4_bound_lead(v["a4_bound"]) + ". "
        f"Gradient overlap alone hides ≤ {bound['bound_model_free_s']:.2f} s of the {bound['saved_s']:.1f} s "
        f"saved at global batch {batch} (model-free given Megatron's one gradient reduction per step; a "
        f"reduction per micro-batch, as DeepSpeed's ZeRO-2 does, could hide up to "
        f"{bound['bound_model_free_s'] * bound['micro_batches']:.2f} s, a reading only the step model's "
        f"consistency excludes; the batch is the 8-card command's, unstated for this run: {over_batches})"
        + (
            "; the rest needs TP overlap"
            + (f", which the step model cannot decide at ±{margin:.0%}" if stated is None else "")
            + "; "
            if not bound["can_account"]
            else "; "
        )
    )
    saving_text = key_text + (
        f"claimed {before:g} → {after:g} s, a saving of {before / after:.2f}×; modelled "
        f"{art['a4_step_serial_s']:.2f} → {art['a4_step_overlapped_s']:.2f} s, {modelled_saving:.2f}×"
        + (
            f": within ±{margin:.0%} of {before / after:.2f}× and within it of no saving too (the model "
            "cannot tell)"
            if stated is None and modelled_saving - 1 < margin
            else ""
        )
    )
    return Claim(
        "A4",
        "13B on 32 cards: 3.2 s → 2.1 s per step with overlap",
        "first a bound without the step model (a4_bound.a4_saving_bound: the communication that can hide, "
        "refuted (analysis) when it stays under the 1.1 s saved in every reading), then "
        f"the course's step model (step.step_time) on {art['a4_device']} (devices.yaml), TP 8, without "
        "and with the overlap the article describes (§2.1–2.2: the TP all-reduces chunked under the GEMMs, "
        "the gradient buckets under the backward); the 32-card run's flags are unstated; judged on the "
        "claim's quantity, the saving (serial ÷ overlapped step: the article's 1.52×): a case reproduces "
        f"it when its modelled ratio lies within ±{margin:.0%} of 1.52× (the step model's error on a ratio) "
        f"and beyond {margin:.0%} from 1 (a saving the model can tell from its error), misses beyond "
        f"±{margin:.0%} of 1.52×, cannot tell otherwise (a4_reproduces); a case whose serial step is off "
        f"3.2 s by more than {margin:.0%} is not a reading of the article and does not vote "
        "(a4_consistent); the central case (the article's 32 cards and two step "
        "times, with its TP 8, global batch and overlap read from §2 and the 8-card command: assumed, "
        "not stated for this run) decides unless another assumed input reverses it "
        "(verdicts.at_stated_case)",
        # the bound decides when it refutes in every reading; otherwise the step model's stated case
        a4_bound.a4_bound_decision(v["a4_bound"])
        or verdicts.at_stated_case(stated, list(assumed.reproduces_article)),
        saving_text
        + f"{tp_on_text} (with {art['a4_accumulation_steps']} micro-batches per step only the last one's "
        "backward can hide the gradient buckets, and the TP all-reduces stay on the critical path). The "
        f"article's saving needs ≥ {saved_needed:.0%} of the modelled {art['a4_total_comm_s']:.2f} s of "
        "communication hidden, TP's dependent all-reduces included, and compute ≤ 2.1 s (modelled "
        f"{art['a4_compute_s']:.2f} s at GEMMs "
        f"{records['params']['article_matmul_share_of_mamf']:g} of MAMF): MFU {article_mfu_before:.0%} → "
        f"{article_mfu_after:.0%} (palm). Assumed inputs: reproduced in "
        f"{int((assumed.reproduces_article == True).sum())} of {len(assumed)} rows that fit, missed in "  # noqa: E712
        f"{int((assumed.reproduces_article == False).sum())}"  # noqa: E712
        + (
            "; not readings of the article (serial step off 3.2 s by more than "
            f"{margin:.0%}): " + "; ".join(f"{r.varied} {r.value}" for r in inconsistent.itertuples())
            if len(inconsistent)
            else ""
        )
        + f"{reversed_text}{too_big_text}.{power_text} "
        f"At least {art['a4_implied_min_comm_s']:.1f} s ({art['a4_implied_min_comm_share']:.0%} of the "
        f"3.2 s step) was exposed communication; saved in the model {art['a4_saved_s']:.2f} s. Per step: TP "
        f"all-reduces {art['a4_tp_comm_s']:.2f} s (b·s·h = {art['a4_tp_message_bytes'] / MB:.0f} MB bf16, "
        f"4 per layer and micro-batch, {art['a4_accumulation_steps']} micro-batches × {art['a4_dp']} DP = "
        f"global batch {records['params']['article_global_batch']}, assumed: the 8-card command's), gradient "
        "buckets "
        f"{art['a4_dp_comm_s']:.2f} s ({art['a4_dp_calls']} calls over {art['a4_dp']} DP ranks: "
        "Megatron-Core's buckets of max(40M, 1M·DP) parameters, in fp32 as Megatron reduces bf16 runs' "
        "gradients; PyTorch DDP's 25 MiB cap is a sensitivity row), total "
        f"{art['a4_total_comm_s']:.2f} s; compute {art['a4_compute_s']:.2f} s (GEMMs at "
        f"{records['params']['article_matmul_share_of_mamf']:g} of MAMF). Reading: {art['a4_reading']}"
        f"{flip_text}. Against the 8-card command with the flags Megatron-LM does not know dropped "
        "(as written its parser would refuse them; analytic.articles.A_LAUNCH_COMMAND, the "
        "configuration of record): its recompute flags are inert without "
        "--recompute-granularity full, so no recompute is the stated case; --zero-stage 2 is not a "
        "Megatron-LM flag, so Megatron's DP is; it passes no --use-flash-attn, which MindSpeed needs for its "
        "fused kernel, so attention is unfused (as chapter 04's A17 reads the same command); each "
        f"alternative is a sensitivity row. The reading holds in "
        f"{int(runs.same_as_baseline.sum())} of {len(runs)} sensitivity rows that fit"
        + (f" (changes with {changes})" if changes else ""),
        basis=verdicts.ASSUMED,  # TP, global batch and micro-batch: borrowed from the 8-card command
    )


def claims(records, t: dict, v: dict) -> list[Claim]:
    """The claims table of this study (A2, A3, A4, A5, A18, B9), verdicts computed from numbers
    (``t``: :func:`tables`; ``v``: the values :func:`outcome` derives once)."""
    out = [*a3_rows.a3_claim(records, v["a3"], t["a3_duty"]), _a4_claim(records, t, v)]
    out += a5_rows.a5_claims(
        records, t, v, records["params"].get("a5_mechanism_min_share", Params.a5_mechanism_min_share)
    )
    out += exposed_share.a18_claim(t.get("a18_sweep"), t["overlap"], records["params"])
    out += [
        c
        for c in (
            exposed_share.a18_profiler_claim(records["params"]),
            tp_layout.a2_claim(records),
            pseudo_code.pseudo_code_claim(),
        )
        if c
    ]
    out += [
        nccl_reference.b9_command_claim(),
        *nccl_reference.b9_nvlink_claims(),
        nccl_reference.b9_two_node_claim(),
    ]
    b = v["b9_check"]
    out.append(
        Claim(
            "B9",
            "§3.3's recipe: busbw ÷ the card's theoretical bandwidth × 2 is the efficiency actually reached",
            "nccl-tests definitions, applied to the article's own two-node figures (busbw 11 → 21 GB/s, "
            "25 GB/s link) as a test case",
            "refuted",
            f"busbw already carries the 2(n−1)/n factor: efficiency {b['efficiency_before']:.0%} → "
            f"{b['efficiency_after']:.0%} of the link, as the article's own example reads it (21 GB/s "
            '"close to the 25 GB/s physical limit", no ×2); the recipe\'s ×2 would give '
            f"{b['article_x2_before']:.0%} → {b['article_x2_after']:.0%} (over 100%: impossible); the ×2 is "
            "the bus factor's large-n limit (2(n−1)/n → 2), so the recipe holds only for an algbw "
            "mislabelled busbw; a "
            f"{b['step_before_s'] - b['step_after_s']:.1f} s gain (B15: {b['step_before_s']:.1f} → "
            f"{b['step_after_s']:.1f} s, {b['step_gain']:.1%}) implies "
            f"≈{b['implied_exposed_comm_before_s']:.2f} s of exposed communication before",
            basis=verdicts.DOCUMENTED,  # busbw's definition (nccl-tests PERFORMANCE.md) decides it
        )
    )
    out += nccl_reference.b16_env_claims()  # after every B9 row: the table reads in id order
    return out


def headline_metrics(records, claim_list, t: dict, v: dict) -> dict:
    """What ``metrics.json`` carries for comparisons across machines (units in the names)."""
    df = t["collectives"]
    fit, own = v["alpha_beta"], own_alpha_beta(records)
    largest = df[df.op == "all_reduce"].sort_values("size_bytes").iloc[-1]
    a3, comps = v["a3"], v["a5"]
    metrics = {
        **run_identity(records),
        "world_size": records["collectives"]["world_size"],
        "all_reduce_busbw_largest_bytes_per_s": float(largest.busbw_bytes_per_s),
        "all_reduce_largest_size_bytes": int(largest.size_bytes),
        "alpha_s": fit["alpha_s"],
        "link_bytes_per_s": fit["link_bytes_per_s"],
        "collective_wrong_elements": int(df.wrong.sum()),
        "overlap_wrong_elements": records["overlap"]["wrong"],
        "checks": {  # this run's own numbers beside the calibration's (not headline figures)
            "own_alpha_s": own["alpha_s"],
            "own_link_bytes_per_s": own["link_bytes_per_s"],
            "calibration_error_range": [
                min(alpha_beta_residuals(records)),
                max(alpha_beta_residuals(records)),
            ],
            "own_per_call_s": own["per_call_s"],
            "a3_recovered_share": {m: o["recovered_share"] for m, o in a3.items() if o},
            "a5_ratios_16_over_4": {k: c.to_dict() for k, c in comps.items()},
            "a5_gap": {k: v for k, v in (v["a5_gap"] or {}).items() if not k.startswith("comm_")},
        },
        "overlap": t["overlap"].to_dict(orient="records"),
        "article_scale": v["article_scale"],
        "claims": verdicts.records(claim_list),
    }
    if a3.get("emulated"):
        # the ratio A3's verdict reads, and how far toward the bound (the recovered share, near 0 in
        # a bad run, drifts without bound; the midpoint ratio reads it as a ratio)
        metrics["a3_serial_over_overlapped_emulated"] = a3["emulated"]["vs_serial"].ratio
        metrics["a3_midpoint_over_overlapped_emulated"] = a3["emulated"]["comparison"].ratio
    if comps:
        metrics["a5_comm_ratio_16_over_4"] = comps["comm_only"].ratio
    if (iv := v["a5_intervention"]) is not None:  # A5's mechanism, measured
        metrics["a5_padded_calls_share_of_gap"] = iv["share"]
    return metrics


def tables(records, p, v: dict) -> dict:
    """Every table the chapter shows, computed once (saved as ``tables/<name>.csv``): the
    collectives with nccl-tests' columns, the calibration's α–β against this run, the overlap
    sweep, communication per step and A5's 16-vs-4 comparison, and the sensitivity tables of the
    articles' scale."""
    from mfulab.studies.overlap import analysis

    params = p.to_dict()
    art = v["article_scale"]
    scalars = {k: x for k, x in art.items() if k != "a5_steps_s"}
    return {
        "article_scale": pd.DataFrame({"quantity": list(scalars), "value": list(scalars.values())}),
        "a5_steps_at_scale": pd.DataFrame(
            {"chunks": list(art["a5_steps_s"]), "model_step_s": list(art["a5_steps_s"].values())}
        ),
        "b9_check": pd.DataFrame({"quantity": list(b9 := v["b9_check"]), "value": list(b9.values())}),
        "collectives": collectives_table(records),
        "nccl_tests_published": nccl_reference.published_nccl_tests_table(records),
        "alpha_beta_check": analysis.alpha_beta_check(records),
        "alpha_beta_fit_check": analysis.fit_check(records).reset_index(),
        "overlap": overlap_table(records),
        "comm_per_step": analysis.comm_per_step_table(records),
        "a5_comparison": a5_rows.a5_table(v["a5"]),
        "a3_duty": a3_rows.duty_table(records, v["a3"]),
        "a18_sweep": exposed_share.a18_table(records),
        "a2_collectives": tp_layout.a2_table(records),
        "a4_sensitivity": step_at_scale.a4_sensitivity(params),
        "a4_collectives": step_at_scale.a4_collectives(params),
        "a5_sensitivity": alpha_beta.a5_sensitivity(params),
    }


def derived(records) -> dict:
    """The values derived once from the records, read by the tables, the claims, the metrics and
    the notebook: nccl-tests' printout, the machine's α–β (the calibration), its per-call cost and
    crossover size, the articles' scale, A3 per compute mode, the best k per mode, A5's
    comparisons, its gap and what explains it, where A4's reading flips, B9's arithmetic."""
    modes = records["params"]["modes"]
    best = {m: best_k(records, m) for m in modes}
    g = a5_gap(records)
    return {
        "nccl_tests_text": nccl_reference.nccl_tests_text(records["collectives"]["rows"]),
        "stalled_sizes_text": nccl_reference.stalled_sizes_text(records["collectives"]["rows"]),
        "alpha_beta": fitted_alpha_beta(records),
        "per_call_s": per_call_s(records),
        "ab_regime": ab_regime.regime_fit(
            records, collectives_table(records).query("op == 'all_reduce'"), fitted_alpha_beta(records)
        ),
        "crossover_bytes": crossover_bytes(records),
        "article_scale": alpha_beta.article_scale(records),
        "a3": {m: a3_outcome(records, m, stated.A3_K) for m in modes},
        "best_k": best,
        "step_best_k_text": step_best_k_text(best),
        "a5": a5_comparisons(records),
        "a5_gap": g,
        "a5_cause": a5_rows.a5_cause(records, g),
        "a5_intervention": a5_intervention.a5_intervention(records),
        "a5_intervention_regime": a5_intervention.a5_intervention(records, regime=True),
        "a4_flip_link": step_at_scale.a4_flip_link(records["params"]),
        "a4_saving_frontier": step_at_scale.a4_saving_frontier(records["params"]),
        "a4_bound": a4_bound.a4_bound_readings(records["params"]),
        "b9_check": alpha_beta.b9_check(records),
    }


def outcome(records, p) -> Outcome:
    """The tables, the claims rows and the headline metrics, each computed once; the notebook
    shows them and ``make stability`` reads the claims and metrics."""
    v = derived(records)
    t = tables(records, p, v)
    claim_list = claims(records, t, v)
    return Outcome(claim_list, headline_metrics(records, claim_list, t, v), t, values=v)
