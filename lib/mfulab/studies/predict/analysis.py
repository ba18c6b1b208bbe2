"""Analysis of the ``predict`` study: the validation against the published runs, the
calibrated check on this machine, the articles' cases and ``outcome`` (the metrics the
notebook publishes; the study decides no claim of its own: the articles' claims it applies
to are decided in chapters 01, 04, 07 and 08)."""

from __future__ import annotations

from mfulab.studies.predict import calibrated, history, margins, op_rates, scores, validate


def fit_sources(records) -> tuple:
    """The sources the free parameter is fitted on: the published-runs file's ``fit`` split."""
    return tuple((records.get("published_split") or {}).get("fit") or ())


def validation(records, p) -> dict:
    return validate.validation(
        records["published_runs"], fit_sources=fit_sources(records), fit_grid=p.fit_grid
    )


def interleave_sensitivity(records, p, fitted: float):
    """Rows whose interleaving depth is unstated, under both stated rules."""
    import pandas as pd

    rows = []
    for row in records["published_runs"]:
        if (row.get("unstated") or {}).get("vpp") != "interleaved":
            continue
        out = {"id": row["id"]}
        for rule in ("deepest", "smallest"):
            r = validate.predict_row(row, interleave_rule=rule, **{validate.FIT_PARAMETER: fitted})
            out[f"vpp_{rule}"] = int(r["vpp"])
            out[f"error_{rule}"] = r["error"]
        rows.append(out)
    return pd.DataFrame(rows)


def test_text(goals: dict, splits, split: str = "test", as_noted=None) -> str:
    """A held-out split (test, holdout, holdout-2) against its goals, which way it misses, and
    the predictor against the null model and the unfitted 40%-MFU rule: said plainly when it
    does not beat them. A split with no row priced says what its rows priced as noted show
    (``as_noted``: the ``as_noted`` table), the only evidence it gives."""
    label = {
        "test": "Test set",
        "holdout": "Holdout set",
        "holdout-2": "Second holdout set",
        "holdout-3": "Third holdout set",
        "holdout-4": "Fourth holdout set (MoE, context parallelism, FP8)",
    }[split]
    if not goals.get("n"):
        noted = None if as_noted is None else as_noted.set_index("split")
        if noted is None or split not in noted.index or not noted.loc[split, "rows_priced_as_noted"]:
            return f"No {split} row is priced."
        r = noted.loc[split]
        worse = r.median_abs_error > r.null_median_abs_error
        return (
            f"**No {split} row is priced**: every one names a feature the model lacks, so the goals "
            f"score nothing. Priced as their notes say ({int(r.rows_priced_as_noted)} rows, below), they "
            f"miss by a median {r.median_abs_error:.1%} ({r.median_signed_error:+.1%} signed, "
            f"{r.rows_within_25pct:.0%} within 25%), against the null model's {r.null_median_abs_error:.1%}"
            + (
                ": worse than the null model. That is the blind evidence this split gives past what "
                "the model covers, and it is negative"
                if worse
                else ": a median below the null model's, past what the model covers (whether the "
                "sources tell the two apart is the bootstrap's to say)"
            )
            + "."
        )
    s = splits.set_index("split").loc[split]

    def verdict(ok):
        return "met" if ok else "**not met**"

    beats = s.closer_than_null > 0.5 and s.median_abs_error < min(
        s.null_median_abs_error, s.mfu40_median_abs_error
    )
    direction = "too fast (time the model lacks)" if s.median_signed_error < 0 else "too slow"
    return (
        f"**{label}** ({goals['n']} rows priced, {int(s.refused)} refused): median |error| "
        f"**{goals['median_abs_error']:.1%}** (goal ≤ 8%: {verdict(goals['median_goal_met'])}), largest "
        f"**{goals['max_abs_error']:.1%}** (≤ 20%: {verdict(goals['max_goal_met'])}), "
        f"{goals['rows_within_row_goal']:.0%} of the rows within 25% ({verdict(goals['row_goal_met'])}); the "
        f"worst source, {goals['worst_source']}, misses by a median of "
        f"{goals['worst_source_median_signed_error']:+.1%} (±10%: {verdict(goals['source_goal_met'])}). "
        f"The misses lean one way: median signed error **{s.median_signed_error:+.1%}**, {direction}. "
        f"The null model on the same rows: median {s.null_median_abs_error:.1%} "
        f"({s.null_rows_within_25pct:.0%} within 25%); the unfitted rule of thumb of 40% MFU: "
        f"median {s.mfu40_median_abs_error:.1%}. "
        f"The predictor is closer than the null on {s.closer_than_null:.0%} of the rows. "
        + (
            "On rows it was not built on, it beats both baselines."
            if beats
            else "**On rows it was not built on, the structured model does not yet beat a one-number "
            "baseline for the step time**. Where the time goes is tested only in sample (§3's one "
            "published breakdown is a fit source), and the one out-of-sample test of a term, async TP's "
            "gain, is over-predicted on every pair (§3); the order of efficiency within a sweep is "
            "tested by the ranking table below (`rho_mfu`)."
        )
    )


