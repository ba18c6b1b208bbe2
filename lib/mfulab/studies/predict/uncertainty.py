"""How sure the held-out scores are, and what the course's decisive margin rests on.

Three readings of the validation table (``validate.validation``), none of which changes the
model or its fitted value:

* **Source-clustered bootstrap** of the median |error| of the predictor, the null model and the
  40%-MFU rule on the held-out rows, and of the predictor's lead over each. Rows of one source
  share a framework, a cluster and an author's conventions, so their errors are not independent:
  the bootstrap draws whole sources with replacement (the cluster bootstrap: Efron & Tibshirani
  1993, ch. 8) and reports the 2.5–97.5% percentiles. With 5–6 sources a group has only a few
  hundred distinct resamples, and percentile intervals over so few clusters cover less than
  their nominal 95% (Cameron, Gelbach & Miller 2008, who recommend a wild cluster bootstrap-t
  there): an interval that clears 0 is weaker evidence than its width suggests, and the text
  says how many sources each rests on.
* **Ratio errors within a source.** Every chapter that prices two layouts with the step model
  decides on their *ratio*, beyond ``studykit.step_error.SWITCH_MARGIN``. A ratio cancels what
  two rows of one source share (the cluster, the framework's overheads), so its error is the
  quantity the margin must cover. For rows i, j of one source with errors eᵢ = predᵢ/pubᵢ − 1,
  the predicted ratio over the published one is (1 + eᵢ)/(1 + eⱼ); its size, symmetric in i
  and j, is exp(|ln((1 + eᵢ)/(1 + eⱼ))|) − 1 (so ±20% here is a ratio in [1/1.2, 1.2]; a chapter
  that reads "beyond 20%" as a ratio under 0.8 is a little stricter than this table). Pairs
  grow as n² with a group's rows, so the pooled figures lean to the largest source: the table
  also gives each figure with every group weighted alike.
* **A refit on every row the model has seen** (fit, development and test: the test rows stopped
  being blind at the first post-freeze revision), scored on the holdouts, which it has not: what
  the fitted share's bias costs, without choosing anything on the holdout rows.
"""

from __future__ import annotations

import numpy as np

from mfulab.studies.predict import scores
from mfulab.studykit.step_error import SWITCH_MARGIN

N_BOOT = 2000  # bootstrap draws (of sources)
SEEN = ("fit", "development", "test")  # splits the model was fitted or revised on
BLIND = ("holdout", "holdout-2", "holdout-3", "holdout-4")  # first evaluated after the model code was fixed
# Holdout rows the model was extended to price after they had been collected and seen refused
# (validation_history.yaml, e7e417d: HSDP and DDP + ZeroRedundancyOptimizer modelled, then these
# rows first priced). Their errors were never seen before the change, but the change was made
# for them: the "never seen" group leaves them out.
MODELLED_AFTER_SEEN = (
    "fa-train-gpt3-760m-8a100",
    "fa-train-gpt3-1p3b-8a100",
    "fa-train-gpt3-2p7b-8a100",
    "fa-train-gpt2-760m-8a100",
    "fa-train-gpt2-1p6b-8a100",
    "fms-fsdp-2403-llama2-7b-128a100-hsdp",
    "fms-fsdp-2403-llama2-7b-96h100-hsdp",
    "fms-fsdp-2405-llama2-7b-128a100-hsdp-compile",
    "fms-fsdp-2405-llama2-7b-96h100-hsdp-compile",
)
NEVER_SEEN = "holdouts, never seen"  # the holdouts less MODELLED_AFTER_SEEN
GROUPS = {"test": ("test",), "holdouts": BLIND, NEVER_SEEN: BLIND, "all held out": ("test", *BLIND)}


def _priced(df, splits, group: str | None = None):
    g = df[df.split.isin(splits) & (df.refused == "")].copy()
    if group == NEVER_SEEN:
        g = g[~g.id.isin(MODELLED_AFTER_SEEN)]
    g["prior_error"] = scores.prior_errors(g)
    return g.dropna(subset=["error", "null_error", "prior_error"])


def _median_abs(errors) -> float:
    return float(np.median(np.abs(errors))) if len(errors) else float("nan")


