"""Rows computed from published data alone (``Metric.published``: chapter 09's validation of the
step model on published runs). They read the same on every machine, so the comparison shows them
once, apart from what each machine measured, with what they say about the step model against
its constant-utilisation null model (chapter 09's source-clustered bootstrap)."""

from __future__ import annotations

from pathlib import Path

from mfulab.studies.compare.drift import MISSING, NOT_APPLICABLE


def published_keys() -> set[str]:
    """The metric keys declared ``published`` in any study."""
    from mfulab.studykit.registry import REGISTRY

    return {m.key for s in REGISTRY.values() for m in s.metrics if m.published}


def split(table):
    """(the rows each machine measured, the rows computed from published data)."""
    published = table.key.isin(published_keys())
    return table[~published].reset_index(drop=True), table[published].reset_index(drop=True)


def published_block(table):
    """One value per published row (the first machine's), and whether every machine that has
    it agrees (they should: the rows depend on no measurement)."""
    import pandas as pd

    names = [c for c in table.columns if c not in ("study", "metric", "unit", "key")]
    rows = []
    empty = {  # splits with no priced row: one line says so, instead of a row of 'missing' per figure
        str(r["key"])[: -len("_rows")]
        for r in table.to_dict(orient="records")
        if str(r["key"]).endswith("_rows") and all(r[m] in (0, MISSING) for m in names)
    }
    for r in table.to_dict(orient="records"):
        prefix = next((e for e in empty if str(r["key"]).startswith(e + "_")), None)
        if prefix and not str(r["key"]).endswith("_rows"):
            continue
        if prefix:
            r = {**r, "metric": r["metric"] + ": none priced, every row refused (its other figures left out)"}
        values = [r[m] for m in names if r[m] not in (MISSING, NOT_APPLICABLE)]
        numeric = [v for v in values if isinstance(v, int | float) and v == v]
        rows.append(
            {
                "study": r["study"],
                "key": r["key"],
                "metric": r["metric"],
                "value": numeric[0] if numeric else (values[0] if values else MISSING),
                "same on every machine": len({round(float(v), 12) for v in numeric}) <= 1,
            }
        )
    return pd.DataFrame(rows, columns=["study", "key", "metric", "value", "same on every machine"])


def bootstrap(results_root, names) -> list[dict]:
    """Chapter 09's bootstrap table (``tables/bootstrap.csv``) from the first machine that has it."""
    import pandas as pd

    for machine in names:
        path = Path(results_root) / machine / "predict" / "tables" / "bootstrap.csv"
        if path.exists():
            return pd.read_csv(path).to_dict(orient="records")
    return []


def excluded_holdout_text(block) -> str:
    """Why the pooled "all held out" figure has no row of the fourth holdout: every one of its rows
    names a feature the model lacks (token dropping with padding, DualPipe, CUDA graphs, ...), so
    the strict reading refuses each, and the pool counts priced rows only. Chapter 09 prices them
    as each row's note says (``*_as_noted`` keys); that reading is reported here beside its null
    model, so the pooled figure hides nothing. ``block``: :func:`published_block`."""
    keys = dict(zip(block["key"], block["value"])) if "key" in block else {}
    model = keys.get("holdout4_as_noted_median_abs_error")
    null = keys.get("holdout4_as_noted_null_median_abs_error")
    rows = keys.get("holdout4_as_noted_rows")
    if not all(isinstance(v, int | float) for v in (model, null, rows)):
        return ""
    return (
        f"**Not in the pooled figure: the fourth holdout** ({rows:.0f} rows: MoE, context parallelism, "
        "FP8). Every row of it names a feature the model lacks, so the strict reading refuses each and "
        "*all held out*, which pools priced rows, holds none of them. Priced as each row's note says "
        f"(chapter 09): {model:.1%} median |error| against the null model's {null:.1%}."
    )


def null_model_text(boot: list[dict]) -> str:
    """What the published rows say about the step model: its lead over the null model per group
    of held-out rows, with the 95% source-clustered interval, in points of median |error|."""
    if not boot:
        return ""
    parts = []
    for r in boot:
        lo, hi, lead = (100 * r[k] for k in ("lead_over_null_lo", "lead_over_null_hi", "lead_over_null"))
        state = "ahead of" if lo > 0 else "behind" if hi < 0 else "not told apart from"
        parts.append(
            f"{r['group']} ({r['rows']} rows, {r['sources']} sources): {r['predictor_median_abs_error']:.1%} "
            f"against the null's {r['null_median_abs_error']:.1%}, a lead of {lead:+.1f} points "
            f"[{lo:+.1f}, {hi:+.1f}]: {state} the null model"
        )
    return (
        "**What these rows say.** On the step time alone the course's step model is "
        + "; ".join(parts)
        + " (chapter 09's source-clustered bootstrap, 95% intervals). A step time from the model is "
        "no better than one utilisation figure fitted to the same rows; what the model adds is where "
        "the time goes and the ratio of two configurations, which the chapters decide with (chapter 09's "
        "margins per kind of comparison)."
    )