def history_table(records, valid, pairs):
    """The recorded revisions (``validation_history.yaml``) and this render as the last line;
    ``pairs``: this render's ``margins.kind_pairs``."""
    import pandas as pd

    scored = (*validate.HELD_OUT, "development")

    keys = ("rows", "median_abs_error", "max_abs_error")

    def columns(get) -> dict:  # split name -> its three columns (holdout-2 → holdout2_...)
        return {f"{name.replace('-', '')}_{key}": get(name, key) for name in scored for key in keys}

    def recorded(rev):
        return lambda name, key: (rev.get(name) or {}).get("rows_priced" if key == "rows" else key)

    rows = []
    for rev in list(records.get("validation_history") or []):
        rows.append(
            {
                "commit": rev["commit"],
                "date": rev["date"],
                "change": rev["change"],
                "fitted_share_of_mamf": rev.get("fitted_share_of_mamf"),
                **columns(recorded(rev)),
                # rows a held-out file marks as beyond the model, priced as their notes say
                **{
                    f"{name.replace('-', '')}_as_noted_median_abs_error": (
                        (rev.get("as_noted") or {}).get(name) or {}
                    ).get("median_abs_error")
                    for name in ("holdout-3", "holdout-4")
                },
                "pooled_pair_p90": (rev.get("pair_ratio_error") or {}).get("p90"),
                **{
                    f"{kind}_margin": ((rev.get("pair_ratio_error_by_kind") or {}).get(kind) or {}).get("p90")
                    for kind in margins.KINDS
                },
            }
        )
    splits = scores.split_summary(valid["table"]).set_index("split")

    def cell(name, key):
        column = "scored" if key == "rows" else key
        return float(splits.loc[name, column]) if name in splits.index else None

    this_render = {"commit": "this render", "date": "", "change": "", "fitted_share_of_mamf": valid["fitted"]}
    noted = scores.as_noted_summary(valid["table"]).set_index("split")
    for name in ("holdout-3", "holdout-4"):
        value = noted.loc[name, "median_abs_error"] if name in noted.index else None
        this_render[f"{name.replace('-', '')}_as_noted_median_abs_error"] = value
    margin = history.pair_ratio_error(valid["table"], records["published_runs"]) or {}
    this_render["pooled_pair_p90"] = margin.get("p90")
    by_kind = margins.kind_margins(pairs)  # margins.kind_pairs of this render's table
    this_render |= {f"{kind}_margin": (by_kind.get(kind) or {}).get("p90") for kind in margins.KINDS}
    rows.append({**this_render, **columns(cell)})
    return pd.DataFrame(rows)