def clustered_bootstrap(df, *, n_boot: int = N_BOOT, seed: int = 0, groups=None):
    """Per group of held-out splits: rows and sources priced, the median |error| of the
    predictor, the null model and the 40%-MFU rule, each with its 95% source-clustered bootstrap
    interval, the predictor's lead (null's median |error| − the predictor's, and the rule's − the
    predictor's; positive: the predictor is closer) with its interval, and the share of draws in
    which the predictor leads. ``groups``: name → splits (default :data:`GROUPS`)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for name, splits in (groups or GROUPS).items():
        g = _priced(df, splits, name)
        sources = list(dict.fromkeys(g.source))
        if len(sources) < 2:
            continue
        cols = {"predictor": "error", "null": "null_error", "mfu40": "prior_error"}
        # |error| per source and column, as arrays (a draw concatenates the drawn sources' rows)
        by_source = [{k: np.abs(g[g.source == s][c].to_numpy()) for k, c in cols.items()} for s in sources]
        point = {k: _median_abs(g[c]) for k, c in cols.items()}
        draws = {k: [] for k in cols}
        for _ in range(n_boot):
            pick = rng.integers(len(sources), size=len(sources))
            for k in cols:
                draws[k].append(float(np.median(np.concatenate([by_source[i][k] for i in pick]))))
        draws = {k: np.array(v) for k, v in draws.items()}
        row = {"group": name, "rows": len(g), "sources": len(sources)}
        for k in cols:
            row[f"{k}_median_abs_error"] = point[k]
            row[f"{k}_lo"], row[f"{k}_hi"] = np.percentile(draws[k], [2.5, 97.5])
        for base in ("null", "mfu40"):
            lead = draws[base] - draws["predictor"]
            row[f"lead_over_{base}"] = point[base] - point["predictor"]
            row[f"lead_over_{base}_lo"], row[f"lead_over_{base}_hi"] = np.percentile(lead, [2.5, 97.5])
            row[f"draws_leading_{base}"] = float((lead > 0).mean())
        rows.append(row)
    return pd.DataFrame(rows)


def pair_ratio_errors(errors) -> np.ndarray:
    """Every pair's ratio error size, exp(|ln((1 + eᵢ)/(1 + eⱼ))|) − 1, for one source's row
    errors (see the module docstring)."""
    log = np.log1p(np.asarray(errors, dtype=float))
    i, j = np.triu_indices(len(log), k=1)
    return np.expm1(np.abs(log[i] - log[j]))


PAIRINGS = {
    "one source": ("source",),
    # two layouts of one model on one cluster in one GEMM precision: the pairs a chapter's layout
    # comparison resembles (an FP8 run beside a BF16 one measures the FP8 term, which no chapter's
    # layout comparison prices)
    "one source, model and device": ("source", "device", "model_key"),
}


def ratio_errors(df, runs, *, margin: float = SWITCH_MARGIN):
    """Per group of held-out splits and per pairing (:data:`PAIRINGS`): the pairs of priced
    rows, the median and 90th-percentile size of the predictor's ratio error
    (:func:`pair_ratio_errors`), the share within ±``margin``, the same for the null model, and
    the median over groups of each group's median (so that the sources with most rows do not
    decide it)."""
    import json

    import pandas as pd

    model_key = {
        r["id"]: json.dumps(r["model"], sort_keys=True) + "/" + (r.get("layout") or {}).get("dtype", "bf16")
        for r in runs
    }
    rows = []
    for name, splits in GROUPS.items():
        g = _priced(df, splits, name)
        g["model_key"] = g.id.map(model_key)
        for pairing, keys in PAIRINGS.items():
            per_group = [
                (pair_ratio_errors(x.error), pair_ratio_errors(x.null_error))
                for _, x in g.groupby(list(keys), sort=False)
                if len(x) >= 2
            ]
            if not per_group:
                continue
            model = np.concatenate([m for m, _ in per_group])
            null = np.concatenate([n for _, n in per_group])
            rows.append(
                {
                    "group": name,
                    "pairs_within": pairing,
                    "pairs": len(model),
                    "groups": len(per_group),
                    "margin": margin,
                    "median_ratio_error": float(np.median(model)),
                    "p90_ratio_error": float(np.quantile(model, 0.9)),
                    "share_within_margin": float((model <= margin).mean()),
                    "group_share_within_margin": float(np.mean([(m <= margin).mean() for m, _ in per_group])),
                    "group_median_ratio_error": float(np.median([np.median(m) for m, _ in per_group])),
                    "null_median_ratio_error": float(np.median(null)),
                    "null_share_within_margin": float((null <= margin).mean()),
                }
            )
    return pd.DataFrame(rows)


def refit_on_seen(runs, df, *, fit_grid) -> dict:
    """The free parameter and the null model's utilisation refitted, the way ``validate.fit``
    fits them, on every priced row of the splits in :data:`SEEN`; the holdout rows (never looked
    at while fitting) scored at the chapter's fitted value and at the refit one."""
    from mfulab.studies.predict.validate import FIT_PARAMETER, fit, fit_null, null_predictions, row_errors

    split_of = dict(zip(df.id, df.split))
    priced = set(df.id[df.refused == ""])
    seen = [r for r in runs if split_of.get(r["id"]) in SEEN and r["id"] in priced]
    blind = [r for r in runs if split_of.get(r["id"]) in BLIND and r["id"] in priced]
    error = row_errors()
    value = fit(seen, fit_grid=fit_grid, error=error)
    published = df.set_index("id").published_step_s
    null_u = fit_null(seen, published[[r["id"] for r in seen]].to_numpy())
    blind_pub = published[[r["id"] for r in blind]].to_numpy()
    before = df.set_index("id").error[[r["id"] for r in blind]].to_numpy()
    after = np.array([error(r, value) for r in blind])
    null_after = null_predictions(blind, null_u) / blind_pub - 1
    null_before = df.set_index("id").null_error[[r["id"] for r in blind]].to_numpy()
    return {
        "parameter": FIT_PARAMETER,
        "seen_rows": len(seen),
        "blind_rows": len(blind),
        "refit_value": value,
        "null_utilisation": null_u,
        "before": {"median_signed_error": float(np.median(before)), "median_abs_error": _median_abs(before)},
        "after": {"median_signed_error": float(np.median(after)), "median_abs_error": _median_abs(after)},
        "null_before": {"median_abs_error": _median_abs(null_before)},
        "null_after": {"median_abs_error": _median_abs(null_after)},
        "max_abs_error_after": float(np.abs(after).max()),
    }


def refit_text(r: dict, fitted: float) -> str:
    """The refit's sentence: what it moves on the rows it did not see."""
    b, a, largest = r["before"], r["after"], r["max_abs_error_after"]
    null_b, null_a = r["null_before"]["median_abs_error"], r["null_after"]["median_abs_error"]
    return (
        f"**Refitted on every row the model has seen** ({r['seen_rows']} rows of {', '.join(SEEN)}), "
        f"`{r['parameter']}` = {r['refit_value']:.3f} (the chapter's fit: {fitted:.3f}). On the "
        f"{r['blind_rows']} holdout rows, which neither fit looked at: median signed error "
        f"{b['median_signed_error']:+.1%} → {a['median_signed_error']:+.1%}, median |error| "
        f"{b['median_abs_error']:.1%} → {a['median_abs_error']:.1%} (largest after: {largest:.1%}); "
        f"the null model refitted on the same rows ({r['null_utilisation']:.3f} of the peak): "
        f"{null_b:.1%} → {null_a:.1%}. A what-if, not the model of record: the chapter keeps its split, "
        "and a change of the fitted share would be a model revision in the history."
    )


def bootstrap_format(table) -> dict:
    """How a :func:`clustered_bootstrap` table prints: errors and their bounds in percent, leads
    signed, the share of leading draws in whole percent."""
    fmt = {c: "{:.1%}" for c in table.columns if "error" in c or c.endswith(("_lo", "_hi"))}
    fmt |= {c: "{:+.1%}" for c in table.columns if c.startswith("lead_over")}
    return fmt | {c: "{:.0%}" for c in table.columns if c.startswith("draws_leading")}


def bootstrap_text(table) -> str:
    """What the bootstrap says, per group: whether the predictor's lead over each baseline is
    outside its 95% interval."""
    if not len(table):
        return ""
    parts = []
    for r in table.to_dict(orient="records"):
        leads = []
        for base, label in (("null", "the null model"), ("mfu40", "the 40%-MFU rule")):
            lo, hi = r[f"lead_over_{base}_lo"], r[f"lead_over_{base}_hi"]
            state = "ahead of" if lo > 0 else "behind" if hi < 0 else "not told apart from"
            leads.append(
                f"{state} {label} ({100 * r[f'lead_over_{base}']:+.1f} points [{100 * lo:+.1f}, "
                f"{100 * hi:+.1f}], ahead in {r[f'draws_leading_{base}']:.0%} of the draws)"
            )
        parts.append(
            f"{r['group']} ({r['rows']} rows, {r['sources']} sources): the predictor's median |error| "
            f"{r['predictor_median_abs_error']:.1%} [{r['predictor_lo']:.1%}, {r['predictor_hi']:.1%}], "
            + " and ".join(leads)
        )
    return (
        "**How sure the medians are** (sources drawn with replacement, 95% intervals; a lead in points "
        "of median |error|, positive where the predictor is closer): " + "; ".join(parts) + ". "
        "An interval that spans 0 means these sources cannot tell the predictor from the baseline; "
        "with this few sources even one that clears 0 covers less than 95%."
    )


def ratio_text(table) -> str:
    """The margin against the ratio errors: the share of pairs it covers, per pairing, on all
    held-out rows."""
    if not len(table):
        return ""
    pooled = table[table.group == "all held out"]
    parts = [
        f"within {r.pairs_within} ({r.pairs} pairs in {r.groups} groups), ±{r.margin:.0%} covers "
        f"{r.share_within_margin:.0%} of the predictor's ratio errors ({r.group_share_within_margin:.0%} "
        f"with every group weighted alike; median {r.median_ratio_error:.1%}, 90th percentile "
        f"{r.p90_ratio_error:.1%}; the null model's: {r.null_share_within_margin:.0%})"
        for r in pooled.itertuples(index=False)
    ]
    blind = table[(table.group == "holdouts") & (table.pairs_within == "one source, model and device")]
    holdouts = (
        f" On the holdouts alone (collected after the test rows; the history says which revisions came "
        f"after each), the 90th percentile within one source, model and device is "
        f"{blind.p90_ratio_error.iloc[0]:.1%} over {blind.pairs.iloc[0]} pairs in {blind.groups.iloc[0]} "
        "groups."
        if len(blind)
        else ""
    )
    return (
        "**Ratio errors over every pair** (both kinds pooled, every precision; every held-out row: the test "
        "rows, which informed later revisions, and the holdouts; the table has the holdouts alone). The "
        "margin column is the switch margin, the wider of the two the chapters use: "
        + "; ".join(parts)
        + "."
        + holdouts
    )