def margin_history_text(records) -> str:
    """The decisive margins at each recorded revision where they changed, and the change that
    moved them: every chapter that decides with the step model reads the latest of its kind."""
    moves, last = [], None
    for rev in records.get("validation_history") or []:
        by_kind = rev.get("pair_ratio_error_by_kind") or {}
        now = (
            " and ".join(f"{k} {by_kind[k]['p90']:.1%}" for k in margins.KINDS if k in by_kind)
            if by_kind
            else f"one pooled {(rev.get('pair_ratio_error') or {}).get('p90', float('nan')):.1%}"
        )
        if "nan" not in now and now != last:
            moves.append(f"{now} at {rev['commit']} ({rev['change'][:80].rstrip()}…)")
            last = now
    if not moves:
        return ""
    return (
        "**The margins' record.** Recorded where they changed: "
        + "; then ".join(moves)
        + ". The chapters read the latest of their comparison's kind; a verdict that a move turned says so "
        "in its chapter."
    )


# every assumption a conclusion of the chapter depends on, moved ±25% one at a time
SENSITIVITY_ASSUMPTIONS = (
    "memory_efficiency",
    "link_efficiency",
    "flash_attention_scale",
    "backward_traffic_factor",
    "nccl_base_latency_s",
    "alpha_intra_s",
    "alpha_inter_s",
    "tree_alpha_inter_s",
    "dp_overlap",
    "ddp_bucket_bytes",
    "deepspeed_bucket_elems",
    "deepspeed_prefetch_elems",
    "tp_overlap_share",
    "optimizer_bytes_per_param",
    "matmul_latency_s",
)


def sensitivity(records, p, fitted: float):
    """Median and largest |error| over the priced test rows with each assumption moved ±25%
    around its default (the fitted share held at its fitted value, not refitted)."""
    import numpy as np
    import pandas as pd

    from mfulab.analytic.rates import Assumptions

    base = Assumptions()
    rows = []
    for name in SENSITIVITY_ASSUMPTIONS:
        for factor in (0.75, 1.25):
            value = getattr(base, name) * factor
            if name.endswith("efficiency"):
                value = min(value, 1.0)  # an efficiency cannot pass 1: the change shows as it is
            errors = np.abs(
                [
                    validate.predict_row(r, **{validate.FIT_PARAMETER: fitted, name: value})["error"]
                    for r in records["published_runs"]
                    if r.get("split") == "test"
                ]
            )
            errors = errors[~np.isnan(errors)]
            rows.append(
                {
                    "assumption": name,
                    "default": getattr(base, name),
                    "value": value,
                    "change": value / getattr(base, name) - 1,
                    "test_median_abs_error": float(np.median(errors)),
                    "test_max_abs_error": float(errors.max()),
                }
            )
    return pd.DataFrame(rows)


def _calibrated_verdict(check, column: str) -> tuple[str, str]:
    """The per-class misses of one reading and whether it passes the 15% goal class by class."""
    step = check[check["class"] == "step"].iloc[0]
    modelled = check[check["class"].isin([t.removesuffix("_s") for t in calibrated.CLASSES])]
    parts = ", ".join(f"{r['class']} {r[column]:+.0%}" for _, r in modelled.iterrows())
    worst = float(modelled[column].abs().max()) if len(modelled) else 0.0
    if abs(step[column]) > 0.15:
        verdict = f"{step[column]:+.1%}: **outside** 15%"
    elif worst > 0.15:
        verdict = (
            f"{step[column]:+.1%}: inside 15% only by compensating errors (a class misses by up to "
            f"{worst:.0%}): **not a pass**"
        )
    else:
        verdict = f"{step[column]:+.1%}: within 15%, and so is every class"
    return verdict, parts


def calibrated_text(records, check) -> str:
    step = check[check["class"] == "step"].iloc[0]
    verdict, parts = _calibrated_verdict(check, "error")
    text = (
        f"{calibrated.drift_text(records)}\n\n"
        f"Measured step **{step.measured_s * 1e3:.1f} ms** (IQR {records['step']['iqr_s'] * 1e3:.1f} ms over "
        f"{records['step']['n']} steps), predicted from the calibration **{step.predicted_s * 1e3:.1f} ms** "
        f"({verdict}; its spread over fresh runs is in the stability note at the end). "
        f"{_paired_text(records)}"
        f"Per class: {parts}. The optimizer is priced as the eager AdamW "
        f"the step runs, pass by pass ({calibrated.EAGER_ADAMW_BYTES_PER_PARAM} B per parameter × "
        f"{records['n_params'] / 1e6:.2f} M parameters, embeddings included, at the calibrated copy "
        "bandwidth)."
    )
    if step.isna().predicted_op_rates_s:
        return text + " This run has no op timings (`op_rates`): the second reading is missing."
    ops = records["op_rates"]
    verdict2, parts2 = _calibrated_verdict(check, "error_op_rates")
    gemms = op_rates.gemm_names(ops)
    gemm_s = op_rates.step_seconds(ops, gemms)
    gemm_flops = sum(ops[n]["flops"] * ops[n]["per_step"] for n in gemms)
    priced_matmul_s = check.set_index("class").loc["matmul", "predicted_op_rates_s"]
    timed = ", ".join(
        f"{name} {v['median_s'] * 1e3:.2f} ms × {v['per_step']}"
        for name, v in ops.items()
        if name not in gemms
    )
    return text + (
        "\n\nThe calibration's two figures say what square matmuls and a copy reach, not what the step's "
        "own kernels do. Timed alone at the step's shapes (median of each: "
        f"its {len(gemms)} distinct GEMMs, {gemm_s * 1e3:.0f} ms per step at "
        f"{gemm_flops / gemm_s / 1e9:.0f} GFLOP/s, which the model prices at R∞ and t₀ fitted to them, "
        f"with its own count of launches (q, k and v as one GEMM): "
        f"{priced_matmul_s * 1e3:.0f} ms; {timed}), they give the second reading: "
        f"**{step.predicted_op_rates_s * 1e3:.1f} ms** ({verdict2}). "
        f"Per class: {parts2}. By construction this reading is close to a sum of the step's own timings: "
        "its agreement tests the model's inventory of ops and how they add up, not its rates, and only "
        "the first reading is a prediction. What the second reading still misses is how the ops compose "
        "into a step "
        "(the autograd engine, caches the kernels share) and the ops no term prices, since each priced "
        "op's own cost is now measured; a class far off in the first reading and close in the second was "
        "a wrong rate, not a missing term (on two CPU cores GELU's tanh and the loss's log-softmax run "
        f"well below the copy bandwidth). {_unpriced_text(records, check)}"
    )


def _paired_text(records) -> str:
    """The step error round by round (``calibrated.paired_summary``) and whether this run can
    score the model at all."""
    ps = calibrated.paired_summary(records)
    if ps is None:
        return "This run keeps no per-round times: the rounds cannot be paired. "
    spread = (
        f"Round by round (each round's step against the prediction from the benchmarks re-timed in "
        f"the same round), the miss is {ps['median']:+.1%} [IQR {ps['q1']:+.1%}, {ps['q3']:+.1%}] over "
        f"{ps['n']} rounds"
    )
    if ps["valid"]:
        return f"{spread}: the machine held still enough for the medians above to score the model. "
    return (
        f"{spread}: wider than {calibrated.PAIRED_IQR_LIMIT:.0%} (`calibrated.PAIRED_IQR_LIMIT`), so "
        "**this run cannot score the model**: the machine's speed moved within the run, and the "
        "verdicts below are on numbers the rounds' spread could reverse. "
    )


def _unpriced_text(records, check) -> str:
    """The memory-bound class's ops the model has no term for, against that class's miss."""
    u = calibrated.unpriced_elementwise(records)
    if not u["ops"]:
        return ""
    row = check[check["class"] == "memory_bound"].iloc[0]
    ops = ", ".join(f"`{name}` {sec * 1e3:.1f} ms" for name, sec in u["ops"])
    return (
        f"Missing terms: of the memory-bound class's measured {row.measured_s * 1e3:.0f} ms, "
        f"{u['total_s'] * 1e3:.0f} ms are ops the step model prices nowhere ({ops}: the bias gradients' "
        "reductions, gradient buffers filled and copied); its second reading misses by "
        f"{row.predicted_op_rates_s - row.measured_s:+.3f} s."
    )
